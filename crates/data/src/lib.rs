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

/// `std::fs::read`, refusing a character or block device (`/dev/full`, `/dev/zero`,
/// `/dev/urandom`), which never ends and would be read until memory runs out. Pipes are read
/// (`--config <(…)`), and so are regular files.
pub fn read_file(path: &std::path::Path) -> std::io::Result<Vec<u8>> {
    read_file_checks(path)?;
    std::fs::read(path)
}

/// What [`read_file`] refuses before it opens a path.
fn read_file_checks(path: &std::path::Path) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        let kind = std::fs::metadata(path)?.file_type();
        if kind.is_char_device() || kind.is_block_device() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "it is a device, not a file",
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
    read_file_checks(path)?;
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
