//! The real-corpus workflow on Shakespeare with GPT-2's BPE: the small RMT learns to a validation
//! loss well under the corpus's unigram entropy, and `eval` and `sample` work on the run. Needs
//! `cargo xtask corpus` (which `cargo xtask test` runs); fails without it. That every small preset
//! learns it too is bench/shakespeare-presets.sh's check: 15 minutes, too long for the tests.

use std::path::{Path, PathBuf};
use std::process::Command;

fn corpus() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../data/shakespeare-gpt2");
    assert!(
        dir.join("meta.json").exists(),
        "{} is missing: run `cargo xtask corpus` first",
        dir.display()
    );
    dir
}

/// The entropy of the train split's token frequencies, in nats: the best loss without context.
fn unigram_entropy(dir: &Path) -> f64 {
    data::Corpus::open(dir).unwrap().unigram_entropy().unwrap()
}

fn resmem() -> Command {
    Command::new(env!("CARGO_BIN_EXE_resmem"))
}

#[test]
fn the_small_rmt_learns_shakespeare_well_under_the_unigram_entropy() {
    let data = corpus();
    let unigram = unigram_entropy(&data);
    // Measured with `cargo xtask corpus`: 6.43 nats over 50,257 tokens (19,194 of them used).
    assert!((6.3..6.6).contains(&unigram), "{unigram}");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("small-rmt");
    // Measured on 2 cores (val loss / unigram entropy): 5.40 (0.84) after 150 steps. The other
    // small presets' figures are in bench/RESULTS.md, from bench/shakespeare-presets.sh.
    let o = resmem()
        .args([
            "train",
            "--backend",
            "cpu",
            "--preset",
            "small-rmt",
            "--steps",
            "150",
            "--eval-every",
            "150",
        ])
        .arg("--data")
        .arg(&data)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = resmem()
        .args(["eval", "--backend", "cpu", "--json", "--run"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let eval: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let val = eval["val_loss"].as_f64().unwrap();
    eprintln!("small-rmt: val_loss {val:.4} after 150 steps; unigram entropy {unigram:.4}");
    assert!(
        val < 0.92 * unigram,
        "val_loss {val} is not well under the unigram entropy {unigram}"
    );
    let o = resmem()
        .args([
            "sample",
            "--backend",
            "cpu",
            "--prompt",
            "ROMEO:",
            "--tokens",
            "30",
            "--run",
        ])
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8(o.stdout).unwrap();
    assert!(text.starts_with("ROMEO:") && text.len() > "ROMEO:".len() + 30, "{text}");
}
