//! A run's full typed config (model, optimiser and schedule, data, cadence), its named presets,
//! and how a preset, a TOML file and command-line overrides combine into one.
//!
//! Every source is a TOML table merged onto the one before: the preset, then the user's file,
//! then the flags. The merged table is deserialised once with `deny_unknown_fields`, so a typo
//! or a setting that the chosen architecture does not have is an error that names it.

use crate::memory::Purpose;
use crate::presets::{self, Dims};
use crate::{
    Hashing, Hybrid, HybridConfig, LanguageModel, MemoryFormer, MemoryFormerConfig, ModelConfig, ModelError, Result,
    Rmt, RmtConfig, TrainConfig, Transformer, TransformerConfig,
};
use data::{Task, TokenizerKind};
use engine::Backend;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// Where the batches come from.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "source", rename_all = "lowercase", deny_unknown_fields)]
pub enum DataConfig {
    /// A synthetic task on bytes, needing no files.
    Task {
        task: Task,
        /// T: tokens per training window.
        seq_len: usize,
    },
    /// A corpus written by `resmem data prepare`: DIR/train.bin, val.bin and meta.json.
    Text {
        path: PathBuf,
        /// The tokenizer the corpus was prepared with; it decodes samples.
        tokenizer: TokenizerKind,
        /// T: tokens per training window (at most the model's context length N).
        seq_len: usize,
        /// Mask attention across documents: the tokenizer's end-of-text token starts one
        /// (SPEC §2a). A learned position table still counts from the window's start.
        #[serde(default, skip_serializing_if = "is_false")]
        doc_mask: bool,
    },
    /// Fixed windows of T + 1 tokens: the tensor `tokens` (rows, T + 1) of a safetensors file,
    /// e.g. the batch the official RMT code's outputs were computed on. Training cycles through
    /// them; evaluation reads them in order.
    Tokens {
        path: PathBuf,
        tokenizer: TokenizerKind,
        /// T, one less than the rows' width.
        seq_len: usize,
        #[serde(default, skip_serializing_if = "is_false")]
        doc_mask: bool,
    },
}

fn is_false(b: &bool) -> bool {
    !b
}

impl DataConfig {
    /// The token that starts a document when documents are masked apart.
    pub fn separator(&self) -> Option<u32> {
        match self {
            DataConfig::Text {
                tokenizer,
                doc_mask: true,
                ..
            }
            | DataConfig::Tokens {
                tokenizer,
                doc_mask: true,
                ..
            } => tokenizer.end_of_text(),
            _ => None,
        }
    }

    fn validate(&self) -> Result<()> {
        match self {
            DataConfig::Text {
                tokenizer,
                doc_mask: true,
                ..
            }
            | DataConfig::Tokens {
                tokenizer,
                doc_mask: true,
                ..
            } if tokenizer.end_of_text().is_none() => Err(ModelError::Config(format!(
                "doc_mask needs a tokenizer with a document separator; the {tokenizer} tokenizer has none (gpt2 \
                     has <|endoftext|>)"
            ))),
            _ => Ok(()),
        }
    }

    /// The tokenizer its tokens are in: a task's are bytes.
    pub fn tokenizer(&self) -> TokenizerKind {
        match self {
            DataConfig::Task { .. } => TokenizerKind::Bytes,
            DataConfig::Text { tokenizer, .. } | DataConfig::Tokens { tokenizer, .. } => *tokenizer,
        }
    }

    /// T
    pub fn seq_len(&self) -> usize {
        match self {
            DataConfig::Task { seq_len, .. }
            | DataConfig::Text { seq_len, .. }
            | DataConfig::Tokens { seq_len, .. } => *seq_len,
        }
    }
}

/// How often the loop logs, evaluates and checkpoints; none of it changes the numbers.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Cadence {
    /// Log the training loss every this many steps.
    pub log_every: usize,
    /// Evaluate on held-out windows every this many steps (0: only at the end).
    pub eval_every: usize,
    /// Batches of held-out windows per evaluation.
    pub eval_batches: usize,
    /// Write a checkpoint every this many steps (0: only at the end and on a signal).
    pub checkpoint_every: usize,
    /// Keep the newest this many checkpoints.
    pub keep: usize,
}

impl Default for Cadence {
    fn default() -> Self {
        Self {
            log_every: 10,
            eval_every: 0,
            eval_batches: 4,
            checkpoint_every: 0,
            keep: 2,
        }
    }
}

/// Everything that defines a run; written to the run directory as `config.toml`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunConfig {
    pub model: ModelConfig,
    pub train: TrainConfig,
    pub data: DataConfig,
    pub cadence: Cadence,
}

/// A named starting point: (name, what it is, how to build it).
pub struct Preset {
    pub name: &'static str,
    pub about: &'static str,
    build: fn() -> RunConfig,
}

/// Where `cargo xtask corpus` puts Shakespeare with GPT-2's BPE.
pub const SHAKESPEARE_GPT2: &str = "data/shakespeare-gpt2";
pub const SHAKESPEARE_BYTES: &str = "data/shakespeare-bytes";
const GPT2_VOCAB: usize = 50257;

fn tiny_task(model: ModelConfig) -> RunConfig {
    RunConfig {
        model,
        train: TrainConfig::default(),
        data: DataConfig::Task {
            task: Task::Copy,
            seq_len: 16,
        },
        cadence: Cadence::default(),
    }
}

/// The small Shakespeare presets: context N = 128, windows of T = 64, batch 16. Measured on
/// 2 CPU cores: about 1,400 tokens/s for the RMT, so 300 steps take about 4 minutes; the
/// validation loss is 5.3 after 200 steps, against a unigram entropy of 6.43.
fn small_text(model: ModelConfig) -> RunConfig {
    RunConfig {
        model,
        train: TrainConfig {
            batch: 16,
            steps: 300,
            lr: 1e-2,
            warmup_frac: 0.05,
            min_lr_frac: 0.1,
            weight_decay: 0.1,
            ..TrainConfig::default()
        },
        data: DataConfig::Text {
            path: SHAKESPEARE_GPT2.into(),
            tokenizer: TokenizerKind::Gpt2,
            seq_len: 64,
            doc_mask: false,
        },
        cadence: Cadence {
            log_every: 10,
            eval_every: 50,
            eval_batches: 8,
            checkpoint_every: 100,
            keep: 2,
        },
    }
}

/// The paper sizes train on real text at N = T = their context length, batch 8.
fn paper(model: ModelConfig) -> RunConfig {
    let seq_len = model.context();
    RunConfig {
        model,
        train: TrainConfig {
            batch: 8,
            steps: 20_000,
            ..TrainConfig::default()
        },
        data: DataConfig::Text {
            path: SHAKESPEARE_GPT2.into(),
            tokenizer: TokenizerKind::Gpt2,
            seq_len,
            doc_mask: false,
        },
        cadence: Cadence {
            log_every: 10,
            eval_every: 500,
            eval_batches: 20,
            checkpoint_every: 1000,
            keep: 3,
        },
    }
}

/// The small RMT: R = 4 heads of D_v = 16 and D_k = 16, so R·D_v = 64 and a residual of 256.
/// GPT-2's vocabulary dominates the cost: W_E and W_U are 50,257 × 64.
fn small_rmt() -> RmtConfig {
    RmtConfig {
        d_k: 16,
        d_v: 16,
        rank: 4,
        n_layers: 2,
        d_ff: 256,
        init_std: 0.02,
        ..RmtConfig::tiny(GPT2_VOCAB, 128)
    }
}

/// The transformer of the small RMT's dimensions: H = R, D_h = D_v, D = R·D_v. Measured over
/// 150 steps on Shakespeare, init_std 1 (weights N(0, 1/fan_in)) reaches a validation loss of
/// 6.09 where 0.02 stays on the unigram plateau (6.36) and 0.5 reaches 6.28.
fn small_transformer() -> TransformerConfig {
    let r = small_rmt();
    TransformerConfig {
        d_model: r.rank * r.d_v,
        n_layers: r.n_layers,
        n_heads: r.rank,
        head_dim: r.d_v,
        d_ff: r.d_ff,
        init_std: 1.0,
        ..TransformerConfig::tiny(GPT2_VOCAB, 128)
    }
}

/// A MemoryFormer of the small transformer's width: K = 8 tables of τ = 8 bits per layer.
fn small_memoryformer() -> MemoryFormerConfig {
    MemoryFormerConfig {
        d_model: 64,
        n_layers: 2,
        n_heads: 4,
        tau: 8,
        embed_std: 0.02,
        ..MemoryFormerConfig::tiny(GPT2_VOCAB, 128)
    }
}

/// The small RMT with a memory block in place of its dense core: d = R·D_v = 64 in K = 8
/// chunks of τ = 8, as small-memoryformer hashes its d = 64.
fn small_hybrid() -> HybridConfig {
    HybridConfig::new(small_rmt().trunk(), Hashing::paper(8))
}

fn dims(name: &str) -> Dims {
    Dims::preset(name).expect("every paper preset named below exists in presets::PRESETS")
}

fn pythia(name: &str) -> MemoryFormerConfig {
    presets::memoryformer(name).expect("every Pythia preset named below exists in presets::PYTHIA")
}

/// The paper's dimensions `$name` as a transformer `$t`, an RMT `$r` and a hybrid
/// `$name-hybrid`.
macro_rules! paper_trio {
    ($t:literal, $r:literal, $name:literal) => {
        [
            Preset {
                name: $t,
                about: concat!($name, ", the transformer"),
                build: || paper(ModelConfig::Transformer(dims($name).transformer())),
            },
            Preset {
                name: $r,
                about: concat!($name, ", the RMT of the same dimensions"),
                build: || paper(ModelConfig::Rmt(dims($name).rmt())),
            },
            Preset {
                name: concat!($name, "-hybrid"),
                about: concat!($name, ", the RMT with a memory block (τ8) for its FF core"),
                build: || paper(ModelConfig::Hybrid(dims($name).hybrid())),
            },
        ]
    };
}

/// Every preset `resmem train --preset` knows.
pub fn presets() -> Vec<Preset> {
    let mut all = vec![
        Preset {
            name: "tiny-transformer",
            about: "learns the copy task in 300 steps (the default for --arch transformer)",
            build: || tiny_task(ModelConfig::Transformer(TransformerConfig::tiny(256, 16))),
        },
        Preset {
            name: "tiny-rmt",
            about: "learns the copy task in 300 steps (the default for --arch rmt)",
            build: || tiny_task(ModelConfig::Rmt(RmtConfig::tiny(256, 16))),
        },
        Preset {
            name: "tiny-memoryformer",
            about: "learns the copy task in 300 steps (the default for --arch memoryformer)",
            build: || tiny_task(ModelConfig::MemoryFormer(MemoryFormerConfig::tiny(256, 16))),
        },
        Preset {
            name: "tiny-hybrid",
            about: "learns the copy task in 300 steps (the default for --arch hybrid)",
            build: || tiny_task(ModelConfig::Hybrid(HybridConfig::tiny(256, 16))),
        },
        Preset {
            name: "small-rmt",
            about: "Shakespeare with GPT-2 BPE in minutes on 2 CPU cores: L2, R4, D_k16, D_v16",
            build: || small_text(ModelConfig::Rmt(small_rmt())),
        },
        Preset {
            name: "small-transformer",
            about: "the transformer of small-rmt's dimensions: L2, D64, 4×16",
            build: || small_text(ModelConfig::Transformer(small_transformer())),
        },
        Preset {
            name: "small-memoryformer",
            about: "a MemoryFormer of small-transformer's width: L2, d64, τ8",
            build: || small_text(ModelConfig::MemoryFormer(small_memoryformer())),
        },
        Preset {
            name: "official",
            about: "the official RMT code's conventions (SPEC §2a: ALiBi, whole-matrix RMSNorm eps 1e-6, logits / \
                    (layer + 1), tanh GELU, z-loss 1e-4, documents masked apart) at small-rmt's sizes",
            build: || RunConfig {
                data: DataConfig::Text {
                    path: SHAKESPEARE_GPT2.into(),
                    tokenizer: TokenizerKind::Gpt2,
                    seq_len: 64,
                    doc_mask: true,
                },
                ..small_text(ModelConfig::Rmt(crate::official::official_conventions(128)))
            },
        },
        Preset {
            name: "small-hybrid",
            about: "small-rmt with a memory block for its FF core: L2, R4, D_k16, D_v16, τ8",
            build: || small_text(ModelConfig::Hybrid(small_hybrid())),
        },
        Preset {
            name: "memoryformer-tiny",
            about: "MemoryFormer paper, tiny (Pythia-70M's d, L, H; τ8)",
            build: || paper(ModelConfig::MemoryFormer(pythia("pythia-70m"))),
        },
        Preset {
            name: "memoryformer-small",
            about: "MemoryFormer paper, small (Pythia-160M's d, L, H; τ8)",
            build: || paper(ModelConfig::MemoryFormer(pythia("pythia-160m"))),
        },
        Preset {
            name: "memoryformer-base",
            about: "MemoryFormer paper, base (Pythia-410M's d, L, H; τ8)",
            build: || paper(ModelConfig::MemoryFormer(pythia("pythia-410m"))),
        },
    ];
    all.extend(paper_trio!("gpt2-small", "gpt2-small-rmt", "gpt2-small"));
    all.extend(paper_trio!("gpt2-medium", "gpt2-medium-rmt", "gpt2-medium"));
    all.extend(paper_trio!("table8-49m", "table8-49m-rmt", "table8-49m"));
    all.extend(paper_trio!("table8-160m", "table8-160m-rmt", "table8-160m"));
    all.extend(paper_trio!("table8-260m", "table8-260m-rmt", "table8-260m"));
    all.extend(paper_trio!("table8-405m", "table8-405m-rmt", "table8-405m"));
    all.extend(paper_trio!("table9-46m-transformer", "table9-46m", "table9-46m"));
    all.extend(paper_trio!("table9-134m-transformer", "table9-134m", "table9-134m"));
    all.extend(paper_trio!("table9-206m-transformer", "table9-206m", "table9-206m"));
    all.extend(paper_trio!("table9-305m-transformer", "table9-305m", "table9-305m"));
    all.extend(paper_trio!("table10-transformer", "table10-rmt", "table10"));
    all
}

impl RunConfig {
    /// The preset `name`, or an error that lists them all.
    pub fn preset(name: &str) -> Result<RunConfig> {
        let all = presets();
        match all.iter().find(|p| p.name == name) {
            Some(p) => Ok((p.build)()),
            None => {
                let names: Vec<&str> = all.iter().map(|p| p.name).collect();
                Err(ModelError::Config(format!(
                    "no preset named `{name}`; choose one of {}",
                    names.join(", ")
                )))
            }
        }
    }

    /// The model's name in the config: transformer, rmt, memoryformer or hybrid.
    pub fn arch(&self) -> &'static str {
        self.model.arch()
    }

    /// N, the model's context length.
    pub fn context(&self) -> usize {
        self.model.context()
    }

    /// The model's vocabulary V.
    pub fn vocab(&self) -> usize {
        self.model.vocab()
    }

    /// Sets V, which always follows the data's tokenizer.
    pub fn set_vocab(&mut self, vocab: usize) {
        self.model.set_vocab(vocab);
    }

    /// Checks every part, and that the training window fits the context.
    pub fn validate(&self) -> Result<()> {
        self.model.validate()?;
        self.train.validate()?;
        self.data.validate()?;
        let (t, n) = (self.data.seq_len(), self.context());
        if t == 0 {
            return Err(ModelError::Config("data.seq_len (T) must be at least 1".into()));
        }
        if t > n {
            return Err(ModelError::Config(format!(
                "the training window T = {t} is longer than the model's context N = {n}; \
                 lower --seq-len or raise --context"
            )));
        }
        if self.cadence.log_every == 0 || self.cadence.eval_batches == 0 || self.cadence.keep == 0 {
            return Err(ModelError::Config(
                "log_every, eval_batches and keep must be at least 1".into(),
            ));
        }
        check_eval_batches(self.cadence.eval_batches)?;
        // TOML integers are i64: a seed past that could not be written to config.toml.
        if self.train.seed > i64::MAX as u64 {
            return Err(ModelError::Config(format!(
                "the seed {} is too large; use one of at most {}",
                self.train.seed,
                i64::MAX
            )));
        }
        Ok(())
    }

    /// The config as TOML. Floats are written in their shortest form (0.0001, not
    /// 9.999999747378752e-5), which reads back to the same f32.
    pub fn to_toml(&self) -> Result<String> {
        let table = to_table(self)?;
        toml::to_string_pretty(&table).map_err(|e| ModelError::Config(format!("cannot write the config as TOML: {e}")))
    }

    /// Reads a whole config (as written by `to_toml`) and validates it.
    pub fn from_toml(text: &str) -> Result<RunConfig> {
        let cfg: RunConfig = toml::from_str(text).map_err(|e| ModelError::Config(format!("{e}")))?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// This config with `overrides` (a partial config, e.g. a user's file) merged on top.
    /// Every key of `overrides` must exist in this config: a key the chosen architecture does
    /// not have is an error that names it.
    pub fn merged(&self, overrides: &toml::Table) -> Result<RunConfig> {
        let mut table = to_table(self)?;
        merge(&mut table, overrides, "")?;
        // Through text, so that a wrong type is reported with its key and line.
        let text = toml::to_string(&table).map_err(|e| ModelError::Config(e.to_string()))?;
        toml::from_str(&text).map_err(|e: toml::de::Error| ModelError::Config(format!("in the merged config: {e}")))
    }

    /// Builds the model this config describes for (B, T) batches: for training (initialised
    /// from the run's seed), or forward only, with no gradient buffers.
    pub fn build<B: Backend + 'static>(
        &self,
        be: &B,
        b: usize,
        t: usize,
        purpose: Purpose,
    ) -> Result<Box<dyn LanguageModel<B>>> {
        self.model.build(be, b, t, purpose, self.train.seed)
    }
}

/// The one place an architecture is chosen: every constructor, estimate and counter of a
/// `ModelConfig` goes through these.
impl ModelConfig {
    /// transformer, rmt, memoryformer or hybrid: the `arch` of the config.
    pub fn arch(&self) -> &'static str {
        match self {
            ModelConfig::Transformer(_) => "transformer",
            ModelConfig::Rmt(_) => "rmt",
            ModelConfig::MemoryFormer(_) => "memoryformer",
            ModelConfig::Hybrid(_) => "hybrid",
        }
    }

    /// The weight of the z-loss, which every architecture has.
    pub fn z_loss(&self) -> f32 {
        match self {
            ModelConfig::Transformer(c) => c.z_loss,
            ModelConfig::Rmt(c) => c.z_loss,
            ModelConfig::MemoryFormer(c) => c.z_loss,
            ModelConfig::Hybrid(c) => c.z_loss,
        }
    }

    pub fn validate(&self) -> Result<()> {
        match self {
            ModelConfig::Transformer(c) => c.validate(),
            ModelConfig::Rmt(c) => c.validate(),
            ModelConfig::MemoryFormer(c) => c.validate(),
            ModelConfig::Hybrid(c) => c.validate(),
        }
    }

    /// (V, N): the vocabulary and the context length, which every architecture has.
    fn sizes(&self) -> (usize, usize) {
        match self {
            ModelConfig::Transformer(c) => (c.vocab, c.seq_len),
            ModelConfig::Rmt(c) => (c.vocab, c.seq_len),
            ModelConfig::MemoryFormer(c) => (c.vocab, c.seq_len),
            ModelConfig::Hybrid(c) => (c.vocab, c.seq_len),
        }
    }

    fn sizes_mut(&mut self) -> (&mut usize, &mut usize) {
        match self {
            ModelConfig::Transformer(c) => (&mut c.vocab, &mut c.seq_len),
            ModelConfig::Rmt(c) => (&mut c.vocab, &mut c.seq_len),
            ModelConfig::MemoryFormer(c) => (&mut c.vocab, &mut c.seq_len),
            ModelConfig::Hybrid(c) => (&mut c.vocab, &mut c.seq_len),
        }
    }

    /// V
    pub fn vocab(&self) -> usize {
        self.sizes().0
    }

    /// N, the context length.
    pub fn context(&self) -> usize {
        self.sizes().1
    }

    pub fn set_vocab(&mut self, vocab: usize) {
        *self.sizes_mut().0 = vocab;
    }

    /// Sets N.
    pub fn set_context(&mut self, seq_len: usize) {
        *self.sizes_mut().1 = seq_len;
    }

    /// Whether the model has hash tables whose bucket use can be read (`hashed_layers`).
    pub fn has_hash_tables(&self) -> bool {
        matches!(self, ModelConfig::MemoryFormer(_) | ModelConfig::Hybrid(_))
    }

    /// Builds the model for (B, T) batches: for training, initialised from `seed`, or forward
    /// only, with no gradient buffers (`seed` unused).
    pub fn build<B: Backend + 'static>(
        &self,
        be: &B,
        b: usize,
        t: usize,
        purpose: Purpose,
        seed: u64,
    ) -> Result<Box<dyn LanguageModel<B>>> {
        Ok(match (self, purpose) {
            (ModelConfig::Transformer(c), Purpose::Train) => Box::new(Transformer::new(be, c.clone(), b, t, seed)?),
            (ModelConfig::Transformer(c), Purpose::Infer) => Box::new(Transformer::inference(be, c.clone(), b, t)?),
            (ModelConfig::Rmt(c), Purpose::Train) => Box::new(Rmt::new(be, c.clone(), b, t, seed)?),
            (ModelConfig::Rmt(c), Purpose::Infer) => Box::new(Rmt::inference(be, c.clone(), b, t)?),
            (ModelConfig::MemoryFormer(c), Purpose::Train) => Box::new(MemoryFormer::new(be, c.clone(), b, t, seed)?),
            (ModelConfig::MemoryFormer(c), Purpose::Infer) => Box::new(MemoryFormer::inference(be, c.clone(), b, t)?),
            (ModelConfig::Hybrid(c), Purpose::Train) => Box::new(Hybrid::new(be, c.clone(), b, t, seed)?),
            (ModelConfig::Hybrid(c), Purpose::Infer) => Box::new(Hybrid::inference(be, c.clone(), b, t)?),
        })
    }
}

/// The most held-out batches one evaluation may use: they are all kept in memory, and an
/// evaluation should take a fraction of the training time.
pub const MAX_EVAL_BATCHES: usize = 10_000;

/// Refuses an evaluation of more than `MAX_EVAL_BATCHES` batches.
pub fn check_eval_batches(m: usize) -> Result<()> {
    if m > MAX_EVAL_BATCHES {
        return Err(ModelError::Config(format!(
            "{m} held-out batches is more than the {MAX_EVAL_BATCHES} an evaluation may use; ask for fewer"
        )));
    }
    Ok(())
}

/// A value as a TOML table, through JSON so that f32s keep their shortest decimal form.
fn to_table<T: Serialize>(value: &T) -> Result<toml::Table> {
    let bad = |e: String| ModelError::Config(format!("cannot write the config: {e}"));
    let json = serde_json::to_string(value).map_err(|e| bad(e.to_string()))?;
    serde_json::from_str(&json).map_err(|e| bad(e.to_string()))
}

/// Whether `over` names another variant (`arch` of a model, `source` of data) than `base`.
fn retagged(base: &toml::Table, over: &toml::Table) -> bool {
    ["arch", "source"]
        .iter()
        .any(|tag| matches!((base.get(*tag), over.get(*tag)), (Some(a), Some(b)) if a != b))
}

/// What a table that switches to another variant is merged onto: for another `arch`, that
/// architecture's tiny preset at `base`'s vocabulary and context (so that a partial file, say
/// only `arch = "rmt"`, is a whole model); for another data `source`, `over` alone.
fn retagged_base(base: &toml::Table, over: &toml::Table) -> Result<toml::Table> {
    let Some(arch) = over.get("arch").and_then(toml::Value::as_str) else {
        return Ok(over.clone());
    };
    let Ok(preset) = RunConfig::preset(&format!("tiny-{arch}")) else {
        // An unknown arch: its own error, from the merged config.
        return Ok(over.clone());
    };
    let mut table = to_table(&preset.model)?;
    for key in ["vocab", "seq_len"] {
        if let Some(v) = base.get(key) {
            table.insert(key.into(), v.clone());
        }
    }
    Ok(table)
}

/// Merges `over` into `base`; every key of `over` must already be in `base`.
fn merge(base: &mut toml::Table, over: &toml::Table, path: &str) -> Result<()> {
    for (key, value) in over {
        let name = if path.is_empty() {
            key.clone()
        } else {
            format!("{path}.{key}")
        };
        match (base.get_mut(key), value) {
            // Another architecture or data source is a table of other settings: it replaces.
            (Some(toml::Value::Table(b)), toml::Value::Table(o)) if retagged(b, o) => {
                *b = retagged_base(b, o)?;
                merge(b, o, &name)?;
            }
            (Some(toml::Value::Table(b)), toml::Value::Table(o)) => merge(b, o, &name)?,
            // No setting holds nan or inf: refused here, by name, rather than as a null in the
            // JSON the config is written through.
            (Some(_), toml::Value::Float(f)) if !f.is_finite() => {
                return Err(ModelError::Config(format!("{name} = {f}: it must be a finite number")));
            }
            (Some(slot), v) => *slot = v.clone(),
            (None, _) => {
                let known: Vec<&str> = base.keys().map(String::as_str).collect();
                return Err(ModelError::Config(format!(
                    "unknown setting `{name}`; {} has {}",
                    if path.is_empty() { "a run config" } else { path },
                    known.join(", ")
                )));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_preset_is_valid_and_round_trips_through_toml() {
        for p in presets() {
            let cfg = (p.build)();
            cfg.validate().unwrap_or_else(|e| panic!("{}: {e}", p.name));
            let text = cfg.to_toml().unwrap();
            assert_eq!(RunConfig::from_toml(&text).unwrap(), cfg, "{}:\n{text}", p.name);
        }
    }

    #[test]
    fn floats_are_written_short() {
        let text = RunConfig::preset("tiny-rmt").unwrap().to_toml().unwrap();
        assert!(text.contains("z_loss = 0.0001"), "{text}");
    }

    #[test]
    fn overrides_merge_and_unknown_keys_name_themselves() {
        let base = RunConfig::preset("tiny-rmt").unwrap();
        let over: toml::Table = toml::from_str("[model]\nd_k = 4\n[train]\nlr = 0.5").unwrap();
        let cfg = base.merged(&over).unwrap();
        let ModelConfig::Rmt(m) = &cfg.model else {
            unreachable!()
        };
        assert_eq!((m.d_k, cfg.train.lr), (4, 0.5));
        let over: toml::Table = toml::from_str("[model]\ntau = 4").unwrap();
        let err = base.merged(&over).unwrap_err().to_string();
        assert!(err.contains("`model.tau`") && err.contains("d_k"), "{err}");
    }

    #[test]
    fn a_window_longer_than_the_context_is_refused() {
        let mut cfg = RunConfig::preset("tiny-transformer").unwrap();
        cfg.data = DataConfig::Task {
            task: Task::Copy,
            seq_len: 17,
        };
        let err = cfg.validate().unwrap_err().to_string();
        assert!(err.contains("T = 17") && err.contains("N = 16"), "{err}");
    }
}
