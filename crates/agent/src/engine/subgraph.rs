//! Root-method profiling (`mode=exact` with `root=`, JFluid by Dmitriev): only the call
//! subgraph of the root methods is instrumented, revealed lazily as it runs, at launch or in a
//! JVM attached to with no flags; calls are timed with the probes' own cost calibrated out, and
//! every probe is removed when the session stops.
//!
//! - Start (writer thread): the runtime `jvmprof/runtime/Roots` is defined in the boot loader
//!   and its natives registered; `RootsCalibration` is defined with our probes and timed
//!   ([`calibrate`]); the loaded classes' hierarchy is read once; methods matching a root are
//!   selected and their classes retransformed. A root whose class is not loaded yet waits for it.
//! - The ClassFileLoadHook ([`transform`]) rewrites the selected methods of a class (the class
//!   file engine's root pass) and keeps its original bytes; a class loading for the first time
//!   is checked against the roots and against the virtual calls already revealed.
//! - The first time an instrumented method runs below a root, the runtime calls the native
//!   `reveal` on that thread: its code is read, its call targets resolved (static and private
//!   calls directly, virtual and interface calls to every loaded override, lambda bodies and
//!   method references from `invokedynamic`), and their classes retransformed in one batch
//!   before it continues (`reflected` does the same for a `Method.invoke` target).
//! - Stop: the runtime is switched off and every instrumented class retransformed back to its
//!   original bytes; the bytecode the JVM runs afterwards is checked against the originals.
//! - `flush`/`finish` read the trees (calls, own time, bytecodes, per-invocation statistics)
//!   into the sink; the metadata lists the calibration, methods instrumented and run, and the
//!   per-method statistics.
//!
//! Trace mode ([`super::trace`]) is this engine with every method of the traced classes
//! selected as its class loads (or at start), the JDK's remote-call code hooked, and the
//! threads' event rings drained into a trace file each poll.

use super::Engine;
use super::exact::{Origin, wanted_class};
use super::trace::{self, Drain};
use crate::options::{Bba, ExactOptions, Timer, TraceOptions};
use crate::sampler::threads::ThreadTable;
use crate::say::say;
use crate::sink::Sink;
use crate::sync::lock;
use jvmprof_classfile::bba::Mode;
use jvmprof_classfile::subgraph::{self, Dispatch, Target};
use jvmprof_jvmti::classes::GlobalRef;
use jvmprof_jvmti::hierarchy::{DeclaredMethod, JValue, RootNatives};
use jvmprof_jvmti::{Env, Event, JClass, JObject, Jni};
use jvmprof_profile::{Frame, FrameKind, Metric, ThreadState};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

const ROOTS: &str = "jvmprof/runtime/Roots";
const CALIBRATION: &str = "jvmprof/runtime/RootsCalibration";
/// Method ids 0 and 1 are the calibration's `loop` (a root) and `empty`.
const FIRST_ID: i32 = 2;
/// The runtime's id for contexts past the node budget.
const SPILL: i64 = -2;
/// The runtime's id for remote-call spans (trace mode).
const REMOTE_METHOD: i64 = -4;
/// Fields per context in `Roots.tree(i)`.
const FIELDS: usize = 9;
/// Calibration: rounds (the first half warms up) and calls per round.
const ROUNDS: i32 = 60;
const CALLS_PER_ROUND: i32 = 20_000;

/// Whether the class hook instruments for a root session.
static ACTIVE: AtomicBool = AtomicBool::new(false);
/// The session's tables (Some from start to finish).
static TABLES: Mutex<Option<Tables>> = Mutex::new(None);
/// One revelation at a time (tables are not held while classes are retransformed).
static REVEAL: Mutex<()> = Mutex::new(());
/// The runtime classes, defined once per process.
static RUNTIME: OnceLock<(GlobalRef, GlobalRef)> = OnceLock::new();

struct MethodInfo {
    /// Internal class name.
    class: String,
    name: String,
    descriptor: String,
    root: bool,
}

#[derive(Default)]
struct ClassInfo {
    /// Superclass first, then interfaces.
    supers: Vec<String>,
    /// One per defining loader, for RetransformClasses.
    refs: Vec<GlobalRef>,
    modifiable: bool,
    jdk: bool,
    /// Declared methods, when read (from the hook's bytes or from JVMTI).
    methods: Option<Vec<DeclaredMethod>>,
    /// The original class file, kept once a method of the class was selected.
    bytes: Option<Arc<[u8]>>,
    /// What each method may call, read from `bytes` at the first revelation in the class (one
    /// read of the class however many of its methods are revealed).
    targets: Option<Arc<subgraph::TargetsByMethod>>,
    /// Whether the JVM runs our probes in it now.
    instrumented: bool,
}

struct Tables {
    env: Env,
    options: ExactOptions,
    methods: Vec<MethodInfo>,
    ids: HashMap<(String, String, String), i32>,
    /// Class → (name, descriptor) → id: the methods to instrument.
    selected: HashMap<String, HashMap<(String, String), i32>>,
    classes: HashMap<String, ClassInfo>,
    /// Direct supertype → its direct subtypes.
    subtypes: HashMap<String, Vec<String>>,
    /// (name, descriptor) → classes whose virtual method of that signature was called: a class
    /// loading later that overrides one of them is instrumented as it loads.
    virtual_wants: HashMap<(String, String), BTreeSet<String>>,
    revealed: HashSet<i32>,
    reflected: HashSet<usize>,
    /// Classes whose selection grew and that are loaded: retransform them.
    pending: BTreeSet<String>,
    /// Methods each root pattern matched.
    root_hits: Vec<u64>,
    skipped: BTreeMap<String, String>,
    notes: Vec<String>,
    /// Classes a root waits for (said once each).
    waiting: BTreeSet<String>,
    retransforms: u64,
    /// Trace mode: every method of a traced class, and the remote-call hooks.
    trace: bool,
    /// Trace mode: classes traced per include pattern.
    include_hits: Vec<u64>,
}

impl Tables {
    /// Methods selected in classes the JVM runs with our probes.
    fn instrumented_methods(&self) -> u64 {
        self.classes
            .iter()
            .filter(|(_, c)| c.instrumented)
            .filter_map(|(name, _)| self.selected.get(name))
            .map(|m| m.len() as u64)
            .sum()
    }

    /// Trace mode: selects every method with code of a traced class; true if it is traced.
    fn trace_class(&mut self, class: &str, methods: &[DeclaredMethod]) -> bool {
        if !self.trace || !self.wanted(class) {
            return false;
        }
        // With `include` patterns only the classes they name are traced (application or JDK);
        // without, every application class.
        let dotted = class.replace('/', ".");
        let mut included = false;
        for (k, p) in self.options.include.clone().iter().enumerate() {
            if super::exact::glob(p, &dotted) {
                self.include_hits[k] += 1;
                included = true;
            }
        }
        if !included && !self.options.include.is_empty() {
            return false;
        }
        for (name, desc, code) in methods {
            if *code {
                self.select(class, name, desc, false);
            }
        }
        true
    }

    fn wanted(&self, class: &str) -> bool {
        let jdk = self.classes.get(class).is_some_and(|c| c.jdk);
        wanted_class(
            &self.options,
            class,
            if jdk {
                Origin::Jdk
            } else {
                Origin::Application
            },
        )
    }

    fn methods_of(&mut self, class: &str) -> Option<&Vec<DeclaredMethod>> {
        let env = self.env;
        let info = self.classes.get_mut(class)?;
        if info.methods.is_none() {
            let r = *info.refs.first()?;
            info.methods = Some(env.declared_methods(r));
        }
        info.methods.as_ref()
    }

    /// Selects a method for instrumentation; true if it is new.
    fn select(&mut self, class: &str, name: &str, descriptor: &str, root: bool) -> bool {
        // A root is instrumented wherever it is (a JDK method too, unless the agent may
        // never rewrite its class); its callees only in scope (JDK classes with `include`).
        let in_scope = if root {
            wanted_class(&self.options, class, Origin::Application)
        } else {
            self.wanted(class)
        };
        if !in_scope {
            return false;
        }
        let key = (class.to_string(), name.to_string(), descriptor.to_string());
        let id = match self.ids.get(&key) {
            Some(&id) => {
                if root {
                    self.methods[(id - FIRST_ID) as usize].root = true;
                }
                id
            }
            None => {
                let id = FIRST_ID + self.methods.len() as i32;
                self.methods.push(MethodInfo {
                    class: key.0.clone(),
                    name: key.1.clone(),
                    descriptor: key.2.clone(),
                    root,
                });
                self.ids.insert(key, id);
                id
            }
        };
        let fresh = self
            .selected
            .entry(class.to_string())
            .or_default()
            .insert((name.to_string(), descriptor.to_string()), id)
            .is_none();
        if fresh && self.classes.get(class).is_some_and(|c| !c.refs.is_empty()) {
            self.pending.insert(class.to_string());
        }
        fresh
    }

    /// Whether `class` declares (name, descriptor): Some(has code), None if not or unknown.
    fn declares(&mut self, class: &str, name: &str, descriptor: &str) -> Option<bool> {
        self.methods_of(class)?
            .iter()
            .find(|(n, d, _)| n == name && d == descriptor)
            .map(|m| m.2)
    }

    /// Selects what a call site may reach.
    fn resolve(&mut self, t: &Target) {
        // Up the superclass chain to the declaration the call resolves to.
        let mut class = t.class.clone();
        let mut known = false;
        for _ in 0..64 {
            match self.declares(&class, &t.name, &t.descriptor) {
                Some(code) => {
                    known = true;
                    if code {
                        self.select(&class, &t.name, &t.descriptor, false);
                    }
                    break;
                }
                None => {
                    let up = self
                        .classes
                        .get(&class)
                        .and_then(|c| c.supers.first().cloned());
                    match up {
                        Some(u) => class = u,
                        None => break,
                    }
                }
            }
        }
        if !known && !self.classes.contains_key(&t.class) {
            // Not loaded yet: instrumented when it loads, if it declares the method.
            self.select(&t.class, &t.name, &t.descriptor, false);
        }
        if t.dispatch == Dispatch::Virtual && !t.name.starts_with('<') {
            // Every loaded override below the named class, and those that load later.
            let mut seen = HashSet::new();
            let mut work = vec![t.class.clone()];
            while let Some(c) = work.pop() {
                for s in self.subtypes.get(&c).cloned().unwrap_or_default() {
                    if seen.insert(s.clone()) {
                        if self.declares(&s, &t.name, &t.descriptor) == Some(true) {
                            self.select(&s, &t.name, &t.descriptor, false);
                        }
                        work.push(s);
                    }
                }
            }
            self.virtual_wants
                .entry((t.name.clone(), t.descriptor.clone()))
                .or_default()
                .insert(t.class.clone());
        }
    }

    fn is_subtype(&self, class: &str, of: &str) -> bool {
        let mut work = vec![class.to_string()];
        let mut seen = HashSet::new();
        while let Some(c) = work.pop() {
            if c == of {
                return true;
            }
            if seen.insert(c.clone())
                && let Some(info) = self.classes.get(&c)
            {
                work.extend(info.supers.iter().cloned());
            }
        }
        false
    }

    fn learn(&mut self, name: &str, supers: Vec<String>) {
        for s in &supers {
            let v = self.subtypes.entry(s.clone()).or_default();
            if !v.iter().any(|x| x == name) {
                v.push(name.to_string());
            }
        }
        let info = self.classes.entry(name.to_string()).or_default();
        info.supers = supers;
    }

    /// Selects a class's methods that match a root; returns how many.
    fn match_roots(&mut self, class: &str, methods: &[DeclaredMethod]) -> u64 {
        let dotted = class.replace('/', ".");
        let roots = self.options.roots.clone();
        let mut n = 0;
        for (k, r) in roots.iter().enumerate() {
            if !r.may_match_class(&dotted) {
                continue;
            }
            for (name, desc, code) in methods {
                if *code && r.matches(&dotted, name, desc) {
                    if self.select(class, name, desc, true) {
                        self.root_hits[k] += 1;
                    }
                    n += 1;
                }
            }
        }
        n
    }

    /// The loaded classes in `pending`, emptied.
    fn take_pending(&mut self) -> Vec<GlobalRef> {
        let mut out = Vec::new();
        for c in std::mem::take(&mut self.pending) {
            if let Some(info) = self.classes.get(&c)
                && info.modifiable
            {
                out.extend(info.refs.iter().copied());
            }
        }
        out
    }
}

fn tables() -> MutexGuard<'static, Option<Tables>> {
    lock(&TABLES)
}

/// Retransforms classes (one batch, then one by one if the batch fails, noting failures).
fn retransform(env: &Env, classes: &[GlobalRef]) {
    if classes.is_empty() {
        return;
    }
    if env.retransform_global(classes).is_ok() {
        if let Some(t) = tables().as_mut() {
            t.retransforms += classes.len() as u64;
        }
        return;
    }
    for c in classes {
        if let Err(e) = env.retransform_global(std::slice::from_ref(c)) {
            if let Some(t) = tables().as_mut() {
                t.notes.push(format!("retransform failed: {e}"));
            }
        } else if let Some(t) = tables().as_mut() {
            t.retransforms += 1;
        }
    }
}

/// The native `Roots.reveal(id)`: on the application thread, the first time method `id` runs
/// below a root. Its callees are instrumented before it goes on.
fn reveal(_jni: &Jni, id: i32) {
    let _one = lock(&REVEAL);
    let (env, classes) = {
        let mut guard = tables();
        let Some(t) = guard.as_mut() else { return };
        if !ACTIVE.load(Ordering::Acquire) || !t.revealed.insert(id) {
            return;
        }
        let Some(m) = usize::try_from(id - FIRST_ID)
            .ok()
            .and_then(|i| t.methods.get(i))
        else {
            return;
        };
        let (class, name, desc) = (m.class.clone(), m.name.clone(), m.descriptor.clone());
        let Some(info) = t.classes.get_mut(&class) else {
            return;
        };
        if info.targets.is_none() {
            let Some(bytes) = info.bytes.clone() else {
                return;
            };
            match subgraph::all_call_targets(&bytes) {
                Ok(all) => info.targets = Some(Arc::new(all)),
                Err(e) => {
                    t.skipped
                        .insert(class.replace('/', "."), format!("callees unread: {e}"));
                    return;
                }
            }
        }
        let targets = info.targets.clone().unwrap_or_default();
        for target in targets.get(&(name, desc)).into_iter().flatten() {
            t.resolve(target);
        }
        (t.env, t.take_pending())
    };
    retransform(&env, &classes);
}

/// The native `Roots.reflected(m)`: a `Method.invoke` below a root; its target (and overrides)
/// are instrumented before the call.
fn reflected(jni: &Jni, method: JObject) {
    let _one = lock(&REVEAL);
    let (env, classes) = {
        let mut guard = tables();
        let Some(t) = guard.as_mut() else { return };
        if !ACTIVE.load(Ordering::Acquire) {
            return;
        }
        let Some((class, name, descriptor, mid)) = t.env.reflected_method(jni, method) else {
            return;
        };
        if !t.reflected.insert(mid) {
            return;
        }
        t.resolve(&Target {
            class,
            name,
            descriptor,
            dispatch: Dispatch::Virtual,
        });
        (t.env, t.take_pending())
    };
    retransform(&env, &classes);
}

/// The ClassFileLoadHook's part for root sessions: the class with its selected methods
/// instrumented, or `None` (also what restores a class at stop).
pub fn transform(
    jni: Option<&Jni>,
    name: Option<&str>,
    loader: JObject,
    data: &[u8],
) -> Option<Vec<u8>> {
    if !ACTIVE.load(Ordering::Acquire) {
        return None;
    }
    let name = name?;
    if name.starts_with("jvmprof/") {
        return None;
    }
    // Before the tables are locked: the first call runs Java, which may load classes.
    let jdk = loader.is_null() || platform_loader(jni, loader);
    let mut guard = tables();
    let t = guard.as_mut()?;
    if t.trace
        && let Some(hooks) = trace::hooks_for(name)
    {
        let out = subgraph::hook_methods(data, hooks);
        let info = t.classes.entry(name.to_string()).or_default();
        return match out {
            Ok(out) if out.rewritten > 0 => {
                info.bytes.get_or_insert_with(|| Arc::from(data));
                info.instrumented = true;
                for s in out.skipped {
                    t.skipped.insert(s, "remote-call hook not placed".into());
                }
                Some(out.bytes)
            }
            Ok(out) => {
                for s in out.skipped {
                    t.skipped.insert(s, "remote-call hook not placed".into());
                }
                None
            }
            Err(e) => {
                t.skipped
                    .insert(name.replace('/', "."), format!("remote-call hooks: {e}"));
                None
            }
        };
    }
    let known = t.classes.get(name).is_some_and(|c| c.methods.is_some());
    if !known {
        // First sight of this class in the session (a new class, or a loaded one we never
        // read): its place in the hierarchy, its methods, roots and overrides.
        let Ok(h) = subgraph::header(data) else {
            return None;
        };
        let mut supers: Vec<String> = h.super_name.into_iter().collect();
        supers.extend(h.interfaces);
        t.learn(name, supers);
        let info = t.classes.entry(name.to_string()).or_default();
        info.methods = Some(h.methods.clone());
        info.jdk = jdk;
        t.match_roots(name, &h.methods);
        t.trace_class(name, &h.methods);
        if t.waiting.remove(name) {
            say(&format!(
                "{} loaded: its root methods are instrumented",
                name.replace('/', ".")
            ));
        }
        for (mname, desc, code) in &h.methods {
            if !*code {
                continue;
            }
            let owners: Vec<String> = t
                .virtual_wants
                .get(&(mname.clone(), desc.clone()))
                .map(|o| o.iter().cloned().collect())
                .unwrap_or_default();
            if owners.iter().any(|o| t.is_subtype(name, o)) {
                t.select(name, mname, desc, false);
            }
        }
    }
    // A call site may have selected methods of a class before it loaded, not knowing then that
    // it is a JDK class: those stay out of scope unless `include` brings the class in (roots
    // stay, wherever they are).
    if jdk && !wanted_class(&t.options, name, Origin::Jdk) {
        let methods = &t.methods;
        if let Some(sel) = t.selected.get_mut(name) {
            sel.retain(|_, id| methods[(*id - FIRST_ID) as usize].root);
        }
    }
    let selected = t.selected.get(name).cloned().unwrap_or_default();
    let info = t.classes.entry(name.to_string()).or_default();
    if selected.is_empty() {
        info.instrumented = false;
        return None;
    }
    let mode = t.options.bytecodes.then_some(match t.options.bba {
        Bba::Default => Mode::Default,
        Bba::Precise => Mode::Precise,
    });
    let roots: HashSet<i32> = selected
        .values()
        .copied()
        .filter(|id| t.methods[(id - FIRST_ID) as usize].root)
        .collect();
    match subgraph::instrument_selected(data, mode, |n, d| {
        let id = *selected.get(&(n.to_string(), d.to_string()))?;
        Some((id, roots.contains(&id)))
    }) {
        Ok(out) => {
            let info = t.classes.entry(name.to_string()).or_default();
            if info.bytes.is_none() {
                info.bytes = Some(Arc::from(data));
            }
            info.instrumented = out.rewritten > 0;
            for s in out.skipped {
                t.skipped.insert(s, "not instrumented".into());
            }
            t.notes.extend(out.notes);
            (out.rewritten > 0).then_some(out.bytes)
        }
        Err(e) => {
            t.skipped
                .insert(name.replace('/', "."), format!("not instrumented: {e}"));
            None
        }
    }
}

fn platform_loader(jni: Option<&Jni>, loader: JObject) -> bool {
    static PLATFORM: OnceLock<Option<GlobalRef>> = OnceLock::new();
    let Some(jni) = jni else { return false };
    PLATFORM
        .get_or_init(|| jni.platform_class_loader())
        .is_some_and(|p| jni.is_same_object(loader, p))
}

/// ClassPrepare: a class loaded during a session gets a reference (for retransforming it
/// later, when a call reaches it).
pub fn class_prepared(env: &Env, jni: Option<&Jni>, class: JClass) {
    if !ACTIVE.load(Ordering::Acquire) {
        return;
    }
    let Some(jni) = jni else { return };
    let Some(name) = env
        .class_signature(class)
        .and_then(|s| Some(s.strip_prefix('L')?.strip_suffix(';')?.to_string()))
    else {
        return;
    };
    let mut guard = tables();
    let Some(t) = guard.as_mut() else { return };
    let modifiable = env.is_modifiable_class(class);
    if !t.classes.contains_key(&name) {
        // Not seen by the hook (a hidden class): its place in the hierarchy only.
        let supers = env.supertypes(jni, class);
        t.learn(&name, supers);
    }
    let info = t.classes.entry(name.clone()).or_default();
    info.modifiable = modifiable;
    info.refs.push(jni.new_global(class));
}

/// A class and its original class file.
type Original = (GlobalRef, Arc<[u8]>);

/// The root engine.
pub struct SubgraphEngine {
    options: ExactOptions,
    env: Env,
    /// Calls recorded so far (for `status`), refreshed by poll.
    calls: AtomicU64,
    last_calls: Mutex<std::time::Instant>,
    collector: Mutex<Collector>,
    /// (inner, outer) probe cost in ns.
    calibration: Mutex<(f64, f64)>,
    /// Set by stop: classes restored, methods still instrumented after it.
    restored: Mutex<(u64, u64)>,
    /// Trace mode: its options, and the file its events go to.
    trace: Option<TraceOptions>,
    drain: Mutex<Option<Drain>>,
    trace_file: Option<std::path::PathBuf>,
    /// Trace mode with a collector: chunks also go to it.
    streaming: bool,
    /// Trace mode beside cpu or wall sampling: threads publish their call tree in this table
    /// for the samples to carry.
    link_samples: Option<&'static ThreadTable>,
}

impl SubgraphEngine {
    /// A root session (`options.roots`).
    pub fn new(env: Env, options: &ExactOptions) -> SubgraphEngine {
        SubgraphEngine {
            options: options.clone(),
            env,
            calls: AtomicU64::new(0),
            last_calls: Mutex::new(std::time::Instant::now()),
            collector: Mutex::new(Collector::default()),
            calibration: Mutex::new((0.0, 0.0)),
            restored: Mutex::new((0, 0)),
            trace: None,
            drain: Mutex::new(None),
            trace_file: None,
            streaming: false,
            link_samples: None,
        }
    }

    /// A trace session; its events go to `file` (beside the output) until the native file
    /// takes them.
    pub fn tracing(
        env: Env,
        t: &TraceOptions,
        file: std::path::PathBuf,
        streaming: bool,
        link_samples: Option<&'static ThreadTable>,
    ) -> SubgraphEngine {
        let options = ExactOptions {
            include: t.include.clone(),
            exclude: t.exclude.clone(),
            bba: Bba::Default,
            max_nodes: 1 << 22,
            roots: Vec::new(),
            timer: Timer::Wall,
            min_latency: None,
            bytecodes: false,
        };
        SubgraphEngine {
            trace: Some(t.clone()),
            trace_file: Some(file),
            streaming,
            link_samples,
            ..SubgraphEngine::new(env, &options)
        }
    }

    fn drain_now(&self, jni: &Jni) {
        let Some(&(roots, _)) = RUNTIME.get() else {
            return;
        };
        let mut guard = lock(&self.drain);
        let Some(d) = guard.as_mut() else { return };
        let names: Vec<String> = tables()
            .as_ref()
            .map(|t| {
                t.methods
                    .iter()
                    .map(|m| format!("{}.{}", m.class.replace('/', "."), m.name))
                    .collect()
            })
            .unwrap_or_default();
        let name = |id: u32| {
            usize::try_from(id as i64 - FIRST_ID as i64)
                .ok()
                .and_then(|i| names.get(i).cloned())
        };
        jni.with_local_frame(32, || d.drain(jni, roots, &name));
    }

    fn runtime(&self, jni: &Jni) -> Result<(GlobalRef, GlobalRef), String> {
        if let Some(r) = RUNTIME.get() {
            return Ok(*r);
        }
        let bytes_of = |rel: &str| {
            super::exact::RUNTIME_CLASSES
                .iter()
                .find(|(r, _)| *r == rel)
                .map(|(_, b)| *b)
                .ok_or_else(|| format!("the agent was built without {rel}"))
        };
        let roots = jni
            .define_boot_class(ROOTS, bytes_of("jvmprof/runtime/Roots.class")?)
            .map_err(|e| e.to_string())?;
        // Its nested classes too: nothing on the boot class path would find them.
        for (rel, bytes) in super::exact::RUNTIME_CLASSES {
            if let Some(name) = rel
                .strip_suffix(".class")
                .filter(|n| n.starts_with("jvmprof/runtime/Roots$"))
            {
                jni.define_boot_class(name, bytes)
                    .map_err(|e| e.to_string())?;
            }
        }
        // The calibration class with our probes: loop is a root (id 0), empty (id 1) below it.
        let plain = bytes_of("jvmprof/runtime/RootsCalibration.class")?;
        let probed = subgraph::instrument_selected(plain, None, |n, _| match n {
            "loop" => Some((0, true)),
            "empty" => Some((1, false)),
            _ => None,
        })
        .map_err(|e| format!("cannot instrument the calibration class: {e}"))?;
        let calibration = jni
            .define_boot_class(CALIBRATION, &probed.bytes)
            .map_err(|e| e.to_string())?;
        jni.register_root_natives(
            roots,
            RootNatives {
                reveal,
                reflected,
                context: super::trace::context_cell,
            },
        )
        .map_err(|e| e.to_string())?;
        Ok(*RUNTIME.get_or_init(|| (roots, calibration)))
    }

    /// Times the probes on this JVM; (inner, outer) in ns, or zeros (and a note) if it failed.
    fn calibrate(&self, jni: &Jni, roots: GlobalRef) -> (f64, f64) {
        for id in [0, 1] {
            jni.call_static_void(roots, "markRevealed", "(I)V", &[JValue::Int(id)]);
        }
        let v =
            jni.call_static_long_array(roots, "calibrate", "(II)[J", &[ROUNDS, CALLS_PER_ROUND]);
        match v {
            Some(v) if v.len() == 2 => {
                jni.call_static_void(
                    roots,
                    "setCorrection",
                    "(JJ)V",
                    &[JValue::Long(v[0]), JValue::Long(v[1])],
                );
                (v[0] as f64 / 256.0, v[1] as f64 / 256.0)
            }
            _ => {
                say("root session: the probes could not be calibrated; times include their cost");
                (0.0, 0.0)
            }
        }
    }
}

impl Engine for SubgraphEngine {
    fn name(&self) -> &'static str {
        "instrumentation"
    }

    fn start(&self, jni: &Jni) -> Result<(), String> {
        if tables().is_some() {
            return Err("a root session's probes are still being removed; try again".into());
        }
        self.env
            .add_retransform_capability()
            .map_err(|e| format!("root profiling needs class retransformation: {e}"))?;
        let _ = self.env.add_bytecodes_capability();
        let (roots, _) = self.runtime(jni)?;
        let cpu = self.options.timer == Timer::Cpu;
        let min_latency = self
            .options
            .min_latency
            .map(|d| d.as_nanos().min(i64::MAX as u128) as i64)
            .unwrap_or(0);
        let session = trace::session_id();
        let session_text = jni
            .new_string(&format!("{session:016x}"))
            .ok_or("cannot create a Java string")?;
        let begun = jni.call_static_void(
            roots,
            "begin",
            "(ZJIZILjava/lang/String;)V",
            &[
                JValue::Bool(cpu),
                JValue::Long(min_latency),
                JValue::Int(self.options.max_nodes.min(i32::MAX as u32) as i32),
                JValue::Bool(self.trace.is_some()),
                JValue::Int(self.trace.as_ref().map_or(0, |t| t.buffer as i32)),
                JValue::Object(session_text),
            ],
        );
        if !begun {
            return Err("the root runtime did not start (see the exception above)".into());
        }
        if let (Some(t), Some(file)) = (&self.trace, &self.trace_file) {
            let vm = t.vm_name.clone().unwrap_or_else(trace::default_vm_name);
            let d = Drain::new(file.clone(), vm, session, self.streaming);
            if let Some(e) = &d.error {
                return Err(format!("trace mode: {e}"));
            }
            *lock(&self.drain) = Some(d);
        }
        *lock(&self.calibration) = if self.trace.is_some() {
            // Trace mode's tree keeps raw times, like its events: no correction to measure.
            jni.call_static_void(
                roots,
                "setCorrection",
                "(JJ)V",
                &[JValue::Long(0), JValue::Long(0)],
            );
            (0.0, 0.0)
        } else {
            self.calibrate(jni, roots)
        };
        // The hierarchy of what is loaded, and the roots among it.
        let platform = jni.platform_class_loader();
        let loaded = self.env.loaded_class_hierarchy(jni);
        let mut t = Tables {
            env: self.env,
            options: self.options.clone(),
            methods: Vec::new(),
            ids: HashMap::new(),
            selected: HashMap::new(),
            classes: HashMap::new(),
            subtypes: HashMap::new(),
            virtual_wants: HashMap::new(),
            revealed: HashSet::new(),
            reflected: HashSet::new(),
            pending: BTreeSet::new(),
            root_hits: vec![0; self.options.roots.len()],
            skipped: BTreeMap::new(),
            notes: Vec::new(),
            waiting: BTreeSet::new(),
            retransforms: 0,
            trace: self.trace.is_some(),
            include_hits: vec![0; self.options.include.len()],
        };
        for c in loaded {
            if c.name.starts_with("jvmprof/") {
                jni.delete_global(c.class);
                continue;
            }
            let jdk = self.env.defined_by_jdk(jni, c.class, platform);
            t.learn(&c.name, c.supers);
            let info = t.classes.entry(c.name.clone()).or_default();
            info.refs.push(c.class);
            info.modifiable = c.modifiable;
            info.jdk = jdk;
        }
        let names: Vec<String> = t.classes.keys().cloned().collect();
        if t.trace {
            // Every loaded traced class, and the loaded remote-call code.
            for name in &names {
                let modifiable = t.classes.get(name).is_some_and(|c| c.modifiable);
                if !modifiable || !t.wanted(name) {
                    continue;
                }
                if let Some(methods) = t.methods_of(name).cloned() {
                    t.trace_class(name, &methods);
                }
            }
            for hooked in trace::HOOKED {
                if t.classes
                    .get(*hooked)
                    .is_some_and(|c| c.modifiable && !c.refs.is_empty())
                {
                    t.pending.insert(hooked.to_string());
                }
            }
        }
        for name in names {
            let dotted = name.replace('/', ".");
            if !self
                .options
                .roots
                .iter()
                .any(|r| r.may_match_class(&dotted))
            {
                continue;
            }
            if let Some(methods) = t.methods_of(&name).cloned() {
                t.match_roots(&name, &methods);
            }
        }
        for r in &self.options.roots {
            if let Some(class) = r.exact_class() {
                let internal = class.replace('.', "/");
                if !t.classes.contains_key(&internal) {
                    say(&format!(
                        "root {r}: class {class} is not loaded yet; it is instrumented when it loads"
                    ));
                    t.waiting.insert(internal);
                }
            }
        }
        let first = t.take_pending();
        *tables() = Some(t);
        ACTIVE.store(true, Ordering::Release);
        if let Err(e) = self.env.enable_events(&[Event::ClassFileLoadHook]) {
            ACTIVE.store(false, Ordering::Release);
            release(jni);
            return Err(format!("root profiling needs the class file hook: {e}"));
        }
        retransform(&self.env, &first);
        jni.call_static_void(
            roots,
            "setLinkSamples",
            "(Z)V",
            &[JValue::Bool(self.link_samples.is_some())],
        );
        jni.call_static_void(roots, "setOn", "(Z)V", &[JValue::Bool(true)]);
        Ok(())
    }

    fn period(&self) -> std::time::Duration {
        std::time::Duration::from_millis(50)
    }

    fn poll(&self, jni: &Jni, _sink: &mut Sink) {
        // Classes found late (a supertype loaded after its subclass) are retransformed here.
        let classes = {
            let _one = lock(&REVEAL);
            tables()
                .as_mut()
                .map(|t| t.take_pending())
                .unwrap_or_default()
        };
        retransform(&self.env, &classes);
        self.drain_now(jni);
        let mut last = lock(&self.last_calls);
        if last.elapsed() >= std::time::Duration::from_millis(250)
            && let Some(&(roots, _)) = RUNTIME.get()
        {
            *last = std::time::Instant::now();
            if let Some(n) = jni.call_static_long(roots, "calls", "()J") {
                self.calls.store(n.max(0) as u64, Ordering::Relaxed);
            }
        }
    }

    fn flush(&self, jni: &Jni, sink: &mut Sink) {
        jni.with_local_frame(64, || self.merge(jni, sink, false));
    }

    fn stop(&self, jni: &Jni) {
        let Some(&(roots, _)) = RUNTIME.get() else {
            return;
        };
        jni.call_static_void(roots, "setOn", "(Z)V", &[JValue::Bool(false)]);
        if let Some(threads) = self.link_samples {
            jni.call_static_void(roots, "setLinkSamples", "(Z)V", &[JValue::Bool(false)]);
            // No later sample may carry a tree of this session.
            threads.clear_contexts();
        }
        if let Some(n) = jni.call_static_long(roots, "calls", "()J") {
            self.calls.store(n.max(0) as u64, Ordering::Relaxed);
        }
        // Every instrumented class back to its original bytes: the hook gives nothing now.
        let _one = lock(&REVEAL);
        ACTIVE.store(false, Ordering::Release);
        let (instrumented, originals): (Vec<GlobalRef>, Vec<Original>) = {
            let guard = tables();
            let Some(t) = guard.as_ref() else { return };
            let mut refs = Vec::new();
            let mut originals = Vec::new();
            for info in t.classes.values().filter(|c| c.instrumented) {
                refs.extend(info.refs.iter().copied());
                if let (Some(r), Some(b)) = (info.refs.first(), &info.bytes) {
                    originals.push((*r, b.clone()));
                }
            }
            (refs, originals)
        };
        retransform(&self.env, &instrumented);
        // Check: each method's code as long as in the original class file.
        let mut still = 0u64;
        for (class, bytes) in &originals {
            let lengths = original_code_lengths(bytes);
            for (name, desc, now) in self.env.current_code_lengths(*class) {
                if let (Some(now), Some(orig)) = (now, lengths.get(&(name, desc)))
                    && now != *orig
                {
                    still += 1;
                }
            }
        }
        if still > 0 {
            say(&format!(
                "root session: {still} methods still run instrumented code after the probes were removed"
            ));
        }
        *lock(&self.restored) = (instrumented.len() as u64, still);
        let _ = self.env.disable_events(&[Event::ClassFileLoadHook]);
    }

    fn finish(&self, jni: &Jni, sink: &mut Sink) {
        jni.with_local_frame(64, || self.merge(jni, sink, true));
        self.drain_now(jni);
        if let Some(d) = lock(&self.drain).as_mut() {
            d.close();
            let extra = &mut sink.meta_mut().extra;
            extra.insert("trace_events".into(), d.events.to_string());
            extra.insert("trace_dropped_calls".into(), d.dropped.to_string());
            if self.streaming {
                extra.insert("trace_chunks_not_streamed".into(), d.unsent.to_string());
            }
            if let Some(t) = &self.trace {
                extra.insert(
                    "trace_vm".into(),
                    t.vm_name.clone().unwrap_or_else(trace::default_vm_name),
                );
                extra.insert("trace_buffer_events".into(), t.buffer.to_string());
            }
            if let Some(e) = &d.error {
                say(&format!("trace mode: {e}"));
            }
            if d.dropped > 0 {
                say(&format!(
                    "trace mode: {} calls were dropped because their thread's buffer was full \
                     (raise --trace-buffer)",
                    d.dropped
                ));
            }
        }
        // Roots and include patterns that never matched, and the references the session held.
        if let Some(t) = tables().as_ref() {
            for (k, r) in self.options.roots.iter().enumerate() {
                if t.root_hits.get(k) == Some(&0) {
                    say(&format!("root {r} matched no method"));
                }
            }
            if t.trace {
                for (k, p) in self.options.include.iter().enumerate() {
                    if t.include_hits.get(k) == Some(&0) {
                        say(&format!("trace: --include {p} matched no class"));
                    }
                }
                if t.instrumented_methods() == 0 {
                    say("trace: no method was traced (no class in scope loaded)");
                }
            }
        }
        release(jni);
    }

    fn stream_chunks(&self) -> Vec<Vec<u8>> {
        lock(&self.drain)
            .as_mut()
            .map(|d| d.take_outbox())
            .unwrap_or_default()
    }

    fn appendix(&self) -> Option<std::path::PathBuf> {
        let d = lock(&self.drain);
        let d = d.as_ref()?;
        d.error.is_none().then(|| d.path().clone())
    }

    fn status(&self) -> Vec<(&'static str, serde_json::Value)> {
        vec![
            ("root_calls", self.calls.load(Ordering::Relaxed).into()),
            (
                "roots",
                self.options
                    .roots
                    .iter()
                    .map(|r| r.to_string())
                    .collect::<Vec<_>>()
                    .into(),
            ),
        ]
    }
}

/// Ends the session's tables and the global references they held.
fn release(jni: &Jni) {
    let _one = lock(&REVEAL);
    if let Some(t) = tables().take() {
        for info in t.classes.into_values() {
            for r in info.refs {
                jni.delete_global(r);
            }
        }
    }
}

/// (name, descriptor) → code length of each method with code in a class file.
fn original_code_lengths(bytes: &[u8]) -> HashMap<(String, String), usize> {
    let Ok(cf) = jvmprof_classfile::ClassFile::read(bytes) else {
        return HashMap::new();
    };
    let mut out = HashMap::new();
    for m in &cf.methods {
        if let Some(i) = cf.find_attribute(&m.attributes, "Code") {
            let data = &m.attributes[i].data;
            if data.len() >= 8 {
                let len = u32::from_be_bytes([data[4], data[5], data[6], data[7]]) as usize;
                out.insert((cf.member_name(m), cf.member_descriptor(m)), len);
            }
        }
    }
    out
}

impl SubgraphEngine {
    fn merge(&self, jni: &Jni, sink: &mut Sink, last: bool) {
        let Some(&(roots, _)) = RUNTIME.get() else {
            return;
        };
        let methods: Vec<(String, String)> = tables()
            .as_ref()
            .map(|t| {
                t.methods
                    .iter()
                    .map(|m| (m.class.replace('/', "."), m.name.clone()))
                    .collect()
            })
            .unwrap_or_default();
        let mut c = lock(&self.collector);
        c.merge(jni, roots, sink, &methods, last, self.trace.is_none());
        if self.trace.is_some() {
            // Trace mode: the traces carry the calls; `jvmprof trace` gives their statistics.
            let instrumented = tables().as_ref().map_or(0, |t| t.instrumented_methods());
            let extra = &mut sink.meta_mut().extra;
            extra.insert(
                "trace_methods_instrumented".into(),
                instrumented.to_string(),
            );
            extra.insert("trace_contexts".into(), c.contexts.to_string());
            if last {
                let (restored, still) = *lock(&self.restored);
                extra.insert("trace_classes_restored".into(), restored.to_string());
                extra.insert("trace_methods_still_instrumented".into(), still.to_string());
            }
            return;
        }
        let stats = c.stats_table();
        let extra = &mut sink.meta_mut().extra;
        let (inner, outer) = *lock(&self.calibration);
        let (restored, still) = *lock(&self.restored);
        extra.insert("root_patterns".into(), {
            let v: Vec<String> = self.options.roots.iter().map(|r| r.to_string()).collect();
            v.join(" ")
        });
        extra.insert(
            "root_timer".into(),
            match self.options.timer {
                Timer::Wall => "wall",
                Timer::Cpu => "cpu",
            }
            .into(),
        );
        if let Some(d) = self.options.min_latency {
            extra.insert("root_min_latency_ns".into(), d.as_nanos().to_string());
        }
        extra.insert("root_inner_ns".into(), format!("{inner:.2}"));
        extra.insert("root_outer_ns".into(), format!("{outer:.2}"));
        extra.insert("root_stats".into(), stats);
        extra.insert("root_contexts".into(), c.contexts.to_string());
        if let Some(t) = tables().as_ref() {
            extra.insert(
                "root_methods_instrumented".into(),
                t.instrumented_methods().to_string(),
            );
            extra.insert("root_methods_run".into(), t.revealed.len().to_string());
            extra.insert(
                "root_classes_instrumented".into(),
                t.classes
                    .values()
                    .filter(|c| c.bytes.is_some())
                    .count()
                    .to_string(),
            );
            extra.insert("root_retransforms".into(), t.retransforms.to_string());
            extra.insert(
                "root_skipped".into(),
                t.skipped
                    .iter()
                    .map(|(k, v)| format!("{k}: {v}"))
                    .collect::<Vec<_>>()
                    .join("\n"),
            );
            extra.insert("root_notes".into(), t.notes.join("\n"));
        }
        if last {
            extra.insert("root_classes_restored".into(), restored.to_string());
            extra.insert("root_methods_still_instrumented".into(), still.to_string());
        }
    }
}

/// Per-method statistics over every context and thread (inclusive time per invocation).
#[derive(Default, Clone, Copy)]
struct Stat {
    count: u64,
    total: i128,
    sq: f64,
    min: i64,
    max: i64,
}

/// Reads the runtime's trees into a profile, adding what grew since the last merge.
#[derive(Default)]
struct Collector {
    /// (thread index, context index) → (calls, own time, bytecodes) already added.
    seen: HashMap<(usize, usize), (u64, u64, u64)>,
    frames: HashMap<i64, u32>,
    stats: BTreeMap<String, Stat>,
    contexts: u64,
}

impl Collector {
    fn merge(
        &mut self,
        jni: &Jni,
        roots: GlobalRef,
        sink: &mut Sink,
        methods: &[(String, String)],
        last: bool,
        timed: bool,
    ) {
        let metrics = sink.profile().meta.metrics.clone();
        let at = |m: Metric| metrics.iter().position(|x| *x == m);
        let calls_at = at(Metric::Calls);
        // Trace mode's tree has no times (they are its events'); a sampling mode's ns beside it
        // is that mode's own.
        let time_at = if timed {
            at(Metric::Ns).or(at(Metric::CpuNs))
        } else {
            None
        };
        let bc_at = at(Metric::Bytecodes);
        let Some(n) = jni.call_static_int(roots, "threads", "()I", &[]) else {
            return;
        };
        // Statistics are recomputed from the whole trees each time.
        self.stats.clear();
        self.contexts = 0;
        let mut values = vec![0u64; metrics.len()];
        for i in 0..n.max(0) {
            jni.with_local_frame(16, || {
                let name = jni
                    .call_static_string(roots, "threadName", "(I)Ljava/lang/String;", &[i])
                    .unwrap_or_else(|| format!("thread {i}"));
                let Some(tree) = jni.call_static_long_array(roots, "tree", "(I)[J", &[i]) else {
                    return;
                };
                let thread = sink.thread_named(name);
                let i = i as usize;
                let count = tree.len() / FIELDS;
                let mut stacks: Vec<Option<u32>> = vec![None; count];
                for k in 0..count {
                    let f = &tree[k * FIELDS..(k + 1) * FIELDS];
                    let (parent, method) = (f[0], f[1]);
                    if parent < 0 {
                        continue; // the thread's top: not a frame
                    }
                    let parent_stack = usize::try_from(parent)
                        .ok()
                        .and_then(|p| stacks.get(p).copied().flatten());
                    let frame = self.frame(sink, methods, method);
                    let stack = sink.child_stack(parent_stack, frame);
                    stacks[k] = Some(stack);
                    let calls = f[2].max(0) as u64;
                    if calls == 0 {
                        continue;
                    }
                    self.contexts += 1;
                    let own = f[3].max(0) as u64;
                    let bytecodes = f[4].max(0) as u64;
                    let key = match usize::try_from(method - FIRST_ID as i64)
                        .ok()
                        .and_then(|m| methods.get(m))
                    {
                        Some((c, m)) => format!("{c}.{m}"),
                        None if method == SPILL => "[past node budget]".to_string(),
                        None => continue,
                    };
                    let s = self.stats.entry(key).or_insert(Stat {
                        min: i64::MAX,
                        max: i64::MIN,
                        ..Stat::default()
                    });
                    s.count += calls;
                    s.total += i128::from(f[5]);
                    s.sq += f64::from_bits(f[6] as u64);
                    s.min = s.min.min(f[7]);
                    s.max = s.max.max(f[8]);
                    let (dc, dt, db) = if last && self.seen.is_empty() {
                        (calls, own, bytecodes)
                    } else {
                        let seen = self.seen.entry((i, k)).or_default();
                        let d = (
                            calls.saturating_sub(seen.0),
                            own.saturating_sub(seen.1),
                            bytecodes.saturating_sub(seen.2),
                        );
                        *seen = (seen.0.max(calls), seen.1.max(own), seen.2.max(bytecodes));
                        d
                    };
                    if dc == 0 && dt == 0 && db == 0 {
                        continue;
                    }
                    values.iter_mut().for_each(|v| *v = 0);
                    if let Some(x) = calls_at {
                        values[x] = dc;
                    }
                    if let Some(x) = time_at {
                        values[x] = dt;
                    }
                    if let Some(x) = bc_at {
                        values[x] = db;
                    }
                    sink.add(thread, stack, ThreadState::Running, &values);
                }
            });
        }
    }

    fn frame(&mut self, sink: &mut Sink, methods: &[(String, String)], method: i64) -> u32 {
        if let Some(&f) = self.frames.get(&method) {
            return f;
        }
        let frame = match usize::try_from(method - FIRST_ID as i64)
            .ok()
            .and_then(|m| methods.get(m))
        {
            Some((class, name)) => Frame::java(class, name, "", 0),
            None if method == SPILL => Frame::synthetic(FrameKind::Synthetic, "[past node budget]"),
            None if method == REMOTE_METHOD => {
                Frame::synthetic(FrameKind::Synthetic, "[remote call]")
            }
            None => Frame::synthetic(FrameKind::Synthetic, &format!("[method #{method}]")),
        };
        let f = sink.frame(frame);
        self.frames.insert(method, f);
        f
    }

    /// `method\tcount\ttotal_ns\tmin_ns\tmax_ns\tmean_ns\tstddev_ns` lines, by total
    /// descending (times: each invocation's inclusive time, calibrated; negatives, left by
    /// the correction's noise on near-empty methods, read as 0).
    fn stats_table(&self) -> String {
        let mut rows: Vec<(&String, &Stat)> = self.stats.iter().collect();
        rows.sort_by(|a, b| b.1.total.cmp(&a.1.total).then(a.0.cmp(b.0)));
        let mut out = String::new();
        for (m, s) in rows {
            let n = s.count.max(1) as f64;
            let mean = s.total as f64 / n;
            let var = (s.sq / n - mean * mean).max(0.0);
            out.push_str(&format!(
                "{m}\t{}\t{}\t{}\t{}\t{:.0}\t{:.0}\n",
                s.count,
                s.total.max(0),
                s.min.max(0),
                s.max.max(0),
                mean.max(0.0),
                var.sqrt()
            ));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::RootPattern;

    #[test]
    fn stats_table_orders_by_total_and_computes_spread() {
        let mut c = Collector::default();
        c.stats.insert(
            "A.a".into(),
            Stat {
                count: 2,
                total: 30,
                sq: 10.0 * 10.0 + 20.0 * 20.0,
                min: 10,
                max: 20,
            },
        );
        c.stats.insert(
            "B.b".into(),
            Stat {
                count: 1,
                total: 100,
                sq: 100.0 * 100.0,
                min: 100,
                max: 100,
            },
        );
        let t = c.stats_table();
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines[0], "B.b\t1\t100\t100\t100\t100\t0");
        assert_eq!(lines[1], "A.a\t2\t30\t10\t20\t15\t5");
    }

    #[test]
    fn root_patterns_pick_methods() {
        let r = RootPattern::parse("com.acme.Svc.handle").unwrap();
        assert!(r.matches("com.acme.Svc", "handle", "(I)V"));
        assert!(!r.matches("com.acme.Svc", "handled", "(I)V"));
        let all = RootPattern::parse("com.acme.Svc.*").unwrap();
        assert!(all.matches("com.acme.Svc", "x", "()V"));
        assert!(!all.matches("com.acme.Svc", "<init>", "()V"));
        assert!(!all.may_match_class("com.acme.Svc2"));
        let pkg = RootPattern::parse("com.acme.*").unwrap();
        assert!(pkg.may_match_class("com.acme.deep.Svc"));
        assert!(pkg.matches("com.acme.deep.Svc", "run", "()V"));
        let d = RootPattern::parse("A.b(ILjava/lang/String;)V").unwrap();
        assert!(d.matches("A", "b", "(ILjava/lang/String;)V"));
        assert!(!d.matches("A", "b", "(I)V"));
        assert!(RootPattern::parse("A.b(Lfoo").is_err());
        assert!(RootPattern::parse("A.b(I").is_err());
        assert!(RootPattern::parse("A.b(Q)V").is_err());
        assert!(RootPattern::parse("A.b()VV").is_err());
        assert!(RootPattern::parse("nomethod").is_err());
        assert!(RootPattern::parse("A.*(I)V").is_err());
        let ctor = RootPattern::parse("A.<init>").unwrap();
        assert!(ctor.matches("A", "<init>", "()V"));
    }
}
