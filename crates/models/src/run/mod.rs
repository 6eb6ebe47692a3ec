//! A run's full typed config (model, optimiser and schedule, data, cadence), its named presets,
//! and how a preset, a TOML file and command-line overrides combine into one.
//!
//! Every source is a TOML table merged onto the one before: the preset, then the user's file,
//! then the flags. The merged table is deserialised once with `deny_unknown_fields`, so a typo
//! or a setting that the chosen architecture does not have is an error that names it.
//!
//! This file holds `RunConfig` and its checks; the data part is `data_config.rs`, the model part's
//! methods over every architecture `model.rs`, the named presets `training_presets.rs`, and the
//! TOML merge `merge.rs`. A run trains through the one loop in `train_loop.rs`, which writes the
//! rows of `metrics.rs`.

mod data_config;
mod merge;
pub mod metrics;
mod model;
pub mod train_loop;
mod training_presets;

pub use data_config::DataConfig;
pub use metrics::{Metrics, MetricsRow};
pub use train_loop::{Driver, End, LoopCadence, Parts, Written};
pub use training_presets::{presets, Preset, SHAKESPEARE_BYTES, SHAKESPEARE_GPT2};

use crate::memory::Purpose;
use crate::{LanguageModel, ModelConfig, ModelError, Result, TrainConfig};
use engine::Backend;
use merge::to_table;
use serde::{Deserialize, Serialize};

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
    /// Print a sample of the model's text every this many steps (0: never), at logged steps:
    /// a multiple of log_every. Absent from configs that never set it.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub sample_every: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

impl Default for Cadence {
    fn default() -> Self {
        Self {
            log_every: 10,
            eval_every: 0,
            eval_batches: 4,
            checkpoint_every: 0,
            keep: 2,
            sample_every: 0,
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

    /// The model's architecture.
    pub fn arch(&self) -> crate::Arch {
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
        let (sample, log) = (self.cadence.sample_every, self.cadence.log_every);
        if !sample.is_multiple_of(log) {
            return Err(ModelError::Config(format!(
                "sample_every = {sample} must be a multiple of log_every = {log}: samples are taken at logged steps"
            )));
        }
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
        merge::merged(self, overrides)
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

#[cfg(test)]
mod tests {
    use super::*;
    use ::data::Task;

    #[test]
    fn floats_are_written_short() {
        let text = RunConfig::preset("tiny-rmt").unwrap().to_toml().unwrap();
        assert!(text.contains("z_loss = 0.0001"), "{text}");
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
