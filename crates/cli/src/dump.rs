//! `jvmprof dump PID`: a thread dump (states, stacks with lines, held and awaited locks with their
//! owners, deadlocks; on JDK 21+ the virtual threads with their stacks, by thread container) or, with `--heap`, a class histogram, taken by the agent through dynamic
//! attach. `--format json` prints the agent's JSON as is. With `--hprof FILE` the JVM writes an
//! HPROF heap dump itself (HotSpot's `dumpheap` attach command, as `jmap -dump` sends it; no
//! agent is loaded), which `jvmprof heap FILE` analyses.

use crate::record::find_agent;
use anyhow::{Context, Result, bail};
use jvmprof_cli::attach;
use serde_json::Value;
use std::fmt::Write as _;
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The JVM's process id.
    pub pid: u32,
    /// text (jstack-like) or json.
    #[arg(long, default_value = "text")]
    pub format: String,
    /// A class histogram (instances and bytes per class) instead of a thread dump.
    #[arg(long, conflicts_with = "hprof")]
    pub heap: bool,
    /// Write an HPROF heap dump of the JVM to this file (the JVM keeps running).
    #[arg(long, value_name = "FILE")]
    pub hprof: Option<PathBuf>,
    /// With --hprof: dump only reachable objects (the JVM runs a full GC first).
    #[arg(long, requires = "hprof")]
    pub live: bool,
    /// With --hprof: also upload the dump to the collector this JVM streams to (HOST:PORT),
    /// which analyses it and shows the report in its UI.
    #[arg(long, value_name = "HOST:PORT", requires = "hprof")]
    pub server: Option<String>,
    /// The collector's token, for --server (default: the JVMPROF_TOKEN environment variable).
    /// Visible to every local user in `ps` while the command runs: prefer --token-file or
    /// JVMPROF_TOKEN.
    #[arg(long, requires = "server", conflicts_with = "token_file")]
    pub token: Option<String>,
    /// A file whose first line is the collector's token, for --server (keep it mode 0600).
    #[arg(long, value_name = "FILE", requires = "server")]
    pub token_file: Option<PathBuf>,
    /// The agent library (default: next to this executable).
    #[arg(long, env = "JVMPROF_AGENT")]
    pub agent: Option<PathBuf>,
}

pub fn run(args: Args) -> Result<i32> {
    if args.format != "text" && args.format != "json" {
        bail!("--format must be text or json, not '{}'", args.format);
    }
    if let Some(file) = &args.hprof {
        // A bad token file is said before the JVM spends time on a dump.
        let token = match &args.server {
            Some(_) => jvmprof_cli::secret::token(
                args.token.clone(),
                args.token_file.as_deref(),
                jvmprof_cli::secret::TOKEN_ENV,
            )?,
            None => None,
        };
        hprof(args.pid, file, args.live)?;
        if let Some(server) = &args.server {
            upload(server, token.as_deref(), args.pid, file)?;
        }
        return Ok(0);
    }
    let agent = find_agent(args.agent.as_deref())?;
    let dir = crate::record::TempDir::new()?;
    let file = dir.path.join("dump.json");
    let command = if args.heap { "heap" } else { "dump" };
    let result = attach::load_agent(args.pid, &agent, &format!("{command}={}", file.display()))
        .with_context(|| format!("cannot take a {command} of process {}", args.pid))
        .and_then(|()| std::fs::read(&file).context("the agent wrote no dump"));
    drop(dir);
    let json = match result {
        Ok(j) => j,
        Err(e) => {
            // On failure the agent writes {"error": "..."} into the file and still answers OK
            // (an agent that returned an error would be unloaded with its callbacks live).
            return Err(e);
        }
    };
    if let Ok(Value::Object(o)) = serde_json::from_slice::<Value>(&json)
        && let Some(e) = o.get("error").and_then(Value::as_str)
    {
        bail!(
            "the agent in process {} could not take the {command}: {e}",
            args.pid
        );
    }
    if args.format == "json" {
        jvmprof_cli::print_out(&format!("{}\n", String::from_utf8_lossy(&json)))?;
        return Ok(0);
    }
    let value: Value = serde_json::from_slice(&json).context("the agent's dump is not JSON")?;
    jvmprof_cli::print_out(&if args.heap {
        heap_text(&value)
    } else {
        threads_text(&value)
    })?;
    Ok(0)
}

/// Sends the dump to the collector that knows the VM of `pid` (it must be streaming there).
fn upload(server: &str, token: Option<&str>, pid: u32, file: &std::path::Path) -> Result<()> {
    let (status, body) = http(server, "GET", "/api/vms", token, None)?;
    if status != 200 {
        bail!("the collector at {server} answered {status} to /api/vms: {body}");
    }
    let vms: Value = serde_json::from_str(&body).context("the collector's VM list is not JSON")?;
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let candidates: Vec<&Value> = vms
        .as_array()
        .into_iter()
        .flatten()
        .filter(|v| v["pid"] == pid)
        .collect();
    // The same pid may have been another JVM earlier, or live on another host: prefer this
    // host's connected VM, then the most recent.
    let vm = candidates
        .iter()
        .max_by_key(|v| {
            (
                v["host"].as_str() == Some(host.trim()),
                v["connected"].as_bool() == Some(true),
                v["last_seen"].as_u64().unwrap_or(0),
            )
        })
        .with_context(|| {
            format!("the collector at {server} knows no VM with pid {pid} (is its agent streaming there?)")
        })?;
    let id = vm["id"].as_u64().context("a VM without an id")?;
    let (status, body) = http(
        server,
        "POST",
        &format!("/api/vms/{id}/heap"),
        token,
        Some(file),
    )?;
    if status != 202 {
        bail!("the collector at {server} refused the heap dump ({status}): {body}");
    }
    eprintln!(
        "jvmprof: heap dump uploaded to {server} for VM {id}; its report: http://{server}/api/vms/{id}/heap"
    );
    Ok(())
}

/// One HTTP/1.1 request (the collector's own API: plain HTTP, small replies), with an optional
/// file as the body, streamed.
fn http(
    server: &str,
    method: &str,
    path: &str,
    token: Option<&str>,
    file: Option<&std::path::Path>,
) -> Result<(u16, String)> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(server)
        .with_context(|| format!("cannot connect to the collector at {server}"))?;
    stream.set_read_timeout(Some(std::time::Duration::from_secs(120)))?;
    let length = match file {
        Some(f) => std::fs::metadata(f)?.len(),
        None => 0,
    };
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {server}\r\nConnection: close\r\nContent-Length: {length}\r\n"
    );
    if let Some(t) = token {
        head.push_str(&format!("Authorization: Bearer {t}\r\n"));
    }
    if file.is_some() {
        // The collector answers a refusal (no token, unknown VM) before a byte of the dump is
        // sent, and a go-ahead (100 Continue) otherwise.
        head.push_str("Content-Type: application/octet-stream\r\nExpect: 100-continue\r\n");
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes())?;
    let mut reader = std::io::BufReader::new(stream.try_clone()?);
    let mut reply = Vec::new();
    if let Some(f) = file {
        let mut line = String::new();
        std::io::BufRead::read_line(&mut reader, &mut line)?;
        if line.split_whitespace().nth(1) == Some("100") {
            // The rest of the interim response: headers up to the blank line.
            while line.trim_end() != "" {
                line.clear();
                if std::io::BufRead::read_line(&mut reader, &mut line)? == 0 {
                    break;
                }
            }
            std::io::copy(&mut std::fs::File::open(f)?, &mut stream)
                .with_context(|| format!("the upload to {server} broke off"))?;
        } else {
            reply.extend_from_slice(line.as_bytes());
        }
    }
    reader.take(1 << 20).read_to_end(&mut reply)?;
    let text = String::from_utf8_lossy(&reply);
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .with_context(|| format!("the collector at {server} sent no HTTP status"))?;
    let mut body = text.split_once("\r\n\r\n").map_or("", |x| x.1).to_string();
    if text
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        body = dechunk(&body);
    }
    Ok((status, body))
}

/// The payload of a chunked HTTP body.
fn dechunk(body: &str) -> String {
    let mut out = String::new();
    let mut rest = body;
    while let Some((size, tail)) = rest.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if n == 0 || tail.len() < n {
            break;
        }
        out.push_str(&tail[..n]);
        rest = tail[n..].trim_start_matches("\r\n");
    }
    out
}

/// Has the JVM write an HPROF dump to `file` through its attach listener.
pub fn hprof(pid: u32, file: &std::path::Path, live: bool) -> Result<i32> {
    let absolute =
        std::path::absolute(file).with_context(|| format!("bad output path {}", file.display()))?;
    if absolute.exists() {
        bail!(
            "{} exists; the JVM does not overwrite a heap dump (remove it or pick another name)",
            absolute.display()
        );
    }
    match absolute.parent() {
        Some(dir) if dir.is_dir() => {}
        _ => bail!("the directory of {} does not exist", absolute.display()),
    }
    let path = absolute
        .to_str()
        .with_context(|| format!("{} is not UTF-8", absolute.display()))?;
    let started = std::time::Instant::now();
    let output = attach::execute(
        pid,
        "dumpheap",
        &[path, if live { "-live" } else { "-all" }],
    )
    .with_context(|| format!("cannot take a heap dump of process {pid}"))?;
    let output = output.trim();
    if !output.contains("Heap dump file created") || !absolute.is_file() {
        bail!(
            "process {pid} did not write the heap dump: {}",
            if output.is_empty() {
                "no message"
            } else {
                output
            }
        );
    }
    let size = std::fs::metadata(&absolute).map(|m| m.len()).unwrap_or(0);
    eprintln!(
        "jvmprof: heap dump of process {pid} written to {} ({} bytes{}, {:.1} s); analyse it with `jvmprof heap {}`",
        absolute.display(),
        size,
        if live { ", live objects only" } else { "" },
        started.elapsed().as_secs_f64(),
        absolute.display()
    );
    Ok(0)
}

fn lock_text(lock: &Value) -> String {
    format!(
        "<{}@{}>",
        lock["class"].as_str().unwrap_or("?"),
        lock["hash"].as_str().unwrap_or("?")
    )
}

/// jstack-like text.
pub fn threads_text(dump: &Value) -> String {
    let mut out = String::new();
    let empty = vec![];
    for t in dump["threads"].as_array().unwrap_or(&empty) {
        let _ = writeln!(
            out,
            "\"{}\" #{}{} {}",
            t["name"].as_str().unwrap_or(""),
            t["id"],
            if t["daemon"].as_bool() == Some(true) {
                " daemon"
            } else {
                ""
            },
            t["state"].as_str().unwrap_or("")
        );
        let frames = t["stack"].as_array().unwrap_or(&empty);
        for (i, f) in frames.iter().enumerate() {
            let line = f["line"].as_u64().unwrap_or(0);
            let _ = if line > 0 {
                writeln!(
                    out,
                    "\tat {}(line {line})",
                    f["frame"].as_str().unwrap_or("")
                )
            } else {
                writeln!(out, "\tat {}", f["frame"].as_str().unwrap_or(""))
            };
            if i == 0
                && let Some(w) = t["waiting_for"].as_object()
            {
                let what = match w["kind"].as_str() {
                    Some("monitor_enter") => "waiting to lock",
                    Some("object_wait") => "waiting on",
                    _ => "parking to wait for",
                };
                let owner = match w["owner"].as_str() {
                    Some(o) => format!(" owned by \"{o}\""),
                    None => String::new(),
                };
                let _ = writeln!(out, "\t- {what} {}{owner}", lock_text(&w["lock"]));
            }
            for l in f["locked"].as_array().unwrap_or(&empty) {
                let _ = writeln!(out, "\t- locked {}", lock_text(l));
            }
        }
        let syncs = t["synchronizers"].as_array().unwrap_or(&empty);
        if !syncs.is_empty() {
            let _ = writeln!(out, "   Locked ownable synchronizers:");
            for s in syncs {
                let _ = writeln!(out, "\t- {}", lock_text(s));
            }
        }
        out.push('\n');
    }
    // Virtual threads by container, as `jcmd Thread.dump_to_file` groups them (JDK 21+).
    for c in dump["containers"].as_array().unwrap_or(&empty) {
        let threads = c["threads"].as_array().unwrap_or(&empty);
        let _ = writeln!(
            out,
            "Container {} ({} virtual thread{}{})",
            c["name"].as_str().unwrap_or("?"),
            threads.len(),
            if threads.len() == 1 { "" } else { "s" },
            c["parent"]
                .as_str()
                .map(|p| format!(", in {p}"))
                .unwrap_or_default()
        );
        for t in threads {
            let _ = writeln!(
                out,
                "\"{}\" #{} virtual {}",
                t["name"].as_str().unwrap_or(""),
                t["id"],
                t["state"].as_str().unwrap_or("")
            );
            for f in t["stack"].as_array().unwrap_or(&empty) {
                let line = f["line"].as_u64().unwrap_or(0);
                let frame = f["frame"].as_str().unwrap_or("");
                let _ = match line {
                    0 => writeln!(out, "\tat {frame}"),
                    l => writeln!(out, "\tat {frame}(line {l})"),
                };
            }
            out.push('\n');
        }
    }
    let deadlocks = dump["deadlocks"].as_array().unwrap_or(&empty);
    if deadlocks.is_empty() {
        out.push_str("No deadlocks found.\n");
    }
    for (n, d) in deadlocks.iter().enumerate() {
        let _ = writeln!(out, "Deadlock {}:", n + 1);
        let threads = d["threads"].as_array().unwrap_or(&empty);
        let locks = d["locks"].as_array().unwrap_or(&empty);
        for (i, t) in threads.iter().enumerate() {
            let next = &threads[(i + 1) % threads.len()];
            let _ = writeln!(
                out,
                "  \"{}\" waits for {} held by \"{}\"",
                t.as_str().unwrap_or(""),
                locks.get(i).map(lock_text).unwrap_or_default(),
                next.as_str().unwrap_or("")
            );
        }
    }
    out
}

/// HPROF-like heap summary: rank, bytes, share, instances, class.
pub fn heap_text(classes: &Value) -> String {
    let empty = vec![];
    let rows = classes.as_array().unwrap_or(&empty);
    let total: u64 = rows.iter().filter_map(|c| c["bytes"].as_u64()).sum();
    let mut out = format!(
        "{:>5} {:>14} {:>7} {:>12}  class\n",
        "rank", "bytes", "share", "instances"
    );
    for (i, c) in rows.iter().enumerate() {
        let bytes = c["bytes"].as_u64().unwrap_or(0);
        let _ = writeln!(
            out,
            "{:>5} {:>14} {:>6.2}% {:>12}  {}",
            i + 1,
            bytes,
            100.0 * bytes as f64 / total.max(1) as f64,
            c["instances"].as_u64().unwrap_or(0),
            c["class"].as_str().unwrap_or("")
        );
    }
    let _ = writeln!(out, "total {total} bytes in {} classes", rows.len());
    out
}
