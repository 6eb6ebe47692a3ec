//! `resmem data prepare`: the files it writes, its summary, and what it refuses.

use std::process::Command;

fn prepare(args: &[&std::ffi::OsStr]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_resmem"))
        .args(["data", "prepare"])
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn prepare_writes_a_corpus_and_refuses_to_overwrite_it() {
    let dir = tempfile::tempdir().unwrap();
    let texts = dir.path().join("texts");
    std::fs::create_dir_all(&texts).unwrap();
    for name in ["a.txt", "b.txt"] {
        let body: String = (0..200)
            .map(|i| format!("{name} line {i}: what's in a name?\n"))
            .collect();
        std::fs::write(texts.join(name), body).unwrap();
    }
    let out = dir.path().join("corpus");
    let args = [
        "--text".as_ref(),
        texts.as_os_str(),
        "--tokenizer".as_ref(),
        "gpt2".as_ref(),
        "--out".as_ref(),
        out.as_os_str(),
    ];
    let first = prepare(&args);
    let stdout = String::from_utf8_lossy(&first.stdout);
    assert!(first.status.success(), "{}", String::from_utf8_lossy(&first.stderr));
    assert!(
        stdout.contains("2 documents") && stdout.contains("unigram entropy"),
        "{stdout}"
    );
    let meta: serde_json::Value = serde_json::from_slice(&std::fs::read(out.join("meta.json")).unwrap()).unwrap();
    assert_eq!(meta["tokenizer"], "gpt2");
    assert_eq!(meta["vocab"], 50257);
    let train = std::fs::metadata(out.join("train.bin")).unwrap().len();
    assert_eq!(train, 2 * meta["train_tokens"].as_u64().unwrap());

    let again = prepare(&args);
    let stderr = String::from_utf8_lossy(&again.stderr);
    assert!(!again.status.success());
    assert!(
        stderr.contains("already holds a prepared corpus") && stderr.contains("--out"),
        "{stderr}"
    );

    let bad = prepare(&[
        "--text".as_ref(),
        texts.as_os_str(),
        "--tokenizer".as_ref(),
        "bpe".as_ref(),
        "--out".as_ref(),
        dir.path().join("x").as_os_str(),
    ]);
    let stderr = String::from_utf8_lossy(&bad.stderr);
    assert!(!bad.status.success() && stderr.contains("bytes and gpt2"), "{stderr}");
}
