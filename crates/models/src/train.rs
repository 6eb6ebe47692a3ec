//! The training step: upload a batch, write the step's schedule values, run forward, backward
//! and AdamW as one recorded plan, and read back only what is asked for.

use crate::batch::BatchTensors;
use crate::buckets::HashedLayer;
use crate::loss::LossHead;
use crate::optim::AdamW;
use crate::params::ParamStore;
use crate::probes::{Measured, Probes};
use crate::{Result, TrainConfig};
use data::Batch;
use engine::Backend;

/// What every architecture provides to the trainer.
pub trait LanguageModel<B: Backend> {
    fn store(&self) -> &ParamStore<B>;
    /// (B, T) the model's buffers were built for.
    fn batch_shape(&self) -> (usize, usize);
    fn vocab(&self) -> usize;
    /// Computes the logits and the mean loss of `batch`.
    fn forward(&self, be: &B, batch: &BatchTensors<B>);
    /// Fills every parameter gradient; `forward` on the same batch must come first. Does
    /// nothing on a model that is not `trainable`.
    fn backward(&self, be: &B, batch: &BatchTensors<B>);
    /// Whether the model has gradients and backward scratch (built by `new`, not `inference`).
    fn trainable(&self) -> bool {
        self.store().trainable()
    }
    /// The logits, per-row losses and log Z, and the mean loss of the last forward.
    fn head(&self) -> &LossHead<B>;
    /// The variance hooks of the model's storages and retrievals, for models that have them.
    fn probes(&self) -> Option<&Probes<B>> {
        None
    }
    /// The hashed layers whose bucket use can be read after a forward (MemoryFormer's).
    fn hashed_layers(&self) -> Vec<HashedLayer<'_, B>> {
        vec![]
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
    fn forward(&self, be: &B, batch: &BatchTensors<B>) {
        (**self).forward(be, batch)
    }
    fn backward(&self, be: &B, batch: &BatchTensors<B>) {
        (**self).backward(be, batch)
    }
    fn trainable(&self) -> bool {
        (**self).trainable()
    }
    fn head(&self) -> &LossHead<B> {
        (**self).head()
    }
    fn probes(&self) -> Option<&Probes<B>> {
        (**self).probes()
    }
    fn hashed_layers(&self) -> Vec<HashedLayer<'_, B>> {
        (**self).hashed_layers()
    }
}

pub struct Trainer<B: Backend, M> {
    pub model: M,
    pub opt: AdamW<B>,
    pub batch: BatchTensors<B>,
    pub cfg: TrainConfig,
    /// Steps taken so far.
    pub step: usize,
    plan: Option<B::Plan>,
    eval_plan: Option<B::Plan>,
    probe_plan: Option<B::Plan>,
}

impl<B: Backend, M: LanguageModel<B>> Trainer<B, M> {
    pub fn new(be: &B, model: M, cfg: TrainConfig) -> Result<Self> {
        cfg.validate()?;
        let (b, t) = model.batch_shape();
        let opt = AdamW::new(be, &cfg, &model.store().layout)?;
        let batch = BatchTensors::new(be, b, t, model.vocab())?;
        Ok(Self {
            model,
            opt,
            batch,
            cfg,
            step: 0,
            plan: None,
            eval_plan: None,
            probe_plan: None,
        })
    }

    /// One optimisation step on `batch`; returns the learning rate it used. The loss of the
    /// batch (before the update) is then in `model.head().loss`.
    pub fn step(&mut self, be: &B, batch: &Batch) -> Result<f32> {
        self.batch.write(be, batch)?;
        self.step += 1;
        let lr = self.opt.prepare(be, self.step);
        let (model, opt, tensors) = (&self.model, &self.opt, &self.batch);
        be.record_or_replay(&mut self.plan, || {
            model.forward(be, tensors);
            model.backward(be, tensors);
            opt.update(be, model.store());
        });
        be.flush()?;
        Ok(lr)
    }

    /// The loss of the last step's batch, read back from the device.
    pub async fn loss(&self, be: &B) -> Result<f32> {
        Ok(be.read(&self.model.head().loss).await?[0])
    }

    /// The mean loss of `batch` under the current parameters, without training.
    pub async fn eval(&mut self, be: &B, batch: &Batch) -> Result<f32> {
        self.batch.write(be, batch)?;
        let (model, tensors) = (&self.model, &self.batch);
        be.record_or_replay(&mut self.eval_plan, || model.forward(be, tensors));
        be.flush()?;
        self.loss(be).await
    }

    /// Variance ratios of every storage and retrieval on `batch` under the current parameters:
    /// a forward and backward with the hooks on, and no update. None for models without hooks.
    pub async fn measure(&mut self, be: &B, batch: &Batch) -> Result<Option<Vec<Measured>>> {
        let Some(probes) = self.model.probes() else {
            return Ok(None);
        };
        self.batch.write(be, batch)?;
        let (model, tensors) = (&self.model, &self.batch);
        probes.on.set(true);
        be.record_or_replay(&mut self.probe_plan, || {
            model.forward(be, tensors);
            model.backward(be, tensors);
        });
        probes.on.set(false);
        be.flush()?;
        Ok(Some(probes.read(be).await?))
    }
}
