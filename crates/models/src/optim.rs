//! AdamW over the flat parameter buffer, with global-norm clipping, and its schedule: linear
//! warmup, then cosine decay to a fraction of the peak (SPEC §2; RMT paper App. C).

use crate::memory::{FIRST_MOMENTS, SECOND_MOMENTS};
use crate::params::{ParamLayout, ParamStore};
use crate::TrainConfig;
use engine::{AdamWDims, Backend, Hyper};

/// The learning rate at each 1-based step: in each cycle of the run (one, unless it was
/// extended: `TrainConfig::restarts`), linear warmup over `warmup_frac` of the cycle's steps,
/// then cosine decay to `min_frac` of the peak at its end. An extension is thus a warm restart
/// (SGDR, Loshchilov & Hutter 2017), and a run never extended has the one cycle it always had.
#[derive(Clone, Debug, PartialEq)]
pub struct Schedule {
    pub peak: f32,
    pub warmup_frac: f32,
    pub min_frac: f32,
    /// 0, each restart, then the last step.
    pub cycles: Vec<usize>,
}

impl Schedule {
    pub fn new(cfg: &TrainConfig) -> Self {
        Self {
            peak: cfg.lr,
            warmup_frac: cfg.warmup_frac,
            min_frac: cfg.min_lr_frac,
            cycles: cfg.cycles(),
        }
    }

    /// The warmup steps of a cycle `len` steps long.
    pub fn warmup(&self, len: usize) -> usize {
        ((len as f32 * self.warmup_frac).round() as usize).max(1)
    }

    pub fn lr(&self, step: usize) -> f32 {
        // The cycle (start, end] that holds the step (the last one past its end).
        let last = self.cycles.last().copied().unwrap_or(0);
        let (start, end) = match self.cycles.windows(2).find(|w| step.min(last) <= w[1]) {
            Some(w) => (w[0], w[1]),
            None => (0, last),
        };
        let (step, total) = (step.saturating_sub(start), end - start);
        let warmup = self.warmup(total);
        if step <= warmup {
            return self.peak * step as f32 / warmup as f32;
        }
        let span = (total.saturating_sub(warmup)).max(1) as f32;
        let progress = ((step - warmup) as f32 / span).min(1.0);
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

    /// 100 steps at a peak of 1, 5 of them warm-up, down to 0.1.
    fn hundred_steps() -> TrainConfig {
        TrainConfig {
            steps: 100,
            lr: 1.0,
            warmup_frac: 0.05,
            min_lr_frac: 0.1,
            ..Default::default()
        }
    }

    #[test]
    fn warmup_then_cosine_to_the_floor() {
        let cfg = hundred_steps();
        let s = Schedule::new(&cfg);
        assert_eq!(s.warmup(100), 5);
        assert!((s.lr(1) - 0.2).abs() < 1e-6);
        assert!((s.lr(5) - 1.0).abs() < 1e-6);
        assert!((s.lr(100) - 0.1).abs() < 1e-6);
        // Half way through the decay, half way between peak and floor.
        assert!((s.lr(5 + 95 / 2) - 0.55).abs() < 0.02);
    }

    /// An extended run keeps its first cycle's rates bit for bit, then warms up again over
    /// its new cycle and decays to the floor at the new end.
    #[test]
    fn an_extension_restarts_the_schedule() {
        let cfg = hundred_steps();
        let (one, two) = (Schedule::new(&cfg), Schedule::new(&cfg.extended(300)));
        for step in 1..=100 {
            assert_eq!(one.lr(step).to_bits(), two.lr(step).to_bits(), "step {step}");
        }
        assert_eq!(two.warmup(200), 10);
        assert!((two.lr(101) - 0.1).abs() < 1e-6, "{}", two.lr(101));
        assert!((two.lr(110) - 1.0).abs() < 1e-6);
        assert!((two.lr(300) - 0.1).abs() < 1e-6);
        let three = Schedule::new(&cfg.extended(300).extended(400));
        assert_eq!(three.cycles, [0, 100, 300, 400]);
        assert!(
            (three.lr(305) - 1.0).abs() < 1e-6,
            "the third cycle peaks after its 5 warmup steps"
        );
    }

    /// A checkpoint's config continues the run's when it is the same, or the same before one
    /// or more extensions; any other change does not.
    #[test]
    fn a_checkpoint_before_an_extension_continues_it() {
        let cfg = TrainConfig::default();
        let (once, twice) = (cfg.extended(600), cfg.extended(600).extended(900));
        assert!(cfg.continues(&cfg) && once.continues(&cfg) && twice.continues(&cfg) && twice.continues(&once));
        assert!(!cfg.continues(&once), "a shorter run is not the extended one");
        assert!(!once.continues(&cfg.extended(500)));
        let other = TrainConfig { lr: 0.5, ..cfg.clone() };
        assert!(!once.continues(&other));
        let stretched = TrainConfig {
            steps: 600,
            ..cfg.clone()
        };
        assert!(!once.continues(&stretched), "a longer first cycle is another schedule");
        assert!(cfg.validate().is_ok() && twice.validate().is_ok());
        let bad = TrainConfig {
            restarts: vec![400],
            ..cfg
        };
        assert!(bad.validate().is_err(), "a restart past the end");
    }
}
