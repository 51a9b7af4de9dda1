//! A running session as the rest of the agent sees it: [`Shared`], what the writer thread and the
//! JVMTI callbacks share, and [`Session`], the handle the agent state keeps (thread hooks, an
//! early flush, stop, status). Starting one, which spawns the writer thread, is
//! [`crate::session`]'s job; this module needs neither it nor the writer.

use crate::engine::Engine;
use crate::options::Options;
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

/// What the session shares between its writer thread and the JVMTI thread callbacks.
pub struct Shared {
    pub options: Options,
    pub engines: Vec<Box<dyn Engine>>,
    /// The agent's own threads (writer, collector link): never sampled.
    pub own_tids: Arc<Mutex<HashSet<u32>>>,
    /// End the session (set by `stop`; the writer looks at it before and after each wait).
    pub stop: AtomicBool,
    /// Wakes the writer for `stop` and `flush_now` (None if no eventfd could be made: the
    /// writer then looks at the flags every few milliseconds).
    pub waker: Option<jvmprof_jvmti::os::Waker>,
    /// Write the profile so far now (set on an OutOfMemoryError).
    pub flush_now: AtomicBool,
    /// Samples taken so far, for the status file.
    pub samples: AtomicU64,
    /// When the session started (Unix ms).
    pub started_unix_ms: u64,
}

impl Shared {
    fn wake(&self) {
        if let Some(w) = &self.waker {
            w.wake();
        }
    }

    /// The writer's wait for its next poll: until `timeout` passes or `stop` or `flush_now`
    /// wakes it.
    pub fn wait(&self, timeout: Duration) {
        match &self.waker {
            Some(w) => w.wait(timeout),
            None => std::thread::sleep(timeout.min(Duration::from_millis(5))),
        }
    }
}

/// The handle of a running session: what the JVMTI callbacks and `stop` do with it.
pub struct Session {
    shared: Arc<Shared>,
    writer: Option<std::thread::JoinHandle<()>>,
    done: mpsc::Receiver<Result<String, String>>,
}

impl Session {
    /// The handle of a session whose writer thread is running and ready.
    pub fn new(
        shared: Arc<Shared>,
        writer: std::thread::JoinHandle<()>,
        done: mpsc::Receiver<Result<String, String>>,
    ) -> Session {
        Session {
            shared,
            writer: Some(writer),
            done,
        }
    }

    /// A Java thread started (called on that thread).
    pub fn thread_started(&self, tid: u32) {
        for e in &self.shared.engines {
            e.thread_started(tid);
        }
    }

    /// A Java thread ended (called on that thread).
    pub fn thread_ended(&self, tid: u32) {
        for e in &self.shared.engines {
            e.thread_ended(tid);
        }
    }

    /// Whether the writer finished on its own (the session's duration elapsed).
    /// Has the writer write the profile so far at once (the session goes on).
    pub fn flush_now(&self) {
        self.shared.flush_now.store(true, Ordering::Release);
        self.shared.wake();
    }

    pub fn finished(&self) -> bool {
        self.writer.as_ref().is_none_or(|w| w.is_finished())
    }

    /// Stops sampling, waits (bounded) for the profile to be written and returns what happened.
    pub fn stop(mut self) -> Result<String, String> {
        self.shared.stop.store(true, Ordering::Release);
        self.shared.wake();
        let result = self
            .done
            .recv_timeout(Duration::from_secs(60))
            .unwrap_or_else(|_| Err("the profile writer did not finish within 60 s".into()));
        if let Some(w) = self.writer.take()
            && w.is_finished()
        {
            let _ = w.join();
        }
        result
    }
}

impl Session {
    /// What the session is, for `jvmprof status` and for a refused second session.
    pub fn describe(&self) -> serde_json::Value {
        let o = &self.shared.options;
        let now = unix_ms();
        let mut v = serde_json::json!({
            "running": !self.finished(),
            "modes": o.modes(),
            "interval_ns": o.interval.as_nanos() as u64,
            "engines": self.shared.engines.iter().map(|e| e.name()).collect::<Vec<_>>(),
            "started_unix_ms": self.shared.started_unix_ms,
            "elapsed_ms": now.saturating_sub(self.shared.started_unix_ms),
            "duration_ms": o.duration.map(|d| d.as_millis() as u64),
            "samples": self.shared.samples.load(Ordering::Relaxed),
            "file": o.owner_file.as_ref().or(o.file.as_ref()).map(|f| f.display().to_string()),
            "server": o.server,
            "owner_pid": o.owner.map(|(pid, _)| pid),
        });
        for e in &self.shared.engines {
            for (k, x) in e.status() {
                v[k] = x;
            }
        }
        v
    }
}

/// Now, in Unix milliseconds.
pub fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}
