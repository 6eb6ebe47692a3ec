//! The training loop of one run: it steps until the schedule ends or it is asked to stop, and
//! emits what it reads as events. It reads the loss every few steps, not every step, the bucket
//! counts of every table in one readback a step, the residuals only while a viewer wants them,
//! the variance probes every few steps, a sample every few hundred steps and at the end, and
//! keeps a checkpoint in memory every few steps, so that a lost device loses little.

use crate::residual::{self, Residuals};
use crate::sample::{self, Sample};
use crate::session::Session;
use engine::Backend;
use models::buckets::BucketCounts;
use models::probes::Measured;
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use std::sync::Arc;

/// How often the loss is read back, in steps (and after step 1 and the last step).
pub const LOSS_EVERY: usize = 5;
/// How often the variance probes run (after step 1, then every this many steps): each
/// measurement costs about one more forward and backward.
pub const MEASURE_EVERY: usize = 10;
/// Steps whose bucket hits the histograms sum.
pub const BUCKET_WINDOW: usize = 10;
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
    /// Variance ratios measured on a step's batch.
    Measured { step: usize, measured: Vec<Measured> },
    /// Bucket hits of every hashed layer, summed over the last steps.
    Buckets(Vec<BucketCounts>),
    /// One sequence's residual stream at every depth.
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

/// What the page asks of the loop while it runs.
pub struct Wants<'a> {
    /// Stop after the current step.
    pub stop: &'a dyn Fn() -> bool,
    /// The sequence whose residuals a viewer wants, while one is open.
    pub residuals: &'a dyn Fn() -> Option<usize>,
    /// The prompt to continue when a sample is due.
    pub prompt: &'a dyn Fn() -> String,
}

/// Trains until the schedule ends or `wants.stop`, yielding to the page between steps.
pub async fn train<B: Backend + 'static>(
    session: &mut Session<B>,
    wants: Wants<'_>,
    emit: &dyn Fn(Event),
) -> Result<(), String> {
    let steps = session.cfg.train.steps;
    let mut window: VecDeque<Vec<BucketCounts>> = VecDeque::new();
    // (steps, milliseconds) of each interval between loss reads.
    let mut intervals: VecDeque<(usize, f64)> = VecDeque::new();
    // A continued run starts past step 0.
    let first_step = session.trainer.step;
    let (mut since, mut last_read) = (None::<f64>, first_step);
    let (mut kept_at, mut sampled_at) = (first_step, first_step);
    while !(wants.stop)() && session.trainer.step < steps {
        since.get_or_insert_with(js_sys::Date::now);
        session.step()?;
        let n = session.trainer.step;
        emit(Event::Step(n));
        // Return to the event loop, so the page stays responsive, before awaiting any map.
        gloo_timers::future::TimeoutFuture::new(0).await;
        let counts = session.bucket_counts().await?;
        if !counts.is_empty() {
            window.push_back(counts);
            if window.len() > BUCKET_WINDOW {
                window.pop_front();
            }
            emit(Event::Buckets(summed(&window)));
        }
        let last = n == steps || (wants.stop)();
        if !(n == 1 || n.is_multiple_of(LOSS_EVERY) || last) {
            continue;
        }
        // The read waits for the GPU: the interval since the first step after the last read is
        // the steps' time, without the views' reads below.
        let loss = session.loss().await?;
        intervals.push_back((n - last_read, js_sys::Date::now() - since.take().unwrap_or_default()));
        last_read = n;
        while intervals.iter().map(|i| i.0).sum::<usize>() - intervals[0].0 >= SPEED_WINDOW {
            intervals.pop_front();
        }
        let (k, ms) = intervals.iter().fold((0, 0.0), |(k, ms), i| (k + i.0, ms + i.1));
        emit(Event::Loss { step: n, loss });
        emit(Event::Speed {
            ms: ms / k.max(1) as f64,
            tokens: session.tokens_per_step(),
        });
        if !loss.is_finite() {
            return Err(format!(
                "the loss became {loss} at step {n}; lower the learning rate (now {}) and start again",
                session.cfg.train.lr
            ));
        }
        // Before the probes run a forward of their own: these are the step's residuals.
        if let Some(seq) = (wants.residuals)().filter(|_| n == 1 || n.is_multiple_of(residual::READ_EVERY)) {
            let (depths, inputs) = session.residuals(seq).await?;
            emit(Event::Residuals(Residuals {
                step: n,
                seq,
                depths,
                inputs,
            }));
        }
        if n == 1 || n.is_multiple_of(MEASURE_EVERY) {
            if let Some(measured) = session.measure().await? {
                emit(Event::Measured { step: n, measured });
            }
        }
        if n.is_multiple_of(KEEP_EVERY) {
            keep(session, emit).await?;
            kept_at = n;
        }
        if n.is_multiple_of(sample::EVERY) {
            emit(Event::Sample(sample::draw(session, n, &(wants.prompt)()).await?));
            sampled_at = n;
        }
    }
    // However the loop ended (the schedule, or Stop at any point of a step), the last step
    // trained has its checkpoint and a sample.
    let n = session.trainer.step;
    if n > first_step && kept_at != n {
        keep(session, emit).await?;
    }
    if n > first_step && sampled_at != n {
        emit(Event::Sample(sample::draw(session, n, &(wants.prompt)()).await?));
    }
    Ok(())
}

async fn keep<B: Backend + 'static>(session: &Session<B>, emit: &dyn Fn(Event)) -> Result<(), String> {
    let bytes = Arc::new(session.checkpoint().await?);
    emit(Event::Checkpoint {
        step: session.trainer.step,
        bytes,
    });
    Ok(())
}

/// Hits of every layer and table, summed over the window's steps.
fn summed(window: &VecDeque<Vec<BucketCounts>>) -> Vec<BucketCounts> {
    let mut sum = window[0].clone();
    for w in window.iter().skip(1) {
        sum.iter_mut().zip(w).for_each(|(a, b)| a.accumulate(b));
    }
    sum
}
