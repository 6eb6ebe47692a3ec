//! A run's data: a synthetic task or a prepared corpus, its tokenizer, the training batches
//! and the fixed held-out batches of every evaluation.

use anyhow::{bail, Context, Result};
use data::{Batch, BatchSource, Corpus, DataSource, Tokenizer};
use models::DataConfig;
use safetensors::{Dtype, SafeTensors};
use std::path::Path;
use std::sync::Arc;

pub struct Data {
    pub vocab: usize,
    /// "task copy" or "corpus data/shakespeare-gpt2 (gpt2, 1.2M train tokens)".
    pub describe: String,
    source: DataSource,
}

pub fn open(cfg: &DataConfig) -> Result<Data> {
    Ok(match cfg {
        DataConfig::Task { task, .. } => Data {
            vocab: data::ByteTokenizer::VOCAB,
            describe: format!("task {task}"),
            source: DataSource::Task(*task),
        },
        DataConfig::Text { path, tokenizer, .. } => {
            let corpus = Corpus::open(path).with_context(|| format!("cannot use the corpus {}", path.display()))?;
            if corpus.meta.tokenizer != *tokenizer {
                anyhow::bail!(
                    "the corpus {} was prepared with the {} tokenizer, but the run config says {}",
                    path.display(),
                    corpus.meta.tokenizer,
                    tokenizer
                );
            }
            Data {
                vocab: corpus.meta.vocab,
                describe: format!(
                    "corpus {} ({}, {} train and {} validation tokens)",
                    path.display(),
                    corpus.meta.tokenizer,
                    corpus.meta.train_tokens,
                    corpus.meta.val_tokens
                ),
                source: DataSource::Text(Arc::new(corpus)),
            }
        }
        DataConfig::Tokens {
            path,
            tokenizer,
            seq_len,
            ..
        } => {
            let (tokens, width) = read_rows(path)?;
            let vocab = Tokenizer::new(*tokenizer)?.vocab();
            if let Some(bad) = tokens.iter().find(|&&t| t as usize >= vocab) {
                bail!(
                    "{} holds the token {bad}, outside the {tokenizer} vocabulary of {vocab}",
                    path.display()
                );
            }
            if width != seq_len + 1 {
                bail!(
                    "{} holds rows of {width} tokens, but the run config says seq_len = {seq_len} (rows of {})",
                    path.display(),
                    seq_len + 1
                );
            }
            Data {
                vocab,
                describe: format!("{} rows of {width} tokens in {}", tokens.len() / width, path.display()),
                source: DataSource::Rows { tokens, width },
            }
        }
    })
}

/// The tensor `tokens` of a safetensors file: (rows, T + 1) integers of any width.
pub fn read_rows(path: &Path) -> Result<(Vec<u32>, usize)> {
    let bytes = data::read_file(path).with_context(|| format!("cannot read the token file {}", path.display()))?;
    let file = SafeTensors::deserialize(&bytes)
        .map_err(|e| anyhow::anyhow!("{} is not a safetensors file ({e})", path.display()))?;
    let t = file.tensor("tokens").map_err(|_| {
        anyhow::anyhow!(
            "{} has no tensor named `tokens` (rows of T + 1 token ids)",
            path.display()
        )
    })?;
    let &[rows, width] = t.shape() else {
        bail!(
            "`tokens` in {} has shape {:?}; it must be (rows, T + 1)",
            path.display(),
            t.shape()
        );
    };
    let d = t.data();
    let ids: Vec<i64> = match t.dtype() {
        Dtype::I32 => d
            .chunks_exact(4)
            .map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]).into())
            .collect(),
        Dtype::U32 => d
            .chunks_exact(4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]).into())
            .collect(),
        Dtype::I64 => d
            .chunks_exact(8)
            .map(|b| i64::from_le_bytes(b.try_into().expect("8 bytes")))
            .collect(),
        Dtype::U16 => d
            .chunks_exact(2)
            .map(|b| u16::from_le_bytes([b[0], b[1]]).into())
            .collect(),
        other => bail!(
            "`tokens` in {} is {other:?}; token ids must be integers",
            path.display()
        ),
    };
    let tokens = ids
        .iter()
        .map(|&id| u32::try_from(id).map_err(|_| anyhow::anyhow!("{} holds the token id {id}", path.display())))
        .collect::<Result<Vec<u32>>>()?;
    anyhow::ensure!(rows > 0, "{} holds no token rows", path.display());
    anyhow::ensure!(
        width >= 2,
        "{} holds rows of {width} tokens; each row must be a window of T ≥ 1 tokens and the token after it \
         (T + 1 ≥ 2)",
        path.display()
    );
    Ok((tokens, width))
}

/// The tokenizer a run's config names, without opening its corpus.
pub fn tokenizer(cfg: &DataConfig) -> Result<Tokenizer> {
    Ok(Tokenizer::new(cfg.tokenizer())?)
}

impl Data {
    /// The training batches: batch k is a function of (seed, k) alone.
    pub fn train(&self, b: usize, t: usize, seed: u64) -> Result<BatchSource> {
        Ok(self.source.train(b, t, seed)?)
    }

    /// `m` held-out batches, the same at every evaluation of the run and of `resmem eval`.
    pub fn held_out(&self, b: usize, t: usize, seed: u64, m: usize) -> Result<Vec<Batch>> {
        Ok(self.source.held_out(b, t, seed, m)?)
    }

    /// Every held-out window of one slice once: where a sweep tunes, or decides.
    pub fn slice_batches(&self, b: usize, t: usize, seed: u64, slice: data::EvalSlice) -> Result<Vec<Batch>> {
        Ok(self.source.slice_batches(b, t, seed, slice)?)
    }
}
