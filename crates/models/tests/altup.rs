//! What only AltUp has (SPEC §7.2, §7.8): its counts against the spec's, its start as its
//! transformer (T-A1, T-A2), and the symmetry of its sub-blocks (T-A5). The worked example
//! T-A3 is `residual::sub_blocks`'s unit test; gradients, the GPU against the CPU,
//! determinism and learning the copy task are every_architecture.rs's, as for every family.

mod common;

use data::{Task, TaskSampler};
use engine::cpu::CpuBackend;
use engine::Backend;
use resmem_models::altup::layout;
use resmem_models::count::try_altup as counts;
use resmem_models::{
    Altup, AltupActive, AltupConfig, AltupInput, BatchTensors, LanguageModel, Observe, TrainConfig, Trainer,
    Transformer,
};

/// The parameters counted are the ones built; in the paper's convention a layer at K = 4 costs
/// K² + K = 20 parameters and (K² + K + 1)D = 21D multiply-adds a token: +0.010% and +1.4% of a
/// 12·D² layer at D = 128, +0.041% and +2.7% at D = 64 (SPEC §7.2.6).
#[test]
fn counts_are_the_built_parameters_and_the_spec_table() {
    for k in [1, 3, 4] {
        let cfg = AltupConfig {
            d_model: 7,
            sub_blocks: k,
            ..AltupConfig::tiny(11, 16)
        };
        let built: usize = layout(&cfg).specs.iter().map(|s| s.len()).sum();
        assert_eq!(counts(&cfg).unwrap().params, built as u64, "K {k}");
    }
    for (d, params, macs) in [(128, 0.0001, 0.014), (64, 0.00041, 0.027)] {
        let cfg = AltupConfig {
            d_model: d,
            ..AltupConfig::tiny(256, 16)
        };
        let (c, base) = (
            counts(&cfg).unwrap(),
            resmem_models::count::try_transformer(&cfg.transformer()).unwrap(),
        );
        let (l, n, k) = (cfg.n_layers as f64, cfg.context as f64, cfg.sub_blocks as f64);
        let block = 12.0 * (d * d) as f64;
        let p = (c.params - base.params) as f64 / l / block;
        // The paper's FLOPs a sequence, less the final sum's K·D a token.
        let m = ((c.flops_fwd_paper - base.flops_fwd_paper) as f64 / (2.0 * n) - k * d as f64) / l / block;
        assert!(
            (p - params).abs() < 0.00001 && (m - macs).abs() < 0.0005,
            "D {d}: +{p:.5} parameters, +{m:.4} MACs a layer"
        );
    }
}

/// T-A1 and T-A2: with P = I, g = 1 and the copies of e, every sub-block carries the
/// transformer's residual and the logits are the transformer's, up to the rounding of
/// x̂_i + (y − x̂_j) against y (not bit for bit), for K = 1 and K = 4, computing on the old x_j
/// or on the prediction (P = I makes them one).
#[test]
fn altup_starts_as_its_transformer() {
    for (k, compute_on) in [(1, AltupInput::Old), (4, AltupInput::Old), (4, AltupInput::Predicted)] {
        let cfg = AltupConfig {
            sub_blocks: k,
            compute_on,
            ..AltupConfig::tiny(256, 16)
        };
        let worst = against_transformer(&cfg);
        assert!(
            worst < 1e-5,
            "K {k} {compute_on:?}: logits differ by {worst} of the largest"
        );
    }
}

/// T-A5: with `fixed`, the identity init and the copies of e, nothing tells the K − 1 inactive
/// sub-blocks apart, so they stay equal (to rounding: P X sums its terms in index order, which
/// differs between them) while training; `alternating` computes on each in turn and they come
/// apart, by orders of magnitude more.
#[test]
fn a_fixed_active_sub_block_leaves_the_others_alike() {
    let spread = |active| {
        let cfg = AltupConfig {
            active,
            ..AltupConfig::tiny(256, 16)
        };
        let be = CpuBackend::<f32>::new();
        let model = Altup::new(&be, cfg.clone(), 4, 16, 0).unwrap();
        let mut trainer = Trainer::new(&be, model, TrainConfig::default()).unwrap();
        let mut sampler = TaskSampler::new(Task::Copy, 4, 16, 0).unwrap();
        for _ in 0..20 {
            trainer.step(&be, &sampler.next_batch()).unwrap();
        }
        trainer
            .model
            .forward(&be, &trainer_batch(&be, &mut sampler), Observe::Loss);
        let last = trainer.model.inside().residuals.last().map(|o| o.tensor).unwrap();
        let x = pollster::block_on(be.read(last)).unwrap();
        let (k, d) = (cfg.sub_blocks, cfg.d_model);
        let (mut apart, mut size) = (0f32, 0f32);
        for token in x.chunks(k * d) {
            for i in 2..k {
                for c in 0..d {
                    apart = apart.max((token[i * d + c] - token[d + c]).abs());
                    size = size.max(token[d + c].abs());
                }
            }
        }
        apart / size
    };
    let (fixed, alternating) = (spread(AltupActive::Fixed), spread(AltupActive::Alternating));
    eprintln!("inactive sub-blocks apart by {fixed:.2e} (fixed), {alternating:.2e} (alternating) of their size");
    assert!(fixed < 1e-5, "fixed: {fixed}");
    assert!(alternating > 1e-2, "alternating: {alternating}");
}

fn trainer_batch(be: &CpuBackend<f32>, sampler: &mut TaskSampler) -> BatchTensors<CpuBackend<f32>> {
    let tensors = BatchTensors::new(be, 4, 16, 256).unwrap();
    tensors.write(be, &sampler.next_batch()).unwrap();
    tensors
}

/// The AltUp model of `cfg` against its transformer (`common::against_transformer`), with every
/// sub-block checked against the transformer's residual at each layer's end: bit for bit at the
/// embedding, to rounding after.
fn against_transformer(cfg: &AltupConfig) -> f32 {
    let be = CpuBackend::<f32>::new();
    let altup = Altup::new(&be, cfg.clone(), 2, 16, 3).unwrap();
    let plain = Transformer::new(&be, cfg.transformer(), 2, 16, 4).unwrap();
    let name = format!("AltUp K {} {:?}", cfg.sub_blocks, cfg.compute_on);
    let (states, residuals, worst) = common::against_transformer(&name, &be, (&altup, &plain), |_, _| {});
    let (k, d) = (cfg.sub_blocks, cfg.d_model);
    for depth in (0..states.len()).step_by(2) {
        for (token, r) in residuals[depth].chunks(d).enumerate() {
            for i in 0..k {
                let at = (token * k + i) * d;
                for (x, r) in states[depth][at..at + d].iter().zip(r) {
                    let tolerance = if depth == 0 { 0.0 } else { 1e-5 * (1.0 + r.abs()) };
                    assert!(
                        (x - r).abs() <= tolerance,
                        "depth {depth}, token {token}, sub-block {i}: {x} against {r}"
                    );
                }
            }
        }
    }
    worst
}

/// The cosines between distinct sub-blocks, which the page's AltUp view draws: the
/// off-diagonal of the K×K matrix, their mean and their least; none with one sub-block.
#[test]
fn cosines_apart_are_the_off_diagonal() {
    let row = |correct: Vec<f64>, cosine: Vec<f64>| resmem_models::observe::AltupRow {
        layer: "block0".into(),
        active: 0,
        predict: vec![],
        correct,
        cosine,
        norms: vec![],
    };
    let three = row(vec![1.0; 3], vec![1.0, 0.2, 0.5, 0.2, 1.0, 0.8, 0.5, 0.8, 1.0]);
    assert_eq!(
        three.cosines_apart().collect::<Vec<_>>(),
        [0.2, 0.5, 0.2, 0.8, 0.5, 0.8]
    );
    assert!((three.mean_cosine_apart().unwrap() - 0.5).abs() < 1e-12);
    assert_eq!(three.least_cosine_apart(), Some(0.2));
    let one = row(vec![1.0], vec![1.0]);
    assert_eq!((one.mean_cosine_apart(), one.least_cosine_apart()), (None, None));
}
