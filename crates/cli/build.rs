//! Puts the git commit the binary was built from into `jvmprof --version`
//! (`JVMPROF_VERSION`: `0.1.0 (commit 1a2b3c4d, 2026-11-24)`, or the bare version outside git).

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    let s = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (out.status.success() && !s.is_empty()).then_some(s)
}

fn main() {
    let version = env!("CARGO_PKG_VERSION");
    let full = match (
        git(&["rev-parse", "--short=10", "HEAD"]),
        git(&["log", "-1", "--format=%cs"]),
    ) {
        (Some(commit), Some(date)) => format!("{version} (commit {commit}, {date})"),
        (Some(commit), None) => format!("{version} (commit {commit})"),
        _ => version.to_string(),
    };
    println!("cargo:rustc-env=JVMPROF_VERSION={full}");
    // A new commit (HEAD moves, or the branch it names does) rebuilds the version.
    let mut watch = vec!["HEAD".to_string(), "packed-refs".to_string()];
    watch.extend(git(&["symbolic-ref", "-q", "HEAD"]));
    for name in watch {
        // `--git-path` finds each where it lives, in a worktree too; only existing files are
        // watched (a missing one would rebuild every time).
        if let Some(path) = git(&["rev-parse", "--path-format=absolute", "--git-path", &name])
            && std::path::Path::new(&path).exists()
        {
            println!("cargo:rerun-if-changed={path}");
        }
    }
    println!("cargo:rerun-if-changed=build.rs");
}
