//! A run's corpus by content: each file's size and CRC-32C, recorded when the run starts
//! (`corpus.json` in its directory) and checked on `--resume`, so that a corpus prepared again
//! between a stop and a resume is not trained on without a word.

use crate::run_dir::{self, RunDir};
use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::io::Read;
use std::path::Path;

pub const CORPUS_FILE: &str = "corpus.json";
const FILES: [&str; 3] = ["meta.json", "train.bin", "val.bin"];

/// What a corpus directory held.
#[derive(Debug, PartialEq, Serialize, Deserialize)]
pub struct CorpusIdentity {
    pub dir: String,
    pub files: Vec<FileIdentity>,
}

#[derive(Debug, PartialEq, Serialize, Deserialize)]
pub struct FileIdentity {
    pub name: String,
    pub bytes: u64,
    pub crc32c: u32,
}

impl CorpusIdentity {
    /// Reads every file of the corpus once (CRC-32C runs at several GB/s): a prepared corpus
    /// directory's three files, or one file of token windows.
    pub fn of(corpus: &Path) -> Result<Self> {
        let paths: Vec<_> = match corpus.is_file() {
            true => vec![corpus.to_path_buf()],
            false => FILES.iter().map(|f| corpus.join(f)).collect(),
        };
        let mut files = Vec::new();
        for path in paths {
            let name = path
                .file_name()
                .map_or(String::new(), |n| n.to_string_lossy().into_owned());
            data::check_input(&path).with_context(|| format!("cannot read {}", path.display()))?;
            let mut file = std::fs::File::open(&path).with_context(|| format!("cannot open {}", path.display()))?;
            let (mut crc, mut bytes, mut buf) = (0u32, 0u64, vec![0u8; 1 << 20]);
            loop {
                let n = file
                    .read(&mut buf)
                    .with_context(|| format!("cannot read {}", path.display()))?;
                if n == 0 {
                    break;
                }
                crc = crc32c::crc32c_append(crc, &buf[..n]);
                bytes += n as u64;
            }
            files.push(FileIdentity {
                name,
                bytes,
                crc32c: crc,
            });
        }
        Ok(Self {
            dir: corpus.display().to_string(),
            files,
        })
    }
}

/// The corpus in `corpus` as it is now, once checked against a resumed run's record: a corpus
/// that changed since the run started is refused, unless `changed_is_meant`. None where a file
/// cannot be read: opening the corpus says why, next.
pub fn check(run: &RunDir, corpus: &Path, resuming: bool, changed_is_meant: bool) -> Result<Option<CorpusIdentity>> {
    let Ok(now) = CorpusIdentity::of(corpus) else {
        return Ok(None);
    };
    let path = run.file(CORPUS_FILE);
    if !resuming || !path.exists() || changed_is_meant {
        return Ok(Some(now));
    }
    let text = data::read_text(&path).with_context(|| format!("cannot read {}", path.display()))?;
    let then: CorpusIdentity =
        serde_json::from_str(&text).with_context(|| format!("{} is not a corpus record", path.display()))?;
    let changed: Vec<String> = (then.files.iter())
        .zip(&now.files)
        .filter(|(a, b)| a != b)
        .map(|(a, b)| {
            format!(
                "{}: {} bytes, CRC-32C {:08x} then; {} bytes, {:08x} now",
                a.name, a.bytes, a.crc32c, b.bytes, b.crc32c
            )
        })
        .collect();
    if !changed.is_empty() {
        bail!(
            "the corpus {} changed since this run started ({}): its losses would not continue the run's. \
             Restore the corpus, or resume with --corpus-changed to train on the new one (then recorded in {})",
            corpus.display(),
            changed.join("; "),
            path.display()
        );
    }
    Ok(Some(now))
}

/// Records the corpus a run trains on, when it starts (a run from before this record gets one
/// on its next resume).
pub fn record(run: &RunDir, identity: &CorpusIdentity) -> Result<()> {
    let json = serde_json::to_string_pretty(identity)?;
    run_dir::write_atomic(&run.file(CORPUS_FILE), |tmp| {
        std::fs::write(tmp, &json).with_context(|| format!("cannot write {}", tmp.display()))
    })
}
