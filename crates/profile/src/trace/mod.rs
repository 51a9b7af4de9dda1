//! Trace mode (JaViz): every call of the traced methods with its entry and exit times on its
//! thread, and the remote calls each VM made and served, as the agent records them; then, in
//! `jvmprof trace`, one execution tree across the VMs joined at their remote calls.
//!
//! - [`log`]: the recorded data, one [`VmTrace`](log::VmTrace) per JVM, and its on-disk chunks
//!   (written by the agent, read back from a native file's trace section).
//! - [`join`]: matches the remote calls of several recordings and builds the [`Joined`] tree,
//!   stored as [`tree`] describes; [`layout`] walks it and places each VM on a common timeline.
//! - [`render`]: writes the joined tree as JSON, text, Chrome trace or an HTML page.
//! - [`cut`]: the part of a sampled profile taken inside one traced call tree.
//!
//! The profile's own timeline exporter (`.trace.json` of a sampled profile) is
//! [`crate::timeline`], not this.

#[cfg(feature = "analysis")]
pub mod cut;
#[cfg(feature = "trace-join")]
pub mod join;
#[cfg(feature = "trace-join")]
pub mod layout;
pub mod log;
#[cfg(feature = "trace-join")]
pub mod render;
#[cfg(feature = "trace-join")]
pub mod tree;

#[cfg(all(test, feature = "trace-join"))]
mod testkit;

#[cfg(feature = "trace-join")]
pub use join::{Joiner, Recording, join, read_recording};
#[cfg(feature = "trace-join")]
pub use layout::{Kind, NodeView, PLACEMENT_NOTE, Visit};
#[cfg(feature = "trace-join")]
pub use render::OutputFormat;
#[cfg(feature = "trace-join")]
pub use tree::Joined;
