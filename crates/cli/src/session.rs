//! `jvmprof stop PID` and `jvmprof status PID`: end, or look at, the profiling session running in
//! a JVM (started by `record --pid`, by `record -- java`, or by `-agentpath`), through the same
//! attach channel `record --pid` uses. The agent answers in a file this process reads.

use crate::record::find_agent;
use anyhow::{Context, Result, bail};
use jvmprof_cli::attach;
use serde_json::Value;
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct StopArgs {
    /// The JVM's process id.
    pub pid: u32,
    /// The agent library (default: next to this executable).
    #[arg(long, env = "JVMPROF_AGENT")]
    pub agent: Option<PathBuf>,
}

#[derive(clap::Args, Debug)]
pub struct StatusArgs {
    /// The JVM's process id.
    pub pid: u32,
    /// text or json.
    #[arg(long, default_value = "text")]
    pub format: String,
    /// The agent library (default: next to this executable).
    #[arg(long, env = "JVMPROF_AGENT")]
    pub agent: Option<PathBuf>,
}

/// Sends `command` (with `reply=FILE` or `query=FILE` added) and returns what the agent wrote.
fn ask(pid: u32, agent: Option<&std::path::Path>, key: &str, command: &str) -> Result<String> {
    let agent = find_agent(agent)?;
    let dir = crate::record::TempDir::new()?;
    let file = dir.path.join("reply");
    let result = attach::load_agent(pid, &agent, &format!("{command}{key}={}", file.display()))
        .with_context(|| format!("cannot reach process {pid}"))
        .and_then(|()| std::fs::read_to_string(&file).context("the agent did not answer"));
    drop(dir);
    result
}

pub fn stop(args: StopArgs) -> Result<i32> {
    let reply = ask(args.pid, args.agent.as_deref(), "reply", "stop,")?;
    let reply = reply.trim();
    if let Some(done) = reply.strip_prefix("ok: ") {
        eprintln!(
            "jvmprof: stopped the session in process {}: {done}",
            args.pid
        );
        return Ok(0);
    }
    let why = reply.strip_prefix("error: ").unwrap_or(reply);
    bail!("process {}: {why}", args.pid)
}

pub fn status(args: StatusArgs) -> Result<i32> {
    if args.format != "text" && args.format != "json" {
        bail!("--format must be text or json, not '{}'", args.format);
    }
    let reply = ask(args.pid, args.agent.as_deref(), "query", "")?;
    let v: Value = serde_json::from_str(&reply).context("the agent's status is not JSON")?;
    let running = v["running"].as_bool().unwrap_or(false);
    if args.format == "json" {
        jvmprof_cli::print_out(&format!("{reply}\n"))?;
    } else {
        jvmprof_cli::print_out(&format!("{}\n", status_text(args.pid, &v)))?;
    }
    Ok(if running { 0 } else { 1 })
}

fn status_text(pid: u32, v: &Value) -> String {
    if v["modes"].is_null() {
        return format!("process {pid}: no profiling session");
    }
    let list = |k: &str| {
        v[k].as_array()
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .collect::<Vec<_>>()
                    .join(",")
            })
            .unwrap_or_default()
    };
    let state = if v["running"].as_bool().unwrap_or(false) {
        "running"
    } else {
        "finished"
    };
    let counted = match v["root_calls"].as_u64() {
        Some(calls) => format!("{calls} calls below roots {}", list("roots")),
        None => format!("{} samples", v["samples"].as_u64().unwrap_or(0)),
    };
    let mut text = format!(
        "process {pid}: {} session {state} for {} s ({counted}), every {} us, engines {}",
        list("modes"),
        v["elapsed_ms"].as_u64().unwrap_or(0) / 1000,
        v["interval_ns"].as_u64().unwrap_or(0) / 1000,
        list("engines"),
    );
    if let Some(d) = v["duration_ms"].as_u64() {
        text.push_str(&format!(", stops after {} s", d / 1000));
    }
    if let Some(f) = v["file"].as_str() {
        text.push_str(&format!("\n  writes {f}"));
    }
    if let Some(s) = v["server"].as_str() {
        text.push_str(&format!("\n  streams to {s}"));
    }
    if let Some(o) = v["owner_pid"].as_u64() {
        text.push_str(&format!("\n  started by jvmprof pid {o}"));
    }
    text
}
