//! Past the device's limits: buffers larger than one storage binding are bound in windows, and
//! launches past the workgroup limit are folded, giving the same bits as the plain launches; the
//! GPT-2-small-sized presets build and take a step on lavapipe's 128 MiB bindings.

mod common;

use common::*;
use engine::gpu::{GpuBackend, GpuOptions};
use engine::Backend;
use resmem_models::memory::{self, estimate};
use resmem_models::presets::Dims;
use resmem_models::{
    LanguageModel, ModelConfig, Purpose, Rmt, RmtConfig, TrainConfig, Trainer, Transformer, TransformerConfig,
};
use std::time::Instant;

fn gpu_with(options: GpuOptions) -> GpuBackend {
    std::env::set_var("XDG_RUNTIME_DIR", std::env::temp_dir());
    pollster::block_on(GpuBackend::with_options(options))
        .expect("these tests need a GPU adapter; on Debian install mesa-vulkan-drivers")
}

/// 256 KiB bindings: under the test models' wte, w_u, logits and flat buffers, over the rest.
const SPLIT: GpuOptions = GpuOptions {
    max_binding_bytes: Some(256 << 10),
    max_groups_per_dim: None,
    ..GpuOptions::DEFAULT
};

/// Every 1-D launch of more than 3 workgroups folds; matmuls split.
const FOLDED: GpuOptions = GpuOptions {
    max_binding_bytes: None,
    max_groups_per_dim: Some(3),
    ..GpuOptions::DEFAULT
};

const VOCAB: usize = 1000;
const B: usize = 8;
const T: usize = 16;

fn transformer_cfg() -> TransformerConfig {
    TransformerConfig {
        d_model: 96,
        n_heads: 6,
        head_dim: 16,
        d_ff: 192,
        ..TransformerConfig::tiny(VOCAB, T)
    }
}

/// Losses, then parameters and gradients after `steps` steps from random parameters, on random
/// tokens spread over the whole vocabulary (so every window of the tables is used).
fn run<M: LanguageModel<GpuBackend>>(be: &GpuBackend, model: M, steps: usize) -> (Vec<u32>, Vec<u32>, Vec<u32>) {
    let values: Vec<f32> = (0..model.store().layout.total)
        .map(|i| ((i * 7919 % 1000) as f32 / 1000.0 - 0.5) * 0.4)
        .collect();
    be.write(&model.store().params, &values);
    let train = TrainConfig {
        batch: B,
        steps,
        ..Default::default()
    };
    let mut trainer = Trainer::new(be, model, train).unwrap();
    let mut losses = vec![];
    for step in 0..steps {
        trainer
            .step(be, &random_batch(B, T, VOCAB as u32, step as u64))
            .unwrap();
        losses.push(pollster::block_on(trainer.loss(be)).unwrap().to_bits());
    }
    let store = trainer.model.store();
    let bits = |t| {
        pollster::block_on(be.read(t))
            .unwrap()
            .iter()
            .map(|x| x.to_bits())
            .collect()
    };
    (losses, bits(&store.params), bits(&store.grads))
}

fn same_bits(name: &str, got: &(Vec<u32>, Vec<u32>, Vec<u32>), want: &(Vec<u32>, Vec<u32>, Vec<u32>)) {
    assert_eq!(got.0, want.0, "{name}: the losses differ");
    assert!(got.1 == want.1, "{name}: the parameters differ");
    assert!(got.2 == want.2, "{name}: the gradients differ");
}

/// The estimate says the test really splits: its largest buffer is over the lowered binding,
/// and what is bound whole is under it.
fn check_splits(cfg: ModelConfig) {
    let est = estimate(&cfg, B, T, Purpose::Train).unwrap();
    let limit = SPLIT.max_binding_bytes.unwrap();
    assert!(est.largest_buffer_bytes > limit, "{est:?}");
    memory::check_binding_limit(&est, limit).unwrap();
}

/// Two steps of a transformer and an RMT with bindings lowered to 256 KiB (so AdamW, the
/// gradient norm, the embedding, the unembedding's matmuls and cross-entropy all run in
/// windows), and with launches folded past 3 workgroups: the same losses, parameters and
/// gradients, bit for bit, as with the device's limits.
#[test]
fn split_and_folded_steps_are_bit_identical() {
    let (whole, split, folded) = (gpu_with(GpuOptions::default()), gpu_with(SPLIT), gpu_with(FOLDED));
    let cfg = transformer_cfg();
    check_splits(ModelConfig::Transformer(cfg.clone()));
    let transformer = |be: &GpuBackend| Transformer::new(be, cfg.clone(), B, T, 1).unwrap();
    let want = run(&whole, transformer(&whole), 2);
    same_bits("transformer, split", &run(&split, transformer(&split), 2), &want);
    same_bits("transformer, folded", &run(&folded, transformer(&folded), 2), &want);

    let cfg = RmtConfig::tiny(VOCAB, T);
    check_splits(ModelConfig::Rmt(cfg.clone()));
    let rmt = |be: &GpuBackend| Rmt::new(be, cfg.clone(), B, T, 1).unwrap();
    let want = run(&whole, rmt(&whole), 2);
    same_bits("rmt, split", &run(&split, rmt(&split), 2), &want);
    same_bits("rmt, folded", &run(&folded, rmt(&folded), 2), &want);
}

/// One step of `model` at B 1, T 16: the loss is finite and the parameters moved.
fn gpt2_step<M: LanguageModel<GpuBackend>>(name: &str, be: &GpuBackend, model: M, vocab: usize) {
    let before = pollster::block_on(be.read(&model.store().params)).unwrap();
    let train = TrainConfig {
        batch: 1,
        steps: 1,
        ..Default::default()
    };
    let mut trainer = Trainer::new(be, model, train).unwrap();
    let start = Instant::now();
    trainer.step(be, &random_batch(1, 16, vocab as u32, 0)).unwrap();
    let loss = pollster::block_on(trainer.loss(be)).unwrap();
    eprintln!(
        "{name}: one step in {:.1} s, loss {loss}",
        start.elapsed().as_secs_f64()
    );
    assert!(loss.is_finite(), "{name}: loss {loss}");
    let after = pollster::block_on(be.read(&trainer.model.store().params)).unwrap();
    let moved = before.iter().zip(&after).filter(|(a, b)| a != b).count();
    eprintln!("{name}: {moved} of {} parameters moved", after.len());
    assert!(moved > 0, "{name}: no parameter moved");
}

/// The GPT-2-small-sized presets (RMT and transformer) pass the binding check, build and take a
/// training step on the device's own limits (lavapipe: 128 MiB bindings; their parameters are
/// 650 MB, wte and w_u 154 MB each). About a minute a step on lavapipe: the cost of checking
/// the papers' sizes, kept down to one sequence of 16 tokens and one step each.
#[test]
fn gpt2_small_presets_take_a_step() {
    let be = gpu_with(GpuOptions::default());
    let limit = be.max_binding_values() as u64 * 4;
    let dims = Dims::preset("gpt2-small").unwrap();
    let cfg = dims.transformer();
    let est = estimate(&ModelConfig::Transformer(cfg.clone()), 1, 16, Purpose::Train).unwrap();
    memory::check_binding_limit(&est, limit).unwrap();
    eprintln!(
        "transformer: largest buffer {} MiB ({}), binding limit {} MiB",
        est.largest_buffer_bytes >> 20,
        est.largest_buffer,
        limit >> 20
    );
    gpt2_step(
        "gpt2-small transformer",
        &be,
        Transformer::new(&be, cfg, 1, 16, 0).unwrap(),
        dims.vocab,
    );
    let cfg = dims.rmt();
    let est = estimate(&ModelConfig::Rmt(cfg.clone()), 1, 16, Purpose::Train).unwrap();
    memory::check_binding_limit(&est, limit).unwrap();
    gpt2_step("gpt2-small rmt", &be, Rmt::new(&be, cfg, 1, 16, 0).unwrap(), dims.vocab);
}
