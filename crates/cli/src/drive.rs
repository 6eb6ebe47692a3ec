//! The command line's driver of the training loop (`models::run::train_loop`): rows appended to
//! metrics.jsonl, lines and a progress bar on the console, checkpoints written to the run
//! directory, and Ctrl-C or SIGTERM as the stop request. The loop's readbacks are awaited by
//! blocking on it (`pollster::block_on`), so every hook here may simply do its work.

use crate::console::Console;
use crate::run_dir::{MetricsLog, RunDir};
use anyhow::Result;
use data::{Batch, BatchSource, DataError};
use engine::Backend;
use models::checkpoint::{self, TrainState};
use models::run::{Driver, MetricsRow, Parts, Written};
use models::{LanguageModel, ParamLayout, Trainer};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

/// A loss past this multiple of the first one warns of divergence.
const DIVERGENCE: f32 = 1.5;

pub type Model<B> = Box<dyn LanguageModel<B>>;

pub struct Cli<'a, B: Backend> {
    pub be: &'a B,
    pub trainer: Trainer<B, Model<B>>,
    pub train: BatchSource,
    pub held_out: Vec<Batch>,
    pub stop: &'a AtomicBool,
    pub dir: &'a RunDir,
    pub layout: &'a ParamLayout,
    /// The run's config.toml, which every checkpoint carries.
    pub config_toml: &'a str,
    /// How many checkpoints to keep.
    pub keep: usize,
    pub metrics: MetricsLog,
    pub console: Console,
    pub clock: Instant,
    /// The newest checkpoint this run wrote.
    pub last_checkpoint: Option<PathBuf>,
    /// `--sample-every`'s sampler, when asked for.
    pub sampler: Option<crate::samples::Sampler<B>>,
    first_loss: Option<f32>,
    warned: bool,
    last_val: Option<f64>,
}

impl<'a, B: Backend> Cli<'a, B> {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        be: &'a B,
        trainer: Trainer<B, Model<B>>,
        train: BatchSource,
        held_out: Vec<Batch>,
        stop: &'a AtomicBool,
        dir: &'a RunDir,
        layout: &'a ParamLayout,
        config_toml: &'a str,
        keep: usize,
        metrics: MetricsLog,
        console: Console,
    ) -> Self {
        Self {
            be,
            trainer,
            train,
            held_out,
            stop,
            dir,
            layout,
            config_toml,
            keep,
            metrics,
            console,
            clock: Instant::now(),
            last_checkpoint: None,
            sampler: None,
            first_loss: None,
            warned: false,
            last_val: None,
        }
    }
}

impl<B: Backend + 'static> Driver<B, Model<B>> for Cli<'_, B> {
    type Error = anyhow::Error;

    fn parts(&mut self) -> Parts<'_, B, Model<B>> {
        Parts {
            be: self.be,
            trainer: &mut self.trainer,
            held_out: &self.held_out,
        }
    }

    fn batch(&self, done: u64) -> Result<Batch, DataError> {
        self.train.batch(done)
    }

    fn now(&self) -> f64 {
        self.clock.elapsed().as_secs_f64()
    }

    fn stop(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    async fn logged(&mut self, row: &MetricsRow, why: Written) -> Result<()> {
        let step = row.step;
        // The loop's rows hold the f32 the device computed, widened: narrowing is exact.
        let (loss, lr) = (row.loss.unwrap_or(f64::NAN) as f32, row.lr.unwrap_or(f64::NAN) as f32);
        let first = *self.first_loss.get_or_insert(loss);
        if loss > DIVERGENCE * first && !self.warned {
            self.warned = true;
            self.console.line(&format!(
                "warning: the loss {loss:.4} at step {step} is more than {DIVERGENCE}× its first value {first:.4}; \
                 the run may be diverging (a lower --lr often helps)"
            ));
        }
        self.metrics.append(row)?;
        let speed = row
            .tokens_per_s
            .filter(|s| s.is_finite())
            .map(|s| format!("  {s:>8.0} tok/s"))
            .unwrap_or_default();
        // With a bar, lines only for evaluations and the last step; without, every log.
        if why.log && !self.console.is_bar() || why.eval || why.last {
            let val = row.val_loss.map(|v| format!("  val {v:.4}")).unwrap_or_default();
            self.console
                .line(&format!("step {step:>6}  loss {loss:.4}{val}  lr {lr:.2e}{speed}"));
        }
        if let Some(sampler) = self.sampler.as_mut().filter(|s| s.due(step, why.last)) {
            let (prompt, text) = sampler.sample(self.be, &self.trainer, step).await?;
            self.console
                .line(&format!("sample at step {step}: {prompt:?} → {text:?}"));
        }
        self.last_val = row.val_loss.or(self.last_val);
        let val = self.last_val.map(|v| format!("  val {v:.4}")).unwrap_or_default();
        self.console.progress(step, &format!("loss {loss:.4}{val}{speed}"));
        Ok(())
    }

    /// Writes the trainer's state atomically and remembers it as the last good checkpoint.
    async fn checkpoint(&mut self, _step: usize, ending: bool) -> Result<()> {
        let state: TrainState = self.trainer.state(self.be).await?;
        let (layout, config_toml) = (self.layout, self.config_toml);
        let path = self.dir.write_checkpoint(state.step, self.keep, |tmp| {
            checkpoint::write_state(layout, &state, config_toml, tmp).map_err(anyhow::Error::from)
        })?;
        if !ending {
            self.console.line(&format!("checkpoint {}", path.display()));
        }
        self.last_checkpoint = Some(path);
        Ok(())
    }
}
