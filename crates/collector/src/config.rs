//! The collector's settings (`jvmprof serve`'s options): one job, to say what one collector
//! listens on, where it keeps its data and what it does with it.

use crate::push_config::PushConfig;
use crate::store::{Retention, clickhouse};
use std::path::PathBuf;

#[derive(Clone, Debug)]
pub struct Config {
    pub listen: String,
    pub data: PathBuf,
    pub token: Option<String>,
    /// What the store keeps and for how long.
    pub retention: Retention,
    /// A ClickHouse database to keep everything in instead of `data` (shared by collectors).
    pub clickhouse: Option<clickhouse::Location>,
    /// Where to push every VM's profile (`--push`), if anywhere.
    pub push: Option<PushConfig>,
    /// Hides secret arguments of every command line kept or served (`--mask`).
    pub mask: crate::mask::Mask,
}
