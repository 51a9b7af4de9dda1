//! `jvmprof demo`: compile the bundled Java demo, profile it for a few seconds and write a flame
//! graph (`demo.html` by default). Needs a JDK (`javac` on PATH or under JAVA_HOME).

use crate::record;
use anyhow::{Context, Result, bail};
use std::path::PathBuf;

const DEMO_SOURCE: &str = include_str!("../demo/Demo.java");

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Where to write the flame graph (any format by extension).
    #[arg(short = 'o', long = "output", default_value = "demo.html")]
    pub output: PathBuf,
    /// How long the demo runs, in seconds.
    #[arg(long, default_value_t = 5)]
    pub seconds: u32,
    /// The agent library (default: next to this executable).
    #[arg(long, env = "JVMPROF_AGENT")]
    pub agent: Option<PathBuf>,
}

fn jdk_tool(name: &str) -> String {
    match std::env::var_os("JAVA_HOME") {
        Some(home) if PathBuf::from(&home).join("bin").join(name).is_file() => PathBuf::from(home)
            .join("bin")
            .join(name)
            .display()
            .to_string(),
        _ => name.to_string(),
    }
}

pub fn run(args: Args) -> Result<i32> {
    let work = record::TempDir::new()?;
    let dir = work.path.clone();
    std::fs::write(dir.join("Demo.java"), DEMO_SOURCE)?;
    let javac = jdk_tool("javac");
    let status = std::process::Command::new(&javac)
        .args(["-d"])
        .arg(&dir)
        .arg(dir.join("Demo.java"))
        .status()
        .with_context(|| format!("cannot run {javac}: install a JDK 17+ (e.g. apt-get install openjdk-17-jdk-headless)"))?;
    if !status.success() {
        bail!("javac failed on the bundled demo");
    }
    eprintln!("jvmprof: profiling the bundled demo for {} s", args.seconds);
    let code = record::run(record::Args {
        mode: "cpu".into(),
        alloc_interval: "512k".into(),
        live: false,
        lock_threshold: "10us".into(),
        server: None,
        token: None,
        token_file: None,
        labels: Vec::new(),
        include: Vec::new(),
        exclude: Vec::new(),
        bba: None,
        root: Vec::new(),
        timer: None,
        min_latency: None,
        vm_name: None,
        trace_buffer: None,
        interval: "10ms".into(),
        threads: false,
        output: args.output.clone(),
        format: None,
        value: None,
        depth: 512,
        engine: "auto".into(),
        cpu_engine: "auto".into(),
        pid: None,
        duration: None,
        hprof_on_exit: None,
        hprof_on_oom: None,
        agent: args.agent,
        command: vec![
            jdk_tool("java"),
            "-cp".into(),
            dir.display().to_string(),
            "Demo".into(),
            args.seconds.to_string(),
        ],
    });
    drop(work);
    let code = code?;
    if code == 0 {
        eprintln!("jvmprof: open {} in a browser", args.output.display());
    }
    Ok(code)
}
