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
//! Trace mode ([`crate::engine::trace`]) is an engine of its own on the same probes: it selects
//! every method of the traced classes as they load (or at start), hooks the JDK's remote-call
//! code, and drains the threads' event rings into a trace file each poll.
//!
//! The files, one job each: [`select`] (what is instrumented: the tables and the hierarchy),
//! [`reveal`] (the natives that reveal callees as they run, and retransforming), [`hook`] (the
//! class hooks), [`runtime`] (the Java runtime's classes and natives), [`calibrate`] (the probes'
//! cost), [`probes`] (a session's probes from start to stop, shared with trace mode) and
//! [`stats`] (the trees into the sink, and per-method statistics); this file is the root engine.

pub mod calibrate;
pub mod hook;
pub mod probes;
pub mod reveal;
pub mod runtime;
pub mod select;
pub mod stats;

pub use hook::{class_prepared, transform};

use super::api::Engine;
use crate::options::{ExactOptions, Timer};
use crate::say::say;
use crate::sink::Sink;
use crate::sync::lock;
use jvmprof_jvmti::hierarchy::DeclaredMethod;
use jvmprof_jvmti::{Env, Jni};
use probes::{Probes, release};
use select::{Selection, Tables, tables};
use std::sync::Mutex;

/// Root mode selects, in each class first seen, the methods that match a root.
struct Roots;

impl Selection for Roots {
    fn class_seen(&self, t: &mut Tables, class: &str, methods: &[DeclaredMethod]) {
        t.match_roots(class, methods);
    }
}

/// The root engine.
pub struct SubgraphEngine {
    probes: Probes,
    /// (inner, outer) probe cost in ns.
    calibration: Mutex<(f64, f64)>,
}

impl SubgraphEngine {
    /// A root session (`options.roots`).
    pub fn new(env: Env, options: &ExactOptions) -> SubgraphEngine {
        SubgraphEngine {
            probes: Probes::new(env, options, None),
            calibration: Mutex::new((0.0, 0.0)),
        }
    }

    fn merge(&self, jni: &Jni, sink: &mut Sink, last: bool) {
        let Some(c) = self.probes.merge(jni, sink, last, true) else {
            return;
        };
        let options = &self.probes.options;
        let stats = c.stats_table();
        let extra = &mut sink.meta_mut().extra;
        let (inner, outer) = *lock(&self.calibration);
        let (restored, still) = self.probes.restored();
        extra.insert("root_patterns".into(), {
            let v: Vec<String> = options.roots.iter().map(|r| r.to_string()).collect();
            v.join(" ")
        });
        extra.insert(
            "root_timer".into(),
            match options.timer {
                Timer::Wall => "wall",
                Timer::Cpu => "cpu",
            }
            .into(),
        );
        if let Some(d) = options.min_latency {
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

impl Engine for SubgraphEngine {
    fn name(&self) -> &'static str {
        "instrumentation"
    }

    fn start(&self, jni: &Jni) -> Result<(), String> {
        let (roots, _) = self.probes.begin(jni, None)?;
        *lock(&self.calibration) = calibrate::calibrate(jni, roots);
        // The hierarchy of what is loaded, and the roots among it.
        let mut t = self.probes.loaded(jni, &Roots);
        let options = &self.probes.options;
        let names: Vec<String> = t.classes.keys().cloned().collect();
        for name in names {
            let dotted = name.replace('/', ".");
            if !options.roots.iter().any(|r| r.may_match_class(&dotted)) {
                continue;
            }
            if let Some(methods) = t.methods_of(&name).cloned() {
                t.match_roots(&name, &methods);
            }
        }
        for r in &options.roots {
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
        self.probes.switch_on(jni, roots, t)
    }

    fn period(&self) -> std::time::Duration {
        std::time::Duration::from_millis(50)
    }

    fn poll(&self, jni: &Jni, _sink: &mut Sink) {
        self.probes.retransform_pending();
        self.probes.refresh_calls(jni);
    }

    fn flush(&self, jni: &Jni, sink: &mut Sink) {
        jni.with_local_frame(64, || self.merge(jni, sink, false));
    }

    fn stop(&self, jni: &Jni) {
        self.probes.stop(jni);
    }

    fn finish(&self, jni: &Jni, sink: &mut Sink) {
        jni.with_local_frame(64, || self.merge(jni, sink, true));
        // Roots that never matched, and the references the session held.
        if let Some(t) = tables().as_ref() {
            for (k, r) in self.probes.options.roots.iter().enumerate() {
                if t.root_hits.get(k) == Some(&0) {
                    say(&format!("root {r} matched no method"));
                }
            }
        }
        release(jni);
    }

    fn status(&self) -> Vec<(&'static str, serde_json::Value)> {
        root_status(&self.probes)
    }
}

/// What `jvmprof status` shows of a root (or trace) session.
pub fn root_status(probes: &Probes) -> Vec<(&'static str, serde_json::Value)> {
    vec![
        ("root_calls", probes.calls().into()),
        (
            "roots",
            probes
                .options
                .roots
                .iter()
                .map(|r| r.to_string())
                .collect::<Vec<_>>()
                .into(),
        ),
    ]
}

#[cfg(test)]
mod tests {
    use crate::options::RootPattern;

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
