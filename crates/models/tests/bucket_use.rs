//! Bucket use of every architecture with hash tables: the hash itself on normalised random
//! inputs, and the MemoryFormer's and the hybrid's tables at init (entropy near 1, every row in
//! one bucket of every table).

mod common;

use common::*;
use engine::cpu::CpuBackend;
use engine::Backend;
use resmem_models::buckets;
use resmem_models::{Hybrid, HybridConfig, LanguageModel, MemoryFormer, MemoryFormerConfig, TrainConfig, Trainer};

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
fn memoryformer_bucket_entropy_is_near_one_at_init() {
    let be = CpuBackend::<f32>::new();
    let model = MemoryFormer::new(&be, MemoryFormerConfig::tiny(256, 16), 32, 16, 0).unwrap();
    let mut trainer = Trainer::new(&be, model, TrainConfig::default()).unwrap();
    let batch = random_batch(32, 16, 256, 1);
    pollster::block_on(trainer.eval(&be, &batch)).unwrap();
    let counts = pollster::block_on(buckets::read(&be, &trainer.model.inside().hashed)).unwrap();
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

/// ML1 reads the FF adapters' retrievals of Norm(X), near-Gaussian and centred, so its tables
/// are used evenly at init; ML2 reads Norm(ML1's output), sums of a few table rows that tokens
/// sharing codes share, so its signs are correlated (as MemoryFormer's ML2 is, at 0.90 there).
/// Every row lands in one bucket of every table.
#[test]
fn hybrid_bucket_use_at_init() {
    let be = CpuBackend::<f32>::new();
    let cfg = HybridConfig::tiny(256, 16);
    let k = cfg.chunks();
    let model = Hybrid::new(&be, cfg, 32, 16, 0).unwrap();
    let mut trainer = Trainer::new(&be, model, TrainConfig::default()).unwrap();
    let batch = random_batch(32, 16, 256, 1);
    pollster::block_on(trainer.eval(&be, &batch)).unwrap();
    let counts = pollster::block_on(buckets::read(&be, &trainer.model.inside().hashed)).unwrap();
    let names: Vec<&str> = counts.iter().map(|c| c.layer.as_str()).collect();
    assert_eq!(names, ["block0.ml1", "block0.ml2", "block1.ml1", "block1.ml2"]);
    for layer in &counts {
        let stats = layer.stats();
        assert_eq!(stats.len(), k, "K = R·D_v/τ = 128/4 tables");
        let worst = stats.iter().map(|s| s.entropy).fold(1.0, f64::min);
        eprintln!("{}: lowest entropy {worst:.3}", layer.layer);
        let floor = if layer.layer.ends_with("ml2") { 0.7 } else { 0.9 };
        assert!(worst > floor, "{}: entropy {worst}", layer.layer);
        for c in &layer.counts {
            assert_eq!(c.iter().sum::<u64>(), 32 * 16);
        }
    }
}
