//! Library side of the `jvmprof` command: modules that integration tests (and `main.rs`, through
//! `jvmprof_cli::...`) use. Subcommands stay in the binary.

pub mod attach;
