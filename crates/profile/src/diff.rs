//! Differential profiles of two profiles (`jvmprof diff BASE NEW`), matched by rendered stack
//! (frame names, so different line numbers of a method match; with `threads`, the thread name
//! is part of the stack).
//!
//! Outputs: the two-value collapsed format of FlameGraph's `difffolded.pl` (`stack BASE NEW`,
//! which `flamegraph.pl` and inferno render as a differential flame graph), a differential HTML
//! flame graph ([`crate::flamegraph::write_diff`]) and a text report of the methods whose share
//! changed most.

use crate::error::{Error, Result};
use crate::export::format_value;
use crate::export::{ExportOptions, default_metric};
use crate::model::{Metric, Profile};
use crate::stacks::paired_stacks;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::{self, Write};

/// One rendered stack and its value in each profile.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DiffStack {
    /// Frame names, root first.
    pub frames: Vec<String>,
    pub base: u64,
    pub new: u64,
}

/// The metric both profiles are compared by, and its index in each: `metric`, else the new
/// profile's default. Errors say which profile lacks it.
pub(crate) fn metric_indices(
    base: &Profile,
    new: &Profile,
    metric: Option<Metric>,
) -> Result<(Metric, usize, usize)> {
    let metric = metric
        .or_else(|| default_metric(new))
        .ok_or_else(|| Error::Export("the new profile has no metric".to_string()))?;
    let index = |p: &Profile, which: &str| {
        p.metric_index(metric).ok_or_else(|| {
            Error::Export(format!(
                "the {which} profile has no `{}` metric",
                metric.as_str()
            ))
        })
    };
    Ok((metric, index(base, "base")?, index(new, "new")?))
}

/// Every rendered stack of either profile with its two values, sorted by frames.
pub fn stacks(base: &Profile, new: &Profile, options: &ExportOptions) -> Result<Vec<DiffStack>> {
    let (_, bi, ni) = metric_indices(base, new, options.metric)?;
    let paired = paired_stacks(base, bi, new, ni, options.threads);
    Ok(paired
        .stacks
        .into_iter()
        .map(|(stack, base, new)| DiffStack {
            frames: stack
                .iter()
                .map(|i| paired.names[*i as usize].clone())
                .collect(),
            base,
            new,
        })
        .collect())
}

/// Writes the `difffolded` format: `frame;frame;... BASE NEW` per stack.
pub fn write_collapsed(
    base: &Profile,
    new: &Profile,
    options: &ExportOptions,
    out: impl Write,
) -> Result<()> {
    let mut out = io::BufWriter::new(out);
    for s in stacks(base, new, options)? {
        writeln!(out, "{} {} {}", s.frames.join(";"), s.base, s.new)?;
    }
    out.flush()?;
    Ok(())
}

fn share(v: u64, total: u64) -> f64 {
    if total == 0 {
        0.0
    } else {
        100.0 * v as f64 / total as f64
    }
}

/// A text report: totals of both profiles, then the `top` methods whose self share and whose
/// total share (once per stack) changed most, in percentage points of each profile's total.
pub fn text(base: &Profile, new: &Profile, metric: Option<Metric>, top: usize) -> Result<String> {
    let (metric, bi, ni) = metric_indices(base, new, metric)?;
    let paired = paired_stacks(base, bi, new, ni, false);
    let (mut base_total, mut new_total) = (0u64, 0u64);
    // Per method name: (base self, new self, base total, new total).
    let mut methods: HashMap<u32, [u64; 4]> = HashMap::new();
    for (stack, b, n) in &paired.stacks {
        base_total = base_total.saturating_add(*b);
        new_total = new_total.saturating_add(*n);
        if let Some(leaf) = stack.last() {
            let m = methods.entry(*leaf).or_default();
            m[0] = m[0].saturating_add(*b);
            m[1] = m[1].saturating_add(*n);
        }
        let mut distinct = stack.clone();
        distinct.sort_unstable();
        distinct.dedup();
        for name in distinct {
            let m = methods.entry(name).or_default();
            m[2] = m[2].saturating_add(*b);
            m[3] = m[3].saturating_add(*n);
        }
    }
    let m = metric.as_str();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "base: {} {m}\nnew:  {} {m}\n",
        format_value(metric, base_total),
        format_value(metric, new_total)
    );
    for (title, b, n) in [("self", 0, 1), ("total", 2, 3)] {
        let mut rows: Vec<(f64, f64, u32)> = methods
            .iter()
            .map(|(name, v)| (share(v[b], base_total), share(v[n], new_total), *name))
            .filter(|(bs, ns, _)| bs != ns)
            .collect();
        rows.sort_by(|x, y| {
            // Compared in millionths of a point, so equal changes tie and sort by name.
            let dx = ((x.1 - x.0).abs() * 1e6).round() as i64;
            let dy = ((y.1 - y.0).abs() * 1e6).round() as i64;
            dy.cmp(&dx)
                .then_with(|| paired.names[x.2 as usize].cmp(&paired.names[y.2 as usize]))
        });
        let _ = writeln!(out, "Largest changes in {title} share of {m}:");
        if rows.is_empty() {
            let _ = writeln!(out, "  (none)");
        } else {
            let _ = writeln!(
                out,
                "  {:>8}  {:>8}  {:>9}  method",
                "base", "new", "change"
            );
        }
        for (bs, ns, name) in rows.iter().take(top) {
            let _ = writeln!(
                out,
                "  {:>7.2}%  {:>7.2}%  {:>+8.2}pp  {}",
                bs,
                ns,
                ns - bs,
                paired.names[*name as usize]
            );
        }
        if rows.len() > top {
            let _ = writeln!(out, "  ... {} more", rows.len() - top);
        }
        if title == "self" {
            out.push('\n');
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdata::{alloc_profile, changed_profile, sample_profile};

    #[test]
    fn stacks_pair_by_rendered_name() {
        let d = stacks(
            &sample_profile(),
            &changed_profile(),
            &ExportOptions::default(),
        )
        .unwrap();
        let lines: Vec<String> = d
            .iter()
            .map(|s| format!("{} {} {}", s.frames.join(";"), s.base, s.new))
            .collect();
        assert_eq!(
            lines,
            [
                "com.example.App.main;com.example.App.work 2 0",
                "com.example.App.main;com.example.App.work;java.util.Arrays.sort 0 9",
                "com.example.App.main;com.example.App.work;java.util.HashMap.put 5 1",
                "java.lang.Thread.run;Outer$Inner.run;write 4 0",
            ]
        );
        let mut buf = Vec::new();
        write_collapsed(
            &sample_profile(),
            &changed_profile(),
            &ExportOptions::default(),
            &mut buf,
        )
        .unwrap();
        assert_eq!(String::from_utf8(buf).unwrap(), lines.join("\n") + "\n");
    }

    #[test]
    fn text_report_ranks_share_changes() {
        let text = text(&sample_profile(), &changed_profile(), None, 3).unwrap();
        assert_eq!(
            text,
            "\
base: 11 samples
new:  10 samples

Largest changes in self share of samples:
      base       new     change  method
     0.00%    90.00%    +90.00pp  java.util.Arrays.sort
    36.36%     0.00%    -36.36pp  write
    45.45%    10.00%    -35.45pp  java.util.HashMap.put
  ... 1 more

Largest changes in total share of samples:
      base       new     change  method
     0.00%    90.00%    +90.00pp  java.util.Arrays.sort
    36.36%     0.00%    -36.36pp  Outer$Inner.run
    63.64%   100.00%    +36.36pp  com.example.App.main
  ... 4 more
"
        );
    }

    #[test]
    fn metric_must_exist_in_both() {
        let e = stacks(
            &alloc_profile(),
            &sample_profile(),
            &ExportOptions::default(),
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "cannot export: the base profile has no `samples` metric"
        );
        let options = ExportOptions {
            metric: Some(Metric::Calls),
            threads: false,
        };
        let e = stacks(&sample_profile(), &sample_profile(), &options).unwrap_err();
        assert_eq!(
            e.to_string(),
            "cannot export: the base profile has no `calls` metric"
        );
    }
}
