//! The Java runtime of root and trace sessions (`jvmprof/runtime/Roots`): its classes, defined
//! in the boot loader once per process ([`define`]), and its natives: `reveal` and `reflected`
//! ([`super::reveal`]) and `contextCell` ([`context_cell`], where each thread publishes the call
//! tree it is in for cpu and wall samples to carry, `jvmprof convert --trace-id`).

use super::super::exact::RUNTIME_CLASSES;
use super::reveal::{reflected, reveal};
use crate::sampler::threads::ThreadTable;
use jvmprof_classfile::subgraph;
use jvmprof_jvmti::Jni;
use jvmprof_jvmti::classes::GlobalRef;
use jvmprof_jvmti::hierarchy::RootNatives;
use std::sync::OnceLock;

const ROOTS: &str = "jvmprof/runtime/Roots";
const CALIBRATION: &str = "jvmprof/runtime/RootsCalibration";
/// The runtime classes, defined once per process.
pub static RUNTIME: OnceLock<(GlobalRef, GlobalRef)> = OnceLock::new();

/// The runtime classes (`Roots`, its nested classes, and `RootsCalibration` with our probes),
/// defined in the boot loader the first time with the natives registered: (Roots,
/// RootsCalibration).
pub fn define(jni: &Jni) -> Result<(GlobalRef, GlobalRef), String> {
    if let Some(r) = RUNTIME.get() {
        return Ok(*r);
    }
    let bytes_of = |rel: &str| {
        RUNTIME_CLASSES
            .iter()
            .find(|(r, _)| *r == rel)
            .map(|(_, b)| *b)
            .ok_or_else(|| format!("the agent was built without {rel}"))
    };
    let roots = jni
        .define_boot_class(ROOTS, bytes_of("jvmprof/runtime/Roots.class")?)
        .map_err(|e| e.to_string())?;
    // Its parts too: nothing on the boot class path would find them.
    for (rel, bytes) in RUNTIME_CLASSES {
        if let Some(name) = rel
            .strip_suffix(".class")
            .filter(|n| subgraph::ROOTS_PARTS.iter().any(|p| n.starts_with(p)))
        {
            jni.define_boot_class(name, bytes)
                .map_err(|e| e.to_string())?;
        }
    }
    // The calibration class with our probes: loop is a root (id 0), empty (id 1) below it.
    let plain = bytes_of("jvmprof/runtime/RootsCalibration.class")?;
    let probed = subgraph::instrument_selected(plain, None, |n, _| match n {
        "loop" => Some((0, true)),
        "empty" => Some((1, false)),
        _ => None,
    })
    .map_err(|e| format!("cannot instrument the calibration class: {e}"))?;
    let calibration = jni
        .define_boot_class(CALIBRATION, &probed.bytes)
        .map_err(|e| e.to_string())?;
    jni.register_root_natives(
        roots,
        RootNatives {
            reveal,
            reflected,
            context: context_cell,
        },
    )
    .map_err(|e| e.to_string())?;
    Ok(*RUNTIME.get_or_init(|| (roots, calibration)))
}

/// The agent's thread table, for [`context_cell`] (a native, which reaches nothing else): set
/// when the first session's engines are chosen.
static THREADS: OnceLock<&'static ThreadTable> = OnceLock::new();

/// Gives [`context_cell`] the agent's thread table (the same one for the life of the process).
pub fn set_threads(threads: &'static ThreadTable) {
    let _ = THREADS.set(threads);
}

/// The runtime's `contextCell` native: the calling thread's cell in the thread table, where it
/// writes the id of the call tree it is in for the samplers (cpu: the signal handler reads it
/// by tid; wall: by `Thread.getId()`).
pub fn context_cell(jni: &Jni, java_id: i64) -> Option<&'static std::sync::atomic::AtomicU64> {
    THREADS
        .get()?
        .context_cell(jvmprof_jvmti::os::gettid(), jni.as_ptr(), java_id as u64)
}

/// A random 64-bit session id, as hex (the prefix of this session's HTTP call ids).
pub fn session_id() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    h.write_u32(std::process::id());
    h.finish()
}
