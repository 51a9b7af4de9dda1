//! `jvmprof serve`: the collector, its HTTP API and web UI on one port (see jvmprof-collector).

use anyhow::Result;
use std::path::PathBuf;

#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Address for agents (`server=ADDR`) and HTTP alike; loopback unless you say otherwise.
    #[arg(long, default_value = "127.0.0.1:7878")]
    pub listen: String,
    /// Where VMs, profiles and snapshots are kept (survives restarts).
    #[arg(long, default_value = "jvmprof-data")]
    pub data: PathBuf,
    /// Agents must present this token (`token=...` agent option).
    #[arg(long, env = "JVMPROF_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Delete samples older than this, and VMs not seen for this long with all their data
    /// (e.g. 7d; default: keep everything).
    #[arg(long, value_parser = duration)]
    pub retention: Option<std::time::Duration>,
    /// Merge sample batches older than this into one profile per VM and minute, so queries over
    /// long ranges read minutes (time ranges in older data are then whole minutes).
    #[arg(long, value_parser = duration, default_value = "10m")]
    pub rollup_after: std::time::Duration,
    /// Keep everything in ClickHouse instead of --data: clickhouse://HOST:PORT/DB (its HTTP
    /// port). Collectors sharing one database serve every VM's data.
    #[arg(long, value_name = "clickhouse://HOST:PORT/DB", value_parser = clickhouse)]
    pub store: Option<jvmprof_collector::clickhouse::Location>,
    /// Push every VM's profile as pprof to a Pyroscope-compatible ingest endpoint (plain HTTP):
    /// Pyroscope, Grafana Alloy, or another jvmprof collector's /ingest.
    #[arg(long, value_name = "pyroscope://HOST:PORT", value_parser = push_target)]
    pub push: Option<jvmprof_collector::push::Target>,
    /// How often to push (each VM's new samples).
    #[arg(long, value_parser = duration, default_value = "10s")]
    pub push_every: std::time::Duration,
    /// Sent with every push as `Authorization: Bearer TOKEN`.
    #[arg(long, env = "JVMPROF_PUSH_TOKEN", hide_env_values = true)]
    pub push_token: Option<String>,
}

fn clickhouse(s: &str) -> Result<jvmprof_collector::clickhouse::Location, String> {
    jvmprof_collector::clickhouse::Location::parse(s)
}

fn push_target(s: &str) -> Result<jvmprof_collector::push::Target, String> {
    jvmprof_collector::push::Target::parse(s)
}

fn duration(s: &str) -> Result<std::time::Duration, String> {
    jvmprof_options::parse_duration(s)
}

pub fn run(args: Args) -> Result<i32> {
    let retention = jvmprof_collector::store::Retention {
        rollup_after: args.rollup_after,
        keep: args.retention,
    };
    let push = args.push.map(|target| jvmprof_collector::push::PushConfig {
        target,
        every: args.push_every,
        token: args.push_token,
    });
    if let Some(p) = &push {
        p.max_window(retention.rollup_after)
            .map_err(|e| anyhow::anyhow!(e))?;
    }
    jvmprof_collector::run_blocking(jvmprof_collector::Config {
        listen: args.listen,
        data: args.data,
        token: args.token,
        retention,
        clickhouse: args.store,
        push,
    })?;
    Ok(0)
}
