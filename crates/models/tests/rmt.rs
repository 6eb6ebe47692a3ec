//! The whole RMT: f64 gradient checks (both norms, both position schemes), one training step on
//! wgpu against the CPU reference, determinism, learning, and measured variance ratios at init
//! against the closed form of the paper's Table 1.

mod common;

use common::*;
use data::{Task, TaskSampler};
use engine::cpu::CpuBackend;
use engine::Backend;
use resmem_models::probes::{Layer, Op};
use resmem_models::variance::{self, InitScheme};
use resmem_models::{Norm, Position, Rmt, RmtConfig, TrainConfig, Trainer};

fn tiny(norm: Norm, position: Position) -> RmtConfig {
    RmtConfig {
        d_k: 3,
        d_v: 4,
        rank: 2,
        n_layers: 2,
        d_ff: 7,
        norm,
        position,
        z_loss: 1e-2, // large enough that a wrong z-loss gradient shows
        ..RmtConfig::tiny(11, 6)
    }
}

#[test]
fn gradient_check_every_parameter_tensor() {
    for (norm, position) in [
        (Norm::RmsNorm, Position::Learned),
        (Norm::LayerNorm, Position::Learned),
        (Norm::RmsNorm, Position::Alibi),
    ] {
        let be = CpuBackend::<f64>::new();
        let model = Rmt::new(&be, tiny(norm, position), 2, 5, 1).unwrap();
        gradient_check(&format!("{norm:?} {position:?}"), &be, &model, 11, 1e-2);
    }
}

#[test]
fn first_loss_is_ln_vocab() {
    let be = CpuBackend::<f32>::new();
    let model = Rmt::new(&be, RmtConfig::tiny(256, 16), 2, 16, 0).unwrap();
    let mut trainer = Trainer::new(&be, model, TrainConfig::default()).unwrap();
    let batch = TaskSampler::new(Task::Copy, 2, 16, 0).unwrap().next_batch();
    let loss = pollster::block_on(trainer.eval(&be, &batch)).unwrap();
    assert!((loss - 256f32.ln()).abs() < 1e-5, "{loss}");
}

/// Awkward sizes: 3R = 15 keys split the retrieval's 8-key groups unevenly, and 3·13 = 39 tokens
/// make two key-gradient chunks of 32.
fn small<B: Backend>(be: &B, seed: u64, position: Position) -> Rmt<B> {
    let cfg = RmtConfig {
        d_k: 5,
        d_v: 6,
        rank: 5,
        d_ff: 40,
        position,
        ..RmtConfig::tiny(256, 13)
    };
    Rmt::new(be, cfg, 3, 13, seed).unwrap()
}

#[test]
fn one_training_step_on_the_gpu_matches_the_cpu() {
    let (g, c) = (gpu(), CpuBackend::<f32>::new());
    for position in [Position::Learned, Position::Alibi] {
        eprintln!("{position:?}");
        assert_same_step(
            &train_steps(&g, small(&g, 5, position), 1, 5, true),
            &train_steps(&c, small(&c, 5, position), 1, 5, true),
        );
    }
}

#[test]
fn same_seed_same_losses_on_each_backend() {
    let g = gpu();
    let run = |seed, steps| train_steps(&g, small(&g, seed, Position::Learned), steps, seed, false).losses;
    assert_eq!(run(9, 4), run(9, 4), "gpu losses differ between runs");
    let c = CpuBackend::<f32>::new();
    let run = |seed, steps| train_steps(&c, small(&c, seed, Position::Learned), steps, seed, false).losses;
    assert_eq!(run(9, 4), run(9, 4), "cpu losses differ between runs");
    assert_ne!(run(9, 2), run(10, 2), "another seed should give other losses");
}

#[test]
fn tiny_rmt_learns_copy_on_the_gpu() {
    // The tiny preset leaves the unigram plateau (ln 16 = 2.77) near step 100 of 160; 10% of the
    // first loss is far below the plateau, so only learning to copy passes.
    let be = gpu();
    let model = Rmt::new(&be, RmtConfig::tiny(256, 16), 32, 16, 0).unwrap();
    let (first, last) = learn_copy(&be, model, 160);
    assert!(
        last < 0.1 * first,
        "loss went from {first} to {last}: the RMT did not learn to copy"
    );
}

/// At init, every measured σ²(out)/σ²(in) and σ²(grad in)/σ²(grad out) should match Table 1
/// with the model's own init (the tolerances are `assert_variance_matches_closed_form`'s).
#[test]
fn measured_variance_at_init_matches_the_closed_form() {
    let be = CpuBackend::<f32>::new();
    let cfg = RmtConfig {
        d_k: 64,
        d_v: 16,
        rank: 16,
        n_layers: 4,
        d_ff: 64,
        init_std: 0.02,
        zero_unembedding: false,
        ..RmtConfig::tiny(256, 16)
    };
    let closed = variance::rmt(&cfg, InitScheme::Default);
    let model = Rmt::new(&be, cfg, 8, 16, 3).unwrap();
    let mut trainer = Trainer::new(&be, model, TrainConfig::default()).unwrap();
    let batch = TaskSampler::new(Task::Copy, 8, 16, 4).unwrap().next_batch();
    let measured = pollster::block_on(trainer.measure(&be, &batch)).unwrap().unwrap();
    assert_eq!(measured.len(), 4 * 4, "four blocks of four sites");
    assert_variance_matches_closed_form(&measured, &closed);
    let closed_of = |layer, op| closed.iter().find(|c| c.layer == layer && c.op == op).unwrap();
    // The attention retrieval's gradient fans out to 3R vectors, the FF's to R.
    let bwd = |layer, op| closed_of(layer, op).backward_ratio;
    assert!((bwd(Layer::Attn, Op::Retrieval) / bwd(Layer::Ff, Op::Retrieval) - 3.0).abs() < 1e-9);
}
