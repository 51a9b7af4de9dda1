//! Trace mode's output ([`Drain`]): the writer thread's poll takes what the threads' event rings
//! in Java gained and appends it as one checksummed chunk (crates/profile `tracelog`) to a file
//! beside the output; at the end that file follows the profile in the native file, and with a
//! collector the same chunks go to it. Memory stays bounded: the rings have a fixed size and
//! nothing is kept in the agent but names already written.

use jvmprof_jvmti::Jni;
use jvmprof_jvmti::classes::GlobalRef;
use jvmprof_profile::trace::log::{self as tracelog, Chunk, Event, Protocol, Side, VmHeader};
use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;

/// Event tags in the Java rings (`Roots.ENTER` ...), the low [`TAG_BITS`] of an event's head.
const ENTER: i64 = 0;
const EXIT: i64 = 1;
const REMOTE: i64 = 2;
const CONNECTION: i64 = 3;
/// A call tree begins: the event's second long is its id, not a time.
const CONTEXT: i64 = 4;
/// The thread's name from here on (a note).
const NAME: i64 = 5;
const TAG_BITS: u32 = 3;
/// An ENTER's bits from here up: the number of the tree it begins on its thread (0: none).
const TREE_SHIFT: u32 = 35;
/// A thread's own tree's id: its `Thread.getId()` shifted by this, or its tree number.
const TREE_ID_SHIFT: u32 = 30;
/// This JVM's default name in joined trees: `host:pid`.
pub fn default_vm_name() -> String {
    format!("{}:{}", host_name(), std::process::id())
}

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".to_string())
}

/// Takes what the Java rings gained into chunks of the trace file.
pub struct Drain {
    path: PathBuf,
    out: Option<std::io::BufWriter<std::fs::File>>,
    header: Option<VmHeader>,
    methods_named: HashSet<u32>,
    threads_named: HashSet<u64>,
    /// Notes drained before the events that refer to them, per thread: index → text.
    notes: HashMap<u64, HashMap<u64, String>>,
    pub dropped: u64,
    pub events: u64,
    pub error: Option<String>,
    /// With a collector: the chunks it has not taken yet (bounded; the oldest go first).
    outbox: Option<(std::collections::VecDeque<Vec<u8>>, usize)>,
    /// Chunks dropped from the outbox because the collector fell behind.
    pub unsent: u64,
}

/// Most bytes of trace chunks waiting for the collector link.
const MAX_OUTBOX: usize = 8 << 20;

impl Drain {
    /// A trace file at `path`, starting with the section marker.
    pub fn new(path: PathBuf, vm: String, session: u64, streaming: bool) -> Drain {
        let mut d = Drain {
            path,
            out: None,
            header: Some(VmHeader {
                vm,
                session,
                host: host_name(),
                pid: std::process::id(),
            }),
            methods_named: HashSet::new(),
            threads_named: HashSet::new(),
            notes: HashMap::new(),
            dropped: 0,
            events: 0,
            error: None,
            outbox: streaming.then(|| (std::collections::VecDeque::new(), 0)),
            unsent: 0,
        };
        // A private intermediate (the calls of the application): 0600, like the temporary
        // directory the CLI gives the agent.
        let created = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&d.path);
        match created {
            Ok(f) => {
                let mut w = std::io::BufWriter::new(f);
                if let Err(e) = w.write_all(tracelog::SECTION) {
                    d.error = Some(format!("cannot write {}: {e}", d.path.display()));
                } else {
                    d.out = Some(w);
                }
            }
            Err(e) => d.error = Some(format!("cannot create {}: {e}", d.path.display())),
        }
        d
    }

    pub fn path(&self) -> &PathBuf {
        &self.path
    }

    /// Drains every thread's ring into one chunk; `names(id)` gives a method's name.
    pub fn drain(&mut self, jni: &Jni, roots: GlobalRef, names: &dyn Fn(u32) -> Option<String>) {
        let Some(n) = jni.call_static_int(roots, "threads", "()I", &[]) else {
            return;
        };
        let mut chunk = Chunk {
            vm: self.header.take(),
            ..Chunk::default()
        };
        let mut dropped = 0u64;
        for i in 0..n.max(0) {
            jni.with_local_frame(16, || {
                let Some(raw) = jni.call_static_long_array(roots, "drain", "(I)[J", &[i]) else {
                    return;
                };
                if raw.len() < 2 {
                    return;
                }
                let (thread, thread_dropped) = (raw[0] as u64, raw[1].max(0) as u64);
                dropped += thread_dropped;
                let notes = jni
                    .call_static_string_array(roots, "drainNotes", "(I)[Ljava/lang/String;", &[i])
                    .unwrap_or_default();
                let pending = self.notes.entry(thread).or_default();
                if let Some(first) = notes
                    .first()
                    .and_then(|f| f.as_deref()?.parse::<u64>().ok())
                {
                    for (k, text) in notes.iter().skip(1).enumerate() {
                        if let Some(t) = text {
                            pending.insert(first + k as u64, t.clone());
                        }
                    }
                }
                let pairs = &raw[2..];
                if pairs.is_empty() {
                    return;
                }
                if self.threads_named.insert(thread) {
                    let name = jni
                        .call_static_string(roots, "threadName", "(I)Ljava/lang/String;", &[i])
                        .unwrap_or_else(|| format!("thread {thread}"));
                    chunk.threads.push((thread, name));
                }
                let mut events = Vec::with_capacity(pairs.len() / 2);
                let mut last_ns = 0;
                for p in pairs.chunks_exact(2) {
                    let (head, ns) = (p[0], p[1]);
                    let payload = (head as u64) >> TAG_BITS;
                    let tag = head & ((1 << TAG_BITS) - 1);
                    if tag == CONTEXT {
                        events.push(Event::Context {
                            id: ns as u64,
                            ns: last_ns,
                        });
                        continue;
                    }
                    last_ns = ns;
                    match tag {
                        ENTER => {
                            let method = payload as u32;
                            let tree = (head as u64) >> TREE_SHIFT;
                            if self.methods_named.insert(method) {
                                chunk.methods.push((
                                    method,
                                    names(method).unwrap_or_else(|| format!("[method #{method}]")),
                                ));
                            }
                            events.push(Event::Enter { method, ns });
                            if tree != 0 {
                                events.push(Event::Context {
                                    id: (thread << TREE_ID_SHIFT) | tree,
                                    ns,
                                });
                            }
                        }
                        EXIT => events.push(Event::Exit { ns }),
                        REMOTE => {
                            let text = pending.remove(&payload).unwrap_or_default();
                            let mut f = text.splitn(4, '\0');
                            let side = match f.next() {
                                Some("server") => Side::Server,
                                _ => Side::Client,
                            };
                            let protocol = match f.next() {
                                Some("http") => Protocol::Http,
                                _ => Protocol::Rmi,
                            };
                            events.push(Event::Remote {
                                side,
                                protocol,
                                key: f.next().unwrap_or("").to_string(),
                                label: f.next().unwrap_or("").to_string(),
                                ns,
                            });
                        }
                        NAME => {
                            let name = pending.remove(&payload).unwrap_or_default();
                            events.push(Event::Thread { name, ns });
                        }
                        CONNECTION => {
                            let text = pending.remove(&payload).unwrap_or_default();
                            let (local, remote) = text.split_once('\0').unwrap_or((&text, ""));
                            events.push(Event::Connection {
                                local: local.to_string(),
                                remote: remote.to_string(),
                                ns,
                            });
                        }
                        _ => {}
                    }
                }
                self.events += events.len() as u64;
                chunk.events.push((thread, events));
            });
        }
        self.dropped = dropped;
        chunk.dropped_calls = dropped;
        if chunk.vm.is_none()
            && chunk.events.is_empty()
            && chunk.threads.is_empty()
            && chunk.methods.is_empty()
        {
            return;
        }
        let mut bytes = Vec::new();
        if let Err(e) = tracelog::write_chunk(&chunk, &mut bytes) {
            self.error = Some(format!("a trace chunk could not be encoded: {e}"));
            return;
        }
        if let Some(out) = self.out.as_mut()
            && let Err(e) = out.write_all(&bytes).and_then(|_| out.flush())
        {
            self.error = Some(format!("cannot write {}: {e}", self.path.display()));
            self.out = None;
        }
        if let Some((queue, size)) = self.outbox.as_mut() {
            *size += bytes.len();
            queue.push_back(bytes);
            while *size > MAX_OUTBOX
                && let Some(old) = queue.pop_front()
            {
                *size -= old.len();
                self.unsent += 1;
            }
        }
    }

    /// The chunks for the collector link since the last call.
    pub fn take_outbox(&mut self) -> Vec<Vec<u8>> {
        match self.outbox.as_mut() {
            Some((queue, size)) => {
                *size = 0;
                queue.drain(..).collect()
            }
            None => Vec::new(),
        }
    }

    /// Flushes and closes the file.
    pub fn close(&mut self) {
        if let Some(mut out) = self.out.take() {
            let _ = out.flush();
        }
    }
}

impl Drop for Drain {
    fn drop(&mut self) {
        self.close();
    }
}
