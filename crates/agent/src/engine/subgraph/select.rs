//! What a root or trace session instruments ([`Tables`]): the loaded classes' hierarchy, the
//! methods selected (roots, the callees revealed so far and the overrides they may reach, or every
//! method of a traced class), and which classes wait to be retransformed. The engine's
//! [`Selection`] says what a class brings when it is first seen; the rest is the same for both
//! engines. The tables live in a static because the class hook and the runtime's natives reach
//! them on the application's threads.

use super::super::exact::{Origin, wanted_class};
use crate::options::ExactOptions;
use crate::sync::lock;
use jvmprof_classfile::subgraph::{self, Dispatch, Hook, Target};
use jvmprof_jvmti::Env;
use jvmprof_jvmti::classes::GlobalRef;
use jvmprof_jvmti::hierarchy::DeclaredMethod;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, MutexGuard};

/// Method ids 0 and 1 are the calibration's `loop` (a root) and `empty`.
pub const FIRST_ID: i32 = 2;

/// Whether the class hook instruments for a root session.
pub static ACTIVE: AtomicBool = AtomicBool::new(false);
/// The session's tables (Some from start to finish).
pub static TABLES: Mutex<Option<Tables>> = Mutex::new(None);

/// What an engine selects besides the callees revealed as they run.
pub trait Selection: Sync {
    /// A class seen for the first time (as it loads, or loaded and read at start): select
    /// what it brings (root methods, or every method of a traced class).
    fn class_seen(&self, t: &mut Tables, class: &str, methods: &[DeclaredMethod]);
    /// The probes a class gets instead of the selected methods' (trace mode's remote-call
    /// hooks), if any.
    fn hooks(
        &self,
        _class: &str,
    ) -> Option<&'static [(&'static str, &'static str, Hook<'static>)]> {
        None
    }
}

pub struct MethodInfo {
    /// Internal class name.
    pub class: String,
    pub name: String,
    pub descriptor: String,
    pub root: bool,
}

#[derive(Default)]
pub struct ClassInfo {
    /// Superclass first, then interfaces.
    pub supers: Vec<String>,
    /// One per defining loader, for RetransformClasses.
    pub refs: Vec<GlobalRef>,
    pub modifiable: bool,
    pub jdk: bool,
    /// Declared methods, when read (from the hook's bytes or from JVMTI).
    pub methods: Option<Vec<DeclaredMethod>>,
    /// The original class file, kept once a method of the class was selected.
    pub bytes: Option<Arc<[u8]>>,
    /// What each method may call, read from `bytes` at the first revelation in the class (one
    /// read of the class however many of its methods are revealed).
    pub targets: Option<Arc<subgraph::TargetsByMethod>>,
    /// Whether the JVM runs our probes in it now.
    pub instrumented: bool,
}

pub struct Tables {
    pub env: Env,
    pub options: ExactOptions,
    pub methods: Vec<MethodInfo>,
    pub ids: HashMap<(String, String, String), i32>,
    /// Class → (name, descriptor) → id: the methods to instrument.
    pub selected: HashMap<String, HashMap<(String, String), i32>>,
    pub classes: HashMap<String, ClassInfo>,
    /// Direct supertype → its direct subtypes.
    pub subtypes: HashMap<String, Vec<String>>,
    /// (name, descriptor) → classes whose virtual method of that signature was called: a class
    /// loading later that overrides one of them is instrumented as it loads.
    pub virtual_wants: HashMap<(String, String), BTreeSet<String>>,
    pub revealed: HashSet<i32>,
    pub reflected: HashSet<usize>,
    /// Classes whose selection grew and that are loaded: retransform them.
    pub pending: BTreeSet<String>,
    /// Methods each root pattern matched.
    pub root_hits: Vec<u64>,
    pub skipped: BTreeMap<String, String>,
    pub notes: Vec<String>,
    /// Classes a root waits for (said once each).
    pub waiting: BTreeSet<String>,
    pub retransforms: u64,
    /// What the engine selects besides revealed callees.
    pub selection: &'static dyn Selection,
    /// Trace mode: classes traced per include pattern.
    pub include_hits: Vec<u64>,
}

impl Tables {
    /// Empty tables for a session with these options.
    pub fn new(env: Env, options: &ExactOptions, selection: &'static dyn Selection) -> Tables {
        Tables {
            env,
            options: options.clone(),
            methods: Vec::new(),
            ids: HashMap::new(),
            selected: HashMap::new(),
            classes: HashMap::new(),
            subtypes: HashMap::new(),
            virtual_wants: HashMap::new(),
            revealed: HashSet::new(),
            reflected: HashSet::new(),
            pending: BTreeSet::new(),
            root_hits: vec![0; options.roots.len()],
            skipped: BTreeMap::new(),
            notes: Vec::new(),
            waiting: BTreeSet::new(),
            retransforms: 0,
            selection,
            include_hits: vec![0; options.include.len()],
        }
    }

    /// Methods selected in classes the JVM runs with our probes.
    pub fn instrumented_methods(&self) -> u64 {
        self.classes
            .iter()
            .filter(|(_, c)| c.instrumented)
            .filter_map(|(name, _)| self.selected.get(name))
            .map(|m| m.len() as u64)
            .sum()
    }

    /// Trace mode: selects every method with code of a traced class; true if it is traced.
    pub fn trace_class(&mut self, class: &str, methods: &[DeclaredMethod]) -> bool {
        if !self.wanted(class) {
            return false;
        }
        // With `include` patterns only the classes they name are traced (application or JDK);
        // without, every application class.
        let dotted = class.replace('/', ".");
        let mut included = false;
        for (k, p) in self.options.include.clone().iter().enumerate() {
            if crate::options::glob(p, &dotted) {
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

    pub fn wanted(&self, class: &str) -> bool {
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

    pub fn methods_of(&mut self, class: &str) -> Option<&Vec<DeclaredMethod>> {
        let env = self.env;
        let info = self.classes.get_mut(class)?;
        if info.methods.is_none() {
            let r = *info.refs.first()?;
            info.methods = Some(env.declared_methods(r));
        }
        info.methods.as_ref()
    }

    /// Selects a method for instrumentation; true if it is new.
    pub fn select(&mut self, class: &str, name: &str, descriptor: &str, root: bool) -> bool {
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
    pub fn declares(&mut self, class: &str, name: &str, descriptor: &str) -> Option<bool> {
        self.methods_of(class)?
            .iter()
            .find(|(n, d, _)| n == name && d == descriptor)
            .map(|m| m.2)
    }

    /// Selects what a call site may reach.
    pub fn resolve(&mut self, t: &Target) {
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

    pub fn is_subtype(&self, class: &str, of: &str) -> bool {
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

    pub fn learn(&mut self, name: &str, supers: Vec<String>) {
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
    pub fn match_roots(&mut self, class: &str, methods: &[DeclaredMethod]) -> u64 {
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
    pub fn take_pending(&mut self) -> Vec<GlobalRef> {
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

/// The session's tables, locked.
pub fn tables() -> MutexGuard<'static, Option<Tables>> {
    lock(&TABLES)
}
