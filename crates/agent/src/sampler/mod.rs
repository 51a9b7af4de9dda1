//! Samplers: the signal-driven CPU sampler (AsyncGetCallTrace on per-thread CPU timers) and the
//! safepoint sampler (JVMTI GetAllStackTraces) used for wall-clock mode and as the CPU fallback.

pub mod ring;
pub mod signal;
pub mod threads;
