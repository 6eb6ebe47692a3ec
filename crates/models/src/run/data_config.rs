//! The data part of a run config: where the batches come from (a synthetic task, a prepared
//! corpus, or fixed windows of a safetensors file) and T, the tokens of a training window.

use crate::{ModelError, Result};
use data::{Task, TokenizerKind};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// Where the batches come from.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "source", rename_all = "lowercase", deny_unknown_fields)]
pub enum DataConfig {
    /// A synthetic task on bytes, needing no files.
    Task {
        task: Task,
        /// T: tokens per training window.
        seq_len: usize,
    },
    /// A corpus written by `resmem data prepare`: DIR/train.bin, val.bin and meta.json.
    Text {
        path: PathBuf,
        /// The tokenizer the corpus was prepared with; it decodes samples.
        tokenizer: TokenizerKind,
        /// T: tokens per training window (at most the model's context length N).
        seq_len: usize,
        /// Mask attention across documents: the tokenizer's end-of-text token starts one
        /// (SPEC §2a). A learned position table still counts from the window's start.
        #[serde(default, skip_serializing_if = "is_false")]
        doc_mask: bool,
    },
    /// Fixed windows of T + 1 tokens: the tensor `tokens` (rows, T + 1) of a safetensors file,
    /// e.g. the batch the official RMT code's outputs were computed on. Training cycles through
    /// them; evaluation reads them in order.
    Tokens {
        path: PathBuf,
        tokenizer: TokenizerKind,
        /// T, one less than the rows' width.
        seq_len: usize,
        #[serde(default, skip_serializing_if = "is_false")]
        doc_mask: bool,
    },
}

fn is_false(b: &bool) -> bool {
    !b
}

impl DataConfig {
    /// The tokenizer of a text or token corpus whose documents are masked apart.
    fn doc_masked(&self) -> Option<TokenizerKind> {
        match self {
            DataConfig::Text {
                tokenizer,
                doc_mask: true,
                ..
            }
            | DataConfig::Tokens {
                tokenizer,
                doc_mask: true,
                ..
            } => Some(*tokenizer),
            _ => None,
        }
    }

    /// The token that starts a document when documents are masked apart.
    pub fn separator(&self) -> Option<u32> {
        self.doc_masked()?.end_of_text()
    }

    pub(super) fn validate(&self) -> Result<()> {
        match self.doc_masked() {
            Some(tokenizer) if tokenizer.end_of_text().is_none() => Err(ModelError::Config(format!(
                "doc_mask needs a tokenizer with a document separator; the {tokenizer} tokenizer has none (gpt2 \
                     has <|endoftext|>)"
            ))),
            _ => Ok(()),
        }
    }

    /// The tokenizer its tokens are in: a task's are bytes.
    pub fn tokenizer(&self) -> TokenizerKind {
        match self {
            DataConfig::Task { .. } => TokenizerKind::Bytes,
            DataConfig::Text { tokenizer, .. } | DataConfig::Tokens { tokenizer, .. } => *tokenizer,
        }
    }

    /// T
    pub fn seq_len(&self) -> usize {
        match self {
            DataConfig::Task { seq_len, .. }
            | DataConfig::Text { seq_len, .. }
            | DataConfig::Tokens { seq_len, .. } => *seq_len,
        }
    }
}
