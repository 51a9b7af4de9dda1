//! Round trips through our own JFR writer and reader, names, and malformed input.

use super::*;
use crate::model::*;
use crate::testdata::{alloc_profile, sample_profile, timed_profile};
use std::collections::BTreeMap;

type Key = (
    String,
    u64,
    Vec<(String, String, String, String, u32)>,
    ThreadState,
    &'static str,
);

/// Every (thread, stack, state, metric) with its non-zero total: what must survive a round trip.
fn canonical(p: &Profile) -> BTreeMap<Key, u64> {
    let mut out = BTreeMap::new();
    for s in &p.samples {
        let t = &p.threads[s.thread as usize];
        let frames = p
            .stack_frames(s.stack)
            .map(|f| {
                (
                    format!("{:?}", f.kind),
                    f.class.clone(),
                    f.method.clone(),
                    f.descriptor.clone(),
                    f.line,
                )
            })
            .collect::<Vec<_>>();
        for (m, v) in p.meta.metrics.iter().zip(&s.values) {
            if *v > 0 {
                let key = (t.name.clone(), t.tid, frames.clone(), s.state, m.as_str());
                *out.entry(key).or_insert(0) += v;
            }
        }
    }
    out
}

fn round_trip(p: &Profile) -> Profile {
    let mut bytes = Vec::new();
    write(p, &mut bytes).unwrap();
    assert!(sniff(&bytes));
    read(&bytes).unwrap()
}

/// cpu (running, sleeping, native), alloc and lock samples with deep, nested and array names.
fn mixed_profile() -> Profile {
    let meta = Meta {
        modes: vec!["cpu".into(), "alloc".into(), "lock".into()],
        metrics: vec![
            Metric::Samples,
            Metric::Ns,
            Metric::Bytes,
            Metric::Objects,
            Metric::LockNs,
            Metric::LockCount,
            Metric::WaitNs,
            Metric::WaitCount,
        ],
        interval_ns: 10_000_000,
        start_unix_ms: 1_700_000_000_000,
        duration_ms: 3_000,
        ..Meta::default()
    };
    let mut b = ProfileBuilder::new(meta);
    let truncated = b.frame(Frame::synthetic(FrameKind::Synthetic, "[truncated]"));
    let run = b.frame(Frame::java("java.lang.Thread", "run", "()V", 840));
    let inner = b.frame(Frame::java(
        "a.b.Outer$Inner",
        "call",
        "(I[J)Ljava/lang/Object;",
        12,
    ));
    let deep = b.frame(Frame::java("Top", "loop", "()V", 0));
    let native = b.frame(Frame::synthetic(FrameKind::Native, "epoll_wait"));
    let bytes = b.frame(Frame::synthetic(FrameKind::AllocatedType, "byte[]"));
    let strings = b.frame(Frame::synthetic(
        FrameKind::AllocatedType,
        "java.lang.String[][]",
    ));
    let lock = b.frame(Frame::synthetic(FrameKind::LockClass, "java.lang.Object"));
    let sync = b.frame(Frame::synthetic(
        FrameKind::LockClass,
        "java.util.concurrent.locks.ReentrantLock$NonfairSync",
    ));
    let t1 = b.thread(Thread {
        tid: 7,
        name: "main".into(),
    });
    let t2 = b.thread(Thread {
        tid: 0,
        name: "pool-1-thread-1 ü".into(),
    });
    let ms = 10_000_000;
    let s = b.stack(&[run, inner]);
    b.add(t1, s, ThreadState::Running, &[5, 5 * ms, 0, 0, 0, 0, 0, 0]);
    let s = b.stack(&[run, inner, native]);
    b.add(t2, s, ThreadState::Native, &[3, 3 * ms, 0, 0, 0, 0, 0, 0]);
    b.add(t2, s, ThreadState::Sleeping, &[1, ms, 0, 0, 0, 0, 0, 0]);
    let mut long = vec![truncated];
    long.extend(std::iter::repeat_n(deep, 70));
    let s = b.stack(&long);
    b.add(t1, s, ThreadState::Running, &[2, 2 * ms, 0, 0, 0, 0, 0, 0]);
    let s = b.stack(&[run, inner, bytes]);
    b.add(
        t1,
        s,
        ThreadState::Running,
        &[0, 0, 1_000_003, 7, 0, 0, 0, 0],
    );
    let s = b.stack(&[run, strings]);
    b.add(t2, s, ThreadState::Running, &[0, 0, 640, 1, 0, 0, 0, 0]);
    let s = b.stack(&[run, inner, lock]);
    b.add(
        t1,
        s,
        ThreadState::Blocked,
        &[0, 0, 0, 0, 123_456_789, 4, 0, 0],
    );
    b.add(
        t1,
        s,
        ThreadState::Waiting,
        &[0, 0, 0, 0, 0, 0, 5_000_001, 2],
    );
    let s = b.stack(&[run, sync]);
    b.add(t2, s, ThreadState::Parked, &[0, 0, 0, 0, 999, 3, 0, 0]);
    b.finish()
}

#[test]
fn our_recordings_read_back_with_the_same_stacks_and_values() {
    for p in [sample_profile(), alloc_profile(), mixed_profile()] {
        let back = round_trip(&p);
        assert_eq!(canonical(&back), canonical(&p), "{:?}", p.meta.modes);
        assert_eq!(back.meta.interval_ns, p.meta.interval_ns);
        if p.meta.start_unix_ms > 0 {
            assert_eq!(back.meta.start_unix_ms, p.meta.start_unix_ms);
        }
        assert_eq!(back.meta.engine, "jfr");
    }
    let back = round_trip(&mixed_profile());
    assert_eq!(back.meta.modes, ["cpu", "wall", "alloc", "lock"]);
    assert_eq!(back.meta.duration_ms, 3_000);
}

/// Every period of the timeline as (ms from the start, thread, stack names), sorted: an entry
/// of weight w stands for w periods ending at its time.
fn timeline_periods(p: &Profile) -> Vec<(u64, String, Vec<String>)> {
    let mut v = Vec::new();
    for t in &p.timeline {
        let s = &p.samples[t.sample as usize];
        let names: Vec<String> = p.stack_frames(s.stack).map(|f| f.name()).collect();
        for k in 0..u64::from(t.weight) {
            let at = t.offset_ns - k * p.meta.interval_ns;
            v.push((
                at / 1_000_000,
                p.threads[s.thread as usize].name.clone(),
                names.clone(),
            ));
        }
    }
    v.sort();
    v
}

#[test]
fn sample_times_survive_a_round_trip() {
    let p = timed_profile();
    let back = round_trip(&p);
    assert_eq!(canonical(&back), canonical(&p));
    let periods = timeline_periods(&back);
    assert_eq!(periods.len(), 11, "{periods:?}");
    assert_eq!(periods, timeline_periods(&p));
    // Without a timeline the reader still times the samples it reads (spread evenly).
    let plain = round_trip(&sample_profile());
    assert_eq!(plain.timeline.len(), 11);
}

#[test]
fn every_chunk_of_a_recording_is_read() {
    // JFR rotates chunks; a file of several is their concatenation, each with its own pools.
    let (a, b) = (sample_profile(), mixed_profile());
    let mut bytes = Vec::new();
    write(&a, &mut bytes).unwrap();
    write(&b, &mut bytes).unwrap();
    let both = read(&bytes).unwrap();
    let mut expected = canonical(&a);
    for (k, v) in canonical(&b) {
        *expected.entry(k).or_insert(0) += v;
    }
    assert_eq!(canonical(&both), expected);
    assert_eq!(
        both.meta.start_unix_ms,
        a.meta.start_unix_ms.min(b.meta.start_unix_ms)
    );
}

#[test]
fn huge_object_counts_keep_bytes_exact_with_a_bounded_number_of_events() {
    let mut p = alloc_profile();
    p.samples[1].values = vec![48_000_000, 3_000_000];
    let mut bytes = Vec::new();
    write(&p, &mut bytes).unwrap();
    assert!(bytes.len() < 20_000_000, "{} bytes", bytes.len());
    let back = read(&bytes).unwrap();
    let total = |p: &Profile, m: Metric| p.total(p.metric_index(m).unwrap());
    assert_eq!(total(&back, Metric::Bytes), total(&p, Metric::Bytes));
    assert!(total(&back, Metric::Objects) <= MAX_EVENTS_TEST);
}

const MAX_EVENTS_TEST: u64 = 1_000_002;

#[test]
fn profiles_without_jfr_metrics_are_refused() {
    let mut p = sample_profile();
    p.meta.metrics = vec![Metric::Calls, Metric::Bytecodes];
    let e = write(&p, Vec::new()).unwrap_err();
    assert_eq!(
        e.to_string(),
        "cannot export: JFR carries samples, alloc (bytes, objects) and lock metrics; this \
         profile has calls, bytecodes"
    );
}

#[test]
fn type_names_convert_both_ways() {
    for (jfr, java) in [
        ("java/util/HashMap", "java.util.HashMap"),
        ("Outer$Inner", "Outer$Inner"),
        ("[B", "byte[]"),
        ("[[I", "int[][]"),
        ("[Ljava/lang/String;", "java.lang.String[]"),
        ("[[Ljava/lang/Object;", "java.lang.Object[][]"),
    ] {
        assert_eq!(java_type_name(jfr), java);
        assert_eq!(internal_type_name(java), jfr);
    }
    assert_eq!(
        java_type_name("Spin$$Lambda$88+0x00007fe51c007a08/360062456"),
        "Spin$$Lambda$88"
    );
    assert_eq!(
        java_type_name("com/acme/Main$$Lambda/0x00007f3c8c00a000"),
        "com.acme.Main$$Lambda"
    );
    assert_eq!(
        java_type_name("CpuSplit$$Lambda$1.0x00007fa72c000a08"),
        "CpuSplit$$Lambda$1"
    );
    assert_eq!(java_type_name("a/B+0xyz"), "a.B+0xyz");
}

#[test]
fn truncated_and_corrupted_recordings_say_what_and_where() {
    let mut bytes = Vec::new();
    write(&mixed_profile(), &mut bytes).unwrap();
    let e = read(&bytes[..bytes.len() - 10]).unwrap_err().to_string();
    assert!(
        e.starts_with("truncated jfr file: the chunk at byte 0 says it is")
            && e.contains(&format!(
                "the file ends {} bytes after its start",
                bytes.len() - 10
            )),
        "{e}"
    );
    let e = read(&bytes[..40]).unwrap_err().to_string();
    assert_eq!(
        e,
        "truncated jfr file: the chunk header at byte 0 needs 68 bytes, the file ends at byte 40"
    );
    // A second chunk cut short.
    let mut two = bytes.clone();
    two.extend_from_slice(&bytes[..100]);
    let e = read(&two).unwrap_err().to_string();
    assert!(
        e.contains(&format!("the chunk at byte {}", bytes.len())),
        "{e}"
    );
    // The metadata offset pointing into the events.
    let mut bad = bytes.clone();
    bad[24..32].copy_from_slice(&(bytes.len() as u64 - 3).to_be_bytes());
    let e = read(&bad).unwrap_err().to_string();
    assert!(e.starts_with("invalid jfr data: "), "{e}");
    assert!(e.contains("byte"), "{e}");
    // Garbage after the magic.
    let mut bad = bytes.clone();
    bad[4..6].copy_from_slice(&[0, 1]);
    assert_eq!(
        read(&bad).unwrap_err().to_string(),
        "invalid jfr data: the chunk at byte 0 has JFR format version 1.1; this reader reads 2.x \
         (JDK 11 and later)"
    );
    // An unfinished chunk (as a crashed JVM leaves it).
    let mut bad = bytes.clone();
    bad[16..24].fill(0);
    assert_eq!(
        read(&bad).unwrap_err().to_string(),
        "truncated jfr file: the chunk at byte 0 is unfinished (no constant pool yet): the \
         recording was still being written"
    );
}

#[test]
fn every_corruption_of_a_recording_reads_or_fails_cleanly() {
    let mut bytes = Vec::new();
    write(&mixed_profile(), &mut bytes).unwrap();
    // Every single byte set to a few values: never a panic; errors name a byte.
    for i in 0..bytes.len() {
        for v in [0u8, 1, 0x7f, 0x80, 0xff] {
            let mut bad = bytes.clone();
            bad[i] = v;
            if let Err(e) = read(&bad) {
                let e = e.to_string();
                assert!(
                    e.contains("byte") || e.contains("none of the events"),
                    "{i}={v}: {e}"
                );
            }
        }
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]
    #[test]
    fn mutated_recordings_never_panic(
        edits in proptest::collection::vec((proptest::num::usize::ANY, proptest::num::u8::ANY), 1..8),
        cut in proptest::num::usize::ANY,
    ) {
        let mut bytes = Vec::new();
        write(&mixed_profile(), &mut bytes).unwrap();
        for (i, v) in edits {
            let n = bytes.len();
            bytes[i % n] = v;
        }
        let _ = read(&bytes);
        let n = bytes.len();
        let _ = read(&bytes[..cut % n]);
    }
}

/// A timeline entry claiming 10^9 periods of a sample that has 3 is not expanded (the times
/// do not add up, so events are spread evenly); the 3 samples read back.
#[test]
fn a_huge_timeline_weight_is_not_expanded() {
    let mut p = timed_profile();
    p.timeline[0].weight = 1_000_000_000;
    let mut bytes = Vec::new();
    write(&p, &mut bytes).unwrap();
    assert!(bytes.len() < 100_000, "{} bytes", bytes.len());
    let back = read(&bytes).unwrap();
    assert_eq!(canonical(&back), canonical(&p));
}

/// Counts of 10^9 (samples with a matching timeline, locks) are refused before any event is
/// made: one event each would take gigabytes.
#[test]
fn huge_counts_are_refused_with_the_number_of_events() {
    let mut p = timed_profile();
    p.samples[0].values[0] = 1_000_000_000;
    p.timeline[0].weight = 1_000_000_000 - 2;
    let e = write(&p, Vec::new()).unwrap_err();
    let samples: u64 = p.samples.iter().map(|s| s.values[0]).sum();
    assert_eq!(
        e.to_string(),
        format!(
            "cannot export: JFR holds one event per sample, lock and wait: this profile would \
             make {samples} events, more than 16777216; write .jvmprof or .pb.gz instead"
        )
    );
    let mut lock = sample_profile();
    lock.meta.metrics = vec![Metric::LockNs, Metric::LockCount];
    for s in &mut lock.samples {
        s.values = vec![10, 1];
    }
    lock.samples[0].values = vec![5_000_000_000, u64::MAX / 2];
    let e = write(&lock, Vec::new()).unwrap_err().to_string();
    assert!(
        e.contains(&format!("would make {} events", u64::MAX / 2 + 4)),
        "{e}"
    );
}
