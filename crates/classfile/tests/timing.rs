//! The timing pass (lock mode's LockSupport probe) on a fixture compiled with javac: every
//! exit of a timed method, normal or exceptional, reports its subject once, and the JVM
//! verifier (-Xverify:all) accepts the rewritten class.

use std::path::{Path, PathBuf};
use std::process::Command;

use jvmprof_classfile::timing::{Hook, time_methods};

const SOURCE: &str = r#"
import java.util.ArrayList;
import java.util.List;

class Hook {
    static final List<String> calls = new ArrayList<>();
    static void hit(Object subject, long start) {
        long ns = System.nanoTime() - start;
        calls.add(subject + (ns >= 0 ? "" : " negative"));
    }
}

class Timed {
    final String name;
    Timed(String name) { this.name = name; }
    public String toString() { return name; }

    static void plain(Object o) { }

    static int loop(Object o, int n) {
        int s = 0;
        do { s += n; n--; } while (n > 0);
        return s;
    }

    static void throwing(Object o) { throw new IllegalStateException("boom"); }

    static String tryFinally(Object o, boolean fail) {
        StringBuilder b = new StringBuilder();
        try {
            if (fail) throw new IllegalArgumentException();
            b.append("ok");
        } catch (IllegalArgumentException e) {
            b.append("caught");
        } finally {
            b.append("+finally");
        }
        return b.toString();
    }

    static long noSubject(long x) { return x * 2; }

    String instance(int k) {
        if (k > 0) return name + k;
        throw new RuntimeException();
    }

    static void untouched(Object o) { }
}

public class Main {
    public static void main(String[] args) {
        Timed.plain("plain");
        System.out.println("loop " + Timed.loop("loop", 3));
        try { Timed.throwing("throwing"); } catch (IllegalStateException e) { System.out.println("threw"); }
        System.out.println(Timed.tryFinally("tf-ok", false));
        System.out.println(Timed.tryFinally("tf-fail", true));
        System.out.println("noSubject " + Timed.noSubject(21));
        Timed t = new Timed("inst");
        System.out.println(t.instance(1));
        try { t.instance(0); } catch (RuntimeException e) { System.out.println("inst threw"); }
        Timed.untouched("untouched");
        for (String c : Hook.calls) System.out.println("hook " + c);
    }
}
"#;

fn java_tool(name: &str) -> PathBuf {
    std::env::var_os("JAVA_HOME")
        .map(|h| Path::new(&h).join("bin").join(name))
        .filter(|p| p.exists())
        .unwrap_or_else(|| PathBuf::from(name))
}

fn scratch(name: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("classfile-timing")
        .join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn run(dir: &Path) -> String {
    let out = Command::new(java_tool("java"))
        .args(["-Xverify:all", "-cp"])
        .arg(dir)
        .arg("Main")
        .output()
        .expect("java is needed by these tests");
    assert!(
        out.status.success(),
        "java failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn every_exit_reports_once_and_the_verifier_accepts_it() {
    let dir = scratch("run");
    std::fs::write(dir.join("Main.java"), SOURCE).unwrap();
    let st = Command::new(java_tool("javac"))
        .args(["-nowarn", "--release", "11", "-d"])
        .arg(&dir)
        .arg(dir.join("Main.java"))
        .status()
        .expect("javac is needed by these tests");
    assert!(st.success());
    let before = run(&dir);
    assert!(!before.contains("hook "), "{before}");

    let class = dir.join("Timed.class");
    let data = std::fs::read(&class).unwrap();
    let wanted = [
        ("plain", "(Ljava/lang/Object;)V"),
        ("loop", "(Ljava/lang/Object;I)I"),
        ("throwing", "(Ljava/lang/Object;)V"),
        ("tryFinally", "(Ljava/lang/Object;Z)Ljava/lang/String;"),
        ("noSubject", "(J)J"),
        ("instance", "(I)Ljava/lang/String;"),
        ("missing", "()V"),
    ];
    let hook = Hook {
        class: "Hook",
        method: "hit",
    };
    let timed = time_methods(&data, &wanted, hook).unwrap();
    assert_eq!(timed.methods.len(), 6, "{:?}", timed.methods);
    std::fs::write(&class, &timed.bytes).unwrap();

    let after = run(&dir);
    let (program, hooks): (Vec<&str>, Vec<&str>) =
        after.lines().partition(|l| !l.starts_with("hook "));
    // The program behaves exactly as before.
    assert_eq!(program.join("\n") + "\n", before, "{after}");
    // One report per call, in call order, whatever the exit; a static method without a
    // reference parameter reports null, an instance method `this`.
    assert_eq!(
        hooks,
        vec![
            "hook plain",
            "hook loop",
            "hook throwing",
            "hook tf-ok",
            "hook tf-fail",
            "hook null",
            "hook inst",
            "hook inst",
        ],
        "{after}"
    );
}

#[test]
fn constructors_are_refused_and_the_class_is_unchanged() {
    let dir = scratch("ctor");
    std::fs::write(dir.join("Main.java"), SOURCE).unwrap();
    let st = Command::new(java_tool("javac"))
        .args(["-nowarn", "--release", "11", "-d"])
        .arg(&dir)
        .arg(dir.join("Main.java"))
        .status()
        .expect("javac is needed by these tests");
    assert!(st.success());
    let data = std::fs::read(dir.join("Timed.class")).unwrap();
    let hook = Hook {
        class: "Hook",
        method: "hit",
    };
    let err = time_methods(&data, &[("<init>", "(Ljava/lang/String;)V")], hook).unwrap_err();
    assert!(err.contains("<init>"), "{err}");
    // Nothing wanted: the class comes back byte for byte.
    let same = time_methods(&data, &[], hook).unwrap();
    assert_eq!(same.bytes, data);
    assert!(same.methods.is_empty());
}
