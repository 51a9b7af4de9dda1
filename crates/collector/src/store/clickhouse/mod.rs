//! The ClickHouse store (`serve --store clickhouse://HOST:PORT/DB`): VMs, stacks (deduplicated by
//! a hash of their frames), samples (by VM and time, with per-minute and per-hour rollups kept
//! by materialized views, so a day's query reads hours), snapshots and sample metadata in one ClickHouse database over its HTTP
//! interface, written in RowBinary. Several collectors can share the database: every VM's data
//! is there, VM ids are derived from the VM itself (host, pid, start), and a collector that
//! starts with an empty disk reads everything back. Retention drops whole daily partitions.
//!
//! The SQL sticks to what ClickHouse 18.16 (Debian's package) and current releases both accept:
//! no TTL, no DateTime64, no LowCardinality.

mod client;
mod hash;
mod rows;
mod schema;
mod writer;

pub use hash::vm_id;

use crate::store::backend::{Backend, Pending, VmSamples};
use crate::store::merge::builder_like;
use crate::store::queue::{Queue, Writes};
use crate::store::types::{Maintained, Retention, VmRecord, now_ms};
use client::Client;
use jvmprof_profile::{Frame, Meta, Metric, ProfileBuilder, Thread};
use jvmprof_proto::Snapshot;
use jvmprof_proto::wire::state_from;
use rows::{DAY_MS, Reader, Rows, vm_row};
use std::collections::{HashMap, HashSet};
use std::time::Duration;

const MINUTE_MS: u64 = 60_000;
/// Queries over a longer range, or starting before the raw samples kept, read the minutes.
const RAW_QUERY_SPAN_MS: u64 = 3_600_000;
/// Queries over a longer range read the hours.
const HOUR_QUERY_SPAN_MS: u64 = 6 * 3_600_000;
const HOUR_MS: u64 = 3_600_000;

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

#[derive(Clone)]
pub struct ClickHouse {
    client: Client,
    /// ClickHouse's writer has no chores besides writing.
    queue: Queue<std::convert::Infallible>,
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
        schema::create_schema(&client)?;
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
        let writer = writer::Writer::new(client.clone(), ledger);
        std::thread::Builder::new()
            .name("clickhouse writer".into())
            .spawn(move || writer.run(rx))?;
        Ok(ClickHouse { client, queue })
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
        let now = now_ms();
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

    /// The samples of each of `vms` in `[from, to]` (frames from the stacks table), with the
    /// oldest and newest sample times of each.
    fn vm_samples(&self, vms: &[VmRecord], from: u64, to: u64) -> anyhow::Result<Vec<VmSamples>> {
        if vms.is_empty() {
            return Ok(Vec::new());
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
        // vm → (first, last) sample time.
        let mut times: HashMap<u64, (u64, u64)> = HashMap::new();
        let mut r = Reader { b: &bytes };
        while !r.done() {
            let vm = r.u64()?;
            let stack = r.u64()?;
            let tid = r.i64()?;
            let thread = r.string()?;
            let state = state_from(r.u8()?).unwrap_or_default();
            let values = r.u64s()?;
            let (first, last) = times.entry(vm).or_insert((u64::MAX, 0));
            *first = (*first).min(r.u64()?);
            *last = (*last).max(r.u64()?);
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
        Ok(per_vm
            .into_iter()
            .map(|(vm, b)| {
                let (first, last) = times.get(&vm).copied().unwrap_or_default();
                VmSamples {
                    profile: b.finish(),
                    first,
                    last,
                }
            })
            .collect())
    }

    /// Drops daily partitions past the retention (samples, minutes, snapshots) and the raw
    /// samples past a day or the rollup age, and deletes VMs not seen for the retention.
    fn maintain_now(
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
             AND table IN ('samples', '.inner.samples_minute', '.inner.samples_hour', 'snapshots', 'chunks')"
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
            for vm in Backend::vms(self)? {
                if vm.last_seen < cutoff && !connected.contains(&vm.id) {
                    done.removed_vms.push(self.delete_vm_now(vm)?);
                }
            }
        }
        Ok(done)
    }

    /// Marks the VM deleted and deletes its samples, snapshots and metadata.
    fn delete_vm_now(&self, mut vm: VmRecord) -> anyhow::Result<u64> {
        let db = &self.client.db;
        let id = vm.id;
        let mut rows = Rows::default();
        vm.last_seen = now_ms();
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
            "chunks",
        ] {
            self.client
                .exec(&format!("ALTER TABLE {db}.{table} DELETE WHERE vm = {id}"))?;
        }
        self.queue.ledger().forget(id);
        Ok(id)
    }
}

impl Backend for ClickHouse {
    fn queue(&self) -> &dyn Writes {
        &self.queue
    }

    /// Derived from the VM, so every collector sharing the database agrees.
    fn vm_id_for(&self, host: &str, pid: u32, start_unix_ms: u64) -> Option<u64> {
        Some(vm_id(host, pid, start_unix_ms))
    }

    fn is_shared(&self) -> bool {
        true
    }

    /// Unused: every VM's id comes from [`vm_id`].
    fn next_vm_id(&self) -> anyhow::Result<u64> {
        Ok(1)
    }

    fn vms(&self) -> anyhow::Result<Vec<VmRecord>> {
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

    fn stream_chunks(&self, vm: u64) -> anyhow::Result<Vec<Vec<u8>>> {
        let db = &self.client.db;
        let bytes = self.client.query(&format!(
            "SELECT data FROM {db}.chunks FINAL WHERE vm = {vm} ORDER BY seq"
        ))?;
        let mut r = Reader { b: &bytes };
        let mut out = Vec::new();
        while !r.done() {
            out.push(r.bytes()?.to_vec());
        }
        Ok(out)
    }

    fn snapshots(&self) -> anyhow::Result<Vec<(u64, Snapshot)>> {
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

    /// Samples and CPU (or wall) ns of the VM's batches in `[from, to]`, by time.
    fn series(&self, vm: u64, from: u64, to: u64) -> anyhow::Result<Vec<(u64, u64, u64)>> {
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

    fn samples(&self, vms: &[VmRecord], from: u64, to: u64) -> anyhow::Result<Vec<VmSamples>> {
        self.vm_samples(vms, from, to)
    }

    fn maintain(
        &self,
        now_ms: u64,
        retention: Retention,
        connected: HashSet<u64>,
    ) -> Pending<Maintained> {
        let c = self.clone();
        Box::pin(async move {
            tokio::task::spawn_blocking(move || c.maintain_now(now_ms, retention, &connected))
                .await?
        })
    }

    fn delete_vm(&self, vm: &VmRecord) -> Pending<()> {
        let (c, vm) = (self.clone(), vm.clone());
        Box::pin(async move {
            tokio::task::spawn_blocking(move || c.delete_vm_now(vm).map(|_| ())).await?
        })
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
}
