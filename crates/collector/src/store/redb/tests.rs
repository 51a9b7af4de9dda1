//! The redb store's tests: its file format, and what it keeps through a reopen, the rollups
//! and the retention.

mod support {
    use super::super::*;
    use crate::store::Store;
    use jvmprof_profile::{Frame, Meta, Metric, Profile, ProfileBuilder, Thread, ThreadState};

    pub(super) fn batch(frames: &[(&str, &str)], value: u64) -> Profile {
        let mut b = ProfileBuilder::new(Meta {
            modes: vec!["cpu".into()],
            metrics: vec![Metric::Samples, Metric::Ns],
            interval_ns: 10,
            ..Meta::default()
        });
        let ids: Vec<u32> = frames
            .iter()
            .map(|(c, m)| b.frame(Frame::java(c, m, "()V", 1)))
            .collect();
        let s = b.stack(&ids);
        let t = b.thread(Thread {
            tid: 1,
            name: "main".into(),
        });
        b.add(t, s, ThreadState::Running, &[value, value * 10]);
        b.finish()
    }

    pub(super) fn collapsed(p: &Profile) -> String {
        jvmprof_profile::collapsed::to_string(p, &Default::default()).unwrap()
    }

    pub(super) fn open_retrying(dir: &Path) -> Store {
        // The previous Store's writer thread closes the file once its channel is gone.
        for _ in 0..100 {
            if let Ok(s) = Redb::open(dir) {
                return Store::new(s);
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        Store::new(Redb::open(dir).unwrap())
    }
}

mod format {
    use super::super::*;
    use super::support::*;
    use crate::store::Store;
    use serde::Serialize;

    fn encode<T: Serialize>(v: &T) -> Vec<u8> {
        postcard::to_stdvec(v).unwrap()
    }

    #[test]
    fn a_store_in_another_format_is_refused_with_a_message() {
        let dir = std::env::temp_dir().join(format!("jvmprof-store-v1-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("collector.redb");
        {
            // A store as the first collectors wrote it: batches and no version.
            let db = Database::create(&path).unwrap();
            let w = db.begin_write().unwrap();
            w.open_table(OLD_BATCHES)
                .unwrap()
                .insert((1, 0), &[0u8, 1, 2][..])
                .unwrap();
            w.commit().unwrap();
        }
        let e = Redb::open(&dir).err().expect("an old store is refused");
        assert_eq!(
            e.to_string(),
            format!(
                "{} holds samples in store format 1 and this collector reads format 3 \
                 (record chunks); move it away or pick another --data directory (the jvmprof \
                 that wrote it still reads it)",
                path.display()
            )
        );
        // Nothing was changed: refused again, the same way.
        assert_eq!(Redb::open(&dir).err().unwrap().to_string(), e.to_string());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn vm_records_from_before_labels_are_read() {
        #[derive(Serialize)]
        struct Old(
            u64,
            u32,
            String,
            String,
            String,
            String,
            String,
            u64,
            u64,
            u64,
            u64,
            u64,
            u64,
        );
        let old = encode(&Old(
            7,
            42,
            "java Main".into(),
            "h".into(),
            "17".into(),
            "Linux".into(),
            "0.1".into(),
            1,
            2,
            3,
            4,
            5,
            6,
        ));
        let vm = decode_vm(&old).unwrap();
        assert_eq!(
            (vm.id, vm.pid, vm.last_seen, vm.dropped_samples),
            (7, 42, 3, 6)
        );
        assert_eq!(vm.command, "java Main");
        assert!(vm.labels.is_empty());
        let new = VmRecord {
            labels: vec![("service".into(), "a".into())],
            ..vm.clone()
        };
        assert_eq!(decode_vm(&encode(&new)).unwrap(), new);
        assert!(decode_vm(&old[..old.len() - 1]).is_err());
    }

    #[test]
    fn batches_merge_by_time_range_and_survive_reopen() {
        let dir = std::env::temp_dir().join(format!("jvmprof-store-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let vm = VmRecord {
            id: 3,
            pid: 42,
            ..VmRecord::default()
        };
        {
            let store = Store::new(Redb::open(&dir).unwrap());
            store.put_vm(vm.clone());
            store.put_profile(3, 1, 1000, &batch(&[("A", "main"), ("A", "work")], 2));
            store.put_profile(3, 2, 2000, &batch(&[("A", "main"), ("B", "io")], 5));
            store.put_profile(3, 3, 3000, &batch(&[("A", "main"), ("A", "work")], 1));
            rt.block_on(store.barrier());
            assert_eq!(store.committed(3), 3);
            assert_eq!(store.committed(4), 0);
            assert_eq!(
                collapsed(&store.profile(&vm, 0, u64::MAX).unwrap()),
                "A.main;A.work 3\nA.main;B.io 5\n"
            );
            assert_eq!(
                collapsed(&store.profile(&vm, 1500, 2500).unwrap()),
                "A.main;B.io 5\n"
            );
            assert_eq!(collapsed(&store.profile(&vm, 5000, 6000).unwrap()), "");
        }
        // Reopened: the VM, the chunks and the last seq are all there.
        let store = open_retrying(&dir);
        assert_eq!(store.vms().unwrap(), vec![vm.clone()]);
        assert_eq!(store.committed(3), 3);
        store.put_profile(3, 4, 4000, &batch(&[("A", "main"), ("C", "new")], 7));
        rt.block_on(store.barrier());
        assert_eq!(
            collapsed(&store.profile(&vm, 0, u64::MAX).unwrap()),
            "A.main;A.work 3\nA.main;B.io 5\nA.main;C.new 7\n"
        );
        let p = store.profile(&vm, 0, u64::MAX).unwrap();
        assert_eq!(p.meta.pid, 42);
        assert_eq!(p.total(1), 150);
        drop(store);
        let _ = std::fs::remove_dir_all(&dir);
    }
}

mod retention {
    use super::super::*;
    use super::support::*;
    use crate::store::Store;
    use std::time::Duration;

    const MIN: u64 = MINUTE_MS;
    const DAY: u64 = 1440 * MIN;

    fn rows(store: &Redb, table: TableDefinition<(u64, u64), &[u8]>) -> usize {
        let r = store.db.begin_read().unwrap();
        r.open_table(table).unwrap().len().unwrap() as usize
    }

    /// Sample batches of older agents (each a stream of its own) past the rollup age become
    /// one stream per VM and minute with the same samples; a query over any whole minutes answers as before; data past the retention
    /// goes, and so do VMs not seen for that long (not connected ones' data); ids are not
    /// reused after a delete, also across a reopen.
    #[test]
    fn rollups_keep_every_sample_and_retention_deletes_old_data_and_vms() {
        let dir = std::env::temp_dir().join(format!("jvmprof-store-ret-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let now = 100 * DAY;
        let vm = |id, last_seen| VmRecord {
            id,
            pid: id as u32,
            last_seen,
            ..VmRecord::default()
        };
        let (old, fresh, gone) = (vm(1, now), vm(2, now), vm(3, now - 9 * DAY));
        let redb = Redb::open(&dir).unwrap();
        let store = Store::new(redb.clone());
        for v in [&old, &fresh, &gone] {
            store.put_vm(v.clone());
        }
        // VM 1: four batches a minute for 90 minutes, two hours ago, one 8 days ago.
        let mut seq = 0;
        let start = now - 2 * 60 * MIN;
        for m in 0..90 {
            for q in 0..4 {
                seq += 1;
                let frames: &[(&str, &str)] = if q % 2 == 0 {
                    &[("A", "main"), ("A", "work")]
                } else {
                    &[("A", "main"), ("B", "io")]
                };
                store.put_profile(1, seq, start + m * MIN + q * 15_000, &batch(frames, q + 1));
            }
        }
        store.put_profile(1, seq + 1, now - 8 * DAY, &batch(&[("C", "old")], 7));
        // VM 2: recent batches only; VM 3: last seen 9 days ago.
        store.put_profile(2, 1, now - 1000, &batch(&[("D", "new")], 3));
        store.put_profile(3, 1, now - 9 * DAY, &batch(&[("E", "gone")], 4));
        rt.block_on(store.barrier());
        let whole = collapsed(&store.profile(&old, 0, u64::MAX).unwrap());
        let window = (start + 10 * MIN, start + 40 * MIN - 1);
        let part = collapsed(&store.profile(&old, window.0, window.1).unwrap());
        let series: u64 = store
            .series(1, 0, u64::MAX)
            .unwrap()
            .iter()
            .map(|s| s.1)
            .sum();
        assert_eq!(series, 90 * (1 + 2 + 3 + 4) + 7);

        // Rollup only: nothing is lost, queries over whole minutes answer the same.
        let keep_all = Retention {
            rollup_after: Duration::from_secs(600),
            keep: None,
        };
        let done = rt
            .block_on(store.maintain(now, keep_all, HashSet::new()))
            .unwrap();
        assert_eq!(
            done.rolled_up,
            90 * 4,
            "a minute's lone chunk stays as it is"
        );
        assert_eq!(done.rollups, 90);
        assert!(done.removed_vms.is_empty() && !done.more);
        assert_eq!(rows(&redb, CHUNKS), 90 + 1 + 1 + 1);
        assert_eq!(collapsed(&store.profile(&old, 0, u64::MAX).unwrap()), whole);
        assert_eq!(
            collapsed(&store.profile(&old, window.0, window.1).unwrap()),
            part
        );
        let series = store.series(1, 0, u64::MAX).unwrap();
        assert_eq!(series.len(), 91, "one point a minute");
        assert_eq!(series.iter().map(|s| s.1).sum::<u64>(), 90 * 10 + 7);
        // A second pass has nothing to do.
        let again = rt
            .block_on(store.maintain(now, keep_all, HashSet::new()))
            .unwrap();
        assert_eq!(again, Maintained::default());

        // A week's retention: the 8-day-old minute goes, VM 3 (not seen for 9 days) goes
        // with its data; VM 3 would stay if it were connected.
        let week = Retention {
            keep: Some(Duration::from_secs(7 * 86_400)),
            ..keep_all
        };
        let done = rt
            .block_on(store.maintain(now, week, HashSet::from([3])))
            .unwrap();
        assert!(done.removed_vms.is_empty());
        assert_eq!(done.expired, 2, "VM 1's old minute and VM 3's");
        let done = rt
            .block_on(store.maintain(now, week, HashSet::new()))
            .unwrap();
        assert_eq!(done.removed_vms, vec![3]);
        assert_eq!(
            collapsed(&store.profile(&old, 0, u64::MAX).unwrap()),
            whole.replace("C.old 7\n", "")
        );
        assert_eq!(
            store
                .vms()
                .unwrap()
                .iter()
                .map(|v| v.id)
                .collect::<Vec<_>>(),
            vec![1, 2]
        );
        // Deleting VM 2 (the highest id) leaves nothing of it, and its id is not given again.
        rt.block_on(store.delete_vm(&fresh)).unwrap();
        assert_eq!(rows(&redb, CHUNKS), 90);
        assert_eq!(collapsed(&store.profile(&fresh, 0, u64::MAX).unwrap()), "");
        assert_eq!(store.next_vm_id().unwrap(), 4);
        rt.block_on(store.delete_vm(&old)).unwrap();
        assert_eq!(rows(&redb, CHUNKS), 0);
        drop((store, redb));
        let store = open_retrying(&dir);
        assert!(store.vms().unwrap().is_empty());
        assert_eq!(store.next_vm_id().unwrap(), 4);
        drop(store);
        let _ = std::fs::remove_dir_all(&dir);
    }
}

mod stream {
    use super::super::*;
    use super::support::*;
    use crate::store::Store;
    use jvmprof_profile::records::RecordWriter;
    use jvmprof_profile::{Frame, Meta, Metric, ProfileBuilder, Thread, ThreadState};
    use std::time::Duration;

    const MIN: u64 = MINUTE_MS;
    const DAY: u64 = 1440 * MIN;

    /// One agent's record stream, a chunk a second for 20 minutes, eight days ago and now:
    /// rollups merge each minute's chunks from their records, retention thins the old ones
    /// to their definitions, and the later chunks keep resolving (no `[lost]` frame).
    #[test]
    fn a_stream_rolls_up_and_expires_and_its_later_chunks_keep_their_meaning() {
        let dir = std::env::temp_dir().join(format!("jvmprof-store-stream-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let now = 100 * DAY;
        let vm = VmRecord {
            id: 1,
            pid: 1,
            last_seen: now,
            ..VmRecord::default()
        };
        let store = Store::new(Redb::open(&dir).unwrap());
        store.put_vm(vm.clone());
        let mut b = ProfileBuilder::new(Meta {
            modes: vec!["cpu".into()],
            metrics: vec![Metric::Samples, Metric::Ns],
            interval_ns: 10,
            ..Meta::default()
        });
        let t = b.thread(Thread {
            tid: 1,
            name: "main".into(),
        });
        let mut w = RecordWriter::new();
        let mut seq = 0;
        let mut recent = std::collections::BTreeMap::<String, u64>::new();
        for second in 0..2400u64 {
            // The first 1,200 seconds eight days ago, the rest in the last 20 minutes.
            let time = if second < 1200 {
                now - 8 * DAY + second * 1000
            } else {
                now - 1200 * 1000 + (second - 1200) * 1000
            };
            let name = format!("m{}", second % 97);
            let f = b.frame(Frame::java("A", &name, "()V", 1));
            let root = b.frame(Frame::java("A", "main", "()V", 1));
            let s = b.stack(&[root, f]);
            let i = b.add(t, s, ThreadState::Running, &[1, 10]) as u32;
            if second >= 1200 {
                *recent.entry(format!("A.main;A.{name}")).or_default() += 1;
            }
            let bytes = w
                .update(b.profile(), &[(i, vec![1, 10])], &[], false)
                .unwrap();
            seq += 1;
            store.put_chunk(1, seq, time, bytes.into());
        }
        rt.block_on(store.barrier());
        let whole = collapsed(&store.profile(&vm, 0, u64::MAX).unwrap());
        let series: u64 = store
            .series(1, 0, u64::MAX)
            .unwrap()
            .iter()
            .map(|s| s.1)
            .sum();
        assert_eq!(series, 2400);
        let keep_all = Retention {
            rollup_after: Duration::from_secs(600),
            keep: None,
        };
        let done = rt
            .block_on(store.maintain(now, keep_all, HashSet::new()))
            .unwrap();
        // The old 20 minutes and the first 10 of the recent ones.
        assert_eq!(done.rolled_up, 1200 + 600);
        assert_eq!(done.rollups, 20 + 10);
        assert_eq!(collapsed(&store.profile(&vm, 0, u64::MAX).unwrap()), whole);
        let week = Retention {
            keep: Some(Duration::from_secs(7 * 86_400)),
            ..keep_all
        };
        let done = rt
            .block_on(store.maintain(now, week, HashSet::new()))
            .unwrap();
        assert_eq!(done.expired, 20);
        let expect: String = recent.iter().map(|(k, v)| format!("{k} {v}\n")).collect();
        let got = collapsed(&store.profile(&vm, 0, u64::MAX).unwrap());
        assert_eq!(got, expect);
        assert!(!got.contains("[lost]"));
        // Nothing new to expire: the thinned chunk is left alone.
        let again = rt
            .block_on(store.maintain(now, week, HashSet::new()))
            .unwrap();
        assert_eq!(again.expired, 0);
        assert_eq!(collapsed(&store.profile(&vm, 0, u64::MAX).unwrap()), expect);
        drop(store);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
