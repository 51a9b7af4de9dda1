//! Test fixtures of the join and its writers: VM traces built from events in true time, a
//! chain of VMs calling each other over RMI or HTTP, and a walk flattened into a list.

use super::join::Recording;
use super::layout::{Kind, Visit};
use super::log::{Event, Protocol, Side, ThreadTrace, VmTrace};
use super::tree::Joined;
use std::collections::HashMap;

/// Builds one VM's trace from events in true time; the VM records them on its own clock.
pub(super) struct Vm {
    pub(super) trace: VmTrace,
    pub(super) methods: HashMap<String, u32>,
    pub(super) threads: HashMap<String, usize>,
    pub(super) clock: i64,
}

impl Vm {
    pub(super) fn new(name: &str, clock: i64) -> Vm {
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

    pub(super) fn push(&mut self, thread: &str, e: Event) {
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

    pub(super) fn enter(&mut self, thread: &str, method: &str, t: i64) {
        let n = self.methods.len() as u32;
        let method = *self.methods.entry(method.to_string()).or_insert_with(|| {
            self.trace.methods.push(method.to_string());
            n
        });
        let ns = t + self.clock;
        self.push(thread, Event::Enter { method, ns });
    }

    pub(super) fn exit(&mut self, thread: &str, t: i64) {
        let ns = t + self.clock;
        self.push(thread, Event::Exit { ns });
    }

    pub(super) fn remote(
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

    pub(super) fn conn(&mut self, thread: &str, local: &str, remote: &str, t: i64) {
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

    pub(super) fn recording(self) -> Recording {
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
pub(super) struct Chain {
    pub(super) vms: Vec<Vm>,
    pub(super) protocol: Protocol,
    /// Per level (1..=3): (port, free at) of the caller's connections.
    pub(super) pools: Vec<Vec<(u16, i64)>>,
    /// Per level: free-at of the server threads.
    pub(super) servers: Vec<Vec<i64>>,
    pub(super) http_calls: u64,
}

pub(super) const HOUR: i64 = 3_600_000_000_000;

/// How each level's VM writes its own and its callers' endpoints.
pub(super) fn server_addr(level: usize) -> (&'static str, &'static str) {
    // (as the caller writes the remote end, as the server writes its local end)
    match level {
        1 => ("s1host/10.0.0.1:1099", "/10.0.0.1:1099"),
        2 => ("s2host/10.0.0.2:1099", "10.0.0.2:1099"),
        _ => ("localhost/127.0.0.1:2000", "/[0:0:0:0:0:0:0:1]:2000"),
    }
}

pub(super) fn caller_addr(level: usize, port: u16) -> (String, String) {
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
    pub(super) fn new(protocol: Protocol) -> Chain {
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
    pub(super) fn call(&mut self, level: usize, caller: &str, t0: i64, id: u64) -> i64 {
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
        let tail = ((id.wrapping_mul(2_654_435_761) % 997) as i64 + 1) * 50 * (4 - level as i64);
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
    pub(super) fn run(protocol: Protocol, calls: u64) -> Chain {
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
pub(super) struct Flat {
    pub(super) vm: String,
    pub(super) thread: String,
    pub(super) method: String,
    pub(super) start: i64,
    pub(super) dur: i64,
    pub(super) placed: i64,
    pub(super) kind: Option<Kind>,
    pub(super) unmatched: bool,
    pub(super) incomplete: bool,
    pub(super) parent: Option<usize>,
    pub(super) children: Vec<usize>,
}

pub(super) fn flatten(j: &Joined) -> Vec<Flat> {
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

pub(super) fn id_of(method: &str) -> u64 {
    method.rsplit_once('_').unwrap().1.parse().unwrap()
}

/// Enter counts by (vm, method) in the recordings.
pub(super) fn recorded(vms: &[&Vm]) -> HashMap<(String, String), usize> {
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
