//! `resmem count` and `resmem analyze variance` refuse what they cannot honour: counts that
//! overflow, dimension flags the architecture has no use for, and non-finite settings. Each is a
//! message and a failing exit status, never a panic or a wrapped number.

mod common;

use common::{resmem, stdout};

/// Runs resmem, expects it to fail without panicking and without printing, and returns its
/// stderr.
fn fails(args: &[&str]) -> String {
    let out = resmem(args);
    assert!(out.stdout.is_empty(), "resmem {args:?} printed {}", stdout(&out));
    common::failed(args, out)
}

#[test]
fn counts_that_overflow_name_the_setting() {
    let err = fails(&["count", "--arch", "rmt", "--d-k", "1000000000000000"]);
    assert!(
        err.contains("overflow") && err.contains("d_k = 1000000000000000"),
        "{err}"
    );
    let err = fails(&["count", "--arch", "rmt", "--d-k", "1000000000000000", "--json"]);
    assert!(err.contains("overflow"), "{err}");
    for arch in ["transformer", "rmt", "hybrid"] {
        let err = fails(&["count", "--arch", arch, "--seq-len", "18446744073709551615"]);
        assert!(err.contains("overflow"), "{arch}: {err}");
    }
    // A setting past i64 (TOML's integers) is refused as it is read, by its flag.
    for arch in ["rmt", "hybrid"] {
        let err = fails(&["count", "--arch", arch, "--d-k", "18446744073709551615"]);
        assert!(err.contains("--d-k is too large"), "{arch}: {err}");
    }
    let err = fails(&[
        "count",
        "--arch",
        "transformer",
        "--d-model",
        "4294967296",
        "--heads",
        "4294967296",
    ]);
    assert!(err.contains("overflow"), "{err}");
}

#[test]
fn inapplicable_dimension_flags_are_errors() {
    let cases: &[(&str, &[&str])] = &[
        ("transformer", &["--d-k", "4"]),
        ("transformer", &["--d-v", "4"]),
        ("transformer", &["--rank", "4"]),
        ("transformer", &["--position", "alibi"]),
        ("transformer", &["--tau", "4"]),
        ("rmt", &["--d-model", "64"]),
        ("rmt", &["--heads", "4"]),
        ("rmt", &["--head-dim", "16"]),
        ("rmt", &["--tau", "4"]),
        ("memoryformer", &["--d-k", "4"]),
        ("memoryformer", &["--d-v", "4"]),
        ("memoryformer", &["--rank", "4"]),
        ("memoryformer", &["--position", "learned"]),
        ("memoryformer", &["--head-dim", "16"]),
        ("memoryformer", &["--d-ff", "64"]),
        ("hybrid", &["--d-ff", "64"]),
        ("hybrid", &["--d-model", "64"]),
        ("hybrid", &["--heads", "4"]),
        ("hybrid", &["--head-dim", "16"]),
    ];
    for &(arch, flag) in cases {
        let mut args = vec!["count", "--arch", arch];
        args.extend_from_slice(flag);
        let err = fails(&args);
        assert!(
            err.contains(&format!("{} does not apply to --arch {arch}", flag[0])),
            "{args:?}: {err}"
        );
        // analyze variance shares the flags and the check.
        if arch != "memoryformer" {
            let mut args = vec!["analyze", "variance", "--closed-form", "--arch", arch];
            args.extend_from_slice(flag);
            let err = fails(&args);
            assert!(err.contains("does not apply"), "{args:?}: {err}");
        }
    }
}

#[test]
fn non_finite_init_std_is_refused() {
    for arch in ["transformer", "rmt", "hybrid"] {
        let err = fails(&[
            "analyze",
            "variance",
            "--closed-form",
            "--arch",
            arch,
            "--init-std",
            "inf",
        ]);
        assert!(err.contains("init_std = inf"), "{arch}: {err}");
    }
    let err = fails(&[
        "analyze",
        "variance",
        "--measured",
        "--arch",
        "rmt",
        "--backend",
        "cpu",
        "--init-std",
        "inf",
    ]);
    assert!(err.contains("init_std = inf"), "{err}");
    let err = fails(&["count", "--arch", "transformer", "--init-std", "NaN"]);
    assert!(err.contains("init_std = NaN"), "{err}");
}

#[test]
fn a_preset_of_another_arch_is_refused() {
    let err = fails(&["count", "--arch", "hybrid", "--preset", "small-rmt"]);
    assert!(err.contains("`small-rmt` is a rmt model, not --arch hybrid"), "{err}");
    let err = fails(&["count", "--arch", "hybrid", "--tau", "15"]);
    assert!(err.contains("tau of at most 14"), "{err}");
}

/// `count --match`: the solved size and both models' costs, by flag or config name; what cannot
/// be held is refused with the closest.
#[test]
fn count_matches_costs_by_solving_sizes() {
    let base = [
        "count",
        "--arch",
        "transformer",
        "--preset",
        "small-transformer",
        "--vocab",
        "256",
        "--seq-len",
        "128",
        "--match",
        "small-rmt",
        "--hold",
        "params",
        "--json",
    ];
    for name in ["d_ff", "d-ff"] {
        let out = resmem(&[&base[..], &["--solve", name]].concat());
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        // 2·D·L = 256 parameters per unit of D_FF: D_FF 136 is 108,864 against the RMT's 108,736.
        assert_eq!(v["values"], serde_json::json!([["d_ff", 136]]));
        assert_eq!(v["costs"]["params"], 108_864.0);
        assert_eq!(v["target"]["params"], 108_736.0);
    }
    let err = fails(&[&base[..], &["--solve", "layers", "--tolerance", "0.0001"]].concat());
    assert!(
        err.contains("cannot hold params within 0.0%") && err.contains("the closest, n_layers = "),
        "{err}"
    );
    let err = fails(&[&base[..], &["--solve", "vocab"]].concat());
    assert!(err.contains("cannot solve for `vocab`"), "{err}");
}
