//! The training loop, once for `resmem train` and the page: the step schedule, the cadence of
//! rows, evaluations and checkpoints, the one NaN/Inf check, and how a run stops. What differs
//! between them is a [`Driver`]: where rows and checkpoints go, what a person sees, how a stop
//! is asked for, and how readbacks are awaited (the command line blocks on the loop's future;
//! the page awaits it, so its thread never blocks).

use super::metrics::MetricsRow;
use super::RunConfig;
use crate::{LanguageModel, ModelError, Trainer};
use data::{Batch, DataError};
use engine::Backend;

/// When the loop writes rows, evaluates and checkpoints.
#[derive(Clone, Debug, PartialEq)]
pub struct LoopCadence {
    /// The step the schedule ends at.
    pub steps: usize,
    /// A row every this many steps (at least 1), after the first step and at the last.
    pub log_every: usize,
    /// An evaluation every this many steps (0: only at the last), when the driver lends
    /// held-out batches.
    pub eval_every: usize,
    /// A checkpoint every this many steps (0: only at the end).
    pub checkpoint_every: usize,
    /// Rows carry `total` (CE + z-loss) too: with a z-loss, the official RMT code reports that.
    pub totals: bool,
    /// A stop writes a row of the last step first. The page shows where a run stopped; the
    /// command line does not, so that a resumed run's rows are the uninterrupted run's.
    pub log_on_stop: bool,
}

impl LoopCadence {
    /// `resmem train`'s: the config's steps and cadence.
    pub fn of(cfg: &RunConfig) -> Self {
        Self {
            steps: cfg.train.steps,
            log_every: cfg.cadence.log_every,
            eval_every: cfg.cadence.eval_every,
            checkpoint_every: cfg.cadence.checkpoint_every,
            totals: cfg.model.z_loss() > 0.0,
            log_on_stop: false,
        }
    }
}

/// What the loop trains with, lent by its driver for one use.
pub struct Parts<'a, B: Backend, M> {
    pub be: &'a B,
    pub trainer: &'a mut Trainer<B, M>,
    /// The batches an evaluation averages over; none: the loop never evaluates.
    pub held_out: &'a [Batch],
}

/// Why a row was written, and the training time since the previous one.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Written {
    /// A step of the log cadence (or the first, or the last).
    pub log: bool,
    /// The row has an evaluation.
    pub eval: bool,
    /// A checkpoint of this step follows.
    pub save: bool,
    /// The last step this loop trains: the schedule's, or the one a stop ended it after.
    pub last: bool,
    /// Steps since the previous row, and the seconds they took: the steps and the loss read,
    /// not evaluations, checkpoints or the driver's own work.
    pub steps: usize,
    pub seconds: f64,
}

/// How a loop ended.
#[derive(Debug)]
pub enum End {
    /// The schedule ended; its last step was checkpointed.
    Finished,
    /// A stop was asked for; `step`, the last finished step, was checkpointed.
    Stopped { step: usize },
    /// Step `step`'s batch could not be drawn (a corpus changed under the run). The steps
    /// before it were checkpointed when their losses were finite.
    NoBatch { step: usize, error: DataError },
    /// The training loss became NaN or Inf by step `step`: `sum`, the losses' sum since the
    /// last check, is. Nothing after the last finite check was checkpointed.
    Diverged { step: usize, sum: f32 },
}

/// One way of running the loop: the command line's or the page's.
// Its futures are driven on one thread (by a blocking executor, or the browser's event loop),
// so they need not be Send.
#[allow(async_fn_in_trait)]
pub trait Driver<B: Backend, M: LanguageModel<B>> {
    type Error: From<ModelError>;

    fn parts(&mut self) -> Parts<'_, B, M>;
    /// The batch of the step after `done` steps.
    fn batch(&self, done: u64) -> Result<Batch, DataError>;
    /// Seconds since a fixed instant (std's clock is not the browser's).
    fn now(&self) -> f64;
    /// Whether to stop before the next step.
    fn stop(&self) -> bool;
    /// After each step, before the loop reads anything back; `batch` was its batch.
    async fn stepped(&mut self, _step: usize, _batch: &Batch) -> Result<(), Self::Error> {
        Ok(())
    }
    /// A row of metrics.jsonl.
    async fn logged(&mut self, row: &MetricsRow, why: Written) -> Result<(), Self::Error>;
    /// Keep the trainer's state at `step`; `ending`: the loop ends after it.
    async fn checkpoint(&mut self, step: usize, ending: bool) -> Result<(), Self::Error>;
}

/// Trains from the trainer's step until the schedule ends, a stop, a batch that cannot be
/// drawn, or a NaN or Inf loss. Errors of the device or the driver end it at once.
pub async fn train<B, M, D>(driver: &mut D, cadence: &LoopCadence) -> Result<End, D::Error>
where
    B: Backend,
    M: LanguageModel<B>,
    D: Driver<B, M>,
{
    let mut state = State {
        start: driver.now(),
        since: None,
        steps: 0,
        tokens: 0,
        interval: (0, 0.0),
    };
    // The last step's batch and learning rate, for a row written when a stop ends the loop.
    let mut last: Option<(Batch, f32)> = None;
    let (mut logged_at, mut saved_at) = (None, None);
    loop {
        let done = driver.parts().trainer.step;
        if done >= cadence.steps {
            return Ok(End::Finished);
        }
        if driver.stop() {
            match last.as_ref().filter(|_| cadence.log_on_stop && logged_at != Some(done)) {
                Some((batch, lr)) => {
                    let row = match row(driver, cadence, &mut state, done, *lr, batch, false).await? {
                        Ok(row) => row,
                        Err(sum) => return Ok(End::Diverged { step: done, sum }),
                    };
                    let why = state.written(true, false, saved_at != Some(done), true);
                    driver.logged(&row, why).await?;
                }
                None => {
                    let sum = loss_sum(driver).await?;
                    if !sum.is_finite() {
                        return Ok(End::Diverged { step: done, sum });
                    }
                }
            }
            if saved_at != Some(done) {
                driver.checkpoint(done, true).await?;
            }
            return Ok(End::Stopped { step: done });
        }
        let batch = match driver.batch(done as u64) {
            Ok(batch) => batch,
            Err(error) => {
                // Keep what was trained, unless it already diverged.
                if saved_at != Some(done) && loss_sum(driver).await?.is_finite() {
                    driver.checkpoint(done, true).await?;
                }
                return Ok(End::NoBatch { step: done, error });
            }
        };
        let step = done + 1;
        if state.since.is_none() {
            state.since = Some(driver.now());
        }
        let lr = {
            let parts = driver.parts();
            parts.trainer.step(parts.be, &batch)?
        };
        state.steps += 1;
        state.tokens += batch.b * batch.t;
        driver.stepped(step, &batch).await?;
        let is_last = step == cadence.steps;
        let log = step == 1 || step.is_multiple_of(cadence.log_every) || is_last;
        let eval = !driver.parts().held_out.is_empty()
            && (is_last || (cadence.eval_every > 0 && step.is_multiple_of(cadence.eval_every)));
        let save = is_last || (cadence.checkpoint_every > 0 && step.is_multiple_of(cadence.checkpoint_every));
        if log || eval || save {
            let row = match row(driver, cadence, &mut state, step, lr, &batch, eval).await? {
                Ok(row) => row,
                Err(sum) => return Ok(End::Diverged { step, sum }),
            };
            let why = state.written(log, eval, save, is_last);
            driver.logged(&row, why).await?;
            logged_at = Some(step);
            if save {
                driver.checkpoint(step, is_last).await?;
                saved_at = Some(step);
            }
        }
        last = Some((batch, lr));
    }
}

/// The timing of the rows.
struct State {
    /// `now` when the loop started: rows' `elapsed_s` count from it.
    start: f64,
    /// `now` before the first step since the last row.
    since: Option<f64>,
    /// Steps and tokens since the last row.
    steps: usize,
    tokens: usize,
    /// The steps and seconds the last row's `tokens_per_s` covered.
    interval: (usize, f64),
}

impl State {
    fn written(&self, log: bool, eval: bool, save: bool, last: bool) -> Written {
        Written {
            log,
            eval,
            save,
            last,
            steps: self.interval.0,
            seconds: self.interval.1,
        }
    }
}

/// The sum of the training losses since the last check: each step adds its loss to it on the
/// device, and a NaN or Inf stays in it, so one read checks them all.
async fn loss_sum<B, M, D>(driver: &mut D) -> Result<f32, ModelError>
where
    B: Backend,
    M: LanguageModel<B>,
    D: Driver<B, M>,
{
    let parts = driver.parts();
    parts.trainer.loss_sum(parts.be).await
}

/// The row of `step`, whose batch was `batch`, with an evaluation when `eval`; or the losses'
/// sum since the last row, when it is NaN or Inf. The reads run in the order they always did: the
/// z-loss term reads the step's forward before an evaluation's forwards overwrite it.
#[allow(clippy::too_many_arguments)]
async fn row<B, M, D>(
    driver: &mut D,
    cadence: &LoopCadence,
    state: &mut State,
    step: usize,
    lr: f32,
    batch: &Batch,
    eval: bool,
) -> Result<Result<MetricsRow, f32>, ModelError>
where
    B: Backend,
    M: LanguageModel<B>,
    D: Driver<B, M>,
{
    let parts = driver.parts();
    let (be, trainer) = (parts.be, parts.trainer);
    let sum = trainer.loss_sum(be).await?;
    trainer.reset_loss_sum(be);
    if !sum.is_finite() {
        return Ok(Err(sum));
    }
    let loss = trainer.loss(be).await?;
    let grad_norm = trainer.grad_norm(be).await?;
    let now = driver.now();
    let seconds = now - state.since.take().unwrap_or(now);
    let mut row = MetricsRow {
        elapsed_s: Some(now - state.start),
        loss: Some(f64::from(loss)),
        grad_norm: Some(f64::from(grad_norm)),
        lr: Some(f64::from(lr)),
        step: step as u64,
        tokens_per_s: Some(state.tokens as f64 / seconds),
        ..MetricsRow::default()
    };
    state.interval = (state.steps, seconds);
    (state.steps, state.tokens) = (0, 0);
    let parts = driver.parts();
    let (be, trainer, held_out) = (parts.be, parts.trainer, parts.held_out);
    if cadence.totals {
        row.total = Some(f64::from(loss + trainer.z_term(be, batch).await?));
    }
    if eval {
        let (mut ce, mut z) = (0.0f64, 0.0f64);
        for batch in held_out {
            let (c, zt) = trainer.eval_losses(be, batch).await?;
            (ce, z) = (ce + f64::from(c), z + f64::from(zt));
        }
        row.val_loss = Some(f64::from((ce / held_out.len() as f64) as f32));
        // The last held-out batch's forward is the model's.
        row.mixing_gain = crate::observe::composite_gain(be, &trainer.model).await?;
        if cadence.totals {
            row.val_total = Some((ce + z) / held_out.len() as f64);
        }
    }
    Ok(Ok(row))
}
