//! Each VM's record stream as this collector has replayed it so far: what resolves the thread
//! snapshots its chunks carry (`Threads` records, whose stacks are the stream's) for the live
//! view. One muted [`Replay`] per VM (definitions, not totals: the store answers totals), kept
//! across reconnects; rebuilt from the store the first time a VM's stream continues after a
//! restart; given up (snapshots counted, not shown) once it would hold more than
//! [`MAX_STREAM_BYTES`].
//!
//! A snapshot becomes frames (a copy of every frame of every thread) at most once per
//! [`RESOLVE_EVERY`] per VM: an agent sends one a second, and a burst from a reconnecting agent
//! costs no more.

use crate::store::Store;
use jvmprof_profile::Profile;
use jvmprof_profile::records::{self, Framed, Replay, ThreadsAt};
use jvmprof_proto::{Snapshot, ThreadDump};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Most bytes one VM's replayed stream may hold (a large application's frames and stacks are a
/// few MB).
pub const MAX_STREAM_BYTES: usize = 48 << 20;
/// A VM's snapshots are resolved at most this often.
pub const RESOLVE_EVERY: Duration = Duration::from_millis(500);

#[derive(Default)]
pub struct Streams {
    vms: Mutex<HashMap<u64, Arc<Mutex<VmStream>>>>,
}

#[derive(Default)]
struct VmStream {
    replay: Option<Replay>,
    /// Chunks applied (0: the stream may need rebuilding from the store).
    applied: u64,
    resolved: Option<Instant>,
    /// The stream grew past the bound (said once).
    over: bool,
}

/// About what a replayed profile holds in memory.
fn held(p: &Profile) -> usize {
    let frames: usize = p
        .frames
        .iter()
        .map(|f| 96 + f.class.len() + f.method.len() + f.descriptor.len())
        .sum();
    frames + 16 * p.stacks.len() + 64 * p.threads.len() + 48 * p.samples.len()
}

fn muted() -> Replay {
    let mut r = Replay::without_timeline();
    r.counting(false);
    r
}

/// What a VM's chunks held: sample records and the samples they weigh (their first values),
/// thread snapshots, and the newest snapshot resolved when it is due.
#[derive(Default)]
pub struct Seen {
    pub records: u64,
    pub samples: u64,
    pub snapshots: u64,
    pub newest: Option<Snapshot>,
}

impl Streams {
    /// Applies chunk(s) `chunk` of `vm` (each decoded once, here).
    pub fn apply(&self, store: &Store, vm: u64, chunk: &[u8]) -> Seen {
        let mut seen = Seen::default();
        let mut decoded = Vec::new();
        let mut rest = chunk;
        while let Framed::Chunk(payload, n) = records::next_chunk(rest) {
            rest = &rest[n..];
            if let Ok(d) = records::body(payload).and_then(|b| records::decode(&b)) {
                decoded.push(d);
            }
        }
        (seen.records, seen.samples) = records::merge::weight(&decoded);
        seen.snapshots = decoded
            .iter()
            .flat_map(|(_, rs)| rs)
            .filter(|r| matches!(r, records::Record::Threads(_)))
            .count() as u64;
        let entry = self.vms.lock().unwrap().entry(vm).or_default().clone();
        let mut s = entry.lock().unwrap();
        if s.over {
            return seen;
        }
        if crate::store::starts_stream(chunk) || s.replay.is_none() {
            let mut replay = muted();
            if !crate::store::starts_stream(chunk) && s.applied == 0 {
                // The stream went on before this collector started: its earlier chunks are in
                // the store.
                match store.stream_chunks(vm) {
                    Ok(stored) => {
                        for c in stored {
                            if crate::store::starts_stream(&c) {
                                replay = muted();
                            }
                            let _ = records::replay::apply_all(&mut replay, &c);
                        }
                    }
                    Err(e) => eprintln!("jvmprof serve: cannot read the stream of VM {vm}: {e}"),
                }
            }
            s.replay = Some(replay);
        }
        s.applied += 1;
        let Some(replay) = s.replay.as_mut() else {
            return seen;
        };
        let mut newest: Option<ThreadsAt> = None;
        for (head, rs) in decoded {
            if let Err(e) = replay.apply(head, rs) {
                eprintln!(
                    "jvmprof serve: the stream of VM {vm} is inconsistent ({e}); its snapshots are not shown until it starts again"
                );
                s.replay = None;
                return seen;
            }
            if let Some(t) = replay.threads().last() {
                newest = Some(t.clone());
            }
        }
        if held(replay.profile()) > MAX_STREAM_BYTES {
            eprintln!(
                "jvmprof serve: the stream of VM {vm} holds more than {} MiB; its snapshots are counted, not shown",
                MAX_STREAM_BYTES >> 20
            );
            s.replay = None;
            s.over = true;
            return seen;
        }
        let due = s.resolved.is_none_or(|t| t.elapsed() >= RESOLVE_EVERY);
        if let Some(t) = newest.filter(|_| due) {
            s.resolved = Some(Instant::now());
            seen.newest = s.replay.as_ref().map(|r| resolve(r.profile(), t));
        }
        seen
    }

    /// Forgets a deleted VM.
    pub fn remove(&self, vm: u64) {
        self.vms.lock().unwrap().remove(&vm);
    }
}

/// A snapshot with its stacks as frames (top first, as the live view shows them).
fn resolve(p: &Profile, t: ThreadsAt) -> Snapshot {
    Snapshot {
        time_unix_ms: t.time_unix_ms,
        threads: t
            .threads
            .into_iter()
            .map(|th| ThreadDump {
                frames: p
                    .stacks
                    .frames(th.stack)
                    .iter()
                    .rev()
                    .map(|f| p.frames[*f as usize].clone())
                    .collect(),
                id: th.id,
                name: th.name,
                group: th.group,
                daemon: th.daemon,
                state: th.state,
                order: th.order,
            })
            .collect(),
    }
}
