//! End-to-end tests of exact mode (`jvmprof record --mode exact`): real JVMs run the fixture
//! programs in `tests/fixtures/` with classes rewritten as they load, and every count is compared
//! with ground truth worked out by hand from the source and `javap -c` (javac 17 output; the
//! listings that matter are quoted next to each test).
//!
//! Default blocks (JP) end only at control transfers and are counted when they start; precise
//! blocks also end after every instruction that may throw. Without exceptions both give the
//! same counts; with exceptions default mode counts the rest of a block that an exception cut
//! short, precise mode does not.

use jvmprof_profile::{ExportOptions, Format, Metric, Profile};
use std::collections::BTreeMap;
use std::path::Path;

mod common;
use common::*;

/// `record --mode exact` of `main` with `extra` options, read back from the native file.
fn exact(java_home: Option<&Path>, extra: &[&str], main: &str) -> Profile {
    let out = scratch("exact").join(format!("{main}-{}.jvmprof", extra.join("_")));
    let mut args = vec!["--mode", "exact", "-o", out.to_str().unwrap()];
    args.extend_from_slice(extra);
    let output = record(java_home, &args, &[main]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !stderr.contains("VerifyError") && !stderr.contains("Exception in thread"),
        "{stderr}"
    );
    jvmprof_profile::read_any(&out).unwrap()
}

/// `main` under the agent directly with exact mode and a node budget of `max_nodes` (an agent
/// option `record` does not expose), verified, read back from the native file.
fn exact_with_budget(max_nodes: u32, main: &str) -> Profile {
    let out = scratch("exact-budget").join(format!("{main}-{max_nodes}.jvmprof"));
    let _ = std::fs::remove_file(&out);
    run_ok(
        std::process::Command::new(jdk_tool(None, "java"))
            .arg(format!(
                "-agentpath:{}=mode=exact,max_nodes={max_nodes},file={}",
                agent().display(),
                out.display()
            ))
            .arg("-Xverify:all")
            .arg("-cp")
            .arg(classes())
            .arg(main),
    );
    jvmprof_profile::read_any(&out).unwrap()
}

/// stack (frames joined by `;`, optionally under `[thread]`) → (calls, bytecodes).
fn contexts(p: &Profile, threads: bool) -> BTreeMap<String, (u64, u64)> {
    let calls = p.metric_index(Metric::Calls).unwrap();
    let bytecodes = p.metric_index(Metric::Bytecodes).unwrap();
    let mut m: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for s in &p.samples {
        let mut names: Vec<String> = p.stack_frames(s.stack).map(|f| f.name()).collect();
        if threads {
            names.insert(0, format!("[{}]", p.threads[s.thread as usize].name));
        }
        let e = m.entry(names.join(";")).or_default();
        e.0 += s.values[calls];
        e.1 += s.values[bytecodes];
    }
    m
}

/// Runs `main` in exact mode with each basic-block analysis and asserts its contexts are `truth`
/// (programs without exceptions count the same in both).
fn assert_both_analyses(
    java_home: Option<&Path>,
    main: &str,
    truth: &BTreeMap<String, (u64, u64)>,
) {
    for bba in ["default", "precise"] {
        let p = exact(java_home, &["--bba", bba], main);
        assert_eq!(&contexts(&p, false), truth, "{main}, --bba {bba}");
    }
}

fn expect(rows: &[(&str, u64, u64)]) -> BTreeMap<String, (u64, u64)> {
    rows.iter()
        .map(|(k, c, b)| (k.to_string(), (*c, *b)))
        .collect()
}

/// JP's example. javap -c JpExample (javac 17):
///   f: 0 iconst_1, istore_1 | 2 iload_1, bipush 10, if_icmpgt | 8 aload_0, invokevirtual h,
///      aload_0, iload_1, invokevirtual g, iinc, goto | 23 return
///      = 2 + 11*3 + 10*7 + 1 = 106
///   g(n): iconst_0, istore_2 | iload_2, iload_1, if_icmpge | aload_0, invokevirtual h, iinc, goto
///      | return = 6 + 7n, over n = 1..10: 60 + 385 = 445
///   h: getstatic, iconst_1, iadd, putstatic, return = 5 (f;h 10 calls = 50, f;g;h 55 = 275)
///   <init>: aload_0, invokespecial, return = 3
///   main: new, dup, invokespecial, invokevirtual, getstatic, getstatic, invokedynamic,
///      invokevirtual, return = 9
fn jp_truth() -> BTreeMap<String, (u64, u64)> {
    expect(&[
        ("JpExample.main", 1, 9),
        ("JpExample.main;JpExample.<init>", 1, 3),
        ("JpExample.main;JpExample.f", 1, 106),
        ("JpExample.main;JpExample.f;JpExample.h", 10, 50),
        ("JpExample.main;JpExample.f;JpExample.g", 10, 445),
        (
            "JpExample.main;JpExample.f;JpExample.g;JpExample.h",
            55,
            275,
        ),
    ])
}

#[test]
fn jp_example_counts_are_exact_run_after_run_in_both_analyses() {
    let _g = serial();
    for bba in ["default", "precise"] {
        for _run in 0..2 {
            let p = exact(None, &["--bba", bba, "--threads"], "JpExample");
            assert_eq!(contexts(&p, false), jp_truth(), "--bba {bba}");
        }
    }
}

#[test]
fn metadata_says_exact_instrumentation_with_calls_and_bytecodes() {
    let _g = serial();
    let p = exact(None, &[], "JpExample");
    assert_eq!(p.meta.modes, vec!["exact".to_string()]);
    assert_eq!(p.meta.metrics, vec![Metric::Calls, Metric::Bytecodes]);
    assert_eq!(p.meta.engine, "instrumentation");
    assert_eq!(p.meta.extra["exact_bba"], "default");
    // JpExample is the only application class the run loads.
    assert_eq!(p.meta.extra["exact_classes"], "1");
    assert_eq!(p.meta.extra["exact_methods"], "5");
    assert_eq!(p.meta.extra["exact_dropped_calls"], "0");
    assert_eq!(p.threads.len(), 1);
    assert_eq!(p.threads[0].name, "main");
}

#[test]
fn every_format_exports_and_collapsed_lines_carry_the_chosen_value() {
    let _g = serial();
    let dir = scratch("exact-formats");
    let calls = dir.join("calls.collapsed");
    let bytecodes = dir.join("bytecodes.collapsed");
    let c = calls.to_str().unwrap();
    let b = bytecodes.to_str().unwrap();
    record(None, &["--mode", "exact", "-o", c], &["JpExample"]);
    record(
        None,
        &["--mode", "exact", "--value", "bytecodes", "-o", b],
        &["JpExample"],
    );
    let calls = std::fs::read_to_string(&calls).unwrap();
    let bytecodes = std::fs::read_to_string(&bytecodes).unwrap();
    assert!(
        calls
            .lines()
            .any(|l| l == "JpExample.main;JpExample.f;JpExample.g;JpExample.h 55"),
        "{calls}"
    );
    assert!(
        bytecodes
            .lines()
            .any(|l| l == "JpExample.main;JpExample.f;JpExample.g 445"),
        "{bytecodes}"
    );
    let p = exact(None, &[], "JpExample");
    for format in [
        Format::Native,
        Format::Collapsed,
        Format::Html,
        Format::Pprof,
        Format::Speedscope,
        Format::Dot,
    ] {
        for metric in [None, Some(Metric::Calls), Some(Metric::Bytecodes)] {
            let mut bytes = Vec::new();
            let options = ExportOptions {
                metric,
                threads: true,
            };
            jvmprof_profile::write(&p, format, &options, &mut bytes)
                .unwrap_or_else(|e| panic!("{format:?} {metric:?}: {e}"));
            assert!(!bytes.is_empty(), "{format:?}");
        }
    }
    // The native file keeps both metrics losslessly.
    let mut native = Vec::new();
    let options = ExportOptions {
        metric: None,
        threads: false,
    };
    jvmprof_profile::write(&p, Format::Native, &options, &mut native).unwrap();
    let back = jvmprof_profile::read_bytes(&native).unwrap();
    assert_eq!(contexts(&back, false), jp_truth());
}

/// javap -c ExactRecursion: fib(n < 2) = iload_0, iconst_2, if_icmpge | iload_0, ireturn = 5;
/// fib(n >= 2) = 3 | iload_0, iconst_1, isub, invokestatic, iload_0, iconst_2, isub,
/// invokestatic, iadd, ireturn = 13. fib(4): depth 1 fib4 (13); depth 2 fib3, fib2 (26);
/// depth 3 fib2, fib1 under fib3 and fib1, fib0 under fib2 (13 + 5 + 5 + 5 = 28); depth 4 fib1,
/// fib0 under fib3;fib2 (10). main: getstatic, iconst_4, invokestatic, invokedynamic,
/// invokevirtual, return = 6.
#[test]
fn recursion_gets_one_context_per_depth() {
    let _g = serial();
    let fib = "ExactRecursion.fib";
    let d = |n: usize| {
        let mut s = String::from("ExactRecursion.main");
        for _ in 0..n {
            s.push(';');
            s.push_str(fib);
        }
        s
    };
    let truth: BTreeMap<String, (u64, u64)> = [
        (d(0), (1, 6)),
        (d(1), (1, 13)),
        (d(2), (2, 26)),
        (d(3), (4, 28)),
        (d(4), (2, 10)),
    ]
    .into_iter()
    .collect();
    assert_both_analyses(None, "ExactRecursion", &truth);
}

/// javap -c ExactDeep: down(n > 0) = iload_0, ifle | iload_0, iconst_1, isub, invokestatic |
/// return = 7; down(0) = iload_0, ifle | return = 3; main = sipush, invokestatic, sipush,
/// invokestatic, return = 5. Two walks down 2,001 nested contexts: the first misses every
/// context in the runtime's per-thread cache, which grows (and restarts empty) several times
/// on the way; the second finds them in the cache or the tree. Every context: 2 calls.
#[test]
fn deep_trees_count_exactly_while_the_context_cache_grows() {
    let _g = serial();
    let mut truth: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    let mut s = String::from("ExactDeep.main");
    truth.insert(s.clone(), (1, 5));
    for depth in 1..=2001 {
        s.push_str(";ExactDeep.down");
        truth.insert(s.clone(), (2, if depth == 2001 { 6 } else { 14 }));
    }
    assert_both_analyses(None, "ExactDeep", &truth);
}

/// Past the node budget (`max_nodes=3`: main and fib at depths 1 and 2) calls still count, under
/// one `[past node budget]` child of the last kept context: fib at depth 3 (4 calls, 28
/// bytecodes) and depth 4 (2 calls, 10) of the truth above; kept contexts stay exact.
#[test]
fn calls_past_the_node_budget_count_under_the_last_kept_context() {
    let _g = serial();
    let p = exact_with_budget(3, "ExactRecursion");
    let fib = "ExactRecursion.fib";
    let truth = expect(&[
        ("ExactRecursion.main", 1, 6),
        ("ExactRecursion.main;ExactRecursion.fib", 1, 13),
        (
            "ExactRecursion.main;ExactRecursion.fib;ExactRecursion.fib",
            2,
            26,
        ),
        (
            &format!("ExactRecursion.main;{fib};{fib};[past node budget]"),
            6,
            38,
        ),
    ]);
    assert_eq!(contexts(&p, false), truth);
    assert_eq!(p.meta.extra["exact_nodes"], "3");
    assert_eq!(p.meta.extra["exact_max_nodes"], "3");
    assert_eq!(p.meta.extra["exact_dropped_calls"], "6");
}

/// Two spill nodes in turn (ExactSpill, `max_nodes=3`): a's calls below main;a;deep and all of
/// b's go past the budget, and the thread's chain of calls below a spill node moves between the
/// two on every iteration (the runtime's context cache must then not hand back a chain node
/// still hanging from the other one). Per iteration a() and b() each make the calls deep(2) →
/// deep(1) → deep(0) → leaf: kept contexts must equal an unbudgeted run's, main;a;deep's spill
/// child counts 3 x 3 calls, main's 3 x 5 (b itself too), and each spill node's bytecodes are
/// the sum of the unbudgeted contexts it stands for.
#[test]
fn spill_nodes_in_turn_count_what_an_unbudgeted_run_counts() {
    let _g = serial();
    let full = contexts(&exact(None, &[], "ExactSpill"), false);
    let (m, a, b) = ("ExactSpill.main", "ExactSpill.a", "ExactSpill.b");
    let (d, l) = ("ExactSpill.deep", "ExactSpill.leaf");
    let calls: BTreeMap<String, u64> = full.iter().map(|(k, v)| (k.clone(), v.0)).collect();
    let mut want_calls = BTreeMap::new();
    want_calls.insert(m.to_string(), 1);
    for x in [a, b] {
        let mut s = format!("{m};{x}");
        want_calls.insert(s.clone(), 3);
        for f in [d, d, d, l] {
            s = format!("{s};{f}");
            want_calls.insert(s.clone(), 3);
        }
    }
    assert_eq!(calls, want_calls);

    let p = exact_with_budget(3, "ExactSpill");
    let below = |prefix: &str| -> u64 {
        full.iter()
            .filter(|(k, _)| k.starts_with(&format!("{prefix};")))
            .map(|(_, v)| v.1)
            .sum()
    };
    let kept_deep = format!("{m};{a};{d}");
    let mut truth = BTreeMap::new();
    for k in [m.to_string(), format!("{m};{a}"), kept_deep.clone()] {
        truth.insert(k.clone(), full[&k]);
    }
    truth.insert(
        format!("{kept_deep};[past node budget]"),
        (9, below(&kept_deep)),
    );
    truth.insert(
        format!("{m};[past node budget]"),
        (15, full[&format!("{m};{b}")].1 + below(&format!("{m};{b}"))),
    );
    assert_eq!(contexts(&p, false), truth);
    assert_eq!(p.meta.extra["exact_dropped_calls"], "24");
}

/// javap -c ExactExceptions; a(i) for i = 0, 1, 2 and c(1) throws NumberFormatException from
/// Integer.parseInt (not instrumented) through c and b into a's handler.
///
/// default blocks:
///   a: [iload_0, invokestatic b, pop, goto] 4 | handler [astore_1, getstatic, iconst_1, iadd,
///      putstatic] 5 | [invokestatic d, return] 2: 6 + 11 (i = 1: 4 + 5 + 2) + 6 = 23
///   b: one block of 9, counted even when c throws: 27
///   c: [iload_0, iconst_1, if_icmpne] 3 | [ldc "x", goto] 2 | [ldc "7"] 1 | [invokestatic
///      parseInt, istore_1, iload_1, iconst_2, imul, ireturn] 6: 10 + 11 + 10 = 31
/// precise blocks (also end after ldc, invokes, getstatic/putstatic, return):
///   a: [iload_0, invokestatic] 2 | [pop, goto] 2 | [astore_1, getstatic] 2 | [iconst_1, iadd,
///      putstatic] 3 | [invokestatic d] 1 | [return] 1: 6 + (2 + 2 + 3 + 1 + 1) + 6 = 21
///   b: [iload_0, invokestatic c] 2 | rest 7: 9 + 2 + 9 = 20
///   c: 3 | [ldc] 1 | [goto] 1 | [ldc] 1 | [invokestatic parseInt] 1 | rest 5: 10 + 6 + 10 = 26
/// d = getstatic, iconst_0, iadd, putstatic, return: 5 x 3 = 15 in both; main = 31 in both.
/// After the catch a calls d, which must sit under a (the exception closed c's and b's contexts).
#[test]
fn exceptions_through_frames_keep_the_tree_consistent_and_bba_counts_differ_as_predicted() {
    let _g = serial();
    let m = "ExactExceptions.main";
    let a = "ExactExceptions.main;ExactExceptions.a";
    let b = "ExactExceptions.main;ExactExceptions.a;ExactExceptions.b";
    let c = "ExactExceptions.main;ExactExceptions.a;ExactExceptions.b;ExactExceptions.c";
    let d = "ExactExceptions.main;ExactExceptions.a;ExactExceptions.d";
    let p = exact(None, &["--bba", "default"], "ExactExceptions");
    assert_eq!(
        contexts(&p, false),
        expect(&[(m, 1, 31), (a, 3, 23), (b, 3, 27), (c, 3, 31), (d, 3, 15)])
    );
    let p = exact(None, &["--bba", "precise"], "ExactExceptions");
    assert_eq!(
        contexts(&p, false),
        expect(&[(m, 1, 31), (a, 3, 21), (b, 3, 20), (c, 3, 26), (d, 3, 15)])
    );
}

/// javap -c ExactShapes: Square(side) = aload_0, iload_1, iload_1, imul, invokespecial
/// Base.<init>, return = 6; Rect likewise 6; Base(size) = aload_0, invokespecial Object.<init>,
/// aload_0, iload_1, putfield, return = 6; area() = aload_0, getfield, ireturn = 3. main makes
/// Squares for i = 0, 2, 4 and Rects for 1, 3, then calls area() through the interface 3 times
/// on each (9 Square.area, 6 Rect.area); main's own blocks add up to 360 (listing in
/// ExactShapes.java's javap: 5 + 18 + 30 + 15 + 10 + 15 + 4 + 12 + 21 + 54 + 165 + 6 + 5).
/// The superclass constructor is the subclass constructor's child.
#[test]
fn interface_dispatch_and_constructors() {
    let _g = serial();
    let truth = expect(&[
        ("ExactShapes.main", 1, 360),
        ("ExactShapes.main;ExactShapes$Square.<init>", 3, 18),
        (
            "ExactShapes.main;ExactShapes$Square.<init>;ExactShapes$Base.<init>",
            3,
            18,
        ),
        ("ExactShapes.main;ExactShapes$Rect.<init>", 2, 12),
        (
            "ExactShapes.main;ExactShapes$Rect.<init>;ExactShapes$Base.<init>",
            2,
            12,
        ),
        ("ExactShapes.main;ExactShapes$Square.area", 9, 27),
        ("ExactShapes.main;ExactShapes$Rect.area", 6, 18),
    ]);
    assert_both_analyses(None, "ExactShapes", &truth);
}

/// Each worker thread has its own tree. Worker.run = aload_0... : iconst_0, istore_1 |
/// iload_1, aload_0, getfield, if_icmpge | invokestatic work, iinc, goto | return: for t
/// iterations 2 + 4(t + 1) + 3t + 1 = 7 + 7t; work = getstatic, iconst_1, iadd, putstatic,
/// return = 5. Worker(int) = aload_0, invokespecial, aload_0, iload_1, putfield, return = 6.
#[test]
fn threads_have_their_own_trees() {
    let _g = serial();
    let p = exact(None, &[], "ExactThreads");
    let all = contexts(&p, true);
    for k in 1..=3u64 {
        let t = 10 * k;
        let run = format!("[worker-{k}];ExactThreads$Worker.run");
        assert_eq!(all[&run], (1, 7 + 7 * t), "{all:?}");
        assert_eq!(
            all[&format!("{run};ExactThreads.work")],
            (t, 5 * t),
            "{all:?}"
        );
    }
    assert_eq!(
        all["[main];ExactThreads.main;ExactThreads$Worker.<init>"],
        (3, 18)
    );
    // Merged over threads: the three run contexts add up.
    let merged = contexts(&p, false);
    assert_eq!(
        merged["ExactThreads$Worker.run;ExactThreads.work"],
        (60, 300)
    );
    assert_eq!(merged["ExactThreads$Worker.run"], (3, 21 + 7 * 60));
}

/// A lambda's body is the synthetic method lambda$main$0 of its host class, instrumented there;
/// the hidden class the JVM spins to call it never reaches the ClassFileLoadHook, so it is
/// listed as skipped. lambda$main$0 = iload_0, invokestatic twice, iconst_1, iadd, ireturn = 5;
/// twice = iconst_2, iload_0, imul, ireturn = 4.
#[test]
fn lambda_body_is_counted_and_its_hidden_class_listed() {
    let _g = serial();
    let p = exact(None, &[], "ExactLambda");
    let all = contexts(&p, false);
    assert_eq!(all["ExactLambda.main;ExactLambda.lambda$main$0"], (5, 25));
    assert_eq!(
        all["ExactLambda.main;ExactLambda.lambda$main$0;ExactLambda.twice"],
        (5, 20)
    );
    let skipped = &p.meta.extra["exact_skipped"];
    assert!(
        skipped.contains("ExactLambda$$Lambda") && skipped.contains("hidden class"),
        "{skipped}"
    );
}

/// JDK 25 runs the same rewritten code to the same counts.
#[test]
fn jp_example_on_jdk25() {
    let Some(home) = jdk25() else { return };
    let _g = serial();
    assert_both_analyses(Some(&home), "JpExample", &jp_truth());
}

/// Application classes only by default; `--include 'java.util.*'` brings JDK classes in, those
/// loaded while the JVM started (ArrayList) by retransformation; `--exclude` wins over both.
/// ArrayList.size() = aload_0, getfield, ireturn: 7 calls from main, 21 bytecodes.
#[test]
fn include_brings_jdk_classes_in_and_exclude_takes_them_out() {
    let _g = serial();
    let p = exact(None, &[], "ExactUtil");
    let all = contexts(&p, false);
    assert!(all.keys().all(|k| !k.contains("java.")), "{all:?}");
    assert_eq!(all["ExactUtil.main"].0, 1);

    let p = exact(None, &["--include", "java.util.*"], "ExactUtil");
    let all = contexts(&p, false);
    assert_eq!(all["ExactUtil.main;java.util.ArrayList.size"], (7, 21));
    assert_eq!(all["ExactUtil.main;java.util.ArrayList.<init>"].0, 1);
    let retransformed: u64 = p.meta.extra["exact_retransformed"].parse().unwrap();
    assert!(retransformed >= 1, "{:?}", p.meta.extra);

    let p = exact(
        None,
        &[
            "--include",
            "java.util.*",
            "--exclude",
            "java.util.ArrayList",
        ],
        "ExactUtil",
    );
    let all = contexts(&p, false);
    assert!(
        all.keys()
            .all(|k| k.split(';').all(|f| !f.starts_with("java.util.ArrayList."))),
        "{all:?}"
    );
    // ArrayList's constructor is not instrumented, so its superclass constructor hangs off main.
    assert_eq!(all["ExactUtil.main;java.util.AbstractList.<init>"].0, 1);
}

/// `flush=1s` rewrites the output file while the JVM runs, with the trees merged so far: the
/// profile can be read live, and the final file has at least as many calls.
#[test]
fn flush_writes_the_exact_profile_while_the_jvm_runs() {
    let _guard = serial();
    let dir = scratch("exact-flush");
    let out = dir.join("live.jvmprof");
    let stop = dir.join("stop");
    let _ = std::fs::remove_file(&out);
    let _ = std::fs::remove_file(&stop);
    let mut child = std::process::Command::new(jdk_tool(None, "java"))
        .arg(format!(
            "-agentpath:{}=mode=exact,flush=1s,file={}",
            agent().display(),
            out.display()
        ))
        .arg("-cp")
        .arg(classes())
        .arg("ExactLive")
        .arg(&stop)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let calls_of = |p: &Profile| {
        contexts(p, false)
            .get("ExactLive.main;ExactLive.work")
            .map(|c| c.0)
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let live = loop {
        assert!(
            child.try_wait().unwrap().is_none(),
            "the JVM ended before a flushed profile showed up"
        );
        if let Ok(p) = jvmprof_profile::read_any(&out)
            && let Some(c) = calls_of(&p)
            && c > 0
        {
            break c;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no flushed profile after 60 s"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    assert!(
        child.try_wait().unwrap().is_none(),
        "read after the JVM ended"
    );
    std::fs::write(&stop, b"").unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let last = calls_of(&jvmprof_profile::read_any(&out).unwrap()).unwrap();
    assert!(last >= live, "final {last} < live {live}");
    // One call per round: the final count is the number of rounds the program made.
    let stdout = String::from_utf8_lossy(&output.stdout);
    let rounds = last;
    let sum: u64 = (0..rounds).sum();
    assert_eq!(stdout.trim(), format!("live {sum}"), "calls {last}");
}
