//! `serve --push` settings: one job, to say where and how often to push and to check that those
//! settings can work with the store's rollups. Kept apart from [`crate::push`], which does the
//! pushing, so that the collector's `Config` can hold them without depending on it.

use std::fmt;
use std::time::Duration;

/// How far behind now a window ends, so the batches in it have arrived and are stored.
pub const LAG: Duration = Duration::from_secs(2);
/// The longest window pushed at once: older samples of a VM whose pushes keep failing are
/// dropped.
pub const MAX_WINDOW: Duration = Duration::from_secs(600);
/// A window starts this far after the newest minute the store may have rolled up.
const ROLLUP_MARGIN: Duration = Duration::from_secs(60);

/// Where and how often to push.
#[derive(Clone)]
pub struct PushConfig {
    pub target: Target,
    pub every: Duration,
    pub token: Option<String>,
}

impl fmt::Debug for PushConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PushConfig")
            .field("target", &self.target)
            .field("every", &self.every)
            .field("token", &self.token.as_ref().map(|_| "***"))
            .finish()
    }
}

impl PushConfig {
    /// The longest window pushed at once with store rollups after `rollup_after`, or why these
    /// settings cannot work.
    pub fn max_window(&self, rollup_after: Duration) -> Result<Duration, String> {
        if self.every.is_zero() {
            return Err("--push-every must be more than 0".into());
        }
        if let Some(t) = &self.token
            && (t.is_empty() || t.chars().any(|c| !c.is_ascii_graphic()))
        {
            return Err("--push-token must be printable ASCII without spaces".into());
        }
        // A window must fit between the rolled-up minutes and the lag, twice the interval.
        let need = ROLLUP_MARGIN + LAG + 2 * self.every;
        if rollup_after < need {
            return Err(format!(
                "--push-every {} s needs --rollup-after of at least {} s (windows are read \
                 from batches not yet rolled up)",
                self.every.as_secs_f64(),
                need.as_secs_f64().ceil()
            ));
        }
        Ok(MAX_WINDOW.min(rollup_after - ROLLUP_MARGIN - LAG))
    }
}

/// A Pyroscope ingest endpoint: `pyroscope://HOST:PORT` (or `http://HOST:PORT`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// `HOST:PORT`.
    pub addr: String,
}

impl Target {
    pub fn parse(s: &str) -> Result<Target, String> {
        let addr = s
            .strip_prefix("pyroscope://")
            .or_else(|| s.strip_prefix("http://"))
            .ok_or_else(|| {
                format!("'{s}' is not pyroscope://HOST:PORT (plain HTTP; https is not supported)")
            })?
            .trim_end_matches('/');
        let port = addr
            .rsplit_once(':')
            .map(|(host, port)| (host, port.parse::<u16>()));
        match port {
            Some((host, Ok(_))) if !host.is_empty() && !addr.contains(['/', '?', '#', '@']) => {
                Ok(Target {
                    addr: addr.to_string(),
                })
            }
            _ => Err(format!("'{s}' is not pyroscope://HOST:PORT")),
        }
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "pyroscope://{}", self.addr)
    }
}
