use super::*;
use crate::trace::join::join;
use crate::trace::layout::{PLACEMENT_NOTE, Visit};
use crate::trace::log::{Protocol, Side};
use crate::trace::testkit::*;

/// Scans JSON without recursion: the deepest nesting of objects and arrays.
fn json_depth(s: &[u8]) -> usize {
    let (mut depth, mut max, mut in_str, mut esc) = (0usize, 0usize, false, false);
    for &b in s {
        if in_str {
            match (esc, b) {
                (true, _) => esc = false,
                (false, b'\\') => esc = true,
                (false, b'"') => in_str = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_str = true,
            b'{' | b'[' => {
                depth += 1;
                max = max.max(depth);
            }
            b'}' | b']' => depth -= 1,
            _ => {}
        }
    }
    assert_eq!(depth, 0);
    max
}

#[test]
fn a_recursion_ten_thousand_deep_on_both_sides_is_joined_and_written_on_a_small_stack() {
    const DEPTH: i64 = 10_000;
    let mut c = Vm::new("c", 0);
    let mut s = Vm::new("s", HOUR);
    for d in 0..DEPTH {
        c.enter("main", "C.rec", d);
    }
    c.remote(
        "main",
        Side::Client,
        Protocol::Http,
        "k",
        "GET /deep",
        DEPTH,
    );
    s.remote(
        "w",
        Side::Server,
        Protocol::Http,
        "k",
        "GET /deep",
        DEPTH + 5,
    );
    for d in 0..DEPTH {
        s.enter("w", "S.rec", DEPTH + 10 + d);
    }
    for d in 0..DEPTH {
        s.exit("w", 3 * DEPTH + d);
    }
    s.exit("w", 5 * DEPTH);
    c.exit("main", 6 * DEPTH);
    for d in 0..DEPTH {
        c.exit("main", 6 * DEPTH + 1 + d);
    }
    let recordings = vec![c.recording(), s.recording()];
    // 256 KiB of stack: a recursion over 20,000 levels would overflow it.
    let result = std::thread::Builder::new()
        .stack_size(256 << 10)
        .spawn(move || {
            let j = join(recordings);
            let mut outs = Vec::new();
            for f in [
                OutputFormat::Json,
                OutputFormat::Text,
                OutputFormat::Html,
                OutputFormat::ChromeTrace,
            ] {
                let mut buf = Vec::new();
                j.write(f, &mut buf).unwrap();
                outs.push(buf);
            }
            let mut max_depth = 0;
            let mut count = 0;
            j.walk(|v| {
                if let Visit::Open(n) = v {
                    max_depth = max_depth.max(n.depth);
                    count += 1;
                }
                Ok::<(), ()>(())
            })
            .unwrap();
            drop(j);
            (outs, max_depth, count)
        })
        .unwrap()
        .join()
        .unwrap();
    let (outs, max_depth, count) = result;
    // C.rec ×10,000, the client span, and S.rec ×10,000 (the outermost standing for the
    // server span, its only child).
    assert_eq!(count, 2 * DEPTH as usize + 1);
    assert_eq!(max_depth, 2 * DEPTH as usize);
    let json = &outs[0];
    // Each node is an object holding a children array.
    assert!(json_depth(json) >= 2 * (2 * DEPTH as usize + 1));
    let text = String::from_utf8_lossy(json);
    // (and once in the statistics)
    assert_eq!(
        text.matches("\"method\":\"S.rec\"").count(),
        DEPTH as usize + 1
    );
    assert_eq!(text.matches("\"kind\":\"server\"").count(), 1);
    let txt = String::from_utf8_lossy(&outs[1]);
    assert!(txt.contains("[depth 20000] S.rec  [s/w]"), "deepest line");
    assert!(txt.lines().all(|l| l.len() < 200));
    let html = String::from_utf8_lossy(&outs[2]);
    assert!(html.contains("\"parent\":[-1,0,1,2,"));
    let chrome: serde_json::Value = serde_json::from_slice(&outs[3]).unwrap();
    let xs = chrome["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["ph"] == "X")
        .count();
    assert_eq!(xs, count);
}

#[test]
fn outputs_carry_the_tree_stats_and_notes() {
    let chain = Chain::run(Protocol::Rmi, 4);
    let mut vms = chain.vms;
    vms[3].trace.methods[0] = "S3</script><script>alert(1)".into();
    let j = join(vms.into_iter().map(Vm::recording));
    let mut html = Vec::new();
    j.write(OutputFormat::Html, &mut html).unwrap();
    let html = String::from_utf8(html).unwrap();
    assert_eq!(html.matches("</script>").count(), 2, "only the page's own");
    assert!(html.contains(r"S3\u003c/script>\u003cscript>alert(1)"));
    assert!(html.contains(PLACEMENT_NOTE));
    assert!(!html.contains("http://") && !html.contains("https://"));
    let start = html.find("type=\"application/json\">").unwrap() + 24;
    let end = start + html[start..].find("</script>").unwrap();
    let data: serde_json::Value = serde_json::from_str(&html[start..end]).unwrap();
    assert_eq!(data["vms"], serde_json::json!(["client", "s1", "s2", "s3"]));
    let n = data["parent"].as_array().unwrap().len();
    assert_eq!(n, 4 * 4 + 3 * 4);
    for col in ["name", "thread", "start", "dur", "placed", "flags"] {
        assert_eq!(data[col].as_array().unwrap().len(), n, "{col}");
    }
    assert_eq!(data["stats"].as_array().unwrap().len(), 4);
    let mut text = Vec::new();
    j.write(OutputFormat::Text, &mut text).unwrap();
    let text = String::from_utf8(text).unwrap();
    assert!(
        text.contains("\nClient.work_0  [client/client-0]  "),
        "{text}"
    );
    assert!(text.contains("  I1.serve  [client/client-0]  ") && text.contains("ms  (client)\n"));
    assert!(
        text.contains("\n    S1Impl.serve_0  [s1/s1-worker-") && text.contains("ms  (server)\n")
    );
    assert!(text.contains("## s2: per-method inclusive times"));
    let mut chrome = Vec::new();
    j.write(OutputFormat::ChromeTrace, &mut chrome).unwrap();
    let v: serde_json::Value = serde_json::from_slice(&chrome).unwrap();
    let events = v["traceEvents"].as_array().unwrap();
    let procs: Vec<&str> = events
        .iter()
        .filter(|e| e["name"] == "process_name")
        .map(|e| e["args"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(procs, ["client", "s1", "s2", "s3"]);
    let starts = events.iter().filter(|e| e["ph"] == "s").count();
    let finishes = events
        .iter()
        .filter(|e| e["ph"] == "f" && e["bp"] == "e")
        .count();
    assert_eq!((starts, finishes), (12, 12));
    assert!(
        events
            .iter()
            .filter(|e| e["ph"] == "X")
            .all(|e| e["ts"].as_f64().unwrap() >= 0.0)
    );
    assert_eq!(v["otherData"]["notes"][0], PLACEMENT_NOTE);
    assert_eq!(
        OutputFormat::from_path(Path::new("x.trace.json")),
        Ok(OutputFormat::ChromeTrace)
    );
    assert_eq!(
        OutputFormat::from_path(Path::new("x.JSON")),
        Ok(OutputFormat::Json)
    );
    assert!(
        OutputFormat::from_path(Path::new("x.svg"))
            .unwrap_err()
            .contains(OutputFormat::SUPPORTED)
    );
}
