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
    /// Keep only samples whose stack has a frame matching PATTERN (substring of
    /// `pkg.Class.method`, or a `*` glob over the whole name); repeatable, any may match.
    #[arg(short = 'I', long = "include-stack", value_name = "PATTERN")]
    pub include_stack: Vec<String>,
    /// Drop samples whose stack has a frame matching PATTERN; repeatable.
    #[arg(short = 'X', long = "exclude-stack", value_name = "PATTERN")]
    pub exclude_stack: Vec<String>,
    /// Print only the run's metadata and the profile's size, as JSON (for scripts):
    /// `{"meta": {modes, metrics, engine, walk_failures, extra, ...}, "frames": N, "stacks": N,
    /// "threads": N, "samples": N, "timeline": N}`.
    #[arg(long)]
    pub meta: bool,
}

pub fn run(args: Args) -> Result<i32> {
    let profile = jvmprof_profile::read_any(&args.file)?;
    if args.meta {
        let v = serde_json::json!({
            "meta": profile.meta,
            "frames": profile.frames.len(),
            "stacks": profile.stacks.len(),
            "threads": profile.threads.len(),
            "samples": profile.samples.len(),
            "timeline": profile.timeline.len(),
        });
        jvmprof_cli::print_out(&format!("{}\n", serde_json::to_string_pretty(&v)?))?;
        return Ok(0);
    }
    let profile =
        jvmprof_profile::filter::StackFilter::new(&args.include_stack, &args.exclude_stack)
            .apply(&profile);
    let metric = jvmprof_cli::value_metric(args.value.as_deref())?;
    let options = ReportOptions {
        metric,
        top: args.top,
        per_thread: args.threads,
    };
    jvmprof_cli::print_out(&text(&profile, &options))?;
    Ok(0)
}
