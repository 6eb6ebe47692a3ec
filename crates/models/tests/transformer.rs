//! The whole Transformer: an f64 gradient check of every parameter tensor, one training step on
//! the wgpu backend against the CPU reference, and bit-identical losses from one seed.

use data::{Task, TaskSampler, IGNORE};
use engine::cpu::CpuBackend;
use engine::gpu::GpuBackend;
use engine::Backend;
use rand::{rngs::SmallRng, Rng, SeedableRng};
use resmem_models::{BatchTensors, LanguageModel, Norm, TrainConfig, Trainer, Transformer, TransformerConfig};

fn tiny(norm: Norm) -> TransformerConfig {
    TransformerConfig {
        d_model: 8,
        n_layers: 2,
        n_heads: 2,
        head_dim: 3,
        d_ff: 12,
        norm,
        ..TransformerConfig::tiny(11, 6)
    }
}

fn gpu() -> GpuBackend {
    std::env::set_var("XDG_RUNTIME_DIR", std::env::temp_dir());
    pollster::block_on(GpuBackend::new())
        .expect("these tests need a GPU adapter; on Debian install mesa-vulkan-drivers")
}

fn random_batch(b: usize, t: usize, vocab: u32, seed: u64) -> data::Batch {
    let mut rng = SmallRng::seed_from_u64(seed);
    let inputs = (0..b * t).map(|_| rng.random_range(0..vocab)).collect();
    let targets = (0..b * t)
        .map(|i| if i % 3 == 0 { IGNORE } else { rng.random_range(0..vocab) })
        .collect();
    data::Batch { b, t, inputs, targets }
}

/// The training objective: mean CE + z·mean (log Z)² over the counted targets.
fn objective(
    be: &CpuBackend<f64>,
    model: &Transformer<CpuBackend<f64>>,
    batch: &BatchTensors<CpuBackend<f64>>,
    host: &data::Batch,
) -> f64 {
    model.forward(be, batch);
    let loss = model.loss().get()[0];
    let lse = model.lse().get();
    let counted: Vec<usize> = (0..host.targets.len()).filter(|&i| host.targets[i] != IGNORE).collect();
    let z: f64 = counted.iter().map(|&i| lse[i] * lse[i]).sum::<f64>() / counted.len() as f64;
    loss + model.cfg.z_loss as f64 * z
}

#[test]
fn gradient_check_every_parameter_tensor() {
    for norm in [Norm::LayerNorm, Norm::RmsNorm] {
        let be = CpuBackend::<f64>::new();
        let mut cfg = tiny(norm);
        cfg.z_loss = 1e-2; // large enough that a wrong z-loss gradient shows
        let (b, t) = (2, 5);
        let model = Transformer::new(&be, cfg, b, t, 1).unwrap();
        // Random parameters everywhere: at init W_U = 0 hides every other gradient.
        let mut rng = SmallRng::seed_from_u64(2);
        model
            .store()
            .params
            .get_mut()
            .iter_mut()
            .for_each(|p| *p = rng.random_range(-0.5..0.5));
        let host = random_batch(b, t, 11, 3);
        let batch = BatchTensors::new(&be, b, t, 11).unwrap();
        batch.write(&be, &host).unwrap();
        objective(&be, &model, &batch, &host);
        model.backward(&be, &batch);
        let grads = model.store().grads.get().to_vec();
        let h = 1e-5;
        for spec in &model.store().layout.specs {
            let mut worst: f64 = 0.0;
            // Every value of small tensors; a spread of 24 of larger ones.
            let stride = (spec.len() / 24).max(1);
            for i in (0..spec.len()).step_by(stride) {
                let at = spec.offset + i;
                let orig = model.store().params.get()[at];
                model.store().params.get_mut()[at] = orig + h;
                let up = objective(&be, &model, &batch, &host);
                model.store().params.get_mut()[at] = orig - h;
                let down = objective(&be, &model, &batch, &host);
                model.store().params.get_mut()[at] = orig;
                let numeric = (up - down) / (2.0 * h);
                let err = (numeric - grads[at]).abs() / (numeric.abs() + grads[at].abs()).max(1e-7);
                worst = worst.max(err);
                assert!(
                    err < 1e-4,
                    "{norm:?} {}[{i}]: numeric {numeric:e} vs analytic {:e}",
                    spec.name,
                    grads[at]
                );
            }
            eprintln!("{norm:?} {:>16}: worst relative error {worst:.1e}", spec.name);
        }
    }
}

#[test]
fn first_loss_is_ln_vocab() {
    // W_U starts at zero, so every logit is 0 and the loss is exactly ln V.
    let be = CpuBackend::<f32>::new();
    let cfg = TransformerConfig::tiny(256, 16);
    let mut trainer = Trainer::new(
        &be,
        Transformer::new(&be, cfg, 2, 16, 0).unwrap(),
        TrainConfig::default(),
    )
    .unwrap();
    let batch = TaskSampler::new(Task::Copy, 2, 16, 0).unwrap().next_batch();
    let loss = pollster::block_on(trainer.eval(&be, &batch)).unwrap();
    assert!((loss - 256f32.ln()).abs() < 1e-5, "{loss}");
}

struct Run {
    losses: Vec<f32>,
    grads: Vec<f32>,
    params: Vec<f32>,
}

/// `steps` steps of a small model on the copy task. With `random_init`, every parameter starts
/// random, so that the first step already moves all of them (at W_U = 0 only W_U moves).
fn train_steps<B: Backend>(be: &B, steps: usize, seed: u64, random_init: bool) -> Run {
    let cfg = TransformerConfig {
        d_model: 24,
        n_heads: 3,
        head_dim: 8,
        d_ff: 40,
        ..TransformerConfig::tiny(256, 13)
    };
    let train = TrainConfig {
        batch: 3,
        steps,
        ..Default::default()
    };
    let model = Transformer::new(be, cfg, 3, 13, seed).unwrap();
    if random_init {
        let mut rng = SmallRng::seed_from_u64(seed);
        let values: Vec<f32> = (0..model.store().layout.total)
            .map(|_| rng.random_range(-0.2..0.2))
            .collect();
        be.write(&model.store().params, &values);
    }
    let mut trainer = Trainer::new(be, model, train).unwrap();
    let mut sampler = TaskSampler::new(Task::Copy, 3, 13, seed).unwrap();
    let mut losses = vec![];
    for _ in 0..steps {
        trainer.step(be, &sampler.next_batch()).unwrap();
        losses.push(pollster::block_on(trainer.loss(be)).unwrap());
    }
    let store = trainer.model.store();
    Run {
        losses,
        grads: pollster::block_on(be.read(&store.grads)).unwrap(),
        params: pollster::block_on(be.read(&store.params)).unwrap(),
    }
}

fn max_diff(a: &[f32], b: &[f32]) -> (f32, f32) {
    let worst = a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0f32, f32::max);
    (worst, b.iter().fold(0f32, |m, x| m.max(x.abs())))
}

#[test]
fn one_training_step_on_the_gpu_matches_the_cpu() {
    let g = train_steps(&gpu(), 1, 5, true);
    let c = train_steps(&CpuBackend::<f32>::new(), 1, 5, true);
    assert!(
        (g.losses[0] - c.losses[0]).abs() < 1e-5 * c.losses[0],
        "losses differ: gpu {:?} cpu {:?}",
        g.losses,
        c.losses
    );
    let (dg, gscale) = max_diff(&g.grads, &c.grads);
    eprintln!("gradients: max |gpu - cpu| = {dg:.2e} (largest {gscale:.2e})");
    assert!(dg < 1e-4 * gscale, "gradients differ by {dg}");
    // The first AdamW step moves each parameter by lr·g/(|g| + eps): about ±lr. A gradient
    // within rounding of 0 may take either sign, so a few values may differ by up to 2·lr.
    let lr = TrainConfig::default().lr;
    let (dp, _) = max_diff(&g.params, &c.params);
    let off = g
        .params
        .iter()
        .zip(&c.params)
        .filter(|(x, y)| (*x - *y).abs() > 1e-6)
        .count();
    eprintln!(
        "parameters after one step: max |gpu - cpu| = {dp:.2e}; {off} of {} differ by more than 1e-6",
        c.params.len()
    );
    assert!(
        dp <= 2.0 * lr + 1e-6 && off * 1000 < c.params.len(),
        "parameters after the step differ: {off} values, max {dp}"
    );
}

#[test]
fn same_seed_same_losses_on_each_backend() {
    let g = gpu();
    assert_eq!(
        train_steps(&g, 4, 9, false).losses,
        train_steps(&g, 4, 9, false).losses,
        "gpu losses differ between runs"
    );
    let c = CpuBackend::<f32>::new();
    assert_eq!(
        train_steps(&c, 4, 9, false).losses,
        train_steps(&c, 4, 9, false).losses,
        "cpu losses differ between runs"
    );
    assert_ne!(
        train_steps(&c, 2, 9, false).losses,
        train_steps(&c, 2, 10, false).losses,
        "another seed should give other losses"
    );
}

#[test]
fn tiny_transformer_learns_copy_on_the_gpu() {
    // Measured on lavapipe: the tiny preset with a 160-step schedule goes from ln 256 = 5.55
    // through the unigram plateau (ln 16 = 2.77, steps 20-80) to 0.145 at step 160. A threshold of
    // 10% of the first loss is far below the plateau, so only learning to copy passes.
    let be = gpu();
    let (b, t, steps) = (32, 16, 160);
    let model = Transformer::new(&be, TransformerConfig::tiny(256, t), b, t, 0).unwrap();
    let mut trainer = Trainer::new(
        &be,
        model,
        TrainConfig {
            batch: b,
            steps,
            ..Default::default()
        },
    )
    .unwrap();
    let mut sampler = TaskSampler::new(Task::Copy, b, t, 1).unwrap();
    let mut first = None;
    let mut last = 0.0;
    for step in 1..=steps {
        trainer.step(&be, &sampler.next_batch()).unwrap();
        if step == 1 || step % 20 == 0 {
            last = pollster::block_on(trainer.loss(&be)).unwrap();
            first.get_or_insert(last);
            eprintln!("step {step}: loss {last:.4}");
        }
    }
    let first = first.unwrap();
    assert!(
        last < 0.1 * first,
        "loss went from {first} to {last}: the model did not learn to copy"
    );
}
