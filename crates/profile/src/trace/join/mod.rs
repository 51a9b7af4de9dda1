//! The join across JVMs (JaViz): `jvmprof trace FILE... -o OUT` joins the method traces several
//! VMs recorded ([`crate::trace::log`]) at their remote calls into one execution tree
//! ([`Joined`]), without synchronising their clocks.
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
//! subtree inside its client span ([`Joined::walk`]'s `placed_ns`, see [`crate::trace::layout`]), which shows nesting, not
//! synchronised time.
//!
//! Nothing here recurses over the depth of a tree: a recursion thousands deep is walked,
//! written and read back with explicit stacks.

use super::log::{Event, Protocol, Side, ThreadTrace, VmTrace};
use super::tree::{
    CLIENT, COLLAPSED, INCOMPLETE, Joined, MOVED, NONE, Node, SERVER, Span, TOP, ThreadInfo,
    UNMATCHED, VmInfo,
};
use crate::methods::MethodStat;
use std::collections::HashMap;
use std::net::IpAddr;

#[cfg(test)]
mod tests;

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

impl Joined {
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
}
