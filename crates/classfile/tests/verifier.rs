//! The CI subset of the verifier oracle (the whole corpus is `bench/verify-corpus`): the JDK's
//! jdk.compiler module and Debian's commons-lang3, guava and asm jars, rewritten by every pass
//! and linked in a JVM (HotSpot's split verifier runs at link time). Classes that fail to link
//! before rewriting are excluded by a baseline run. Needs a JDK (java, javac, jimage) and
//! `apt-get install -y libguava-java libcommons-lang3-java libasm-java`.

use std::path::{Path, PathBuf};
use std::process::Command;

use jvmprof_classfile::ClassFile;
use jvmprof_classfile::bba::Mode;
use jvmprof_classfile::instrument::{MethodTable, Probes, instrument_class};
use jvmprof_classfile::subgraph;

fn java_home() -> PathBuf {
    if let Some(h) = std::env::var_os("JAVA_HOME") {
        return PathBuf::from(h);
    }
    let javac = Command::new("sh")
        .args(["-c", "readlink -f \"$(command -v javac)\""])
        .output()
        .unwrap();
    let p = PathBuf::from(String::from_utf8(javac.stdout).unwrap().trim());
    p.parent()
        .and_then(Path::parent)
        .expect("javac on PATH or JAVA_HOME")
        .to_path_buf()
}

fn scratch(name: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("verifier-tests")
        .join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            walk(&p, out);
        } else if p.extension().is_some_and(|x| x == "class") {
            out.push(p);
        }
    }
}

/// Runs the harness; returns (linked, verify_errors, format_errors, other_errors, excluded).
fn verify_load(harness: &Path, args: &[&str], roots: &[PathBuf]) -> [u64; 5] {
    let out = Command::new(java_home().join("bin/java"))
        .arg("-cp")
        .arg(harness)
        .arg("VerifyLoad")
        .args(args)
        .args(roots)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "harness failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let last = stdout.lines().last().unwrap_or_default().to_string();
    let f: Vec<&str> = last.split_whitespace().collect();
    assert_eq!(f.first(), Some(&"RESULT"), "{stdout}");
    let num = |k: &str| -> u64 {
        let i = f.iter().position(|x| *x == k).unwrap();
        f[i + 1].parse().unwrap()
    };
    let r = [
        num("linked"),
        num("verify_errors"),
        num("format_errors"),
        num("other_errors"),
        num("excluded"),
    ];
    if r[1] + r[2] > 0 {
        eprintln!(
            "{}",
            stdout
                .lines()
                .filter(|l| l.starts_with("FAIL"))
                .take(5)
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
    r
}

fn unzip(jar: &Path, dest: &Path) {
    let st = Command::new(java_home().join("bin/jar"))
        .arg("xf")
        .arg(jar)
        .current_dir(dest)
        .status()
        .unwrap();
    assert!(st.success());
}

#[test]
fn every_pass_links_on_jdk_compiler_and_debian_jars() {
    let work = scratch("corpus");
    let jh = java_home();
    let st = Command::new(jh.join("bin/jimage"))
        .args(["extract", "--include", "regex:/jdk\\.compiler/.*", "--dir"])
        .arg(work.join("jdk"))
        .arg(jh.join("lib/modules"))
        .status()
        .unwrap();
    assert!(st.success());
    let mut roots = vec![work.join("jdk/jdk.compiler")];
    let jars = ["commons-lang3", "guava", "asm"];
    for j in jars {
        let jar = PathBuf::from(format!("/usr/share/java/{j}.jar"));
        assert!(
            jar.exists(),
            "{} missing: apt-get install -y libguava-java libcommons-lang3-java libasm-java",
            jar.display()
        );
        let d = work.join(j);
        std::fs::create_dir_all(&d).unwrap();
        unzip(&jar, &d);
        let _ = std::fs::remove_dir_all(d.join("META-INF"));
        roots.push(d);
    }
    let harness = work.join("harness");
    let st = Command::new(jh.join("bin/javac"))
        .arg("-d")
        .arg(&harness)
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/java/VerifyLoad.java"))
        .status()
        .unwrap();
    assert!(st.success());

    // Round trip is byte-identical on the whole subset.
    let mut files = Vec::new();
    for r in &roots {
        walk(r, &mut files);
    }
    assert!(files.len() > 4000, "corpus too small: {}", files.len());
    for f in &files {
        let data = std::fs::read(f).unwrap();
        assert_eq!(
            ClassFile::read(&data).unwrap().write(),
            data,
            "{}",
            f.display()
        );
    }

    let baseline = work.join("baseline.txt");
    let base = verify_load(&harness, &["--fails", baseline.to_str().unwrap()], &roots);
    assert!(base[0] > 4000, "baseline linked only {}", base[0]);

    for (name, p) in [
        ("relayout", Probes::Relayout),
        ("calls", Probes::Calls),
        ("bytecodes", Probes::Bytecodes),
        ("bytecodes-precise", Probes::BytecodesPrecise),
        ("exact", Probes::Exact(Mode::Default)),
        ("exact-precise", Probes::Exact(Mode::Precise)),
    ] {
        let out = work.join(format!("out-{name}"));
        let mut outs = Vec::new();
        let mut table = MethodTable::default();
        let mut rewritten = 0;
        for r in &roots {
            let o = out.join(r.file_name().unwrap());
            let mut fs = Vec::new();
            walk(r, &mut fs);
            for f in fs {
                let res = instrument_class(&std::fs::read(&f).unwrap(), p, &mut table).unwrap();
                rewritten += res.rewritten;
                let dest = o.join(f.strip_prefix(r).unwrap());
                std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
                std::fs::write(dest, res.bytes).unwrap();
            }
            outs.push(o);
        }
        assert!(
            rewritten > 30_000,
            "{name}: only {rewritten} methods rewritten"
        );
        let r = verify_load(&harness, &["--exclude", baseline.to_str().unwrap()], &outs);
        assert_eq!(r[0], base[0], "{name}: linked count changed");
        assert_eq!(
            (r[1], r[2], r[3]),
            (0, 0, 0),
            "{name}: verify/format/other errors"
        );
        let _ = std::fs::remove_dir_all(&out);
    }

    // Root-method profiling's pass: every method, those with even-length names as roots, no
    // bytecode counting (the exact pass's code path with `close(node, 0)`), and the
    // Method.invoke hook wherever reflection is called.
    let out = work.join("out-roots");
    let mut outs = Vec::new();
    let (mut rewritten, mut id) = (0, 0);
    let mut refused: Vec<String> = Vec::new();
    for r in &roots {
        let o = out.join(r.file_name().unwrap());
        let mut fs = Vec::new();
        walk(r, &mut fs);
        for f in fs {
            let res = subgraph::instrument_selected(&std::fs::read(&f).unwrap(), None, |n, _| {
                id += 1;
                Some((id, n.len() % 2 == 0))
            })
            .unwrap();
            rewritten += res.rewritten;
            refused.extend(
                res.skipped
                    .into_iter()
                    .filter(|s| !s.ends_with(": no code")),
            );
            let dest = o.join(f.strip_prefix(r).unwrap());
            std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
            std::fs::write(dest, res.bytes).unwrap();
        }
        outs.push(o);
    }
    assert!(
        rewritten > 30_000,
        "roots: only {rewritten} methods rewritten"
    );
    // Every method with code takes the probes (a refusal would leave it unprofiled).
    assert!(
        refused.is_empty(),
        "roots: {} methods refused, e.g. {:?}",
        refused.len(),
        &refused[..refused.len().min(10)]
    );
    let r = verify_load(&harness, &["--exclude", baseline.to_str().unwrap()], &outs);
    assert_eq!(r[0], base[0], "roots: linked count changed");
    assert_eq!(
        (r[1], r[2], r[3]),
        (0, 0, 0),
        "roots: verify/format/other errors"
    );
    let _ = std::fs::remove_dir_all(&out);
}
