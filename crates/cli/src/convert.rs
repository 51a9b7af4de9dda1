//! `jvmprof convert IN -o OUT`: between the output formats (the input is recognized by content,
//! so a JDK Flight Recorder `.jfr` recording converts like our own files, and `-o x.jfr` writes one).
//! `--trace-id ID` cuts one traced request's samples out of a profile recorded with trace mode
//! beside cpu or wall sampling.

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
    #[arg(short = 'o', long = "output", required_unless_present = "trace_id")]
    pub output: Option<PathBuf>,
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
    /// Keep only the samples taken inside this traced call tree (a `trace_id` of `jvmprof
    /// trace`'s output; record with --mode cpu,trace or wall,trace), work it handed to
    /// executors included. `--trace-id list` prints the ids the samples carry (with the
    /// sampling periods of each), and needs no -o.
    #[arg(long, value_name = "ID")]
    pub trace_id: Option<String>,
}

pub fn run(args: Args) -> Result<i32> {
    let listing = args.trace_id.as_deref() == Some("list");
    let output = match (&args.output, listing) {
        (Some(o), _) => o.clone(),
        (None, true) => PathBuf::new(),
        (None, false) => anyhow::bail!("no output file: give -o FILE"),
    };
    let format = match (&args.format, listing) {
        (Some(f), _) => Format::parse(f)?,
        (None, true) => Format::Native,
        (None, false) => Format::from_path(&output)?,
    };
    let metric = jvmprof_cli::value_metric(args.value.as_deref())?;
    let profile = jvmprof_profile::read_any(&args.input)?;
    let profile = match args.trace_id.as_deref() {
        None => profile,
        Some("list") => {
            for (id, periods) in jvmprof_profile::trace::cut::trace_ids(&profile) {
                if id != 0 {
                    println!("{id} {periods}");
                }
            }
            return Ok(0);
        }
        Some(text) => {
            let id: u64 = text.trim().parse().map_err(|_| {
                anyhow::anyhow!("--trace-id {text:?}: not a trace id (a number, or `list`)")
            })?;
            jvmprof_profile::trace::cut::cut(&profile, id)
                .map_err(|e| anyhow::anyhow!("{}: {e}", args.input.display()))?
        }
    };
    let profile =
        jvmprof_profile::filter::StackFilter::new(&args.include_stack, &args.exclude_stack)
            .apply(&profile);
    let out = std::fs::File::create(&output)
        .with_context(|| format!("cannot create {}", output.display()))?;
    let options = ExportOptions {
        metric,
        threads: args.threads,
    };
    jvmprof_profile::write(&profile, format, &options, std::io::BufWriter::new(out))?;
    if let Some(side) = jvmprof_cli::write_method_stats_beside(&profile, format, &output)? {
        eprintln!(
            "jvmprof: per-method statistics written to {}",
            side.display()
        );
    }
    Ok(0)
}
