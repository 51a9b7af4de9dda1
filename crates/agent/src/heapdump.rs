//! Heap dumps the agent asks the JVM for: on the first OutOfMemoryError (`hprof_on_oom=FILE`,
//! HotSpot's own HeapDumpOnOutOfMemoryError and HeapDumpPath, set through the diagnostic MXBean
//! so the dump is written by the JVM's dumper, not from a callback short of memory) and when
//! the JVM exits (`hprof_on_exit=FILE`, live objects, from the VMDeath callback). The files
//! are standard HPROF, read by `jvmprof heap`.

use crate::say::say;
use crate::state::AgentState;
use crate::sync::lock;
use jvmprof_jvmti::Jni;
use jvmprof_options::Options;
use std::path::{Path, PathBuf};

/// Arms the dumps `options` ask for; `jni` is the current thread's.
pub fn arm(state: &AgentState, jni: &Jni, options: &Options) {
    if let Some(file) = &options.hprof_on_oom {
        let path = absolute(file);
        let result = jni
            .set_vm_option("HeapDumpPath", &path.display().to_string())
            .and_then(|()| jni.set_vm_option("HeapDumpOnOutOfMemoryError", "true"));
        match result {
            Ok(()) => say(&format!(
                "a heap dump will be written to {} on the first OutOfMemoryError",
                path.display()
            )),
            Err(e) => say(&format!(
                "cannot arm the heap dump on OutOfMemoryError: {e}"
            )),
        }
    }
    if let Some(file) = &options.hprof_on_exit {
        *lock(&state.exit_dump) = Some(absolute(file));
    }
}

/// At VMDeath: writes the exit dump, if one was asked for.
pub fn on_exit(state: &AgentState, jni: &Jni) {
    let Some(path) = lock(&state.exit_dump).take() else {
        return;
    };
    if path.exists() {
        // The JVM's dumper refuses to overwrite; an old dump would be mistaken for this one.
        let _ = std::fs::remove_file(&path);
    }
    match jni.dump_heap(&path.display().to_string(), true) {
        Ok(()) => say(&format!("heap dump written to {}", path.display())),
        Err(e) => say(&format!(
            "cannot write the heap dump {}: {e}",
            path.display()
        )),
    }
}

fn absolute(file: &Path) -> PathBuf {
    std::path::absolute(file).unwrap_or_else(|_| file.to_path_buf())
}
