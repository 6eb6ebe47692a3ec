//! Hostile inputs (issue #22): nothing crashes, hangs, overwrites or silently changes. Each
//! case is a command line and what its failure must say; every one exits 1 quickly, with a
//! message and without a panic.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

const RESMEM: &str = env!("CARGO_BIN_EXE_resmem");

fn command(program: &str) -> Command {
    let mut c = Command::new(program);
    // wgpu and Mesa write harmless errors without a runtime dir.
    let runtime = std::env::temp_dir().join("resmem-xdg");
    std::fs::create_dir_all(&runtime).unwrap();
    c.env("XDG_RUNTIME_DIR", runtime);
    c
}

fn resmem() -> Command {
    command(RESMEM)
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).to_string()
}

/// Runs resmem with `args` in a 4 GB address space (so that allocating before refusing is
/// fatal), and expects a refusal within a few seconds whose message holds every `expect`.
fn refused_in_small_memory(args: &[&str], expect: &[&str]) {
    let start = Instant::now();
    let o = command("sh")
        .arg("-c")
        .arg("ulimit -v 4000000; exec \"$0\" \"$@\"")
        .arg(RESMEM)
        .args(args)
        .output()
        .unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "resmem {args:?} should fail with 1: {err}");
    assert!(!err.contains("panicked"), "resmem {args:?} panicked: {err}");
    for e in expect {
        assert!(err.contains(e), "resmem {args:?} should say {e:?}: {err}");
    }
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "resmem {args:?} took {:?}",
        start.elapsed()
    );
}

/// A tiny `arch` run trained on copy, in `dir`/`arch`.
fn tiny_run(dir: &Path, arch: &str) -> PathBuf {
    let run = dir.join(arch);
    let o = resmem()
        .args(["train", "--arch", arch, "--backend", "cpu", "--steps", "2", "--out"])
        .arg(&run)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    run
}

/// A copy of `run` whose config.toml asks for a batch no machine holds, as an edit would.
fn with_huge_batch(run: &Path) -> String {
    let huge = run.with_extension("huge");
    std::fs::create_dir(&huge).unwrap();
    let cfg = std::fs::read_to_string(run.join("config.toml")).unwrap();
    let cfg = cfg.replace("batch = 32", "batch = 10000000000");
    assert!(cfg.contains("batch = 10000000000"), "{cfg}");
    std::fs::write(huge.join("config.toml"), cfg).unwrap();
    std::fs::copy(run.join("model.safetensors"), huge.join("model.safetensors")).unwrap();
    huge.to_str().unwrap().to_string()
}

#[test]
fn absurd_sizes_are_refused_before_anything_is_allocated() {
    let dir = tempfile::tempdir().unwrap();
    let run = tiny_run(dir.path(), "memoryformer");
    let huge = with_huge_batch(&run);
    let huge_rmt = with_huge_batch(&tiny_run(dir.path(), "rmt"));
    let (huge, huge_rmt) = (huge.as_str(), huge_rmt.as_str());
    let run = run.to_str().unwrap();
    let out = dir.path().join("out");
    let out = out.to_str().unwrap();
    let config = dir.path().join("long.toml");
    std::fs::write(&config, "[data]\nseq_len = 100000000\n[model]\nseq_len = 100000000\n").unwrap();
    let config = config.to_str().unwrap();
    let cases: &[(&[&str], &[&str])] = &[
        (
            &["train", "--backend", "cpu", "--batch", "100000000", "--out", out],
            &["--batch"],
        ),
        (
            &["train", "--backend", "cpu", "--batch", "10000000", "--out", out],
            &["batch"],
        ),
        (
            &["train", "--backend", "gpu", "--batch", "100000000", "--out", out],
            &["--batch"],
        ),
        (
            &["train", "--backend", "cpu", "--config", config, "--out", out],
            &["--seq-len"],
        ),
        (
            &[
                "train",
                "--backend",
                "cpu",
                "--batch",
                "100000",
                "--eval-batches",
                "10000",
                "--out",
                out,
            ],
            &["--eval-batches"],
        ),
        (
            &[
                "eval",
                "--backend",
                "cpu",
                "--run",
                run,
                "--batches",
                "18446744073709551615",
            ],
            &["--batches"],
        ),
        (&["eval", "--backend", "cpu", "--run", huge], &["the run's batch"]),
        (
            &["analyze", "buckets", "--backend", "cpu", "--run", huge],
            &["the run's batch"],
        ),
        (
            &[
                "analyze",
                "variance",
                "--measured",
                "--run",
                huge_rmt,
                "--backend",
                "cpu",
            ],
            &["the run's batch"],
        ),
        (
            &["analyze", "residual", "--run", huge_rmt, "--backend", "cpu"],
            &["the run's batch"],
        ),
        (
            &[
                "analyze",
                "buckets",
                "--backend",
                "cpu",
                "--run",
                run,
                "--batches",
                "18446744073709551615",
            ],
            &["--batches"],
        ),
        (
            &[
                "analyze",
                "variance",
                "--measured",
                "--backend",
                "cpu",
                "--tokens",
                "1000000",
            ],
            &["sequence length"],
        ),
        (
            &[
                "analyze",
                "variance",
                "--measured",
                "--backend",
                "cpu",
                "--tokens",
                "100000000",
                "--batch",
                "100000",
            ],
            &["--tokens"],
        ),
        // A solve from 10⁸ would scan 3.2·10⁹ values of d_ff; it ran past 120 s.
        (
            &[
                "count",
                "--arch",
                "transformer",
                "--d-ff",
                "100000000",
                "--match",
                "tiny-rmt",
                "--hold",
                "params",
                "--solve",
                "d_ff",
            ],
            &["d_ff", "100000000", "1048576"],
        ),
    ];
    for (args, expect) in cases {
        refused_in_small_memory(args, expect);
    }
}

/// A view that trains a fresh model before it reads takes at most 10,000 steps, refused by
/// the flag's name before anything trains: `analyze lens --step 100000` and `analyze variance
/// --measured --steps 2⁶⁴−1` used to train for minutes, or for ever.
#[test]
fn views_train_a_bounded_number_of_steps() {
    for args in [
        &["analyze", "lens", "--backend", "cpu", "--step", "100000"][..],
        &["analyze", "attribute", "--backend", "cpu", "--step", "10001"],
        &[
            "analyze",
            "variance",
            "--measured",
            "--backend",
            "cpu",
            "--steps",
            "18446744073709551615",
        ],
    ] {
        let mut c = resmem();
        c.args(args);
        let o = within(c, 5);
        let err = stderr(&o);
        let flag = args[args.len() - 2];
        assert_eq!(o.status.code(), Some(2), "resmem {args:?}: {err}");
        assert!(
            err.contains(flag) && err.contains("10000"),
            "resmem {args:?} should name {flag} and its bound: {err}"
        );
    }
}

/// Runs `c` and kills it if it has not finished after `secs` seconds, failing the test.
/// Work a user sizes is refused before it starts, naming what to change: `sample --tokens 10⁸`
/// (it drew for minutes with no output), a sweep of 10⁵ seeds (it trained), and a named pipe
/// given as a config, a token file or a corpus's file (its open waited for a writer for ever).
#[test]
fn user_sized_work_and_pipes_are_refused_before_work() {
    let dir = tempfile::tempdir().unwrap();
    let pipe = dir.path().join("pipe");
    let made = Command::new("mkfifo")
        .arg(&pipe)
        .status()
        .expect("mkfifo (coreutils) is needed");
    assert!(made.success());
    let pipe = pipe.to_str().unwrap();
    // A corpus directory whose meta.json is a named pipe.
    let corpus = dir.path().join("corpus");
    std::fs::create_dir(&corpus).unwrap();
    assert!(Command::new("mkfifo")
        .arg(corpus.join("meta.json"))
        .status()
        .unwrap()
        .success());
    let corpus = corpus.to_str().unwrap();
    let seeds: Vec<String> = (0..100_000).map(|s| s.to_string()).collect();
    let sweep = dir.path().join("seeds.toml");
    let file = format!(
        "title = \"x\"\nseeds = [{}]\n[[variants]]\nlabel = \"a\"\npreset = \"tiny-rmt\"\n",
        seeds.join(", ")
    );
    std::fs::write(&sweep, file).unwrap();
    let sweep = sweep.to_str().unwrap();
    let out = dir.path().join("out");
    let out = out.to_str().unwrap();
    let params = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/official-rmt/rmt_official_small_params.safetensors");
    let params = params.to_str().unwrap();
    let cases: &[(&[&str], i32, &[&str])] = &[
        (
            &["sample", "--run", out, "--tokens", "100000000"],
            2,
            &["--tokens", "100000"],
        ),
        (
            &["sample", "--run", out, "--tokens", "18446744073709551615"],
            2,
            &["--tokens", "100000"],
        ),
        (
            &["sweep", sweep, "--out", out],
            1,
            &["100000 runs", "seeds: 100000", "10000"],
        ),
        (
            &["train", "--backend", "cpu", "--config", pipe, "--out", out],
            1,
            &["named pipe", pipe],
        ),
        (
            &["import", "official", params, "--tokens", pipe, "--out", out],
            1,
            &["named pipe"],
        ),
        (
            &["train", "--backend", "cpu", "--data", corpus, "--out", out],
            1,
            &["named pipe", "meta.json"],
        ),
    ];
    for (args, code, expect) in cases {
        let mut c = resmem();
        c.args(*args);
        let o = within(c, 10);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(*code), "resmem {args:?}: {err}");
        for e in *expect {
            assert!(
                err.contains(e) && !err.contains("panicked"),
                "resmem {args:?} should say {e}: {err}"
            );
        }
    }
}

fn within(mut c: Command, secs: u64) -> Output {
    let mut child = c
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > Duration::from_secs(secs) {
            child.kill().unwrap();
            panic!("{c:?} did not finish within {secs} s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

/// A run directory holding a real config.toml and the metrics `lines`.
fn run_with_metrics(dir: &Path, name: &str, config: &Path, lines: &[&str]) -> PathBuf {
    let run = dir.join(name);
    std::fs::create_dir(&run).unwrap();
    std::fs::copy(config, run.join("config.toml")).unwrap();
    std::fs::write(run.join("metrics.jsonl"), lines.join("\n") + "\n").unwrap();
    run
}

#[test]
fn plot_draws_any_finite_losses_and_refuses_points_past_f64() {
    let dir = tempfile::tempdir().unwrap();
    let config = tiny_run(dir.path(), "transformer").join("config.toml");
    let drawn: &[&[&str]] = &[
        &[r#"{"step":1,"loss":3.4e38}"#, r#"{"step":2,"loss":3.3e38}"#],
        &[r#"{"step":1,"loss":3.4e38}"#, r#"{"step":2,"loss":2.0}"#],
        &[r#"{"step":1,"loss":1.7e308}"#, r#"{"step":2,"loss":2.0}"#],
        &[r#"{"step":1,"loss":-1.7e308}"#, r#"{"step":2,"loss":1.7e308}"#],
        &[r#"{"step":1,"loss":1.7e308}"#],
        // One float apart: a width plotters' tick search cannot split.
        &[
            r#"{"step":1,"loss":1e300}"#,
            r#"{"step":2,"loss":1.0000000000000002e300}"#,
        ],
        &[r#"{"step":1,"loss":5e-324}"#, r#"{"step":2,"loss":0.0}"#],
        &[
            r#"{"step":1,"loss":2.0}"#,
            r#"{"step":18446744073709551615,"loss":1.0}"#,
        ],
    ];
    for (i, lines) in drawn.iter().enumerate() {
        let run = run_with_metrics(dir.path(), &format!("drawn{i}"), &config, lines);
        for x in ["step", "flops"] {
            let mut c = resmem();
            c.args(["plot", "--x", x, "--y", "loss", "--out"])
                .arg(dir.path().join(format!("drawn{i}.svg")))
                .arg(&run);
            let o = within(c, 20);
            assert!(o.status.success(), "{lines:?} --x {x}: {}", stderr(&o));
        }
    }
    // Wall time across resumes adds up past f64: refused, naming the line.
    let run = run_with_metrics(
        dir.path(),
        "time",
        &config,
        &[
            r#"{"step":1,"loss":2.0,"elapsed_s":1.7e308}"#,
            r#"{"step":2,"loss":2.0,"elapsed_s":1.0}"#,
            r#"{"step":3,"loss":2.0,"elapsed_s":1.7e308}"#,
        ],
    );
    let mut c = resmem();
    c.args(["plot", "--x", "time", "--y", "loss", "--out"])
        .arg(dir.path().join("time.svg"))
        .arg(&run);
    let o = within(c, 20);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("line 3 of") && err.contains("metrics.jsonl"), "{err}");
    // JSON has no NaN: such a line is not a metrics row, and is named.
    let run = run_with_metrics(
        dir.path(),
        "nan",
        &config,
        &[r#"{"step":1,"loss":2.0}"#, r#"{"step":2,"loss":NaN}"#],
    );
    let mut c = resmem();
    c.args(["plot", "--x", "step", "--y", "loss", "--out"])
        .arg(dir.path().join("nan.svg"))
        .arg(&run);
    let o = within(c, 20);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("skipping line 2 of"), "{}", stderr(&o));
}

/// (step, loss, val_loss) of every metrics row, as the bits of the f64 JSON gives.
fn losses(run: &Path) -> Vec<(u64, Option<u64>, Option<u64>)> {
    let text = std::fs::read_to_string(run.join("metrics.jsonl")).unwrap();
    text.lines()
        .map(|l| {
            let r: serde_json::Value = serde_json::from_str(l).unwrap();
            let bits = |k: &str| r[k].as_f64().map(f64::to_bits);
            (r["step"].as_u64().unwrap(), bits("loss"), bits("val_loss"))
        })
        .collect()
}

/// `run` as a crash after its first checkpoint leaves it: config, backend record, metrics, and
/// that checkpoint only.
fn cut_after_first_checkpoint(run: &Path, cut: &Path, with_backend_record: bool) {
    std::fs::create_dir_all(cut.join("checkpoints")).unwrap();
    let mut files = vec!["config.toml", "metrics.jsonl"];
    if with_backend_record {
        files.push("backend.json");
    }
    for f in files {
        std::fs::copy(run.join(f), cut.join(f)).unwrap();
    }
    let mut checkpoints: Vec<_> = std::fs::read_dir(run.join("checkpoints"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    checkpoints.sort();
    let first = &checkpoints[0];
    std::fs::copy(first, cut.join("checkpoints").join(first.file_name().unwrap())).unwrap();
}

#[test]
fn a_resumed_run_continues_on_the_backend_it_trained_on() {
    let dir = tempfile::tempdir().unwrap();
    let whole = dir.path().join("whole");
    let o = resmem()
        .args([
            "train",
            "--arch",
            "rmt",
            "--backend",
            "cpu",
            "--steps",
            "12",
            "--log-every",
            "1",
        ])
        .args(["--eval-every", "4", "--checkpoint-every", "4", "--out"])
        .arg(&whole)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let record: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(whole.join("backend.json")).unwrap()).unwrap();
    assert_eq!(record["backend"], "cpu", "{record}");
    assert!(record["device"].as_str().unwrap().starts_with("cpu"), "{record}");

    // No --backend: the run continues on the CPU, bit for bit.
    let cut = dir.path().join("cut");
    cut_after_first_checkpoint(&whole, &cut, true);
    let o = resmem().args(["train", "--resume"]).arg(&cut).output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(!stderr(&o).contains("warning"), "{}", stderr(&o));
    assert_eq!(losses(&whole), losses(&cut));

    // A run from before the record: a warning names the backend it continues on.
    let old = dir.path().join("old");
    cut_after_first_checkpoint(&whole, &old, false);
    let o = resmem()
        .args(["train", "--backend", "cpu", "--resume"])
        .arg(&old)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("does not record the backend") && stderr(&o).contains("--backend cpu"),
        "{}",
        stderr(&o)
    );
    assert_eq!(losses(&whole), losses(&old));

    // Moving it takes --backend and says its numerics change (whether or not a GPU is here).
    let moved = dir.path().join("moved");
    cut_after_first_checkpoint(&whole, &moved, true);
    let o = resmem()
        .args(["train", "--backend", "gpu", "--resume"])
        .arg(&moved)
        .output()
        .unwrap();
    assert!(
        stderr(&o).contains("trained on --backend cpu") && stderr(&o).contains("numerics differ"),
        "{}",
        stderr(&o)
    );
}

/// resmem's output of a successful `args`, run in `cwd`.
fn ok_in(cwd: &Path, args: &[&str]) {
    let o = resmem().current_dir(cwd).args(args).output().unwrap();
    assert!(o.status.success(), "resmem {args:?}: {}", stderr(&o));
}

/// The names in `dir`, sorted.
fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .collect();
    names.sort();
    names
}

#[test]
fn files_are_written_whole_under_any_legal_name_and_nothing_is_replaced_or_left_behind() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let params = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/official-rmt/rmt_official_small_params.safetensors");
    ok_in(root, &["import", "official", params.to_str().unwrap(), "--out", "run"]);
    // A bare file name (its parent is ""), and the longest name Linux allows (255 bytes).
    let long = format!("{}.safetensors", "a".repeat(255 - ".safetensors".len()));
    for out in ["mine_params.safetensors", long.as_str()] {
        ok_in(root, &["export", "official", "--run", "run", "--out", out]);
        assert!(root.join(out).is_file(), "{out}");
    }
    assert_eq!(
        names(root),
        vec![long.clone(), "mine_params.safetensors".into(), "run".into()]
    );

    // data prepare into the text's own directory: the user's train.bin stays.
    let text = root.join("text");
    std::fs::create_dir(&text).unwrap();
    std::fs::write(text.join("a.txt"), "Some text to tokenize.\n".repeat(50)).unwrap();
    std::fs::write(text.join("train.bin"), "mine").unwrap();
    let o = resmem()
        .args(["data", "prepare", "--text"])
        .arg(&text)
        .arg("--out")
        .arg(&text)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("train.bin"), "{}", stderr(&o));
    assert_eq!(std::fs::read_to_string(text.join("train.bin")).unwrap(), "mine");
    assert_eq!(names(&text), ["a.txt", "train.bin"]);

    // A run that fails before it starts removes the directory it created, and only that.
    let fresh = root.join("fresh");
    let mine = root.join("mine");
    std::fs::create_dir(&mine).unwrap();
    for out in [&fresh, &mine] {
        let o = resmem()
            .args(["train", "--backend", "cpu", "--lr", "NaN", "--out"])
            .arg(out)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    }
    assert!(!fresh.exists(), "{:?}", names(&fresh));
    assert!(mine.is_dir());

    // A full disk (here a file size limit) mid-line: metrics.jsonl stays whole lines.
    let run = root.join("limited");
    let o = command("sh")
        .arg("-c")
        .arg("trap '' XFSZ; ulimit -f 8; exec \"$0\" \"$@\"")
        .arg(RESMEM)
        .args(["train", "--backend", "cpu", "--steps", "300", "--log-every", "1"])
        .args(["--checkpoint-every", "0", "--out"])
        .arg(&run)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("cannot append to"), "{}", stderr(&o));
    let text = std::fs::read_to_string(run.join("metrics.jsonl")).unwrap();
    assert!(text.ends_with('\n'), "a torn last line: {text}");
    for line in text.lines() {
        serde_json::from_str::<serde_json::Value>(line).unwrap();
    }
}

#[test]
fn negative_and_overflowing_numbers_name_their_flag() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let out = out.to_str().unwrap();
    let params = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/official-rmt/rmt_official_small_params.safetensors");
    let params = params.to_str().unwrap();
    let nan = dir.path().join("nan.toml");
    std::fs::write(&nan, "[train]\nlr = nan\n").unwrap();
    let nan = nan.to_str().unwrap();
    let inf = dir.path().join("inf.toml");
    std::fs::write(&inf, "[model]\ninit_std = -inf\n").unwrap();
    let inf = inf.to_str().unwrap();
    // A config of 3 GB (sparse): refused by its size, where it was read whole (20 GB, exit 134).
    let big = dir.path().join("big.toml");
    std::fs::File::create(&big).unwrap().set_len(3 << 30).unwrap();
    let big = big.to_str().unwrap();
    // Finite in TOML's f64, infinite as the setting's f32 (issue 46: "invalid type: null").
    let huge = dir.path().join("huge.toml");
    std::fs::write(&huge, "[train]\nlr = 1e39\n").unwrap();
    let huge = huge.to_str().unwrap();
    let cases: &[(&[&str], &str)] = &[
        (&["train", "--backend", "cpu", "--lr", "-1", "--out", out], "lr = -1"),
        // Found by tests/fuzz_cli.rs: --seq-len + 1 overflowed (a panic).
        (
            &[
                "import",
                "official",
                params,
                "--seq-len",
                "18446744073709551615",
                "--out",
                out,
            ],
            "--seq-len 18446744073709551615 does not match",
        ),
        // A device never ends: it was read until memory ran out.
        (
            &["import", "official", "/dev/full", "--out", out],
            "cannot read /dev/full: it is a device",
        ),
        (
            &["train", "--backend", "cpu", "--config", "/dev/zero", "--out", out],
            "/dev/zero: it is a device",
        ),
        (
            &["data", "prepare", "--text", "/dev/full", "--out", out],
            "no text files found in `/dev/full`",
        ),
        // Named its setting only as "a sequence length".
        (
            &["train", "--backend", "cpu", "--seq-len", "1", "--out", out],
            "seq_len",
        ),
        (
            &["train", "--backend", "cpu", "--weight-decay", "-0.5", "--out", out],
            "weight_decay = -0.5",
        ),
        (
            &["train", "--backend", "cpu", "--grad-clip", "-1", "--out", out],
            "max_grad_norm = -1",
        ),
        (
            &["train", "--backend", "cpu", "--warmup-frac", "-0.1", "--out", out],
            "warmup_frac",
        ),
        (&["sample", "--run", out, "--temperature", "-1"], "--temperature"),
        // Was "cannot write the config: invalid type: null … column 280".
        (
            &["train", "--backend", "cpu", "--config", nan, "--out", out],
            "train.lr = NaN: it must be a finite number",
        ),
        (
            &["train", "--backend", "cpu", "--config", inf, "--out", out],
            "model.init_std = -inf: it must be a finite number",
        ),
        (
            &["train", "--backend", "cpu", "--config", big, "--out", out],
            "it is larger than 1024 KiB",
        ),
        (&["sweep", big, "--out", out], "it is larger than 1024 KiB"),
        (
            &["train", "--backend", "cpu", "--config", huge, "--out", out],
            "train.lr = 1e39: it must be a finite number of at most 3.4e38",
        ),
        // Blamed vocab, the largest setting, for the overflow 2^tau caused.
        (
            &["count", "--arch", "hybrid", "--tau", "64"],
            "tau = 64 with expansion_bits = 2 makes tables of 2^66 rows for ML2; use tau of at most 14",
        ),
        (
            &["bench", "--backend", "cpu", "--warmup", "18446744073709551615"],
            "--warmup",
        ),
    ];
    for (args, expect) in cases {
        let o = resmem().args(*args).output().unwrap();
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "resmem {args:?}: {err}");
        assert!(
            err.contains(expect) && !err.contains("panicked"),
            "resmem {args:?}: {err}"
        );
    }
    assert!(!Path::new(out).exists(), "a refused run leaves no directory");
}

/// The checkpoints of `run`, oldest first.
fn checkpoints(run: &Path) -> Vec<PathBuf> {
    let mut all: Vec<PathBuf> = std::fs::read_dir(run.join("checkpoints"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    all.sort();
    all
}

#[test]
fn an_unreadable_newest_checkpoint_is_named_with_the_one_used_instead() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    let o = resmem()
        .args(["train", "--arch", "rmt", "--backend", "cpu", "--steps", "4"])
        .args(["--checkpoint-every", "2", "--out"])
        .arg(&run)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let all = checkpoints(&run);
    let (older, newest) = (&all[all.len() - 2], &all[all.len() - 1]);
    std::fs::write(newest, "not a checkpoint").unwrap();
    let (older, newest) = (older.to_str().unwrap(), newest.to_str().unwrap());
    let run = run.to_str().unwrap();
    // Each used the older checkpoint and said nothing.
    let cases: &[(&[&str], &[&str])] = &[
        (
            &["eval", "--backend", "cpu", "--run", run],
            &["warning", &format!("cannot load {newest}"), &format!("using {older}")],
        ),
        (
            &["sample", "--backend", "cpu", "--run", run, "--tokens", "4"],
            &["warning", &format!("cannot load {newest}"), &format!("using {older}")],
        ),
    ];
    for (args, expect) in cases {
        let o = within(
            {
                let mut c = resmem();
                c.args(*args);
                c
            },
            60,
        );
        let err = stderr(&o);
        assert!(o.status.success(), "resmem {args:?}: {err}");
        for e in *expect {
            assert!(err.contains(e), "resmem {args:?} should say {e:?}: {err}");
        }
    }
}

/// A transformer run of 4 steps with checkpoints at 2 and 4, in `dir`/`name`.
fn checkpointed_run(dir: &Path, name: &str) -> PathBuf {
    let run = dir.join(name);
    let o = resmem()
        .args([
            "train",
            "--backend",
            "cpu",
            "--steps",
            "4",
            "--checkpoint-every",
            "2",
            "--out",
        ])
        .arg(&run)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    run
}

/// Rewrites the newest checkpoint of the transformer run `run` as one of step `step`, with its
/// config and a valid checksum, under that step's name.
fn checkpoint_at_step(run: &Path, step: u64) -> PathBuf {
    let newest = checkpoints(run).pop().unwrap();
    let bytes = std::fs::read(&newest).unwrap();
    let config = models::checkpoint::config_of(&bytes).unwrap();
    let cfg = models::RunConfig::from_toml(&config).unwrap();
    let models::ModelConfig::Transformer(model) = &cfg.model else {
        panic!("not a transformer: {config}")
    };
    let layout = models::transformer::layout(model);
    let mut state = models::checkpoint::state_from_bytes(&layout, &bytes).unwrap();
    state.step = step;
    let path = run.join("checkpoints").join(format!("step-{step:09}.safetensors"));
    models::checkpoint::write_state(&layout, &state, &config, &path).unwrap();
    path
}

#[test]
fn resume_explains_a_checkpoint_past_the_runs_steps() {
    let dir = tempfile::tempdir().unwrap();
    let run = checkpointed_run(dir.path(), "run");
    let past = checkpoint_at_step(&run, 9);
    let past = past.to_str().unwrap();
    let run = run.to_str().unwrap();
    // It was declared done, at once, with the checkpoint's weights as the run's model.
    let cases: &[(&[&str], &[&str])] = &[(
        &["train", "--resume", run],
        &[past, "at step 9", "steps = 4", "move it out", "--checkpoint"],
    )];
    for (args, expect) in cases {
        let o = resmem().args(*args).output().unwrap();
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "resmem {args:?}: {err}");
        for e in *expect {
            assert!(err.contains(e), "resmem {args:?} should say {e:?}: {err}");
        }
    }
}

#[test]
fn a_run_without_its_config_toml_has_one_way_out() {
    let dir = tempfile::tempdir().unwrap();
    let kept = checkpointed_run(dir.path(), "kept");
    let config = std::fs::read_to_string(kept.join("config.toml")).unwrap();
    std::fs::remove_file(kept.join("config.toml")).unwrap();
    let bare = checkpointed_run(dir.path(), "bare");
    std::fs::remove_file(bare.join("config.toml")).unwrap();
    std::fs::remove_dir_all(bare.join("checkpoints")).unwrap();
    let (kept_s, bare_s) = (kept.to_str().unwrap(), bare.to_str().unwrap());
    // --out sent the user to --resume, and --resume back to --out. (args, succeeds, says)
    let cases: &[(&[&str], bool, &[&str])] = &[
        (&["train", "--out", kept_s], false, &["train --resume"]),
        (
            &["train", "--resume", kept_s],
            true,
            &["no config.toml; rebuilt it from", "step-000000004.safetensors"],
        ),
        (&["train", "--out", bare_s], false, &["choose another --out"]),
        (&["train", "--resume", bare_s], false, &["another directory"]),
    ];
    for (args, ok, expect) in cases {
        let o = resmem().args(*args).output().unwrap();
        let err = stderr(&o);
        assert_eq!(o.status.success(), *ok, "resmem {args:?}: {err}");
        for e in *expect {
            assert!(err.contains(e), "resmem {args:?} should say {e:?}: {err}");
        }
    }
    assert_eq!(std::fs::read_to_string(kept.join("config.toml")).unwrap(), config);
}

#[test]
fn a_partial_config_that_switches_arch_is_whole() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path.to_str().unwrap().to_string()
    };
    let rmt = write("rmt.toml", "[model]\narch = \"rmt\"\n");
    let hybrid = write(
        "hybrid.toml",
        "preset = \"tiny-transformer\"\n[model]\narch = \"hybrid\"\ntau = 3\n",
    );
    let tau = write("tau.toml", "[model]\narch = \"rmt\"\ntau = 3\n");
    let out = |name: &str| dir.path().join(name).to_str().unwrap().to_string();
    let (a, b, c, d) = (out("a"), out("b"), out("c"), out("d"));
    // Each failed with "missing field `vocab`". (args, succeeds, says)
    let cases: &[(&[&str], bool, &str)] = &[
        (
            &[
                "train",
                "--backend",
                "cpu",
                "--preset",
                "tiny-transformer",
                "--config",
                &rmt,
            ],
            true,
            "rmt with",
        ),
        (&["train", "--backend", "cpu", "--config", &hybrid], true, "hybrid with"),
        (
            &[
                "train",
                "--backend",
                "cpu",
                "--preset",
                "tiny-transformer",
                "--config",
                &tau,
            ],
            false,
            "unknown setting `model.tau`",
        ),
        (
            &["train", "--backend", "cpu", "--arch", "transformer", "--config", &rmt],
            false,
            "arch = \"rmt\" but --arch is transformer",
        ),
    ];
    for ((args, ok, expect), out) in cases.iter().zip([a, b, c, d]) {
        let o = resmem()
            .args(*args)
            .args(["--steps", "1", "--out", &out])
            .output()
            .unwrap();
        let text = format!("{}{}", String::from_utf8_lossy(&o.stdout), stderr(&o));
        assert_eq!(o.status.success(), *ok, "resmem {args:?}: {text}");
        assert!(text.contains(expect), "resmem {args:?} should say {expect:?}: {text}");
    }
}

#[test]
fn a_checkpoint_that_cannot_be_pruned_is_warned_about_and_the_run_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let whole = dir.path().join("whole");
    let o = resmem()
        .args([
            "train",
            "--backend",
            "cpu",
            "--steps",
            "6",
            "--checkpoint-every",
            "2",
            "--out",
        ])
        .arg(&whole)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let cut = dir.path().join("cut");
    cut_after_first_checkpoint(&whole, &cut, true);
    // An old "checkpoint" remove_file cannot remove: a directory under its name.
    let stuck = cut.join("checkpoints/step-000000001.safetensors");
    std::fs::create_dir_all(stuck.join("inside")).unwrap();
    let stuck = stuck.to_str().unwrap();
    // It stopped the run.
    let cases: &[(&[&str], &[&str])] = &[(
        &["train", "--resume", cut.to_str().unwrap()],
        &["warning: cannot remove the old checkpoint", stuck, "training goes on"],
    )];
    for (args, expect) in cases {
        let o = resmem().args(*args).output().unwrap();
        let err = stderr(&o);
        assert!(o.status.success(), "resmem {args:?}: {err}");
        for e in *expect {
            assert!(err.contains(e), "resmem {args:?} should say {e:?}: {err}");
        }
    }
    assert_eq!(losses(&whole), losses(&cut));
    assert!(cut.join("checkpoints/step-000000006.safetensors").is_file());
}

#[test]
fn the_gpu_backend_is_quiet_without_a_runtime_dir_and_names_an_emulated_gpu() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("gpu");
    let out = out.to_str().unwrap();
    // Printed `error: XDG_RUNTIME_DIR …` on success, and ran on llvmpipe without a word.
    let cases: &[&[&str]] = &[&["train", "--backend", "gpu", "--steps", "1", "--out", out]];
    for args in cases {
        let o = Command::new(RESMEM)
            .env_remove("XDG_RUNTIME_DIR")
            .args(*args)
            .output()
            .unwrap();
        let (text, err) = (String::from_utf8_lossy(&o.stdout), stderr(&o));
        // Like every GPU test, this needs an adapter (lavapipe on CI) and fails without one.
        assert!(
            o.status.success(),
            "resmem {args:?} (this test needs a GPU adapter; on Debian install mesa-vulkan-drivers): {err}"
        );
        assert!(!err.contains("XDG_RUNTIME_DIR"), "resmem {args:?}: {err}");
        let emulated = ["llvmpipe", "lavapipe", "SwiftShader"].iter().any(|n| text.contains(n));
        assert_eq!(
            err.contains("a CPU emulating a GPU; --backend cpu is faster here"),
            emulated,
            "resmem {args:?}: {text}{err}"
        );
    }
}

/// Weights that are finite but overflow a forward: `eval` says so and fails, where it printed
/// `val_loss NaN` and exited 0.
#[test]
fn eval_refuses_a_loss_that_is_not_finite() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    ok_in(
        dir.path(),
        &[
            "train",
            "--preset",
            "tiny-transformer",
            "--backend",
            "cpu",
            "--steps",
            "2",
            "--out",
            run.to_str().unwrap(),
        ],
    );
    // W_U times 1e37: finite, as a checkpoint must be, and far past f32 in the logits.
    let cfg = models::RunConfig::from_toml(&std::fs::read_to_string(run.join("config.toml")).unwrap()).unwrap();
    let models::ModelConfig::Transformer(t) = &cfg.model else {
        unreachable!()
    };
    let layout = models::transformer::layout(t);
    let bytes = std::fs::read(run.join("model.safetensors")).unwrap();
    let mut values = models::checkpoint::from_bytes(&layout, &bytes).unwrap();
    let w_u = layout.specs.iter().find(|s| s.name == "w_u").unwrap();
    values[w_u.offset..w_u.offset + w_u.len()]
        .iter_mut()
        .for_each(|x| *x = (*x + 1.0) * 1e37);
    let out = dir.path().join("huge.safetensors");
    std::fs::write(&out, models::checkpoint::to_bytes(&layout, &values).unwrap()).unwrap();
    let o = resmem()
        .args(["eval", "--backend", "cpu", "--batches", "1", "--run"])
        .arg(&run)
        .arg("--checkpoint")
        .arg(&out)
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(1),
        "{} {}",
        stderr(&o),
        String::from_utf8_lossy(&o.stdout)
    );
    assert!(
        stderr(&o).contains("overflows") && !stderr(&o).contains("panicked"),
        "{}",
        stderr(&o)
    );
}
