//! A corpus that shrinks under a running run: a clear error that names the file, the run's
//! last state kept as a checkpoint that loads once the file is restored (it was a SIGBUS).

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A copy of Shakespeare's bytes corpus in `dir`, to change under a run.
fn copied_corpus(dir: &Path) -> std::path::PathBuf {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../data/shakespeare-bytes");
    assert!(source.join("meta.json").exists(), "run `cargo xtask corpus` first");
    let data = dir.join("corpus");
    std::fs::create_dir(&data).unwrap();
    for f in ["meta.json", "train.bin", "val.bin"] {
        std::fs::copy(source.join(f), data.join(f)).unwrap();
    }
    data
}

#[test]
fn a_corpus_that_shrinks_under_a_run_stops_it_cleanly() {
    let tmp = tempfile::tempdir().unwrap();
    let data = copied_corpus(tmp.path());
    let run = tmp.path().join("run");
    let child = Command::new(env!("CARGO_BIN_EXE_resmem"))
        .args([
            "train",
            "--preset",
            "tiny-rmt",
            "--backend",
            "cpu",
            "--steps",
            "100000",
            "--log-every",
            "1",
        ])
        .arg("--data")
        .arg(&data)
        .arg("--out")
        .arg(&run)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Once it has trained a few steps, cut train.bin to a few bytes in place.
    let deadline = Instant::now() + Duration::from_secs(120);
    while std::fs::read_to_string(run.join("metrics.jsonl")).map_or(0, |m| m.lines().count()) < 3 {
        assert!(Instant::now() < deadline, "the run did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    let original = std::fs::read(data.join("train.bin")).unwrap();
    std::fs::OpenOptions::new()
        .write(true)
        .open(data.join("train.bin"))
        .unwrap()
        .set_len(64)
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("changed while in use") && err.contains("train.bin"),
        "{err}"
    );
    assert!(err.contains("the checkpoint is") && err.contains("--resume"), "{err}");
    // Restored, the checkpoint it kept is whole and evaluates.
    std::fs::write(data.join("train.bin"), original).unwrap();
    let eval = Command::new(env!("CARGO_BIN_EXE_resmem"))
        .args(["eval", "--backend", "cpu", "--batches", "1", "--run"])
        .arg(&run)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&eval.stdout);
    assert!(eval.status.success(), "{}", String::from_utf8_lossy(&eval.stderr));
    assert!(said.contains("val_loss"), "{said}");
}

/// A bytes corpus whose meta.json says GPT-2: every byte is a valid GPT-2 token, so only the
/// tokens' range gives it away; it is refused, naming the file and what to do.
#[test]
fn a_bytes_corpus_labelled_gpt2_is_refused() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let source = root.join("data/shakespeare-bytes");
    assert!(source.join("meta.json").exists(), "run `cargo xtask corpus` first");
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("corpus");
    std::fs::create_dir(&data).unwrap();
    for f in ["train.bin", "val.bin"] {
        std::fs::copy(source.join(f), data.join(f)).unwrap();
    }
    let meta = std::fs::read_to_string(source.join("meta.json")).unwrap();
    let meta = meta
        .replacen("\"tokenizer\": \"bytes\"", "\"tokenizer\": \"gpt2\"", 1)
        .replacen("\"vocab\": 256,", "\"vocab\": 50257,", 1);
    std::fs::write(data.join("meta.json"), meta).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_resmem"))
        .args(["train", "--preset", "tiny-rmt", "--backend", "cpu", "--steps", "1"])
        .arg("--data")
        .arg(&data)
        .arg("--out")
        .arg(tmp.path().join("run"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("all below 256, as bytes are") && err.contains("train.bin") && err.contains("--tokenizer"),
        "{err}"
    );
}

/// A corpus prepared again between a stop and a resume: the resume is refused, naming the file
/// that changed and the flag that trains on anyway; with the flag it trains on, and the run's
/// corpus.json then records the new corpus.
#[test]
fn a_corpus_changed_between_a_stop_and_a_resume_is_refused_by_name() {
    let tmp = tempfile::tempdir().unwrap();
    let data = copied_corpus(tmp.path());
    let run = tmp.path().join("run");
    let train = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_resmem"))
            .args(["train", "--backend", "cpu"])
            .args(args)
            .output()
            .unwrap()
    };
    let (run_s, data_s) = (run.to_str().unwrap(), data.to_str().unwrap());
    let first = train(&["--preset", "tiny-rmt", "--steps", "4", "--data", data_s, "--out", run_s]);
    assert!(first.status.success(), "{}", String::from_utf8_lossy(&first.stderr));
    let recorded = std::fs::read_to_string(run.join("corpus.json")).unwrap();
    assert!(
        recorded.contains("train.bin") && recorded.contains("crc32c"),
        "{recorded}"
    );
    // Unchanged: the resume extends the run.
    let same = train(&["--resume", run_s, "--steps", "6"]);
    assert!(same.status.success(), "{}", String::from_utf8_lossy(&same.stderr));
    // Other training text of the same length (meta.json still agrees): refused, by name.
    let mut text = std::fs::read(data.join("train.bin")).unwrap();
    text.rotate_left(4096);
    std::fs::write(data.join("train.bin"), text).unwrap();
    let refused = train(&["--resume", run_s, "--steps", "8"]);
    let err = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{err}");
    assert!(
        err.contains("changed since this run started") && err.contains("train.bin") && err.contains("--corpus-changed"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
    let meant = train(&["--resume", run_s, "--steps", "8", "--corpus-changed"]);
    assert!(meant.status.success(), "{}", String::from_utf8_lossy(&meant.stderr));
    assert_ne!(std::fs::read_to_string(run.join("corpus.json")).unwrap(), recorded);
    let again = train(&["--resume", run_s, "--steps", "10"]);
    assert!(again.status.success(), "{}", String::from_utf8_lossy(&again.stderr));
}
