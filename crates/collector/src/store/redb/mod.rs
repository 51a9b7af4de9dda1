//! Embedded storage (redb, one file under `--data`): the VMs, every record chunk each agent sent,
//! as it came, and the latest thread snapshot of each VM. One writer thread commits whatever has
//! queued up in one transaction (group commit, fsync per transaction), so many agents cost few
//! fsyncs; a [`super::Store::barrier`] returns once everything queued before it is durable. The
//! same thread keeps the store small ([`super::Store::maintain`], in [`chunks`]): a VM's chunks
//! older than the rollup age are merged into one per minute (built from their records, ids
//! kept), so a query over a day reads at most 1,440 of them; chunks older than the retention
//! are thinned to the definitions later chunks refer to; VMs older than it are deleted.
//!
//! A query replays the VM's chunks in order ([`super::replay::VmReplay`]): the same replay
//! that reads a native file.

mod chunks;

use super::backend::{Backend, Pending, VmSamples};
use super::queue::{Job, Queue, Writes};
use super::replay::VmReplay;
use super::types::{Maintained, Retention, VmRecord, create_private_dir};
use jvmprof_proto::Snapshot;
use redb::{Database, ReadableTable, ReadableTableMetadata, TableDefinition};
use serde::Deserialize;
use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;

/// redb's page cache.
const CACHE_BYTES: usize = 64 << 20;

const VMS: TableDefinition<u64, &[u8]> = TableDefinition::new("vms");
/// (vm, seq) → a stored chunk ([`chunks::Stored`]: the times it covers and the framed record
/// chunks as the agent sent them, or a rollup of several).
const CHUNKS: TableDefinition<(u64, u64), &[u8]> = TableDefinition::new("chunks");
/// (vm, seq) → the bytes of a chunk too long to keep in [`CHUNKS`] (see `chunks::INLINE_MAX`).
const LARGE: TableDefinition<(u64, u64), &[u8]> = TableDefinition::new("large");
/// vm → the seq up to which the VM's chunks were rolled up.
const ROLLED: TableDefinition<u64, u64> = TableDefinition::new("rolled");
const MINUTE_MS: u64 = 60_000;
/// Most chunks one maintenance pass rolls up (one transaction); the rest wait for the next.
const MAX_ROLLUP_CHUNKS: usize = 20_000;
const SNAPSHOTS: TableDefinition<u64, &[u8]> = TableDefinition::new("snapshots");
/// vm → seq of the newest stored chunk (committed with the chunk, so a re-sent one is known).
const SEQS: TableDefinition<u64, u64> = TableDefinition::new("seqs");
/// "version" → [`STORE_VERSION`], the encoding of what is stored; "next_vm_id" → the id the
/// next new VM gets (ids are never reused, also after a VM is deleted).
const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
/// Version of the store: 3 since it keeps record chunks. A store of an earlier version holding
/// samples is refused with a message, not read as garbage.
const STORE_VERSION: u64 = 3;
/// The tables of store versions 1 and 2 (sample batches as small profiles over a per-VM frame
/// dictionary), looked at only to refuse such a store.
const OLD_BATCHES: TableDefinition<(u64, u64), &[u8]> = TableDefinition::new("batches");

/// A VM record as collectors before labels stored it (postcard is positional: the record
/// without its last field).
#[derive(Deserialize)]
struct VmRecordWithoutLabels {
    id: u64,
    pid: u32,
    command: String,
    host: String,
    jvm: String,
    os: String,
    agent_version: String,
    start_unix_ms: u64,
    connected_at: u64,
    last_seen: u64,
    dropped_snapshots: u64,
    dropped_sample_batches: u64,
    dropped_samples: u64,
}

/// A stored VM record, in the current layout or the one before labels.
fn decode_vm(bytes: &[u8]) -> anyhow::Result<VmRecord> {
    if let Ok((vm, [])) = postcard::take_from_bytes::<VmRecord>(bytes) {
        return Ok(vm);
    }
    let (o, rest) = postcard::take_from_bytes::<VmRecordWithoutLabels>(bytes)?;
    anyhow::ensure!(
        rest.is_empty(),
        "a stored VM record has {} bytes too many",
        rest.len()
    );
    Ok(VmRecord {
        id: o.id,
        pid: o.pid,
        command: o.command,
        host: o.host,
        jvm: o.jvm,
        os: o.os,
        agent_version: o.agent_version,
        start_unix_ms: o.start_unix_ms,
        connected_at: o.connected_at,
        last_seen: o.last_seen,
        dropped_snapshots: o.dropped_snapshots,
        dropped_sample_batches: o.dropped_sample_batches,
        dropped_samples: o.dropped_samples,
        labels: Vec::new(),
    })
}

type Reply<T> = tokio::sync::oneshot::Sender<anyhow::Result<T>>;

/// What redb's writer does besides writing, in queue order.
enum Chore {
    Maintain {
        now_ms: u64,
        retention: Retention,
        connected: HashSet<u64>,
        reply: Reply<Maintained>,
    },
    DeleteVm {
        vm: u64,
        reply: Reply<()>,
    },
}

/// The embedded redb store (the default).
#[derive(Clone)]
pub struct Redb {
    db: Arc<Database>,
    queue: Queue<Chore>,
}

impl Redb {
    /// Opens (or creates) `dir/collector.redb` and starts the writer thread.
    pub fn open(dir: &Path) -> anyhow::Result<Redb> {
        create_private_dir(dir)?;
        let path = dir.join("collector.redb");
        // redb's default page cache is 1 GiB; the collector needs far less resident.
        let db = redb::Builder::new()
            .set_cache_size(CACHE_BYTES)
            .create(&path)
            .map_err(|e| anyhow::anyhow!("cannot open {}: {e}", path.display()))?;
        let w = db.begin_write()?;
        w.open_table(VMS)?;
        let has_old_batches = w.open_table(OLD_BATCHES)?.len()? > 0;
        w.open_table(CHUNKS)?;
        w.open_table(LARGE)?;
        w.open_table(ROLLED)?;
        w.open_table(SNAPSHOTS)?;
        w.open_table(SEQS)?;
        {
            let mut meta = w.open_table(META)?;
            let version = meta.get("version")?.map(|v| v.value());
            match version {
                Some(STORE_VERSION) => {}
                None if !has_old_batches => {
                    meta.insert("version", STORE_VERSION)?;
                }
                v => anyhow::bail!(
                    "{} holds samples in store format {} and this collector reads format \
                     {STORE_VERSION} (record chunks); move it away or pick another --data \
                     directory (the jvmprof that wrote it still reads it)",
                    path.display(),
                    v.unwrap_or(1)
                ),
            }
        }
        w.commit()?;
        let db = Arc::new(db);
        let mut committed = HashMap::new();
        {
            let r = db.begin_read()?;
            let t = r.open_table(SEQS)?;
            for e in t.iter()? {
                let (k, v) = e?;
                committed.insert(k.value(), v.value());
            }
        }
        let (queue, rx, ledger) = Queue::new(committed);
        let wdb = db.clone();
        std::thread::Builder::new()
            .name("store writer".into())
            .spawn(move || {
                while let Ok(first) = rx.recv() {
                    let mut jobs = vec![first];
                    while jobs.len() < 4096
                        && let Ok(j) = rx.try_recv()
                    {
                        jobs.push(j);
                    }
                    let n = jobs.len();
                    // Maintenance and deletions run after the writes queued with them, each
                    // in a transaction of its own.
                    let (mut writes, mut chores) = (Vec::with_capacity(n), Vec::new());
                    for job in jobs {
                        match job {
                            Job::Write(w) => writes.push(w),
                            Job::Chore(c) => chores.push(c),
                        }
                    }
                    if let Err(e) = chunks::commit(&wdb, &ledger, writes) {
                        eprintln!("jvmprof serve: storage write failed: {e}");
                    }
                    for chore in chores {
                        match chore {
                            Chore::Maintain {
                                now_ms,
                                retention,
                                connected,
                                reply,
                            } => {
                                let done = chunks::maintain(&wdb, now_ms, retention, &connected);
                                if let Ok(done) = &done {
                                    for vm in &done.removed_vms {
                                        ledger.forget(*vm);
                                    }
                                }
                                let _ = reply.send(done);
                            }
                            Chore::DeleteVm { vm, reply } => {
                                let done = (|| {
                                    let w = wdb.begin_write()?;
                                    chunks::delete_vm(&w, vm)?;
                                    w.commit()?;
                                    anyhow::Ok(())
                                })();
                                ledger.forget(vm);
                                let _ = reply.send(done);
                            }
                        }
                    }
                    ledger.handled(n);
                }
            })?;
        Ok(Redb { db, queue })
    }

    /// Replays `vm`'s chunks for `[from, to]`; `f` sees what each stored chunk added in the
    /// range, with its time.
    fn replay(
        &self,
        vm: u64,
        from: u64,
        to: u64,
        mut f: impl FnMut(u64, u64, u64),
    ) -> anyhow::Result<Option<VmSamples>> {
        let r = self.db.begin_read()?;
        let t = r.open_table(CHUNKS)?;
        let large = r.open_table(LARGE)?;
        let mut replay = VmReplay::new(from, to);
        for e in t.range((vm, 0)..=(vm, u64::MAX))? {
            let (k, v) = e?;
            let stored = chunks::Stored::read(v.value())?;
            let bytes = chunks::bytes_of(&stored, &large, k.value())?;
            let (samples, ns) = replay.add(stored.start, stored.end, &bytes)?;
            if stored.start <= to && stored.end >= from {
                f(stored.start, samples, ns);
            }
        }
        replay.finish()
    }

    /// Queues a chore for the writer; its answer.
    fn chore<T: Send + 'static>(&self, chore: impl FnOnce(Reply<T>) -> Chore) -> Pending<T> {
        let (reply, rx) = tokio::sync::oneshot::channel();
        self.queue.chore(chore(reply));
        Box::pin(async move {
            rx.await
                .map_err(|_| anyhow::anyhow!("the store writer has stopped"))?
        })
    }
}

impl Backend for Redb {
    fn queue(&self) -> &dyn Writes {
        &self.queue
    }

    fn vm_id_for(&self, _host: &str, _pid: u32, _start_unix_ms: u64) -> Option<u64> {
        None
    }

    fn is_shared(&self) -> bool {
        false
    }

    fn maintain(
        &self,
        now_ms: u64,
        retention: Retention,
        connected: HashSet<u64>,
    ) -> Pending<Maintained> {
        self.chore(|reply| Chore::Maintain {
            now_ms,
            retention,
            connected,
            reply,
        })
    }

    fn delete_vm(&self, vm: &VmRecord) -> Pending<()> {
        let vm = vm.id;
        self.chore(|reply| Chore::DeleteVm { vm, reply })
    }

    /// Above every id stored or ever deleted.
    fn next_vm_id(&self) -> anyhow::Result<u64> {
        let r = self.db.begin_read()?;
        let next = r
            .open_table(META)?
            .get("next_vm_id")?
            .map_or(1, |v| v.value());
        let max = r.open_table(VMS)?.last()?.map_or(0, |(k, _)| k.value());
        Ok(next.max(max + 1))
    }

    fn vms(&self) -> anyhow::Result<Vec<VmRecord>> {
        let r = self.db.begin_read()?;
        let t = r.open_table(VMS)?;
        let mut out = Vec::new();
        for e in t.iter()? {
            out.push(decode_vm(e?.1.value())?);
        }
        Ok(out)
    }

    fn snapshots(&self) -> anyhow::Result<Vec<(u64, Snapshot)>> {
        let r = self.db.begin_read()?;
        let t = r.open_table(SNAPSHOTS)?;
        let mut out = Vec::new();
        for e in t.iter()? {
            let (k, v) = e?;
            out.push((k.value(), postcard::from_bytes(v.value())?));
        }
        Ok(out)
    }

    fn stream_chunks(&self, vm: u64) -> anyhow::Result<Vec<Vec<u8>>> {
        let r = self.db.begin_read()?;
        let t = r.open_table(CHUNKS)?;
        let large = r.open_table(LARGE)?;
        let mut out = Vec::new();
        for e in t.range((vm, 0)..=(vm, u64::MAX))? {
            let (k, v) = e?;
            let stored = chunks::Stored::read(v.value())?;
            out.push(chunks::bytes_of(&stored, &large, k.value())?);
        }
        Ok(out)
    }

    /// One point per stored chunk or rollup.
    fn series(&self, vm: u64, from: u64, to: u64) -> anyhow::Result<Vec<(u64, u64, u64)>> {
        let mut out = Vec::new();
        self.replay(vm, from, to, |time, samples, ns| {
            out.push((time, samples, ns))
        })?;
        out.sort_by_key(|x| x.0);
        Ok(out)
    }

    fn samples(&self, vms: &[VmRecord], from: u64, to: u64) -> anyhow::Result<Vec<VmSamples>> {
        let mut out = Vec::new();
        for vm in vms {
            out.extend(self.replay(vm.id, from, to, |_, _, _| {})?);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests;
