//! Exact profiling (`mode=exact`, JP by Binder and Hulaas): classes are rewritten as they load so
//! that every thread builds a calling-context tree with the exact number of invocations of each
//! context and the bytecodes each context executed itself.
//!
//! - At OnLoad the runtime classes (`java/agent/jvmprof/runtime`, compiled by build.rs) are
//!   written to a private directory that goes on the boot class path, and the class-hook
//!   capabilities are added.
//! - At VMInit the runtime is loaded and initialized, the ClassFileLoadHook is turned on, and
//!   already loaded classes that `include` brings in are retransformed.
//! - In the ClassFileLoadHook the class-file engine (crates/classfile, pass `Exact`) rewrites
//!   each method: `node = open(id)` first, a per-block bytecode sum in a local (default or
//!   precise blocks) handed to the node before calls and at every exit (`count`, `close`, the
//!   latter also in a catch-all handler that rethrows), `restore(node)` in exception handlers.
//!   A class the engine cannot rewrite is left unchanged and listed; the hook never fails
//!   class loading.
//! - The writer thread reads the trees through JNI ([`Collector::merge`], through the tree reader shared with root mode) at the end, and
//!   periodically when streaming, adding what grew since its last look.

use super::api::Engine;
use super::trees::{TreeReader, each_tree};
use crate::options::{Bba, ExactOptions};
use crate::sink::Sink;
use crate::sync::lock;
use jvmprof_classfile::bba::Mode;
use jvmprof_classfile::instrument::{self, MethodTable, Probes as Pass};
use jvmprof_jvmti::classes::GlobalRef;
use jvmprof_jvmti::{Env, Event, JObject, Jni};
use jvmprof_profile::{Frame, FrameKind, Metric, ThreadState};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

include!(concat!(env!("OUT_DIR"), "/exact_runtime.rs"));

/// The runtime class the probes call (same name and signatures as the offline runtime).
const RUNTIME: &str = "jvmprof/runtime/Probes";
/// Method id of the runtime's contexts for calls past the node budget (`Probes.SPILL`).
const SPILL: i64 = -2;

/// Classes never rewritten, whatever `include` says: the runtime itself, and the JDK code the
/// runtime's probes run (ThreadLocal, Thread, references, Object's constructor) or that the VM
/// needs to stay exactly as shipped (method handles, JDK internals). Instrumenting these would
/// recurse into the probes or break bootstrapping.
const NEVER: &[&str] = &[
    "jvmprof/",
    "java/lang/Object",
    "java/lang/Thread",
    "java/lang/ThreadLocal",
    "java/lang/VirtualThread",
    "java/lang/BaseVirtualThread",
    "java/lang/ref/",
    "java/lang/invoke/",
    "java/lang/System",
    "java/lang/Class",
    "java/lang/ClassLoader",
    "java/lang/Module",
    "java/lang/StackTraceElement",
    "java/lang/Throwable",
    "jdk/internal/",
    "sun/",
    "jdk/jfr/",
];

/// Where a class comes from, for scoping.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// Defined by the boot or the platform loader.
    Jdk,
    Application,
}

#[derive(Default)]
struct Tables {
    methods: MethodTable,
    /// Class (or method) → why it was left unchanged.
    skipped: BTreeMap<String, String>,
    /// Methods rewritten with a caveat (constructors without an exit handler).
    ctor_notes: Vec<String>,
}

struct State {
    options: ExactOptions,
    dir: PathBuf,
    active: AtomicBool,
    runtime: OnceLock<GlobalRef>,
    platform: OnceLock<GlobalRef>,
    tables: Mutex<Tables>,
    classes: AtomicU64,
    methods: AtomicU64,
    retransformed: AtomicU64,
    skipped_overflow: AtomicU64,
}

static STATE: OnceLock<State> = OnceLock::new();

/// Whether exact mode was set up at OnLoad.
pub fn enabled() -> bool {
    STATE.get().is_some()
}

/// OnLoad: capabilities, and the runtime on the boot class path. Errors leave exact mode off.
pub fn on_load(env: &Env, options: &ExactOptions) -> Result<(), String> {
    env.add_class_hook_capabilities()
        .map_err(|e| format!("exact mode needs class file hooks: {e}"))?;
    let dir = std::env::temp_dir().join(format!("jvmprof-exact-{}", std::process::id()));
    for (rel, bytes) in RUNTIME_CLASSES {
        let path = dir.join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
        }
        std::fs::write(&path, bytes)
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    env.add_to_bootstrap_class_loader_search(&dir.display().to_string())
        .map_err(|e| e.to_string())?;
    STATE
        .set(State {
            options: options.clone(),
            dir,
            active: AtomicBool::new(false),
            runtime: OnceLock::new(),
            platform: OnceLock::new(),
            tables: Mutex::new(Tables::default()),
            classes: AtomicU64::new(0),
            methods: AtomicU64::new(0),
            retransformed: AtomicU64::new(0),
            skipped_overflow: AtomicU64::new(0),
        })
        .map_err(|_| "exact mode set up twice".to_string())
}

/// VMInit: loads the runtime (all its classes, so the directory can go), turns the hook on and
/// retransforms already loaded classes that `include` brings in.
pub fn vm_init(env: &Env, jni: &Jni) {
    let Some(s) = STATE.get() else { return };
    let result = jni.with_local_frame(16, || -> Result<(), String> {
        let runtime = jni
            .find_class_global(RUNTIME)
            .ok_or("cannot load the exact-mode runtime from the boot class path")?;
        for (rel, _) in RUNTIME_CLASSES {
            let name = rel.trim_end_matches(".class");
            jni.find_class_global(name)
                .ok_or_else(|| format!("cannot load {name}"))?;
        }
        jni.call_static_int(runtime, "init", "(I)I", &[s.options.max_nodes as i32])
            .ok_or("the exact-mode runtime failed to initialize")?;
        let _ = s.runtime.set(runtime);
        if let Some(p) = jni.platform_class_loader() {
            let _ = s.platform.set(p);
        }
        Ok(())
    });
    let _ = std::fs::remove_dir_all(&s.dir);
    if let Err(e) = result {
        eprintln!("jvmprof: {e}; exact mode is off, the application continues");
        return;
    }
    s.active.store(true, Ordering::Release);
    if let Err(e) = env.enable_events(&[Event::ClassFileLoadHook]) {
        s.active.store(false, Ordering::Release);
        eprintln!("jvmprof: {e}; exact mode is off, the application continues");
        return;
    }
    if !s.options.include.is_empty() {
        retransform_included(env, jni, s);
    }
}

fn retransform_included(env: &Env, jni: &Jni, s: &State) {
    jni.with_local_frame(16, || {
        let classes = env.loaded_classes();
        let mut wanted = Vec::new();
        for c in classes {
            let Some(sig) = env.class_signature(c) else {
                continue;
            };
            let Some(name) = sig.strip_prefix('L').and_then(|n| n.strip_suffix(';')) else {
                continue; // arrays and primitives
            };
            let origin = if env.is_boot_class(c) {
                Origin::Jdk
            } else {
                // Application classes loaded this early are rare; the platform loader's are
                // JDK classes. Either way only `include` matters here.
                Origin::Jdk
            };
            if wanted_class(&s.options, name, origin) && env.is_modifiable_class(c) {
                wanted.push(c);
            }
        }
        for chunk in wanted.chunks(256) {
            match env.retransform_classes(chunk) {
                Ok(()) => {
                    s.retransformed
                        .fetch_add(chunk.len() as u64, Ordering::Relaxed);
                }
                Err(e) => {
                    // One bad class fails the batch: retry one by one and list the failures.
                    for c in chunk {
                        match env.retransform_classes(std::slice::from_ref(c)) {
                            Ok(()) => {
                                s.retransformed.fetch_add(1, Ordering::Relaxed);
                            }
                            Err(e1) => {
                                let name = env.class_signature(*c).unwrap_or_default();
                                lock(&s.tables)
                                    .skipped
                                    .insert(name, format!("retransform: {e1} (batch: {e})"));
                            }
                        }
                    }
                }
            }
        }
    });
}

pub use crate::options::glob;

/// Whether a class (internal name `a/b/C`) is in scope: application classes unless excluded,
/// JDK classes only when included, never the runtime or the classes in [`NEVER`].
pub fn wanted_class(o: &ExactOptions, internal: &str, origin: Origin) -> bool {
    if NEVER.iter().any(|p| {
        internal.starts_with(p)
            && (p.ends_with('/')
                || internal.len() == p.len()
                || matches!(internal.as_bytes()[p.len()], b'$'))
    }) {
        return false;
    }
    // Dynamic proxies (RMI stubs, ...): defined in the caller's loader, but the JDK's code
    // (packages jdk.proxyN, com.sun.proxy before JDK 16).
    if internal.starts_with("jdk/proxy") || internal.starts_with("com/sun/proxy/") {
        return false;
    }
    let dotted = internal.replace('/', ".");
    if o.exclude.iter().any(|p| glob(p, &dotted)) {
        return false;
    }
    match origin {
        Origin::Application => true,
        Origin::Jdk => o.include.iter().any(|p| glob(p, &dotted)),
    }
}

/// The ClassFileLoadHook: the rewritten class, or `None` to leave it as it is.
pub fn transform(
    jni: Option<&Jni>,
    name: Option<&str>,
    loader: JObject,
    data: &[u8],
) -> Option<Vec<u8>> {
    let s = STATE.get()?;
    if !s.active.load(Ordering::Acquire) {
        return None;
    }
    let Some(name) = name else {
        // Hidden classes may come without a name: they are not rewritten.
        let mut t = lock(&s.tables);
        note_skipped(s, &mut t, "<unnamed class>".into(), "no name".into());
        return None;
    };
    let origin = if loader.is_null()
        || s.platform
            .get()
            .zip(jni)
            .is_some_and(|(p, j)| j.is_same_object(loader, *p))
    {
        Origin::Jdk
    } else {
        Origin::Application
    };
    if !wanted_class(&s.options, name, origin) {
        return None;
    }
    let mut t = lock(&s.tables);
    let before = t.methods.names.len();
    match rewrite(data, s.options.bba, &mut t) {
        Ok((bytes, methods)) => {
            s.classes.fetch_add(1, Ordering::Relaxed);
            s.methods.fetch_add(methods as u64, Ordering::Relaxed);
            Some(bytes)
        }
        Err(why) => {
            t.methods.names.truncate(before);
            note_skipped(s, &mut t, name.replace('/', "."), why);
            None
        }
    }
}

/// Most entries in the skipped-class list (the rest are only counted).
const MAX_SKIPPED: usize = 10_000;

fn note_skipped(s: &State, t: &mut Tables, what: String, why: String) {
    if t.skipped.len() < MAX_SKIPPED || t.skipped.contains_key(&what) {
        t.skipped.insert(what, why);
    } else {
        s.skipped_overflow.fetch_add(1, Ordering::Relaxed);
    }
}

/// ClassPrepare: the JVM never passes hidden classes (lambda proxies, method-handle forms) to the
/// ClassFileLoadHook, so they run unchanged; the application's are listed as skipped. (A
/// lambda's body is a method of its host class and is instrumented there.)
pub fn class_prepared(env: &Env, class: jvmprof_jvmti::JClass) {
    let Some(s) = STATE.get() else { return };
    if !s.active.load(Ordering::Acquire) {
        return;
    }
    let Some(sig) = env.class_signature(class) else {
        return;
    };
    let hidden = sig.contains("+0x") || sig.contains(".0x") || sig.contains("/0x");
    if !hidden || env.is_boot_class(class) {
        return;
    }
    let name = sig
        .trim_start_matches('L')
        .trim_end_matches(';')
        .replace('/', ".");
    let mut t = lock(&s.tables);
    note_skipped(
        s,
        &mut t,
        name,
        "hidden class: the JVM does not pass it to the ClassFileLoadHook".into(),
    );
}

/// One pass of the class-file engine: context probes and bytecode counters together. Returns
/// the bytes and the number of methods given probes.
fn rewrite(data: &[u8], bba: Bba, t: &mut Tables) -> Result<(Vec<u8>, usize), String> {
    let mode = match bba {
        Bba::Default => Mode::Default,
        Bba::Precise => Mode::Precise,
    };
    let out = instrument::instrument_class(data, Pass::Exact(mode), &mut t.methods)
        .map_err(|e| e.to_string())?;
    for m in &out.skipped {
        t.skipped.insert(m.clone(), "not instrumented".into());
    }
    t.ctor_notes.extend(out.notes);
    Ok((out.bytes, out.rewritten))
}

/// Facts for the profile's metadata.
pub fn meta(extra: &mut BTreeMap<String, String>) {
    let Some(s) = STATE.get() else { return };
    let t = lock(&s.tables);
    extra.insert(
        "exact_bba".into(),
        match s.options.bba {
            Bba::Default => "default",
            Bba::Precise => "precise",
        }
        .into(),
    );
    extra.insert(
        "exact_classes".into(),
        s.classes.load(Ordering::Relaxed).to_string(),
    );
    extra.insert(
        "exact_methods".into(),
        s.methods.load(Ordering::Relaxed).to_string(),
    );
    extra.insert(
        "exact_retransformed".into(),
        s.retransformed.load(Ordering::Relaxed).to_string(),
    );
    extra.insert("exact_include".into(), s.options.include.join(":"));
    extra.insert("exact_exclude".into(), s.options.exclude.join(":"));
    extra.insert(
        "exact_skipped".into(),
        t.skipped
            .iter()
            .map(|(k, v)| format!("{k}: {v}"))
            .collect::<Vec<_>>()
            .join("\n"),
    );
    extra.insert(
        "exact_skipped_count".into(),
        (t.skipped.len() as u64 + s.skipped_overflow.load(Ordering::Relaxed)).to_string(),
    );
    extra.insert("exact_notes".into(), t.ctor_notes.join("\n"));
}

/// The exact engine: merges the runtime's trees into the sink when the session flushes or
/// streams, and at the end, with the instrumentation's facts in the metadata.
#[derive(Default)]
pub struct ExactEngine {
    collector: Mutex<Collector>,
}

impl ExactEngine {
    fn merge(&self, jni: &Jni, sink: &mut Sink, last: bool) {
        let mut c = lock(&self.collector);
        c.merge(jni, sink, last);
        let extra = &mut sink.meta_mut().extra;
        meta(extra);
        extra.insert("exact_nodes".into(), c.stats.0.to_string());
        extra.insert("exact_max_nodes".into(), c.stats.1.to_string());
        extra.insert("exact_dropped_calls".into(), c.stats.2.to_string());
    }
}

impl Engine for ExactEngine {
    fn name(&self) -> &'static str {
        "instrumentation"
    }

    fn flush(&self, jni: &Jni, sink: &mut Sink) {
        jni.with_local_frame(64, || self.merge(jni, sink, false));
    }

    fn finish(&self, jni: &Jni, sink: &mut Sink) {
        jni.with_local_frame(64, || self.merge(jni, sink, true));
    }
}

/// Reads the runtime's trees into a profile (through the shared [`TreeReader`]), adding what
/// grew since the last merge.
#[derive(Default)]
pub struct Collector {
    /// Per context, keyed by its stack: (calls, bytecodes) already added.
    reader: TreeReader<2>,
    /// Contexts in each runtime thread's tree at the last merge.
    contexts: Vec<usize>,
    /// (contexts kept, node budget, calls past the budget).
    pub stats: (i64, i64, i64),
}

impl Collector {
    /// Merges every thread's tree into the builder's `calls` and `bytecodes` metrics; `last`:
    /// no merge follows, so what was added need not be remembered.
    pub fn merge(&mut self, jni: &Jni, builder: &mut Sink, last: bool) {
        let metrics = &builder.profile().meta.metrics;
        let at = |m: Metric| metrics.iter().position(|x| *x == m);
        let (calls_at, bytecodes_at) = (at(Metric::Calls), at(Metric::Bytecodes));
        let mut values = vec![0u64; metrics.len()];
        // What was added is remembered only if another merge follows or one came before
        // (flush, streaming): then each context adds what it gained since.
        let remember = self.reader.remember(last);
        let Some(s) = STATE.get() else { return };
        let Some(&runtime) = s.runtime.get() else {
            return;
        };
        let names = lock(&s.tables).methods.names.clone();
        let mut spilled = 0i64;
        let read = each_tree(jni, runtime, Some("jvmprof writer"), |i, name, tree| {
            let thread = builder.thread_named(name);
            // At most one stack, sample and seen entry per context: room for all at once
            // (growing hash tables of millions of entries step by step took a tenth of
            // the writer's time at javac's exit).
            let contexts = tree.len() / 4;
            if self.contexts.len() <= i {
                self.contexts.resize(i + 1, 0);
            }
            let more = contexts.saturating_sub(self.contexts[i]);
            self.contexts[i] = contexts;
            builder.reserve(more);
            if remember {
                self.reader.reserve(more);
            }
            // The stacks of the contexts above this one, by depth (1 first): each context's
            // stack is interned from its parent's, in constant time.
            let mut above: Vec<u32> = Vec::new();
            for node in tree.chunks_exact(4) {
                let (depth, method) = (node[0].max(0) as usize, node[1]);
                let (calls, bytecodes) = (node[2].max(0) as u64, node[3].max(0) as u64);
                if method == SPILL {
                    spilled = spilled.saturating_add(calls as i64);
                }
                let frame = self.reader.frame(builder, method, || frame(&names, method));
                above.truncate(depth.saturating_sub(1));
                let stack = if depth == 0 {
                    // The thread's root: a stack of its own when it has bytecodes (code
                    // outside instrumented methods), never a prefix of its children's.
                    if bytecodes == 0 {
                        continue;
                    }
                    builder.child_stack(None, frame)
                } else {
                    let stack = builder.child_stack(above.last().copied(), frame);
                    above.push(stack);
                    stack
                };
                if calls == 0 && bytecodes == 0 {
                    continue;
                }
                let [dc, db] = self
                    .reader
                    .gain(remember, (i, stack as usize), [calls, bytecodes]);
                if dc == 0 && db == 0 {
                    continue;
                }
                if let Some(k) = calls_at {
                    values[k] = dc;
                }
                if let Some(k) = bytecodes_at {
                    values[k] = db;
                }
                builder.add(thread, stack, ThreadState::Running, &values);
            }
        });
        if read.is_none() {
            return;
        }
        if let Some(v) = jni.call_static_long_array(runtime, "stats", "()[J", &[])
            && v.len() >= 2
        {
            self.stats = (v[0], v[1], spilled);
        }
    }
}

/// The frame of an exact-mode method id (`names` holds `class.method` by id).
fn frame(names: &[String], method: i64) -> Frame {
    let name = usize::try_from(method).ok().and_then(|m| names.get(m));
    match name {
        Some(n) => match n.rsplit_once('.') {
            Some((class, m)) => Frame::java(class, m, "", 0),
            None => Frame::java("", n, "", 0),
        },
        None if method == SPILL => Frame::synthetic(FrameKind::Synthetic, "[past node budget]"),
        None if method < 0 => {
            Frame::synthetic(FrameKind::Synthetic, "[outside instrumented methods]")
        }
        None => Frame::synthetic(FrameKind::Synthetic, &format!("[method #{method}]")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn o(include: &[&str], exclude: &[&str]) -> ExactOptions {
        ExactOptions {
            include: include.iter().map(|s| s.to_string()).collect(),
            exclude: exclude.iter().map(|s| s.to_string()).collect(),
            bba: Bba::Default,
            max_nodes: 1000,
            roots: Vec::new(),
            timer: crate::options::Timer::Wall,
            min_latency: None,
            bytecodes: true,
        }
    }

    #[test]
    fn globs() {
        assert!(glob("java.util.*", "java.util.HashMap"));
        assert!(glob(
            "java.util.*",
            "java.util.concurrent.ConcurrentHashMap"
        ));
        assert!(!glob("java.util.*", "java.utilx"));
        assert!(glob("*Service", "com.acme.OrderService"));
        assert!(!glob("*Service", "com.acme.OrderServiceImpl"));
        assert!(glob("Foo", "Foo"));
        assert!(!glob("Foo", "Foo$Bar"));
        assert!(glob("Foo*", "Foo$Bar"));
    }

    #[test]
    fn scope() {
        let none = o(&[], &[]);
        assert!(wanted_class(&none, "com/acme/Foo", Origin::Application));
        assert!(!wanted_class(&none, "java/util/HashMap", Origin::Jdk));
        assert!(!wanted_class(
            &none,
            "jvmprof/runtime/Probes",
            Origin::Application
        ));
        let util = o(
            &["java.util.*"],
            &["java.util.concurrent.*", "com.acme.Skip"],
        );
        assert!(wanted_class(&util, "java/util/HashMap", Origin::Jdk));
        assert!(wanted_class(&util, "java/util/HashMap$Node", Origin::Jdk));
        assert!(!wanted_class(
            &util,
            "java/util/concurrent/ConcurrentHashMap",
            Origin::Jdk
        ));
        assert!(!wanted_class(&util, "com/acme/Skip", Origin::Application));
        let lang = o(&["java.lang.*"], &[]);
        assert!(wanted_class(&lang, "java/lang/StringBuilder", Origin::Jdk));
        assert!(!wanted_class(&lang, "java/lang/Object", Origin::Jdk));
        assert!(!wanted_class(
            &lang,
            "java/lang/ThreadLocal$ThreadLocalMap",
            Origin::Jdk
        ));
        assert!(!wanted_class(&lang, "java/lang/Thread", Origin::Jdk));
        assert!(!wanted_class(&lang, "java/lang/ref/Reference", Origin::Jdk));
        assert!(wanted_class(&lang, "java/lang/ClassValue", Origin::Jdk));
        assert!(wanted_class(&lang, "java/lang/ThreadGroup", Origin::Jdk));
        assert!(!wanted_class(
            &none,
            "jdk/proxy1/$Proxy0",
            Origin::Application
        ));
        assert!(!wanted_class(
            &none,
            "com/sun/proxy/$Proxy3",
            Origin::Application
        ));
    }
}
