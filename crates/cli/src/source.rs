//! A run's data: a synthetic task or a prepared corpus, its tokenizer, the training batches
//! and the fixed held-out batches of every evaluation.

use anyhow::{Context, Result};
use data::{Batch, BatchSource, Corpus, Split, TaskSampler, TextSampler, Tokenizer, TokenizerKind};
use models::DataConfig;
use std::sync::Arc;

/// Held-out task batches come from a seed no training run uses.
const HELD_OUT_SALT: u64 = 0x5EED_0FE7_A1D0_0075;

pub struct Data {
    pub vocab: usize,
    /// "task copy" or "corpus data/shakespeare-gpt2 (gpt2, 1.2M train tokens)".
    pub describe: String,
    kind: Kind,
}

enum Kind {
    Task(data::Task),
    Text(Arc<Corpus>),
}

pub fn open(cfg: &DataConfig) -> Result<Data> {
    Ok(match cfg {
        DataConfig::Task { task, .. } => Data {
            vocab: data::ByteTokenizer::VOCAB,
            describe: format!("task {task}"),
            kind: Kind::Task(*task),
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
                kind: Kind::Text(Arc::new(corpus)),
            }
        }
    })
}

/// The tokenizer a run's config names, without opening its corpus.
pub fn tokenizer(cfg: &DataConfig) -> Result<Tokenizer> {
    let kind = match cfg {
        DataConfig::Task { .. } => TokenizerKind::Bytes,
        DataConfig::Text { tokenizer, .. } => *tokenizer,
    };
    Ok(Tokenizer::new(kind)?)
}

impl Data {
    /// The training batches: batch k is a function of (seed, k) alone.
    pub fn train(&self, b: usize, t: usize, seed: u64) -> Result<BatchSource> {
        Ok(match &self.kind {
            Kind::Task(task) => BatchSource::Task(TaskSampler::new(*task, b, t, seed)?),
            Kind::Text(corpus) => BatchSource::Text(TextSampler::new(corpus.clone(), Split::Train, b, t, seed)?),
        })
    }

    /// `m` held-out batches, the same at every evaluation of the run and of `resmem eval`.
    pub fn held_out(&self, b: usize, t: usize, seed: u64, m: usize) -> Result<Vec<Batch>> {
        Ok(match &self.kind {
            Kind::Task(task) => {
                let sampler = TaskSampler::new(*task, b, t, seed ^ HELD_OUT_SALT)?;
                (0..m as u64).map(|k| sampler.batch(k)).collect()
            }
            Kind::Text(corpus) => TextSampler::new(corpus.clone(), Split::Val, b, t, seed)?.fixed_batches(m),
        })
    }
}
