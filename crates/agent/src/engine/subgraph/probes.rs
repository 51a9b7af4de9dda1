//! The probes of one root or trace session ([`Probes`]): what the root engine ([`super`]) and the
//! trace engine ([`crate::engine::trace`]) do the same way. Start: the capabilities, the runtime
//! and its `begin`, the loaded classes' hierarchy, then the class hook and the runtime switched
//! on; each poll: classes found late retransformed, the call count refreshed; stop: every
//! instrumented class back to its original bytes, checked against them; the trees merged into
//! the sink; and at the end the session's tables released. Each engine passes what is its own
//! (its [`Selection`], its ring size, whether its times are kept).

use super::reveal::{REVEAL, retransform};
use super::runtime::{self, RUNTIME};
use super::select::{ACTIVE, Selection, Tables, tables};
use super::stats::Collector;
use crate::options::{ExactOptions, Timer};
use crate::sampler::threads::ThreadTable;
use crate::say::say;
use crate::sink::Sink;
use crate::sync::lock;
use jvmprof_jvmti::classes::GlobalRef;
use jvmprof_jvmti::hierarchy::JValue;
use jvmprof_jvmti::{Env, Event, Jni};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// A class and its original class file.
type Original = (GlobalRef, Arc<[u8]>);

/// One session's probes, as the root and trace engines share them.
pub struct Probes {
    pub options: ExactOptions,
    pub env: Env,
    /// Calls recorded so far (for `status`), refreshed by poll.
    calls: AtomicU64,
    last_calls: Mutex<Instant>,
    collector: Mutex<Collector>,
    /// Set by stop: classes restored, methods still instrumented after it.
    restored: Mutex<(u64, u64)>,
    /// Beside cpu or wall sampling (trace mode): threads publish their call tree in this table
    /// for the samples to carry.
    link_samples: Option<&'static ThreadTable>,
}

impl Probes {
    pub fn new(
        env: Env,
        options: &ExactOptions,
        link_samples: Option<&'static ThreadTable>,
    ) -> Probes {
        Probes {
            options: options.clone(),
            env,
            calls: AtomicU64::new(0),
            last_calls: Mutex::new(Instant::now()),
            collector: Mutex::new(Collector::default()),
            restored: Mutex::new((0, 0)),
            link_samples,
        }
    }

    /// The capabilities, the runtime and its `begin`; `ring`: trace mode's per-thread event
    /// ring size (events are logged only with one). Returns the runtime class and the session id.
    pub fn begin(&self, jni: &Jni, ring: Option<i32>) -> Result<(GlobalRef, u64), String> {
        if tables().is_some() {
            return Err("a root session's probes are still being removed; try again".into());
        }
        self.env
            .add_retransform_capability()
            .map_err(|e| format!("root profiling needs class retransformation: {e}"))?;
        let _ = self.env.add_bytecodes_capability();
        let (roots, _) = runtime::define(jni)?;
        let cpu = self.options.timer == Timer::Cpu;
        let min_latency = self
            .options
            .min_latency
            .map(|d| d.as_nanos().min(i64::MAX as u128) as i64)
            .unwrap_or(0);
        let session = runtime::session_id();
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
                JValue::Bool(ring.is_some()),
                JValue::Int(ring.unwrap_or(0)),
                JValue::Object(session_text),
            ],
        );
        if !begun {
            return Err("the root runtime did not start (see the exception above)".into());
        }
        Ok((roots, session))
    }

    /// Tables holding the hierarchy of what is loaded, for `selection` to select in.
    pub fn loaded(&self, jni: &Jni, selection: &'static dyn Selection) -> Tables {
        let platform = jni.platform_class_loader();
        let loaded = self.env.loaded_class_hierarchy(jni);
        let mut t = Tables::new(self.env, &self.options, selection);
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
        t
    }

    /// Makes `t` the session's tables, turns the class hook on, instruments what is selected
    /// and switches the runtime on.
    pub fn switch_on(&self, jni: &Jni, roots: GlobalRef, mut t: Tables) -> Result<(), String> {
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

    /// Classes found late (a supertype loaded after its subclass) are retransformed.
    pub fn retransform_pending(&self) {
        let classes = {
            let _one = lock(&REVEAL);
            tables()
                .as_mut()
                .map(|t| t.take_pending())
                .unwrap_or_default()
        };
        retransform(&self.env, &classes);
    }

    /// Refreshes the call count for `status`, at most every 250 ms.
    pub fn refresh_calls(&self, jni: &Jni) {
        let mut last = lock(&self.last_calls);
        if last.elapsed() >= Duration::from_millis(250)
            && let Some(&(roots, _)) = RUNTIME.get()
        {
            *last = Instant::now();
            if let Some(n) = jni.call_static_long(roots, "calls", "()J") {
                self.calls.store(n.max(0) as u64, Ordering::Relaxed);
            }
        }
    }

    /// Calls recorded so far.
    pub fn calls(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }

    /// After stop: classes restored, methods still instrumented.
    pub fn restored(&self) -> (u64, u64) {
        *lock(&self.restored)
    }

    /// Switches the runtime off and restores every instrumented class.
    pub fn stop(&self, jni: &Jni) {
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

    /// Merges what the trees gained into the sink (`timed`: with their own times); the
    /// collector after it, for the engine's metadata, or None without a runtime.
    pub fn merge(
        &self,
        jni: &Jni,
        sink: &mut Sink,
        last: bool,
        timed: bool,
    ) -> Option<MutexGuard<'_, Collector>> {
        let &(roots, _) = RUNTIME.get()?;
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
        c.merge(jni, roots, sink, &methods, last, timed);
        Some(c)
    }
}

/// Ends the session's tables and the global references they held.
pub fn release(jni: &Jni) {
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
