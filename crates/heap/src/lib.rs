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
    analysis::analyze(&heap, options)
}
