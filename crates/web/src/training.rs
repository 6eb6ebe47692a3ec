//! One run on the page: `resmem train`'s loop (`models::run::train_loop`), driven by the page,
//! which steps until the schedule ends or it is asked to stop, and emits what it reads as
//! events. It reads the loss every few steps, not every step, what `observed.rs` lists at each
//! kind's cadence, the residuals only while a viewer wants them, a sample every few hundred
//! steps and at the end, and keeps a checkpoint in memory every few steps, so that a lost device
//! loses little.

use crate::observed::{observe_each, Cadence, Kind, Observed};
use crate::residual::{self, Look, Residuals};
use crate::sample::{self, Sample};
use crate::session::{Model, Session};
use data::{Batch, DataError};
use engine::Backend;
use models::run::{train_loop, Driver, End, LoopCadence, MetricsRow, Parts, Written};
use models::ModelError;
use serde::{Deserialize, Serialize};
use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;
use std::sync::Arc;

/// How often the loss is read back, in steps (and after step 1 and the last step).
pub const LOSS_EVERY: usize = 5;
/// Steps the time per step is averaged over (whole loss-read intervals).
const SPEED_WINDOW: usize = 10;
/// How often the run's checkpoint is refreshed in memory (and at the end).
pub const KEEP_EVERY: usize = 25;

/// What a run reports as it trains.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum Event {
    /// A step was submitted.
    Step(usize),
    /// The loss of a step, read back.
    Loss { step: usize, loss: f32 },
    /// Milliseconds a step, averaged over the recent steps, of `tokens` each.
    Speed { ms: f64, tokens: usize },
    /// A reading of one kind (`observed.rs`), which the run keeps.
    Observed(Observed),
    /// One sequence's residual stream at every depth, as the viewer asked: shown, not kept.
    Residuals(Residuals),
    /// The run's checkpoint, in the format `resmem train` writes.
    Checkpoint {
        step: usize,
        /// Carried beside the message between threads (`worker.rs`), not in it.
        #[serde(skip)]
        bytes: Arc<Vec<u8>>,
    },
    /// Text the model wrote after the prompt.
    Sample(Sample),
}

/// What the page wants while a job runs; it may change at any time.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Steering {
    /// Stop after the current step.
    pub stop: bool,
    /// What a residual viewer wants read, while one is open.
    pub residuals: Option<Look>,
    /// The prompt a sample continues.
    pub prompt: String,
}

/// The handle through which a job reads what the page wants: the page (or, in the CPU
/// engine's worker, the page's messages) writes it, the job reads it between steps.
#[derive(Clone, Default)]
pub struct Steer(Rc<RefCell<Steering>>);

impl Steer {
    pub fn set(&self, s: Steering) {
        *self.0.borrow_mut() = s;
    }

    pub fn get(&self) -> Steering {
        self.0.borrow().clone()
    }

    pub fn stopping(&self) -> bool {
        self.0.borrow().stop
    }

    /// A job that trains clears an old Stop.
    pub fn go(&self) {
        self.0.borrow_mut().stop = false;
    }

    /// The viewer's token, or the first sequence's first.
    pub fn look(&self) -> Look {
        self.0.borrow().residuals.clone().unwrap_or_default()
    }
}

/// Trains until the schedule ends or the page asks it to stop, yielding to the page between steps: the
/// loop `resmem train` runs, driven by the page (its readbacks awaited, never blocked on).
pub async fn train<B: Backend + 'static>(
    session: &mut Session<B>,
    steer: &Steer,
    emit: &dyn Fn(Event),
) -> Result<(), String> {
    // A continued run starts past step 0.
    let first = session.trainer.step;
    let cadence = LoopCadence {
        log_every: LOSS_EVERY,
        // The page has no held-out batches: it never evaluates.
        eval_every: 0,
        checkpoint_every: KEEP_EVERY,
        log_on_stop: true,
        ..LoopCadence::of(&session.cfg)
    };
    let mut page = Page {
        session,
        steer,
        emit,
        intervals: VecDeque::new(),
        sampled_at: first,
    };
    let end = train_loop::train(&mut page, &cadence).await.map_err(|Failure(e)| e)?;
    let Page {
        session,
        steer,
        sampled_at,
        ..
    } = page;
    match end {
        End::Finished | End::Stopped { .. } => {}
        End::Diverged { step, sum } => {
            return Err(format!(
                "the loss became {sum} by step {step}; lower the learning rate (now {}) and start again",
                session.cfg.train.lr
            ))
        }
        End::NoBatch { step, error } => return Err(format!("cannot draw the batch of step {}: {error}", step + 1)),
    }
    // However the loop ended (the schedule, or Stop at any point of a step), the last step
    // trained has its checkpoint (the loop's) and a sample.
    let n = session.trainer.step;
    if n > first && sampled_at != n {
        emit(Event::Sample(sample::draw(session, n, &steer.get().prompt).await?));
    }
    Ok(())
}

/// The page's errors are messages; the loop's device errors become one.
struct Failure(String);

impl From<ModelError> for Failure {
    fn from(e: ModelError) -> Self {
        Failure(e.to_string())
    }
}

impl From<String> for Failure {
    fn from(e: String) -> Self {
        Failure(e)
    }
}

/// The page's driver of the loop: events for the views, and what the page wants.
struct Page<'a, B: Backend + 'static> {
    session: &'a mut Session<B>,
    steer: &'a Steer,
    emit: &'a dyn Fn(Event),
    /// (steps, milliseconds) of each interval between loss reads.
    intervals: VecDeque<(usize, f64)>,
    sampled_at: usize,
}

impl<B: Backend + 'static> Driver<B, Model<B>> for Page<'_, B> {
    type Error = Failure;

    fn parts(&mut self) -> Parts<'_, B, Model<B>> {
        Parts {
            be: &self.session.be,
            trainer: &mut self.session.trainer,
            held_out: &[],
        }
    }

    fn batch(&self, done: u64) -> Result<Batch, DataError> {
        self.session.batch(done)
    }

    fn now(&self) -> f64 {
        js_sys::Date::now() / 1000.0
    }

    fn stop(&self) -> bool {
        self.steer.stopping()
    }

    async fn stepped(&mut self, step: usize, batch: &Batch) -> Result<(), Failure> {
        self.session.stepped(batch.clone());
        (self.emit)(Event::Step(step));
        // Return to the event loop, so the page stays responsive, before awaiting any map.
        gloo_timers::future::TimeoutFuture::new(0).await;
        let emit = |o| (self.emit)(Event::Observed(o));
        let kinds = Kind::due(Cadence::EveryStep, step);
        Ok(observe_each(self.session, kinds, step, &self.steer.look(), &emit).await?)
    }

    async fn logged(&mut self, row: &MetricsRow, why: Written) -> Result<(), Failure> {
        let n = row.step as usize;
        // The loop's rows hold the f32 the device computed, widened: narrowing is exact.
        let loss = row.loss.unwrap_or(f64::NAN) as f32;
        let intervals = &mut self.intervals;
        intervals.push_back((why.steps, why.seconds * 1000.0));
        while intervals.iter().map(|i| i.0).sum::<usize>() - intervals[0].0 >= SPEED_WINDOW {
            intervals.pop_front();
        }
        let (k, ms) = intervals.iter().fold((0, 0.0), |(k, ms), i| (k + i.0, ms + i.1));
        (self.emit)(Event::Loss { step: n, loss });
        (self.emit)(Event::Speed {
            ms: ms / k.max(1) as f64,
            tokens: self.session.tokens_per_step(),
        });
        // The step's forward is read first: the kinds that only read it, then the residuals
        // (whose lens rewrites the head's buffers), then the kinds with a forward of their own.
        let emit = |o| (self.emit)(Event::Observed(o));
        let at = self.steer.look();
        observe_each(self.session, Kind::due(Cadence::Measured, n), n, &at, &emit).await?;
        let look = (self.steer.get().residuals).filter(|_| n == 1 || n.is_multiple_of(residual::READ_EVERY));
        let read = match &look {
            Some(look) => Some(self.session.residuals(look.seq, look.token).await?),
            None => None,
        };
        observe_each(self.session, Kind::due(Cadence::MeasuredForward, n), n, &at, &emit).await?;
        // Last: attribution and ablation run forwards of their own.
        if let (Some(look), Some(read)) = (look, read) {
            let interventions = self.session.intervene(&look).await?;
            (self.emit)(Event::Residuals(Residuals {
                step: n,
                interventions,
                ..read
            }));
        }
        if n.is_multiple_of(sample::EVERY) {
            (self.emit)(Event::Sample(
                sample::draw(self.session, n, &self.steer.get().prompt).await?,
            ));
            self.sampled_at = n;
        }
        Ok(())
    }

    async fn checkpoint(&mut self, _step: usize, _ending: bool) -> Result<(), Failure> {
        Ok(keep(self.session, self.emit).await?)
    }
}

async fn keep<B: Backend + 'static>(session: &Session<B>, emit: &dyn Fn(Event)) -> Result<(), String> {
    let bytes = Arc::new(session.checkpoint().await?);
    emit(Event::Checkpoint {
        step: session.trainer.step,
        bytes,
    });
    Ok(())
}
