//! Helpers shared by the end-to-end tests: the jvmprof binary and agent, the fixture classes
//! compiled once per test process, scratch directories, and one-JVM-at-a-time serialization.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Mutex, MutexGuard, OnceLock};

static SERIAL: Mutex<()> = Mutex::new(());

pub fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

pub fn jvmprof() -> PathBuf {
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_jvmprof"));
    let agent = bin.with_file_name("libjvmprof_agent.so");
    assert!(
        agent.is_file(),
        "{} is missing: run `cargo build --release` before the tests (see README.md)",
        agent.display()
    );
    bin
}

pub fn agent() -> PathBuf {
    jvmprof().with_file_name("libjvmprof_agent.so")
}

/// The fixture classes, compiled once per test process.
pub fn classes() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures");
        let out = scratch("classes");
        let sources: Vec<PathBuf> = std::fs::read_dir(&src)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "java"))
            .collect();
        let status = Command::new(jdk_tool(None, "javac"))
            .arg("--release")
            .arg("11")
            .arg("-d")
            .arg(&out)
            .args(&sources)
            .status()
            .expect("javac must be installed (apt-get install openjdk-17-jdk-headless)");
        assert!(status.success(), "javac failed on the fixtures");
        out
    })
}

pub fn jdk_tool(home: Option<&Path>, tool: &str) -> String {
    match home {
        Some(h) => h.join("bin").join(tool).display().to_string(),
        None => tool.to_string(),
    }
}

pub fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir()
        .join(format!("jvmprof-tests-{}", std::process::id()))
        .join(name);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

pub fn run_ok(cmd: &mut Command) -> Output {
    let out = cmd.output().expect("cannot run command");
    assert!(
        out.status.success(),
        "{cmd:?} failed with {}:\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// `record` with `args` around `java [jvm_args] -cp classes MAIN main_args`.
pub fn record(java_home: Option<&Path>, args: &[&str], main: &[&str]) -> Output {
    let mut cmd = Command::new(jvmprof());
    cmd.arg("record").args(args).arg("--");
    cmd.arg(jdk_tool(java_home, "java"))
        .arg("-cp")
        .arg(classes())
        .args(main);
    run_ok(&mut cmd)
}
