//! Variance at init, one suite over every architecture with storages and retrievals (RMT paper
//! Tables 1-2): each measured σ²(out)/σ²(in) and σ²(grad in)/σ²(grad out) against the closed
//! form of the model's own init, for the transformer (its linear maps in those places), the RMT
//! (its own W1 and W2 included, and under Xavier) and the hybrid (the RMT's closed form).

mod common;

use common::*;
use data::{Task, TaskSampler};
use engine::cpu::CpuBackend;
use resmem_models::params::Init;
use resmem_models::probes::{Layer, Op};
use resmem_models::variance::{self, InitScheme};
use resmem_models::{
    Hybrid, HybridConfig, Rmt, RmtConfig, TrainConfig, Trainer, Transformer, TransformerConfig, WeightInit,
};

/// The transformer's linear maps in the places of the RMT's storages and retrievals (W_QKV and
/// W1 retrieve, W_O and W2 store; RMT paper Table 2): at init their measured variance ratios
/// match the closed form of the model's own init. W_U starts at zero, so one step at a tiny
/// learning rate gives the backward something to carry without moving the other weights.
#[test]
fn transformer_measured_variance_at_init_matches_the_closed_form() {
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

fn measure_at_init(cfg: RmtConfig) -> Vec<resmem_models::probes::Measured> {
    let be = CpuBackend::<f32>::new();
    let model = Rmt::new(&be, cfg, 8, 16, 3).unwrap();
    let mut trainer = Trainer::new(&be, model, TrainConfig::default()).unwrap();
    let batch = TaskSampler::new(Task::Copy, 8, 16, 4).unwrap().next_batch();
    pollster::block_on(trainer.measure(&be, &batch)).unwrap().unwrap()
}

fn variance_config() -> RmtConfig {
    RmtConfig {
        d_k: 64,
        d_v: 16,
        rank: 16,
        n_layers: 4,
        d_ff: 64,
        init_std: 0.02,
        zero_unembedding: false,
        ..RmtConfig::tiny(256, 16)
    }
}

/// At init, every measured σ²(out)/σ²(in) and σ²(grad in)/σ²(grad out) should match Table 1
/// with the model's own init (the tolerances are `assert_variance_matches_closed_form`'s), the
/// RMT's own W1 and W2 included.
#[test]
fn rmt_measured_variance_at_init_matches_the_closed_form() {
    let cfg = variance_config();
    let closed = variance::rmt(&cfg, InitScheme::Default);
    let measured = measure_at_init(cfg);
    assert_eq!(
        measured.len(),
        4 * 6,
        "four blocks of four sites, then each block's W1 and W2"
    );
    assert_variance_matches_closed_form(&measured, &closed);
    let closed_of = |layer, op| closed.iter().find(|c| c.layer == layer && c.op == op).unwrap();
    // The attention retrieval's gradient fans out to 3R vectors, the FF's to R.
    let bwd = |layer, op| closed_of(layer, op).backward_ratio;
    assert!((bwd(Layer::Attn, Op::Retrieval) / bwd(Layer::Ff, Op::Retrieval) - 3.0).abs() < 1e-9);
}

/// Under Xavier (the paper's Table 2 assumption) every weight starts N(0, 2/(fan_in + fan_out)),
/// and the measured ratios follow that init's closed form: W1 and W2 as unbalanced as the
/// transformer's (fan_out/fan_in = D_FF/R·D_v and its inverse), the adapters as Table 1 says.
#[test]
fn rmt_xavier_init_draws_its_variance_and_measures_as_its_closed_form() {
    let cfg = RmtConfig {
        weight_init: WeightInit::Xavier,
        ..variance_config()
    };
    let layout = resmem_models::rmt::layout(&cfg);
    let (dk, r, rv, f) = (64f32, 16f32, 256f32, 64f32);
    for (name, fan_in, fan_out) in [
        ("blocks.0.r_qkv", dk, 3.0 * r),
        ("blocks.3.w_o", r, dk),
        ("blocks.1.r_ff", dk, r),
        ("blocks.2.w_ff", r, dk),
        ("blocks.0.w1", rv, f),
        ("blocks.0.w2", f, rv),
        ("w_e", r, dk),
    ] {
        let spec = layout.specs.iter().find(|s| s.name == name).unwrap();
        let want = (2.0 / (fan_in + fan_out)).sqrt();
        assert_eq!(spec.init, Init::Normal { std: want }, "{name}");
    }
    let closed = variance::rmt(&cfg, InitScheme::Xavier);
    let (w2, others): (Vec<_>, Vec<_>) = measure_at_init(cfg).into_iter().partition(|m| m.site.op == Op::W2);
    let closed_others: Vec<_> = closed.iter().copied().filter(|c| c.op != Op::W2).collect();
    assert_variance_matches_closed_form(&others, &closed_others);
    // W2 reads GELU's outputs, whose mean the closed form (zero-mean inputs) leaves out: it
    // scales σ² + μ², so the forward ratio only grows. Measured: 1.4 to 1.5× here.
    let c = closed.iter().find(|c| c.op == Op::W2).unwrap();
    for m in &w2 {
        let (f, b) = (
            m.forward_ratio.unwrap() / c.forward_ratio,
            m.backward_ratio.unwrap() / c.backward_ratio,
        );
        assert!(
            (1.0..1.7).contains(&f),
            "block {} W2 forward {f} of the closed form",
            m.site.block
        );
        assert!(
            (b - 1.0).abs() < 0.35,
            "block {} W2 backward {b} of the closed form",
            m.site.block
        );
    }
}

/// The memory block sits between the FF adapters, so the storages and retrievals around it
/// keep the RMT's closed form (SPEC §5), measured as the RMT's above.
#[test]
fn hybrid_measured_variance_at_init_matches_the_closed_form() {
    let be = CpuBackend::<f32>::new();
    let cfg = HybridConfig {
        d_k: 64,
        d_v: 16,
        rank: 16,
        n_layers: 4,
        tau: 4,
        init_std: 0.02,
        zero_unembedding: false,
        ..HybridConfig::tiny(256, 16)
    };
    let closed = variance::hybrid(&cfg, InitScheme::Default);
    let rmt = variance::rmt(&RmtConfig::new(cfg.trunk(), 64), InitScheme::Default);
    let ratios = |rows: &[variance::ClosedForm]| {
        rows.iter()
            .map(|r| (r.layer, r.op, r.forward_ratio, r.backward_ratio))
            .collect::<Vec<_>>()
    };
    // The RMT's storages and retrievals, without its own W1 and W2, which the hybrid has not.
    let storages_and_retrievals: Vec<_> = rmt.into_iter().filter(|c| !matches!(c.op, Op::W1 | Op::W2)).collect();
    assert_eq!(
        ratios(&closed),
        ratios(&storages_and_retrievals),
        "the hybrid's closed form is the RMT's"
    );
    let model = Hybrid::new(&be, cfg, 8, 16, 3).unwrap();
    let mut trainer = Trainer::new(&be, model, TrainConfig::default()).unwrap();
    let batch = TaskSampler::new(Task::Copy, 8, 16, 4).unwrap().next_batch();
    let measured = pollster::block_on(trainer.measure(&be, &batch)).unwrap().unwrap();
    assert_eq!(measured.len(), 4 * 4, "four blocks of four sites");
    assert_variance_matches_closed_form(&measured, &closed);
}
