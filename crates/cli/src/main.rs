//! The `jvmprof` command: subcommands only, each a thin layer over the other crates.
//!
//! Every subcommand lives in its own module with an `Args` struct (clap derive) and a
//! `run(args) -> anyhow::Result<i32>` that returns the process exit code.

mod instrument;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "jvmprof", version, about = "A profiler for Java (JVM) applications")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Offline instrumentation of a jar, class directory or class file.
    Instrument(instrument::Args),
}

fn main() {
    let cli = Cli::parse();
    let result: anyhow::Result<i32> = match cli.command {
        Command::Instrument(a) => instrument::run(a),
    };
    match result {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("jvmprof: {e:#}");
            std::process::exit(2);
        }
    }
}
