//! What agents of protocol versions 1 to 3 send: per-connection string, frame, stack and
//! thread tables and sample deltas that refer to them. Agents now send record chunks (version 4,
//! [`crate::Message::Records`]); this encoder stays so that the decoder, which still accepts
//! older agents, is tested against what they send (and the load generator can play one).

use crate::Snapshot;
use crate::wire::{
    Hello, MAGIC, Message, WireFrame, WireSample, WireThread, WireThreadState, kind_code,
    put_frame, state_code,
};
use jvmprof_profile::{Frame, Metric, Thread, ThreadState};
use std::collections::HashMap;

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
