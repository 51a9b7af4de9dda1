//! What every exporter shares: the options of the single-metric formats ([`ExportOptions`]),
//! the metric a format shows when none is asked for ([`default_metric`]), and how a metric's
//! value reads in text. The exporters depend on this; the registry ([`crate::format`]) depends
//! on the exporters; nothing here depends on either.

use crate::error::{Error, Result};
use crate::model::{Metric, Profile};

/// Options of the single-metric exporters (and the thread frame of collapsed, HTML, speedscope).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExportOptions {
    /// The metric to carry (`--value`); `None` means [`default_metric`].
    pub metric: Option<Metric>,
    /// Put a `[thread name]` frame at the root of every stack (`--threads`).
    pub threads: bool,
}

/// The metric a single-metric format shows when none is asked for: by the first mode of the run,
/// `samples` for cpu/wall, `calls` for exact, `bytes` for alloc, `ns` for lock, if the profile
/// carries it; otherwise the profile's first metric. `None` only when it has no metric at all.
pub fn default_metric(profile: &Profile) -> Option<Metric> {
    let metrics = &profile.meta.metrics;
    for mode in &profile.meta.modes {
        let preferred: &[Metric] = match mode.as_str() {
            "cpu" | "wall" => &[Metric::Samples, Metric::Ns],
            "exact" => &[Metric::Calls, Metric::Bytecodes, Metric::Ns, Metric::CpuNs],
            "alloc" => &[Metric::LiveBytes, Metric::Bytes, Metric::Objects],
            "lock" => &[Metric::LockNs, Metric::LockCount, Metric::Ns],
            _ => &[],
        };
        if let Some(m) = preferred.iter().find(|m| metrics.contains(m)) {
            return Some(*m);
        }
    }
    metrics.first().copied()
}

/// The index into sample values of `metric` (or of the default metric).
pub(crate) fn resolve_metric(profile: &Profile, metric: Option<Metric>) -> Result<usize> {
    let metric = match metric.or_else(|| default_metric(profile)) {
        Some(m) => m,
        None => return Err(Error::Export("the profile has no metric".to_string())),
    };
    profile.metric_index(metric).ok_or_else(|| {
        let have: Vec<&str> = profile.meta.metrics.iter().map(|m| m.as_str()).collect();
        Error::Export(format!(
            "the profile has no `{}` metric (it has: {})",
            metric.as_str(),
            have.join(", ")
        ))
    })
}

/// Formats a value of `metric`: nanoseconds as milliseconds, everything else as an integer.
pub fn format_value(metric: Metric, v: u64) -> String {
    match metric {
        Metric::Ns | Metric::CpuNs | Metric::LockNs | Metric::WaitNs => {
            format!("{:.3} ms", v as f64 / 1e6)
        }
        _ => v.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdata::sample_profile;

    #[test]
    fn default_metric_by_mode() {
        let mut p = sample_profile();
        assert_eq!(default_metric(&p), Some(Metric::Samples));
        p.meta.modes = vec!["exact".into()];
        p.meta.metrics = vec![Metric::Bytecodes, Metric::Calls];
        assert_eq!(default_metric(&p), Some(Metric::Calls));
        p.meta.modes = vec!["alloc".into()];
        p.meta.metrics = vec![Metric::Objects, Metric::Bytes];
        assert_eq!(default_metric(&p), Some(Metric::Bytes));
        p.meta.modes = vec!["lock".into()];
        p.meta.metrics = vec![Metric::Samples, Metric::Ns];
        assert_eq!(default_metric(&p), Some(Metric::Ns));
        p.meta.modes = vec![];
        p.meta.metrics = vec![Metric::Objects];
        assert_eq!(default_metric(&p), Some(Metric::Objects));
        p.meta.metrics = vec![];
        assert_eq!(default_metric(&p), None);
    }
}
