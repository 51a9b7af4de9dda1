//! One connection's agent protocol: one job, to tell an agent from anything else by its first
//! bytes, and to take an agent connection from Hello to close (handshake, samples, snapshots,
//! acknowledgements, limits).

use crate::analysis::Trace;
use crate::hub::{Hub, MAX_NEW_VMS_PER_MINUTE};
use crate::stats::bump;
use crate::store::now_ms;
use jvmprof_profile::records::RecordWriter;
use jvmprof_proto::{Decoder, Event, MAGIC, Reply};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

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

/// `Some(true)` for an agent, `Some(false)` for anything else, `None` if it closed or stayed
/// silent.
pub(crate) async fn sniff(sock: &TcpStream) -> Option<bool> {
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
pub(crate) async fn agent(hub: Arc<Hub>, mut sock: TcpStream, peer: SocketAddr) {
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
    let commits = hub.store.commits();
    let mut silent_until = tokio::time::Instant::now() + IDLE_TIMEOUT;
    let problem: Option<String> = 'conn: loop {
        // Read, or acknowledge as soon as the store commits (an agent whose window is full
        // sends nothing until it hears).
        let read = tokio::select! {
            r = tokio::time::timeout_at(silent_until, sock.read(&mut buf)) => Some(r),
            _ = commits.notified(), if vm.is_some() => None,
        };
        let n = match read {
            None => {
                if let Some(id) = vm
                    && !send_ack(&hub, &mut sock, id, &mut acked).await
                {
                    break Some("cannot send acknowledgements".into());
                }
                continue;
            }
            Some(Err(_)) => break Some(format!("silent for {} s", IDLE_TIMEOUT.as_secs())),
            Some(Ok(Err(e))) => break Some(e.to_string()),
            Some(Ok(Ok(0))) => break dec.finish().err().map(|e| e.to_string()),
            Some(Ok(Ok(n))) => n,
        };
        silent_until = tokio::time::Instant::now() + IDLE_TIMEOUT;
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
                    hub.store.put_vm(record.clone());
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
                    Event::Records {
                        seq,
                        time_unix_ms,
                        chunk,
                    },
                    Some(id),
                ) => {
                    if !hub.vms.receive(id, seq) {
                        bump(&hub.stats.duplicate_batches, 1);
                        continue;
                    }
                    records(&hub, id, seq, time_unix_ms, chunk.into());
                }
                (
                    Event::Samples {
                        seq,
                        time_unix_ms,
                        profile,
                    },
                    Some(id),
                ) => {
                    // An agent older than the record stream: each batch becomes a stream of
                    // its own.
                    if !hub.vms.receive(id, seq) {
                        bump(&hub.stats.duplicate_batches, 1);
                        continue;
                    }
                    let everything = jvmprof_profile::records::write::everything(&profile);
                    match RecordWriter::new().update(&profile, &everything, &[], false) {
                        Ok(bytes) if !bytes.is_empty() => {
                            records(&hub, id, seq, time_unix_ms, bytes.into())
                        }
                        Ok(_) => {}
                        Err(e) => break 'conn Some(format!("cannot record a batch: {e}")),
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

/// Stores record chunks `seq` of VM `id` and shows them to the analyses.
fn records(hub: &Hub, id: u64, seq: u64, time_unix_ms: u64, chunk: Arc<[u8]>) {
    bump(&hub.stats.sample_batches, 1);
    hub.store.put_chunk(id, seq, time_unix_ms, chunk.clone());
    let seen = hub.streams.apply(&hub.store, id, &chunk);
    bump(&hub.stats.sample_records, seen.records);
    bump(&hub.stats.samples, seen.samples);
    bump(&hub.stats.snapshots, seen.snapshots);
    if let Some(s) = seen.newest {
        let trace = Trace::Snapshot(s);
        for a in &hub.analyses {
            a.add_trace(id, &trace);
        }
    }
    let trace = Trace::Records {
        seq,
        time_unix_ms,
        chunk,
    };
    for a in &hub.analyses {
        a.add_trace(id, &trace);
    }
    if let Some(r) = hub.vms.update(id, |r| r.last_seen = now_ms()) {
        hub.store.put_vm(r);
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
