//! The native `.jvmprof` file: lossless, everything in a [`Profile`].
//!
//! Layout: the 8-byte magic `JVMPROF\0`, the format version as a little-endian `u16`, then a gzip
//! stream of the postcard encoding of the [`Profile`] (flate2, pure Rust: zlib-rs in binaries
//! that also link the class-file crate's zip, miniz_oxide otherwise). Postcard is not
//! self-describing: any change to the serialized model types (even a new field with
//! `#[serde(default)]`) changes the format and needs a new [`VERSION`] and a reader for the old
//! one; the golden files `testdata/sample-v*.jvmprof` fail a test if that is forgotten.
//!
//! Versions: 1 stored each stack as its list of frames; 2 stores the stacks as a tree of
//! prefixes ([`crate::Stacks`]), two numbers a stack however deep; 3 adds the timeline
//! ([`Profile::timeline`]); 4 gives each timeline entry the traced call tree it was taken in
//! ([`crate::TimedSample::trace`]). All four are read.
//!
//! Version 5 is the record stream ([`crate::records`]): after the header, checksummed chunks of
//! records to the end of the file, appended by the agent as it records, so that a file cut
//! short (a JVM killed with SIGKILL, a file still being written) reads up to its last whole
//! chunk. Trace mode's method traces are records in it too.
//!
//! In versions 1 to 4, trace mode appends its method traces after the compressed profile: the
//! section marker and checksummed chunks of [`crate::tracelog`], readable up to any damage
//! ([`read_trace`]). Readers of the profile alone stop at the end of the compressed stream.

use crate::error::{Error, Result};
use crate::model::{Frame, Meta, Profile, Sample, Stacks, Thread, TimedSample};
use flate2::read::GzDecoder;
use serde::Deserialize;
use std::collections::HashMap;
use std::io::{self, Read, Write};

/// The first bytes of every native file.
pub const MAGIC: &[u8; 8] = b"JVMPROF\0";
/// The format version this build writes and reads.
pub const VERSION: u16 = 5;
/// The first version that is a record stream.
pub const RECORDS_VERSION: u16 = 5;
/// Magic and version.
pub const HEADER_LEN: usize = 10;

const FORMAT: &str = "jvmprof";

/// The header of a version 5 file, before its record chunks.
pub fn records_header() -> [u8; HEADER_LEN] {
    let mut h = [0u8; HEADER_LEN];
    h[..8].copy_from_slice(MAGIC);
    h[8..].copy_from_slice(&RECORDS_VERSION.to_le_bytes());
    h
}

/// Checks that `header` starts a version 5 (record stream) file.
pub fn check_records_header(header: &[u8]) -> Result<()> {
    if header.len() < HEADER_LEN || &header[..8] != MAGIC {
        return Err(Error::NotJvmprof);
    }
    let version = u16::from_le_bytes([header[8], header[9]]);
    if version != RECORDS_VERSION {
        return Err(Error::invalid(
            FORMAT,
            format!("version {version} is not a record stream (version {RECORDS_VERSION})"),
        ));
    }
    Ok(())
}

/// Writes `profile` as a native file (version 5: a header and record chunks).
pub fn write(profile: &Profile, out: impl Write) -> io::Result<()> {
    write_with_traces(profile, &[], out)
}

/// Writes `profile` and trace mode's method traces as a native file.
pub fn write_with_traces(
    profile: &Profile,
    traces: &[crate::trace::log::Chunk],
    mut out: impl Write,
) -> io::Result<()> {
    out.write_all(&records_header())?;
    out.write_all(&crate::records::RecordWriter::whole(profile, traces)?)?;
    out.flush()
}

/// The method traces after the profile of a native file's bytes, if it has any: the traces
/// read (up to any damage) and what was damaged. `origin` names the file in messages.
pub fn read_trace(
    bytes: &[u8],
    origin: &str,
) -> Result<Option<(crate::trace::log::VmTrace, Option<String>)>> {
    if bytes.len() < 10 || &bytes[..MAGIC.len()] != MAGIC {
        return Err(Error::NotJvmprof);
    }
    if u16::from_le_bytes([bytes[8], bytes[9]]) >= RECORDS_VERSION {
        let (_, trace, damage) = replay(&bytes[HEADER_LEN..], "")?;
        return Ok(trace.map(|t| {
            let damage = damage.map(|d| {
                let calls = t.calls();
                format!("{origin}: the trace is damaged ({d}); read up to there: {calls} calls")
            });
            (t, damage)
        }));
    }
    let mut gz = flate2::bufread::GzDecoder::new(&bytes[10..]);
    let limit = inflate_limit(bytes.len());
    if let Err(e) = io::copy(&mut (&mut gz).take(limit), &mut io::sink()) {
        return Err(Error::invalid(
            FORMAT,
            format!("{origin}: the profile before the traces is damaged ({e})"),
        ));
    }
    let rest = gz.into_inner();
    if rest.is_empty() {
        return Ok(None);
    }
    let Some(chunks) = rest.strip_prefix(crate::trace::log::SECTION.as_slice()) else {
        return Err(Error::invalid(
            FORMAT,
            format!("{origin}: unexpected bytes after the profile (no trace section marker)"),
        ));
    };
    Ok(Some(crate::trace::log::read_chunks(chunks, origin)))
}

/// Reads a native file, checking the header, the gzip checksum and every index in the profile.
pub fn read(mut input: impl Read) -> Result<Profile> {
    let mut header = [0u8; 10];
    let n = read_up_to(&mut input, &mut header)?;
    if n < MAGIC.len() {
        return Err(if n > 0 && header[..n] == MAGIC[..n] {
            Error::truncated(FORMAT, "the header ends early")
        } else {
            Error::NotJvmprof
        });
    }
    if &header[..MAGIC.len()] != MAGIC {
        return Err(Error::NotJvmprof);
    }
    if n < header.len() {
        return Err(Error::truncated(
            FORMAT,
            "no format version after the magic",
        ));
    }
    let version = u16::from_le_bytes([header[8], header[9]]);
    if !(1..=VERSION).contains(&version) {
        return Err(Error::UnsupportedVersion {
            found: version,
            supported: VERSION,
        });
    }
    if version >= RECORDS_VERSION {
        let mut bytes = Vec::new();
        input.read_to_end(&mut bytes)?;
        let (mut profile, _, damage) = replay(&bytes, "")?;
        if let Some(d) = damage {
            profile.meta.extra.insert("damage".into(), d);
        }
        return Ok(profile);
    }
    let mut compressed = Vec::new();
    input.read_to_end(&mut compressed)?;
    let body = gunzip_bounded(&compressed, FORMAT, "compressed data")?;
    if body.is_empty() {
        return Err(Error::truncated(
            FORMAT,
            "no compressed data after the header",
        ));
    }
    let profile = match version {
        1 => decode::<ProfileV1>(&body)?.upgrade()?,
        2 => decode::<ProfileV2>(&body)?.upgrade(),
        3 => decode::<ProfileV3>(&body)?.upgrade(),
        _ => decode::<Profile>(&body)?,
    };
    profile.validate().map_err(|e| Error::invalid(FORMAT, e))?;
    Ok(profile)
}

/// The profile and traces of a version 5 file's chunks (`bytes`, after the header), and what
/// was damaged or missing: chunks skipped, a cut-short end, no end record.
#[allow(clippy::type_complexity)]
fn replay(
    bytes: &[u8],
    origin: &str,
) -> Result<(Profile, Option<crate::trace::log::VmTrace>, Option<String>)> {
    let named = |e: String| match origin {
        "" => Error::invalid(FORMAT, e),
        o => Error::invalid(FORMAT, format!("{o}: {e}")),
    };
    let mut r = crate::records::Replay::new();
    let (used, notes) = crate::records::replay::apply_all(&mut r, bytes).map_err(named)?;
    let (chunks, damaged) = r.chunks();
    if chunks == 0 && damaged == 0 {
        let what = match (notes.garbage_at, notes.partial_tail) {
            (Some(_), _) => "no record chunk can be read after the header".to_string(),
            (None, 0) => "no record chunk after the header (none was written yet)".to_string(),
            (None, n) => format!("the first record chunk is cut short ({n} bytes of it)"),
        };
        return Err(Error::truncated(FORMAT, what));
    }
    let ended = r.ended();
    let mut problems = Vec::new();
    if damaged > 0 {
        problems.push(format!("{damaged} damaged chunks skipped"));
    }
    if let Some(at) = notes.garbage_at {
        problems.push(format!("unreadable from byte {} on", at + HEADER_LEN));
    } else if notes.partial_tail > 0 {
        problems.push(format!(
            "cut short in a chunk at byte {} ({} bytes of it there)",
            used + HEADER_LEN,
            notes.partial_tail
        ));
    }
    if !ended {
        problems.push(format!(
            "no end record: the session did not finish writing (killed, or still running); \
             read {chunks} chunks"
        ));
    }
    let (profile, trace) = r.finish().map_err(named)?;
    let damage = (!problems.is_empty()).then(|| match origin {
        "" => problems.join("; "),
        o => format!("{o}: {}", problems.join("; ")),
    });
    Ok((profile, trace, damage))
}

/// The most bytes `compressed` bytes of gzip (a version 1 to 4 file, a `.pb.gz`) may inflate
/// to: real profiles compress 3 to 10 times, a gzip of zeros a thousand times (a 2 MB file took
/// 2.1 GB). So 64 times the compressed size, at least 64 MiB, at most 4 GiB.
pub(crate) fn inflate_limit(compressed: usize) -> u64 {
    (compressed as u64)
        .saturating_mul(64)
        .clamp(64 << 20, 4 << 30)
}

/// `compressed` (gzip) inflated, refused past [`inflate_limit`] with an error of `format` that
/// says so; truncated and bad data are errors too, naming the data `what`.
pub(crate) fn gunzip_bounded(
    compressed: &[u8],
    format: &'static str,
    what: &str,
) -> Result<Vec<u8>> {
    let limit = inflate_limit(compressed.len());
    let mut body = Vec::new();
    let inflated = GzDecoder::new(compressed)
        .take(limit + 1)
        .read_to_end(&mut body);
    if let Err(e) = inflated {
        return Err(match e.kind() {
            io::ErrorKind::UnexpectedEof => {
                Error::truncated(format, format!("the {what} ends early"))
            }
            io::ErrorKind::InvalidInput | io::ErrorKind::InvalidData => {
                Error::invalid(format, format!("bad {what}: {e}"))
            }
            _ => Error::Io(e),
        });
    }
    if body.len() as u64 > limit {
        return Err(Error::invalid(
            format,
            format!(
                "{} compressed bytes inflate past {limit} bytes (at most 64 times the \
                 compressed size, and 64 MiB, is believed)",
                compressed.len()
            ),
        ));
    }
    Ok(body)
}

/// The whole of `body` as one `T`.
fn decode<'a, T: Deserialize<'a>>(body: &'a [u8]) -> Result<T> {
    let (value, rest): (T, &[u8]) = postcard::take_from_bytes(body).map_err(|e| match e {
        postcard::Error::DeserializeUnexpectedEnd => {
            Error::truncated(FORMAT, "the profile data ends early")
        }
        e => Error::invalid(FORMAT, format!("the profile does not decode: {e}")),
    })?;
    if !rest.is_empty() {
        return Err(Error::invalid(
            FORMAT,
            format!("{} unexpected bytes after the profile", rest.len()),
        ));
    }
    Ok(value)
}

/// A version 3 profile: timeline entries without a trace.
#[derive(Deserialize)]
struct ProfileV3 {
    meta: Meta,
    frames: Vec<Frame>,
    stacks: Stacks,
    threads: Vec<Thread>,
    samples: Vec<Sample>,
    timeline: Vec<TimedSampleV3>,
}

#[derive(Deserialize)]
struct TimedSampleV3 {
    offset_ns: u64,
    sample: u32,
    weight: u32,
}

impl ProfileV3 {
    fn upgrade(self) -> Profile {
        Profile {
            meta: self.meta,
            frames: self.frames,
            stacks: self.stacks,
            threads: self.threads,
            samples: self.samples,
            timeline: self
                .timeline
                .into_iter()
                .map(|t| TimedSample {
                    offset_ns: t.offset_ns,
                    sample: t.sample,
                    weight: t.weight,
                    trace: 0,
                })
                .collect(),
        }
    }
}

/// A version 2 profile: no timeline.
#[derive(Deserialize)]
struct ProfileV2 {
    meta: Meta,
    frames: Vec<Frame>,
    stacks: Stacks,
    threads: Vec<Thread>,
    samples: Vec<Sample>,
}

impl ProfileV2 {
    fn upgrade(self) -> Profile {
        Profile {
            meta: self.meta,
            frames: self.frames,
            stacks: self.stacks,
            threads: self.threads,
            samples: self.samples,
            timeline: Vec::new(),
        }
    }
}

/// A version 1 profile: stacks as lists of frames, root first.
#[derive(Deserialize)]
struct ProfileV1 {
    meta: Meta,
    frames: Vec<Frame>,
    stacks: Vec<Vec<u32>>,
    threads: Vec<Thread>,
    samples: Vec<Sample>,
}

impl ProfileV1 {
    /// The same profile with its stacks as a tree, interned as [`crate::ProfileBuilder`] does
    /// (so a file it wrote reads back as the profile it built).
    fn upgrade(self) -> Result<Profile> {
        let nframes = self.frames.len();
        let mut stacks = Stacks::default();
        let mut ids: HashMap<(u32, u32), u32> = HashMap::new();
        let mut empty = None;
        let mut new_id = Vec::with_capacity(self.stacks.len());
        for (i, frames) in self.stacks.iter().enumerate() {
            if let Some(f) = frames.iter().find(|f| **f as usize >= nframes) {
                return Err(Error::invalid(
                    FORMAT,
                    format!("stack {i} refers to frame {f} but there are {nframes} frames"),
                ));
            }
            let mut id = None;
            for &f in frames {
                let key = (id.unwrap_or(Stacks::NONE), f);
                id = Some(*ids.entry(key).or_insert_with(|| stacks.push(id, f)));
            }
            new_id.push(id.unwrap_or_else(|| *empty.get_or_insert_with(|| stacks.push_empty())));
        }
        let mut samples = self.samples;
        for (i, s) in samples.iter_mut().enumerate() {
            s.stack = *new_id.get(s.stack as usize).ok_or_else(|| {
                Error::invalid(
                    FORMAT,
                    format!(
                        "sample {i} refers to stack {} but there are {} stacks",
                        s.stack,
                        new_id.len()
                    ),
                )
            })?;
        }
        Ok(Profile {
            meta: self.meta,
            frames: self.frames,
            stacks,
            threads: self.threads,
            samples,
            timeline: Vec::new(),
        })
    }
}

/// Whether `bytes` (the start of a file) look like a native file.
pub fn sniff(bytes: &[u8]) -> bool {
    bytes.starts_with(MAGIC)
}

/// Reads until `buf` is full or the input ends; returns how many bytes were read.
fn read_up_to(input: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match input.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdata::{sample_profile, timed_profile};

    fn encode(p: &Profile) -> Vec<u8> {
        let mut buf = Vec::new();
        write(p, &mut buf).unwrap();
        buf
    }

    #[test]
    fn a_failing_writer_gives_back_its_own_error() {
        /// Takes `room` bytes, then fails as a full disk does.
        struct Full {
            room: usize,
        }
        impl Write for Full {
            fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
                if self.room == 0 {
                    return Err(io::Error::new(io::ErrorKind::StorageFull, "disk full"));
                }
                let n = buf.len().min(self.room);
                self.room -= n;
                Ok(n)
            }
            fn flush(&mut self) -> io::Result<()> {
                Ok(())
            }
        }
        // A profile big enough that the encoder writes before the end.
        let mut b = crate::ProfileBuilder::new(sample_profile().meta);
        let frames: Vec<u32> = (0..5000)
            .map(|i| b.frame(crate::Frame::java("C", &format!("m{i}"), "", 0)))
            .collect();
        let t = b.thread(crate::Thread {
            tid: 1,
            name: "t".into(),
        });
        let mut parent = None;
        for &f in &frames {
            let s = b.child_stack(parent, f);
            b.add(t, s, crate::ThreadState::Running, &[1]);
            parent = Some(s);
        }
        let p = b.finish();
        for room in [0, 5, 100, 2000] {
            let e = write(&p, Full { room }).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::StorageFull, "room {room}: {e}");
            assert_eq!(e.to_string(), "disk full");
        }
        let mut all = Vec::new();
        write(&p, &mut all).unwrap();
        assert_eq!(read(&all[..]).unwrap(), p);
    }

    #[test]
    fn round_trip_is_lossless() {
        let p = sample_profile();
        let bytes = encode(&p);
        assert_eq!(&bytes[..8], b"JVMPROF\0");
        assert_eq!(&bytes[8..10], &[5, 0]);
        assert_eq!(read(&bytes[..]).unwrap(), p);
        let timed = timed_profile();
        assert_eq!(read(&encode(&timed)[..]).unwrap(), timed);
    }

    /// A file written by version 1 must keep reading as the same profile. If this fails after a
    /// change to the model types, the encoding changed: bump [`VERSION`] and keep a reader for
    /// version 1 files (postcard is not self-describing, so `#[serde(default)]` does not help).
    #[test]
    fn reads_the_version_1_golden_file() {
        let bytes = include_bytes!("../testdata/sample-v1.jvmprof");
        assert_eq!(&bytes[8..10], &[1, 0]);
        assert_eq!(read(&bytes[..]).unwrap(), sample_profile());
    }

    /// The same for version 2 (stacks as a tree).
    #[test]
    fn reads_the_version_2_golden_file() {
        let bytes = include_bytes!("../testdata/sample-v2.jvmprof");
        assert_eq!(&bytes[8..10], &[2, 0]);
        assert_eq!(read(&bytes[..]).unwrap(), sample_profile());
    }

    /// The same for version 3 (a timeline without traces).
    #[test]
    fn reads_the_version_3_golden_file() {
        let bytes = include_bytes!("../testdata/sample-v3.jvmprof");
        assert_eq!(&bytes[8..10], &[3, 0]);
        let mut want = timed_profile();
        for t in &mut want.timeline {
            t.trace = 0;
        }
        assert_eq!(read(&bytes[..]).unwrap(), want);
    }

    /// The same for version 4 (timeline entries with their trace).
    #[test]
    fn reads_the_version_4_golden_file() {
        let bytes = include_bytes!("../testdata/sample-v4.jvmprof");
        assert_eq!(&bytes[8..10], &[4, 0]);
        assert_eq!(read(&bytes[..]).unwrap(), timed_profile());
    }

    /// The same for version 5 (the record stream). `JVMPROF_WRITE_GOLDEN=1` writes it anew.
    #[test]
    fn reads_the_version_5_golden_file() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/sample-v5.jvmprof");
        if std::env::var_os("JVMPROF_WRITE_GOLDEN").is_some() {
            std::fs::write(path, encode(&timed_profile())).unwrap();
        }
        let bytes = std::fs::read(path).unwrap();
        assert_eq!(&bytes[8..10], &[5, 0]);
        assert_eq!(read(&bytes[..]).unwrap(), timed_profile());
    }

    #[test]
    fn a_gzip_bomb_behind_a_version_4_header_is_refused_within_bounded_memory() {
        let mut bytes = b"JVMPROF\0\x04\x00".to_vec();
        let mut gz = flate2::write::GzEncoder::new(&mut bytes, flate2::Compression::best());
        let zeros = vec![0u8; 1 << 20];
        for _ in 0..300 {
            gz.write_all(&zeros).unwrap();
        }
        gz.finish().unwrap();
        assert!(bytes.len() < 1 << 20);
        let e = read(&bytes[..]).unwrap_err();
        assert!(e.to_string().contains("inflate past 67108864 bytes"), "{e}");
    }

    #[test]
    fn empty_profile_round_trips() {
        let p = Profile::default();
        assert_eq!(read(&encode(&p)[..]).unwrap(), p);
    }

    #[test]
    fn rejects_other_files() {
        let e = read(&b"hello world, this is text"[..]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "not a jvmprof file (no JVMPROF magic header)"
        );
        assert!(matches!(read(&b""[..]).unwrap_err(), Error::NotJvmprof));
        assert!(matches!(
            read(&b"\x1f\x8b\x08\x00"[..]).unwrap_err(),
            Error::NotJvmprof
        ));
    }

    #[test]
    fn rejects_unknown_version() {
        let mut bytes = encode(&sample_profile());
        bytes[8] = 7;
        let e = read(&bytes[..]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "jvmprof format version 7 not supported (this build reads versions 1 to 5)"
        );
    }

    #[test]
    fn a_cut_header_or_first_chunk_is_an_error_and_a_cut_later_chunk_is_said() {
        let p = timed_profile();
        let bytes = encode(&p);
        for len in 1..bytes.len() {
            let e = read(&bytes[..len]).unwrap_err();
            assert!(e.to_string().starts_with("truncated jvmprof file"), "{e}");
        }
        // A second chunk cut short (a file still being written): the first is read.
        let mut w = crate::records::RecordWriter::new();
        let gained = crate::records::write::everything(&p);
        let mut live = records_header().to_vec();
        live.extend(w.update(&p, &gained, &[], false).unwrap());
        let whole = live.len();
        let mut more = p.clone();
        more.meta.duration_ms += 1;
        live.extend(w.update(&more, &[], &[], true).unwrap());
        let mut want = p.clone();
        want.timeline.sort_by_key(|t| t.offset_ns);
        for len in whole..live.len() {
            let q = read(&live[..len]).unwrap();
            let damage = &q.meta.extra["damage"];
            assert!(damage.contains("no end record"), "cut at {len}: {damage}");
            if len > whole {
                assert!(damage.contains("cut short"), "cut at {len}: {damage}");
            }
            let mut q = q;
            q.meta.extra.remove("damage");
            assert_eq!(q, want);
        }
        assert_eq!(read(&live[..]).unwrap(), more);
    }

    #[test]
    fn a_corrupted_chunk_is_skipped_and_said() {
        let mut bytes = encode(&sample_profile());
        let mid = bytes.len() / 2;
        bytes[mid] ^= 0xff;
        let p = read(&bytes[..]).unwrap();
        assert!(
            p.meta.extra["damage"].contains("1 damaged chunks skipped"),
            "{:?}",
            p.meta.extra
        );
    }

    #[test]
    fn rejects_out_of_range_indices() {
        let mut p = sample_profile();
        p.samples[0].stack = 99;
        let e = read(&encode(&p)[..]).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "invalid jvmprof data: sample 0 refers to stack 99 but there are {} stacks",
                p.stacks.len()
            )
        );
        let mut p = sample_profile();
        p.stacks.push(Some(1), 1000);
        let e = read(&encode(&p)[..]).unwrap_err();
        let last = p.stacks.len() - 1;
        assert!(
            e.to_string()
                .contains(&format!("stack {last} refers to frame 1000")),
            "{e}"
        );
        let mut p = sample_profile();
        p.samples[2].values.pop();
        let e = read(&encode(&p)[..]).unwrap_err();
        assert!(
            e.to_string()
                .contains("sample 2 has 1 values but the profile has 2 metrics"),
            "{e}"
        );
    }

    proptest::proptest! {
        #[test]
        fn never_panics_on_garbage(tail in proptest::collection::vec(proptest::num::u8::ANY, 0..200), version in 1u8..=5) {
            let mut bytes = b"JVMPROF\0\x00\x00".to_vec();
            bytes[8] = version;
            bytes.extend_from_slice(&tail);
            let _ = read(&bytes[..]);
            let _ = read(&tail[..]);
        }

        #[test]
        fn never_panics_on_corrupted_gzip(pos in 0usize..10_000, byte in proptest::num::u8::ANY) {
            let mut bytes = include_bytes!("../testdata/sample-v4.jvmprof").to_vec();
            let i = pos % bytes.len();
            bytes[i] = byte;
            let _ = read(&bytes[..]);
        }

        #[test]
        fn never_panics_on_garbage_postcard(body in proptest::collection::vec(proptest::num::u8::ANY, 0..300), version in 1u8..=3) {
            // Valid gzip around random postcard bytes exercises the decoder and the validation.
            let mut bytes = b"JVMPROF\0\x00\x00".to_vec();
            bytes[8] = version;
            let mut gz = flate2::write::GzEncoder::new(&mut bytes, flate2::Compression::fast());
            gz.write_all(&body).unwrap();
            gz.finish().unwrap();
            let _ = read(&bytes[..]);
        }
    }
}

#[cfg(test)]
mod trace_section_tests {
    use super::*;
    use crate::trace::log::{Chunk, Event, SECTION, write_chunk};

    fn chunk() -> Chunk {
        Chunk {
            threads: vec![(3, "main".into())],
            events: vec![(
                3,
                vec![Event::Enter { method: 0, ns: 1 }, Event::Exit { ns: 2 }],
            )],
            methods: vec![(0, "A.b".into())],
            ..Chunk::default()
        }
    }

    #[test]
    fn version_4_traces_after_the_profile_leave_it_readable() {
        let v4 = include_bytes!("../testdata/sample-v4.jvmprof");
        let profile = read(&v4[..]).unwrap();
        let mut bytes = v4.to_vec();
        assert!(read_trace(&bytes, "p").unwrap().is_none());
        bytes.extend_from_slice(SECTION);
        write_chunk(&chunk(), &mut bytes).unwrap();
        assert_eq!(read(&bytes[..]).unwrap(), profile);
        let (t, damage) = read_trace(&bytes, "p").unwrap().unwrap();
        assert!(damage.is_none());
        assert_eq!(t.threads[0].events.len(), 2);
        let (_, damage) = read_trace(&bytes[..bytes.len() - 2], "p").unwrap().unwrap();
        assert!(damage.unwrap().starts_with("p: the trace is damaged"));
        let mut junk = v4.to_vec();
        junk.extend_from_slice(b"garbage!");
        assert!(read_trace(&junk, "p").is_err());
    }

    #[test]
    fn version_5_traces_are_records_of_the_stream() {
        let profile = crate::testdata::sample_profile();
        let mut plain = Vec::new();
        write(&profile, &mut plain).unwrap();
        assert!(read_trace(&plain, "p").unwrap().is_none());
        let mut bytes = Vec::new();
        write_with_traces(&profile, &[chunk(), chunk()], &mut bytes).unwrap();
        assert_eq!(read(&bytes[..]).unwrap(), profile);
        let (t, damage) = read_trace(&bytes, "p").unwrap().unwrap();
        assert!(damage.is_none(), "{damage:?}");
        assert_eq!(t.methods, vec!["A.b".to_string()]);
        assert_eq!(t.threads[0].events.len(), 4);
        // Cut short in its only chunk: nothing is whole, and that is said.
        let e = read_trace(&bytes[..bytes.len() - 2], "p").unwrap_err();
        assert!(e.to_string().contains("cut short"), "{e}");
    }
}
