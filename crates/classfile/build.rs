//! Compiles the offline Java runtime under `java/offline/jvmprof/runtime` (with the classes
//! every runtime shares, `java/shared`) with `javac -source 11 -target 11` into OUT_DIR;
//! `src/runtime.rs` embeds the class files (the shared steps: `java/embed.rs`).

#[path = "../../java/embed.rs"]
mod embed;

fn main() {
    embed::build(&embed::Runtime {
        crate_name: "jvmprof-classfile",
        sources: "../../java/offline/jvmprof/runtime",
        classes: "runtime-classes",
        rust_file: "runtime_classes.rs",
        doc: "(path in a jar, class bytes) of the runtime classes.",
        constant: "CLASSES",
    });
}
