//! What the options say about processes and files beyond their own text: a session's owner
//! (a pid and its start time, so a reused pid is not taken for the owner) and output file names
//! with `%p` and `%t` expanded, as async-profiler names its files.

use std::path::{Path, PathBuf};

/// This process as a session owner (`owner=PID:START`), for `jvmprof record --pid`.
pub fn this_process_as_owner() -> Option<(u32, u64)> {
    let pid = std::process::id();
    Some((pid, process_start_ticks(pid)?))
}

/// Whether a session's owner (pid, start time) is no longer running.
pub fn owner_gone(owner: (u32, u64)) -> bool {
    let (pid, start) = owner;
    match process_start_ticks(pid) {
        Some(ticks) => start != 0 && ticks != start,
        None => true,
    }
}

/// When process `pid` started, in clock ticks after boot (field 22 of /proc/PID/stat), or None
/// when there is no such process or it is a zombie (exited, not yet reaped). With the pid it
/// names one process for good: a pid reused later has another start time.
pub fn process_start_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The fields after the command name, which is in parentheses and may contain anything.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3 (the state); field 22 is index 19.
    if matches!(fields.first(), Some(&"Z") | Some(&"X")) {
        return None;
    }
    fields.get(19)?.parse().ok()
}

/// A file name with `%p` replaced by `pid`, `%t` by the time `unix_secs` as `YYYYMMDD-hhmmss`
/// (UTC) and `%%` by `%`, as async-profiler names its files; other `%` stay as they are.
pub fn expand_file_name(path: &Path, pid: u32, unix_secs: u64) -> PathBuf {
    let text = path.to_string_lossy();
    if !text.contains('%') {
        return path.to_path_buf();
    }
    let mut out = String::with_capacity(text.len() + 16);
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match (c, chars.peek()) {
            ('%', Some('p')) => out.push_str(&pid.to_string()),
            ('%', Some('t')) => out.push_str(&utc_stamp(unix_secs)),
            ('%', Some('%')) => out.push('%'),
            _ => {
                out.push(c);
                continue;
            }
        }
        chars.next();
    }
    PathBuf::from(out)
}

/// `YYYYMMDD-hhmmss` of a Unix time, in UTC (days to a civil date as in H. Hinnant's
/// `civil_from_days`).
pub(crate) fn utc_stamp(unix_secs: u64) -> String {
    let (days, secs) = (unix_secs / 86_400, unix_secs % 86_400);
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}{month:02}{day:02}-{:02}{:02}{:02}",
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    )
}

/// Seconds since the Unix epoch, now.
pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
