//! Where every model ends: logits → per-row cross-entropy (with the z-loss in the gradient) →
//! the mean over the counted targets.

use crate::batch::BatchTensors;
use engine::{Backend, CrossEntropyDims};

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
            logits: be.zeros("logits", rows * vocab)?,
            losses: be.zeros("per-token losses", rows)?,
            lse: be.zeros("log Z", rows)?,
            loss: be.zeros("loss", 1)?,
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
