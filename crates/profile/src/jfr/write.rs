//! [`Profile`] → a one-chunk JFR recording: the header, a metadata event declaring only the
//! types used, the sample events spread over the profile's duration, and one checkpoint with
//! every constant pool (threads, stack traces, methods, classes, packages, symbols, frame
//! types, thread states).

use super::bytes::Out;
use super::{HEADER_SIZE, MAGIC, internal_type_name};
use crate::error::{Error, Result};
use crate::model::*;
use std::collections::HashMap;
use std::io::Write;

// Type ids of the metadata we write.
const T_BOOLEAN: u64 = 4;
const T_INT: u64 = 10;
const T_LONG: u64 = 11;
const T_STRING: u64 = 20;
const T_CLASS: u64 = 21;
const T_THREAD: u64 = 22;
const T_CLASS_LOADER: u64 = 23;
const T_FRAME_TYPE: u64 = 24;
const T_THREAD_STATE: u64 = 25;
const T_STACK_TRACE: u64 = 26;
const T_STACK_FRAME: u64 = 27;
const T_METHOD: u64 = 28;
const T_PACKAGE: u64 = 30;
const T_SYMBOL: u64 = 31;
const T_EXECUTION_SAMPLE: u64 = 101;
const T_NATIVE_METHOD_SAMPLE: u64 = 102;
const T_ALLOCATION_SAMPLE: u64 = 103;
const T_MONITOR_ENTER: u64 = 104;
const T_THREAD_PARK: u64 = 105;
const T_MONITOR_WAIT: u64 = 106;
const T_ACTIVE_SETTING: u64 = 107;
const T_LABEL: u64 = 200;
const T_CATEGORY: u64 = 201;
const T_CONTENT_TYPE: u64 = 202;
const T_TIMESTAMP: u64 = 203;
const T_TIMESPAN: u64 = 204;
const T_DATA_AMOUNT: u64 = 205;
const T_UNSIGNED: u64 = 206;

/// Most allocation events written for a whole profile: a profile's estimated object counts
/// can run to billions; above this, each sample gets events in proportion (at least one), and
/// `objects` no longer reads back exactly (`bytes` always does).
const MAX_ALLOCATION_EVENTS: u64 = 1_000_000;

/// Most events of all kinds a profile may make (each is held while they are sorted by time,
/// ~50 bytes with its share of the output): a profile that claims more (a count of 10^9 in a
/// 25 KB file) is refused before anything is allocated for it.
const MAX_EVENTS: u64 = 1 << 24;

/// Frame types, by key.
const FRAME_TYPES: [&str; 3] = ["JIT compiled", "Native", "Synthetic"];
/// Thread states, by key (their index + 1).
const STATES: [(ThreadState, &str); 8] = [
    (ThreadState::Unknown, "STATE_DEFAULT"),
    (ThreadState::Running, "STATE_RUNNABLE"),
    (ThreadState::Sleeping, "STATE_SLEEPING"),
    (ThreadState::Blocked, "STATE_BLOCKED_ON_MONITOR_ENTER"),
    (ThreadState::Waiting, "STATE_IN_OBJECT_WAIT"),
    (ThreadState::TimedWaiting, "STATE_IN_OBJECT_WAIT_TIMED"),
    (ThreadState::Parked, "STATE_PARKED"),
    (ThreadState::Native, "STATE_RUNNABLE"),
];

fn state_key(s: ThreadState) -> u64 {
    STATES.iter().position(|(x, _)| *x == s).unwrap_or(0) as u64 + 1
}

/// One element of the metadata tree.
struct Element {
    name: &'static str,
    attributes: Vec<(&'static str, String)>,
    children: Vec<Element>,
}

impl Element {
    fn new(name: &'static str) -> Element {
        Element {
            name,
            attributes: Vec::new(),
            children: Vec::new(),
        }
    }

    fn attr(mut self, key: &'static str, value: impl Into<String>) -> Element {
        self.attributes.push((key, value.into()));
        self
    }

    fn child(mut self, e: Element) -> Element {
        self.children.push(e);
        self
    }
}

fn class(name: &str, id: u64, super_type: Option<&str>, simple: bool) -> Element {
    let mut e = Element::new("class")
        .attr("name", name)
        .attr("id", id.to_string());
    if let Some(s) = super_type {
        e = e.attr("superType", s);
    }
    if simple {
        e = e.attr("simpleType", "true");
    }
    e
}

fn annotation(ty: u64, value: Option<&str>) -> Element {
    let e = Element::new("annotation").attr("class", ty.to_string());
    match value {
        Some(v) => e.attr("value", v),
        None => e,
    }
}

/// A field; `pool` stores it through its type's constant pool.
fn field(name: &str, ty: u64, label: &str, pool: bool) -> Element {
    let mut e = Element::new("field")
        .attr("name", name)
        .attr("class", ty.to_string());
    if pool {
        e = e.attr("constantPool", "true");
    }
    e.child(annotation(T_LABEL, Some(label)))
}

fn event(name: &str, id: u64, label: &str, category: &[&str], fields: Vec<Element>) -> Element {
    let mut cat = annotation(T_CATEGORY, None);
    for (i, c) in category.iter().enumerate() {
        cat = cat.attr(["value-0", "value-1", "value-2"][i.min(2)], *c);
    }
    let mut e = class(name, id, Some("jdk.jfr.Event"), false)
        .child(annotation(T_LABEL, Some(label)))
        .child(cat)
        .child(
            field("startTime", T_LONG, "Start Time", false)
                .child(annotation(T_TIMESTAMP, Some("TICKS"))),
        );
    for f in fields {
        e = e.child(f);
    }
    e
}

fn duration() -> Element {
    field("duration", T_LONG, "Duration", false).child(annotation(T_TIMESPAN, Some("TICKS")))
}

fn thread(name: &str, label: &str) -> Element {
    field(name, T_THREAD, label, true)
}

fn stack_trace() -> Element {
    field("stackTrace", T_STACK_TRACE, "Stack Trace", true)
}

fn address() -> Element {
    field("address", T_LONG, "Address", false).child(annotation(T_UNSIGNED, None))
}

/// The metadata tree: the types our events and pools use.
fn metadata() -> Element {
    let annotation_type = |name: &str, id: u64, value: bool, content: bool| {
        let mut e = class(name, id, Some("java.lang.annotation.Annotation"), false);
        if content {
            e = e.child(annotation(T_CONTENT_TYPE, None));
        }
        if value {
            e = e.child(
                Element::new("field")
                    .attr("name", "value")
                    .attr("class", T_STRING.to_string()),
            );
        }
        e
    };
    let profiling = ["Java Virtual Machine", "Profiling"];
    let locking = ["Java Application"];
    let mut m = Element::new("metadata");
    for (name, id) in [
        ("boolean", T_BOOLEAN),
        ("int", T_INT),
        ("long", T_LONG),
        ("java.lang.String", T_STRING),
    ] {
        m = m.child(class(name, id, None, false));
    }
    let types = [
        class("java.lang.Class", T_CLASS, None, false)
            .child(annotation(T_LABEL, Some("Java Class")))
            .child(field("classLoader", T_CLASS_LOADER, "Class Loader", true))
            .child(field("name", T_SYMBOL, "Name", true))
            .child(field("package", T_PACKAGE, "Package", true))
            .child(field("modifiers", T_INT, "Access Modifiers", false))
            .child(field("hidden", T_BOOLEAN, "Hidden", false)),
        class("java.lang.Thread", T_THREAD, None, false)
            .child(annotation(T_LABEL, Some("Thread")))
            .child(field("osName", T_STRING, "OS Thread Name", false))
            .child(field("osThreadId", T_LONG, "OS Thread Id", false))
            .child(field("javaName", T_STRING, "Java Thread Name", false))
            .child(field("javaThreadId", T_LONG, "Java Thread Id", false)),
        class("jdk.types.ClassLoader", T_CLASS_LOADER, None, false)
            .child(annotation(T_LABEL, Some("Java Class Loader")))
            .child(field("type", T_CLASS, "Type", true))
            .child(field("name", T_SYMBOL, "Name", true)),
        class("jdk.types.FrameType", T_FRAME_TYPE, None, true)
            .child(annotation(T_LABEL, Some("Frame type")))
            .child(field("description", T_STRING, "Description", false)),
        class("jdk.types.ThreadState", T_THREAD_STATE, None, true)
            .child(annotation(T_LABEL, Some("Java Thread State")))
            .child(field("name", T_STRING, "Name", false)),
        class("jdk.types.StackTrace", T_STACK_TRACE, None, false)
            .child(annotation(T_LABEL, Some("Stacktrace")))
            .child(field("truncated", T_BOOLEAN, "Truncated", false))
            .child(field("frames", T_STACK_FRAME, "Stack Frames", false).attr("dimension", "1")),
        class("jdk.types.StackFrame", T_STACK_FRAME, None, false)
            .child(field("method", T_METHOD, "Java Method", true))
            .child(field("lineNumber", T_INT, "Line Number", false))
            .child(field("bytecodeIndex", T_INT, "Bytecode Index", false))
            .child(field("type", T_FRAME_TYPE, "Frame Type", true)),
        class("jdk.types.Method", T_METHOD, None, false)
            .child(annotation(T_LABEL, Some("Java Method")))
            .child(field("type", T_CLASS, "Type", true))
            .child(field("name", T_SYMBOL, "Name", true))
            .child(field("descriptor", T_SYMBOL, "Descriptor", true))
            .child(field("modifiers", T_INT, "Access Modifiers", false))
            .child(field("hidden", T_BOOLEAN, "Hidden", false)),
        class("jdk.types.Package", T_PACKAGE, None, false)
            .child(annotation(T_LABEL, Some("Package")))
            .child(field("name", T_SYMBOL, "Name", true)),
        class("jdk.types.Symbol", T_SYMBOL, None, true)
            .child(annotation(T_LABEL, Some("Symbol")))
            .child(field("string", T_STRING, "String", false)),
        event(
            "jdk.ExecutionSample",
            T_EXECUTION_SAMPLE,
            "Method Profiling Sample",
            &profiling,
            vec![
                thread("sampledThread", "Thread"),
                stack_trace(),
                field("state", T_THREAD_STATE, "Thread State", true),
            ],
        ),
        event(
            "jdk.NativeMethodSample",
            T_NATIVE_METHOD_SAMPLE,
            "Method Profiling Sample Native",
            &profiling,
            vec![
                thread("sampledThread", "Thread"),
                stack_trace(),
                field("state", T_THREAD_STATE, "Thread State", true),
            ],
        ),
        event(
            "jdk.ObjectAllocationSample",
            T_ALLOCATION_SAMPLE,
            "Object Allocation Sample",
            &locking,
            vec![
                thread("eventThread", "Event Thread"),
                stack_trace(),
                field("objectClass", T_CLASS, "Object Class", true),
                field("weight", T_LONG, "Sample Weight", false)
                    .child(annotation(T_DATA_AMOUNT, Some("BYTES"))),
            ],
        ),
        event(
            "jdk.JavaMonitorEnter",
            T_MONITOR_ENTER,
            "Java Monitor Blocked",
            &locking,
            vec![
                duration(),
                thread("eventThread", "Event Thread"),
                stack_trace(),
                field("monitorClass", T_CLASS, "Monitor Class", true),
                thread("previousOwner", "Previous Monitor Owner"),
                address(),
            ],
        ),
        event(
            "jdk.ThreadPark",
            T_THREAD_PARK,
            "Java Thread Park",
            &locking,
            vec![
                duration(),
                thread("eventThread", "Event Thread"),
                stack_trace(),
                field("parkedClass", T_CLASS, "Class Parked On", true),
                field("timeout", T_LONG, "Park Timeout", false)
                    .child(annotation(T_TIMESPAN, Some("NANOSECONDS"))),
                field("until", T_LONG, "Park Until", false)
                    .child(annotation(T_TIMESTAMP, Some("MILLISECONDS_SINCE_EPOCH"))),
                address(),
            ],
        ),
        event(
            "jdk.JavaMonitorWait",
            T_MONITOR_WAIT,
            "Java Monitor Wait",
            &locking,
            vec![
                duration(),
                thread("eventThread", "Event Thread"),
                stack_trace(),
                field("monitorClass", T_CLASS, "Monitor Class", true),
                thread("notifier", "Notifier Thread"),
                field("timeout", T_LONG, "Timeout", false)
                    .child(annotation(T_TIMESPAN, Some("MILLISECONDS"))),
                field("timedOut", T_BOOLEAN, "Timed Out", false),
                address(),
            ],
        ),
        event(
            "jdk.ActiveSetting",
            T_ACTIVE_SETTING,
            "Recording Setting",
            &["Flight Recorder"],
            vec![
                duration(),
                thread("eventThread", "Event Thread"),
                field("id", T_LONG, "Event Id", false),
                field("name", T_STRING, "Setting Name", false),
                field("value", T_STRING, "Setting Value", false),
            ],
        ),
        annotation_type("jdk.jfr.Label", T_LABEL, true, false),
        class(
            "jdk.jfr.Category",
            T_CATEGORY,
            Some("java.lang.annotation.Annotation"),
            false,
        )
        .child(
            Element::new("field")
                .attr("name", "value")
                .attr("class", T_STRING.to_string())
                .attr("dimension", "1"),
        ),
        annotation_type("jdk.jfr.ContentType", T_CONTENT_TYPE, false, false),
        annotation_type("jdk.jfr.Timestamp", T_TIMESTAMP, true, true),
        annotation_type("jdk.jfr.Timespan", T_TIMESPAN, true, true),
        annotation_type("jdk.jfr.DataAmount", T_DATA_AMOUNT, true, true),
        annotation_type("jdk.jfr.Unsigned", T_UNSIGNED, false, true),
    ];
    for t in types {
        m = m.child(t);
    }
    Element::new("root").child(m).child(
        Element::new("region")
            .attr("locale", "en_US")
            .attr("gmtOffset", "0"),
    )
}

fn write_metadata(out: &mut Out) {
    let root = metadata();
    let mut strings: Vec<String> = Vec::new();
    let mut ids: HashMap<String, u64> = HashMap::new();
    fn intern(s: &str, strings: &mut Vec<String>, ids: &mut HashMap<String, u64>) -> u64 {
        *ids.entry(s.to_string()).or_insert_with(|| {
            strings.push(s.to_string());
            strings.len() as u64 - 1
        })
    }
    fn element(
        e: &Element,
        body: &mut Out,
        strings: &mut Vec<String>,
        ids: &mut HashMap<String, u64>,
    ) {
        body.varint(intern(e.name, strings, ids));
        body.varint(e.attributes.len() as u64);
        for (k, v) in &e.attributes {
            body.varint(intern(k, strings, ids));
            body.varint(intern(v, strings, ids));
        }
        body.varint(e.children.len() as u64);
        for c in &e.children {
            element(c, body, strings, ids);
        }
    }
    let mut tree = Out::default();
    element(&root, &mut tree, &mut strings, &mut ids);
    let mut body = Out::default();
    body.varint(0); // type: metadata
    body.varint(0); // start time
    body.varint(0); // duration
    body.varint(1); // metadata id
    body.varint(strings.len() as u64);
    for s in &strings {
        body.string(s);
    }
    body.buf.extend_from_slice(&tree.buf);
    out.sized(&body.buf);
}

/// Interns keys (from 1; 0 is null).
struct Keys<T> {
    ids: HashMap<T, u64>,
    order: Vec<T>,
}

impl<T: std::hash::Hash + Eq + Clone> Keys<T> {
    fn new() -> Keys<T> {
        Keys {
            ids: HashMap::new(),
            order: Vec::new(),
        }
    }

    fn key(&mut self, t: &T) -> u64 {
        if let Some(k) = self.ids.get(t) {
            return *k;
        }
        self.order.push(t.clone());
        let k = self.order.len() as u64;
        self.ids.insert(t.clone(), k);
        k
    }
}

/// The constant pools being built.
struct Pools {
    symbols: Keys<String>,
    packages: Keys<u64>,
    /// (name symbol, package key).
    classes: Keys<(u64, u64)>,
    /// (class key, name symbol, descriptor symbol).
    methods: Keys<(u64, u64, u64)>,
    /// Profile stack ids written as stack traces (key = id + 1).
    stacks: Vec<u32>,
    stack_seen: HashMap<u32, ()>,
}

impl Pools {
    fn class(&mut self, java_name: &str) -> u64 {
        let internal = internal_type_name(java_name);
        let package = match internal.rfind('/') {
            Some(i) if !internal.starts_with('[') => {
                let sym = self.symbols.key(&internal[..i].to_string());
                self.packages.key(&sym)
            }
            _ => 0,
        };
        let name = self.symbols.key(&internal);
        self.classes.key(&(name, package))
    }

    fn stack(&mut self, id: u32) -> u64 {
        if self.stack_seen.insert(id, ()).is_none() {
            self.stacks.push(id);
        }
        u64::from(id) + 1
    }
}

/// Which event a sample unit becomes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Execution,
    Native,
    Allocation,
    MonitorEnter,
    Park,
    Wait,
}

struct Planned {
    time: u64,
    sample: u32,
    kind: Kind,
    /// The event's weight or duration.
    value: u64,
}

/// Each sample's times (ns from the start, one per period: an entry standing for `w` periods
/// gives `w` times a period apart, ending at its own), if the timeline accounts for every
/// period of every sample (`samples` is the index of the periods metric); `None` otherwise.
///
/// The weights are checked against the samples before any is expanded: a timeline entry may
/// claim up to 2^32 periods, and only a timeline that adds up to the samples (whose total the
/// caller bounded) is turned into times.
fn sample_times(profile: &Profile, samples: usize, period: u64) -> Option<Vec<Vec<u64>>> {
    if profile.timeline.is_empty() {
        return None;
    }
    let mut periods = vec![0u64; profile.samples.len()];
    for t in &profile.timeline {
        let n = periods.get_mut(t.sample as usize)?;
        *n = n.saturating_add(u64::from(t.weight.max(1)));
    }
    let complete = periods
        .iter()
        .zip(&profile.samples)
        .all(|(n, s)| *n == s.values[samples]);
    if !complete {
        return None;
    }
    let mut times: Vec<Vec<u64>> = periods
        .iter()
        .map(|n| Vec::with_capacity(*n as usize))
        .collect();
    for t in &profile.timeline {
        let w = u64::from(t.weight.max(1));
        let list = &mut times[t.sample as usize];
        for k in (0..w).rev() {
            list.push(t.offset_ns.saturating_sub(k.saturating_mul(period)));
        }
    }
    Some(times)
}

/// Splits `total` into `n` parts that add up to it.
fn part(total: u64, n: u64, i: u64) -> u64 {
    total / n + u64::from(i < total % n)
}

pub(super) fn write(profile: &Profile, mut out: impl Write) -> Result<()> {
    let at = |m: Metric| profile.meta.metrics.iter().position(|x| *x == m);
    let (samples, ns) = (at(Metric::Samples), at(Metric::Ns));
    let (bytes, objects) = (at(Metric::Bytes), at(Metric::Objects));
    let (lock_ns, lock_count) = (at(Metric::LockNs), at(Metric::LockCount));
    let (wait_ns, wait_count) = (at(Metric::WaitNs), at(Metric::WaitCount));
    if samples.is_none()
        && bytes.is_none()
        && objects.is_none()
        && lock_ns.is_none()
        && lock_count.is_none()
        && wait_ns.is_none()
        && wait_count.is_none()
    {
        let have: Vec<&str> = profile.meta.metrics.iter().map(|m| m.as_str()).collect();
        return Err(Error::Export(format!(
            "JFR carries samples, alloc (bytes, objects) and lock metrics; this profile has {}",
            have.join(", ")
        )));
    }
    let value = |s: &Sample, i: Option<usize>| i.map_or(0, |i| s.values[i]);
    let total_objects: u64 = profile.samples.iter().fold(0u64, |a, s| {
        a.saturating_add(value(s, objects).max(u64::from(value(s, bytes) > 0)))
    });
    let period = if profile.meta.interval_ns > 0 {
        profile.meta.interval_ns
    } else {
        let (n, t) = profile.samples.iter().fold((0u64, 0u64), |(n, t), s| {
            (
                n.saturating_add(value(s, samples)),
                t.saturating_add(value(s, ns)),
            )
        });
        t.checked_div(n).unwrap_or(0)
    };

    // How many events of each kind each sample makes, with their values.
    let mut plan: Vec<(u32, Kind, u64, u64)> = Vec::new(); // (sample, kind, count, total value)
    for (i, s) in profile.samples.iter().enumerate() {
        let i = i as u32;
        let n = value(s, samples);
        if n > 0 {
            let k = if s.state == ThreadState::Native {
                Kind::Native
            } else {
                Kind::Execution
            };
            plan.push((i, k, n, 0));
        }
        let (b, o) = (value(s, bytes), value(s, objects));
        if b > 0 || o > 0 {
            let mut count = o.max(1);
            if total_objects > MAX_ALLOCATION_EVENTS {
                count = ((u128::from(count) * u128::from(MAX_ALLOCATION_EVENTS)
                    / u128::from(total_objects)) as u64)
                    .max(1);
            }
            plan.push((i, Kind::Allocation, count, b));
        }
        let (t, n) = (value(s, lock_ns), value(s, lock_count));
        if t > 0 || n > 0 {
            let k = if s.state == ThreadState::Parked {
                Kind::Park
            } else {
                Kind::MonitorEnter
            };
            plan.push((i, k, n.max(1), t));
        }
        let (t, n) = (value(s, wait_ns), value(s, wait_count));
        if t > 0 || n > 0 {
            plan.push((i, Kind::Wait, n.max(1), t));
        }
    }
    let total_events: u64 = plan.iter().fold(0u64, |a, p| a.saturating_add(p.2));
    if total_events > MAX_EVENTS {
        return Err(Error::Export(format!(
            "JFR holds one event per sample, lock and wait: this profile would make \
             {total_events} events, more than {MAX_EVENTS}; write .jvmprof or .pb.gz instead"
        )));
    }
    let timed = samples.and_then(|i| sample_times(profile, i, period));
    let last_time = timed.iter().flatten().flatten().max().map_or(0, |t| t + 1);
    let duration_ns = if profile.meta.duration_ms > 0 {
        profile.meta.duration_ms.saturating_mul(1_000_000)
    } else {
        total_events
            .saturating_mul(period.max(1_000_000))
            .max(1_000_000_000)
    }
    .max(last_time);
    let mut events: Vec<Planned> = Vec::with_capacity(total_events.min(1 << 24) as usize);
    for &(sample, kind, count, total) in &plan {
        for j in 0..count {
            let time = match (&timed, kind) {
                // A sample with a timeline keeps its real times.
                (Some(times), Kind::Execution | Kind::Native) => times[sample as usize][j as usize],
                // Otherwise event j of n sits in the middle of the j-th n-th of the recording.
                _ => {
                    ((u128::from(j) * 2 + 1) * u128::from(duration_ns) / (u128::from(count) * 2))
                        as u64
                }
            };
            events.push(Planned {
                time,
                sample,
                kind,
                value: part(total, count, j),
            });
        }
    }
    events.sort_by_key(|e| e.time);

    let mut pools = Pools {
        symbols: Keys::new(),
        packages: Keys::new(),
        classes: Keys::new(),
        methods: Keys::new(),
        stacks: Vec::new(),
        stack_seen: HashMap::new(),
    };
    let leaf_class = |stack: u32, kind: FrameKind| -> Option<(Option<u32>, String)> {
        let f = &profile.frames[profile.stacks.top(stack)? as usize];
        (f.kind == kind).then(|| (profile.stacks.parent(stack), f.method.clone()))
    };

    let mut chunk = Out::default();
    chunk.buf.extend_from_slice(&[0u8; HEADER_SIZE]);
    write_metadata(&mut chunk);

    // Settings: the sampling period, so that `ns` reads back.
    if period > 0 {
        for ty in [T_EXECUTION_SAMPLE, T_NATIVE_METHOD_SAMPLE] {
            let mut e = Out::default();
            e.varint(T_ACTIVE_SETTING);
            e.varint(0);
            e.varint(0);
            e.varint(0);
            e.varint(ty);
            e.string("period");
            e.string(&format!("{period} ns"));
            chunk.sized(&e.buf);
        }
    }
    for ev in &events {
        let s = &profile.samples[ev.sample as usize];
        let thread = u64::from(s.thread) + 1;
        let mut e = Out::default();
        let stack_key = |pools: &mut Pools, stack: Option<u32>| stack.map_or(0, |s| pools.stack(s));
        match ev.kind {
            Kind::Execution | Kind::Native => {
                e.varint(if ev.kind == Kind::Native {
                    T_NATIVE_METHOD_SAMPLE
                } else {
                    T_EXECUTION_SAMPLE
                });
                e.varint(ev.time);
                e.varint(thread);
                e.varint(pools.stack(s.stack));
                e.varint(state_key(if ev.kind == Kind::Native {
                    ThreadState::Running
                } else {
                    s.state
                }));
            }
            Kind::Allocation => {
                let (stack, class) = match leaf_class(s.stack, FrameKind::AllocatedType) {
                    Some((parent, name)) => (parent, pools.class(&name)),
                    None => (Some(s.stack), 0),
                };
                e.varint(T_ALLOCATION_SAMPLE);
                e.varint(ev.time);
                e.varint(thread);
                e.varint(stack_key(&mut pools, stack));
                e.varint(class);
                e.varint(ev.value);
            }
            Kind::MonitorEnter | Kind::Park | Kind::Wait => {
                let (stack, class) = match leaf_class(s.stack, FrameKind::LockClass) {
                    Some((parent, name)) => (parent, pools.class(&name)),
                    None => (Some(s.stack), 0),
                };
                e.varint(match ev.kind {
                    Kind::MonitorEnter => T_MONITOR_ENTER,
                    Kind::Park => T_THREAD_PARK,
                    _ => T_MONITOR_WAIT,
                });
                // Durations end at the event's time.
                e.varint(ev.time.saturating_sub(ev.value));
                e.varint(ev.value);
                e.varint(thread);
                e.varint(stack_key(&mut pools, stack));
                e.varint(class);
                match ev.kind {
                    Kind::MonitorEnter => {
                        e.varint(0); // previous owner
                    }
                    Kind::Park => {
                        e.varlong(-1); // timeout
                        e.varlong(i64::MIN); // until
                    }
                    _ => {
                        e.varint(0); // notifier
                        e.varint(0); // timeout
                        e.u8(0); // timed out
                    }
                }
                e.varint(0); // address
            }
        }
        chunk.sized(&e.buf);
    }

    // The checkpoint: every constant pool.
    let checkpoint_at = chunk.buf.len();
    let mut pool_bodies: Vec<(u64, u64, Out)> = Vec::new(); // (type, count, entries)
    let mut add_pool = |ty: u64, count: u64, body: Out| {
        if count > 0 {
            pool_bodies.push((ty, count, body));
        }
    };

    let mut p = Out::default();
    for (i, t) in profile.threads.iter().enumerate() {
        p.varint(i as u64 + 1);
        p.string(&t.name);
        p.varint(t.tid);
        p.string(&t.name);
        p.varint(i as u64 + 1);
    }
    add_pool(T_THREAD, profile.threads.len() as u64, p);

    let mut p = Out::default();
    let mut frame_ids: Vec<u32> = Vec::new();
    for &id in &pools.stacks.clone() {
        p.varint(u64::from(id) + 1);
        frame_ids.clear();
        frame_ids.extend(profile.stacks.frames(id));
        let truncated = frame_ids.first().is_some_and(|&f| {
            let f = &profile.frames[f as usize];
            f.kind == FrameKind::Synthetic && f.method == "[truncated]"
        });
        let frames = if truncated {
            &frame_ids[1..]
        } else {
            &frame_ids[..]
        };
        p.u8(u8::from(truncated));
        p.varint(frames.len() as u64);
        for &f in frames.iter().rev() {
            let f = &profile.frames[f as usize];
            let class = pools.class(&f.class);
            let name = pools.symbols.key(&f.method);
            // `jfr print` fails on an empty descriptor; `()` is never a real one, and reads
            // back as empty.
            let descriptor = if f.descriptor.is_empty() {
                "()"
            } else {
                &f.descriptor
            };
            let descriptor = pools.symbols.key(&descriptor.to_string());
            p.varint(pools.methods.key(&(class, name, descriptor)));
            p.varint(u64::from(f.line));
            p.varint(0);
            p.varint(match f.kind {
                FrameKind::Java => 1,
                FrameKind::Native => 2,
                _ => 3,
            });
        }
    }
    add_pool(T_STACK_TRACE, pools.stacks.len() as u64, p);

    let mut p = Out::default();
    for (i, (class, name, descriptor)) in pools.methods.order.iter().enumerate() {
        p.varint(i as u64 + 1);
        p.varint(*class);
        p.varint(*name);
        p.varint(*descriptor);
        p.varint(0);
        p.u8(0);
    }
    add_pool(T_METHOD, pools.methods.order.len() as u64, p);

    let mut p = Out::default();
    for (i, (name, package)) in pools.classes.order.iter().enumerate() {
        p.varint(i as u64 + 1);
        p.varint(0); // class loader
        p.varint(*name);
        p.varint(*package);
        p.varint(0);
        p.u8(0);
    }
    add_pool(T_CLASS, pools.classes.order.len() as u64, p);

    let mut p = Out::default();
    for (i, name) in pools.packages.order.iter().enumerate() {
        p.varint(i as u64 + 1);
        p.varint(*name);
    }
    add_pool(T_PACKAGE, pools.packages.order.len() as u64, p);

    let mut p = Out::default();
    for (i, s) in pools.symbols.order.iter().enumerate() {
        p.varint(i as u64 + 1);
        p.string(s);
    }
    add_pool(T_SYMBOL, pools.symbols.order.len() as u64, p);

    let mut p = Out::default();
    for (i, d) in FRAME_TYPES.iter().enumerate() {
        p.varint(i as u64 + 1);
        p.string(d);
    }
    add_pool(T_FRAME_TYPE, FRAME_TYPES.len() as u64, p);

    let mut p = Out::default();
    for (i, (_, name)) in STATES.iter().enumerate() {
        p.varint(i as u64 + 1);
        p.string(name);
    }
    add_pool(T_THREAD_STATE, STATES.len() as u64, p);

    let mut cp = Out::default();
    cp.varint(1); // type: checkpoint
    cp.varint(0); // start time
    cp.varint(0); // duration
    cp.varint(0); // delta to the previous checkpoint: none
    cp.u8(1); // checkpoint type: flush
    cp.varint(pool_bodies.len() as u64);
    for (ty, count, body) in &pool_bodies {
        cp.varint(*ty);
        cp.varint(*count);
        cp.buf.extend_from_slice(&body.buf);
    }
    chunk.sized(&cp.buf);

    // The header, now that the offsets are known.
    let start_ns = if profile.meta.start_unix_ms > 0 {
        profile.meta.start_unix_ms.saturating_mul(1_000_000)
    } else {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
    };
    let size = chunk.buf.len() as u64;
    let mut h = Vec::with_capacity(HEADER_SIZE);
    h.extend_from_slice(MAGIC);
    h.extend_from_slice(&2u16.to_be_bytes());
    h.extend_from_slice(&1u16.to_be_bytes());
    h.extend_from_slice(&size.to_be_bytes());
    h.extend_from_slice(&(checkpoint_at as u64).to_be_bytes());
    h.extend_from_slice(&(HEADER_SIZE as u64).to_be_bytes());
    h.extend_from_slice(&start_ns.to_be_bytes());
    h.extend_from_slice(&duration_ns.to_be_bytes());
    h.extend_from_slice(&0u64.to_be_bytes()); // start ticks: event times are ns from the start
    h.extend_from_slice(&1_000_000_000u64.to_be_bytes()); // ticks per second
    // File state 0 (finished), then flags: compressed integers, final chunk.
    h.extend_from_slice(&[0, 0, 0, 3]);
    chunk.buf[..HEADER_SIZE].copy_from_slice(&h);
    out.write_all(&chunk.buf)?;
    out.flush()?;
    Ok(())
}
