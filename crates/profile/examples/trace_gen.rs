//! Writes synthetic trace-mode recordings, one `.jvmprof` file per VM, to try `jvmprof trace`
//! at scale: `cargo run --release -p jvmprof-profile --example trace_gen -- DIR [CALLS] [VMS]`.
//!
//! VM 0 (`gen-client`) runs 8 request threads; VMs 1.. are servers in a chain. Each request
//! makes local calls and a remote call to server 1, alternately over RMI (connection events,
//! calls numbered on the connection) and HTTP (call ids); half the served calls call the next
//! server in turn. Every VM's clock is off by its own amount. One client thread also runs a
//! recursion 5,000 deep. CALLS (default 1,000,000) is the number of method calls in all files
//! together; the events go out in chunks of at most 64k per thread, as the agent drains them.
//! Prints one line per file, then `calls=N remote=N events=N`.

use jvmprof_profile::trace::log::{Chunk, Event, Protocol, Side, VmHeader};
use std::path::PathBuf;

const THREADS: usize = 8;
const LOCAL: usize = 2;
const RECURSION: usize = 5_000;

struct Vm {
    name: String,
    clock: i64,
    methods: Vec<String>,
    threads: Vec<(u64, String, Vec<Event>)>,
}

impl Vm {
    fn method(&mut self, name: &str) -> u32 {
        match self.methods.iter().position(|m| m == name) {
            Some(i) => i as u32,
            None => {
                self.methods.push(name.to_string());
                self.methods.len() as u32 - 1
            }
        }
    }

    fn thread(&mut self, name: &str) -> usize {
        match self.threads.iter().position(|t| t.1 == name) {
            Some(i) => i,
            None => {
                self.threads
                    .push((1 + self.threads.len() as u64, name.to_string(), Vec::new()));
                self.threads.len() - 1
            }
        }
    }

    fn push(&mut self, thread: usize, mut e: Event) {
        match &mut e {
            Event::Enter { ns, .. }
            | Event::Exit { ns }
            | Event::Remote { ns, .. }
            | Event::Connection { ns, .. }
            | Event::Context { ns, .. }
            | Event::Thread { ns, .. } => *ns += self.clock,
        }
        self.threads[thread].2.push(e);
    }
}

struct Gen {
    vms: Vec<Vm>,
    calls: u64,
    remote: u64,
    seed: u64,
}

impl Gen {
    fn rand(&mut self, n: u64) -> i64 {
        self.seed ^= self.seed << 13;
        self.seed ^= self.seed >> 7;
        self.seed ^= self.seed << 17;
        (self.seed % n) as i64
    }

    /// A local call of `len` ns on (vm, thread) at `t`.
    fn local(&mut self, vm: usize, th: usize, name: &str, t: i64, len: i64) -> i64 {
        let m = self.vms[vm].method(name);
        self.vms[vm].push(th, Event::Enter { method: m, ns: t });
        self.vms[vm].push(th, Event::Exit { ns: t + len });
        self.calls += 1;
        t + len + 1
    }

    /// A remote call from (vm, th) to server `to`, for the caller's thread `lane`; returns its
    /// end on the true clock.
    fn remote(&mut self, vm: usize, th: usize, lane: usize, to: usize, rmi: bool, t: i64) -> i64 {
        self.remote += 1;
        let id = self.remote;
        let (protocol, key, label) = if rmi {
            (
                Protocol::Rmi,
                format!("gen.Api{to}.handle"),
                format!("Api{to}.handle"),
            )
        } else {
            (
                Protocol::Http,
                format!("5eed-{id}"),
                format!("POST http://server{to}/handle"),
            )
        };
        let remote = Event::Remote {
            side: Side::Client,
            protocol,
            key: key.clone(),
            label,
            ns: t,
        };
        self.vms[vm].push(th, remote);
        // One connection (and one serving thread) per calling lane and protocol.
        let port = 30_000 + (vm * 100 + lane) as u16;
        let (client_end, server_end) = (format!("10.1.0.{vm}:{port}"), format!("10.1.0.{to}:1099"));
        if rmi {
            let e = Event::Connection {
                local: client_end.clone(),
                remote: format!("server{to}/{server_end}"),
                ns: t + 1,
            };
            self.vms[vm].push(th, e);
        }
        let st_name = if rmi {
            format!("RMI TCP Connection({lane})-10.1.0.{vm}")
        } else {
            format!("http-worker-{vm}-{lane}")
        };
        let st = self.vms[to].thread(&st_name);
        let recv = t + 20_000;
        if rmi {
            let e = Event::Connection {
                local: format!("/{server_end}"),
                remote: format!("/{client_end}"),
                ns: recv - 1,
            };
            self.vms[to].push(st, e);
        }
        let server_key = if rmi {
            format!("gen.Impl{to}.handle")
        } else {
            key
        };
        let span = Event::Remote {
            side: Side::Server,
            protocol,
            key: server_key,
            label: format!("Impl{to}"),
            ns: recv,
        };
        self.vms[to].push(st, span);
        let m = self.vms[to].method(&format!("gen.Impl{to}.handle"));
        self.vms[to].push(
            st,
            Event::Enter {
                method: m,
                ns: recv + 1,
            },
        );
        self.calls += 1;
        let mut u = recv + 2;
        for k in 0..LOCAL {
            let len = 1_000 + self.rand(50_000);
            u = self.local(to, st, &format!("gen.Impl{to}.step{k}"), u, len);
        }
        if to + 1 < self.vms.len() && self.rand(2) == 0 {
            u = self.remote(to, st, lane, to + 1, !rmi, u);
        }
        u += self.rand(20_000);
        self.vms[to].push(st, Event::Exit { ns: u });
        self.vms[to].push(st, Event::Exit { ns: u + 1 });
        let end = u + 20_000;
        self.vms[vm].push(th, Event::Exit { ns: end });
        end
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let dir = PathBuf::from(args.next().ok_or("usage: trace_gen DIR [CALLS] [VMS]")?);
    let target: u64 = args
        .next()
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or(1_000_000);
    let vms: usize = args.next().map(|s| s.parse()).transpose()?.unwrap_or(4);
    if vms < 2 {
        return Err("at least 2 VMs: a client and a server".into());
    }
    std::fs::create_dir_all(&dir)?;
    let mut g = Gen {
        vms: (0..vms)
            .map(|i| Vm {
                name: if i == 0 {
                    "gen-client".to_string()
                } else {
                    format!("gen-server{i}")
                },
                // Clocks that have nothing to do with each other.
                clock: (i as i64 * 7_777_777_777_777) % 9_000_000_000_000
                    - 1_000_000_000 * i as i64,
                methods: Vec::new(),
                threads: Vec::new(),
            })
            .collect(),
        calls: 0,
        remote: 0,
        seed: 0x9e37_79b9_7f4a_7c15,
    };
    let threads: Vec<usize> = (0..THREADS)
        .map(|i| g.vms[0].thread(&format!("request-{i}")))
        .collect();
    let mut now = [1_000_000i64; THREADS];
    // The recursion, once, on the first thread.
    let rec = g.vms[0].method("gen.Client.recurse");
    for d in 0..RECURSION {
        g.vms[0].push(
            threads[0],
            Event::Enter {
                method: rec,
                ns: now[0] + d as i64,
            },
        );
    }
    let bottom = now[0] + RECURSION as i64;
    let end = g.remote(0, threads[0], 0, 1, true, bottom);
    for d in 0..RECURSION {
        g.vms[0].push(
            threads[0],
            Event::Exit {
                ns: end + 1 + d as i64,
            },
        );
    }
    g.calls += RECURSION as u64;
    now[0] = end + RECURSION as i64 + 10;
    let mut request = 0u64;
    while g.calls < target {
        let lane = (request % THREADS as u64) as usize;
        let th = threads[lane];
        let t = now[lane];
        let m = g.vms[0].method("gen.Client.request");
        g.vms[0].push(th, Event::Enter { method: m, ns: t });
        g.calls += 1;
        let mut u = t + 1;
        for k in 0..LOCAL {
            let len = 500 + g.rand(5_000);
            u = g.local(0, th, &format!("gen.Client.prepare{k}"), u, len);
        }
        u = g.remote(0, th, lane, 1, request.is_multiple_of(2), u);
        g.vms[0].push(th, Event::Exit { ns: u + 100 });
        now[lane] = u + 200 + g.rand(10_000);
        request += 1;
    }
    let mut events = 0usize;
    for (i, vm) in g.vms.into_iter().enumerate() {
        let path = dir.join(format!("{}.jvmprof", vm.name));
        let mut out = std::io::BufWriter::new(std::fs::File::create(&path)?);
        let profile = jvmprof_profile::Profile {
            meta: jvmprof_profile::Meta {
                modes: vec!["trace".into()],
                ..Default::default()
            },
            ..Default::default()
        };
        let mut records = jvmprof_profile::records::RecordWriter::new();
        std::io::Write::write_all(&mut out, &jvmprof_profile::native::records_header())?;
        let mut first = true;
        let mut offsets = vec![0usize; vm.threads.len()];
        loop {
            let mut chunk = Chunk {
                dropped_calls: 0,
                ..Chunk::default()
            };
            if first {
                chunk.vm = Some(VmHeader {
                    vm: vm.name.clone(),
                    session: 0x5eed + i as u64,
                    host: format!("host{i}"),
                    pid: 1000 + i as u32,
                });
                chunk.methods = vm
                    .methods
                    .iter()
                    .enumerate()
                    .map(|(k, m)| (k as u32, m.clone()))
                    .collect();
                chunk.threads = vm.threads.iter().map(|t| (t.0, t.1.clone())).collect();
            }
            for (t, at) in vm.threads.iter().zip(offsets.iter_mut()) {
                let to = (*at + 65_536).min(t.2.len());
                if to > *at {
                    chunk.events.push((t.0, t.2[*at..to].to_vec()));
                    events += to - *at;
                    *at = to;
                }
            }
            if chunk.events.is_empty() && !first {
                break;
            }
            first = false;
            std::io::Write::write_all(&mut out, &records.update(&profile, &[], &[chunk], false)?)?;
        }
        std::io::Write::write_all(&mut out, &records.update(&profile, &[], &[], true)?)?;
        std::io::Write::flush(&mut out)?;
        println!("{}", path.display());
    }
    println!("calls={} remote={} events={events}", g.calls, g.remote);
    Ok(())
}
