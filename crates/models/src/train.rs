//! The training step: upload a batch, write the step's schedule values, run forward, backward
//! and AdamW as one recorded plan, and read back only what is asked for.

use crate::batch::BatchTensors;
use crate::checkpoint::TrainState;
use crate::interventions::{EditPoint, Edits, Group, ReadOut};
use crate::loss::LossHead;
use crate::observe::{Inside, Observe};
use crate::optim::AdamW;
use crate::params::ParamStore;
use crate::probes::Measured;
use crate::{ModelError, Result, TrainConfig};
use data::Batch;
use engine::Backend;

/// What every architecture provides to the trainer.
pub trait LanguageModel<B: Backend> {
    fn store(&self) -> &ParamStore<B>;
    /// (B, T) the model's buffers were built for.
    fn batch_shape(&self) -> (usize, usize);
    fn vocab(&self) -> usize;
    /// Computes the logits and the mean loss of `batch`, and what `observe` asks for.
    fn forward(&self, be: &B, batch: &BatchTensors<B>, observe: Observe);
    /// Fills every parameter gradient, and what `observe` asks for; `forward` on the same batch
    /// must come first. Does nothing on a model that is not `trainable`.
    fn backward(&self, be: &B, batch: &BatchTensors<B>, observe: Observe);
    /// Whether the model has gradients and backward scratch (built by `new`, not `inference`).
    fn trainable(&self) -> bool {
        self.store().trainable()
    }
    /// The logits, per-row losses and log Z, and the mean loss of the last forward.
    fn head(&self) -> &LossHead<B>;
    /// What viewers may read after a forward.
    fn inside(&self) -> Inside<'_, B>;
    /// Writes into `head().logits` what the model's head (the final norm, the RMT's
    /// unembedding retrieval, W_U) reads from the residual `x`; the forward ends with it.
    fn read_out(&self, be: &B, x: &B::Tensor);
    /// Where an intervention may edit the forward, in forward order, with each point's tensor
    /// (`interventions`).
    fn edit_points(&self) -> Vec<EditPoint<'_, B>>;
    /// What the residual's groups of columns are: an RMT's key slots, hyper-connections'
    /// streams, or none.
    fn residual_groups(&self) -> Option<Group>;
    /// The edits the next forwards apply at the points; None (what training runs): none, and
    /// no launch for them.
    fn edits(&mut self) -> &mut Option<Edits<B>>;
    /// The read-out as a linear map of the last residual once the final norm's scale is frozen
    /// (direct logit attribution); None where it is not linear.
    fn linear_read_out(&self) -> Option<ReadOut>;
    /// The logit lens: after a forward, the head read from the residual at `depth`, an index
    /// into `inside().residuals` (past the last, the last). The last depth gives the forward's
    /// own logits. It overwrites the head's buffers: run a forward again before a backward.
    fn lens(&self, be: &B, depth: usize) {
        let residuals = self.inside().residuals;
        if let Some(at) = residuals.get(depth).or(residuals.last()) {
            self.read_out(be, at.tensor);
        }
    }
}

/// A boxed model is a model, so a page or a tool can pick the architecture at run time.
impl<B: Backend, M: LanguageModel<B> + ?Sized> LanguageModel<B> for Box<M> {
    fn store(&self) -> &ParamStore<B> {
        (**self).store()
    }
    fn batch_shape(&self) -> (usize, usize) {
        (**self).batch_shape()
    }
    fn vocab(&self) -> usize {
        (**self).vocab()
    }
    fn forward(&self, be: &B, batch: &BatchTensors<B>, observe: Observe) {
        (**self).forward(be, batch, observe)
    }
    fn backward(&self, be: &B, batch: &BatchTensors<B>, observe: Observe) {
        (**self).backward(be, batch, observe)
    }
    fn trainable(&self) -> bool {
        (**self).trainable()
    }
    fn head(&self) -> &LossHead<B> {
        (**self).head()
    }
    fn inside(&self) -> Inside<'_, B> {
        (**self).inside()
    }
    fn read_out(&self, be: &B, x: &B::Tensor) {
        (**self).read_out(be, x)
    }
    fn lens(&self, be: &B, depth: usize) {
        (**self).lens(be, depth)
    }
    fn edit_points(&self) -> Vec<EditPoint<'_, B>> {
        (**self).edit_points()
    }
    fn residual_groups(&self) -> Option<Group> {
        (**self).residual_groups()
    }
    fn edits(&mut self) -> &mut Option<Edits<B>> {
        (**self).edits()
    }
    fn linear_read_out(&self) -> Option<ReadOut> {
        (**self).linear_read_out()
    }
}

pub struct Trainer<B: Backend, M> {
    pub model: M,
    pub opt: AdamW<B>,
    pub cfg: TrainConfig,
    /// Steps taken so far.
    pub step: usize,
    /// (1) the sum of the losses since it was last reset, added on the device every step: a NaN
    /// or Inf at any step stays in it, so reading it now and then checks every step without a
    /// readback per step.
    loss_sum: B::Tensor,
    plan: Option<B::Plan>,
    evaluator: Evaluator<B>,
    probe_plan: Option<B::Plan>,
}

impl<B: Backend, M: LanguageModel<B>> Trainer<B, M> {
    pub fn new(be: &B, model: M, cfg: TrainConfig) -> Result<Self> {
        cfg.validate()?;
        if !model.trainable() {
            return Err(ModelError::Config(
                "this model was built for inference only (it has no gradient buffers); build it with `new` to train"
                    .into(),
            ));
        }
        let opt = AdamW::new(be, &cfg, &model.store().layout)?;
        let evaluator = Evaluator::new(be, &model)?;
        Ok(Self {
            model,
            opt,
            cfg,
            step: 0,
            loss_sum: be.zeros("loss sum", 1)?,
            plan: None,
            evaluator,
            probe_plan: None,
        })
    }

    /// One optimisation step on `batch`; returns the learning rate it used. The loss of the
    /// batch (before the update) is then in `model.head().loss`.
    pub fn step(&mut self, be: &B, batch: &Batch) -> Result<f32> {
        self.evaluator.batch.write(be, batch)?;
        self.step += 1;
        let lr = self.opt.prepare(be, self.step);
        let (model, opt, tensors, loss_sum) = (&self.model, &self.opt, &self.evaluator.batch, &self.loss_sum);
        be.record_or_replay(&mut self.plan, || {
            model.forward(be, tensors, Observe::Loss);
            be.add_assign(loss_sum, &model.head().loss);
            model.backward(be, tensors, Observe::Loss);
            opt.update(be, model.store());
        });
        be.flush()?;
        Ok(lr)
    }

    /// The recorded training step, once the first `step` has recorded it: `resmem bench` replays
    /// parts of it to time them.
    pub fn plan(&self) -> Option<&B::Plan> {
        self.plan.as_ref()
    }

    /// The global norm of the last step's gradient, before clipping, read back from the device.
    pub async fn grad_norm(&self, be: &B) -> Result<f32> {
        Ok(be.read(self.opt.grad_sumsq()).await?[0].sqrt())
    }

    /// The loss of the last step's batch, read back from the device.
    pub async fn loss(&self, be: &B) -> Result<f32> {
        Ok(be.read(&self.model.head().loss).await?[0])
    }

    /// The z-loss term of the last step, whose batch was `batch`: the official RMT code
    /// reports the loss plus this.
    pub async fn z_term(&self, be: &B, batch: &Batch) -> Result<f32> {
        Ok(self.model.head().z_term(be, batch).await?)
    }

    /// The sum of the training losses since the last `reset_loss_sum`: non-finite when any of
    /// those steps' losses was.
    pub async fn loss_sum(&self, be: &B) -> Result<f32> {
        Ok(be.read(&self.loss_sum).await?[0])
    }

    pub fn reset_loss_sum(&self, be: &B) {
        be.write(&self.loss_sum, &[0.0]);
    }

    /// Everything a checkpoint needs to continue bit for bit: the step, parameters and moments.
    pub async fn state(&self, be: &B) -> Result<TrainState> {
        let (m, v) = self.opt.moments();
        Ok(TrainState {
            step: self.step as u64,
            params: be.read(&self.model.store().params).await?,
            m: be.read(m).await?,
            v: be.read(v).await?,
        })
    }

    /// Continues from `state`: the next step is `state.step + 1`.
    pub fn restore(&mut self, be: &B, state: &TrainState) -> Result<()> {
        let total = self.model.store().layout.total;
        if [&state.params, &state.m, &state.v].iter().any(|b| b.len() != total) {
            return Err(ModelError::Checkpoint(format!(
                "its buffers do not match this model's {total} values"
            )));
        }
        self.step = usize::try_from(state.step)
            .map_err(|_| ModelError::Checkpoint(format!("its step {} is out of range", state.step)))?;
        let (m, v) = self.opt.moments();
        be.write(&self.model.store().params, &state.params);
        be.write(m, &state.m);
        be.write(v, &state.v);
        Ok(())
    }

    /// Masks attention across documents that `separator` starts, in training and evaluation.
    pub fn mask_documents(&mut self, separator: Option<u32>) {
        self.evaluator.mask_documents(separator);
    }

    /// The mean loss of `batch` under the current parameters, without training.
    pub async fn eval(&mut self, be: &B, batch: &Batch) -> Result<f32> {
        self.evaluator.loss(be, &self.model, batch).await
    }

    /// The mean cross-entropy of `batch` and its z-loss term, without training.
    pub async fn eval_losses(&mut self, be: &B, batch: &Batch) -> Result<(f32, f32)> {
        self.evaluator.losses(be, &self.model, batch).await
    }

    /// Variance ratios of every storage and retrieval on `batch` under the current parameters:
    /// a forward and backward observing `Variance`, in a plan of their own, and no update. None
    /// for models without probe sites.
    pub async fn measure(&mut self, be: &B, batch: &Batch) -> Result<Option<Vec<Measured>>> {
        if self.model.inside().variance.is_none() {
            return Ok(None);
        }
        self.evaluator.batch.write(be, batch)?;
        let (model, tensors) = (&self.model, &self.evaluator.batch);
        be.record_or_replay(&mut self.probe_plan, || {
            model.forward(be, tensors, Observe::Variance);
            model.backward(be, tensors, Observe::Variance);
        });
        be.flush()?;
        match model.inside().variance {
            Some(probes) => Ok(Some(probes.read(be).await?)),
            None => Ok(None),
        }
    }
}

/// Forward passes without training: the loss of held-out batches, or the logits to sample from.
pub struct Evaluator<B: Backend> {
    /// The batch's device buffers; a trainer steps through the same ones.
    batch: BatchTensors<B>,
    plan: Option<B::Plan>,
}

impl<B: Backend> Evaluator<B> {
    pub fn new<M: LanguageModel<B>>(be: &B, model: &M) -> Result<Self> {
        let (b, t) = model.batch_shape();
        Ok(Self {
            batch: BatchTensors::new(be, b, t, model.vocab())?,
            plan: None,
        })
    }

    /// Masks attention across documents that `separator` starts (None: plain causal).
    pub fn mask_documents(&mut self, separator: Option<u32>) {
        self.batch.mask_documents(separator);
    }

    /// Runs the forward of `batch`; its logits are then in `model.head().logits`.
    pub fn forward<M: LanguageModel<B>>(&mut self, be: &B, model: &M, batch: &Batch) -> Result<()> {
        self.batch.write(be, batch)?;
        let tensors = &self.batch;
        be.record_or_replay(&mut self.plan, || model.forward(be, tensors, Observe::Loss));
        be.flush()?;
        Ok(())
    }

    /// The backward of the last `forward`, on its batch: the gradients, and what the model's
    /// held edits capture of them.
    pub fn backward<M: LanguageModel<B>>(&mut self, be: &B, model: &M) -> Result<()> {
        model.backward(be, &self.batch, Observe::Loss);
        be.flush()?;
        Ok(())
    }

    /// The mean loss of `batch` under the model's current parameters.
    pub async fn loss<M: LanguageModel<B>>(&mut self, be: &B, model: &M, batch: &Batch) -> Result<f32> {
        self.forward(be, model, batch)?;
        Ok(be.read(&model.head().loss).await?[0])
    }

    /// The mean cross-entropy of `batch` and its z-loss term (0 when the model has none).
    pub async fn losses<M: LanguageModel<B>>(&mut self, be: &B, model: &M, batch: &Batch) -> Result<(f32, f32)> {
        let ce = self.loss(be, model, batch).await?;
        Ok((ce, model.head().z_term(be, batch).await?))
    }
}
