//! The wire format between the agent and the collector, and nothing else: framed (`u32` length +
//! postcard payload), versioned (magic `JVMP`, then a `Hello` carrying [`VERSION`]), compact
//! (per-connection string, frame, stack and thread tables, so each is sent once per connection;
//! sample values are deltas; integers are varints).
//!
//! The agent side is [`Encoder`] over [`Tables`] it only appends to; the collector side is
//! [`Decoder`], which takes bytes as they arrive and yields resolved [`Event`]s, or a
//! [`ProtoError`] naming what is wrong (after which the connection is to be closed). The decoder
//! never panics on any input and bounds what one connection can make it hold.

#![forbid(unsafe_code)]

pub mod wire;

use jvmprof_profile::{Frame, Meta, Metric, Profile, ProfileBuilder, Thread, ThreadState};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::fmt;
pub use wire::{
    Hello, MAGIC, MAX_FRAME, MAX_LABEL_KEY, MAX_LABEL_VALUE, MAX_LABELS, MIN_VERSION, Message,
    Reply, VERSION,
};
use wire::{
    WireFrame, WireSample, WireThread, WireThreadState, decode_payload, kind_code, kind_from,
    put_frame, state_code, state_from, take_frame,
};

/// Most entries one connection may define in each table (strings, frames, stacks, threads).
pub const MAX_TABLE: usize = 4 << 20;

/// One thread of a thread snapshot; `F` is a frame id on the agent side, a [`Frame`] once decoded.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThreadDump<F> {
    /// `Thread.getId()`.
    pub id: i64,
    pub name: String,
    pub group: String,
    pub daemon: bool,
    pub state: ThreadState,
    /// The order in which the agent first saw the thread.
    pub order: u64,
    /// Top of stack first.
    pub frames: Vec<F>,
}

/// The stacks of all threads at one moment.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Snapshot<F = Frame> {
    pub time_unix_ms: u64,
    pub threads: Vec<ThreadDump<F>>,
}

/// What one (thread, stack, state) of the agent's tables gained since the previous batch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SampleDelta {
    pub thread: u32,
    pub stack: u32,
    pub state: ThreadState,
    pub values: Vec<u64>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SampleBatch {
    /// 1, 2, 3, ... for the life of the agent.
    pub seq: u64,
    pub time_unix_ms: u64,
    pub samples: Vec<SampleDelta>,
}

/// The agent's definitions, in stream ids; append-only for the life of the agent. Every
/// connection re-sends them from the start (tables are per connection).
#[derive(Clone, Debug, Default)]
pub struct Tables {
    pub frames: Vec<Frame>,
    /// Frame ids, root first.
    pub stacks: Vec<Vec<u32>>,
    pub threads: Vec<Thread>,
    pub modes: Vec<String>,
    pub metrics: Vec<Metric>,
    pub interval_ns: u64,
}

/// A connection's encoder (agent side): remembers which table entries this connection has seen.
#[derive(Default)]
pub struct Encoder {
    strings: HashMap<String, u32>,
    new_strings: Vec<String>,
    frames: usize,
    stacks: usize,
    threads: usize,
    meta_sent: bool,
}

impl Encoder {
    pub fn new() -> Encoder {
        Encoder::default()
    }

    /// The magic and the Hello: the start of every connection.
    pub fn hello(&mut self, hello: &Hello, out: &mut Vec<u8>) {
        out.extend_from_slice(&MAGIC);
        put_frame(&Message::Hello(hello.clone()), out);
    }

    /// The VM's labels, sent right after the Hello (nothing when there are none).
    pub fn labels(&mut self, labels: &[(String, String)], out: &mut Vec<u8>) {
        if !labels.is_empty() {
            put_frame(&Message::Labels(labels.to_vec()), out);
        }
    }

    fn string(&mut self, s: &str) -> u32 {
        if let Some(id) = self.strings.get(s) {
            return *id;
        }
        let id = self.strings.len() as u32;
        self.strings.insert(s.to_string(), id);
        self.new_strings.push(s.to_string());
        id
    }

    fn flush_strings(&mut self, out: &mut Vec<u8>) {
        if !self.new_strings.is_empty() {
            let strings = std::mem::take(&mut self.new_strings);
            let first = (self.strings.len() - strings.len()) as u32;
            put_frame(&Message::Strings { first, strings }, out);
        }
    }

    /// Sends the table entries this connection has not seen yet.
    pub fn sync(&mut self, t: &Tables, out: &mut Vec<u8>) {
        let mut defs = Vec::new();
        if self.frames < t.frames.len() {
            let frames: Vec<WireFrame> = t.frames[self.frames..]
                .iter()
                .map(|f| WireFrame {
                    kind: kind_code(f.kind),
                    class: self.string(&f.class),
                    method: self.string(&f.method),
                    descriptor: self.string(&f.descriptor),
                    line: f.line,
                })
                .collect();
            let first = self.frames as u32;
            self.frames = t.frames.len();
            put_frame(&Message::Frames { first, frames }, &mut defs);
        }
        if self.stacks < t.stacks.len() {
            let first = self.stacks as u32;
            let stacks = t.stacks[self.stacks..].to_vec();
            self.stacks = t.stacks.len();
            put_frame(&Message::Stacks { first, stacks }, &mut defs);
        }
        if self.threads < t.threads.len() {
            let threads: Vec<WireThread> = t.threads[self.threads..]
                .iter()
                .map(|th| WireThread {
                    tid: th.tid,
                    name: self.string(&th.name),
                })
                .collect();
            let first = self.threads as u32;
            self.threads = t.threads.len();
            put_frame(&Message::Threads { first, threads }, &mut defs);
        }
        if !self.meta_sent && !t.metrics.is_empty() {
            self.meta_sent = true;
            let meta = Message::Meta {
                modes: t.modes.clone(),
                metrics: t.metrics.iter().map(|m| m.as_str().to_string()).collect(),
                interval_ns: t.interval_ns,
            };
            put_frame(&meta, &mut defs);
        }
        self.flush_strings(out);
        out.append(&mut defs);
    }

    /// A batch of sample deltas (ids into `t`).
    pub fn samples(&mut self, t: &Tables, batch: &SampleBatch, out: &mut Vec<u8>) {
        self.sync(t, out);
        let samples = batch
            .samples
            .iter()
            .map(|s| WireSample {
                thread: s.thread,
                stack: s.stack,
                state: state_code(s.state),
                values: s.values.clone(),
            })
            .collect();
        put_frame(
            &Message::Samples {
                seq: batch.seq,
                time_unix_ms: batch.time_unix_ms,
                samples,
            },
            out,
        );
    }

    /// A thread snapshot whose frames are ids into `t`.
    pub fn snapshot(&mut self, t: &Tables, snap: &Snapshot<u32>, out: &mut Vec<u8>) {
        self.sync(t, out);
        let threads: Vec<WireThreadState> = snap
            .threads
            .iter()
            .map(|th| WireThreadState {
                id: th.id,
                name: self.string(&th.name),
                group: self.string(&th.group),
                daemon: th.daemon,
                state: state_code(th.state),
                order: th.order,
                frames: th.frames.clone(),
            })
            .collect();
        self.flush_strings(out);
        put_frame(
            &Message::Snapshot {
                time_unix_ms: snap.time_unix_ms,
                threads,
            },
            out,
        );
    }

    pub fn message(&mut self, m: &Message, out: &mut Vec<u8>) {
        put_frame(m, out);
    }
}

/// What a connection delivered, with every id resolved.
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    Hello(Hello),
    /// Sample deltas as a small profile holding only what the batch refers to.
    Samples {
        seq: u64,
        time_unix_ms: u64,
        profile: Box<Profile>,
    },
    Snapshot(Snapshot),
    Dropped {
        snapshots: u64,
        sample_batches: u64,
        samples: u64,
    },
    Bye,
    Labels(Vec<(String, String)>),
    /// A trace chunk, checked: one whole chunk with a matching checksum.
    Trace {
        seq: u64,
        chunk: Vec<u8>,
    },
}

/// A protocol violation: what is wrong, and in which message of the connection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProtoError(pub String);

impl fmt::Display for ProtoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ProtoError {}

struct Meta0 {
    modes: Vec<String>,
    metrics: Vec<Metric>,
    interval_ns: u64,
}

/// A connection's decoder (collector side). Feed bytes with [`push`](Decoder::push), take events
/// with [`next_event`](Decoder::next_event) until `Ok(None)`; at end of input call
/// [`finish`](Decoder::finish) to learn whether the connection stopped mid-frame.
#[derive(Default)]
pub struct Decoder {
    buf: Vec<u8>,
    pos: usize,
    magic: bool,
    hello: bool,
    messages: u64,
    strings: Vec<String>,
    frames: Vec<Frame>,
    stacks: Vec<Vec<u32>>,
    threads: Vec<Thread>,
    meta: Option<Meta0>,
    failed: Option<ProtoError>,
    /// Estimated bytes the tables hold (see [`held_bytes`](Decoder::held_bytes)).
    held: usize,
}

fn check_first(what: &str, first: u32, have: usize, adding: usize) -> Result<(), String> {
    if first as usize != have {
        return Err(format!(
            "{what} definitions start at id {first} but {have} are defined"
        ));
    }
    if have + adding > MAX_TABLE {
        return Err(format!("{what} table would exceed {MAX_TABLE} entries"));
    }
    Ok(())
}

impl Decoder {
    pub fn new() -> Decoder {
        Decoder::default()
    }

    pub fn push(&mut self, data: &[u8]) {
        if self.pos > 0 && self.pos == self.buf.len() {
            self.buf.clear();
            // A big frame's room is not kept for the life of the connection.
            if self.buf.capacity() > 1 << 20 {
                self.buf.shrink_to(64 << 10);
            }
            self.pos = 0;
        } else if self.pos > (1 << 16) {
            self.buf.drain(..self.pos);
            self.pos = 0;
        }
        self.buf.extend_from_slice(data);
    }

    /// About how many bytes this connection makes the decoder hold: its tables (strings, and the
    /// frames, stacks and threads built from them) and its input buffer. The collector bounds
    /// it per connection and over all connections.
    pub fn held_bytes(&self) -> usize {
        self.held + self.buf.capacity()
    }

    /// Bytes received but not yet decoded (part of a frame).
    pub fn pending(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// The next complete event, `Ok(None)` when more bytes are needed. After an error every call
    /// returns the same error.
    pub fn next_event(&mut self) -> Result<Option<Event>, ProtoError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        match self.step() {
            Ok(e) => Ok(e),
            Err(e) => {
                self.failed = Some(e.clone());
                Err(e)
            }
        }
    }

    /// At end of input: an error if it stopped in the middle of the magic or of a frame.
    pub fn finish(&self) -> Result<(), ProtoError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        match self.pending() {
            0 => Ok(()),
            n if !self.magic => Err(ProtoError(format!(
                "connection closed after {n} of the 4 magic bytes"
            ))),
            n => Err(ProtoError(format!(
                "connection closed in the middle of message {} ({n} bytes of an incomplete frame)",
                self.messages + 1
            ))),
        }
    }

    fn step(&mut self) -> Result<Option<Event>, ProtoError> {
        loop {
            let data = &self.buf[self.pos..];
            if !self.magic {
                if data.len() < 4 {
                    if !MAGIC.starts_with(data) {
                        return Err(ProtoError(format!(
                            "not a jvmprof agent connection (starts with {data:02x?}, expected \"JVMP\")"
                        )));
                    }
                    return Ok(None);
                }
                if data[..4] != MAGIC {
                    return Err(ProtoError(format!(
                        "not a jvmprof agent connection (starts with {:02x?}, expected \"JVMP\")",
                        &data[..4]
                    )));
                }
                self.magic = true;
                self.pos += 4;
                continue;
            }
            let n = self.messages + 1;
            let (payload, used) = match take_frame(data) {
                Ok(Some(x)) => x,
                Ok(None) => return Ok(None),
                Err(e) => return Err(ProtoError(format!("message {n}: {e}"))),
            };
            let msg: Message = decode_payload(payload)
                .map_err(|e| ProtoError(format!("message {n} ({} bytes): {e}", payload.len())))?;
            self.pos += used;
            self.messages = n;
            let name = msg.name();
            if let Some(ev) = self
                .apply(msg)
                .map_err(|e| ProtoError(format!("message {n} ({name}): {e}")))?
            {
                return Ok(Some(ev));
            }
        }
    }

    fn string(&self, id: u32) -> Result<&str, String> {
        self.strings
            .get(id as usize)
            .map(|s| s.as_str())
            .ok_or_else(|| {
                format!(
                    "refers to string {id} but {} strings are defined",
                    self.strings.len()
                )
            })
    }

    fn frame(&self, id: u32) -> Result<&Frame, String> {
        self.frames.get(id as usize).ok_or_else(|| {
            format!(
                "refers to frame {id} but {} frames are defined",
                self.frames.len()
            )
        })
    }

    fn apply(&mut self, msg: Message) -> Result<Option<Event>, String> {
        if !self.hello && !matches!(msg, Message::Hello(_)) {
            return Err("the connection must start with Hello".into());
        }
        match msg {
            Message::Hello(h) => {
                if self.hello {
                    return Err("a second Hello".into());
                }
                if !(MIN_VERSION..=VERSION).contains(&h.version) {
                    return Err(format!(
                        "protocol version {} not supported (this collector speaks versions {MIN_VERSION} to {VERSION})",
                        h.version
                    ));
                }
                self.hello = true;
                return Ok(Some(Event::Hello(h)));
            }
            Message::Strings { first, strings } => {
                check_first("string", first, self.strings.len(), strings.len())?;
                self.held += strings.iter().map(|s| s.len() + 24).sum::<usize>();
                self.strings.extend(strings);
            }
            Message::Frames { first, frames } => {
                check_first("frame", first, self.frames.len(), frames.len())?;
                for (i, f) in frames.iter().enumerate() {
                    let at = |e: String| format!("frame {}: {e}", first as usize + i);
                    let kind = kind_from(f.kind)
                        .ok_or_else(|| at(format!("unknown frame kind {}", f.kind)))?;
                    let frame = Frame {
                        kind,
                        class: self.string(f.class).map_err(at)?.to_string(),
                        method: self.string(f.method).map_err(at)?.to_string(),
                        descriptor: self.string(f.descriptor).map_err(at)?.to_string(),
                        line: f.line,
                    };
                    self.held += frame.class.len()
                        + frame.method.len()
                        + frame.descriptor.len()
                        + std::mem::size_of::<Frame>();
                    self.frames.push(frame);
                }
            }
            Message::Stacks { first, stacks } => {
                check_first("stack", first, self.stacks.len(), stacks.len())?;
                for (i, s) in stacks.into_iter().enumerate() {
                    if let Some(bad) = s.iter().find(|f| **f as usize >= self.frames.len()) {
                        return Err(format!(
                            "stack {} refers to frame {bad} but {} frames are defined",
                            first as usize + i,
                            self.frames.len()
                        ));
                    }
                    self.held += s.len() * 4 + 24;
                    self.stacks.push(s);
                }
            }
            Message::Threads { first, threads } => {
                check_first("thread", first, self.threads.len(), threads.len())?;
                for (i, t) in threads.iter().enumerate() {
                    let name = self
                        .string(t.name)
                        .map_err(|e| format!("thread {}: {e}", first as usize + i))?
                        .to_string();
                    self.held += name.len() + std::mem::size_of::<Thread>();
                    self.threads.push(Thread { tid: t.tid, name });
                }
            }
            Message::Meta {
                modes,
                metrics,
                interval_ns,
            } => {
                let metrics = metrics
                    .iter()
                    .map(|m| Metric::parse(m).ok_or_else(|| format!("unknown metric {m:?}")))
                    .collect::<Result<Vec<_>, _>>()?;
                self.meta = Some(Meta0 {
                    modes,
                    metrics,
                    interval_ns,
                });
            }
            Message::Samples {
                seq,
                time_unix_ms,
                samples,
            } => return self.samples(seq, time_unix_ms, samples).map(Some),
            Message::Snapshot {
                time_unix_ms,
                threads,
            } => {
                let mut out = Vec::with_capacity(threads.len());
                for (i, t) in threads.into_iter().enumerate() {
                    let at = |e: String| format!("snapshot thread {i}: {e}");
                    let state = state_from(t.state)
                        .ok_or_else(|| at(format!("unknown thread state {}", t.state)))?;
                    let frames = t
                        .frames
                        .iter()
                        .map(|f| self.frame(*f).cloned())
                        .collect::<Result<Vec<_>, _>>()
                        .map_err(at)?;
                    out.push(ThreadDump {
                        id: t.id,
                        name: self.string(t.name).map_err(at)?.to_string(),
                        group: self.string(t.group).map_err(at)?.to_string(),
                        daemon: t.daemon,
                        state,
                        order: t.order,
                        frames,
                    });
                }
                return Ok(Some(Event::Snapshot(Snapshot {
                    time_unix_ms,
                    threads: out,
                })));
            }
            Message::Dropped {
                snapshots,
                sample_batches,
                samples,
            } => {
                return Ok(Some(Event::Dropped {
                    snapshots,
                    sample_batches,
                    samples,
                }));
            }
            Message::Bye => return Ok(Some(Event::Bye)),
            Message::Labels(labels) => {
                if labels.len() > MAX_LABELS {
                    return Err(format!("{} labels (at most {MAX_LABELS})", labels.len()));
                }
                for (k, v) in &labels {
                    if k.is_empty() || k.len() > MAX_LABEL_KEY || v.len() > MAX_LABEL_VALUE {
                        return Err(format!(
                            "label '{k}': keys are 1 to {MAX_LABEL_KEY} bytes, values at most {MAX_LABEL_VALUE}"
                        ));
                    }
                }
                return Ok(Some(Event::Labels(labels)));
            }
            Message::Trace { seq, chunk } => {
                let (trace, damage) =
                    jvmprof_profile::trace::log::read_chunks(&chunk, "trace chunk");
                if let Some(d) = damage {
                    return Err(d);
                }
                drop(trace);
                return Ok(Some(Event::Trace { seq, chunk }));
            }
        }
        Ok(None)
    }

    fn samples(
        &self,
        seq: u64,
        time_unix_ms: u64,
        samples: Vec<WireSample>,
    ) -> Result<Event, String> {
        let meta = self
            .meta
            .as_ref()
            .ok_or("Samples before Meta (the metrics are unknown)")?;
        let mut b = ProfileBuilder::new(Meta {
            modes: meta.modes.clone(),
            metrics: meta.metrics.clone(),
            interval_ns: meta.interval_ns,
            ..Meta::default()
        });
        // Per batch: this connection's ids → the batch profile's ids.
        let mut frame_map: HashMap<u32, u32> = HashMap::new();
        let mut stack_map: HashMap<u32, u32> = HashMap::new();
        let mut thread_map: HashMap<u32, u32> = HashMap::new();
        for (i, s) in samples.into_iter().enumerate() {
            let at = |e: String| format!("sample {i}: {e}");
            if s.values.len() != meta.metrics.len() {
                return Err(at(format!(
                    "{} values but the metrics are {}",
                    s.values.len(),
                    meta.metrics.len()
                )));
            }
            let state = state_from(s.state)
                .ok_or_else(|| at(format!("unknown thread state {}", s.state)))?;
            let thread = match thread_map.get(&s.thread) {
                Some(t) => *t,
                None => {
                    let t = self.threads.get(s.thread as usize).ok_or_else(|| {
                        at(format!(
                            "refers to thread {} but {} threads are defined",
                            s.thread,
                            self.threads.len()
                        ))
                    })?;
                    let id = b.thread(t.clone());
                    thread_map.insert(s.thread, id);
                    id
                }
            };
            let stack = match stack_map.get(&s.stack) {
                Some(st) => *st,
                None => {
                    let frames = self.stacks.get(s.stack as usize).ok_or_else(|| {
                        at(format!(
                            "refers to stack {} but {} stacks are defined",
                            s.stack,
                            self.stacks.len()
                        ))
                    })?;
                    let mut ids = Vec::with_capacity(frames.len());
                    for f in frames {
                        let id = match frame_map.get(f) {
                            Some(id) => *id,
                            None => {
                                // Stacks were checked against the frame table when defined.
                                let id = b.frame(self.frame(*f).map_err(at)?.clone());
                                frame_map.insert(*f, id);
                                id
                            }
                        };
                        ids.push(id);
                    }
                    let id = b.stack(&ids);
                    stack_map.insert(s.stack, id);
                    id
                }
            };
            b.add(thread, stack, state, &s.values);
        }
        Ok(Event::Samples {
            seq,
            time_unix_ms,
            profile: Box::new(b.finish()),
        })
    }
}

#[cfg(test)]
mod tests;
