//! The whole Transformer: an f64 gradient check of every parameter tensor, one training step on
//! the wgpu backend against the CPU reference, and bit-identical losses from one seed.

mod common;

use common::*;
use data::{Task, TaskSampler};
use engine::cpu::CpuBackend;
use engine::Backend;
use resmem_models::{Norm, TrainConfig, Trainer, Transformer, TransformerConfig};

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

#[test]
fn gradient_check_every_parameter_tensor() {
    for norm in [Norm::LayerNorm, Norm::RmsNorm] {
        let be = CpuBackend::<f64>::new();
        let mut cfg = tiny(norm);
        cfg.z_loss = 1e-2; // large enough that a wrong z-loss gradient shows
        let model = Transformer::new(&be, cfg, 2, 5, 1).unwrap();
        gradient_check(&format!("{norm:?}"), &be, &model, 11, 1e-2);
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

fn small<B: Backend>(be: &B, seed: u64) -> Transformer<B> {
    let cfg = TransformerConfig {
        d_model: 24,
        n_heads: 3,
        head_dim: 8,
        d_ff: 40,
        ..TransformerConfig::tiny(256, 13)
    };
    Transformer::new(be, cfg, 3, 13, seed).unwrap()
}

#[test]
fn one_training_step_on_the_gpu_matches_the_cpu() {
    let g = gpu();
    let c = CpuBackend::<f32>::new();
    assert_same_step(
        &train_steps(&g, small(&g, 5), 1, 5, true),
        &train_steps(&c, small(&c, 5), 1, 5, true),
    );
}

#[test]
fn same_seed_same_losses_on_each_backend() {
    let g = gpu();
    let run = |seed, steps| train_steps(&g, small(&g, seed), steps, seed, false).losses;
    assert_eq!(run(9, 4), run(9, 4), "gpu losses differ between runs");
    let c = CpuBackend::<f32>::new();
    let run = |seed, steps| train_steps(&c, small(&c, seed), steps, seed, false).losses;
    assert_eq!(run(9, 4), run(9, 4), "cpu losses differ between runs");
    assert_ne!(run(9, 2), run(10, 2), "another seed should give other losses");
}

#[test]
fn tiny_transformer_learns_copy_on_the_gpu() {
    // Measured on lavapipe: the tiny preset with a 160-step schedule goes from ln 256 = 5.55
    // through the unigram plateau (ln 16 = 2.77, steps 20-80) to 0.145 at step 160. A threshold of
    // 10% of the first loss is far below the plateau, so only learning to copy passes.
    let be = gpu();
    let model = Transformer::new(&be, TransformerConfig::tiny(256, 16), 32, 16, 0).unwrap();
    let (first, last) = learn_copy(&be, model, 160);
    assert!(
        last < 0.1 * first,
        "loss went from {first} to {last}: the model did not learn to copy"
    );
}

/// The transformer's linear maps in the places of the RMT's storages and retrievals (W_QKV and
/// W1 retrieve, W_O and W2 store; RMT paper Table 2): at init their measured variance ratios
/// match the closed form of the model's own init. W_U starts at zero, so one step at a tiny
/// learning rate gives the backward something to carry without moving the other weights.
#[test]
fn measured_variance_at_init_matches_the_closed_form() {
    use resmem_models::probes::{Layer, Op};
    use resmem_models::variance::{self, InitScheme};
    let be = CpuBackend::<f32>::new();
    let cfg = TransformerConfig {
        d_model: 64,
        n_heads: 4,
        head_dim: 16,
        d_ff: 256,
        n_layers: 3,
        ..TransformerConfig::tiny(256, 16)
    };
    let closed = variance::transformer(&cfg, InitScheme::Default);
    let model = Transformer::new(&be, cfg, 8, 16, 3).unwrap();
    let train = TrainConfig {
        lr: 1e-5,
        warmup_frac: 0.0,
        ..TrainConfig::default()
    };
    let mut trainer = Trainer::new(&be, model, train).unwrap();
    let mut sampler = TaskSampler::new(Task::Copy, 8, 16, 4).unwrap();
    trainer.step(&be, &sampler.next_batch()).unwrap();
    let measured = pollster::block_on(trainer.measure(&be, &sampler.next_batch()))
        .unwrap()
        .unwrap();
    assert_eq!(measured.len(), 3 * 4, "three blocks of four sites");
    assert_variance_matches_closed_form(&measured, &closed);
    // W1 (64 → 256) quadruples the gradient's variance back to its input, W2 quarters it.
    let closed_of = |layer, op| closed.iter().find(|c| c.layer == layer && c.op == op).unwrap();
    let ff_in = closed_of(Layer::Ff, Op::Retrieval);
    assert!((ff_in.backward_ratio / ff_in.forward_ratio - 4.0).abs() < 1e-9);
}
