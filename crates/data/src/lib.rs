//! Tokenizers, synthetic tasks and batching. Everything here is plain host data; the models
//! upload it.

pub mod tasks;
pub mod tokenizer;

pub use tasks::{Batch, Task, TaskSampler};
pub use tokenizer::ByteTokenizer;

/// A target that the loss does not count (e.g. the random prompt of a copy task).
pub const IGNORE: u32 = u32::MAX;
