//! The one error type of this crate: every reader says which format and what is wrong.

use std::io;
use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("I/O error: {0}")]
    Io(#[from] io::Error),
    /// The magic header is missing: some other kind of file.
    #[error("not a jvmprof file (no JVMPROF magic header)")]
    NotJvmprof,
    /// A native file written by a newer (or unknown) format version.
    #[error(
        "jvmprof format version {found} not supported (this build reads versions 1 to {supported})"
    )]
    UnsupportedVersion { found: u16, supported: u16 },
    /// The data ends before the format says it should.
    #[error("truncated {format} file: {detail}")]
    Truncated {
        format: &'static str,
        detail: String,
    },
    /// The data is complete but does not decode, or decodes to an inconsistent profile.
    #[error("invalid {format} data: {detail}")]
    Invalid {
        format: &'static str,
        detail: String,
    },
    /// No reader or writer for this name, extension or content.
    #[error("unknown format: {0}")]
    UnknownFormat(String),
    /// The profile cannot be written as asked (e.g. a metric it does not carry).
    #[error("cannot export: {0}")]
    Export(String),
    /// An error about a named file.
    #[error("{}: {source}", path.display())]
    File { path: PathBuf, source: Box<Error> },
}

impl Error {
    pub(crate) fn invalid(format: &'static str, detail: impl Into<String>) -> Error {
        Error::Invalid {
            format,
            detail: detail.into(),
        }
    }

    pub(crate) fn truncated(format: &'static str, detail: impl Into<String>) -> Error {
        Error::Truncated {
            format,
            detail: detail.into(),
        }
    }

    /// Wraps this error with the file it is about.
    pub fn in_file(self, path: impl Into<PathBuf>) -> Error {
        Error::File {
            path: path.into(),
            source: Box::new(self),
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
