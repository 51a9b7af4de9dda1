//! The record stream against the profiles it carries: whole and grown step by step, cut at
//! every byte, damaged, followed while it grows.

use super::*;
use crate::model::{Frame, Metric, Profile, ProfileBuilder, ThreadState};
use crate::testdata::{sample_profile, timed_profile};
use replay::apply_all;

fn replay_all(bytes: &[u8]) -> (Replay, replay::ReadNotes) {
    let mut r = Replay::new();
    let (_, notes) = apply_all(&mut r, bytes).unwrap();
    (r, notes)
}

#[test]
fn a_whole_profile_replays_to_itself() {
    for p in [sample_profile(), timed_profile(), Profile::default()] {
        let bytes = RecordWriter::whole(&p, &[]).unwrap();
        let (r, notes) = replay_all(&bytes);
        assert_eq!(notes, replay::ReadNotes::default());
        assert!(r.ended());
        assert_eq!(r.finish().unwrap().0, p);
    }
}

/// A session's profile grown over many updates, as the agent's sink grows it, with what each
/// sample gained since the previous update.
fn grown(steps: usize) -> (Profile, Vec<u8>) {
    let meta = Meta {
        metrics: vec![Metric::Samples, Metric::Ns],
        ..Meta::default()
    };
    let mut b = ProfileBuilder::new(meta);
    let mut w = RecordWriter::new();
    let mut out = Vec::new();
    let mut gained: std::collections::BTreeMap<u32, Vec<u64>> = Default::default();
    for step in 0..steps {
        for k in 0..7u32 {
            let t = b.thread(crate::Thread {
                tid: u64::from(k % 3),
                name: format!("t{}", k % 3),
            });
            let frames: Vec<u32> = (0..=(step as u32 + k) % 5)
                .map(|d| b.frame(Frame::java("C", &format!("m{d}_{}", (k + d) % 4), "()V", d)))
                .collect();
            let s = b.stack(&frames);
            let state = if k % 2 == 0 {
                ThreadState::Running
            } else {
                ThreadState::Sleeping
            };
            let v = [1, 10_000_000 * u64::from(k + 1)];
            let i = b.add(t, s, state, &v);
            b.add_time_in(
                i,
                (step * 1000 + k as usize) as u64,
                1 + k % 2,
                u64::from(k),
            );
            let acc = gained.entry(i as u32).or_insert_with(|| vec![0, 0]);
            acc[0] += v[0];
            acc[1] += v[1];
        }
        if step % 3 == 0 {
            b.meta_mut().duration_ms = step as u64;
        }
        let g: Vec<_> = std::mem::take(&mut gained).into_iter().collect();
        out.extend(w.update(b.profile(), &g, &[], step + 1 == steps).unwrap());
    }
    (b.finish(), out)
}

#[test]
fn a_profile_grown_in_updates_replays_to_the_same_profile() {
    let (p, bytes) = grown(40);
    let (r, _) = replay_all(&bytes);
    assert!(r.ended());
    assert_eq!(r.chunks().0, 40);
    assert_eq!(r.finish().unwrap().0, p);
}

#[test]
fn a_stream_cut_anywhere_reads_up_to_its_last_whole_chunk() {
    let (p, bytes) = grown(12);
    let mut last = 0;
    for cut in 0..bytes.len() {
        let (r, notes) = replay_all(&bytes[..cut]);
        assert!(!r.ended());
        let chunks = r.chunks().0;
        assert!(chunks >= last, "cut {cut}");
        last = chunks;
        let q = r.finish().unwrap().0;
        q.validate().unwrap();
        assert!(q.total(0) <= p.total(0));
        assert!(notes.partial_tail > 0 || cut == 0 || q.total(0) > 0);
    }
}

#[test]
fn a_damaged_chunk_is_skipped_and_counted_and_the_rest_keeps_its_meaning() {
    let (p, bytes) = grown(6);
    // Find the chunk boundaries.
    let mut bounds = vec![0];
    let mut at = 0;
    while let Framed::Chunk(_, n) = next_chunk(&bytes[at..]) {
        at += n;
        bounds.push(at);
    }
    assert_eq!(bounds.len(), 7);
    // Damage the third chunk's payload.
    let mut bad = bytes.clone();
    bad[bounds[2] + 12] ^= 0x55;
    let (r, notes) = replay_all(&bad);
    assert_eq!(r.chunks(), (5, 1));
    assert!(r.ended());
    assert_eq!(notes, replay::ReadNotes::default());
    let q = r.finish().unwrap().0;
    q.validate().unwrap();
    // Same ids after the gap: every sample made after the lost chunk has the same stack.
    assert_eq!(q.samples.len(), p.samples.len());
    assert_eq!(q.stacks.len(), p.stacks.len());
    assert_eq!(q.frames.len(), p.frames.len());
    let lost_chunk_samples: u64 = 7; // one update adds seven samples' worth
    assert_eq!(q.total(0), p.total(0) - lost_chunk_samples);
}

#[test]
fn the_bytes_say_what_is_wrong_and_never_panic() {
    let (_, bytes) = grown(3);
    for i in 0..bytes.len() {
        for x in [0x01u8, 0x80, 0xff] {
            let mut b = bytes.clone();
            b[i] ^= x;
            let mut r = Replay::new();
            if apply_all(&mut r, &b).is_ok() {
                let _ = r.finish();
            }
        }
    }
    // A length no chunk can have stops framing there.
    let mut huge = bytes.clone();
    huge[..4].copy_from_slice(&u32::MAX.to_le_bytes());
    let (r, notes) = replay_all(&huge);
    assert_eq!(notes.garbage_at, Some(0));
    assert_eq!(r.chunks(), (0, 0));
}

#[test]
fn a_deflate_bomb_is_refused_within_bounded_memory() {
    use std::io::Write;
    let mut payload = vec![DEFLATE];
    let mut z = flate2::write::DeflateEncoder::new(&mut payload, flate2::Compression::best());
    let zeros = vec![0u8; 1 << 20];
    for _ in 0..80 {
        z.write_all(&zeros).unwrap();
    }
    z.finish().unwrap();
    assert!(payload.len() < 1 << 20);
    let e = body(&payload).unwrap_err();
    assert!(e.contains("inflates past"), "{e}");
    let mut r = Replay::new();
    r.apply_payload(&payload).unwrap();
    assert_eq!(r.chunks(), (0, 1));
}

#[test]
fn big_updates_are_cut_into_chunks_each_under_the_target() {
    let mut b = ProfileBuilder::new(Meta {
        metrics: vec![Metric::Calls],
        ..Meta::default()
    });
    let t = b.thread(crate::Thread::default());
    let mut parent = None;
    for i in 0..200_000u32 {
        let f = b.frame(Frame::java(
            "pkg.SomeClass",
            &format!("method{i}"),
            "(I)V",
            i,
        ));
        let s = b.child_stack(parent, f);
        b.add(t, s, ThreadState::Running, &[u64::from(i)]);
        parent = if i % 50 == 0 { None } else { Some(s) };
    }
    let p = b.finish();
    let bytes = RecordWriter::whole(&p, &[]).unwrap();
    let mut at = 0;
    let mut n = 0;
    while let Framed::Chunk(payload, len) = next_chunk(&bytes[at..]) {
        assert!(body(payload).unwrap().len() < CHUNK_TARGET + 4096);
        at += len;
        n += 1;
    }
    assert_eq!(at, bytes.len());
    assert!(n > 3, "{n} chunks");
    let (r, _) = replay_all(&bytes);
    assert_eq!(r.finish().unwrap().0, p);
}

#[test]
fn a_tail_follows_a_file_as_it_grows_and_says_what_each_read_added() {
    let (p, bytes) = grown(10);
    let dir = std::env::temp_dir().join(format!("jvmprof-tail-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("live.jvmprof");
    let mut file = crate::native::records_header().to_vec();
    std::fs::write(&path, &file).unwrap();
    let mut tail = Tail::new();
    let mut seen = 0u64;
    // Appended in uneven pieces, some ending inside a chunk.
    for piece in bytes.chunks(97) {
        file.extend_from_slice(piece);
        std::fs::write(&path, &file).unwrap();
        for (_, v) in tail.read(&path).unwrap() {
            seen += v[0];
        }
    }
    assert!(tail.ended());
    assert_eq!(seen, p.total(0));
    assert_eq!(tail.profile().samples, p.samples);
    std::fs::remove_dir_all(&dir).unwrap();
    // Another kind of file is refused by name.
    let other = std::env::temp_dir().join(format!("jvmprof-tail-x-{}", std::process::id()));
    std::fs::write(&other, b"JVMPROF\0\x04\x00").unwrap();
    let e = Tail::new().read(&other).unwrap_err();
    assert!(e.contains("not a record stream"), "{e}");
    std::fs::remove_file(&other).unwrap();
}

#[test]
fn record_refs_encode_as_records() {
    let p = sample_profile();
    let pairs: Vec<(Vec<u8>, Record)> = vec![
        (
            postcard::to_allocvec(&RecordRef::Meta(&p.meta)).unwrap(),
            Record::Meta(p.meta.clone()),
        ),
        (
            postcard::to_allocvec(&RecordRef::Frame(&p.frames[0])).unwrap(),
            Record::Frame(p.frames[0].clone()),
        ),
        (
            postcard::to_allocvec(&RecordRef::Sample {
                thread: 1,
                stack: 2,
                state: ThreadState::Parked,
                values: &[3, 4],
            })
            .unwrap(),
            Record::Sample {
                thread: 1,
                stack: 2,
                state: ThreadState::Parked,
                values: vec![3, 4],
            },
        ),
        (
            postcard::to_allocvec(&RecordRef::Add {
                sample: 9,
                values: &[5],
            })
            .unwrap(),
            Record::Add {
                sample: 9,
                values: vec![5],
            },
        ),
        (postcard::to_allocvec(&RecordRef::End).unwrap(), Record::End),
        (
            postcard::to_allocvec(&RecordRef::Threads(&snapshot(3))).unwrap(),
            Record::Threads(snapshot(3)),
        ),
    ];
    for (bytes, want) in pairs {
        assert_eq!(postcard::from_bytes::<Record>(&bytes).unwrap(), want);
    }
}

/// The framed chunks of `bytes`, each as its own slice.
fn split(bytes: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    let mut at = 0;
    while let Framed::Chunk(_, n) = next_chunk(&bytes[at..]) {
        out.push(&bytes[at..at + n]);
        at += n;
    }
    assert_eq!(at, bytes.len());
    out
}

/// `p` without its timeline.
fn untimed(mut p: Profile) -> Profile {
    p.timeline.clear();
    p
}

#[test]
fn merged_runs_replay_to_the_same_totals() {
    let (p, bytes) = grown(40);
    let chunks = split(&bytes);
    // Merge runs of several lengths, the rest as they are.
    for run in [2usize, 7, 40] {
        let mut merged = Vec::new();
        for group in chunks.chunks(run) {
            merged.extend(merge::merge(group).unwrap());
        }
        let mut r = Replay::without_timeline();
        apply_all(&mut r, &merged).unwrap();
        assert!(r.ended());
        assert_eq!(r.finish().unwrap().0, untimed(p.clone()), "runs of {run}");
    }
    // A gap inside a run is refused.
    let err = merge::merge(&[chunks[0], chunks[2]]).unwrap_err();
    assert!(err.contains("does not continue"), "{err}");
}

#[test]
fn thinned_chunks_keep_every_id_for_the_chunks_after_them() {
    let (p, bytes) = grown(20);
    let chunks = split(&bytes);
    let thinned = merge::thin(&chunks[..10]).unwrap();
    let mut r = Replay::without_timeline();
    apply_all(&mut r, &thinned).unwrap();
    let before = r.profile().clone();
    assert!(
        before
            .samples
            .iter()
            .all(|s| s.values.iter().all(|v| *v == 0))
    );
    for c in &chunks[10..] {
        apply_all(&mut r, c).unwrap();
    }
    let got = r.finish().unwrap().0;
    // Same frames, stacks, threads; values are what the last ten chunks added.
    assert_eq!(got.frames, p.frames);
    assert_eq!(got.threads, p.threads);
    assert_eq!(got.stacks.len(), p.stacks.len());
    let mut expect = Replay::without_timeline();
    for (i, c) in chunks.iter().enumerate() {
        expect.counting(i >= 10);
        apply_all(&mut expect, c).unwrap();
    }
    assert_eq!(got, expect.finish().unwrap().0);
    let (records, first) = merge::weight(&merge::decode_framed(&bytes).unwrap());
    assert_eq!(first, p.total(0));
    assert!(records >= p.samples.len() as u64);
}

fn snapshot(stack: u32) -> ThreadsAt {
    ThreadsAt {
        time_unix_ms: 77,
        threads: vec![ThreadStack {
            id: 1,
            name: "main".into(),
            group: "main".into(),
            daemon: false,
            state: ThreadState::Waiting,
            order: 0,
            stack,
        }],
    }
}

#[test]
fn thread_snapshots_ride_the_stream_on_its_stacks_and_leave_the_profile_alone() {
    let (p, _) = grown(3);
    let mut w = RecordWriter::new();
    let mut first = w.update(&p, &write::everything(&p), &[], false).unwrap();
    let last = (p.stacks.len() - 1) as u32;
    first.extend(w.threads(&p, &snapshot(last)).unwrap());
    let mut r = Replay::new();
    let mut seen = Vec::new();
    let mut at = 0;
    while let Framed::Chunk(payload, n) = next_chunk(&first[at..]) {
        r.apply_payload(payload).unwrap();
        seen.extend(r.threads().iter().cloned());
        at += n;
    }
    assert_eq!(seen, vec![snapshot(last)]);
    let (got, _) = r.finish().unwrap();
    assert_eq!(got.total(0), p.total(0));
    // A stack the stream has not defined is refused by the writer and by the reader.
    assert!(w.threads(&p, &snapshot(last + 1)).is_err());
    let mut body = postcard::to_allocvec(&ChunkHead {
        seq: 9,
        ..ChunkHead::default()
    })
    .unwrap();
    body.extend(postcard::to_allocvec(&Record::Threads(snapshot(0))).unwrap());
    let e = Replay::new()
        .apply(decode(&body).unwrap().0, decode(&body).unwrap().1)
        .unwrap_err();
    assert!(e.contains("stack 0 but there are 0 stacks"), "{e}");
    // Rollups and thinning keep no snapshot.
    let merged = merge::merge(&[&first]).unwrap();
    let mut r = Replay::new();
    apply_all(&mut r, &merged).unwrap();
    assert!(r.threads().is_empty());
}
