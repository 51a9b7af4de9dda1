//! `serve --push pyroscope://HOST:PORT`: one job, to send every VM's samples on to a backend
//! that speaks Pyroscope's ingest API (Pyroscope, Grafana Alloy's `pyroscope.receive_http`,
//! another jvmprof collector's `/ingest`).
//!
//! Every `--push-every`, after everything received so far is stored, each VM's window of
//! samples `(pushed up to, now - 2 s]` (batch times, Unix ms; the 2 s let batches on their way
//! arrive) is read from the store, written as gzipped pprof and sent as
//! `POST /ingest?name=APP{vm_id=..,host=..,pid=..,LABELS}&from=S&until=S&format=pprof&spyName=jvmprof`
//! (APP is the VM's `service` label, else `jvmprof`; see [`crate::ingest::format_name`] for how
//! labels are cleaned), with `Authorization: Bearer TOKEN` when `--push-token` is given. A VM
//! without samples in its window sends nothing.
//!
//! Windows start when the collector starts: what it stored before (and pushed then) is not sent
//! again. A failed push keeps the window and is tried again next time, but a window never
//! reaches further back than [`MAX_WINDOW`] nor into minutes already rolled up (the store's
//! rollups cannot be split by time): the older part is dropped and counted
//! (`push_dropped_ms` in `/api/stats`). A failing endpoint is reported once on stderr, and once
//! when it works again. Batches an agent re-sends late, after being cut off from this collector
//! for longer than the lag, have times already pushed and are not sent.
//!
//! The client is plain HTTP/1.1 (one connection per push, `Content-Length`, `Connection:
//! close`); for HTTPS put a proxy in between.

use crate::hub::Hub;
use crate::ingest::{DEFAULT_APP, format_name};
use crate::stats::bump;
use crate::store::now_ms;
use jvmprof_profile::{ExportOptions, Format};
use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

pub use crate::push_config::{LAG, MAX_WINDOW, PushConfig, Target};

/// Longest a push may take, connecting, sending and answering.
const TIMEOUT: Duration = Duration::from_secs(30);
/// Most bytes of an answer read.
const MAX_RESPONSE: usize = 64 << 10;

/// Each VM's window: what has been pushed, and where the next window starts.
pub struct Windows {
    /// When pushing started (Unix ms): no window starts before.
    start: u64,
    max_ms: u64,
    /// vm → pushed up to (Unix ms, inclusive).
    pushed: HashMap<u64, u64>,
}

impl Windows {
    pub fn new(start_ms: u64, max: Duration) -> Windows {
        Windows {
            start: start_ms,
            max_ms: max.as_millis() as u64,
            pushed: HashMap::new(),
        }
    }

    /// Where the window of `vm` that ends at `end` starts (exclusive), and how many ms of it were
    /// dropped to keep it at most the longest window. A VM seen for the first time starts at
    /// the start of pushing (nothing is counted as dropped for it).
    pub fn start(&mut self, vm: u64, end: u64) -> (u64, u64) {
        let min = end.saturating_sub(self.max_ms);
        match self.pushed.get_mut(&vm) {
            None => {
                let from = self.start.max(min);
                self.pushed.insert(vm, from);
                (from, 0)
            }
            Some(from) if *from < min => {
                let dropped = min - *from;
                *from = min;
                (min, dropped)
            }
            Some(from) => (*from, 0),
        }
    }

    /// `vm` is pushed up to `end`.
    pub fn pushed(&mut self, vm: u64, end: u64) {
        let to = self.pushed.entry(vm).or_insert(end);
        *to = (*to).max(end);
    }

    /// Forgets the VMs `keep` says are gone.
    pub fn retain(&mut self, keep: impl Fn(u64) -> bool) {
        self.pushed.retain(|vm, _| keep(*vm));
    }
}

/// Why a push failed.
#[derive(Debug, PartialEq, Eq)]
enum Failure {
    /// No answer: cannot connect, the connection broke, a timeout, not HTTP.
    Unreachable(String),
    /// An HTTP status other than 2xx, and the message that came with it.
    Refused(u16, String),
}

impl Failure {
    /// Whether the endpoint refuses this one profile only (others may still go through).
    fn is_about_the_profile(&self) -> bool {
        matches!(self, Failure::Refused(400 | 413 | 422, _))
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Unreachable(e) => f.write_str(e),
            Failure::Refused(status, msg) if msg.is_empty() => write!(f, "HTTP {status}"),
            Failure::Refused(status, msg) => write!(f, "HTTP {status}: {msg}"),
        }
    }
}

/// `s` with everything but unreserved characters percent-encoded, for a query string.
fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The request path of a push of `vm`'s samples in `(from, to]` (Unix ms).
fn ingest_path(vm: &crate::store::VmRecord, from: u64, to: u64) -> String {
    let app = vm
        .labels
        .iter()
        .find(|(k, _)| k == "service")
        .map_or(DEFAULT_APP, |(_, v)| v.as_str());
    // The VM's own labels come first, so a VM label that cleans to the same key is left out.
    let mut labels = vec![
        ("vm_id".to_string(), vm.id.to_string()),
        ("host".to_string(), vm.host.clone()),
        ("pid".to_string(), vm.pid.to_string()),
    ];
    labels.extend(vm.labels.iter().cloned());
    format!(
        "/ingest?name={}&from={}&until={}&format=pprof&spyName=jvmprof",
        percent_encode(&format_name(app, &labels)),
        from / 1000,
        to.div_ceil(1000)
    )
}

/// POSTs `body` to `path` on `target`.
async fn post(
    target: &Target,
    token: Option<&str>,
    path: &str,
    body: &[u8],
) -> Result<(), Failure> {
    let exchange = async {
        let mut sock = TcpStream::connect(&target.addr)
            .await
            .map_err(|e| Failure::Unreachable(e.to_string()))?;
        let mut head = format!(
            "POST {path} HTTP/1.1\r\nHost: {}\r\nUser-Agent: jvmprof/{}\r\n\
             Content-Type: application/octet-stream\r\nContent-Length: {}\r\nConnection: close\r\n",
            target.addr,
            env!("CARGO_PKG_VERSION"),
            body.len()
        );
        if let Some(t) = token {
            head.push_str(&format!("Authorization: Bearer {t}\r\n"));
        }
        head.push_str("\r\n");
        let broke = |e: std::io::Error| Failure::Unreachable(format!("the connection broke: {e}"));
        sock.write_all(head.as_bytes()).await.map_err(broke)?;
        sock.write_all(body).await.map_err(broke)?;
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        loop {
            let n = sock.read(&mut chunk).await.map_err(broke)?;
            buf.extend_from_slice(&chunk[..n]);
            match answer(&buf, n == 0 || buf.len() >= MAX_RESPONSE) {
                Some(result) => return result,
                None if n == 0 => {
                    return Err(Failure::Unreachable(
                        "the connection closed before an answer".into(),
                    ));
                }
                None => {}
            }
        }
    };
    tokio::time::timeout(TIMEOUT, exchange)
        .await
        .unwrap_or_else(|_| {
            Err(Failure::Unreachable(format!(
                "no answer within {} s",
                TIMEOUT.as_secs()
            )))
        })
}

/// The outcome an HTTP answer starting with `buf` says, once it is known (`complete`: nothing
/// more will be read).
fn answer(buf: &[u8], complete: bool) -> Option<Result<(), Failure>> {
    let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
        return complete.then(|| {
            Err(Failure::Unreachable(
                "the answer is not HTTP or its header is too large".into(),
            ))
        });
    };
    let head = String::from_utf8_lossy(&buf[..end]);
    let mut lines = head.lines();
    let status = lines
        .next()
        .filter(|l| l.starts_with("HTTP/1."))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|s| s.parse::<u16>().ok());
    let Some(status) = status else {
        return Some(Err(Failure::Unreachable("the answer is not HTTP".into())));
    };
    if (200..300).contains(&status) {
        return Some(Ok(()));
    }
    let body = &buf[end + 4..];
    let length = lines
        .filter_map(|l| l.split_once(':'))
        .find(|(k, _)| k.trim().eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.trim().parse::<usize>().ok());
    if !complete && length.is_none_or(|l| body.len() < l) {
        return None;
    }
    let body = &body[..length.unwrap_or(body.len()).min(body.len())];
    // Our collector answers {"error": "..."}; anything else is shown as text.
    let msg = serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v["error"].as_str().map(str::to_string))
        .unwrap_or_else(|| String::from_utf8_lossy(body).trim().to_string());
    let msg: String = msg.chars().take(200).collect();
    Some(Err(Failure::Refused(status, msg)))
}

/// Pushes every VM's new samples every `config.every`, for as long as the collector runs.
pub async fn run(hub: Arc<Hub>, config: PushConfig) {
    let max = config
        .max_window(hub.config.retention.rollup_after)
        .unwrap_or(Duration::from_millis(1));
    let mut windows = Windows::new(now_ms(), max);
    let mut failing = false;
    let mut dropped_while_failing = 0u64;
    let mut ticks = tokio::time::interval(config.every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticks.tick().await;
    loop {
        ticks.tick().await;
        // Everything received so far is stored, so the windows read complete batches.
        hub.store.barrier().await;
        let (pushed, problem, dropped) = round(&hub, &config, &mut windows).await;
        bump(&hub.stats.push_rounds, 1);
        match problem {
            Some(p) => {
                dropped_while_failing += dropped;
                if !failing {
                    failing = true;
                    eprintln!(
                        "jvmprof serve: cannot push to {}: {p}; trying again every {} s, \
                         keeping up to {} s of each VM's samples",
                        config.target,
                        config.every.as_secs_f64(),
                        max.as_secs()
                    );
                }
            }
            None if failing && pushed > 0 => {
                failing = false;
                let dropped = std::mem::take(&mut dropped_while_failing) + dropped;
                let note = if dropped > 0 {
                    format!(" ({} s of samples were dropped meanwhile)", dropped / 1000)
                } else {
                    String::new()
                };
                eprintln!(
                    "jvmprof serve: pushing to {} works again{note}",
                    config.target
                );
            }
            None => {}
        }
    }
}

/// One push of every VM's window: how many profiles were pushed, the first problem, and the
/// ms of samples dropped.
async fn round(
    hub: &Arc<Hub>,
    config: &PushConfig,
    windows: &mut Windows,
) -> (u64, Option<String>, u64) {
    let end = now_ms().saturating_sub(LAG.as_millis() as u64);
    let vms = hub.vms.list();
    let ids: std::collections::HashSet<u64> = vms.iter().map(|v| v.record.id).collect();
    windows.retain(|id| ids.contains(&id));
    let (mut pushed, mut problem, mut dropped) = (0, None, 0);
    for vm in vms {
        let record = vm.record;
        let id = record.id;
        let (from, lost) = windows.start(id, end);
        bump(&hub.stats.push_dropped_ms, lost);
        dropped += lost;
        if from >= end {
            continue;
        }
        let store = hub.store.clone();
        let path = ingest_path(&record, from, end);
        let rendered = tokio::task::spawn_blocking(move || -> anyhow::Result<Option<Vec<u8>>> {
            let p = store.profile(&record, from + 1, end)?;
            if p.samples.is_empty() {
                return Ok(None);
            }
            let mut body = Vec::new();
            jvmprof_profile::write(&p, Format::Pprof, &ExportOptions::default(), &mut body)?;
            Ok(Some(body))
        })
        .await
        .map_err(anyhow::Error::from)
        .and_then(|r| r);
        let body = match rendered {
            Ok(Some(body)) => body,
            Ok(None) => {
                windows.pushed(id, end);
                continue;
            }
            Err(e) => {
                problem.get_or_insert(format!("cannot read the samples of VM {id}: {e}"));
                continue;
            }
        };
        match post(&config.target, config.token.as_deref(), &path, &body).await {
            Ok(()) => {
                windows.pushed(id, end);
                bump(&hub.stats.pushed, 1);
                pushed += 1;
            }
            Err(f) => {
                bump(&hub.stats.push_failures, 1);
                let about_the_profile = f.is_about_the_profile();
                problem.get_or_insert(if about_the_profile {
                    format!("the profile of VM {id} was refused: {f}")
                } else {
                    f.to_string()
                });
                if !about_the_profile {
                    // The endpoint is down or refuses everything: the others wait too.
                    break;
                }
            }
        }
    }
    (pushed, problem, dropped)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ingest::parse_name;

    #[test]
    fn targets_are_pyroscope_host_port() {
        assert_eq!(
            Target::parse("pyroscope://127.0.0.1:4040").unwrap().addr,
            "127.0.0.1:4040"
        );
        assert_eq!(
            Target::parse("http://pyro.example:80/").unwrap().addr,
            "pyro.example:80"
        );
        assert_eq!(
            Target::parse("pyroscope://[::1]:4040").unwrap().addr,
            "[::1]:4040"
        );
        assert_eq!(
            Target::parse("pyroscope://h:4040").unwrap().to_string(),
            "pyroscope://h:4040"
        );
        for bad in [
            "pyroscope://h",
            "pyroscope://:1",
            "pyroscope://h:x",
            "pyroscope://h:1/p",
        ] {
            assert_eq!(
                Target::parse(bad).unwrap_err(),
                format!("'{bad}' is not pyroscope://HOST:PORT"),
                "{bad}"
            );
        }
        for bad in ["https://h:443", "h:4040"] {
            assert_eq!(
                Target::parse(bad).unwrap_err(),
                format!(
                    "'{bad}' is not pyroscope://HOST:PORT (plain HTTP; https is not supported)"
                )
            );
        }
    }

    fn config(every: u64, token: Option<&str>) -> PushConfig {
        PushConfig {
            target: Target::parse("pyroscope://h:1").unwrap(),
            every: Duration::from_secs(every),
            token: token.map(str::to_string),
        }
    }

    #[test]
    fn windows_stay_clear_of_rolled_up_minutes() {
        let ten = Duration::from_secs(600);
        assert_eq!(
            config(10, None).max_window(ten),
            Ok(Duration::from_secs(538))
        );
        assert_eq!(
            config(10, None).max_window(Duration::from_secs(3600)),
            Ok(MAX_WINDOW)
        );
        assert_eq!(
            config(10, None).max_window(Duration::from_secs(60)),
            Err(
                "--push-every 10 s needs --rollup-after of at least 82 s (windows are read \
                 from batches not yet rolled up)"
                    .into()
            )
        );
        assert_eq!(
            config(0, None).max_window(ten),
            Err("--push-every must be more than 0".into())
        );
        assert_eq!(
            config(1, Some("a\r\nX: y")).max_window(ten),
            Err("--push-token must be printable ASCII without spaces".into())
        );
        assert!(format!("{:?}", config(1, Some("s3cret"))).contains("\"***\""));
        assert!(!format!("{:?}", config(1, Some("s3cret"))).contains("s3cret"));
    }

    #[test]
    fn windows_follow_pushes_and_drop_what_is_too_old() {
        let mut w = Windows::new(1_000, Duration::from_millis(500));
        // First window: from the start of pushing.
        assert_eq!(w.start(1, 1_200), (1_000, 0));
        w.pushed(1, 1_200);
        assert_eq!(w.start(1, 1_400), (1_200, 0));
        // The push to 1,400 failed: the next window still starts at 1,200 ...
        assert_eq!(w.start(1, 1_600), (1_200, 0));
        // ... until it would be longer than 500 ms: 100 ms are dropped, once.
        assert_eq!(w.start(1, 1_800), (1_300, 100));
        assert_eq!(w.start(1, 1_800), (1_300, 0));
        assert_eq!(w.start(1, 2_000), (1_500, 200));
        w.pushed(1, 2_000);
        assert_eq!(w.start(1, 2_100), (2_000, 0));
        // A VM first seen long after the start: its window is the longest, nothing dropped.
        assert_eq!(w.start(2, 5_000), (4_500, 0));
        // Pushed never goes back; a forgotten VM starts over.
        w.pushed(1, 1_000);
        assert_eq!(w.start(1, 2_100), (2_000, 0));
        w.retain(|vm| vm != 1);
        assert_eq!(w.start(1, 9_000), (8_500, 0));
    }

    #[test]
    fn pushes_name_the_vm_with_its_labels() {
        let vm = crate::store::VmRecord {
            id: 7,
            pid: 4242,
            host: "box-1".into(),
            labels: vec![
                ("service".into(), "check out".into()),
                ("env".into(), "a,b=c".into()),
                ("vm-id".into(), "spoofed".into()),
            ],
            ..Default::default()
        };
        let path = ingest_path(&vm, 1_700_000_000_500, 1_700_000_010_001);
        assert_eq!(
            path,
            "/ingest?name=check_out%7Bvm_id%3D7%2Chost%3Dbox-1%2Cpid%3D4242%2C\
             service%3Dcheck%20out%2Cenv%3Da_b_c%7D&from=1700000000&until=1700000011\
             &format=pprof&spyName=jvmprof"
        );
        let name = "check_out{vm_id=7,host=box-1,pid=4242,service=check out,env=a_b_c}";
        assert!(parse_name(name).is_ok());
        let plain = crate::store::VmRecord {
            id: 1,
            ..Default::default()
        };
        assert!(
            ingest_path(&plain, 0, 1)
                .starts_with("/ingest?name=jvmprof%7Bvm_id%3D1%2Chost%3D%2Cpid%3D0%7D&")
        );
    }

    #[test]
    fn answers_are_read_as_far_as_needed() {
        assert_eq!(answer(b"HTTP/1.1 200 OK\r\n\r\n", false), Some(Ok(())));
        assert_eq!(
            answer(b"HTTP/1.1 204 No Content\r\nA: b\r\n\r\n", false),
            Some(Ok(()))
        );
        assert_eq!(answer(b"HTTP/1.1 200 OK\r\n", false), None);
        let refused =
            b"HTTP/1.1 401 Unauthorized\r\ncontent-length: 17\r\n\r\n{\"error\":\"token\"}";
        assert_eq!(
            answer(refused, false),
            Some(Err(Failure::Refused(401, "token".into())))
        );
        assert_eq!(answer(&refused[..refused.len() - 1], false), None);
        assert_eq!(
            answer(b"HTTP/1.0 500 Oops\r\n\r\n  broken \n", true),
            Some(Err(Failure::Refused(500, "broken".into())))
        );
        assert_eq!(
            answer(b"SSH-2.0-OpenSSH\r\n\r\n", false),
            Some(Err(Failure::Unreachable("the answer is not HTTP".into())))
        );
        assert_eq!(
            answer(b"garbage", true),
            Some(Err(Failure::Unreachable(
                "the answer is not HTTP or its header is too large".into()
            )))
        );
        assert!(Failure::Refused(413, String::new()).is_about_the_profile());
        assert!(!Failure::Refused(401, String::new()).is_about_the_profile());
        assert_eq!(Failure::Refused(503, String::new()).to_string(), "HTTP 503");
    }
}
