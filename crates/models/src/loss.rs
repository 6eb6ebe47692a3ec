//! Where every model ends: logits → per-row cross-entropy (with the z-loss in the gradient) →
//! the mean over the counted targets.

use crate::batch::BatchTensors;
use crate::memory::{values, LOGITS};
use engine::{Backend, CrossEntropyDims};

// The data crate marks ignored targets and the engine's loss skips them: one value, checked
// where both crates meet (data does not depend on the engine).
const _: () = assert!(data::IGNORE == engine::ops::cross_entropy::IGNORE);

pub struct LossHead<B: Backend> {
    /// (BT, V)
    pub logits: B::Tensor,
    /// (BT) scale · CE per row, 0 where the target is ignored
    pub losses: B::Tensor,
    /// (BT) log Z per row
    pub lse: B::Tensor,
    /// (1) the mean cross-entropy over the counted targets
    pub loss: B::Tensor,
    dims: CrossEntropyDims,
}

impl<B: Backend> LossHead<B> {
    pub fn new(be: &B, rows: usize, vocab: usize, z_loss: f32) -> engine::Result<Self> {
        Ok(Self {
            logits: be.zeros(LOGITS, values(&[rows, vocab]))?,
            losses: be.zeros("the per-row losses (batch × seq_len)", rows)?,
            lse: be.zeros("log Z per row (batch × seq_len)", rows)?,
            loss: be.zeros("the loss", 1)?,
            dims: CrossEntropyDims {
                rows,
                v: vocab,
                z: z_loss,
            },
        })
    }

    /// The loss of the logits the model has written.
    pub fn forward(&self, be: &B, batch: &BatchTensors<B>) {
        be.cross_entropy_forward(
            &self.losses,
            &self.lse,
            &self.logits,
            &batch.targets,
            &batch.loss_scale,
            self.dims,
        );
        be.sum(&self.loss, &self.losses, false);
    }

    /// The z-loss term of the last forward on `batch`: z·mean (log Z)² over its counted targets.
    /// The loss is the cross-entropy alone; the official RMT code reports CE + this as its loss.
    pub async fn z_term(&self, be: &B, batch: &data::Batch) -> engine::Result<f32> {
        if self.dims.z == 0.0 {
            return Ok(0.0);
        }
        let lse = be.read(&self.lse).await?;
        let (sum, n) = lse
            .iter()
            .zip(&batch.targets)
            .filter(|(_, &t)| t != data::IGNORE)
            .fold((0.0f64, 0usize), |(s, n), (&l, _)| {
                (s + f64::from(l) * f64::from(l), n + 1)
            });
        Ok((f64::from(self.dims.z) * sum / n.max(1) as f64) as f32)
    }

    /// dlogits of the mean CE + z·(log Z)² over the counted targets.
    pub fn backward(&self, be: &B, dlogits: &B::Tensor, batch: &BatchTensors<B>) {
        be.cross_entropy_backward(
            dlogits,
            &self.logits,
            &self.lse,
            &batch.targets,
            &batch.loss_scale,
            self.dims,
        );
    }
}
