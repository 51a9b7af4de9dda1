//! `jvmprof diff BASE NEW [-o OUT]`: a differential profile. Without `-o` a text report of the
//! methods whose share changed most; with `-o x.html` a differential flame graph (red: grew,
//! blue: shrank); with `-o x.collapsed` the two-value `difffolded` format.

use anyhow::{Context, Result, bail};
use jvmprof_profile::{ExportOptions, Format, diff, flamegraph};
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The baseline profile (.jvmprof, JFR recording, pprof or collapsed).
    pub base: PathBuf,
    /// The profile to compare with it.
    pub new: PathBuf,
    /// .html (differential flame graph) or .collapsed/.txt (difffolded); default: text report.
    #[arg(short = 'o', long = "output")]
    pub output: Option<PathBuf>,
    /// The metric to compare.
    #[arg(long)]
    pub value: Option<String>,
    /// How many methods the text report lists.
    #[arg(long, default_value_t = 20)]
    pub top: usize,
}

pub fn run(args: Args) -> Result<i32> {
    let metric = jvmprof_cli::value_metric(args.value.as_deref())?;
    let base = jvmprof_profile::read_any(&args.base)?;
    let new = jvmprof_profile::read_any(&args.new)?;
    let Some(output) = &args.output else {
        jvmprof_cli::print_out(&diff::text(&base, &new, metric, args.top)?)?;
        return Ok(0);
    };
    let options = ExportOptions {
        metric,
        threads: false,
    };
    let file = std::fs::File::create(output)
        .with_context(|| format!("cannot create {}", output.display()))?;
    let out = std::io::BufWriter::new(file);
    match Format::from_path(output)? {
        Format::Html => flamegraph::write_diff(&base, &new, &options, out)?,
        Format::Collapsed => diff::write_collapsed(&base, &new, &options, out)?,
        other => bail!("a diff can be written as .html or .collapsed, not {other}"),
    }
    Ok(0)
}
