//! The one error type of the heap crate: every message names the record and the byte offset.

use std::io;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("I/O error: {0}")]
    Io(#[from] io::Error),
    /// The file does not start with an HPROF header.
    #[error("not an HPROF heap dump: {0}")]
    NotHprof(String),
    /// The file ends inside a record.
    #[error("truncated heap dump: the file ends inside {record} at byte offset {offset}")]
    Truncated { record: &'static str, offset: u64 },
    /// A record that does not decode.
    #[error("corrupt heap dump: {record} at byte offset {offset}: {detail}")]
    Corrupt {
        record: &'static str,
        offset: u64,
        detail: String,
    },
    /// The dump is well formed but holds no heap (no HEAP DUMP records).
    #[error("the file holds no heap dump records")]
    NoHeap,
    /// A temporary file (where arrays wait while a step does not need them) failed.
    #[error("cannot use a temporary file in {dir} (set TMPDIR to another directory): {source}")]
    Spill {
        dir: std::path::PathBuf,
        source: io::Error,
    },
}

pub type Result<T> = std::result::Result<T, Error>;
