//! `resmem train`, `eval` and `sample` end to end: learning, the run directory's files, resume
//! after a signal or a SIGKILL bit for bit, and a clear error for every bad input.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn resmem() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_resmem"));
    // wgpu and Mesa write harmless errors without a runtime dir.
    let runtime = std::env::temp_dir().join("resmem-xdg");
    std::fs::create_dir_all(&runtime).unwrap();
    c.env("XDG_RUNTIME_DIR", runtime);
    c
}

fn run(args: &[&str], out: Option<&Path>) -> Output {
    let mut c = resmem();
    c.args(args);
    if let Some(out) = out {
        c.arg("--out").arg(out);
    }
    c.output().unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).to_string()
}

fn rows(run: &Path) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(run.join("metrics.jsonl")).unwrap();
    text.lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// (step, loss, val_loss) of every logged row: what must match between two runs.
fn losses(run: &Path) -> Vec<(u64, f64, Option<f64>)> {
    rows(run)
        .iter()
        .map(|r| {
            (
                r["step"].as_u64().unwrap(),
                r["loss"].as_f64().unwrap(),
                r["val_loss"].as_f64(),
            )
        })
        .collect()
}

/// Trains `arch` on copy for `steps` CPU steps into a fresh directory; checks the metrics and
/// the saved config, and returns the directory and the logged rows.
fn train_copy(arch: &str, steps: &str) -> (tempfile::TempDir, PathBuf, Vec<serde_json::Value>) {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("t");
    let o = run(
        &[
            "train",
            "--arch",
            arch,
            "--task",
            "copy",
            "--backend",
            "cpu",
            "--steps",
            steps,
        ],
        Some(&out),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let rows = rows(&out);
    for key in ["step", "loss", "lr", "tokens_per_s"] {
        assert!(rows.iter().all(|r| r.get(key).is_some()), "every row needs {key}");
    }
    let config: toml::Table = toml::from_str(&std::fs::read_to_string(out.join("config.toml")).unwrap()).unwrap();
    assert_eq!(config["model"]["arch"].as_str(), Some(arch));
    assert!(out.join("model.safetensors").exists(), "every run saves its model");
    (dir, out, rows)
}

fn first_last(rows: &[serde_json::Value]) -> (f64, f64) {
    let loss = |r: &serde_json::Value| r["loss"].as_f64().unwrap();
    (loss(&rows[0]), loss(rows.last().unwrap()))
}

#[test]
fn train_rmt_on_cpu_learns_copy_then_samples_the_copy() {
    let (dir, out, rows) = train_copy("rmt", "300");
    // Measured: 5.545 → 0.0002, off the unigram plateau (ln 16 = 50% of the first loss) by step
    // 150. 10% needs the copy skill itself.
    let (first, last) = first_last(&rows);
    assert!(last < 0.1 * first, "loss {first} → {last}");
    assert_samples_the_copy(&out);
    let o = on_run(&out, &["eval", "--backend", "cpu", "--json"]);
    let eval: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let val = eval["val_loss"].as_f64().unwrap();
    // The held-out loss of the end of training, as logged, and its perplexity.
    assert_eq!(
        Some(val as f32 as f64),
        rows.last().unwrap()["val_loss"].as_f64().map(|v| v as f32 as f64)
    );
    assert!((eval["perplexity"].as_f64().unwrap() - val.exp()).abs() < 1e-9);
    // One checkpoint file is a run too (it carries its config): the playground's downloads.
    let (_, newest) = checkpoints(&out).pop().expect("a checkpoint");
    let lone = dir.path().join("downloaded.safetensors");
    std::fs::copy(&newest, &lone).unwrap();
    let o = on_run(&lone, &["eval", "--backend", "cpu", "--json"]);
    let again: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(again["val_loss"], eval["val_loss"]);
    assert_samples_the_copy(&lone);
}

/// The hybrid learns copy, its saved model samples the copy, and `analyze buckets` reports ML1
/// and ML2 of every block (it has no ML_QKV: attention is the RMT's).
#[test]
fn train_hybrid_on_cpu_learns_copy_then_analyze_its_buckets() {
    let (_dir, out, rows) = train_copy("hybrid", "100");
    // Measured: 5.545 → 0.002, off the unigram plateau by step 60.
    let (first, last) = first_last(&rows);
    assert!(last < 0.1 * first, "loss {first} → {last}");
    assert_samples_the_copy(&out);
    let o = on_run(&out, &["analyze", "buckets", "--backend", "cpu", "--json"]);
    let stats: Vec<serde_json::Value> = serde_json::from_slice(&o.stdout).unwrap();
    // The tiny preset: 2 blocks × (ml1, ml2) × K = R·D_v/τ = 128/4 = 32 tables.
    assert_eq!(stats.len(), 2 * 2 * 32, "{stats:?}");
    for (i, layer) in ["block0.ml1", "block0.ml2", "block1.ml1", "block1.ml2"]
        .iter()
        .enumerate()
    {
        assert_eq!(stats[i * 32]["layer"], *layer);
    }
}

/// Greedy decoding of a copy prompt repeats it (7 tokens fill the context of 16).
fn assert_samples_the_copy(run: &Path) {
    let o = on_run(
        run,
        &[
            "sample",
            "--backend",
            "cpu",
            "--prompt",
            "fabcpdoa|",
            "--tokens",
            "7",
            "--temperature",
            "0",
        ],
    );
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim_end(), "fabcpdoa|fabcpdo");
}

/// Runs `args --run RUN`, which must succeed.
fn on_run(run: &Path, args: &[&str]) -> Output {
    let o = resmem().args(args).arg("--run").arg(run).output().unwrap();
    assert!(o.status.success(), "{args:?}: {}", stderr(&o));
    o
}

#[test]
fn train_copy_on_cpu_writes_metrics_whose_loss_falls() {
    let (_dir, _, rows) = train_copy("transformer", "300");
    let (first, last) = first_last(&rows);
    // Measured: 5.545 → 0.003. The unigram plateau, reached without learning to copy, is
    // ln 16 = 2.77 = 50% of the first loss; 10% is far below it.
    assert!(last < 0.1 * first, "loss {first} → {last}");
    // Every row has the gradient's norm before clipping: finite, positive, and (measured: 0.78 at
    // step 1, 0.003 at the end) far smaller once the copy is learnt.
    let norms: Vec<f64> = rows
        .iter()
        .map(|r| r["grad_norm"].as_f64().expect("grad_norm in every row"))
        .collect();
    assert!(norms.iter().all(|n| n.is_finite() && *n > 0.0), "{norms:?}");
    assert!(norms.last().unwrap() * 20.0 < norms[0], "{norms:?}");
}

/// Resuming a run that finished says so and changes nothing (issue 46: it printed "done: 300
/// steps in 0.0 s").
#[test]
fn resuming_a_finished_run_says_so_and_changes_nothing() {
    let (_dir, run_dir, rows) = train_copy("rmt", "20");
    let model = std::fs::read(run_dir.join("model.safetensors")).unwrap();
    // What a kill -9 during a config.toml or metrics.jsonl write leaves: resume cleans it.
    let leftover = run_dir.join(".resmem-1-0.tmp");
    std::fs::write(&leftover, "half a config").unwrap();
    let o = resmem().args(["train", "--resume"]).arg(&run_dir).output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(!leftover.exists(), "resume removes write_atomic's temporaries");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("finished its 20 steps already") && !out.contains("done:"),
        "{out}"
    );
    assert_eq!(std::fs::read(run_dir.join("model.safetensors")).unwrap(), model);
    assert_eq!(self::rows(&run_dir).len(), rows.len(), "no row was added");
}

#[test]
fn an_earlier_run_is_never_overwritten_and_unrelated_files_are_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let unrelated = b"{\"mine\": true}\n";
    std::fs::write(dir.path().join("config.json"), unrelated).unwrap();
    let args = ["train", "--backend", "cpu", "--steps", "2"];
    let o = run(&args, Some(dir.path()));
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(std::fs::read(dir.path().join("config.json")).unwrap(), unrelated);
    let before = std::fs::read(dir.path().join("model.safetensors")).unwrap();
    let same_model = |before: &[u8]| std::fs::read(dir.path().join("model.safetensors")).unwrap() == before;
    let o = run(&args, Some(dir.path()));
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("already holds a run") && stderr(&o).contains("--resume"),
        "{}",
        stderr(&o)
    );
    assert!(same_model(&before), "the first run's model is untouched");
    assert_eq!(std::fs::read(dir.path().join("config.json")).unwrap(), unrelated);
}

#[test]
fn two_concurrent_runs_into_one_out_exactly_one_starts() {
    let dir = tempfile::tempdir().unwrap();
    let spawn = || {
        resmem()
            .args(["train", "--backend", "cpu", "--steps", "30", "--out"])
            .arg(dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (a, b) = (spawn(), spawn());
    let outcomes = [a.wait_with_output().unwrap(), b.wait_with_output().unwrap()];
    let ok = outcomes.iter().filter(|o| o.status.success()).count();
    assert_eq!(ok, 1, "{:?}", outcomes.iter().map(stderr).collect::<Vec<_>>());
    let refused = outcomes.iter().find(|o| !o.status.success()).unwrap();
    assert!(
        stderr(refused).contains("another resmem process") || stderr(refused).contains("already holds a run"),
        "{}",
        stderr(refused)
    );
    assert_eq!(
        losses(dir.path()).len(),
        4,
        "one run's rows: steps 1, 10, 20, 30 and nothing mixed in"
    );
}

/// Runs `args` into `out` until its metrics have `rows` lines, then sends `signal`; returns
/// its output.
fn interrupt(args: &[String], out: &Path, rows: usize, signal: &str) -> Output {
    let child = resmem()
        .args(args)
        .arg("--out")
        .arg(out)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while std::fs::read_to_string(out.join("metrics.jsonl")).map_or(0, |t| t.lines().count()) < rows {
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "the run never logged {rows} rows"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let pid = child.id().to_string();
    assert!(Command::new("kill").args([signal, &pid]).status().unwrap().success());
    child.wait_with_output().unwrap()
}

/// A second Ctrl-C stops at once, mid-step, with status 130 and says how to resume; the last
/// checkpoint written is whole, and the run resumes from it to the end.
#[test]
fn a_second_signal_stops_at_once_and_keeps_the_last_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    // Steps of about a second on 2 CPU cores, so that the second signal lands inside one.
    let args: Vec<String> = [
        "train",
        "--preset",
        "small-rmt",
        "--task",
        "copy",
        "--d-v",
        "64",
        "--d-ff",
        "1024",
        "--batch",
        "64",
        "--backend",
        "cpu",
        "--steps",
        "12",
        "--log-every",
        "1",
        "--checkpoint-every",
        "2",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let child = resmem()
        .args(&args)
        .arg("--out")
        .arg(&out)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while std::fs::read_to_string(out.join("metrics.jsonl")).map_or(0, |t| t.lines().count()) < 3 {
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "the run never logged 3 rows"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let pid = child.id().to_string();
    for _ in 0..2 {
        assert!(Command::new("kill").args(["-INT", &pid]).status().unwrap().success());
        std::thread::sleep(Duration::from_millis(100));
    }
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(130), "{}", stderr(&o));
    assert!(stderr(&o).contains("stopped at once"), "{}", stderr(&o));
    assert!(
        stderr(&o).contains(&format!("resmem train --resume {}", out.display())),
        "{}",
        stderr(&o)
    );
    assert!(!out.join("model.safetensors").exists(), "it stopped before the end");
    let o = resmem()
        .args(["train", "--backend", "cpu", "--resume"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(out.join("model.safetensors").exists());
}

/// For each architecture and backend: a run stopped by SIGTERM or SIGINT, then resumed, logs
/// the same losses and ends with the same parameters as the run left alone; and so does a run
/// in the fast class (its CPU twin, for two architectures), which resumes in its own class.
#[test]
fn a_run_interrupted_by_a_signal_resumes_bit_identically_on_cpu_and_gpu() {
    for (backend, steps, precision) in [("cpu", 40, "strict"), ("gpu", 16, "strict"), ("cpu", 40, "fast")] {
        for (i, arch) in models::Arch::ALL.iter().map(|a| a.name()).enumerate() {
            if precision == "fast" && !["rmt", "hc"].contains(&arch) {
                continue;
            }
            let signal = ["-TERM", "-INT"][i % 2];
            let dir = tempfile::tempdir().unwrap();
            let args: Vec<String> = [
                "train",
                "--arch",
                arch,
                "--backend",
                backend,
                "--steps",
                &steps.to_string(),
                "--log-every",
                "1",
                "--eval-every",
                "4",
                "--checkpoint-every",
                "5",
                "--precision",
                precision,
            ]
            .iter()
            .map(|s| s.to_string())
            .collect();
            let whole = dir.path().join("whole");
            let o = resmem().args(&args).arg("--out").arg(&whole).output().unwrap();
            assert!(o.status.success(), "{}", stderr(&o));

            let cut = dir.path().join("cut");
            let o = interrupt(&args, &cut, steps / 2, signal);
            let what = format!("{arch} on {backend}, {precision}, {signal}");
            // A requested stop that wrote its checkpoint is not a failure: status 0, no "error:".
            assert_eq!(o.status.code(), Some(0), "{what}: {}", stderr(&o));
            assert!(!stderr(&o).contains("error:"), "{what}: {}", stderr(&o));
            assert!(stderr(&o).contains("interrupted after step"), "{what}: {}", stderr(&o));
            assert!(
                stderr(&o).contains(&format!("resmem train --resume {}", cut.display())),
                "{what}: {}",
                stderr(&o)
            );
            assert!(
                !cut.join("model.safetensors").exists(),
                "{what}: it stopped before the end"
            );
            let o = resmem()
                .args(["train", "--backend", backend, "--resume"])
                .arg(&cut)
                .output()
                .unwrap();
            assert!(o.status.success(), "{what}: {}", stderr(&o));
            assert!(String::from_utf8_lossy(&o.stdout).contains("resuming"), "{what}");

            assert_eq!(losses(&whole), losses(&cut), "{what}");
            assert!(
                same_file(&whole.join("model.safetensors"), &cut.join("model.safetensors")),
                "{what}: final parameters"
            );
        }
    }
}

/// SIGKILL at random moments of a run that checkpoints every step: every checkpoint on disk is
/// always whole, every `--resume` works, and the losses end up those of the run left alone.
#[test]
fn sigkill_during_checkpoint_writes_never_loses_or_corrupts_a_checkpoint() {
    use rand::{rngs::SmallRng, Rng, SeedableRng};
    let dir = tempfile::tempdir().unwrap();
    let args = [
        "train",
        "--backend",
        "cpu",
        "--steps",
        "400",
        "--log-every",
        "1",
        "--checkpoint-every",
        "1",
        "--keep",
        "3",
    ];
    let whole = dir.path().join("whole");
    assert!(run(&args, Some(&whole)).status.success());

    let cut = dir.path().join("cut");
    let mut rng = SmallRng::seed_from_u64(7);
    let mut kills = 0;
    let mut resumed_from = vec![];
    while kills < 24 {
        let mut c = resmem();
        // Killed before config.toml was written, the directory is not a run yet: start anew.
        if cut.join("config.toml").exists() {
            c.args(["train", "--backend", "cpu", "--resume"]).arg(&cut);
        } else {
            c.args(args).arg("--out").arg(&cut);
        }
        let mut child = c.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
        // Killed at a random moment once it has trained a step, however slow a loaded machine
        // makes its start: a kill timed by the wall clock alone could land before the resume.
        let logged = |dir: &Path| std::fs::metadata(dir.join("metrics.jsonl")).map_or(0, |m| m.len());
        let before = logged(&cut);
        while logged(&cut) <= before && child.try_wait().unwrap().is_none() {
            std::thread::sleep(Duration::from_millis(2));
        }
        std::thread::sleep(Duration::from_millis(rng.random_range(0..40)));
        if child.try_wait().unwrap().is_some() {
            break; // it finished before the kill
        }
        child.kill().unwrap();
        let o = child.wait_with_output().unwrap();
        kills += 1;
        if let Some(line) = String::from_utf8_lossy(&o.stdout)
            .lines()
            .find(|l| l.starts_with("resuming"))
        {
            resumed_from.push(line.to_string());
        }
        for (_, path) in checkpoints(&cut) {
            let bytes = std::fs::read(&path).unwrap();
            models::checkpoint::config_of(&bytes)
                .unwrap_or_else(|e| panic!("after kill {kills}, {} is broken: {e}", path.display()));
        }
    }
    assert!(kills >= 20, "only {kills} kills before the run finished");
    assert!(resumed_from.len() >= 10, "{resumed_from:?}");
    let o = resmem()
        .args(["train", "--backend", "cpu", "--resume"])
        .arg(&cut)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(losses(&whole), losses(&cut));
    assert!(
        same_file(&whole.join("model.safetensors"), &cut.join("model.safetensors")),
        "final parameters"
    );
}

/// Byte-identical files (compared without printing them).
fn same_file(a: &Path, b: &Path) -> bool {
    std::fs::read(a).unwrap() == std::fs::read(b).unwrap()
}

fn checkpoints(run: &Path) -> Vec<(String, PathBuf)> {
    let Ok(entries) = std::fs::read_dir(run.join("checkpoints")) else {
        return vec![];
    };
    entries
        .flatten()
        .map(|e| (e.file_name().to_string_lossy().to_string(), e.path()))
        .filter(|(n, _)| n.starts_with("step-"))
        .collect()
}

#[test]
fn a_closed_stdout_never_stops_training() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = resmem()
        .args([
            "train",
            "--backend",
            "cpu",
            "--steps",
            "40",
            "--log-every",
            "1",
            "--out",
        ])
        .arg(dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // `| head -1`: read one line, then close the pipe.
    {
        use std::io::BufRead;
        let mut first = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut first)
            .unwrap();
        assert!(first.contains("parameters"), "{first}");
    }
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(dir.path().join("model.safetensors").exists());
    assert_eq!(losses(dir.path()).len(), 40);
}

/// Every bad input of the issue, and more: an error that says what is wrong, never a panic.
#[test]
fn bad_inputs_give_clear_errors_and_never_panic() {
    let dir = tempfile::tempdir().unwrap();
    let cases: &[(&[&str], &str)] = &[
        (&["train", "--task", "sort"], "copy, reverse and mqar"),
        (
            &["train", "--backend", "cpu", "--task", "mqar", "--seq-len", "5"],
            "at least 8",
        ),
        (&["train", "--backend", "cpu", "--init-std", "inf"], "init_std"),
        (&["train", "--backend", "cpu", "--lr", "nan"], "lr"),
        (
            &[
                "train",
                "--backend",
                "cpu",
                "--arch",
                "rmt",
                "--d-k",
                "18446744073709551615",
            ],
            "--d-k is too large",
        ),
        (
            &["train", "--backend", "cpu", "--seq-len", "18446744073709551615"],
            "--seq-len is too large",
        ),
        (
            &[
                "train",
                "--backend",
                "cpu",
                "--batch",
                "4611686018427387904",
                "--seq-len",
                "4",
            ],
            "batch",
        ),
        (
            &["train", "--backend", "cpu", "--seed", "18446744073709551615"],
            "--seed",
        ),
        (
            &["train", "--backend", "cpu", "--arch", "rmt", "--tau", "4"],
            "--tau does not apply to --arch rmt",
        ),
        (
            &["train", "--backend", "cpu", "--arch", "rmt", "--d-model", "64"],
            "--d-model does not apply to --arch rmt",
        ),
        (
            &["train", "--backend", "cpu", "--d-k", "4"],
            "--d-k does not apply to --arch transformer",
        ),
        (
            &["train", "--backend", "cpu", "--arch", "memoryformer", "--d-ff", "64"],
            "--d-ff does not apply",
        ),
        (
            &["train", "--backend", "cpu", "--preset", "nope"],
            "no preset named `nope`",
        ),
        (
            &[
                "train",
                "--backend",
                "cpu",
                "--preset",
                "tiny-rmt",
                "--arch",
                "transformer",
            ],
            "not --arch transformer",
        ),
        (
            &["train", "--backend", "cpu", "--data", "/nonexistent/corpus"],
            "resmem data prepare",
        ),
        (&["train", "--backend", "cpu", "--log-every", "0"], "log_every"),
        (
            &["train", "--backend", "cpu", "--steps", "18446744073709551615"],
            "--steps is too large",
        ),
        (
            &["train", "--backend", "cpu", "--eval-batches", "4611686018427387904"],
            "held-out batches",
        ),
        (
            &["train", "--backend", "cpu", "--resume", "/nonexistent/run"],
            "not a run directory",
        ),
        (
            &[
                "train",
                "--arch",
                "memoryformer",
                "--backend",
                "cpu",
                "--d-model",
                "4096",
                "--tau",
                "14",
            ],
            "GiB is available",
        ),
        (
            &["train", "--arch", "memoryformer", "--backend", "cpu", "--tau", "15"],
            "tau of at most 14",
        ),
        (
            &["train", "--arch", "hybrid", "--backend", "cpu", "--d-ff", "64"],
            "--d-ff does not apply to --arch hybrid",
        ),
        (
            &["train", "--arch", "hybrid", "--backend", "cpu", "--tau", "15"],
            "tau of at most 14",
        ),
        (
            &[
                "train",
                "--arch",
                "hybrid",
                "--backend",
                "cpu",
                "--rank",
                "1",
                "--d-v",
                "4",
                "--tau",
                "8",
            ],
            "tau = 8 exceeds rank × d_v = 4",
        ),
        (
            &["eval", "--backend", "cpu", "--run", "/nonexistent/run"],
            "not a run directory",
        ),
        (
            &["sample", "--backend", "cpu", "--run", "/nonexistent/run"],
            "not a run directory",
        ),
        (
            &["sample", "--backend", "cpu", "--temperature=-1", "--run", "/x"],
            "--temperature",
        ),
    ];
    for (i, (args, expected)) in cases.iter().enumerate() {
        let mut c = resmem();
        c.args(*args);
        if args[0] == "train" && !args.contains(&"--resume") {
            c.arg("--out").arg(dir.path().join(i.to_string()));
        }
        let start = Instant::now();
        let o = c.output().unwrap();
        let err = stderr(&o);
        assert!(!o.status.success(), "{args:?} succeeded");
        assert!(!err.contains("panicked"), "{args:?} panicked: {err}");
        assert!(err.contains(expected), "{args:?}: expected `{expected}` in: {err}");
        // Refused before any large allocation.
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "{args:?} took {:?}",
            start.elapsed()
        );
    }
}

/// `--resume DIR --steps N` extends a finished run: a new cycle of the schedule from its old
/// end, recorded in config.toml; a checkpoint written before the extension resumes under it to
/// the same losses; and --steps that would not extend the run is refused.
#[test]
fn a_finished_run_extends_with_steps_and_resumes_bit_for_bit() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    let flags = [
        "train",
        "--backend",
        "cpu",
        "--steps",
        "8",
        "--checkpoint-every",
        "4",
        "--log-every",
        "1",
    ];
    for out in [&a, &b] {
        let o = run(&flags, Some(out));
        assert!(o.status.success(), "{}", stderr(&o));
    }
    let extend = |run: &Path, steps: &str| {
        resmem()
            .args(["train", "--resume"])
            .arg(run)
            .args(["--steps", steps])
            .output()
            .unwrap()
    };
    for steps in ["8", "5", "x"] {
        let o = extend(&a, steps);
        assert!(
            !o.status.success() && stderr(&o).contains("--steps"),
            "{steps}: {}",
            stderr(&o)
        );
        assert!(!stderr(&o).contains("panicked"));
    }
    let o = extend(&a, "14");
    assert!(o.status.success(), "{}", stderr(&o));
    let said = String::from_utf8_lossy(&o.stdout);
    assert!(said.contains("extending") && said.contains("from 8 to 14"), "{said}");
    let config: toml::Table = toml::from_str(&std::fs::read_to_string(a.join("config.toml")).unwrap()).unwrap();
    assert_eq!(config["train"]["steps"].as_integer(), Some(14));
    assert_eq!(config["train"]["restarts"].as_array().map(|r| r.len()), Some(1));
    let rows = rows(&a);
    assert_eq!(rows.last().unwrap()["step"].as_u64(), Some(14));
    let lr = |step: u64| {
        rows.iter().find(|r| r["step"].as_u64() == Some(step)).unwrap()["lr"]
            .as_f64()
            .unwrap()
    };
    // 6 new steps warm up over 1 (5% of 6, at least 1): back to the peak at step 9, then down.
    assert!(
        lr(8) < lr(9) && lr(10) < lr(9),
        "the new cycle starts again: {} {} {}",
        lr(8),
        lr(9),
        lr(10)
    );
    // b, cut back to its step-4 checkpoint (written before any extension), extends to the same.
    std::fs::remove_file(b.join("model.safetensors")).unwrap();
    let newest = checkpoints(&b).into_iter().max().unwrap().1;
    std::fs::remove_file(newest).unwrap();
    let o = extend(&b, "14");
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("(step 4)"));
    // Every training loss and the last evaluation (a also evaluated at its old end, step 8).
    let training = |run: &Path| losses(run).into_iter().map(|(s, l, _)| (s, l)).collect::<Vec<_>>();
    assert_eq!(training(&a), training(&b));
    assert_eq!(losses(&a).last(), losses(&b).last());
    // Extended again, it continues from 14, and the finished message points to --steps.
    let o = extend(&a, "16");
    assert!(o.status.success(), "{}", stderr(&o));
    let o = resmem().args(["train", "--resume"]).arg(&a).output().unwrap();
    assert!(String::from_utf8_lossy(&o.stdout).contains("--steps N"));
}

/// `--sample-every N` prints what the model writes at every Nth step and keeps it in
/// samples.jsonl, without changing a single loss; a cadence off the logged steps is refused.
#[test]
fn sample_every_writes_samples_and_changes_no_loss() {
    let dir = tempfile::tempdir().unwrap();
    let (s, n) = (dir.path().join("s"), dir.path().join("n"));
    let flags = ["train", "--backend", "cpu", "--task", "copy", "--steps", "20"];
    let o = run(&[&flags[..], &["--sample-every", "10"]].concat(), Some(&s));
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("sample at step 10:"));
    let o = run(&flags, Some(&n));
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(losses(&s), losses(&n));
    let samples: Vec<serde_json::Value> = std::fs::read_to_string(s.join("samples.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let steps: Vec<u64> = samples.iter().map(|r| r["step"].as_u64().unwrap()).collect();
    assert_eq!(steps, [10, 20]);
    assert!(samples
        .iter()
        .all(|r| r["tokens"].as_array().unwrap().len() == 16 && r["prompt"].is_string()));
    assert!(!n.join("samples.jsonl").exists());
    let o = run(
        &[&flags[..], &["--sample-every", "15"]].concat(),
        Some(&dir.path().join("x")),
    );
    assert!(
        !o.status.success() && stderr(&o).contains("multiple of log_every"),
        "{}",
        stderr(&o)
    );
}

/// `--init-from RUN` starts a new run from another's weights (fine-tuning): its first loss is the
/// trained run's, not a fresh model's; config.toml records where from, so a run killed before its
/// first checkpoint starts from them again; another architecture or a missing run is refused.
#[test]
fn init_from_starts_a_run_from_another_runs_weights() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b, c, fresh) = (
        dir.path().join("a"),
        dir.path().join("b"),
        dir.path().join("c"),
        dir.path().join("f"),
    );
    let flags = ["train", "--backend", "cpu", "--log-every", "1"];
    let o = run(&[&flags[..], &["--steps", "30"]].concat(), Some(&a));
    assert!(o.status.success(), "{}", stderr(&o));
    let o = run(
        &[&flags[..], &["--steps", "4", "--init-from", a.to_str().unwrap()]].concat(),
        Some(&b),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("starting from the weights of"));
    let o = run(&[&flags[..], &["--steps", "4"]].concat(), Some(&fresh));
    assert!(o.status.success(), "{}", stderr(&o));
    let first = |run: &Path| losses(run)[0].1;
    let trained = losses(&a).last().unwrap().1;
    assert!(
        (first(&b) - trained).abs() < 0.5 && first(&fresh) > first(&b) + 1.0,
        "fine-tuned {} against the source's last {trained} and a fresh model's {}",
        first(&b),
        first(&fresh)
    );
    let config: toml::Table = toml::from_str(&std::fs::read_to_string(b.join("config.toml")).unwrap()).unwrap();
    let recorded = config["train"]["init_from"].as_str().unwrap();
    assert!(
        Path::new(recorded).is_absolute() && recorded.ends_with("/a"),
        "{recorded}"
    );
    // Cut back to step 0 (no checkpoint), the run starts from a's weights again, to the same losses.
    let before = losses(&b);
    std::fs::remove_dir_all(b.join("checkpoints")).unwrap();
    std::fs::remove_file(b.join("model.safetensors")).unwrap();
    let o = resmem().args(["train", "--resume"]).arg(&b).output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(losses(&b), before);
    for (extra, says) in [
        (
            vec!["--arch", "rmt", "--init-from", a.to_str().unwrap()],
            "does not fit this model",
        ),
        (vec!["--init-from", "/nonexistent/run"], "no such run"),
    ] {
        let o = run(&[&flags[..], &["--steps", "4"], &extra[..]].concat(), Some(&c));
        assert!(!o.status.success() && stderr(&o).contains(says), "{}", stderr(&o));
        assert!(!stderr(&o).contains("panicked"));
        let _ = std::fs::remove_dir_all(&c);
    }
}

/// A run whose config.toml was edited after its checkpoints cannot resume, and is left as it
/// was: nothing is retrained over it.
#[test]
fn resume_after_editing_config_toml_is_refused_and_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r");
    let o = run(
        &["train", "--backend", "cpu", "--steps", "6", "--checkpoint-every", "2"],
        Some(&out),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let config = std::fs::read_to_string(out.join("config.toml")).unwrap();
    std::fs::write(out.join("config.toml"), config.replace("steps = 6", "steps = 8")).unwrap();
    let before = (rows(&out), checkpoints(&out).len());
    let o = resmem()
        .args(["train", "--backend", "cpu", "--resume"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(stderr(&o).contains("undo any edit of config.toml"), "{}", stderr(&o));
    assert_eq!((rows(&out), checkpoints(&out).len()), before);
}

/// A run's config.toml is a complete config: given back with --config it trains the same run.
#[test]
fn config_toml_reproduces_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let first = dir.path().join("a");
    assert!(run(
        &[
            "train",
            "--backend",
            "cpu",
            "--arch",
            "rmt",
            "--steps",
            "12",
            "--d-k",
            "4",
            "--lr",
            "0.02"
        ],
        Some(&first)
    )
    .status
    .success());
    let again = dir.path().join("b");
    let o = resmem()
        .args(["train", "--backend", "cpu", "--config"])
        .arg(first.join("config.toml"))
        .arg("--out")
        .arg(&again)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        std::fs::read(first.join("config.toml")).unwrap(),
        std::fs::read(again.join("config.toml")).unwrap()
    );
    assert_eq!(losses(&first), losses(&again));
    // A partial file: a preset and one change.
    let partial = dir.path().join("partial.toml");
    std::fs::write(&partial, "preset = \"tiny-rmt\"\n[train]\nsteps = 3\n").unwrap();
    let o = resmem()
        .args(["train", "--backend", "cpu", "--config"])
        .arg(&partial)
        .arg("--out")
        .arg(dir.path().join("c"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(losses(&dir.path().join("c")).last().unwrap().0, 3);
}

/// The MemoryFormer paper's ablation settings are flags that reach config.toml, and a run whose
/// config.toml and checkpoints predate them (no `expansion_bits`, no `block_gelu`) resumes bit
/// for bit: a missing setting reads as the default it trained with.
#[test]
fn memory_block_settings_are_flags_and_an_older_config_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let ablated = dir.path().join("ablated");
    let flags = ["--expansion-bits", "1", "--block-gelu", "--table-lr-mult", "2"];
    let mut args = vec!["train", "--backend", "cpu", "--arch", "memoryformer", "--steps", "1"];
    args.extend(flags);
    let o = run(&args, Some(&ablated));
    assert!(o.status.success(), "{}", stderr(&o));
    let config = std::fs::read_to_string(ablated.join("config.toml")).unwrap();
    for line in ["expansion_bits = 1", "block_gelu = true", "table_lr_mult = 2.0"] {
        assert!(config.lines().any(|l| l == line), "{line} missing from\n{config}");
    }

    let out = dir.path().join("older");
    let args = ["train", "--backend", "cpu", "--arch", "memoryformer", "--steps", "4"];
    let o = run(
        &[&args[..], &["--checkpoint-every", "2", "--log-every", "1"]].concat(),
        Some(&out),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let whole = losses(&out);
    std::fs::remove_file(out.join("checkpoints/step-000000004.safetensors")).unwrap();
    let config = std::fs::read_to_string(out.join("config.toml")).unwrap();
    let older: String = config
        .lines()
        .filter(|l| !l.starts_with("expansion_bits") && !l.starts_with("block_gelu"))
        .map(|l| format!("{l}\n"))
        .collect();
    assert_eq!(config.lines().count(), older.lines().count() + 2);
    std::fs::write(out.join("config.toml"), &older).unwrap();
    // The checkpoint as a binary from before these settings wrote it: the same state, the
    // older config text.
    let kept = out.join("checkpoints/step-000000002.safetensors");
    let bytes = std::fs::read(&kept).unwrap();
    let models::ModelConfig::MemoryFormer(model) = models::RunConfig::from_toml(&config).unwrap().model else {
        panic!("not a MemoryFormer: {config}")
    };
    let layout = models::memoryformer::layout(&model);
    let state = models::checkpoint::state_from_bytes(&layout, &bytes).unwrap();
    models::checkpoint::write_state(&layout, &state, &older, &kept).unwrap();
    let o = resmem().args(["train", "--resume"]).arg(&out).output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(!stderr(&o).contains("skipping"), "{}", stderr(&o));
    assert_eq!(losses(&out), whole);
}

/// The MemoryFormer learns copy, saves its model, and `analyze buckets` reports every table of
/// every hashed layer of that saved model.
#[test]
fn train_memoryformer_on_cpu_then_analyze_its_buckets() {
    let (_dir, out, rows) = train_copy("memoryformer", "300");
    // Measured: 5.545 → 0.002, off the unigram plateau (50% of the first loss) by step 125.
    let (first, last) = first_last(&rows);
    assert!(last < 0.1 * first, "loss {first} → {last}");
    let report = resmem()
        .args(["analyze", "buckets", "--backend", "cpu", "--json", "--run"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(report.status.success(), "{}", stderr(&report));
    let stats: Vec<serde_json::Value> = serde_json::from_slice(&report.stdout).unwrap();
    // The tiny preset: 2 blocks × (qkv, ml1, ml2) × K = 16 tables.
    assert_eq!(stats.len(), 2 * 3 * 16, "{stats:?}");
    for s in &stats {
        for key in ["layer", "table", "entropy", "dead_buckets", "counts"] {
            assert!(s.get(key).is_some(), "{key} missing from {s}");
        }
        // Entropy is the normalised entropy of the counts; recompute it from them.
        let counts: Vec<f64> = s["counts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c.as_f64().unwrap())
            .collect();
        let n: f64 = counts.iter().sum();
        let h: f64 = counts
            .iter()
            .filter(|&&c| c > 0.0)
            .map(|&c| -(c / n) * (c / n).ln())
            .sum();
        let e = s["entropy"].as_f64().unwrap();
        assert!((e - h / (counts.len() as f64).ln()).abs() < 1e-4, "{s}");
        let dead = counts.iter().filter(|&&c| c == 0.0).count() as u64;
        assert_eq!(s["dead_buckets"].as_u64(), Some(dead));
    }
    // A run of another architecture is refused with a reason.
    let (_dir, rmt, _) = train_copy("rmt", "2");
    let refused = resmem()
        .args(["analyze", "buckets", "--backend", "cpu", "--run"])
        .arg(&rmt)
        .output()
        .unwrap();
    assert!(!refused.status.success());
    assert!(stderr(&refused).contains("MemoryFormer"));
}

/// A loss that grows warns; a loss that becomes NaN or Inf stops the run with advice, and the
/// checkpoints written before it still load.
#[test]
fn divergence_warns_and_a_non_finite_loss_stops_the_run_keeping_its_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let o = run(
        &[
            "train",
            "--backend",
            "cpu",
            "--arch",
            "rmt",
            "--steps",
            "6",
            "--lr",
            "3",
            "--log-every",
            "1",
        ],
        Some(&dir.path().join("warn")),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("warning: the loss") && out.contains("may be diverging"),
        "{out}"
    );

    let run_dir = dir.path().join("nan");
    let o = run(
        &[
            "train",
            "--backend",
            "cpu",
            "--steps",
            "60",
            "--lr",
            "1e30",
            "--log-every",
            "5",
            "--checkpoint-every",
            "1",
        ],
        Some(&run_dir),
    );
    assert!(!o.status.success());
    let err = stderr(&o);
    assert!(
        err.contains("NaN or Inf") && err.contains("--lr 1e30") && err.contains("--init-std"),
        "{err}"
    );
    let kept = checkpoints(&run_dir);
    assert!(!kept.is_empty() && err.contains("the last good checkpoint"), "{err}");
    for (_, path) in kept {
        let bytes = std::fs::read(&path).unwrap();
        models::checkpoint::config_of(&bytes).unwrap();
    }
    assert!(
        !run_dir.join("model.safetensors").exists(),
        "a diverged run writes no final model"
    );

    // In the fast class (here its CPU twin) the message names the first product that met the
    // NaN or infinity, and the checkpoint before it still loads.
    let run_dir = dir.path().join("fast");
    let o = run(
        &[
            "train",
            "--backend",
            "cpu",
            "--precision",
            "fast",
            "--steps",
            "60",
            "--lr",
            "1e30",
            "--log-every",
            "5",
            "--checkpoint-every",
            "1",
        ],
        Some(&run_dir),
    );
    assert!(!o.status.success());
    let err = stderr(&o);
    assert!(
        err.contains("in the fast class") && err.contains("`matmul ") && err.contains("--precision strict"),
        "{err}"
    );
    let kept = checkpoints(&run_dir);
    assert!(!kept.is_empty() && err.contains("the last good checkpoint"), "{err}");
    let ran: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run_dir.join("backend.json")).unwrap()).unwrap();
    assert_eq!(ran["precision"], "fast");
}

/// Without --backend a command runs where it is fast: a new run takes the GPU only where it is
/// a real one, and the CPU where the adapter is a CPU emulating a GPU (lavapipe on CI), saying
/// which and why in one line; a command that reads a run uses the backend it trained on.
#[test]
fn without_backend_a_run_avoids_an_emulated_gpu_and_readers_follow_the_run() {
    std::env::set_var("XDG_RUNTIME_DIR", std::env::temp_dir());
    let (name, emulated) = pollster::block_on(engine::gpu::probe_adapter()).expect("these tests need a GPU adapter");
    let dir = tempfile::tempdir().unwrap();
    let auto = dir.path().join("auto");
    let o = run(&["train", "--task", "copy", "--steps", "2"], Some(&auto));
    assert!(o.status.success(), "{}", stderr(&o));
    let recorded: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(auto.join("backend.json")).unwrap()).unwrap();
    let (want, says) = match emulated {
        true => ("cpu", "a CPU emulating a GPU"),
        false => ("gpu", "running on the GPU"),
    };
    assert_eq!(recorded["backend"], want, "{name}");
    assert!(
        stderr(&o).contains(says) && stderr(&o).contains("to choose otherwise"),
        "{}",
        stderr(&o)
    );

    // Readers of a run take its backend: the GPU's own note shows that the GPU ran.
    let on_gpu = dir.path().join("gpu");
    let o = run(
        &["train", "--task", "copy", "--steps", "2", "--backend", "gpu"],
        Some(&on_gpu),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    for (run_dir, on) in [(&on_gpu, "gpu"), (&auto, want)] {
        let o = resmem().args(["eval", "--run"]).arg(run_dir).output().unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
        assert!(
            !stderr(&o).contains("note: running on"),
            "a reader of a run chooses nothing: {}",
            stderr(&o)
        );
        if emulated {
            let gpu_note = stderr(&o).contains("--backend gpu runs on");
            assert_eq!(gpu_note, on == "gpu", "eval of a run trained on {on}: {}", stderr(&o));
        }
    }
}
