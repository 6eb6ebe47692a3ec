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
