//! The receiving side of Pyroscope's ingest API, `POST /ingest?name=APP{k=v,...}&from=S&until=S&format=pprof`,
//! so that one collector can push to another (`serve --push`, see [`crate::push`]) and any
//! Pyroscope client that sends pprof can push here; and the series-name syntax both sides share.
//!
//! A pushed profile becomes one sample batch of a VM that is never connected. The VM is the
//! same for every push with the same `vm_id`, `host` and `pid` labels (what `serve --push`
//! sends); for other clients it is the same for the same name and labels. Its `host` and `pid`
//! come from those labels, its `agent_version` reads `pushed: vm_id=N` (or `pushed: NAME` for
//! other clients), which is how it is found again, also after a restart; its labels are the
//! pushed labels but `vm_id`, `host` and `pid`, plus `service` = the application name when there
//! is no `service` label and the name is not the default `jvmprof`. Command line and JVM come
//! from the profile's jvmprof metadata when it has some.
//!
//! Nothing a client sends can make the collector panic or hold more than a bounded amount: the
//! body is at most [`MAX_BODY`], it un-gzips to at most [`MAX_PPROF`], and its protobuf is
//! measured before it is decoded ([`MAX_DECODED`], [`MAX_STACK_FRAMES`]).

use crate::hub::Hub;
use crate::stats::bump;
use jvmprof_profile::Profile;
use jvmprof_profile::pprof::proto;
use std::collections::HashMap;
use std::io::Read;

/// Longest `name` accepted.
pub const MAX_NAME: usize = 4096;
/// Most labels one name may carry.
pub const MAX_LABELS: usize = 64;
/// Largest request body (the pprof profile, gzipped or not).
pub const MAX_BODY: usize = 64 << 20;
/// Largest pprof message once un-gzipped.
pub const MAX_PPROF: usize = 64 << 20;
/// Most memory the decoded message may take, as measured on its wire form before decoding.
pub const MAX_DECODED: u64 = 512 << 20;
/// Most frames the stacks of all samples may hold together.
pub const MAX_STACK_FRAMES: u64 = 16 << 20;
/// The labels that name the VM a pushed profile is of.
pub const VM_LABELS: [&str; 3] = ["vm_id", "host", "pid"];
/// The application name of a VM without a `service` label.
pub const DEFAULT_APP: &str = "jvmprof";

/// A series name: `APP{key=value,...}`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SeriesName {
    pub app: String,
    pub labels: Vec<(String, String)>,
}

fn app_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-')
}

fn key_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// At most 80 characters of `s`, for messages.
fn short(s: &str) -> String {
    match s.char_indices().nth(80) {
        Some((i, _)) => format!("{}...", &s[..i]),
        None => s.to_string(),
    }
}

/// Parses `APP` or `APP{key=value,...}` as Pyroscope does: the application name is letters,
/// digits, `_`, `.` and `-`; a key is letters, digits and `_`; a value is anything but `,` and
/// `}`; names, keys and values are trimmed; a later key replaces an earlier one. Stricter than
/// Pyroscope where it would silently drop something: a label without `=`, text after the `}`
/// and a missing `}` are errors.
pub fn parse_name(name: &str) -> Result<SeriesName, String> {
    if name.len() > MAX_NAME {
        return Err(format!("it is longer than {MAX_NAME} bytes"));
    }
    let (app, labels) = match name.split_once('{') {
        Some((app, rest)) => (app, Some(rest)),
        None => (name, None),
    };
    let app = app.trim();
    if app.is_empty() {
        return Err("it has no application name".into());
    }
    if let Some(c) = app.chars().find(|c| !app_char(*c)) {
        return Err(format!(
            "the application name may hold letters, digits, '_', '.' and '-', not {c:?}"
        ));
    }
    let mut out = SeriesName {
        app: app.to_string(),
        labels: Vec::new(),
    };
    let Some(rest) = labels else {
        return Ok(out);
    };
    let Some(body) = rest.strip_suffix('}') else {
        return Err(if rest.contains('}') {
            "it goes on after the '}' that ends its labels".into()
        } else {
            "its labels do not end with '}'".into()
        });
    };
    if body.contains('}') {
        return Err("it goes on after the '}' that ends its labels".into());
    }
    for item in body.split(',') {
        if item.trim().is_empty() {
            continue;
        }
        let Some((key, value)) = item.split_once('=') else {
            return Err(format!("label '{}' is not KEY=VALUE", short(item.trim())));
        };
        let (key, value) = (key.trim(), value.trim());
        if key.is_empty() || !key.chars().all(key_char) {
            return Err(format!(
                "label key '{}' is not letters, digits and '_'",
                short(key)
            ));
        }
        match out.labels.iter_mut().find(|(k, _)| k == key) {
            Some(l) => l.1 = value.to_string(),
            None => {
                if out.labels.len() == MAX_LABELS {
                    return Err(format!("it has more than {MAX_LABELS} labels"));
                }
                out.labels.push((key.to_string(), value.to_string()));
            }
        }
    }
    Ok(out)
}

/// `app{key=value,...}` that [`parse_name`] reads back: characters a name, key or value may not
/// hold become `_` (in values `{`, `}`, `,` and `=`), a key starting with a digit gets a `_`
/// before it, names, keys and values are trimmed, an empty name is [`DEFAULT_APP`], and labels
/// with an empty key or a key seen before are left out.
pub fn format_name(app: &str, labels: &[(String, String)]) -> String {
    let app: String = app
        .trim()
        .chars()
        .map(|c| if app_char(c) { c } else { '_' })
        .collect();
    let mut out = if app.is_empty() {
        DEFAULT_APP.to_string()
    } else {
        app
    };
    out.push('{');
    let mut seen: Vec<String> = Vec::new();
    for (key, value) in labels {
        let mut key: String = key
            .trim()
            .chars()
            .map(|c| if key_char(c) { c } else { '_' })
            .collect();
        // Pyroscope takes label names as Prometheus does: not starting with a digit.
        if key.starts_with(|c: char| c.is_ascii_digit()) {
            key.insert(0, '_');
        }
        if key.is_empty() || seen.contains(&key) || seen.len() == MAX_LABELS {
            continue;
        }
        let value: String = value
            .trim()
            .chars()
            .map(|c| {
                if matches!(c, '{' | '}' | ',' | '=') {
                    '_'
                } else {
                    c
                }
            })
            .collect();
        if !seen.is_empty() {
            out.push(',');
        }
        out.push_str(&key);
        out.push('=');
        out.push_str(&value);
        seen.push(key);
    }
    out.push('}');
    out
}

/// A Unix time given as seconds, as Pyroscope's `from` and `until` are, in ms. Milliseconds,
/// microseconds and nanoseconds are recognised by their size, as Pyroscope does.
pub fn parse_time(what: &str, s: Option<&str>) -> Result<u64, String> {
    let s = s.ok_or_else(|| format!("{what} (Unix seconds) is missing"))?;
    let n: u64 = s
        .trim()
        .parse()
        .map_err(|_| format!("{what} '{}' is not a Unix time in seconds", short(s)))?;
    Ok(match n {
        0..100_000_000_000 => n * 1000,
        100_000_000_000..100_000_000_000_000 => n,
        100_000_000_000_000..100_000_000_000_000_000 => n / 1000,
        _ => n / 1_000_000,
    })
}

/// Why a push was refused.
#[derive(Debug, PartialEq, Eq)]
pub enum Refused {
    /// The client made too many new VMs this minute (429).
    TooMany(String),
    /// The collector failed (500).
    Internal(String),
}

/// What the query string of a push says.
#[derive(Debug, PartialEq, Eq)]
pub struct Push {
    pub name: SeriesName,
    pub from_ms: u64,
    pub until_ms: u64,
    pub spy: String,
}

/// Checks the query parameters and the content type of a push.
pub fn check_request(
    query: &HashMap<String, String>,
    content_type: Option<&str>,
) -> Result<Push, String> {
    let format = query.get("format").map_or("folded", String::as_str);
    if format != "pprof" {
        return Err(format!(
            "format '{}' is not supported here; send format=pprof",
            short(format)
        ));
    }
    if content_type.is_some_and(|c| c.trim_start().starts_with("multipart/")) {
        return Err(
            "multipart bodies are not supported; send the pprof profile as the body".into(),
        );
    }
    let name = query
        .get("name")
        .ok_or("name (APP{key=value,...}) is missing")?;
    let parsed = parse_name(name).map_err(|e| format!("bad name '{}': {e}", short(name)))?;
    let from_ms = parse_time("from", query.get("from").map(String::as_str))?;
    let until_ms = parse_time("until", query.get("until").map(String::as_str))?;
    if from_ms > until_ms {
        return Err("from is after until".into());
    }
    Ok(Push {
        name: parsed,
        from_ms,
        until_ms,
        spy: query.get("spyName").map(|s| short(s)).unwrap_or_default(),
    })
}

/// The profile in a pushed body: a pprof message, gzipped or not, within the limits.
pub fn decode(body: &[u8]) -> Result<Profile, String> {
    let unzipped;
    let raw: &[u8] = if jvmprof_profile::pprof::sniff_gzip(body) {
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(body)
            .take(MAX_PPROF as u64 + 1)
            .read_to_end(&mut out)
            .map_err(|e| format!("the body is not valid gzip: {e}"))?;
        if out.len() > MAX_PPROF {
            return Err(format!(
                "the profile is larger than {} MiB once un-gzipped",
                MAX_PPROF >> 20
            ));
        }
        unzipped = out;
        &unzipped
    } else {
        body
    };
    let cost = decoded_cost(raw).map_err(|e| format!("the body is not a pprof profile: {e}"))?;
    if cost > MAX_DECODED {
        return Err(format!(
            "the profile would take more than {} MiB to decode",
            MAX_DECODED >> 20
        ));
    }
    let message = <proto::Profile as prost::Message>::decode(raw)
        .map_err(|e| format!("the body is not a pprof profile: {e}"))?;
    if stack_frames(&message) > MAX_STACK_FRAMES {
        return Err(format!(
            "the profile's stacks hold more than {MAX_STACK_FRAMES} frames"
        ));
    }
    jvmprof_profile::pprof::from_proto(&message).map_err(|e| e.to_string())
}

/// A protobuf field's value on the wire.
enum Wire<'a> {
    Number,
    Bytes(&'a [u8]),
}

fn varint(buf: &mut &[u8]) -> Result<u64, String> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let (&b, rest) = buf.split_first().ok_or("a number is cut off")?;
        *buf = rest;
        v |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Ok(v);
        }
    }
    Err("a number is longer than 10 bytes".into())
}

/// The next field of a message: its number and value.
fn field<'a>(buf: &mut &'a [u8]) -> Result<(u64, Wire<'a>), String> {
    let key = varint(buf)?;
    let skip = |buf: &mut &'a [u8], n: usize| -> Result<&'a [u8], String> {
        if buf.len() < n {
            return Err("a field is cut off".into());
        }
        let (v, rest) = buf.split_at(n);
        *buf = rest;
        Ok(v)
    };
    let value = match key & 7 {
        0 => {
            varint(buf)?;
            Wire::Number
        }
        1 => {
            skip(buf, 8)?;
            Wire::Number
        }
        2 => {
            let n = usize::try_from(varint(buf)?).map_err(|_| "a field is cut off")?;
            Wire::Bytes(skip(buf, n)?)
        }
        5 => {
            skip(buf, 4)?;
            Wire::Number
        }
        t => return Err(format!("wire type {t} is not used by pprof")),
    };
    Ok((key >> 3, value))
}

/// Bytes decoding `buf` as a pprof `Profile` allocates, about (each message's struct, each
/// repeated number as 8 bytes, each string as its bytes plus its struct; doubled for the slack
/// of growing vectors). Every nested message of the pprof schema is counted, so a body of many
/// tiny messages is measured as what it becomes, not as its size on the wire.
fn decoded_cost(mut buf: &[u8]) -> Result<u64, String> {
    use std::mem::size_of;
    let size = |n: usize| n as u64;
    let mut cost = 0u64;
    // Repeated numbers, packed or not.
    let numbers = |w: &Wire| match w {
        Wire::Number => 8,
        Wire::Bytes(b) => 8 * b.len() as u64,
    };
    // The fields of a message with `children` (field number → struct size) of its own.
    let nested = |mut b: &[u8], children: &[(u64, usize)]| -> Result<u64, String> {
        let mut c = 0u64;
        while !b.is_empty() {
            let (n, w) = field(&mut b)?;
            c += match (children.iter().find(|(f, _)| *f == n), &w) {
                (Some((_, s)), _) => size(*s),
                (None, w) => numbers(w),
            };
        }
        Ok(c)
    };
    while !buf.is_empty() {
        let (n, w) = field(&mut buf)?;
        let b = match &w {
            Wire::Bytes(b) => *b,
            Wire::Number => &[][..],
        };
        cost += match n {
            1 | 11 => size(size_of::<proto::ValueType>()),
            2 => size(size_of::<proto::Sample>()) + nested(b, &[(3, size_of::<proto::Label>())])?,
            3 => size(size_of::<proto::Mapping>()),
            4 => size(size_of::<proto::Location>()) + nested(b, &[(4, size_of::<proto::Line>())])?,
            5 => size(size_of::<proto::Function>()),
            6 => size(size_of::<String>()) + b.len() as u64,
            _ => numbers(&w),
        };
    }
    Ok(cost.saturating_mul(2))
}

/// How many frames the samples' stacks hold together (a location is as many frames as lines).
fn stack_frames(p: &proto::Profile) -> u64 {
    let lines: HashMap<u64, u64> = p
        .location
        .iter()
        .map(|l| (l.id, l.line.len().max(1) as u64))
        .collect();
    p.sample
        .iter()
        .flat_map(|s| &s.location_id)
        .fold(0u64, |n, id| {
            n.saturating_add(lines.get(id).copied().unwrap_or(1))
        })
}

/// What identifies the VM a push is of: its host, pid and `agent_version` (see the module doc).
fn identity(name: &SeriesName) -> (String, u32, String) {
    let label = |k: &str| {
        name.labels
            .iter()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.as_str())
    };
    let host = label("host").unwrap_or("").to_string();
    let pid = label("pid").and_then(|p| p.parse().ok()).unwrap_or(0);
    let origin = match label("vm_id") {
        Some(id) => format!("pushed: vm_id={id}"),
        None => {
            let mut labels = name.labels.clone();
            labels.sort();
            format!("pushed: {}", format_name(&name.app, &labels))
        }
    };
    (host, pid, origin)
}

/// The labels a pushed VM shows: the pushed ones but [`VM_LABELS`], and `service` = the
/// application name if there is no `service` label and the name is not [`DEFAULT_APP`].
pub fn vm_labels(name: &SeriesName) -> Vec<(String, String)> {
    let mut labels: Vec<(String, String)> = name
        .labels
        .iter()
        .filter(|(k, _)| !VM_LABELS.contains(&k.as_str()))
        .cloned()
        .collect();
    if name.app != DEFAULT_APP && !labels.iter().any(|(k, _)| k == "service") {
        labels.push(("service".into(), name.app.clone()));
    }
    labels
}

/// Stores a checked push (see [`check_request`]) whose body decoded to `profile` as a record
/// stream of its VM, durably; the VM's id. A profile without samples is accepted and not stored (0).
pub async fn store(
    hub: &Hub,
    peer: std::net::IpAddr,
    push: Push,
    profile: Profile,
) -> Result<u64, Refused> {
    if profile.samples.is_empty() {
        return Ok(0);
    }
    // The time of the batch: the newest sample's, when the profile says and it is in range.
    let meta = &profile.meta;
    let end = meta.start_unix_ms.saturating_add(meta.duration_ms);
    let time = if meta.start_unix_ms == 0 {
        push.until_ms
    } else {
        end.clamp(push.from_ms, push.until_ms)
    };
    let labels = vm_labels(&push.name);
    let (command, jvm) = (hub.vms.mask(&meta.command), meta.jvm_name.clone());
    let dropped = meta.dropped_samples;
    let Some((record, seq)) = hub.vms.pushed(
        identity(&push.name),
        &hub.store,
        || hub.may_add_vm(peer),
        |r| {
            r.labels = labels;
            if !command.is_empty() {
                r.command = command;
            }
            if !jvm.is_empty() {
                r.jvm = jvm;
            }
            r.dropped_samples = r.dropped_samples.max(dropped);
        },
    ) else {
        bump(&hub.stats.rejected, 1);
        return Err(Refused::TooMany(format!(
            "{peer} created more than {} new VMs this minute",
            crate::hub::MAX_NEW_VMS_PER_MINUTE
        )));
    };
    let id = record.id;
    bump(&hub.stats.ingested, 1);
    bump(&hub.stats.samples, profile.total(0));
    hub.store.put_vm(record);
    hub.store.put_profile(id, seq, time, &profile);
    hub.store.barrier().await;
    if hub.store.committed(id) < seq {
        return Err(Refused::Internal(format!(
            "the samples of VM {id} could not be stored"
        )));
    }
    Ok(id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::Registry;

    fn labels(l: &[(&str, &str)]) -> Vec<(String, String)> {
        l.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn names_parse_as_pyroscope_reads_them() {
        assert_eq!(
            parse_name("checkout{vm_id=3, host = h1.example ,pid=42}").unwrap(),
            SeriesName {
                app: "checkout".into(),
                labels: labels(&[("vm_id", "3"), ("host", "h1.example"), ("pid", "42")]),
            }
        );
        assert_eq!(parse_name(" my.app-1 ").unwrap().app, "my.app-1");
        assert_eq!(parse_name("a{}").unwrap().labels, vec![]);
        // A trailing comma, a later key replacing an earlier one, '=' and '{' inside a value.
        assert_eq!(
            parse_name("a{k=1,j=x=y{,k=2,}").unwrap().labels,
            labels(&[("k", "2"), ("j", "x=y{")])
        );
        let bad = |n: &str| parse_name(n).unwrap_err();
        assert_eq!(bad(""), "it has no application name");
        assert_eq!(bad("{a=b}"), "it has no application name");
        assert_eq!(
            bad("my app"),
            "the application name may hold letters, digits, '_', '.' and '-', not ' '"
        );
        assert_eq!(bad("a{k=v"), "its labels do not end with '}'");
        assert_eq!(
            bad("a{k=v}x"),
            "it goes on after the '}' that ends its labels"
        );
        assert_eq!(
            bad("a{k=v}}"),
            "it goes on after the '}' that ends its labels"
        );
        assert_eq!(bad("a{k}"), "label 'k' is not KEY=VALUE");
        assert_eq!(bad("a{=v}"), "label key '' is not letters, digits and '_'");
        assert_eq!(
            bad("a{k-1=v}"),
            "label key 'k-1' is not letters, digits and '_'"
        );
        assert_eq!(
            bad(&"a".repeat(MAX_NAME + 1)),
            "it is longer than 4096 bytes"
        );
        let many: Vec<String> = (0..=MAX_LABELS).map(|i| format!("k{i}=v")).collect();
        assert_eq!(
            bad(&format!("a{{{}}}", many.join(","))),
            "it has more than 64 labels"
        );
    }

    #[test]
    fn formatted_names_parse_back_cleaned() {
        let name = format_name(
            "check out!",
            &labels(&[
                ("service", "check out"),
                ("a.b", "x{y}=z,w"),
                ("a_b", "dup"),
                ("", "no key"),
                ("vm_id", " 7 "),
                ("1st", "x"),
            ]),
        );
        assert_eq!(
            name,
            "check_out_{service=check out,a_b=x_y__z_w,vm_id=7,_1st=x}"
        );
        assert_eq!(
            parse_name(&name).unwrap(),
            SeriesName {
                app: "check_out_".into(),
                labels: labels(&[
                    ("service", "check out"),
                    ("a_b", "x_y__z_w"),
                    ("vm_id", "7"),
                    ("_1st", "x"),
                ]),
            }
        );
        assert_eq!(format_name(" ", &[]), "jvmprof{}");
    }

    /// Random names from an alphabet of the syntax's characters and some others: parsing never
    /// panics, and whatever `format_name` makes of any app and labels parses back to it.
    #[test]
    fn fuzzed_names_never_panic_and_formatted_ones_round_trip() {
        const ALPHABET: &[char] = &[
            'a', 'Z', '0', '_', '.', '-', '{', '}', ',', '=', ' ', '\t', 'é', '€', '\u{0}', '%',
            ':', ';', '"', '\\', '/',
        ];
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move |n: usize| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % n as u64) as usize
        };
        for _ in 0..20_000 {
            let mut random = |max: usize| -> String {
                let len = next(max);
                (0..len).map(|_| ALPHABET[next(ALPHABET.len())]).collect()
            };
            let text = random(40);
            let _ = parse_name(&text);
            let app = random(8);
            let pairs: Vec<(String, String)> = (0..3).map(|_| (random(5), random(6))).collect();
            let formatted = format_name(&app, &pairs);
            let parsed = parse_name(&formatted)
                .unwrap_or_else(|e| panic!("{formatted:?} does not parse: {e}"));
            assert_eq!(format_name(&parsed.app, &parsed.labels), formatted);
        }
    }

    #[test]
    fn times_are_seconds_or_recognised_by_size() {
        assert_eq!(
            parse_time("from", Some("1700000000")),
            Ok(1_700_000_000_000)
        );
        assert_eq!(
            parse_time("from", Some("1700000000123")),
            Ok(1_700_000_000_123)
        );
        assert_eq!(
            parse_time("from", Some("1700000000123456")),
            Ok(1_700_000_000_123)
        );
        assert_eq!(
            parse_time("from", Some("1700000000123456789")),
            Ok(1_700_000_000_123)
        );
        assert_eq!(
            parse_time("until", None),
            Err("until (Unix seconds) is missing".into())
        );
        assert_eq!(
            parse_time("from", Some("now-1h")),
            Err("from 'now-1h' is not a Unix time in seconds".into())
        );
    }

    #[test]
    fn requests_are_checked_with_a_reason() {
        let q = |pairs: &[(&str, &str)]| -> HashMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let good = [
            ("name", "app{k=v}"),
            ("from", "10"),
            ("until", "20"),
            ("format", "pprof"),
            ("spyName", "jvmprof"),
        ];
        assert_eq!(
            check_request(&q(&good), Some("application/octet-stream")),
            Ok(Push {
                name: parse_name("app{k=v}").unwrap(),
                from_ms: 10_000,
                until_ms: 20_000,
                spy: "jvmprof".into(),
            })
        );
        let without = |key: &str| -> Vec<(&str, &str)> {
            good.iter().copied().filter(|(k, _)| *k != key).collect()
        };
        assert_eq!(
            check_request(&q(&without("format")), None),
            Err("format 'folded' is not supported here; send format=pprof".into())
        );
        assert_eq!(
            check_request(&q(&without("name")), None),
            Err("name (APP{key=value,...}) is missing".into())
        );
        assert_eq!(
            check_request(&q(&without("from")), None),
            Err("from (Unix seconds) is missing".into())
        );
        let mut bad_name = without("name");
        bad_name.push(("name", "app{k=v"));
        assert_eq!(
            check_request(&q(&bad_name), None),
            Err("bad name 'app{k=v': its labels do not end with '}'".into())
        );
        let mut reversed = without("until");
        reversed.push(("until", "5"));
        assert_eq!(
            check_request(&q(&reversed), None),
            Err("from is after until".into())
        );
        assert_eq!(
            check_request(&q(&good), Some("multipart/form-data; boundary=x")),
            Err("multipart bodies are not supported; send the pprof profile as the body".into())
        );
    }

    fn pprof(p: &Profile) -> Vec<u8> {
        let mut out = Vec::new();
        jvmprof_profile::write(
            p,
            jvmprof_profile::Format::Pprof,
            &Default::default(),
            &mut out,
        )
        .unwrap();
        out
    }

    fn sample() -> Profile {
        use jvmprof_profile::{Frame, Meta, Metric, ProfileBuilder, Thread, ThreadState};
        let mut b = ProfileBuilder::new(Meta {
            modes: vec!["cpu".into()],
            metrics: vec![Metric::Samples],
            ..Meta::default()
        });
        let f = [
            b.frame(Frame::java("A", "main", "()V", 1)),
            b.frame(Frame::java("A", "f", "()V", 2)),
        ];
        let s = b.stack(&f);
        let t = b.thread(Thread {
            tid: 1,
            name: "main".into(),
        });
        b.add(t, s, ThreadState::Running, &[5]);
        b.finish()
    }

    fn collapsed(p: &Profile) -> String {
        jvmprof_profile::collapsed::to_string(p, &Default::default()).unwrap()
    }

    #[test]
    fn bodies_decode_gzipped_or_raw_and_garbage_is_refused() {
        let gz = pprof(&sample());
        assert_eq!(collapsed(&decode(&gz).unwrap()), "A.main;A.f 5\n");
        let mut raw = Vec::new();
        flate2::read::GzDecoder::new(&gz[..])
            .read_to_end(&mut raw)
            .unwrap();
        assert_eq!(collapsed(&decode(&raw).unwrap()), "A.main;A.f 5\n");
        assert_eq!(
            decode(&[0x1f, 0x8b, 1, 2]).unwrap_err(),
            "the body is not valid gzip: unexpected end of file"
        );
        assert_eq!(
            decode(b"hello").unwrap_err(),
            "the body is not a pprof profile: wire type 4 is not used by pprof"
        );
        // Truncated: every cut of a real message is refused or read, never a panic.
        for cut in 0..raw.len() {
            let _ = decode(&raw[..cut]);
        }
    }

    #[test]
    fn bombs_are_refused_before_they_are_decoded() {
        // Gzip of more than MAX_PPROF zeros.
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        std::io::Write::write_all(&mut gz, &vec![0u8; MAX_PPROF + 1]).unwrap();
        let bomb = gz.finish().unwrap();
        assert!(bomb.len() < MAX_BODY / 100);
        assert_eq!(
            decode(&bomb).unwrap_err(),
            "the profile is larger than 64 MiB once un-gzipped"
        );
        // Many empty samples: 2 bytes each on the wire, a struct of 72 bytes each decoded.
        let empty_samples: Vec<u8> = [0x12u8, 0x00].repeat(8 << 20);
        assert_eq!(
            decode(&empty_samples).unwrap_err(),
            "the profile would take more than 512 MiB to decode"
        );
        // One location of 1,000 lines, referenced 20,000 times by each of 1,000 samples.
        let mut p = proto::Profile {
            string_table: vec!["".into(), "samples".into(), "count".into(), "f".into()],
            sample_type: vec![proto::ValueType { r#type: 1, unit: 2 }],
            function: vec![proto::Function {
                id: 1,
                name: 3,
                ..Default::default()
            }],
            location: vec![proto::Location {
                id: 1,
                line: vec![
                    proto::Line {
                        function_id: 1,
                        line: 1,
                        column: 0
                    };
                    1000
                ],
                ..Default::default()
            }],
            ..Default::default()
        };
        p.sample = vec![
            proto::Sample {
                location_id: vec![1; 20_000],
                value: vec![1],
                label: vec![],
            };
            1000
        ];
        let bytes = prost::Message::encode_to_vec(&p);
        assert_eq!(
            decode(&bytes).unwrap_err(),
            "the profile's stacks hold more than 16777216 frames"
        );
    }

    #[test]
    fn pushed_vms_are_named_by_their_labels() {
        let pushed =
            parse_name("checkout{service=checkout,env=prod,vm_id=3,host=h,pid=42}").unwrap();
        assert_eq!(
            identity(&pushed),
            ("h".into(), 42, "pushed: vm_id=3".into())
        );
        assert_eq!(
            vm_labels(&pushed),
            labels(&[("service", "checkout"), ("env", "prod")])
        );
        let other = parse_name("shop.cpu{region=eu,pod=a}").unwrap();
        assert_eq!(
            identity(&other),
            ("".into(), 0, "pushed: shop.cpu{pod=a,region=eu}".into())
        );
        assert_eq!(
            vm_labels(&other),
            labels(&[("region", "eu"), ("pod", "a"), ("service", "shop.cpu")])
        );
        assert_eq!(vm_labels(&parse_name("jvmprof{vm_id=1}").unwrap()), vec![]);

        let registry = Registry::default();
        let dir = std::env::temp_dir().join(format!("jvmprof-ingest-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let store = crate::store::Store::open(&dir).unwrap();
        let (a, seq) = registry
            .pushed(
                identity(&pushed),
                &store,
                || true,
                |r| r.labels = vm_labels(&pushed),
            )
            .unwrap();
        assert_eq!((a.host.as_str(), a.pid, seq), ("h", 42, 1));
        let (again, seq) = registry
            .pushed(identity(&pushed), &store, || false, |_| {})
            .unwrap();
        assert_eq!((again.id, seq), (a.id, 2));
        assert!(
            registry
                .pushed(identity(&other), &store, || false, |_| {})
                .is_none()
        );
        let (b, seq) = registry
            .pushed(identity(&other), &store, || true, |_| {})
            .unwrap();
        assert_ne!(b.id, a.id);
        assert_eq!(seq, 1);
        assert!(registry.connected().is_empty());
        drop(store);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
