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
    // What the session is, asked first: the agent's reply names the file it wrote itself, which
    // for a `jvmprof record` session is a private temporary one that record turns into its -o.
    let described = ask(args.pid, args.agent.as_deref(), "query", "")
        .ok()
        .and_then(|r| serde_json::from_str::<Value>(&r).ok());
    let reply = ask(args.pid, args.agent.as_deref(), "reply", "stop,")?;
    let reply = reply.trim();
    if let Some(done) = reply.strip_prefix("ok: ") {
        let done = described
            .as_ref()
            .and_then(|v| for_the_user(done, v))
            .unwrap_or_else(|| done.to_string());
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

/// The agent's `N samples written to FILE` in the session's words (calls, bytes, ...), naming
/// the file the user asked for (`described["file"]`) when it is not the one the agent wrote:
/// `None` when there is nothing to change.
fn for_the_user(done: &str, described: &Value) -> Option<String> {
    let (count, rest) = done.split_once(' ')?;
    let count: u64 = count.parse().ok()?;
    let wrote = rest.strip_prefix("samples written to ")?;
    let wanted = described["file"].as_str().unwrap_or(wrote);
    let modes: Vec<&str> = described["modes"]
        .as_array()?
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let metric = match jvmprof_options::parse(&format!("mode={}", modes.join("+"))) {
        Ok(jvmprof_options::Command::Start(o)) => o.metrics().first().copied(),
        _ => None,
    }
    .map_or("samples", |m| m.as_str());
    Some(if wanted == wrote {
        format!("{count} {metric} written to {wanted}")
    } else if let Some(owner) = described["owner_pid"].as_u64() {
        format!("{count} {metric}; the recording jvmprof (pid {owner}) writes them to {wanted}")
    } else {
        format!(
            "{count} {metric}; the recording jvmprof writes them to {wanted} when the JVM exits"
        )
    })
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
    // An interval only where stacks are sampled on a clock.
    let sampled = list("modes").split(',').any(|m| m == "cpu" || m == "wall");
    let every = if sampled {
        format!(
            ", every {} us",
            v["interval_ns"].as_u64().unwrap_or(0) / 1000
        )
    } else {
        String::new()
    };
    let mut text = format!(
        "process {pid}: {} session {state} for {} s ({counted}){every}, engines {}",
        list("modes"),
        v["elapsed_ms"].as_u64().unwrap_or(0) / 1000,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stop_names_the_users_file_in_the_sessions_words() {
        let launch = serde_json::json!({"modes": ["exact"], "file": "/home/u/out.html"});
        assert_eq!(
            for_the_user(
                "42 samples written to /tmp/jvmprof-1-0/profile.jvmprof",
                &launch
            )
            .unwrap(),
            "42 calls; the recording jvmprof writes them to /home/u/out.html when the JVM exits"
        );
        let attach = serde_json::json!({"modes": ["alloc"], "file": "/o.pb.gz", "owner_pid": 77});
        assert_eq!(
            for_the_user("9 samples written to /tmp/p.jvmprof", &attach).unwrap(),
            "9 bytes; the recording jvmprof (pid 77) writes them to /o.pb.gz"
        );
        let own = serde_json::json!({"modes": ["cpu"], "file": "/x.collapsed"});
        assert_eq!(
            for_the_user("5 samples written to /x.collapsed", &own).unwrap(),
            "5 samples written to /x.collapsed"
        );
        assert_eq!(for_the_user("5 samples streamed", &own), None);
    }
}
