//! The memory estimate against what each architecture really allocates on the CPU backend, the
//! inference constructors against the training ones, and configs far too large refused before
//! any allocation.

use data::IGNORE;
use engine::cpu::CpuBackend;
use engine::Backend;
use resmem_models::memory::{self, check_fits, estimate, Purpose};
use resmem_models::param_sizes;
use resmem_models::{
    AdamW, AltupActive, AltupConfig, AltupInput, AttnResConfig, BatchTensors, HcConfig, HcMixing, Hybrid, HybridConfig,
    LanguageModel, MemoryFormer, MemoryFormerConfig, ModelConfig, Observe, Position, Rmt, RmtConfig, TrainConfig,
    Transformer, TransformerConfig, ValueResidual,
};
use std::time::{Duration, Instant};

fn transformer(vocab: usize, n: usize) -> TransformerConfig {
    TransformerConfig {
        d_model: 12,
        n_heads: 3,
        head_dim: 5, // H·D_h = 15 ≠ D
        d_ff: 7,
        n_layers: 3,
        ..TransformerConfig::tiny(vocab, n)
    }
}

fn rmt(vocab: usize, n: usize, position: Position) -> RmtConfig {
    RmtConfig {
        d_k: 3,
        d_v: 5,
        rank: 3,
        d_ff: 7,
        n_layers: 2,
        position,
        ..RmtConfig::tiny(vocab, n)
    }
}

fn memoryformer(vocab: usize, n: usize) -> MemoryFormerConfig {
    MemoryFormerConfig {
        d_model: 10,
        n_heads: 2,
        tau: 3, // K = 3, one value unhashed
        n_layers: 2,
        ..MemoryFormerConfig::tiny(vocab, n)
    }
}

fn hybrid(vocab: usize, n: usize, position: Position) -> HybridConfig {
    HybridConfig {
        d_k: 3,
        d_v: 5,
        rank: 3,
        tau: 4, // K = 3 over R·D_v = 15, three values unhashed
        n_layers: 2,
        position,
        ..HybridConfig::tiny(vocab, n)
    }
}

fn hc(vocab: usize, n: usize, mixing: HcMixing) -> HcConfig {
    HcConfig {
        d_model: 6,
        n_heads: 2,
        head_dim: 5,
        d_ff: 7,
        n_layers: 2,
        streams: 3,
        mixing,
        ..HcConfig::tiny(vocab, n)
    }
}

fn altup(vocab: usize, n: usize, active: AltupActive) -> AltupConfig {
    AltupConfig {
        d_model: 6,
        n_heads: 2,
        head_dim: 5,
        d_ff: 7,
        n_layers: 3,
        sub_blocks: 3,
        active,
        ..AltupConfig::tiny(vocab, n)
    }
}

/// Block AttnRes at L 3 over `depth_blocks` blocks (3: a block a layer; 2: S 3; 6: Full).
fn attnres(vocab: usize, n: usize, depth_blocks: usize) -> AttnResConfig {
    AttnResConfig {
        d_model: 6,
        n_heads: 2,
        head_dim: 5,
        d_ff: 7,
        n_layers: 3,
        depth_blocks,
        ..AttnResConfig::tiny(vocab, n)
    }
}

/// Every architecture at a few awkward shapes: (config, b, t).
fn cases() -> Vec<(ModelConfig, usize, usize)> {
    let mut cases = vec![];
    for (b, t, n, vocab) in [(1, 1, 1, 2), (3, 7, 9, 11), (2, 33, 40, 5)] {
        cases.push((ModelConfig::Transformer(transformer(vocab, n)), b, t));
        cases.push((ModelConfig::Rmt(rmt(vocab, n, Position::Learned)), b, t));
        cases.push((ModelConfig::Rmt(rmt(vocab, n, Position::Alibi)), b, t));
        cases.push((ModelConfig::MemoryFormer(memoryformer(vocab, n)), b, t));
        cases.push((ModelConfig::Hybrid(hybrid(vocab, n, Position::Learned)), b, t));
        cases.push((ModelConfig::Hybrid(hybrid(vocab, n, Position::Alibi)), b, t));
        cases.push((ModelConfig::Hc(hc(vocab, n, HcMixing::Mhc)), b, t));
        cases.push((ModelConfig::Hc(hc(vocab, n, HcMixing::MhcLite)), b, t));
        cases.push((ModelConfig::Altup(altup(vocab, n, AltupActive::Alternating)), b, t));
        for depth_blocks in [2, 6] {
            cases.push((ModelConfig::AttnRes(attnres(vocab, n, depth_blocks)), b, t));
        }
        let predicted = AltupConfig {
            compute_on: AltupInput::Predicted,
            ..altup(vocab, n, AltupActive::Fixed)
        };
        cases.push((ModelConfig::Altup(predicted), b, t));
        for value_residual in [ValueResidual::Half, ValueResidual::Learnable] {
            let values = TransformerConfig {
                n_layers: 3,
                value_residual,
                ..transformer(vocab, n)
            };
            cases.push((ModelConfig::Transformer(values), b, t));
        }
        // The memory block's Table 5 and 6 settings change what it allocates.
        let ablated = MemoryFormerConfig {
            expansion_bits: 0,
            block_gelu: true,
            ..memoryformer(vocab, n)
        };
        cases.push((ModelConfig::MemoryFormer(ablated), b, t));
        let ablated = HybridConfig {
            expansion_bits: 3,
            block_gelu: true,
            ..hybrid(vocab, n, Position::Learned)
        };
        cases.push((ModelConfig::Hybrid(ablated), b, t));
    }
    cases
}

/// Through the one constructor every command uses.
fn build(
    be: &CpuBackend,
    cfg: &ModelConfig,
    b: usize,
    t: usize,
    purpose: Purpose,
) -> Box<dyn LanguageModel<CpuBackend>> {
    cfg.build(be, b, t, purpose, 1).unwrap()
}

fn vocab(cfg: &ModelConfig) -> usize {
    cfg.vocab()
}

/// Bytes the backend allocates for the model, one batch and, for training, AdamW: in all, and
/// in the largest single buffer.
fn allocations(cfg: &ModelConfig, b: usize, t: usize, purpose: Purpose) -> (u64, u64) {
    let be = CpuBackend::<f32>::new();
    let model = build(&be, cfg, b, t, purpose);
    let _batch = BatchTensors::new(&be, b, t, vocab(cfg)).unwrap();
    if purpose == Purpose::Train {
        AdamW::new(&be, &TrainConfig::default(), &model.store().layout).unwrap();
    }
    (be.allocated_bytes(), be.largest_allocation_bytes())
}

fn allocated(cfg: &ModelConfig, b: usize, t: usize, purpose: Purpose) -> u64 {
    allocations(cfg, b, t, purpose).0
}

/// The page refuses a config whose largest buffer bound whole is over the GPU's binding limit
/// before it builds anything, so the estimate's largest buffer must be the model's, and its
/// largest binding at most that.
#[test]
fn estimate_names_the_largest_buffer_each_model_allocates() {
    for (cfg, b, t) in cases() {
        for purpose in [Purpose::Train, Purpose::Infer] {
            let est = estimate(&cfg, b, t, purpose).unwrap();
            let (_, largest) = allocations(&cfg, b, t, purpose);
            assert_eq!(
                est.largest_buffer_bytes, largest,
                "{purpose:?} {b}×{t} {cfg:?}: {est:?}"
            );
            assert!(est.largest_binding_bytes <= largest, "{est:?}");
            let bound = est.largest_binding_bytes;
            assert!(memory::check_binding_limit(&est, bound).is_ok());
            let err = memory::check_binding_limit(&est, bound - 4).unwrap_err().to_string();
            assert!(
                err.contains(&est.largest_binding) && (err.contains("lower") || err.contains("smaller")),
                "{err}"
            );
        }
    }
    // GPT-2's vocabulary at batch 32 and T 64: the logits (411 MiB) and the parameters outgrow a
    // browser's 128 MiB binding, but their ops bind them in windows, so nothing is refused.
    let cfg = ModelConfig::Rmt(RmtConfig::tiny(50257, 64));
    let est = estimate(&cfg, 32, 64, Purpose::Train).unwrap();
    assert!(est.largest_buffer_bytes > 128 << 20, "{est:?}");
    memory::check_binding_limit(&est, 128 << 20).unwrap();
    // What is bound whole is still refused, naming what to shrink: here the residual matrices.
    let wide = ModelConfig::Rmt(RmtConfig {
        d_k: 64,
        d_v: 64,
        ..RmtConfig::tiny(50257, 64)
    });
    let est = estimate(&wide, 256, 64, Purpose::Train).unwrap();
    let err = memory::check_binding_limit(&est, 128 << 20).unwrap_err().to_string();
    assert!(
        err.contains("the residual matrices") && err.contains("lower batch, seq_len, d_k, d_v"),
        "{err}"
    );
}

#[test]
fn estimate_is_exactly_what_each_model_allocates() {
    for (cfg, b, t) in cases() {
        for purpose in [Purpose::Train, Purpose::Infer] {
            let est = estimate(&cfg, b, t, purpose).unwrap();
            assert_eq!(
                est.bytes,
                allocated(&cfg, b, t, purpose),
                "{purpose:?} {b}×{t} {cfg:?}: {est:?}"
            );
            let parts = [
                est.param_bytes,
                est.grad_bytes,
                est.activation_bytes,
                est.backward_bytes,
                est.optimizer_bytes,
                est.batch_bytes,
            ];
            assert_eq!(parts.iter().sum::<u64>(), est.bytes);
        }
    }
}

#[test]
fn closed_form_parameters_match_the_layouts() {
    for (cfg, b, t) in cases() {
        let be = CpuBackend::<f32>::new();
        let model = build(&be, &cfg, b, t, Purpose::Infer);
        let p = param_sizes::params(&cfg).unwrap();
        let layout = &model.store().layout;
        assert_eq!(
            (p.count, p.total),
            (layout.count() as u64, layout.total as u64),
            "{cfg:?}"
        );
        assert_eq!(estimate(&cfg, b, t, Purpose::Train).unwrap().params, p.count);
    }
}

fn batch(b: usize, t: usize, vocab: usize) -> data::Batch {
    let inputs: Vec<u32> = (0..b * t).map(|i| ((i * 7 + 3) % vocab) as u32).collect();
    let targets = (0..b * t)
        .map(|i| {
            if i % 4 == 1 {
                IGNORE
            } else {
                ((i * 5 + 1) % vocab) as u32
            }
        })
        .collect();
    data::Batch { b, t, inputs, targets }
}

fn logits(be: &CpuBackend, model: &dyn LanguageModel<CpuBackend>, batch: &data::Batch) -> Vec<u32> {
    let tensors = BatchTensors::new(be, batch.b, batch.t, model.vocab()).unwrap();
    tensors.write(be, batch).unwrap();
    model.forward(be, &tensors, Observe::Loss);
    let logits = pollster::block_on(be.read(&model.head().logits)).unwrap();
    logits.iter().map(|x| x.to_bits()).collect()
}

#[test]
fn inference_models_give_the_same_logits_and_allocate_less() {
    for (cfg, b, t) in cases() {
        let be = CpuBackend::<f32>::new();
        let trained = build(&be, &cfg, b, t, Purpose::Train);
        let train_bytes = be.allocated_bytes();
        let infer_be = CpuBackend::<f32>::new();
        let infer = build(&infer_be, &cfg, b, t, Purpose::Infer);
        let infer_bytes = infer_be.allocated_bytes();
        assert!(trained.trainable() && !infer.trainable());
        assert!(infer_bytes < train_bytes, "{infer_bytes} ≥ {train_bytes} for {cfg:?}");
        // Loaded the way a checkpoint is: the same values written into both stores. Not the init,
        // whose zero unembedding would make every logit 0.
        let total = trained.store().layout.total;
        let values: Vec<f32> = (0..total).map(|i| ((i * 37) % 101) as f32 / 101.0 - 0.5).collect();
        be.write(&trained.store().params, &values);
        infer_be.write(&infer.store().params, &values);
        let batch = batch(b, t, vocab(&cfg));
        let want = logits(&be, trained.as_ref(), &batch);
        assert_eq!(want, logits(&infer_be, infer.as_ref(), &batch), "{cfg:?}");
        assert!(want.iter().any(|&x| x != 0), "the logits should not be all zero");
        // Backward on an inference model is a no-op, not a panic.
        let tensors = BatchTensors::new(&infer_be, b, t, vocab(&cfg)).unwrap();
        tensors.write(&infer_be, &batch).unwrap();
        infer.backward(&infer_be, &tensors, Observe::Loss);
    }
}

/// `train --batch 4611686018427387904 --seq-len 4` once wrapped B·T and was OOM-killed.
#[test]
fn a_batch_whose_size_overflows_is_refused_at_once() {
    let (b, t) = (4611686018427387904, 4);
    let start = Instant::now();
    let be = CpuBackend::<f32>::new();
    let err = Transformer::new(&be, TransformerConfig::tiny(256, 4), b, t, 0)
        .err()
        .expect("an overflowing batch must be refused")
        .to_string();
    assert!(err.contains("batch × sequence length overflows"), "{err}");
    assert!(Rmt::new(&be, RmtConfig::tiny(256, 4), b, t, 0).is_err());
    assert!(MemoryFormer::inference(&be, MemoryFormerConfig::tiny(256, 4), b, t).is_err());
    assert!(Hybrid::new(&be, HybridConfig::tiny(256, 4), b, t, 0).is_err());
    assert_eq!(be.allocated_bytes(), 0, "nothing may be allocated before the refusal");
    assert!(start.elapsed() < Duration::from_secs(1));
}

#[test]
fn a_batch_too_large_for_memory_is_refused_by_check_fits() {
    // 2^40 sequences do not overflow, but need far more than any machine has.
    let cfg = ModelConfig::Transformer(TransformerConfig::tiny(256, 4));
    let est = estimate(&cfg, 1 << 40, 4, Purpose::Train).unwrap();
    let err = check_fits(&est, Some(64 << 30)).unwrap_err().to_string();
    assert!(err.contains("GiB") && err.contains("batch"), "{err}");
    let small = estimate(&cfg, 2, 4, Purpose::Train).unwrap();
    assert!(check_fits(&small, Some(64 << 30)).is_ok());
    assert!(memory::available_bytes().is_none_or(|b| b > 0));
}

/// The estimate builds the model on the counting backend, which draws no initial parameters and
/// writes no position indices: a model and a batch far larger than this machine are measured,
/// not allocated (drawing the 2^42 parameters, or the 2^36 positions, would abort the test).
#[test]
fn measuring_a_model_larger_than_any_machine_allocates_nothing() {
    let wide = ModelConfig::Transformer(TransformerConfig {
        d_model: 1 << 20,
        d_ff: 1 << 22,
        ..TransformerConfig::tiny(1 << 20, 16)
    });
    let est = estimate(&wide, 1, 16, Purpose::Train).unwrap();
    assert!(est.params > 1 << 42, "{est:?}");
    assert!(check_fits(&est, Some(1 << 40)).is_err());
    let long = ModelConfig::Rmt(rmt(16, 1 << 16, Position::Learned));
    let est = estimate(&long, 1 << 20, 1 << 16, Purpose::Train).unwrap();
    assert!(est.bytes > 1 << 42, "{est:?}");
}

/// Building takes host memory per block whatever the widths, so a depth past any model's is
/// refused before anything is built; its parameters can still be counted.
#[test]
fn a_model_too_deep_to_build_is_refused_but_counted() {
    let deep = ModelConfig::Transformer(TransformerConfig {
        n_layers: resmem_models::config::MAX_LAYERS + 1,
        ..TransformerConfig::tiny(16, 4)
    });
    let err = estimate(&deep, 1, 4, Purpose::Infer).unwrap_err().to_string();
    assert!(err.contains("n_layers") && err.contains("fewer layers"), "{err}");
    let be = CpuBackend::<f32>::new();
    assert!(deep.build(&be, 1, 4, Purpose::Infer, 0).is_err());
    assert_eq!(be.allocated_bytes(), 0);
    assert!(param_sizes::params(&deep).is_ok());
}

#[test]
fn dimensions_whose_products_overflow_are_config_errors() {
    let huge = usize::MAX;
    let rmt_cfg = RmtConfig {
        d_k: huge,
        ..RmtConfig::tiny(256, 16)
    };
    let err = rmt_cfg.validate().unwrap_err().to_string();
    assert!(err.contains("overflows"), "{err}");
    let long = TransformerConfig::tiny(256, huge);
    let err = long.validate().unwrap_err().to_string();
    assert!(err.contains("seq_len") && err.contains("overflows"), "{err}");
    let be = CpuBackend::<f32>::new();
    assert!(Rmt::new(&be, rmt_cfg, 1, 1, 0).is_err());
    assert!(Transformer::inference(&be, long, 1, 16).is_err());
    let many = MemoryFormerConfig {
        n_layers: huge,
        ..MemoryFormerConfig::tiny(256, 16)
    };
    assert!(many.validate().is_err());
    let wide = HybridConfig {
        rank: huge,
        ..HybridConfig::tiny(256, 16)
    };
    let err = wide.validate().unwrap_err().to_string();
    assert!(err.contains("overflows"), "{err}");
    assert!(Hybrid::inference(&be, wide, 1, 1).is_err());
    assert_eq!(be.allocated_bytes(), 0);
}

/// At T = 1,024 no model keeps a (T, T) attention matrix: attention saves one log-sum-exp per
/// (batch, head, row) and its backward one value more, so every architecture's activations and
/// backward scratch together, exactly as allocated, stay under the size of a single head's
/// (B, H, T, T) probabilities.
#[test]
fn long_sequences_allocate_no_square_attention_buffer() {
    let (b, t, vocab) = (1, 1024, 16);
    let configs = [
        (
            ModelConfig::Transformer(TransformerConfig {
                d_model: 16,
                n_heads: 2,
                head_dim: 8,
                n_layers: 1,
                ..transformer(vocab, t)
            }),
            2,
        ),
        (ModelConfig::Rmt(rmt(vocab, t, Position::Alibi)), 3),
        (ModelConfig::MemoryFormer(memoryformer(vocab, t)), 2),
        (ModelConfig::Hybrid(hybrid(vocab, t, Position::Learned)), 3),
    ];
    for (cfg, heads) in configs {
        let est = estimate(&cfg, b, t, Purpose::Train).unwrap();
        assert_eq!(est.bytes, allocated(&cfg, b, t, Purpose::Train), "{cfg:?}");
        let square = 4 * (b * heads * t * t) as u64;
        assert!(
            est.activation_bytes + est.backward_bytes < square,
            "{cfg:?} at T = {t}: {est:?} against {square} bytes of one layer's (B, H, T, T)"
        );
    }
}
