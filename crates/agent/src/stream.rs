//! Streaming to a collector (`server=HOST:PORT`, issue 5): the session hands this module the
//! growing profile and periodic thread snapshots; this module owns the connection.
//!
//! Contract with `session.rs` (which calls only what is below):
//! - `Stream::start` never blocks and never fails the session: connecting, reconnecting with
//!   backoff and the single stderr line about an unreachable collector happen on its own thread.
//! - `samples(&Profile, gained)` is called about once a second with the session's profile so far
//!   and what each changed sample gained since the last call (kept by the sink as it adds, so
//!   nothing re-scans the profile); frames, stacks, threads and samples only grow (stable
//!   indices) and values only increase, so the stream
//!   sends what changed since its previous call.
//! - `threads` is called every `refresh` with a snapshot of all threads (xdProf's data).
//! - `finish` sends what is left, waiting a bounded time, and closes.
//! - Memory is bounded: when the collector is away, the oldest queued data is dropped and counted.
//!
//! How: the caller (the session's writer thread) turns each call into an item on a bounded queue
//! and appends new frames, stacks and threads to append-only [`Tables`], all under one short lock
//! that is never held across I/O. One plain thread ("jvmprof stream") connects, encodes (the
//! tables are per connection, so a reconnect re-sends them first) and writes. The tables grow
//! like the session's own profile; the queue holds at most [`MAX_QUEUED_BYTES`] (estimated),
//! dropping the oldest items and counting them; the counts go to the collector on reconnect.

use crate::sync::lock;
use jvmprof_profile::{Frame, Profile, Stacks};
use jvmprof_proto::{
    Encoder, Hello, Message, Reply, SampleBatch, SampleDelta, Snapshot, Tables, ThreadDump, VERSION,
};
use std::collections::{HashMap, VecDeque};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Most data (estimated bytes) waiting for the collector; older items are dropped beyond it.
pub const MAX_QUEUED_BYTES: usize = 8 << 20;
/// First and longest wait between connection attempts.
const BACKOFF_MIN: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(5);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
const IO_TIMEOUT: Duration = Duration::from_secs(5);
/// How long to wait after the collector refused us before asking again.
const REJECTED_BACKOFF: Duration = Duration::from_secs(60);
/// A connection that lasted this long resets the backoff and the "said once" of a lost one.
const HEALTHY_CONNECTION: Duration = Duration::from_secs(10);
/// How often an idle connection looks for acknowledgements and for the collector going away.
const ACK_POLL: Duration = Duration::from_millis(200);
/// How long `finish` waits for what is left to reach the collector.
const FINISH_WAIT: Duration = Duration::from_secs(5);

/// One thread in a snapshot (xdProf: id, name, group, daemon, state, logical start order, frames
/// top first with line numbers): the protocol's thread record with resolved frames.
pub type ThreadSnapshot = jvmprof_proto::ThreadDump<Frame>;

#[derive(Clone, Debug)]
pub struct StreamOptions {
    pub server: String,
    pub token: Option<String>,
    pub labels: Vec<(String, String)>,
    pub refresh: Duration,
}

enum Item {
    Samples(SampleBatch),
    Snapshot(Snapshot<u32>),
    /// Trace mode: one encoded chunk of method traces and its number.
    Trace(u64, Vec<u8>),
}

impl Item {
    /// A rough size in memory, for the queue bound.
    fn cost(&self) -> usize {
        match self {
            Item::Samples(b) => batch_cost(b),
            Item::Trace(_, c) => 32 + c.len(),
            Item::Snapshot(s) => {
                64 + s
                    .threads
                    .iter()
                    .map(|t| 96 + t.name.len() + t.group.len() + 4 * t.frames.len())
                    .sum::<usize>()
            }
        }
    }
}

fn batch_cost(b: &SampleBatch) -> usize {
    64 + b
        .samples
        .iter()
        .map(|s| 40 + 8 * s.values.len())
        .sum::<usize>()
}

/// What was dropped since the agent started (reported to the collector as totals).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Dropped {
    pub snapshots: u64,
    pub sample_batches: u64,
    pub samples: u64,
    /// Trace chunks lost while the collector was away (their calls are missing there, not in
    /// the file).
    pub trace_chunks: u64,
}

impl Dropped {
    fn count(&mut self, item: &Item) {
        match item {
            Item::Samples(b) => self.count_batch(b),
            Item::Snapshot(_) => self.snapshots += 1,
            Item::Trace(..) => self.trace_chunks += 1,
        }
    }

    fn count_batch(&mut self, b: &SampleBatch) {
        self.sample_batches += 1;
        self.samples += b
            .samples
            .iter()
            .map(|s| s.values.first().copied().unwrap_or(0))
            .sum::<u64>();
    }
}

/// The hand-off between the caller and the I/O thread.
#[derive(Default)]
struct Outbox {
    tables: Tables,
    queue: VecDeque<Item>,
    /// Sample batches written but not yet acknowledged as stored, oldest first: re-sent after a
    /// reconnect (the collector ignores the ones it has).
    unacked: VecDeque<SampleBatch>,
    /// Estimated bytes of `queue` and `unacked` together.
    queued_bytes: usize,
    /// The seq of the newest sample batch.
    last_seq: u64,
    /// The last trace chunk's number.
    trace_seq: u64,
    dropped: Dropped,
    /// `finish` was called: send what is left, then Bye.
    closing: bool,
    /// The I/O thread has ended.
    done: bool,
    /// Items and bytes written to a connection that accepted them (for tests and status).
    sent_items: u64,
}

impl Outbox {
    fn push(&mut self, item: Item) {
        self.queued_bytes += item.cost();
        self.queue.push_back(item);
        while self.queued_bytes > MAX_QUEUED_BYTES {
            if let Some(old) = self.unacked.pop_front() {
                self.queued_bytes -= batch_cost(&old);
                self.dropped.count_batch(&old);
            } else if self.queue.len() > 1
                && let Some(old) = self.queue.pop_front()
            {
                self.queued_bytes -= old.cost();
                self.dropped.count(&old);
            } else {
                break;
            }
        }
    }

    /// The collector has stored every batch up to `seq`.
    fn ack(&mut self, seq: u64) {
        while self.unacked.front().is_some_and(|b| b.seq <= seq) {
            if let Some(b) = self.unacked.pop_front() {
                self.queued_bytes -= batch_cost(&b);
            }
        }
    }

    /// A new connection: what the collector does not have goes out again first.
    fn resend_unacked(&mut self, last_seq: u64) {
        self.ack(last_seq);
        while let Some(b) = self.unacked.pop_back() {
            self.queue.push_front(Item::Samples(b));
        }
    }
}

struct Shared {
    outbox: Mutex<Outbox>,
    wake: Condvar,
    /// The I/O thread's kernel tid once it runs (0 before), so the sampler can leave it alone.
    io_tid: AtomicU32,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Outbox> {
        lock(&self.outbox)
    }
}

pub struct Stream {
    shared: Arc<Shared>,
    /// Stream frame id of every frame seen (profile frames and snapshot frames share ids).
    frame_ids: HashMap<Frame, u32>,
    /// Profile frame index → stream frame id.
    profile_frames: Vec<u32>,
    /// Stream stack id of each profile stack ([`Stacks::NONE`] until a sample sends it).
    stack_ids: Vec<u32>,
    /// Stacks in the tables.
    sent_stacks: u32,
    /// Profile threads already in the tables (their stream ids are the profile's).
    threads: usize,
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

impl Stream {
    /// Starts the link; `hello` says who is connecting (its version and token are the link's).
    pub fn start(options: StreamOptions, hello: Hello) -> Stream {
        let shared = Arc::new(Shared {
            outbox: Mutex::new(Outbox::default()),
            wake: Condvar::new(),
            io_tid: AtomicU32::new(0),
        });
        let os = if hello.os.trim().is_empty() {
            // JVMTI may not offer os.name this early: ask the kernel.
            let read = |f: &str| {
                std::fs::read_to_string(f)
                    .unwrap_or_default()
                    .trim()
                    .to_string()
            };
            format!(
                "{} {}",
                read("/proc/sys/kernel/ostype"),
                read("/proc/sys/kernel/osrelease")
            )
        } else {
            hello.os.clone()
        };
        let hello = Hello {
            version: VERSION,
            token: options.token.clone(),
            os,
            ..hello
        };
        let io_shared = shared.clone();
        let server = options.server.clone();
        let labels = options.labels.clone();
        let spawned = std::thread::Builder::new()
            .name("jvmprof stream".into())
            .spawn(move || {
                jvmprof_jvmti::os::block_sampling_signal_in_current_thread();
                io_shared
                    .io_tid
                    .store(jvmprof_jvmti::os::gettid(), Ordering::Relaxed);
                Connection::new(server, hello, labels, io_shared).run()
            });
        if let Err(e) = spawned {
            eprintln!(
                "jvmprof: cannot start the streaming thread ({e}); profiling continues without streaming"
            );
            let mut o = shared.lock();
            o.done = true;
            o.closing = true;
        }
        Stream {
            shared,
            frame_ids: HashMap::new(),
            profile_frames: Vec::new(),
            stack_ids: Vec::new(),
            sent_stacks: 0,
            threads: 0,
        }
    }

    /// The kernel tid of the I/O thread, once it has started.
    pub fn io_tid(&self) -> Option<u32> {
        Some(self.shared.io_tid.load(Ordering::Relaxed)).filter(|t| *t != 0)
    }

    /// The stream id of `frame`, adding it to `new` when it is new.
    fn frame_id(&mut self, frame: &Frame, new: &mut Vec<Frame>) -> u32 {
        if let Some(id) = self.frame_ids.get(frame) {
            return *id;
        }
        let id = self.frame_ids.len() as u32;
        self.frame_ids.insert(frame.clone(), id);
        new.push(frame.clone());
        id
    }

    /// Queues what the profile gained since the previous call: its new frames and threads
    /// (appended at the end), and `gained`, what each changed sample (by index) gained.
    pub fn samples(&mut self, profile: &Profile, gained: Vec<(u32, Vec<u64>)>) {
        let mut new_frames = Vec::new();
        for f in &profile.frames[self.profile_frames.len()..] {
            let id = self.frame_id(f, &mut new_frames);
            self.profile_frames.push(id);
        }
        // Only stacks that samples use go on the wire (the profile also holds their prefixes),
        // each as its list of stream frame ids.
        let mut new_stacks: Vec<Vec<u32>> = Vec::new();
        self.stack_ids.resize(profile.stacks.len(), Stacks::NONE);
        let new_threads = profile.threads[self.threads..].to_vec();
        self.threads = profile.threads.len();
        let mut deltas = Vec::new();
        for (i, values) in gained {
            let Some(s) = profile.samples.get(i as usize) else {
                continue;
            };
            if values.iter().all(|v| *v == 0) {
                continue;
            }
            let mut stack = self.stack_ids[s.stack as usize];
            if stack == Stacks::NONE {
                stack = self.sent_stacks;
                self.sent_stacks += 1;
                self.stack_ids[s.stack as usize] = stack;
                let frames = profile.stacks.frames(s.stack);
                new_stacks.push(
                    frames
                        .iter()
                        .map(|f| self.profile_frames[*f as usize])
                        .collect(),
                );
            }
            deltas.push(SampleDelta {
                thread: s.thread,
                stack,
                state: s.state,
                values,
            });
        }
        let mut o = self.shared.lock();
        if o.tables.metrics.is_empty() {
            o.tables.metrics = profile.meta.metrics.clone();
            o.tables.modes = profile.meta.modes.clone();
            o.tables.interval_ns = profile.meta.interval_ns;
        }
        o.tables.frames.extend(new_frames);
        o.tables.stacks.extend(new_stacks);
        o.tables.threads.extend(new_threads);
        if !deltas.is_empty() && !o.done {
            o.last_seq += 1;
            let seq = o.last_seq;
            o.push(Item::Samples(SampleBatch {
                seq,
                time_unix_ms: now_ms(),
                samples: deltas,
            }));
        }
        drop(o);
        self.shared.wake.notify_all();
    }

    /// Queues a snapshot of all threads.
    pub fn threads(&mut self, time_unix_ms: u64, snapshot: Vec<ThreadSnapshot>) {
        let mut new_frames = Vec::new();
        let threads = snapshot
            .into_iter()
            .map(|t| ThreadDump {
                id: t.id,
                name: t.name,
                group: t.group,
                daemon: t.daemon,
                state: t.state,
                order: t.order,
                frames: t
                    .frames
                    .iter()
                    .map(|f| self.frame_id(f, &mut new_frames))
                    .collect(),
            })
            .collect();
        let mut o = self.shared.lock();
        o.tables.frames.extend(new_frames);
        if !o.done {
            o.push(Item::Snapshot(Snapshot {
                time_unix_ms,
                threads,
            }));
        }
        drop(o);
        self.shared.wake.notify_all();
    }

    /// Queues one chunk of method traces (trace mode).
    pub fn trace(&mut self, chunk: Vec<u8>) {
        let mut o = self.shared.lock();
        if !o.done {
            o.trace_seq += 1;
            let seq = o.trace_seq;
            o.push(Item::Trace(seq, chunk));
        }
        drop(o);
        self.shared.wake.notify_all();
    }

    /// Queues the last delta, then waits (at most [`FINISH_WAIT`]) for everything to be sent
    /// and every sample batch acknowledged; not for the collector's goodbye once nothing is
    /// left (seen twice, a poll apart: an item taken off the queue is written by then).
    pub fn finish(mut self, profile: &Profile, gained: Vec<(u32, Vec<u64>)>) {
        self.samples(profile, gained);
        let deadline = Instant::now() + FINISH_WAIT;
        let mut o = self.shared.lock();
        o.closing = true;
        self.shared.wake.notify_all();
        let mut empty_before = false;
        while !o.done {
            // queued_bytes counts unacknowledged batches too.
            let empty = o.queue.is_empty() && o.queued_bytes == 0;
            if empty && empty_before {
                break;
            }
            empty_before = empty;
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                eprintln!(
                    "jvmprof: the collector did not take the last {} queued items within {} s",
                    o.queue.len() + o.unacked.len(),
                    FINISH_WAIT.as_secs()
                );
                break;
            }
            // Short sleeps, not a timed wait: that would end at an absolute time on the clock
            // the process sees, which libfaketime moves, and the JVM's exit could then wait
            // for ever on a collector that is gone.
            drop(o);
            std::thread::sleep(left.min(Duration::from_millis(10)));
            o = self.shared.lock();
        }
    }

    /// What was dropped so far.
    pub fn dropped(&self) -> Dropped {
        self.shared.lock().dropped
    }
}

/// The I/O thread's state.
struct Connection {
    server: String,
    hello: Hello,
    labels: Vec<(String, String)>,
    shared: Arc<Shared>,
    /// An outage was reported on stderr and not yet followed by a connection.
    reported: bool,
    /// The collector's last rejection, already reported on stderr.
    refused: Option<String>,
}

enum Outcome {
    /// Everything was sent and the connection closed after Bye.
    Finished,
    /// The connection failed; try again.
    Lost(String),
    /// The collector refused us (bad token, version): stop streaming.
    Rejected(String),
}

impl Connection {
    fn new(
        server: String,
        hello: Hello,
        labels: Vec<(String, String)>,
        shared: Arc<Shared>,
    ) -> Connection {
        Connection {
            server,
            hello,
            labels,
            shared,
            reported: false,
            refused: None,
        }
    }

    fn run(mut self) {
        let mut backoff = BACKOFF_MIN;
        let mut was_connected = false;
        loop {
            let outcome = match self.connect() {
                Ok(sock) => {
                    was_connected = true;
                    let since = Instant::now();
                    let outcome = self.session(sock);
                    // Only a connection that worked for a while counts as recovered: one that
                    // the collector breaks at once (a bad reply) keeps the backoff growing and
                    // is not reported again.
                    if since.elapsed() >= HEALTHY_CONNECTION {
                        backoff = BACKOFF_MIN;
                        self.reported = false;
                        self.refused = None;
                    }
                    outcome
                }
                Err(e) => Outcome::Lost(e),
            };
            let rejected = matches!(outcome, Outcome::Rejected(_));
            match outcome {
                Outcome::Finished => break,
                Outcome::Rejected(reason) => {
                    // Said once per reason; then ask again rarely (a full collector may take
                    // us later, a wrong token never will but costs one handshake a minute).
                    if self.refused.as_deref() != Some(reason.as_str()) {
                        eprintln!(
                            "jvmprof: the collector at {} refused this agent: {reason}; asking again every {} s",
                            self.server,
                            REJECTED_BACKOFF.as_secs()
                        );
                        self.refused = Some(reason);
                    }
                }
                Outcome::Lost(e) => {
                    if !self.reported {
                        self.reported = true;
                        let what = if was_connected {
                            "lost the connection to"
                        } else {
                            "cannot reach"
                        };
                        eprintln!(
                            "jvmprof: {what} the collector at {} ({e}); retrying in the background, keeping the newest data",
                            self.server
                        );
                    }
                }
            }
            // Wait before the next attempt; when finishing, give up instead.
            let wait = if rejected { REJECTED_BACKOFF } else { backoff };
            let o = self.shared.lock();
            if o.closing {
                break;
            }
            let (o, _) = self
                .shared
                .wake
                .wait_timeout_while(o, wait, |o| !o.closing)
                .unwrap_or_else(|e| e.into_inner());
            let closing = o.closing;
            drop(o);
            backoff = (backoff * 2).min(BACKOFF_MAX);
            if closing && rejected {
                break;
            }
            if closing {
                // One last immediate attempt to deliver what is left.
                if let Ok(sock) = self.connect() {
                    self.session(sock);
                }
                break;
            }
        }
        let mut o = self.shared.lock();
        o.done = true;
        o.queue.clear();
        o.queued_bytes = 0;
        drop(o);
        self.shared.wake.notify_all();
    }

    fn connect(&self) -> Result<TcpStream, String> {
        let addrs: Vec<SocketAddr> = self
            .server
            .to_socket_addrs()
            .map_err(|e| format!("bad address: {e}"))?
            .collect();
        let mut last = String::from("no address");
        for a in addrs {
            match TcpStream::connect_timeout(&a, CONNECT_TIMEOUT) {
                Ok(s) => {
                    let _ = s.set_nodelay(true);
                    let _ = s.set_write_timeout(Some(IO_TIMEOUT));
                    let _ = s.set_read_timeout(Some(IO_TIMEOUT));
                    return Ok(s);
                }
                Err(e) => last = e.to_string(),
            }
        }
        Err(last)
    }

    /// One connection: handshake, then send until finished or failed.
    fn session(&mut self, mut sock: TcpStream) -> Outcome {
        let mut enc = Encoder::new();
        let mut out = Vec::new();
        enc.hello(&self.hello, &mut out);
        enc.labels(&self.labels, &mut out);
        if let Err(e) = sock.write_all(&out) {
            return Outcome::Lost(e.to_string());
        }
        let mut replies = Vec::new();
        match read_reply(&mut sock) {
            Ok(Reply::Welcome { last_seq, .. }) => self.shared.lock().resend_unacked(last_seq),
            Ok(Reply::Reject { reason }) => return Outcome::Rejected(reason),
            Ok(Reply::Ack { .. }) => return Outcome::Lost("an Ack before Welcome".into()),
            Err(e) => return Outcome::Lost(e),
        }
        let mut dropped_sent = Dropped::default();
        loop {
            // Acknowledgements, and whether the collector went away, before writing more: a
            // write to a closed socket can succeed locally and lose the data without an error.
            match poll_acks(&mut sock, &mut replies) {
                Ok(Some(seq)) => self.shared.lock().ack(seq),
                Ok(None) => {}
                Err(e) => return Outcome::Lost(e),
            }
            out.clear();
            let mut items = Vec::new();
            let finished;
            {
                let mut o = self.shared.lock();
                if o.queue.is_empty() && !o.closing {
                    o = self
                        .shared
                        .wake
                        .wait_timeout(o, ACK_POLL)
                        .unwrap_or_else(|e| e.into_inner())
                        .0;
                }
                while items.len() < 64
                    && let Some(item) = o.queue.pop_front()
                {
                    match &item {
                        Item::Samples(b) => enc.samples(&o.tables, b, &mut out),
                        Item::Snapshot(s) => {
                            o.queued_bytes -= item.cost();
                            enc.snapshot(&o.tables, s, &mut out)
                        }
                        Item::Trace(seq, chunk) => {
                            o.queued_bytes -= item.cost();
                            enc.message(
                                &Message::Trace {
                                    seq: *seq,
                                    chunk: chunk.clone(),
                                },
                                &mut out,
                            )
                        }
                    }
                    items.push(item);
                }
                if o.dropped != dropped_sent {
                    dropped_sent = o.dropped;
                    enc.message(
                        &Message::Dropped {
                            snapshots: dropped_sent.snapshots,
                            sample_batches: dropped_sent.sample_batches,
                            samples: dropped_sent.samples,
                        },
                        &mut out,
                    );
                }
                finished = o.closing && o.queue.is_empty();
                if finished {
                    enc.message(&Message::Bye, &mut out);
                }
            }
            if out.is_empty() {
                continue;
            }
            let written = sock.write_all(&out);
            {
                // Written batches wait for their Ack (and go out again after a reconnect if it
                // never comes; the collector drops duplicates by seq). Snapshots are not kept.
                let mut o = self.shared.lock();
                for item in items {
                    match item {
                        Item::Samples(b) => o.unacked.push_back(b),
                        Item::Snapshot(_) if written.is_err() => o.dropped.snapshots += 1,
                        Item::Snapshot(_) => o.sent_items += 1,
                        Item::Trace(..) if written.is_err() => o.dropped.trace_chunks += 1,
                        Item::Trace(..) => o.sent_items += 1,
                    }
                }
            }
            if let Err(e) = written {
                return Outcome::Lost(e.to_string());
            }
            if finished {
                // The collector closes its side once everything is stored: wait for that
                // (bounded by the read timeout) so the JVM does not exit before.
                let _ = sock.shutdown(std::net::Shutdown::Write);
                let mut sink = [0u8; 256];
                let deadline = std::time::Instant::now() + IO_TIMEOUT;
                while let Ok(n) = sock.read(&mut sink) {
                    if n == 0 || std::time::Instant::now() > deadline {
                        break;
                    }
                    replies.extend_from_slice(&sink[..n]);
                    match parse_acks(&mut replies) {
                        Ok(Some(seq)) => self.shared.lock().ack(seq),
                        Ok(None) => {}
                        Err(_) => break,
                    }
                    if replies.len() > MAX_PENDING_REPLIES {
                        break;
                    }
                }
                return Outcome::Finished;
            }
        }
    }
}

/// Most bytes of replies kept unparsed: after the handshake a collector sends only
/// acknowledgements (a few bytes each), so anything longer is a broken or hostile peer.
const MAX_PENDING_REPLIES: usize = 64 << 10;

/// Reads what the collector sent without blocking: the newest Ack, or an error if it closed or
/// sent something that is not an acknowledgement. Memory stays bounded whatever it sends.
fn poll_acks(sock: &mut TcpStream, replies: &mut Vec<u8>) -> Result<Option<u64>, String> {
    sock.set_nonblocking(true).map_err(|e| e.to_string())?;
    let mut buf = [0u8; 1024];
    let mut newest = None;
    let result = loop {
        match sock.read(&mut buf) {
            Ok(0) => break Err("the collector closed the connection".to_string()),
            Ok(n) => {
                replies.extend_from_slice(&buf[..n]);
                match parse_acks(replies) {
                    Ok(seq) => newest = newest.max(seq),
                    Err(e) => break Err(e),
                }
                if replies.len() > MAX_PENDING_REPLIES {
                    break Err(format!(
                        "the collector sent more than {MAX_PENDING_REPLIES} bytes that are not acknowledgements"
                    ));
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => break Err(e.to_string()),
        }
    };
    let _ = sock.set_nonblocking(false);
    result?;
    Ok(newest)
}

/// Takes the complete replies off `replies`; the newest Ack's seq. A frame longer than a reply
/// can be is an error.
fn parse_acks(replies: &mut Vec<u8>) -> Result<Option<u64>, String> {
    let mut newest = None;
    let mut used = 0;
    loop {
        match jvmprof_proto::wire::take_frame(&replies[used..]) {
            Ok(Some((payload, n))) => {
                if n > MAX_PENDING_REPLIES {
                    return Err(format!("a reply of {n} bytes from the collector"));
                }
                if let Ok(Reply::Ack { seq }) = jvmprof_proto::wire::decode_payload(payload) {
                    newest = newest.max(Some(seq));
                }
                used += n;
            }
            Ok(None) => break,
            Err(e) => return Err(format!("bad reply from the collector: {e}")),
        }
    }
    replies.drain(..used);
    Ok(newest)
}

fn read_reply(sock: &mut TcpStream) -> Result<Reply, String> {
    let mut len = [0u8; 4];
    sock.read_exact(&mut len)
        .map_err(|e| format!("no reply to the handshake: {e}"))?;
    let len = u32::from_le_bytes(len) as usize;
    if len > 64 << 10 {
        return Err(format!("handshake reply of {len} bytes is too long"));
    }
    let mut body = vec![0u8; len];
    sock.read_exact(&mut body)
        .map_err(|e| format!("truncated handshake reply: {e}"))?;
    jvmprof_proto::wire::decode_payload(&body).map_err(|e| format!("bad handshake reply: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use jvmprof_profile::{Meta, Metric, ProfileBuilder, Thread, ThreadState};
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
        s.threads(
            5,
            vec![ThreadSnapshot {
                id: 1,
                name: "main".into(),
                group: "main".into(),
                daemon: false,
                state: ThreadState::Running,
                order: 0,
                frames: vec![Frame::java("A", "work", "()V", 3)],
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
        let batches: Vec<String> = events
            .iter()
            .filter_map(|e| match e {
                Event::Samples { profile, .. } => Some(
                    jvmprof_profile::collapsed::to_string(profile, &Default::default()).unwrap(),
                ),
                _ => None,
            })
            .collect();
        assert_eq!(
            batches,
            vec!["A.main;A.work 2\n", "A.main 1\nA.main;A.work 3\n"]
        );
        let snap = events
            .iter()
            .find_map(|e| match e {
                Event::Snapshot(s) => Some(s),
                _ => None,
            })
            .unwrap();
        assert_eq!(snap.time_unix_ms, 5);
        assert_eq!(snap.threads[0].frames[0].line, 3);
        assert_eq!(events.last(), Some(&Event::Bye));
    }

    fn batch(seq: u64) -> SampleBatch {
        SampleBatch {
            seq,
            time_unix_ms: seq,
            samples: vec![SampleDelta {
                thread: 0,
                stack: 0,
                state: ThreadState::Running,
                values: vec![seq, 10 * seq],
            }],
        }
    }

    #[test]
    fn unacknowledged_batches_go_out_again_after_a_reconnect() {
        let mut o = Outbox::default();
        for seq in 1..=4 {
            o.push(Item::Samples(batch(seq)));
        }
        // Batches 1..3 were written on a connection that then broke; 2 was acknowledged.
        for _ in 0..3 {
            let Some(Item::Samples(b)) = o.queue.pop_front() else {
                panic!()
            };
            o.unacked.push_back(b);
        }
        o.ack(2);
        // The new collector says it has everything up to 2 as well: 3 and 4 go out, in order.
        o.resend_unacked(2);
        let seqs: Vec<u64> = o
            .queue
            .iter()
            .map(|i| match i {
                Item::Samples(b) => b.seq,
                Item::Snapshot(_) | Item::Trace(..) => 0,
            })
            .collect();
        assert_eq!(seqs, vec![3, 4]);
        assert!(o.unacked.is_empty());
        assert_eq!(
            o.queued_bytes,
            batch_cost(&batch(3)) + batch_cost(&batch(4))
        );
        assert_eq!(o.dropped, Dropped::default());
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
        let big: Vec<ThreadSnapshot> = (0..1000)
            .map(|i| ThreadSnapshot {
                id: i,
                name: format!("worker-{i}"),
                group: "main".into(),
                daemon: false,
                state: ThreadState::Waiting,
                order: i as u64,
                frames: vec![Frame::java("A", "run", "()V", 1); 20],
            })
            .collect();
        let per = Item::Snapshot(Snapshot {
            time_unix_ms: 0,
            threads: big
                .iter()
                .map(|t| ThreadDump {
                    id: t.id,
                    name: t.name.clone(),
                    group: t.group.clone(),
                    daemon: false,
                    state: t.state,
                    order: t.order,
                    frames: vec![0; 20],
                })
                .collect(),
        })
        .cost();
        let n = 2 * MAX_QUEUED_BYTES / per + 10;
        for i in 0..n {
            s.threads(i as u64, big.clone());
        }
        let o = s.shared.lock();
        assert!(o.queued_bytes <= MAX_QUEUED_BYTES);
        assert_eq!(
            o.dropped.snapshots as usize + o.queue.len(),
            n,
            "every snapshot is either queued or counted as dropped"
        );
        assert!(o.dropped.snapshots > 0);
        drop(o);
        s.finish(&builder().finish(), Vec::new());
    }
}
