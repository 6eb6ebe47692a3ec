//! Conformance with the official RMT code (SPEC §2a) on the fixture it exported
//! (tests/fixtures/official-rmt): its parameters imported under their official names and axes
//! must give its logits, loss and every gradient, on the CPU in f64 and f32 and on the GPU.
//! A wrong ALiBi slope, eps or layer scaling must fail the same comparison.

mod common;

use common::gpu;
use engine::cpu::CpuBackend;
use engine::Backend;
use resmem_models::official::{self, OfficialDims};
use resmem_models::{BatchTensors, LanguageModel, Observe, Rmt, RmtConfig};
use safetensors::SafeTensors;
use std::collections::BTreeMap;
use std::path::PathBuf;

fn fixture(name: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/official-rmt")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("cannot read the fixture {}: {e}", path.display()))
}

/// The official outputs: float tensors as f64, integer ones as u32.
struct Outputs {
    floats: BTreeMap<String, Vec<f64>>,
    inputs: Vec<u32>,
    targets: Vec<u32>,
}

fn outputs() -> Outputs {
    let bytes = fixture("rmt_official_small_outputs.safetensors");
    let file = SafeTensors::deserialize(&bytes).unwrap();
    let mut floats = BTreeMap::new();
    let ints = |name: &str| -> Vec<u32> {
        let t = file.tensor(name).unwrap();
        t.data()
            .chunks_exact(4)
            .map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]) as u32)
            .collect()
    };
    for (name, t) in file.tensors() {
        if t.dtype() == safetensors::Dtype::F32 {
            let v = t
                .data()
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f64)
                .collect();
            floats.insert(name, v);
        }
    }
    Outputs {
        floats,
        inputs: ints("input_ids"),
        targets: ints("target_ids"),
    }
}

/// What resmem computes on the fixture's batch: logits, CE, total (CE + z-loss) and the
/// gradients of the total under the official names.
struct Computed {
    logits: Vec<f64>,
    ce: f64,
    total: f64,
    grads: BTreeMap<String, Vec<f32>>,
}

/// Imports the fixture's parameters into an RMT of `cfg` (the official sizes, conventions as
/// given), runs forward and backward on its batch, and reads everything back through `read`.
fn compute<B: Backend>(be: &B, cfg: RmtConfig, params: &[u8], read: impl Fn(&B::Tensor) -> Vec<f64>) -> Computed {
    let imported = official::read(params).unwrap();
    let out = outputs();
    let (b, t) = (3, 9);
    let model = Rmt::new(be, cfg.clone(), b, t, 0).unwrap();
    let flat = official::to_flat(&imported, &model.store().layout).unwrap();
    be.write(&model.store().params, &flat);
    let batch = data::Batch {
        b,
        t,
        inputs: out.inputs.clone(),
        targets: out.targets.clone(),
    };
    let tensors = BatchTensors::new(be, b, t, cfg.vocab).unwrap();
    tensors.write(be, &batch).unwrap();
    model.forward(be, &tensors, Observe::Loss);
    model.backward(be, &tensors, Observe::Loss);
    be.flush().unwrap();
    let ce = read(&model.head().loss)[0];
    let lse = read(&model.head().lse);
    let z = cfg.z_loss as f64 * lse.iter().map(|l| l * l).sum::<f64>() / lse.len() as f64;
    let grads_flat: Vec<f32> = read(&model.store().grads).iter().map(|&g| g as f32).collect();
    let grads = official::from_flat(&grads_flat, &model.store().layout, &imported.dims).unwrap();
    Computed {
        logits: read(&model.head().logits),
        ce,
        total: ce + z,
        grads,
    }
}

fn official_config() -> RmtConfig {
    let imported = official::read(&fixture("rmt_official_small_params.safetensors")).unwrap();
    imported.dims.config(9)
}

/// The largest |a − b|.
fn max_diff(a: &[f64], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f64::max)
}

/// Every check of issue 13: logits within 1e-5, the total within 1e-6, every gradient within
/// 1e-6 + 1e-4·its largest magnitude. Returns the failures, empty when it conforms.
fn failures(c: &Computed) -> Vec<String> {
    let out = outputs();
    let f = &out.floats;
    let mut bad = vec![];
    let logits = max_diff(&c.logits, &f["logits"]);
    if logits > 1e-5 {
        bad.push(format!("logits differ by up to {logits:.3e}"));
    }
    let total = (c.total - f["total"][0]).abs();
    if total > 1e-6 {
        bad.push(format!(
            "total loss {} against the official {} ({total:.3e})",
            c.total, f["total"][0]
        ));
    }
    let ce = (c.ce - f["ce"][0]).abs();
    if ce > 1e-6 {
        bad.push(format!(
            "cross-entropy {} against the official {} ({ce:.3e})",
            c.ce, f["ce"][0]
        ));
    }
    let mut worst_grad = 0.0f64;
    for (name, ours) in &c.grads {
        let theirs = &f[&format!("grad.{name}")];
        let ours: Vec<f64> = ours.iter().map(|&g| g as f64).collect();
        let scale = theirs.iter().fold(0.0f64, |m, g| m.max(g.abs()));
        let d = max_diff(&ours, theirs);
        worst_grad = worst_grad.max(d / (1e-6 + 1e-4 * scale));
        if d > 1e-6 + 1e-4 * scale {
            bad.push(format!(
                "grad.{name} differs by {d:.3e} (largest magnitude {scale:.3e})"
            ));
        }
    }
    eprintln!(
        "logits {logits:.2e}, total {total:.2e}, ce {ce:.2e}, worst gradient at {worst_grad:.3} of its tolerance"
    );
    bad
}

fn params() -> Vec<u8> {
    fixture("rmt_official_small_params.safetensors")
}

#[test]
fn the_official_fixture_conforms_on_the_cpu_in_f64() {
    let be = CpuBackend::<f64>::new();
    let c = compute(&be, official_config(), &params(), |t| t.get().to_vec());
    assert_eq!(failures(&c), Vec::<String>::new());
}

#[test]
fn the_official_fixture_conforms_on_the_cpu_in_f32() {
    let be = CpuBackend::<f32>::new();
    let c = compute(&be, official_config(), &params(), |t| {
        t.get().iter().map(|&v| v as f64).collect()
    });
    assert_eq!(failures(&c), Vec::<String>::new());
}

#[test]
fn the_official_fixture_conforms_on_the_gpu() {
    let be = gpu();
    let read = |t: &_| -> Vec<f64> {
        pollster::block_on(be.read(t))
            .unwrap()
            .into_iter()
            .map(f64::from)
            .collect()
    };
    let c = compute(&be, official_config(), &params(), read);
    assert_eq!(failures(&c), Vec::<String>::new());
}

/// Each plausible mistake moves the outputs past the tolerances: the comparison can fail.
#[test]
fn a_wrong_convention_fails_the_comparison() {
    let be = CpuBackend::<f64>::new();
    let run = |cfg: RmtConfig, params: &[u8]| compute(&be, cfg, params, |t| t.get().to_vec());
    let official = official_config();
    let mistakes = [
        (
            "no division of the logits by (layer + 1)",
            RmtConfig {
                attn_layer_scale: false,
                ..official.clone()
            },
        ),
        (
            "RMSNorm eps 1e-5",
            RmtConfig {
                norm_eps: 1e-5,
                ..official.clone()
            },
        ),
    ];
    for (what, cfg) in mistakes {
        assert!(
            !failures(&run(cfg, &params())).is_empty(),
            "{what} passed the conformance checks"
        );
    }
    // ALiBi's slope belongs to the head's index: the same heads in reverse order compute the same
    // function but for the slopes, so this is the model with every head's slope mistaken.
    let reversed = reverse_heads(&params());
    assert!(
        !failures(&run(official.clone(), &reversed)).is_empty(),
        "ALiBi slopes in reverse head order passed the conformance checks"
    );
}

/// The fixture's parameters with the Rank axis (the heads) reversed in every tensor.
fn reverse_heads(bytes: &[u8]) -> Vec<u8> {
    let imported = official::read(bytes).unwrap();
    let dims = imported.dims;
    let mut tensors = BTreeMap::new();
    for m in &official::MAPPINGS {
        let src = &imported.tensors[m.official];
        let shape: Vec<usize> = m.axes.iter().map(|&a| dims.size(a)).collect();
        let r_axis = m.axes.iter().position(|&a| a == official::Axis::Rank);
        let mut dst = src.clone();
        if let Some(ax) = r_axis {
            let inner: usize = shape[ax + 1..].iter().product();
            let r = shape[ax];
            for (i, v) in dst.iter_mut().enumerate() {
                let h = (i / inner) % r;
                let j = i - h * inner + (r - 1 - h) * inner;
                *v = src[j];
            }
        }
        tensors.insert(m.official.to_string(), dst);
    }
    official::to_bytes(&tensors, &dims).unwrap()
}

/// Import then export gives back every tensor's bytes, whatever the sizes.
#[test]
fn import_then_export_is_bit_exact() {
    let original = params();
    let imported = official::read(&original).unwrap();
    let layout = resmem_models::rmt::layout(&imported.dims.config(9));
    let flat = official::to_flat(&imported, &layout).unwrap();
    let exported = official::to_bytes(
        &official::from_flat(&flat, &layout, &imported.dims).unwrap(),
        &imported.dims,
    )
    .unwrap();
    let (a, b) = (
        SafeTensors::deserialize(&original).unwrap(),
        SafeTensors::deserialize(&exported).unwrap(),
    );
    let mut names = a.names();
    names.sort();
    let mut names_b = b.names();
    names_b.sort();
    assert_eq!(names, names_b);
    for name in names {
        let (x, y) = (a.tensor(name).unwrap(), b.tensor(name).unwrap());
        assert_eq!(x.shape(), y.shape(), "{name}");
        assert!(x.data() == y.data(), "{name}: the exported bytes differ");
    }
    // Odd sizes, all distinct, where a wrong transpose cannot hide: resmem → official → resmem.
    let dims = OfficialDims {
        vocab: 11,
        d_k: 2,
        d_v: 3,
        rank: 5,
        n_layers: 2,
        d_ff: 7,
    };
    let layout = resmem_models::rmt::layout(&dims.config(4));
    let flat: Vec<f32> = (0..layout.total).map(|i| i as f32 * 0.5 - 3.0).collect();
    let bytes = official::to_bytes(&official::from_flat(&flat, &layout, &dims).unwrap(), &dims).unwrap();
    let back = official::to_flat(&official::read(&bytes).unwrap(), &layout).unwrap();
    let used: Vec<usize> = layout.specs.iter().flat_map(|s| s.offset..s.offset + s.len()).collect();
    assert!(
        used.iter().all(|&i| back[i] == flat[i]),
        "resmem → official → resmem changed values"
    );
}

/// Files that are not an official RMT get a message that says what is wrong.
#[test]
fn bad_files_are_refused_with_a_reason() {
    let reason = |bytes: &[u8]| match official::read(bytes) {
        Ok(_) => panic!("a bad file was accepted"),
        Err(e) => e.to_string(),
    };
    assert!(reason(b"not safetensors").contains("not a safetensors file"));
    let imported = official::read(&params()).unwrap();
    let dims = imported.dims;
    let mut t = imported.tensors.clone();
    t.remove("norm.weight");
    let mut views = vec![];
    for (name, v) in &t {
        let shape = official::MAPPINGS
            .iter()
            .find(|m| m.official == name)
            .unwrap()
            .axes
            .iter()
            .map(|&a| dims.size(a))
            .collect();
        views.push((
            name.clone(),
            safetensors::tensor::TensorView::new(safetensors::Dtype::F32, shape, bytemuck::cast_slice(v)).unwrap(),
        ));
    }
    let missing = safetensors::serialize(views, None).unwrap();
    assert!(reason(&missing).contains("lacks the official RMT tensors norm.weight"));
    let mut t = imported.tensors.clone();
    t.get_mut("unembedding.weight").unwrap()[3] = f32::NAN;
    assert!(reason(&official::to_bytes(&t, &dims).unwrap()).contains("non-finite"));
}
