//! Embedded storage (redb, one file under `--data`): the VMs, every received sample batch and the
//! latest thread snapshot of each VM. One writer thread commits whatever has queued up in one
//! transaction (group commit, fsync per transaction), so many agents cost few fsyncs; a
//! [`Store::barrier`] returns once everything queued before it is durable. The same thread
//! keeps the store small ([`Store::maintain`]): batches older than the rollup age are merged into
//! one profile per VM and minute, so a query over a day reads at most 1,440 of them, and data
//! and VMs older than the retention are deleted.

use crate::queue::{Ledger, Queue};
use jvmprof_profile::{Frame, Meta, Profile, ProfileBuilder};
use jvmprof_proto::Snapshot;
use redb::{Database, ReadableTable, ReadableTableMetadata, TableDefinition};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

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

/// A VM as stored (and as the API shows it, with `connected` from the live registry).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VmRecord {
    pub id: u64,
    pub pid: u32,
    pub command: String,
    pub host: String,
    pub jvm: String,
    pub os: String,
    pub agent_version: String,
    pub start_unix_ms: u64,
    /// When the latest connection started, Unix ms.
    pub connected_at: u64,
    /// When the VM last sent anything, Unix ms.
    pub last_seen: u64,
    /// What the agent reported dropping while the collector was away (totals).
    pub dropped_snapshots: u64,
    pub dropped_sample_batches: u64,
    pub dropped_samples: u64,
    /// The labels the agent sent (`service` = `checkout`, ...), in its order.
    pub labels: Vec<(String, String)>,
}

impl VmRecord {
    /// Whether the VM has every one of `wanted` (KEY, VALUE) labels.
    pub fn has_labels(&self, wanted: &[(String, String)]) -> bool {
        wanted.iter().all(|w| self.labels.contains(w))
    }
}

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

/// How long the store keeps what.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Retention {
    /// Batches older than this are merged into per-minute rollups.
    pub rollup_after: Duration,
    /// Samples older than this are deleted, and VMs neither connected nor seen for this long
    /// with all their data; `None` keeps everything.
    pub keep: Option<Duration>,
}

impl Default for Retention {
    fn default() -> Retention {
        Retention {
            rollup_after: Duration::from_secs(600),
            keep: None,
        }
    }
}

/// What one maintenance pass did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Maintained {
    /// Batches merged into rollups, and the rollups written.
    pub rolled_up: usize,
    pub rollups: usize,
    /// Batches and rollups deleted for their age.
    pub expired: usize,
    /// VMs deleted with all their data.
    pub removed_vms: Vec<u64>,
    /// Old batches are left for another pass.
    pub more: bool,
}

type Reply<T> = tokio::sync::oneshot::Sender<anyhow::Result<T>>;

/// What redb's writer does besides writing, in queue order.
pub(crate) enum Chore {
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

type Write = crate::queue::Write<Chore>;

/// The embedded redb store (the default).
#[derive(Clone)]
pub struct Redb {
    db: Arc<Database>,
    pub(crate) queue: Queue<Chore>,
}

fn encode<T: Serialize>(v: &T) -> Vec<u8> {
    postcard::to_stdvec(v).unwrap_or_default()
}

/// Creates `dir` and its missing parents readable by this user only (mode 0700): profiles show
/// command lines, stacks and heap contents. An existing directory is left as it is.
pub(crate) fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
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
                    let mut writes = vec![first];
                    while writes.len() < 4096
                        && let Ok(w) = rx.try_recv()
                    {
                        writes.push(w);
                    }
                    let n = writes.len();
                    // Maintenance and deletions run after the writes queued with them, each
                    // in a transaction of its own.
                    let (writes, chores): (Vec<Write>, Vec<Write>) = writes
                        .into_iter()
                        .partition(|w| !matches!(w, Write::Chore(_)));
                    if let Err(e) = commit(&wdb, &mut seq, &mut dicts, &ledger, writes) {
                        eprintln!("jvmprof serve: storage write failed: {e}");
                        // The dictionaries may hold ids of the failed transaction: reload.
                        dicts.clear();
                    }
                    for chore in chores {
                        match chore {
                            Write::Chore(Chore::Maintain {
                                now_ms,
                                retention,
                                connected,
                                reply,
                            }) => {
                                let done = maintain(&wdb, now_ms, retention, &connected);
                                if let Ok(done) = &done {
                                    for vm in &done.removed_vms {
                                        dicts.remove(vm);
                                        ledger.forget(*vm);
                                    }
                                }
                                let _ = reply.send(done);
                            }
                            Write::Chore(Chore::DeleteVm { vm, reply }) => {
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
                            _ => {}
                        }
                    }
                    ledger.handled(n);
                }
            })?;
        Ok(Redb { db, queue })
    }

    /// Rolls up old batches and deletes expired data and VMs (not those in `connected`), as of
    /// `now_ms`, after every write queued before it.
    pub async fn maintain(
        &self,
        now_ms: u64,
        retention: Retention,
        connected: HashSet<u64>,
    ) -> anyhow::Result<Maintained> {
        let (reply, rx) = tokio::sync::oneshot::channel();
        self.queue.send(Write::Chore(Chore::Maintain {
            now_ms,
            retention,
            connected,
            reply,
        }));
        rx.await
            .map_err(|_| anyhow::anyhow!("the store writer has stopped"))?
    }

    /// Deletes a VM and everything stored of it.
    pub async fn delete_vm(&self, vm: u64) -> anyhow::Result<()> {
        let (reply, rx) = tokio::sync::oneshot::channel();
        self.queue.send(Write::Chore(Chore::DeleteVm { vm, reply }));
        rx.await
            .map_err(|_| anyhow::anyhow!("the store writer has stopped"))?
    }

    /// The id the next new VM gets: above every id stored or ever deleted.
    pub fn next_vm_id(&self) -> anyhow::Result<u64> {
        let r = self.db.begin_read()?;
        let next = r
            .open_table(META)?
            .get("next_vm_id")?
            .map_or(1, |v| v.value());
        let max = r.open_table(VMS)?.last()?.map_or(0, |(k, _)| k.value());
        Ok(next.max(max + 1))
    }

    pub fn vms(&self) -> anyhow::Result<Vec<VmRecord>> {
        let r = self.db.begin_read()?;
        let t = r.open_table(VMS)?;
        let mut out = Vec::new();
        for e in t.iter()? {
            out.push(decode_vm(e?.1.value())?);
        }
        Ok(out)
    }

    pub fn snapshots(&self) -> anyhow::Result<Vec<(u64, Snapshot)>> {
        let r = self.db.begin_read()?;
        let t = r.open_table(SNAPSHOTS)?;
        let mut out = Vec::new();
        for e in t.iter()? {
            let (k, v) = e?;
            out.push((k.value(), postcard::from_bytes(v.value())?));
        }
        Ok(out)
    }

    /// What each of the VM's batches with a time in `[from, to]` (Unix ms) holds, in time
    /// order: (time, samples, CPU or wall ns: the `ns` metric, else samples × interval).
    pub fn series(&self, vm: u64, from: u64, to: u64) -> anyhow::Result<Vec<(u64, u64, u64)>> {
        let r = self.db.begin_read()?;
        let mut out = Vec::new();
        for_each_stored(&r, vm, from, to, |batch| {
            let p = &batch.profile;
            let at = |m: jvmprof_profile::Metric| p.meta.metrics.iter().position(|x| *x == m);
            let sum = |i: Option<usize>| {
                i.map_or(0u64, |i| {
                    p.samples.iter().fold(0u64, |a, s| {
                        a.saturating_add(s.values.get(i).copied().unwrap_or(0))
                    })
                })
            };
            let samples = sum(at(jvmprof_profile::Metric::Samples));
            let ns = match at(jvmprof_profile::Metric::Ns) {
                Some(i) => sum(Some(i)),
                None => samples.saturating_mul(p.meta.interval_ns),
            };
            out.push((batch.time_unix_ms, samples, ns));
            Ok(())
        })?;
        out.sort_by_key(|x| x.0);
        Ok(out)
    }

    /// The VM's samples received with times in `[from, to]` (Unix ms), merged into one profile.
    pub fn profile(&self, vm: &VmRecord, from: u64, to: u64) -> anyhow::Result<Profile> {
        let r = self.db.begin_read()?;
        let mut merger = Merger::new(dictionary(&r.open_table(FRAMES)?, vm.id)?);
        let (mut first, mut last) = (u64::MAX, 0);
        for_each_stored(&r, vm.id, from, to, |batch| {
            first = first.min(batch.time_unix_ms);
            last = last.max(batch.time_unix_ms);
            merger.add(batch.profile)
        })?;
        let mut p = merger
            .merged
            .map_or_else(empty_profile, ProfileBuilder::finish);
        let first = if first == u64::MAX { 0 } else { first };
        describe_vm(&mut p.meta, vm, first, last);
        Ok(p)
    }

    /// The samples of all `vms` in `[from, to]` merged into one profile (a service's profile:
    /// the VMs that share a label), or `None` when none of them has samples there.
    pub fn merged_profile(
        &self,
        vms: &[VmRecord],
        from: u64,
        to: u64,
    ) -> anyhow::Result<Option<Profile>> {
        let mut profiles = Vec::new();
        let (mut first, mut last) = (u64::MAX, 0);
        for vm in vms {
            let p = self.profile(vm, from, to)?;
            if p.samples.is_empty() {
                continue;
            }
            first = first.min(p.meta.start_unix_ms);
            last = last.max(p.meta.start_unix_ms + p.meta.duration_ms);
            profiles.push(p);
        }
        let Some(b) = merge_profiles(profiles) else {
            return Ok(None);
        };
        let mut p = b.finish();
        describe_vms(&mut p.meta, vms, first, last);
        Ok(Some(p))
    }
}

/// An empty profile with `meta`'s modes, metrics and interval, to merge samples into.
pub(crate) fn builder_like(meta: &Meta) -> ProfileBuilder {
    ProfileBuilder::new(Meta {
        modes: meta.modes.clone(),
        metrics: meta.metrics.clone(),
        interval_ns: meta.interval_ns,
        ..Meta::default()
    })
}

/// Merges whole profiles (of different VMs: frames matched by value, metrics by name) into one.
pub fn merge_profiles(profiles: Vec<Profile>) -> Option<ProfileBuilder> {
    let mut merged: Option<ProfileBuilder> = None;
    for mut p in profiles {
        let b = merged.get_or_insert_with(|| builder_like(&p.meta));
        let ids: Vec<u32> = p.frames.iter().map(|f| b.frame(f.clone())).collect();
        if p.stacks.map_frames(|f| anyhow::Ok(ids[f as usize])).is_ok() {
            merge_stacks(b, &p);
        }
    }
    merged
}

/// Where the collector keeps its data: the embedded redb file (default) or a ClickHouse
/// database shared with other collectors. Every call goes to the one chosen.
#[derive(Clone)]
pub enum Store {
    Redb(Redb),
    ClickHouse(crate::clickhouse::ClickHouse),
}

impl Store {
    pub fn open(dir: &Path) -> anyhow::Result<Store> {
        Ok(Store::Redb(Redb::open(dir)?))
    }

    pub fn open_clickhouse(location: &crate::clickhouse::Location) -> anyhow::Result<Store> {
        Ok(Store::ClickHouse(crate::clickhouse::ClickHouse::open(
            location,
        )?))
    }

    /// The id a new VM gets from the store itself (a shared store derives it from the VM, so
    /// every collector agrees); `None`: the registry numbers VMs.
    pub fn vm_id_for(&self, host: &str, pid: u32, start_unix_ms: u64) -> Option<u64> {
        match self {
            Store::Redb(_) => None,
            Store::ClickHouse(_) => Some(crate::clickhouse::vm_id(host, pid, start_unix_ms)),
        }
    }

    /// Whether other collectors may add VMs to this store (the registry then re-reads it).
    pub fn is_shared(&self) -> bool {
        matches!(self, Store::ClickHouse(_))
    }

    pub fn committed(&self, vm: u64) -> u64 {
        match self {
            Store::Redb(s) => s.queue.committed(vm),
            Store::ClickHouse(c) => c.queue.committed(vm),
        }
    }

    pub fn backlog(&self) -> usize {
        match self {
            Store::Redb(s) => s.queue.backlog(),
            Store::ClickHouse(c) => c.queue.backlog(),
        }
    }

    pub fn put_vm(&self, vm: VmRecord) {
        match self {
            Store::Redb(s) => s.queue.put_vm(vm),
            Store::ClickHouse(c) => c.queue.put_vm(vm),
        }
    }

    pub fn put_batch(&self, vm: u64, seq: u64, time_unix_ms: u64, profile: Profile) {
        match self {
            Store::Redb(s) => s.queue.put_batch(vm, seq, time_unix_ms, profile),
            Store::ClickHouse(c) => c.queue.put_batch(vm, seq, time_unix_ms, profile),
        }
    }

    pub fn put_snapshot(&self, vm: u64, snapshot: Snapshot) {
        match self {
            Store::Redb(s) => s.queue.put_snapshot(vm, snapshot),
            Store::ClickHouse(c) => c.queue.put_snapshot(vm, snapshot),
        }
    }

    pub async fn barrier(&self) {
        match self {
            Store::Redb(s) => s.queue.barrier().await,
            Store::ClickHouse(c) => c.queue.barrier().await,
        }
    }

    pub async fn maintain(
        &self,
        now_ms: u64,
        retention: Retention,
        connected: HashSet<u64>,
    ) -> anyhow::Result<Maintained> {
        match self {
            Store::Redb(s) => s.maintain(now_ms, retention, connected).await,
            Store::ClickHouse(c) => {
                let c = c.clone();
                tokio::task::spawn_blocking(move || c.maintain(now_ms, retention, &connected))
                    .await?
            }
        }
    }

    pub async fn delete_vm(&self, vm: &VmRecord) -> anyhow::Result<()> {
        match self {
            Store::Redb(s) => s.delete_vm(vm.id).await,
            Store::ClickHouse(c) => {
                let (c, vm) = (c.clone(), vm.clone());
                tokio::task::spawn_blocking(move || c.delete_vm(vm).map(|_| ())).await?
            }
        }
    }

    pub fn next_vm_id(&self) -> anyhow::Result<u64> {
        match self {
            Store::Redb(s) => s.next_vm_id(),
            Store::ClickHouse(_) => Ok(1),
        }
    }

    pub fn vms(&self) -> anyhow::Result<Vec<VmRecord>> {
        match self {
            Store::Redb(s) => s.vms(),
            Store::ClickHouse(c) => c.vms(),
        }
    }

    pub fn snapshots(&self) -> anyhow::Result<Vec<(u64, Snapshot)>> {
        match self {
            Store::Redb(s) => s.snapshots(),
            Store::ClickHouse(c) => c.snapshots(),
        }
    }

    pub fn series(&self, vm: u64, from: u64, to: u64) -> anyhow::Result<Vec<(u64, u64, u64)>> {
        match self {
            Store::Redb(s) => s.series(vm, from, to),
            Store::ClickHouse(c) => c.series(vm, from, to),
        }
    }

    pub fn profile(&self, vm: &VmRecord, from: u64, to: u64) -> anyhow::Result<Profile> {
        match self {
            Store::Redb(s) => s.profile(vm, from, to),
            Store::ClickHouse(c) => {
                let (mut p, first, last) = c
                    .profile_of(std::slice::from_ref(vm), from, to)?
                    .unwrap_or_else(|| (empty_profile(), 0, 0));
                describe_vm(&mut p.meta, vm, first, last);
                Ok(p)
            }
        }
    }

    pub fn merged_profile(
        &self,
        vms: &[VmRecord],
        from: u64,
        to: u64,
    ) -> anyhow::Result<Option<Profile>> {
        match self {
            Store::Redb(s) => s.merged_profile(vms, from, to),
            Store::ClickHouse(c) => {
                let Some((mut p, first, last)) = c.profile_of(vms, from, to)? else {
                    return Ok(None);
                };
                describe_vms(&mut p.meta, vms, first, last);
                Ok(Some(p))
            }
        }
    }
}

/// A profile with no samples (cpu metrics), for a range that has none.
fn empty_profile() -> Profile {
    ProfileBuilder::new(Meta {
        modes: vec!["cpu".into()],
        metrics: vec![
            jvmprof_profile::Metric::Samples,
            jvmprof_profile::Metric::Ns,
        ],
        ..Meta::default()
    })
    .finish()
}

/// Fills in who a VM's profile is of, and when its samples were taken.
fn describe_vm(meta: &mut Meta, vm: &VmRecord, first: u64, last: u64) {
    meta.pid = vm.pid;
    meta.command = vm.command.clone();
    meta.jvm_name = vm.jvm.clone();
    meta.start_unix_ms = first;
    meta.duration_ms = last.saturating_sub(first);
    meta.engine = "collector".into();
    meta.dropped_samples = vm.dropped_samples;
    meta.extra.insert("host".into(), vm.host.clone());
    meta.extra.insert("vm_id".into(), vm.id.to_string());
    for (k, v) in &vm.labels {
        meta.extra.insert(format!("label.{k}"), v.clone());
    }
}

/// Fills in whose samples a merged profile holds, and when they were taken.
fn describe_vms(meta: &mut Meta, vms: &[VmRecord], first: u64, last: u64) {
    meta.start_unix_ms = first;
    meta.duration_ms = last.saturating_sub(first);
    meta.engine = "collector".into();
    meta.command = format!("{} VMs", vms.len());
    let ids: Vec<String> = vms.iter().map(|v| v.id.to_string()).collect();
    meta.extra.insert("vm_ids".into(), ids.join(","));
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

/// One maintenance pass (see [`Store::maintain`]), in one transaction.
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

/// Adds `p`'s samples to `b`, matching metrics by name (missing ones count 0); `p`'s stacks
/// already hold `b`'s frame ids.
fn merge_stacks(b: &mut ProfileBuilder, p: &Profile) {
    let metrics = b.profile().meta.metrics.clone();
    let index: Vec<Option<usize>> = metrics.iter().map(|m| p.metric_index(*m)).collect();
    let stacks = b.stacks_from(&p.stacks);
    let threads: Vec<u32> = p.threads.iter().map(|t| b.thread(t.clone())).collect();
    let mut values = vec![0u64; metrics.len()];
    for s in &p.samples {
        for (v, i) in values.iter_mut().zip(&index) {
            *v = i.and_then(|i| s.values.get(i).copied()).unwrap_or(0);
        }
        b.add(
            threads[s.thread as usize],
            stacks[s.stack as usize],
            s.state,
            &values,
        );
    }
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
                // Run by the writer loop after the commit.
                Write::Chore(_) => {}
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
mod tests_support {
    use super::*;
    use jvmprof_profile::{Metric, Thread, ThreadState};

    pub(super) fn batch(frames: &[(&str, &str)], value: u64) -> Profile {
        let mut b = ProfileBuilder::new(Meta {
            modes: vec!["cpu".into()],
            metrics: vec![Metric::Samples, Metric::Ns],
            interval_ns: 10,
            ..Meta::default()
        });
        let ids: Vec<u32> = frames
            .iter()
            .map(|(c, m)| b.frame(Frame::java(c, m, "()V", 1)))
            .collect();
        let s = b.stack(&ids);
        let t = b.thread(Thread {
            tid: 1,
            name: "main".into(),
        });
        b.add(t, s, ThreadState::Running, &[value, value * 10]);
        b.finish()
    }

    pub(super) fn collapsed(p: &Profile) -> String {
        jvmprof_profile::collapsed::to_string(p, &Default::default()).unwrap()
    }

    pub(super) fn open_retrying(dir: &Path) -> Redb {
        // The previous Store's writer thread closes the file once its channel is gone.
        for _ in 0..100 {
            if let Ok(s) = Redb::open(dir) {
                return s;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        Redb::open(dir).unwrap()
    }
}

#[cfg(test)]
mod tests {
    use super::tests_support::*;
    use super::*;

    #[test]
    fn a_store_in_another_format_is_refused_with_a_message() {
        let dir = std::env::temp_dir().join(format!("jvmprof-store-v1-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("collector.redb");
        {
            // A store as the first collectors wrote it: batches and no version.
            let db = Database::create(&path).unwrap();
            let w = db.begin_write().unwrap();
            w.open_table(BATCHES)
                .unwrap()
                .insert((1, 0), &[0u8, 1, 2][..])
                .unwrap();
            w.commit().unwrap();
        }
        let e = Redb::open(&dir).err().expect("an old store is refused");
        assert_eq!(
            e.to_string(),
            format!(
                "{} holds samples in store format 1 and this collector reads format 2; \
                 move it away or pick another --data directory",
                path.display()
            )
        );
        // Nothing was changed: refused again, the same way.
        assert_eq!(Redb::open(&dir).err().unwrap().to_string(), e.to_string());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn vm_records_from_before_labels_are_read() {
        #[derive(Serialize)]
        struct Old(
            u64,
            u32,
            String,
            String,
            String,
            String,
            String,
            u64,
            u64,
            u64,
            u64,
            u64,
            u64,
        );
        let old = encode(&Old(
            7,
            42,
            "java Main".into(),
            "h".into(),
            "17".into(),
            "Linux".into(),
            "0.1".into(),
            1,
            2,
            3,
            4,
            5,
            6,
        ));
        let vm = decode_vm(&old).unwrap();
        assert_eq!(
            (vm.id, vm.pid, vm.last_seen, vm.dropped_samples),
            (7, 42, 3, 6)
        );
        assert_eq!(vm.command, "java Main");
        assert!(vm.labels.is_empty());
        let new = VmRecord {
            labels: vec![("service".into(), "a".into())],
            ..vm.clone()
        };
        assert_eq!(decode_vm(&encode(&new)).unwrap(), new);
        assert!(decode_vm(&old[..old.len() - 1]).is_err());
    }

    #[test]
    fn batches_merge_by_time_range_and_survive_reopen() {
        let dir = std::env::temp_dir().join(format!("jvmprof-store-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let vm = VmRecord {
            id: 3,
            pid: 42,
            ..VmRecord::default()
        };
        {
            let store = Redb::open(&dir).unwrap();
            store.queue.put_vm(vm.clone());
            store
                .queue
                .put_batch(3, 1, 1000, batch(&[("A", "main"), ("A", "work")], 2));
            store
                .queue
                .put_batch(3, 2, 2000, batch(&[("A", "main"), ("B", "io")], 5));
            store
                .queue
                .put_batch(3, 3, 3000, batch(&[("A", "main"), ("A", "work")], 1));
            rt.block_on(store.queue.barrier());
            assert_eq!(store.queue.committed(3), 3);
            assert_eq!(store.queue.committed(4), 0);
            assert_eq!(
                collapsed(&store.profile(&vm, 0, u64::MAX).unwrap()),
                "A.main;A.work 3\nA.main;B.io 5\n"
            );
            assert_eq!(
                collapsed(&store.profile(&vm, 1500, 2500).unwrap()),
                "A.main;B.io 5\n"
            );
            assert_eq!(collapsed(&store.profile(&vm, 5000, 6000).unwrap()), "");
        }
        // Reopened: the VM, the batches, the frame dictionary and the last seq are all there, and
        // new batches reuse the dictionary.
        let store = open_retrying(&dir);
        assert_eq!(store.vms().unwrap(), vec![vm.clone()]);
        assert_eq!(store.queue.committed(3), 3);
        store
            .queue
            .put_batch(3, 4, 4000, batch(&[("A", "main"), ("C", "new")], 7));
        rt.block_on(store.queue.barrier());
        assert_eq!(
            collapsed(&store.profile(&vm, 0, u64::MAX).unwrap()),
            "A.main;A.work 3\nA.main;B.io 5\nA.main;C.new 7\n"
        );
        let p = store.profile(&vm, 0, u64::MAX).unwrap();
        assert_eq!(p.meta.pid, 42);
        assert_eq!(p.total(1), 150);
        drop(store);
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[cfg(test)]
mod retention_tests {
    use super::tests_support::*;
    use super::*;

    const MIN: u64 = MINUTE_MS;
    const DAY: u64 = 1440 * MIN;

    fn rows(store: &Redb, table: TableDefinition<(u64, u64), &[u8]>) -> usize {
        let r = store.db.begin_read().unwrap();
        r.open_table(table).unwrap().len().unwrap() as usize
    }

    /// Batches past the rollup age become one profile per VM and minute with the same
    /// samples; a query over any whole minutes answers as before; data past the retention
    /// goes, and so do VMs not seen for that long (not connected ones' data); ids are not
    /// reused after a delete, also across a reopen.
    #[test]
    fn rollups_keep_every_sample_and_retention_deletes_old_data_and_vms() {
        let dir = std::env::temp_dir().join(format!("jvmprof-store-ret-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let now = 100 * DAY;
        let vm = |id, last_seen| VmRecord {
            id,
            pid: id as u32,
            last_seen,
            ..VmRecord::default()
        };
        let (old, fresh, gone) = (vm(1, now), vm(2, now), vm(3, now - 9 * DAY));
        let store = Redb::open(&dir).unwrap();
        for v in [&old, &fresh, &gone] {
            store.queue.put_vm(v.clone());
        }
        // VM 1: four batches a minute for 90 minutes, two hours ago, one 8 days ago.
        let mut seq = 0;
        let start = now - 2 * 60 * MIN;
        for m in 0..90 {
            for q in 0..4 {
                seq += 1;
                let frames: &[(&str, &str)] = if q % 2 == 0 {
                    &[("A", "main"), ("A", "work")]
                } else {
                    &[("A", "main"), ("B", "io")]
                };
                store
                    .queue
                    .put_batch(1, seq, start + m * MIN + q * 15_000, batch(frames, q + 1));
            }
        }
        store
            .queue
            .put_batch(1, seq + 1, now - 8 * DAY, batch(&[("C", "old")], 7));
        // VM 2: recent batches only; VM 3: last seen 9 days ago.
        store
            .queue
            .put_batch(2, 1, now - 1000, batch(&[("D", "new")], 3));
        store
            .queue
            .put_batch(3, 1, now - 9 * DAY, batch(&[("E", "gone")], 4));
        rt.block_on(store.queue.barrier());
        let whole = collapsed(&store.profile(&old, 0, u64::MAX).unwrap());
        let window = (start + 10 * MIN, start + 40 * MIN - 1);
        let part = collapsed(&store.profile(&old, window.0, window.1).unwrap());
        let series: u64 = store
            .series(1, 0, u64::MAX)
            .unwrap()
            .iter()
            .map(|s| s.1)
            .sum();
        assert_eq!(series, 90 * (1 + 2 + 3 + 4) + 7);

        // Rollup only: nothing is lost, queries over whole minutes answer the same.
        let keep_all = Retention {
            rollup_after: Duration::from_secs(600),
            keep: None,
        };
        let done = rt
            .block_on(store.maintain(now, keep_all, HashSet::new()))
            .unwrap();
        assert_eq!(done.rolled_up, 90 * 4 + 1 + 1);
        assert_eq!(done.rollups, 90 + 1 + 1);
        assert!(done.removed_vms.is_empty() && !done.more);
        assert_eq!(rows(&store, BATCHES), 1, "VM 2's recent batch stays raw");
        assert_eq!(collapsed(&store.profile(&old, 0, u64::MAX).unwrap()), whole);
        assert_eq!(
            collapsed(&store.profile(&old, window.0, window.1).unwrap()),
            part
        );
        let series = store.series(1, 0, u64::MAX).unwrap();
        assert_eq!(series.len(), 91, "one point a minute");
        assert_eq!(series.iter().map(|s| s.1).sum::<u64>(), 90 * 10 + 7);
        // A second pass has nothing to do.
        let again = rt
            .block_on(store.maintain(now, keep_all, HashSet::new()))
            .unwrap();
        assert_eq!(again, Maintained::default());

        // A week's retention: the 8-day-old minute goes, VM 3 (not seen for 9 days) goes
        // with its data; VM 3 would stay if it were connected.
        let week = Retention {
            keep: Some(Duration::from_secs(7 * 86_400)),
            ..keep_all
        };
        let done = rt
            .block_on(store.maintain(now, week, HashSet::from([3])))
            .unwrap();
        assert!(done.removed_vms.is_empty());
        assert_eq!(done.expired, 2, "VM 1's old minute and VM 3's");
        let done = rt
            .block_on(store.maintain(now, week, HashSet::new()))
            .unwrap();
        assert_eq!(done.removed_vms, vec![3]);
        assert_eq!(
            collapsed(&store.profile(&old, 0, u64::MAX).unwrap()),
            whole.replace("C.old 7\n", "")
        );
        assert_eq!(
            store
                .vms()
                .unwrap()
                .iter()
                .map(|v| v.id)
                .collect::<Vec<_>>(),
            vec![1, 2]
        );
        // Deleting VM 2 (the highest id) leaves nothing of it, and its id is not given again.
        rt.block_on(store.delete_vm(2)).unwrap();
        assert_eq!(rows(&store, BATCHES), 0);
        assert_eq!(collapsed(&store.profile(&fresh, 0, u64::MAX).unwrap()), "");
        assert_eq!(store.next_vm_id().unwrap(), 4);
        rt.block_on(store.delete_vm(1)).unwrap();
        assert_eq!(rows(&store, ROLLUPS), 0);
        let r = store.db.begin_read().unwrap();
        assert_eq!(r.open_table(FRAMES).unwrap().len().unwrap(), 0);
        drop(r);
        drop(store);
        let store = open_retrying(&dir);
        assert!(store.vms().unwrap().is_empty());
        assert_eq!(store.next_vm_id().unwrap(), 4);
        drop(store);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
