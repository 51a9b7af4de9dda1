//! Compiles the exact-mode Java runtime under `java/agent/jvmprof/runtime` with
//! `javac --release 11` into OUT_DIR; `src/exact.rs` embeds the class files and puts them on the
//! boot class path at start-up.

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let src_dir = manifest.join("../../java/agent/jvmprof/runtime");
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    let classes = out.join("exact-runtime");
    println!("cargo:rerun-if-changed={}", src_dir.display());
    let mut sources: Vec<PathBuf> = std::fs::read_dir(&src_dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", src_dir.display()))
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "java"))
        .collect();
    sources.sort();
    for s in &sources {
        println!("cargo:rerun-if-changed={}", s.display());
    }
    let javac = std::env::var_os("JAVA_HOME")
        .map(|h| Path::new(&h).join("bin/javac"))
        .filter(|p| p.exists())
        .unwrap_or_else(|| PathBuf::from("javac"));
    let _ = std::fs::remove_dir_all(&classes);
    let status = Command::new(&javac)
        .args(["--release", "11", "-nowarn", "-d"])
        .arg(&classes)
        .args(&sources)
        .status()
        .unwrap_or_else(|e| {
            panic!(
                "jvmprof-agent needs a JDK (javac, 11 or newer) to build its exact-mode runtime: \
                 running {} failed: {e}. Install a JDK or set JAVA_HOME.",
                javac.display()
            )
        });
    assert!(status.success(), "javac failed on {}", src_dir.display());
    let mut files = Vec::new();
    collect(&classes, &classes, &mut files);
    files.sort();
    let mut code = String::from(
        "/// (path under a class-path root, class bytes) of the exact-mode runtime classes.\npub const RUNTIME_CLASSES: &[(&str, &[u8])] = &[\n",
    );
    for (rel, abs) in files {
        code.push_str(&format!(
            "    ({rel:?}, include_bytes!({:?})),\n",
            abs.display().to_string()
        ));
    }
    code.push_str("];\n");
    std::fs::write(out.join("exact_runtime.rs"), code).expect("write exact_runtime.rs");
}

fn collect(root: &Path, dir: &Path, out: &mut Vec<(String, PathBuf)>) {
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            collect(root, &p, out);
        } else if let Ok(rel) = p.strip_prefix(root) {
            out.push((rel.display().to_string(), p.clone()));
        }
    }
}
