//! Analyses (xdProf's "analysis tools"): every connected VM's traces (its record chunks, as they
//! came, and its thread snapshots) go to each analysis through the calls of [`Analysis`]. Built
//! in: the live view ([`LiveView`], latest snapshot of each VM and its recent thread states,
//! served by the API), the stored snapshots ([`Snapshots`], each VM's latest at most once a
//! second, so the live view survives a restart), and call graphs ([`CallGraphs`], a Graphviz
//! `.dot` per VM written when it disconnects). Storing the records is not an analysis: the
//! connection does it before any analysis sees them.

use crate::store::{Store, VmRecord};
use jvmprof_profile::ThreadState;
use jvmprof_proto::Snapshot;
use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What a VM sent.
#[derive(Debug)]
pub enum Trace {
    /// Framed record chunks (`jvmprof_profile::records`), as stored.
    Records {
        /// The chunk's number (1, 2, ...), unique per VM.
        seq: u64,
        time_unix_ms: u64,
        chunk: Arc<[u8]>,
    },
    /// The stacks of all threads.
    Snapshot(Snapshot),
}

/// A pluggable analysis. Calls come from the connection tasks, so they must be quick: hand heavy
/// work to a thread.
pub trait Analysis: Send + Sync {
    /// A VM connected (or reconnected: the id stays the same).
    fn add_connection(&self, vm: &VmRecord);
    /// A VM sent a trace.
    fn add_trace(&self, vm: u64, trace: &Trace);
    /// The VM's connection ended; everything it sent has been stored.
    fn remove_connection(&self, vm: u64);
    /// The VM was deleted (by the API or for its age): drop what is kept of it.
    fn remove_vm(&self, _vm: u64) {}
}

/// The latest snapshot of each VM (loaded from the store at start).
#[derive(Default)]
pub struct LiveView {
    latest: Mutex<HashMap<u64, Snapshot>>,
    /// vm → the thread states of its last [`HISTORY`] snapshots, oldest first.
    history: Mutex<HashMap<u64, VecDeque<StateRow>>>,
}

/// One snapshot's thread states: its time and (thread id, state) of at most
/// [`HISTORY_THREADS`] threads.
pub type StateRow = (u64, Vec<(i64, ThreadState)>);

/// Snapshots of thread states kept per VM for the UI's state timeline (one a second: two
/// minutes), and threads per snapshot, so the history stays bounded whatever a VM sends.
pub const HISTORY: usize = 120;
pub const HISTORY_THREADS: usize = 2000;

impl LiveView {
    pub fn load(store: &Store) -> anyhow::Result<LiveView> {
        Ok(LiveView {
            latest: Mutex::new(store.snapshots()?.into_iter().collect()),
            history: Mutex::new(HashMap::new()),
        })
    }

    pub fn latest(&self, vm: u64) -> Option<Snapshot> {
        self.latest.lock().unwrap().get(&vm).cloned()
    }

    /// The VM's recent thread states, oldest first (empty before its first snapshot since
    /// this collector started).
    pub fn history(&self, vm: u64) -> Vec<StateRow> {
        self.history
            .lock()
            .unwrap()
            .get(&vm)
            .map(|h| h.iter().cloned().collect())
            .unwrap_or_default()
    }
}

impl Analysis for LiveView {
    fn add_connection(&self, _vm: &VmRecord) {}

    fn add_trace(&self, vm: u64, trace: &Trace) {
        if let Trace::Snapshot(s) = trace {
            let row: Vec<(i64, ThreadState)> = s
                .threads
                .iter()
                .take(HISTORY_THREADS)
                .map(|t| (t.id, t.state))
                .collect();
            let mut history = self.history.lock().unwrap();
            let h = history.entry(vm).or_default();
            if h.len() == HISTORY {
                h.pop_front();
            }
            h.push_back((s.time_unix_ms, row));
            drop(history);
            self.latest.lock().unwrap().insert(vm, s.clone());
        }
    }

    fn remove_connection(&self, _vm: u64) {}

    fn remove_vm(&self, vm: u64) {
        self.latest.lock().unwrap().remove(&vm);
        self.history.lock().unwrap().remove(&vm);
    }
}

/// Stores each VM's latest snapshot at most once per [`SNAPSHOT_EVERY`] and when it
/// disconnects, so the live view survives a restart.
pub struct Snapshots {
    pub store: Store,
    /// vm → when its snapshot was last stored, and the newest one not stored yet.
    snapshots: Mutex<HashMap<u64, (Instant, Option<Snapshot>)>>,
}

/// How often a VM's latest snapshot is written to storage while it is connected.
pub const SNAPSHOT_EVERY: Duration = Duration::from_secs(1);

impl Snapshots {
    pub fn new(store: Store) -> Snapshots {
        Snapshots {
            store,
            snapshots: Mutex::new(HashMap::new()),
        }
    }
}

impl Analysis for Snapshots {
    fn add_connection(&self, _vm: &VmRecord) {}

    fn add_trace(&self, vm: u64, trace: &Trace) {
        match trace {
            Trace::Records { .. } => {}
            Trace::Snapshot(s) => {
                let mut snaps = self.snapshots.lock().unwrap();
                let now = Instant::now();
                match snaps.get_mut(&vm) {
                    Some((last, pending)) if now.duration_since(*last) < SNAPSHOT_EVERY => {
                        *pending = Some(s.clone());
                    }
                    _ => {
                        snaps.insert(vm, (now, None));
                        self.store.put_snapshot(vm, s.clone());
                    }
                }
            }
        }
    }

    fn remove_connection(&self, vm: u64) {
        if let Some((_, Some(s))) = self.snapshots.lock().unwrap().remove(&vm) {
            self.store.put_snapshot(vm, s);
        }
    }

    fn remove_vm(&self, vm: u64) {
        self.snapshots.lock().unwrap().remove(&vm);
    }
}

/// Writes `DIR/callgraphs/vm-ID.dot` (the VM's whole profile) when a VM disconnects.
pub struct CallGraphs {
    pub store: Store,
    pub dir: PathBuf,
    pub vms: std::sync::Arc<crate::registry::Registry>,
}

impl Analysis for CallGraphs {
    fn add_connection(&self, _vm: &VmRecord) {}

    fn add_trace(&self, _vm: u64, _trace: &Trace) {}

    fn remove_connection(&self, vm: u64) {
        let Some(record) = self.vms.record(vm) else {
            return;
        };
        let store = self.store.clone();
        let dir = self.dir.clone();
        std::thread::spawn(move || {
            let result = (|| -> anyhow::Result<PathBuf> {
                let profile = store.profile(&record, 0, u64::MAX)?;
                crate::store::create_private_dir(&dir)?;
                let path = dir.join(format!("vm-{vm}.dot"));
                let mut bytes = Vec::new();
                jvmprof_profile::dot::write(&profile, &Default::default(), &mut bytes)?;
                std::fs::write(&path, bytes)?;
                Ok(path)
            })();
            if let Err(e) = result {
                eprintln!("jvmprof serve: call graph of VM {vm}: {e}");
            }
        });
    }

    fn remove_vm(&self, vm: u64) {
        let _ = std::fs::remove_file(self.dir.join(format!("vm-{vm}.dot")));
    }
}
