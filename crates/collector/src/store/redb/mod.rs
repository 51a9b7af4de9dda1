//! Embedded storage (redb, one file under `--data`): the VMs, every received sample batch and the
//! latest thread snapshot of each VM. One writer thread commits whatever has queued up in one
//! transaction (group commit, fsync per transaction), so many agents cost few fsyncs; a
//! [`super::Store::barrier`] returns once everything queued before it is durable. The same thread
//! keeps the store small ([`super::Store::maintain`]): batches older than the rollup age are merged into
//! one profile per VM and minute, so a query over a day reads at most 1,440 of them, and data
//! and VMs older than the retention are deleted.

use super::backend::{Backend, Pending, VmSamples};
use super::merge::{builder_like, merge_stacks};
use super::queue::{Job, Ledger, Queue, Write, Writes};
use super::types::{Maintained, Retention, VmRecord, create_private_dir};
use jvmprof_profile::{Frame, Metric, Profile, ProfileBuilder};
use jvmprof_proto::Snapshot;
use redb::{Database, ReadableTable, ReadableTableMetadata, TableDefinition};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;

/// redb's page cache.
const CACHE_BYTES: usize = 64 << 20;

const VMS: TableDefinition<u64, &[u8]> = TableDefinition::new("vms");
/// (vm, frame id) → a frame: each VM's frame dictionary, so a batch stores frame ids only.
const FRAMES: TableDefinition<(u64, u32), &[u8]> = TableDefinition::new("frames");
/// (vm, sequence) → a received sample batch (a profile whose stacks hold dictionary ids and
/// whose own frame list is empty).
const BATCHES: TableDefinition<(u64, u64), &[u8]> = TableDefinition::new("batches");
/// (vm, minute since the epoch) → the VM's batches of that minute merged into one (same
/// encoding as a batch; its time is the minute's start): what batches become after the rollup
/// age.
const ROLLUPS: TableDefinition<(u64, u64), &[u8]> = TableDefinition::new("rollups");
const MINUTE_MS: u64 = 60_000;
/// Most batches one maintenance pass rolls up (one transaction); the rest wait for the next.
const MAX_ROLLUP_BATCHES: usize = 20_000;
const SNAPSHOTS: TableDefinition<u64, &[u8]> = TableDefinition::new("snapshots");
/// vm → seq of the newest stored batch (committed with the batch, so a re-sent batch is known).
const SEQS: TableDefinition<u64, u64> = TableDefinition::new("seqs");
/// "version" → [`STORE_VERSION`], the encoding of the stored batches; "next_vm_id" → the id
/// the next new VM gets (ids are never reused, also after a VM is deleted).
const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
/// Version of the stored batches' encoding: 2 since profiles keep their stacks as a tree
/// (`jvmprof_profile::Stacks`). A store from before (no version) holding batches is refused
/// with a message, not read as garbage.
const STORE_VERSION: u64 = 2;

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

/// A stored sample batch.
#[derive(Serialize, Deserialize)]
struct Batch {
    time_unix_ms: u64,
    profile: StoredProfile,
}

/// A batch's profile as stored: a [`Profile`] without its timeline (a batch's samples are
/// timed by the batch), field for field as `Profile` was when store format 2 began, so the
/// encoding (postcard is positional) stays format 2.
#[derive(Serialize, Deserialize)]
struct StoredProfile {
    meta: jvmprof_profile::Meta,
    frames: Vec<Frame>,
    stacks: jvmprof_profile::Stacks,
    threads: Vec<jvmprof_profile::Thread>,
    samples: Vec<jvmprof_profile::Sample>,
}

impl From<StoredProfile> for Profile {
    fn from(p: StoredProfile) -> Profile {
        Profile {
            meta: p.meta,
            frames: p.frames,
            stacks: p.stacks,
            threads: p.threads,
            samples: p.samples,
            timeline: Vec::new(),
        }
    }
}

impl From<Profile> for StoredProfile {
    fn from(p: Profile) -> StoredProfile {
        StoredProfile {
            meta: p.meta,
            frames: p.frames,
            stacks: p.stacks,
            threads: p.threads,
            samples: p.samples,
        }
    }
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

fn encode<T: Serialize>(v: &T) -> Vec<u8> {
    postcard::to_stdvec(v).unwrap_or_default()
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
        let has_batches = w.open_table(BATCHES)?.len()? > 0;
        w.open_table(SNAPSHOTS)?;
        w.open_table(SEQS)?;
        w.open_table(FRAMES)?;
        w.open_table(ROLLUPS)?;
        {
            let mut meta = w.open_table(META)?;
            let version = meta.get("version")?.map(|v| v.value());
            match version {
                Some(STORE_VERSION) => {}
                None if !has_batches => {
                    meta.insert("version", STORE_VERSION)?;
                }
                v => anyhow::bail!(
                    "{} holds samples in store format {} and this collector reads format \
                     {STORE_VERSION}; move it away or pick another --data directory",
                    path.display(),
                    v.unwrap_or(1)
                ),
            }
        }
        w.commit()?;
        let db = Arc::new(db);
        let mut seq = {
            let r = db.begin_read()?;
            let t = r.open_table(BATCHES)?;
            let mut max = 0;
            for e in t.iter()? {
                max = max.max(e?.0.value().1 + 1);
            }
            max
        };
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
                let mut dicts: HashMap<u64, HashMap<Frame, u32>> = HashMap::new();
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
                    if let Err(e) = commit(&wdb, &mut seq, &mut dicts, &ledger, writes) {
                        eprintln!("jvmprof serve: storage write failed: {e}");
                        // The dictionaries may hold ids of the failed transaction: reload.
                        dicts.clear();
                    }
                    for chore in chores {
                        match chore {
                            Chore::Maintain {
                                now_ms,
                                retention,
                                connected,
                                reply,
                            } => {
                                let done = maintain(&wdb, now_ms, retention, &connected);
                                if let Ok(done) = &done {
                                    for vm in &done.removed_vms {
                                        dicts.remove(vm);
                                        ledger.forget(*vm);
                                    }
                                }
                                let _ = reply.send(done);
                            }
                            Chore::DeleteVm { vm, reply } => {
                                let done = (|| {
                                    let w = wdb.begin_write()?;
                                    delete_vm(&w, vm)?;
                                    w.commit()?;
                                    anyhow::Ok(())
                                })();
                                dicts.remove(&vm);
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

    /// The samples of `vm` in `[from, to]` merged, if any batch or rollup is stored there.
    fn vm_samples(&self, vm: u64, from: u64, to: u64) -> anyhow::Result<Option<VmSamples>> {
        let r = self.db.begin_read()?;
        let mut merger = Merger::new(dictionary(&r.open_table(FRAMES)?, vm)?);
        let (mut first, mut last) = (u64::MAX, 0);
        for_each_stored(&r, vm, from, to, |batch| {
            first = first.min(batch.time_unix_ms);
            last = last.max(batch.time_unix_ms);
            merger.add(batch.profile)
        })?;
        Ok(merger.merged.map(|b| VmSamples {
            profile: b.finish(),
            first,
            last,
        }))
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

    /// One point per batch or rollup.
    fn series(&self, vm: u64, from: u64, to: u64) -> anyhow::Result<Vec<(u64, u64, u64)>> {
        let r = self.db.begin_read()?;
        let mut out = Vec::new();
        for_each_stored(&r, vm, from, to, |batch| {
            let p = &batch.profile;
            let at = |m: Metric| p.meta.metrics.iter().position(|x| *x == m);
            let sum = |i: Option<usize>| {
                i.map_or(0u64, |i| {
                    p.samples.iter().fold(0u64, |a, s| {
                        a.saturating_add(s.values.get(i).copied().unwrap_or(0))
                    })
                })
            };
            let samples = sum(at(Metric::Samples));
            let ns = match at(Metric::Ns) {
                Some(i) => sum(Some(i)),
                None => samples.saturating_mul(p.meta.interval_ns),
            };
            out.push((batch.time_unix_ms, samples, ns));
            Ok(())
        })?;
        out.sort_by_key(|x| x.0);
        Ok(out)
    }

    fn samples(&self, vms: &[VmRecord], from: u64, to: u64) -> anyhow::Result<Vec<VmSamples>> {
        let mut out = Vec::new();
        for vm in vms {
            out.extend(self.vm_samples(vm.id, from, to)?);
        }
        Ok(out)
    }
}

/// The frame dictionary of `vm`: index = dictionary id.
fn dictionary(
    frames: &impl ReadableTable<(u64, u32), &'static [u8]>,
    vm: u64,
) -> anyhow::Result<Vec<Frame>> {
    let mut dict = Vec::new();
    for e in frames.range((vm, 0)..=(vm, u32::MAX))? {
        dict.push(postcard::from_bytes(e?.1.value())?);
    }
    Ok(dict)
}

/// The time of a stored batch or rollup, without decoding the rest (it is the first field).
fn stored_time(bytes: &[u8]) -> anyhow::Result<u64> {
    Ok(postcard::take_from_bytes::<u64>(bytes)?.0)
}

/// Calls `f` with every rollup and batch of `vm` in `[from, to]` (Unix ms; a rollup is in when
/// its minute overlaps the range): rollups first, oldest first, then the batches not yet
/// rolled up.
fn for_each_stored(
    r: &redb::ReadTransaction,
    vm: u64,
    from: u64,
    to: u64,
    mut f: impl FnMut(Batch) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let rollups = r.open_table(ROLLUPS)?;
    for e in rollups.range((vm, from / MINUTE_MS)..=(vm, to / MINUTE_MS))? {
        f(postcard::from_bytes(e?.1.value())?)?;
    }
    let batches = r.open_table(BATCHES)?;
    for e in batches.range((vm, 0)..=(vm, u64::MAX))? {
        let (_, v) = e?;
        let time = stored_time(v.value())?;
        if time < from || time > to {
            continue;
        }
        f(postcard::from_bytes(v.value())?)?;
    }
    Ok(())
}

/// Merges stored profiles (frames as dictionary ids) into one profile with real frames.
struct Merger {
    dict: Vec<Frame>,
    /// Dictionary id → the merged profile's frame id, filled as frames are used.
    ids: Vec<Option<u32>>,
    merged: Option<ProfileBuilder>,
}

impl Merger {
    fn new(dict: Vec<Frame>) -> Merger {
        Merger {
            ids: vec![None; dict.len()],
            dict,
            merged: None,
        }
    }

    fn add(&mut self, stored: StoredProfile) -> anyhow::Result<()> {
        let b = self
            .merged
            .get_or_insert_with(|| builder_like(&stored.meta));
        let mut p = Profile::from(stored);
        let (dict, ids) = (&self.dict, &mut self.ids);
        p.stacks.map_frames(|f| {
            let i = f as usize;
            let frame = dict.get(i).ok_or_else(|| {
                anyhow::anyhow!("stored batch refers to frame {i} of {}", dict.len())
            })?;
            anyhow::Ok(*ids[i].get_or_insert_with(|| b.frame(frame.clone())))
        })?;
        merge_stacks(b, &p);
        Ok(())
    }

    /// The merged profile back in dictionary ids, as stored.
    fn finish_stored(self) -> Option<StoredProfile> {
        let mut p = self.merged?.finish();
        // The builder's frame id → dictionary id.
        let mut back = vec![0u32; p.frames.len()];
        for (dict_id, id) in self.ids.iter().enumerate() {
            if let Some(id) = id {
                back[*id as usize] = dict_id as u32;
            }
        }
        p.frames.clear();
        p.stacks.map_frames(|f| anyhow::Ok(back[f as usize])).ok()?;
        Some(StoredProfile::from(p))
    }
}

/// Deletes `vm` and everything stored of it, in transaction `w`.
fn delete_vm(w: &redb::WriteTransaction, vm: u64) -> anyhow::Result<()> {
    w.open_table(VMS)?.remove(vm)?;
    w.open_table(SNAPSHOTS)?.remove(vm)?;
    w.open_table(SEQS)?.remove(vm)?;
    w.open_table(FRAMES)?
        .retain_in((vm, 0)..=(vm, u32::MAX), |_, _| false)?;
    w.open_table(BATCHES)?
        .retain_in((vm, 0)..=(vm, u64::MAX), |_, _| false)?;
    w.open_table(ROLLUPS)?
        .retain_in((vm, 0)..=(vm, u64::MAX), |_, _| false)?;
    Ok(())
}

/// One maintenance pass (see [`super::Store::maintain`]), in one transaction.
fn maintain(
    db: &Database,
    now: u64,
    retention: Retention,
    connected: &HashSet<u64>,
) -> anyhow::Result<Maintained> {
    let mut done = Maintained::default();
    let w = db.begin_write()?;
    {
        let rollup_before = now.saturating_sub(retention.rollup_after.as_millis() as u64);
        let mut batches = w.open_table(BATCHES)?;
        let mut rollups = w.open_table(ROLLUPS)?;
        let frames = w.open_table(FRAMES)?;
        // The batches to roll up, by VM and minute.
        let mut groups: BTreeMap<(u64, u64), Vec<(u64, u64)>> = BTreeMap::new();
        for e in batches.iter()? {
            let (k, v) = e?;
            let time = stored_time(v.value())?;
            if time >= rollup_before {
                continue;
            }
            if done.rolled_up == MAX_ROLLUP_BATCHES {
                done.more = true;
                break;
            }
            done.rolled_up += 1;
            groups
                .entry((k.value().0, time / MINUTE_MS))
                .or_default()
                .push(k.value());
        }
        let mut dicts: HashMap<u64, Vec<Frame>> = HashMap::new();
        for ((vm, minute), keys) in groups {
            let dict = match dicts.get(&vm) {
                Some(d) => d.clone(),
                None => {
                    let d = dictionary(&frames, vm)?;
                    dicts.insert(vm, d.clone());
                    d
                }
            };
            let mut merger = Merger::new(dict);
            if let Some(old) = rollups.get((vm, minute))? {
                merger.add(postcard::from_bytes::<Batch>(old.value())?.profile)?;
            }
            for key in keys {
                if let Some(v) = batches.remove(key)? {
                    merger.add(postcard::from_bytes::<Batch>(v.value())?.profile)?;
                }
            }
            if let Some(profile) = merger.finish_stored() {
                let bytes = encode(&Batch {
                    time_unix_ms: minute * MINUTE_MS,
                    profile,
                });
                rollups.insert((vm, minute), bytes.as_slice())?;
                done.rollups += 1;
            }
        }
        if let Some(keep) = retention.keep {
            let cutoff = now.saturating_sub(keep.as_millis() as u64);
            let mut expired = 0;
            batches.retain(|_, v| {
                let keep = stored_time(v).is_ok_and(|t| t >= cutoff);
                expired += usize::from(!keep);
                keep
            })?;
            rollups.retain(|(_, minute), _| {
                let keep = (minute + 1) * MINUTE_MS > cutoff;
                expired += usize::from(!keep);
                keep
            })?;
            done.expired = expired;
            let vms = w.open_table(VMS)?;
            for e in vms.iter()? {
                let (k, v) = e?;
                let record = decode_vm(v.value())?;
                if record.last_seen < cutoff && !connected.contains(&k.value()) {
                    done.removed_vms.push(k.value());
                }
            }
        }
    }
    for vm in &done.removed_vms {
        delete_vm(&w, *vm)?;
    }
    w.commit()?;
    Ok(done)
}

fn commit(
    db: &Database,
    seq: &mut u64,
    dicts: &mut HashMap<u64, HashMap<Frame, u32>>,
    ledger: &Ledger,
    writes: Vec<Write>,
) -> anyhow::Result<()> {
    let mut barriers = Vec::new();
    let mut newest: HashMap<u64, u64> = HashMap::new();
    let w = db.begin_write()?;
    {
        let mut vms = w.open_table(VMS)?;
        let mut batches = w.open_table(BATCHES)?;
        let mut snapshots = w.open_table(SNAPSHOTS)?;
        let mut seqs = w.open_table(SEQS)?;
        let mut frames = w.open_table(FRAMES)?;
        let mut meta = w.open_table(META)?;
        for write in writes {
            match write {
                Write::Vm(vm) => {
                    vms.insert(vm.id, encode(&vm).as_slice())?;
                    let next = meta.get("next_vm_id")?.map_or(1, |v| v.value());
                    if vm.id >= next {
                        meta.insert("next_vm_id", vm.id + 1)?;
                    }
                }
                Write::Batch {
                    vm,
                    seq: batch_seq,
                    time_unix_ms,
                    mut profile,
                } => {
                    seqs.insert(vm, batch_seq)?;
                    newest.insert(vm, batch_seq);
                    let dict = match dicts.entry(vm) {
                        std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
                        std::collections::hash_map::Entry::Vacant(e) => {
                            let mut d = HashMap::new();
                            for f in frames.range((vm, 0)..=(vm, u32::MAX))? {
                                let (k, v) = f?;
                                d.insert(postcard::from_bytes(v.value())?, k.value().1);
                            }
                            e.insert(d)
                        }
                    };
                    let mut global = Vec::with_capacity(profile.frames.len());
                    for f in std::mem::take(&mut profile.frames) {
                        let next = dict.len() as u32;
                        let id = match dict.get(&f) {
                            Some(id) => *id,
                            None => {
                                frames.insert((vm, next), encode(&f).as_slice())?;
                                dict.insert(f, next);
                                next
                            }
                        };
                        global.push(id);
                    }
                    profile
                        .stacks
                        .map_frames(|f| anyhow::Ok(global[f as usize]))?;
                    let bytes = encode(&Batch {
                        time_unix_ms,
                        profile: StoredProfile::from(*profile),
                    });
                    batches.insert((vm, *seq), bytes.as_slice())?;
                    *seq += 1;
                }
                Write::Snapshot { vm, snapshot } => {
                    snapshots.insert(vm, encode(&snapshot).as_slice())?;
                }
                Write::Barrier(tx) => barriers.push(tx),
            }
        }
    }
    w.commit()?;
    ledger.commit(newest);
    for b in barriers {
        let _ = b.send(());
    }
    Ok(())
}

#[cfg(test)]
mod tests;
