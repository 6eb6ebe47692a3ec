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
pub use sampler::{step_seed, BatchSource, DataSource, FixedRows, Split};
pub use tasks::{Batch, Task, TaskSampler};
pub use tokenizer::{ByteTokenizer, Tokenizer, TokenizerKind};

/// A target that the loss does not count (e.g. the random prompt of a copy task).
pub const IGNORE: u32 = u32::MAX;

/// `std::fs::read`, refusing a character or block device (`/dev/full`, `/dev/zero`,
/// `/dev/urandom`), which never ends and would be read until memory runs out. Pipes are read
/// (`--config <(…)`), and so are regular files.
pub fn read_file(path: &std::path::Path) -> std::io::Result<Vec<u8>> {
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
    std::fs::read(path)
}

/// [`read_file`] as UTF-8 text.
pub fn read_text(path: &std::path::Path) -> std::io::Result<String> {
    String::from_utf8(read_file(path)?)
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidData, "it is not UTF-8 text"))
}
