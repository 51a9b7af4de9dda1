//! Load generator for `jvmprof serve` (used by bench/collector): AGENTS simulated agents, each on
//! its own connection and thread, speak the real protocol (version 4) as fast as the collector
//! takes it for SECONDS: record chunks made by the agent's own `RecordWriter` from a growing
//! profile, each message a thread snapshot (THREADS threads on stacks DEPTH deep from a pool of
//! frames) and BATCH sample records, like an agent with 1 s snapshots and 1 s chunks.
//!
//! Like the real agent (`crates/agent/src/stream.rs`), a connection keeps its chunks until
//! the collector acknowledges them as stored, and keeps at most WINDOW of them unacknowledged:
//! with a full window it sends no batch, only waits for an Ack (writing one byte of its next
//! message every `ACK_WAIT` meanwhile, since the collector answers when it reads). So the
//! collector is
//! saturated, but never more than WINDOW batches per connection behind: when SECONDS are over,
//! the run ends within moments instead of leaving a backlog in the sockets to drain.
//!
//! Prints one JSON line: what was sent (snapshots, batches, sample records, weighted samples,
//! bytes), the size of one steady-state snapshot message and one batch message on the wire, and
//! the batches acknowledged.
//!
//! Usage: loadgen ADDR AGENTS SECONDS [THREADS=30] [DEPTH=24] [BATCH=50] [WINDOW=8]

use jvmprof_profile::records::{RecordWriter, ThreadStack, ThreadsAt};
use jvmprof_profile::{Frame, Meta, Metric, ProfileBuilder, Thread, ThreadState};
use jvmprof_proto::wire::put_frame;
use jvmprof_proto::{Hello, MAGIC, Message, Reply, VERSION};
use std::collections::BTreeMap;
use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// How long a connection with a full window waits for an Ack before it writes one more byte:
/// the collector acknowledges what is stored when it reads, so a connection that has sent its
/// whole window has to give it something to read, and a byte adds no work and no backlog.
const ACK_WAIT: Duration = Duration::from_millis(10);

#[derive(Default, Clone, Copy)]
struct Sent {
    snapshots: u64,
    batches: u64,
    /// Sample records (deltas) and the samples they weigh.
    records: u64,
    samples: u64,
    bytes: u64,
    acked: u64,
    snapshot_bytes: u64,
    batch_bytes: u64,
}

impl Sent {
    /// A snapshot and a batch of `bytes` in all, its batch holding (records, samples).
    fn count(&mut self, bytes: usize, (records, samples): (u64, u64)) {
        self.bytes += bytes as u64;
        self.snapshots += 1;
        self.batches += 1;
        self.records += records;
        self.samples += samples;
    }
}

/// A small deterministic generator (xorshift), so runs are comparable.
struct Rng(u64);

impl Rng {
    fn next(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

/// A simulated application: its frames, its stacks (frame ids, root first) and threads.
#[derive(Default)]
struct Tables {
    frames: Vec<Frame>,
    stacks: Vec<Vec<u32>>,
    threads: Vec<Thread>,
}

fn tables(threads: usize, depth: usize, stacks: usize) -> Tables {
    let mut t = Tables::default();
    for i in 0..400 {
        t.frames.push(Frame::java(
            &format!("com.example.service.module{}.Component{}", i % 17, i % 41),
            &format!("handle{}", i % 23),
            "(Ljava/lang/Object;)V",
            (i * 7 % 300) as u32 + 1,
        ));
    }
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for _ in 0..stacks {
        t.stacks
            .push((0..depth).map(|_| rng.next(400) as u32).collect());
    }
    for i in 0..threads {
        t.threads.push(Thread {
            tid: 1000 + i as u64,
            name: format!("worker-{i}"),
        });
    }
    t
}

/// The newest Ack's seq among the complete replies in `replies` (taken off it).
fn take_acks(replies: &mut Vec<u8>) -> Option<u64> {
    let mut newest = None;
    let mut used = 0;
    while let Ok(Some((payload, n))) = jvmprof_proto::wire::take_frame(&replies[used..]) {
        if let Ok(Reply::Ack { seq }) = jvmprof_proto::wire::decode_payload(payload) {
            newest = newest.max(Some(seq));
        }
        used += n;
    }
    replies.drain(..used);
    newest
}

/// Reads what replies have come (waiting up to `wait` for the first, none: not at all); the
/// newest acknowledged seq, or `None` if the collector closed the connection or failed.
fn read_acks(
    sock: &mut TcpStream,
    replies: &mut Vec<u8>,
    acked: u64,
    wait: Option<Duration>,
) -> Option<u64> {
    let mut buf = [0u8; 4096];
    let mut first = true;
    loop {
        // Blocking (with a timeout) for the first read when asked to wait, else non-blocking.
        let blocking = first && wait.is_some();
        let _ = sock.set_nonblocking(!blocking);
        if blocking {
            let _ = sock.set_read_timeout(wait);
        }
        first = false;
        match sock.read(&mut buf) {
            Ok(0) => return None,
            Ok(k) => replies.extend_from_slice(&buf[..k]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => break,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
    let _ = sock.set_nonblocking(false);
    Some(take_acks(replies).map_or(acked, |seq| seq.max(acked)))
}

fn agent(addr: &str, n: usize, seconds: f64, shape: (usize, usize, usize), window: u64) -> Sent {
    let (threads, depth, batch) = shape;
    let mut sent = Sent::default();
    let Ok(mut sock) = TcpStream::connect(addr) else {
        eprintln!("loadgen: agent {n}: cannot connect to {addr}");
        return sent;
    };
    let _ = sock.set_nodelay(true);
    let t = tables(threads, depth, 200);
    // The agent's side: a profile growing as samples come, and the writer of its records.
    let mut b = ProfileBuilder::new(Meta {
        modes: vec!["cpu".into()],
        metrics: vec![Metric::Samples, Metric::Ns],
        interval_ns: 10_000_000,
        ..Meta::default()
    });
    let frame_ids: Vec<u32> = t.frames.iter().map(|f| b.frame(f.clone())).collect();
    let stack_ids: Vec<u32> = t
        .stacks
        .iter()
        .map(|s| b.stack(&s.iter().map(|f| frame_ids[*f as usize]).collect::<Vec<_>>()))
        .collect();
    let thread_ids: Vec<u32> = t.threads.iter().map(|th| b.thread(th.clone())).collect();
    let mut writer = RecordWriter::new();
    let mut out = MAGIC.to_vec();
    put_frame(
        &Message::Hello(Hello {
            version: VERSION,
            token: None,
            pid: 100_000 + n as u32,
            command: format!("java -jar simulated-{n}.jar"),
            jvm: "loadgen".into(),
            os: "Linux".into(),
            host: "loadgen".into(),
            agent_version: "loadgen".into(),
            start_unix_ms: 1,
        }),
        &mut out,
    );
    if sock.write_all(&out).is_err() {
        return sent;
    }
    // The reply, then drain the acknowledgements on a thread so the collector never blocks.
    let mut head = [0u8; 4];
    if sock.read_exact(&mut head).is_err() {
        return sent;
    }
    let mut body = vec![0u8; u32::from_le_bytes(head) as usize];
    if sock.read_exact(&mut body).is_err()
        || !matches!(
            jvmprof_proto::wire::decode_payload::<Reply>(&body),
            Ok(Reply::Welcome { .. })
        )
    {
        eprintln!("loadgen: agent {n}: not welcomed");
        return sent;
    }
    let mut replies = Vec::new();
    let mut acked = 0;
    let mut rng = Rng(n as u64 * 7919 + 1);
    let end = Instant::now() + Duration::from_secs_f64(seconds);
    let states = [
        ThreadState::Running,
        ThreadState::Waiting,
        ThreadState::TimedWaiting,
        ThreadState::Parked,
        ThreadState::Blocked,
    ];
    let mut seq = 0;
    // The next snapshot and batch, encoded; how much of it is written; what its batch holds
    // (records, samples).
    let (mut next, mut written, mut holds) = (Vec::new(), 0, (0, 0));
    while Instant::now() < end {
        match read_acks(&mut sock, &mut replies, acked, None) {
            Some(a) => acked = a,
            None => return sent,
        }
        if written == next.len() {
            next.clear();
            written = 0;
            let snap = ThreadsAt {
                time_unix_ms: 1_000 + sent.snapshots,
                threads: (0..threads)
                    .map(|i| ThreadStack {
                        id: i as i64 + 1,
                        name: format!("worker-{i}"),
                        group: "main".into(),
                        daemon: false,
                        state: states[rng.next(states.len())],
                        order: i as u64,
                        stack: stack_ids[rng.next(stack_ids.len())],
                    })
                    .collect(),
            };
            // The snapshot and the samples as one message of two chunks (an agent sends each
            // chunk as a message of its own; this keeps the window counting batches).
            let mut chunk = writer.threads(b.profile(), &snap).expect("records encode");
            sent.snapshot_bytes = chunk.len() as u64;
            let mut gained: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
            let mut weight = 0;
            for _ in 0..batch {
                let k = 1 + rng.next(20) as u64;
                let values = [k, k * 10_000_000];
                let i = b.add(
                    thread_ids[rng.next(threads)],
                    stack_ids[rng.next(stack_ids.len())],
                    ThreadState::Running,
                    &values,
                ) as u32;
                let g = gained.entry(i).or_insert_with(|| vec![0, 0]);
                g[0] += values[0];
                g[1] += values[1];
                weight += k;
            }
            let gained: Vec<(u32, Vec<u64>)> = gained.into_iter().collect();
            chunk.extend(
                writer
                    .update(b.profile(), &gained, &[], false)
                    .expect("records encode"),
            );
            put_frame(
                &Message::Records {
                    seq: seq + 1,
                    time_unix_ms: 1_001 + seq,
                    chunk,
                },
                &mut next,
            );
            sent.batch_bytes = next.len() as u64 - sent.snapshot_bytes;
            holds = (gained.len() as u64, weight);
        }
        if seq - acked >= window {
            // A full window: no batch goes out until an Ack comes. The collector acknowledges
            // when it reads, so it gets one more byte of the next message every ACK_WAIT (never
            // the last one: the batch stays unsent).
            if written + 1 < next.len() {
                if sock.write_all(&next[written..written + 1]).is_err() {
                    break;
                }
                written += 1;
            }
            match read_acks(&mut sock, &mut replies, acked, Some(ACK_WAIT)) {
                Some(a) => acked = a,
                None => return sent,
            }
            continue;
        }
        if sock.write_all(&next[written..]).is_err() {
            break;
        }
        written = next.len();
        seq += 1;
        sent.count(next.len(), holds);
    }
    // A message begun is finished, so the stream stays whole.
    if 0 < written && written < next.len() && sock.write_all(&next[written..]).is_ok() {
        sent.count(next.len(), holds);
    }
    out.clear();
    put_frame(&Message::Bye, &mut out);
    let _ = sock.write_all(&out);
    let _ = sock.shutdown(std::net::Shutdown::Write);
    // The collector stores the rest, acknowledges it and closes.
    let _ = sock.set_read_timeout(Some(Duration::from_secs(60)));
    let mut buf = [0u8; 4096];
    while let Ok(k) = sock.read(&mut buf) {
        if k == 0 {
            break;
        }
        replies.extend_from_slice(&buf[..k]);
    }
    sent.acked = take_acks(&mut replies).map_or(acked, |seq| seq.max(acked));
    sent
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 4 {
        eprintln!(
            "usage: loadgen ADDR AGENTS SECONDS [THREADS=30] [DEPTH=24] [BATCH=50] [WINDOW=8]"
        );
        std::process::exit(2);
    }
    let num = |i: usize, d: usize| args.get(i).and_then(|a| a.parse().ok()).unwrap_or(d);
    let addr = args[1].clone();
    let agents = num(2, 10);
    let seconds: f64 = args[3].parse().expect("SECONDS");
    let (threads, depth, batch) = (num(4, 30), num(5, 24), num(6, 50));
    let window = num(7, 8).max(1) as u64;
    let started = Instant::now();
    let handles: Vec<_> = (0..agents)
        .map(|n| {
            let addr = addr.clone();
            std::thread::spawn(move || agent(&addr, n, seconds, (threads, depth, batch), window))
        })
        .collect();
    let mut total = Sent::default();
    for h in handles {
        let s = h.join().unwrap_or_default();
        total.snapshots += s.snapshots;
        total.batches += s.batches;
        total.records += s.records;
        total.samples += s.samples;
        total.acked += s.acked;
        total.bytes += s.bytes;
        total.snapshot_bytes = total.snapshot_bytes.max(s.snapshot_bytes);
        total.batch_bytes = total.batch_bytes.max(s.batch_bytes);
    }
    println!(
        "{{\"agents\":{agents},\"seconds\":{:.3},\"threads\":{threads},\"depth\":{depth},\"batch\":{batch},\"window\":{window},\"snapshots\":{},\"batches\":{},\"acked\":{},\"records\":{},\"samples\":{},\"bytes\":{},\"snapshot_bytes\":{},\"batch_bytes\":{}}}",
        started.elapsed().as_secs_f64(),
        total.snapshots,
        total.batches,
        total.acked,
        total.records,
        total.samples,
        total.bytes,
        total.snapshot_bytes,
        total.batch_bytes
    );
}
