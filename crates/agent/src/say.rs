//! The agent's messages to the user: one `jvmprof: ...` line on the target's stderr, and the same
//! line in the log file of the session's owner (`log=`). Engines, JVMTI callbacks and the
//! natives the Java runtime calls all say things, and none of them holds the agent state, so the
//! log file's path is this module's own (set when a session starts).

use crate::sync::lock;
use std::path::PathBuf;
use std::sync::Mutex;

/// The file the current session's owner reads the agent's messages from (`log=`).
static LOG: Mutex<Option<PathBuf>> = Mutex::new(None);

/// Sets (or clears) the log file of the session that starts.
pub fn set_log(path: Option<PathBuf>) {
    *lock(&LOG) = path;
}

/// One `jvmprof: ...` line on the target's stderr, and in the session owner's log file.
pub fn say(msg: &str) {
    eprintln!("jvmprof: {msg}");
    let log = lock(&LOG).clone();
    if let Some(path) = log {
        use std::io::Write;
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
        {
            let _ = writeln!(f, "jvmprof: {msg}");
        }
    }
}
