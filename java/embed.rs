//! The build-script half of embedding a Java runtime in a crate, shared by the build scripts
//! of jvmprof-classfile (the offline runtime) and jvmprof-agent (the exact-mode and root
//! runtimes): compile every `.java` file of the runtime's directory, together with the classes
//! every runtime shares (`java/shared`: the calling-context tree), with the JDK's
//! `javac -source 11 -target 11` into OUT_DIR (the runtimes run on JDK 11 and later), and write
//! a Rust file listing `(path under a class-path root, class bytes)` for `include!`.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The classes every runtime is compiled with, relative to the manifest directory of a crate
/// under `crates/` (as the runtime's own directory is).
const SHARED: &str = "../../java/shared/jvmprof/runtime";

pub struct Runtime<'a> {
    /// The crate, for the error message when no JDK is found.
    pub crate_name: &'a str,
    /// Source directory, relative to the crate's manifest directory.
    pub sources: &'a str,
    /// Directory under OUT_DIR for the class files.
    pub classes: &'a str,
    /// File under OUT_DIR for the generated Rust.
    pub rust_file: &'a str,
    /// Doc comment and name of the generated constant.
    pub doc: &'a str,
    pub constant: &'a str,
}

pub fn build(r: &Runtime<'_>) {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let src_dir = manifest.join(r.sources);
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    let classes = out.join(r.classes);
    let mut sources = Vec::new();
    for dir in [src_dir.clone(), manifest.join(SHARED)] {
        println!("cargo:rerun-if-changed={}", dir.display());
        let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "java"))
            .collect();
        files.sort();
        sources.extend(files);
    }
    for s in &sources {
        println!("cargo:rerun-if-changed={}", s.display());
    }
    let javac = std::env::var_os("JAVA_HOME")
        .map(|h| Path::new(&h).join("bin/javac"))
        .filter(|p| p.exists())
        .unwrap_or_else(|| PathBuf::from("javac"));
    let _ = std::fs::remove_dir_all(&classes);
    let status = Command::new(&javac)
        // Not --release 11, which forbids --add-exports: the exact runtime marks a probe
        // @jdk.internal.vm.annotation.DontInline, which HotSpot honours for boot-loader
        // classes. The runtimes use only APIs that JDK 11 has.
        .args([
            "-source",
            "11",
            "-target",
            "11",
            "--add-exports",
            "java.base/jdk.internal.vm.annotation=ALL-UNNAMED",
            "-nowarn",
            "-d",
        ])
        .arg(&classes)
        .args(&sources)
        .status()
        .unwrap_or_else(|e| {
            panic!(
                "{} needs a JDK (javac, 11 or newer) to build its Java runtime: running {} \
                 failed: {e}. Install a JDK or set JAVA_HOME.",
                r.crate_name,
                javac.display()
            )
        });
    assert!(status.success(), "javac failed on {}", src_dir.display());
    let mut files = Vec::new();
    collect(&classes, &classes, &mut files);
    files.sort();
    let mut code = format!(
        "/// {}\npub const {}: &[(&str, &[u8])] = &[\n",
        r.doc, r.constant
    );
    for (rel, abs) in files {
        code.push_str(&format!(
            "    ({rel:?}, include_bytes!({:?})),\n",
            abs.display().to_string()
        ));
    }
    code.push_str("];\n");
    std::fs::write(out.join(r.rust_file), code)
        .unwrap_or_else(|e| panic!("write {}: {e}", r.rust_file));
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
