//! What a user sees around the profile: each error said once, a closed pipe ending a report
//! quietly, output files that are not inputs named as such, `%p`/`%t` in output names, a
//! progress line in logs, and `--version` naming the commit.

mod common;

use common::*;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

fn stderr_of(args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(jvmprof()).args(args).output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn an_error_is_said_once() {
    let (code, err) = stderr_of(&["report", "/nonexistent/p.jvmprof"]);
    assert_eq!(code, Some(2));
    assert_eq!(err.lines().count(), 1, "{err}");
    assert_eq!(err.matches("No such file or directory").count(), 1, "{err}");
    assert!(
        err.starts_with("jvmprof: /nonexistent/p.jvmprof: "),
        "{err}"
    );
}

#[test]
fn a_report_into_a_closed_pipe_ends_quietly() {
    // 6000 distinct methods: a report of all of them is far more than a pipe holds.
    let dir = scratch("surface-pipe");
    let big = dir.join("big.collapsed");
    let text: String = (0..6000)
        .map(|i| {
            format!(
                "com.example.Main.main;com.example.Work.method{i} {}\n",
                i + 1
            )
        })
        .collect();
    std::fs::write(&big, text).unwrap();
    let mut child = Command::new(jvmprof())
        .args(["report", "--top", "6000"])
        .arg(&big)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    // The reader is gone (as `| head -1` leaves it).
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!first.is_empty());
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.is_empty(), "{err}");
}

#[test]
fn an_output_only_file_is_not_taken_for_an_input() {
    let dir = scratch("surface-html");
    let collapsed = dir.join("p.collapsed");
    std::fs::write(&collapsed, "a;b 3\na;c 1\n").unwrap();
    for ext in ["html", "speedscope.json", "dot"] {
        let out = dir.join(format!("p.{ext}"));
        run_ok(
            Command::new(jvmprof())
                .arg("convert")
                .arg(&collapsed)
                .arg("-o")
                .arg(&out),
        );
        let (code, err) = stderr_of(&[
            "convert",
            out.to_str().unwrap(),
            "-o",
            dir.join("back.collapsed").to_str().unwrap(),
        ]);
        assert_eq!(code, Some(2), "{ext}");
        assert!(
            err.contains("which jvmprof writes but cannot read back"),
            "{ext}: {err}"
        );
    }
}

#[test]
fn output_names_expand_pid_and_time_and_logs_get_progress_lines() {
    let _guard = serial();
    let dir = scratch("surface-names");
    for f in std::fs::read_dir(&dir).unwrap() {
        std::fs::remove_file(f.unwrap().path()).unwrap();
    }
    let pattern = dir.join("cpu-%p-%t.jvmprof");
    // About 6 s (20 bursts of 150 ms and sleeps of 150 ms): a progress line every 5 s.
    let out = record(
        None,
        &["--mode", "cpu", "-o", pattern.to_str().unwrap()],
        &["Timeline4", "20"],
    );
    let written: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|f| f.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(written.len(), 1, "{written:?}");
    let name = &written[0];
    let p = jvmprof_profile::read_any(dir.join(name)).unwrap();
    let rest = name
        .strip_prefix(&format!("cpu-{}-", p.meta.pid))
        .unwrap_or_else(|| panic!("{name} does not carry the JVM's pid {}", p.meta.pid));
    let stamp = rest.strip_suffix(".jvmprof").unwrap();
    assert!(
        stamp.len() == 15
            && stamp.as_bytes()[8] == b'-'
            && stamp
                .chars()
                .enumerate()
                .all(|(i, c)| i == 8 || c.is_ascii_digit()),
        "{name}"
    );
    let year: u64 = stamp[..4].parse().unwrap();
    assert!((2024..2100).contains(&year), "{name}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&format!("written to {}", dir.join(name).display())));
    // stderr is a pipe here, not a terminal: plain progress lines, no escape codes.
    let progress: Vec<&str> = err
        .lines()
        .filter(|l| l.starts_with("jvmprof: recording "))
        .collect();
    assert!(!progress.is_empty(), "no progress line: {err}");
    assert!(progress[0].ends_with(" samples"), "{err}");
    assert!(!err.contains('\x1b'), "{err}");
}

#[test]
fn stack_filters_keep_and_drop_exact_samples() {
    let dir = scratch("surface-filters");
    let input = dir.join("in.collapsed");
    std::fs::write(
        &input,
        "main;java.util.HashMap.put 3\nmain;java.util.HashMap.get 4\nmain;App.work 2\n\
         worker;java.util.ArrayList.add 5\n",
    )
    .unwrap();
    let convert = |args: &[&str]| -> String {
        let out = dir.join("out.collapsed");
        run_ok(
            Command::new(jvmprof())
                .arg("convert")
                .arg(&input)
                .args(args)
                .arg("-o")
                .arg(&out),
        );
        let mut lines: Vec<String> = std::fs::read_to_string(&out)
            .unwrap()
            .lines()
            .map(str::to_string)
            .collect();
        lines.sort();
        lines.join("\n")
    };
    assert_eq!(
        convert(&["-I", "HashMap"]),
        "main;java.util.HashMap.get 4\nmain;java.util.HashMap.put 3"
    );
    assert_eq!(
        convert(&["-I", "java.util.*", "-X", "*.get"]),
        "main;java.util.HashMap.put 3\nworker;java.util.ArrayList.add 5"
    );
    assert_eq!(
        convert(&["--exclude-stack", "java.util.*", "--include-stack", "main"]),
        "main;App.work 2"
    );
    let out = run_ok(
        Command::new(jvmprof())
            .arg("report")
            .arg(&input)
            .args(["-X", "java.util.*"]),
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("All threads: 2 samples"), "{text}");
}

#[test]
fn version_names_the_commit() {
    let out = run_ok(Command::new(jvmprof()).arg("--version"));
    let v = String::from_utf8_lossy(&out.stdout);
    let head = Command::new("git")
        .args(["rev-parse", "--short=10", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
    match head {
        // Built from this checkout: the commit it was built at (the test binary and jvmprof
        // were built together, so HEAD has not moved since).
        Some(commit) => assert!(v.contains(&format!("(commit {commit}, ")), "{v}"),
        None => assert_eq!(v.trim(), format!("jvmprof {}", env!("CARGO_PKG_VERSION"))),
    }
}
