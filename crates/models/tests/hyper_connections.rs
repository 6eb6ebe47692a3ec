//! The mHC family (SPEC §6) as a whole model: gradients, the GPU against the CPU, determinism,
//! learning, and the streams coming apart (E0). Until it is an `Arch`, it is tested here rather
//! than in every_architecture.rs's table.

mod common;

use common::{assert_bit_identical, gpu, gradient_check, learn_copy, train_steps, Run};
use data::{Task, TaskSampler};
use engine::cpu::CpuBackend;
use engine::{Backend, Mixing};
use resmem_models::hyper_connections::{counts, layout, HcConfig, HyperConnections};
use resmem_models::{BatchTensors, LanguageModel, Observe, TrainConfig, Trainer};

/// Awkward sizes: 3 streams of 7, 2 heads of 3, on 2 layers.
fn small(streams: usize, mixing: Mixing) -> HcConfig {
    HcConfig {
        d_model: 7,
        n_layers: 2,
        n_heads: 2,
        head_dim: 3,
        d_ff: 10,
        streams,
        mixing,
        z_loss: 1e-2,
        ..HcConfig::tiny(11, 16)
    }
}

fn mixings() -> [(usize, Mixing); 3] {
    [
        (3, Mixing::Sinkhorn { iters: 4 }),
        (1, Mixing::Sinkhorn { iters: 20 }),
        (3, Mixing::Permutations),
    ]
}

#[test]
fn gradient_check_every_parameter_tensor() {
    for (n, mixing) in mixings() {
        let be = CpuBackend::<f64>::new();
        let model = HyperConnections::new(&be, small(n, mixing), 2, 5, 1).unwrap();
        gradient_check(&format!("mHC n {n} {mixing:?}"), &be, &model, 11, 1e-2);
    }
}

#[test]
fn first_loss_is_ln_vocab() {
    let be = CpuBackend::<f32>::new();
    let model = HyperConnections::new(&be, HcConfig::tiny(256, 16), 2, 16, 0).unwrap();
    let mut trainer = Trainer::new(&be, model, TrainConfig::default()).unwrap();
    let batch = TaskSampler::new(Task::Copy, 2, 16, 0).unwrap().next_batch();
    let loss = pollster::block_on(trainer.eval(&be, &batch)).unwrap();
    assert!((loss - 256f32.ln()).abs() < 1e-5, "{loss}");
}

#[test]
fn one_training_step_on_the_gpu_matches_the_cpu_and_repeats_bit_for_bit() {
    let (g, c) = (gpu(), CpuBackend::<f32>::new());
    // Not one stream: there P is constant, its logits' gradients are rounding noise around 0,
    // and AdamW's first step turns noise into ±lr, on either backend its own way.
    for (n, mixing) in [
        (3, Mixing::Sinkhorn { iters: 4 }),
        (2, Mixing::Sinkhorn { iters: 20 }),
        (3, Mixing::Permutations),
    ] {
        let cfg = HcConfig {
            vocab: 256,
            ..small(n, mixing)
        };
        eprintln!("n {n} {mixing:?}");
        let on_gpu = || {
            train_steps(
                &g,
                HyperConnections::new(&g, cfg.clone(), 3, 13, 5).unwrap(),
                1,
                5,
                true,
            )
        };
        let first = on_gpu();
        assert_same_step(
            &first,
            &train_steps(
                &c,
                HyperConnections::new(&c, cfg.clone(), 3, 13, 5).unwrap(),
                1,
                5,
                true,
            ),
        );
        assert_bit_identical(&first, &on_gpu());
    }
}

/// One step from random parameters on each backend: the same loss and gradients, and the same
/// parameters after AdamW's first step wherever the gradient is not within rounding of 0. The
/// gates' gradients are small (1e-13 to 1e-5 here), and below about AdamW's ε the first step,
/// lr·g/(|g| + ε), follows each backend's rounding of g: those values may differ, by less than lr.
fn assert_same_step(g: &Run, c: &Run) {
    assert!(
        (g.losses[0] - c.losses[0]).abs() < 1e-5 * c.losses[0],
        "losses: gpu {:?} cpu {:?}",
        g.losses,
        c.losses
    );
    let scale = c.grads.iter().fold(0f32, |m, x| m.max(x.abs()));
    let worst = g
        .grads
        .iter()
        .zip(&c.grads)
        .map(|(x, y)| (x - y).abs())
        .fold(0f32, f32::max);
    assert!(worst < 1e-4 * scale, "gradients differ by {worst} (largest {scale})");
    let lr = TrainConfig::default().lr;
    for (i, ((p, q), grad)) in g.params.iter().zip(&c.params).zip(&c.grads).enumerate() {
        let limit = if grad.abs() > 1e-6 { 1e-6 } else { lr };
        assert!(
            (p - q).abs() <= limit,
            "parameter {i} (gradient {grad:e}): gpu {p}, cpu {q}"
        );
    }
}

/// The same seed gives the same bits on the CPU at one thread and at three.
#[test]
fn same_bits_at_any_thread_count() {
    let run = |threads: usize| {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
        pool.install(|| {
            let c = CpuBackend::<f32>::new();
            let cfg = HcConfig {
                vocab: 256,
                ..small(3, Mixing::Sinkhorn { iters: 20 })
            };
            train_steps(&c, HyperConnections::new(&c, cfg, 3, 13, 9).unwrap(), 3, 9, false)
        })
    };
    let one = run(1);
    assert_bit_identical(&one, &run(3));
    assert_eq!(
        one.losses.iter().map(|l| l.to_bits()).collect::<Vec<_>>(),
        run(2).losses.iter().map(|l| l.to_bits()).collect::<Vec<_>>()
    );
}

#[test]
fn tiny_mhc_and_mhc_lite_learn_copy() {
    let be = CpuBackend::<f32>::new();
    for mixing in [Mixing::Sinkhorn { iters: 20 }, Mixing::Permutations] {
        let cfg = HcConfig {
            mixing,
            ..HcConfig::tiny(256, 16)
        };
        let (first, last) = learn_copy(&be, HyperConnections::new(&be, cfg, 32, 16, 0).unwrap(), 300);
        assert!(
            last < 0.1 * first,
            "{mixing:?}: loss went from {first} to {last}: it did not learn to copy"
        );
    }
}

/// SPEC §6.10 E0: the streams start identical (X⁰ = (e, …, e)) and come apart as the model
/// trains: the random Φ of `zero-bias` breaks their symmetry.
#[test]
fn the_streams_come_apart() {
    let be = CpuBackend::<f32>::new();
    let cfg = HcConfig::tiny(256, 16);
    let (n, d) = (cfg.streams, cfg.d_model);
    let mut trainer = Trainer::new(
        &be,
        HyperConnections::new(&be, cfg, 4, 16, 0).unwrap(),
        TrainConfig {
            batch: 4,
            steps: 20,
            ..Default::default()
        },
    )
    .unwrap();
    let mut sampler = TaskSampler::new(Task::Copy, 4, 16, 0).unwrap();
    // How far apart a token's streams are after the last block, relative to their size.
    let spread = |trainer: &Trainer<CpuBackend<f32>, HyperConnections<CpuBackend<f32>>>, depth: usize| {
        let inside = trainer.model.inside();
        let x = pollster::block_on(be.read(inside.residuals[depth].tensor)).unwrap();
        let token = &x[..n * d];
        let (first, rest) = token.split_at(d);
        let apart = rest
            .chunks(d)
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

/// SPEC §6.8: the parameters counted are the ones built, and at n = 4 a block's two sites cost
/// the table's +12.5% parameters and +16.1% multiply-adds of a 12·D² block at D = 128, +25% and
/// +32% at D = 64.
#[test]
fn counts_are_the_built_parameters_and_the_spec_table() {
    for (n, mixing) in mixings() {
        let cfg = small(n, mixing);
        let built: usize = layout(&cfg).specs.iter().map(|s| s.len()).sum();
        assert_eq!(counts(&cfg).unwrap().model.params, built as u64, "n {n} {mixing:?}");
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
