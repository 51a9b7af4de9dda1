//! Trace mode (`mode=trace`, JaViz): the root engine ([`super::subgraph`]) with every method of
//! the traced classes instrumented at once (no root, no lazy revelation), and each call's entry
//! and exit logged with its time into its thread's ring buffer in Java. This file holds what is
//! particular to tracing:
//!
//! - [`hooks_for`]: the probes put into the JDK's remote-call code, which record each side of a
//!   call with what identifies it without a clock: RMI clients (`UnicastRef.invoke`, the
//!   remote method), RMI servers (`UnicastServerRef.dispatch`), the TCP connection each RMI call
//!   uses (`TCPConnection`'s streams), HTTP clients (`HttpURLConnection`, `HttpClient.send`: a
//!   request header carrying the call's id) and `com.sun.net.httpserver` (`Filter.Chain`,
//!   which reads that header); and the executors' hand-offs (`FutureTask`,
//!   `CompletableFuture`'s async tasks, `ThreadPoolExecutor`), so that a task runs in the call
//!   tree it was made in;
//! - [`context_cell`]: where each thread publishes the call tree it is in, for cpu and wall
//!   samples to carry (`jvmprof convert --trace-id`);
//! - [`Drain`]: the writer thread's poll takes what the rings gained and appends it as one
//!   checksummed chunk (crates/profile `trace::log`) to a file beside the output; at the end that
//!   file follows the profile in the native file. Memory stays bounded: the rings have a fixed
//!   size and nothing is kept in the agent but names already written.

use jvmprof_classfile::subgraph::Hook;
use jvmprof_jvmti::Jni;
use jvmprof_jvmti::classes::GlobalRef;
use jvmprof_profile::trace::log::{self as tracelog, Chunk, Event, Protocol, Side, VmHeader};
use std::collections::{HashMap, HashSet};
use std::io::Write;
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

/// Local variable slots of the hooked methods' arguments (`this` is 0).
const THIS: &[u16] = &[0];
const ARG1: &[u16] = &[1];
const ARG2: &[u16] = &[2];

/// A task object's constructor: it belongs to the creating thread's call tree.
const TASK_MADE: Hook<'static> = Hook::BeforeReturn {
    call: "handedOff",
    args: THIS,
};
/// A task's run method: the worker runs it in the tree it was made in.
const TASK_RUN: Hook<'static> = Hook::Span {
    call: "taskRun",
    args: THIS,
};

/// The remote-call probes for a JDK class (internal name), if it has any.
pub fn hooks_for(class: &str) -> Option<&'static [(&'static str, &'static str, Hook<'static>)]> {
    const SOCKET: Hook<'static> = Hook::EntryField {
        call: "rmiSocket",
        field: "socket",
        descriptor: "Ljava/net/Socket;",
    };
    Some(match class {
        "sun/rmi/server/UnicastRef" => &[(
            "invoke",
            "(Ljava/rmi/Remote;Ljava/lang/reflect/Method;[Ljava/lang/Object;J)Ljava/lang/Object;",
            Hook::Span {
                call: "rmiClient",
                args: ARG2,
            },
        )],
        "sun/rmi/server/UnicastServerRef" => &[(
            "dispatch",
            "(Ljava/rmi/Remote;Ljava/rmi/server/RemoteCall;)V",
            Hook::Span {
                call: "rmiServer",
                args: ARG1,
            },
        )],
        "sun/rmi/transport/tcp/TCPConnection" => &[
            ("getOutputStream", "()Ljava/io/OutputStream;", SOCKET),
            ("getInputStream", "()Ljava/io/InputStream;", SOCKET),
        ],
        "sun/net/www/protocol/http/HttpURLConnection" => &[
            (
                "<init>",
                "(Ljava/net/URL;Ljava/net/Proxy;Lsun/net/www/protocol/http/Handler;)V",
                Hook::BeforeReturn {
                    call: "httpOpened",
                    args: THIS,
                },
            ),
            (
                "getInputStream",
                "()Ljava/io/InputStream;",
                Hook::Span {
                    call: "httpUrlCall",
                    args: THIS,
                },
            ),
        ],
        "jdk/internal/net/http/HttpClientImpl" => &[(
            "send",
            "(Ljava/net/http/HttpRequest;Ljava/net/http/HttpResponse$BodyHandler;)Ljava/net/http/HttpResponse;",
            Hook::SpanReplacing {
                call: "httpSend",
                arg: 1,
                class: "java/net/http/HttpRequest",
            },
        )],
        // Executor hand-offs: a task made or submitted in a call tree runs in that tree on the
        // worker (its samples carry the tree's id). A task object is noted when it is created
        // (FutureTask, CompletableFuture's async tasks) or submitted (ThreadPoolExecutor's
        // execute, for plain Runnables), and taken when it starts running.
        "java/util/concurrent/FutureTask" => &[
            ("<init>", "(Ljava/util/concurrent/Callable;)V", TASK_MADE),
            (
                "<init>",
                "(Ljava/lang/Runnable;Ljava/lang/Object;)V",
                TASK_MADE,
            ),
            ("run", "()V", TASK_RUN),
        ],
        "java/util/concurrent/CompletableFuture$AsyncSupply" => &[
            (
                "<init>",
                "(Ljava/util/concurrent/CompletableFuture;Ljava/util/function/Supplier;)V",
                TASK_MADE,
            ),
            ("run", "()V", TASK_RUN),
        ],
        "java/util/concurrent/CompletableFuture$AsyncRun" => &[
            (
                "<init>",
                "(Ljava/util/concurrent/CompletableFuture;Ljava/lang/Runnable;)V",
                TASK_MADE,
            ),
            ("run", "()V", TASK_RUN),
        ],
        "java/util/concurrent/ThreadPoolExecutor" => &[
            (
                "execute",
                "(Ljava/lang/Runnable;)V",
                Hook::Span {
                    call: "handOff",
                    args: ARG1,
                },
            ),
            (
                "beforeExecute",
                "(Ljava/lang/Thread;Ljava/lang/Runnable;)V",
                Hook::BeforeReturn {
                    call: "taskBegin",
                    args: ARG2,
                },
            ),
            (
                "afterExecute",
                "(Ljava/lang/Runnable;Ljava/lang/Throwable;)V",
                Hook::BeforeReturn {
                    call: "taskEnd",
                    args: ARG1,
                },
            ),
        ],
        "com/sun/net/httpserver/Filter$Chain" => &[(
            "doFilter",
            "(Lcom/sun/net/httpserver/HttpExchange;)V",
            Hook::Span {
                call: "httpServe",
                args: ARG1,
            },
        )],
        _ => return None,
    })
}

/// Every class with remote-call probes.
pub const HOOKED: &[&str] = &[
    "sun/rmi/server/UnicastRef",
    "sun/rmi/server/UnicastServerRef",
    "sun/rmi/transport/tcp/TCPConnection",
    "sun/net/www/protocol/http/HttpURLConnection",
    "jdk/internal/net/http/HttpClientImpl",
    "com/sun/net/httpserver/Filter$Chain",
    "java/util/concurrent/FutureTask",
    "java/util/concurrent/CompletableFuture$AsyncSupply",
    "java/util/concurrent/CompletableFuture$AsyncRun",
    "java/util/concurrent/ThreadPoolExecutor",
];

/// The runtime's `contextCell` native: the calling thread's cell in the thread table, where it
/// writes the id of the call tree it is in for the samplers (cpu: the signal handler reads it
/// by tid; wall: by `Thread.getId()`).
pub fn context_cell(jni: &Jni, java_id: i64) -> Option<&'static std::sync::atomic::AtomicU64> {
    let s = crate::state::get()?;
    s.threads
        .context_cell(jvmprof_jvmti::os::gettid(), jni.as_ptr(), java_id as u64)
}

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

/// A random 64-bit session id, as hex (the prefix of this session's HTTP call ids).
pub fn session_id() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    h.write_u32(std::process::id());
    h.finish()
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
        match std::fs::File::create(&d.path) {
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
