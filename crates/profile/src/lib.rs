//! The profile model (frames, stacks, threads, metrics), merge, and every exporter and reader.
//!
//! One job: turn collected samples into a [`Profile`] and move profiles between formats. Nothing
//! here touches a JVM; the agent builds profiles with [`ProfileBuilder`] and the CLI reads, converts
//! and reports them.

#![forbid(unsafe_code)]

pub mod model;

pub use model::*;
