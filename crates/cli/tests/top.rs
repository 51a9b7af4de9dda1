//! `jvmprof top` on a busy JVM: its hot method leads the table, and after `top` ends (by
//! `--iterations`, SIGINT or SIGHUP) the JVM is left unprofiled and a new session can start.
//! On JDK 17 and JDK 25.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::*;

struct Target(Child);

impl Target {
    fn start(home: Option<&Path>) -> Target {
        let mut child = Command::new(jdk_tool(home, "java"))
            .arg("-cp")
            .arg(classes())
            .args(["Service", "120"])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.as_mut().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line.trim(), "ready");
        Target(child)
    }

    fn pid(&self) -> String {
        self.0.id().to_string()
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `jvmprof status` says no session runs (exit 1), within a few seconds.
fn unprofiled(pid: &str) {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let out = Command::new(jvmprof())
            .args(["status", pid])
            .output()
            .unwrap();
        if out.status.code() == Some(1)
            && String::from_utf8_lossy(&out.stdout).contains("no profiling session")
        {
            return;
        }
        assert!(Instant::now() < deadline, "a session still runs: {out:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn top_shows_the_hot_method_and_leaves_the_jvm_unprofiled() {
    let _guard = serial();
    for home in jdk_homes() {
        let target = Target::start(home.as_deref());
        let pid = target.pid();
        let out =
            run_ok(Command::new(jvmprof()).args(["top", &pid, "--iterations", "3", "--rows", "5"]));
        let text = String::from_utf8_lossy(&out.stdout);
        let tables: Vec<&str> = text.split("jvmprof top: process").skip(1).collect();
        assert_eq!(tables.len(), 3, "{text}");
        // The last refresh: Service.work is the first method row, with most of the samples.
        let first_row = tables[2].lines().nth(2).unwrap_or_default();
        assert!(first_row.ends_with("Service.work"), "{text}");
        let share: f64 = first_row.split('%').next().unwrap().trim().parse().unwrap();
        assert!(share > 80.0, "{text}");
        unprofiled(&pid);
        // A new session starts and ends normally.
        let file = scratch("top-after").join("after.collapsed");
        run_ok(
            Command::new(jvmprof())
                .args(["record", "--pid", &pid, "--duration", "1s", "-o"])
                .arg(&file),
        );
        assert!(
            std::fs::read_to_string(&file)
                .unwrap()
                .contains("Service.work")
        );

        // Ended by a signal while it runs without --iterations (plain text on a pipe).
        for signal in ["INT", "HUP"] {
            let mut top = Command::new(jvmprof())
                .args(["top", &pid, "--threads"])
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            let mut lines = BufReader::new(top.stdout.take().unwrap()).lines();
            let mut saw = false;
            for line in lines.by_ref() {
                let line = line.unwrap();
                // The main thread predates the attach: it is named by its kernel name (`java`).
                if line.contains("[main] Service.work") || line.contains("[java] Service.work") {
                    saw = true;
                    break;
                }
            }
            assert!(saw, "top --threads shows main's hot method");
            run_ok(
                Command::new("kill")
                    .arg(format!("-{signal}"))
                    .arg(top.id().to_string()),
            );
            let status = top.wait().unwrap();
            assert!(status.success(), "SIG{signal}: {status}");
            unprofiled(&pid);
        }
    }
}
