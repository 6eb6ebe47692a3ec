//! Corrupt prepared corpora must give an error, never a panic, and never a corpus that breaks
//! its invariants. Seeded, so a failure reproduces; each case is named when it fails.

use rand::{rngs::SmallRng, Rng, SeedableRng};
use resmem_data::{prepare, Corpus, Split, TextSampler, TokenizerKind};
use serde_json::{json, Value};
use std::fs;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::sync::Arc;

const CASES: usize = 10_000;

struct Files {
    meta: Vec<u8>,
    train: Vec<u8>,
    val: Vec<u8>,
}

/// A small valid GPT-2 corpus: three documents, a few hundred tokens.
fn valid(dir: &Path) -> Files {
    let texts = dir.join("texts");
    fs::create_dir_all(&texts).unwrap();
    for (i, name) in ["a.txt", "b.txt", "c.txt"].iter().enumerate() {
        let body: String = (0..12 + 4 * i)
            .map(|j| format!("Line {j} of {name}: to be, or not — ünïcode.\n"))
            .collect();
        fs::write(texts.join(name), body).unwrap();
    }
    let out = dir.join("valid");
    prepare(&[texts], TokenizerKind::Gpt2, 0.2, &out, &mut |_, _| {}).unwrap();
    // The temp dir's name would make meta.json's length, and so the cases, differ between runs.
    let mut meta: Value = serde_json::from_slice(&fs::read(out.join("meta.json")).unwrap()).unwrap();
    for s in meta["sources"].as_array_mut().unwrap() {
        let name = s["path"].as_str().unwrap().rsplit('/').next().unwrap().to_string();
        s["path"] = json!(format!("texts/{name}"));
    }
    Files {
        meta: serde_json::to_vec_pretty(&meta).unwrap(),
        train: fs::read(out.join("train.bin")).unwrap(),
        val: fs::read(out.join("val.bin")).unwrap(),
    }
}

/// Writes the case and opens it. Ok only when every invariant holds; counts the outcomes.
struct Harness {
    dir: std::path::PathBuf,
    errs: usize,
    oks: usize,
    /// What each file holds now, so that only changed files are written (the disk is the cost).
    written: [Option<Option<Vec<u8>>>; 3],
}

impl Harness {
    /// A harness that writes its cases into `dir`, made here.
    fn new(dir: std::path::PathBuf) -> Harness {
        fs::create_dir_all(&dir).unwrap();
        Harness {
            dir,
            errs: 0,
            oks: 0,
            written: Default::default(),
        }
    }

    fn case(&mut self, what: &str, meta: &[u8], train: Option<&[u8]>, val: Option<&[u8]>) {
        for (i, (name, bytes)) in [("meta.json", Some(meta)), ("train.bin", train), ("val.bin", val)]
            .into_iter()
            .enumerate()
        {
            let now = Some(bytes.map(<[u8]>::to_vec));
            if self.written[i] == now {
                continue;
            }
            self.written[i] = now;
            let path = self.dir.join(name);
            match bytes {
                Some(b) => fs::write(&path, b).unwrap(),
                None => {
                    let _ = fs::remove_file(&path);
                }
            }
        }
        let dir = self.dir.clone();
        let result = catch_unwind(AssertUnwindSafe(|| {
            Corpus::open(&dir).map(|c| {
                check(&c);
                let e = c.unigram_entropy().expect("an opened corpus reads whole");
                assert!(e.is_finite() && e >= 0.0, "entropy {e}");
            })
        }));
        match result {
            Err(_) => panic!("Corpus::open panicked, or opened a corpus that breaks an invariant, on: {what}"),
            Ok(Err(e)) => {
                let msg = e.to_string();
                assert!(
                    msg.contains(&*self.dir.to_string_lossy()),
                    "{what}: the message names no file: {msg}"
                );
                self.errs += 1;
            }
            Ok(Ok(())) => self.oks += 1,
        }
    }
}

/// What every opened corpus guarantees to the samplers.
fn check(c: &Corpus) {
    let m = &c.meta;
    assert_eq!(m.vocab, m.tokenizer.vocab());
    assert_eq!(resmem_data::token_bytes_for(m.vocab), Some(m.token_bytes));
    assert_eq!(c.train.len() as u64, m.train_tokens);
    assert_eq!(c.val.len() as u64, m.val_tokens);
    for split in [Split::Train, Split::Val] {
        let f = c.split(split);
        let mut count = 0;
        f.scan(|t| {
            assert!((t as usize) < m.vocab);
            count += 1;
        })
        .unwrap();
        assert_eq!(count, f.len());
        if f.len() >= 2 {
            let s = TextSampler::new(Arc::new(Corpus::open(c.dir()).unwrap()), split, 2, 1, 0).unwrap();
            let b = s.batch(3).unwrap();
            assert_eq!((b.inputs.len(), b.targets.len()), (2, 2));
        }
    }
}

fn flip(bytes: &[u8], rng: &mut SmallRng, flips: usize) -> Vec<u8> {
    let mut out = bytes.to_vec();
    for _ in 0..flips {
        if let Some(b) = out.get_mut(rng.random_range(0..bytes.len().max(1))) {
            *b ^= 1 << rng.random_range(0..8);
        }
    }
    out
}

fn random_bytes(rng: &mut SmallRng, max: usize) -> Vec<u8> {
    (0..rng.random_range(0..=max)).map(|_| rng.random()).collect()
}

/// A meta.json whose fields disagree with each other or with the files.
fn lie(meta: &Value, rng: &mut SmallRng) -> (String, Value) {
    let mut m = meta.clone();
    let odd = |rng: &mut SmallRng| -> Value {
        match rng.random_range(0..8) {
            0 => json!(0),
            1 => json!(u64::MAX),
            2 => json!(-1),
            3 => json!(1.5),
            4 => json!("7"),
            5 => json!(null),
            6 => json!(rng.random_range(0..100_000u64)),
            _ => json!(rng.random::<u32>()),
        }
    };
    let what = match rng.random_range(0..12) {
        0 => {
            let d: i64 = rng.random_range(-3..=3);
            let n = m["train_tokens"].as_i64().unwrap() + d;
            // Consistent with the sources, so only the file size can catch it.
            m["train_tokens"] = json!(n);
            let s0 = m["sources"][0]["train_tokens"].as_i64().unwrap() + d;
            m["sources"][0]["train_tokens"] = json!(s0);
            format!("train_tokens off by {d}")
        }
        1 => {
            let d: i64 = rng.random_range(-3..=3);
            m["val_tokens"] = json!(m["val_tokens"].as_i64().unwrap() + d);
            let s = m["sources"][1]["val_tokens"].as_i64().unwrap() + d;
            m["sources"][1]["val_tokens"] = json!(s);
            format!("val_tokens off by {d}")
        }
        2 => {
            m["token_bytes"] = json!(rng.random_range(0..=8u8));
            format!("token_bytes {}", m["token_bytes"])
        }
        3 => {
            m["vocab"] = odd(rng);
            format!("vocab {}", m["vocab"])
        }
        4 => {
            m["tokenizer"] = json!(["bytes", "gpt2", "GPT2", "", "bpe"][rng.random_range(0..5)]);
            // Bytes with this corpus's vocab, or the right vocab for bytes: tokens ≥ 256 then.
            if rng.random() {
                m["vocab"] = json!(256);
            }
            format!("tokenizer {} vocab {}", m["tokenizer"], m["vocab"])
        }
        5 => {
            m["format"] = odd(rng);
            format!("format {}", m["format"])
        }
        6 => {
            m["val_frac"] = json!([0.0, -0.1, 0.5000001, 1.0, 1e300, 0.3][rng.random_range(0..6)]);
            format!("val_frac {}", m["val_frac"])
        }
        7 => {
            let i = rng.random_range(0..3);
            let key = ["train_tokens", "val_tokens", "bytes"][rng.random_range(0..3)];
            m["sources"][i][key] = odd(rng);
            format!("sources[{i}].{key} = {}", m["sources"][i][key])
        }
        8 => {
            let i = rng.random_range(0..3);
            m["sources"][i]["sha256"] = json!(["", "xyz", "ABCDEF", "0"][rng.random_range(0..4)]);
            format!("sources[{i}].sha256 mangled")
        }
        9 => {
            let key = [
                "format",
                "tokenizer",
                "vocab",
                "token_bytes",
                "train_tokens",
                "val_tokens",
                "val_frac",
                "sources",
            ][rng.random_range(0..8)];
            m.as_object_mut().unwrap().remove(key);
            format!("no {key}")
        }
        10 => {
            m["extra"] = json!(1);
            "an unknown field".into()
        }
        _ => {
            // Both totals and the sources agree with each other, but not with the files.
            let (t, v) = (rng.random_range(0..2000u64), rng.random_range(0..2000u64));
            m["train_tokens"] = json!(t);
            m["val_tokens"] = json!(v);
            m["sources"] =
                json!([{"path": "x", "bytes": 1, "sha256": "0".repeat(64), "train_tokens": t, "val_tokens": v}]);
            format!("counts {t}/{v}")
        }
    };
    (what, m)
}

#[test]
fn corrupt_meta_json_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let good = valid(tmp.path());
    let mut h = Harness::new(tmp.path().join("case"));
    let (train, val) = (Some(&good.train[..]), Some(&good.val[..]));
    h.case("the valid corpus", &good.meta, train, val);
    assert_eq!(h.oks, 1, "the unmutated corpus opens");
    let value: Value = serde_json::from_slice(&good.meta).unwrap();
    let mut rng = SmallRng::seed_from_u64(1);
    let mut n = 0;
    for cut in 0..good.meta.len() {
        h.case(&format!("meta.json cut at {cut}"), &good.meta[..cut], train, val);
        n += 1;
    }
    while n < CASES {
        let (what, meta) = match n % 4 {
            0 => ("bit flips".to_string(), flip(&good.meta, &mut rng, 1 + n % 3)),
            1 => ("random bytes".to_string(), random_bytes(&mut rng, 300)),
            _ => {
                let (what, m) = lie(&value, &mut rng);
                (what, serde_json::to_vec(&m).unwrap())
            }
        };
        h.case(&format!("case {n}: {what}"), &meta, train, val);
        n += 1;
    }
    eprintln!(
        "meta.json: {n} corrupt cases, {} refused, {} harmless",
        h.errs,
        h.oks - 1
    );
    // Every case was opened: the valid corpus and `n` corrupt ones, at least CASES of them.
    assert_eq!(h.errs + h.oks, n + 1, "cases opened");
    assert!(n >= CASES, "only {n} cases");
    assert!(h.errs > n * 9 / 10, "only {} of {n} refused", h.errs);
}

#[test]
fn corrupt_token_files_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let good = valid(tmp.path());
    let mut h = Harness::new(tmp.path().join("case"));
    let mut rng = SmallRng::seed_from_u64(2);
    let run = |h: &mut Harness, what: String, train: Option<&[u8]>, val: Option<&[u8]>| {
        h.case(&what, &good.meta, train, val);
    };
    for cut in 0..good.train.len() {
        run(
            &mut h,
            format!("train.bin cut at {cut}"),
            Some(&good.train[..cut]),
            Some(&good.val),
        );
    }
    for cut in 0..good.val.len() {
        run(
            &mut h,
            format!("val.bin cut at {cut}"),
            Some(&good.train),
            Some(&good.val[..cut]),
        );
    }
    run(&mut h, "no train.bin".into(), None, Some(&good.val));
    run(&mut h, "no val.bin".into(), Some(&good.train), None);
    run(&mut h, "splits swapped".into(), Some(&good.val), Some(&good.train));
    let mut i = 0usize;
    while h.errs + h.oks < CASES {
        let n = h.errs + h.oks;
        i += 1;
        let on_train = rng.random();
        let file = if on_train { &good.train } else { &good.val };
        let (what, bad) = match i % 5 {
            0 => ("bit flips", flip(file, &mut rng, 1 + i % 4)),
            1 => ("random bytes, any length", random_bytes(&mut rng, file.len() * 2)),
            2 => (
                "random bytes, same length",
                (0..file.len()).map(|_| rng.random()).collect(),
            ),
            3 => {
                let mut more = file.clone();
                more.extend(random_bytes(&mut rng, 5).iter().chain([0u8].iter()));
                ("bytes appended", more)
            }
            _ => {
                // One token at or above the vocabulary.
                let mut out = file.clone();
                let at = rng.random_range(0..file.len() / 2) * 2;
                let t: u16 = rng.random_range(50_257..=u16::MAX);
                out.splice(at..at + 2, t.to_le_bytes());
                ("a token ≥ vocab", out)
            }
        };
        let what = format!("case {n}: {what} in {}", if on_train { "train.bin" } else { "val.bin" });
        if on_train {
            run(&mut h, what, Some(&bad), Some(&good.val));
        } else {
            run(&mut h, what, Some(&good.train), Some(&bad));
        }
    }
    let n = h.errs + h.oks;
    assert!(n >= CASES, "only {n} cases");
    eprintln!("token files: {n} corrupt cases, {} refused, {} harmless", h.errs, h.oks);
    assert!(h.errs > n * 3 / 4, "only {} of {n} refused", h.errs);
    // Harmless mutations exist (a flipped low bit is another valid token) and were checked.
    assert!(h.oks > 0);
}
