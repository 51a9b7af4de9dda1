//! The Java runtime classes the probes call, compiled by build.rs and embedded.

include!(concat!(env!("OUT_DIR"), "/runtime_classes.rs"));
