//! The ClickHouse store (`serve --store clickhouse://HOST:PORT/DB`): VMs, stacks (deduplicated by
//! a hash of their frames), samples (by VM and time, with per-minute and per-hour rollups kept
//! by materialized views, so a day's query reads hours), snapshots and sample metadata in one ClickHouse database over its HTTP
//! interface, written in RowBinary. Several collectors can share the database: every VM's data
//! is there, VM ids are derived from the VM itself (host, pid, start), and a collector that
//! starts with an empty disk reads everything back. Retention drops whole daily partitions.
//!
//! The SQL sticks to what ClickHouse 18.16 (Debian's package) and current releases both accept:
//! no TTL, no DateTime64, no LowCardinality.

use crate::queue::{Ledger, Queue};
use crate::store::{Maintained, Retention, VmRecord, builder_like, merge_profiles};
use jvmprof_profile::{Frame, Meta, Metric, Profile, ProfileBuilder, Thread};
use jvmprof_proto::Snapshot;
use jvmprof_proto::wire::{state_code, state_from};
use std::collections::{HashMap, HashSet};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Version of the tables below; a database holding another is refused with a message.
const SCHEMA_VERSION: u64 = 1;
const MINUTE_MS: u64 = 60_000;
const DAY_MS: u64 = 86_400_000;
/// Writes are sent at least this often (and at every barrier).
const FLUSH_EVERY: Duration = Duration::from_millis(500);
/// Rows buffered before a flush regardless of time.
const FLUSH_ROWS: usize = 200_000;
/// Most bytes buffered while ClickHouse is unreachable; beyond it, the oldest writes are dropped.
const MAX_PENDING_BYTES: usize = 256 << 20;
/// Queries over a longer range, or starting before the raw samples kept, read the minutes.
const RAW_QUERY_SPAN_MS: u64 = 3_600_000;
/// Queries over a longer range read the hours.
const HOUR_QUERY_SPAN_MS: u64 = 6 * 3_600_000;
const HOUR_MS: u64 = 3_600_000;
/// Stack hashes remembered as already stored (then forgotten, and re-sent at worst).
const MAX_KNOWN_STACKS: usize = 2_000_000;

/// Where the store lives: `clickhouse://HOST:PORT/DB`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Location {
    /// `http://HOST:PORT/`
    pub url: String,
    pub database: String,
}

impl Location {
    pub fn parse(s: &str) -> Result<Location, String> {
        let rest = s
            .strip_prefix("clickhouse://")
            .ok_or_else(|| format!("'{s}' is not clickhouse://HOST:PORT/DB"))?;
        let (host, db) = rest
            .split_once('/')
            .ok_or_else(|| format!("'{s}' names no database (clickhouse://HOST:PORT/DB)"))?;
        if host.is_empty() || !host.contains(':') {
            return Err(format!("'{s}': HOST:PORT is missing"));
        }
        if db.is_empty() || !db.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(format!(
                "'{s}': the database name must be letters, digits and '_'"
            ));
        }
        Ok(Location {
            url: format!("http://{host}/"),
            database: db.to_string(),
        })
    }
}

/// Where a query reads samples (see [`ClickHouse::source`]).
struct Source {
    cond: String,
    table: &'static str,
    /// The sum of the values arrays in that table.
    sum: &'static str,
    /// A row's time, Unix ms (the start of its minute or hour in a rollup).
    time: &'static str,
}

/// The id of a VM in a shared store: the same on every collector (53 bits, exact in JSON).
pub fn vm_id(host: &str, pid: u32, start_unix_ms: u64) -> u64 {
    let mut h = Fnv::new();
    h.bytes(host.as_bytes());
    h.u64(pid as u64);
    h.u64(start_unix_ms);
    (h.finish() & ((1 << 53) - 1)).max(1)
}

/// A 64-bit hash that is the same on every machine and release (stack ids are shared by
/// collectors through the database): eight bytes a step, multiply and rotate, then a final mix.
struct Fnv(u64);

const K: u64 = 0x9e37_79b9_7f4a_7c15;

impl Fnv {
    fn new() -> Fnv {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
    fn word(&mut self, w: u64) {
        self.0 = (self.0 ^ w).wrapping_mul(K).rotate_left(29);
    }
    fn bytes(&mut self, b: &[u8]) {
        let mut chunks = b.chunks_exact(8);
        for c in &mut chunks {
            self.word(u64::from_le_bytes(c.try_into().unwrap_or_default()));
        }
        let mut last = [0u8; 8];
        last[..chunks.remainder().len()].copy_from_slice(chunks.remainder());
        // The length ends the field, so ("ab", "c") and ("a", "bc") differ.
        self.word(u64::from_le_bytes(last) ^ ((b.len() as u64) << 56));
    }
    fn u64(&mut self, v: u64) {
        self.word(v);
    }
    fn finish(&self) -> u64 {
        let mut h = self.0;
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^ (h >> 33)
    }
}

fn frame_hash(f: &Frame) -> u64 {
    let mut h = Fnv::new();
    h.u64(f.kind as u64);
    h.bytes(f.class.as_bytes());
    h.bytes(f.method.as_bytes());
    h.bytes(f.descriptor.as_bytes());
    h.u64(f.line as u64);
    h.finish()
}

/// A stack's id in the stacks table: its frames' hashes, root first, hashed in turn (so a
/// stack's hash continues its parent's). [`StackHashes`] computes the same per prefix.
#[cfg(test)]
fn stack_hash(frames: &[&Frame]) -> u64 {
    let mut h = Fnv::new();
    for f in frames {
        h.u64(frame_hash(f));
    }
    h.finish()
}

/// The hashes of a profile's stacks, computed once per frame and per stack prefix.
struct StackHashes<'a> {
    profile: &'a Profile,
    frames: Vec<Option<u64>>,
    stacks: Vec<Option<u64>>,
    /// Scratch: the prefixes of the stack being hashed.
    chain: Vec<u32>,
}

impl<'a> StackHashes<'a> {
    fn new(profile: &'a Profile) -> StackHashes<'a> {
        StackHashes {
            profile,
            frames: vec![None; profile.frames.len()],
            stacks: vec![None; profile.stacks.len()],
            chain: Vec::new(),
        }
    }

    /// The stack's hash (its prefix state is kept raw, so children continue it).
    fn get(&mut self, stack: u32) -> u64 {
        Fnv(self.state(stack)).finish()
    }

    fn state(&mut self, stack: u32) -> u64 {
        if let Some(h) = self.stacks[stack as usize] {
            return h;
        }
        // The stack's unhashed prefixes, deepest first.
        let mut chain = std::mem::take(&mut self.chain);
        chain.clear();
        chain.push(stack);
        let mut state = Fnv::new();
        let mut at = stack;
        while let Some(parent) = self.profile.stacks.parent(at) {
            if let Some(h) = self.stacks[parent as usize] {
                state = Fnv(h);
                break;
            }
            chain.push(parent);
            at = parent;
        }
        for &s in chain.iter().rev() {
            if let Some(top) = self.profile.stacks.top(s) {
                let fh = *self.frames[top as usize]
                    .get_or_insert_with(|| frame_hash(&self.profile.frames[top as usize]));
                state.u64(fh);
            }
            self.stacks[s as usize] = Some(state.0);
        }
        self.chain = chain;
        state.0
    }
}

/// RowBinary values appended to a buffer.
#[derive(Default)]
struct Rows {
    bytes: Vec<u8>,
    count: usize,
}

impl Rows {
    fn leb(&mut self, mut n: u64) {
        loop {
            let b = (n & 0x7f) as u8;
            n >>= 7;
            if n == 0 {
                self.bytes.push(b);
                return;
            }
            self.bytes.push(b | 0x80);
        }
    }
    fn u8(&mut self, v: u8) {
        self.bytes.push(v);
    }
    fn u16(&mut self, v: u16) {
        self.bytes.extend_from_slice(&v.to_le_bytes());
    }
    fn u32(&mut self, v: u32) {
        self.bytes.extend_from_slice(&v.to_le_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.bytes.extend_from_slice(&v.to_le_bytes());
    }
    fn i64(&mut self, v: i64) {
        self.bytes.extend_from_slice(&v.to_le_bytes());
    }
    fn str(&mut self, s: &[u8]) {
        self.leb(s.len() as u64);
        self.bytes.extend_from_slice(s);
    }
    fn strs<'a>(&mut self, v: impl ExactSizeIterator<Item = &'a str>) {
        self.leb(v.len() as u64);
        for s in v {
            self.str(s.as_bytes());
        }
    }
    fn u64s(&mut self, v: &[u64]) {
        self.leb(v.len() as u64);
        for x in v {
            self.u64(*x);
        }
    }
    /// A `Date`: days since the epoch.
    fn date(&mut self, unix_ms: u64) {
        self.u16((unix_ms / DAY_MS).min(u16::MAX as u64) as u16);
    }
}

/// Reads RowBinary answers; every read names what was cut short.
struct Reader<'a> {
    b: &'a [u8],
}

impl<'a> Reader<'a> {
    fn done(&self) -> bool {
        self.b.is_empty()
    }
    fn take(&mut self, n: usize) -> anyhow::Result<&'a [u8]> {
        anyhow::ensure!(self.b.len() >= n, "ClickHouse's answer is cut short");
        let (head, rest) = self.b.split_at(n);
        self.b = rest;
        Ok(head)
    }
    fn leb(&mut self) -> anyhow::Result<u64> {
        let mut n = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.take(1)?[0];
            n |= ((b & 0x7f) as u64) << shift;
            if b & 0x80 == 0 {
                return Ok(n);
            }
        }
        anyhow::bail!("a bad length in ClickHouse's answer")
    }
    fn u8(&mut self) -> anyhow::Result<u8> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> anyhow::Result<u32> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into()?))
    }
    fn u64(&mut self) -> anyhow::Result<u64> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into()?))
    }
    fn i64(&mut self) -> anyhow::Result<i64> {
        Ok(i64::from_le_bytes(self.take(8)?.try_into()?))
    }
    fn bytes(&mut self) -> anyhow::Result<&'a [u8]> {
        let n = self.leb()? as usize;
        self.take(n)
    }
    fn string(&mut self) -> anyhow::Result<String> {
        Ok(String::from_utf8_lossy(self.bytes()?).into_owned())
    }
    fn strings(&mut self) -> anyhow::Result<Vec<String>> {
        let n = self.leb()? as usize;
        (0..n).map(|_| self.string()).collect()
    }
    fn u64s(&mut self) -> anyhow::Result<Vec<u64>> {
        let n = self.leb()? as usize;
        anyhow::ensure!(n <= self.b.len() / 8, "ClickHouse's answer is cut short");
        (0..n).map(|_| self.u64()).collect()
    }
}

/// The HTTP side: one query or insert at a time per call.
#[derive(Clone)]
struct Client {
    url: String,
    db: String,
    agent: ureq::Agent,
}

impl Client {
    /// Runs `sql` with `body` (RowBinary rows for an INSERT) and returns the answer.
    fn run(&self, sql: &str, body: &[u8]) -> anyhow::Result<Vec<u8>> {
        let resp = self
            .agent
            .post(&self.url)
            .query("query", sql)
            .send_bytes(body);
        match resp {
            Ok(r) => {
                let mut out = Vec::new();
                std::io::Read::read_to_end(&mut r.into_reader(), &mut out)?;
                Ok(out)
            }
            Err(ureq::Error::Status(code, r)) => {
                let text = r.into_string().unwrap_or_default();
                let first = text.lines().next().unwrap_or("").trim();
                anyhow::bail!("ClickHouse answered {code}: {first}")
            }
            Err(e) => anyhow::bail!("cannot reach ClickHouse at {}: {e}", self.url),
        }
    }

    fn exec(&self, sql: &str) -> anyhow::Result<()> {
        self.run(sql, &[]).map(|_| ())
    }

    fn query(&self, sql: &str) -> anyhow::Result<Vec<u8>> {
        self.run(&format!("{sql} FORMAT RowBinary"), &[])
    }
}

/// Buffered writes, sent by the writer thread.
#[derive(Default)]
struct Pending {
    vms: Rows,
    stacks: Rows,
    samples: Rows,
    snapshots: Rows,
    seqs: Rows,
    meta: Rows,
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
        ]
        .iter()
        .map(|r| r.bytes.len())
        .sum()
    }
}

/// ClickHouse's writer has no chores besides writing.
type Write = crate::queue::Write<std::convert::Infallible>;

#[derive(Clone)]
pub struct ClickHouse {
    client: Client,
    pub(crate) queue: Queue<std::convert::Infallible>,
}

impl ClickHouse {
    /// Connects, creates the database and tables on first use (checking the schema version of
    /// an existing one) and starts the writer thread.
    pub fn open(location: &Location) -> anyhow::Result<ClickHouse> {
        let client = Client {
            url: location.url.clone(),
            db: location.database.clone(),
            agent: ureq::AgentBuilder::new()
                .timeout_connect(Duration::from_secs(5))
                .timeout(Duration::from_secs(120))
                .build(),
        };
        create_schema(&client)?;
        let mut committed = HashMap::new();
        {
            let db = &client.db;
            let bytes = client.query(&format!("SELECT vm, max(seq) FROM {db}.seqs GROUP BY vm"))?;
            let mut r = Reader { b: &bytes };
            while !r.done() {
                let vm = r.u64()?;
                committed.insert(vm, r.u64()?);
            }
        }
        let (queue, rx, ledger) = Queue::new(committed);
        let writer = Writer {
            client: client.clone(),
            ledger,
            known_stacks: HashSet::new(),
            meta_sent: HashSet::new(),
            pending: Pending::default(),
            barriers: Vec::new(),
            failing: false,
            dropped: 0,
        };
        std::thread::Builder::new()
            .name("clickhouse writer".into())
            .spawn(move || writer.run(rx))?;
        Ok(ClickHouse { client, queue })
    }

    pub fn vms(&self) -> anyhow::Result<Vec<VmRecord>> {
        let db = &self.client.db;
        let bytes = self.client.query(&format!(
            "SELECT id, pid, command, host, jvm, os, agent_version, start_unix_ms, connected_at, \
             last_seen, dropped_snapshots, dropped_sample_batches, dropped_samples, label_keys, \
             label_values FROM {db}.vms FINAL WHERE deleted = 0 ORDER BY id"
        ))?;
        let mut r = Reader { b: &bytes };
        let mut out = Vec::new();
        while !r.done() {
            let mut vm = VmRecord {
                id: r.u64()?,
                pid: r.u32()?,
                command: r.string()?,
                host: r.string()?,
                jvm: r.string()?,
                os: r.string()?,
                agent_version: r.string()?,
                start_unix_ms: r.u64()?,
                connected_at: r.u64()?,
                last_seen: r.u64()?,
                dropped_snapshots: r.u64()?,
                dropped_sample_batches: r.u64()?,
                dropped_samples: r.u64()?,
                labels: Vec::new(),
            };
            let keys = r.strings()?;
            let values = r.strings()?;
            vm.labels = keys.into_iter().zip(values).collect();
            out.push(vm);
        }
        Ok(out)
    }

    pub fn snapshots(&self) -> anyhow::Result<Vec<(u64, Snapshot)>> {
        let db = &self.client.db;
        let bytes = self.client.query(&format!(
            "SELECT vm, argMax(data, time_ms) FROM {db}.snapshots GROUP BY vm"
        ))?;
        let mut r = Reader { b: &bytes };
        let mut out = Vec::new();
        while !r.done() {
            let vm = r.u64()?;
            if let Ok(s) = postcard::from_bytes(r.bytes()?) {
                out.push((vm, s));
            }
        }
        Ok(out)
    }

    /// Each VM's metrics, modes and interval.
    fn metas(&self, vms: &[u64]) -> anyhow::Result<HashMap<u64, Meta>> {
        let db = &self.client.db;
        let bytes = self.client.query(&format!(
            "SELECT vm, argMax(metrics, version), argMax(modes, version), \
             argMax(interval_ns, version) FROM {db}.meta WHERE vm IN ({}) GROUP BY vm",
            list(vms)
        ))?;
        let mut r = Reader { b: &bytes };
        let mut out = HashMap::new();
        while !r.done() {
            let vm = r.u64()?;
            let metrics = r
                .strings()?
                .iter()
                .filter_map(|m| Metric::parse(m))
                .collect();
            let modes = r.strings()?;
            let interval_ns = r.u64()?;
            out.insert(
                vm,
                Meta {
                    metrics,
                    modes,
                    interval_ns,
                    ..Meta::default()
                },
            );
        }
        Ok(out)
    }

    /// Where the samples of `vms` in `[from, to]` are read: the range is clamped to the VMs'
    /// first sample and now; over six hours it reads the hourly rollup, over an hour (or back
    /// past the raw samples kept) the minutes, else the raw batches. A rollup is in when its
    /// minute or hour overlaps the range.
    fn source(&self, vms: &[u64], from: u64, to: u64) -> anyhow::Result<Source> {
        let db = &self.client.db;
        let bytes = self.client.query(&format!(
            "SELECT toUInt64(min(hour)) FROM {db}.samples_hour WHERE vm IN ({})",
            list(vms)
        ))?;
        let first = Reader { b: &bytes }.u64().unwrap_or(0) * HOUR_MS;
        let now = crate::now_ms();
        let span = to.min(now).saturating_sub(from.max(first));
        let ids = list(vms);
        Ok(if span > HOUR_QUERY_SPAN_MS {
            Source {
                cond: format!(
                    "vm IN ({ids}) AND hour BETWEEN {} AND {}",
                    from / HOUR_MS,
                    to / HOUR_MS
                ),
                table: "samples_hour",
                sum: "sumForEachMerge(values)",
                time: "hour * 3600000",
            }
        } else if span > RAW_QUERY_SPAN_MS || from.max(first) < now.saturating_sub(DAY_MS) {
            Source {
                cond: format!(
                    "vm IN ({ids}) AND minute BETWEEN {} AND {}",
                    from / MINUTE_MS,
                    to / MINUTE_MS
                ),
                table: "samples_minute",
                sum: "sumForEachMerge(values)",
                time: "minute * 60000",
            }
        } else {
            Source {
                cond: format!("vm IN ({ids}) AND time_ms BETWEEN {from} AND {to}"),
                table: "samples",
                sum: "sumForEach(values)",
                time: "time_ms",
            }
        })
    }

    /// Samples and CPU (or wall) ns of the VM's batches in `[from, to]`, by time.
    pub fn series(&self, vm: u64, from: u64, to: u64) -> anyhow::Result<Vec<(u64, u64, u64)>> {
        let db = &self.client.db;
        let metas = self.metas(&[vm])?;
        let Some(meta) = metas.get(&vm) else {
            return Ok(Vec::new());
        };
        let Source {
            cond,
            table,
            sum,
            time,
        } = self.source(&[vm], from, to)?;
        let bytes = self.client.query(&format!(
            "SELECT toUInt64({time}) AS t, {sum} FROM {db}.{table} WHERE {cond} GROUP BY t ORDER BY t"
        ))?;
        let at = |m: Metric| meta.metrics.iter().position(|x| *x == m);
        let (samples_at, ns_at) = (at(Metric::Samples), at(Metric::Ns));
        let mut r = Reader { b: &bytes };
        let mut out = Vec::new();
        while !r.done() {
            let t = r.u64()?;
            let values = r.u64s()?;
            let get = |i: Option<usize>| i.and_then(|i| values.get(i).copied()).unwrap_or(0);
            let samples = get(samples_at);
            let ns = match ns_at {
                Some(i) => get(Some(i)),
                None => samples.saturating_mul(meta.interval_ns),
            };
            out.push((t, samples, ns));
        }
        Ok(out)
    }

    /// The samples of `vms` in `[from, to]` merged into one profile (frames from the stacks
    /// table, metrics matched by name) with the oldest and newest sample times; `None` when
    /// there are none.
    pub fn profile_of(
        &self,
        vms: &[VmRecord],
        from: u64,
        to: u64,
    ) -> anyhow::Result<Option<(Profile, u64, u64)>> {
        if vms.is_empty() {
            return Ok(None);
        }
        let db = &self.client.db;
        let ids: Vec<u64> = vms.iter().map(|v| v.id).collect();
        let metas = self.metas(&ids)?;
        let Source {
            cond,
            table,
            sum,
            time,
        } = self.source(&ids, from, to)?;
        let stacks_bytes = self.client.query(&format!(
            "SELECT hash, any(frames) FROM {db}.stacks WHERE hash IN \
             (SELECT DISTINCT stack FROM {db}.{table} WHERE {cond}) GROUP BY hash"
        ))?;
        let mut stacks: HashMap<u64, Vec<Frame>> = HashMap::new();
        let mut r = Reader { b: &stacks_bytes };
        while !r.done() {
            let hash = r.u64()?;
            let frames: Vec<Frame> = postcard::from_bytes(r.bytes()?)
                .map_err(|e| anyhow::anyhow!("stack {hash:x} is undecodable: {e}"))?;
            stacks.insert(hash, frames);
        }
        let bytes = self.client.query(&format!(
            "SELECT vm, stack, tid, thread, state, {sum}, toUInt64(min({time})), \
             toUInt64(max({time})) FROM {db}.{table} WHERE {cond} \
             GROUP BY vm, stack, tid, thread, state"
        ))?;
        let mut per_vm: HashMap<u64, ProfileBuilder> = HashMap::new();
        let mut frame_ids: HashMap<u64, HashMap<u64, u32>> = HashMap::new();
        let (mut first, mut last) = (u64::MAX, 0);
        let mut r = Reader { b: &bytes };
        while !r.done() {
            let vm = r.u64()?;
            let stack = r.u64()?;
            let tid = r.i64()?;
            let thread = r.string()?;
            let state = state_from(r.u8()?).unwrap_or_default();
            let values = r.u64s()?;
            first = first.min(r.u64()?);
            last = last.max(r.u64()?);
            let Some(meta) = metas.get(&vm) else { continue };
            let Some(frames) = stacks.get(&stack) else {
                continue;
            };
            let b = per_vm.entry(vm).or_insert_with(|| builder_like(meta));
            let ids = frame_ids.entry(vm).or_default();
            let s = match ids.get(&stack) {
                Some(s) => *s,
                None => {
                    let f: Vec<u32> = frames.iter().map(|f| b.frame(f.clone())).collect();
                    let s = b.stack(&f);
                    ids.insert(stack, s);
                    s
                }
            };
            let t = b.thread(Thread {
                tid: tid as u64,
                name: thread,
            });
            let mut v = values;
            v.resize(meta.metrics.len(), 0);
            b.add(t, s, state, &v);
        }
        let profiles: Vec<Profile> = per_vm.into_values().map(|b| b.finish()).collect();
        Ok(merge_profiles(profiles).map(|b| (b.finish(), first, last)))
    }

    /// Drops daily partitions past the retention (samples, minutes, snapshots) and the raw
    /// samples past a day or the rollup age, and deletes VMs not seen for the retention.
    pub fn maintain(
        &self,
        now: u64,
        retention: Retention,
        connected: &HashSet<u64>,
    ) -> anyhow::Result<Maintained> {
        let db = &self.client.db;
        let mut done = Maintained::default();
        let raw_keep = (retention.rollup_after.as_millis() as u64).max(DAY_MS);
        let keep = retention.keep.map(|k| k.as_millis() as u64);
        let bytes = self.client.query(&format!(
            "SELECT DISTINCT table, partition FROM system.parts WHERE database = '{db}' AND active \
             AND table IN ('samples', '.inner.samples_minute', '.inner.samples_hour', 'snapshots')"
        ))?;
        let mut r = Reader { b: &bytes };
        while !r.done() {
            let table = r.string()?;
            let partition = r.string()?;
            let Some(day_end) = day_end_ms(&partition) else {
                continue;
            };
            let limit = match (table.as_str(), keep) {
                ("samples", Some(k)) => k.min(raw_keep),
                ("samples", None) => raw_keep,
                (_, Some(k)) => k,
                (_, None) => continue,
            };
            if day_end <= now.saturating_sub(limit) {
                self.client.exec(&format!(
                    "ALTER TABLE {db}.`{table}` DROP PARTITION '{partition}'"
                ))?;
                done.expired += 1;
            }
        }
        if let Some(k) = keep {
            let cutoff = now.saturating_sub(k);
            for vm in self.vms()? {
                if vm.last_seen < cutoff && !connected.contains(&vm.id) {
                    done.removed_vms.push(self.delete_vm(vm)?);
                }
            }
        }
        Ok(done)
    }

    /// Marks the VM deleted and deletes its samples, snapshots and metadata.
    pub fn delete_vm(&self, mut vm: VmRecord) -> anyhow::Result<u64> {
        let db = &self.client.db;
        let id = vm.id;
        let mut rows = Rows::default();
        vm.last_seen = crate::now_ms();
        vm_row(&mut rows, &vm, true);
        self.client.run(
            &format!("INSERT INTO {db}.vms FORMAT RowBinary"),
            &rows.bytes,
        )?;
        for table in [
            "samples",
            "samples_minute",
            "samples_hour",
            "snapshots",
            "meta",
            "seqs",
        ] {
            self.client
                .exec(&format!("ALTER TABLE {db}.{table} DELETE WHERE vm = {id}"))?;
        }
        self.queue.forget(id);
        Ok(id)
    }
}

/// `1, 2, 3` (0 for none, which matches no VM).
fn list(ids: &[u64]) -> String {
    if ids.is_empty() {
        return "0".into();
    }
    ids.iter()
        .map(u64::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The end of the day a `YYYY-MM-DD` partition holds, Unix ms.
fn day_end_ms(partition: &str) -> Option<u64> {
    let mut it = partition.trim_matches('\'').split('-');
    let (y, m, d): (i64, i64, i64) = (
        it.next()?.parse().ok()?,
        it.next()?.parse().ok()?,
        it.next()?.parse().ok()?,
    );
    // Days from civil (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    u64::try_from(days + 1).ok().map(|d| d * DAY_MS)
}

fn vm_row(rows: &mut Rows, vm: &VmRecord, deleted: bool) {
    rows.u64(vm.id);
    rows.u32(vm.pid);
    rows.str(vm.command.as_bytes());
    rows.str(vm.host.as_bytes());
    rows.str(vm.jvm.as_bytes());
    rows.str(vm.os.as_bytes());
    rows.str(vm.agent_version.as_bytes());
    rows.u64(vm.start_unix_ms);
    rows.u64(vm.connected_at);
    rows.u64(vm.last_seen);
    rows.u64(vm.dropped_snapshots);
    rows.u64(vm.dropped_sample_batches);
    rows.u64(vm.dropped_samples);
    rows.strs(vm.labels.iter().map(|(k, _)| k.as_str()));
    rows.strs(vm.labels.iter().map(|(_, v)| v.as_str()));
    rows.u8(deleted as u8);
    // Newer rows win (ReplacingMergeTree's version): the time, in ns.
    rows.u64(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64),
    );
    rows.count += 1;
}

fn create_schema(c: &Client) -> anyhow::Result<()> {
    let db = &c.db;
    c.exec(&format!("CREATE DATABASE IF NOT EXISTS {db}"))?;
    c.exec(&format!(
        "CREATE TABLE IF NOT EXISTS {db}.schema_version (version UInt64) ENGINE = TinyLog"
    ))?;
    let bytes = c.query(&format!("SELECT version FROM {db}.schema_version"))?;
    let mut r = Reader { b: &bytes };
    if r.done() {
        c.run(
            &format!("INSERT INTO {db}.schema_version FORMAT RowBinary"),
            &SCHEMA_VERSION.to_le_bytes(),
        )?;
    } else {
        let v = r.u64()?;
        anyhow::ensure!(
            v == SCHEMA_VERSION,
            "ClickHouse database {db} holds jvmprof schema version {v} and this collector \
             uses version {SCHEMA_VERSION}; pick another database"
        );
    }
    for sql in [
        "CREATE TABLE IF NOT EXISTS {db}.vms (id UInt64, pid UInt32, command String, \
         host String, jvm String, os String, agent_version String, start_unix_ms UInt64, \
         connected_at UInt64, last_seen UInt64, dropped_snapshots UInt64, \
         dropped_sample_batches UInt64, dropped_samples UInt64, label_keys Array(String), \
         label_values Array(String), deleted UInt8, version UInt64) \
         ENGINE = ReplacingMergeTree(version) ORDER BY id",
        "CREATE TABLE IF NOT EXISTS {db}.stacks (hash UInt64, frames String) \
         ENGINE = ReplacingMergeTree ORDER BY hash",
        "CREATE TABLE IF NOT EXISTS {db}.samples (day Date, time_ms UInt64, vm UInt64, \
         stack UInt64, tid Int64, thread String, state UInt8, values Array(UInt64)) \
         ENGINE = MergeTree PARTITION BY day ORDER BY (vm, time_ms, stack)",
        "CREATE MATERIALIZED VIEW IF NOT EXISTS {db}.samples_minute \
         ENGINE = AggregatingMergeTree PARTITION BY day \
         ORDER BY (vm, minute, stack, tid, thread, state) AS SELECT day, \
         intDiv(time_ms, 60000) AS minute, vm, stack, tid, thread, state, \
         sumForEachState(values) AS values FROM {db}.samples \
         GROUP BY day, minute, vm, stack, tid, thread, state",
        "CREATE MATERIALIZED VIEW IF NOT EXISTS {db}.samples_hour \
         ENGINE = AggregatingMergeTree PARTITION BY day \
         ORDER BY (vm, hour, stack, tid, thread, state) AS SELECT day, \
         intDiv(time_ms, 3600000) AS hour, vm, stack, tid, thread, state, \
         sumForEachState(values) AS values FROM {db}.samples \
         GROUP BY day, hour, vm, stack, tid, thread, state",
        "CREATE TABLE IF NOT EXISTS {db}.snapshots (day Date, vm UInt64, time_ms UInt64, \
         data String) ENGINE = ReplacingMergeTree(time_ms) PARTITION BY day ORDER BY vm",
        "CREATE TABLE IF NOT EXISTS {db}.meta (vm UInt64, metrics Array(String), \
         modes Array(String), interval_ns UInt64, version UInt64) \
         ENGINE = ReplacingMergeTree(version) ORDER BY vm",
        "CREATE TABLE IF NOT EXISTS {db}.seqs (vm UInt64, seq UInt64) \
         ENGINE = ReplacingMergeTree(seq) ORDER BY vm",
    ] {
        c.exec(&sql.replace("{db}", db))?;
    }
    Ok(())
}

/// The writer thread's state.
struct Writer {
    client: Client,
    ledger: Ledger,
    known_stacks: HashSet<u64>,
    /// VMs whose metadata this collector has written.
    meta_sent: HashSet<u64>,
    pending: Pending,
    barriers: Vec<tokio::sync::oneshot::Sender<()>>,
    /// A flush failed and was reported; the next success is reported too.
    failing: bool,
    /// Writes dropped while ClickHouse was unreachable.
    dropped: u64,
}

impl Writer {
    fn run(mut self, rx: mpsc::Receiver<Write>) {
        let mut last_flush = Instant::now();
        loop {
            let wait = FLUSH_EVERY.saturating_sub(last_flush.elapsed());
            match rx.recv_timeout(wait) {
                Ok(w) => {
                    self.add(w);
                    self.ledger.handled(1);
                }
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
            Write::Chore(never) => match never {},
            Write::Batch {
                vm,
                seq,
                time_unix_ms,
                profile,
            } => {
                if self.meta_sent.insert(vm) {
                    p.meta.u64(vm);
                    p.meta.strs(profile.meta.metrics.iter().map(|m| m.as_str()));
                    p.meta.strs(profile.meta.modes.iter().map(String::as_str));
                    p.meta.u64(profile.meta.interval_ns);
                    p.meta.u64(seq);
                    p.meta.count += 1;
                }
                let mut hashes = StackHashes::new(&profile);
                for s in &profile.samples {
                    let hash = hashes.get(s.stack);
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
                    p.samples.u64s(&s.values);
                    p.samples.count += 1;
                }
                p.seqs.u64(vm);
                p.seqs.u64(seq);
                p.seqs.count += 1;
                let newest = p.newest.entry(vm).or_insert(0);
                *newest = (*newest).max(seq);
            }
        }
        if self.pending.bytes() > MAX_PENDING_BYTES {
            // ClickHouse is away and the buffer is full: drop the samples, keep the rest.
            self.dropped += self.pending.samples.count as u64;
            self.pending.samples = Rows::default();
            self.pending.seqs = Rows::default();
            self.pending.newest.clear();
            self.known_stacks.clear();
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations_are_checked() {
        assert_eq!(
            Location::parse("clickhouse://127.0.0.1:8123/jvmprof").unwrap(),
            Location {
                url: "http://127.0.0.1:8123/".into(),
                database: "jvmprof".into()
            }
        );
        for bad in [
            "http://h:1/db",
            "clickhouse://h:1",
            "clickhouse://h:1/",
            "clickhouse://h:1/a-b",
            "clickhouse:///db",
        ] {
            assert!(Location::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn partitions_end_at_midnight() {
        assert_eq!(day_end_ms("1970-01-01"), Some(DAY_MS));
        // 2026-11-25 is day 20782 since the epoch.
        assert_eq!(day_end_ms("'2026-11-25'"), Some(20783 * DAY_MS));
        assert_eq!(day_end_ms("2026-13"), None);
    }

    fn b_frame() -> Frame {
        Frame::java("B", "c", "()V", 2)
    }

    #[test]
    fn ids_and_hashes_are_stable() {
        assert_eq!(vm_id("h", 1, 2), vm_id("h", 1, 2));
        assert_ne!(vm_id("h", 1, 2), vm_id("h", 1, 3));
        assert!(vm_id("h", 1, 2) < 1 << 53);
        let a = Frame::java("A", "b", "()V", 1);
        let b = Frame::java("Ab", "", "()V", 1);
        assert_ne!(stack_hash(&[&a]), stack_hash(&[&b]));
        // Fixed: the hash is the stacks table's key across collectors and releases.
        assert_eq!(stack_hash(&[]), Fnv::new().finish());
        assert_eq!(frame_hash(&a), 0xae16_c422_35c4_6bef);
        // The per-prefix computation gives the same hashes as the whole stack's.
        let mut b = ProfileBuilder::new(Meta::default());
        let (fa, fb) = (b.frame(a.clone()), b.frame(b_frame()));
        let s1 = b.stack(&[fa, fb]);
        let s2 = b.stack(&[fa]);
        let s3 = b.stack(&[fb, fa, fb]);
        let p = b.finish();
        let mut h = StackHashes::new(&p);
        for s in [s1, s2, s3] {
            let frames: Vec<&Frame> = p.stack_frames(s).collect();
            assert_eq!(h.get(s), stack_hash(&frames), "{s}");
        }
    }

    #[test]
    fn row_binary_round_trips() {
        let mut w = Rows::default();
        w.u64(300);
        w.str(b"caf\xc3\xa9");
        w.strs(["a", "bc"].into_iter());
        w.u64s(&[1, 2, 1 << 40]);
        w.i64(-5);
        let mut r = Reader { b: &w.bytes };
        assert_eq!(r.u64().unwrap(), 300);
        assert_eq!(r.string().unwrap(), "café");
        assert_eq!(r.strings().unwrap(), vec!["a", "bc"]);
        assert_eq!(r.u64s().unwrap(), vec![1, 2, 1 << 40]);
        assert_eq!(r.i64().unwrap(), -5);
        assert!(r.done());
        // Cut short anywhere: an error, never a panic.
        for n in 0..w.bytes.len() {
            let mut r = Reader { b: &w.bytes[..n] };
            let all = (|| -> anyhow::Result<()> {
                r.u64()?;
                r.string()?;
                r.strings()?;
                r.u64s()?;
                r.i64()?;
                Ok(())
            })();
            assert!(all.is_err(), "{n}");
        }
    }
}
