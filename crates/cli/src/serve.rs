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
    #[arg(long, env = "JVMPROF_TOKEN")]
    pub token: Option<String>,
}

pub fn run(args: Args) -> Result<i32> {
    jvmprof_collector::run_blocking(jvmprof_collector::Config {
        listen: args.listen,
        data: args.data,
        token: args.token,
    })?;
    Ok(0)
}
