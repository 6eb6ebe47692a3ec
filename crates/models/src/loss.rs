//! Where every model ends: logits = W_U · y from its last features y (Norm(X), or the RMT's
//! retrievals of it) → per-row cross-entropy (with the z-loss in the gradient) → the mean over
//! the counted targets.

use crate::batch::BatchTensors;
use crate::memory::{values, LOGITS, LOGIT_GRADIENTS};
use engine::{Backend, CrossEntropyDims, MatmulDims};

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

/// logits = W_U · y over `width` features a row, then the loss: the unit that ends every model.
pub struct Unembedding<B: Backend> {
    pub loss: LossHead<B>,
    /// (BT, V); None for inference.
    dlogits: Option<B::Tensor>,
    rows: usize,
    vocab: usize,
    width: usize,
}

impl<B: Backend> Unembedding<B> {
    /// `trainable` allocates the logits' gradient too.
    pub fn new(be: &B, rows: usize, vocab: usize, width: usize, z_loss: f32, trainable: bool) -> engine::Result<Self> {
        Ok(Self {
            loss: LossHead::new(be, rows, vocab, z_loss)?,
            dlogits: trainable
                .then(|| be.zeros(LOGIT_GRADIENTS, values(&[rows, vocab])))
                .transpose()?,
            rows,
            vocab,
            width,
        })
    }

    /// The logits of `y` and their loss on `batch`.
    pub fn forward(&self, be: &B, y: &B::Tensor, w_u: &B::Tensor, batch: &BatchTensors<B>) {
        self.logits(be, y, w_u);
        self.loss.forward(be, batch);
    }

    /// logits = W_U · y, without the loss.
    pub fn logits(&self, be: &B, y: &B::Tensor, w_u: &B::Tensor) {
        let d = MatmulDims::new(self.rows, self.vocab, self.width).trans_b();
        be.matmul(&self.loss.logits, y, w_u, d);
    }

    /// W_U's gradient and dy (written) from the loss; nothing on a model built for inference.
    /// From the loss, or from `seed`, a logit gradient an intervention gives in its place.
    #[allow(clippy::too_many_arguments)]
    pub fn backward(
        &self,
        be: &B,
        dy: &B::Tensor,
        dw_u: &B::Tensor,
        y: &B::Tensor,
        w_u: &B::Tensor,
        batch: &BatchTensors<B>,
        seed: Option<&B::Tensor>,
    ) {
        let Some(dlogits) = &self.dlogits else {
            return;
        };
        let (bt, v, width) = (self.rows, self.vocab, self.width);
        let dlogits = match seed {
            Some(seed) => seed,
            None => {
                self.loss.backward(be, dlogits, batch);
                dlogits
            }
        };
        be.matmul(dw_u, dlogits, y, MatmulDims::new(v, width, bt).trans_a());
        be.matmul(dy, dlogits, w_u, MatmulDims::new(bt, width, v));
    }
}
