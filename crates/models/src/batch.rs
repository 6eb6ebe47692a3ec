//! A batch on the device: the buffers a step reads, written in place every step.

use crate::memory::values;
use crate::{ModelError, Result};
use data::Batch;
use engine::{Backend, TokenBuckets};

pub struct BatchTensors<B: Backend> {
    pub b: usize,
    pub t: usize,
    pub vocab: usize,
    /// (BT)
    pub tokens: B::Index,
    /// (BT), IGNORE where not counted
    pub targets: B::Index,
    /// (BT) and (V + 1): rows grouped by token for the embedding backward.
    pub bucket_rows: B::Index,
    pub bucket_start: B::Index,
    /// (1): 1 / counted targets, so that the summed per-row losses are the mean.
    pub loss_scale: B::Tensor,
    /// (BT): where each token's document starts in its sequence; attention stays inside it.
    /// All 0 (plain causal attention) unless documents are masked apart.
    pub doc_start: B::Index,
    /// The token that starts a document, when documents are masked apart.
    separator: Option<u32>,
}

impl<B: Backend> BatchTensors<B> {
    pub fn new(be: &B, b: usize, t: usize, vocab: usize) -> engine::Result<Self> {
        Ok(Self {
            b,
            t,
            vocab,
            tokens: be.index("the tokens (batch × seq_len)", values(&[b, t]))?,
            targets: be.index("the targets (batch × seq_len)", values(&[b, t]))?,
            bucket_rows: be.index("the token buckets (batch × seq_len)", values(&[b, t]))?,
            bucket_start: be.index("the token bucket starts (vocab)", vocab.saturating_add(1))?,
            loss_scale: be.zeros("the loss scale", 1)?,
            doc_start: be.index("the document starts (batch × seq_len)", values(&[b, t]))?,
            separator: None,
        })
    }

    /// Masks attention across documents from now on: `separator` (GPT-2's `<|endoftext|>`)
    /// starts a new one, as the official RMT code's BOS does (SPEC §2a). None: plain causal.
    pub fn mask_documents(&mut self, separator: Option<u32>) {
        self.separator = separator;
    }

    /// Uploads `batch`, checking that it fits these buffers and the vocabulary.
    pub fn write(&self, be: &B, batch: &Batch) -> Result<()> {
        if batch.b != self.b || batch.t != self.t {
            return Err(ModelError::Batch(format!(
                "a {}×{} batch for {}×{} buffers",
                batch.b, batch.t, self.b, self.t
            )));
        }
        if let Some(&bad) = batch.inputs.iter().find(|&&t| t as usize >= self.vocab) {
            return Err(ModelError::Batch(format!(
                "token {bad} is outside the vocabulary of {}",
                self.vocab
            )));
        }
        if let Some(&bad) = batch
            .targets
            .iter()
            .find(|&&t| t != data::IGNORE && t as usize >= self.vocab)
        {
            return Err(ModelError::Batch(format!(
                "target {bad} is outside the vocabulary of {}",
                self.vocab
            )));
        }
        let counted = batch.counted();
        if counted == 0 {
            return Err(ModelError::Batch(
                "no target in the batch is counted by the loss".into(),
            ));
        }
        let buckets = TokenBuckets::new(&batch.inputs, self.vocab);
        be.write_index(&self.tokens, &batch.inputs);
        be.write_index(&self.targets, &batch.targets);
        be.write_index(&self.bucket_rows, &buckets.rows);
        be.write_index(&self.bucket_start, &buckets.start);
        be.write(&self.loss_scale, &[1.0 / counted as f32]);
        be.write_index(&self.doc_start, &document_starts(&batch.inputs, self.t, self.separator));
        Ok(())
    }
}

/// For every token of `b` sequences of `t`, the position in its sequence of the first token of
/// its document: the last `separator` at or before it, else 0.
pub fn document_starts(inputs: &[u32], t: usize, separator: Option<u32>) -> Vec<u32> {
    let mut starts = vec![0u32; inputs.len()];
    if let Some(sep) = separator {
        for (seq, out) in inputs.chunks(t).zip(starts.chunks_mut(t)) {
            let mut start = 0;
            for (i, (&tok, s)) in seq.iter().zip(out.iter_mut()).enumerate() {
                if tok == sep {
                    start = i as u32;
                }
                *s = start;
            }
        }
    }
    starts
}

#[cfg(test)]
mod tests {
    use super::document_starts;

    #[test]
    fn a_separator_starts_a_document_in_its_own_sequence() {
        let inputs = [5, 9, 1, 9, 9, 2, /* next sequence */ 3, 4, 9, 1, 2, 9];
        assert_eq!(
            document_starts(&inputs, 6, Some(9)),
            [0, 1, 1, 3, 4, 4, 0, 0, 2, 2, 2, 5]
        );
        assert_eq!(document_starts(&inputs, 6, None), [0; 12]);
    }
}
