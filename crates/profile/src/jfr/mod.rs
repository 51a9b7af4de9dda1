//! JFR (`.jfr`): Java Flight Recorder recordings, read (format 2.x of JDK 11 to 25; tested on
//! JDK 17 and 25 recordings) and written (read by `jfr print` and `jfr summary` of JDK 17 and 25;
//! JMC untested).
//!
//! A recording is a sequence of chunks. Each chunk has a 68-byte header (magic `FLR\0`, version
//! 2.x, size, constant-pool and metadata offsets, start time, tick frequency), a metadata event
//! describing every type (classes with fields, some stored through constant pools), checkpoint
//! events holding the constant pools (threads, stack traces, methods, classes, symbols, ...)
//! chained backwards by delta offsets, and events, each `size, type id, fields...` with JFR's
//! LEB128 integers. The reader decodes values by the metadata, so field order and new fields
//! of newer JDKs do not matter.
//!
//! How events become samples (metrics named as in the agent's profiles):
//!
//! | event | metrics | state | leaf frame |
//! |---|---|---|---|
//! | `jdk.ExecutionSample` (or JDK 25's `jdk.CPUTimeSample` when recorded, which replaces it) | `samples` 1, `ns` the sampling period | the event's | |
//! | `jdk.NativeMethodSample` | `samples` 1, `ns` its period | `native` | |
//! | `jdk.ObjectAllocationSample` (JDK 16+; else the two TLAB events) | `bytes` the weight, `objects` 1 | `running` | allocated type |
//! | `jdk.JavaMonitorEnter` / `jdk.ThreadPark` | `lock_ns` the duration, `lock_count` 1 | `blocked` / `parked` | monitor / parked-on class |
//! | `jdk.JavaMonitorWait` | `wait_ns`, `wait_count` 1 | `waiting` | monitor class |
//!
//! JDK 25's lost CPU-time samples (`jdk.CPUTimeSamplesLost`) count as samples of their thread on
//! a `[lost: JFR CPU-time samples]` frame, and failed ones on `[unknown: JFR stack walk failed]`
//! (also counted in the walk failures): CPU time the JVM saw is never dropped.
//!
//! Execution and native-method samples share `samples`/`ns` (as cpu and wall samples do in the
//! agent's profiles); their thread state tells them apart. Periods come from the recording's
//! `jdk.ActiveSetting` events (JFR's default of 20 ms when absent). A truncated JFR stack trace
//! gets a `[truncated]` root frame. Frame types (interpreted, compiled, inlined) are not kept.
//!
//! The writer makes one chunk: one event per sample unit (`samples` execution samples; alloc
//! samples whose weights add up to `bytes`, one per object up to a budget; lock events whose
//! durations add up to `lock_ns`), spread evenly over the profile's duration, since a profile
//! keeps totals, not times. Profiles of other metrics (exact mode) cannot be written as JFR.

#[cfg_attr(not(feature = "read"), allow(dead_code))]
mod bytes;
#[cfg(feature = "read")]
mod metadata;
#[cfg(feature = "read")]
mod read;
#[cfg(feature = "read")]
mod value;
mod write;

use crate::error::Result;
use crate::model::Profile;
use std::io::Write;

/// The first bytes of every chunk.
pub const MAGIC: &[u8; 4] = b"FLR\0";
/// The size of a chunk header.
const HEADER_SIZE: usize = 68;

/// Whether `bytes` start like a JFR recording.
pub fn sniff(bytes: &[u8]) -> bool {
    bytes.starts_with(MAGIC)
}

/// Reads a recording (every chunk) into one profile. Errors name what is wrong and the byte
/// offset.
#[cfg(feature = "read")]
pub fn read(bytes: &[u8]) -> Result<Profile> {
    read::read(bytes)
}

/// Writes `profile` as a one-chunk recording.
pub fn write(profile: &Profile, out: impl Write) -> Result<()> {
    write::write(profile, out)
}

/// A class name as JFR stores it (`java/util/HashMap`, `[B`, `[Ljava/lang/String;`) in Java
/// form (`java.util.HashMap`, `byte[]`, `java.lang.String[]`). Hidden classes lose their
/// `/0x…` suffix, as in the agent's profiles.
#[cfg(feature = "read")]
pub(crate) fn java_type_name(name: &str) -> String {
    let dims = name.bytes().take_while(|b| *b == b'[').count();
    let elem = &name[dims..];
    let base = match elem {
        "B" if dims > 0 => "byte".to_string(),
        "C" if dims > 0 => "char".to_string(),
        "D" if dims > 0 => "double".to_string(),
        "F" if dims > 0 => "float".to_string(),
        "I" if dims > 0 => "int".to_string(),
        "J" if dims > 0 => "long".to_string(),
        "S" if dims > 0 => "short".to_string(),
        "Z" if dims > 0 => "boolean".to_string(),
        _ => {
            let body = if dims > 0 {
                elem.strip_prefix('L')
                    .and_then(|s| s.strip_suffix(';'))
                    .unwrap_or(elem)
            } else {
                elem
            };
            strip_hidden_suffix(body).replace('/', ".")
        }
    };
    format!("{base}{}", "[]".repeat(dims))
}

/// A hidden class's name without its address: `Foo$$Lambda/0x0000…` (JDK 21+),
/// `Foo$$Lambda$14.0x0000…`, and JFR's `Foo$$Lambda$88+0x00007fe5…/360062456` (JDK 17) all
/// become `Foo$$Lambda…` as the agent names them.
#[cfg(feature = "read")]
fn strip_hidden_suffix(body: &str) -> &str {
    let hex_then = |rest: &str, tail_ok: &dyn Fn(&str) -> bool| {
        let n = rest.bytes().take_while(u8::is_ascii_hexdigit).count();
        n > 0 && tail_ok(&rest[n..])
    };
    if let Some(i) = body.find("+0x") {
        let digits_tail = |t: &str| {
            t.is_empty()
                || ((t.starts_with('/') || t.starts_with('.'))
                    && t.len() > 1
                    && t[1..].bytes().all(|b| b.is_ascii_digit()))
        };
        if hex_then(&body[i + 3..], &digits_tail) {
            return &body[..i];
        }
    }
    match body.rfind("/0x").or_else(|| body.rfind(".0x")) {
        Some(i) if hex_then(&body[i + 3..], &|t: &str| t.is_empty()) => &body[..i],
        _ => body,
    }
}

/// The reverse of [`java_type_name`]: `byte[]` → `[B`, `java.util.HashMap` →
/// `java/util/HashMap`, `java.lang.String[]` → `[Ljava/lang/String;`.
pub(crate) fn internal_type_name(name: &str) -> String {
    let mut base = name;
    let mut dims = 0;
    while let Some(b) = base.strip_suffix("[]") {
        base = b;
        dims += 1;
    }
    if dims == 0 {
        return base.replace('.', "/");
    }
    let elem = match base {
        "byte" => "B".to_string(),
        "char" => "C".to_string(),
        "double" => "D".to_string(),
        "float" => "F".to_string(),
        "int" => "I".to_string(),
        "long" => "J".to_string(),
        "short" => "S".to_string(),
        "boolean" => "Z".to_string(),
        _ => format!("L{};", base.replace('.', "/")),
    };
    format!("{}{elem}", "[".repeat(dims))
}

#[cfg(test)]
mod tests;
