//! Compiles the exact-mode Java runtime under `java/agent/jvmprof/runtime` with
//! `javac -source 11 -target 11` into OUT_DIR; `src/exact.rs` embeds the class files and puts
//! them on the boot class path at start-up (the shared steps: `java/embed.rs`).

#[path = "../../java/embed.rs"]
mod embed;

fn main() {
    embed::build(&embed::Runtime {
        crate_name: "jvmprof-agent",
        sources: "../../java/agent/jvmprof/runtime",
        classes: "exact-runtime",
        rust_file: "exact_runtime.rs",
        doc: "(path under a class-path root, class bytes) of the exact-mode runtime classes.",
        constant: "RUNTIME_CLASSES",
    });
}
