//! `jvmprof trace FILE... -o OUT`: joins the method traces of several JVMs (each recorded with
//! `--mode trace` into a `.jvmprof` file) into one execution tree across their remote calls,
//! without synchronising their clocks (see `jvmprof_profile::trace`).

use anyhow::{Context, Result, bail};
use jvmprof_profile::trace::{self as tracetree, OutputFormat};
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The recordings to join: one `.jvmprof` file per JVM, written with `--mode trace`.
    #[arg(required = true, value_name = "FILE")]
    pub inputs: Vec<PathBuf>,
    /// The file to write; its extension picks the format: .json (the tree, each VM's own
    /// times), .txt (indented tree and per-method statistics), .html (expandable tree) or
    /// .trace.json (Chrome trace / Perfetto timeline).
    #[arg(short = 'o', long = "output")]
    pub output: PathBuf,
}

pub fn run(args: Args) -> Result<i32> {
    let format = OutputFormat::from_path(&args.output).map_err(anyhow::Error::msg)?;
    let mut joiner = tracetree::Joiner::new();
    for path in &args.inputs {
        let origin = path.display().to_string();
        let bytes = std::fs::read(path).with_context(|| format!("cannot read {origin}"))?;
        let recording = match tracetree::read_recording(&bytes, &origin) {
            Ok(r) => r,
            Err(message) => bail!(message),
        };
        drop(bytes);
        // Each recording becomes nodes as it is added, so only one VM's events are in memory
        // at a time.
        joiner.add(recording);
    }
    let joined = joiner.finish();
    // Damage messages (read up to there), dropped, incomplete and unmatched calls, VMs that
    // share no call: also in the output.
    for note in joined.notes() {
        eprintln!("jvmprof: {note}");
    }
    let out = std::fs::File::create(&args.output)
        .with_context(|| format!("cannot create {}", args.output.display()))?;
    joined
        .write(format, out)
        .with_context(|| format!("cannot write {}", args.output.display()))?;
    Ok(0)
}
