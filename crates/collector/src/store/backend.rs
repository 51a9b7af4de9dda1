//! The one trait every store implements ([`Backend`]): where writes are queued, what it answers
//! about VMs, snapshots and samples, and its maintenance. [`super::Store`] is the handle the
//! collector holds, dispatching to the chosen backend and doing what all stores do alike.

use super::queue::Writes;
use super::types::{Maintained, Retention, VmRecord};
use jvmprof_profile::Profile;
use jvmprof_proto::Snapshot;
use std::collections::HashSet;
use std::future::Future;
use std::pin::Pin;

/// A store's answer that takes a while (its writer thread or a blocking query does the work).
pub type Pending<T> = Pin<Box<dyn Future<Output = anyhow::Result<T>> + Send>>;

/// One VM's samples in a time range, merged into one profile (frames resolved, metrics of the
/// VM), with the times of the oldest and newest stored batch, row or rollup they came from.
pub struct VmSamples {
    pub profile: Profile,
    pub first: u64,
    pub last: u64,
}

/// A store: redb (embedded) or ClickHouse (shared).
pub trait Backend: Send + Sync {
    /// The queue in front of the store's writer thread.
    fn queue(&self) -> &dyn Writes;

    /// The id a new VM gets from the store itself; `None`: the registry numbers VMs.
    fn vm_id_for(&self, host: &str, pid: u32, start_unix_ms: u64) -> Option<u64>;

    /// Whether other collectors may add VMs to this store.
    fn is_shared(&self) -> bool;

    /// The id the next new VM gets (the registry's numbering starts there).
    fn next_vm_id(&self) -> anyhow::Result<u64>;

    fn vms(&self) -> anyhow::Result<Vec<VmRecord>>;

    fn snapshots(&self) -> anyhow::Result<Vec<(u64, Snapshot)>>;

    /// Every chunk stored of the VM's record stream, in order.
    fn stream_chunks(&self, vm: u64) -> anyhow::Result<Vec<Vec<u8>>>;

    /// (time, samples, CPU or wall ns) of the VM's stored samples in `[from, to]`, by time.
    fn series(&self, vm: u64, from: u64, to: u64) -> anyhow::Result<Vec<(u64, u64, u64)>>;

    /// The samples of each of `vms` in `[from, to]` (Unix ms), one entry per VM that has any
    /// stored there.
    fn samples(&self, vms: &[VmRecord], from: u64, to: u64) -> anyhow::Result<Vec<VmSamples>>;

    /// Rolls up and deletes what the retention says (not VMs in `connected`), as of `now_ms`,
    /// after every write queued before it.
    fn maintain(
        &self,
        now_ms: u64,
        retention: Retention,
        connected: HashSet<u64>,
    ) -> Pending<Maintained>;

    /// Deletes a VM and everything stored of it.
    fn delete_vm(&self, vm: &VmRecord) -> Pending<()>;
}
