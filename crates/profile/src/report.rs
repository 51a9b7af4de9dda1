//! The text report of `jvmprof report`: the run's metadata, then the top methods by self value
//! (the method is the leaf of the stack) and by total value (the method is anywhere in the stack,
//! counted once per stack even under recursion), with percentages of the whole; optionally the
//! same per thread. A method is its rendered name `package.Class.method`, so the lines of one
//! method add up.

use crate::export::default_metric;
pub use crate::export::format_value;
use crate::model::{Metric, Profile, Sample};
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;

/// What the report shows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReportOptions {
    /// The metric to rank by; `None` means [`default_metric`].
    pub metric: Option<Metric>,
    /// How many methods each table lists.
    pub top: usize,
    /// Add the tables for every thread.
    pub per_thread: bool,
}

impl Default for ReportOptions {
    fn default() -> ReportOptions {
        ReportOptions {
            metric: None,
            top: 20,
            per_thread: false,
        }
    }
}

fn percent(v: u64, of: u64) -> String {
    if of == 0 {
        "0.00%".to_string()
    } else {
        format!("{:.2}%", 100.0 * v as f64 / of as f64)
    }
}

/// Self and total values per method name.
struct Tables {
    total: u64,
    by_self: Vec<(u64, u32)>,
    by_total: Vec<(u64, u32)>,
}

struct Methods<'a> {
    profile: &'a Profile,
    names: Vec<String>,
    /// Name id of every frame.
    frame_names: Vec<u32>,
    /// The stack tree's children, by parent: `children[child_start[s]..child_start[s + 1]]`
    /// (index `len` holds the stacks without a parent).
    child_start: Vec<u32>,
    children: Vec<u32>,
}

impl<'a> Methods<'a> {
    fn new(profile: &'a Profile) -> Methods<'a> {
        let mut names = Vec::new();
        let mut ids: HashMap<String, u32> = HashMap::new();
        let frame_names: Vec<u32> = profile
            .frames
            .iter()
            .map(|f| {
                *ids.entry(f.name()).or_insert_with_key(|name| {
                    names.push(name.clone());
                    (names.len() - 1) as u32
                })
            })
            .collect();
        // Children lists in one array (counting sort by parent): a stack costs 8 bytes here
        // however deep it is.
        let stacks = &profile.stacks;
        let n = stacks.len();
        let slot = |s: u32| stacks.parent(s).map_or(n, |p| p as usize);
        let mut child_start = vec![0u32; n + 2];
        for s in 0..n as u32 {
            child_start[slot(s) + 1] += 1;
        }
        for i in 1..child_start.len() {
            child_start[i] += child_start[i - 1];
        }
        let mut next = child_start.clone();
        let mut children = vec![0u32; n];
        for s in 0..n as u32 {
            let k = &mut next[slot(s)];
            children[*k as usize] = s;
            *k += 1;
        }
        Methods {
            profile,
            names,
            frame_names,
            child_start,
            children,
        }
    }

    fn kids(&self, slot: usize) -> &[u32] {
        let (a, b) = (self.child_start[slot], self.child_start[slot + 1]);
        &self.children[a as usize..b as usize]
    }

    fn tables<'s>(&self, metric: usize, samples: impl Iterator<Item = &'s Sample>) -> Tables {
        let stacks = &self.profile.stacks;
        let mut self_values: HashMap<u32, u64> = HashMap::new();
        let mut total = 0u64;
        // Each stack's value, then (below) its whole subtree's.
        let mut sub = vec![0u64; stacks.len()];
        for s in samples {
            let v = s.values[metric];
            if v == 0 {
                continue;
            }
            total = total.saturating_add(v);
            if let Some(leaf) = stacks.top(s.stack) {
                let acc = self_values
                    .entry(self.frame_names[leaf as usize])
                    .or_insert(0);
                *acc = acc.saturating_add(v);
            }
            sub[s.stack as usize] = sub[s.stack as usize].saturating_add(v);
        }
        // Parents come before their children, so one backward pass sums the subtrees.
        for x in (0..stacks.len() as u32).rev() {
            if let Some(p) = stacks.parent(x) {
                sub[p as usize] = sub[p as usize].saturating_add(sub[x as usize]);
            }
        }
        // A method's total is what the subtrees of its outermost frames hold (once per stack,
        // however often it recurs): a walk down the tree counting each name on the path.
        let mut total_values: HashMap<u32, u64> = HashMap::new();
        let mut on_path = vec![0u32; self.names.len()];
        // (stack, entered): a stack is pushed, entered (its children pushed above it), left.
        let mut todo: Vec<(u32, bool)> = self
            .kids(stacks.len())
            .iter()
            .map(|&s| (s, false))
            .collect();
        while let Some((x, entered)) = todo.pop() {
            let name = stacks.top(x).map(|f| self.frame_names[f as usize]);
            if entered {
                if let Some(m) = name {
                    on_path[m as usize] -= 1;
                }
                continue;
            }
            let v = sub[x as usize];
            if v == 0 {
                continue;
            }
            if let Some(m) = name {
                if on_path[m as usize] == 0 {
                    let acc = total_values.entry(m).or_insert(0);
                    *acc = acc.saturating_add(v);
                }
                on_path[m as usize] += 1;
            }
            todo.push((x, true));
            todo.extend(self.kids(x as usize).iter().map(|&c| (c, false)));
        }
        Tables {
            total,
            by_self: self.ranked(self_values),
            by_total: self.ranked(total_values),
        }
    }

    /// Largest value first, then by name.
    fn ranked(&self, values: HashMap<u32, u64>) -> Vec<(u64, u32)> {
        let mut v: Vec<(u64, u32)> = values.into_iter().map(|(n, v)| (v, n)).collect();
        v.sort_by(|a, b| {
            b.0.cmp(&a.0)
                .then_with(|| self.names[a.1 as usize].cmp(&self.names[b.1 as usize]))
        });
        v
    }

    /// Writes the self table (`by_self`) or the total table.
    fn write_table(
        &self,
        out: &mut String,
        tables: &Tables,
        by_self: bool,
        metric: Metric,
        top: usize,
    ) {
        let m = metric.as_str();
        let (rows, column) = if by_self {
            let _ = writeln!(out, "Top methods by self {m}:");
            (&tables.by_self, "self")
        } else {
            let _ = writeln!(
                out,
                "Top methods by total {m} (callees included, once per stack):"
            );
            (&tables.by_total, "total")
        };
        if rows.is_empty() {
            let _ = writeln!(out, "  (no samples)");
            return;
        }
        let shown = &rows[..rows.len().min(top)];
        let values: Vec<String> = shown
            .iter()
            .map(|(v, _)| format_value(metric, *v))
            .collect();
        let width = values
            .iter()
            .map(String::len)
            .max()
            .unwrap_or(0)
            .max(column.len());
        let _ = writeln!(out, "  {column:>width$}  {:>7}  method", "percent");
        for ((v, name), text) in shown.iter().zip(&values) {
            let _ = writeln!(
                out,
                "  {text:>width$}  {:>7}  {}",
                percent(*v, tables.total),
                self.names[*name as usize]
            );
        }
        if rows.len() > shown.len() {
            let _ = writeln!(out, "  ... {} more", rows.len() - shown.len());
        }
    }

    fn write_tables(&self, out: &mut String, tables: &Tables, metric: Metric, top: usize) {
        self.write_table(out, tables, true, metric, top);
        out.push('\n');
        self.write_table(out, tables, false, metric, top);
    }
}

fn header(profile: &Profile, out: &mut String) {
    let m = &profile.meta;
    // Stacks taken on a clock (cpu, wall): the interval, thread states, failed walks and dropped
    // samples mean something. Counted calls (exact, root) and events (alloc, lock) have none of
    // these, only events the agent could not keep.
    let sampled = m.metrics.contains(&Metric::Samples);
    let mut line = |key: &str, value: String| {
        let _ = writeln!(out, "{:<17}{value}", format!("{key}:"));
    };
    line(
        "modes",
        if m.modes.is_empty() {
            "(unknown)".to_string()
        } else {
            m.modes.join(", ")
        },
    );
    if sampled && m.interval_ns != 0 {
        line("interval", format!("{} ms", m.interval_ns as f64 / 1e6));
    }
    if !m.engine.is_empty() {
        line("engine", m.engine.clone());
    }
    if !m.jvm_name.is_empty() || !m.jvm_version.is_empty() {
        line(
            "JVM",
            format!("{} {}", m.jvm_name, m.jvm_version)
                .trim()
                .to_string(),
        );
    }
    if m.pid != 0 {
        line("pid", m.pid.to_string());
    }
    if !m.command.is_empty() {
        line("command", m.command.clone());
    }
    if m.duration_ms != 0 {
        line(
            "duration",
            format!("{:.3} s", m.duration_ms as f64 / 1000.0),
        );
    }
    let totals: Vec<String> = m
        .metrics
        .iter()
        .enumerate()
        .map(|(i, metric)| {
            format!(
                "{} {}",
                metric.as_str(),
                format_value(*metric, profile.total(i))
            )
        })
        .collect();
    line("totals", totals.join(", "));
    line(
        "stacks",
        format!(
            "{} distinct, {} frames, {} threads",
            // Stacks with samples (the others are only prefixes of those).
            profile
                .samples
                .iter()
                .map(|s| s.stack)
                .collect::<std::collections::HashSet<_>>()
                .len(),
            profile.frames.len(),
            profile.threads.len()
        ),
    );
    if let Some(first) = m.metrics.first().filter(|_| sampled) {
        let mut states: BTreeMap<&str, u64> = BTreeMap::new();
        for s in &profile.samples {
            let acc = states.entry(s.state.as_str()).or_insert(0);
            *acc = acc.saturating_add(s.values[0]);
        }
        if !states.is_empty() {
            let states: Vec<String> = states
                .iter()
                .map(|(s, v)| format!("{s} {}", format_value(*first, *v)))
                .collect();
            line(
                "thread states",
                format!("{} ({})", states.join(", "), first.as_str()),
            );
        }
    }
    let failed = m
        .walk_failures
        .values()
        .fold(0u64, |a, v| a.saturating_add(*v));
    let reasons: Vec<String> = m
        .walk_failures
        .iter()
        .map(|(r, n)| format!("{r} {n}"))
        .collect();
    if sampled {
        line(
            "walk failures",
            if reasons.is_empty() {
                "0".to_string()
            } else {
                format!("{failed} ({})", reasons.join(", "))
            },
        );
        line("dropped samples", m.dropped_samples.to_string());
    } else if m.dropped_samples > 0 {
        line("dropped events", m.dropped_samples.to_string());
    }
    let extra = |k: &str| m.extra.get(k).map(String::as_str);
    if let Some(damage) = extra("damage") {
        line("file", damage.to_string());
    }
    // The CPU engine's own account of itself, when the profile has it.
    if let Some(roots) = extra("root_patterns") {
        line("roots", roots.to_string());
        line(
            "instrumented",
            format!(
                "{} methods, {} of them ran; probe cost {} ns inside a call, {} ns per call \
                 to its caller (calibrated, removed from the times); {} still instrumented after stop",
                extra("root_methods_instrumented").unwrap_or("?"),
                extra("root_methods_run").unwrap_or("?"),
                extra("root_inner_ns").unwrap_or("?"),
                extra("root_outer_ns").unwrap_or("?"),
                extra("root_methods_still_instrumented").unwrap_or("?"),
            ),
        );
    }
    if let Some(engine) = extra("cpu_engine") {
        let mut text = engine.to_string();
        if let Some(c) = extra("cpu_coverage") {
            text.push_str(&format!(", samples cover {c} of the process's CPU time"));
        }
        if let Some(r) = extra("walks_recovered").filter(|r| *r != "0") {
            text.push_str(&format!(", {r} walks recovered"));
        }
        line("cpu clock", text);
    }
}

/// The text report of `profile`.
pub fn text(profile: &Profile, options: &ReportOptions) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "jvmprof report");
    header(profile, &mut out);
    out.push('\n');
    let Some(metric) = options.metric.or_else(|| default_metric(profile)) else {
        let _ = writeln!(out, "(the profile has no metric)");
        return out;
    };
    let Some(index) = profile.metric_index(metric) else {
        let have: Vec<&str> = profile.meta.metrics.iter().map(|m| m.as_str()).collect();
        let _ = writeln!(
            out,
            "(the profile has no `{}` metric; it has: {})",
            metric.as_str(),
            have.join(", ")
        );
        return out;
    };
    if profile.metric_index(Metric::Bytes).is_some() {
        sites(profile, options.top, &mut out);
    }
    let methods = Methods::new(profile);
    let all = methods.tables(index, profile.samples.iter());
    let _ = writeln!(
        out,
        "All threads: {} {}\n",
        format_value(metric, all.total),
        metric.as_str()
    );
    methods.write_tables(&mut out, &all, metric, options.top);
    if let Some(rows) = crate::methods::stats(profile) {
        let _ = writeln!(
            out,
            "\nPer-method statistics (each call's time, callees included, probe cost removed):\n"
        );
        out.push_str(&crate::methods::table(&rows, options.top));
    }
    if options.per_thread {
        let mut threads: Vec<(u32, Tables)> = (0..profile.threads.len() as u32)
            .map(|t| {
                let samples = profile.samples.iter().filter(|s| s.thread == t);
                (t, methods.tables(index, samples))
            })
            .filter(|(_, tables)| tables.total > 0)
            .collect();
        threads.sort_by(|a, b| b.1.total.cmp(&a.1.total).then(a.0.cmp(&b.0)));
        for (t, tables) in &threads {
            let thread = &profile.threads[*t as usize];
            let tid = if thread.tid != 0 {
                format!(" (tid {})", thread.tid)
            } else {
                String::new()
            };
            let _ = writeln!(
                out,
                "\nThread {}{tid}: {} {} ({} of all)\n",
                thread.name,
                format_value(metric, tables.total),
                metric.as_str(),
                percent(tables.total, all.total)
            );
            methods.write_tables(&mut out, tables, metric, options.top);
        }
    }
    out
}

/// How many allocating frames a site shows (HPROF's default trace depth was 4).
const SITE_FRAMES: usize = 3;

/// HPROF's SITES table for allocation profiles: one row per (allocated type, top allocating
/// frames), ranked by live bytes when the profile has them, else by allocated bytes.
fn sites(profile: &Profile, top: usize, out: &mut String) {
    let idx = |m| profile.metric_index(m);
    let (Some(bytes), Some(objects)) = (idx(Metric::Bytes), idx(Metric::Objects)) else {
        return;
    };
    let live = idx(Metric::LiveBytes).zip(idx(Metric::LiveObjects));
    // (class, frames) -> [live bytes, live objects, bytes, objects]
    let mut rows: std::collections::HashMap<(String, Vec<String>), [u64; 4]> = Default::default();
    for s in &profile.samples {
        if s.values[bytes] == 0 && live.is_none_or(|(lb, _)| s.values[lb] == 0) {
            continue;
        }
        let frames: Vec<_> = profile.stack_frames(s.stack).collect();
        let Some((leaf, callers)) = frames.split_last() else {
            continue;
        };
        let site: Vec<String> = callers
            .iter()
            .rev()
            .take(SITE_FRAMES)
            .map(|f| f.name())
            .collect();
        let row = rows.entry((leaf.name(), site)).or_default();
        if let Some((lb, lo)) = live {
            row[0] += s.values[lb];
            row[1] += s.values[lo];
        }
        row[2] += s.values[bytes];
        row[3] += s.values[objects];
    }
    let rank_by = if live.is_some() { 0 } else { 2 };
    let mut rows: Vec<_> = rows.into_iter().collect();
    rows.sort_by(|a, b| b.1[rank_by].cmp(&a.1[rank_by]).then(a.0.cmp(&b.0)));
    let total: u64 = rows.iter().map(|r| r.1[rank_by]).sum();
    let _ = writeln!(
        out,
        "SITES ranked by {} bytes (estimated from sampled allocations):",
        if live.is_some() { "live" } else { "allocated" }
    );
    let _ = writeln!(
        out,
        " rank   self  accum   live bytes  live objs  alloc bytes  alloc objs  class / allocated at"
    );
    let mut accum = 0u64;
    for (i, ((class, site), v)) in rows.iter().take(top).enumerate() {
        accum += v[rank_by];
        let _ = writeln!(
            out,
            "{:>5} {:>6} {:>6} {:>12} {:>10} {:>12} {:>11}  {class}",
            i + 1,
            percent(v[rank_by], total),
            percent(accum, total),
            v[0],
            v[1],
            v[2],
            v[3]
        );
        for f in site {
            let _ = writeln!(out, "{:>70}at {f}", "");
        }
    }
    if rows.len() > top {
        let _ = writeln!(out, "  ... {} more sites", rows.len() - top);
    }
    out.push('\n');
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::*;
    use crate::testdata::{alloc_profile, sample_profile};

    #[test]
    fn exact_report() {
        let options = ReportOptions {
            top: 3,
            ..ReportOptions::default()
        };
        let text = text(&sample_profile(), &options);
        let expected = "\
jvmprof report
modes:           cpu
interval:        10 ms
engine:          asgct
JVM:             OpenJDK 64-Bit Server VM 21.0.5+11
pid:             4242
command:         java -cp app.jar com.example.App
duration:        2.000 s
totals:          samples 11, ns 110.000 ms
stacks:          4 distinct, 7 frames, 2 threads
thread states:   running 11 (samples)
walk failures:   7 (gc_active 2, not_walkable_java 5)
dropped samples: 3

All threads: 11 samples

Top methods by self samples:
  self  percent  method
     5   45.45%  java.util.HashMap.put
     4   36.36%  write
     2   18.18%  com.example.App.work

Top methods by total samples (callees included, once per stack):
  total  percent  method
      7   63.64%  com.example.App.main
      7   63.64%  com.example.App.work
      5   45.45%  java.util.HashMap.put
  ... 3 more
";
        assert_eq!(text, expected);
    }

    #[test]
    fn per_thread_tables_and_ns_values() {
        let options = ReportOptions {
            metric: Some(Metric::Ns),
            top: 2,
            per_thread: true,
        };
        let text = text(&sample_profile(), &options);
        let tail = &text[text.find("All threads").unwrap()..];
        let expected = "\
All threads: 110.000 ms ns

Top methods by self ns:
       self  percent  method
  50.000 ms   45.45%  java.util.HashMap.put
  40.000 ms   36.36%  write
  ... 1 more

Top methods by total ns (callees included, once per stack):
      total  percent  method
  70.000 ms   63.64%  com.example.App.main
  70.000 ms   63.64%  com.example.App.work
  ... 4 more

Thread main (tid 101): 60.000 ms ns (54.55% of all)

Top methods by self ns:
       self  percent  method
  50.000 ms   83.33%  java.util.HashMap.put
  10.000 ms   16.67%  com.example.App.work

Top methods by total ns (callees included, once per stack):
      total  percent  method
  60.000 ms  100.00%  com.example.App.main
  60.000 ms  100.00%  com.example.App.work
  ... 1 more

Thread worker-1 (tid 102): 50.000 ms ns (45.45% of all)

Top methods by self ns:
       self  percent  method
  40.000 ms   80.00%  write
  10.000 ms   20.00%  com.example.App.work

Top methods by total ns (callees included, once per stack):
      total  percent  method
  40.000 ms   80.00%  Outer$Inner.run
  40.000 ms   80.00%  java.lang.Thread.run
  ... 3 more
";
        assert_eq!(tail, expected);
    }

    #[test]
    fn recursion_counts_once_per_stack() {
        let mut b = ProfileBuilder::new(Meta {
            modes: vec!["cpu".into()],
            metrics: vec![Metric::Samples],
            ..Meta::default()
        });
        let main_ = b.frame(Frame::java("A", "main", "", 1));
        let fib1 = b.frame(Frame::java("A", "fib", "", 5));
        let fib2 = b.frame(Frame::java("A", "fib", "", 6));
        let t = b.thread(Thread::default());
        let deep = b.stack(&[main_, fib1, fib2, fib1, fib2]);
        let shallow = b.stack(&[main_, fib1]);
        let other = b.stack(&[main_]);
        b.add(t, deep, ThreadState::Running, &[6]);
        b.add(t, shallow, ThreadState::Running, &[3]);
        b.add(t, other, ThreadState::Running, &[1]);
        let text = text(&b.finish(), &ReportOptions::default());
        let tail = &text[text.find("Top methods by self").unwrap()..];
        assert_eq!(
            tail,
            "\
Top methods by self samples:
  self  percent  method
     9   90.00%  A.fib
     1   10.00%  A.main

Top methods by total samples (callees included, once per stack):
  total  percent  method
     10  100.00%  A.main
      9   90.00%  A.fib
"
        );
    }

    #[test]
    fn missing_metric_and_empty_profile() {
        let options = ReportOptions {
            metric: Some(Metric::Bytes),
            ..ReportOptions::default()
        };
        let text = text(&sample_profile(), &options);
        assert!(text.ends_with("(the profile has no `bytes` metric; it has: samples, ns)\n"));
        let text = super::text(&Profile::default(), &ReportOptions::default());
        assert!(text.ends_with("(the profile has no metric)\n"), "{text}");
        // Nothing was sampled: no sampling words.
        assert!(!text.contains("walk failures"), "{text}");
        assert!(!text.contains("dropped samples"), "{text}");
    }

    /// Exact, root and alloc profiles say no interval, thread states, failed walks or dropped
    /// samples; dropped events, if any, in their own words.
    #[test]
    fn counted_profiles_speak_no_sampling_words() {
        let mut p = alloc_profile();
        p.meta.interval_ns = 10_000_000;
        p.meta.walk_failures.insert("gc_active".into(), 2);
        p.meta.dropped_samples = 0;
        let text = super::text(&p, &ReportOptions::default());
        for word in ["interval", "thread states", "walk failures", "dropped"] {
            assert!(!text.contains(word), "{word} in:\n{text}");
        }
        p.meta.dropped_samples = 4;
        let text = super::text(&p, &ReportOptions::default());
        assert!(text.contains("\ndropped events:  4\n"), "{text}");
        let sampled = super::text(&sample_profile(), &ReportOptions::default());
        assert!(sampled.contains("\ninterval:        10 ms\n"), "{sampled}");
    }
}
