//! The whole MemoryFormer: an f64 gradient check of every parameter tensor away from hash
//! boundaries, one training step on wgpu against the CPU reference, bit-identical runs,
//! learning, and even bucket use at init.

mod common;

use common::*;
use data::{Task, TaskSampler};
use engine::cpu::CpuBackend;
use engine::Backend;
use resmem_models::buckets;
use resmem_models::{LanguageModel, MemoryFormer, MemoryFormerConfig, Norm, TrainConfig, Trainer};

fn tiny(l1_weight: bool) -> MemoryFormerConfig {
    MemoryFormerConfig {
        d_model: 8,
        n_layers: 2,
        n_heads: 2,
        tau: 3, // K = 2 chunks; d = 8 leaves 2 values unhashed
        l1_weight,
        table_std: 0.5, // large enough that every path carries gradient
        bias_std: 0.1,
        z_loss: 1e-2,
        ..MemoryFormerConfig::tiny(11, 6)
    }
}

/// Central differences see the hash as constant as long as no hashed value crosses 0 within
/// ±h; with these seeds none does (a crossing would show as a wild error, not a small one).
/// Also with the paper's ablations: fewer expansion bits (Table 5), a GELU in the memory block
/// (Table 6).
#[test]
fn gradient_check_every_parameter_tensor() {
    let ablations = [(false, 2, false), (true, 2, false), (false, 1, true), (true, 0, true)];
    for (l1, expansion_bits, block_gelu) in ablations {
        let be = CpuBackend::<f64>::new();
        let cfg = MemoryFormerConfig {
            expansion_bits,
            block_gelu,
            ..tiny(l1)
        };
        let model = MemoryFormer::new(&be, cfg, 2, 5, 1).unwrap();
        let case = format!("l1 {l1}, expansion bits {expansion_bits}, gelu {block_gelu}");
        gradient_check(&case, &be, &model, 11, 1e-2);
    }
}

#[test]
fn first_loss_is_ln_vocab() {
    let be = CpuBackend::<f32>::new();
    let model = MemoryFormer::new(&be, MemoryFormerConfig::tiny(256, 16), 2, 16, 0).unwrap();
    let mut trainer = Trainer::new(&be, model, TrainConfig::default()).unwrap();
    let batch = TaskSampler::new(Task::Copy, 2, 16, 0).unwrap().next_batch();
    let loss = pollster::block_on(trainer.eval(&be, &batch)).unwrap();
    assert!((loss - 256f32.ln()).abs() < 1e-5, "{loss}");
}

/// 3·13 = 39 rows, K = 5 chunks of τ = 5 over d = 27 (2 values unhashed), 3 heads of 9.
fn small_config() -> MemoryFormerConfig {
    MemoryFormerConfig {
        d_model: 27,
        n_heads: 3,
        tau: 5,
        norm: Norm::RmsNorm,
        ..MemoryFormerConfig::tiny(256, 13)
    }
}

fn small<B: Backend>(be: &B, seed: u64) -> MemoryFormer<B> {
    MemoryFormer::new(be, small_config(), 3, 13, seed).unwrap()
}

#[test]
fn one_training_step_on_the_gpu_matches_the_cpu() {
    let (g, c) = (gpu(), CpuBackend::<f32>::new());
    // From random parameters, a hashed value within rounding of 0 could take another bucket on
    // each backend; the comparison is of the model's own init, where codes agree.
    let (gr, cr) = (
        train_steps(&g, small(&g, 5), 1, 5, false),
        train_steps(&c, small(&c, 5), 1, 5, false),
    );
    assert_same_step(&gr, &cr);
}

/// The Table 5 and 6 ablations run the same kernels in other shapes and orders.
#[test]
fn one_ablated_training_step_on_the_gpu_matches_the_cpu() {
    let (g, c) = (gpu(), CpuBackend::<f32>::new());
    let cfg = MemoryFormerConfig {
        expansion_bits: 3,
        block_gelu: true,
        ..small_config()
    };
    let (gr, cr) = (
        train_steps(&g, MemoryFormer::new(&g, cfg.clone(), 3, 13, 5).unwrap(), 1, 5, false),
        train_steps(&c, MemoryFormer::new(&c, cfg, 3, 13, 5).unwrap(), 1, 5, false),
    );
    assert_same_step(&gr, &cr);
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

/// Tables are bit-identical after steps on the GPU: their gradients are fixed-order sums.
#[test]
fn gpu_table_gradients_are_bit_identical_across_runs() {
    let g = gpu();
    assert_bit_identical(
        &train_steps(&g, small(&g, 3), 3, 3, false),
        &train_steps(&g, small(&g, 3), 3, 3, false),
    );
}

#[test]
fn tiny_memoryformer_learns_copy_on_the_gpu() {
    // The tiny preset leaves the unigram plateau (ln 16 = 2.77) near step 75 of 300 and reaches
    // 0.002 on the CPU (a 160-step schedule ends at 1.16, still learning); 10% of the first loss
    // is far below the plateau, so only the copy skill passes.
    let be = gpu();
    let model = MemoryFormer::new(&be, MemoryFormerConfig::tiny(256, 16), 32, 16, 0).unwrap();
    let (first, last) = learn_copy(&be, model, 300);
    assert!(
        last < 0.1 * first,
        "loss went from {first} to {last}: the MemoryFormer did not learn to copy"
    );
}

/// The hash on normalised random inputs: each sign is a fair coin, so every bucket of every
/// table is equally likely. 4096 rows over 2^8 buckets (16 per bucket on average) lose about
/// (2^8 − 1)/(2·4096·ln 2^8) ≈ 0.006 of entropy to sampling; 0.98 is well clear of that and of
/// any real skew (a single biased sign bit at 70/30 already costs 0.015).
#[test]
fn bucket_entropy_is_near_one_on_normalised_random_inputs() {
    use engine::{MemoryDims, NormDims, NormKind};
    use rand::{rngs::SmallRng, SeedableRng};
    use rand_distr::{Distribution, Normal};
    let be = CpuBackend::<f32>::new();
    let d = MemoryDims {
        tokens: 4096,
        d_in: 64,
        tau: 8,
        k: 8,
        d_out: 4,
        temperature: 1.0,
        l1: false,
    };
    let mut rng = SmallRng::seed_from_u64(4);
    let normal = Normal::new(0.5f32, 2.0).unwrap(); // off-centre: the norm must re-centre it
    let raw: Vec<f32> = (0..d.tokens * d.d_in).map(|_| normal.sample(&mut rng)).collect();
    let upload = |v: &[f32]| {
        let t = be.zeros("x", v.len()).unwrap();
        be.write(&t, v);
        t
    };
    let (x, gain) = (upload(&raw), upload(&vec![1.0; d.d_in]));
    let (xn, stats) = (
        be.zeros("xn", raw.len()).unwrap(),
        be.zeros("stats", 2 * d.tokens).unwrap(),
    );
    be.norm_forward(
        &xn,
        &stats,
        &x,
        &gain,
        NormDims {
            rows: d.tokens,
            c: d.d_in,
            kind: NormKind::LayerNorm,
            eps: 1e-5,
        },
    );
    let codes = be.index("codes", d.tokens * d.k).unwrap();
    let (rows, starts, cursor) = (
        be.index("rows", d.k * d.tokens).unwrap(),
        be.index("starts", d.starts_len()).unwrap(),
        be.index("cursor", d.k * d.buckets()).unwrap(),
    );
    be.memory_hash(&codes, &be.zeros("p", d.tokens * d.k).unwrap(), &xn, d);
    be.memory_bucket(&rows, &starts, &cursor, &codes, d);
    let layer = buckets::HashedLayer {
        name: "test".into(),
        tau: d.tau,
        tables: d.k,
        starts: &starts,
    };
    let counts = pollster::block_on(buckets::read(&be, &[layer])).unwrap();
    for s in counts[0].stats() {
        eprintln!(
            "table {}: entropy {:.4}, {} dead buckets",
            s.table, s.entropy, s.dead_buckets
        );
        assert!(s.entropy > 0.98, "table {}: entropy {}", s.table, s.entropy);
    }
}

/// The same in the model at init, on random tokens: ML_QKV and ML1 read LayerNorm'd random
/// vectors (embeddings; the residual), so their tables are near 1 too (512 rows over 16
/// buckets: sampling costs about 0.015). ML2 reads Norm(ML1's output), a sum of a few table
/// rows that tokens sharing codes share, so its signs are correlated: measured 0.90 there.
#[test]
fn bucket_entropy_is_near_one_at_init() {
    let be = CpuBackend::<f32>::new();
    let model = MemoryFormer::new(&be, MemoryFormerConfig::tiny(256, 16), 32, 16, 0).unwrap();
    let mut trainer = Trainer::new(&be, model, TrainConfig::default()).unwrap();
    let batch = random_batch(32, 16, 256, 1);
    pollster::block_on(trainer.eval(&be, &batch)).unwrap();
    let counts = pollster::block_on(buckets::read(&be, &trainer.model.hashed_layers())).unwrap();
    assert_eq!(counts.len(), 2 * 3, "qkv, ml1 and ml2 of two blocks");
    for layer in &counts {
        let stats = layer.stats();
        assert_eq!(stats.len(), 16, "K = 64/4 tables");
        let worst = stats.iter().map(|s| s.entropy).fold(1.0, f64::min);
        eprintln!("{}: lowest entropy {worst:.3}", layer.layer);
        let floor = if layer.layer.ends_with("ml2") { 0.8 } else { 0.9 };
        assert!(worst > floor, "{}: entropy {worst}", layer.layer);
        for c in &layer.counts {
            assert_eq!(
                c.iter().sum::<u64>(),
                32 * 16,
                "every row lands in one bucket of every table"
            );
        }
    }
}
