//! What only the hyper-connections family has (SPEC §6): its counts against the spec's table,
//! the streams coming apart (E0), and mHC-lite learning. Gradients, the GPU against the CPU,
//! determinism and the tiny mHC's learning are every_architecture.rs's, as for every family.

mod common;

use common::learn_copy;
use data::{Task, TaskSampler};
use engine::cpu::CpuBackend;
use engine::Backend;
use resmem_models::hyper_connections::{counts, layout};
use resmem_models::{BatchTensors, HcConfig, HcMixing, HyperConnections, LanguageModel, Observe, TrainConfig, Trainer};

/// SPEC §6.8: the parameters counted are the ones built, and at n = 4 a block's two sites cost
/// the table's +12.5% parameters and +16.1% multiply-adds of a 12·D² block at D = 128, +25% and
/// +32% at D = 64.
#[test]
fn counts_are_the_built_parameters_and_the_spec_table() {
    for (streams, mixing) in [(3, HcMixing::Mhc), (1, HcMixing::Mhc), (4, HcMixing::MhcLite)] {
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
    for (d, params, macs) in [(128, 0.125, 0.161), (64, 0.25, 0.32)] {
        let cfg = HcConfig {
            d_model: d,
            ..HcConfig::tiny(256, 16)
        };
        let c = counts(&cfg).unwrap();
        let block = 12.0 * (d * d) as f64;
        let (p, m) = (2.0 * c.site_params as f64 / block, 2.0 * c.site_macs as f64 / block);
        assert!(
            (p - params).abs() < 0.005 && (m - macs).abs() < 0.005,
            "D {d}: +{p:.3} parameters, +{m:.3} MACs"
        );
    }
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
/// trains: the random Φ of `zero-bias` breaks their symmetry.
#[test]
fn the_streams_come_apart() {
    let be = CpuBackend::<f32>::new();
    let cfg = HcConfig::tiny(256, 16);
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
    eprintln!("streams apart at the last depth: {at_init:.2e} at init, {trained:.2e} after 20 steps");
    assert!(
        at_init > 0.0 && trained > 1e-3,
        "the streams stay together: {at_init} then {trained}"
    );
}
