//! The collector link's tests: chunks to a fake collector, re-sending, thinning, an unreachable
//! collector.

use super::*;
use jvmprof_profile::{Frame, Meta, Metric, ProfileBuilder, Thread, ThreadState};
use jvmprof_proto::{Decoder, Event};
use std::net::TcpListener;

fn builder() -> ProfileBuilder {
    ProfileBuilder::new(Meta {
        modes: vec!["cpu".into()],
        metrics: vec![Metric::Samples, Metric::Ns],
        interval_ns: 10,
        ..Meta::default()
    })
}

/// A one-connection collector: welcomes the agent and returns every event until EOF.
fn fake_collector() -> (String, std::thread::JoinHandle<Vec<Event>>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    let h = std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        let mut d = Decoder::new();
        let mut events = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            let n = s.read(&mut buf).unwrap();
            if n == 0 {
                break;
            }
            d.push(&buf[..n]);
            while let Some(e) = d.next_event().unwrap() {
                if matches!(e, Event::Hello(_)) {
                    let mut out = Vec::new();
                    jvmprof_proto::wire::put_frame(
                        &Reply::Welcome {
                            vm_id: 1,
                            last_seq: 0,
                        },
                        &mut out,
                    );
                    s.write_all(&out).unwrap();
                }
                let bye = e == Event::Bye;
                events.push(e);
                if bye {
                    return events;
                }
            }
        }
        d.finish().unwrap();
        events
    });
    (addr, h)
}

fn options(server: String) -> StreamOptions {
    StreamOptions {
        server,
        token: None,
        labels: Vec::new(),
        refresh: Duration::from_millis(100),
    }
}

#[test]
fn sends_deltas_and_snapshots_then_bye() {
    let (addr, collector) = fake_collector();
    let mut s = Stream::start(options(addr), Hello::default());
    let mut b = builder();
    let main = b.frame(Frame::java("A", "main", "()V", 1));
    let work = b.frame(Frame::java("A", "work", "()V", 2));
    let t = b.thread(Thread {
        tid: 1,
        name: "main".into(),
    });
    let st = b.stack(&[main, work]);
    let first = b.add(t, st, ThreadState::Running, &[2, 20]) as u32;
    s.samples(b.profile(), vec![(first, vec![2, 20])]);
    let line3 = b.frame(Frame::java("A", "work", "()V", 3));
    let snapped = b.stack(&[main, line3]);
    s.threads(
        b.profile(),
        5,
        vec![ThreadStack {
            id: 1,
            name: "main".into(),
            group: "main".into(),
            daemon: false,
            state: ThreadState::Running,
            order: 0,
            stack: snapped,
        }],
    );
    b.add(t, st, ThreadState::Running, &[3, 30]);
    let st2 = b.stack(&[main]);
    let second = b.add(t, st2, ThreadState::Running, &[1, 10]) as u32;
    s.samples(
        b.profile(),
        vec![(first, vec![3, 30]), (second, vec![1, 10])],
    );
    s.samples(b.profile(), Vec::new()); // nothing new: no batch
    let profile = b.finish();
    s.finish(&profile, Vec::new());
    let events = collector.join().unwrap();
    // Record chunks numbered from 1, replaying to the profile; the last one ends the stream.
    // The snapshot is chunk 2, on the stream's own stacks.
    let mut replay = records::Replay::new();
    let mut seqs = Vec::new();
    let mut totals = Vec::new();
    let mut snaps = Vec::new();
    for e in &events {
        if let Event::Records { seq, chunk, .. } = e {
            seqs.push(*seq);
            records::replay::apply_all(&mut replay, chunk).unwrap();
            totals.push(replay.profile().total(0));
            for t in replay.threads() {
                let frames = replay.profile().stacks.frames(t.threads[0].stack);
                let top = &replay.profile().frames[*frames.last().unwrap() as usize];
                snaps.push((*seq, t.time_unix_ms, top.line));
            }
        }
    }
    assert_eq!(seqs, vec![1, 2, 3, 4]);
    assert_eq!(totals, vec![2, 2, 6, 6]);
    assert_eq!(snaps, vec![(2, 5, 3)]);
    assert!(replay.ended());
    assert_eq!(replay.finish().unwrap().0, profile);
    assert_eq!(events.last(), Some(&Event::Bye));
}

fn chunk(seq: u64, bytes: usize) -> Chunk {
    Chunk {
        seq,
        time_unix_ms: seq,
        bytes: vec![0; bytes],
        records: 1,
        samples: seq,
        thin: false,
        snapshot: false,
    }
}

#[test]
fn unacknowledged_chunks_go_out_again_after_a_reconnect() {
    let mut o = Outbox::default();
    for seq in 1..=4 {
        o.push(Item::Records(chunk(seq, 100)));
    }
    // Chunks 1..3 were written on a connection that then broke; 2 was acknowledged.
    for _ in 0..3 {
        let Some(Item::Records(c)) = o.queue.pop_front() else {
            panic!()
        };
        o.unacked.push_back(c);
    }
    o.ack(2);
    // The new collector says it has everything up to 2 as well: 3 and 4 go out, in order.
    o.resend_unacked(2);
    let seqs: Vec<u64> = o
        .queue
        .iter()
        .map(|i| match i {
            Item::Records(c) => c.seq,
            Item::Trace(..) => 0,
        })
        .collect();
    assert_eq!(seqs, vec![3, 4]);
    assert!(o.unacked.is_empty());
    assert_eq!(o.queued_bytes, 2 * (64 + 100));
    assert_eq!(o.dropped, Dropped::default());
}

#[test]
fn a_full_queue_thins_the_oldest_chunks_before_it_drops_anything() {
    // Real chunks: a profile grown in steps, each step's chunk queued.
    let mut b = builder();
    let t = b.thread(Thread {
        tid: 1,
        name: "main".into(),
    });
    let mut w = RecordWriter::new();
    let mut o = Outbox::default();
    // 20,000 samples on as many stacks, made in the first chunk; every later chunk adds
    // to all of them (as a long session's chunks do), with values that do not compress.
    let root = b.frame(Frame::java("A", "run", "()V", 1));
    let samples: Vec<u32> = (0..20_000)
        .map(|i| {
            let f = b.frame(Frame::java("A", &format!("m{i}"), "()V", i));
            let st = b.stack(&[root, f]);
            b.add(t, st, ThreadState::Running, &[0, 0]) as u32
        })
        .collect();
    let mut seq = 0;
    let mut pushed_samples = 0;
    let mut x = 1u64;
    while o.dropped.sample_batches < 5 {
        seq += 1;
        let mut gained = Vec::new();
        let mut sum = 0;
        for &i in &samples {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let v = [1 + (x >> 60), x >> 20];
            b.add(
                t,
                b.profile().samples[i as usize].stack,
                ThreadState::Running,
                &v,
            );
            sum += v[0];
            gained.push((i, v.to_vec()));
        }
        let bytes = w.update(b.profile(), &gained, &[], false).unwrap();
        pushed_samples += sum;
        o.push(Item::Records(Chunk {
            seq,
            time_unix_ms: seq,
            bytes,
            records: samples.len() as u64,
            samples: sum,
            thin: false,
            snapshot: false,
        }));
        assert!(o.queued_bytes <= MAX_QUEUED_BYTES);
    }
    // Nothing was dropped whole: every chunk is still there, the oldest thinned, and they
    // replay to every frame and stack, with the samples that were not dropped.
    assert_eq!(o.dropped.chunks, 0);
    let mut replay = records::Replay::new();
    for item in &o.queue {
        let Item::Records(c) = item else { panic!() };
        records::replay::apply_all(&mut replay, &c.bytes).unwrap();
    }
    let p = replay.finish().unwrap().0;
    assert_eq!(p.frames, b.profile().frames);
    assert_eq!(p.stacks.len(), b.profile().stacks.len());
    assert_eq!(p.total(0) + o.dropped.samples, pushed_samples);
    assert_eq!(p.total(0), b.profile().total(0) - o.dropped.samples);
    assert!(o.dropped.samples > 0);
}

#[test]
fn unreachable_collector_drops_oldest_and_finish_returns() {
    // A port nobody listens on.
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut s = Stream::start(options(format!("127.0.0.1:{port}")), Hello::default());
    // Snapshots of 1,000 threads, each on a stack of its own: each snapshot's chunk is
    // about 30 KB, so the queue fills; thinning drops the snapshots and counts them.
    let mut b = builder();
    let root = b.frame(Frame::java("A", "run", "()V", 1));
    let big: Vec<ThreadStack> = (0..1000)
        .map(|i| {
            let f = b.frame(Frame::java("A", &format!("work{i}"), "()V", 2));
            ThreadStack {
                id: i,
                name: format!("worker-{i}"),
                group: "main".into(),
                daemon: false,
                state: ThreadState::Waiting,
                order: i as u64,
                stack: b.stack(&[root, f]),
            }
        })
        .collect();
    let mut n = 0;
    while s.dropped().snapshots == 0 {
        s.threads(b.profile(), n, big.clone());
        n += 1;
    }
    let o = s.shared.lock();
    assert!(o.queued_bytes <= MAX_QUEUED_BYTES);
    let kept = o
        .queue
        .iter()
        .filter(|i| matches!(i, Item::Records(c) if c.snapshot))
        .count();
    assert_eq!(
        o.dropped.snapshots as usize + kept,
        n as usize,
        "every snapshot is either queued or counted as dropped"
    );
    assert_eq!(
        o.dropped.chunks, 0,
        "the first chunk's definitions are kept"
    );
    drop(o);
    s.finish(&b.finish(), Vec::new());
}
