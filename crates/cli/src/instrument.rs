//! `jvmprof instrument`: offline instrumentation (JP's static mode) of a jar, a directory of
//! classes or one class file. The output runs as is: the probe runtime is added to it, and at
//! JVM exit it writes the per-thread calling-context counts (collapsed format) to the file
//! named by `-Djvmprof.output=FILE` (standard error if unset).

use std::path::PathBuf;

use anyhow::Context;
use jvmprof_classfile::instrument::Probes;

#[derive(clap::Args)]
#[command(after_help = "\
Where the profile goes: run the output with -Djvmprof.output=FILE and it writes the counts, in \
collapsed format (one `frame;frame;frame value` line per calling context), to FILE at JVM exit; \
without it they go to standard error. -Djvmprof.value=bytecodes writes executed bytecodes \
instead of calls (with --probes bytecodes or exact). Example:
  jvmprof instrument --probes exact app.jar -o app-instr.jar
  java -Djvmprof.output=calls.collapsed -cp app-instr.jar Main
  jvmprof convert calls.collapsed -o calls.html")]
pub struct Args {
    /// Which probes: none (round trip only), calls (method entry/exit), bytecodes (per
    /// basic-block bytecode counts), bytecodes-precise (blocks also end after every
    /// instruction that may throw), exact / exact-precise (calling contexts with calls and
    /// own bytecodes, the agent's exact mode).
    #[arg(long, default_value = "calls", value_parser = ["none", "calls", "bytecodes", "bytecodes-precise", "exact", "exact-precise"])]
    pub probes: String,
    /// Input: a .jar, a directory of classes, or one .class file.
    pub input: PathBuf,
    /// Output of the same kind as the input.
    #[arg(short, long)]
    pub output: PathBuf,
}

pub fn run(args: Args) -> anyhow::Result<i32> {
    let probes: Probes = args.probes.parse().map_err(anyhow::Error::msg)?;
    if !args.input.exists() {
        anyhow::bail!("{} does not exist", args.input.display());
    }
    let s = jvmprof_classfile::offline::instrument_path(&args.input, &args.output, probes)
        .with_context(|| {
            format!(
                "instrumenting {} into {}",
                args.input.display(),
                args.output.display()
            )
        })?;
    for m in &s.methods_skipped {
        eprintln!("jvmprof: left unchanged: {m}");
    }
    for c in &s.class_errors {
        eprintln!("jvmprof: copied unchanged (cannot read): {c}");
    }
    if s.signatures_dropped > 0 {
        eprintln!(
            "jvmprof: dropped {} jar signature files (they no longer match)",
            s.signatures_dropped
        );
    }
    eprintln!(
        "jvmprof: {} classes, {} methods rewritten, {} left unchanged, {} unreadable classes copied, {} other files",
        s.classes,
        s.methods_rewritten,
        s.methods_skipped.len(),
        s.class_errors.len(),
        s.resources
    );
    Ok(0)
}
