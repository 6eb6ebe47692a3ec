//! `resmem bench --json` on tiny configs, on both backends: every field is there and sane, and
//! the families' forward FLOPs are the model counter's. No timing is compared: numbers live in
//! bench/RESULTS.md.

use serde_json::Value;
use std::process::Command;

fn bench(args: &[&str]) -> Value {
    let runtime = std::env::temp_dir().join("resmem-xdg");
    std::fs::create_dir_all(&runtime).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_resmem"))
        .env("XDG_RUNTIME_DIR", runtime)
        .arg("bench")
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "resmem bench {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&out.stdout)))
}

fn positive(v: &Value, key: &str) -> f64 {
    let x = v[key].as_f64().unwrap_or_else(|| panic!("no number `{key}` in {v}"));
    assert!(x.is_finite() && x > 0.0, "`{key}` = {x} in {v}");
    x
}

#[test]
fn bench_json_has_every_field_and_the_counters_flops_on_cpu_and_gpu() {
    for backend in ["cpu", "gpu"] {
        for arch in ["rmt", "transformer", "memoryformer"] {
            let r = bench(&[
                "--arch",
                arch,
                "--backend",
                backend,
                "--batch",
                "4",
                "--steps",
                "2",
                "--warmup",
                "1",
                "--json",
            ]);
            let at = format!("{arch} on {backend}");
            assert_eq!(r["arch"], arch, "{at}");
            assert!(
                r["backend"].as_str().is_some_and(|s| s.starts_with(backend)),
                "{at}: {r}"
            );
            // The GPU's families are timed by timestamp queries where the adapter has them
            // (engine's gpu_vs_cpu checks which), else by replay.
            let timings: &[&str] = if backend == "cpu" {
                &["per-op"]
            } else {
                &["timestamps", "replay"]
            };
            assert!(timings.iter().any(|t| r["family_timing"] == *t), "{at}: {r}");
            eprintln!("{at}: families timed by {}", r["family_timing"]);
            let paths: &[&str] = if backend == "cpu" {
                &["cpu"]
            } else {
                &["subgroup", "plain"]
            };
            assert!(paths.iter().any(|p| r["matmul_path"] == *p), "{at}: {r}");
            for key in [
                "batch",
                "seq_len",
                "params",
                "warmup_steps",
                "timed_steps",
                "tokens_per_s",
                "peak_device_bytes",
                "peak_rss_bytes",
                "model_flops_per_token",
                "forward_flops_per_token",
                "step_flops_per_token",
                "achieved_gflops",
            ] {
                positive(&r, key);
            }
            let ms = &r["ms_per_step"];
            let (lo, mid, hi) = (positive(ms, "min"), positive(ms, "median"), positive(ms, "max"));
            assert!(lo <= mid && mid <= hi, "{at}: {ms}");
            for key in ["matmul_n", "matmul_gflops", "stream_values", "stream_gbps"] {
                positive(&r["peaks"], key);
            }
            // The shapes' count of the forward is the model counter's.
            let (model, forward, step) = (
                r["model_flops_per_token"].as_f64().unwrap(),
                r["forward_flops_per_token"].as_f64().unwrap(),
                r["step_flops_per_token"].as_f64().unwrap(),
            );
            assert!((forward / model - 1.0).abs() < 0.01, "{at}: {forward} vs {model}");

            let families = r["families"].as_array().unwrap_or_else(|| panic!("{at}: no families"));
            let names: Vec<&str> = families.iter().filter_map(|f| f["family"].as_str()).collect();
            for needed in ["matmul", "attention", "cross_entropy", "adamw", "elementwise"] {
                assert!(names.contains(&needed), "{at}: no {needed} in {names:?}");
            }
            let own = match arch {
                // The RMT's norms are fused into its retrievals and their backwards.
                "rmt" => vec!["retrieval", "storage", "retrieval_backward", "storage_backward"],
                "memoryformer" => vec!["memory_layer", "norm"],
                _ => vec!["embedding", "norm"],
            };
            for needed in own {
                assert!(names.contains(&needed), "{at}: no {needed} in {names:?}");
            }
            let mut counted = 0.0;
            for f in families {
                let name = &f["family"];
                for key in ["calls", "ms_per_step", "share", "bytes", "gbps", "of_stream_peak"] {
                    positive(f, key);
                }
                assert!(f["flops"].as_f64().is_some_and(|x| x >= 0.0), "{at} {name}");
                assert!(f["of_matmul_peak"].as_f64().is_some_and(f64::is_finite), "{at} {name}");
                if f["in_model_count"] == true {
                    counted += f["flops"].as_f64().unwrap();
                }
            }
            // Each share is its family's time over the rows' total, recomputed from the
            // reported times: a time left out of the rows, or a share of another total, fails.
            let ms_of = |v: &Value| v["ms_per_step"].as_f64().unwrap();
            let timed: f64 = families.iter().map(ms_of).sum();
            for f in families {
                let (share, want) = (f["share"].as_f64().unwrap(), ms_of(f) / timed);
                assert!(
                    (share - want).abs() <= 1e-9,
                    "{at} {}: share {share}, {want} of the time",
                    f["family"]
                );
            }
            // On the CPU each op is timed inside the timed steps, one after another, so the
            // families' times add up to less than a step.
            if backend == "cpu" {
                let slowest = positive(&r["ms_per_step"], "max");
                assert!(
                    timed < slowest,
                    "{at}: families {timed} ms in a step of at most {slowest} ms"
                );
            }
            let tokens = r["batch"].as_f64().unwrap() * r["seq_len"].as_f64().unwrap();
            // A step's products are three forwards' (the backward's twice the forward's); the
            // other families only add to them.
            let counted = counted / tokens;
            assert!(
                (counted / (3.0 * model) - 1.0).abs() < 0.02,
                "{at}: {counted} vs 3 × {model}"
            );
            assert!(step >= counted, "{at}: step {step} < counted {counted}");

            // Where the launches were timed one by one, the kernels split the families' time.
            let kernels = r["kernels"].as_array().unwrap_or_else(|| panic!("{at}: no kernels"));
            if r["family_timing"] == "timestamps" {
                for f in families {
                    let of_family: f64 = (kernels.iter())
                        .filter(|k| k["family"] == f["family"])
                        .map(|k| k["ms_per_step"].as_f64().unwrap())
                        .sum();
                    let ms = f["ms_per_step"].as_f64().unwrap();
                    assert!(
                        (of_family - ms).abs() <= 1e-6 * ms,
                        "{at} {}: kernels {of_family} ms",
                        f["family"]
                    );
                }
                for k in kernels {
                    let (share, want) = (k["share"].as_f64().unwrap(), ms_of(k) / timed);
                    assert!(
                        (share - want).abs() <= 1e-9,
                        "{at} {}: share {share}, {want}",
                        k["kernel"]
                    );
                }
                let names: Vec<&str> = kernels.iter().filter_map(|k| k["kernel"].as_str()).collect();
                if arch == "rmt" {
                    // Either key gradient kernel, as tuning chose.
                    let key_grad = |n: &&str| n.starts_with("residual_matrix::key_grad_partial");
                    assert!(names.iter().any(key_grad), "{at}: {names:?}");
                }
            } else {
                assert!(kernels.is_empty(), "{at}: kernels without timestamps: {kernels:?}");
            }
        }
    }
}

/// `--no-timestamps` times the GPU's families by replaying each alone, on any adapter; and
/// `--k-slices` and `--loop-guards`, in the same run, are said in the matmul path (the engine's
/// gpu_vs_cpu tests what they compute).
#[test]
fn bench_no_timestamps_replays_each_family() {
    let r = bench(&[
        "--arch",
        "transformer",
        "--backend",
        "gpu",
        "--batch",
        "4",
        "--steps",
        "2",
        "--warmup",
        "1",
        "--no-timestamps",
        "--k-slices",
        "--loop-guards",
        "--json",
    ]);
    assert_eq!(r["family_timing"], "replay", "{r}");
    assert!(
        r["matmul_path"]
            .as_str()
            .is_some_and(|p| p.ends_with(", K slices, loop guards")),
        "{r}"
    );
    for f in r["families"].as_array().unwrap() {
        positive(f, "ms_per_step");
    }
}

#[test]
fn bench_refuses_a_run_directory_and_zero_steps() {
    for (args, says) in [
        (vec!["--out", "x"], "writes no run directory"),
        (vec!["--steps", "0"], "at least 1"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_resmem"))
            .args(["bench", "--backend", "cpu"])
            .args(&args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(says), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
}

/// `resmem selftest` on the test machine's adapter (lavapipe on CI): a row per kernel family,
/// each passing, exit 0, and no tuning. The engine's GPU tests check that a wrong kernel makes it fail.
#[test]
fn selftest_checks_every_family_on_the_adapter() {
    let runtime = std::env::temp_dir().join("resmem-xdg");
    std::fs::create_dir_all(&runtime).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_resmem"))
        .env("XDG_RUNTIME_DIR", runtime)
        .args(["selftest", "--backend", "gpu"])
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stdout}{stderr}");
    // It checks every kernel tuning may choose itself, and so tunes (and caches) nothing.
    assert!(!stderr.contains("tuning"), "{stderr}");
    for family in [
        "matmul",
        "elementwise",
        "embedding",
        "norm",
        "attention",
        "cross_entropy",
        "optim",
        "residual_matrix",
        "memory",
        "hyper",
    ] {
        let row = stdout
            .lines()
            .find(|l| l.split_whitespace().next() == Some(family))
            .unwrap_or_else(|| panic!("no row for {family}:\n{stdout}"));
        assert!(row.ends_with("pass"), "{row}");
    }
}

/// `resmem bench` on the GPU with the given cache directory: (stdout as JSON, stderr).
fn bench_tuning(cache: &std::path::Path, extra: &[&str]) -> (Value, String) {
    let runtime = std::env::temp_dir().join("resmem-xdg");
    std::fs::create_dir_all(&runtime).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_resmem"))
        .env("XDG_RUNTIME_DIR", runtime)
        .env("XDG_CACHE_HOME", cache)
        .args([
            "bench",
            "--backend",
            "gpu",
            "--preset",
            "tiny-transformer",
            "--steps",
            "1",
            "--warmup",
            "1",
        ])
        .args(["--batch", "4", "--seq-len", "16", "--json"])
        .args(extra)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "{err}");
    (serde_json::from_slice(&out.stdout).unwrap(), err)
}

/// On the test machine's adapter (lavapipe on CI): the first run measures the matmul's tiles and
/// the attention kernels per shape, says what it chose and keeps it under the adapter's key; the next run loads every
/// choice and measures nothing; `--no-tune` measures and keeps nothing; a broken cache is set
/// aside and rebuilt.
#[test]
fn tuning_picks_caches_and_reuses_the_kernels() {
    let cache = std::env::temp_dir().join(format!("resmem-tuning-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&cache);
    let file = cache.join("resmem/tuning.json");
    let tiles = ["128x128", "64x128", "128x64", "64x64"];
    let attention_kernels = ["row per thread", "blocked 128", "blocked 128, spread softmax"];

    let (first, err) = bench_tuning(&cache, &[]);
    assert!(err.contains("tuning this adapter's kernels"), "{err}");
    let kept: serde_json::Map<String, Value> = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    assert_eq!(kept.len(), 1, "one adapter: {kept:?}");
    let (key, choices) = kept.iter().next().unwrap();
    let adapter = key.split(" | ").next().unwrap();
    assert!(
        first["backend"].as_str().unwrap().contains(adapter),
        "{key} names the adapter of {}",
        first["backend"]
    );
    assert!(key.contains("kernels "), "{key} names the kernels' digest");
    let choices = choices.as_object().unwrap();
    assert!(choices.len() >= 4, "a step's matmul shapes: {choices:?}");
    for op in ["matmul ", "attention forward ", "attention backward "] {
        assert!(choices.keys().any(|c| c.starts_with(op)), "{op}is tuned: {choices:?}");
    }
    for (class, chosen) in choices {
        let chosen = chosen.as_str().unwrap();
        let known = match class.starts_with("matmul ") {
            true => tiles.iter().any(|t| chosen.starts_with(t)),
            false => class.starts_with("attention ") && attention_kernels.contains(&chosen),
        };
        assert!(known, "{class}: {chosen}");
        assert!(
            err.contains(&format!("  {class}: {chosen} (")),
            "the choice for {class} is said:\n{err}"
        );
    }
    assert_eq!(
        first["tuned"].as_array().unwrap().len(),
        choices.len(),
        "{}",
        first["tuned"]
    );

    let (second, err) = bench_tuning(&cache, &[]);
    assert!(!err.contains("tuning"), "every shape was cached:\n{err}");
    assert_eq!(second["tuned"], first["tuned"]);

    std::fs::write(&file, "{ not json").unwrap();
    let (_, err) = bench_tuning(&cache, &[]);
    assert!(err.contains("is not one") && err.contains("tuning.json.bad"), "{err}");
    assert!(err.contains("tuning this adapter's kernels"), "{err}");
    assert!(std::fs::read_to_string(&file).unwrap().contains("matmul "));

    let untuned = cache.join("untuned");
    let (none, err) = bench_tuning(&untuned, &["--no-tune"]);
    assert!(!err.contains("tuning") && !untuned.join("resmem").exists(), "{err}");
    assert_eq!(none["tuned"].as_array().unwrap().len(), 0);
    std::fs::remove_dir_all(&cache).unwrap();
}
