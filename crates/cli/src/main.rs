//! The `jvmprof` command.
fn main() {}
