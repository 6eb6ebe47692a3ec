//! What only the hyper-connections family has (SPEC §6): its counts against the spec's table,
//! the streams coming apart (E0), and mHC-lite learning. Gradients, the GPU against the CPU,
//! determinism and the tiny mHC's learning are every_architecture.rs's, as for every family.

mod common;

use common::learn_copy;
use data::{Task, TaskSampler};
use engine::cpu::CpuBackend;
use engine::Backend;
use resmem_models::count::try_hc as counts;
use resmem_models::hyper_connections::layout;
use resmem_models::{
    BatchTensors, HcConfig, HcInit, HcMixing, HyperConnections, LanguageModel, Observe, TrainConfig, Trainer,
    Transformer,
};

/// SPEC §6.8: the parameters counted are the ones built, and at n = 4 a block's two sites cost
/// the table's +12.5% parameters and +16.1% multiply-adds of a 12·D² block at D = 128, +25% and
/// +32% at D = 64 (mHC); +0.9% and +6.8%, +1.8% and +13.5% (HC).
#[test]
fn counts_are_the_built_parameters_and_the_spec_table() {
    for (streams, mixing) in [
        (3, HcMixing::Mhc),
        (1, HcMixing::Mhc),
        (4, HcMixing::MhcLite),
        (3, HcMixing::Hc),
    ] {
        let cfg = HcConfig {
            d_model: 7,
            streams,
            mixing,
            ..HcConfig::tiny(11, 16)
        };
        let built: usize = layout(&cfg).specs.iter().map(|s| s.len()).sum();
        assert_eq!(
            counts(&cfg).unwrap().model.params,
            built as u64,
            "n {streams} {mixing:?}"
        );
    }
    for (mixing, d, params, macs) in [
        (HcMixing::Mhc, 128, 0.125, 0.161),
        (HcMixing::Mhc, 64, 0.25, 0.32),
        (HcMixing::Hc, 128, 0.009, 0.068),
        (HcMixing::Hc, 64, 0.018, 0.135),
    ] {
        let cfg = HcConfig {
            d_model: d,
            mixing,
            ..HcConfig::tiny(256, 16)
        };
        let c = counts(&cfg).unwrap();
        let block = 12.0 * (d * d) as f64;
        let (p, m) = (2.0 * c.site_params as f64 / block, 2.0 * c.site_macs as f64 / block);
        assert!(
            (p - params).abs() < 0.005 && (m - macs).abs() < 0.005,
            "{mixing:?} D {d}: +{p:.3} parameters, +{m:.3} MACs"
        );
    }
    // HC's paper convention (Eq. 25): |θ_norm| + D(n + 2) + n(n + 2) + 2, one s_α.
    let cfg = HcConfig {
        mixing: HcMixing::Hc,
        ..HcConfig::tiny(256, 16)
    };
    let (n, d) = (cfg.streams as u64, cfg.d_model as u64);
    assert_eq!(
        counts(&cfg).unwrap().site_params_paper,
        d + d * (n + 2) + n * (n + 2) + 2
    );
}

/// SPEC §6.10 E0: at init HC is its transformer. W = 0 makes every gate its static part (pre
/// one-hot, post 1, P = I), so with the transformer's weights its streams each hold the
/// transformer's residual, to the bit, and the head's sum of n equal streams changes nothing but
/// the final norm's ε.
#[test]
fn hc_starts_as_its_transformer() {
    let cfg = HcConfig {
        mixing: HcMixing::Hc,
        ..HcConfig::tiny(256, 16)
    };
    let (streams, residuals, worst) = against_transformer(&cfg, |_, _| {});
    let d = cfg.d_model;
    for (depth, (x, r)) in streams.iter().zip(&residuals).enumerate() {
        for (token, r) in r.chunks(d).enumerate() {
            for j in 0..cfg.streams {
                let at = (token * cfg.streams + j) * d;
                assert_eq!(&x[at..at + d], r, "depth {depth}, token {token}, stream {j}");
            }
        }
    }
    assert!(worst < 1e-4, "logits differ by {worst} of the largest");
}

/// SPEC §6.10 E0: with one stream mHC is a gated pre-norm transformer. P is 1 (to Sinkhorn's ε),
/// pre cancels in the branch's norm and the head's, and post = 2σ(α·m + b) gates each branch; with
/// Φ = 0 and post's logit 0 the gate is 1, and the logits are the transformer's.
#[test]
fn one_stream_mhc_is_a_gated_transformer() {
    let cfg = HcConfig {
        streams: 1,
        ..HcConfig::tiny(256, 16)
    };
    let (_, _, worst) = against_transformer(&cfg, |name, values| {
        // Each site's logits [pre | post | res]: post's to 0.
        if name.ends_with(".hc_bias") && values.len() == 3 {
            values[1] = 0.0;
        }
    });
    assert!(worst < 1e-4, "logits differ by {worst} of the largest");
}

/// The model of `cfg` (its parameters patched by `patch`, by name) against its transformer
/// (`common::against_transformer`).
fn against_transformer(cfg: &HcConfig, patch: impl Fn(&str, &mut [f32])) -> (Vec<Vec<f32>>, Vec<Vec<f32>>, f32) {
    let be = CpuBackend::<f32>::new();
    let hc = HyperConnections::new(&be, cfg.clone(), 2, 16, 3).unwrap();
    let plain = Transformer::new(&be, cfg.transformer(), 2, 16, 4).unwrap();
    let name = format!("{} n {}", cfg.mixing.name(), cfg.streams);
    common::against_transformer(&name, &be, (&hc, &plain), patch)
}

#[test]
fn tiny_mhc_lite_learns_copy() {
    let be = CpuBackend::<f32>::new();
    let cfg = HcConfig {
        mixing: HcMixing::MhcLite,
        ..HcConfig::tiny(256, 16)
    };
    let (first, last) = learn_copy(&be, HyperConnections::new(&be, cfg, 32, 16, 0).unwrap(), 300);
    assert!(
        last < 0.1 * first,
        "loss went from {first} to {last}: it did not learn to copy"
    );
}

/// SPEC §6.10 E0: the streams start identical (X⁰ = (e, …, e)) and come apart as the model
/// trains: the random Φ of `zero-bias` breaks their symmetry in mHC, the one-hot pre in HC.
#[test]
fn the_streams_come_apart() {
    for (mixing, init) in [
        (HcMixing::Mhc, HcInit::Identity),
        (HcMixing::Mhc, HcInit::ZeroBias),
        (HcMixing::Hc, HcInit::Identity),
    ] {
        streams_come_apart(HcConfig {
            mixing,
            stream_init: init,
            ..HcConfig::tiny(256, 16)
        });
    }
}

/// SPEC §6.6 `identity`: every site's P starts near I (off the diagonal, or off the identity
/// permutation, logits of −8), and pre and post are σ(±1) and 2σ(±1), the +1 at stream s mod n.
#[test]
fn identity_init_starts_near_the_identity_mixing() {
    use resmem_models::observe::mixing;
    for kind in [HcMixing::Mhc, HcMixing::MhcLite] {
        let be = CpuBackend::<f32>::new();
        let cfg = HcConfig {
            mixing: kind,
            ..HcConfig::tiny(256, 16)
        };
        let n = cfg.streams;
        let model = HyperConnections::new(&be, cfg, 2, 16, 0).unwrap();
        let tensors = BatchTensors::new(&be, 2, 16, 256).unwrap();
        tensors
            .write(&be, &TaskSampler::new(Task::Copy, 2, 16, 0).unwrap().next_batch())
            .unwrap();
        model.forward(&be, &tensors, Observe::Loss);
        let rows = pollster::block_on(mixing(&be, &model, (1, 16, 5))).unwrap().unwrap();
        let s = |z: f64| 1.0 / (1.0 + (-z).exp());
        for (site, r) in rows.iter().enumerate() {
            for j in 0..n {
                let z = if j == site % n { 1.0 } else { -1.0 };
                assert!((r.pre[j] - s(z)).abs() < 1e-5, "{kind:?} {}: pre {:?}", r.site, r.pre);
                assert!(
                    (r.post[j] - 2.0 * s(z)).abs() < 1e-5,
                    "{kind:?} {}: post {:?}",
                    r.site,
                    r.post
                );
                assert!(r.mix[j * n + j] > 0.99, "{kind:?} {}: P {:?}", r.site, r.mix);
            }
        }
    }
}

fn streams_come_apart(cfg: HcConfig) {
    let be = CpuBackend::<f32>::new();
    let mixing = cfg.mixing;
    let (n, d) = (cfg.streams, cfg.d_model);
    let train = TrainConfig {
        batch: 4,
        steps: 20,
        ..Default::default()
    };
    let mut trainer = Trainer::new(&be, HyperConnections::new(&be, cfg, 4, 16, 0).unwrap(), train).unwrap();
    let mut sampler = TaskSampler::new(Task::Copy, 4, 16, 0).unwrap();
    // How far apart the first token's streams are at `depth`, relative to their size.
    let spread = |trainer: &Trainer<CpuBackend<f32>, HyperConnections<CpuBackend<f32>>>, depth: usize| {
        let x = pollster::block_on(be.read(trainer.model.inside().residuals[depth].tensor)).unwrap();
        let (first, rest) = x[..n * d].split_at(d);
        let apart = (rest.chunks(d))
            .flat_map(|s| s.iter().zip(first).map(|(a, b)| (a - b).abs()))
            .fold(0f32, f32::max);
        apart / first.iter().fold(0f32, |m, v| m.max(v.abs()))
    };
    let batch = sampler.next_batch();
    let tensors = BatchTensors::new(&be, 4, 16, 256).unwrap();
    tensors.write(&be, &batch).unwrap();
    trainer.model.forward(&be, &tensors, Observe::Loss);
    assert_eq!(spread(&trainer, 0), 0.0, "X⁰ repeats the embedding");
    let at_init = spread(&trainer, 4);
    for _ in 0..20 {
        trainer.step(&be, &sampler.next_batch()).unwrap();
    }
    trainer.model.forward(&be, &tensors, Observe::Loss);
    let trained = spread(&trainer, 4);
    eprintln!("{mixing:?}: streams apart at the last depth: {at_init:.2e} at init, {trained:.2e} after 20 steps");
    // HC's streams are equal at init (P = I, post = 1); mHC's random Φ already parts them.
    assert!(
        (mixing == HcMixing::Hc || at_init > 0.0) && trained > 1e-3,
        "{mixing:?}: the streams stay together: {at_init} then {trained}"
    );
}

/// The composite gain `resmem train` logs at each evaluation (`mixing_gain`) is the largest over
/// the batch's tokens of what `analyze mixing` gives one token at the last site: near 1 for
/// mHC's doubly stochastic P, exactly 1 for HC at init (P = I), and free to leave 1 as HC trains.
#[test]
fn the_composite_gain_is_the_largest_over_the_tokens() {
    use resmem_models::observe::{composite_gain, mixing};
    for mixing_kind in [HcMixing::Mhc, HcMixing::Hc] {
        let be = CpuBackend::<f32>::new();
        let cfg = HcConfig {
            mixing: mixing_kind,
            ..HcConfig::tiny(256, 16)
        };
        let (b, t) = (4, 16);
        let train = TrainConfig {
            batch: b,
            steps: 30,
            lr: 0.03,
            ..Default::default()
        };
        let mut trainer = Trainer::new(&be, HyperConnections::new(&be, cfg, b, t, 0).unwrap(), train).unwrap();
        let mut sampler = TaskSampler::new(Task::Copy, b, t, 0).unwrap();
        let tensors = BatchTensors::new(&be, b, t, 256).unwrap();
        let batch = sampler.next_batch();
        tensors.write(&be, &batch).unwrap();
        trainer.model.forward(&be, &tensors, Observe::Loss);
        let at_init = pollster::block_on(composite_gain(&be, &trainer.model))
            .unwrap()
            .unwrap();
        for _ in 0..30 {
            trainer.step(&be, &sampler.next_batch()).unwrap();
        }
        trainer.model.forward(&be, &tensors, Observe::Loss);
        let trained = pollster::block_on(composite_gain(&be, &trainer.model))
            .unwrap()
            .unwrap();
        let per_token: Vec<[f64; 2]> = (0..b * t)
            .map(|i| {
                let rows = pollster::block_on(mixing(&be, &trainer.model, (i / t, t, i % t)))
                    .unwrap()
                    .unwrap();
                rows.last().unwrap().composite_gain
            })
            .collect();
        let largest = per_token
            .iter()
            .fold([0f64; 2], |[f, g], [x, y]| [f.max(*x), g.max(*y)]);
        eprintln!("{mixing_kind:?}: composite gain {at_init:?} at init, {trained:?} after 30 steps");
        assert_eq!(trained, largest, "{mixing_kind:?}");
        match mixing_kind {
            HcMixing::Hc => assert!(
                at_init == [1.0, 1.0] && trained != [1.0, 1.0] && trained.iter().all(|g| g.is_finite()),
                "HC: {at_init:?} then {trained:?}"
            ),
            // Sinkhorn normalises the columns last: the forward gain is exact, the backward one
            // off by Sinkhorn's unconverged rows (the mHC paper's Fig. 7).
            _ => assert!(
                [at_init[0], trained[0]].iter().all(|g| (g - 1.0).abs() < 1e-4)
                    && [at_init[1], trained[1]].iter().all(|g| (g - 1.0).abs() < 0.05),
                "mHC: {at_init:?} then {trained:?}"
            ),
        }
    }
}
