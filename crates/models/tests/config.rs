//! Config validation: every f32 setting must be finite and in range, and the error names the
//! setting and its value.

use resmem_models::params::{Init, LayoutBuilder};
use resmem_models::{HybridConfig, MemoryFormerConfig, RmtConfig, TrainConfig, TransformerConfig};

/// Asserts that `validate` refuses `bad` and names `field` in the error.
fn refuses(field: &str, bad: f32, validate: impl Fn(f32) -> resmem_models::Result<()>) {
    let err = validate(bad)
        .err()
        .unwrap_or_else(|| panic!("{field} = {bad} was accepted"))
        .to_string();
    assert!(err.contains(field), "{field} = {bad}: {err}");
}

const NON_FINITE: [f32; 3] = [f32::INFINITY, f32::NEG_INFINITY, f32::NAN];

#[test]
fn model_floats_must_be_finite_and_in_range() {
    let t = TransformerConfig::tiny(16, 8);
    let r = RmtConfig::tiny(16, 8);
    let m = MemoryFormerConfig::tiny(16, 8);
    assert!(t.validate().is_ok() && r.validate().is_ok() && m.validate().is_ok());
    for bad in NON_FINITE.into_iter().chain([-1.0]) {
        refuses("init_std", bad, |x| {
            TransformerConfig {
                init_std: x,
                ..t.clone()
            }
            .validate()
        });
        refuses("norm_eps", bad, |x| {
            TransformerConfig {
                norm_eps: x,
                ..t.clone()
            }
            .validate()
        });
        refuses("z_loss", bad, |x| {
            TransformerConfig { z_loss: x, ..t.clone() }.validate()
        });
        refuses("init_std", bad, |x| {
            RmtConfig {
                init_std: x,
                ..r.clone()
            }
            .validate()
        });
        refuses("norm_eps", bad, |x| {
            RmtConfig {
                norm_eps: x,
                ..r.clone()
            }
            .validate()
        });
        refuses("z_loss", bad, |x| RmtConfig { z_loss: x, ..r.clone() }.validate());
        for (field, set) in [
            (
                "norm_eps",
                (|c: &mut MemoryFormerConfig, x| c.norm_eps = x) as fn(&mut _, f32),
            ),
            ("temperature", |c, x| c.temperature = x),
            ("table_std", |c, x| c.table_std = x),
            ("bias_std", |c, x| c.bias_std = x),
            ("embed_std", |c, x| c.embed_std = x),
            ("table_lr_mult", |c, x| c.table_lr_mult = x),
            ("z_loss", |c, x| c.z_loss = x),
        ] {
            refuses(field, bad, |x| {
                let mut c = m.clone();
                set(&mut c, x);
                c.validate()
            });
        }
    }
    refuses("init_std", 0.0, |x| {
        TransformerConfig {
            init_std: x,
            ..t.clone()
        }
        .validate()
    });
    // A zero std is a valid init for tables and biases.
    assert!(MemoryFormerConfig {
        table_std: 0.0,
        bias_std: 0.0,
        ..m
    }
    .validate()
    .is_ok());
}

#[test]
fn hybrid_settings_are_validated_by_name() {
    let h = HybridConfig::tiny(16, 8);
    assert!(h.validate().is_ok());
    type Set = fn(&mut HybridConfig, f32);
    let fields: [(&str, Set); 7] = [
        ("init_std", |c, x| c.init_std = x),
        ("norm_eps", |c, x| c.norm_eps = x),
        ("temperature", |c, x| c.temperature = x),
        ("table_std", |c, x| c.table_std = x),
        ("bias_std", |c, x| c.bias_std = x),
        ("table_lr_mult", |c, x| c.table_lr_mult = x),
        ("z_loss", |c, x| c.z_loss = x),
    ];
    for bad in NON_FINITE.into_iter().chain([-1.0]) {
        for (field, set) in fields {
            refuses(field, bad, |x| {
                let mut c = h.clone();
                set(&mut c, x);
                c.validate()
            });
        }
    }
    let err = |c: HybridConfig| c.validate().unwrap_err().to_string();
    let e = err(HybridConfig { tau: 15, ..h.clone() });
    assert!(e.contains("tau of at most 14"), "{e}");
    let e = err(HybridConfig {
        expansion_bits: 5,
        tau: 12,
        ..h.clone()
    });
    assert!(
        e.contains("expansion_bits = 5") && e.contains("tau of at most 11"),
        "{e}"
    );
    let e = err(HybridConfig {
        expansion_bits: 99,
        ..h.clone()
    });
    assert!(e.contains("expansion_bits of at most 15"), "{e}");
    let e = err(HybridConfig { tau: 0, ..h.clone() });
    assert!(e.contains("tau must be at least 1"), "{e}");
    // R·D_v = 2·3 = 6 values cannot fill one chunk of 8.
    let e = err(HybridConfig {
        rank: 2,
        d_v: 3,
        tau: 8,
        ..h.clone()
    });
    assert!(e.contains("tau = 8 exceeds rank × d_v = 6"), "{e}");
    let e = err(HybridConfig { rank: 0, ..h });
    assert!(e.contains("rank must be at least 1"), "{e}");
}

#[test]
fn train_floats_must_be_finite_and_in_range() {
    let d = TrainConfig::default();
    assert!(d.validate().is_ok());
    type Set = fn(&mut TrainConfig, f32);
    let fields: [(&str, Set, &[f32]); 8] = [
        ("lr", |c, x| c.lr = x, &[0.0, -1.0]),
        ("warmup_frac", |c, x| c.warmup_frac = x, &[1.0, -0.1]),
        ("min_lr_frac", |c, x| c.min_lr_frac = x, &[1.5, -0.1]),
        ("weight_decay", |c, x| c.weight_decay = x, &[-1e-4]),
        ("beta1", |c, x| c.beta1 = x, &[1.0, -0.5]),
        ("beta2", |c, x| c.beta2 = x, &[1.0, 2.0]),
        ("eps", |c, x| c.eps = x, &[0.0, -1e-8]),
        ("max_grad_norm", |c, x| c.max_grad_norm = x, &[0.0, -1.0]),
    ];
    for (field, set, bad) in fields {
        for &x in NON_FINITE.iter().chain(bad) {
            refuses(field, x, |x| {
                let mut c = d.clone();
                set(&mut c, x);
                c.validate()
            });
        }
    }
    let err = TrainConfig { lr: f32::INFINITY, ..d }
        .validate()
        .unwrap_err()
        .to_string();
    assert!(err.contains("lr = inf"), "{err}");
}

/// A std that skipped validation gives non-finite values, never a panic.
#[test]
fn init_values_never_panic() {
    let mut lb = LayoutBuilder::default();
    lb.add("a", &[3], true, Init::Normal { std: f32::INFINITY });
    lb.add("b", &[3], true, Init::Normal { std: f32::NAN });
    lb.add("c", &[3], true, Init::Normal { std: -1.0 });
    let values = lb.build().init_values(0);
    assert!(values[..3].iter().all(|v| !v.is_finite() || *v == 0.0));
}
