//! The profile model (frames, stacks, threads, metrics), merge, and every exporter and reader.
//!
//! One job: turn collected samples into a [`Profile`] and move profiles between formats. Nothing
//! here touches a JVM; the agent builds profiles with [`ProfileBuilder`] and the CLI reads, converts
//! and reports them.
//!
//! Formats, one module each: [`native`] (`.jvmprof`, lossless, read and written), [`collapsed`]
//! (`.collapsed`/`.txt`, read and written), [`flamegraph`] (`.html`), [`pprof`] (`.pb.gz`, read
//! and written), [`jfr`] (`.jfr`, read and written), [`speedscope`] (`.speedscope.json`),
//! [`dot`] (Graphviz call graph), [`timeline`] (`.trace.json`), the text
//! [`report`] and [`diff`] of two profiles. Trace mode's method traces and their join across
//! JVMs are in [`trace`]; the record stream the agent writes, which the native file is, in
//! [`records`]. [`Format`], [`write`] and [`read_any`] pick among
//! them by file name, `--format` name or content.

#![forbid(unsafe_code)]

pub mod collapsed;
#[cfg(feature = "analysis")]
pub mod diff;
pub mod dot;
pub mod error;
pub mod export;
#[cfg(feature = "analysis")]
pub mod filter;
pub mod flamegraph;
pub mod format;
pub mod jfr;
pub mod methods;
pub mod model;
pub mod native;
pub mod pprof;
pub mod records;
#[cfg(feature = "analysis")]
pub mod report;
pub mod speedscope;
mod stacks;
pub mod timeline;
pub mod trace;

#[cfg(test)]
mod testdata;

pub use error::{Error, Result};
pub use export::{ExportOptions, default_metric};
pub use format::{Format, write};
#[cfg(feature = "read")]
pub use format::{read_any, read_bytes};
pub use model::*;
#[cfg(feature = "analysis")]
pub use report::ReportOptions;
