//! `resmem train` end to end: the issue's own command, its files and its errors.

use std::process::Command;

fn resmem() -> Command {
    Command::new(env!("CARGO_BIN_EXE_resmem"))
}

/// Trains `arch` on copy for `steps` CPU steps into a fresh directory; checks the metrics and
/// the saved config, and returns the directory and the logged rows.
fn train_copy(arch: &str, steps: &str) -> (tempfile::TempDir, std::path::PathBuf, Vec<serde_json::Value>) {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("t");
    let status = resmem()
        .args([
            "train",
            "--arch",
            arch,
            "--task",
            "copy",
            "--backend",
            "cpu",
            "--steps",
            steps,
            "--out",
        ])
        .arg(&out)
        .status()
        .unwrap();
    assert!(status.success());
    let text = std::fs::read_to_string(out.join("metrics.jsonl")).unwrap();
    let rows: Vec<serde_json::Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    for key in ["step", "loss", "lr", "tokens_per_s"] {
        assert!(rows.iter().all(|r| r.get(key).is_some()), "every row needs {key}");
    }
    let config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("config.json")).unwrap()).unwrap();
    assert_eq!(config["model"]["arch"], arch);
    assert!(out.join("model.safetensors").exists(), "every run saves its model");
    (dir, out, rows)
}

fn first_last(rows: &[serde_json::Value]) -> (f64, f64) {
    let loss = |r: &serde_json::Value| r["loss"].as_f64().unwrap();
    (loss(&rows[0]), loss(rows.last().unwrap()))
}

#[test]
fn train_rmt_on_cpu_learns_copy() {
    let (_dir, _, rows) = train_copy("rmt", "300");
    // Measured: 5.545 → 0.0002, off the unigram plateau (ln 16 = 50% of the first loss) by step
    // 150. The issue asks for well under 60%; 10% needs the copy skill itself.
    let (first, last) = first_last(&rows);
    assert!(last < 0.1 * first, "loss {first} → {last}");
}

#[test]
fn train_copy_on_cpu_writes_metrics_whose_loss_falls() {
    let (_dir, _, rows) = train_copy("transformer", "300");
    let (first, last) = first_last(&rows);
    // Measured: 5.545 → 0.003. The unigram plateau, reached without learning to copy, is
    // ln 16 = 2.77 = 50% of the first loss; 10% is far below it.
    assert!(last < 0.1 * first, "loss {first} → {last}");
}

#[test]
fn an_earlier_run_is_never_overwritten() {
    let dir = tempfile::tempdir().unwrap();
    let args = ["train", "--backend", "cpu", "--steps", "2", "--out"];
    assert!(resmem().args(args).arg(dir.path()).status().unwrap().success());
    let out = resmem().args(args).arg(dir.path()).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("already holds a run"));
}

#[test]
fn bad_arguments_say_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let out = resmem()
        .args(["train", "--task", "sort", "--out"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("copy, reverse and mqar"));
    let out = resmem()
        .args(["train", "--backend", "cpu", "--task", "mqar", "--seq-len", "5", "--out"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("at least 8"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // A model far beyond this machine's memory (1.2 TB of tables) is refused with a reason.
    let out = resmem()
        .args([
            "train",
            "--arch",
            "memoryformer",
            "--backend",
            "cpu",
            "--d-model",
            "4096",
            "--tau",
            "14",
            "--out",
        ])
        .arg(dir.path().join("big"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("more than this machine can allocate"),
        "{err}"
    );
    // τ past 14 makes ML2's tables 2^17 rows and more: a config error that says so.
    let out = resmem()
        .args([
            "train",
            "--arch",
            "memoryformer",
            "--backend",
            "cpu",
            "--tau",
            "15",
            "--out",
        ])
        .arg(dir.path().join("tau"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("tau of at most 14"), "{err}");
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
    assert!(report.status.success(), "{}", String::from_utf8_lossy(&report.stderr));
    let stats: Vec<serde_json::Value> = serde_json::from_slice(&report.stdout).unwrap();
    // The tiny preset: 2 blocks × (qkv, ml1, ml2) × K = 16 tables.
    assert_eq!(stats.len(), 2 * 3 * 16, "{stats:?}");
    for s in &stats {
        for key in ["layer", "table", "entropy", "dead_buckets", "counts"] {
            assert!(s.get(key).is_some(), "{key} missing from {s}");
        }
        let e = s["entropy"].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&e), "{s}");
    }
    // A run of another architecture is refused with a reason.
    let (_dir, rmt, _) = train_copy("rmt", "2");
    let refused = resmem()
        .args(["analyze", "buckets", "--backend", "cpu", "--run"])
        .arg(&rmt)
        .output()
        .unwrap();
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("MemoryFormer"));
}
