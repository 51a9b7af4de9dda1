//! The queue in front of a store's writer thread, the same for every store: connections put VMs,
//! sample batches and snapshots in it and never wait for storage (unless the backlog grows, see
//! [`Queue::backlog`]); a barrier resolves once everything queued before it is written; the
//! writer records which batches are committed, so they can be acknowledged to agents.

use crate::store::VmRecord;
use jvmprof_profile::Profile;
use jvmprof_proto::Snapshot;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};

/// One queued write; `C` is a store's own chores (redb's maintenance and deletions), kept in the
/// same queue so they run after the writes before them.
pub enum Write<C> {
    Vm(VmRecord),
    Batch {
        vm: u64,
        seq: u64,
        time_unix_ms: u64,
        profile: Box<Profile>,
    },
    Snapshot {
        vm: u64,
        snapshot: Snapshot,
    },
    Barrier(tokio::sync::oneshot::Sender<()>),
    Chore(C),
}

pub struct Queue<C> {
    tx: mpsc::Sender<Write<C>>,
    ledger: Ledger,
}

impl<C> Clone for Queue<C> {
    fn clone(&self) -> Queue<C> {
        Queue {
            tx: self.tx.clone(),
            ledger: self.ledger.clone(),
        }
    }
}

/// What the queue and its writer both keep: the backlog and the committed seqs. The writer
/// holds this, not the queue, so that dropping the last queue ends the writer (and closes the
/// store).
#[derive(Clone)]
pub struct Ledger {
    /// Writes queued and not yet handled by the writer.
    backlog: Arc<AtomicUsize>,
    /// vm → seq of the newest batch known to be committed.
    committed: Arc<Mutex<HashMap<u64, u64>>>,
}

impl<C> Queue<C> {
    /// A queue whose batches up to `committed` are stored already, its receiving end and the
    /// ledger for the writer thread.
    pub fn new(committed: HashMap<u64, u64>) -> (Queue<C>, mpsc::Receiver<Write<C>>, Ledger) {
        let (tx, rx) = mpsc::channel();
        let ledger = Ledger {
            backlog: Arc::new(AtomicUsize::new(0)),
            committed: Arc::new(Mutex::new(committed)),
        };
        let queue = Queue {
            tx,
            ledger: ledger.clone(),
        };
        (queue, rx, ledger)
    }

    pub fn send(&self, w: Write<C>) {
        self.ledger.backlog.fetch_add(1, Ordering::Relaxed);
        if self.tx.send(w).is_err() {
            self.ledger.backlog.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Writes queued but not yet handled (connections wait for a barrier when it grows).
    pub fn backlog(&self) -> usize {
        self.ledger.backlog.load(Ordering::Relaxed)
    }

    /// The seq of the newest committed batch of `vm` (0: none).
    pub fn committed(&self, vm: u64) -> u64 {
        self.ledger.committed(vm)
    }

    /// Forgets a deleted VM's batches.
    pub fn forget(&self, vm: u64) {
        self.ledger.forget(vm);
    }

    pub fn put_vm(&self, vm: VmRecord) {
        self.send(Write::Vm(vm));
    }

    pub fn put_batch(&self, vm: u64, seq: u64, time_unix_ms: u64, profile: Profile) {
        self.send(Write::Batch {
            vm,
            seq,
            time_unix_ms,
            profile: Box::new(profile),
        });
    }

    pub fn put_snapshot(&self, vm: u64, snapshot: Snapshot) {
        self.send(Write::Snapshot { vm, snapshot });
    }

    /// Resolves once everything queued before it is written (or could not be).
    pub async fn barrier(&self) {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.send(Write::Barrier(tx));
        let _ = rx.await;
    }
}

impl Ledger {
    /// The writer handled `n` writes.
    pub fn handled(&self, n: usize) {
        self.backlog.fetch_sub(n, Ordering::Relaxed);
    }

    /// The seq of the newest committed batch of `vm` (0: none).
    pub fn committed(&self, vm: u64) -> u64 {
        self.committed
            .lock()
            .unwrap()
            .get(&vm)
            .copied()
            .unwrap_or(0)
    }

    /// Records batches as committed (the newest seq per VM).
    pub fn commit(&self, newest: HashMap<u64, u64>) {
        let mut c = self.committed.lock().unwrap();
        for (vm, seq) in newest {
            let e = c.entry(vm).or_insert(0);
            *e = (*e).max(seq);
        }
    }

    /// Forgets a deleted VM's batches.
    pub fn forget(&self, vm: u64) {
        self.committed.lock().unwrap().remove(&vm);
    }
}
