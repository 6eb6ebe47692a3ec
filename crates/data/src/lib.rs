//! Tokenizers, synthetic tasks, prepared text corpora and batching. Everything here is plain
//! host data; the models upload it.

#[cfg(feature = "text")]
pub mod corpus;
pub mod error;
pub mod sampler;
pub mod tasks;
pub mod tokenizer;

#[cfg(feature = "text")]
pub use corpus::{prepare, token_bytes_for, val_count, Corpus, Meta, Source, TokenFile};
pub use error::DataError;
#[cfg(feature = "text")]
pub use sampler::TextSampler;
pub use sampler::{step_seed, BatchSource, DataSource, EvalSlice, FixedRows, Split, TUNING_SHARE};
pub use tasks::{Batch, Task, TaskSampler};
pub use tokenizer::{ByteTokenizer, Tokenizer, TokenizerKind};

/// A target that the loss does not count (e.g. the random prompt of a copy task).
pub const IGNORE: u32 = u32::MAX;

/// `std::fs::read`, refusing what [`check_input`] refuses.
pub fn read_file(path: &std::path::Path) -> std::io::Result<Vec<u8>> {
    check_input(path)?;
    std::fs::read(path)
}

/// Refuses, before it is opened, an input that would never end or never answer: a character or
/// block device (`/dev/zero`, `/dev/urandom`), read until memory runs out; a named pipe
/// (`mkfifo`), whose open waits for a writer forever; a socket. A pipe the shell passes as
/// `/dev/fd/N` (`--config <(…)`) is read: its writer is already there.
pub fn check_input(path: &std::path::Path) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        let kind = std::fs::metadata(path)?.file_type();
        let passed = path.starts_with("/dev/fd") || path.starts_with("/proc/self/fd");
        let refused = match () {
            _ if kind.is_char_device() || kind.is_block_device() => Some("a device"),
            _ if kind.is_fifo() && !passed => Some("a named pipe, whose open would wait for a writer"),
            _ if kind.is_socket() => Some("a socket"),
            _ => None,
        };
        if let Some(what) = refused {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("it is {what}, not a file; give a regular file"),
            ));
        }
    }
    #[cfg(not(unix))]
    let _ = path;
    Ok(())
}

/// [`read_text`] of a file a person writes (a config, an experiment), refusing one of more than
/// `limit` bytes by its size instead of reading it all: a 3 GB file given as a config once took
/// 20 GB to parse before it failed. Pipes are read up to the limit.
pub fn read_small_text(path: &std::path::Path, limit: u64) -> std::io::Result<String> {
    use std::io::Read;
    check_input(path)?;
    let mut bytes = Vec::new();
    std::fs::File::open(path)?.take(limit + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!(
                "it is larger than {} KiB, far more than any config or experiment file",
                limit / 1024
            ),
        ));
    }
    String::from_utf8(bytes).map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidData, "it is not UTF-8 text"))
}

/// [`read_file`] as UTF-8 text.
pub fn read_text(path: &std::path::Path) -> std::io::Result<String> {
    String::from_utf8(read_file(path)?)
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidData, "it is not UTF-8 text"))
}
