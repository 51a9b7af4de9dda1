//! The one error type: which class, which byte offset, what is wrong.

use std::fmt;

/// A malformed or unsupported class file, or a rewrite that cannot be done.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    /// The class's internal name, or `<unknown>` if it was not read yet.
    pub class: String,
    /// Byte offset in the class file (or in the code array for layout errors).
    pub offset: usize,
    /// What is wrong.
    pub what: String,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "class {}: at offset {}: {}",
            self.class, self.offset, self.what
        )
    }
}

impl std::error::Error for Error {}

/// An error not yet tied to a class name (filled in by the caller).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RawError {
    pub offset: usize,
    pub what: String,
}

impl RawError {
    pub fn new(offset: usize, what: impl Into<String>) -> Self {
        RawError {
            offset,
            what: what.into(),
        }
    }
    pub fn in_class(self, class: &str) -> Error {
        Error {
            class: class.to_string(),
            offset: self.offset,
            what: self.what,
        }
    }
}

pub(crate) type RawResult<T> = std::result::Result<T, RawError>;

/// Result with [`Error`].
pub type Result<T> = std::result::Result<T, Error>;
