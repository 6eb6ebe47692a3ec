//! `resmem import official` and `resmem export official` as a user runs them: the fixture from
//! the official RMT code imports into a run whose `resmem eval` gives the official loss, exports
//! back to the same bytes, and bad inputs are messages.

mod common;

use common::{fails, ok, s};
use std::path::{Path, PathBuf};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/official-rmt")
        .join(name)
}

/// Every tensor's bytes of a safetensors file, by name.
fn tensors(path: &Path) -> Vec<(String, Vec<u8>)> {
    let bytes = std::fs::read(path).unwrap();
    let file = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let mut all: Vec<(String, Vec<u8>)> = file
        .tensors()
        .into_iter()
        .map(|(n, t)| (n, t.data().to_vec()))
        .collect();
    all.sort();
    all
}

#[test]
fn the_official_fixture_imports_evaluates_and_exports_back() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("o");
    let params = fixture("rmt_official_small_params.safetensors");
    ok(&["import", "official", s(&params), "--out", s(&run)]);
    for backend in ["cpu", "gpu"] {
        let out = ok(&["eval", "--run", s(&run), "--backend", backend, "--json"]);
        let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
        // The fixture's official ce 6.35176944732666 and total 6.355278968811035.
        let (ce, total) = (v["val_loss"].as_f64().unwrap(), v["val_total"].as_f64().unwrap());
        assert!((ce - 6.35176944732666).abs() < 1e-5, "{backend}: ce {ce}");
        assert!((total - 6.355278968811035).abs() < 1e-5, "{backend}: total {total}");
    }
    let out = tmp.path().join("back.safetensors");
    ok(&["export", "official", "--run", s(&run), "--out", s(&out)]);
    let (a, b) = (tensors(&params), tensors(&out));
    assert_eq!(a.len(), 13);
    assert!(a == b, "import then export changed some tensor's bytes");
    // It samples, and it refuses to overwrite.
    ok(&[
        "sample",
        "--run",
        s(&run),
        "--prompt",
        "ab",
        "--tokens",
        "4",
        "--backend",
        "cpu",
    ]);
    assert!(fails(&["export", "official", "--run", s(&run), "--out", s(&out)]).contains("exists"));
    assert!(fails(&["import", "official", s(&params), "--out", s(&run)]).contains("already holds a run"));
}

#[test]
fn bad_imports_and_exports_say_why() {
    let tmp = tempfile::tempdir().unwrap();
    let out = |name: &str| tmp.path().join(name);
    // Not the parameters: the outputs file holds logits and gradients.
    let err = fails(&[
        "import",
        "official",
        s(&fixture("rmt_official_small_outputs.safetensors")),
        "--out",
        s(&out("a")),
    ]);
    assert!(err.contains("tensors the official RMT does not"), "{err}");
    let junk = out("junk.safetensors");
    std::fs::write(&junk, b"definitely not safetensors").unwrap();
    assert!(fails(&["import", "official", s(&junk), "--out", s(&out("b"))]).contains("not a safetensors file"));
    // Parameters without windows to evaluate on.
    let lone = out("weights.safetensors");
    std::fs::copy(fixture("rmt_official_small_params.safetensors"), &lone).unwrap();
    assert!(fails(&["import", "official", s(&lone), "--out", s(&out("c"))]).contains("--tokens"));
    // Windows of no tokens (rows of width 0, a division by zero once) and of one (no next token).
    for width in [0usize, 1] {
        let rows = out(&format!("rows{width}.safetensors"));
        let ids = vec![0u8; 3 * width * 4];
        let view = safetensors::tensor::TensorView::new(safetensors::Dtype::U32, vec![3, width], &ids).unwrap();
        std::fs::write(&rows, safetensors::serialize([("tokens", view)], None).unwrap()).unwrap();
        let err = fails(&[
            "import",
            "official",
            s(&lone),
            "--tokens",
            s(&rows),
            "--out",
            s(&out(&format!("w{width}"))),
        ]);
        assert!(
            err.contains("rows of") && err.contains("T + 1") && !err.contains("panicked"),
            "{err}"
        );
    }
    // Only an RMT with the official conventions exports.
    let tiny = out("tiny");
    ok(&[
        "train",
        "--arch",
        "rmt",
        "--steps",
        "1",
        "--backend",
        "cpu",
        "--out",
        s(&tiny),
    ]);
    let err = fails(&[
        "export",
        "official",
        "--run",
        s(&tiny),
        "--out",
        s(&out("t.safetensors")),
    ]);
    assert!(err.contains("position = \"alibi\""), "{err}");
    let mf = out("mf");
    ok(&[
        "train",
        "--arch",
        "memoryformer",
        "--steps",
        "1",
        "--backend",
        "cpu",
        "--out",
        s(&mf),
    ]);
    assert!(fails(&["export", "official", "--run", s(&mf), "--out", s(&out("m.safetensors"))]).contains("only an RMT"));
}

/// --preset official trains with every convention of SPEC §2a, documents masked apart; what it
/// trains exports, imports again, and evaluates to the same loss on the same windows.
#[test]
fn the_official_preset_trains_exports_and_imports() {
    let tmp = tempfile::tempdir().unwrap();
    let corpus = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../data/shakespeare-gpt2");
    assert!(
        corpus.join("meta.json").is_file(),
        "run `cargo xtask corpus` first (cargo xtask test does)"
    );
    let run = tmp.path().join("run");
    ok(&[
        "train",
        "--preset",
        "official",
        "--data",
        s(&corpus),
        "--steps",
        "3",
        "--batch",
        "2",
        "--seq-len",
        "16",
        "--backend",
        "cpu",
        "--out",
        s(&run),
    ]);
    let config = std::fs::read_to_string(run.join("config.toml")).unwrap();
    for line in [
        "doc_mask = true",
        "position = \"alibi\"",
        "norm = \"rmsnorm\"",
        "attn_layer_scale = true",
        "z_loss = 0.0001",
    ] {
        assert!(config.contains(line), "{line} missing from\n{config}");
    }
    let metrics = std::fs::read_to_string(run.join("metrics.jsonl")).unwrap();
    assert!(
        metrics.contains("\"total\""),
        "training does not report the total with the z-loss: {metrics}"
    );
    let exported = tmp.path().join("p.safetensors");
    ok(&["export", "official", "--run", s(&run), "--out", s(&exported)]);
    let back = tmp.path().join("back");
    ok(&[
        "import",
        "official",
        s(&exported),
        "--out",
        s(&back),
        "--data",
        s(&corpus),
        "--seq-len",
        "16",
        "--context",
        "128",
    ]);
    let again = tmp.path().join("again.safetensors");
    ok(&["export", "official", "--run", s(&back), "--out", s(&again)]);
    assert!(
        tensors(&exported) == tensors(&again),
        "export → import → export changed bytes"
    );
    let out = ok(&[
        "eval",
        "--run",
        s(&back),
        "--backend",
        "cpu",
        "--batches",
        "2",
        "--json",
    ]);
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    let (ce, total) = (v["val_loss"].as_f64().unwrap(), v["val_total"].as_f64().unwrap());
    assert!(
        ce.is_finite() && total > ce,
        "the imported run evaluates to ce {ce}, total {total}"
    );
}
