//! JFR recording → [`Profile`]: chunks, their metadata and constant pools, and the sample
//! events, mapped as the module documentation says.

use super::bytes::{Cursor, FORMAT, Str};
use super::metadata::{self, Metadata};
use super::value::{self, Value};
use super::{HEADER_SIZE, MAGIC, java_type_name};
use crate::error::{Error, Result};
use crate::model::*;
use std::collections::{BTreeMap, HashMap};

/// The event types read, and what each becomes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Kind {
    ExecutionSample,
    CpuTimeSample,
    NativeMethodSample,
    AllocationSample,
    AllocationInNewTlab,
    AllocationOutsideTlab,
    MonitorEnter,
    ThreadPark,
    MonitorWait,
}

impl Kind {
    const ALL: [(Kind, &'static str); 9] = [
        (Kind::ExecutionSample, "jdk.ExecutionSample"),
        (Kind::CpuTimeSample, "jdk.CPUTimeSample"),
        (Kind::NativeMethodSample, "jdk.NativeMethodSample"),
        (Kind::AllocationSample, "jdk.ObjectAllocationSample"),
        (Kind::AllocationInNewTlab, "jdk.ObjectAllocationInNewTLAB"),
        (
            Kind::AllocationOutsideTlab,
            "jdk.ObjectAllocationOutsideTLAB",
        ),
        (Kind::MonitorEnter, "jdk.JavaMonitorEnter"),
        (Kind::ThreadPark, "jdk.ThreadPark"),
        (Kind::MonitorWait, "jdk.JavaMonitorWait"),
    ];

    fn of(name: &str) -> Option<Kind> {
        Kind::ALL.iter().find(|(_, n)| *n == name).map(|(k, _)| *k)
    }

    fn name(self) -> &'static str {
        Kind::ALL
            .iter()
            .find(|(k, _)| *k == self)
            .map_or("", |(_, n)| n)
    }
}

/// One chunk: where it is, its clock, its types and where each constant is.
struct Chunk {
    start: usize,
    end: usize,
    start_nanos: i64,
    duration_nanos: i64,
    /// The tick count at `start_nanos`.
    start_ticks: i64,
    ticks_per_second: i64,
    meta: Metadata,
    /// Byte offset of each constant's value, by (type id, key).
    pools: HashMap<(u64, i64), usize>,
}

impl Chunk {
    fn ticks_to_ns(&self, ticks: i64) -> u64 {
        if ticks <= 0 || self.ticks_per_second <= 0 {
            return 0;
        }
        let ns = i128::from(ticks) * 1_000_000_000 / i128::from(self.ticks_per_second);
        u64::try_from(ns).unwrap_or(u64::MAX)
    }

    /// The wall-clock time (ns since the epoch) of a tick count.
    fn ticks_to_unix_ns(&self, ticks: i64) -> i64 {
        if self.ticks_per_second <= 0 {
            return self.start_nanos;
        }
        let since = i128::from(ticks) - i128::from(self.start_ticks);
        let ns = since * 1_000_000_000 / i128::from(self.ticks_per_second);
        i64::try_from(i128::from(self.start_nanos) + ns).unwrap_or(self.start_nanos)
    }
}

fn invalid(detail: String) -> Error {
    Error::invalid(FORMAT, detail)
}

/// Reads every chunk of a recording.
pub(super) fn read(bytes: &[u8]) -> Result<Profile> {
    let mut chunks = Vec::new();
    let mut pos = 0;
    while pos < bytes.len() {
        let chunk = read_chunk(bytes, pos)?;
        pos = chunk.end;
        chunks.push(chunk);
    }
    if chunks.is_empty() {
        return Err(Error::truncated(FORMAT, "the file is empty"));
    }

    // First pass: which events there are, the settings and the JVM's description.
    let mut counts: BTreeMap<Kind, u64> = BTreeMap::new();
    let mut periods: HashMap<&'static str, u64> = HashMap::new();
    let mut meta = Meta {
        engine: "jfr".into(),
        ..Meta::default()
    };
    for chunk in &chunks {
        let kinds = kinds_of(&chunk.meta);
        let setting = chunk.meta.id("jdk.ActiveSetting");
        let jvm = chunk.meta.id("jdk.JVMInformation");
        let lost = chunk.meta.id("jdk.CPUTimeSamplesLost");
        for ev in events(bytes, chunk) {
            let (ty, mut c) = ev?;
            if let Some(k) = kinds.get(&ty) {
                *counts.entry(*k).or_default() += 1;
            } else if Some(ty) == setting {
                let ev = Event::read(chunk, ty, &mut c)?;
                let r = Resolver::new(bytes, chunk);
                let event_type = ev.int("id").and_then(|id| u64::try_from(id).ok());
                let name = ev.get("name").map(|v| r.text(v)).transpose()?.flatten();
                let value = ev.get("value").map(|v| r.text(v)).transpose()?.flatten();
                if let (Some(t), Some(name), Some(value)) = (event_type, name, value)
                    && (name == "period" || name == "throttle")
                    && let Some(kind) = chunk.meta.classes.get(&t).and_then(|c| Kind::of(&c.name))
                    && let Some(ns) = parse_period(&value)
                {
                    let p = periods.entry(kind.name()).or_insert(ns);
                    *p = (*p).min(ns);
                }
            } else if Some(ty) == jvm {
                let ev = Event::read(chunk, ty, &mut c)?;
                let r = Resolver::new(bytes, chunk);
                let text = |name: &str| -> Result<String> {
                    Ok(ev
                        .get(name)
                        .map(|v| r.text(v))
                        .transpose()?
                        .flatten()
                        .unwrap_or_default())
                };
                meta.jvm_name = text("jvmName")?;
                // "OpenJDK 64-Bit Server VM (17.0.21+2) for linux-amd64 JRE (...), built on ..."
                let version = text("jvmVersion")?;
                meta.jvm_version = match (version.find('('), version.find(')')) {
                    (Some(a), Some(b)) if a < b => version[a + 1..b].to_string(),
                    _ => version,
                };
                let (jvm_args, java_args) = (text("jvmArguments")?, text("javaArguments")?);
                meta.command = [jvm_args, java_args]
                    .into_iter()
                    .filter(|s| !s.is_empty())
                    .collect::<Vec<_>>()
                    .join(" ");
                meta.pid = ev
                    .int("pid")
                    .and_then(|p| u32::try_from(p).ok())
                    .unwrap_or(0);
            } else if Some(ty) == lost {
                let ev = Event::read(chunk, ty, &mut c)?;
                let n = ev.int("lostSamples").unwrap_or(0).max(0) as u64;
                meta.dropped_samples = meta.dropped_samples.saturating_add(n);
            }
        }
    }
    let has = |k: Kind| counts.contains_key(&k);
    // JDK 25's CPU-time samples, when recorded, are the better CPU profile: the
    // ExecutionSample events beside them would count the same CPU twice.
    let cpu = if has(Kind::CpuTimeSample) {
        Some(Kind::CpuTimeSample)
    } else if has(Kind::ExecutionSample) {
        Some(Kind::ExecutionSample)
    } else {
        None
    };
    // The sampled allocation event (JDK 16+) replaces the per-TLAB ones.
    let tlab = !has(Kind::AllocationSample);
    let used = |k: Kind| {
        has(k)
            && match k {
                Kind::ExecutionSample | Kind::CpuTimeSample => cpu == Some(k),
                Kind::AllocationInNewTlab | Kind::AllocationOutsideTlab => tlab,
                _ => true,
            }
    };
    let sampling = cpu.is_some() || has(Kind::NativeMethodSample);
    let alloc = used(Kind::AllocationSample)
        || used(Kind::AllocationInNewTlab)
        || used(Kind::AllocationOutsideTlab);
    let lock = has(Kind::MonitorEnter) || has(Kind::ThreadPark) || has(Kind::MonitorWait);
    if cpu.is_some() {
        meta.modes.push("cpu".into());
    }
    if has(Kind::NativeMethodSample) {
        meta.modes.push("wall".into());
    }
    if sampling {
        meta.metrics.extend([Metric::Samples, Metric::Ns]);
    }
    if alloc {
        meta.modes.push("alloc".into());
        meta.metrics.extend([Metric::Bytes, Metric::Objects]);
    }
    if lock {
        meta.modes.push("lock".into());
        meta.metrics.extend([
            Metric::LockNs,
            Metric::LockCount,
            Metric::WaitNs,
            Metric::WaitCount,
        ]);
    }
    if meta.metrics.is_empty() {
        let names: Vec<&str> = Kind::ALL.iter().map(|(_, n)| *n).collect();
        return Err(invalid(format!(
            "the recording has none of the events read ({}); record with settings=profile",
            names.join(", ")
        )));
    }
    // Default periods: those of JFR's default settings.
    let period = |k: Kind, default: u64| periods.get(k.name()).copied().unwrap_or(default);
    let cpu_period = cpu.map_or(0, |k| period(k, 20_000_000));
    let native_period = period(Kind::NativeMethodSample, 20_000_000);
    meta.interval_ns = if cpu.is_some() {
        cpu_period
    } else if has(Kind::NativeMethodSample) {
        native_period
    } else {
        0
    };
    let start = chunks.iter().map(|c| c.start_nanos).min().unwrap_or(0);
    let end = chunks
        .iter()
        .map(|c| c.start_nanos.saturating_add(c.duration_nanos))
        .max()
        .unwrap_or(0);
    meta.start_unix_ms = u64::try_from(start / 1_000_000).unwrap_or(0);
    meta.duration_ms = u64::try_from(end.saturating_sub(start) / 1_000_000).unwrap_or(0);

    let at = |m: Metric| meta.metrics.iter().position(|x| *x == m);
    let ix = Indices {
        samples: at(Metric::Samples),
        ns: at(Metric::Ns),
        bytes: at(Metric::Bytes),
        objects: at(Metric::Objects),
        lock_ns: at(Metric::LockNs),
        lock_count: at(Metric::LockCount),
        wait_ns: at(Metric::WaitNs),
        wait_count: at(Metric::WaitCount),
    };
    let nmetrics = meta.metrics.len();
    let mut failed = 0u64;
    let mut b = ProfileBuilder::new(meta);

    // Second pass: the samples.
    for chunk in &chunks {
        let kinds = kinds_of(&chunk.meta);
        let lost = chunk.meta.id("jdk.CPUTimeSamplesLost");
        let mut r = Resolver::new(bytes, chunk);
        for ev in events(bytes, chunk) {
            let (ty, mut c) = ev?;
            if Some(ty) == lost && cpu == Some(Kind::CpuTimeSample) {
                // CPU time the sampler saw but could not record: the thread's all the same.
                let ev = Event::read(chunk, ty, &mut c)?;
                let n = ev.int("lostSamples").unwrap_or(0).max(0) as u64;
                let thread = r.thread(
                    &mut b,
                    ev.field_type("eventThread"),
                    ev.ref_key("eventThread"),
                )?;
                let f = b.frame(Frame::synthetic(
                    FrameKind::Synthetic,
                    "[lost: JFR CPU-time samples]",
                ));
                let stack = b.stack(&[f]);
                let mut values = vec![0u64; nmetrics];
                if let (Some(i), Some(j)) = (ix.samples, ix.ns) {
                    values[i] = n;
                    values[j] = n.saturating_mul(cpu_period);
                }
                b.add(thread, stack, ThreadState::Running, &values);
                continue;
            }
            let Some(&kind) = kinds.get(&ty) else {
                continue;
            };
            if !used(kind) {
                continue;
            }
            let ev = Event::read(chunk, ty, &mut c)?;
            let failed_walk = kind == Kind::CpuTimeSample
                && ev.get("failed").and_then(Value::as_bool) == Some(true);
            failed += u64::from(failed_walk);
            let mut values = vec![0u64; nmetrics];
            let mut set = |i: Option<usize>, v: u64| {
                if let Some(i) = i {
                    values[i] = v;
                }
            };
            let duration = || chunk.ticks_to_ns(ev.int("duration").unwrap_or(0));
            let (state, leaf) = match kind {
                Kind::ExecutionSample | Kind::CpuTimeSample | Kind::NativeMethodSample => {
                    let ns = match kind {
                        Kind::CpuTimeSample => match ev.int("samplingPeriod") {
                            Some(t) if t > 0 => chunk.ticks_to_ns(t),
                            _ => cpu_period,
                        },
                        Kind::NativeMethodSample => native_period,
                        _ => cpu_period,
                    };
                    set(ix.samples, 1);
                    set(ix.ns, ns);
                    let state = match kind {
                        Kind::NativeMethodSample => ThreadState::Native,
                        Kind::CpuTimeSample => ThreadState::Running,
                        _ => match ev.ref_key("state") {
                            Some(k) => r.thread_state(ev.field_type("state"), k)?,
                            None => ThreadState::Unknown,
                        },
                    };
                    (state, None)
                }
                Kind::AllocationSample
                | Kind::AllocationInNewTlab
                | Kind::AllocationOutsideTlab => {
                    let weight = match kind {
                        Kind::AllocationSample => "weight",
                        Kind::AllocationInNewTlab => "tlabSize",
                        _ => "allocationSize",
                    };
                    set(ix.bytes, ev.int(weight).unwrap_or(0).max(0) as u64);
                    set(ix.objects, 1);
                    let leaf = r.class_frame(&ev, "objectClass", FrameKind::AllocatedType)?;
                    (ThreadState::Running, leaf)
                }
                Kind::MonitorEnter | Kind::ThreadPark => {
                    set(ix.lock_ns, duration());
                    set(ix.lock_count, 1);
                    let (field, state) = if kind == Kind::MonitorEnter {
                        ("monitorClass", ThreadState::Blocked)
                    } else {
                        ("parkedClass", ThreadState::Parked)
                    };
                    (state, r.class_frame(&ev, field, FrameKind::LockClass)?)
                }
                Kind::MonitorWait => {
                    set(ix.wait_ns, duration());
                    set(ix.wait_count, 1);
                    let leaf = r.class_frame(&ev, "monitorClass", FrameKind::LockClass)?;
                    (ThreadState::Waiting, leaf)
                }
            };
            let thread_key = ev
                .ref_key("sampledThread")
                .or_else(|| ev.ref_key("eventThread"));
            let thread = r.thread(
                &mut b,
                ev.field_type("eventThread")
                    .or(ev.field_type("sampledThread")),
                thread_key,
            )?;
            let stack = match ev.ref_key("stackTrace") {
                // A failed CPU-time sample has no stack: counted on a frame that says so.
                _ if failed_walk => {
                    let f = b.frame(Frame::synthetic(
                        FrameKind::Synthetic,
                        "[unknown: JFR stack walk failed]",
                    ));
                    Some(b.stack(&[f]))
                }
                Some(k) => r.stack(&mut b, ev.field_type("stackTrace"), k)?,
                None => None,
            };
            let stack = match (stack, leaf) {
                (parent, Some(frame)) => {
                    let f = b.frame(frame);
                    b.child_stack(parent, f)
                }
                (Some(s), None) => s,
                (None, None) => b.stack(&[]),
            };
            let idx = b.add(thread, stack, state, &values);
            // Sampled events go on the timeline (allocations and lock waits are not samples of
            // time), at their offset from the recording's start.
            if matches!(
                kind,
                Kind::ExecutionSample | Kind::CpuTimeSample | Kind::NativeMethodSample
            ) && let Some(ticks) = ev.int("startTime")
            {
                let at = chunk.ticks_to_unix_ns(ticks).saturating_sub(start).max(0) as u64;
                b.add_time(idx, at, 1);
            }
        }
    }
    if failed > 0 {
        b.meta_mut()
            .walk_failures
            .insert("jfr_failed_cpu_time_sample".into(), failed);
    }
    let profile = b.finish();
    profile.validate().map_err(invalid)?;
    Ok(profile)
}

struct Indices {
    samples: Option<usize>,
    ns: Option<usize>,
    bytes: Option<usize>,
    objects: Option<usize>,
    lock_ns: Option<usize>,
    lock_count: Option<usize>,
    wait_ns: Option<usize>,
    wait_count: Option<usize>,
}

/// The event types of a chunk that are read, by type id.
fn kinds_of(meta: &Metadata) -> HashMap<u64, Kind> {
    Kind::ALL
        .iter()
        .filter_map(|(k, name)| Some((meta.id(name)?, *k)))
        .collect()
}

/// `"10 ms"`, `"20ms"`, `"1 s"`, `"500/s"` (a rate) → nanoseconds.
fn parse_period(s: &str) -> Option<u64> {
    let s = s.trim();
    if let Some(rate) = s.strip_suffix("/s") {
        let n: f64 = rate.trim().parse().ok()?;
        return (n > 0.0).then(|| (1e9 / n) as u64);
    }
    let split = s.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
    let (num, unit) = s.split_at(split);
    let n: f64 = num.parse().ok()?;
    let scale = match unit.trim() {
        "ns" => 1.0,
        "us" => 1e3,
        "ms" => 1e6,
        "s" => 1e9,
        "m" | "min" => 60e9,
        "h" => 3600e9,
        "d" => 86400e9,
        _ => return None,
    };
    let ns = n * scale;
    (1.0..1e18).contains(&ns).then_some(ns as u64)
}

/// Reads and checks the chunk header at `start`, its metadata and its constant pools.
fn read_chunk(bytes: &[u8], start: usize) -> Result<Chunk> {
    let mut c = Cursor::new(bytes, start, bytes.len());
    let magic = c.bytes(MAGIC.len().min(c.remaining()), "the chunk magic")?;
    if magic != &MAGIC[..magic.len()] {
        return Err(invalid(format!(
            "no chunk starts at byte {start} (no FLR magic): the file is not a JFR recording or \
             is corrupted"
        )));
    }
    if bytes.len() - start < HEADER_SIZE {
        return Err(Error::truncated(
            FORMAT,
            format!(
                "the chunk header at byte {start} needs {HEADER_SIZE} bytes, the file ends at byte {}",
                bytes.len()
            ),
        ));
    }
    let major = c.be_u16("the major version")?;
    let minor = c.be_u16("the minor version")?;
    if major != 2 {
        return Err(invalid(format!(
            "the chunk at byte {start} has JFR format version {major}.{minor}; this reader reads \
             2.x (JDK 11 and later)"
        )));
    }
    let size = c.be_u64("the chunk size")?;
    let cp_offset = c.be_u64("the constant pool offset")?;
    let meta_offset = c.be_u64("the metadata offset")?;
    let start_nanos = c.be_u64("the start time")? as i64;
    let duration_nanos = c.be_u64("the duration")? as i64;
    let start_ticks = c.be_u64("the start ticks")? as i64;
    let ticks_per_second = c.be_u64("the tick frequency")? as i64;
    let left = (bytes.len() - start) as u64;
    if size < HEADER_SIZE as u64 {
        return Err(invalid(format!(
            "the chunk at byte {start} says it is {size} bytes, less than its header"
        )));
    }
    if size > left {
        return Err(Error::truncated(
            FORMAT,
            format!(
                "the chunk at byte {start} says it is {size} bytes but the file ends {left} bytes \
                 after its start (byte {})",
                bytes.len()
            ),
        ));
    }
    if cp_offset == 0 || meta_offset == 0 {
        return Err(Error::truncated(
            FORMAT,
            format!(
                "the chunk at byte {start} is unfinished (no {} yet): the recording was still \
                 being written",
                if meta_offset == 0 {
                    "metadata"
                } else {
                    "constant pool"
                }
            ),
        ));
    }
    let end = start + size as usize;
    for (what, off) in [("metadata", meta_offset), ("constant pool", cp_offset)] {
        if off < HEADER_SIZE as u64 || off >= size {
            return Err(invalid(format!(
                "the chunk at byte {start} puts its {what} at offset {off}, outside the chunk \
                 ({size} bytes)"
            )));
        }
    }
    if ticks_per_second <= 0 {
        return Err(invalid(format!(
            "the chunk at byte {start} has a tick frequency of {ticks_per_second}"
        )));
    }

    // Metadata.
    let at = start + meta_offset as usize;
    let (ty, mut mc) = event_at(bytes, at, end)?;
    if ty != 0 {
        return Err(invalid(format!(
            "the chunk at byte {start} points at byte {at} for its metadata, but the event there \
             has type {ty}, not 0"
        )));
    }
    let meta = metadata::read(&mut mc, at)?;

    // Constant pools: a chain of checkpoints from the newest back, by delta offsets.
    let mut pools = HashMap::new();
    let mut off = cp_offset as i64;
    loop {
        let at = start + off as usize;
        let (ty, mut cc) = event_at(bytes, at, end)?;
        if ty != 1 {
            return Err(invalid(format!(
                "the constant pool chain of the chunk at byte {start} reaches byte {at}, but the \
                 event there has type {ty}, not 1 (checkpoint)"
            )));
        }
        cc.varlong("the checkpoint start time")?;
        cc.varlong("the checkpoint duration")?;
        let delta_at = cc.pos;
        let delta = cc.varlong("the checkpoint delta")?;
        cc.u8("the checkpoint type")?;
        let npools = cc.count("the checkpoint's pool count")?;
        for _ in 0..npools {
            let pool_at = cc.pos;
            let ty = cc.varint("a constant pool type")?;
            if !meta.classes.contains_key(&ty) {
                return Err(invalid(format!(
                    "the constant pool at byte {pool_at} has type {ty}, which the metadata does \
                     not define"
                )));
            }
            let n = cc.count("a constant pool's size")?;
            for _ in 0..n {
                let key = cc.varlong("a constant's key")?;
                // Newer checkpoints come first and win.
                pools.entry((ty, key)).or_insert(cc.pos);
                value::read(&meta, ty, &mut cc)?;
            }
        }
        if delta == 0 {
            break;
        }
        // Each step goes back to an earlier checkpoint, so the chain ends.
        let next = off.checked_add(delta);
        match next {
            Some(n) if delta < 0 && n >= HEADER_SIZE as i64 => off = n,
            _ => {
                return Err(invalid(format!(
                    "the checkpoint at byte {at} links to offset {off}{delta:+} (delta at byte \
                     {delta_at}), not an earlier checkpoint of its chunk"
                )));
            }
        }
    }
    Ok(Chunk {
        start,
        end,
        start_nanos,
        duration_nanos,
        start_ticks,
        ticks_per_second,
        meta,
        pools,
    })
}

/// The event at `at`: its type and a cursor over the rest of it.
fn event_at(bytes: &[u8], at: usize, end: usize) -> Result<(u64, Cursor<'_>)> {
    let mut c = Cursor::new(bytes, at, end);
    let size = c.varint("an event size")?;
    if size == 0 || size > (end - at) as u64 {
        return Err(invalid(format!(
            "the event at byte {at} has size {size}, {} (its chunk ends at byte {end})",
            if size == 0 {
                "which is impossible"
            } else {
                "past its chunk"
            }
        )));
    }
    let mut c = Cursor::new(bytes, c.pos, at + size as usize);
    let ty = c.varint("an event type")?;
    Ok((ty, c))
}

/// The events of a chunk after its header (metadata and checkpoints included), as
/// (type, cursor over the event's fields).
fn events<'a>(bytes: &'a [u8], chunk: &Chunk) -> impl Iterator<Item = Result<(u64, Cursor<'a>)>> {
    let (mut pos, end) = (chunk.start + HEADER_SIZE, chunk.end);
    let mut failed = false;
    std::iter::from_fn(move || {
        if pos >= end || failed {
            return None;
        }
        let r = event_at(bytes, pos, end);
        match &r {
            Ok((_, c)) => pos = c.end,
            Err(_) => failed = true,
        }
        Some(r)
    })
}

/// An event's fields.
struct Event<'m> {
    class: &'m metadata::Class,
    fields: Vec<Value>,
}

impl<'m> Event<'m> {
    fn read(chunk: &'m Chunk, ty: u64, c: &mut Cursor) -> Result<Event<'m>> {
        let class = &chunk.meta.classes[&ty];
        let at = c.pos;
        match value::read(&chunk.meta, ty, c)? {
            Value::Struct(fields) => Ok(Event { class, fields }),
            _ => Err(invalid(format!(
                "the {} event at byte {at} is a primitive type",
                class.name
            ))),
        }
    }

    fn get(&self, name: &str) -> Option<&Value> {
        self.fields.get(self.class.field(name)?)
    }

    fn int(&self, name: &str) -> Option<i64> {
        self.get(name)?.as_i64()
    }

    fn ref_key(&self, name: &str) -> Option<i64> {
        self.get(name)?.as_ref_key()
    }

    fn field_type(&self, name: &str) -> Option<u64> {
        Some(self.class.fields[self.class.field(name)?].type_id)
    }
}

/// Turns constant-pool references of one chunk into profile threads, stacks and frames,
/// each decoded once.
struct Resolver<'a> {
    bytes: &'a [u8],
    chunk: &'a Chunk,
    string_type: Option<u64>,
    threads: HashMap<i64, u32>,
    stacks: HashMap<i64, Option<u32>>,
    frames: HashMap<(i64, i64, i64), u32>,
    methods: HashMap<i64, Option<(String, String, String)>>,
    classes: HashMap<i64, Option<String>>,
    frame_types: HashMap<i64, String>,
}

/// How many references a text may go through (a class name: class → symbol → string).
const MAX_TEXT_DEPTH: usize = 4;

impl<'a> Resolver<'a> {
    fn new(bytes: &'a [u8], chunk: &'a Chunk) -> Resolver<'a> {
        Resolver {
            bytes,
            chunk,
            string_type: chunk.meta.id("java.lang.String"),
            threads: HashMap::new(),
            stacks: HashMap::new(),
            frames: HashMap::new(),
            methods: HashMap::new(),
            classes: HashMap::new(),
            frame_types: HashMap::new(),
        }
    }

    /// The constant `key` of type `ty`, if the chunk has it (JFR writes 0 or a missing key
    /// for null).
    fn constant(&self, ty: u64, key: i64) -> Result<Option<Value>> {
        let Some(&at) = self.chunk.pools.get(&(ty, key)) else {
            return Ok(None);
        };
        let mut c = Cursor::new(self.bytes, at, self.chunk.end);
        value::read(&self.chunk.meta, ty, &mut c).map(Some)
    }

    fn field<'v>(&self, ty: u64, v: &'v Value, name: &str) -> Option<&'v Value> {
        let Value::Struct(fields) = v else {
            return None;
        };
        fields.get(self.chunk.meta.classes.get(&ty)?.field(name)?)
    }

    fn field_type(&self, ty: u64, name: &str) -> Option<u64> {
        let class = self.chunk.meta.classes.get(&ty)?;
        Some(class.fields[class.field(name)?].type_id)
    }

    /// The text of a string, a string-pool reference, or a constant with one string field
    /// (a symbol).
    fn text(&self, v: &Value) -> Result<Option<String>> {
        self.text_at(v, 0)
    }

    fn text_at(&self, v: &Value, depth: usize) -> Result<Option<String>> {
        if depth > MAX_TEXT_DEPTH {
            return Ok(None);
        }
        match v {
            Value::Str(Str::Text(s)) => Ok(Some(s.clone())),
            Value::Str(Str::Null) => Ok(None),
            Value::Str(Str::Ref(key)) => match self.string_type {
                Some(ty) => match self.constant(ty, *key)? {
                    Some(v) => self.text_at(&v, depth + 1),
                    None => Ok(None),
                },
                None => Ok(None),
            },
            Value::Ref { ty, key } => match self.constant(*ty, *key)? {
                Some(v) => self.text_at(&v, depth + 1),
                None => Ok(None),
            },
            Value::Struct(fields) if fields.len() == 1 => self.text_at(&fields[0], depth + 1),
            _ => Ok(None),
        }
    }

    fn thread_state(&self, ty: Option<u64>, key: i64) -> Result<ThreadState> {
        let Some(ty) = ty else {
            return Ok(ThreadState::Unknown);
        };
        let name = self.text(&Value::Ref { ty, key })?.unwrap_or_default();
        Ok(match name.as_str() {
            "STATE_RUNNABLE" => ThreadState::Running,
            "STATE_SLEEPING" => ThreadState::Sleeping,
            "STATE_IN_OBJECT_WAIT" => ThreadState::Waiting,
            "STATE_IN_OBJECT_WAIT_TIMED" => ThreadState::TimedWaiting,
            "STATE_PARKED" | "STATE_PARKED_TIMED" => ThreadState::Parked,
            "STATE_BLOCKED_ON_MONITOR_ENTER" => ThreadState::Blocked,
            "STATE_IN_NATIVE" => ThreadState::Native,
            _ => ThreadState::Unknown,
        })
    }

    fn thread(&mut self, b: &mut ProfileBuilder, ty: Option<u64>, key: Option<i64>) -> Result<u32> {
        let key = key.unwrap_or(0);
        if let Some(id) = self.threads.get(&key) {
            return Ok(*id);
        }
        let mut thread = Thread {
            tid: 0,
            name: String::new(),
        };
        if let Some(ty) = ty
            && let Some(v) = self.constant(ty, key)?
        {
            let text = |name: &str| -> Result<Option<String>> {
                match self.field(ty, &v, name) {
                    Some(f) => Ok(self.text(f)?.filter(|s| !s.is_empty())),
                    None => Ok(None),
                }
            };
            thread.name = match text("javaName")? {
                Some(n) => n,
                None => text("osName")?.unwrap_or_default(),
            };
            thread.tid = self
                .field(ty, &v, "osThreadId")
                .and_then(Value::as_i64)
                .and_then(|t| u64::try_from(t).ok())
                .unwrap_or(0);
        }
        if thread.name.is_empty() {
            thread.name = if key == 0 {
                "[no thread]".into()
            } else {
                format!("[thread {key}]")
            };
        }
        let id = b.thread(thread);
        self.threads.insert(key, id);
        Ok(id)
    }

    /// The stack of trace `key`, root first (`None`: no frames).
    fn stack(&mut self, b: &mut ProfileBuilder, ty: Option<u64>, key: i64) -> Result<Option<u32>> {
        if let Some(s) = self.stacks.get(&key) {
            return Ok(*s);
        }
        let mut stack = None;
        if let Some(ty) = ty
            && let Some(v) = self.constant(ty, key)?
        {
            let frame_ty = self.field_type(ty, "frames");
            let truncated = self
                .field(ty, &v, "truncated")
                .and_then(Value::as_bool)
                .unwrap_or(false);
            if truncated {
                let f = b.frame(Frame::synthetic(FrameKind::Synthetic, "[truncated]"));
                stack = Some(b.child_stack(None, f));
            }
            if let (Some(frame_ty), Some(Value::Array(frames))) =
                (frame_ty, self.field(ty, &v, "frames"))
            {
                // JFR lists frames from the top; a stack grows from the root.
                for frame in frames.iter().rev() {
                    let f = self.frame(b, frame_ty, frame)?;
                    stack = Some(b.child_stack(stack, f));
                }
            }
        }
        self.stacks.insert(key, stack);
        Ok(stack)
    }

    fn frame(&mut self, b: &mut ProfileBuilder, ty: u64, frame: &Value) -> Result<u32> {
        let method = self
            .field(ty, frame, "method")
            .and_then(Value::as_ref_key)
            .unwrap_or(0);
        let line = self
            .field(ty, frame, "lineNumber")
            .and_then(Value::as_i64)
            .unwrap_or(0);
        let kind = self
            .field(ty, frame, "type")
            .and_then(Value::as_ref_key)
            .unwrap_or(-1);
        if let Some(id) = self.frames.get(&(method, line, kind)) {
            return Ok(*id);
        }
        let method_ty = self.field_type(ty, "method");
        let info = self.method(method_ty, method)?;
        let description = match self.field_type(ty, "type") {
            Some(t) if kind >= 0 => self.frame_type(t, kind)?,
            _ => String::new(),
        };
        let frame = match info {
            Some((class, name, descriptor)) if !class.is_empty() => {
                Frame::java(&class, &name, &descriptor, u32::try_from(line).unwrap_or(0))
            }
            Some((_, name, _)) => {
                let native = matches!(description.as_str(), "Native" | "C++" | "Kernel");
                let k = if native {
                    FrameKind::Native
                } else {
                    FrameKind::Synthetic
                };
                Frame::synthetic(k, &name)
            }
            None => Frame::synthetic(FrameKind::Native, "[unknown method]"),
        };
        let id = b.frame(frame);
        self.frames.insert((method, line, kind), id);
        Ok(id)
    }

    fn frame_type(&mut self, ty: u64, key: i64) -> Result<String> {
        if let Some(s) = self.frame_types.get(&key) {
            return Ok(s.clone());
        }
        let s = self.text(&Value::Ref { ty, key })?.unwrap_or_default();
        self.frame_types.insert(key, s.clone());
        Ok(s)
    }

    /// (class, name, descriptor) of method `key`.
    fn method(&mut self, ty: Option<u64>, key: i64) -> Result<Option<(String, String, String)>> {
        if let Some(m) = self.methods.get(&key) {
            return Ok(m.clone());
        }
        let mut info = None;
        if let Some(ty) = ty
            && let Some(v) = self.constant(ty, key)?
        {
            let text = |name: &str| -> Result<String> {
                Ok(match self.field(ty, &v, name) {
                    Some(f) => self.text(f)?.unwrap_or_default(),
                    None => String::new(),
                })
            };
            let (name, mut descriptor) = (text("name")?, text("descriptor")?);
            if descriptor == "()" {
                // What the writer puts for frames without a descriptor.
                descriptor.clear();
            }
            let class = match (
                self.field_type(ty, "type"),
                self.field(ty, &v, "type").and_then(Value::as_ref_key),
            ) {
                (Some(t), Some(k)) => self.class(t, k)?.unwrap_or_default(),
                _ => String::new(),
            };
            info = Some((class, name, descriptor));
        }
        self.methods.insert(key, info.clone());
        Ok(info)
    }

    /// The Java name of class `key` (`java.util.HashMap`, `byte[]`).
    fn class(&mut self, ty: u64, key: i64) -> Result<Option<String>> {
        if let Some(c) = self.classes.get(&key) {
            return Ok(c.clone());
        }
        let mut name = None;
        if let Some(v) = self.constant(ty, key)?
            && let Some(f) = self.field(ty, &v, "name")
        {
            name = self.text(f)?.map(|n| java_type_name(&n));
        }
        self.classes.insert(key, name.clone());
        Ok(name)
    }

    /// A leaf frame naming the class in field `field` of `ev`, if it has one.
    fn class_frame(&mut self, ev: &Event, field: &str, kind: FrameKind) -> Result<Option<Frame>> {
        let (Some(ty), Some(key)) = (ev.field_type(field), ev.ref_key(field)) else {
            return Ok(None);
        };
        Ok(self
            .class(ty, key)?
            .map(|name| Frame::synthetic(kind, &name)))
    }
}

#[cfg(test)]
mod tests {
    use super::parse_period;

    #[test]
    fn periods() {
        assert_eq!(parse_period("10 ms"), Some(10_000_000));
        assert_eq!(parse_period("20ms"), Some(20_000_000));
        assert_eq!(parse_period("1 s"), Some(1_000_000_000));
        assert_eq!(parse_period("500/s"), Some(2_000_000));
        assert_eq!(parse_period("off"), None);
        assert_eq!(parse_period("everyChunk"), None);
    }
}
