//! Graphviz call graph (`.dot`), like `pprof -dot`: one box per method (rendered name) with its
//! self and total values, one arrow per caller → callee pair with the value of the stacks that
//! make that call. Totals and edges count a method or call once per stack, so recursion does not
//! inflate them. Small nodes and edges are left out (see [`DotOptions`]). Render with
//! `dot -Tsvg graph.dot -o graph.svg`.

use crate::error::Result;
use crate::export::format_value;
use crate::export::resolve_metric;
use crate::model::{Metric, Profile};
use std::collections::HashMap;
use std::io::Write;

/// What the call graph shows.
#[derive(Clone, Debug, PartialEq)]
pub struct DotOptions {
    /// The metric; `None` means [`default_metric`](crate::default_metric).
    pub metric: Option<Metric>,
    /// Leave out methods whose total is below this fraction of the whole (pprof's default 0.005).
    pub node_fraction: f64,
    /// Leave out calls whose value is below this fraction of the whole (pprof's 0.001).
    pub edge_fraction: f64,
    /// Keep at most this many methods, the largest by total.
    pub max_nodes: usize,
    /// Keep at most this many calls, the largest (Graphviz slows down on dense graphs).
    pub max_edges: usize,
}

impl Default for DotOptions {
    fn default() -> DotOptions {
        DotOptions {
            metric: None,
            node_fraction: 0.005,
            edge_fraction: 0.001,
            max_nodes: 80,
            max_edges: 250,
        }
    }
}

fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

fn share(v: u64, total: u64) -> f64 {
    if total == 0 {
        0.0
    } else {
        v as f64 / total as f64
    }
}

/// Writes the call graph of `profile` in the DOT language.
pub fn write(profile: &Profile, options: &DotOptions, mut out: impl Write) -> Result<()> {
    let metric_index = resolve_metric(profile, options.metric)?;
    let metric = profile.meta.metrics[metric_index];
    // Method names.
    let mut names: Vec<String> = Vec::new();
    let mut ids: HashMap<String, u32> = HashMap::new();
    let frame_names: Vec<u32> = profile
        .frames
        .iter()
        .map(|f| {
            *ids.entry(f.name()).or_insert_with_key(|n| {
                names.push(n.clone());
                (names.len() - 1) as u32
            })
        })
        .collect();
    let mut self_v = vec![0u64; names.len()];
    let mut total_v = vec![0u64; names.len()];
    let mut edges: HashMap<(u32, u32), u64> = HashMap::new();
    let mut grand = 0u64;
    let mut seen_nodes: Vec<u32> = Vec::new();
    let mut seen_edges: Vec<(u32, u32)> = Vec::new();
    for s in &profile.samples {
        let v = s.values[metric_index];
        let stack = profile.stacks.frames(s.stack);
        if v == 0 || stack.is_empty() {
            continue;
        }
        grand = grand.saturating_add(v);
        let stack: Vec<u32> = stack.iter().map(|f| frame_names[*f as usize]).collect();
        let leaf = stack[stack.len() - 1] as usize;
        self_v[leaf] = self_v[leaf].saturating_add(v);
        seen_nodes.clear();
        seen_nodes.extend(&stack);
        seen_nodes.sort_unstable();
        seen_nodes.dedup();
        for n in &seen_nodes {
            total_v[*n as usize] = total_v[*n as usize].saturating_add(v);
        }
        seen_edges.clear();
        seen_edges.extend(stack.windows(2).map(|w| (w[0], w[1])));
        seen_edges.sort_unstable();
        seen_edges.dedup();
        for e in &seen_edges {
            let acc = edges.entry(*e).or_insert(0);
            *acc = acc.saturating_add(v);
        }
    }

    // The kept methods, largest total first, then by name.
    let mut kept: Vec<u32> = (0..names.len() as u32)
        .filter(|n| total_v[*n as usize] > 0)
        .filter(|n| share(total_v[*n as usize], grand) >= options.node_fraction)
        .collect();
    kept.sort_by(|a, b| {
        total_v[*b as usize]
            .cmp(&total_v[*a as usize])
            .then_with(|| names[*a as usize].cmp(&names[*b as usize]))
    });
    kept.truncate(options.max_nodes);
    let mut node_ids: HashMap<u32, usize> = HashMap::new();
    for (i, n) in kept.iter().enumerate() {
        node_ids.insert(*n, i);
    }
    let mut kept_edges: Vec<((u32, u32), u64)> = edges
        .into_iter()
        .filter(|((a, b), v)| {
            node_ids.contains_key(a)
                && node_ids.contains_key(b)
                && share(*v, grand) >= options.edge_fraction
        })
        .collect();
    kept_edges.sort_by(|(ea, va), (eb, vb)| {
        vb.cmp(va)
            .then_with(|| node_ids[&ea.0].cmp(&node_ids[&eb.0]))
            .then_with(|| node_ids[&ea.1].cmp(&node_ids[&eb.1]))
    });
    kept_edges.truncate(options.max_edges);

    let m = metric.as_str();
    let mut text = String::new();
    text.push_str("digraph jvmprof {\n");
    text.push_str(&format!(
        "  graph [label=\"jvmprof call graph: {} {m} in all, {} of {} methods shown\", \
         labelloc=t, fontname=\"Helvetica\"];\n",
        escape(&format_value(metric, grand)),
        kept.len(),
        names.len()
    ));
    text.push_str("  node [shape=box, style=filled, fontname=\"Helvetica\"];\n");
    text.push_str("  edge [fontname=\"Helvetica\"];\n");
    for (i, n) in kept.iter().enumerate() {
        let (s, t) = (self_v[*n as usize], total_v[*n as usize]);
        let (ss, ts) = (share(s, grand), share(t, grand));
        // Font grows with the self share; colour from pale to red with the total share.
        let fontsize = 10.0 + 14.0 * ss.sqrt();
        let g = (235.0 - 175.0 * ts).round() as u8;
        text.push_str(&format!(
            "  n{i} [label=\"{}\\nself {} ({:.2}%)\\ntotal {} ({:.2}%)\", fontsize={fontsize:.1}, \
             fillcolor=\"#f5{g:02x}{g:02x}\"];\n",
            escape(&names[*n as usize]),
            escape(&format_value(metric, s)),
            100.0 * ss,
            escape(&format_value(metric, t)),
            100.0 * ts,
        ));
    }
    for ((a, b), v) in &kept_edges {
        let es = share(*v, grand);
        text.push_str(&format!(
            "  n{} -> n{} [label=\"{}\", penwidth={:.2}];\n",
            node_ids[a],
            node_ids[b],
            escape(&format_value(metric, *v)),
            1.0 + 4.0 * es
        ));
    }
    text.push_str("}\n");
    out.write_all(text.as_bytes())?;
    out.flush()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::*;
    use crate::testdata::sample_profile;

    fn dot(p: &Profile, options: &DotOptions) -> String {
        let mut buf = Vec::new();
        write(p, options, &mut buf).unwrap();
        String::from_utf8(buf).unwrap()
    }

    #[test]
    fn exact_graph() {
        let text = dot(&sample_profile(), &DotOptions::default());
        let expected = r##"digraph jvmprof {
  graph [label="jvmprof call graph: 11 samples in all, 6 of 6 methods shown", labelloc=t, fontname="Helvetica"];
  node [shape=box, style=filled, fontname="Helvetica"];
  edge [fontname="Helvetica"];
  n0 [label="com.example.App.main\nself 0 (0.00%)\ntotal 7 (63.64%)", fontsize=10.0, fillcolor="#f57c7c"];
  n1 [label="com.example.App.work\nself 2 (18.18%)\ntotal 7 (63.64%)", fontsize=16.0, fillcolor="#f57c7c"];
  n2 [label="java.util.HashMap.put\nself 5 (45.45%)\ntotal 5 (45.45%)", fontsize=19.4, fillcolor="#f59b9b"];
  n3 [label="Outer$Inner.run\nself 0 (0.00%)\ntotal 4 (36.36%)", fontsize=10.0, fillcolor="#f5abab"];
  n4 [label="java.lang.Thread.run\nself 0 (0.00%)\ntotal 4 (36.36%)", fontsize=10.0, fillcolor="#f5abab"];
  n5 [label="write\nself 4 (36.36%)\ntotal 4 (36.36%)", fontsize=18.4, fillcolor="#f5abab"];
  n0 -> n1 [label="7", penwidth=3.55];
  n1 -> n2 [label="5", penwidth=2.82];
  n3 -> n5 [label="4", penwidth=2.45];
  n4 -> n3 [label="4", penwidth=2.45];
}
"##;
        assert_eq!(text, expected);
    }

    #[test]
    fn prunes_small_nodes_and_counts_recursion_once() {
        let mut b = ProfileBuilder::new(Meta {
            metrics: vec![Metric::Samples],
            ..Meta::default()
        });
        let a = b.frame(Frame::java("A", "a", "", 0));
        let r = b.frame(Frame::java("A", "rec", "", 0));
        let tiny = b.frame(Frame::java("A", "tiny", "", 0));
        let t = b.thread(Thread::default());
        let deep = b.stack(&[a, r, r, r]);
        let small = b.stack(&[a, tiny]);
        b.add(t, deep, ThreadState::Running, &[999]);
        b.add(t, small, ThreadState::Running, &[1]);
        let text = dot(&b.finish(), &DotOptions::default());
        assert!(text.contains("2 of 3 methods shown"), "{text}");
        assert!(!text.contains("A.tiny"));
        assert!(text.contains(r#"n1 [label="A.rec\nself 999 (99.90%)\ntotal 999 (99.90%)""#));
        // The self call counts once per stack.
        assert!(text.contains(r#"n1 -> n1 [label="999""#), "{text}");
        assert!(text.contains(r#"n0 -> n1 [label="999""#), "{text}");
        assert_eq!(text.matches("->").count(), 2);
    }

    #[test]
    fn keeps_the_largest_edges() {
        let options = DotOptions {
            max_edges: 2,
            ..DotOptions::default()
        };
        let text = dot(&sample_profile(), &options);
        let edges: Vec<&str> = text.lines().filter(|l| l.contains("->")).collect();
        assert_eq!(
            edges,
            [
                r#"  n0 -> n1 [label="7", penwidth=3.55];"#,
                r#"  n1 -> n2 [label="5", penwidth=2.82];"#
            ]
        );
    }

    #[test]
    fn names_are_escaped() {
        let mut b = ProfileBuilder::new(Meta {
            metrics: vec![Metric::Samples],
            ..Meta::default()
        });
        let f = b.frame(Frame::synthetic(FrameKind::Synthetic, "[a \"b\" \\ c\nd]"));
        let t = b.thread(Thread::default());
        let s = b.stack(&[f]);
        b.add(t, s, ThreadState::Running, &[1]);
        let text = dot(&b.finish(), &DotOptions::default());
        assert!(
            text.contains(r#"label="[a \"b\" \\ c d]\nself 1"#),
            "{text}"
        );
    }
}
