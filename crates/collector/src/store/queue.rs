//! The queue in front of a store's writer thread, the same for every store: connections put VMs,
//! record chunks and snapshots in it and never wait for storage (unless the backlog grows, see
//! [`Ledger::backlog`]); a barrier resolves once everything queued before it is written; the
//! writer records which batches are committed, so they can be acknowledged to agents.

use super::types::VmRecord;
use jvmprof_proto::Snapshot;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};

/// One queued write, the same for every store.
pub enum Write {
    Vm(VmRecord),
    /// Framed record chunks (`jvmprof_profile::records`) of the VM's stream, numbered by the
    /// agent (`seq`, from 1); a chunk whose head has seq 0 starts a new stream.
    Chunk {
        vm: u64,
        seq: u64,
        time_unix_ms: u64,
        bytes: Arc<[u8]>,
    },
    Snapshot {
        vm: u64,
        snapshot: Snapshot,
    },
    Barrier(tokio::sync::oneshot::Sender<()>),
}

/// What a store's writer thread takes from its queue: a write, or one of the store's own chores
/// (`C`: redb's maintenance and deletions), kept in the same queue so it runs after the writes
/// before it. (A write is large beside ClickHouse's empty chores; it moves through the channel
/// once, so it is not boxed.)
#[allow(clippy::large_enum_variant)]
pub enum Job<C> {
    Write(Write),
    Chore(C),
}

pub struct Queue<C> {
    tx: mpsc::Sender<Job<C>>,
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
    /// Woken at every commit (connections then acknowledge at once).
    commits: Arc<tokio::sync::Notify>,
}

impl<C> Queue<C> {
    /// A queue whose batches up to `committed` are stored already, its receiving end and the
    /// ledger for the writer thread.
    pub fn new(committed: HashMap<u64, u64>) -> (Queue<C>, mpsc::Receiver<Job<C>>, Ledger) {
        let (tx, rx) = mpsc::channel();
        let ledger = Ledger {
            backlog: Arc::new(AtomicUsize::new(0)),
            committed: Arc::new(Mutex::new(committed)),
            commits: Arc::new(tokio::sync::Notify::new()),
        };
        let queue = Queue {
            tx,
            ledger: ledger.clone(),
        };
        (queue, rx, ledger)
    }

    fn send(&self, job: Job<C>) {
        self.ledger.backlog.fetch_add(1, Ordering::Relaxed);
        if self.tx.send(job).is_err() {
            self.ledger.backlog.fetch_sub(1, Ordering::Relaxed);
        }
    }

    pub fn chore(&self, c: C) {
        self.send(Job::Chore(c));
    }
}

/// What the store handle needs of a store's queue, whatever its chores.
pub trait Writes: Send + Sync {
    fn put(&self, w: Write);

    /// The backlog and each VM's newest committed batch.
    fn ledger(&self) -> &Ledger;
}

impl<C: Send> Writes for Queue<C> {
    fn put(&self, w: Write) {
        self.send(Job::Write(w));
    }

    fn ledger(&self) -> &Ledger {
        &self.ledger
    }
}

impl Ledger {
    /// Writes queued but not yet handled (connections wait for a barrier when it grows).
    pub fn backlog(&self) -> usize {
        self.backlog.load(Ordering::Relaxed)
    }

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

    /// Records batches as committed (the newest seq per VM) and wakes the connections.
    pub fn commit(&self, newest: HashMap<u64, u64>) {
        if newest.is_empty() {
            return;
        }
        let mut c = self.committed.lock().unwrap();
        for (vm, seq) in newest {
            let e = c.entry(vm).or_insert(0);
            *e = (*e).max(seq);
        }
        drop(c);
        self.commits.notify_waiters();
    }

    /// What wakes at every commit.
    pub fn commits(&self) -> Arc<tokio::sync::Notify> {
        self.commits.clone()
    }

    /// Forgets a deleted VM's batches.
    pub fn forget(&self, vm: u64) {
        self.committed.lock().unwrap().remove(&vm);
    }
}
