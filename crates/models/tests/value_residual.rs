//! What only the value residual has (SPEC §7.4, §7.8): the learnable mix's counts, and its two
//! ends: at λ = 0 it is the plain transformer and at λ = ½ the fixed `half`, bit for bit. The
//! worked example T-V1 is `value_residual.rs`'s unit test; the gradient checks (T-V2: V_0 not
//! detached, λ's own gradient) and the GPU against the CPU are every_architecture.rs's rows.

use data::{Task, TaskSampler};
use engine::cpu::CpuBackend;
use engine::Backend;
use resmem_models::transformer::layout;
use resmem_models::{BatchTensors, LanguageModel, Observe, Transformer, TransformerConfig, ValueResidual};

fn config(value_residual: ValueResidual) -> TransformerConfig {
    TransformerConfig {
        n_layers: 3,
        value_residual,
        ..TransformerConfig::tiny(256, 16)
    }
}

/// The learnable mix adds L − 1 parameters (λ_1 … λ_{L−1}), and the counts say so.
#[test]
fn the_learnable_mix_adds_a_parameter_a_later_layer() {
    let count = |v| {
        let cfg = config(v);
        let built: usize = layout(&cfg).specs.iter().map(|s| s.len()).sum();
        let counted = resmem_models::count::try_transformer(&cfg).unwrap();
        assert_eq!(counted.params, built as u64, "{v:?}");
        (built, counted.params_paper)
    };
    let ((half, half_paper), (learnable, learnable_paper)) =
        (count(ValueResidual::Half), count(ValueResidual::Learnable));
    assert_eq!((learnable - half, learnable_paper - half_paper), (2, 2));
}

/// The logits and the parameters' gradients of the learnable mix with every λ set to `lambda`,
/// beside those of `other`, every shared parameter copied across by name.
fn against(lambda: f32, other: ValueResidual) -> [(Vec<u32>, Vec<u32>); 2] {
    let be = CpuBackend::<f32>::new();
    let learnable = Transformer::new(&be, config(ValueResidual::Learnable), 2, 16, 3).unwrap();
    let plain = Transformer::new(&be, config(other), 2, 16, 3).unwrap();
    let read = |x| pollster::block_on(be.read(x)).unwrap();
    let mut from = read(&learnable.store().params);
    let mut to = read(&plain.store().params);
    for spec in &learnable.store().layout.specs {
        let values = &mut from[spec.offset..][..spec.len()];
        if spec.name.ends_with("value_lambda") {
            values.fill(lambda);
            continue;
        }
        // W_U from 0 would keep every gradient but its own at 0.
        if spec.name == "w_u" {
            values
                .iter_mut()
                .enumerate()
                .for_each(|(i, v)| *v = ((i * 7919) % 101) as f32 / 500.0 - 0.1);
        }
        let there = plain.store().layout.specs.iter().find(|s| s.name == spec.name).unwrap();
        to[there.offset..][..there.len()].copy_from_slice(values);
    }
    be.write(&learnable.store().params, &from);
    be.write(&plain.store().params, &to);
    let tensors = BatchTensors::new(&be, 2, 16, 256).unwrap();
    tensors
        .write(&be, &TaskSampler::new(Task::Copy, 2, 16, 0).unwrap().next_batch())
        .unwrap();
    [&learnable as &dyn LanguageModel<_>, &plain].map(|m| {
        m.forward(&be, &tensors, Observe::Loss);
        m.backward(&be, &tensors, Observe::Loss);
        let grads = read(&m.store().grads);
        let shared: Vec<u32> = (m.store().layout.specs.iter())
            .filter(|s| !s.name.ends_with("value_lambda"))
            .flat_map(|s| grads[s.offset..][..s.len()].iter().map(|g| g.to_bits()))
            .collect();
        (read(&m.head().logits).iter().map(|x| x.to_bits()).collect(), shared)
    })
}

/// T-V1's first line: λ = 0 is the transformer without the mix, bit for bit (x·1 + 0·y = x),
/// and so is every gradient of its own parameters.
#[test]
fn lambda_zero_is_the_plain_transformer() {
    let [learnable, plain] = against(0.0, ValueResidual::Off);
    assert!(learnable.0 == plain.0, "the logits differ");
    assert!(learnable.1 == plain.1, "the gradients differ");
}

/// λ from ½ starts as `half`: the same two matrices, so the same bits.
#[test]
fn lambda_half_is_the_fixed_mix() {
    let [learnable, half] = against(0.5, ValueResidual::Half);
    assert!(learnable.0 == half.0, "the logits differ");
    assert!(learnable.1 == half.1, "the gradients differ");
}
