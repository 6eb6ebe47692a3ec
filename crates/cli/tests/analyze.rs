//! `resmem count` and `resmem analyze variance` print the paper's numbers, as JSON with the keys
//! the issue names.

use serde_json::Value;
use std::process::Command;

fn json(args: &[&str]) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_resmem")).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "resmem {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// A run of `preset` in `dir`, trained 60 steps of its task on the CPU.
fn trained(dir: &std::path::Path, preset: &str) -> std::path::PathBuf {
    let run = dir.join(preset);
    let out = Command::new(env!("CARGO_BIN_EXE_resmem"))
        .args([
            "train",
            "--preset",
            preset,
            "--steps",
            "60",
            "--backend",
            "cpu",
            "--out",
        ])
        .arg(&run)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    run
}

fn num(v: &Value, key: &str) -> f64 {
    v[key].as_f64().unwrap_or_else(|| panic!("no number {key} in {v}"))
}

#[test]
fn count_prints_both_formulas_and_the_paper_growth() {
    let count = |arch: &str, flag: &str, value: &str| {
        json(&[
            "count",
            "--arch",
            arch,
            "--preset",
            "gpt2-medium",
            flag,
            value,
            "--json",
        ])
    };
    let (a, b) = (
        count("transformer", "--d-model", "1024"),
        count("transformer", "--d-model", "2048"),
    );
    for key in ["params", "params_paper", "flops_fwd", "flops_fwd_paper"] {
        assert!(a[key].as_u64().is_some(), "{key} missing from {a}");
    }
    let grow = |key| num(&b, key) / num(&a, key) - 1.0;
    assert!((grow("params_paper") - 1.0).abs() < 1e-9);
    assert!((grow("flops_fwd_paper") - 0.94).abs() < 0.005);
    let (a, b) = (count("rmt", "--d-k", "16"), count("rmt", "--d-k", "32"));
    let grow = |key| num(&b, key) / num(&a, key) - 1.0;
    assert!(grow("params_paper") < 0.01 && grow("flops_fwd_paper") < 0.01);
}

#[test]
fn closed_form_prints_table2_transformer_rows() {
    let rows = json(&[
        "analyze",
        "variance",
        "--closed-form",
        "--arch",
        "transformer",
        "--preset",
        "gpt2-medium",
        "--init",
        "xavier",
        "--json",
    ]);
    let want = [
        ("attn", "retrieval", 0.5, 1.5),
        ("attn", "storage", 1.0, 1.0),
        ("ff", "retrieval", 0.4, 1.6),
        ("ff", "storage", 1.6, 0.4),
    ];
    for (layer, op, f, b) in want {
        let r = rows
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["layer"] == layer && r["op"] == op)
            .unwrap_or_else(|| panic!("no {layer} {op} row in {rows}"));
        assert_eq!(r["model"], "transformer");
        assert!(
            (num(r, "forward_ratio") - f).abs() < 1e-9 && (num(r, "backward_ratio") - b).abs() < 1e-9,
            "{r}"
        );
    }
}

/// `analyze variance --measured` of `arch` at `preset` and the flags `dims`, on the CPU with
/// a random unembedding; its rows, which must be `sites` for each of two blocks.
fn measured(arch: &str, preset: &str, dims: &[&str], sites: usize) -> Vec<Value> {
    let mut args = vec!["analyze", "variance", "--measured", "--arch", arch, "--preset", preset];
    args.extend_from_slice(dims);
    args.extend(["--backend", "cpu", "--random-unembedding", "--json"]);
    let rows = json(&args).as_array().unwrap().clone();
    assert_eq!(rows.len(), 2 * sites, "two blocks, {sites} sites each: {rows:?}");
    rows
}

#[test]
fn measured_variance_reports_every_site() {
    // Storage and retrieval of attention and FF, and the RMT's own W1 and W2.
    let rows = measured("rmt", "table9-46m", &["--layers", "2", "--d-ff", "64"], 6);
    let ops: Vec<&str> = rows.iter().map(|r| r["op"].as_str().unwrap()).collect();
    assert_eq!(ops.iter().filter(|op| **op == "w1").count(), 2, "{ops:?}");
    assert_eq!(ops.iter().filter(|op| **op == "w2").count(), 2, "{ops:?}");
    for r in &rows {
        for key in ["model", "layer", "op", "forward_ratio", "backward_ratio"] {
            assert!(r.get(key).is_some(), "{key} missing from {r}");
        }
        assert!(num(r, "forward_ratio") > 0.0 && num(r, "backward_ratio") > 0.0, "{r}");
    }
}

#[test]
fn unknown_preset_names_the_choices() {
    let out = Command::new(env!("CARGO_BIN_EXE_resmem"))
        .args(["count", "--preset", "gpt5"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("gpt2-medium") && err.contains("table9-305m"), "{err}");
}

/// MemoryFormer Table 1 (MF-tiny on Pythia-70M: d = 512, s = 2048, τ = 8) and Table 3 (the
/// memory of ML_Q), from `resmem count --json`.
#[test]
fn count_memoryformer_prints_the_paper_tables() {
    let b = json(&["count", "--arch", "memoryformer", "--preset", "pythia-70m", "--json"]);
    let g = |key: &str| num(&b, key) / 1e9;
    assert!((g("dense_block_flops_no_attn_paper") - 6.4).abs() < 0.05);
    assert!((g("dense_block_flops_paper") - 10.7).abs() < 0.05);
    assert!((g("block_flops_no_attn_paper") - 0.4).abs() < 0.05);
    assert!((g("block_flops_paper") - 4.7).abs() < 0.05);
    assert!(g("block_flops") > 0.0 && g("block_flops_no_attn") > 0.0 && g("block_flops") > g("block_flops_no_attn"));
    for key in ["q", "k", "v", "ml1", "ml2"] {
        assert!(b["table_mb_f16"][key].as_f64().is_some(), "{key} missing from {b}");
    }
    for (tau, mb) in [("4", 2.1), ("8", 16.8), ("10", 53.5)] {
        let b = json(&[
            "count",
            "--arch",
            "memoryformer",
            "--d-model",
            "512",
            "--tau",
            tau,
            "--json",
        ]);
        let q = b["table_mb_f16"]["q"].as_f64().unwrap();
        assert!((q - mb).abs() < 0.05, "τ = {tau}: ML_Q {q} MB, paper {mb}");
    }
    let out = Command::new(env!("CARGO_BIN_EXE_resmem"))
        .args(["count", "--arch", "memoryformer", "--paper-table", "1"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("MF-tiny") && text.contains("4.7 G") && text.contains("10.7 G"),
        "{text}"
    );
}

/// The hybrid from a training preset: its counts beside the RMT's (its memory block replaces
/// W1 and W2), its storages and retrievals with the RMT's closed form, and measured probes.
#[test]
fn hybrid_counts_and_variance() {
    let h = json(&["count", "--arch", "hybrid", "--preset", "small-hybrid", "--json"]);
    for key in [
        "params",
        "params_paper",
        "flops_fwd",
        "flops_fwd_paper",
        "table_params",
        "table_mb_f32",
    ] {
        assert!(num(&h, key) > 0.0, "{key} missing from {h}");
    }
    assert!(num(&h, "table_params") < num(&h, "params"), "{h}");
    let r = json(&["count", "--arch", "rmt", "--preset", "small-rmt", "--json"]);
    assert!(num(&h, "flops_fwd") < num(&r, "flops_fwd"), "{h} vs {r}");
    let closed = |arch: &str| {
        let rows = json(&["analyze", "variance", "--closed-form", "--arch", arch, "--json"]);
        let rows = rows.as_array().unwrap().clone();
        assert!(rows.iter().all(|row| row["model"] == arch), "{rows:?}");
        rows.iter()
            .map(|row| (num(row, "forward_ratio"), num(row, "backward_ratio")))
            .collect::<Vec<_>>()
    };
    // The RMT's storages and retrievals; the hybrid has no W1 and W2 of its own.
    assert_eq!(closed("hybrid"), closed("rmt")[..4]);
    let rows = measured("hybrid", "tiny-hybrid", &[], 4);
    assert!(rows
        .iter()
        .all(|r| r["model"] == "hybrid" && num(r, "backward_ratio") > 0.0));
}

/// `analyze residual` reads the residual stream the playground's viewer shows: the same values
/// on the CPU and the GPU, the RMT's as D_k×D_v matrices whose spectrum is consistent (norm² =
/// Σσ², 1 ≤ effective rank ≤ min(D_k, D_v)), the transformer's as vectors; bad depths,
/// tokens and sequences are messages.
#[test]
fn analyze_residual_reads_every_depth_on_both_backends() {
    let token = |backend: &str, preset: &str, depth: &str| {
        json(&[
            "analyze",
            "residual",
            "--preset",
            preset,
            "--step",
            "2",
            "--seq",
            "1",
            "--depth",
            depth,
            "--token",
            "5",
            "--backend",
            backend,
            "--json",
        ])
    };
    for (preset, depth) in [("tiny-rmt", "block1.ff"), ("tiny-transformer", "block0.attn")] {
        let (cpu, gpu) = (token("cpu", preset, depth), token("gpu", preset, depth));
        let (a, b) = (cpu["values"].as_array().unwrap(), gpu["values"].as_array().unwrap());
        assert_eq!(a.len(), b.len());
        let scale = a.iter().map(|x| x.as_f64().unwrap().abs()).fold(0.0, f64::max);
        for (x, y) in a.iter().zip(b) {
            assert!(
                (x.as_f64().unwrap() - y.as_f64().unwrap()).abs() < 1e-4 * scale.max(1.0),
                "{preset}: {x} {y}"
            );
        }
        if preset == "tiny-rmt" {
            assert_eq!(
                cpu["shape"],
                serde_json::json!({"kind": "matrix", "rows": 8, "cols": 16})
            );
            let sp = &cpu["spectrum"];
            let sigma: Vec<f64> = sp["singular_values"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| s.as_f64().unwrap())
                .collect();
            let norm2: f64 = a.iter().map(|x| x.as_f64().unwrap().powi(2)).sum();
            assert!(
                (sigma.iter().map(|s| s * s).sum::<f64>() - norm2).abs() < 1e-6 * norm2,
                "{sp}"
            );
            assert!((num(sp, "norm").powi(2) - norm2).abs() < 1e-6 * norm2);
            let rank = num(sp, "effective_rank");
            assert!((1.0..=8.0).contains(&rank), "{rank}");
        } else {
            assert_eq!(cpu["shape"], serde_json::json!({"kind": "vector", "len": 64}));
            assert!(cpu["spectrum"].is_null());
        }
    }
    let table = json(&[
        "analyze",
        "residual",
        "--preset",
        "tiny-rmt",
        "--backend",
        "cpu",
        "--json",
    ]);
    let depths: Vec<&str> = table
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["depth"].as_str().unwrap())
        .collect();
    assert_eq!(
        depths,
        ["embedding", "block0.attn", "block0.ff", "block1.attn", "block1.ff"]
    );
    for (args, says) in [
        (
            &["--depth", "block9.ff"][..],
            "this model's depths are embedding, block0.attn",
        ),
        (&["--depth", "embedding", "--token", "16"], "past the 16 tokens"),
        (&["--seq", "32"], "past the batch"),
        (&["--preset", "small-rmt"], "give its run with --run"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_resmem"))
            .args(["analyze", "residual", "--backend", "cpu"])
            .args(args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains(says) && !err.contains("panicked"),
            "{args:?}: {err}"
        );
    }
}

/// `analyze lens` and `analyze attention` on a run of every architecture's tiny preset, trained
/// 60 steps of copy on the CPU. The lens: a row per depth, depths that predict differently, the
/// same probabilities and KL from the CPU and the GPU on the same weights (and the same top
/// token wherever it leads by more than rounding), and KL 0 at the last depth. The attention:
/// a (T, T) pattern per block and head whose rows are distributions over the keys up to the
/// query, some head no longer uniform, the same weights from both backends.
#[test]
fn analyze_lens_and_attention_agree_on_both_backends_for_every_architecture() {
    let dir = tempfile::tempdir().unwrap();
    for preset in ["tiny-rmt", "tiny-transformer", "tiny-memoryformer", "tiny-hybrid"] {
        let run = trained(dir.path(), preset);
        let run = run.to_str().unwrap();
        let lens = |backend: &str| {
            json(&[
                "analyze",
                "lens",
                "--run",
                run,
                "--seq",
                "1",
                "--token",
                "12",
                "--top",
                "3",
                "--backend",
                backend,
                "--json",
            ])
        };
        let (cpu, gpu) = (lens("cpu"), lens("gpu"));
        let (a, b) = (cpu.as_array().unwrap(), gpu.as_array().unwrap());
        assert_eq!(
            a.len(),
            5,
            "{preset}: embedding and two blocks' attention and FF: {cpu}"
        );
        let last = a.last().unwrap();
        assert_eq!(last["kl_to_final"].as_f64(), Some(0.0), "{preset}");
        assert!(
            a.iter().any(|r| r["kl_to_final"].as_f64().unwrap() > 0.01),
            "{preset}: every depth alike: {cpu}"
        );
        for (x, y) in a.iter().zip(b) {
            assert_eq!(x["depth"], y["depth"]);
            let (tx, ty) = (x["top"].as_array().unwrap(), y["top"].as_array().unwrap());
            assert_eq!(tx.len(), 3);
            for (p, q) in tx.iter().zip(ty) {
                assert!(
                    (p[1].as_f64().unwrap() - q[1].as_f64().unwrap()).abs() < 1e-4,
                    "{preset}: {x} {y}"
                );
            }
            // The top token, unless the first two are within rounding of each other.
            if tx[0][1].as_f64().unwrap() - tx[1][1].as_f64().unwrap() > 1e-4 {
                assert_eq!(tx[0][0], ty[0][0], "{preset} {}: top token {x} {y}", x["depth"]);
            }
            let (kx, ky) = (x["kl_to_final"].as_f64().unwrap(), y["kl_to_final"].as_f64().unwrap());
            assert!((kx - ky).abs() < 1e-3 * kx.max(1.0), "{preset}: KL {kx} {ky}");
        }

        let attention = |backend: &str| {
            let all = json(&[
                "analyze",
                "attention",
                "--run",
                run,
                "--seq",
                "1",
                "--backend",
                backend,
                "--json",
            ]);
            let weights = |p: &Value| -> Vec<f64> {
                (p["weights"].as_array().unwrap().iter())
                    .map(|w| w.as_f64().unwrap())
                    .collect()
            };
            all.as_array()
                .unwrap()
                .iter()
                .map(|p| (p["block"].to_string(), p["head"].as_u64().unwrap(), weights(p)))
                .collect::<Vec<_>>()
        };
        let (cpu, gpu) = (attention("cpu"), attention("gpu"));
        assert!(
            cpu.len() >= 2 && cpu.len() % 2 == 0,
            "{preset}: two blocks' heads, {} patterns",
            cpu.len()
        );
        let t = (cpu[0].2.len() as f64).sqrt() as usize;
        assert_eq!(t * t, cpu[0].2.len(), "{preset}: a (T, T) pattern");
        let mut peaked = false;
        for ((block, head, w), (block_gpu, head_gpu, w_gpu)) in cpu.iter().zip(&gpu) {
            assert_eq!((block, head), (block_gpu, head_gpu));
            for i in 0..t {
                let row = &w[i * t..(i + 1) * t];
                assert!(
                    (row.iter().sum::<f64>() - 1.0).abs() < 1e-9,
                    "{preset} {block} head {head}: row {i} {row:?}"
                );
                assert!(
                    row[i + 1..].iter().all(|&x| x == 0.0),
                    "{preset} {block} head {head}: row {i} looks ahead"
                );
                peaked |= row.iter().cloned().fold(0.0, f64::max) > 2.0 / (i + 1) as f64 && i > 2;
            }
            let worst = w.iter().zip(w_gpu).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
            assert!(
                worst < 1e-4,
                "{preset} {block} head {head}: CPU and GPU differ by {worst}"
            );
        }
        assert!(peaked, "{preset}: every head still uniform after training");
    }
}

/// `analyze keys` on the RMT and the hybrid, after a few steps of their task presets: a slot per
/// head of each block, with its six keys' norms and a stored share, the shares of a block adding
/// to 1, the same from the CPU and the GPU; a model without key slots is refused with a reason.
#[test]
fn analyze_keys_reads_every_slot_on_both_backends() {
    for preset in ["tiny-rmt", "tiny-hybrid"] {
        let keys = |backend: &str| {
            let args = [
                "analyze",
                "keys",
                "--preset",
                preset,
                "--step",
                "4",
                "--backend",
                backend,
                "--json",
            ];
            json(&args).as_array().unwrap().clone()
        };
        let (cpu, gpu) = (keys("cpu"), keys("gpu"));
        assert!(
            cpu.len() >= 4 && cpu.len() == gpu.len(),
            "{preset}: {} slots",
            cpu.len()
        );
        let mut shares = std::collections::BTreeMap::<String, f64>::new();
        for (a, b) in cpu.iter().zip(&gpu) {
            assert_eq!((&a["block"], &a["slot"]), (&b["block"], &b["slot"]));
            let numbers = |k: &Value| -> Vec<f64> {
                let mut v: Vec<f64> = (k["retrieval"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .chain(k["storage"].as_array().unwrap()))
                .map(|x| x.as_f64().unwrap())
                .collect();
                v.push(k["stored_share"].as_f64().unwrap());
                v
            };
            let (x, y) = (numbers(a), numbers(b));
            assert_eq!(x.len(), 7, "{a}");
            assert!(x[..6].iter().all(|&n| n.is_finite() && n > 0.0), "{preset}: {a}");
            for (p, q) in x.iter().zip(&y) {
                assert!(
                    (p - q).abs() <= 1e-4 * p.abs().max(1.0),
                    "{preset}: CPU {a} against GPU {b}"
                );
            }
            *shares.entry(a["block"].to_string()).or_default() += x[6];
        }
        for (block, total) in &shares {
            assert!((total - 1.0).abs() < 1e-9, "{preset} {block}: shares add to {total}");
        }
    }
    refused("keys", "tiny-transformer");
}

/// A run of `resmem train ARGS --backend cpu --out DIR/NAME`, trained; its directory.
fn trained_with(dir: &tempfile::TempDir, name: &str, args: &[&str]) -> String {
    let run = dir.path().join(name).to_str().unwrap().to_string();
    let out = Command::new(env!("CARGO_BIN_EXE_resmem"))
        .arg("train")
        .args(args)
        .args(["--backend", "cpu", "--out", &run])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    run
}

/// `resmem analyze VIEW --run RUN --token 5 --json`'s rows on the CPU and on the GPU.
fn on_both_backends(view: &str, run: &str) -> (Vec<Value>, Vec<Value>) {
    let rows = |backend: &str| {
        let args = [
            "analyze",
            view,
            "--run",
            run,
            "--token",
            "5",
            "--backend",
            backend,
            "--json",
        ];
        json(&args).as_array().unwrap().clone()
    };
    (rows("cpu"), rows("gpu"))
}

/// A row's numbers under `key`.
fn numbers(r: &Value, key: &str) -> Vec<f64> {
    r[key].as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect()
}

/// Every number under `keys` of the CPU's row within 1e-4 (relative, past 1) of the GPU's.
fn same_on_both(a: &Value, b: &Value, keys: &[&str]) {
    for key in keys {
        for (x, y) in numbers(a, key).iter().zip(numbers(b, key)) {
            assert!(
                (x - y).abs() <= 1e-4 * x.abs().max(1.0),
                "{key}: CPU {a} against GPU {b}"
            );
        }
    }
}

/// `resmem analyze VIEW --preset PRESET` is refused: the model has none of what it reads.
fn refused(view: &str, preset: &str) {
    let out = Command::new(env!("CARGO_BIN_EXE_resmem"))
        .args(["analyze", view, "--preset", preset, "--backend", "cpu"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("has none"), "{err}");
}

/// `analyze mixing` on the tiny mHC and mHC-lite after 4 steps: a row per site, pre in (0, 1]
/// (σ + ε), post in (0, 2), every stream's norm, each P doubly stochastic (Sinkhorn's columns, normalised last, to
/// 1e-5, its rows to 1e-3; mHC-lite's both exactly) and so the composite gain 1; the same from
/// the CPU and the GPU. A model without hyper-connections is refused with a reason.
#[test]
fn analyze_mixing_reads_every_site_on_both_backends() {
    let dir = tempfile::tempdir().unwrap();
    for mixing in ["mhc", "mhc-lite"] {
        let run = trained_with(&dir, mixing, &["--arch", "hc", "--mixing", mixing, "--steps", "4"]);
        let (cpu, gpu) = on_both_backends("mixing", &run);
        let names: Vec<&str> = cpu.iter().map(|r| r["site"].as_str().unwrap()).collect();
        assert_eq!(
            names,
            ["block0.attn", "block0.ff", "block1.attn", "block1.ff"],
            "{mixing}"
        );
        for (a, b) in cpu.iter().zip(&gpu) {
            let (pre, post, p) = (numbers(a, "pre"), numbers(a, "post"), numbers(a, "mix"));
            let n = pre.len();
            assert!(
                pre.iter().all(|&x| x > 0.0 && x <= 1.0 + 1e-5) && post.iter().all(|&x| x > 0.0 && x < 2.0),
                "{a}"
            );
            for i in 0..n {
                let row: f64 = p[i * n..(i + 1) * n].iter().sum();
                let col: f64 = (0..n).map(|j| p[j * n + i]).sum();
                assert!(
                    (row - 1.0).abs() < 1e-3 && (col - 1.0).abs() < 1e-5,
                    "{mixing} {a}: row {row}, column {col}"
                );
            }
            for g in numbers(a, "composite_gain") {
                assert!((g - 1.0).abs() < 1e-3, "{mixing} {a}");
            }
            let norms = numbers(a, "stream_norms");
            assert!(norms.len() == n && norms.iter().all(|&x| x > 0.0), "{a}");
            same_on_both(a, b, &["pre", "post", "mix", "composite_gain", "stream_norms"]);
        }
    }
    refused("mixing", "tiny-rmt");
}

/// `analyze altup` on the tiny AltUp (K 4, L 2): at step 1 every layer's P is I and g is 1
/// exactly, it computes on sub-block ℓ mod 4, and its four sub-blocks are copies (every cosine
/// 1, SPEC T-A2); after 20 steps P has left I and the sub-blocks have parted (slightly: the
/// cosines are 0.9999 there), the same from the CPU and the GPU. A model without sub-blocks is refused with a reason.
#[test]
fn analyze_altup_reads_every_layer_on_both_backends() {
    let init = json(&[
        "analyze",
        "altup",
        "--preset",
        "tiny-altup",
        "--step",
        "1",
        "--token",
        "3",
        "--backend",
        "cpu",
        "--json",
    ]);
    let init = init.as_array().unwrap();
    assert_eq!(init.len(), 2);
    for (l, r) in init.iter().enumerate() {
        assert_eq!(r["layer"], format!("block{l}"));
        assert_eq!(r["active"], l);
        let identity: Vec<f64> = (0..16).map(|ij| f64::from(ij % 5 == 0)).collect();
        assert_eq!(numbers(r, "predict"), identity, "{r}");
        assert_eq!(numbers(r, "correct"), [1.0; 4], "{r}");
        assert!(numbers(r, "cosine").iter().all(|&c| (c - 1.0).abs() < 1e-6), "{r}");
    }
    let dir = tempfile::tempdir().unwrap();
    let run = trained_with(&dir, "altup", &["--arch", "altup", "--steps", "20"]);
    let (cpu, gpu) = on_both_backends("altup", &run);
    for (a, b) in cpu.iter().zip(&gpu) {
        let p = numbers(a, "predict");
        assert!(
            p.iter()
                .enumerate()
                .any(|(ij, &v)| (v - f64::from(ij % 5 == 0)).abs() > 1e-3),
            "{a}"
        );
        let cos = numbers(a, "cosine");
        assert!(
            cos.iter().all(|&c| c.abs() <= 1.0 + 1e-9) && cos.iter().any(|&c| c < 1.0 - 1e-6),
            "{a}"
        );
        same_on_both(a, b, &["predict", "correct", "cosine", "norms"]);
    }
    refused("altup", "tiny-transformer");
}

/// `analyze depth` on the tiny Block AttnRes (L 2, a depth block a layer) after 4 steps: a row
/// per site and the head's, reading the SPEC's source lists (1, 2, 2, 3 sources, the head 3;
/// the FFs' last a partial sum), weights that are a distribution, every source's RMS; the same
/// from the CPU and the GPU. A model without depth reads is refused with a reason.
#[test]
fn analyze_depth_reads_every_site_on_both_backends() {
    let dir = tempfile::tempdir().unwrap();
    let run = trained_with(&dir, "attnres", &["--arch", "attnres", "--steps", "4"]);
    let (cpu, gpu) = on_both_backends("depth", &run);
    let names: Vec<&str> = cpu.iter().map(|r| r["read"].as_str().unwrap()).collect();
    assert_eq!(names, ["block0.attn", "block0.ff", "block1.attn", "block1.ff", "head"]);
    let sources: Vec<Vec<&str>> = (cpu.iter())
        .map(|r| {
            r["sources"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| s.as_str().unwrap())
                .collect()
        })
        .collect();
    assert_eq!(
        sources,
        [
            vec!["b0"],
            vec!["b0", "b1 (partial)"],
            vec!["b0", "b1"],
            vec!["b0", "b1", "b2 (partial)"],
            vec!["b0", "b1", "b2"],
        ]
    );
    for (a, b) in cpu.iter().zip(&gpu) {
        let (w, rms) = (numbers(a, "weights"), numbers(a, "rms"));
        assert!(
            (w.iter().sum::<f64>() - 1.0).abs() < 1e-5 && w.iter().all(|&x| x >= 0.0),
            "{a}"
        );
        assert!(rms.len() == w.len() && rms.iter().all(|&x| x > 0.0), "{a}");
        same_on_both(a, b, &["weights", "rms"]);
    }
    refused("depth", "tiny-transformer");
}

/// Every view of one forward on the GPU (lavapipe) with GPT-2's vocabulary, at the second
/// sequence and token 13: a token's row of V = 50,257 logits, and each sequence's rows of every
/// other tensor, start at offsets that are no multiple of the GPU's 64-value view alignment
/// (the lens panicked there). Each view runs, and the lens gives the CPU's probabilities.
#[test]
fn every_view_reads_rows_at_any_offset_on_the_gpu_with_gpt2s_vocabulary() {
    let data = concat!(env!("CARGO_MANIFEST_DIR"), "/../../data/shakespeare-gpt2");
    assert!(std::path::Path::new(data).is_dir(), "run `cargo xtask corpus` first");
    let dir = tempfile::tempdir().unwrap();
    for (preset, views) in [
        ("tiny-rmt", &["residual", "lens", "attention", "keys"][..]),
        ("tiny-hc", &["residual", "lens", "mixing"][..]),
    ] {
        let run = dir.path().join(preset);
        let out = Command::new(env!("CARGO_BIN_EXE_resmem"))
            .args([
                "train",
                "--preset",
                preset,
                "--data",
                data,
                "--seq-len",
                "15",
                "--batch",
                "3",
            ])
            .args(["--steps", "2", "--backend", "cpu", "--out"])
            .arg(&run)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let run = run.to_str().unwrap();
        for view in views {
            let at = |backend: &str| {
                let mut args = vec![
                    "analyze",
                    view,
                    "--run",
                    run,
                    "--seq",
                    "1",
                    "--backend",
                    backend,
                    "--json",
                ];
                if *view != "keys" {
                    args.extend(["--token", "13"]);
                }
                json(&args)
            };
            let gpu = at("gpu");
            if *view == "lens" {
                let cpu = at("cpu");
                for (x, y) in cpu.as_array().unwrap().iter().zip(gpu.as_array().unwrap()) {
                    for (p, q) in x["top"].as_array().unwrap().iter().zip(y["top"].as_array().unwrap()) {
                        let (p, q) = (p[1].as_f64().unwrap(), q[1].as_f64().unwrap());
                        assert!((p - q).abs() < 1e-4, "{preset} lens: {x} {y}");
                    }
                }
            }
        }
    }
}

/// The views decode token ids with the run's tokenizer, and `--text` puts your own prompt in
/// the sequence they read: the lens names the token and what came before it, attention names
/// each key's token, JSON keeps the ids, and a token past the text is refused.
#[test]
fn views_show_text_and_probe_your_own() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("r");
    let resmem = |args: &[&str]| Command::new(env!("CARGO_BIN_EXE_resmem")).args(args).output().unwrap();
    let r = run.to_str().unwrap();
    let o = resmem(&[
        "train",
        "--arch",
        "rmt",
        "--task",
        "copy",
        "--steps",
        "4",
        "--backend",
        "cpu",
        "--out",
        r,
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = |args: &[&str]| {
        let o = resmem(args);
        assert!(o.status.success(), "{args:?}: {}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stdout).to_string()
    };
    let lens = text(&[
        "analyze",
        "lens",
        "--run",
        r,
        "--backend",
        "cpu",
        "--token",
        "2",
        "--text",
        "abcd",
    ]);
    assert!(lens.contains(r#"token 2 "c" (after "ab")"#), "{lens}");
    let attention = text(&["analyze", "attention", "--run", r, "--backend", "cpu", "--text", "abc"]);
    assert!(
        attention.contains(r#"token 2 "c""#) && attention.contains(r#"0 "a": "#),
        "{attention}"
    );
    let rows: Value = serde_json::from_str(&text(&[
        "analyze",
        "lens",
        "--run",
        r,
        "--backend",
        "cpu",
        "--token",
        "2",
        "--text",
        "abcd",
        "--json",
    ]))
    .unwrap();
    assert!(rows[0]["top"][0][0].is_u64(), "JSON keeps token ids: {rows}");
    let o = resmem(&[
        "analyze",
        "lens",
        "--run",
        r,
        "--backend",
        "cpu",
        "--token",
        "5",
        "--text",
        "abc",
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("past the 3 tokens"), "{err}");
}

/// `analyze attribute`, `ablate` and `patch` on tiny runs of an RMT, a transformer and a
/// MemoryFormer trained 60 steps of copy: the attribution adds up to the logit over the writes
/// and over the key slots, and a block's ML2 tables and bias to its FF's write; an ablation's and
/// a patch's numbers agree on the CPU and the GPU, tables included; and patching the whole last
/// residual (or the embedding's) at every position recovers all of the difference.
#[test]
fn attribute_ablate_and_patch_agree_on_both_backends() {
    let dir = tempfile::tempdir().unwrap();
    for preset in ["tiny-rmt", "tiny-transformer", "tiny-memoryformer"] {
        let run = trained(dir.path(), preset);
        let run = run.to_str().unwrap();
        let on = |backend: &str, args: &[&str]| {
            let mut all = vec!["analyze"];
            all.extend(args);
            all.extend(["--run", run, "--prompt", "abcdefgh", "--backend", backend, "--json"]);
            json(&all)
        };
        let close =
            |a: f64, b: f64, what: &str| assert!((a - b).abs() <= 1e-3 * (1.0 + b.abs()), "{preset} {what}: {a} {b}");
        let sum = |v: &Value| v.as_array().unwrap().iter().map(|s| num(s, "logit")).sum::<f64>();

        let (cpu, gpu) = (on("cpu", &["attribute"]), on("gpu", &["attribute"]));
        close(num(&gpu, "logit"), num(&cpu, "logit"), "the logit");
        close(sum(&cpu["writes"]), num(&cpu, "logit"), "the writes' sum");
        if preset == "tiny-rmt" {
            close(sum(&cpu["groups"]), num(&cpu, "logit"), "the slots' sum");
        }
        if preset == "tiny-memoryformer" {
            let shares = |v: &Value, prefix: &str| -> Vec<f64> {
                (v.as_array().unwrap().iter())
                    .filter(|s| s["site"].as_str().unwrap().starts_with(prefix))
                    .map(|s| num(s, "logit"))
                    .collect()
            };
            let ff = shares(&cpu["writes"], "block0.ff")[0];
            close(
                shares(&cpu["tables"], "block0.ml2.").iter().sum(),
                ff,
                "block 0's ML2 tables' sum",
            );
            for (g, c) in shares(&gpu["tables"], "").iter().zip(shares(&cpu["tables"], "")) {
                close(*g, c, "a table's share");
            }
        }

        let sites = match preset {
            "tiny-rmt" => "block0.attn,slot1",
            "tiny-memoryformer" => "block0.attn,block0.ml2.table1",
            _ => "block0.attn,block1.attn.head0",
        };
        let ablate = ["ablate", "--sites", sites, "--how", "mean"];
        let (cpu, gpu) = (on("cpu", &ablate), on("gpu", &ablate));
        let (a, b) = (
            cpu["ablations"].as_array().unwrap(),
            gpu["ablations"].as_array().unwrap(),
        );
        assert_eq!(a.len(), 3, "{preset}: each site, then both");
        for (a, b) in a.iter().zip(b) {
            close(num(b, "loss_change"), num(a, "loss_change"), "an ablation's loss");
            close(num(b, "logit_change"), num(a, "logit_change"), "an ablation's logit");
        }
        assert!(
            num(&a[0], "loss_change").abs() > 1e-4,
            "{preset}: ablating block0.attn changes nothing"
        );

        let patch = [
            "patch",
            "--corrupt",
            "abcdefgx",
            "--sites",
            if preset == "tiny-memoryformer" {
                "embedding.resid,block1.ff.resid,block0.attn,block0.qkv.table0"
            } else {
                "embedding.resid,block1.ff.resid,block0.attn"
            },
            "--target",
            "#104",
        ];
        let (cpu, gpu) = (on("cpu", &patch), on("gpu", &patch));
        let (a, b) = (cpu["patches"].as_array().unwrap(), gpu["patches"].as_array().unwrap());
        for (a, b) in a.iter().zip(b) {
            close(num(b, "all"), num(a, "all"), "a patch");
        }
        for whole in &a[..2] {
            close(num(whole, "all"), 1.0, "patching a whole residual at every position");
        }
        // Attribution patching beside it: an estimate for every cell, and their agreement.
        for (a, b) in a.iter().zip(b) {
            close(num(b, "estimated_all"), num(a, "estimated_all"), "an estimate");
            assert_eq!(
                a["estimated_positions"].as_array().unwrap().len(),
                8,
                "{preset}: an estimate a position"
            );
        }
        assert!(
            cpu["agreement"]["correlation"].as_f64().is_some_and(f64::is_finite),
            "{preset}: {}",
            cpu["agreement"]
        );
    }
}
