//! Revealing the subgraph as it runs: the runtime's natives `reveal` (the first time an
//! instrumented method runs below a root, its call targets are resolved and their classes
//! retransformed before it goes on) and `reflected` (the same for a `Method.invoke` target), and
//! the one way classes are retransformed ([`retransform`]).

use super::select::{ACTIVE, FIRST_ID, tables};
use crate::sync::lock;
use jvmprof_classfile::subgraph::{self, Dispatch, Target};
use jvmprof_jvmti::classes::GlobalRef;
use jvmprof_jvmti::{Env, JObject, Jni};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

/// One revelation at a time (tables are not held while classes are retransformed).
pub static REVEAL: Mutex<()> = Mutex::new(());

/// Retransforms classes (one batch, then one by one if the batch fails, noting failures).
pub fn retransform(env: &Env, classes: &[GlobalRef]) {
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
pub fn reveal(_jni: &Jni, id: i32) {
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
pub fn reflected(jni: &Jni, method: JObject) {
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
