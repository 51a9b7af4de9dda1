//! The only FFI boundary of jvmprof: safe wrappers over JVMTI and JNI (built on the pinned
//! `jvmti-bindings` crate), the AsyncGetCallTrace entry point, and the POSIX signal and per-thread
//! CPU-timer calls the sampler needs.
//!
//! Everything here is a thin, checked wrapper; policy (what to sample, when) lives in the agent.
//! Raw pointers handed out (`MethodId`, `JThread`, `JniEnvPtr`) are plain values: using them is only
//! possible through functions of this crate, which document what they require.

pub mod asgct;
pub mod classes;
pub mod env;
pub mod heap;
pub mod hierarchy;
pub mod management;
pub mod natives;
pub mod os;
pub mod perf;
pub mod vmstructs;
pub mod vthreads;

pub use env::*;
pub use heap::ClassCount;
/// The agent trait, callback types and `export_agent!` macro of the bindings crate.
pub use jvmti_bindings as bindings;
pub use management::JavaThreadInfo;
pub use vthreads::ThreadRef;
