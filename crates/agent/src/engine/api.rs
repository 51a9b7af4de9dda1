//! The engine interface: the [`Engine`] trait every source of samples implements, and what an
//! engine may use of the JVM and of the agent ([`EngineCtx`]).

use crate::sampler::threads::ThreadTable;
use crate::sink::Sink;
use jvmprof_jvmti::{Capabilities, Env, Jni, Vm};
use std::collections::BTreeMap;
use std::time::Duration;

/// What an engine may use of the JVM and of the agent.
#[derive(Clone, Copy)]
pub struct EngineCtx {
    pub vm: Vm,
    pub env: Env,
    pub caps: Capabilities,
    /// tid → JNIEnv of every Java thread seen starting (read by the signal handler).
    pub threads: &'static ThreadTable,
}

/// How often the writer polls an engine that does not say otherwise.
pub const DEFAULT_PERIOD: Duration = Duration::from_millis(10);

/// One source of samples. Every method but the thread hooks runs on the session's writer
/// thread, attached to the VM; the thread hooks run on the thread that starts or ends.
pub trait Engine: Send + Sync {
    /// The engine's name in the profile's metadata (`asgct`, `safepoint`, `events`, ...).
    fn name(&self) -> &'static str;
    /// Turns recording on. An error is for the user; the session does not start.
    fn start(&self, _jni: &Jni) -> Result<(), String> {
        Ok(())
    }
    /// The longest the writer may wait between two polls.
    fn period(&self) -> Duration {
        DEFAULT_PERIOD
    }
    /// Moves what was recorded since the last poll into the sink.
    fn poll(&self, _jni: &Jni, _sink: &mut Sink) {}
    /// About once a second: keep up with the process (new threads, ...).
    fn housekeeping(&self) {}
    /// Makes everything recorded so far visible in the sink before a flush or a stream update
    /// (exact mode's trees live in Java until merged).
    fn flush(&self, _jni: &Jni, _sink: &mut Sink) {}
    /// Turns recording off; one last poll and `finish` follow.
    fn stop(&self, _jni: &Jni) {}
    /// After the last poll: results that exist only at the end (live objects, exact trees) and
    /// the engine's metadata.
    fn finish(&self, _jni: &Jni, _sink: &mut Sink) {}
    /// Samples lost inside the engine (full buffers), for the profile's metadata.
    fn dropped(&self) -> u64 {
        0
    }
    /// Trace chunks for the collector link since the last call (trace mode with a server).
    fn stream_chunks(&self) -> Vec<Vec<u8>> {
        Vec::new()
    }
    /// A file whose bytes follow the profile in the native file (trace mode's traces).
    fn appendix(&self) -> Option<std::path::PathBuf> {
        None
    }
    /// What `jvmprof status` shows of this engine besides the session's common fields.
    fn status(&self) -> Vec<(&'static str, serde_json::Value)> {
        Vec::new()
    }
    /// A Java thread started (called on it).
    fn thread_started(&self, _tid: u32) {}
    /// A Java thread ended (called on it).
    fn thread_ended(&self, _tid: u32) {}
}

/// Adds `(key, value)` pairs to the profile's free-form metadata.
pub fn note(sink: &mut Sink, pairs: &[(&str, String)]) {
    let extra: &mut BTreeMap<String, String> = &mut sink.meta_mut().extra;
    for (k, v) in pairs {
        extra.insert((*k).to_string(), v.clone());
    }
}
