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
pub mod ingest;
pub mod push;
pub mod store;
pub mod traces;

pub use store::{clickhouse, now_ms};

use analysis::{Analysis, CallGraphs, LiveView, Profiles, Trace};
use jvmprof_proto::{Decoder, Event, MAGIC, Reply};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use store::{Store, VmRecord};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// How long a new connection may take to send its first four bytes.
const SNIFF_TIMEOUT: Duration = Duration::from_secs(10);
/// Queued storage writes above which connections wait for the store before reading more.
const MAX_BACKLOG: usize = 512;
/// An agent connection silent this long is closed (agents send a snapshot every `refresh`).
const IDLE_TIMEOUT: Duration = Duration::from_secs(300);
/// Most bytes a connection may send before its Hello is accepted (a Hello is a few hundred).
pub const MAX_HANDSHAKE: usize = 64 << 10;
/// Most bytes one agent connection may make the collector hold (its tables and input buffer):
/// a large application's frames and strings are a few MB.
pub const MAX_CONNECTION_BYTES: usize = 48 << 20;
/// Most bytes all agent connections together may make it hold.
pub const MAX_ALL_CONNECTIONS_BYTES: usize = 128 << 20;
/// Most connections open at once (agents and browsers); more are closed at once, so idle or
/// slow clients cannot make the collector hold a buffer each without bound.
pub const MAX_CONNECTIONS: usize = 1024;
/// New VM records one address may create a minute (a host starting many JVMs at once is
/// fine; a client inventing VMs in a loop is refused).
pub const MAX_NEW_VMS_PER_MINUTE: u32 = 300;

#[derive(Clone, Debug)]
pub struct Config {
    pub listen: String,
    pub data: PathBuf,
    pub token: Option<String>,
    /// What the store keeps and for how long.
    pub retention: store::Retention,
    /// A ClickHouse database to keep everything in instead of `data` (shared by collectors).
    pub clickhouse: Option<clickhouse::Location>,
    /// Where to push every VM's profile (`--push`), if anywhere.
    pub push: Option<push::PushConfig>,
}

struct VmState {
    record: VmRecord,
    /// Open connections (a reconnect may arrive before the old one is seen closing).
    connections: u32,
    /// The newest sample batch received (stored or queued for storing); older seqs are
    /// duplicates an agent re-sent after a reconnect.
    received_seq: u64,
}

/// Every VM seen and not deleted, connected or not.
#[derive(Default)]
pub struct Registry {
    vms: Mutex<BTreeMap<u64, VmState>>,
    /// The id the next new VM gets (ids are never reused).
    next_id: std::sync::atomic::AtomicU64,
}

/// Why a VM cannot be deleted.
#[derive(Debug, PartialEq, Eq)]
pub enum DeleteError {
    Unknown,
    Connected,
}

/// A VM as the API lists it.
#[derive(Clone, Debug, serde::Serialize)]
pub struct VmView {
    #[serde(flatten)]
    pub record: VmRecord,
    pub connected: bool,
}

impl Registry {
    fn load(records: Vec<VmRecord>, store: &Store, next_id: u64) -> Registry {
        let vms = records
            .into_iter()
            .map(|mut r| {
                // Records kept by a collector from before tokens were masked.
                r.command = mask_tokens(&r.command);
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
            next_id: next_id.into(),
        }
    }

    /// The VM this hello names (same host, pid and agent start time), or a new one if
    /// `may_add` allows, and the newest batch seq received from it; `None` when it would be
    /// new and may not be added.
    fn connect(
        &self,
        h: &jvmprof_proto::Hello,
        store: &Store,
        may_add: impl FnOnce() -> bool,
    ) -> Option<(VmRecord, u64)> {
        let mut vms = self.vms.lock().unwrap();
        let now = now_ms();
        let existing = vms.values().find(|v| {
            v.record.host == h.host
                && v.record.pid == h.pid
                && v.record.start_unix_ms == h.start_unix_ms
        });
        if existing.is_none() && !may_add() {
            return None;
        }
        let existing = existing.map(|v| v.record.id);
        let state = match existing.and_then(|id| vms.get_mut(&id)) {
            Some(v) => v,
            None => {
                let id = store
                    .vm_id_for(&h.host, h.pid, h.start_unix_ms)
                    .unwrap_or_else(|| self.next_id.fetch_add(1, Ordering::Relaxed));
                vms.entry(id).or_insert(VmState {
                    record: VmRecord {
                        id,
                        pid: h.pid,
                        command: mask_tokens(&h.command),
                        host: h.host.clone(),
                        jvm: h.jvm.clone(),
                        os: h.os.clone(),
                        agent_version: h.agent_version.clone(),
                        start_unix_ms: h.start_unix_ms,
                        ..VmRecord::default()
                    },
                    connections: 0,
                    // A shared store may hold batches another collector took from this VM.
                    received_seq: store.committed(id),
                })
            }
        };
        state.connections += 1;
        state.record.connected_at = now;
        state.record.last_seen = now;
        Some((state.record.clone(), state.received_seq))
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

    /// Adds the VMs a shared store holds that this registry does not know (another collector
    /// took them in).
    pub fn add_stored(&self, records: Vec<VmRecord>, store: &Store) {
        let mut vms = self.vms.lock().unwrap();
        for r in records {
            vms.entry(r.id).or_insert_with(|| VmState {
                connections: 0,
                received_seq: store.committed(r.id),
                record: r,
            });
        }
    }

    /// Forgets a VM that is not connected (its data is the store's to delete).
    pub fn remove(&self, id: u64) -> Result<VmRecord, DeleteError> {
        let mut vms = self.vms.lock().unwrap();
        match vms.get(&id) {
            None => Err(DeleteError::Unknown),
            Some(v) if v.connections > 0 => Err(DeleteError::Connected),
            Some(_) => Ok(vms.remove(&id).map(|v| v.record).unwrap_or_default()),
        }
    }

    /// The VMs with an open connection.
    pub fn connected(&self) -> std::collections::HashSet<u64> {
        let vms = self.vms.lock().unwrap();
        vms.iter()
            .filter(|(_, v)| v.connections > 0)
            .map(|(id, _)| *id)
            .collect()
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

/// `command` with the value of every `token=` option replaced by `***`: a command line is shown
/// in the API and the UI, and an agent's options may carry the collector's token.
pub fn mask_tokens(command: &str) -> String {
    let mut out = String::with_capacity(command.len());
    let mut rest = command;
    while let Some(at) = rest.find("token=") {
        let start = at + "token=".len();
        out.push_str(&rest[..start]);
        let value_len = rest[start..]
            .find(|c: char| c == ',' || c.is_whitespace())
            .unwrap_or(rest.len() - start);
        if value_len > 0 {
            out.push_str("***");
        }
        rest = &rest[start + value_len..];
    }
    out.push_str(rest);
    out
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
    /// Method traces streamed per VM (trace mode).
    pub traces: Arc<traces::Traces>,
    /// Bytes all agent connections make the collector hold (see [`MAX_ALL_CONNECTIONS_BYTES`]).
    pub held: std::sync::atomic::AtomicUsize,
    /// Per address: the minute (since the epoch) and how many new VMs it created in it.
    new_vms: Mutex<std::collections::HashMap<std::net::IpAddr, (u64, u32)>>,
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
    /// Profiles received at `/ingest` ([`ingest`]).
    pub ingested: AtomicU64,
    /// With `--push` ([`push`]): rounds run, profiles pushed, pushes that failed, and
    /// milliseconds of samples dropped because a VM's window grew too long.
    pub push_rounds: AtomicU64,
    pub pushed: AtomicU64,
    pub push_failures: AtomicU64,
    pub push_dropped_ms: AtomicU64,
    /// Trace chunks received (trace mode).
    pub trace_chunks: AtomicU64,
}

fn bump(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}

impl Hub {
    /// Whether `ip` may create another VM record this minute (and counts it if so).
    fn may_add_vm(&self, ip: std::net::IpAddr) -> bool {
        let minute = now_ms() / 60_000;
        let mut map = self.new_vms.lock().unwrap();
        // Old minutes go, so the map holds only this minute's addresses.
        map.retain(|_, (m, _)| *m == minute);
        let (_, n) = map.entry(ip).or_insert((minute, 0));
        if *n >= MAX_NEW_VMS_PER_MINUTE {
            return false;
        }
        *n += 1;
        true
    }

    pub fn open(config: Config) -> anyhow::Result<Hub> {
        let store = match &config.clickhouse {
            Some(location) => Store::open_clickhouse(location)?,
            None => Store::open(&config.data)?,
        };
        let vms = Arc::new(Registry::load(store.vms()?, &store, store.next_vm_id()?));
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
        let traces = Arc::new(traces::Traces::open(&config.data)?);
        Ok(Hub {
            config,
            store,
            vms,
            live,
            analyses,
            stats: Stats::default(),
            heaps,
            traces,
            held: std::sync::atomic::AtomicUsize::new(0),
            new_vms: Mutex::new(std::collections::HashMap::new()),
        })
    }

    /// Deletes a VM that is not connected, with everything stored of it (samples, frames,
    /// snapshot, heap report, call graph).
    pub async fn delete_vm(&self, id: u64) -> anyhow::Result<Result<(), DeleteError>> {
        let record = match self.vms.remove(id) {
            Ok(r) => r,
            Err(e) => return Ok(Err(e)),
        };
        self.store.delete_vm(&record).await?;
        self.forget(id);
        Ok(Ok(()))
    }

    /// Drops what the analyses and the heap reports keep of a deleted VM.
    fn forget(&self, id: u64) {
        for a in &self.analyses {
            a.remove_vm(id);
        }
        self.heaps.remove(id);
        self.traces.remove(id);
    }

    /// Rolls up and expires stored data now and then, for as long as the collector runs.
    async fn maintain(self: Arc<Hub>) {
        let retention = self.config.retention;
        // Often enough that data lives at most a little past its retention.
        let every = retention
            .keep
            .map_or(MAINTENANCE_EVERY, |k| (k / 10).min(MAINTENANCE_EVERY))
            .max(Duration::from_millis(200));
        // A shared store is re-read for VMs other collectors took in.
        let every = if self.store.is_shared() {
            every.min(Duration::from_secs(2))
        } else {
            every
        };
        let mut said = false;
        loop {
            tokio::time::sleep(every).await;
            if self.store.is_shared() {
                let store = self.store.clone();
                if let Ok(Ok(records)) = tokio::task::spawn_blocking(move || store.vms()).await {
                    self.vms.add_stored(records, &self.store);
                }
            }
            loop {
                let connected = self.vms.connected();
                match self.store.maintain(now_ms(), retention, connected).await {
                    Ok(done) => {
                        said = false;
                        for id in &done.removed_vms {
                            // Only VMs that were not connected are removed; one that
                            // connected meanwhile keeps its (new) registry entry.
                            let _ = self.vms.remove(*id);
                            self.forget(*id);
                            eprintln!("jvmprof serve: VM {id} expired and was deleted");
                        }
                        if !done.more {
                            break;
                        }
                    }
                    Err(e) => {
                        if !said {
                            said = true;
                            eprintln!("jvmprof serve: store maintenance failed: {e}");
                        }
                        break;
                    }
                }
            }
        }
    }
}

/// How often the store is maintained (rollups, retention) at most.
const MAINTENANCE_EVERY: Duration = Duration::from_secs(30);

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
        let router = router.into_make_service_with_connect_info::<http::Peer>();
        let _ = axum::serve(http::ChannelListener { rx: http_rx, local }, router).await;
    });
    tokio::spawn(hub.clone().maintain());
    if let Some(p) = hub.config.push.clone() {
        tokio::spawn(push::run(hub.clone(), p));
    }
    let open = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    let mut refused_said = false;
    loop {
        let (sock, peer) = match listener.accept().await {
            Ok(x) => x,
            Err(e) => {
                eprintln!("jvmprof serve: accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Ok(permit) = open.clone().try_acquire_owned() else {
            if !refused_said {
                refused_said = true;
                eprintln!(
                    "jvmprof serve: {MAX_CONNECTIONS} connections are open; closing new ones until some end"
                );
            }
            drop(sock);
            continue;
        };
        refused_said = false;
        let hub = hub.clone();
        let http_tx = http_tx.clone();
        tokio::spawn(async move {
            // Held for the connection's life (an HTTP one keeps it until handed to axum).
            let _permit = permit;
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
    let mut buf = vec![0u8; 16 << 10];
    let mut vm: Option<u64> = None;
    let mut acked = 0;
    let mut received = 0usize;
    // What this connection holds, as last added to the hub's total.
    let mut held = Held {
        hub: &hub,
        bytes: 0,
    };
    let problem: Option<String> = 'conn: loop {
        let n = match tokio::time::timeout(IDLE_TIMEOUT, sock.read(&mut buf)).await {
            Err(_) => break Some(format!("silent for {} s", IDLE_TIMEOUT.as_secs())),
            Ok(Err(e)) => break Some(e.to_string()),
            Ok(Ok(0)) => break dec.finish().err().map(|e| e.to_string()),
            Ok(Ok(n)) => n,
        };
        bump(&hub.stats.bytes, n as u64);
        received += n;
        if vm.is_none() && received > MAX_HANDSHAKE {
            let reason = format!("the handshake is larger than {MAX_HANDSHAKE} bytes");
            bump(&hub.stats.rejected, 1);
            reject(&mut sock, &reason).await;
            break Some(format!("rejected: {reason}"));
        }
        dec.push(&buf[..n]);
        loop {
            let event = match dec.next_event() {
                Ok(Some(e)) => e,
                Ok(None) => break,
                Err(e) => {
                    bump(&hub.stats.protocol_errors, 1);
                    // Said to the agent too, so it reports it once and stops retrying blindly
                    // (an unsupported protocol version, a table over its limit).
                    reject(&mut sock, &e.to_string()).await;
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
                        reject(&mut sock, reason).await;
                        break 'conn Some(format!("rejected: {reason}"));
                    }
                    let Some((record, last_seq)) = hub
                        .vms
                        .connect(&h, &hub.store, || hub.may_add_vm(peer.ip()))
                    else {
                        let reason = format!(
                            "{} created more than {MAX_NEW_VMS_PER_MINUTE} new VMs this minute",
                            peer.ip()
                        );
                        bump(&hub.stats.rejected, 1);
                        reject(&mut sock, &reason).await;
                        break 'conn Some(format!("rejected: {reason}"));
                    };
                    bump(&hub.stats.connections, 1);
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
                (Event::Labels(labels), Some(id)) => {
                    if let Some(r) = hub.vms.update(id, |r| r.labels = labels) {
                        hub.store.put_vm(r);
                    }
                }
                (Event::Trace { seq, chunk }, Some(id)) => {
                    bump(&hub.stats.trace_chunks, 1);
                    if let Err(e) = hub.traces.append(id, seq, &chunk) {
                        eprintln!("jvmprof serve: cannot store traces of VM {id}: {e}");
                    }
                    hub.vms.update(id, |r| r.last_seen = now_ms());
                }
                (Event::Bye, _) => break 'conn None,
                // The decoder only yields other events after a Hello.
                (_, None) => break 'conn Some("data before the handshake".into()),
            }
        }
        // Memory: this connection's share, and everyone's.
        if let Some(reason) = held.update(dec.held_bytes()) {
            bump(&hub.stats.rejected, 1);
            reject(&mut sock, &reason).await;
            break Some(format!("rejected: {reason}"));
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

/// What one agent connection holds, kept in the hub's total; given back when it closes.
struct Held<'a> {
    hub: &'a Hub,
    bytes: usize,
}

impl Held<'_> {
    /// Records that the connection now holds `now` bytes; the reason to refuse it if that is
    /// over its limit or takes everyone's over theirs.
    fn update(&mut self, now: usize) -> Option<String> {
        let total = &self.hub.held;
        if now >= self.bytes {
            total.fetch_add(now - self.bytes, Ordering::Relaxed);
        } else {
            total.fetch_sub(self.bytes - now, Ordering::Relaxed);
        }
        self.bytes = now;
        if now > MAX_CONNECTION_BYTES {
            return Some(format!(
                "this agent's tables take more than {} MiB in the collector",
                MAX_CONNECTION_BYTES >> 20
            ));
        }
        let all = total.load(Ordering::Relaxed);
        (all > MAX_ALL_CONNECTIONS_BYTES).then(|| {
            format!(
                "the collector holds more than {} MiB for its agents; try again later",
                MAX_ALL_CONNECTIONS_BYTES >> 20
            )
        })
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.hub.held.fetch_sub(self.bytes, Ordering::Relaxed);
    }
}

async fn reject(sock: &mut TcpStream, reason: &str) {
    reply(
        sock,
        &Reply::Reject {
            reason: reason.into(),
        },
    )
    .await;
}

async fn reply(sock: &mut TcpStream, r: &Reply) -> bool {
    let mut out = Vec::new();
    jvmprof_proto::wire::put_frame(r, &mut out);
    sock.write_all(&out).await.is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_masked_in_commands() {
        assert_eq!(
            mask_tokens("java -agentpath:/a.so=server=h:1,token=s3cret,refresh=1s -jar x.jar"),
            "java -agentpath:/a.so=server=h:1,token=***,refresh=1s -jar x.jar"
        );
        assert_eq!(mask_tokens("a token=x token=y"), "a token=*** token=***");
        assert_eq!(mask_tokens("token= x"), "token= x");
        assert_eq!(mask_tokens("no secrets"), "no secrets");
        assert_eq!(mask_tokens("-Dtoken=abc"), "-Dtoken=***");
    }
}
