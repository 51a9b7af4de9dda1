//! The format registry: which format a path or `--format` name means, writing a profile in any
//! format and reading any readable file back.

use crate::error::{Error, Result};
use crate::export::ExportOptions;
use crate::model::Profile;
use crate::{collapsed, dot, flamegraph, jfr, native, pprof, speedscope, timeline};
use std::fmt;
use std::io::Write;
use std::path::Path;

/// An output (and for some, input) format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Format {
    /// `.jvmprof`: lossless, readable.
    Native,
    /// `.collapsed`, `.txt`: one metric, readable.
    Collapsed,
    /// `.html`: interactive flame graph, one metric, write only.
    Html,
    /// `.pb.gz`: pprof, every metric, readable.
    Pprof,
    /// `.speedscope.json`: one metric, write only.
    Speedscope,
    /// `.dot`: Graphviz call graph, one metric, write only.
    Dot,
    /// `.jfr`: Java Flight Recorder recording, samples, alloc and lock metrics, readable.
    Jfr,
    /// `.trace.json`: Chrome trace / Perfetto timeline, one track per thread, write only.
    Trace,
}

impl Format {
    pub const ALL: [Format; 8] = [
        Format::Native,
        Format::Collapsed,
        Format::Html,
        Format::Pprof,
        Format::Speedscope,
        Format::Dot,
        Format::Jfr,
        Format::Trace,
    ];

    /// The `--format` name.
    pub fn name(self) -> &'static str {
        match self {
            Format::Native => "jvmprof",
            Format::Collapsed => "collapsed",
            Format::Html => "html",
            Format::Pprof => "pprof",
            Format::Speedscope => "speedscope",
            Format::Dot => "dot",
            Format::Jfr => "jfr",
            Format::Trace => "trace",
        }
    }

    /// The usual file extension, without the leading dot.
    pub fn extension(self) -> &'static str {
        match self {
            Format::Native => "jvmprof",
            Format::Collapsed => "collapsed",
            Format::Html => "html",
            Format::Pprof => "pb.gz",
            Format::Speedscope => "speedscope.json",
            Format::Dot => "dot",
            Format::Jfr => "jfr",
            Format::Trace => "trace.json",
        }
    }

    /// Parses a `--format` value: a format name or an extension (`jvmprof`/`native`,
    /// `collapsed`/`txt`, `html`/`flamegraph`, `pprof`/`pb.gz`, `speedscope`/`speedscope.json`),
    /// case-insensitive.
    pub fn parse(s: &str) -> Result<Format> {
        Ok(match s.to_ascii_lowercase().as_str() {
            "jvmprof" | "native" => Format::Native,
            "collapsed" | "txt" | "folded" => Format::Collapsed,
            "html" | "flamegraph" | "flame" => Format::Html,
            "pprof" | "pb.gz" | "pb" => Format::Pprof,
            "speedscope" | "speedscope.json" => Format::Speedscope,
            "dot" | "graphviz" => Format::Dot,
            "jfr" => Format::Jfr,
            "trace" | "trace.json" | "chrome" | "perfetto" | "timeline" => Format::Trace,
            _ => {
                return Err(Error::UnknownFormat(format!(
                    "{s:?} (known: jvmprof, collapsed, html, pprof, speedscope, dot, jfr, trace)"
                )));
            }
        })
    }

    /// The format a path's extension names: `.jvmprof`, `.collapsed`, `.txt`, `.html`, `.pb.gz`,
    /// `.speedscope.json`, `.dot`, `.jfr`, `.trace.json` (case-insensitive). Errors name the path.
    pub fn from_path(path: &Path) -> Result<Format> {
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().to_ascii_lowercase())
            .unwrap_or_default();
        let format = if name.ends_with(".jvmprof") {
            Format::Native
        } else if name.ends_with(".collapsed")
            || name.ends_with(".txt")
            || name.ends_with(".folded")
        {
            Format::Collapsed
        } else if name.ends_with(".html") || name.ends_with(".htm") {
            Format::Html
        } else if name.ends_with(".pb.gz") || name.ends_with(".pprof") {
            Format::Pprof
        } else if name.ends_with(".speedscope.json") {
            Format::Speedscope
        } else if name.ends_with(".dot") || name.ends_with(".gv") {
            Format::Dot
        } else if name.ends_with(".jfr") {
            Format::Jfr
        } else if name.ends_with(".trace.json") {
            Format::Trace
        } else {
            return Err(Error::UnknownFormat(
                "no format for this file name (use .jvmprof, .collapsed, .txt, .html, .pb.gz, \
                 .speedscope.json, .dot, .jfr or .trace.json, or --format)"
                    .to_string(),
            )
            .in_file(path));
        };
        Ok(format)
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Format {
    type Err = Error;
    fn from_str(s: &str) -> Result<Format> {
        Format::parse(s)
    }
}

/// Writes `profile` in `format`. Single-metric formats use `options.metric`; the native and pprof
/// formats carry every metric and ignore it (pprof makes `options.metric` its default sample type).
pub fn write(
    profile: &Profile,
    format: Format,
    options: &ExportOptions,
    mut out: impl Write,
) -> Result<()> {
    match format {
        Format::Native => native::write(profile, &mut out)?,
        Format::Collapsed => collapsed::write(profile, options, &mut out)?,
        Format::Pprof => pprof::write(profile, options, &mut out)?,
        Format::Speedscope => speedscope::write(profile, options, &mut out)?,
        Format::Dot => dot::write(
            profile,
            &dot::DotOptions {
                metric: options.metric,
                ..dot::DotOptions::default()
            },
            &mut out,
        )?,
        Format::Html => flamegraph::write(profile, options, &mut out)?,
        Format::Jfr => jfr::write(profile, &mut out)?,
        Format::Trace => timeline::write(profile, &mut out)?,
    }
    Ok(())
}

/// Reads a profile from bytes, recognized by content: the native magic header, JFR's `FLR\0`,
/// gzip (pprof), UTF-8 text (collapsed), else an uncompressed pprof message.
#[cfg(feature = "read")]
pub fn read_bytes(bytes: &[u8]) -> Result<Profile> {
    if bytes.is_empty() {
        // An empty collapsed file would be an empty profile, but an empty file is far more
        // likely a recording that failed.
        return Err(Error::invalid("profile", "the file is empty"));
    }
    if native::sniff(bytes) {
        native::read(bytes)
    } else if jfr::sniff(bytes) {
        jfr::read(bytes)
    } else if pprof::sniff_gzip(bytes) {
        pprof::read(bytes)
    } else if let Some(what) = output_only(bytes) {
        Err(Error::UnknownFormat(format!(
            "this is {what}, which jvmprof writes but cannot read back; convert or report the \
             .jvmprof, .jfr, .pb.gz or .collapsed file it was made from"
        )))
    } else if std::str::from_utf8(bytes).is_ok() {
        collapsed::read(bytes)
    } else {
        pprof::read(bytes).map_err(|e| match e {
            Error::Invalid { .. } => Error::UnknownFormat(
                "not a jvmprof, JFR, pprof or collapsed file (no jvmprof or JFR header, not gzip, \
                 not text, not a pprof message)"
                    .to_string(),
            ),
            e => e,
        })
    }
}

/// What an output-only file is, by its first bytes: an HTML page (the flame graph), JSON
/// (speedscope, trace) or a Graphviz graph, which no reader takes.
#[cfg(feature = "read")]
fn output_only(bytes: &[u8]) -> Option<&'static str> {
    let start = &bytes[..bytes.len().min(512)];
    let text = String::from_utf8_lossy(start);
    let head = text.trim_start().to_ascii_lowercase();
    if head.starts_with("<!doctype html") || head.starts_with("<html") {
        Some("an HTML page (a flame graph)")
    } else if head.starts_with('{') || head.starts_with('[') {
        Some("JSON (speedscope or a timeline)")
    } else if head.starts_with("digraph") {
        Some("a Graphviz graph")
    } else {
        None
    }
}

/// Reads a native, JFR, pprof or collapsed file, recognized by content (not by extension). Errors name
/// the file.
#[cfg(feature = "read")]
pub fn read_any(path: impl AsRef<Path>) -> Result<Profile> {
    let path = path.as_ref();
    let bytes = std::fs::read(path).map_err(|e| Error::Io(e).in_file(path))?;
    read_bytes(&bytes).map_err(|e| e.in_file(path))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Metric;
    use crate::testdata::sample_profile;
    use std::path::PathBuf;

    #[test]
    fn formats_by_extension() {
        let cases = [
            ("out.jvmprof", Format::Native),
            ("dir.x/out.collapsed", Format::Collapsed),
            ("OUT.TXT", Format::Collapsed),
            ("flame.html", Format::Html),
            ("cpu.pb.gz", Format::Pprof),
            ("a.speedscope.json", Format::Speedscope),
        ];
        for (path, format) in cases {
            assert_eq!(
                Format::from_path(Path::new(path)).unwrap(),
                format,
                "{path}"
            );
        }
        let e = Format::from_path(Path::new("/tmp/out.json")).unwrap_err();
        assert_eq!(
            e.to_string(),
            "/tmp/out.json: unknown format: no format for this file name (use .jvmprof, \
             .collapsed, .txt, .html, .pb.gz, .speedscope.json, .dot, .jfr or .trace.json, or \
             --format)"
        );
        assert_eq!(
            Format::from_path(Path::new("calls.dot")).unwrap(),
            Format::Dot
        );
        assert!(Format::from_path(Path::new("out.gz")).is_err());
    }

    #[test]
    fn formats_by_name() {
        for f in Format::ALL {
            assert_eq!(Format::parse(f.name()).unwrap(), f);
            assert_eq!(Format::parse(f.extension()).unwrap(), f);
            assert_eq!(f.to_string().parse::<Format>().unwrap(), f);
            let path = format!("x.{}", f.extension());
            assert_eq!(Format::from_path(Path::new(&path)).unwrap(), f);
        }
        assert_eq!(Format::parse("HTML").unwrap(), Format::Html);
        assert_eq!(
            Format::parse("svg").unwrap_err().to_string(),
            "unknown format: \"svg\" (known: jvmprof, collapsed, html, pprof, speedscope, dot, jfr, \
             trace)"
        );
    }

    #[test]
    fn output_only_files_are_named_as_such() {
        let p = crate::testdata::timed_profile();
        for (format, what) in [
            (Format::Html, "an HTML page"),
            (Format::Speedscope, "JSON"),
            (Format::Trace, "JSON"),
            (Format::Dot, "a Graphviz graph"),
        ] {
            let mut bytes = Vec::new();
            write(&p, format, &ExportOptions::default(), &mut bytes).unwrap();
            let e = read_bytes(&bytes).unwrap_err().to_string();
            assert!(
                e.contains(what) && e.contains("cannot read back"),
                "{format}: {e}"
            );
        }
    }

    /// A directory of this test's own (tests run in parallel; none may remove another's files).
    fn temp_dir(test: &str) -> PathBuf {
        let dir = std::env::temp_dir()
            .join(format!("jvmprof-profile-test-{}", std::process::id()))
            .join(test);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn read_any_recognizes_content_not_extension() {
        let dir = temp_dir("content");
        let p = sample_profile();
        let options = ExportOptions::default();
        for (format, file) in [
            (Format::Native, "native.txt"),
            (Format::Pprof, "pprof.jvmprof"),
            (Format::Collapsed, "collapsed.pb.gz"),
        ] {
            let path = dir.join(file);
            let mut bytes = Vec::new();
            write(&p, format, &options, &mut bytes).unwrap();
            std::fs::write(&path, &bytes).unwrap();
            let back = read_any(&path).unwrap();
            if format == Format::Collapsed {
                assert_eq!(
                    collapsed::to_string(&back, &options).unwrap(),
                    collapsed::to_string(&p, &options).unwrap()
                );
            } else {
                assert_eq!(back, p, "{format}");
            }
        }
        // Uncompressed pprof.
        let path = dir.join("raw.pb");
        let raw = prost::Message::encode_to_vec(&pprof::to_proto(&p, &options));
        std::fs::write(&path, raw).unwrap();
        assert_eq!(read_any(&path).unwrap(), p);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn read_errors_name_the_file() {
        let dir = temp_dir("errors");
        let missing = dir.join("missing.jvmprof");
        let e = read_any(&missing).unwrap_err();
        assert!(
            e.to_string()
                .starts_with(&format!("{}: I/O error: ", missing.display())),
            "{e}"
        );
        let binary = dir.join("garbage.bin");
        std::fs::write(&binary, [0xff, 0xfe, 0x00, 0x12, 0x80]).unwrap();
        assert_eq!(
            read_any(&binary).unwrap_err().to_string(),
            format!(
                "{}: unknown format: not a jvmprof, JFR, pprof or collapsed file (no jvmprof or \
                 JFR header, not gzip, not text, not a pprof message)",
                binary.display()
            )
        );
        let empty = dir.join("empty.collapsed");
        std::fs::write(&empty, b"").unwrap();
        assert_eq!(
            read_any(&empty).unwrap_err().to_string(),
            format!(
                "{}: invalid profile data: the file is empty",
                empty.display()
            )
        );
        let truncated = dir.join("cut.jvmprof");
        let mut bytes = Vec::new();
        native::write(&sample_profile(), &mut bytes).unwrap();
        std::fs::write(&truncated, &bytes[..bytes.len() / 2]).unwrap();
        assert!(
            read_any(&truncated)
                .unwrap_err()
                .to_string()
                .starts_with(&format!("{}: truncated jvmprof file", truncated.display()))
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn every_format_writes() {
        let p = crate::testdata::timed_profile();
        for format in Format::ALL {
            let mut bytes = Vec::new();
            write(&p, format, &ExportOptions::default(), &mut bytes).unwrap();
            assert!(bytes.len() > 50, "{format}: {} bytes", bytes.len());
        }
        let e = write(
            &p,
            Format::Html,
            &ExportOptions {
                metric: Some(Metric::Bytes),
                threads: false,
            },
            Vec::new(),
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "cannot export: the profile has no `bytes` metric (it has: samples, ns)"
        );
    }

    proptest::proptest! {
        #[test]
        fn read_bytes_never_panics(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..300)) {
            let _ = read_bytes(&bytes);
        }
    }
}
