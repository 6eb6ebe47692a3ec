//! `resmem sweep` as a researcher runs it: a grid of runs with a summary whose numbers are the
//! runs' own, skipped when finished and resumed when not, bad grids refused with messages; and
//! the experiments' quick variants re-run to the numbers committed in docs/experiments/.

mod common;

use common::s;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `resmem ARGS` from the repository root, where experiments name data/….
fn resmem(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_resmem"))
        .args(args)
        .current_dir(root())
        .output()
        .unwrap()
}

fn ok(args: &[&str]) -> String {
    let out = resmem(args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "resmem {args:?} failed: {err}");
    String::from_utf8_lossy(&out.stdout).to_string() + &err
}

fn fails(args: &[&str]) -> String {
    common::failed(args, resmem(args))
}

/// Writes `text` as the experiment `file` and expects the sweep refused, saying `says`, with
/// nothing created in `out`.
fn refused(file: &Path, text: &str, out: &Path, says: &str) {
    std::fs::write(file, text).unwrap();
    let err = fails(&["sweep", s(file), "--out", s(out)]);
    assert!(err.contains(says), "{text}: {err}");
    assert!(!out.exists(), "a refused sweep created {}", out.display());
}

fn summary(dir: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join("summary.json")).unwrap()).unwrap()
}

fn metrics(run: &Path) -> Vec<Value> {
    std::fs::read_to_string(run.join("metrics.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The numbers of a point that training decides (wall times left out).
fn numbers(p: &Value) -> Vec<Value> {
    [
        "params",
        "flops_per_token",
        "tokens",
        "final_loss",
        "final_val_loss",
        "best_val_loss",
    ]
    .iter()
    .map(|k| p[k].clone())
    .collect()
}

const GRID: [&str; 16] = [
    "sweep",
    "--backend",
    "cpu",
    "--preset",
    "tiny-rmt",
    "--task",
    "copy",
    "--steps",
    "4",
    "--eval-every",
    "2",
    "--set",
    "d_k=4,8",
    "--seeds",
    "0,1",
    "--out",
];

#[test]
fn a_grid_trains_every_point_and_summarizes_what_the_runs_wrote() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("dk");
    let args: Vec<&str> = GRID.iter().copied().chain([s(&out)]).collect();
    ok(&args);
    let sum = summary(&out);
    assert_eq!(sum["swept"], serde_json::json!(["d_k"]));
    let points = sum["points"].as_array().unwrap();
    let labels: Vec<&str> = points.iter().map(|p| p["label"].as_str().unwrap()).collect();
    assert_eq!(labels, ["d_k=4 seed=0", "d_k=4 seed=1", "d_k=8 seed=0", "d_k=8 seed=1"]);
    for p in points {
        assert_eq!(p["status"], "done");
        let run = out.join(p["dir"].as_str().unwrap());
        let d_k = p["settings"]["d_k"].as_u64().unwrap().to_string();
        // The point's own config: its D_k and seed.
        let config = std::fs::read_to_string(run.join("config.toml")).unwrap();
        assert!(config.contains(&format!("d_k = {d_k}\n")), "{config}");
        assert!(
            config.contains(&format!("seed = {}\n", p["settings"]["seed"])),
            "{config}"
        );
        // Parameters and FLOPs as `resmem count` counts the model (V 256, at T 16).
        let count: Value = serde_json::from_str(&ok(&[
            "count", "--arch", "rmt", "--preset", "tiny-rmt", "--d-k", &d_k, "--vocab", "256", "--json",
        ]))
        .unwrap();
        assert_eq!(p["params"], count["params"], "{}", p["label"]);
        let at_t: Value = serde_json::from_str(&ok(&[
            "count",
            "--arch",
            "rmt",
            "--preset",
            "tiny-rmt",
            "--d-k",
            &d_k,
            "--vocab",
            "256",
            "--seq-len",
            "16",
            "--json",
        ]))
        .unwrap();
        assert_eq!(
            p["flops_per_token"].as_f64().unwrap(),
            at_t["flops_fwd"].as_f64().unwrap() / 16.0
        );
        // tiny-rmt trains batches of 32 windows of T = 16.
        assert_eq!(p["tokens"], 4 * 32 * 16);
        let rows = metrics(&run);
        let vals: Vec<f64> = rows.iter().filter_map(|r| r["val_loss"].as_f64()).collect();
        assert_eq!(vals.len(), 2);
        assert_eq!(p["final_val_loss"].as_f64().unwrap(), *vals.last().unwrap());
        assert_eq!(
            p["best_val_loss"].as_f64().unwrap(),
            vals.iter().copied().fold(f64::MAX, f64::min)
        );
        assert_eq!(p["final_loss"], rows.last().unwrap()["loss"]);
    }
    // The seeds differ, the same seed at another D_k too.
    let finals: Vec<f64> = points.iter().map(|p| p["final_val_loss"].as_f64().unwrap()).collect();
    assert!(finals[0] != finals[1] && finals[0] != finals[2], "{finals:?}");
    let csv = std::fs::read_to_string(out.join("summary.csv")).unwrap();
    let header = csv.lines().next().unwrap();
    assert!(
        header.starts_with("d_k,seed,dir,status,arch,params,flops_per_token,tokens"),
        "{header}"
    );
    assert_eq!(csv.lines().count(), 5);
    assert!(
        csv.lines()
            .nth(3)
            .unwrap()
            .starts_with("8,0,\"d_k=8,seed=0\",done,rmt,"),
        "{csv}"
    );

    // Re-run after one point lost its end: the others are skipped, that one resumes from its
    // checkpoint, and every number is the same.
    std::fs::remove_file(out.join("d_k=8,seed=0/model.safetensors")).unwrap();
    let log = ok(&args);
    assert_eq!(log.matches("done already").count(), 3, "{log}");
    assert!(log.contains("resuming"), "{log}");
    let again = summary(&out);
    for (a, b) in points.iter().zip(again["points"].as_array().unwrap()) {
        assert_eq!(numbers(a), numbers(b));
    }

    // The same --out with another setting is refused before anything trains, not mixed in,
    // and the summary keeps every point (it was rewritten as `"points": []`).
    let mut other = args.clone();
    other[8] = "5";
    let o = resmem(&other);
    let (log, err) = (String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("holds a run of another config"), "{err}");
    assert!(!log.contains("[1/"), "a point trained before the refusal: {log}");
    assert_eq!(summary(&out)["points"], again["points"]);
}

#[test]
fn bad_sweeps_are_refused_before_anything_trains() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("bad");
    let o = s(&out);
    let cases: [(&[&str], &str); 7] = [
        (
            &["sweep", "--set", "dk=4,8", "--out", o],
            "`dk` is not a `resmem train` flag",
        ),
        (&["sweep", "--set", "seed=1,2", "--out", o], "--seeds"),
        (&["sweep", "--set", "d_k", "--out", o], "NAME=V1,V2"),
        (
            &["sweep", "--d-k", "4", "--set", "d-k=4,8", "--out", o],
            "both swept and given",
        ),
        (
            &["sweep", "--set", "lr=fast", "--task", "copy", "--out", o],
            "--lr must be a number, not \"fast\"",
        ),
        (&["sweep", "--quick", "--out", o], "experiment file"),
        (
            &["sweep", "--set", "d_k=4", "--arch", "transformer", "--out", o],
            "d-k does not apply",
        ),
    ];
    for (args, says) in cases {
        let err = fails(args);
        assert!(err.contains(says), "{args:?}: {err}");
    }
    assert!(!out.exists(), "a refused sweep created {}", out.display());
    let file = tmp.path().join("e.toml");
    std::fs::write(&file, "title = \"x\"\nsteps = 3\n").unwrap();
    let err = fails(&["sweep", s(&file), "--out", o]);
    assert!(err.contains("not a valid experiment") && err.contains("steps"), "{err}");
    std::fs::write(
        &file,
        "reference = \"b\"\n[[variants]]\nlabel = \"a\"\npreset = \"tiny-rmt\"\n",
    )
    .unwrap();
    let err = fails(&["sweep", s(&file), "--out", o]);
    assert!(err.contains("reference `b`"), "{err}");
    // Points that would share a run, or none at all (issue 46): each was trained twice, shared one
    // directory, or exited 0 having done nothing.
    let flags = "[flags]\narch = \"rmt\"\ntask = \"copy\"\nsteps = 1\nbackend = \"cpu\"\n";
    refused(
        &file,
        &format!("seeds = [1, 2, 1]\n{flags}"),
        &out,
        "the seed 1 is listed twice",
    );
    refused(&file, &format!("{flags}[grid]\nd_k = []\n"), &out, "has no values");
    refused(
        &file,
        &format!("{flags}[grid]\nd_k = [4, 4]\n"),
        &out,
        "would share the run directory",
    );
    let twins = "[[variants]]\nlabel = \"a/b\"\nd_k = 4\n[[variants]]\nlabel = \"a_b\"\nd_k = 8\n";
    refused(
        &file,
        &format!("{flags}{twins}"),
        &out,
        "would share the run directory `variant=a_b`",
    );
}

/// Every experiment's quick variant gives the numbers committed beside its write-up: training
/// is deterministic, so a re-run on another machine agrees (to 1e-4, since the GEMM crate may
/// pick other kernels for another CPU).
#[test]
fn the_experiments_quick_variants_reproduce_their_committed_summaries() {
    let data = root().join("data/shakespeare-bytes/meta.json");
    assert!(
        data.exists(),
        "{} is missing: run `cargo xtask corpus` first",
        data.display()
    );
    let tmp = tempfile::tempdir().unwrap();
    // Every experiment file, so that a new one cannot be left out.
    let mut names: Vec<String> = std::fs::read_dir(root().join("experiments"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .map(|p| p.file_stem().unwrap().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert!(names.len() >= 6, "{names:?}");
    // The floor every summary on Shakespeare's bytes reads its losses against (docs/experiments.md's 2.499).
    let bigram = data::Corpus::open(&root().join("data/shakespeare-bytes"))
        .unwrap()
        .bigram_entropy()
        .unwrap();
    assert!((bigram - 2.4993).abs() < 1e-4, "{bigram}");
    for name in &names {
        let out = tmp.path().join(name);
        let file = format!("experiments/{name}.toml");
        let printed = ok(&["sweep", &file, "--quick", "--out", s(&out)]);
        let on_bytes = std::fs::read_to_string(root().join(&file))
            .unwrap()
            .contains("\"data/shakespeare-bytes\"");
        if on_bytes {
            assert_eq!(summary(&out)["bigram_entropy"].as_f64().unwrap(), bigram, "{name}");
            assert!(printed.contains("the corpus's bigram entropy"), "{printed}");
        }
        let committed_path = root().join(format!("docs/experiments/{name}.quick.json"));
        let committed: Value = serde_json::from_str(&std::fs::read_to_string(&committed_path).unwrap()).unwrap();
        let fresh = summary(&out);
        let (a, b) = (
            committed["points"].as_array().unwrap(),
            fresh["points"].as_array().unwrap(),
        );
        assert_eq!(a.len(), b.len(), "{name}");
        for (a, b) in a.iter().zip(b) {
            assert_eq!(a["label"], b["label"]);
            assert_eq!(a["params"], b["params"], "{name} {}", a["label"]);
            assert_eq!(a["flops_per_token"], b["flops_per_token"], "{name} {}", a["label"]);
            assert_eq!(a["tokens"], b["tokens"], "{name} {}", a["label"]);
            for k in ["final_loss", "final_val_loss", "best_val_loss", "test_loss"] {
                // Summaries from before the test slice have no test_loss.
                if a[k].is_null() && k == "test_loss" {
                    continue;
                }
                let (x, y) = (a[k].as_f64().unwrap(), b[k].as_f64().unwrap());
                assert!(
                    (x - y).abs() < 1e-4,
                    "{name} {} {k}: committed {x}, now {y}",
                    a["label"]
                );
            }
        }
    }
}

/// `variance = true` measures every point at init and after training: at init the ratios are
/// those of the closed form (RMT paper Table 1 for the RMT's storages and retrievals, Table 2's
/// linear maps for the transformer), and the backward has no gradient yet (W_U starts at zero).
#[test]
fn a_variance_sweep_measures_the_closed_form_at_init() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("v");
    let file = tmp.path().join("v.toml");
    std::fs::write(
        &file,
        "variance = true\n[flags]\nbackend = \"cpu\"\ntask = \"copy\"\nsteps = 3\n\
         [[variants]]\nlabel = \"rmt\"\npreset = \"tiny-rmt\"\ninit_std = 1.0\n\
         [[variants]]\nlabel = \"transformer\"\npreset = \"tiny-transformer\"\n",
    )
    .unwrap();
    let log = ok(&["sweep", s(&file), "--out", s(&out)]);
    assert!(log.contains("variance ratios"), "{log}");
    let rows = summary(&out)["variance"].as_array().unwrap().clone();
    // The RMT's four storages and retrievals and its own W1 and W2; the transformer's four maps.
    assert_eq!(rows.len(), 6 + 4, "the sites of two variants");
    for r in &rows {
        let (closed, init) = (
            r["closed_forward"].as_f64().unwrap(),
            r["init_forward"].as_f64().unwrap(),
        );
        assert!((init / closed - 1.0).abs() < 0.35, "{r}");
        assert!(r["init_backward"].is_null(), "{r}");
        assert!(r["trained_backward"].as_f64().unwrap() > 0.0, "{r}");
    }
    // Every point keeps its own measurements, block by block.
    for p in summary(&out)["points"].as_array().unwrap() {
        let sites = if p["arch"] == "rmt" { 6 } else { 4 };
        assert_eq!(
            p["variance"]["init"].as_array().unwrap().len(),
            2 * sites,
            "{}",
            p["label"]
        );
    }
}

/// `[[compare]]`: the arms paired by seed, every metric's per-seed values recomputed here from
/// the runs' own files, the t interval from the 0.975 quantile at 2 degrees of freedom
/// (4.302653), and a verdict that follows the interval alone.
#[test]
fn declared_comparisons_report_paired_intervals() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("e.toml");
    std::fs::write(
        &file,
        r#"title = "d_k 4 against 8"
seeds = [0, 1, 2]
[flags]
backend = "cpu"
preset = "tiny-rmt"
task = "copy"
steps = 6
eval_every = 2
eval_batches = 1
[grid]
d_k = [4, 8]
[[compare]]
a = "d_k=4"
b = "d_k=8"
claim = "a wider residual learns faster"
"#,
    )
    .unwrap();
    let out = tmp.path().join("cmp");
    let printed = ok(&["sweep", s(&file), "--out", s(&out)]);
    assert!(
        printed.contains("declared comparisons: 95% intervals over seeds, paired by seed")
            && printed.contains("d_k=4 against d_k=8 (3 seeds)"),
        "{printed}"
    );
    let sum = summary(&out);
    let c = &sum["comparisons"][0];
    assert_eq!(c["seeds"], serde_json::json!(["0", "1", "2"]));
    let point = |d_k: u64, seed: u64| {
        sum["points"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["settings"]["d_k"] == d_k && p["settings"]["seed"] == seed)
            .unwrap()
            .clone()
    };
    let metric = |name: &str| {
        c["metrics"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["metric"] == name)
            .unwrap()
            .clone()
    };
    // test_loss: a − b per seed, mean, t interval; each point's test loss is `resmem eval
    // --slice test`'s.
    let m = metric("test_loss");
    let p = point(4, 1);
    let dir = out.join(p["dir"].as_str().unwrap());
    let json = ok(&[
        "eval",
        "--run",
        s(&dir),
        "--checkpoint",
        s(&dir.join("model.safetensors")),
        "--slice",
        "test",
        "--json",
    ]);
    let row: Value = serde_json::from_str(json.trim()).unwrap();
    assert_eq!(row["val_loss"], p["test_loss"]);
    assert_eq!(row["tokens"], p["test_tokens"]);
    let diffs: Vec<f64> = (0..3)
        .map(|seed| point(4, seed)["test_loss"].as_f64().unwrap() - point(8, seed)["test_loss"].as_f64().unwrap())
        .collect();
    let got: Vec<f64> = m["per_seed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap())
        .collect();
    assert_eq!(got, diffs);
    let mean = diffs.iter().sum::<f64>() / 3.0;
    let sd = (diffs.iter().map(|d| (d - mean).powi(2)).sum::<f64>() / 2.0).sqrt();
    let half = 4.302653 * sd / 3f64.sqrt();
    let (low, high) = (m["low"].as_f64().unwrap(), m["high"].as_f64().unwrap());
    assert!((m["estimate"].as_f64().unwrap() - mean).abs() < 1e-12);
    assert!(
        (low - (mean - half)).abs() < 1e-6 && (high - (mean + half)).abs() < 1e-6,
        "{m}"
    );
    let verdict = if high < 0.0 {
        "a better"
    } else if low > 0.0 {
        "b better"
    } else {
        "not resolved"
    };
    assert_eq!(m["verdict"], verdict);
    // tokens_to_target: a's tokens to b's final loss, over b's tokens; "never" is null.
    let m = metric("tokens_to_target");
    for seed in 0..3u64 {
        let (a, b) = (point(4, seed), point(8, seed));
        let target = b["final_val_loss"].as_f64().unwrap();
        let curve: Vec<(f64, f64)> = metrics(&out.join(a["dir"].as_str().unwrap()))
            .iter()
            .filter_map(|r| Some((r["step"].as_f64()? * 16.0 * 16.0, r["val_loss"].as_f64()?)))
            .collect();
        let want = curve.iter().position(|&(_, v)| v <= target).map(|i| match i {
            0 => curve[0].0,
            _ => {
                let ((t0, v0), (t1, v1)) = (curve[i - 1], curve[i]);
                t0 + (v0 - target) / (v0 - v1) * (t1 - t0)
            }
        });
        let b_tokens = b["tokens"].as_f64().unwrap();
        let got = m["per_seed"][seed as usize].as_f64();
        match want {
            Some(t) => assert!((got.unwrap() - t / b_tokens).abs() < 1e-9, "seed {seed}: {m}"),
            None => assert_eq!(got, None, "seed {seed}: never is null"),
        }
    }
    assert!(metric("wall_s")["noisy"].as_bool().unwrap());
    let csv = std::fs::read_to_string(out.join("comparisons.csv")).unwrap();
    assert_eq!(csv.lines().count(), 1 + 4, "{csv}");
    assert!(
        csv.lines()
            .nth(1)
            .unwrap()
            .starts_with("\"d_k=4\",\"d_k=8\",test_loss,a - b,3,"),
        "{csv}"
    );

    // Declarations that cannot pair are refused before anything trains.
    let bad = tmp.path().join("bad");
    for (compare, seeds, says) in [
        ("a = \"d_k=5\"\nb = \"d_k=8\"", "[0, 1]", "`d_k=5` selects no point"),
        ("a = \"d_k=4\"\nb = \"d_k=4\"", "[0, 1]", "share points"),
        ("a = \"d_k=4\"\nb = \"d_k=8\"", "[0]", "at least 2 seeds"),
        (
            "a = \"d_k=4\"\nb = \"d_k=8\"\nmetrics = [\"loss\"]",
            "[0, 1]",
            "not a valid experiment",
        ),
    ] {
        let text = format!(
            "seeds = {seeds}\n[flags]\nbackend = \"cpu\"\npreset = \"tiny-rmt\"\ntask = \"copy\"\n[grid]\nd_k = [4, 8]\n[[compare]]\n{compare}\n"
        );
        refused(&file, &text, &bad, says);
    }
}

/// `[[match]]` solves sizes before anything trains: every other point's parameters within the
/// tolerance of the target's, the solved size in its config and summary, and every point's
/// costs relative to its reference in summary.json.
#[test]
fn matched_costs_are_solved_before_training() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("m.toml");
    let experiment = |matching: &str| {
        format!(
            "seeds = [0]\n[flags]\nbackend = \"cpu\"\npreset = \"tiny-rmt\"\ntask = \"copy\"\nsteps = 2\n\
             eval_every = 2\neval_batches = 1\n[grid]\nd_k = [4, 8, 32]\n[[match]]\n{matching}\n"
        )
    };
    std::fs::write(
        &file,
        experiment("to = \"d_k=8\"\nhold = [\"params\"]\nsolve = [\"d_ff\"]\ntolerance = 0.01"),
    )
    .unwrap();
    let out = tmp.path().join("m");
    ok(&["sweep", s(&file), "--out", s(&out)]);
    let sum = summary(&out);
    let points = sum["points"].as_array().unwrap();
    let target = points.iter().find(|p| p["settings"]["d_k"] == 8).unwrap();
    assert_eq!(target["params_vs_reference"], 1.0);
    for p in points.iter().filter(|p| p["settings"]["d_k"] != 8) {
        let d_ff = p["matched"]["solved"][0][1].as_u64().unwrap();
        assert_eq!(p["matched"]["solved"][0][0], "d_ff");
        assert_eq!(p["cost_reference"], "d_k=8 seed=0");
        let config = std::fs::read_to_string(out.join(p["dir"].as_str().unwrap()).join("config.toml")).unwrap();
        assert!(config.contains(&format!("d_ff = {d_ff}\n")), "{config}");
        let ratio = p["params"].as_f64().unwrap() / target["params"].as_f64().unwrap();
        assert!((ratio - 1.0).abs() <= 0.01, "{ratio}");
        // serde_json reads floats to within an ulp or so.
        assert!((p["params_vs_reference"].as_f64().unwrap() - ratio).abs() < 1e-12);
        let flops = p["flops_per_token"].as_f64().unwrap() / target["flops_per_token"].as_f64().unwrap();
        assert!((p["flops_vs_reference"].as_f64().unwrap() - flops).abs() < 1e-12);
    }
    let bad = tmp.path().join("bad");
    for (matching, says) in [
        (
            "to = \"d_k=8\"\nhold = [\"params\"]\nsolve = [\"d_k\"]",
            "`d_k` is swept",
        ),
        (
            "to = \"d_k=8\"\nhold = [\"params\"]\nsolve = [\"vocab\"]",
            "cannot solve for `vocab`",
        ),
        (
            "to = \"d_k=5\"\nhold = [\"params\"]\nsolve = [\"d_ff\"]",
            "selects no point",
        ),
        (
            "to = \"d_k=8\"\nhold = [\"params\", \"flops\"]\nsolve = [\"d_ff\"]",
            "name a second",
        ),
        (
            "to = \"d_k=8\"\nhold = [\"params\"]\nsolve = [\"layers\"]\ntolerance = 0.0001",
            "the closest",
        ),
    ] {
        refused(&file, &experiment(matching), &bad, says);
    }
}

/// `[tune]`: every arm trains the grid on the tuning seeds (in tune/), takes the setting with
/// the lowest mean final validation loss, and its runs train with it; tuning seeds never
/// overlap the compared ones, and a tuned flag is never also set by a variant.
#[test]
fn each_arm_is_tuned_on_its_own_seeds() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("t.toml");
    let experiment = |seeds: &str, rmt_flags: &str, tune: &str| {
        format!(
            "seeds = {seeds}\n[flags]\nbackend = \"cpu\"\ntask = \"copy\"\nsteps = 4\neval_every = 2\neval_batches = 1\n\
             [[variants]]\nlabel = \"rmt\"\npreset = \"tiny-rmt\"\n{rmt_flags}\n[[variants]]\nlabel = \"transformer\"\n\
             preset = \"tiny-transformer\"\n[tune]\n{tune}\n"
        )
    };
    // Two values: the lowest mean over 3 seeds; each seed's number is `resmem eval --slice tuning`'s.
    std::fs::write(
        &file,
        experiment("[0]", "", "seeds = [100, 101, 102]\nlr = [0.001, 0.03]"),
    )
    .unwrap();
    let out = tmp.path().join("t");
    let printed = ok(&["sweep", s(&file), "--out", s(&out)]);
    assert!(
        printed.contains("tuning: loss on the validation split's tuning slice"),
        "{printed}"
    );
    let sum = summary(&out);
    for t in sum["tuning"].as_array().unwrap() {
        let arm = t["arm"].as_str().unwrap();
        let mut means = vec![];
        for r in t["rows"].as_array().unwrap() {
            let lr = r["settings"][0][1].as_str().unwrap();
            let losses: Vec<f64> = [100, 101, 102]
                .iter()
                .map(|seed| {
                    let dir = out
                        .join("tune")
                        .join(format!("{},lr={lr},seed={seed}", arm.replace(' ', ",")));
                    let model = dir.join("model.safetensors");
                    let json = ok(&[
                        "eval",
                        "--run",
                        s(&dir),
                        "--checkpoint",
                        s(&model),
                        "--slice",
                        "tuning",
                        "--json",
                    ]);
                    let row: Value = serde_json::from_str(json.trim()).unwrap();
                    assert_eq!(row["slice"], "tuning");
                    row["val_loss"].as_f64().unwrap()
                })
                .collect();
            let got: Vec<f64> = r["per_seed"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_f64().unwrap())
                .collect();
            assert_eq!(got, losses, "{arm} lr={lr}");
            means.push((losses.iter().sum::<f64>() / 3.0, lr.to_string()));
        }
        let best = means.iter().min_by(|a, b| a.0.total_cmp(&b.0)).unwrap().1.clone();
        assert_eq!(t["chosen"][0], serde_json::json!(["lr", best]), "{arm}");
        assert!(t["fit"].is_null(), "two values are no curve");
        let run = out.join(format!("{},seed=0", arm.replace(' ', ",")));
        let config = std::fs::read_to_string(run.join("config.toml")).unwrap();
        assert!(config.contains(&format!("lr = {best}\n")), "{config}");
    }
    // Every tuning run's curve is in curves.csv, its directory quoted (it holds commas).
    let curves = std::fs::read_to_string(out.join("curves.csv")).unwrap();
    assert!(
        curves
            .lines()
            .any(|l| l.starts_with("\"tune/variant=rmt,lr=0.03,seed=102\",4,")),
        "{curves}"
    );

    // Carried to another machine as experiments/runs/ is committed (no weights, checkpoints
    // or lock), the sweep trains nothing again and summarizes the same numbers.
    let carried = tmp.path().join("carried");
    copy_without_weights(&out, &carried);
    let printed = ok(&["sweep", s(&file), "--out", s(&carried)]);
    assert!(!printed.contains("step "), "nothing trains again: {printed}");
    assert_eq!(printed.matches("done already").count(), 2 * 2 * 3 + 2, "{printed}");
    let (was, is) = (summary(&out), summary(&carried));
    for key in ["points", "tuning", "comparisons"] {
        assert_eq!(was[key], is[key], "{key}");
    }

    // Three values or more: the fitted minimum, the grid widened while the best mean is at an edge.
    let out = tmp.path().join("curve");
    std::fs::write(
        &file,
        experiment(
            "[0]",
            "",
            "seeds = [100, 101, 102]\nwiden = 1\nlr = [0.0001, 0.0003, 0.001]",
        ),
    )
    .unwrap();
    ok(&["sweep", s(&file), "--out", s(&out)]);
    for t in summary(&out)["tuning"].as_array().unwrap() {
        let rows = t["rows"].as_array().unwrap();
        let lrs: Vec<f64> = rows
            .iter()
            .map(|r| r["settings"][0][1].as_str().unwrap().parse().unwrap())
            .collect();
        let widened = t["widened"].as_array().unwrap();
        assert_eq!(lrs.len(), 3 + widened.len(), "{t}");
        assert!(lrs.windows(2).all(|w| w[0] < w[1]), "{lrs:?}");
        let means: Vec<f64> = rows.iter().map(|r| r["mean"].as_f64().unwrap()).collect();
        let best = (0..means.len()).min_by(|&i, &j| means[i].total_cmp(&means[j])).unwrap();
        let edge = best == 0 || best == means.len() - 1;
        assert_eq!(t["at_edge"].as_bool().unwrap(), edge, "{t}");
        // Widening happened exactly where the declared grid's best was at its edge.
        assert_eq!(
            widened.len(),
            1,
            "the copy task's best rate is past 0.001 in 4 steps: {t}"
        );
        let fit = &t["fit"];
        let chosen: f64 = t["chosen"][0][1].as_str().unwrap().parse().unwrap();
        if !edge && fit["convex"].as_bool().unwrap() {
            assert_eq!(chosen, fit["minimum"].as_f64().unwrap(), "{t}");
            assert!(chosen >= fit["low"].as_f64().unwrap() && chosen <= fit["high"].as_f64().unwrap());
        } else {
            assert_eq!(chosen, lrs[best], "{t}");
        }
    }
    let bad = tmp.path().join("bad");
    let three = "seeds = [100, 101, 102]\nlr = [0.001, 0.03]";
    for (seeds, rmt_flags, tune, says) in [
        ("[0, 100]", "", three, "seed 100 is also a seed of the sweep"),
        ("[0]", "lr = 0.01", three, "the variant `rmt` sets itself"),
        ("[0]", "", "seeds = [100]\nlr = [0.001, 0.03]", "at least 3 seeds"),
        ("[0]", "", "seeds = [100, 101, 100]\nlr = [0.001, 0.03]", "listed twice"),
    ] {
        refused(&file, &experiment(seeds, rmt_flags, tune), &bad, says);
    }
}

/// Copies a sweep's directory as git carries experiments/runs/: without weights, checkpoints
/// or lock files.
fn copy_without_weights(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name();
        if ["model.safetensors", "checkpoints", ".resmem.lock"].contains(&name.to_str().unwrap()) {
            continue;
        }
        if entry.file_type().unwrap().is_dir() {
            copy_without_weights(&entry.path(), &to.join(&name));
        } else {
            std::fs::copy(entry.path(), to.join(&name)).unwrap();
        }
    }
}

/// A repeated `--set` of one key is an error, not a silent drop; an `--out` whose name is not
/// UTF-8 is the directory the runs go into.
#[test]
fn repeated_sets_and_non_utf8_directories() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("rep");
    let err = fails(&["sweep", "--set", "d_k=4", "--set", "d_k=8", "--out", s(&out)]);
    assert!(err.contains("--set d_k is given twice"), "{err}");
    use std::os::unix::ffi::OsStrExt;
    let odd = tmp.path().join(std::ffi::OsStr::from_bytes(b"sweep-\xff"));
    let out = Command::new(env!("CARGO_BIN_EXE_resmem"))
        .args([
            "sweep",
            "--backend",
            "cpu",
            "--preset",
            "tiny-rmt",
            "--task",
            "copy",
            "--steps",
            "2",
        ])
        .args(["--seeds", "0", "--out"])
        .arg(&odd)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let sum = summary(&odd);
    assert_eq!(sum["points"][0]["status"], "done");
    assert!(odd.join("seed=0").join("model.safetensors").is_file());
}

/// Two sweeps into one directory: the second is refused while the first runs, so the first's
/// summary never reports its own running points as failed.
#[test]
fn a_second_sweep_into_the_same_directory_waits_its_turn() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("both");
    let args = [
        "sweep",
        "--backend",
        "cpu",
        "--preset",
        "tiny-rmt",
        "--task",
        "copy",
        "--steps",
        "60",
        "--seeds",
        "0",
        "--out",
        s(&out),
    ];
    let mut first = Command::new(env!("CARGO_BIN_EXE_resmem"))
        .args(args)
        .current_dir(root())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // The first holds the lock once its first point's directory exists.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !out.join("seed=0").exists() {
        assert!(std::time::Instant::now() < deadline, "the first sweep did not start");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let err = fails(&args);
    assert!(err.contains("another resmem sweep is running"), "{err}");
    assert!(first.wait().unwrap().success());
    let sum = summary(&out);
    assert!(
        sum["points"].as_array().unwrap().iter().all(|p| p["status"] == "done"),
        "{sum}"
    );
}

/// Every trained MemoryFormer and hybrid reports its bucket use in the summary, the numbers of
/// `resmem analyze buckets` on the same held-out batches.
#[test]
fn hashed_points_report_their_bucket_use() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("b");
    ok(&[
        "sweep",
        "--backend",
        "cpu",
        "--preset",
        "tiny-memoryformer",
        "--task",
        "copy",
        "--steps",
        "3",
        "--seeds",
        "0",
        "--out",
        s(&out),
    ]);
    let p = &summary(&out)["points"][0];
    let b = &p["buckets"];
    let stats: Value = serde_json::from_str(
        &ok(&[
            "analyze",
            "buckets",
            "--run",
            s(&out.join("seed=0")),
            "--slice",
            "test",
            "--backend",
            "cpu",
            "--json",
        ])
        .lines()
        .take_while(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("\n"),
    )
    .unwrap();
    let tables = stats.as_array().unwrap();
    assert_eq!(b["tables"].as_u64().unwrap() as usize, tables.len());
    let entropy: Vec<f64> = tables.iter().map(|t| t["entropy"].as_f64().unwrap()).collect();
    let mean = entropy.iter().sum::<f64>() / entropy.len() as f64;
    assert!((b["entropy_mean"].as_f64().unwrap() - mean).abs() < 1e-9, "{b}");
    let dead: u64 = tables.iter().map(|t| t["dead_buckets"].as_u64().unwrap()).sum();
    let all: usize = tables.iter().map(|t| t["counts"].as_array().unwrap().len()).sum();
    assert!((b["dead_fraction"].as_f64().unwrap() - dead as f64 / all as f64).abs() < 1e-12);
    assert!(entropy.iter().all(|e| (0.0..=1.0).contains(e) && e.is_sign_positive()));
    // Per table, by hand from the counts: exp(H) effective rows, and the empty rows chance
    // leaves, K·(1 − 1/K)^N.
    let per_table = b["per_table"].as_array().unwrap();
    assert_eq!(per_table.len(), tables.len());
    let mut collapsed = 0;
    let mut chance = 0.0;
    for (t, mine) in tables.iter().zip(per_table) {
        let counts: Vec<f64> = t["counts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c.as_f64().unwrap())
            .collect();
        let (k, n) = (counts.len() as f64, counts.iter().sum::<f64>());
        let h: f64 = counts
            .iter()
            .filter(|&&c| c > 0.0)
            .map(|&c| -(c / n) * (c / n).ln())
            .sum();
        let effective = mine["effective_rows"].as_f64().unwrap();
        assert!((effective - h.exp()).abs() < 1e-9 * k, "{mine}");
        let uniform = k * (1.0 - 1.0 / k).powf(n);
        assert!((mine["empty_if_uniform"].as_f64().unwrap() - uniform).abs() < 1e-9 * k);
        collapsed += usize::from(h.exp() <= 2.0);
        chance += uniform;
    }
    assert_eq!(b["collapsed"].as_u64().unwrap() as usize, collapsed);
    let beyond = ((dead as f64 - chance).max(0.0)) / all as f64;
    assert!((b["dead_beyond_chance"].as_f64().unwrap() - beyond).abs() < 1e-12);
    // Every table counts each token of the test slice once.
    assert_eq!(
        b["tokens"].as_u64().unwrap(),
        tables[0]["counts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c.as_u64().unwrap())
            .sum::<u64>()
    );
}

/// `[sequential]` trains look by look and stops when every test has crossed its boundary;
/// `[[trend]]` is each seed's least-squares slope; Holm adjusts every test's p over the
/// experiment's family.
#[test]
fn sequential_looks_trends_and_holm() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("e.toml");
    let flags = "[flags]\nbackend = \"cpu\"\npreset = \"tiny-rmt\"\ntask = \"copy\"\nsteps = 6\neval_every = 3\neval_batches = 1\n";
    // A rate 3,000 times too small against a good one: a difference far past the first
    // boundary at 3 seeds, so seeds 3-5 are never trained.
    std::fs::write(
        &file,
        format!(
            "seeds = [0, 1, 2, 3, 4, 5]\n{flags}[[variants]]\nlabel = \"slow\"\nlr = 0.00001\n\
             [[variants]]\nlabel = \"fast\"\nlr = 0.03\n[[compare]]\na = \"fast\"\nb = \"slow\"\n\
             metrics = [\"test_loss\"]\n[sequential]\nlooks = [3, 6]\n"
        ),
    )
    .unwrap();
    let out = tmp.path().join("seq");
    let printed = ok(&["sweep", s(&file), "--out", s(&out)]);
    assert!(
        printed.contains("every sequential test has crossed its boundary at look 1 of 2"),
        "{printed}"
    );
    let sum = summary(&out);
    let points = sum["points"].as_array().unwrap();
    for p in points {
        let seed = p["settings"]["seed"].as_u64().unwrap();
        let trained = p["status"] == "done";
        assert_eq!(trained, seed < 3, "{p}");
        assert_eq!(out.join(p["dir"].as_str().unwrap()).exists(), seed < 3);
    }
    let m = &sum["comparisons"][0]["metrics"][0];
    assert_eq!(sum["comparisons"][0]["seeds"], serde_json::json!(["0", "1", "2"]));
    let q = &m["sequential"];
    assert_eq!((q["stopped_at"].as_u64(), q["seeds"].as_u64()), (Some(1), Some(3)));
    assert!(q["resolved"].as_bool().unwrap());
    assert_eq!(q["verdict"], "a better");
    // O'Brien–Fleming at information fractions 1/2 and 1: 2.797 and 1.977.
    let z: Vec<f64> = q["z_boundaries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap())
        .collect();
    assert!((z[0] - 2.797).abs() < 2e-3 && (z[1] - 1.977).abs() < 2e-3, "{z:?}");
    // The repeated interval holds the unadjusted one of the same seeds.
    let (low, high) = (m["low"].as_f64().unwrap(), m["high"].as_f64().unwrap());
    assert!(
        q["low"].as_f64().unwrap() < low && q["high"].as_f64().unwrap() > high,
        "{m}"
    );
    // A family of one: Holm's p is the test's own (its repeated p).
    assert_eq!(m["holm"]["family"], 1);
    assert_eq!(m["holm"]["p"], q["repeated_p"]);
    // Run again: the same decision, nothing trained.
    let again = ok(&["sweep", s(&file), "--out", s(&out)]);
    assert!(!again.contains("[7/12]"), "{again}");
    assert_eq!(summary(&out)["comparisons"], sum["comparisons"]);

    // A trend over d_k and a comparison, fixed-sample: slopes by hand, Holm over two tests.
    std::fs::write(
        &file,
        format!(
            "seeds = [0, 1, 2]\n{flags}[grid]\nd_k = [4, 8, 16]\n[[compare]]\na = \"d_k=4\"\nb = \"d_k=16\"\n\
             metrics = [\"test_loss\"]\n[[trend]]\naxis = \"d_k\"\nclaim = \"a wider residual learns faster\"\n"
        ),
    )
    .unwrap();
    let out = tmp.path().join("trend");
    let printed = ok(&["sweep", s(&file), "--out", s(&out)]);
    assert!(printed.contains("trend of test_loss along d_k (4, 8, 16)"), "{printed}");
    let sum = summary(&out);
    let loss = |d_k: u64, seed: u64| {
        sum["points"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["settings"]["d_k"] == d_k && p["settings"]["seed"] == seed)
            .unwrap()["test_loss"]
            .as_f64()
            .unwrap()
    };
    let t = &sum["trends"][0];
    for seed in 0..3u64 {
        // x = log2 d_k = 2, 3, 4: the slope is (y(16) − y(4)) / 2.
        let want = (loss(16, seed) - loss(4, seed)) / 2.0;
        let got = t["result"]["per_seed"][seed as usize].as_f64().unwrap();
        assert!((got - want).abs() < 1e-12, "seed {seed}: {got} against {want}");
    }
    assert!(["decreasing", "increasing", "not resolved"].contains(&t["result"]["verdict"].as_str().unwrap()));
    assert_eq!(t["result"]["statistic"], "slope per doubling of d_k");
    // Holm by hand over the two p's: the smaller times 2, the larger at least that.
    let p = [
        sum["comparisons"][0]["metrics"][0]["p"].as_f64().unwrap(),
        t["result"]["p"].as_f64().unwrap(),
    ];
    let (lo, hi) = if p[0] <= p[1] { (0, 1) } else { (1, 0) };
    let mut want = [0.0; 2];
    want[lo] = (2.0 * p[lo]).min(1.0);
    want[hi] = p[hi].max(want[lo]);
    let got = [
        sum["comparisons"][0]["metrics"][0]["holm"]["p"].as_f64().unwrap(),
        t["result"]["holm"]["p"].as_f64().unwrap(),
    ];
    assert_eq!(got, want, "{p:?}");
    // A fixed comparison's p and its interval agree: p < 0.05 exactly where the interval excludes 0.
    let m = &sum["comparisons"][0]["metrics"][0];
    assert_eq!(p[0] < 0.05, m["verdict"] != "not resolved", "{m}");

    // Declarations that cannot be decided are refused before anything trains.
    let bad = tmp.path().join("bad");
    for (text, says) in [
        (format!("seeds = [0, 1, 2]\n{flags}[grid]\nd_k = [4, 8]\n[[trend]]\naxis = \"d_k\"\n"), "at least 3 values"),
        (format!("seeds = [0, 1, 2]\n{flags}[grid]\nd_k = [4, 8, 16]\n[[trend]]\naxis = \"d_v\"\n"), "no point has the setting d_v"),
        (format!("seeds = [0, 1, 2, 3]\n{flags}[grid]\nd_k = [4, 8, 16]\n[[trend]]\naxis = \"d_k\"\n[sequential]\nlooks = [3, 6]\n"), "every seed"),
        (format!("seeds = [0, 1, 2]\n{flags}[sequential]\nlooks = [3, 6]\n"), "declare one"),
    ] {
        refused(&file, &text, &bad, says);
    }
}

/// `[scaling]` sets each point's steps from its parameters, fits each family's power law to
/// its sizes' mean test losses, and reads the reference's parameters at the other family's loss.
#[test]
fn scaling_trains_at_fixed_tokens_per_parameter_and_fits_power_laws() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("s.toml");
    let text =
        "seeds = [0, 1]\n[flags]\nbackend = \"cpu\"\ntask = \"copy\"\neval_every = 4\neval_batches = 1\nlr = 0.01\n\
        [[variants]]\nlabel = \"rmt-s\"\npreset = \"tiny-rmt\"\nd_v = 4\n\
        [[variants]]\nlabel = \"rmt-m\"\npreset = \"tiny-rmt\"\nd_v = 8\n\
        [[variants]]\nlabel = \"rmt-l\"\npreset = \"tiny-rmt\"\nd_v = 16\n\
        [[variants]]\nlabel = \"tr-s\"\npreset = \"tiny-transformer\"\nd_model = 16\n\
        [[variants]]\nlabel = \"tr-m\"\npreset = \"tiny-transformer\"\nd_model = 32\n\
        [[variants]]\nlabel = \"tr-l\"\npreset = \"tiny-transformer\"\nd_model = 64\n\
        [scaling]\ntokens_per_param = 0.02\nreference = \"transformer\"\n\
        [scaling.families]\nrmt = [\"rmt-s\", \"rmt-m\", \"rmt-l\"]\ntransformer = [\"tr-s\", \"tr-m\", \"tr-l\"]\n";
    std::fs::write(&file, text).unwrap();
    let out = tmp.path().join("s");
    let printed = ok(&["sweep", s(&file), "--out", s(&out)]);
    assert!(
        printed.contains("scaling at 0.02 tokens per parameter, 2 seeds"),
        "{printed}"
    );
    let sum = summary(&out);
    for p in sum["points"].as_array().unwrap() {
        let config: toml::Table =
            toml::from_str(&std::fs::read_to_string(out.join(p["dir"].as_str().unwrap()).join("config.toml")).unwrap())
                .unwrap();
        let steps = config["train"]["steps"].as_integer().unwrap() as f64;
        let per_step =
            (config["train"]["batch"].as_integer().unwrap() * config["data"]["seq_len"].as_integer().unwrap()) as f64;
        let want = (0.02 * p["params"].as_f64().unwrap() / per_step).round().max(1.0);
        assert_eq!(steps, want, "{}", p["label"]);
    }
    let sc = &sum["scaling"];
    let fits: Vec<(f64, f64)> = sc["families"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            // ln L on ln N by hand over the sizes' mean test losses.
            let pts: Vec<(f64, f64)> = f["sizes"]
                .as_array()
                .unwrap()
                .iter()
                .map(|z| {
                    (
                        z["params"].as_f64().unwrap().ln(),
                        z["mean_test_loss"].as_f64().unwrap().ln(),
                    )
                })
                .collect();
            let n = pts.len() as f64;
            let (mx, my) = (
                pts.iter().map(|p| p.0).sum::<f64>() / n,
                pts.iter().map(|p| p.1).sum::<f64>() / n,
            );
            let slope = pts.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum::<f64>()
                / pts.iter().map(|p| (p.0 - mx).powi(2)).sum::<f64>();
            let alpha = f["params_fit"]["alpha"].as_f64().unwrap();
            assert!(
                (alpha + slope).abs() < 1e-9,
                "{} α {alpha} against {}",
                f["name"],
                -slope
            );
            let (low, high) = (
                f["params_fit"]["alpha_low"].as_f64().unwrap(),
                f["params_fit"]["alpha_high"].as_f64().unwrap(),
            );
            assert!(low <= high, "{f}");
            (my - slope * mx, -slope)
        })
        .collect();
    // families are in name order: rmt, then the reference transformer.
    let m = &sc["multipliers"][0];
    assert_eq!(
        (m["family"].as_str(), m["reference"].as_str()),
        (Some("rmt"), Some("transformer"))
    );
    let at = m["at_params"].as_f64().unwrap();
    let loss = (fits[0].0 - fits[0].1 * at.ln()).exp();
    let want = ((fits[1].0 - loss.ln()) / fits[1].1).exp() / at;
    assert!(
        (m["params"].as_f64().unwrap() / want - 1.0).abs() < 1e-9,
        "{m} against {want}"
    );
    // Steps set by hand are refused: the scaling sets them.
    refused(
        &file,
        &text.replace("lr = 0.01\n", "lr = 0.01\nsteps = 5\n"),
        &tmp.path().join("bad"),
        "leave --steps and steps out",
    );
}
