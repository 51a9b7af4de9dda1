//! Offline instrumentation (placeholder).
