//! `jvmprof report FILE`: top methods by self and total, with the run's metadata.

use anyhow::{Result, anyhow};
use jvmprof_profile::Metric;
use jvmprof_profile::report::{ReportOptions, text};
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// A profile: .jvmprof, pprof (.pb.gz) or collapsed.
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
    let metric = match &args.value {
        Some(v) => Some(Metric::parse(v).ok_or_else(|| anyhow!("unknown --value '{v}'"))?),
        None => None,
    };
    let options = ReportOptions {
        metric,
        top: args.top,
        per_thread: args.threads,
    };
    print!("{}", text(&profile, &options));
    Ok(0)
}
