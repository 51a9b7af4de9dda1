//! The collector's counters: one job, to count what it took in and did since it started
//! (`GET /api/stats`).

use std::sync::atomic::{AtomicU64, Ordering};

/// Counters since the collector started (`GET /api/stats`).
#[derive(Default, serde::Serialize)]
pub struct Stats {
    pub connections: AtomicU64,
    pub rejected: AtomicU64,
    pub protocol_errors: AtomicU64,
    pub bytes: AtomicU64,
    pub snapshots: AtomicU64,
    /// Record chunks received (a batch of an older agent counts as one).
    pub sample_batches: AtomicU64,
    /// Chunks an agent re-sent after a reconnect that were already stored (ignored).
    pub duplicate_batches: AtomicU64,
    /// Sample records received (a new sample or values added to one), and the samples they
    /// weigh (their first values: the sample count in CPU and wall modes).
    pub sample_records: AtomicU64,
    pub samples: AtomicU64,
    /// Profiles received at `/ingest` (the `ingest` module).
    pub ingested: AtomicU64,
    /// With `--push` (the `push` module): rounds run, profiles pushed, pushes that failed, and
    /// milliseconds of samples dropped because a VM's window grew too long.
    pub push_rounds: AtomicU64,
    pub pushed: AtomicU64,
    pub push_failures: AtomicU64,
    pub push_dropped_ms: AtomicU64,
    /// Trace chunks received (trace mode).
    pub trace_chunks: AtomicU64,
}

pub(crate) fn bump(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}
