//! `jvmprof heap FILE`: what holds the memory in an HPROF heap dump (ours, `jcmd GC.heap_dump`,
//! `-XX:+HeapDumpOnOutOfMemoryError`): class histogram with retained sizes, top retainers with
//! the GC root that holds each and the path to it, leak suspects; as text, JSON or HTML.

use anyhow::{Context, Result, bail};
use jvmprof_heap::analysis::AllocationSite;
use jvmprof_heap::{Options, render};
use jvmprof_profile::{FrameKind, Metric};
use std::collections::HashMap;
use std::io::{IsTerminal, Write};
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The HPROF file.
    pub file: PathBuf,
    /// How many top retainers (and histogram rows in text) to show.
    #[arg(long, default_value_t = 20)]
    pub top: usize,
    /// text, json or html (default: from the extension of -o, else text).
    #[arg(long)]
    pub format: Option<String>,
    /// Write the report to this file instead of stdout.
    #[arg(short = 'o', long = "output")]
    pub output: Option<PathBuf>,
    /// An allocation profile of the same run (`record --mode alloc --live`, a .jvmprof, pprof or
    /// JFR file): each top retainer is shown with the stacks that allocated its class.
    #[arg(long, value_name = "PROFILE")]
    pub alloc: Option<PathBuf>,
    /// A leak suspect retains at least this share of the reachable heap, in percent.
    #[arg(long, default_value_t = 10.0)]
    pub suspect_percent: f64,
}

pub fn run(args: Args) -> Result<i32> {
    let format = match (&args.format, &args.output) {
        (Some(f), _) => f.clone(),
        (None, Some(o)) if o.extension().is_some_and(|e| e == "html") => "html".into(),
        (None, Some(o)) if o.extension().is_some_and(|e| e == "json") => "json".into(),
        _ => "text".into(),
    };
    if !matches!(format.as_str(), "text" | "json" | "html") {
        bail!("--format must be text, json or html, not '{format}'");
    }
    if args.top == 0 {
        bail!("--top must be at least 1");
    }
    let options = Options {
        top: args.top,
        suspect_percent: args.suspect_percent,
    };
    // Read the allocation profile first: a wrong file should not cost a long analysis.
    let sites = match &args.alloc {
        Some(path) => Some(allocation_sites(path)?),
        None => None,
    };
    let tty = std::io::stderr().is_terminal();
    let mut last = (String::new(), u64::MAX);
    let mut progress = |step: &str, done: u64, total: u64| {
        if !tty {
            return;
        }
        let percent = done * 100 / total.max(1);
        if last.0 != step || last.1 != percent {
            eprint!("\r{step}: {percent:>3} %   ");
            let _ = std::io::stderr().flush();
            last = (step.to_string(), percent);
        }
    };
    let report = jvmprof_heap::analyze_file(&args.file, &options, &mut progress);
    if tty {
        eprint!("\r\x1b[K");
    }
    let mut report = report.with_context(|| format!("cannot analyse {}", args.file.display()))?;
    if let Some(sites) = &sites {
        report.join_allocations(sites, 3);
    }
    let out = match format.as_str() {
        "json" => render::json(&report),
        "html" => render::html(&report),
        _ => render::text(&report, args.top),
    };
    match &args.output {
        Some(path) => {
            std::fs::write(path, out).with_context(|| format!("cannot write {}", path.display()))?
        }
        None => jvmprof_cli::print_out(&out)?,
    }
    Ok(0)
}

/// Allocation stacks per allocated class, heaviest first, from an alloc profile: by live bytes
/// when it has them (`--live`), else by allocated bytes.
fn allocation_sites(path: &std::path::Path) -> Result<HashMap<String, Vec<AllocationSite>>> {
    let profile = jvmprof_profile::read_any(path)?;
    let (metric, index) = [Metric::LiveBytes, Metric::Bytes]
        .into_iter()
        .find_map(|m| profile.metric_index(m).map(|i| (m, i)))
        .with_context(|| {
            format!(
                "{} is not an allocation profile (record it with --mode alloc --live)",
                path.display()
            )
        })?;
    let mut by_stack: HashMap<u32, u64> = HashMap::new();
    for s in &profile.samples {
        *by_stack.entry(s.stack).or_default() += s.values[index];
    }
    let mut out: HashMap<String, Vec<AllocationSite>> = HashMap::new();
    for (stack, bytes) in by_stack {
        let frames: Vec<&jvmprof_profile::Frame> = profile.stack_frames(stack).collect();
        let Some((leaf, rest)) = frames.split_last() else {
            continue;
        };
        if leaf.kind != FrameKind::AllocatedType || bytes == 0 {
            continue;
        }
        out.entry(leaf.name()).or_default().push(AllocationSite {
            class: leaf.name(),
            stack: rest
                .iter()
                .filter(|f| !(f.kind == FrameKind::Synthetic && f.method.starts_with('[')))
                .map(|f| f.name())
                .collect(),
            bytes,
            metric: metric.as_str().to_string(),
        });
    }
    for list in out.values_mut() {
        list.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.stack.cmp(&b.stack)));
    }
    Ok(out)
}
