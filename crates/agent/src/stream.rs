//! Streaming to a collector (`server=HOST:PORT`, issue 5): the session hands this module the
//! growing profile and periodic thread snapshots; this module owns the connection.
//!
//! Contract with `session.rs` (which calls only what is below):
//! - `Stream::start` never blocks and never fails the session: connecting, reconnecting with
//!   backoff and the single stderr line about an unreachable collector happen on its own thread.
//! - `samples(&Profile)` is called about once a second with the session's profile so far; frames,
//!   stacks, threads and samples only grow (stable indices) and values only increase, so the stream
//!   sends what changed since its previous call.
//! - `threads` is called every `refresh` with a snapshot of all threads (xdProf's data).
//! - `finish` sends what is left, waiting a bounded time, and closes.
//! - Memory is bounded: when the collector is away, the oldest queued data is dropped and counted.
//!
//! NOT IMPLEMENTED YET: this is the interface only; `start` reports that streaming is unavailable.

use jvmprof_profile::{Frame, Profile, ThreadState};
use std::time::Duration;

/// Who is connecting, sent once per connection.
#[derive(Clone, Debug, Default)]
pub struct Handshake {
    pub pid: u32,
    pub command: String,
    /// `java.vm.name` and `java.runtime.version`.
    pub jvm: String,
    pub os: String,
    pub host: String,
    pub agent_version: String,
    pub start_unix_ms: u64,
}

/// One thread in a snapshot (xdProf: id, name, group, state, logical start order, frames).
#[derive(Clone, Debug)]
pub struct ThreadSnapshot {
    /// `Thread.getId()`.
    pub id: i64,
    pub name: String,
    pub group: String,
    pub daemon: bool,
    pub state: ThreadState,
    /// The order in which the agent first saw the thread (0, 1, 2, ...).
    pub order: u64,
    /// Top of stack first, with line numbers.
    pub frames: Vec<Frame>,
}

#[derive(Clone, Debug)]
pub struct StreamOptions {
    pub server: String,
    pub token: Option<String>,
    pub refresh: Duration,
}

pub struct Stream {
    _options: StreamOptions,
}

impl Stream {
    pub fn start(options: StreamOptions, _handshake: Handshake) -> Stream {
        eprintln!(
            "jvmprof: streaming to {} is not available in this build yet; profiling continues without it",
            options.server
        );
        Stream { _options: options }
    }

    pub fn samples(&mut self, _profile: &Profile) {}

    pub fn threads(&mut self, _time_unix_ms: u64, _snapshot: Vec<ThreadSnapshot>) {}

    pub fn finish(self, _profile: &Profile) {}
}
