//! The ClickHouse store's tables, created on first use; a database holding another schema
//! version is refused with a message.

use super::client::Client;
use super::rows::Reader;

/// Version of the tables below; a database holding another is refused with a message.
const SCHEMA_VERSION: u64 = 1;

pub(super) fn create_schema(c: &Client) -> anyhow::Result<()> {
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
        // The record chunks as the agents sent them: what a collector replays to resolve a
        // VM's later chunks after a restart.
        "CREATE TABLE IF NOT EXISTS {db}.chunks (day Date, vm UInt64, seq UInt64, \
         time_ms UInt64, data String) ENGINE = ReplacingMergeTree PARTITION BY day \
         ORDER BY (vm, seq)",
    ] {
        c.exec(&sql.replace("{db}", db))?;
    }
    Ok(())
}
