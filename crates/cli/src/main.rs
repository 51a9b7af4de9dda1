//! The `jvmprof` command: subcommands only, each a thin layer over the other crates.
//!
//! Every subcommand lives in its own module with an `Args` struct (clap derive) and a
//! `run(args) -> anyhow::Result<i32>` that returns the process exit code.

mod convert;
mod demo;
mod diff;
mod dump;
mod heap;
mod instrument;
mod record;
mod report;
mod serve;
mod session;
mod top;
mod trace;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "jvmprof",
    version = env!("JVMPROF_VERSION"),
    about = "A profiler for Java (JVM) applications"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

// One value per process run: the size difference between variants does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
enum Command {
    /// Run a JVM under the profiler (`-- java ...`) or attach to one (`--pid`).
    Record(record::Args),
    /// Text report: top methods by self and total (of our profiles or a JFR recording).
    Report(report::Args),
    /// Convert a profile between formats (a JFR recording too, in and out).
    Convert(convert::Args),
    /// Profile a bundled Java demo and write demo.html.
    Demo(demo::Args),
    /// Differential profile of two profiles (text, .html or .collapsed).
    Diff(diff::Args),
    /// Thread dump with locks and deadlocks (or --heap: class histogram) of a running JVM.
    Dump(dump::Args),
    /// What holds the memory in an HPROF heap dump: retained sizes, dominators, paths to GC roots.
    Heap(heap::Args),
    /// Offline instrumentation of a jar, class directory or class file.
    Instrument(instrument::Args),
    /// Collector for streaming agents, with an HTTP API and web UI.
    Serve(serve::Args),
    /// End the profiling session running in a JVM; its profile is written where it was asked.
    Stop(session::StopArgs),
    /// What profiling session runs in a JVM: modes, since when, samples, where it writes.
    Status(session::StatusArgs),
    /// Live hottest methods of a running JVM (self and total %), refreshed every second.
    Top(top::Args),
    /// Join per-JVM method traces (`record --mode trace`) into one tree across remote calls.
    Trace(trace::Args),
}

fn main() {
    let cli = Cli::parse();
    let result: anyhow::Result<i32> = match cli.command {
        Command::Record(a) => record::run(a),
        Command::Report(a) => report::run(a),
        Command::Convert(a) => convert::run(a),
        Command::Demo(a) => demo::run(a),
        Command::Diff(a) => diff::run(a),
        Command::Dump(a) => dump::run(a),
        Command::Heap(a) => heap::run(a),
        Command::Instrument(a) => instrument::run(a),
        Command::Serve(a) => serve::run(a),
        Command::Stop(a) => session::stop(a),
        Command::Status(a) => session::status(a),
        Command::Top(a) => top::run(a),
        Command::Trace(a) => trace::run(a),
    };
    match result {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("jvmprof: {}", message(&e));
            std::process::exit(2);
        }
    }
}

/// An error and its causes, each said once: our errors already include their source in their
/// own message, so `{e:#}` would print "No such file or directory" three times.
fn message(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let m = cause.to_string();
        if out.contains(&m) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&m);
    }
    out
}
