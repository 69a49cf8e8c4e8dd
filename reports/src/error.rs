//! The crate's error type.

use std::io;
use std::path::{Path, PathBuf};

/// Result alias used throughout the crate.
pub type Result<T> = std::result::Result<T, Error>;

/// Everything that can go wrong while writing or reading a report file.
///
/// Each variant names the path involved, and its message reads like
/// `cannot write runs/x/metrics.csv: Permission denied (os error 13)`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A file-system operation failed.
    #[error("cannot {action} {}: {source}", path.display())]
    Io {
        /// What was being done: `create`, `write`, `read`, `rename`, ...
        action: &'static str,
        /// The file or directory involved.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
    /// The CSV layer failed for a reason other than I/O (e.g. invalid UTF-8).
    #[error("cannot {action} {}: {source}", path.display())]
    Csv {
        /// What was being done.
        action: &'static str,
        /// The CSV file involved.
        path: PathBuf,
        /// The underlying error.
        source: csv::Error,
    },
    /// A value could not be serialized to JSON.
    #[error("cannot serialize {}: {source}", path.display())]
    Json {
        /// The JSON file that was to be written.
        path: PathBuf,
        /// The underlying error.
        source: serde_json::Error,
    },
    /// A file was read but its content is not what this crate writes.
    #[error("{}:{line}: {message}", path.display())]
    Format {
        /// The file that was read.
        path: PathBuf,
        /// 1-based line number of the offending line.
        line: u64,
        /// What is wrong with it.
        message: String,
    },
    /// A path given to read is not what was expected (e.g. not a run directory).
    #[error("{}: {message}", path.display())]
    Input {
        /// The path.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },
    /// Drawing a plot failed.
    #[error("cannot draw {}: {message}", path.display())]
    Plot {
        /// The image file that was being drawn.
        path: PathBuf,
        /// The drawing backend's error, as text.
        message: String,
    },
}

impl Error {
    /// The path the error is about.
    pub fn path(&self) -> &Path {
        match self {
            Error::Io { path, .. }
            | Error::Csv { path, .. }
            | Error::Json { path, .. }
            | Error::Format { path, .. }
            | Error::Input { path, .. }
            | Error::Plot { path, .. } => path,
        }
    }

    /// Whether the error is about the input (a path that is missing or is not a run directory,
    /// a file that cannot be read or is malformed) rather than about writing the output.
    pub fn is_input(&self) -> bool {
        match self {
            Error::Format { .. } | Error::Input { .. } => true,
            Error::Io { action, .. } | Error::Csv { action, .. } => *action == "read",
            Error::Json { .. } | Error::Plot { .. } => false,
        }
    }

    pub(crate) fn io(action: &'static str, path: &Path, source: io::Error) -> Self {
        Error::Io {
            action,
            path: path.to_path_buf(),
            source,
        }
    }

    /// Wraps a CSV error, unwrapping it to [`Error::Io`] when it is an I/O error.
    pub(crate) fn csv(action: &'static str, path: &Path, source: csv::Error) -> Self {
        if !source.is_io_error() {
            return Error::Csv {
                action,
                path: path.to_path_buf(),
                source,
            };
        }
        match source.into_kind() {
            csv::ErrorKind::Io(source) => Error::io(action, path, source),
            _ => unreachable!("csv::Error::is_io_error() implies ErrorKind::Io"),
        }
    }
}
