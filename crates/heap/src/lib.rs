//! HPROF heap dumps: read any HPROF 1.0.x file (ours, `jcmd GC.heap_dump`,
//! `-XX:+HeapDumpOnOutOfMemoryError`), build its object graph in compact arrays, compute the
//! dominator tree and retained sizes, and report what holds the memory and why.
//!
//! One module per step: [`reader`] (the streaming record reader and random access to single
//! objects), [`graph`] (two passes into dense arrays), [`dominators`] (semi-NCA), [`analysis`]
//! (histogram, top retainers with roots and paths, leak suspects) and [`render`] (text, JSON,
//! HTML); [`ids`] maps object ids to dense indices and [`spill`] keeps the arrays a step does
//! not need in temporary files, which bounds peak memory. Nothing here touches a JVM.

#![forbid(unsafe_code)]

pub mod analysis;
pub mod dominators;
pub mod error;
pub mod graph;
pub mod ids;
pub mod reader;
pub mod render;
pub mod spill;

pub use analysis::{HeapReport, Options};
pub use error::{Error, Result};

/// Reads the dump at `path` and analyses it; `progress` hears (step, bytes done, bytes total).
pub fn analyze_file(
    path: &std::path::Path,
    options: &Options,
    progress: graph::Progress<'_>,
) -> Result<HeapReport> {
    let heap = graph::load(path, progress)?;
    analysis::analyze(heap, options)
}

/// With `JVMPROF_HEAP_DEBUG` set, prints `step` with the seconds since the first note and the
/// process's current and peak resident memory (from /proc/self/status) on stderr: where the
/// time and the peak of an analysis go.
pub(crate) fn mem_note(step: &str) {
    if std::env::var_os("JVMPROF_HEAP_DEBUG").is_none() {
        return;
    }
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<u64>().ok())
            .map_or(0, |kb| kb / 1024)
    };
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    let at = START.get_or_init(std::time::Instant::now).elapsed();
    eprintln!(
        "heap: {:6.2} s {step}: rss {} MB, peak {} MB",
        at.as_secs_f64(),
        field("VmRSS:"),
        field("VmHWM:")
    );
}
