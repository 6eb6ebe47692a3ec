//! What only Block Attention Residuals have (SPEC §7.3, §7.8): the counts against the spec's,
//! the source lists (T-R4), and the start as the transformer with every pseudo-query at 0
//! (T-R1), logits and gradients. The read's own numbers (T-R2, T-R3) and its gradient check
//! are the engine's (`tests/gradcheck.rs`); gradients of the whole model, the GPU against the
//! CPU, determinism and learning the copy task are every_architecture.rs's, as for every family.

mod common;

use data::{Task, TaskSampler};
use engine::cpu::CpuBackend;
use engine::Backend;
use resmem_models::attnres::layout;
use resmem_models::count::{attnres_sources, try_attnres as counts, try_transformer};
use resmem_models::{
    AttnRes, AttnResConfig, BatchTensors, DepthKeys, LanguageModel, Observe, Transformer, TransformerConfig,
};

fn at(depth_blocks: usize, d_model: usize, n_layers: usize) -> AttnResConfig {
    AttnResConfig {
        d_model,
        n_layers,
        depth_blocks,
        ..AttnResConfig::tiny(256, 16)
    }
}

/// The parameters counted are the ones built: 2D a read, 2L + 1 reads, (4L + 2)D in all; at
/// L = 8 that is 34D, +0.28% of the layers' 96D² at D = 128 and +0.55% at D = 64. The reads take
/// L(N + 3) + 1 sources in all, so the paper's 2nD multiply-adds a read come to 178D at N = 8,
/// 114D at N = 4, 306D at N = 16 (Full) and 66D at N = 1: +1.4% / +2.9% at N = 8 and +2.5% /
/// +5.0% Full, at D = 128 / 64 (SPEC §7.3.5, §7.7).
#[test]
fn counts_are_the_built_parameters_and_the_spec_table() {
    for (n, l) in [(1, 2), (2, 2), (4, 2), (3, 3), (2, 3), (6, 3)] {
        let cfg = AttnResConfig {
            d_model: 7,
            ..at(n, 7, l)
        };
        let built: usize = layout(&cfg).specs.iter().map(|s| s.len()).sum();
        assert_eq!(counts(&cfg).unwrap().params, built as u64, "N {n}, L {l}");
        assert_eq!(attnres_sources(&cfg), l * (n + 3) + 1, "N {n}, L {l}");
    }
    for (n, macs) in [(8, 178), (4, 114), (16, 306), (1, 66)] {
        assert_eq!(2 * attnres_sources(&at(n, 64, 8)), macs, "N {n}");
    }
    for (d, n, params, macs) in [
        (128, 8, 0.0028, 0.014),
        (64, 8, 0.0055, 0.029),
        (128, 16, 0.0028, 0.025),
        (64, 16, 0.0055, 0.050),
    ] {
        let cfg = at(n, d, 8);
        let (c, base) = (counts(&cfg).unwrap(), try_transformer(&cfg.transformer()).unwrap());
        let layers = 8.0 * 12.0 * (d * d) as f64;
        let p = (c.params - base.params) as f64 / layers;
        let m = (c.flops_fwd_paper - base.flops_fwd_paper) as f64 / (2.0 * cfg.context as f64) / layers;
        assert!(
            (p - params).abs() < 0.00005 && (m - macs).abs() < 0.0006,
            "D {d}, N {n}: +{p:.5} parameters, +{m:.4} MACs"
        );
    }
}

/// T-R4: at L = 2, N = 2 (S = 2) the sites read [b0], [b0, v1], [b0, b1], [b0, b1, v3] and the
/// head [b0, b1, b2]; N = 2L is Full AttnRes, site s reading all s + 1 sources before it; N = 1
/// reads the embedding and the partial sum of everything since.
#[test]
fn the_source_lists_of_the_spec() {
    let cfg = at(2, 8, 2);
    let lists: Vec<_> = (0..4).map(|s| cfg.sources(s)).collect();
    assert_eq!(lists, [1, 2, 2, 3]);
    assert_eq!(cfg.depth_blocks + 1, 3);
    let full = at(4, 8, 2);
    assert_eq!((0..4).map(|s| full.sources(s)).collect::<Vec<_>>(), [1, 2, 3, 4]);
    let one = at(1, 8, 2);
    assert_eq!((0..4).map(|s| one.sources(s)).collect::<Vec<_>>(), [1, 2, 2, 2]);
    for bad in [0, 3, 5] {
        assert!(at(bad, 8, 2).validate().is_err(), "N {bad} at L 2");
    }
    assert_eq!(
        [2, 6, 8, 12, 24].map(AttnResConfig::paper_blocks),
        [4, 6, 8, 8, 8],
        "the divisor of 2L nearest 8"
    );
}

/// T-R1: with every pseudo-query at 0 the weights are uniform, each read is the transformer's
/// residual over its count of sources, and the norms make it the transformer's input: the
/// logits and every gradient of the transformer's own parameters are the transformer's, to the
/// rounding of the mixtures (and its norms' ε·n², 1e-8 here). For a block a layer, Full, and one
/// block, and with raw keys (the paper's Table 4 ablation), whose logits are 0 too at w = 0.
#[test]
fn attnres_starts_as_its_transformer() {
    for (n, depth_keys) in [
        (2, DepthKeys::Normed),
        (4, DepthKeys::Normed),
        (1, DepthKeys::Normed),
        (2, DepthKeys::Raw),
    ] {
        let cfg = AttnResConfig {
            depth_keys,
            ..at(n, 64, 2)
        };
        let be = CpuBackend::<f32>::new();
        let model = AttnRes::new(&be, cfg.clone(), 2, 16, 3).unwrap();
        let plain = Transformer::new(&be, cfg.transformer(), 2, 16, 4).unwrap();
        let name = format!("AttnRes N {n}, {depth_keys:?} keys");
        let (_, _, worst) = common::against_transformer(&name, &be, (&model, &plain), |_, _| {});
        assert!(worst < 2e-5, "{name}: logits differ by {worst} of the largest");

        let tensors = BatchTensors::new(&be, 2, 16, 256).unwrap();
        tensors
            .write(&be, &TaskSampler::new(Task::Copy, 2, 16, 0).unwrap().next_batch())
            .unwrap();
        for m in [&model as &dyn LanguageModel<_>, &plain] {
            m.forward(&be, &tensors, Observe::Loss);
            m.backward(&be, &tensors, Observe::Loss);
        }
        let read = |x| pollster::block_on(be.read(x)).unwrap();
        let (g, h) = (read(&model.store().grads), read(&plain.store().grads));
        let mut worst: f32 = 0.0;
        for spec in &plain.store().layout.specs {
            let there = model.store().layout.specs.iter().find(|s| s.name == spec.name).unwrap();
            let (a, b) = (&g[there.offset..][..there.len()], &h[spec.offset..][..spec.len()]);
            let size = b.iter().fold(0f32, |m, v| m.max(v.abs()));
            assert!(size > 0.0, "{name}: no gradient reaches {}", spec.name);
            let apart = a.iter().zip(b).fold(0f32, |m, (a, b)| m.max((a - b).abs()));
            worst = worst.max(apart / size);
        }
        eprintln!("{name}: gradients within {worst:.2e} of the transformer's");
        assert!(worst < 1e-5, "{name}: gradients differ by {worst} of their size");
    }
}

/// At init (every w = 0) each read's weights are uniform, 1/n over its n sources exactly: what
/// `resmem analyze depth` shows before training.
#[test]
fn every_read_starts_uniform() {
    let be = CpuBackend::<f32>::new();
    let model = AttnRes::new(&be, at(2, 64, 2), 2, 16, 0).unwrap();
    let tensors = BatchTensors::new(&be, 2, 16, 256).unwrap();
    tensors
        .write(&be, &TaskSampler::new(Task::Copy, 2, 16, 0).unwrap().next_batch())
        .unwrap();
    model.forward(&be, &tensors, Observe::Loss);
    let rows = pollster::block_on(resmem_models::observe::depth(&be, &model, (1, 16, 9)))
        .unwrap()
        .unwrap();
    assert_eq!(rows.len(), 5);
    for r in rows {
        let n = r.weights.len() as f64;
        assert!(r.weights.iter().all(|&w| w == (1.0 / n) as f32 as f64), "{r:?}");
    }
}

/// The presets' norm ε stays at 1e-8 or below, where uniform weights over n sources (ε·n²)
/// leave a toy model's first reads alone (SPEC §7.3.3).
#[test]
fn the_norm_eps_is_capped() {
    let t = TransformerConfig::tiny(256, 16);
    assert!(t.norm_eps > 1e-8);
    assert_eq!(AttnResConfig::widening(&t, 2).norm_eps, 1e-8);
}

/// The keys are normed unless a config says `depth_keys = "raw"`; a config written before the
/// option reads as normed.
#[test]
fn depth_keys_default_to_normed() {
    let cfg = at(2, 64, 2);
    assert_eq!(cfg.depth_keys, DepthKeys::Normed);
    let mut table = toml::Table::try_from(&cfg).unwrap();
    assert_eq!(table.remove("depth_keys"), Some(toml::Value::String("normed".into())));
    assert_eq!(table.clone().try_into::<AttnResConfig>().unwrap(), cfg);
    table.insert("depth_keys".into(), "raw".into());
    let raw: AttnResConfig = table.try_into().unwrap();
    assert_eq!(raw.depth_keys, DepthKeys::Raw);
    assert!(raw.validate().is_ok());
}
