//! The ClickHouse store's writer thread: it turns queued writes into RowBinary rows, sends them
//! at least every [`FLUSH_EVERY`] and at every barrier, records what is committed, and keeps a
//! bounded buffer while ClickHouse is away.
//!
//! A VM's record chunks are replayed as they come (one [`Replay`] per VM, the one that reads a
//! native file): each sample record becomes a row of the `samples` table (its stack once, by
//! hash, in `stacks`), and the chunk itself a row of `chunks`, so that after a restart the VM's
//! later chunks resolve again (its stored chunks are replayed first).

use super::client::Client;
use super::hash::StackHashes;
use super::rows::{Reader, Rows, vm_row};
use crate::store::queue::{Job, Ledger, Write};
use crate::store::replay::starts_stream;
use jvmprof_profile::Frame;
use jvmprof_profile::records::{self, Framed, Replay};
use jvmprof_proto::wire::state_code;
use std::collections::{HashMap, HashSet};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Writes are sent at least this often (and at every barrier).
const FLUSH_EVERY: Duration = Duration::from_millis(500);
/// Rows buffered before a flush regardless of time.
const FLUSH_ROWS: usize = 200_000;
/// Most bytes buffered while ClickHouse is unreachable; beyond it, the oldest writes are dropped.
const MAX_PENDING_BYTES: usize = 256 << 20;
/// Stack hashes remembered as already stored (then forgotten, and re-sent at worst).
const MAX_KNOWN_STACKS: usize = 2_000_000;

/// Buffered writes, sent by the writer thread.
#[derive(Default)]
struct Pending {
    vms: Rows,
    stacks: Rows,
    samples: Rows,
    snapshots: Rows,
    seqs: Rows,
    meta: Rows,
    chunks: Rows,
    /// vm → newest seq in `samples` (committed once sent).
    newest: HashMap<u64, u64>,
}

impl Pending {
    fn bytes(&self) -> usize {
        [
            &self.vms,
            &self.stacks,
            &self.samples,
            &self.snapshots,
            &self.seqs,
            &self.meta,
            &self.chunks,
        ]
        .iter()
        .map(|r| r.bytes.len())
        .sum()
    }
}

/// The writer thread's state.
pub(super) struct Writer {
    client: Client,
    ledger: Ledger,
    known_stacks: HashSet<u64>,
    /// VMs whose metadata this collector has written.
    meta_sent: HashSet<u64>,
    /// Each VM's stream as replayed so far, and its stacks' hashes.
    streams: HashMap<u64, (Replay, StackHashes)>,
    pending: Pending,
    barriers: Vec<tokio::sync::oneshot::Sender<()>>,
    /// A flush failed and was reported; the next success is reported too.
    failing: bool,
    /// Writes dropped while ClickHouse was unreachable.
    dropped: u64,
}

impl Writer {
    pub(super) fn new(client: Client, ledger: Ledger) -> Writer {
        Writer {
            client,
            ledger,
            known_stacks: HashSet::new(),
            meta_sent: HashSet::new(),
            streams: HashMap::new(),
            pending: Pending::default(),
            barriers: Vec::new(),
            failing: false,
            dropped: 0,
        }
    }

    pub(super) fn run(mut self, rx: mpsc::Receiver<Job<std::convert::Infallible>>) {
        let mut last_flush = Instant::now();
        loop {
            let wait = FLUSH_EVERY.saturating_sub(last_flush.elapsed());
            match rx.recv_timeout(wait) {
                Ok(Job::Write(w)) => {
                    self.add(w);
                    self.ledger.handled(1);
                }
                Ok(Job::Chore(never)) => match never {},
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    self.flush();
                    return;
                }
            }
            if !self.barriers.is_empty()
                || self.pending.samples.count >= FLUSH_ROWS
                || last_flush.elapsed() >= FLUSH_EVERY
            {
                self.flush();
                last_flush = Instant::now();
            }
        }
    }

    fn add(&mut self, w: Write) {
        let p = &mut self.pending;
        match w {
            Write::Vm(vm) => vm_row(&mut p.vms, &vm, false),
            Write::Snapshot { vm, snapshot } => {
                p.snapshots.date(snapshot.time_unix_ms);
                p.snapshots.u64(vm);
                p.snapshots.u64(snapshot.time_unix_ms);
                p.snapshots
                    .str(&postcard::to_stdvec(&snapshot).unwrap_or_default());
                p.snapshots.count += 1;
            }
            Write::Barrier(tx) => self.barriers.push(tx),
            Write::Chunk {
                vm,
                seq,
                time_unix_ms,
                bytes,
            } => {
                if let Err(e) = self.chunk(vm, seq, time_unix_ms, &bytes) {
                    eprintln!("jvmprof serve: chunk {seq} of VM {vm} not stored: {e}");
                }
            }
        }
        if self.pending.bytes() > MAX_PENDING_BYTES {
            // ClickHouse is away and the buffer is full: drop the samples, keep the rest.
            self.dropped += self.pending.samples.count as u64;
            self.pending.samples = Rows::default();
            self.pending.seqs = Rows::default();
            self.pending.chunks = Rows::default();
            self.pending.newest.clear();
            self.known_stacks.clear();
        }
    }

    /// Replays a VM's chunks (framed, in `bytes`) and buffers their rows.
    fn chunk(&mut self, vm: u64, seq: u64, time_unix_ms: u64, bytes: &[u8]) -> anyhow::Result<()> {
        if starts_stream(bytes) {
            self.streams.remove(&vm);
        }
        if !self.streams.contains_key(&vm) {
            let replay = self.load(vm)?;
            self.streams.insert(vm, (replay, StackHashes::default()));
        }
        let Some((replay, hashes)) = self.streams.get_mut(&vm) else {
            return Ok(());
        };
        let p = &mut self.pending;
        let mut rest = bytes;
        loop {
            match records::next_chunk(rest) {
                Framed::Chunk(payload, n) => {
                    replay
                        .apply_payload(payload)
                        .map_err(|e| anyhow::anyhow!("{e}"))?;
                    rest = &rest[n..];
                }
                Framed::Damaged(n) => {
                    replay.skip_damaged();
                    rest = &rest[n..];
                    continue;
                }
                _ => break,
            }
            let profile = replay.profile();
            if !profile.meta.metrics.is_empty() && self.meta_sent.insert(vm) {
                p.meta.u64(vm);
                p.meta.strs(profile.meta.metrics.iter().map(|m| m.as_str()));
                p.meta.strs(profile.meta.modes.iter().map(String::as_str));
                p.meta.u64(profile.meta.interval_ns);
                p.meta.u64(seq);
                p.meta.count += 1;
            }
            for (i, values) in replay.gained() {
                let s = &profile.samples[*i as usize];
                let hash = hashes.get(profile, s.stack);
                if self.known_stacks.len() >= MAX_KNOWN_STACKS {
                    self.known_stacks.clear();
                }
                if self.known_stacks.insert(hash) {
                    let frames: Vec<&Frame> = profile.stack_frames(s.stack).collect();
                    p.stacks.u64(hash);
                    p.stacks
                        .str(&postcard::to_stdvec(&frames).unwrap_or_default());
                    p.stacks.count += 1;
                }
                let thread = &profile.threads[s.thread as usize];
                p.samples.date(time_unix_ms);
                p.samples.u64(time_unix_ms);
                p.samples.u64(vm);
                p.samples.u64(hash);
                p.samples.i64(thread.tid as i64);
                p.samples.str(thread.name.as_bytes());
                p.samples.u8(state_code(s.state));
                p.samples.u64s(values);
                p.samples.count += 1;
            }
        }
        p.chunks.date(time_unix_ms);
        p.chunks.u64(vm);
        p.chunks.u64(seq);
        p.chunks.u64(time_unix_ms);
        p.chunks.str(bytes);
        p.chunks.count += 1;
        p.seqs.u64(vm);
        p.seqs.u64(seq);
        p.seqs.count += 1;
        let newest = p.newest.entry(vm).or_insert(0);
        *newest = (*newest).max(seq);
        Ok(())
    }

    /// The VM's stream as far as ClickHouse holds its chunks (after a restart), values muted:
    /// only what later chunks refer to. Pending rows go out first, so it sees them too.
    fn load(&mut self, vm: u64) -> anyhow::Result<Replay> {
        let mut replay = Replay::without_timeline();
        replay.counting(false);
        self.flush();
        let db = &self.client.db;
        let bytes = self.client.query(&format!(
            "SELECT data FROM {db}.chunks FINAL WHERE vm = {vm} ORDER BY seq"
        ))?;
        let mut r = Reader { b: &bytes };
        let mut started = false;
        while !r.done() {
            let chunk = r.bytes()?;
            if started && starts_stream(chunk) {
                replay = Replay::without_timeline();
                replay.counting(false);
            }
            started = true;
            records::replay::apply_all(&mut replay, chunk).map_err(|e| anyhow::anyhow!("{e}"))?;
        }
        replay.counting(true);
        Ok(replay)
    }

    /// Sends everything pending, stacks before the samples that name them; answers the
    /// barriers either way.
    fn flush(&mut self) {
        let db = self.client.db.clone();
        let result = (|| -> anyhow::Result<()> {
            let p = &mut self.pending;
            for (table, rows) in [
                ("vms", &mut p.vms),
                ("stacks", &mut p.stacks),
                ("meta", &mut p.meta),
                ("samples", &mut p.samples),
                ("chunks", &mut p.chunks),
                ("snapshots", &mut p.snapshots),
                ("seqs", &mut p.seqs),
            ] {
                if rows.count > 0 {
                    self.client.run(
                        &format!("INSERT INTO {db}.{table} FORMAT RowBinary"),
                        &rows.bytes,
                    )?;
                    *rows = Rows::default();
                }
            }
            Ok(())
        })();
        match result {
            Ok(()) => {
                self.ledger.commit(std::mem::take(&mut self.pending.newest));
                if self.failing {
                    self.failing = false;
                    eprintln!(
                        "jvmprof serve: ClickHouse takes writes again ({} samples were dropped meanwhile)",
                        self.dropped
                    );
                }
            }
            Err(e) => {
                // Stacks already sent may be forgotten with the rest: send them again.
                self.known_stacks.clear();
                if !self.failing {
                    self.failing = true;
                    eprintln!(
                        "jvmprof serve: cannot write to ClickHouse ({e}); keeping up to {} MiB and retrying",
                        MAX_PENDING_BYTES >> 20
                    );
                }
            }
        }
        for b in self.barriers.drain(..) {
            let _ = b.send(());
        }
    }
}
