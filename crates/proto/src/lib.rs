//! The wire format between the agent and the collector, and nothing else: framed (`u32` length +
//! postcard payload), versioned (magic `JVMP`, then a `Hello` carrying [`VERSION`]).
//!
//! Since version 4 an agent sends the record stream itself (`jvmprof_profile::records`, the
//! chunks its native file holds): [`Message::Records`] carries framed chunks numbered from 1
//! for the life of the agent, which the collector acknowledges once stored; thread snapshots are
//! records of the stream too. Versions 1 to 3 sent per-connection tables and sample
//! deltas ([`legacy`]); the [`Decoder`] still accepts them and resolves their batches into small
//! profiles, which the collector turns into records.
//!
//! The collector side is [`Decoder`], which takes bytes as they arrive and yields [`Event`]s, or
//! a [`ProtoError`] naming what is wrong (after which the connection is to be closed). The
//! decoder never panics on any input and bounds what one connection can make it hold.

#![forbid(unsafe_code)]

pub mod legacy;
pub mod wire;

use jvmprof_profile::records::{Framed, next_chunk};
use jvmprof_profile::{Frame, Meta, Metric, Profile, ProfileBuilder, Thread, ThreadState};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::fmt;
pub use wire::{
    Hello, MAGIC, MAX_FRAME, MAX_LABEL_KEY, MAX_LABEL_VALUE, MAX_LABELS, MIN_VERSION, Message,
    Reply, VERSION,
};
use wire::{WireSample, decode_payload, kind_from, state_from, take_frame};

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
    /// Record chunks (version 4), checked: whole framed chunks with matching checksums.
    Records {
        seq: u64,
        time_unix_ms: u64,
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
            Message::Records {
                seq,
                time_unix_ms,
                chunk,
            } => {
                check_chunks(&chunk)?;
                return Ok(Some(Event::Records {
                    seq,
                    time_unix_ms,
                    chunk,
                }));
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

/// Whether `bytes` are one or more whole record chunks whose checksums match.
fn check_chunks(mut bytes: &[u8]) -> Result<(), String> {
    if bytes.is_empty() {
        return Err("no record chunk".into());
    }
    let mut n = 0;
    while !bytes.is_empty() {
        n += 1;
        match next_chunk(bytes) {
            Framed::Chunk(_, used) => bytes = &bytes[used..],
            Framed::Damaged(_) => return Err(format!("record chunk {n} fails its checksum")),
            Framed::Partial => return Err(format!("record chunk {n} is cut short")),
            Framed::Garbage(len) => return Err(format!("record chunk {n} claims {len} bytes")),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
