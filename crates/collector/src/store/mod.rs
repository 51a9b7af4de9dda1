//! Where the collector keeps its data: the embedded redb file (default, [`redb`]) or a
//! ClickHouse database shared with other collectors ([`clickhouse`]), both behind one trait
//! ([`Backend`]). [`Store`] is the handle the collector holds: it forwards to the chosen store
//! and does what every store does alike (queueing writes, waiting for them, turning stored
//! samples into a VM's or a service's profile).

mod backend;
pub mod clickhouse;
mod merge;
mod queue;
pub mod redb;
mod replay;

pub(crate) use replay::starts_stream;
mod types;

pub use backend::{Backend, Pending, VmSamples};
pub use merge::merge_profiles;
pub use types::{Maintained, Retention, VmRecord, create_private_dir, now_ms};

use jvmprof_profile::records::RecordWriter;
use jvmprof_profile::{Meta, Metric, Profile, ProfileBuilder};
use jvmprof_proto::Snapshot;
use queue::Write;
use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;

/// The store the collector writes to and reads from; cloning it shares the store.
#[derive(Clone)]
pub struct Store(Arc<dyn Backend>);

impl Store {
    /// The embedded store in `dir` (see [`redb::Redb::open`]).
    pub fn open(dir: &Path) -> anyhow::Result<Store> {
        Ok(Store::new(redb::Redb::open(dir)?))
    }

    /// The shared store at `location` (see [`clickhouse::ClickHouse::open`]).
    pub fn open_clickhouse(location: &clickhouse::Location) -> anyhow::Result<Store> {
        Ok(Store::new(clickhouse::ClickHouse::open(location)?))
    }

    pub fn new(backend: impl Backend + 'static) -> Store {
        Store(Arc::new(backend))
    }

    /// The id a new VM gets from the store itself (a shared store derives it from the VM, so
    /// every collector agrees); `None`: the registry numbers VMs.
    pub fn vm_id_for(&self, host: &str, pid: u32, start_unix_ms: u64) -> Option<u64> {
        self.0.vm_id_for(host, pid, start_unix_ms)
    }

    /// Whether other collectors may add VMs to this store (the registry then re-reads it).
    pub fn is_shared(&self) -> bool {
        self.0.is_shared()
    }

    /// The seq of the newest committed chunk of `vm` (0: none).
    pub fn committed(&self, vm: u64) -> u64 {
        self.0.queue().ledger().committed(vm)
    }

    /// What wakes at every commit of chunks.
    pub fn commits(&self) -> Arc<tokio::sync::Notify> {
        self.0.queue().ledger().commits()
    }

    /// Writes queued but not yet handled (connections wait for a barrier when it grows).
    pub fn backlog(&self) -> usize {
        self.0.queue().ledger().backlog()
    }

    pub fn put_vm(&self, vm: VmRecord) {
        self.0.queue().put(Write::Vm(vm));
    }

    /// Queues framed record chunks of `vm`'s stream (what an agent sent as chunk `seq`).
    pub fn put_chunk(&self, vm: u64, seq: u64, time_unix_ms: u64, bytes: Arc<[u8]>) {
        self.0.queue().put(Write::Chunk {
            vm,
            seq,
            time_unix_ms,
            bytes,
        });
    }

    /// Queues a whole profile as `vm`'s chunk `seq`: a record stream of its own (a pushed
    /// profile, or a sample batch of an agent older than the record stream).
    pub fn put_profile(&self, vm: u64, seq: u64, time_unix_ms: u64, profile: &Profile) {
        let everything = jvmprof_profile::records::write::everything(profile);
        match RecordWriter::new().update(profile, &everything, &[], false) {
            Ok(bytes) if !bytes.is_empty() => self.put_chunk(vm, seq, time_unix_ms, bytes.into()),
            Ok(_) => {}
            Err(e) => eprintln!("jvmprof serve: cannot store a profile of VM {vm}: {e}"),
        }
    }

    pub fn put_snapshot(&self, vm: u64, snapshot: Snapshot) {
        self.0.queue().put(Write::Snapshot { vm, snapshot });
    }

    /// Resolves once everything queued before it is written (or could not be).
    pub async fn barrier(&self) {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.0.queue().put(Write::Barrier(tx));
        let _ = rx.await;
    }

    /// Rolls up old samples and deletes expired data and VMs (not those in `connected`), as of
    /// `now_ms`, after every write queued before it.
    pub async fn maintain(
        &self,
        now_ms: u64,
        retention: Retention,
        connected: HashSet<u64>,
    ) -> anyhow::Result<Maintained> {
        self.0.maintain(now_ms, retention, connected).await
    }

    /// Deletes a VM and everything stored of it.
    pub async fn delete_vm(&self, vm: &VmRecord) -> anyhow::Result<()> {
        self.0.delete_vm(vm).await
    }

    /// The id the next new VM gets: above every id stored or ever deleted.
    pub fn next_vm_id(&self) -> anyhow::Result<u64> {
        self.0.next_vm_id()
    }

    pub fn vms(&self) -> anyhow::Result<Vec<VmRecord>> {
        self.0.vms()
    }

    /// Every chunk stored of `vm`'s record stream, in order (rollups and thinned chunks keep
    /// every id, so replaying them resolves what the VM sends next).
    pub fn stream_chunks(&self, vm: u64) -> anyhow::Result<Vec<Vec<u8>>> {
        self.0.stream_chunks(vm)
    }

    pub fn snapshots(&self) -> anyhow::Result<Vec<(u64, Snapshot)>> {
        self.0.snapshots()
    }

    /// What the VM's samples with a time in `[from, to]` (Unix ms) hold, in time order:
    /// (time, samples, CPU or wall ns: the `ns` metric, else samples × interval).
    pub fn series(&self, vm: u64, from: u64, to: u64) -> anyhow::Result<Vec<(u64, u64, u64)>> {
        self.0.series(vm, from, to)
    }

    /// The VM's samples received with times in `[from, to]` (Unix ms), merged into one profile.
    pub fn profile(&self, vm: &VmRecord, from: u64, to: u64) -> anyhow::Result<Profile> {
        let VmSamples {
            mut profile,
            first,
            last,
        } = self
            .0
            .samples(std::slice::from_ref(vm), from, to)?
            .pop()
            .unwrap_or_else(|| VmSamples {
                profile: empty_profile(),
                first: 0,
                last: 0,
            });
        describe_vm(&mut profile.meta, vm, first, last);
        Ok(profile)
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
        for s in self.0.samples(vms, from, to)? {
            if s.profile.samples.is_empty() {
                continue;
            }
            first = first.min(s.first);
            last = last.max(s.last);
            profiles.push(s.profile);
        }
        let Some(b) = merge_profiles(profiles) else {
            return Ok(None);
        };
        let mut p = b.finish();
        describe_vms(&mut p.meta, vms, first, last);
        Ok(Some(p))
    }
}

/// A profile with no samples (cpu metrics), for a range that has none.
fn empty_profile() -> Profile {
    ProfileBuilder::new(Meta {
        modes: vec!["cpu".into()],
        metrics: vec![Metric::Samples, Metric::Ns],
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
