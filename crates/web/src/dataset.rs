//! What the page trains on: a synthetic task, or Shakespeare in bytes or GPT-2 BPE, and where
//! each corpus lies.

use data::{Task, TokenizerKind};
use models::DataConfig;
use std::path::Path;

/// What the page trains on: a synthetic task, or Shakespeare, which `cargo xtask serve` places
/// beside the page under the path the command line reads it from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dataset {
    Task(Task),
    Shakespeare(TokenizerKind),
}

impl Dataset {
    pub const ALL: [Dataset; 5] = [
        Dataset::Task(Task::Copy),
        Dataset::Task(Task::Reverse),
        Dataset::Task(Task::Mqar),
        Dataset::Shakespeare(TokenizerKind::Bytes),
        Dataset::Shakespeare(TokenizerKind::Gpt2),
    ];

    pub fn name(self) -> &'static str {
        match self {
            Dataset::Task(t) => t.name(),
            Dataset::Shakespeare(TokenizerKind::Bytes) => "shakespeare-bytes",
            Dataset::Shakespeare(TokenizerKind::Gpt2) => "shakespeare-gpt2",
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Dataset::Task(Task::Copy) => "copy",
            Dataset::Task(Task::Reverse) => "reverse",
            Dataset::Task(Task::Mqar) => "mqar (associative recall)",
            Dataset::Shakespeare(TokenizerKind::Bytes) => "Shakespeare, bytes",
            Dataset::Shakespeare(TokenizerKind::Gpt2) => "Shakespeare, GPT-2 BPE (V 50,257: slow)",
        }
    }

    pub fn parse(s: &str) -> Option<Dataset> {
        Dataset::ALL.into_iter().find(|d| d.name() == s)
    }

    pub fn tokenizer(self) -> TokenizerKind {
        match self {
            Dataset::Task(_) => TokenizerKind::Bytes,
            Dataset::Shakespeare(k) => k,
        }
    }

    /// Where a corpus lies, relative to the page and to the repository alike.
    pub fn corpus_dir(self) -> Option<&'static str> {
        match self {
            Dataset::Task(_) => None,
            Dataset::Shakespeare(TokenizerKind::Bytes) => Some(models::run::SHAKESPEARE_BYTES),
            Dataset::Shakespeare(TokenizerKind::Gpt2) => Some(models::run::SHAKESPEARE_GPT2),
        }
    }

    /// The dataset of a run config, if the page offers it.
    pub fn of(data: &DataConfig) -> Option<Dataset> {
        match data {
            DataConfig::Task { task, .. } => Some(Dataset::Task(*task)),
            DataConfig::Text { path, .. } => Dataset::ALL
                .into_iter()
                .find(|d| d.corpus_dir().map(Path::new) == Some(path)),
            DataConfig::Tokens { .. } => None,
        }
    }
}

impl std::fmt::Display for Dataset {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl serde::Serialize for Dataset {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl<'de> serde::Deserialize<'de> for Dataset {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Dataset, D::Error> {
        let name = String::deserialize(d)?;
        Dataset::parse(&name).ok_or_else(|| serde::de::Error::custom(format!("no data called {name}")))
    }
}
