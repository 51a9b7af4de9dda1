//! Per-method statistics of a root session (exact mode with `--root`): how many times each
//! method of the root's subgraph ran and how long each call took (inclusive, probe cost
//! calibrated out), as the agent stores them in the profile's metadata (`root_stats`, one
//! tab-separated line per method: method, count, total, min, max, mean, standard deviation in
//! ns). Read here for `report`, the flame graph page and the `.methods.txt` beside other outputs.

use crate::model::Profile;

/// One method's statistics (times in ns).
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct MethodStat {
    pub method: String,
    pub count: u64,
    pub total_ns: u64,
    pub min_ns: u64,
    pub max_ns: u64,
    pub mean_ns: u64,
    pub stddev_ns: u64,
}

/// The statistics the profile carries, by total time descending; `None` if it has none.
pub fn stats(profile: &Profile) -> Option<Vec<MethodStat>> {
    let text = profile.meta.extra.get("root_stats")?;
    let rows = text
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            let n = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok());
            Some(MethodStat {
                method: f.first()?.to_string(),
                count: n(1)?,
                total_ns: n(2)?,
                min_ns: n(3)?,
                max_ns: n(4)?,
                mean_ns: n(5)?,
                stddev_ns: n(6)?,
            })
        })
        .collect();
    Some(rows)
}

fn ms(ns: u64) -> String {
    format!("{:.3}", ns as f64 / 1e6)
}

/// The statistics as an aligned text table (times in ms), at most `top` rows (0: all).
pub fn table(rows: &[MethodStat], top: usize) -> String {
    let shown = if top == 0 {
        rows.len()
    } else {
        top.min(rows.len())
    };
    let mut out = format!(
        "{:>12} {:>12} {:>10} {:>10} {:>10} {:>10}  method\n",
        "count", "total ms", "min ms", "max ms", "mean ms", "stddev ms"
    );
    for r in &rows[..shown] {
        out.push_str(&format!(
            "{:>12} {:>12} {:>10} {:>10} {:>10} {:>10}  {}\n",
            r.count,
            ms(r.total_ns),
            ms(r.min_ns),
            ms(r.max_ns),
            ms(r.mean_ns),
            ms(r.stddev_ns),
            r.method
        ));
    }
    if shown < rows.len() {
        out.push_str(&format!("({} more methods)\n", rows.len() - shown));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_and_formats_the_agents_lines() {
        let mut p = Profile::default();
        p.meta.extra.insert(
            "root_stats".into(),
            "A.run\t2\t3000000\t1000000\t2000000\t1500000\t500000\nbad line\n".into(),
        );
        let rows = stats(&p).unwrap();
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].method, "A.run");
        assert_eq!(rows[0].max_ns, 2_000_000);
        let t = table(&rows, 0);
        assert!(
            t.contains("       2        3.000      1.000      2.000      1.500      0.500  A.run"),
            "{t}"
        );
        assert!(stats(&Profile::default()).is_none());
    }
}
