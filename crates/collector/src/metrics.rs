//! `GET /metrics`: one job, to say what the collector took in and holds, in Prometheus' text
//! format (version 0.0.4), for a scraper. Counters are the `/api/stats` counters since the
//! collector started; gauges are read at the request.

use crate::hub::Hub;
use std::fmt::Write as _;
use std::sync::atomic::Ordering;

/// What each counter of [`crate::Stats`] counts (a counter missing here gets a generic line).
const COUNTERS: &[(&str, &str)] = &[
    ("connections", "Agent connections accepted"),
    (
        "rejected",
        "Agent connections and pushes refused (token, limits, version)",
    ),
    (
        "protocol_errors",
        "Agent connections closed for a malformed stream",
    ),
    ("bytes", "Bytes received from agents"),
    ("snapshots", "Thread snapshots received"),
    (
        "sample_batches",
        "Record chunks (older agents: sample batches) received from agents",
    ),
    (
        "duplicate_batches",
        "Record chunks re-sent after a reconnect, already stored",
    ),
    (
        "sample_records",
        "Sample records received (a new sample or values added to one)",
    ),
    ("samples", "Samples received (agents and /ingest)"),
    ("ingested", "Profiles received at /ingest"),
    ("push_rounds", "Push rounds run (--push)"),
    ("pushed", "Profiles pushed (--push)"),
    ("push_failures", "Pushes that failed (--push)"),
    (
        "push_dropped_ms",
        "Milliseconds of samples never pushed (the window grew too long)",
    ),
    ("trace_chunks", "Trace chunks received (trace mode)"),
];

/// The metrics as Prometheus text.
pub fn render(hub: &Hub) -> String {
    let mut out = String::new();
    let stats = serde_json::to_value(&hub.stats).unwrap_or_default();
    for (name, value) in stats.as_object().into_iter().flatten() {
        let help = COUNTERS
            .iter()
            .find(|(n, _)| n == name)
            .map_or("A collector counter since start", |(_, h)| h);
        let value = value.as_u64().unwrap_or(0);
        metric(&mut out, &format!("{name}_total"), "counter", help, value);
    }
    let vms = hub.vms.list();
    let connected = vms.iter().filter(|v| v.connected).count() as u64;
    let dropped: u64 = vms
        .iter()
        .map(|v| v.record.dropped_samples)
        .fold(0, u64::saturating_add);
    let trace_drops: u64 = hub
        .traces
        .vms()
        .into_iter()
        .map(|vm| hub.traces.dropped(vm))
        .fold(0, u64::saturating_add);
    let gauges = [
        ("vms", "VMs known (connected or not)", vms.len() as u64),
        (
            "vms_connected",
            "VMs with an open agent connection",
            connected,
        ),
        (
            "agent_dropped_samples",
            "Samples the known VMs' agents dropped, as they last reported",
            dropped,
        ),
        (
            "trace_dropped_chunks",
            "Trace chunks dropped because a VM's traces reached their limit",
            trace_drops,
        ),
        (
            "store_backlog",
            "Writes queued for the store, not yet written",
            hub.store.backlog() as u64,
        ),
        (
            "connection_bytes_held",
            "Bytes the agent connections make the collector hold",
            hub.held.load(Ordering::Relaxed) as u64,
        ),
    ];
    for (name, help, value) in gauges {
        metric(&mut out, name, "gauge", help, value);
    }
    out
}

fn metric(out: &mut String, name: &str, kind: &str, help: &str, value: u64) {
    let _ = writeln!(out, "# HELP jvmprof_{name} {help}.");
    let _ = writeln!(out, "# TYPE jvmprof_{name} {kind}");
    let _ = writeln!(out, "jvmprof_{name} {value}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_counter_has_its_help() {
        let stats = serde_json::to_value(crate::Stats::default()).unwrap();
        let names: Vec<&String> = stats.as_object().unwrap().keys().collect();
        for name in &names {
            assert!(
                COUNTERS.iter().any(|(n, _)| n == name),
                "no help for counter {name}"
            );
        }
        assert_eq!(names.len(), COUNTERS.len());
    }

    #[test]
    fn a_metric_is_three_lines() {
        let mut out = String::new();
        metric(&mut out, "vms", "gauge", "VMs known", 3);
        assert_eq!(
            out,
            "# HELP jvmprof_vms VMs known.\n# TYPE jvmprof_vms gauge\njvmprof_vms 3\n"
        );
    }
}
