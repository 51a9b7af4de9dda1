//! Interactive flame graph (`.html`): one self-contained page, with the JavaScript and CSS of
//! `template.html` inline and the data embedded as JSON; it loads nothing from the network.
//!
//! The root is at the top (an icicle layout), so deep stacks grow down the page. Frames are
//! drawn on a canvas, coloured by kind: Java green, native orange-red, synthetic grey,
//! allocated type blue, lock class purple, JVM-internal threads (JIT, GC, VM) yellow.
//! AsyncGetCallTrace does not say whether a Java frame ran interpreted, C1, C2 or inlined, so
//! those are not told apart. Hover shows name, value, percentage and self value, a click zooms
//! into a frame, Esc or "Reset zoom" resets, and the search box (substring, or a regular
//! expression) highlights matching frames and shows the matched share of the total. `Reverse`
//! (key r) turns the tree over in the page: the frames that used the value at the top, their
//! callers below (built from the same data, so the file does not grow). Labels show as much of
//! a name as fits, from its start: the whole name, `Class.method`, the method, or the method's
//! start with an ellipsis. The data is the merged call tree (children sorted by name), not the
//! raw stacks, so 100k stacks stay a few MB and draw quickly.

use crate::error::Result;
use crate::export::{ExportOptions, resolve_metric};
use crate::model::Metric;
use crate::model::{FrameKind, Profile};
use crate::stacks::named_stacks;
#[cfg(feature = "analysis")]
use crate::stacks::paired_stacks;
use serde::Serialize;
use std::collections::HashMap;
use std::io::Write;

const TEMPLATE: &str = include_str!("template.html");
const PLACEHOLDER: &str = "/*DATA*/";

/// The JSON the page reads: names and kinds of frames, and the call tree in depth-first
/// pre-order as three parallel arrays (name index, inclusive value, depth). Node 0 is the root.
#[derive(Serialize, Debug, PartialEq)]
pub(crate) struct Data {
    pub title: String,
    pub info: String,
    pub metric: &'static str,
    pub unit: &'static str,
    pub names: Vec<String>,
    pub kinds: Vec<u8>,
    pub name: Vec<u32>,
    pub value: Vec<u64>,
    pub depth: Vec<u32>,
    /// Differential graphs only: each node's value in the base profile.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub base: Option<Vec<u64>>,
    /// Root sessions: per-method statistics, shown under the graph.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stats: Option<Vec<crate::methods::MethodStat>>,
}

/// The frames of JVM-internal threads (see the agent's sink), drawn as their own kind (5).
const JVM_THREAD_FRAMES: [&str; 4] = ["[JIT compiler]", "[GC]", "[VM thread]", "[JVM internal]"];

fn kind_code(kind: FrameKind) -> u8 {
    match kind {
        FrameKind::Java => 0,
        FrameKind::Native => 1,
        FrameKind::Synthetic => 2,
        FrameKind::AllocatedType => 3,
        FrameKind::LockClass => 4,
    }
}

#[derive(Default)]
struct Node {
    name: u32,
    value: u64,
    base: u64,
    children: HashMap<u32, usize, foldhash::fast::RandomState>,
}

/// Builds the page data of `profile` for one metric.
pub(crate) fn data(profile: &Profile, options: &ExportOptions) -> Result<Data> {
    let metric_index = resolve_metric(profile, options.metric)?;
    let metric = profile.meta.metrics[metric_index];
    // Sorted, so that stacks sharing a prefix merge one after another: on javac's 4M-stack
    // exact profile that is twice as fast as merging them in hash order.
    let stacks = named_stacks(profile, metric_index, options.threads).sorted();
    let entries = stacks.stacks.iter().map(|(s, v)| (s.as_slice(), *v, 0));
    Ok(tree(
        stacks.names,
        &stacks.kinds,
        entries,
        false,
        metric,
        profile,
    ))
}

/// Builds the page data of a differential flame graph: widths from `new`, colours from the
/// change of each frame's share between `base` and `new`.
#[cfg(feature = "analysis")]
pub(crate) fn diff_data(base: &Profile, new: &Profile, options: &ExportOptions) -> Result<Data> {
    let (metric, bi, ni) = crate::diff::metric_indices(base, new, options.metric)?;
    let paired = paired_stacks(base, bi, new, ni, options.threads);
    let entries = paired.stacks.iter().map(|(s, b, n)| (s.as_slice(), *n, *b));
    let mut data = tree(paired.names, &paired.kinds, entries, true, metric, new);
    data.title = format!("jvmprof differential flame graph ({})", metric.as_str());
    Ok(data)
}

/// Merges stacks (names root first, value, base value) into the call tree and flattens it.
fn tree<'a>(
    mut names: Vec<String>,
    kinds: &[FrameKind],
    entries: impl Iterator<Item = (&'a [u32], u64, u64)>,
    with_base: bool,
    metric: Metric,
    profile: &Profile,
) -> Data {
    let mut kinds: Vec<u8> = kinds
        .iter()
        .zip(&names)
        .map(|(k, name)| {
            // The frames the agent gives JVM-internal threads: yellow, as async-profiler
            // colours C++ frames.
            if *k == FrameKind::Synthetic && JVM_THREAD_FRAMES.contains(&name.as_str()) {
                5
            } else {
                kind_code(*k)
            }
        })
        .collect();
    let root_name = names.len() as u32;
    names.push("all".to_string());
    kinds.push(kind_code(FrameKind::Synthetic));

    let mut nodes = vec![Node {
        name: root_name,
        ..Node::default()
    }];
    for (stack, v, base) in entries {
        let mut at = 0;
        for name in std::iter::once(&root_name).chain(stack) {
            if *name != root_name || at != 0 {
                at = match nodes[at].children.get(name) {
                    Some(child) => *child,
                    None => {
                        nodes.push(Node {
                            name: *name,
                            ..Node::default()
                        });
                        let child = nodes.len() - 1;
                        nodes[at].children.insert(*name, child);
                        child
                    }
                };
            }
            nodes[at].value = nodes[at].value.saturating_add(v);
            nodes[at].base = nodes[at].base.saturating_add(base);
        }
    }

    // Flatten in pre-order, children sorted by name (iteratively: stacks can be deep).
    let mut out = Data {
        title: title(profile),
        info: info(profile),
        metric: metric.as_str(),
        unit: metric.unit(),
        names: Vec::new(),
        kinds,
        name: Vec::with_capacity(nodes.len()),
        value: Vec::with_capacity(nodes.len()),
        depth: Vec::with_capacity(nodes.len()),
        base: with_base.then(|| Vec::with_capacity(nodes.len())),
        stats: crate::methods::stats(profile),
    };
    let mut todo = vec![(0usize, 0u32)];
    while let Some((i, depth)) = todo.pop() {
        let node = &nodes[i];
        out.name.push(node.name);
        out.value.push(node.value);
        out.depth.push(depth);
        if let Some(base) = &mut out.base {
            base.push(node.base);
        }
        let mut children: Vec<usize> = node.children.values().copied().collect();
        // Reverse order onto the stack so the smallest name comes out first.
        children
            .sort_by(|a, b| names[nodes[*b].name as usize].cmp(&names[nodes[*a].name as usize]));
        todo.extend(children.into_iter().map(|c| (c, depth + 1)));
    }
    out.names = names;
    out
}

fn title(profile: &Profile) -> String {
    if profile.meta.modes.is_empty() {
        "jvmprof flame graph".to_string()
    } else {
        format!("jvmprof {} flame graph", profile.meta.modes.join(","))
    }
}

/// One line of context: metric, JVM, pid, duration.
fn info(profile: &Profile) -> String {
    let m = &profile.meta;
    let mut parts = Vec::new();
    if !m.jvm_name.is_empty() || !m.jvm_version.is_empty() {
        parts.push(
            format!("{} {}", m.jvm_name, m.jvm_version)
                .trim()
                .to_string(),
        );
    }
    if m.pid != 0 {
        parts.push(format!("pid {}", m.pid));
    }
    if m.duration_ms != 0 {
        parts.push(format!("{:.1} s", m.duration_ms as f64 / 1000.0));
    }
    // An interval only where stacks were sampled on a clock (not exact, root, alloc, lock).
    if m.interval_ns != 0 && m.metrics.contains(&Metric::Samples) {
        parts.push(format!("interval {} ms", m.interval_ns as f64 / 1e6));
    }
    parts.join(", ")
}

/// Writes the flame graph page of `profile` (`options.metric` or the default metric; with
/// `options.threads` a `[thread name]` frame under the root).
pub fn write(profile: &Profile, options: &ExportOptions, out: impl Write) -> Result<()> {
    page(&data(profile, options)?, out)
}

/// Writes a differential flame graph: frames as wide as in `new`, red where their share of the
/// total grew since `base`, blue where it shrank; hover shows both values. Stacks only in `base`
/// have no width and are not drawn (the text diff lists them).
#[cfg(feature = "analysis")]
pub fn write_diff(
    base: &Profile,
    new: &Profile,
    options: &ExportOptions,
    out: impl Write,
) -> Result<()> {
    page(&diff_data(base, new, options)?, out)
}

fn page(data: &Data, mut out: impl Write) -> Result<()> {
    let json = serde_json::to_string(data).map_err(std::io::Error::from)?;
    // Inside <script>, "</script" or "<!--" would end or confuse the element: `<` only occurs
    // in JSON strings, where \u003c means the same.
    let json = json.replace('<', "\\u003c");
    let (head, tail) = TEMPLATE
        .split_once(PLACEHOLDER)
        .expect("the template has a data placeholder");
    out.write_all(head.as_bytes())?;
    out.write_all(json.as_bytes())?;
    out.write_all(tail.as_bytes())?;
    out.flush()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::*;
    use crate::testdata::{alloc_profile, changed_profile, sample_profile};

    fn html(p: &Profile, options: &ExportOptions) -> String {
        let mut buf = Vec::new();
        write(p, options, &mut buf).unwrap();
        String::from_utf8(buf).unwrap()
    }

    #[test]
    fn tree_is_exact() {
        let d = data(&sample_profile(), &ExportOptions::default()).unwrap();
        assert_eq!(d.metric, "samples");
        assert_eq!(d.unit, "count");
        assert_eq!(d.title, "jvmprof cpu flame graph");
        assert_eq!(
            d.info,
            "OpenJDK 64-Bit Server VM 21.0.5+11, pid 4242, 2.0 s, interval 10 ms"
        );
        let rendered: Vec<(String, u64, u32)> = (0..d.name.len())
            .map(|i| (d.names[d.name[i] as usize].clone(), d.value[i], d.depth[i]))
            .collect();
        assert_eq!(
            rendered,
            [
                ("all".to_string(), 11, 0),
                ("com.example.App.main".to_string(), 7, 1),
                ("com.example.App.work".to_string(), 7, 2),
                ("java.util.HashMap.put".to_string(), 5, 3),
                ("java.lang.Thread.run".to_string(), 4, 1),
                ("Outer$Inner.run".to_string(), 4, 2),
                ("write".to_string(), 4, 3),
            ]
        );
        let kind_of = |name: &str| d.kinds[d.names.iter().position(|n| n == name).unwrap()];
        assert_eq!(kind_of("write"), 1);
        assert_eq!(kind_of("all"), 2);
        assert_eq!(kind_of("java.util.HashMap.put"), 0);
    }

    #[test]
    fn threads_and_kinds_of_leaf_types() {
        let options = ExportOptions {
            metric: None,
            threads: true,
        };
        let d = data(&alloc_profile(), &options).unwrap();
        let rendered: Vec<(&str, u64, u32, u8)> = (0..d.name.len())
            .map(|i| {
                let n = d.name[i] as usize;
                (d.names[n].as_str(), d.value[i], d.depth[i], d.kinds[n])
            })
            .collect();
        assert_eq!(
            rendered,
            [
                ("all", 1_053_376, 0, 2),
                ("[main]", 1_053_376, 1, 2),
                ("com.example.App.main", 1_053_376, 2, 0),
                ("byte[]", 1_048_576, 3, 3),
                ("java.lang.String", 4_800, 3, 3),
            ]
        );
    }

    #[test]
    fn page_embeds_the_data_and_loads_nothing() {
        let page = html(&sample_profile(), &ExportOptions::default());
        assert!(page.starts_with("<!DOCTYPE html>"));
        assert!(!page.contains(PLACEHOLDER));
        let start = page
            .find(r#"<script type="application/json" id="profile-data">"#)
            .unwrap();
        let json_start = page[start..].find('>').unwrap() + start + 1;
        let json_end = page[json_start..].find("</script>").unwrap() + json_start;
        let v: serde_json::Value = serde_json::from_str(&page[json_start..json_end]).unwrap();
        assert_eq!(v["value"], serde_json::json!([11, 7, 7, 5, 4, 4, 4]));
        assert_eq!(v["depth"], serde_json::json!([0, 1, 2, 3, 1, 2, 3]));
        // Nothing is fetched: no URL at all, no external script, style, font or image.
        assert!(!page.contains("http"), "the page mentions a URL");
        assert!(!page.contains("src="));
        assert!(!page.contains("@import"));
        assert!(!page.contains("url("));
    }

    #[test]
    fn names_cannot_break_out_of_the_script() {
        let mut b = ProfileBuilder::new(Meta {
            metrics: vec![Metric::Samples],
            ..Meta::default()
        });
        let f = b.frame(Frame::synthetic(
            FrameKind::Synthetic,
            "</script><script>alert(1)",
        ));
        let t = b.thread(Thread::default());
        let s = b.stack(&[f]);
        b.add(t, s, ThreadState::Running, &[1]);
        let page = html(&b.finish(), &ExportOptions::default());
        assert_eq!(
            page.matches("</script>").count(),
            2,
            "only the template's own"
        );
        assert!(page.contains(r"\u003c/script>\u003cscript>alert(1)"));
    }

    #[test]
    fn empty_profile_still_makes_a_page() {
        let p = Profile {
            meta: Meta {
                metrics: vec![Metric::Samples],
                ..Meta::default()
            },
            ..Profile::default()
        };
        let d = data(&p, &ExportOptions::default()).unwrap();
        assert_eq!(d.value, [0]);
        assert!(html(&p, &ExportOptions::default()).contains("\"value\":[0]"));
    }

    /// Runs `harness.js` on a page; `None` when node is not installed, which fails under CI
    /// (`CI` set: .ci/run installs nodejs).
    fn run_harness(page_html: &str) -> Option<Vec<serde_json::Value>> {
        if std::process::Command::new("node")
            .arg("--version")
            .output()
            .is_err()
        {
            assert!(
                std::env::var_os("CI").is_none(),
                "node is missing: CI must have it (apt-get install nodejs)"
            );
            eprintln!("node not found: skipping the flame graph script test");
            return None;
        }
        let dir = std::env::temp_dir().join(format!(
            "jvmprof-flamegraph-{}-{}",
            std::process::id(),
            page_html.len()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let page = dir.join("page.html");
        std::fs::write(&page, page_html).unwrap();
        let harness = concat!(env!("CARGO_MANIFEST_DIR"), "/src/flamegraph/harness.js");
        let output = std::process::Command::new("node")
            .arg(harness)
            .arg(&page)
            .output()
            .unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "node failed: {stderr}");
        Some(
            String::from_utf8(output.stdout)
                .unwrap()
                .lines()
                .map(|l| serde_json::from_str(l).unwrap())
                .collect(),
        )
    }

    #[test]
    fn diff_tree_is_exact() {
        let d = diff_data(
            &sample_profile(),
            &changed_profile(),
            &ExportOptions::default(),
        )
        .unwrap();
        assert_eq!(d.title, "jvmprof differential flame graph (samples)");
        let rendered: Vec<(&str, u64, u64, u32)> = (0..d.name.len())
            .map(|i| {
                let n = d.name[i] as usize;
                (
                    d.names[n].as_str(),
                    d.value[i],
                    d.base.as_ref().unwrap()[i],
                    d.depth[i],
                )
            })
            .collect();
        assert_eq!(
            rendered,
            [
                ("all", 10, 11, 0),
                ("com.example.App.main", 10, 7, 1),
                ("com.example.App.work", 10, 7, 2),
                ("java.util.Arrays.sort", 9, 0, 3),
                ("java.util.HashMap.put", 1, 5, 3),
                ("java.lang.Thread.run", 0, 4, 1),
                ("Outer$Inner.run", 0, 4, 2),
                ("write", 0, 4, 3),
            ]
        );
        assert!(
            data(&sample_profile(), &ExportOptions::default())
                .unwrap()
                .base
                .is_none()
        );
    }

    #[test]
    fn diff_page_colours_by_change() {
        let mut buf = Vec::new();
        write_diff(
            &sample_profile(),
            &changed_profile(),
            &ExportOptions::default(),
            &mut buf,
        )
        .unwrap();
        let Some(lines) = run_harness(&String::from_utf8(buf).unwrap()) else {
            return;
        };
        assert_eq!(lines[0]["diffLegend"], true);
        // The root did not change its share (white); Arrays.sort grew most (full red).
        assert_eq!(lines[0]["fills"][0], "rgb(245,245,245)");
        assert_eq!(lines[0]["fills"][3], "rgb(220,60,60)");
        assert_eq!(lines[0]["fills"][4], "rgb(172,184,235)");
        assert_eq!(
            lines[1]["tip"],
            "java.util.Arrays.sort\n9 samples (90.00% of all)\nself: 9 samples (90.00%)\n\
             base: 0 samples (0.00%), change +90.00 pp"
        );
    }

    /// Runs the page's script in Node (`harness.js` fakes the DOM and canvas) and checks what it
    /// draws and shows on hover, click, Esc and search. Skipped when `node` is not installed.
    #[test]
    fn page_script_behaves() {
        let page = html(&sample_profile(), &ExportOptions::default());
        let Some(lines) = run_harness(&page) else {
            return;
        };
        let full = serde_json::json!([
            [0, 0, 1100, "plain"],
            [0, 1, 700, "plain"],
            [700, 1, 400, "plain"],
            [0, 2, 700, "plain"],
            [700, 2, 400, "plain"],
            [0, 3, 500, "plain"],
            [700, 3, 400, "plain"]
        ]);
        assert_eq!(lines[0]["what"], "start");
        assert_eq!(lines[0]["title"], "jvmprof cpu flame graph");
        assert_eq!(lines[0]["diffLegend"], false);
        assert_eq!(
            lines[0]["fills"][6], "rgb(227,110,77)",
            "write is native (orange-red)"
        );
        assert_eq!(lines[0]["rects"], full);
        assert_eq!(
            lines[0]["labels"],
            serde_json::json!([
                "all",
                "com.example.App.main",
                "java.lang.Thread.run",
                "com.example.App.work",
                "Outer$Inner.run",
                "java.util.HashMap.put",
                "write"
            ])
        );
        assert_eq!(
            lines[1]["tip"],
            "java.util.HashMap.put\n5 samples (45.45% of all)\nself: 5 samples (45.45%)"
        );
        assert_eq!(lines[1]["shown"], "block");
        // Zoomed into java.lang.Thread.run: the root is faded, the subtree spans the width.
        assert_eq!(
            lines[2]["rects"],
            serde_json::json!([
                [0, 0, 1100, "faded"],
                [0, 1, 1100, "plain"],
                [0, 2, 1100, "plain"],
                [0, 3, 1100, "plain"]
            ])
        );
        assert_eq!(
            lines[3]["tip"],
            "write\n4 samples (36.36% of all, 100.00% of zoomed)\nself: 4 samples (36.36%)"
        );
        assert_eq!(lines[4]["rects"], full, "Esc resets the zoom");
        assert_eq!(lines[5]["matched"], "Matched: 7 samples (63.64%)");
        assert_eq!(
            lines[5]["rects"][3],
            serde_json::json!([0, 2, 700, "match"])
        );
        assert_eq!(lines[6]["matched"], "Matched: 9 samples (81.82%)");
        assert_eq!(lines[7]["matched"], "bad regex");
        // Reversed: the frames with self samples on top (work 2, put 5, write 4, by name),
        // their callers below.
        assert_eq!(lines[8]["what"], "reversed");
        assert_eq!(
            lines[8]["rects"],
            serde_json::json!([
                [0, 0, 1100, "plain"],
                [0, 1, 200, "plain"],
                [200, 1, 500, "plain"],
                [700, 1, 400, "plain"],
                [0, 2, 200, "plain"],
                [200, 2, 500, "plain"],
                [700, 2, 400, "plain"],
                [200, 3, 500, "plain"],
                [700, 3, 400, "plain"]
            ])
        );
        assert_eq!(
            lines[8]["labels"],
            serde_json::json!([
                "all",
                "com.example.App.work",
                "java.util.HashMap.put",
                "write",
                "com.example.App.main",
                "com.example.App.work",
                "Outer$Inner.run",
                "com.example.App.main",
                "java.lang.Thread.run"
            ])
        );
        assert_eq!(lines[8]["button"], "Callees");
        assert!(
            lines[8]["orientation"]
                .as_str()
                .unwrap()
                .starts_with("reversed")
        );
        // main under HashMap.put under put: the 5 samples main spent in put.
        assert_eq!(
            lines[9]["tip"],
            "com.example.App.main\n5 samples (45.45% of all)\nself: 5 samples (45.45%)"
        );
        assert_eq!(lines[10]["rects"], full, "the Reverse button turns it back");
        assert_eq!(lines[10]["button"], "Reverse");
        assert_eq!(lines.len(), 11);
    }

    /// A name too long for its box shows its class and method, then its method, then the
    /// method's start: never the end of a name (`..voke`).
    #[test]
    fn labels_fit_from_the_start_of_the_name() {
        let p = crate::collapsed::read(
            "a.b.VeryLongClassName.invoke 1\nx.Y.z 20\nc.d.Other.invokeStatic 1\nx.Y.w 9\n"
                .as_bytes(),
        )
        .unwrap();
        let page = html(&p, &ExportOptions::default());
        let Some(lines) = run_harness(&page) else {
            return;
        };
        // Widths at 1100 px for 31 samples: 35 px for each 1-sample frame (7 px a character,
        // 6 px of margin: 4 characters), so `invoke` becomes `inv…` and `invokeStatic` `inv…`.
        let labels: Vec<&str> = lines[0]["labels"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| l.as_str().unwrap())
            .collect();
        assert_eq!(labels, ["all", "inv…", "inv…", "x.Y.w", "x.Y.z"]);
    }
}
