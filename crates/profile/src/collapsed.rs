//! Collapsed stacks (`.collapsed`, `.txt`), the format of FlameGraph, async-profiler and inferno:
//! one line per distinct stack, root first, frames joined by `;`, then a space and an integer.
//!
//! Lines are sorted by their frames; stacks whose value is 0 are left out. A `;` in a name is
//! written as `:` and control characters as spaces, so every line parses back.

use crate::error::{Error, Result};
use crate::export::{ExportOptions, resolve_metric};
use crate::model::*;
use crate::stacks::named_stacks;
use std::io::{self, Write};
#[cfg(feature = "read")]
use std::io::{BufRead, BufReader, Read};

#[cfg(feature = "read")]
const FORMAT: &str = "collapsed";

/// Writes `profile` as collapsed stacks of one metric (`options.metric`, else
/// [`default_metric`](crate::default_metric)); with `options.threads` each line starts with
/// `[thread name]`.
pub fn write(profile: &Profile, options: &ExportOptions, out: impl Write) -> Result<()> {
    let metric = resolve_metric(profile, options.metric)?;
    let stacks = named_stacks(profile, metric, options.threads).sorted();
    let mut out = io::BufWriter::new(out);
    for (stack, value) in &stacks.stacks {
        for (i, name) in stack.iter().enumerate() {
            if i > 0 {
                out.write_all(b";")?;
            }
            out.write_all(stacks.names[*name as usize].as_bytes())?;
        }
        writeln!(out, " {value}")?;
    }
    out.flush()?;
    Ok(())
}

/// Returns the collapsed text of `profile` (see [`write`]).
pub fn to_string(profile: &Profile, options: &ExportOptions) -> Result<String> {
    let mut buf = Vec::new();
    write(profile, options, &mut buf)?;
    // Names are Rust strings and the separators are ASCII, so the text is UTF-8.
    String::from_utf8(buf).map_err(|e| Error::Export(e.to_string()))
}

/// Reads collapsed stacks; the values become the single metric `samples`
/// (see [`read_with_metric`]).
#[cfg(feature = "read")]
pub fn read(input: impl Read) -> Result<Profile> {
    read_with_metric(input, Metric::Samples)
}

/// Reads collapsed stacks whose values are `metric`.
///
/// Empty lines and lines starting with `#` are skipped. If every line has two frames or more and
/// starts with a bracketed frame (`[main];...`, as written with `--threads`), that frame becomes the sample's thread;
/// otherwise all samples belong to one thread named `all`. A name without a dot, or with `::`,
/// is a native frame; a bracketed name is synthetic; any other `a.b.C.m` is a Java frame of class
/// `a.b.C` and method `m` (leaf allocated types read back as Java-looking frames, which render to
/// the same name).
#[cfg(feature = "read")]
pub fn read_with_metric(input: impl Read, metric: Metric) -> Result<Profile> {
    let mut lines: Vec<(Vec<String>, u64)> = Vec::new();
    let reader = BufReader::new(input);
    for (i, line) in reader.split(b'\n').enumerate() {
        let lineno = i + 1;
        let line = line?;
        let line = std::str::from_utf8(&line)
            .map_err(|_| Error::invalid(FORMAT, format!("line {lineno} is not UTF-8 text")))?;
        let line = line.trim_end_matches('\r').trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (stack, value) = line.rsplit_once(' ').ok_or_else(|| {
            Error::invalid(
                FORMAT,
                format!("line {lineno}: expected `frame;frame;... value`, found no space"),
            )
        })?;
        let value: u64 = value.parse().map_err(|_| {
            Error::invalid(
                FORMAT,
                format!(
                    "line {lineno}: the value {:?} is not a non-negative integer",
                    truncate(value, 40)
                ),
            )
        })?;
        let stack = stack.trim_end();
        if stack.is_empty() {
            return Err(Error::invalid(
                FORMAT,
                format!("line {lineno}: no frames before the value"),
            ));
        }
        lines.push((stack.split(';').map(str::to_string).collect(), value));
    }
    let threads_first = !lines.is_empty()
        && lines
            .iter()
            .all(|(s, _)| s.len() >= 2 && is_bracketed(&s[0]));
    let meta = Meta {
        metrics: vec![metric],
        ..Meta::default()
    };
    let mut b = ProfileBuilder::new(meta);
    let all = if threads_first {
        0
    } else {
        b.thread(Thread {
            tid: 0,
            name: "all".to_string(),
        })
    };
    for (names, value) in lines {
        let (thread, names) = if threads_first {
            let name = &names[0][1..names[0].len() - 1];
            let t = b.thread(Thread {
                tid: 0,
                name: name.to_string(),
            });
            (t, &names[1..])
        } else {
            (all, &names[..])
        };
        let frames: Vec<u32> = names.iter().map(|n| b.frame(frame_from_name(n))).collect();
        let stack = b.stack(&frames);
        b.add(thread, stack, ThreadState::Unknown, &[value]);
    }
    Ok(b.finish())
}

#[cfg(feature = "read")]
fn is_bracketed(name: &str) -> bool {
    name.len() >= 2 && name.starts_with('[') && name.ends_with(']')
}

/// The frame a collapsed name most likely stands for; `frame_from_name(n).name() == n`.
#[cfg(feature = "read")]
pub(crate) fn frame_from_name(name: &str) -> Frame {
    if is_bracketed(name) {
        return Frame::synthetic(FrameKind::Synthetic, name);
    }
    if name.contains("::") || name.contains('(') || name.contains('/') {
        return Frame::synthetic(FrameKind::Native, name);
    }
    match name.rsplit_once('.') {
        Some((class, method)) if !class.is_empty() && !method.is_empty() => {
            Frame::java(class, method, "", 0)
        }
        _ => Frame::synthetic(FrameKind::Native, name),
    }
}

#[cfg(feature = "read")]
fn truncate(s: &str, max: usize) -> &str {
    match s.char_indices().nth(max) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdata::{alloc_profile, sample_profile};

    fn opts(metric: Option<Metric>, threads: bool) -> ExportOptions {
        ExportOptions { metric, threads }
    }

    #[test]
    fn writes_exact_lines_merging_line_numbers() {
        let text = to_string(&sample_profile(), &opts(None, false)).unwrap();
        assert_eq!(
            text,
            "com.example.App.main;com.example.App.work 2\n\
             com.example.App.main;com.example.App.work;java.util.HashMap.put 5\n\
             java.lang.Thread.run;Outer$Inner.run;write 4\n"
        );
    }

    #[test]
    fn threads_option_adds_thread_frame() {
        let text = to_string(&sample_profile(), &opts(None, true)).unwrap();
        assert_eq!(
            text,
            "[main];com.example.App.main;com.example.App.work 1\n\
             [main];com.example.App.main;com.example.App.work;java.util.HashMap.put 5\n\
             [worker-1];com.example.App.main;com.example.App.work 1\n\
             [worker-1];java.lang.Thread.run;Outer$Inner.run;write 4\n"
        );
    }

    #[test]
    fn value_option_picks_the_metric() {
        let text = to_string(&sample_profile(), &opts(Some(Metric::Ns), false)).unwrap();
        assert_eq!(
            text,
            "com.example.App.main;com.example.App.work 20000000\n\
             com.example.App.main;com.example.App.work;java.util.HashMap.put 50000000\n\
             java.lang.Thread.run;Outer$Inner.run;write 40000000\n"
        );
        let e = to_string(&sample_profile(), &opts(Some(Metric::Calls), false)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "cannot export: the profile has no `calls` metric (it has: samples, ns)"
        );
    }

    #[test]
    fn alloc_leaf_is_the_type_and_default_metric_is_bytes() {
        let text = to_string(&alloc_profile(), &opts(None, false)).unwrap();
        assert_eq!(
            text,
            "com.example.App.main;byte[] 1048576\ncom.example.App.main;java.lang.String 4800\n"
        );
    }

    #[test]
    fn separators_in_names_are_replaced() {
        let mut b = ProfileBuilder::new(Meta {
            metrics: vec![Metric::Samples],
            ..Meta::default()
        });
        let f = b.frame(Frame::synthetic(FrameKind::Synthetic, "a;b\nc"));
        let t = b.thread(Thread {
            tid: 0,
            name: "pool; 1".into(),
        });
        let s = b.stack(&[f]);
        b.add(t, s, ThreadState::Running, &[7]);
        let text = to_string(&b.finish(), &opts(None, true)).unwrap();
        assert_eq!(text, "[pool: 1];a:b c 7\n");
    }

    #[test]
    fn reads_back_what_it_writes() {
        for threads in [false, true] {
            let text = to_string(&sample_profile(), &opts(None, threads)).unwrap();
            let p = read(text.as_bytes()).unwrap();
            assert_eq!(p.meta.metrics, vec![Metric::Samples]);
            assert_eq!(to_string(&p, &opts(None, threads)).unwrap(), text);
        }
    }

    #[test]
    fn reader_recovers_threads_and_frames() {
        let p = read(&b"[main];a.B.c;write 3\n[main];a.B.c 2\n\n# comment\n[t 2];x::y 1\r\n"[..])
            .unwrap();
        let threads: Vec<&str> = p.threads.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(threads, ["main", "t 2"]);
        assert_eq!(p.frames[0], Frame::java("a.B", "c", "", 0));
        assert_eq!(p.frames[1], Frame::synthetic(FrameKind::Native, "write"));
        assert_eq!(p.frames[2], Frame::synthetic(FrameKind::Native, "x::y"));
        // [a.B.c] is interned as the parent of [a.B.c, write], before it.
        let stacks: Vec<Vec<u32>> = p.stacks.iter().collect();
        assert_eq!(stacks, vec![vec![0], vec![0, 1], vec![2]]);
        let values: Vec<(u32, u32, u64)> = p
            .samples
            .iter()
            .map(|s| (s.thread, s.stack, s.values[0]))
            .collect();
        assert_eq!(values, [(0, 1, 3), (0, 0, 2), (1, 2, 1)]);
        // Not every line has a thread: the bracketed frame stays a frame.
        let p = read(&b"[main];a.B.c 3\na.B.c 2\n"[..]).unwrap();
        assert_eq!(p.threads.len(), 1);
        assert_eq!(p.threads[0].name, "all");
        assert_eq!(
            p.frames[0],
            Frame::synthetic(FrameKind::Synthetic, "[main]")
        );
    }

    #[test]
    fn reader_merges_and_saturates() {
        let p = read(&b"a.b 18446744073709551615\na.b 5\n"[..]).unwrap();
        assert_eq!(p.samples.len(), 1);
        assert_eq!(p.samples[0].values, [u64::MAX]);
    }

    #[test]
    fn reader_errors_name_the_line() {
        let e = read(&b"a;b 1\na;b\n"[..]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid collapsed data: line 2: expected `frame;frame;... value`, found no space"
        );
        let e = read(&b"a;b -1\n"[..]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid collapsed data: line 1: the value \"-1\" is not a non-negative integer"
        );
        let e = read(&b"a 1\n\xff\xfe 2\n"[..]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid collapsed data: line 2 is not UTF-8 text"
        );
        let e = read(&b"  5\n"[..]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid collapsed data: line 1: expected `frame;frame;... value`, found no space"
        );
    }

    #[test]
    fn empty_input_is_an_empty_profile() {
        let p = read(&b""[..]).unwrap();
        assert!(p.samples.is_empty());
        assert_eq!(to_string(&p, &opts(None, false)).unwrap(), "");
    }

    proptest::proptest! {
        #[test]
        fn reader_never_panics(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..300)) {
            if let Ok(p) = read(&bytes[..]) {
                proptest::prop_assert!(p.validate().is_ok());
                let _ = to_string(&p, &opts(None, true)).unwrap();
            }
        }

        #[test]
        fn reader_never_panics_on_textlike(text in "[a-z.;\\[\\] 0-9\n]{0,200}") {
            if let Ok(p) = read(text.as_bytes()) {
                let out = to_string(&p, &opts(None, false)).unwrap();
                // What we write always parses back to the same text.
                let again = read(out.as_bytes()).unwrap();
                proptest::prop_assert_eq!(to_string(&again, &opts(None, false)).unwrap(), out);
            }
        }
    }
}
