//! The types every store and its callers share: a VM's record, what the store keeps and for how
//! long, what a maintenance pass did; and the two helpers every store uses (the wall clock in Unix
//! ms, a private data directory).

use serde::{Deserialize, Serialize};
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

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

/// Creates `dir` and its missing parents readable by this user only (mode 0700): profiles show
/// command lines, stacks and heap contents. An existing directory is left as it is.
pub fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

/// Now, in Unix ms (0 if the clock is before 1970).
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}
