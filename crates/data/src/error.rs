//! Every error names the file or value at fault and says what to do about it.

use std::path::PathBuf;

/// The command that writes a prepared corpus, for messages that point the user at it.
pub const PREPARE_HINT: &str =
    "re-create it with `resmem data prepare --text <files> --out <dir>` (or `cargo xtask corpus` for Shakespeare)";

#[derive(Debug, thiserror::Error)]
pub enum DataError {
    /// A file could not be read, written or listed.
    #[error("could not {action} `{}`: {source}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("`{}` is not UTF-8 text (first bad byte at offset {offset}); convert it (e.g. with iconv) or leave it out of --text", path.display())]
    NotUtf8 { path: PathBuf, offset: usize },
    /// A prepared corpus file that fails validation.
    #[error("`{}` is corrupt or truncated: {reason}; {PREPARE_HINT}", path.display())]
    Corrupt { path: PathBuf, reason: String },
    #[error("there is no prepared corpus at `{}` ({} is missing); create one with `resmem data prepare --text <files> --out {}` (or `cargo xtask corpus` for Shakespeare)", dir.display(), file, dir.display())]
    Missing { dir: PathBuf, file: &'static str },
    /// A bad argument: the message says which and what is allowed.
    #[error("{0}")]
    Invalid(String),
    #[error("the {kind} tokenizer is unavailable: {reason}")]
    Tokenizer { kind: &'static str, reason: String },
}

#[cfg(feature = "text")]
impl DataError {
    pub(crate) fn io(action: &'static str, path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> DataError {
        let path = path.into();
        move |source| DataError::Io { action, path, source }
    }

    pub(crate) fn corrupt(path: impl Into<PathBuf>, reason: impl Into<String>) -> DataError {
        DataError::Corrupt {
            path: path.into(),
            reason: reason.into(),
        }
    }
}
