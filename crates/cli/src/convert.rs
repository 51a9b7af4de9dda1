//! `jvmprof convert IN -o OUT`: between the output formats (the input is recognized by content,
//! so a JDK Flight Recorder `.jfr` recording converts like our own files, and `-o x.jfr` writes one).

use anyhow::{Context, Result};
use jvmprof_profile::{ExportOptions, Format};
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The profile to read: .jvmprof, a JFR recording (.jfr, JDK 11-25), pprof (.pb.gz) or
    /// collapsed.
    pub input: PathBuf,
    /// The file to write; its extension picks the format (.html, .collapsed, .pb.gz,
    /// .speedscope.json, .dot, .jfr, .trace.json, .jvmprof).
    #[arg(short = 'o', long = "output")]
    pub output: PathBuf,
    /// Output format, overriding the extension.
    #[arg(long)]
    pub format: Option<String>,
    /// The metric single-metric formats carry.
    #[arg(long)]
    pub value: Option<String>,
    /// Put a `[thread name]` frame at the root of every stack.
    #[arg(long)]
    pub threads: bool,
    /// Keep only samples whose stack has a frame matching PATTERN (substring of
    /// `pkg.Class.method`, or a `*` glob over the whole name); repeatable, any may match.
    #[arg(short = 'I', long = "include-stack", value_name = "PATTERN")]
    pub include_stack: Vec<String>,
    /// Drop samples whose stack has a frame matching PATTERN; repeatable.
    #[arg(short = 'X', long = "exclude-stack", value_name = "PATTERN")]
    pub exclude_stack: Vec<String>,
}

pub fn run(args: Args) -> Result<i32> {
    let format = match &args.format {
        Some(f) => Format::parse(f)?,
        None => Format::from_path(&args.output)?,
    };
    let metric = jvmprof_cli::value_metric(args.value.as_deref())?;
    let profile = jvmprof_profile::read_any(&args.input)?;
    let profile =
        jvmprof_profile::filter::StackFilter::new(&args.include_stack, &args.exclude_stack)
            .apply(&profile);
    let out = std::fs::File::create(&args.output)
        .with_context(|| format!("cannot create {}", args.output.display()))?;
    let options = ExportOptions {
        metric,
        threads: args.threads,
    };
    jvmprof_profile::write(&profile, format, &options, std::io::BufWriter::new(out))?;
    if let Some(side) = jvmprof_cli::write_method_stats_beside(&profile, format, &args.output)? {
        eprintln!(
            "jvmprof: per-method statistics written to {}",
            side.display()
        );
    }
    Ok(0)
}
