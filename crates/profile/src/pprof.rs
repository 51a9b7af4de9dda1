//! pprof (`.pb.gz`): the gzipped `perftools.profiles.Profile` message read by `go tool pprof`,
//! Pyroscope, Grafana and others.
//!
//! Every metric is a sample type (`samples`/count, `ns`/nanoseconds, `calls`/count,
//! `bytecodes`/count, `bytes`/bytes, `objects`/count); the thread is the string label `thread`
//! (its tid the numeric label `thread_id`) and a known state the label `state`. A frame is a
//! function (name `package.Class.method`, system name with the JVM descriptor) and a location per
//! (frame, line), in a mapping named by the frame's kind (`[java]`, `[native]`, ...). The run's
//! metadata is one comment `jvmprof.meta={json}`, which [`read`] turns back into [`Meta`], so
//! `native → pprof → native` keeps everything.

#[cfg(feature = "read")]
use crate::collapsed::frame_from_name;
#[cfg(feature = "read")]
use crate::error::Error;
use crate::error::Result;
use crate::export::{ExportOptions, default_metric};
use crate::model::*;
use flate2::Compression;
use flate2::write::GzEncoder;
use prost::Message;
use std::collections::HashMap;
#[cfg(feature = "read")]
use std::io::Read;
use std::io::Write;

/// The generated `perftools.profiles` types (from `proto/profile.proto`).
#[allow(clippy::all, missing_docs)]
pub mod proto {
    include!(concat!(env!("OUT_DIR"), "/perftools.profiles.rs"));
}

#[cfg(feature = "read")]
const FORMAT: &str = "pprof";
const META_COMMENT: &str = "jvmprof.meta=";

/// Interns strings into a pprof string table (index 0 is "").
struct Strings {
    table: Vec<String>,
    ids: HashMap<String, i64>,
}

impl Strings {
    fn new() -> Strings {
        let mut s = Strings {
            table: Vec::new(),
            ids: HashMap::new(),
        };
        s.id("");
        s
    }

    fn id(&mut self, s: &str) -> i64 {
        if let Some(id) = self.ids.get(s) {
            return *id;
        }
        let id = self.table.len() as i64;
        self.table.push(s.to_string());
        self.ids.insert(s.to_string(), id);
        id
    }
}

/// Frames of each kind sit in their own mapping (ids 1 to 5), named by the kind, so a reader can
/// tell an allocated type from a Java frame of the same name.
const KINDS: [(FrameKind, &str); 5] = [
    (FrameKind::Java, "[java]"),
    (FrameKind::Native, "[native]"),
    (FrameKind::Synthetic, "[synthetic]"),
    (FrameKind::AllocatedType, "[allocated type]"),
    (FrameKind::LockClass, "[lock class]"),
];

fn kind_mapping_id(kind: FrameKind) -> u64 {
    KINDS.iter().position(|(k, _)| *k == kind).unwrap_or(0) as u64 + 1
}

fn to_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

#[cfg(feature = "read")]
fn state_from_str(s: &str) -> Option<ThreadState> {
    Some(match s {
        "unknown" => ThreadState::Unknown,
        "running" => ThreadState::Running,
        "sleeping" => ThreadState::Sleeping,
        "blocked" => ThreadState::Blocked,
        "waiting" => ThreadState::Waiting,
        "timed_waiting" => ThreadState::TimedWaiting,
        "parked" => ThreadState::Parked,
        "native" => ThreadState::Native,
        _ => return None,
    })
}

/// Builds the pprof message of `profile`. `options.metric` (else the default metric) becomes the
/// default sample type; `options.threads` is not needed (threads are labels).
pub fn to_proto(profile: &Profile, options: &ExportOptions) -> proto::Profile {
    let mut strings = Strings::new();
    let meta = &profile.meta;
    let sample_type = meta
        .metrics
        .iter()
        .map(|m| proto::ValueType {
            r#type: strings.id(m.as_str()),
            unit: strings.id(m.unit()),
        })
        .collect();

    // One function per frame (same index + 1), one location per frame.
    let mut function = Vec::with_capacity(profile.frames.len());
    let mut location = Vec::with_capacity(profile.frames.len());
    for (i, f) in profile.frames.iter().enumerate() {
        let id = i as u64 + 1;
        let name = f.name();
        let system_name = format!("{name}{}", f.descriptor);
        function.push(proto::Function {
            id,
            name: strings.id(&name),
            system_name: strings.id(&system_name),
            filename: 0,
            start_line: 0,
        });
        location.push(proto::Location {
            id,
            mapping_id: kind_mapping_id(f.kind),
            address: 0,
            line: vec![proto::Line {
                function_id: id,
                line: i64::from(f.line),
                column: 0,
            }],
            is_folded: false,
        });
    }

    let thread_key = strings.id("thread");
    let tid_key = strings.id("thread_id");
    let state_key = strings.id("state");
    let sample = profile
        .samples
        .iter()
        .map(|s| {
            let thread = &profile.threads[s.thread as usize];
            let mut label = vec![proto::Label {
                key: thread_key,
                str: strings.id(&thread.name),
                num: 0,
                num_unit: 0,
            }];
            if thread.tid != 0 {
                label.push(proto::Label {
                    key: tid_key,
                    str: 0,
                    num: to_i64(thread.tid),
                    num_unit: 0,
                });
            }
            if s.state != ThreadState::Unknown {
                label.push(proto::Label {
                    key: state_key,
                    str: strings.id(s.state.as_str()),
                    num: 0,
                    num_unit: 0,
                });
            }
            proto::Sample {
                location_id: profile
                    .stacks
                    .frames(s.stack)
                    .iter()
                    .rev()
                    .map(|f| u64::from(*f) + 1)
                    .collect(),
                value: s.values.iter().map(|v| to_i64(*v)).collect(),
                label,
            }
        })
        .collect();

    let mapping = KINDS
        .iter()
        .map(|(kind, name)| proto::Mapping {
            id: kind_mapping_id(*kind),
            filename: strings.id(name),
            has_functions: true,
            has_line_numbers: true,
            ..proto::Mapping::default()
        })
        .collect();
    // Serializing plain strings and numbers to JSON cannot fail.
    let meta_json = serde_json::to_string(meta).unwrap_or_default();
    let comment = vec![strings.id(&format!("{META_COMMENT}{meta_json}"))];

    let (period_type, period) = if meta.interval_ns > 0 {
        let event = if meta.modes.iter().any(|m| m == "cpu") {
            "cpu"
        } else if meta.modes.iter().any(|m| m == "wall") {
            "wall"
        } else {
            "interval"
        };
        (
            Some(proto::ValueType {
                r#type: strings.id(event),
                unit: strings.id("nanoseconds"),
            }),
            to_i64(meta.interval_ns),
        )
    } else {
        (None, 0)
    };
    let default_sample_type = match options.metric.or_else(|| default_metric(profile)) {
        Some(m) if meta.metrics.contains(&m) => strings.id(m.as_str()),
        _ => 0,
    };

    proto::Profile {
        sample_type,
        sample,
        mapping,
        location,
        function,
        string_table: strings.table,
        drop_frames: 0,
        keep_frames: 0,
        time_nanos: to_i64(meta.start_unix_ms.saturating_mul(1_000_000)),
        duration_nanos: to_i64(meta.duration_ms.saturating_mul(1_000_000)),
        period_type,
        period,
        comment,
        default_sample_type,
        doc_url: 0,
    }
}

/// Writes `profile` as a gzipped pprof message.
pub fn write(profile: &Profile, options: &ExportOptions, out: impl Write) -> Result<()> {
    let bytes = to_proto(profile, options).encode_to_vec();
    let mut gz = GzEncoder::new(out, Compression::default());
    gz.write_all(&bytes)?;
    gz.finish()?.flush()?;
    Ok(())
}

/// Whether `bytes` (the start of a file) look like gzip, the usual pprof wrapping.
#[cfg(feature = "read")]
pub fn sniff_gzip(bytes: &[u8]) -> bool {
    bytes.starts_with(&[0x1f, 0x8b])
}

/// Reads a pprof profile, gzipped or not. Made for what [`write`] writes; other pprof files are
/// read when their sample types are jvmprof metric names (`samples`, `ns`, `calls`, ...) or the
/// common `cpu`/`wall` (nanoseconds, as `ns`) and their ids and indices are consistent.
#[cfg(feature = "read")]
pub fn read(mut input: impl Read) -> Result<Profile> {
    let mut raw = Vec::new();
    input.read_to_end(&mut raw)?;
    let bytes = if sniff_gzip(&raw) {
        // Bounded: a 2 MB gzip of zeros would inflate to 2 GB.
        crate::native::gunzip_bounded(&raw, FORMAT, "gzip data")?
    } else {
        raw
    };
    let message = proto::Profile::decode(&bytes[..])
        .map_err(|e| Error::invalid(FORMAT, format!("not a pprof message: {e}")))?;
    from_proto(&message)
}

/// Turns a decoded pprof message into a [`Profile`], checking every id and index.
#[cfg(feature = "read")]
pub fn from_proto(p: &proto::Profile) -> Result<Profile> {
    let bad = |detail: String| Error::invalid(FORMAT, detail);
    let string = |i: i64, what: &str| -> Result<&str> {
        usize::try_from(i)
            .ok()
            .and_then(|i| p.string_table.get(i))
            .map(String::as_str)
            .ok_or_else(|| {
                bad(format!(
                    "{what} refers to string {i}, past the string table"
                ))
            })
    };
    if p.string_table.first().is_some_and(|s| !s.is_empty()) {
        return Err(bad("the string table does not start with \"\"".to_string()));
    }

    let mut metrics = Vec::with_capacity(p.sample_type.len());
    for vt in &p.sample_type {
        let ty = string(vt.r#type, "a sample type")?;
        let unit = string(vt.unit, "a sample unit")?;
        let metric = match (Metric::parse(ty), ty, unit) {
            (Some(m), _, _) => m,
            (None, "cpu" | "wall", "nanoseconds") => Metric::Ns,
            _ => return Err(bad(format!("sample type {ty}/{unit} is no jvmprof metric"))),
        };
        if metrics.contains(&metric) {
            return Err(bad(format!(
                "two sample types map to the metric {}",
                metric.as_str()
            )));
        }
        metrics.push(metric);
    }
    // Without our comment (a foreign pprof file), take what the message itself says.
    let mut meta = Meta {
        metrics: metrics.clone(),
        start_unix_ms: u64::try_from(p.time_nanos).unwrap_or(0) / 1_000_000,
        duration_ms: u64::try_from(p.duration_nanos).unwrap_or(0) / 1_000_000,
        interval_ns: u64::try_from(p.period).unwrap_or(0),
        ..Meta::default()
    };
    for c in &p.comment {
        if let Some(json) = string(*c, "a comment")?.strip_prefix(META_COMMENT) {
            meta = serde_json::from_str::<Meta>(json)
                .map_err(|e| bad(format!("the jvmprof.meta comment does not decode: {e}")))?;
            if meta.metrics != metrics {
                return Err(bad(
                    "the jvmprof.meta comment does not match the sample types".to_string(),
                ));
            }
        }
    }
    let mut mapping_kinds: HashMap<u64, FrameKind> = HashMap::new();
    for m in &p.mapping {
        let name = string(m.filename, "a mapping file name")?;
        if let Some((kind, _)) = KINDS.iter().find(|(_, n)| *n == name) {
            mapping_kinds.insert(m.id, *kind);
        }
    }

    let mut b = ProfileBuilder::new(meta);
    // Functions by id, as frames of a guessed kind and no line.
    let mut functions: HashMap<u64, Frame> = HashMap::new();
    for f in &p.function {
        let name = string(f.name, "a function name")?;
        let system = string(f.system_name, "a function system name")?;
        let mut frame = frame_from_name(name);
        if let Some(descriptor) = system.strip_prefix(name) {
            frame.descriptor = descriptor.to_string();
        }
        if f.id == 0 || functions.insert(f.id, frame).is_some() {
            return Err(bad(format!("function id {} is 0 or used twice", f.id)));
        }
    }
    // Locations by id: frame ids, leaf first (inlined functions before their caller).
    let mut locations: HashMap<u64, Vec<u32>> = HashMap::new();
    for l in &p.location {
        let mut frames = Vec::with_capacity(l.line.len());
        for line in &l.line {
            let mut frame = functions
                .get(&line.function_id)
                .ok_or_else(|| {
                    bad(format!(
                        "location {} refers to function {}, which does not exist",
                        l.id, line.function_id
                    ))
                })?
                .clone();
            frame.line = u32::try_from(line.line).unwrap_or(0);
            match mapping_kinds.get(&l.mapping_id) {
                Some(FrameKind::Java) | None => {}
                Some(kind) => {
                    // Non-Java frames keep their whole name in `method`.
                    frame.method = frame.name();
                    frame.class.clear();
                    frame.kind = *kind;
                }
            }
            frames.push(b.frame(frame));
        }
        if l.id == 0 || locations.insert(l.id, frames).is_some() {
            return Err(bad(format!("location id {} is 0 or used twice", l.id)));
        }
    }
    let nmetrics = p.sample_type.len();
    let mut stack = Vec::new();
    let mut values = Vec::with_capacity(nmetrics);
    for (i, s) in p.sample.iter().enumerate() {
        if s.value.len() != nmetrics {
            return Err(bad(format!(
                "sample {i} has {} values but there are {nmetrics} sample types",
                s.value.len()
            )));
        }
        stack.clear();
        for id in s.location_id.iter().rev() {
            let frames = locations.get(id).ok_or_else(|| {
                bad(format!(
                    "sample {i} refers to location {id}, which does not exist"
                ))
            })?;
            stack.extend(frames.iter().rev());
        }
        let mut thread = Thread::default();
        let mut state = ThreadState::Unknown;
        for label in &s.label {
            match string(label.key, "a label key")? {
                "thread" => thread.name = string(label.str, "a thread label")?.to_string(),
                "thread_id" => thread.tid = u64::try_from(label.num).unwrap_or(0),
                "state" => {
                    state = state_from_str(string(label.str, "a state label")?)
                        .unwrap_or(ThreadState::Unknown)
                }
                _ => {}
            }
        }
        let thread = b.thread(thread);
        let stack_id = b.stack(&stack);
        values.clear();
        values.extend(s.value.iter().map(|v| u64::try_from(*v).unwrap_or(0)));
        b.add(thread, stack_id, state, &values);
    }
    Ok(b.finish())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdata::{alloc_profile, sample_profile};

    fn encode(p: &Profile) -> Vec<u8> {
        let mut buf = Vec::new();
        write(p, &ExportOptions::default(), &mut buf).unwrap();
        buf
    }

    fn decode_message(bytes: &[u8]) -> proto::Profile {
        let mut raw = Vec::new();
        flate2::read::GzDecoder::new(bytes)
            .read_to_end(&mut raw)
            .unwrap();
        proto::Profile::decode(&raw[..]).unwrap()
    }

    #[test]
    fn message_has_exact_types_labels_and_locations() {
        let bytes = encode(&sample_profile());
        assert_eq!(&bytes[..2], &[0x1f, 0x8b]);
        let m = decode_message(&bytes);
        let s = |i: i64| m.string_table[i as usize].as_str();
        assert_eq!(s(0), "");
        let types: Vec<(&str, &str)> = m
            .sample_type
            .iter()
            .map(|t| (s(t.r#type), s(t.unit)))
            .collect();
        assert_eq!(types, [("samples", "count"), ("ns", "nanoseconds")]);
        assert_eq!(s(m.default_sample_type), "samples");
        let pt = m.period_type.as_ref().unwrap();
        assert_eq!(
            (s(pt.r#type), s(pt.unit), m.period),
            ("cpu", "nanoseconds", 10_000_000)
        );
        assert_eq!(m.time_nanos, 1_700_000_000_000_000_000);
        assert_eq!(m.duration_nanos, 2_000_000_000);
        assert_eq!(m.function.len(), 7);
        assert_eq!(m.location.len(), 7);
        // Function 2 is App.work (frame 1), with its descriptor in the system name.
        assert_eq!(s(m.function[1].name), "com.example.App.work");
        assert_eq!(s(m.function[1].system_name), "com.example.App.work()V");
        // Frames 1 and 2 are App.work at lines 10 and 12: two locations of different lines.
        assert_eq!(m.location[1].line[0].line, 10);
        assert_eq!(m.location[2].line[0].line, 12);
        assert_eq!(m.location[2].line[0].function_id, 3);
        assert_eq!(m.sample.len(), 5);
        // First sample: main; App.main -> App.work:10 -> HashMap.put, leaf first, 3 samples.
        let first = &m.sample[0];
        assert_eq!(first.location_id, [4, 2, 1]);
        assert_eq!(first.value, [3, 30_000_000]);
        let labels: Vec<(&str, &str, i64)> = first
            .label
            .iter()
            .map(|l| (s(l.key), s(l.str), l.num))
            .collect();
        assert_eq!(
            labels,
            [
                ("thread", "main", 0),
                ("thread_id", "", 101),
                ("state", "running", 0)
            ]
        );
        assert_eq!(m.comment.len(), 1);
        assert!(s(m.comment[0]).starts_with("jvmprof.meta={\"modes\":[\"cpu\"],"));
        let mappings: Vec<(u64, &str)> = m.mapping.iter().map(|m| (m.id, s(m.filename))).collect();
        assert_eq!(
            mappings,
            [
                (1, "[java]"),
                (2, "[native]"),
                (3, "[synthetic]"),
                (4, "[allocated type]"),
                (5, "[lock class]")
            ]
        );
        assert_eq!(m.location[0].mapping_id, 1);
        assert_eq!(m.location[6].mapping_id, 2, "write is a native frame");
    }

    #[test]
    fn round_trip_equals_the_original() {
        for p in [sample_profile(), alloc_profile(), Profile::default()] {
            assert_eq!(read(&encode(&p)[..]).unwrap(), p);
        }
    }

    #[test]
    fn reads_messages_without_our_comment_and_mappings() {
        let mut m = to_proto(&sample_profile(), &ExportOptions::default());
        m.comment.clear();
        m.mapping.clear();
        for l in &mut m.location {
            l.mapping_id = 0;
        }
        let p = from_proto(&m).unwrap();
        assert_eq!(p.meta.metrics, [Metric::Samples, Metric::Ns]);
        assert_eq!(p.meta.interval_ns, 10_000_000);
        assert_eq!(p.meta.start_unix_ms, 1_700_000_000_000);
        assert_eq!(p.meta.duration_ms, 2_000);
        assert!(p.meta.modes.is_empty());
        // Kinds are guessed from the names: `write` has no dot, so it is native.
        let kinds: Vec<(String, FrameKind, u32)> = p
            .frames
            .iter()
            .map(|f| (f.name(), f.kind, f.line))
            .collect();
        assert_eq!(
            kinds[0],
            ("com.example.App.main".to_string(), FrameKind::Java, 5)
        );
        assert_eq!(kinds[6], ("write".to_string(), FrameKind::Native, 0));
        let options = ExportOptions::default();
        assert_eq!(
            crate::collapsed::to_string(&p, &options).unwrap(),
            crate::collapsed::to_string(&sample_profile(), &options).unwrap()
        );
        // `cpu`/nanoseconds, as Go and async-profiler name it, reads as `ns`.
        let cpu = m.string_table.len() as i64;
        m.string_table.push("cpu".to_string());
        m.sample_type[1].r#type = cpu;
        assert_eq!(
            from_proto(&m).unwrap().meta.metrics,
            [Metric::Samples, Metric::Ns]
        );
        let alloc = m.string_table.len() as i64;
        m.string_table.push("alloc_space".to_string());
        m.sample_type[1].r#type = alloc;
        assert_eq!(
            from_proto(&m).unwrap_err().to_string(),
            "invalid pprof data: sample type alloc_space/nanoseconds is no jvmprof metric"
        );
    }

    #[test]
    fn reads_uncompressed_messages() {
        let raw = to_proto(&sample_profile(), &ExportOptions::default()).encode_to_vec();
        assert_eq!(read(&raw[..]).unwrap(), sample_profile());
    }

    #[test]
    fn reader_rejects_inconsistent_messages() {
        let mut m = to_proto(&sample_profile(), &ExportOptions::default());
        m.sample[1].location_id.push(99);
        let e = read(&m.encode_to_vec()[..]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid pprof data: sample 1 refers to location 99, which does not exist"
        );
        let mut m = to_proto(&sample_profile(), &ExportOptions::default());
        m.sample[0].value.pop();
        let e = read(&m.encode_to_vec()[..]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid pprof data: sample 0 has 1 values but there are 2 sample types"
        );
        let mut m = to_proto(&sample_profile(), &ExportOptions::default());
        m.function[0].name = 10_000;
        let e = read(&m.encode_to_vec()[..]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid pprof data: a function name refers to string 10000, past the string table"
        );
        let e = read(&b"\x1f\x8b\x08\x00garbage"[..]).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("invalid pprof data: bad gzip data")
                || e.to_string().starts_with("truncated pprof"),
            "{e}"
        );
        let bytes = encode(&sample_profile());
        let e = read(&bytes[..bytes.len() - 10]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "truncated pprof file: the gzip data ends early"
        );
    }

    /// A gzip bomb (300 MiB of zeros in under 1 MiB) is refused at 64 MiB, naming the limit.
    #[test]
    fn a_gzip_bomb_is_refused_within_bounded_memory() {
        use std::io::Write;
        let mut bytes = Vec::new();
        let mut gz = flate2::write::GzEncoder::new(&mut bytes, flate2::Compression::best());
        let zeros = vec![0u8; 1 << 20];
        for _ in 0..300 {
            gz.write_all(&zeros).unwrap();
        }
        gz.finish().unwrap();
        assert!(bytes.len() < 1 << 20);
        let e = read(&bytes[..]).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "invalid pprof data: {} compressed bytes inflate past 67108864 bytes (at most 64 \
                 times the compressed size, and 64 MiB, is believed)",
                bytes.len()
            )
        );
    }

    proptest::proptest! {
        #[test]
        fn reader_never_panics(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..300)) {
            if let Ok(p) = read(&bytes[..]) {
                proptest::prop_assert!(p.validate().is_ok());
            }
        }
    }
}
