//! A batch on the device: the buffers a step reads, written in place every step.

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
}

impl<B: Backend> BatchTensors<B> {
    pub fn new(be: &B, b: usize, t: usize, vocab: usize) -> engine::Result<Self> {
        Ok(Self {
            b,
            t,
            vocab,
            tokens: be.index("tokens", b * t)?,
            targets: be.index("targets", b * t)?,
            bucket_rows: be.index("token buckets", b * t)?,
            bucket_start: be.index("token bucket starts", vocab + 1)?,
            loss_scale: be.zeros("loss scale", 1)?,
        })
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
        Ok(())
    }
}
