//! `jvmprof top PID`: the hottest methods of a running JVM, live, like py-spy's `top`.
//!
//! It attaches like `record --pid` (the same agent session: cpu sampling, owned by this process
//! so that it stops by itself if this process dies), follows the native file the agent appends
//! records to about once a second (reading only what was appended, [`Tail`]), and shows what each
//! refresh added: self and total share per method, or per thread and method with `--threads`. On a terminal the table redraws in place and keys
//! steer it (`q` quit, `s`/`t`/`n` sort by self/total/name, `c` cumulative, `p` pause); otherwise
//! each refresh is printed as plain text, `--iterations N` times. `q`, Ctrl-C, SIGTERM and
//! SIGHUP all end the session, so the JVM is left unprofiled.

use crate::record::{TempDir, find_agent};
use anyhow::{Context, Result, bail};
use jvmprof_cli::attach;
use jvmprof_profile::records::Tail;
use jvmprof_profile::{FrameKind, Profile};
use std::collections::HashMap;
use std::io::{IsTerminal, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The JVM's process id.
    pub pid: u32,
    /// Sampling interval.
    #[arg(long, default_value = "10ms")]
    pub interval: String,
    /// How often the table is refreshed.
    #[arg(long, default_value = "1s")]
    pub refresh: String,
    /// One row per thread and method.
    #[arg(long)]
    pub threads: bool,
    /// Print this many refreshes as plain text, then stop (for scripts and pipes).
    #[arg(long)]
    pub iterations: Option<u32>,
    /// Rows shown (default: what fits the terminal, 20 otherwise).
    #[arg(long)]
    pub rows: Option<usize>,
    /// The agent library (default: next to this executable).
    #[arg(long, env = "JVMPROF_AGENT")]
    pub agent: Option<PathBuf>,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Sort {
    SelfTime,
    Total,
    Name,
}

/// Samples per row key: (self, total).
type Counts = HashMap<(String, String), (u64, u64)>;

pub fn run(args: Args) -> Result<i32> {
    let refresh = jvmprof_options::parse_duration(&args.refresh).map_err(anyhow::Error::msg)?;
    if refresh < Duration::from_secs(1) {
        bail!("--refresh must be at least 1s (the agent appends its records once a second)");
    }
    if args.iterations == Some(0) {
        bail!("--iterations must be at least 1");
    }
    let agent = find_agent(args.agent.as_deref())?;
    let work = TempDir::new()?;
    let file = work.path.join("top.jvmprof");
    let mut options = format!(
        "mode=cpu,interval={},file={},owner_file={}",
        args.interval,
        file.display(),
        file.display()
    );
    if let Some((pid, start)) = jvmprof_options::this_process_as_owner() {
        options.push_str(&format!(",owner={pid}:{start}"));
    }
    // The agent's own parser judges the options before the JVM is touched.
    if let Err(e) = jvmprof_options::parse(&options) {
        bail!("{e}");
    }
    let quit = Arc::new(AtomicBool::new(false));
    for signal in [
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGHUP,
    ] {
        signal_hook::flag::register(signal, quit.clone())?;
    }
    attach::load_agent(args.pid, &agent, &options)
        .with_context(|| format!("cannot start profiling process {}", args.pid))?;
    let result = show(&args, &file, refresh, &quit);
    // Whatever happened, the JVM is left unprofiled.
    let stopped = stop(args.pid, &agent, &work.path);
    result?;
    stopped?;
    Ok(0)
}

fn stop(pid: u32, agent: &Path, dir: &Path) -> Result<()> {
    if !Path::new(&format!("/proc/{pid}")).exists() {
        return Ok(());
    }
    let reply = dir.join("stop-reply");
    attach::load_agent(pid, agent, &format!("stop,reply={}", reply.display()))
        .with_context(|| format!("cannot stop the session in process {pid}"))?;
    match std::fs::read_to_string(&reply) {
        Ok(r) if r.starts_with("error") => bail!("process {pid}: {}", r.trim()),
        _ => Ok(()),
    }
}

fn show(args: &Args, file: &Path, refresh: Duration, quit: &AtomicBool) -> Result<()> {
    let interactive = std::io::stdout().is_terminal() && args.iterations.is_none();
    let keys = if interactive {
        Some(Keys::start()?)
    } else {
        None
    };
    let mut sort = Sort::SelfTime;
    let mut cumulative = false;
    let mut paused = false;
    let mut tail = Tail::new();
    let mut all = Counts::new();
    let mut all_total = 0u64;
    let mut shown = 0u32;
    let mut last: Option<(Counts, u64)> = None;
    // What arrived since the last refresh of the table.
    let mut fresh = Counts::new();
    let mut fresh_total = 0u64;
    let mut arrived = false;
    let mut next_draw = Instant::now() + refresh;
    let mut next_read = Instant::now();
    loop {
        // The agent appends once a second; the file is read every 200 ms and the table drawn
        // every `refresh` once something arrived (or a refresh later with nothing: an idle JVM),
        // so a refresh is never drawn just before the append it should show.
        loop {
            if quit.load(Ordering::Relaxed) {
                return Ok(());
            }
            if !Path::new(&format!("/proc/{}", args.pid)).exists() {
                eprintln!("jvmprof: process {} has ended", args.pid);
                return Ok(());
            }
            if let Some(k) = &keys {
                let mut redraw = false;
                while let Ok(key) = k.rx.try_recv() {
                    match key {
                        b'q' | 3 => return Ok(()),
                        b's' => sort = Sort::SelfTime,
                        b't' => sort = Sort::Total,
                        b'n' => sort = Sort::Name,
                        b'c' => cumulative = !cumulative,
                        b'p' => paused = !paused,
                        _ => continue,
                    }
                    redraw = true;
                }
                if redraw && let Some((counts, total)) = &last {
                    draw(args, counts, *total, sort, cumulative, paused, true)?;
                }
            }
            let now = Instant::now();
            if now >= next_read {
                next_read = now + Duration::from_millis(200);
                let gained = match tail.read(file) {
                    Ok(g) => g,
                    Err(_) if !file.exists() => Vec::new(), // the session has not written yet
                    Err(e) => bail!("cannot follow the profile of process {}: {e}", args.pid),
                };
                if tail.ended() {
                    eprintln!("jvmprof: the session in process {} was ended", args.pid);
                    return Ok(());
                }
                if !gained.is_empty() {
                    arrived = true;
                    let (counts, total) = count(tail.profile(), &gained, args.threads);
                    for (k, (s, t)) in counts {
                        let acc = fresh.entry(k).or_default();
                        acc.0 += s;
                        acc.1 += t;
                    }
                    fresh_total += total;
                }
            }
            if now >= next_draw && (arrived || now >= next_draw + refresh) {
                next_draw = now + refresh;
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        arrived = false;
        let counts = std::mem::take(&mut fresh);
        let total = std::mem::take(&mut fresh_total);
        for (k, (s, t)) in &counts {
            let acc = all.entry(k.clone()).or_default();
            acc.0 += s;
            acc.1 += t;
        }
        all_total += total;
        if paused {
            // Paused: the table stays; what arrives meanwhile shows after the pause.
            continue;
        }
        let view = if cumulative {
            (all.clone(), all_total)
        } else {
            (counts, total)
        };
        draw(args, &view.0, view.1, sort, cumulative, paused, interactive)?;
        last = Some(view);
        shown += 1;
        if args.iterations.is_some_and(|n| shown >= n) {
            return Ok(());
        }
    }
}

/// Per (thread, method): samples with the method on top (self) and anywhere (total, once per
/// stack), of what `gained` added to the samples of `profile`; and all those samples.
fn count(profile: &Profile, gained: &[(u32, Vec<u64>)], threads: bool) -> (Counts, u64) {
    let mut counts = Counts::new();
    let mut total = 0u64;
    for (i, values) in gained {
        let n = values.first().copied().unwrap_or(0);
        let Some(s) = profile.samples.get(*i as usize) else {
            continue;
        };
        if n == 0 {
            continue;
        }
        total += n;
        let thread = if threads {
            profile
                .threads
                .get(s.thread as usize)
                .map(|t| t.name.clone())
                .unwrap_or_default()
        } else {
            String::new()
        };
        let names: Vec<String> = profile
            .stack_frames(s.stack)
            .filter(|f| !(f.kind == FrameKind::Synthetic && f.method.starts_with("[thread")))
            .map(|f| f.name())
            .collect();
        if let Some(leaf) = names.last() {
            counts.entry((thread.clone(), leaf.clone())).or_default().0 += n;
        }
        let mut seen: Vec<&String> = Vec::with_capacity(names.len());
        for name in &names {
            if !seen.contains(&name) {
                seen.push(name);
                counts.entry((thread.clone(), name.clone())).or_default().1 += n;
            }
        }
    }
    (counts, total)
}

fn draw(
    args: &Args,
    counts: &Counts,
    total: u64,
    sort: Sort,
    cumulative: bool,
    paused: bool,
    interactive: bool,
) -> Result<()> {
    let mut rows: Vec<_> = counts.iter().collect();
    rows.sort_by(|a, b| match sort {
        Sort::SelfTime => b.1.0.cmp(&a.1.0).then(b.1.1.cmp(&a.1.1)).then(a.0.cmp(b.0)),
        Sort::Total => b.1.1.cmp(&a.1.1).then(b.1.0.cmp(&a.1.0)).then(a.0.cmp(b.0)),
        Sort::Name => a.0.1.cmp(&b.0.1).then(a.0.0.cmp(&b.0.0)),
    });
    let height = args.rows.unwrap_or_else(|| {
        if interactive {
            terminal_rows().saturating_sub(5).max(5)
        } else {
            20
        }
    });
    let pct = |v: u64| {
        if total == 0 {
            0.0
        } else {
            100.0 * v as f64 / total as f64
        }
    };
    let mut out = String::new();
    if interactive {
        out.push_str("\x1b[H\x1b[2J");
    }
    out.push_str(&format!(
        "jvmprof top: process {}, {} samples {}, sorted by {}{}\n",
        args.pid,
        total,
        if cumulative {
            "in all"
        } else {
            "in the last refresh"
        },
        match sort {
            Sort::SelfTime => "self",
            Sort::Total => "total",
            Sort::Name => "name",
        },
        if paused { " · PAUSED" } else { "" }
    ));
    if interactive {
        out.push_str("keys: q quit · s self · t total · n name · c cumulative · p pause\n");
    }
    out.push_str(&format!(
        "{:>7} {:>7} {:>8} {:>8}  {}\n",
        "self%",
        "total%",
        "self",
        "total",
        if args.threads {
            "thread / method"
        } else {
            "method"
        }
    ));
    for ((thread, method), (s, t)) in rows.into_iter().take(height) {
        let name = if args.threads {
            format!("[{thread}] {method}")
        } else {
            method.clone()
        };
        out.push_str(&format!(
            "{:>6.1}% {:>6.1}% {:>8} {:>8}  {}\n",
            pct(*s),
            pct(*t),
            s,
            t,
            name
        ));
    }
    if !interactive {
        out.push('\n');
    }
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(out.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        r => r.map_err(Into::into),
    }
}

fn terminal_rows() -> usize {
    rustix::termios::tcgetwinsize(std::io::stdout())
        .map(|w| w.ws_row as usize)
        .unwrap_or(24)
}

/// Keys from a terminal in raw mode (restored on drop), one byte at a time.
struct Keys {
    rx: mpsc::Receiver<u8>,
    saved: rustix::termios::Termios,
}

impl Keys {
    fn start() -> Result<Keys> {
        use rustix::termios::{LocalModes, OptionalActions, tcgetattr, tcsetattr};
        let stdin = std::io::stdin();
        let saved = tcgetattr(&stdin).context("cannot read the terminal's settings")?;
        let mut raw = saved.clone();
        raw.local_modes
            .remove(LocalModes::ICANON | LocalModes::ECHO);
        tcsetattr(&stdin, OptionalActions::Now, &raw)
            .context("cannot set the terminal's settings")?;
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut byte = [0u8; 1];
            while std::io::stdin().read(&mut byte).is_ok_and(|n| n == 1) {
                if tx.send(byte[0]).is_err() {
                    break;
                }
            }
        });
        print!("\x1b[?25l");
        Ok(Keys { rx, saved })
    }
}

impl Drop for Keys {
    fn drop(&mut self) {
        let _ = rustix::termios::tcsetattr(
            std::io::stdin(),
            rustix::termios::OptionalActions::Now,
            &self.saved,
        );
        println!("\x1b[?25h");
        let _ = std::io::stdout().flush();
    }
}
