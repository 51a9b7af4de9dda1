//! Streaming to a collector (`server=HOST:PORT`, issue 5): the session hands this module the
//! growing profile and periodic thread snapshots; this module owns the connection.
//!
//! Contract with `session.rs` (which calls only what is below):
//! - `Stream::start` never blocks and never fails the session: connecting, reconnecting with
//!   backoff and the single stderr line about an unreachable collector happen on its own thread.
//! - `samples(&Profile, gained)` is called about once a second with the session's profile so far
//!   and what each changed sample gained since the last call (kept by the sink as it adds, so
//!   nothing re-scans the profile).
//! - `threads` is called every `refresh` with a snapshot of all threads (xdProf's data), each
//!   thread's stack a stack of the profile: it goes out as a `Threads` record of the stream.
//! - `finish` sends what is left, waiting a bounded time, and closes.
//! - Memory is bounded: when the collector is away, the oldest queued data is dropped and counted.
//!
//! What goes out is the record stream (protocol version 4): a [`RecordWriter`] turns each call's
//! growth into the same chunks the native file holds, numbered from 1 for the life of the agent.
//! A chunk waits for the collector's acknowledgement and goes out again after a reconnect if it
//! never came. When the queue is over [`MAX_QUEUED_BYTES`], the oldest chunks are first
//! thinned ([`records::merge::thin`]: their samples are dropped and counted, their frames,
//! stacks and threads kept, so every later chunk still resolves), then snapshots are dropped,
//! and only then whole chunks.
//!
//! How: the caller (the session's writer thread) encodes under no lock and puts each chunk or
//! snapshot on a bounded queue under one short lock that is never held across I/O. One plain
//! thread ("jvmprof stream") connects and writes.

use crate::sync::lock;
use jvmprof_profile::Profile;
use jvmprof_profile::records::{self, Framed, RecordWriter, ThreadStack, ThreadsAt};
use jvmprof_proto::wire::put_frame;
use jvmprof_proto::{Hello, MAGIC, Message, Reply, VERSION};
use std::collections::VecDeque;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Most data (bytes) waiting for the collector; older items are thinned, then dropped beyond it.
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

#[derive(Clone, Debug)]
pub struct StreamOptions {
    pub server: String,
    pub token: Option<String>,
    pub labels: Vec<(String, String)>,
    pub refresh: Duration,
}

/// Framed record chunks and their number.
#[derive(Debug)]
struct Chunk {
    seq: u64,
    time_unix_ms: u64,
    bytes: Vec<u8>,
    /// Sample records it holds and the sum of their first values (0 once thinned).
    records: u64,
    samples: u64,
    /// Its samples were dropped (definitions only).
    thin: bool,
    /// It holds a thread snapshot (dropped when it is thinned).
    snapshot: bool,
}

enum Item {
    Records(Chunk),
    /// Trace mode: one encoded chunk of method traces and its number.
    Trace(u64, Vec<u8>),
}

impl Item {
    /// A rough size in memory, for the queue bound.
    fn cost(&self) -> usize {
        match self {
            Item::Records(c) => 64 + c.bytes.len(),
            Item::Trace(_, c) => 32 + c.len(),
        }
    }
}

/// What was dropped since the agent started (reported to the collector as totals).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Dropped {
    pub snapshots: u64,
    /// Record chunks whose samples were dropped (thinned, or dropped whole).
    pub sample_batches: u64,
    pub samples: u64,
    /// Trace chunks lost while the collector was away (their calls are missing there, not in
    /// the file).
    pub trace_chunks: u64,
    /// Record chunks dropped whole, definitions included (the collector shows `[lost]` frames
    /// where they were referred to).
    pub chunks: u64,
}

/// The hand-off between the caller and the I/O thread.
#[derive(Default)]
struct Outbox {
    queue: VecDeque<Item>,
    /// Record chunks written but not yet acknowledged as stored, oldest first: re-sent after a
    /// reconnect (the collector ignores the ones it has).
    unacked: VecDeque<Chunk>,
    /// Estimated bytes of `queue` and `unacked` together.
    queued_bytes: usize,
    /// The seq of the newest record chunk.
    last_seq: u64,
    /// The last trace chunk's number.
    trace_seq: u64,
    dropped: Dropped,
    /// `finish` was called: send what is left, then Bye.
    closing: bool,
    /// The I/O thread has ended.
    done: bool,
    /// Items written to a connection that accepted them (for tests and status).
    sent_items: u64,
}

impl Outbox {
    fn push(&mut self, item: Item) {
        self.queued_bytes += item.cost();
        self.queue.push_back(item);
        while self.queued_bytes > MAX_QUEUED_BYTES {
            if !self.thin_oldest() && !self.drop_oldest() {
                break;
            }
        }
    }

    /// Thins the oldest chunk that still has samples; false if none has.
    fn thin_oldest(&mut self) -> bool {
        let queued = self.queue.iter_mut().filter_map(|i| match i {
            Item::Records(c) => Some(c),
            _ => None,
        });
        let Some(c) = self.unacked.iter_mut().chain(queued).find(|c| !c.thin) else {
            return false;
        };
        c.thin = true;
        if c.records > 0 {
            self.dropped.sample_batches += 1;
            self.dropped.samples += c.samples;
        }
        if c.snapshot {
            c.snapshot = false;
            self.dropped.snapshots += 1;
        }
        if let Ok(thin) = records::merge::thin(&[&c.bytes]) {
            self.queued_bytes = self.queued_bytes + thin.len() - c.bytes.len();
            c.bytes = thin;
        }
        c.records = 0;
        c.samples = 0;
        true
    }

    /// Drops the oldest trace chunk (never the newest item), else the oldest record chunk;
    /// false if nothing can go.
    fn drop_oldest(&mut self) -> bool {
        let other = self
            .queue
            .iter()
            .position(|i| !matches!(i, Item::Records(_)));
        if self.queue.len() > 1
            && let Some(i) = other
            && let Some(old) = self.queue.remove(i)
        {
            self.queued_bytes -= old.cost();
            self.dropped.trace_chunks += 1;
            return true;
        }
        let old = match self.unacked.pop_front() {
            Some(c) => c,
            None if self.queue.len() > 1 => match self.queue.pop_front() {
                Some(Item::Records(c)) => c,
                Some(other) => {
                    self.queue.push_front(other);
                    return false;
                }
                None => return false,
            },
            None => return false,
        };
        self.queued_bytes -= 64 + old.bytes.len();
        self.dropped.chunks += 1;
        true
    }

    /// The collector has stored every chunk up to `seq`.
    fn ack(&mut self, seq: u64) {
        while self.unacked.front().is_some_and(|c| c.seq <= seq) {
            if let Some(c) = self.unacked.pop_front() {
                self.queued_bytes -= 64 + c.bytes.len();
            }
        }
    }

    /// A new connection: what the collector does not have goes out again first.
    fn resend_unacked(&mut self, last_seq: u64) {
        self.ack(last_seq);
        while let Some(c) = self.unacked.pop_back() {
            self.queue.push_front(Item::Records(c));
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
    /// The record stream this link carries (the same records as the native file).
    writer: RecordWriter,
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
            writer: RecordWriter::new(),
        }
    }

    /// The kernel tid of the I/O thread, once it has started.
    pub fn io_tid(&self) -> Option<u32> {
        Some(self.shared.io_tid.load(Ordering::Relaxed)).filter(|t| *t != 0)
    }

    /// Queues what the profile gained since the previous call (`gained`: what each changed
    /// sample, by index, gained) as record chunks.
    pub fn samples(&mut self, profile: &Profile, gained: Vec<(u32, Vec<u64>)>) {
        self.records(profile, &gained, false);
    }

    fn records(&mut self, profile: &Profile, gained: &[(u32, Vec<u64>)], end: bool) {
        let bytes = self.writer.update(profile, gained, &[], end);
        self.queue_chunks(bytes, false);
    }

    /// Queues the framed chunks in `bytes` (or says why there are none).
    fn queue_chunks(&mut self, bytes: std::io::Result<Vec<u8>>, snapshot: bool) {
        let bytes = match bytes {
            Ok(b) => b,
            Err(e) => {
                eprintln!("jvmprof: cannot encode records for the collector: {e}");
                return;
            }
        };
        let time_unix_ms = now_ms();
        let mut chunks = Vec::new();
        let mut rest = bytes.as_slice();
        while let Framed::Chunk(_, n) = records::next_chunk(rest) {
            let framed = &rest[..n];
            let (records, samples) = records::merge::decode_framed(framed)
                .map(|d| records::merge::weight(&d))
                .unwrap_or((0, 0));
            chunks.push((framed.to_vec(), records, samples));
            rest = &rest[n..];
        }
        let mut o = self.shared.lock();
        for (bytes, records, samples) in chunks {
            o.last_seq += 1;
            let seq = o.last_seq;
            if !o.done {
                o.push(Item::Records(Chunk {
                    seq,
                    time_unix_ms,
                    bytes,
                    records,
                    samples,
                    thin: false,
                    snapshot,
                }));
            }
        }
        drop(o);
        self.shared.wake.notify_all();
    }

    /// Queues a snapshot of all threads (their stacks are `profile`'s).
    pub fn threads(&mut self, profile: &Profile, time_unix_ms: u64, threads: Vec<ThreadStack>) {
        let snapshot = ThreadsAt {
            time_unix_ms,
            threads,
        };
        let bytes = self.writer.threads(profile, &snapshot);
        self.queue_chunks(bytes, true);
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

    /// Queues the last records and the end of the stream, then waits (at most [`FINISH_WAIT`])
    /// for everything to be sent and every chunk acknowledged; not for the collector's goodbye
    /// once nothing is left (seen twice, a poll apart: an item taken off the queue is written
    /// by then).
    pub fn finish(mut self, profile: &Profile, gained: Vec<(u32, Vec<u64>)>) {
        self.records(profile, &gained, true);
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
        let mut out = MAGIC.to_vec();
        put_frame(&Message::Hello(self.hello.clone()), &mut out);
        if !self.labels.is_empty() {
            put_frame(&Message::Labels(self.labels.clone()), &mut out);
        }
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
                    && out.len() < (4 << 20)
                    && let Some(item) = o.queue.pop_front()
                {
                    match &item {
                        Item::Records(c) => put_frame(
                            &Message::Records {
                                seq: c.seq,
                                time_unix_ms: c.time_unix_ms,
                                chunk: c.bytes.clone(),
                            },
                            &mut out,
                        ),
                        Item::Trace(seq, chunk) => {
                            o.queued_bytes -= item.cost();
                            put_frame(
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
                    put_frame(
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
                    put_frame(&Message::Bye, &mut out);
                }
            }
            if out.is_empty() {
                continue;
            }
            let written = sock.write_all(&out);
            {
                // Written chunks wait for their Ack (and go out again after a reconnect if it
                // never comes; the collector drops duplicates by seq). Trace chunks are not kept.
                let mut o = self.shared.lock();
                for item in items {
                    match item {
                        Item::Records(c) => o.unacked.push_back(c),
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
mod tests;
