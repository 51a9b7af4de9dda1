//! Agent options: `key=value` pairs separated by commas, as given after `-agentpath:...=`.
//! A bad option is reported once, by name, and leaves the agent inert; the application still runs.

use std::path::PathBuf;
use std::time::Duration;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Cpu,
    Wall,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Cpu => "cpu",
            Mode::Wall => "wall",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Engine {
    /// AsyncGetCallTrace when the VM has it, else safepoint.
    Auto,
    Asgct,
    Safepoint,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Options {
    pub mode: Mode,
    pub interval: Duration,
    /// Output file; the format comes from `format` or the extension. `None` only when streaming
    /// to a collector without a file.
    pub file: Option<PathBuf>,
    pub format: Option<String>,
    /// Metric for single-metric formats (`samples`, `ns`, ...).
    pub value: Option<String>,
    pub threads: bool,
    /// Deepest stack recorded, in frames.
    pub depth: usize,
    pub engine: Engine,
    /// Stop and write the profile after this long (used with attach).
    pub duration: Option<Duration>,
    /// A file the agent rewrites about once a second with `elapsed_ms samples`, for progress.
    pub status: Option<PathBuf>,
    /// Collector to stream to (`HOST:PORT`).
    pub server: Option<String>,
    /// Token the collector expects.
    pub token: Option<String>,
    /// How often thread snapshots are streamed.
    pub refresh: Duration,
}

/// What an option string asks the agent to do.
#[derive(Clone, Debug, PartialEq)]
pub enum Command {
    Start(Options),
    /// Stop the running session and write its profile (sent by a second attach).
    Stop,
}

pub const KNOWN_KEYS: &str =
    "mode, interval, file, format, value, threads, depth, engine, duration, status, stop";

pub fn parse(text: &str) -> Result<Command, String> {
    let mut o = Options {
        mode: Mode::Cpu,
        interval: Duration::from_millis(10),
        file: None,
        format: None,
        value: None,
        threads: false,
        depth: 512,
        engine: Engine::Auto,
        duration: None,
        status: None,
        server: None,
        token: None,
        refresh: Duration::from_secs(1),
    };
    for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (key, value) = match item.split_once('=') {
            Some((k, v)) => (k.trim(), Some(v.trim())),
            None => (item, None),
        };
        let need = || value.ok_or_else(|| format!("option '{key}' needs a value ({key}=...)"));
        match key {
            "stop" => return Ok(Command::Stop),
            "mode" => {
                o.mode = match need()? {
                    "cpu" => Mode::Cpu,
                    "wall" => Mode::Wall,
                    m @ ("alloc" | "lock" | "exact") => {
                        return Err(format!("mode '{m}' is not available in this build yet"));
                    }
                    m => return Err(format!("unknown mode '{m}' (expected cpu or wall)")),
                }
            }
            "interval" => {
                o.interval = parse_duration(need()?)?;
                if o.interval < Duration::from_micros(100) {
                    return Err(format!(
                        "interval {:?} is below the 100us minimum",
                        o.interval
                    ));
                }
            }
            "file" => o.file = Some(PathBuf::from(need()?)),
            "server" => o.server = Some(need()?.to_string()),
            "token" => o.token = Some(need()?.to_string()),
            "refresh" => {
                o.refresh = parse_duration(need()?)?;
                if o.refresh < Duration::from_millis(10) {
                    return Err("refresh must be at least 10ms".into());
                }
            }
            "format" => o.format = Some(need()?.to_string()),
            "value" => o.value = Some(need()?.to_string()),
            "threads" => o.threads = parse_bool(key, value)?,
            "depth" => {
                o.depth = need()?
                    .parse()
                    .ok()
                    .filter(|d| (1..=4096).contains(d))
                    .ok_or_else(|| "depth must be a number from 1 to 4096".to_string())?
            }
            "engine" => {
                o.engine = match need()? {
                    "auto" => Engine::Auto,
                    "asgct" => Engine::Asgct,
                    "safepoint" => Engine::Safepoint,
                    e => return Err(format!("unknown engine '{e}' (auto, asgct, safepoint)")),
                }
            }
            "duration" => o.duration = Some(parse_duration(need()?)?),
            "status" => o.status = Some(PathBuf::from(need()?)),
            _ => return Err(format!("unknown option '{key}' (known: {KNOWN_KEYS})")),
        }
    }
    if o.file.is_none() && o.server.is_none() {
        o.file = Some(PathBuf::from(format!(
            "jvmprof-{}.jvmprof",
            std::process::id()
        )));
    }
    Ok(Command::Start(o))
}

fn parse_bool(key: &str, value: Option<&str>) -> Result<bool, String> {
    match value {
        None | Some("true") | Some("yes") | Some("1") => Ok(true),
        Some("false") | Some("no") | Some("0") => Ok(false),
        Some(v) => Err(format!("option '{key}' takes true or false, not '{v}'")),
    }
}

/// `10ms`, `250us`, `1s`, `2m`, `500ns`; a bare number is nanoseconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: u64 = num
        .parse()
        .map_err(|_| format!("'{s}' is not a duration (e.g. 10ms, 250us, 30s)"))?;
    let ns = match unit {
        "" | "ns" => Some(n),
        "us" => n.checked_mul(1_000),
        "ms" => n.checked_mul(1_000_000),
        "s" => n.checked_mul(1_000_000_000),
        "m" => n.checked_mul(60_000_000_000),
        _ => return Err(format!("'{s}': unknown unit '{unit}' (ns, us, ms, s, m)")),
    }
    .ok_or_else(|| format!("'{s}' is too long"))?;
    Ok(Duration::from_nanos(ns))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn start(s: &str) -> Options {
        match parse(s).unwrap() {
            Command::Start(o) => o,
            Command::Stop => panic!("stop"),
        }
    }

    #[test]
    fn parses_all_keys() {
        let o = start(
            "mode=wall,interval=1ms,file=/tmp/x.collapsed,threads,depth=64,engine=safepoint,duration=30s,value=ns",
        );
        assert_eq!(o.mode, Mode::Wall);
        assert_eq!(o.interval, Duration::from_millis(1));
        assert_eq!(o.file, Some(PathBuf::from("/tmp/x.collapsed")));
        assert!(o.threads);
        assert_eq!(o.depth, 64);
        assert_eq!(o.engine, Engine::Safepoint);
        assert_eq!(o.duration, Some(Duration::from_secs(30)));
        assert_eq!(o.value.as_deref(), Some("ns"));
        assert_eq!(start("").interval, Duration::from_millis(10));
        assert_eq!(parse("stop").unwrap(), Command::Stop);
        let s = start("server=127.0.0.1:7878,refresh=500ms,token=abc");
        assert_eq!(s.server.as_deref(), Some("127.0.0.1:7878"));
        assert_eq!(s.refresh, Duration::from_millis(500));
        assert_eq!(s.file, None, "streaming alone writes no file");
        assert!(
            start("").file.is_some(),
            "without a server the agent writes a file"
        );
    }

    #[test]
    fn rejects_bad_options_by_name() {
        assert!(
            parse("colour=red")
                .unwrap_err()
                .contains("unknown option 'colour'")
        );
        assert!(
            parse("mode=gpu")
                .unwrap_err()
                .contains("unknown mode 'gpu'")
        );
        assert!(
            parse("interval=10 parsecs")
                .unwrap_err()
                .contains("unknown unit")
        );
        assert!(parse("interval=5us").unwrap_err().contains("minimum"));
        assert!(parse("depth=0").unwrap_err().contains("depth"));
        assert!(parse("file").unwrap_err().contains("needs a value"));
        assert!(
            parse("threads=maybe")
                .unwrap_err()
                .contains("true or false")
        );
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("250us").unwrap(), Duration::from_micros(250));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("1000").unwrap(), Duration::from_nanos(1000));
        assert!(parse_duration("ms").is_err());
    }
}
