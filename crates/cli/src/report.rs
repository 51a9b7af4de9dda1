//! `jvmprof report FILE`: top methods by self and total, with the run's metadata.

use anyhow::Result;
use jvmprof_profile::report::{ReportOptions, text};
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// A profile: .jvmprof, a JFR recording (.jfr), pprof (.pb.gz) or collapsed.
    pub file: PathBuf,
    /// How many methods to list.
    #[arg(long, default_value_t = 20)]
    pub top: usize,
    /// Also list the top methods of each thread.
    #[arg(long)]
    pub threads: bool,
    /// The metric to rank by (default: the profile's main one).
    #[arg(long)]
    pub value: Option<String>,
}

pub fn run(args: Args) -> Result<i32> {
    let profile = jvmprof_profile::read_any(&args.file)?;
    let metric = jvmprof_cli::value_metric(args.value.as_deref())?;
    let options = ReportOptions {
        metric,
        top: args.top,
        per_thread: args.threads,
    };
    jvmprof_cli::print_out(&text(&profile, &options))?;
    Ok(0)
}
