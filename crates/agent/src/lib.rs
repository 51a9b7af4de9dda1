//! The JVMTI agent: options, event wiring, samplers, sinks.
