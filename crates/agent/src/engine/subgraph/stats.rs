//! Root mode's results: the `Roots` runtime's trees (read by the shared [`TreeReader`]) merged
//! into the sink as calls, own time and bytecodes per context, and per-method statistics over
//! every context and thread (count, total, min, max, mean, spread of each invocation's inclusive
//! time) for the profile's metadata. Trace mode merges the same trees untimed.

use super::select::FIRST_ID;
use crate::engine::trees::{TreeReader, each_tree};
use crate::sink::Sink;
use jvmprof_jvmti::Jni;
use jvmprof_jvmti::classes::GlobalRef;
use jvmprof_profile::{Frame, FrameKind, Metric, ThreadState};
use std::collections::BTreeMap;

/// The runtime's id for contexts past the node budget.
const SPILL: i64 = -2;
/// The runtime's id for remote-call spans (trace mode).
const REMOTE_METHOD: i64 = -4;
/// Fields per context in `Roots.tree(i)`.
const FIELDS: usize = 9;
/// Per-method statistics over every context and thread (inclusive time per invocation).
#[derive(Default, Clone, Copy)]
struct Stat {
    count: u64,
    total: i128,
    sq: f64,
    min: i64,
    max: i64,
}

/// Reads the runtime's trees into a profile, adding what grew since the last merge.
#[derive(Default)]
pub struct Collector {
    /// Per (thread index, context index): (calls, own time, bytecodes) already added.
    reader: TreeReader<3>,
    stats: BTreeMap<String, Stat>,
    /// Contexts that ran, at the last merge.
    pub contexts: u64,
}

impl Collector {
    /// Merges every thread's tree into the sink; `methods` holds (class, method) by id from
    /// [`FIRST_ID`]; `timed`: own times go to the sink's time metric; `last`: no merge follows.
    pub fn merge(
        &mut self,
        jni: &Jni,
        roots: GlobalRef,
        sink: &mut Sink,
        methods: &[(String, String)],
        last: bool,
        timed: bool,
    ) {
        let metrics = sink.profile().meta.metrics.clone();
        let at = |m: Metric| metrics.iter().position(|x| *x == m);
        let calls_at = at(Metric::Calls);
        // Trace mode's tree has no times (they are its events'); a sampling mode's ns beside it
        // is that mode's own.
        let time_at = if timed {
            at(Metric::Ns).or(at(Metric::CpuNs))
        } else {
            None
        };
        let bc_at = at(Metric::Bytecodes);
        let remember = self.reader.remember(last);
        // Statistics are recomputed from the whole trees each time.
        let mut stats: BTreeMap<String, Stat> = BTreeMap::new();
        let mut contexts = 0u64;
        let mut values = vec![0u64; metrics.len()];
        let reader = &mut self.reader;
        let read = each_tree(jni, roots, None, |i, name, tree| {
            let thread = sink.thread_named(name);
            let count = tree.len() / FIELDS;
            let mut stacks: Vec<Option<u32>> = vec![None; count];
            for k in 0..count {
                let f = &tree[k * FIELDS..(k + 1) * FIELDS];
                let (parent, method) = (f[0], f[1]);
                if parent < 0 {
                    continue; // the thread's top: not a frame
                }
                let parent_stack = usize::try_from(parent)
                    .ok()
                    .and_then(|p| stacks.get(p).copied().flatten());
                let frame = reader.frame(sink, method, || frame(methods, method));
                let stack = sink.child_stack(parent_stack, frame);
                stacks[k] = Some(stack);
                let calls = f[2].max(0) as u64;
                if calls == 0 {
                    continue;
                }
                contexts += 1;
                let own = f[3].max(0) as u64;
                let bytecodes = f[4].max(0) as u64;
                let key = match usize::try_from(method - FIRST_ID as i64)
                    .ok()
                    .and_then(|m| methods.get(m))
                {
                    Some((c, m)) => format!("{c}.{m}"),
                    None if method == SPILL => "[past node budget]".to_string(),
                    None => continue,
                };
                let s = stats.entry(key).or_insert(Stat {
                    min: i64::MAX,
                    max: i64::MIN,
                    ..Stat::default()
                });
                s.count += calls;
                s.total += i128::from(f[5]);
                s.sq += f64::from_bits(f[6] as u64);
                s.min = s.min.min(f[7]);
                s.max = s.max.max(f[8]);
                let [dc, dt, db] = reader.gain(remember, (i, k), [calls, own, bytecodes]);
                if dc == 0 && dt == 0 && db == 0 {
                    continue;
                }
                values.iter_mut().for_each(|v| *v = 0);
                if let Some(x) = calls_at {
                    values[x] = dc;
                }
                if let Some(x) = time_at {
                    values[x] = dt;
                }
                if let Some(x) = bc_at {
                    values[x] = db;
                }
                sink.add(thread, stack, ThreadState::Running, &values);
            }
        });
        if read.is_some() {
            self.stats = stats;
            self.contexts = contexts;
        }
    }

    /// `method\tcount\ttotal_ns\tmin_ns\tmax_ns\tmean_ns\tstddev_ns` lines, by total
    /// descending (times: each invocation's inclusive time, calibrated; negatives, left by
    /// the correction's noise on near-empty methods, read as 0).
    pub fn stats_table(&self) -> String {
        let mut rows: Vec<(&String, &Stat)> = self.stats.iter().collect();
        rows.sort_by(|a, b| b.1.total.cmp(&a.1.total).then(a.0.cmp(b.0)));
        let mut out = String::new();
        for (m, s) in rows {
            let n = s.count.max(1) as f64;
            let mean = s.total as f64 / n;
            let var = (s.sq / n - mean * mean).max(0.0);
            out.push_str(&format!(
                "{m}\t{}\t{}\t{}\t{}\t{:.0}\t{:.0}\n",
                s.count,
                s.total.max(0),
                s.min.max(0),
                s.max.max(0),
                mean.max(0.0),
                var.sqrt()
            ));
        }
        out
    }
}

/// The frame of a root-mode method id.
fn frame(methods: &[(String, String)], method: i64) -> Frame {
    match usize::try_from(method - FIRST_ID as i64)
        .ok()
        .and_then(|m| methods.get(m))
    {
        Some((class, name)) => Frame::java(class, name, "", 0),
        None if method == SPILL => Frame::synthetic(FrameKind::Synthetic, "[past node budget]"),
        None if method == REMOTE_METHOD => Frame::synthetic(FrameKind::Synthetic, "[remote call]"),
        None => Frame::synthetic(FrameKind::Synthetic, &format!("[method #{method}]")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_table_orders_by_total_and_computes_spread() {
        let mut c = Collector::default();
        c.stats.insert(
            "A.a".into(),
            Stat {
                count: 2,
                total: 30,
                sq: 10.0 * 10.0 + 20.0 * 20.0,
                min: 10,
                max: 20,
            },
        );
        c.stats.insert(
            "B.b".into(),
            Stat {
                count: 1,
                total: 100,
                sq: 100.0 * 100.0,
                min: 100,
                max: 100,
            },
        );
        let t = c.stats_table();
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines[0], "B.b\t1\t100\t100\t100\t100\t0");
        assert_eq!(lines[1], "A.a\t2\t30\t10\t20\t15\t5");
    }
}
