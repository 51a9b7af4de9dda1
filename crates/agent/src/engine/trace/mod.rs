//! Trace mode (`mode=trace`, JaViz): an engine of its own on the root engine's probes
//! ([`super::subgraph`]), with every method of the traced classes instrumented at once (no root,
//! no lazy revelation), and each call's entry and exit logged with its time into its thread's
//! ring buffer in Java. This file is the engine; what else is particular to tracing:
//!
//! - [`hooks`]: the probes put into the JDK's remote-call code and the executors' hand-offs;
//! - [`drain`]: the writer thread's poll takes what the rings gained into a trace file beside
//!   the output (and to the collector), which at the end follows the profile in the native file.
//!
//! Each thread publishes the call tree it is in for cpu and wall samples to carry through the
//! runtime's `contextCell` native ([`super::subgraph::runtime::context_cell`]).

pub mod drain;
pub mod hooks;

use super::api::Engine;
use super::subgraph::probes::{Probes, release};
use super::subgraph::root_status;
use super::subgraph::runtime::RUNTIME;
use super::subgraph::select::{FIRST_ID, Selection, Tables, tables};
use crate::options::{Bba, ExactOptions, Timer, TraceOptions};
use crate::sampler::threads::ThreadTable;
use crate::say::say;
use crate::sink::Sink;
use crate::sync::lock;
use drain::{Drain, default_vm_name};
use jvmprof_classfile::subgraph::Hook;
use jvmprof_jvmti::hierarchy::{DeclaredMethod, JValue};
use jvmprof_jvmti::{Env, Jni};
use std::path::PathBuf;
use std::sync::Mutex;

/// Trace mode selects every method of a traced class as it is first seen, and hooks the JDK's
/// remote-call code.
struct Traced;

impl Selection for Traced {
    fn class_seen(&self, t: &mut Tables, class: &str, methods: &[DeclaredMethod]) {
        t.trace_class(class, methods);
    }

    fn hooks(&self, class: &str) -> Option<&'static [(&'static str, &'static str, Hook<'static>)]> {
        hooks::hooks_for(class)
    }
}

/// The trace engine.
pub struct TraceEngine {
    probes: Probes,
    options: TraceOptions,
    /// The file the events go to, and the drain writing it (from start on).
    file: PathBuf,
    drain: Mutex<Option<Drain>>,
    /// With a collector: chunks also go to it.
    streaming: bool,
}

impl TraceEngine {
    /// A trace session; its events go to `file` (beside the output) until the native file
    /// takes them. `link_samples`: beside cpu or wall sampling, threads publish their call tree
    /// in this table for the samples to carry.
    pub fn new(
        env: Env,
        t: &TraceOptions,
        file: PathBuf,
        streaming: bool,
        link_samples: Option<&'static ThreadTable>,
    ) -> TraceEngine {
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
        TraceEngine {
            probes: Probes::new(env, &options, link_samples),
            options: t.clone(),
            file,
            drain: Mutex::new(None),
            streaming,
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

    fn merge(&self, jni: &Jni, sink: &mut Sink, last: bool) {
        // The traces carry the calls' times; `jvmprof trace` gives their statistics.
        let Some(c) = self.probes.merge(jni, sink, last, false) else {
            return;
        };
        let instrumented = tables().as_ref().map_or(0, |t| t.instrumented_methods());
        let extra = &mut sink.meta_mut().extra;
        extra.insert(
            "trace_methods_instrumented".into(),
            instrumented.to_string(),
        );
        extra.insert("trace_contexts".into(), c.contexts.to_string());
        if last {
            let (restored, still) = self.probes.restored();
            extra.insert("trace_classes_restored".into(), restored.to_string());
            extra.insert("trace_methods_still_instrumented".into(), still.to_string());
        }
    }
}

impl Engine for TraceEngine {
    fn name(&self) -> &'static str {
        "instrumentation"
    }

    fn start(&self, jni: &Jni) -> Result<(), String> {
        let (roots, session) = self.probes.begin(jni, Some(self.options.buffer as i32))?;
        let vm = self.options.vm_name.clone().unwrap_or_else(default_vm_name);
        let d = Drain::new(self.file.clone(), vm, session, self.streaming);
        if let Some(e) = &d.error {
            return Err(format!("trace mode: {e}"));
        }
        *lock(&self.drain) = Some(d);
        // The tree keeps raw times, like the events: no correction to measure.
        jni.call_static_void(
            roots,
            "setCorrection",
            "(JJ)V",
            &[JValue::Long(0), JValue::Long(0)],
        );
        // Every loaded traced class, and the loaded remote-call code.
        let mut t = self.probes.loaded(jni, &Traced);
        let names: Vec<String> = t.classes.keys().cloned().collect();
        for name in &names {
            let modifiable = t.classes.get(name).is_some_and(|c| c.modifiable);
            if !modifiable || !t.wanted(name) {
                continue;
            }
            if let Some(methods) = t.methods_of(name).cloned() {
                t.trace_class(name, &methods);
            }
        }
        for hooked in hooks::HOOKED {
            if t.classes
                .get(*hooked)
                .is_some_and(|c| c.modifiable && !c.refs.is_empty())
            {
                t.pending.insert(hooked.to_string());
            }
        }
        self.probes.switch_on(jni, roots, t)
    }

    fn period(&self) -> std::time::Duration {
        std::time::Duration::from_millis(50)
    }

    fn poll(&self, jni: &Jni, _sink: &mut Sink) {
        self.probes.retransform_pending();
        self.drain_now(jni);
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
        self.drain_now(jni);
        if let Some(d) = lock(&self.drain).as_mut() {
            d.close();
            let extra = &mut sink.meta_mut().extra;
            extra.insert("trace_events".into(), d.events.to_string());
            extra.insert("trace_dropped_calls".into(), d.dropped.to_string());
            if self.streaming {
                extra.insert("trace_chunks_not_streamed".into(), d.unsent.to_string());
            }
            extra.insert(
                "trace_vm".into(),
                self.options.vm_name.clone().unwrap_or_else(default_vm_name),
            );
            extra.insert(
                "trace_buffer_events".into(),
                self.options.buffer.to_string(),
            );
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
        // Include patterns that never matched, and the references the session held.
        if let Some(t) = tables().as_ref() {
            for (k, p) in self.probes.options.include.iter().enumerate() {
                if t.include_hits.get(k) == Some(&0) {
                    say(&format!("trace: --include {p} matched no class"));
                }
            }
            if t.instrumented_methods() == 0 {
                say("trace: no method was traced (no class in scope loaded)");
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

    fn appendix(&self) -> Option<PathBuf> {
        let d = lock(&self.drain);
        let d = d.as_ref()?;
        d.error.is_none().then(|| d.path().clone())
    }

    fn status(&self) -> Vec<(&'static str, serde_json::Value)> {
        root_status(&self.probes)
    }
}
