//! The class hooks of a root or trace session: the ClassFileLoadHook's part ([`transform`]),
//! which reads a class first seen, selects what it brings and rewrites its selected methods (or
//! places the engine's hooks), keeping the original bytes; and ClassPrepare
//! ([`class_prepared`]), which keeps a reference to each class loaded during the session.

use super::super::exact::{Origin, wanted_class};
use super::select::{ACTIVE, FIRST_ID, tables};
use crate::options::Bba;
use crate::say::say;
use jvmprof_classfile::bba::Mode;
use jvmprof_classfile::subgraph;
use jvmprof_jvmti::classes::GlobalRef;
use jvmprof_jvmti::{Env, JClass, JObject, Jni};
use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};

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
    if let Some(hooks) = t.selection.hooks(name) {
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
        let selection = t.selection;
        selection.class_seen(t, name, &h.methods);
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
