//! The collector (`jvmprof serve`): one job, to take in what many agents stream, keep it, and show
//! it. One TCP port serves both: a connection that starts with the protocol magic `JVMP` is an
//! agent, anything else is HTTP (the JSON API of [`http`] and the embedded web UI).
//!
//! Each agent connection is decoded by `jvmprof_proto::Decoder`; its traces go to every
//! [`Analysis`] (xdProf's `add_connection` / `add_trace` / `remove_connection`). A malformed or
//! truncated stream closes that connection with a logged reason; everything it sent before stays.
//! Data lives in redb under `--data` ([`store`]), so VMs, their profiles and last snapshots
//! survive a restart; a VM that disconnects stays listed as disconnected.

#![forbid(unsafe_code)]

pub mod analysis;
pub mod heaps;
pub mod http;
pub mod store;

use analysis::{Analysis, CallGraphs, LiveView, Profiles, Trace};
use jvmprof_proto::{Decoder, Event, MAGIC, Reply};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use store::{Store, VmRecord};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// How long a new connection may take to send its first four bytes.
const SNIFF_TIMEOUT: Duration = Duration::from_secs(10);
/// Queued storage writes above which connections wait for the store before reading more.
const MAX_BACKLOG: usize = 512;
/// An agent connection silent this long is closed (agents send a snapshot every `refresh`).
const IDLE_TIMEOUT: Duration = Duration::from_secs(300);

#[derive(Clone, Debug)]
pub struct Config {
    pub listen: String,
    pub data: PathBuf,
    pub token: Option<String>,
}

pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

struct VmState {
    record: VmRecord,
    /// Open connections (a reconnect may arrive before the old one is seen closing).
    connections: u32,
    /// The newest sample batch received (stored or queued for storing); older seqs are
    /// duplicates an agent re-sent after a reconnect.
    received_seq: u64,
}

/// Every VM ever seen, connected or not.
#[derive(Default)]
pub struct Registry {
    vms: Mutex<BTreeMap<u64, VmState>>,
}

/// A VM as the API lists it.
#[derive(Clone, Debug, serde::Serialize)]
pub struct VmView {
    #[serde(flatten)]
    pub record: VmRecord,
    pub connected: bool,
}

impl Registry {
    fn load(records: Vec<VmRecord>, store: &Store) -> Registry {
        let vms = records
            .into_iter()
            .map(|r| {
                (
                    r.id,
                    VmState {
                        connections: 0,
                        received_seq: store.committed(r.id),
                        record: r,
                    },
                )
            })
            .collect();
        Registry {
            vms: Mutex::new(vms),
        }
    }

    /// The VM this hello names (same host, pid and agent start time), or a new one, and the
    /// newest batch seq received from it.
    fn connect(&self, h: &jvmprof_proto::Hello) -> (VmRecord, u64) {
        let mut vms = self.vms.lock().unwrap();
        let now = now_ms();
        let existing = vms.values_mut().find(|v| {
            v.record.host == h.host
                && v.record.pid == h.pid
                && v.record.start_unix_ms == h.start_unix_ms
        });
        let state = match existing {
            Some(v) => v,
            None => {
                let id = vms.keys().next_back().map_or(1, |k| k + 1);
                vms.entry(id).or_insert(VmState {
                    record: VmRecord {
                        id,
                        pid: h.pid,
                        command: h.command.clone(),
                        host: h.host.clone(),
                        jvm: h.jvm.clone(),
                        os: h.os.clone(),
                        agent_version: h.agent_version.clone(),
                        start_unix_ms: h.start_unix_ms,
                        ..VmRecord::default()
                    },
                    connections: 0,
                    received_seq: 0,
                })
            }
        };
        state.connections += 1;
        state.record.connected_at = now;
        state.record.last_seen = now;
        (state.record.clone(), state.received_seq)
    }

    /// Records batch `seq` as received; false if it was received before (a re-send).
    fn receive(&self, id: u64, seq: u64) -> bool {
        let mut vms = self.vms.lock().unwrap();
        match vms.get_mut(&id) {
            Some(v) if seq > v.received_seq => {
                v.received_seq = seq;
                true
            }
            _ => false,
        }
    }

    fn update(&self, id: u64, f: impl FnOnce(&mut VmRecord)) -> Option<VmRecord> {
        let mut vms = self.vms.lock().unwrap();
        let v = vms.get_mut(&id)?;
        f(&mut v.record);
        Some(v.record.clone())
    }

    fn disconnect(&self, id: u64) {
        if let Some(v) = self.vms.lock().unwrap().get_mut(&id) {
            v.connections = v.connections.saturating_sub(1);
        }
    }

    pub fn record(&self, id: u64) -> Option<VmRecord> {
        self.vms.lock().unwrap().get(&id).map(|v| v.record.clone())
    }

    pub fn list(&self) -> Vec<VmView> {
        self.vms
            .lock()
            .unwrap()
            .values()
            .map(|v| VmView {
                record: v.record.clone(),
                connected: v.connections > 0,
            })
            .collect()
    }
}

/// Everything the connection tasks and the HTTP handlers share.
pub struct Hub {
    pub config: Config,
    pub store: Store,
    pub vms: Arc<Registry>,
    pub live: Arc<LiveView>,
    pub analyses: Vec<Arc<dyn Analysis>>,
    pub stats: Stats,
    /// Heap dumps uploaded per VM and their reports.
    pub heaps: Arc<heaps::Heaps>,
}

/// Counters since the collector started (`GET /api/stats`).
#[derive(Default, serde::Serialize)]
pub struct Stats {
    pub connections: AtomicU64,
    pub rejected: AtomicU64,
    pub protocol_errors: AtomicU64,
    pub bytes: AtomicU64,
    pub snapshots: AtomicU64,
    pub sample_batches: AtomicU64,
    /// Batches an agent re-sent after a reconnect that were already stored (ignored).
    pub duplicate_batches: AtomicU64,
    pub samples: AtomicU64,
}

fn bump(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}

impl Hub {
    pub fn open(config: Config) -> anyhow::Result<Hub> {
        let store = Store::open(&config.data)?;
        let vms = Arc::new(Registry::load(store.vms()?, &store));
        let live = Arc::new(LiveView::load(&store)?);
        let analyses: Vec<Arc<dyn Analysis>> = vec![
            live.clone(),
            Arc::new(Profiles::new(store.clone())),
            Arc::new(CallGraphs {
                store: store.clone(),
                dir: config.data.join("callgraphs"),
                vms: vms.clone(),
            }),
        ];
        let heaps = Arc::new(heaps::Heaps::open(&config.data)?);
        Ok(Hub {
            config,
            store,
            vms,
            live,
            analyses,
            stats: Stats::default(),
            heaps,
        })
    }
}

/// Binds `config.listen`, prints where, and serves until the process ends.
pub fn run_blocking(config: Config) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let hub = Arc::new(Hub::open(config)?);
        let listener = TcpListener::bind(&hub.config.listen)
            .await
            .map_err(|e| anyhow::anyhow!("cannot listen on {}: {e}", hub.config.listen))?;
        let addr = listener.local_addr()?;
        eprintln!(
            "jvmprof serve: listening on {addr} (web UI http://{addr}/, agents server={addr}), data in {}",
            hub.config.data.display()
        );
        serve(hub, listener).await
    })
}

/// Accepts connections and routes each to the agent protocol or to HTTP by its first bytes.
pub async fn serve(hub: Arc<Hub>, listener: TcpListener) -> anyhow::Result<()> {
    let local = listener.local_addr()?;
    let (http_tx, http_rx) = tokio::sync::mpsc::channel(256);
    let router = http::router(hub.clone());
    tokio::spawn(async move {
        let _ = axum::serve(http::ChannelListener { rx: http_rx, local }, router).await;
    });
    loop {
        let (sock, peer) = match listener.accept().await {
            Ok(x) => x,
            Err(e) => {
                eprintln!("jvmprof serve: accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let hub = hub.clone();
        let http_tx = http_tx.clone();
        tokio::spawn(async move {
            match sniff(&sock).await {
                Some(true) => agent(hub, sock, peer).await,
                Some(false) => {
                    let _ = http_tx.send((sock, peer)).await;
                }
                None => {}
            }
        });
    }
}

/// `Some(true)` for an agent, `Some(false)` for anything else, `None` if it closed or stayed
/// silent.
async fn sniff(sock: &TcpStream) -> Option<bool> {
    let mut head = [0u8; 4];
    let deadline = tokio::time::Instant::now() + SNIFF_TIMEOUT;
    loop {
        let n = tokio::time::timeout_at(deadline, sock.peek(&mut head))
            .await
            .ok()?
            .ok()?;
        if n == 0 {
            return None;
        }
        if n >= 4 || !MAGIC.starts_with(&head[..n]) {
            return Some(head == MAGIC);
        }
        // A partial magic: wait for the rest.
        tokio::time::sleep(Duration::from_millis(5)).await;
        if tokio::time::Instant::now() >= deadline {
            return None;
        }
    }
}

/// One agent connection, from Hello to close.
async fn agent(hub: Arc<Hub>, mut sock: TcpStream, peer: SocketAddr) {
    let mut dec = Decoder::new();
    let mut buf = vec![0u8; 64 << 10];
    let mut vm: Option<u64> = None;
    let mut acked = 0;
    let problem: Option<String> = 'conn: loop {
        let n = match tokio::time::timeout(IDLE_TIMEOUT, sock.read(&mut buf)).await {
            Err(_) => break Some(format!("silent for {} s", IDLE_TIMEOUT.as_secs())),
            Ok(Err(e)) => break Some(e.to_string()),
            Ok(Ok(0)) => break dec.finish().err().map(|e| e.to_string()),
            Ok(Ok(n)) => n,
        };
        bump(&hub.stats.bytes, n as u64);
        dec.push(&buf[..n]);
        loop {
            let event = match dec.next_event() {
                Ok(Some(e)) => e,
                Ok(None) => break,
                Err(e) => {
                    bump(&hub.stats.protocol_errors, 1);
                    break 'conn Some(e.to_string());
                }
            };
            match (event, vm) {
                (Event::Hello(h), _) => {
                    if hub.config.token.is_some() && h.token != hub.config.token {
                        let reason = if h.token.is_none() {
                            "this collector needs a token (token=...)"
                        } else {
                            "wrong token"
                        };
                        bump(&hub.stats.rejected, 1);
                        reply(
                            &mut sock,
                            &Reply::Reject {
                                reason: reason.into(),
                            },
                        )
                        .await;
                        break 'conn Some(format!("rejected: {reason}"));
                    }
                    bump(&hub.stats.connections, 1);
                    let (record, last_seq) = hub.vms.connect(&h);
                    acked = last_seq;
                    vm = Some(record.id);
                    eprintln!(
                        "jvmprof serve: VM {} (pid {} on {}) connected from {peer}",
                        record.id, record.pid, record.host
                    );
                    for a in &hub.analyses {
                        a.add_connection(&record);
                    }
                    let welcome = Reply::Welcome {
                        vm_id: record.id,
                        last_seq,
                    };
                    if !reply(&mut sock, &welcome).await {
                        break 'conn Some("cannot answer the handshake".into());
                    }
                }
                (
                    Event::Samples {
                        seq,
                        time_unix_ms,
                        profile,
                    },
                    Some(id),
                ) => {
                    if !hub.vms.receive(id, seq) {
                        bump(&hub.stats.duplicate_batches, 1);
                        continue;
                    }
                    bump(&hub.stats.sample_batches, 1);
                    bump(&hub.stats.samples, profile.total(0));
                    let trace = Trace::Samples {
                        seq,
                        time_unix_ms,
                        profile,
                    };
                    for a in &hub.analyses {
                        a.add_trace(id, &trace);
                    }
                    if let Some(r) = hub.vms.update(id, |r| r.last_seen = now_ms()) {
                        hub.store.put_vm(r);
                    }
                }
                (Event::Snapshot(s), Some(id)) => {
                    bump(&hub.stats.snapshots, 1);
                    hub.vms.update(id, |r| r.last_seen = now_ms());
                    let trace = Trace::Snapshot(s);
                    for a in &hub.analyses {
                        a.add_trace(id, &trace);
                    }
                }
                (
                    Event::Dropped {
                        snapshots,
                        sample_batches,
                        samples,
                    },
                    Some(id),
                ) => {
                    if let Some(r) = hub.vms.update(id, |r| {
                        r.dropped_snapshots = snapshots;
                        r.dropped_sample_batches = sample_batches;
                        r.dropped_samples = samples;
                    }) {
                        hub.store.put_vm(r);
                    }
                }
                (Event::Bye, _) => break 'conn None,
                // The decoder only yields other events after a Hello.
                (_, None) => break 'conn Some("data before the handshake".into()),
            }
        }
        // Backpressure: while storage lags, stop reading (TCP then slows the agents down).
        if hub.store.backlog() > MAX_BACKLOG {
            hub.store.barrier().await;
        }
        if let Some(id) = vm
            && !send_ack(&hub, &mut sock, id, &mut acked).await
        {
            break Some("cannot send acknowledgements".into());
        }
    };
    // Everything received is durable before the agent sees the close (it waits for it after
    // Bye) and before the VM is shown as disconnected.
    hub.store.barrier().await;
    if let Some(id) = vm {
        send_ack(&hub, &mut sock, id, &mut acked).await;
    }
    let _ = sock.shutdown().await;
    let who = match vm {
        Some(id) => format!("VM {id} ({peer})"),
        None => format!("{peer}"),
    };
    match &problem {
        Some(p) => eprintln!("jvmprof serve: connection of {who} closed: {p}"),
        None => eprintln!("jvmprof serve: {who} disconnected"),
    }
    if let Some(id) = vm {
        if let Some(r) = hub.vms.update(id, |r| r.last_seen = now_ms()) {
            hub.store.put_vm(r);
        }
        hub.store.barrier().await;
        hub.vms.disconnect(id);
        for a in &hub.analyses {
            a.remove_connection(id);
        }
    }
}

/// Acknowledges the batches stored since the last Ack; false if the agent cannot be written to.
async fn send_ack(hub: &Hub, sock: &mut TcpStream, vm: u64, acked: &mut u64) -> bool {
    let seq = hub.store.committed(vm);
    if seq <= *acked {
        return true;
    }
    *acked = seq;
    reply(sock, &Reply::Ack { seq }).await
}

async fn reply(sock: &mut TcpStream, r: &Reply) -> bool {
    let mut out = Vec::new();
    jvmprof_proto::wire::put_frame(r, &mut out);
    sock.write_all(&out).await.is_ok()
}
