//! Class-file model, label-based code IR, reader/writer, StackMapTable, basic-block analysis and
//! instrumentation passes. Pure Rust; no JVM needed to unit-test it.
