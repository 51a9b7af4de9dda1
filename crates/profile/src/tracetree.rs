//! One execution tree across JVMs (JaViz): `jvmprof trace FILE... -o OUT` joins the method
//! traces several VMs recorded ([`crate::tracelog`]) at their remote calls, without
//! synchronising their clocks.
//!
//! Per VM and thread the events form activation trees: `Enter` and `Remote` open a node, `Exit`
//! closes the innermost open one (surplus exits are counted and ignored), and what is still
//! open at the thread's last event closes there, marked incomplete. A remote call has a client
//! span on the calling thread and a server span on the serving one; they are matched by what
//! both sides saw, never by time:
//!
//! - HTTP: equal, non-empty keys (the caller's call id, which the server read from the
//!   request header).
//! - RMI: the TCP connection and the call's place on it. A client span's connection is its
//!   thread's current connection at the span's end, a server span's the one current at its
//!   start (or one set inside it before any child). Each side numbers its spans per
//!   connection in the order of their starts on its own clock; the client's `n`th call on
//!   (local L, remote R) is the server's `n`th on (local R, remote L), provided the method
//!   names (after the last `.` of the keys) agree where both are known. A connection carries
//!   one call at a time, so both sides see the same order whatever threads shared it.
//!
//! A matched server span becomes the child of its client span (after the client's own
//! children); when it has exactly one child method, that method stands for it. Every recorded
//! activation appears exactly once in the joined tree. Times stay on each VM's own clock;
//! viewers that need one timeline (the HTML page, the Chrome trace) centre each served
//! subtree inside its client span ([`Joined::walk`]'s `placed_ns`), which shows nesting, not
//! synchronised time.
//!
//! Nothing here recurses over the depth of a tree: a recursion thousands deep is walked,
//! written and read back with explicit stacks.

use crate::methods::MethodStat;
use crate::tracelog::{Event, Protocol, Side, ThreadTrace, VmTrace};
use std::collections::HashMap;
use std::io::{self, Write};
use std::net::IpAddr;
use std::path::Path;

const NONE: u32 = u32::MAX;

// Node flags.
const CLIENT: u8 = 1;
const SERVER: u8 = 2;
const UNMATCHED: u8 = 4;
const INCOMPLETE: u8 = 8;
/// A matched server span: shown under its client, not where its thread had it.
const MOVED: u8 = 16;
/// A server span with exactly one child method, which is shown in its place.
const COLLAPSED: u8 = 32;
/// At the top of its thread (not inside another activation).
const TOP: u8 = 64;

/// What the HTML page and the Chrome trace say about their common timeline.
pub const PLACEMENT_NOTE: &str = "server times are placed inside their client calls (centred), \
     not synchronised; other activity of a VM that serves calls is shifted by the median \
     placement of those calls";

/// One VM's recording, as read from a `.jvmprof` file.
#[derive(Debug)]
pub struct Recording {
    /// The file (or other origin) in messages.
    pub origin: String,
    pub trace: VmTrace,
    /// Where and why the trace section is damaged; `trace` holds what came before.
    pub damage: Option<String>,
}

/// Reads the traces of a native file. Errors are whole messages naming `origin`.
pub fn read_recording(bytes: &[u8], origin: &str) -> Result<Recording, String> {
    match crate::native::read_trace(bytes, origin) {
        Ok(Some((trace, damage))) => Ok(Recording {
            origin: origin.to_string(),
            trace,
            damage,
        }),
        Ok(None) => Err(format!(
            "{origin} has no method traces; record with --mode trace"
        )),
        Err(crate::Error::NotJvmprof) => Err(format!(
            "{origin} is not a jvmprof file (no JVMPROF magic header); record with --mode trace \
             -o FILE.jvmprof"
        )),
        Err(e) => {
            let m = e.to_string();
            Err(if m.contains(origin) {
                m
            } else {
                format!("{origin}: {m}")
            })
        }
    }
}

/// The output formats of `jvmprof trace`, by the extension of the output file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutputFormat {
    /// `.json`: the tree with each VM's own times, notes and statistics.
    Json,
    /// `.txt`: an indented tree, then the statistics and notes.
    Text,
    /// `.html`: a self-contained page with an expandable tree.
    Html,
    /// `.trace.json`: Chrome trace / Perfetto, one process per VM, one track per thread.
    ChromeTrace,
}

impl OutputFormat {
    /// The extensions, as error messages list them.
    pub const SUPPORTED: &'static str = ".json, .txt, .html, .trace.json";

    pub fn from_path(path: &Path) -> Result<OutputFormat, String> {
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().to_lowercase())
            .unwrap_or_default();
        if name.ends_with(".trace.json") {
            Ok(OutputFormat::ChromeTrace)
        } else if name.ends_with(".json") {
            Ok(OutputFormat::Json)
        } else if name.ends_with(".txt") {
            Ok(OutputFormat::Text)
        } else if name.ends_with(".html") || name.ends_with(".htm") {
            Ok(OutputFormat::Html)
        } else {
            Err(format!(
                "cannot tell the output format of {}: the supported extensions are {}",
                path.display(),
                Self::SUPPORTED
            ))
        }
    }
}

/// Which side of a remote call a node is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// The caller's side: the remote method as called, on the caller's clock.
    Client,
    /// The callee's side: the served method, on the server's clock.
    Server,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Client => "client",
            Kind::Server => "server",
        }
    }
}

/// One node of the joined tree as [`Joined::walk`] shows it.
#[derive(Clone, Copy, Debug)]
pub struct NodeView<'a> {
    pub vm: &'a str,
    pub thread: &'a str,
    pub method: &'a str,
    /// On the node's own VM clock.
    pub start_ns: i64,
    pub duration_ns: i64,
    pub kind: Option<Kind>,
    pub unmatched: bool,
    pub incomplete: bool,
    /// Roots are 0.
    pub depth: usize,
    /// The start on the viewers' common timeline (see [`PLACEMENT_NOTE`]).
    pub placed_ns: i64,
    /// The VM's place among the inputs.
    pub vm_index: usize,
    /// The thread's place among all threads of all VMs.
    pub thread_index: usize,
    /// `Thread.getId()` on its VM.
    pub thread_id: u64,
    /// For both sides of a matched remote call, the same number.
    pub call: Option<u32>,
    /// On a node that starts a call tree on its thread (a root, a served remote call, a task
    /// handed over from another tree): the id the samples taken in that tree carry (trace
    /// mode beside cpu or wall sampling; `jvmprof convert FILE --trace-id ID` cuts them out).
    pub trace_id: Option<u64>,
    name: u32,
}

/// A step of a depth-first walk: a node starts (its children follow), or the innermost open
/// node ends.
#[derive(Clone, Copy, Debug)]
pub enum Visit<'a> {
    Open(NodeView<'a>),
    Close,
}

#[derive(Clone, Debug)]
struct Node {
    start: i64,
    end: i64,
    /// Into `names`: the method, or a span's label.
    name: u32,
    thread: u32,
    first_child: u32,
    /// The next sibling (or the next top-level activation of the thread).
    next: u32,
    flags: u8,
}

impl Node {
    fn duration(&self) -> i64 {
        self.end - self.start
    }
}

#[derive(Debug)]
struct Span {
    node: u32,
    side: Side,
    protocol: Protocol,
    key: Box<str>,
    /// RMI: the connection, into `conns`.
    conn: u32,
    /// The span on the other side, once matched.
    peer: u32,
}

#[derive(Debug)]
struct ThreadInfo {
    vm: u32,
    id: u64,
    name: String,
    first_top: u32,
}

#[derive(Debug, Default)]
struct VmInfo {
    name: String,
    dropped_calls: u64,
    surplus_exits: u64,
    incomplete: u64,
}

/// A TCP endpoint as both sides can compare it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Endpoint {
    addr: Addr,
    port: Option<u16>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Addr {
    Loopback,
    /// `0.0.0.0`, `::` or nothing: compatible with any address.
    Any,
    Ip(IpAddr),
    /// A name that is not an address literal: compatible with any address, equal to itself.
    Host(String),
}

impl Endpoint {
    /// `addr:port`, `host/addr:port`, `/addr:port`, `[v6]:port` or `v6:port`.
    fn parse(s: &str) -> Endpoint {
        let s = s.trim();
        let s = s.rsplit_once('/').map_or(s, |(_, a)| a);
        let (addr, port) = match s.rsplit_once(':') {
            Some((a, p)) if p.chars().all(|c| c.is_ascii_digit()) && !p.is_empty() => {
                (a, p.parse::<u16>().ok())
            }
            _ => (s, None),
        };
        let addr = addr.trim_start_matches('[').trim_end_matches(']');
        let addr = if addr.is_empty() || addr == "*" {
            Addr::Any
        } else if addr.eq_ignore_ascii_case("localhost") {
            Addr::Loopback
        } else if let Ok(ip) = addr.parse::<IpAddr>() {
            let ip = match ip {
                IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
                v4 => v4,
            };
            if ip.is_loopback() {
                Addr::Loopback
            } else if ip.is_unspecified() {
                Addr::Any
            } else {
                Addr::Ip(ip)
            }
        } else {
            Addr::Host(addr.to_ascii_lowercase())
        };
        Endpoint { addr, port }
    }

    /// 2 when equal, 1 when they may be the same, 0 when not.
    fn agreement(&self, other: &Endpoint) -> u8 {
        if self.port.is_none() || self.port != other.port {
            return 0;
        }
        match (&self.addr, &other.addr) {
            (a, b) if a == b => 2,
            (Addr::Any, _) | (_, Addr::Any) | (Addr::Host(_), _) | (_, Addr::Host(_)) => 1,
            _ => 0,
        }
    }
}

#[derive(Debug)]
struct Conn {
    local: Endpoint,
    remote: Endpoint,
}

/// Collects VM recordings one at a time (each is turned into nodes and dropped as it is
/// added), then [`finish`](Joiner::finish)es the join.
#[derive(Default)]
pub struct Joiner {
    nodes: Vec<Node>,
    spans: Vec<Span>,
    threads: Vec<ThreadInfo>,
    vms: Vec<VmInfo>,
    names: Vec<String>,
    conns: Vec<Conn>,
    conn_ids: HashMap<(u32, String, String), u32>,
    notes: Vec<String>,
    /// Top-level node → the call tree id its samples carry ([`Event::Context`]).
    contexts: HashMap<u32, u64>,
}

/// Joins recordings (see [`Joiner`]).
pub fn join(recordings: impl IntoIterator<Item = Recording>) -> Joined {
    let mut j = Joiner::new();
    for r in recordings {
        j.add(r);
    }
    j.finish()
}

fn intern(names: &mut Vec<String>, extra: &mut HashMap<String, u32>, s: String) -> u32 {
    if let Some(&id) = extra.get(&s) {
        return id;
    }
    let id = names.len() as u32;
    names.push(s.clone());
    extra.insert(s, id);
    id
}

struct Open {
    node: u32,
    last_child: u32,
    /// Into `spans`, or NONE for a method.
    span: u32,
}

impl Joiner {
    pub fn new() -> Joiner {
        Joiner::default()
    }

    /// Adds one VM's recording; its damage message (if any) becomes a note.
    pub fn add(&mut self, recording: Recording) {
        let Recording {
            origin,
            trace,
            damage,
        } = recording;
        let vm = self.vms.len() as u32;
        let mut name = if trace.vm.is_empty() {
            origin.clone()
        } else {
            trace.vm.clone()
        };
        if self.vms.iter().any(|v| v.name == name) {
            let base = name.clone();
            let mut k = 2;
            while self.vms.iter().any(|v| v.name == format!("{base} ({k})")) {
                k += 1;
            }
            name = format!("{base} ({k})");
            self.notes.push(format!(
                "{origin}: another file already has VM {base:?}; this one is {name:?} here"
            ));
        }
        if let Some(d) = damage {
            self.notes.push(d);
        }
        let base = self.names.len() as u32;
        let method_count = trace.methods.len() as u32;
        for (i, m) in trace.methods.into_iter().enumerate() {
            self.names.push(if m.is_empty() {
                format!("[method {i}]")
            } else {
                m
            });
        }
        let mut info = VmInfo {
            name,
            dropped_calls: trace.dropped_calls,
            ..VmInfo::default()
        };
        let mut extra = HashMap::new();
        for t in trace.threads {
            self.add_thread(vm, t, base, method_count, &mut extra, &mut info);
        }
        self.vms.push(info);
    }

    fn add_thread(
        &mut self,
        vm: u32,
        t: ThreadTrace,
        base: u32,
        method_count: u32,
        extra: &mut HashMap<String, u32>,
        info: &mut VmInfo,
    ) {
        let mut ti = self.threads.len() as u32;
        self.threads.push(ThreadInfo {
            vm,
            id: t.id,
            name: if t.name.is_empty() {
                format!("thread {}", t.id)
            } else {
                t.name
            },
            first_top: NONE,
        });
        let mut stack: Vec<Open> = Vec::new();
        let mut last_top = NONE;
        let mut conn = NONE;
        let mut last_ns = i64::MIN;
        for e in t.events {
            let ns = e.ns();
            last_ns = ns;
            let (name, flags, span) = match e {
                Event::Enter { method, .. } => {
                    let name = if method < method_count {
                        base + method
                    } else {
                        intern(&mut self.names, extra, format!("[method {method}]"))
                    };
                    (name, 0, None)
                }
                Event::Remote {
                    side,
                    protocol,
                    key,
                    label,
                    ..
                } => {
                    let label = if label.is_empty() { key.clone() } else { label };
                    let name = intern(&mut self.names, extra, label);
                    let flags = match side {
                        Side::Client => CLIENT,
                        Side::Server => SERVER,
                    };
                    let span = Span {
                        node: self.nodes.len() as u32,
                        side,
                        protocol,
                        key: key.into_boxed_str(),
                        conn: if side == Side::Server && protocol == Protocol::Rmi {
                            conn
                        } else {
                            NONE
                        },
                        peer: NONE,
                    };
                    (name, flags, Some(span))
                }
                Event::Exit { .. } => {
                    match stack.pop() {
                        None => info.surplus_exits += 1,
                        Some(open) => {
                            let n = &mut self.nodes[open.node as usize];
                            n.end = ns.max(n.start);
                            if open.span != NONE {
                                let s = &mut self.spans[open.span as usize];
                                if s.side == Side::Client && s.protocol == Protocol::Rmi {
                                    s.conn = conn;
                                }
                            }
                        }
                    }
                    continue;
                }
                Event::Thread { name, .. } => {
                    let current = &self.threads[ti as usize];
                    if stack.is_empty() && !name.is_empty() && name != current.name {
                        if current.first_top == NONE {
                            self.threads[ti as usize].name = name;
                        } else {
                            // Renamed: the trees from here on are on the thread by its new name.
                            ti = self.threads.len() as u32;
                            self.threads.push(ThreadInfo {
                                vm,
                                id: t.id,
                                name,
                                first_top: NONE,
                            });
                            last_top = NONE;
                        }
                    }
                    continue;
                }
                Event::Context { id, .. } => {
                    if let [top] = stack.as_slice() {
                        self.contexts.insert(top.node, id);
                    }
                    continue;
                }
                Event::Connection { local, remote, .. } => {
                    conn = self.connection(vm, local, remote);
                    // A server span takes a connection set inside it before any child.
                    if let Some(top) = stack.last()
                        && top.span != NONE
                        && top.last_child == NONE
                    {
                        let s = &mut self.spans[top.span as usize];
                        if s.side == Side::Server && s.protocol == Protocol::Rmi {
                            s.conn = conn;
                        }
                    }
                    continue;
                }
            };
            let id = self.nodes.len() as u32;
            self.nodes.push(Node {
                start: ns,
                end: ns,
                name,
                thread: ti,
                first_child: NONE,
                next: NONE,
                flags: if stack.is_empty() { flags | TOP } else { flags },
            });
            match stack.last_mut() {
                Some(top) => {
                    if top.last_child == NONE {
                        self.nodes[top.node as usize].first_child = id;
                    } else {
                        self.nodes[top.last_child as usize].next = id;
                    }
                    top.last_child = id;
                }
                None => {
                    if last_top == NONE {
                        self.threads[ti as usize].first_top = id;
                    } else {
                        self.nodes[last_top as usize].next = id;
                    }
                    last_top = id;
                }
            }
            let span_index = match span {
                Some(s) => {
                    self.spans.push(s);
                    self.spans.len() as u32 - 1
                }
                None => NONE,
            };
            stack.push(Open {
                node: id,
                last_child: NONE,
                span: span_index,
            });
        }
        for open in stack {
            let n = &mut self.nodes[open.node as usize];
            n.end = last_ns.max(n.start);
            n.flags |= INCOMPLETE;
            info.incomplete += 1;
            if open.span != NONE {
                let s = &mut self.spans[open.span as usize];
                if s.side == Side::Client && s.protocol == Protocol::Rmi {
                    s.conn = conn;
                }
            }
        }
    }

    fn connection(&mut self, vm: u32, local: String, remote: String) -> u32 {
        use std::collections::hash_map::Entry;
        let next = self.conns.len() as u32;
        match self.conn_ids.entry((vm, local, remote)) {
            Entry::Occupied(e) => *e.get(),
            Entry::Vacant(e) => {
                let (_, l, r) = e.key();
                self.conns.push(Conn {
                    local: Endpoint::parse(l),
                    remote: Endpoint::parse(r),
                });
                e.insert(next);
                next
            }
        }
    }

    /// Matches the remote calls and builds the joined tree.
    pub fn finish(self) -> Joined {
        let Joiner {
            mut nodes,
            mut spans,
            threads,
            vms,
            names,
            conns,
            conn_ids: _,
            mut notes,
            contexts,
        } = self;
        let mut activations = vec![0u64; vms.len()];
        for n in &nodes {
            activations[threads[n.thread as usize].vm as usize] += 1;
        }
        for (v, &count) in vms.iter().zip(&activations) {
            if count == 0 {
                notes.push(format!(
                    "{}: its recording holds no calls (did the include patterns match its \
                     classes?)",
                    v.name
                ));
            }
            if v.dropped_calls > 0 {
                notes.push(format!(
                    "{}: {} calls were not recorded (a thread's trace buffer was full)",
                    v.name, v.dropped_calls
                ));
            }
            if v.surplus_exits > 0 {
                notes.push(format!(
                    "{}: {} exits without an open call were ignored",
                    v.name, v.surplus_exits
                ));
            }
            if v.incomplete > 0 {
                notes.push(format!(
                    "{}: {} calls were still open at their thread's last event (closed there, \
                     marked incomplete)",
                    v.name, v.incomplete
                ));
            }
        }
        let (duplicate_keys, name_mismatches) = match_calls(&nodes, &mut spans, &conns);
        if duplicate_keys > 0 {
            notes.push(format!(
                "{duplicate_keys} HTTP calls share their call id with another call: only the \
                 first of each is matched"
            ));
        }
        if name_mismatches > 0 {
            notes.push(format!(
                "{name_mismatches} RMI calls were left unmatched because the server's call at \
                 the same place on the connection is another method (a call missing from one \
                 side's recording?)"
            ));
        }
        for s in &spans {
            let n = &mut nodes[s.node as usize];
            if s.peer == NONE {
                n.flags |= UNMATCHED;
            } else if s.side == Side::Server {
                n.flags |= MOVED;
            }
        }
        for s in spans.iter().filter(|s| s.side == Side::Server) {
            let n = &nodes[s.node as usize];
            let c = n.first_child;
            if c != NONE
                && nodes[c as usize].next == NONE
                && nodes[c as usize].flags & (CLIENT | SERVER) == 0
            {
                nodes[s.node as usize].flags |= COLLAPSED;
            }
        }
        let mut joined = Joined {
            nodes,
            spans,
            threads,
            vms,
            names,
            roots: Vec::new(),
            vm_offset: Vec::new(),
            groups: Vec::new(),
            notes,
            stats: Vec::new(),
            contexts,
        };
        joined.vm_offset = vec![0; joined.vms.len()];
        joined.collect_roots();
        joined.break_cycles();
        joined.group_and_place();
        joined.count_unmatched();
        joined.stats = joined.compute_stats();
        joined
    }
}

/// The method name of an RMI key (`pkg.Class.method`, `method`, maybe with a descriptor).
fn rmi_method(key: &str) -> &str {
    let key = key.split_once('(').map_or(key, |(k, _)| k);
    key.rsplit_once('.').map_or(key, |(_, m)| m)
}

/// Pairs client and server spans (setting `peer` on both); returns the HTTP keys seen twice
/// and the RMI pairs refused for their method names.
fn match_calls(nodes: &[Node], spans: &mut [Span], conns: &[Conn]) -> (u64, u64) {
    let mut pairs: Vec<(u32, u32)> = Vec::new();
    // HTTP: by key.
    let mut servers: HashMap<&str, u32> = HashMap::new();
    let mut duplicates = 0u64;
    for (i, s) in spans.iter().enumerate() {
        if s.protocol == Protocol::Http && s.side == Side::Server && !s.key.is_empty() {
            use std::collections::hash_map::Entry;
            match servers.entry(&s.key) {
                Entry::Occupied(_) => duplicates += 1,
                Entry::Vacant(e) => {
                    e.insert(i as u32);
                }
            }
        }
    }
    for (i, s) in spans.iter().enumerate() {
        if s.protocol == Protocol::Http
            && s.side == Side::Client
            && !s.key.is_empty()
            && let Some(server) = servers.remove(&*s.key)
        {
            pairs.push((i as u32, server));
        }
    }
    drop(servers);
    // RMI: by connection and the call's place on it.
    let rmi = |side: Side| -> Vec<(u32, i64, u32)> {
        let mut v: Vec<(u32, i64, u32)> = spans
            .iter()
            .enumerate()
            .filter(|(_, s)| s.protocol == Protocol::Rmi && s.side == side && s.conn != NONE)
            .map(|(i, s)| (s.conn, nodes[s.node as usize].start, i as u32))
            .collect();
        v.sort_unstable();
        v
    };
    let clients = rmi(Side::Client);
    let servers = rmi(Side::Server);
    let mut by_conn: HashMap<u32, (usize, usize)> = HashMap::new();
    let mut by_ports: HashMap<(u16, u16), Vec<u32>> = HashMap::new();
    let mut at = 0;
    for group in servers.chunk_by(|a, b| a.0 == b.0) {
        let conn = group[0].0;
        by_conn.insert(conn, (at, at + group.len()));
        at += group.len();
        let c = &conns[conn as usize];
        if let (Some(l), Some(r)) = (c.local.port, c.remote.port) {
            by_ports.entry((l, r)).or_default().push(conn);
        }
    }
    let mut server_taken = vec![false; spans.len()];
    for &(_, s) in &pairs {
        server_taken[s as usize] = true;
    }
    let mut mismatches = 0u64;
    for group in clients.chunk_by(|a, b| a.0 == b.0) {
        let c = &conns[group[0].0 as usize];
        let (Some(l), Some(r)) = (c.local.port, c.remote.port) else {
            continue;
        };
        let Some(candidates) = by_ports.get(&(r, l)) else {
            continue;
        };
        let mut best: Option<(u8, u32)> = None;
        for &sc in candidates {
            let s = &conns[sc as usize];
            let (a, b) = (s.local.agreement(&c.remote), s.remote.agreement(&c.local));
            if a == 0 || b == 0 {
                continue;
            }
            if best.is_none_or(|(score, _)| a + b > score) {
                best = Some((a + b, sc));
            }
        }
        let Some((_, sc)) = best else { continue };
        let (from, to) = by_conn[&sc];
        for (client, server) in group.iter().zip(&servers[from..to]) {
            let (ci, si) = (client.2, server.2);
            if server_taken[si as usize] {
                continue;
            }
            let (ck, sk) = (&spans[ci as usize].key, &spans[si as usize].key);
            if !ck.is_empty() && !sk.is_empty() && rmi_method(ck) != rmi_method(sk) {
                mismatches += 1;
                continue;
            }
            server_taken[si as usize] = true;
            pairs.push((ci, si));
        }
    }
    for (c, s) in pairs {
        spans[c as usize].peer = s;
        spans[s as usize].peer = c;
    }
    (duplicates, mismatches)
}

/// Per-method statistics accumulator (Welford).
#[derive(Clone, Copy, Default)]
struct Acc {
    count: u64,
    total: u128,
    min: i64,
    max: i64,
    mean: f64,
    m2: f64,
}

impl Acc {
    fn add(&mut self, d: i64) {
        if self.count == 0 {
            self.min = d;
            self.max = d;
        } else {
            self.min = self.min.min(d);
            self.max = self.max.max(d);
        }
        self.count += 1;
        self.total += d.max(0) as u128;
        let x = d as f64;
        let delta = x - self.mean;
        self.mean += delta / self.count as f64;
        self.m2 += delta * (x - self.mean);
    }
}

/// The joined tree of several VMs' traces.
pub struct Joined {
    nodes: Vec<Node>,
    spans: Vec<Span>,
    threads: Vec<ThreadInfo>,
    vms: Vec<VmInfo>,
    names: Vec<String>,
    /// Top-level nodes shown as roots, by VM then start.
    roots: Vec<u32>,
    /// Where each VM's roots go on the viewers' common timeline.
    vm_offset: Vec<i64>,
    groups: Vec<Vec<u32>>,
    notes: Vec<String>,
    stats: Vec<Vec<MethodStat>>,
    /// Top-level node → its call tree id (see [`NodeView::trace_id`]).
    contexts: HashMap<u32, u64>,
}

/// What a node is shown as: a collapsed server span shows its only child.
#[derive(Clone, Copy)]
struct Shown {
    node: u32,
    flags: u8,
    /// The span node, for a server span shown as its child.
    span_node: u32,
}

/// A frame of the walk's explicit stack.
struct Frame {
    node: u32,
    cursor: u32,
    attached: u32,
    offset: i64,
}

impl Joined {
    /// The VM names, in input order.
    pub fn vms(&self) -> impl Iterator<Item = &str> {
        self.vms.iter().map(|v| v.name.as_str())
    }

    /// What the join noticed: damage, dropped and incomplete calls, unmatched calls, VMs that
    /// share no call.
    pub fn notes(&self) -> &[String] {
        &self.notes
    }

    /// Groups of VMs (indices) that remote calls connect; one per separate tree family.
    pub fn groups(&self) -> &[Vec<u32>] {
        &self.groups
    }

    /// Per VM (in input order): every method's count and inclusive times, by total descending.
    pub fn stats(&self) -> impl Iterator<Item = (&str, &[MethodStat])> {
        self.vms
            .iter()
            .zip(&self.stats)
            .map(|(v, s)| (v.name.as_str(), s.as_slice()))
    }

    /// The number of roots.
    pub fn root_count(&self) -> usize {
        self.roots.len()
    }

    fn span_of(&self, node: u32) -> Option<&Span> {
        self.spans
            .binary_search_by_key(&node, |s| s.node)
            .ok()
            .map(|i| &self.spans[i])
    }

    fn shown(&self, node: u32) -> Shown {
        let n = &self.nodes[node as usize];
        if n.flags & COLLAPSED != 0 {
            let c = n.first_child;
            Shown {
                node: c,
                flags: (n.flags & (SERVER | UNMATCHED | INCOMPLETE))
                    | (self.nodes[c as usize].flags & INCOMPLETE),
                span_node: node,
            }
        } else {
            Shown {
                node,
                flags: n.flags,
                span_node: node,
            }
        }
    }

    fn collect_roots(&mut self) {
        let mut roots = Vec::new();
        for t in &self.threads {
            let mut n = t.first_top;
            while n != NONE {
                if self.nodes[n as usize].flags & MOVED == 0 {
                    roots.push(n);
                }
                n = self.nodes[n as usize].next;
            }
        }
        self.sort_roots(&mut roots);
        self.roots = roots;
    }

    fn sort_roots(&self, roots: &mut [u32]) {
        roots.sort_unstable_by_key(|&r| {
            let n = &self.nodes[r as usize];
            (self.threads[n.thread as usize].vm, n.start, n.thread, r)
        });
    }

    /// Walks the joined tree depth first: `Open` for every node, `Close` after its children.
    /// Stops at the first error `visit` returns.
    pub fn walk<'a, E>(
        &'a self,
        mut visit: impl FnMut(Visit<'a>) -> Result<(), E>,
    ) -> Result<(), E> {
        let mut stack: Vec<Frame> = Vec::new();
        for &root in &self.roots {
            let shown = self.shown(root);
            let vm = self.threads[self.nodes[shown.node as usize].thread as usize].vm;
            let offset = self.vm_offset[vm as usize];
            visit(Visit::Open(self.view(shown, 0, offset)))?;
            stack.push(self.frame(shown.node, offset));
            while let Some(top) = stack.last_mut() {
                let mut next = None;
                while top.cursor != NONE {
                    let c = top.cursor;
                    top.cursor = self.nodes[c as usize].next;
                    if self.nodes[c as usize].flags & MOVED == 0 {
                        next = Some((c, top.offset));
                        break;
                    }
                }
                if next.is_none() && top.attached != NONE {
                    let s = top.attached;
                    top.attached = NONE;
                    let client = &self.nodes[top.node as usize];
                    let server = &self.nodes[self.shown(s).node as usize];
                    let offset =
                        client.start + top.offset + (client.duration() - server.duration()) / 2
                            - server.start;
                    next = Some((s, offset));
                }
                match next {
                    Some((c, offset)) => {
                        let shown = self.shown(c);
                        visit(Visit::Open(self.view(shown, stack.len(), offset)))?;
                        stack.push(self.frame(shown.node, offset));
                    }
                    None => {
                        stack.pop();
                        visit(Visit::Close)?;
                    }
                }
            }
        }
        Ok(())
    }

    fn frame(&self, node: u32, offset: i64) -> Frame {
        let n = &self.nodes[node as usize];
        let attached = if n.flags & CLIENT != 0 {
            self.span_of(node)
                .filter(|s| s.peer != NONE)
                .map_or(NONE, |s| self.spans[s.peer as usize].node)
        } else {
            NONE
        };
        Frame {
            node,
            cursor: n.first_child,
            attached,
            offset,
        }
    }

    fn view(&self, shown: Shown, depth: usize, offset: i64) -> NodeView<'_> {
        let n = &self.nodes[shown.node as usize];
        let t = &self.threads[n.thread as usize];
        let kind = if shown.flags & CLIENT != 0 {
            Some(Kind::Client)
        } else if shown.flags & SERVER != 0 {
            Some(Kind::Server)
        } else {
            None
        };
        let call = match kind {
            Some(Kind::Client) => self
                .span_of(shown.span_node)
                .filter(|s| s.peer != NONE)
                .map(|_| shown.span_node),
            Some(Kind::Server) => self
                .span_of(shown.span_node)
                .filter(|s| s.peer != NONE)
                .map(|s| self.spans[s.peer as usize].node),
            None => None,
        };
        NodeView {
            vm: &self.vms[t.vm as usize].name,
            thread: &t.name,
            method: &self.names[n.name as usize],
            start_ns: n.start,
            duration_ns: n.duration(),
            kind,
            unmatched: shown.flags & UNMATCHED != 0,
            incomplete: shown.flags & INCOMPLETE != 0,
            depth,
            placed_ns: n.start.saturating_add(offset),
            vm_index: t.vm as usize,
            thread_index: n.thread as usize,
            thread_id: t.id,
            call,
            trace_id: self
                .contexts
                .get(&shown.node)
                .or_else(|| self.contexts.get(&shown.span_node))
                .copied(),
            name: n.name,
        }
    }

    /// The nodes a walk reaches (by the node shown), to find matches that made a cycle.
    fn reached(&self) -> Vec<bool> {
        let mut seen = vec![false; self.nodes.len()];
        let mut stack: Vec<u32> = self.roots.iter().map(|&r| self.shown(r).node).collect();
        while let Some(n) = stack.pop() {
            if std::mem::replace(&mut seen[n as usize], true) {
                continue;
            }
            let f = self.frame(n, 0);
            let mut c = f.cursor;
            while c != NONE {
                if self.nodes[c as usize].flags & MOVED == 0 {
                    stack.push(self.shown(c).node);
                }
                c = self.nodes[c as usize].next;
            }
            if f.attached != NONE {
                stack.push(self.shown(f.attached).node);
            }
        }
        seen
    }

    /// A match whose server span is an ancestor of its own client (possible only with
    /// inconsistent recordings) would hide a loop of nodes from every root: undo such matches.
    fn break_cycles(&mut self) {
        let mut undone = 0u64;
        loop {
            let seen = self.reached();
            let lost = self.spans.iter().position(|s| {
                s.side == Side::Server && s.peer != NONE && !seen[self.shown(s.node).node as usize]
            });
            let Some(i) = lost else { break };
            let client = self.spans[i].peer as usize;
            self.spans[i].peer = NONE;
            self.spans[client].peer = NONE;
            let (sn, cn) = (self.spans[i].node, self.spans[client].node);
            self.nodes[cn as usize].flags |= UNMATCHED;
            let n = &mut self.nodes[sn as usize];
            n.flags = (n.flags & !MOVED) | UNMATCHED;
            if n.flags & TOP != 0 {
                let mut roots = std::mem::take(&mut self.roots);
                roots.push(sn);
                self.sort_roots(&mut roots);
                self.roots = roots;
            }
            undone += 1;
        }
        if undone > 0 {
            self.notes.push(format!(
                "{undone} remote-call matches would have made a loop (a call serving itself) \
                 and were left unmatched"
            ));
        }
    }

    /// Groups the VMs that calls connect (a note names the groups when there are several) and
    /// places each VM's roots on the common timeline.
    fn group_and_place(&mut self) {
        let v = self.vms.len();
        let mut parent: Vec<usize> = (0..v).collect();
        fn find(p: &mut [usize], mut x: usize) -> usize {
            while p[x] != x {
                p[x] = p[p[x]];
                x = p[x];
            }
            x
        }
        // Offsets of served calls by (client VM, server VM).
        let mut edges: HashMap<(u32, u32), Vec<i64>> = HashMap::new();
        for s in self
            .spans
            .iter()
            .filter(|s| s.side == Side::Client && s.peer != NONE)
        {
            let client = &self.nodes[s.node as usize];
            let server_span = self.spans[s.peer as usize].node;
            let server = &self.nodes[self.shown(server_span).node as usize];
            let (a, b) = (
                self.threads[client.thread as usize].vm,
                self.threads[server.thread as usize].vm,
            );
            let (ra, rb) = (find(&mut parent, a as usize), find(&mut parent, b as usize));
            parent[ra.max(rb)] = ra.min(rb);
            if a != b {
                edges.entry((a, b)).or_default().push(
                    client.start + (client.duration() - server.duration()) / 2 - server.start,
                );
            }
        }
        let mut groups: Vec<Vec<u32>> = Vec::new();
        let mut group_of = vec![usize::MAX; v];
        for i in 0..v {
            let r = find(&mut parent, i);
            if group_of[r] == usize::MAX {
                group_of[r] = groups.len();
                groups.push(Vec::new());
            }
            groups[group_of[r]].push(i as u32);
        }
        // Relative offsets: the median placement of each VM pair's calls, spread from each
        // group's first VM.
        let mut adj: Vec<Vec<(u32, i64)>> = vec![Vec::new(); v];
        for ((a, b), mut offs) in edges {
            let mid = offs.len() / 2;
            let (_, m, _) = offs.select_nth_unstable(mid);
            let m = *m;
            adj[a as usize].push((b, m));
            adj[b as usize].push((a, -m));
        }
        let mut placed = vec![false; v];
        let mut offset = vec![0i64; v];
        for g in &groups {
            let first = g[0] as usize;
            placed[first] = true;
            let mut queue = vec![first];
            while let Some(a) = queue.pop() {
                for &(b, m) in &adj[a] {
                    if !placed[b as usize] {
                        placed[b as usize] = true;
                        offset[b as usize] = offset[a] + m;
                        queue.push(b as usize);
                    }
                }
            }
        }
        // Unrelated groups start where the first one starts.
        let mut group_start = vec![i64::MAX; groups.len()];
        for &r in &self.roots {
            let n = &self.nodes[r as usize];
            let vm = self.threads[n.thread as usize].vm as usize;
            let g = group_of[find(&mut parent, vm)];
            group_start[g] = group_start[g].min(n.start + offset[vm]);
        }
        if let Some(&first) = group_start.first() {
            for (g, members) in groups.iter().enumerate() {
                if group_start[g] == i64::MAX || first == i64::MAX {
                    continue;
                }
                let shift = first - group_start[g];
                for &m in members {
                    offset[m as usize] += shift;
                }
            }
        }
        self.vm_offset = offset;
        if groups.len() > 1 {
            let named: Vec<String> = groups
                .iter()
                .map(|g| {
                    let names: Vec<&str> = g
                        .iter()
                        .map(|&i| self.vms[i as usize].name.as_str())
                        .collect();
                    format!("[{}]", names.join(", "))
                })
                .collect();
            self.notes.push(format!(
                "no remote call connects these groups of VMs, so their trees are separate \
                 (unrelated runs?): {}",
                named.join("; ")
            ));
        }
        self.groups = groups;
    }

    fn count_unmatched(&mut self) {
        let mut clients = vec![0u64; self.vms.len()];
        let mut servers = vec![0u64; self.vms.len()];
        for s in self.spans.iter().filter(|s| s.peer == NONE) {
            let vm = self.threads[self.nodes[s.node as usize].thread as usize].vm as usize;
            match s.side {
                Side::Client => clients[vm] += 1,
                Side::Server => servers[vm] += 1,
            }
        }
        for (i, v) in self.vms.iter().enumerate() {
            if clients[i] > 0 {
                self.notes.push(format!(
                    "{}: {} remote calls it made have no served call in these recordings \
                     (marked unmatched; is the server's recording among the files?)",
                    v.name, clients[i]
                ));
            }
            if servers[i] > 0 {
                self.notes.push(format!(
                    "{}: {} calls it served have no caller in these recordings (roots marked \
                     unmatched)",
                    v.name, servers[i]
                ));
            }
        }
    }

    fn compute_stats(&self) -> Vec<Vec<MethodStat>> {
        let mut acc = vec![Acc::default(); self.names.len()];
        let mut vm_of = vec![0u32; self.names.len()];
        for n in &self.nodes {
            if n.flags & COLLAPSED != 0 {
                continue;
            }
            acc[n.name as usize].add(n.duration());
            vm_of[n.name as usize] = self.threads[n.thread as usize].vm;
        }
        let mut out = vec![Vec::new(); self.vms.len()];
        for (i, a) in acc.iter().enumerate() {
            if a.count == 0 {
                continue;
            }
            out[vm_of[i] as usize].push(MethodStat {
                method: self.names[i].clone(),
                count: a.count,
                total_ns: a.total.min(u64::MAX as u128) as u64,
                min_ns: a.min.max(0) as u64,
                max_ns: a.max.max(0) as u64,
                mean_ns: a.mean.round().max(0.0) as u64,
                stddev_ns: (a.m2 / a.count as f64).sqrt().round() as u64,
            });
        }
        for rows in &mut out {
            rows.sort_by(|a, b| {
                b.total_ns
                    .cmp(&a.total_ns)
                    .then_with(|| a.method.cmp(&b.method))
            });
        }
        out
    }

    /// Writes the joined tree in `format`.
    pub fn write(&self, format: OutputFormat, out: impl Write) -> io::Result<()> {
        let mut out = io::BufWriter::with_capacity(1 << 16, out);
        match format {
            OutputFormat::Json => self.write_json(&mut out)?,
            OutputFormat::Text => self.write_text(&mut out)?,
            OutputFormat::Html => self.write_html(&mut out)?,
            OutputFormat::ChromeTrace => self.write_chrome(&mut out)?,
        }
        out.flush()
    }

    /// `{"roots": [node], "notes": [...], "stats": {vm: [row]}}`, each node
    /// `{"vm","thread","method","start_ns","duration_ns"[,"kind"][,"unmatched"][,"incomplete"],"children"}`
    /// with times on its own VM's clock.
    pub fn write_json(&self, out: &mut impl Write) -> io::Result<()> {
        out.write_all(b"{\"roots\":[")?;
        let mut comma = false;
        self.walk(|v| {
            match v {
                Visit::Open(n) => {
                    if comma {
                        out.write_all(b",")?;
                    }
                    if n.depth == 0 {
                        out.write_all(b"\n")?;
                    }
                    out.write_all(b"{\"vm\":")?;
                    json_str(out, n.vm, false)?;
                    out.write_all(b",\"thread\":")?;
                    json_str(out, n.thread, false)?;
                    out.write_all(b",\"method\":")?;
                    json_str(out, n.method, false)?;
                    write!(
                        out,
                        ",\"start_ns\":{},\"duration_ns\":{}",
                        n.start_ns, n.duration_ns
                    )?;
                    if let Some(k) = n.kind {
                        write!(out, ",\"kind\":\"{}\"", k.as_str())?;
                    }
                    if n.unmatched {
                        out.write_all(b",\"unmatched\":true")?;
                    }
                    if n.incomplete {
                        out.write_all(b",\"incomplete\":true")?;
                    }
                    if let Some(id) = n.trace_id {
                        write!(out, ",\"trace_id\":\"{id}\"")?;
                    }
                    out.write_all(b",\"children\":[")?;
                    comma = false;
                }
                Visit::Close => {
                    out.write_all(b"]}")?;
                    comma = true;
                }
            }
            Ok::<(), io::Error>(())
        })?;
        out.write_all(b"\n],\"notes\":")?;
        json_strs(out, self.notes.iter().map(String::as_str), false)?;
        out.write_all(b",\"stats\":{")?;
        for (i, (vm, rows)) in self.stats().enumerate() {
            if i > 0 {
                out.write_all(b",")?;
            }
            out.write_all(b"\n")?;
            json_str(out, vm, false)?;
            out.write_all(b":[")?;
            for (j, r) in rows.iter().enumerate() {
                if j > 0 {
                    out.write_all(b",")?;
                }
                out.write_all(b"\n{\"method\":")?;
                json_str(out, &r.method, false)?;
                write!(
                    out,
                    ",\"count\":{},\"total_ns\":{},\"min_ns\":{},\"max_ns\":{},\"mean_ns\":{},\
                     \"stddev_ns\":{}}}",
                    r.count, r.total_ns, r.min_ns, r.max_ns, r.mean_ns, r.stddev_ns
                )?;
            }
            out.write_all(b"]")?;
        }
        out.write_all(b"}}\n")
    }

    /// An indented tree (method, `[vm/thread]`, duration, kind), then statistics and notes.
    pub fn write_text(&self, out: &mut impl Write) -> io::Result<()> {
        const MAX_INDENT: usize = 40;
        let spaces = [b' '; 2 * MAX_INDENT];
        writeln!(
            out,
            "# jvmprof trace: {} VMs, {} roots; times on each VM's own clock",
            self.vms.len(),
            self.roots.len()
        )?;
        self.walk(|v| {
            if let Visit::Open(n) = v {
                out.write_all(&spaces[..2 * n.depth.min(MAX_INDENT)])?;
                if n.depth > MAX_INDENT {
                    write!(out, "[depth {}] ", n.depth)?;
                }
                write!(
                    out,
                    "{}  [{}/{}]  {:.3} ms",
                    n.method,
                    n.vm,
                    n.thread,
                    n.duration_ns as f64 / 1e6
                )?;
                let mut marks = Vec::new();
                if let Some(k) = n.kind {
                    marks.push(k.as_str());
                }
                if n.unmatched {
                    marks.push("unmatched");
                }
                if n.incomplete {
                    marks.push("incomplete");
                }
                if !marks.is_empty() {
                    write!(out, "  ({})", marks.join(", "))?;
                }
                if let Some(id) = n.trace_id {
                    write!(out, "  trace {id}")?;
                }
                out.write_all(b"\n")?;
            }
            Ok::<(), io::Error>(())
        })?;
        for (vm, rows) in self.stats() {
            writeln!(out, "\n## {vm}: per-method inclusive times")?;
            out.write_all(crate::methods::table(rows, 0).as_bytes())?;
        }
        if !self.notes.is_empty() {
            writeln!(out, "\n## notes")?;
            for n in &self.notes {
                writeln!(out, "- {n}")?;
            }
        }
        Ok(())
    }

    /// The earliest start on the common timeline.
    fn placed_base(&self) -> i64 {
        let mut base = i64::MAX;
        let _ = self.walk(|v| {
            if let Visit::Open(n) = v {
                base = base.min(n.placed_ns);
            }
            Ok::<(), ()>(())
        });
        if base == i64::MAX { 0 } else { base }
    }

    /// The Chrome trace event format: one process per VM, one track per thread, a complete
    /// event per node on the common timeline (µs), a flow from each client to its server.
    pub fn write_chrome(&self, out: &mut impl Write) -> io::Result<()> {
        let base = self.placed_base();
        out.write_all(b"{\"traceEvents\":[")?;
        let mut first = true;
        let mut sep = |out: &mut dyn Write| -> io::Result<()> {
            if !std::mem::replace(&mut first, false) {
                out.write_all(b",")?;
            }
            out.write_all(b"\n")
        };
        for (i, v) in self.vms.iter().enumerate() {
            sep(out)?;
            write!(
                out,
                "{{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":{},\"tid\":0,\"args\":{{\"name\":",
                i + 1
            )?;
            json_str(out, &v.name, false)?;
            out.write_all(b"}}")?;
            sep(out)?;
            write!(
                out,
                "{{\"ph\":\"M\",\"name\":\"process_sort_index\",\"pid\":{},\"tid\":0,\
                 \"args\":{{\"sort_index\":{i}}}}}",
                i + 1
            )?;
        }
        for t in &self.threads {
            sep(out)?;
            write!(
                out,
                "{{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":{},\"tid\":{},\"args\":{{\"name\":",
                t.vm + 1,
                t.id
            )?;
            json_str(out, &t.name, false)?;
            out.write_all(b"}}")?;
        }
        self.walk(|v| {
            let Visit::Open(n) = v else { return Ok(()) };
            let pid = n.vm_index + 1;
            sep(out)?;
            out.write_all(b"{\"ph\":\"X\",\"name\":")?;
            json_str(out, n.method, false)?;
            let cat = n.kind.map_or("call", Kind::as_str);
            write!(
                out,
                ",\"cat\":\"{cat}\",\"pid\":{pid},\"tid\":{},\"ts\":",
                n.thread_id
            )?;
            micros(out, n.placed_ns - base)?;
            out.write_all(b",\"dur\":")?;
            micros(out, n.duration_ns)?;
            write!(out, ",\"args\":{{\"vm_start_ns\":{}", n.start_ns)?;
            if n.unmatched {
                out.write_all(b",\"unmatched\":true")?;
            }
            if n.incomplete {
                out.write_all(b",\"incomplete\":true")?;
            }
            out.write_all(b"}}")?;
            if let (Some(call), Some(kind)) = (n.call, n.kind) {
                sep(out)?;
                let ph = match kind {
                    Kind::Client => "\"s\"",
                    Kind::Server => "\"f\",\"bp\":\"e\"",
                };
                write!(
                    out,
                    "{{\"ph\":{ph},\"id\":{call},\"name\":\"remote call\",\"cat\":\"remote\",\
                     \"pid\":{pid},\"tid\":{},\"ts\":",
                    n.thread_id
                )?;
                micros(out, n.placed_ns - base)?;
                out.write_all(b"}")?;
            }
            Ok::<(), io::Error>(())
        })?;
        out.write_all(b"\n],\"displayTimeUnit\":\"ns\",\"otherData\":{\"exporter\":\"jvmprof trace\",\"notes\":")?;
        json_strs(
            out,
            std::iter::once(PLACEMENT_NOTE).chain(self.notes.iter().map(String::as_str)),
            false,
        )?;
        out.write_all(b"}}\n")
    }

    /// The self-contained HTML page: the tree as flat columns (pre-order, parent indices), so
    /// that neither the page's parser nor its script recurse over the depth.
    pub fn write_html(&self, out: &mut impl Write) -> io::Result<()> {
        let (head, tail) = HTML
            .split_once("@DATA@")
            .expect("the page has a data placeholder");
        out.write_all(head.as_bytes())?;
        let base = self.placed_base();
        out.write_all(b"{\"notes\":")?;
        json_strs(
            out,
            std::iter::once(PLACEMENT_NOTE).chain(self.notes.iter().map(String::as_str)),
            true,
        )?;
        out.write_all(b",\n\"vms\":")?;
        json_strs(out, self.vms.iter().map(|v| v.name.as_str()), true)?;
        out.write_all(b",\n\"threads\":")?;
        json_strs(out, self.threads.iter().map(|t| t.name.as_str()), true)?;
        out.write_all(b",\n\"threadVm\":[")?;
        for (i, t) in self.threads.iter().enumerate() {
            if i > 0 {
                out.write_all(b",")?;
            }
            write!(out, "{}", t.vm)?;
        }
        out.write_all(b"],\n\"names\":")?;
        json_strs(out, self.names.iter().map(String::as_str), true)?;
        // One column per walk: the parent (pre-order index, -1 for roots), name, thread, own
        // start, duration, start on the common timeline, flags (1 client, 2 server,
        // 4 unmatched, 8 incomplete), the call tree id on a tree's root (0 elsewhere; ids stay
        // below 2^53 while thread ids stay below 2^23).
        type Column = fn(&NodeView, &Joined, i64) -> i64;
        let columns: [(&str, Option<Column>); 8] = [
            ("parent", None),
            ("name", Some(|n, _, _| n.name as i64)),
            ("thread", Some(|n, _, _| n.thread_index as i64)),
            ("start", Some(|n, _, _| n.start_ns)),
            ("dur", Some(|n, _, _| n.duration_ns)),
            ("placed", Some(|n, _, base| n.placed_ns - base)),
            (
                "flags",
                Some(|n, _, _| {
                    (match n.kind {
                        Some(Kind::Client) => 1,
                        Some(Kind::Server) => 2,
                        None => 0,
                    }) + if n.unmatched { 4 } else { 0 }
                        + if n.incomplete { 8 } else { 0 }
                }),
            ),
            ("trace", Some(|n, _, _| n.trace_id.unwrap_or(0) as i64)),
        ];
        for (name, column) in columns {
            write!(out, ",\n\"{name}\":[")?;
            let mut index = 0i64;
            let mut parents: Vec<i64> = Vec::new();
            self.walk(|v| {
                match v {
                    Visit::Open(n) => {
                        if index > 0 {
                            out.write_all(b",")?;
                        }
                        let value = match column {
                            Some(f) => f(&n, self, base),
                            None => parents.last().copied().unwrap_or(-1),
                        };
                        write!(out, "{value}")?;
                        parents.push(index);
                        index += 1;
                    }
                    Visit::Close => {
                        parents.pop();
                    }
                }
                Ok::<(), io::Error>(())
            })?;
            out.write_all(b"]")?;
        }
        out.write_all(b",\n\"stats\":[")?;
        for (i, (vm, rows)) in self.stats().enumerate() {
            if i > 0 {
                out.write_all(b",")?;
            }
            out.write_all(b"\n{\"vm\":")?;
            json_str(out, vm, true)?;
            out.write_all(b",\"rows\":[")?;
            for (j, r) in rows.iter().enumerate() {
                if j > 0 {
                    out.write_all(b",")?;
                }
                out.write_all(b"[")?;
                json_str(out, &r.method, true)?;
                write!(
                    out,
                    ",{},{},{},{},{},{}]",
                    r.count, r.total_ns, r.min_ns, r.max_ns, r.mean_ns, r.stddev_ns
                )?;
            }
            out.write_all(b"]}")?;
        }
        out.write_all(b"]}")?;
        out.write_all(tail.as_bytes())
    }
}

/// Microseconds with three decimals, from nanoseconds, exactly.
fn micros(out: &mut impl Write, ns: i64) -> io::Result<()> {
    let sign = if ns < 0 { "-" } else { "" };
    let a = ns.unsigned_abs();
    write!(out, "{sign}{}.{:03}", a / 1000, a % 1000)
}

/// A JSON string; with `html`, `<` as `\u003c` (so `</script>` cannot end a script element).
fn json_str(out: &mut (impl Write + ?Sized), s: &str, html: bool) -> io::Result<()> {
    out.write_all(b"\"")?;
    let bytes = s.as_bytes();
    let mut from = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let escape: Option<&[u8]> = match b {
            b'"' => Some(b"\\\""),
            b'\\' => Some(b"\\\\"),
            b'\n' => Some(b"\\n"),
            b'\r' => Some(b"\\r"),
            b'\t' => Some(b"\\t"),
            b'<' if html => Some(b"\\u003c"),
            0..=0x1f => None,
            _ => continue,
        };
        out.write_all(&bytes[from..i])?;
        match escape {
            Some(e) => out.write_all(e)?,
            None => write!(out, "\\u{b:04x}")?,
        }
        from = i + 1;
    }
    out.write_all(&bytes[from..])?;
    out.write_all(b"\"")
}

fn json_strs<'a>(
    out: &mut (impl Write + ?Sized),
    items: impl Iterator<Item = &'a str>,
    html: bool,
) -> io::Result<()> {
    out.write_all(b"[")?;
    for (i, s) in items.enumerate() {
        if i > 0 {
            out.write_all(b",")?;
        }
        json_str(out, s, html)?;
    }
    out.write_all(b"]")
}

const HTML: &str = r##"<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>jvmprof trace</title>
<style>
  /* Self-contained: no fonts, images or scripts from anywhere else. */
  body { margin: 0; padding: 8px 12px; font: 12px system-ui, sans-serif; color: #222; background: #fff; }
  header { display: flex; flex-wrap: wrap; align-items: center; gap: 8px 16px; margin-bottom: 6px; }
  h1 { font-size: 16px; margin: 0; }
  h2 { font-size: 14px; margin: 16px 0 6px; }
  #info { color: #555; }
  #controls { display: flex; align-items: center; gap: 6px; margin-left: auto; }
  #find { width: 260px; padding: 2px 4px; }
  #found { min-width: 140px; color: #a0a; }
  button { padding: 2px 8px; }
  #legend { display: flex; flex-wrap: wrap; gap: 4px 12px; margin-bottom: 6px; color: #444; }
  #legend span::before { content: ""; display: inline-block; width: 10px; height: 10px; margin-right: 4px;
                         vertical-align: -1px; background: var(--c); }
  #notes { margin: 4px 0 8px; padding-left: 18px; color: #654; }
  #tree { font: 12px ui-monospace, monospace; border-top: 1px solid #ddd; padding-top: 4px; }
  .row { display: flex; align-items: center; white-space: nowrap; line-height: 18px; }
  .row:hover { background: #f4f4f4; }
  .tg { flex: none; width: 14px; text-align: center; color: #555; cursor: pointer; user-select: none; }
  .dp { color: #999; margin-right: 4px; }
  .m { padding: 0 4px; border-left: 4px solid var(--c); background: var(--bg); overflow: hidden; text-overflow: ellipsis; }
  .hit .m { background: #f9c6f9; }
  .cur { outline: 2px solid #a0a; }
  .wh { color: #666; margin-left: 8px; }
  .du { margin-left: 8px; }
  .bd { margin-left: 6px; padding: 0 4px; border-radius: 3px; font-size: 11px; }
  .b1 { background: #dde8ff; } .b2 { background: #ddf3d6; } .b4 { background: #ffd6d6; } .b8 { background: #fff0b8; }
  .bar { flex: none; position: relative; width: 120px; height: 8px; margin-left: 8px; background: #eee; }
  .bar i { position: absolute; top: 0; height: 8px; min-width: 1px; background: var(--c); }
  .more { color: #06c; cursor: pointer; }
  #stats table { border-collapse: collapse; font: 12px ui-monospace, monospace; margin-bottom: 10px; }
  #stats td, #stats th { padding: 1px 8px; text-align: right; }
  #stats th { cursor: pointer; background: #f2f2f2; }
  #stats td:first-child, #stats th:first-child { text-align: left; }
</style>
</head>
<body>
<header>
  <h1>jvmprof trace</h1>
  <span id="info"></span>
  <div id="controls">
    <label>colour by <select id="colour"><option value="vm">VM</option><option value="thread">thread</option></select></label>
    <input id="find" type="search" placeholder="Find method or trace id (Enter: next match)" spellcheck="false">
    <span id="found"></span>
    <button id="expand" type="button" title="Open the next levels (a few thousand rows at most)">Expand more</button>
    <button id="collapse" type="button">Collapse all</button>
  </div>
</header>
<div id="legend"></div>
<ul id="notes"></ul>
<div id="tree"></div>
<h2>Per-method statistics (inclusive time of each call)</h2>
<div id="stats"></div>
<script id="data" type="application/json">@DATA@</script>
<script>
"use strict";
const D = JSON.parse(document.getElementById("data").textContent);
const N = D.parent.length, P = D.parent, NAME = D.name, TH = D.thread, DUR = D.dur, PL = D.placed, FL = D.flags;
const LIMIT = 200, BUDGET = 3000;
// Children in order (nodes come in pre-order, a parent before its children): no recursion anywhere.
const nk = new Int32Array(N), ks = new Int32Array(N + 1), pos = new Int32Array(N);
const depth = new Int32Array(N), root = new Int32Array(N);
const roots = [];
for (let i = 0; i < N; i++) if (P[i] >= 0) nk[P[i]]++;
for (let i = 0; i < N; i++) ks[i + 1] = ks[i] + nk[i];
const kids = new Int32Array(ks[N]), fill = ks.slice(0, N);
for (let i = 0; i < N; i++) {
  const p = P[i];
  if (p < 0) { pos[i] = roots.length; roots.push(i); root[i] = i; }
  else { pos[i] = fill[p] - ks[p]; kids[fill[p]++] = i; depth[i] = depth[p] + 1; root[i] = root[p]; }
}
const open = new Uint8Array(N), lim = new Int32Array(N);
let rootLim = LIMIT, hit = new Uint8Array(N), hits = [], cur = -1;
const rowOf = new Map();
const tree = document.getElementById("tree");
const colourSel = document.getElementById("colour");
function hue(k) { return (k * 137.508) % 360; }
function key(i) { return colourSel.value === "vm" ? D.threadVm[TH[i]] : TH[i]; }
function ms(ns) { return (ns / 1e6).toFixed(3) + " ms"; }
function limitOf(n) { return n < 0 ? rootLim : (lim[n] || LIMIT); }
function countOf(n) { return n < 0 ? roots.length : nk[n]; }
function kidAt(n, k) { return n < 0 ? roots[k] : kids[ks[n] + k]; }
// The visible rows under n (n = -1: the roots), in order: node ids, and ~n for a "more" row.
function rowsUnder(n) {
  const out = [], stack = [[n, 0]];
  while (stack.length) {
    const top = stack[stack.length - 1], m = top[0];
    const shown = Math.min(countOf(m), limitOf(m));
    if (top[1] < shown) {
      const c = kidAt(m, top[1]++);
      out.push(c);
      if (open[c] && nk[c] > 0) stack.push([c, 0]);
    } else {
      if (countOf(m) > shown) out.push(-2 - m);
      stack.pop();
    }
  }
  return out;
}
function mkRow(i) {
  const r = document.createElement("div");
  r.className = hit[i] ? "row hit" : "row";
  r.dataset.d = depth[i];
  r.dataset.i = i;
  const d = depth[i];
  r.style.paddingLeft = Math.min(d, 60) * 14 + "px";
  const tg = document.createElement("span");
  tg.className = "tg";
  tg.textContent = nk[i] ? (open[i] ? "\u25be" : "\u25b8") : "\u00b7";
  if (nk[i]) tg.onclick = () => toggle(i);
  r.appendChild(tg);
  if (d > 60) { const dp = document.createElement("span"); dp.className = "dp"; dp.textContent = "depth " + d; r.appendChild(dp); }
  const h = hue(key(i));
  const m = document.createElement("span");
  m.className = "m";
  m.style.setProperty("--c", "hsl(" + h + ",65%,45%)");
  m.style.setProperty("--bg", "hsl(" + h + ",70%,94%)");
  m.textContent = D.names[NAME[i]];
  r.appendChild(m);
  const vm = D.vms[D.threadVm[TH[i]]], th = D.threads[TH[i]];
  const wh = document.createElement("span"); wh.className = "wh"; wh.textContent = "[" + vm + " / " + th + "]"; r.appendChild(wh);
  const du = document.createElement("span"); du.className = "du"; du.textContent = ms(DUR[i]); r.appendChild(du);
  const f = FL[i];
  const badges = [[1, "client \u2192"], [2, "\u2192 server"], [4, "unmatched"], [8, "incomplete"]];
  for (const [b, t] of badges) if (f & b) { const s = document.createElement("span"); s.className = "bd b" + b; s.textContent = t; r.appendChild(s); }
  // Where the call lies within its root, on the common timeline.
  const rt = root[i], span = Math.max(DUR[rt], 1);
  const bar = document.createElement("span"); bar.className = "bar";
  const fillEl = document.createElement("i");
  fillEl.style.left = Math.max(0, Math.min(120, (PL[i] - PL[rt]) / span * 120)) + "px";
  fillEl.style.width = Math.max(1, Math.min(120, DUR[i] / span * 120)) + "px";
  fillEl.style.setProperty("--c", "hsl(" + h + ",65%,45%)");
  bar.appendChild(fillEl); r.appendChild(bar);
  r.title = D.names[NAME[i]] + "\n" + vm + " / " + th + "\nstart " + D.start[i] + " ns on " + vm + "'s own clock\nduration " +
    DUR[i] + " ns\n" + nk[i] + " children" + (f & 2 ? "\n(placed inside its client call, centred: clocks are not synchronised)" : "") +
    (D.trace[i] ? "\ntrace " + D.trace[i] + " (convert --trace-id " + D.trace[i] + " cuts its samples)" : "");
  rowOf.set(i, r);
  return r;
}
function mkMore(m) {
  const r = document.createElement("div");
  r.className = "row more";
  r.dataset.d = m < 0 ? 0 : depth[m] + 1;
  r.style.paddingLeft = Math.min(m < 0 ? 0 : depth[m] + 1, 60) * 14 + 14 + "px";
  const rest = countOf(m) - limitOf(m);
  r.textContent = "\u2026 " + rest + " more (show " + Math.min(rest, LIMIT) + ")";
  r.onclick = () => { if (m < 0) rootLim += LIMIT; else lim[m] = limitOf(m) + LIMIT; refresh(m); };
  return r;
}
function build(list) {
  const frag = document.createDocumentFragment();
  for (const x of list) frag.appendChild(x >= 0 ? mkRow(x) : mkMore(-2 - x));
  return frag;
}
function render() {
  rowOf.clear();
  tree.textContent = "";
  tree.appendChild(build(rowsUnder(-1)));
}
// Re-renders what lies under n (its row stays).
function refresh(n) {
  if (n < 0) { render(); return; }
  const row = rowOf.get(n);
  if (!row) { render(); return; }
  const d = depth[n];
  while (row.nextSibling && +row.nextSibling.dataset.d > d) {
    const x = row.nextSibling;
    if (x.dataset.i !== undefined) rowOf.delete(+x.dataset.i);
    x.remove();
  }
  row.firstChild.textContent = nk[n] ? (open[n] ? "\u25be" : "\u25b8") : "\u00b7";
  if (open[n]) row.after(build(rowsUnder(n)));
}
function toggle(i) { open[i] ^= 1; refresh(i); }
// Opens nodes breadth first, until about `budget` more rows would show.
function expandMore(budget) {
  let rows = rowsUnder(-1).length, level = rowsUnder(-1).filter(x => x >= 0);
  while (level.length && rows < budget) {
    const next = [];
    for (const i of level) {
      if (!nk[i]) continue;
      if (!open[i]) {
        if (rows + Math.min(nk[i], LIMIT) > budget) { level.length = 0; break; }
        open[i] = 1; rows += Math.min(nk[i], LIMIT);
      }
      for (let k = 0; k < Math.min(nk[i], limitOf(i)); k++) next.push(kids[ks[i] + k]);
    }
    level = next;
  }
  render();
}
function find(q) {
  hit = new Uint8Array(N); hits = []; cur = -1;
  const found = document.getElementById("found");
  if (!q) { found.textContent = ""; render(); return; }
  q = q.toLowerCase();
  const nameHit = D.names.map(s => s.toLowerCase().includes(q));
  // A number finds the tree with that trace id too.
  const id = /^[0-9]+$/.test(q) ? Number(q) : -1;
  for (let i = 0; i < N; i++) if (nameHit[NAME[i]] || D.trace[i] === id) { hit[i] = 1; hits.push(i); }
  const opened = Math.min(hits.length, 1000);
  for (let k = 0; k < opened; k++) {
    let c = hits[k];
    for (let p = P[c]; ; c = p, p = P[p]) {
      const need = Math.ceil((pos[c] + 1) / LIMIT) * LIMIT;
      if (p < 0) { rootLim = Math.max(rootLim, need); break; }
      open[p] = 1; lim[p] = Math.max(limitOf(p), need);
    }
  }
  found.textContent = hits.length ? hits.length + " matches" + (hits.length > opened ? " (first " + opened + " opened)" : "") : "no match";
  render();
  next();
}
function next() {
  if (!hits.length) return;
  for (let k = 0; k < hits.length; k++) {
    cur = (cur + 1) % hits.length;
    const r = rowOf.get(hits[cur]);
    if (r) {
      for (const c of tree.querySelectorAll(".cur")) c.classList.remove("cur");
      r.classList.add("cur");
      r.scrollIntoView({ block: "center" });
      document.getElementById("found").textContent = (cur + 1) + " / " + hits.length + " matches";
      return;
    }
  }
}
function legend() {
  const el = document.getElementById("legend");
  el.textContent = "";
  const byVm = colourSel.value === "vm";
  const names = byVm ? D.vms : D.threads.map((t, i) => D.vms[D.threadVm[i]] + " / " + t);
  names.slice(0, 60).forEach((n, k) => {
    const s = document.createElement("span");
    s.style.setProperty("--c", "hsl(" + hue(k) + ",65%,45%)");
    s.textContent = n;
    el.appendChild(s);
  });
  if (names.length > 60) el.appendChild(document.createTextNode("\u2026 " + (names.length - 60) + " more"));
}
function stats() {
  const el = document.getElementById("stats");
  const heads = ["method", "count", "total ms", "min ms", "max ms", "mean ms", "stddev ms"];
  for (const s of D.stats) {
    const h = document.createElement("h3"); h.textContent = s.vm; h.style.fontSize = "13px"; el.appendChild(h);
    const t = document.createElement("table"), tb = document.createElement("tbody"), tr = document.createElement("tr");
    let rows = s.rows.slice(), by = 2, dir = -1;
    heads.forEach((name, c) => {
      const th = document.createElement("th"); th.textContent = name;
      th.onclick = () => { dir = by === c ? -dir : (c ? -1 : 1); by = c; fillRows(); };
      tr.appendChild(th);
    });
    const thead = document.createElement("thead"); thead.appendChild(tr); t.appendChild(thead); t.appendChild(tb);
    function fillRows() {
      rows.sort((a, b) => (a[by] < b[by] ? -1 : a[by] > b[by] ? 1 : 0) * dir);
      tb.textContent = "";
      for (const r of rows) {
        const row = document.createElement("tr");
        r.forEach((v, c) => { const td = document.createElement("td"); td.textContent = c === 0 ? v : c === 1 ? v : (v / 1e6).toFixed(3); row.appendChild(td); });
        tb.appendChild(row);
      }
    }
    fillRows();
    el.appendChild(t);
  }
}
let served = 0, unmatched = 0;
for (let i = 0; i < N; i++) { if ((FL[i] & 3) && !(FL[i] & 4)) served++; if (FL[i] & 4) unmatched++; }
document.getElementById("info").textContent = D.vms.length + " VMs \u00b7 " + N + " nodes \u00b7 " + roots.length + " roots \u00b7 " +
  served / 2 + " remote calls matched \u00b7 " + unmatched + " unmatched sides";
for (const n of D.notes) { const li = document.createElement("li"); li.textContent = n; document.getElementById("notes").appendChild(li); }
colourSel.onchange = () => { legend(); render(); };
const findEl = document.getElementById("find");
let lastQ = "";
findEl.addEventListener("keydown", e => { if (e.key === "Enter") { if (findEl.value === lastQ) next(); else find(lastQ = findEl.value); } });
findEl.addEventListener("search", () => { if (findEl.value !== lastQ) find(lastQ = findEl.value); });
document.getElementById("collapse").onclick = () => { open.fill(0); render(); };
document.getElementById("expand").onclick = () => expandMore(rowsUnder(-1).length + BUDGET);
legend();
stats();
expandMore(300);
</script>
</body>
</html>
"##;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tracelog::{Chunk, SECTION, VmHeader, write_chunk};

    /// Builds one VM's trace from events in true time; the VM records them on its own clock.
    struct Vm {
        trace: VmTrace,
        methods: HashMap<String, u32>,
        threads: HashMap<String, usize>,
        clock: i64,
    }

    impl Vm {
        fn new(name: &str, clock: i64) -> Vm {
            Vm {
                trace: VmTrace {
                    vm: name.into(),
                    session: 0x5eed,
                    host: "h".into(),
                    pid: 1,
                    ..VmTrace::default()
                },
                methods: HashMap::new(),
                threads: HashMap::new(),
                clock,
            }
        }

        fn push(&mut self, thread: &str, e: Event) {
            let n = self.threads.len();
            let at = *self.threads.entry(thread.to_string()).or_insert(n);
            if at == self.trace.threads.len() {
                self.trace.threads.push(ThreadTrace {
                    id: 100 + at as u64,
                    name: thread.into(),
                    events: Vec::new(),
                });
            }
            self.trace.threads[at].events.push(e);
        }

        fn enter(&mut self, thread: &str, method: &str, t: i64) {
            let n = self.methods.len() as u32;
            let method = *self.methods.entry(method.to_string()).or_insert_with(|| {
                self.trace.methods.push(method.to_string());
                n
            });
            let ns = t + self.clock;
            self.push(thread, Event::Enter { method, ns });
        }

        fn exit(&mut self, thread: &str, t: i64) {
            let ns = t + self.clock;
            self.push(thread, Event::Exit { ns });
        }

        fn remote(
            &mut self,
            thread: &str,
            side: Side,
            p: Protocol,
            key: &str,
            label: &str,
            t: i64,
        ) {
            let ns = t + self.clock;
            self.push(
                thread,
                Event::Remote {
                    side,
                    protocol: p,
                    key: key.into(),
                    label: label.into(),
                    ns,
                },
            );
        }

        fn conn(&mut self, thread: &str, local: &str, remote: &str, t: i64) {
            let ns = t + self.clock;
            self.push(
                thread,
                Event::Connection {
                    local: local.into(),
                    remote: remote.into(),
                    ns,
                },
            );
        }

        fn recording(self) -> Recording {
            Recording {
                origin: format!("{}.jvmprof", self.trace.vm),
                trace: self.trace,
                damage: None,
            }
        }
    }

    /// A client VM with three threads calling s1, which calls s2, which calls s3, each call
    /// over shared, reused connections (RMI) or with call ids (HTTP), served by pooled
    /// threads; server work differs per call. s2's clock is an hour ahead. Every method name
    /// carries the id of the top-level call it belongs to.
    struct Chain {
        vms: Vec<Vm>,
        protocol: Protocol,
        /// Per level (1..=3): (port, free at) of the caller's connections.
        pools: Vec<Vec<(u16, i64)>>,
        /// Per level: free-at of the server threads.
        servers: Vec<Vec<i64>>,
        http_calls: u64,
    }

    const HOUR: i64 = 3_600_000_000_000;

    /// How each level's VM writes its own and its callers' endpoints.
    fn server_addr(level: usize) -> (&'static str, &'static str) {
        // (as the caller writes the remote end, as the server writes its local end)
        match level {
            1 => ("s1host/10.0.0.1:1099", "/10.0.0.1:1099"),
            2 => ("s2host/10.0.0.2:1099", "10.0.0.2:1099"),
            _ => ("localhost/127.0.0.1:2000", "/[0:0:0:0:0:0:0:1]:2000"),
        }
    }

    fn caller_addr(level: usize, port: u16) -> (String, String) {
        // (as the caller writes its local end, as the server writes the remote end)
        match level {
            1 => (
                format!("10.0.0.9:{port}"),
                format!("client/10.0.0.9:{port}"),
            ),
            2 => (format!("/10.0.0.1:{port}"), format!("10.0.0.1:{port}")),
            _ => (
                format!("127.0.0.1:{port}"),
                format!("localhost/127.0.0.1:{port}"),
            ),
        }
    }

    impl Chain {
        fn new(protocol: Protocol) -> Chain {
            Chain {
                vms: vec![
                    Vm::new("client", 0),
                    Vm::new("s1", 5_000),
                    Vm::new("s2", HOUR),
                    Vm::new("s3", -777),
                ],
                protocol,
                pools: vec![Vec::new(); 4],
                servers: vec![vec![0; 3]; 4],
                http_calls: 0,
            }
        }

        /// A call from `caller` (a thread of VM level-1) to level `level`, starting at `t0`;
        /// returns when it ends on the caller's side.
        fn call(&mut self, level: usize, caller: &str, t0: i64, id: u64) -> i64 {
            let label = format!("I{level}.serve");
            let rmi = self.protocol == Protocol::Rmi;
            let http_key = format!("5eed-{}", self.http_calls);
            self.http_calls += 1;
            let key = if rmi {
                format!("pkg.I{level}.serve")
            } else {
                http_key.clone()
            };
            self.vms[level - 1].remote(caller, Side::Client, self.protocol, &key, &label, t0);
            let mut port = 0;
            let mut conn = 0;
            if rmi {
                let pool = &mut self.pools[level];
                conn = match pool.iter().position(|&(_, free)| free <= t0 + 1) {
                    Some(i) => i,
                    None => {
                        pool.push((40_000 + (level as u16) * 1000 + pool.len() as u16, 0));
                        pool.len() - 1
                    }
                };
                port = pool[conn].0;
                let (local, _) = caller_addr(level, port);
                let (remote, _) = server_addr(level);
                self.vms[level - 1].conn(caller, &local, remote, t0 + 1);
            }
            let recv = t0 + 10;
            let pool = &mut self.servers[level];
            // Any free worker, not always the same one: a connection's calls move between
            // threads.
            let free: Vec<usize> = (0..pool.len()).filter(|&i| pool[i] < recv - 1).collect();
            let st = if free.is_empty() {
                pool.push(0);
                pool.len() - 1
            } else {
                free[(id as usize / 3 + level) % free.len()]
            };
            let thread = format!("s{level}-worker-{st}");
            let vm = &mut self.vms[level];
            if rmi {
                let (_, remote) = caller_addr(level, port);
                let (_, local) = server_addr(level);
                // Half the calls set the connection before the span, half inside it.
                if id.is_multiple_of(2) {
                    vm.conn(&thread, local, &remote, recv - 1);
                }
                vm.remote(
                    &thread,
                    Side::Server,
                    Protocol::Rmi,
                    &format!("pkg.S{level}Impl.serve"),
                    "S",
                    recv,
                );
                if id % 2 == 1 {
                    vm.conn(&thread, local, &remote, recv + 1);
                }
            } else {
                vm.remote(
                    &thread,
                    Side::Server,
                    Protocol::Http,
                    &http_key,
                    &format!("POST /s{level}"),
                    recv,
                );
            }
            vm.enter(&thread, &format!("S{level}Impl.serve_{id}"), recv + 2);
            let mut t = recv + 5;
            if level < 3 {
                t = self.call(level + 1, &thread, t, id);
            }
            // Work that differs per call: a wrong match would put a longer server call in a
            // shorter client call.
            let tail =
                ((id.wrapping_mul(2_654_435_761) % 997) as i64 + 1) * 50 * (4 - level as i64);
            t += tail;
            let vm = &mut self.vms[level];
            vm.exit(&thread, t);
            vm.exit(&thread, t + 1);
            self.servers[level][st] = t + 2;
            let end = t + 11;
            self.vms[level - 1].exit(caller, end);
            if rmi {
                self.pools[level][conn].1 = end;
            }
            end
        }

        /// Three client threads, `calls` top-level calls in all, in the order they start.
        fn run(protocol: Protocol, calls: u64) -> Chain {
            let mut c = Chain::new(protocol);
            let mut next = [0i64, 3, 7];
            for id in 0..calls {
                let th = (0..3).min_by_key(|&i| (next[i], i)).unwrap();
                let name = format!("client-{th}");
                let t = next[th];
                c.vms[0].enter(&name, &format!("Client.work_{id}"), t);
                let end = c.call(1, &name, t + 1, id);
                c.vms[0].exit(&name, end + 1);
                // Think time as long as calls: idle threads free their connections for others.
                next[th] = end + 2 + (id.wrapping_mul(7919) % 13) as i64 * 20_000;
            }
            c
        }
    }

    /// A walk's nodes with their parents (indices into the list).
    #[derive(Debug, Clone)]
    struct Flat {
        vm: String,
        thread: String,
        method: String,
        start: i64,
        dur: i64,
        placed: i64,
        kind: Option<Kind>,
        unmatched: bool,
        incomplete: bool,
        parent: Option<usize>,
        children: Vec<usize>,
    }

    fn flatten(j: &Joined) -> Vec<Flat> {
        let mut out: Vec<Flat> = Vec::new();
        let mut stack: Vec<usize> = Vec::new();
        j.walk(|v| {
            match v {
                Visit::Open(n) => {
                    let i = out.len();
                    let parent = stack.last().copied();
                    if let Some(p) = parent {
                        out[p].children.push(i);
                    }
                    out.push(Flat {
                        vm: n.vm.into(),
                        thread: n.thread.into(),
                        method: n.method.into(),
                        start: n.start_ns,
                        dur: n.duration_ns,
                        placed: n.placed_ns,
                        kind: n.kind,
                        unmatched: n.unmatched,
                        incomplete: n.incomplete,
                        parent,
                        children: Vec::new(),
                    });
                    stack.push(i);
                }
                Visit::Close => {
                    stack.pop();
                }
            }
            Ok::<(), ()>(())
        })
        .unwrap();
        out
    }

    fn id_of(method: &str) -> u64 {
        method.rsplit_once('_').unwrap().1.parse().unwrap()
    }

    /// Enter counts by (vm, method) in the recordings.
    fn recorded(vms: &[&Vm]) -> HashMap<(String, String), usize> {
        let mut m = HashMap::new();
        for v in vms {
            for t in &v.trace.threads {
                for e in &t.events {
                    if let Event::Enter { method, .. } = e {
                        *m.entry((
                            v.trace.vm.clone(),
                            v.trace.methods[*method as usize].clone(),
                        ))
                        .or_default() += 1;
                    }
                }
            }
        }
        m
    }

    fn check_chain(protocol: Protocol) {
        let calls = 300;
        let chain = Chain::run(protocol, calls);
        if protocol == Protocol::Rmi {
            // Connections really were shared by threads and reused.
            assert!(
                chain.pools[1].len() >= 2 && chain.pools[1].len() < 10,
                "{:?}",
                chain.pools[1]
            );
            assert!(chain.servers[1].len() >= 2, "{:?}", chain.servers[1]);
        }
        if protocol == Protocol::Rmi {
            // Some connection carried calls of several client threads, and some server thread
            // served several connections.
            let mut by_conn: HashMap<(usize, String), std::collections::HashSet<String>> =
                HashMap::new();
            for (i, vm) in chain.vms.iter().enumerate() {
                for t in &vm.trace.threads {
                    for e in &t.events {
                        if let Event::Connection { local, remote, .. } = e {
                            let end = if i == 0 { local } else { remote };
                            by_conn
                                .entry((i, end.clone()))
                                .or_default()
                                .insert(t.name.clone());
                        }
                    }
                }
            }
            assert!(
                by_conn
                    .iter()
                    .any(|((vm, _), threads)| *vm == 0 && threads.len() > 1)
            );
            let mut conns_of: HashMap<&str, usize> = HashMap::new();
            for ((vm, _), threads) in &by_conn {
                if *vm == 1 {
                    for t in threads {
                        *conns_of.entry(t).or_default() += 1;
                    }
                }
            }
            assert!(conns_of.values().any(|&n| n > 1), "{conns_of:?}");
        }
        let expected = recorded(&chain.vms.iter().collect::<Vec<_>>());
        let j = join(chain.vms.into_iter().map(Vm::recording));
        assert!(j.notes().is_empty(), "{:?}", j.notes());
        assert_eq!(j.groups().len(), 1);
        let nodes = flatten(&j);
        // Only the client's top-level calls are roots.
        let roots: Vec<&Flat> = nodes.iter().filter(|n| n.parent.is_none()).collect();
        assert_eq!(roots.len(), calls as usize);
        assert!(
            roots
                .iter()
                .all(|r| r.vm == "client" && r.method.starts_with("Client.work_"))
        );
        // Every method activation exactly once, on its VM.
        let mut seen: HashMap<(String, String), usize> = HashMap::new();
        for n in nodes.iter().filter(|n| n.kind != Some(Kind::Client)) {
            *seen.entry((n.vm.clone(), n.method.clone())).or_default() += 1;
        }
        assert_eq!(seen, expected);
        let clients: Vec<&Flat> = nodes
            .iter()
            .filter(|n| n.kind == Some(Kind::Client))
            .collect();
        assert_eq!(clients.len(), 3 * calls as usize);
        for c in &clients {
            assert!(!c.unmatched, "{c:?}");
            let caller = &nodes[c.parent.unwrap()];
            let level: usize = c.method[1..2].parse().unwrap();
            assert_eq!(c.children.len(), 1, "{c:?}");
            let s = &nodes[c.children[0]];
            assert_eq!(s.kind, Some(Kind::Server));
            assert!(!s.unmatched);
            // The right server call: same construction id, the next VM down the chain.
            assert_eq!(s.vm, format!("s{level}"));
            assert_eq!(
                s.method,
                format!("S{level}Impl.serve_{}", id_of(&caller.method))
            );
            assert!(s.thread.starts_with(&format!("s{level}-worker-")));
            assert!(s.dur <= c.dur, "server {s:?} longer than its client {c:?}");
            // Times stay on the server's own clock; placement centres it in the client.
            let clock = [0, 5_000, HOUR, -777][level];
            assert!(s.start > clock);
            assert!(
                s.placed >= c.placed && s.placed + s.dur <= c.placed + c.dur,
                "{c:?} {s:?}"
            );
            let (left, right) = (s.placed - c.placed, c.placed + c.dur - s.placed - s.dur);
            assert!((left - right).abs() <= 1, "centred: {left} {right}");
        }
        let servers = nodes
            .iter()
            .filter(|n| n.kind == Some(Kind::Server))
            .count();
        assert_eq!(servers, 3 * calls as usize);
        assert!(nodes.iter().all(|n| !n.unmatched && !n.incomplete));
        // Statistics: counts by method agree with the recordings, and the client spans.
        for (vm, rows) in j.stats() {
            for r in rows {
                let want = expected
                    .get(&(vm.to_string(), r.method.clone()))
                    .copied()
                    .unwrap_or_else(|| {
                        assert!(r.method.ends_with(".serve"), "{vm} {r:?}");
                        calls as usize
                    });
                assert_eq!(r.count as usize, want, "{vm} {r:?}");
                assert!(r.min_ns <= r.mean_ns && r.mean_ns <= r.max_ns);
            }
        }
        // The JSON form of the same tree (shallow enough for serde_json).
        let mut json = Vec::new();
        j.write(OutputFormat::Json, &mut json).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&json).unwrap();
        let r0 = &v["roots"][0];
        assert_eq!(r0["vm"], "client");
        assert!(r0.get("kind").is_none() && r0.get("unmatched").is_none());
        let c0 = &r0["children"][0];
        assert_eq!(c0["kind"], "client");
        assert_eq!(c0["method"], "I1.serve");
        let s0 = &c0["children"][0];
        assert_eq!(s0["kind"], "server");
        assert_eq!(s0["vm"], "s1");
        assert_eq!(
            s0["method"],
            format!("S1Impl.serve_{}", id_of(r0["method"].as_str().unwrap()))
        );
        assert!(
            v["stats"]["s2"]
                .as_array()
                .unwrap()
                .iter()
                .any(|r| r["count"] == calls)
        );
    }

    #[test]
    fn rmi_chain_over_shared_connections_matches_every_call_to_its_server() {
        check_chain(Protocol::Rmi);
    }

    #[test]
    fn http_chain_matches_every_call_by_its_id() {
        check_chain(Protocol::Http);
    }

    #[test]
    fn untraced_server_and_untraced_client_leave_unmatched_sides() {
        for protocol in [Protocol::Rmi, Protocol::Http] {
            // s3 not traced: s2's calls to it are unmatched leaves.
            let chain = Chain::run(protocol, 40);
            let mut vms = chain.vms;
            vms.pop();
            let j = join(vms.into_iter().map(Vm::recording));
            let nodes = flatten(&j);
            assert!(nodes.iter().all(|n| n.vm != "s3"));
            let to_s3: Vec<&Flat> = nodes
                .iter()
                .filter(|n| n.kind == Some(Kind::Client) && n.method == "I3.serve")
                .collect();
            assert_eq!(to_s3.len(), 40);
            assert!(
                to_s3
                    .iter()
                    .all(|n| n.unmatched && n.children.is_empty() && n.vm == "s2")
            );
            assert_eq!(nodes.iter().filter(|n| n.unmatched).count(), 40);
            assert!(
                j.notes()
                    .iter()
                    .any(|n| n.starts_with("s2: 40 remote calls it made have no served call")),
                "{:?}",
                j.notes()
            );
            // The client not traced: s1's served calls are unmatched roots.
            let chain = Chain::run(protocol, 40);
            let j = join(chain.vms.into_iter().skip(1).map(Vm::recording));
            let nodes = flatten(&j);
            let roots: Vec<&Flat> = nodes.iter().filter(|n| n.parent.is_none()).collect();
            assert_eq!(roots.len(), 40);
            for r in roots {
                assert_eq!(r.vm, "s1");
                assert!(r.method.starts_with("S1Impl.serve_"));
                assert_eq!(r.kind, Some(Kind::Server));
                assert!(r.unmatched);
            }
            assert_eq!(nodes.iter().filter(|n| n.unmatched).count(), 40);
            assert!(
                j.notes()
                    .iter()
                    .any(|n| n.starts_with("s1: 40 calls it served have no caller"))
            );
        }
    }

    #[test]
    fn server_spans_show_their_one_method_or_themselves_and_leave_their_thread() {
        let mut c = Vm::new("c", 0);
        let mut s = Vm::new("s", 1_000_000);
        // Three HTTP calls: served by one method, by two, and by none.
        for (k, t) in [(0, 0), (1, 1000), (2, 2000)] {
            c.enter("main", &format!("C.call_{k}"), t);
            c.remote(
                "main",
                Side::Client,
                Protocol::Http,
                &format!("id-{k}"),
                "GET /x",
                t + 1,
            );
            c.exit("main", t + 900);
            c.exit("main", t + 901);
        }
        // The server's worker has a traced run() around everything: matched spans move out
        // of it, its own work stays.
        s.enter("worker", "Worker.run", 0);
        s.remote("worker", Side::Server, Protocol::Http, "id-0", "GET /x", 10);
        s.enter("worker", "H.one", 11);
        s.exit("worker", 20);
        s.exit("worker", 21);
        s.enter("worker", "Worker.idle", 30);
        s.exit("worker", 40);
        s.remote(
            "worker",
            Side::Server,
            Protocol::Http,
            "id-1",
            "GET /x",
            1010,
        );
        s.enter("worker", "H.a", 1011);
        s.exit("worker", 1020);
        s.enter("worker", "H.b", 1021);
        s.exit("worker", 1030);
        s.exit("worker", 1031);
        s.remote(
            "worker",
            Side::Server,
            Protocol::Http,
            "id-2",
            "GET /x",
            2010,
        );
        s.exit("worker", 2011);
        s.exit("worker", 3000);
        // A surplus exit, and a call left open at the thread's end.
        s.exit("worker", 3001);
        s.enter("worker", "Worker.last", 3002);
        s.enter("worker", "H.open", 3003);
        s.exit("worker", 3010);
        let j = join([c.recording(), s.recording()]);
        let nodes = flatten(&j);
        let by_method = |m: &str| nodes.iter().find(|n| n.method == m).unwrap();
        let client_child = |k: usize| {
            let call = by_method(&format!("C.call_{k}"));
            let client = &nodes[call.children[0]];
            assert_eq!(client.kind, Some(Kind::Client));
            assert_eq!(client.children.len(), 1);
            &nodes[client.children[0]]
        };
        let one = client_child(0);
        assert_eq!(
            (one.method.as_str(), one.kind, one.dur),
            ("H.one", Some(Kind::Server), 9)
        );
        let two = client_child(1);
        assert_eq!(
            (two.method.as_str(), two.kind),
            ("GET /x", Some(Kind::Server))
        );
        assert_eq!(
            two.children
                .iter()
                .map(|&i| nodes[i].method.as_str())
                .collect::<Vec<_>>(),
            ["H.a", "H.b"]
        );
        let none = client_child(2);
        assert_eq!((none.method.as_str(), none.children.len()), ("GET /x", 0));
        let run = by_method("Worker.run");
        assert_eq!(run.parent, None);
        assert_eq!(
            run.children
                .iter()
                .map(|&i| nodes[i].method.as_str())
                .collect::<Vec<_>>(),
            ["Worker.idle"]
        );
        let last = by_method("Worker.last");
        assert!(last.incomplete && last.dur == 8);
        assert!(!by_method("H.open").incomplete);
        assert!(
            j.notes()
                .contains(&"s: 1 exits without an open call were ignored".to_string()),
            "{:?}",
            j.notes()
        );
        assert!(
            j.notes()
                .iter()
                .any(|n| n.starts_with("s: 1 calls were still open"))
        );
        // Every activation once: 3 client methods + 3 client spans, 7 server methods + the
        // two spans that are not collapsed.
        assert_eq!(nodes.len(), 3 + 3 + 7 + 2);
    }

    #[test]
    fn endpoints_compare_by_port_and_address_in_every_written_form() {
        let e = Endpoint::parse;
        for (a, b) in [
            ("localhost/127.0.0.1:1099", "127.0.0.1:1099"),
            ("/127.0.0.1:1099", "localhost:1099"),
            ("/[0:0:0:0:0:0:0:1]:1099", "127.0.0.1:1099"),
            ("::1:1099", "/127.0.0.1:1099"),
            ("host/10.1.2.3:80", "/10.1.2.3:80"),
            ("[::ffff:10.1.2.3]:80", "10.1.2.3:80"),
        ] {
            assert_eq!(e(a).agreement(&e(b)), 2, "{a} {b}");
        }
        assert_eq!(e("myhost:80").agreement(&e("10.1.2.3:80")), 1);
        assert_eq!(e("0.0.0.0:80").agreement(&e("10.1.2.3:80")), 1);
        assert_eq!(e("10.1.2.4:80").agreement(&e("10.1.2.3:80")), 0);
        assert_eq!(e("10.1.2.3:81").agreement(&e("10.1.2.3:80")), 0);
        assert_eq!(e("10.1.2.3").agreement(&e("10.1.2.3")), 0);
        assert_eq!(rmi_method("pkg.Api.get"), "get");
        assert_eq!(rmi_method("get"), "get");
        assert_eq!(rmi_method("pkg.Api.get(I)V"), "get");
    }

    #[test]
    fn rmi_calls_whose_method_names_disagree_stay_unmatched() {
        let mut c = Vm::new("c", 0);
        let mut s = Vm::new("s", 0);
        c.remote(
            "main",
            Side::Client,
            Protocol::Rmi,
            "pkg.Api.get",
            "Api.get",
            0,
        );
        c.conn("main", "10.0.0.1:5000", "10.0.0.2:1099", 1);
        c.exit("main", 100);
        c.remote(
            "main",
            Side::Client,
            Protocol::Rmi,
            "pkg.Api.put",
            "Api.put",
            200,
        );
        c.exit("main", 300);
        s.conn("rmi", "10.0.0.2:1099", "10.0.0.1:5000", 9);
        s.remote(
            "rmi",
            Side::Server,
            Protocol::Rmi,
            "pkg.ApiImpl.get",
            "ApiImpl",
            10,
        );
        s.exit("rmi", 90);
        s.remote("rmi", Side::Server, Protocol::Rmi, "remove", "ApiImpl", 210);
        s.exit("rmi", 290);
        let j = join([c.recording(), s.recording()]);
        let nodes = flatten(&j);
        let get = nodes.iter().find(|n| n.method == "Api.get").unwrap();
        assert!(!get.unmatched && nodes[get.children[0]].vm == "s");
        let put = nodes.iter().find(|n| n.method == "Api.put").unwrap();
        assert!(put.unmatched && put.children.is_empty());
        assert!(
            j.notes()
                .iter()
                .any(|n| n.starts_with("1 RMI calls were left unmatched")),
            "{:?}",
            j.notes()
        );
        assert_eq!(nodes.iter().filter(|n| n.parent.is_none()).count(), 3);
    }

    #[test]
    fn a_match_that_would_make_a_loop_is_undone() {
        // A VM calling itself over loopback, with a recording that pairs a call with the
        // server span around it: joined as is, the span would be its own ancestor.
        let mut a = Vm::new("a", 0);
        a.conn("rmi", "127.0.0.1:1099", "127.0.0.1:5000", 0);
        a.remote("rmi", Side::Server, Protocol::Rmi, "Api.get", "Impl", 1);
        a.enter("rmi", "Impl.get", 2);
        a.remote(
            "rmi",
            Side::Client,
            Protocol::Rmi,
            "pkg.Api.get",
            "Api.get",
            3,
        );
        a.conn("rmi", "localhost/127.0.0.1:5000", "/127.0.0.1:1099", 4);
        a.exit("rmi", 8);
        a.exit("rmi", 9);
        a.exit("rmi", 10);
        let j = join([a.recording()]);
        let nodes = flatten(&j);
        assert_eq!(nodes.len(), 2, "{nodes:?}");
        assert!(nodes[0].unmatched && nodes[0].method == "Impl.get" && nodes[0].parent.is_none());
        assert!(nodes[1].unmatched && nodes[1].kind == Some(Kind::Client));
        assert!(
            j.notes()
                .iter()
                .any(|n| n.contains("would have made a loop")),
            "{:?}",
            j.notes()
        );
    }

    #[test]
    fn a_recording_without_calls_is_noted() {
        let mut a = Vm::new("a", 0);
        a.enter("main", "A.run", 0);
        a.exit("main", 5);
        let j = join([a.recording(), Vm::new("idle", 0).recording()]);
        assert!(
            j.notes()
                .iter()
                .any(|n| n.starts_with("idle: its recording holds no calls"))
        );
        assert!(!j.notes().iter().any(|n| n.starts_with("a: its recording")));
        assert_eq!(flatten(&j).len(), 1);
    }

    /// Scans JSON without recursion: the deepest nesting of objects and arrays.
    fn json_depth(s: &[u8]) -> usize {
        let (mut depth, mut max, mut in_str, mut esc) = (0usize, 0usize, false, false);
        for &b in s {
            if in_str {
                match (esc, b) {
                    (true, _) => esc = false,
                    (false, b'\\') => esc = true,
                    (false, b'"') => in_str = false,
                    _ => {}
                }
                continue;
            }
            match b {
                b'"' => in_str = true,
                b'{' | b'[' => {
                    depth += 1;
                    max = max.max(depth);
                }
                b'}' | b']' => depth -= 1,
                _ => {}
            }
        }
        assert_eq!(depth, 0);
        max
    }

    #[test]
    fn a_recursion_ten_thousand_deep_on_both_sides_is_joined_and_written_on_a_small_stack() {
        const DEPTH: i64 = 10_000;
        let mut c = Vm::new("c", 0);
        let mut s = Vm::new("s", HOUR);
        for d in 0..DEPTH {
            c.enter("main", "C.rec", d);
        }
        c.remote(
            "main",
            Side::Client,
            Protocol::Http,
            "k",
            "GET /deep",
            DEPTH,
        );
        s.remote(
            "w",
            Side::Server,
            Protocol::Http,
            "k",
            "GET /deep",
            DEPTH + 5,
        );
        for d in 0..DEPTH {
            s.enter("w", "S.rec", DEPTH + 10 + d);
        }
        for d in 0..DEPTH {
            s.exit("w", 3 * DEPTH + d);
        }
        s.exit("w", 5 * DEPTH);
        c.exit("main", 6 * DEPTH);
        for d in 0..DEPTH {
            c.exit("main", 6 * DEPTH + 1 + d);
        }
        let recordings = vec![c.recording(), s.recording()];
        // 256 KiB of stack: a recursion over 20,000 levels would overflow it.
        let result = std::thread::Builder::new()
            .stack_size(256 << 10)
            .spawn(move || {
                let j = join(recordings);
                let mut outs = Vec::new();
                for f in [
                    OutputFormat::Json,
                    OutputFormat::Text,
                    OutputFormat::Html,
                    OutputFormat::ChromeTrace,
                ] {
                    let mut buf = Vec::new();
                    j.write(f, &mut buf).unwrap();
                    outs.push(buf);
                }
                let mut max_depth = 0;
                let mut count = 0;
                j.walk(|v| {
                    if let Visit::Open(n) = v {
                        max_depth = max_depth.max(n.depth);
                        count += 1;
                    }
                    Ok::<(), ()>(())
                })
                .unwrap();
                drop(j);
                (outs, max_depth, count)
            })
            .unwrap()
            .join()
            .unwrap();
        let (outs, max_depth, count) = result;
        // C.rec ×10,000, the client span, and S.rec ×10,000 (the outermost standing for the
        // server span, its only child).
        assert_eq!(count, 2 * DEPTH as usize + 1);
        assert_eq!(max_depth, 2 * DEPTH as usize);
        let json = &outs[0];
        // Each node is an object holding a children array.
        assert!(json_depth(json) >= 2 * (2 * DEPTH as usize + 1));
        let text = String::from_utf8_lossy(json);
        // (and once in the statistics)
        assert_eq!(
            text.matches("\"method\":\"S.rec\"").count(),
            DEPTH as usize + 1
        );
        assert_eq!(text.matches("\"kind\":\"server\"").count(), 1);
        let txt = String::from_utf8_lossy(&outs[1]);
        assert!(txt.contains("[depth 20000] S.rec  [s/w]"), "deepest line");
        assert!(txt.lines().all(|l| l.len() < 200));
        let html = String::from_utf8_lossy(&outs[2]);
        assert!(html.contains("\"parent\":[-1,0,1,2,"));
        let chrome: serde_json::Value = serde_json::from_slice(&outs[3]).unwrap();
        let xs = chrome["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["ph"] == "X")
            .count();
        assert_eq!(xs, count);
    }

    /// A native file holding `chunks` as its trace section, and where each chunk ends.
    fn native_file(chunks: &[Chunk]) -> (Vec<u8>, Vec<usize>) {
        let mut bytes = Vec::new();
        crate::native::write(&crate::model::Profile::default(), &mut bytes).unwrap();
        bytes.extend_from_slice(SECTION);
        let mut ends = Vec::new();
        for c in chunks {
            write_chunk(c, &mut bytes).unwrap();
            ends.push(bytes.len());
        }
        (bytes, ends)
    }

    #[test]
    fn a_damaged_file_is_joined_up_to_the_damage_and_says_so() {
        let first = Chunk {
            vm: Some(VmHeader {
                vm: "a".into(),
                session: 1,
                host: "h".into(),
                pid: 7,
            }),
            methods: vec![(0, "A.run".into()), (1, "A.step".into())],
            threads: vec![(1, "main".into())],
            events: vec![(
                1,
                vec![
                    Event::Enter { method: 0, ns: 10 },
                    Event::Enter { method: 1, ns: 11 },
                    Event::Exit { ns: 20 },
                    Event::Enter { method: 1, ns: 21 },
                ],
            )],
            dropped_calls: 0,
        };
        let second = Chunk {
            events: vec![(1, vec![Event::Exit { ns: 30 }, Event::Exit { ns: 40 }])],
            dropped_calls: 3,
            ..Chunk::default()
        };
        let (bytes, ends) = native_file(&[first, second]);
        let whole = read_recording(&bytes, "a.jvmprof").unwrap();
        assert!(whole.damage.is_none());
        let cut = read_recording(&bytes[..ends[1] - 3], "a.jvmprof").unwrap();
        let damage = cut.damage.clone().unwrap();
        assert!(
            damage.starts_with("a.jvmprof: the trace is damaged"),
            "{damage}"
        );
        let j = join([cut]);
        assert_eq!(j.notes()[0], damage);
        let nodes = flatten(&j);
        assert_eq!(nodes.len(), 3);
        assert_eq!(nodes[0].method, "A.run");
        assert!(nodes[0].incomplete && nodes[0].dur == 11);
        assert!(!nodes[1].incomplete && nodes[1].dur == 9);
        assert!(nodes[2].incomplete && nodes[2].dur == 0);
        assert!(j.notes().iter().any(|n| n == "a: 2 calls were still open at their thread's last event (closed there, marked incomplete)"));
        // No trace section, or not ours at all.
        let mut plain = Vec::new();
        crate::native::write(&crate::model::Profile::default(), &mut plain).unwrap();
        assert_eq!(
            read_recording(&plain, "p.jvmprof").unwrap_err(),
            "p.jvmprof has no method traces; record with --mode trace"
        );
        assert!(
            read_recording(b"hello", "x.txt")
                .unwrap_err()
                .starts_with("x.txt is not a jvmprof file")
        );
    }

    #[test]
    fn unrelated_runs_join_into_separate_trees_with_a_note() {
        let a = Chain::run(Protocol::Http, 5);
        let b = Chain::run(Protocol::Rmi, 5);
        let mut recs = Vec::new();
        for (run, vms) in [("a", a.vms), ("b", b.vms)] {
            for mut vm in vms.into_iter().take(2) {
                vm.trace.vm = format!("{run}-{}", vm.trace.vm);
                recs.push(vm.recording());
            }
        }
        let j = join(recs);
        assert_eq!(j.groups(), &[vec![0, 1], vec![2, 3]]);
        assert!(
            j.notes()
                .iter()
                .any(|n| n.ends_with("[a-client, a-s1]; [b-client, b-s1]")),
            "{:?}",
            j.notes()
        );
        let nodes = flatten(&j);
        let roots: Vec<&Flat> = nodes.iter().filter(|n| n.parent.is_none()).collect();
        assert_eq!(roots.len(), 10);
        assert!(roots[..5].iter().all(|r| r.vm == "a-client"));
        assert!(roots[5..].iter().all(|r| r.vm == "b-client"));
        // Each tree stays within its run.
        for n in &nodes {
            let mut r = n;
            while let Some(p) = r.parent {
                r = &nodes[p];
            }
            assert_eq!(n.vm[..2], r.vm[..2]);
        }
    }

    #[test]
    fn outputs_carry_the_tree_stats_and_notes() {
        let chain = Chain::run(Protocol::Rmi, 4);
        let mut vms = chain.vms;
        vms[3].trace.methods[0] = "S3</script><script>alert(1)".into();
        let j = join(vms.into_iter().map(Vm::recording));
        let mut html = Vec::new();
        j.write(OutputFormat::Html, &mut html).unwrap();
        let html = String::from_utf8(html).unwrap();
        assert_eq!(html.matches("</script>").count(), 2, "only the page's own");
        assert!(html.contains(r"S3\u003c/script>\u003cscript>alert(1)"));
        assert!(html.contains(PLACEMENT_NOTE));
        assert!(!html.contains("http://") && !html.contains("https://"));
        let start = html.find("type=\"application/json\">").unwrap() + 24;
        let end = start + html[start..].find("</script>").unwrap();
        let data: serde_json::Value = serde_json::from_str(&html[start..end]).unwrap();
        assert_eq!(data["vms"], serde_json::json!(["client", "s1", "s2", "s3"]));
        let n = data["parent"].as_array().unwrap().len();
        assert_eq!(n, 4 * 4 + 3 * 4);
        for col in ["name", "thread", "start", "dur", "placed", "flags"] {
            assert_eq!(data[col].as_array().unwrap().len(), n, "{col}");
        }
        assert_eq!(data["stats"].as_array().unwrap().len(), 4);
        let mut text = Vec::new();
        j.write(OutputFormat::Text, &mut text).unwrap();
        let text = String::from_utf8(text).unwrap();
        assert!(
            text.contains("\nClient.work_0  [client/client-0]  "),
            "{text}"
        );
        assert!(
            text.contains("  I1.serve  [client/client-0]  ") && text.contains("ms  (client)\n")
        );
        assert!(
            text.contains("\n    S1Impl.serve_0  [s1/s1-worker-")
                && text.contains("ms  (server)\n")
        );
        assert!(text.contains("## s2: per-method inclusive times"));
        let mut chrome = Vec::new();
        j.write(OutputFormat::ChromeTrace, &mut chrome).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&chrome).unwrap();
        let events = v["traceEvents"].as_array().unwrap();
        let procs: Vec<&str> = events
            .iter()
            .filter(|e| e["name"] == "process_name")
            .map(|e| e["args"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(procs, ["client", "s1", "s2", "s3"]);
        let starts = events.iter().filter(|e| e["ph"] == "s").count();
        let finishes = events
            .iter()
            .filter(|e| e["ph"] == "f" && e["bp"] == "e")
            .count();
        assert_eq!((starts, finishes), (12, 12));
        assert!(
            events
                .iter()
                .filter(|e| e["ph"] == "X")
                .all(|e| e["ts"].as_f64().unwrap() >= 0.0)
        );
        assert_eq!(v["otherData"]["notes"][0], PLACEMENT_NOTE);
        assert_eq!(
            OutputFormat::from_path(Path::new("x.trace.json")),
            Ok(OutputFormat::ChromeTrace)
        );
        assert_eq!(
            OutputFormat::from_path(Path::new("x.JSON")),
            Ok(OutputFormat::Json)
        );
        assert!(
            OutputFormat::from_path(Path::new("x.svg"))
                .unwrap_err()
                .contains(OutputFormat::SUPPORTED)
        );
    }
}
