//! AdamW over the flat parameter buffer, with global-norm clipping, and its schedule: linear
//! warmup, then cosine decay to a fraction of the peak (SPEC §2; RMT paper App. C).

use crate::memory::{FIRST_MOMENTS, SECOND_MOMENTS};
use crate::params::{ParamLayout, ParamStore};
use crate::TrainConfig;
use engine::{AdamWDims, Backend, Hyper};

/// The learning rate at each 1-based step.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Schedule {
    pub peak: f32,
    pub warmup: usize,
    pub total: usize,
    pub min_frac: f32,
}

impl Schedule {
    pub fn new(cfg: &TrainConfig) -> Self {
        let warmup = ((cfg.steps as f32 * cfg.warmup_frac).round() as usize).max(1);
        Self {
            peak: cfg.lr,
            warmup,
            total: cfg.steps,
            min_frac: cfg.min_lr_frac,
        }
    }

    pub fn lr(&self, step: usize) -> f32 {
        if step <= self.warmup {
            return self.peak * step as f32 / self.warmup as f32;
        }
        let span = (self.total.saturating_sub(self.warmup)).max(1) as f32;
        let progress = ((step - self.warmup) as f32 / span).min(1.0);
        let cosine = 0.5 * (1.0 + (std::f32::consts::PI * progress).cos());
        self.peak * (self.min_frac + (1.0 - self.min_frac) * cosine)
    }
}

/// Moments and the per-step values, on the device.
pub struct AdamW<B: Backend> {
    cfg: TrainConfig,
    lr_boost: f32,
    pub schedule: Schedule,
    m: B::Tensor,          // (total)
    v: B::Tensor,          // (total)
    hyper: B::Tensor,      // (8) written every step
    grad_sumsq: B::Tensor, // (1)
}

impl<B: Backend> AdamW<B> {
    pub fn new(be: &B, cfg: &TrainConfig, layout: &ParamLayout) -> engine::Result<Self> {
        let n = layout.total;
        Ok(Self {
            cfg: cfg.clone(),
            lr_boost: layout.lr_boost,
            schedule: Schedule::new(cfg),
            m: be.zeros(FIRST_MOMENTS, n)?,
            v: be.zeros(SECOND_MOMENTS, n)?,
            hyper: be.zeros("AdamW's step values", Hyper::LEN)?,
            grad_sumsq: be.zeros("gradient norm", 1)?,
        })
    }

    /// Writes the values of 1-based `step`; a recorded update then replays with them.
    pub fn prepare(&self, be: &B, step: usize) -> f32 {
        let lr = self.schedule.lr(step);
        let hyper = Hyper {
            lr,
            beta1: self.cfg.beta1,
            beta2: self.cfg.beta2,
            eps: self.cfg.eps,
            weight_decay: self.cfg.weight_decay,
            step: step as u32,
            max_grad_norm: self.cfg.max_grad_norm,
            lr_boost: self.lr_boost,
        };
        be.write(&self.hyper, &hyper.to_array());
        lr
    }

    /// Clips by the global norm and updates every parameter in one launch.
    pub fn update(&self, be: &B, store: &ParamStore<B>) {
        be.sum(&self.grad_sumsq, &store.grads, true);
        let dims = AdamWDims {
            n: store.layout.total,
            decay_end: store.layout.decay_end,
            boost_end: store.layout.boost_end,
        };
        be.adamw(
            &store.params,
            &self.m,
            &self.v,
            &store.grads,
            &self.hyper,
            &self.grad_sumsq,
            dims,
        );
    }

    /// The sum of squares of the last update's gradient (its global norm, squared, before
    /// clipping), on the device.
    pub fn grad_sumsq(&self) -> &B::Tensor {
        &self.grad_sumsq
    }

    /// The first and second moments, (total) each: what a checkpoint saves besides the
    /// parameters.
    pub fn moments(&self) -> (&B::Tensor, &B::Tensor) {
        (&self.m, &self.v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warmup_then_cosine_to_the_floor() {
        let cfg = TrainConfig {
            steps: 100,
            lr: 1.0,
            warmup_frac: 0.05,
            min_lr_frac: 0.1,
            ..Default::default()
        };
        let s = Schedule::new(&cfg);
        assert_eq!(s.warmup, 5);
        assert!((s.lr(1) - 0.2).abs() < 1e-6);
        assert!((s.lr(5) - 1.0).abs() < 1e-6);
        assert!((s.lr(100) - 0.1).abs() < 1e-6);
        // Half way through the decay, half way between peak and floor.
        assert!((s.lr(5 + 95 / 2) - 0.55).abs() < 0.02);
    }
}
