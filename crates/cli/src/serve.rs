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
    /// Agents and API clients must present this token (agents: `token_file=` or
    /// JVMPROF_TOKEN; HTTP: `Authorization: Bearer TOKEN`). Default: the JVMPROF_TOKEN environment
    /// variable. This option is visible to every local user in `ps` while the collector runs:
    /// prefer --token-file or JVMPROF_TOKEN.
    #[arg(long, conflicts_with = "token_file")]
    pub token: Option<String>,
    /// A file whose first line is the token (keep it mode 0600).
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// Argument names whose values are hidden (`***`) in every command line the collector keeps
    /// or serves: comma-separated words, matched case-insensitively anywhere in a name
    /// (`-Dapp.password=x` → `-Dapp.password=***`). An empty list hides only the agent's token.
    #[arg(long, value_name = "WORDS", default_value = jvmprof_collector::mask::DEFAULT_MASK)]
    pub mask: String,
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
    /// Sent with every push as `Authorization: Bearer TOKEN` (default: the JVMPROF_PUSH_TOKEN
    /// environment variable). Visible to every local user in `ps`: prefer --push-token-file or
    /// JVMPROF_PUSH_TOKEN.
    #[arg(long, requires = "push", conflicts_with = "push_token_file")]
    pub push_token: Option<String>,
    /// A file whose first line is the push token.
    #[arg(long, value_name = "FILE", requires = "push")]
    pub push_token_file: Option<PathBuf>,
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
    use jvmprof_cli::secret;
    // Everything the collector creates (the store, heap dumps, traces, call graphs) is this
    // user's alone, whatever the umask it was started with.
    rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o077));
    let token = secret::token(args.token, args.token_file.as_deref(), secret::TOKEN_ENV)?;
    let push_token = match &args.push {
        Some(_) => secret::token(
            args.push_token,
            args.push_token_file.as_deref(),
            "JVMPROF_PUSH_TOKEN",
        )?,
        None => None,
    };
    let retention = jvmprof_collector::store::Retention {
        rollup_after: args.rollup_after,
        keep: args.retention,
    };
    let push = args.push.map(|target| jvmprof_collector::push::PushConfig {
        target,
        every: args.push_every,
        token: push_token,
    });
    if let Some(p) = &push {
        p.max_window(retention.rollup_after)
            .map_err(|e| anyhow::anyhow!(e))?;
    }
    jvmprof_collector::run_blocking(jvmprof_collector::Config {
        listen: args.listen,
        data: args.data,
        token,
        retention,
        clickhouse: args.store,
        push,
        mask: jvmprof_collector::Mask::parse(&args.mask),
    })?;
    Ok(0)
}
