//! The real corpora that `cargo xtask corpus` prepares: counts, round trips and the unigram
//! entropies that learning tests compare losses with. Missing corpora fail, never skip.

use resmem_data::{Corpus, Tokenizer, TokenizerKind};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn open(kind: TokenizerKind) -> Corpus {
    let dir = root().join(format!("data/shakespeare-{kind}"));
    Corpus::open(&dir).unwrap_or_else(|e| panic!("{e}\nrun `cargo xtask corpus` first"))
}

/// Every document decodes back to its source file, and the source encodes to the same tokens.
fn check(kind: TokenizerKind) -> Corpus {
    let corpus = open(kind);
    let tok = Tokenizer::new(kind).unwrap();
    let meta = &corpus.meta;
    assert_eq!((meta.tokenizer, meta.vocab), (kind, tok.vocab()));
    for (split, file) in [(meta.train_tokens, &corpus.train), (meta.val_tokens, &corpus.val)] {
        let bytes = std::fs::metadata(file.path()).unwrap().len();
        assert_eq!(bytes, split * u64::from(meta.token_bytes), "{}", file.path().display());
        assert_eq!(file.len() as u64, split);
    }
    assert!(meta.sources.len() >= 40, "{} plays and poems", meta.sources.len());
    let eot = usize::from(tok.end_of_text().is_some());
    let (mut tr, mut va) = (0, 0);
    for s in &meta.sources {
        // xtask prepares from the workspace root, so relative paths start there.
        let path = root().join(&s.path);
        let text = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}; run `cargo xtask corpus` first", s.path));
        assert_eq!(
            format!("{:x}", Sha256::digest(&text)),
            s.sha256,
            "{} changed since it was prepared",
            s.path
        );
        let text = String::from_utf8(text).unwrap();
        let (nt, nv) = (s.train_tokens as usize, s.val_tokens as usize);
        let mut ids = corpus.train.window(tr, nt - eot).unwrap();
        ids.extend(corpus.val.window(va, nv - eot).unwrap());
        assert_eq!(tok.decode(&ids), text, "{} does not decode back", s.path);
        assert_eq!(tok.encode(&text), ids, "{} encodes differently whole", s.path);
        (tr, va) = (tr + nt, va + nv);
    }
    assert_eq!((tr, va), (corpus.train.len(), corpus.val.len()));
    corpus
}

#[test]
fn shakespeare_corpora_round_trip() {
    let bytes = check(TokenizerKind::Bytes);
    let gpt2 = check(TokenizerKind::Gpt2);
    let (hb, hg) = (bytes.unigram_entropy().unwrap(), gpt2.unigram_entropy().unwrap());
    for (name, c, h) in [("bytes", &bytes, hb), ("gpt2", &gpt2, hg)] {
        eprintln!(
            "shakespeare-{name}: {} train + {} val tokens, V = {}, unigram entropy {h:.4} nats",
            c.meta.train_tokens, c.meta.val_tokens, c.meta.vocab
        );
        assert!(h > 1.0 && h < (c.meta.vocab as f64).ln(), "{name}: {h}");
    }
    // Same documents; BPE needs far fewer, more varied tokens.
    assert_eq!(bytes.meta.sources.len(), gpt2.meta.sources.len());
    assert!(gpt2.meta.train_tokens * 3 < bytes.meta.train_tokens);
    assert!(hg > hb + 2.0, "{hg} vs {hb}");
}
