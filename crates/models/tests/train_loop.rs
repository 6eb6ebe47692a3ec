//! The one training loop (`run::train_loop`), through a driver that records what it is told:
//! a blocking driver and one whose every hook yields to its executor train the same bits as
//! `Trainer::step` called by hand; rows, evaluations and checkpoints follow the cadence; a
//! stop, a batch that cannot be drawn and a NaN each end the run as documented.

use data::{Batch, BatchSource, DataError, DataSource, Task};
use engine::cpu::CpuBackend;
use engine::Backend;
use resmem_models::checkpoint::TrainState;
use resmem_models::run::{train_loop, Driver, End, LoopCadence, MetricsRow, Parts, Written};
use resmem_models::{LanguageModel, Purpose, RunConfig, Trainer};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

type Be = CpuBackend<f32>;
type Model = Box<dyn LanguageModel<Be>>;

/// A future that is pending once (waking itself) before it completes: what an asynchronous
/// readback looks like to the loop.
struct YieldOnce(bool);

impl Future for YieldOnce {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.0 {
            return Poll::Ready(());
        }
        self.0 = true;
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

struct Recorder {
    be: Be,
    trainer: Trainer<Be, Model>,
    train: BatchSource,
    held_out: Vec<Batch>,
    /// Every hook yields once first.
    yields: bool,
    /// `stop` answers true once this many steps are done.
    stop_at: Option<usize>,
    /// The batch after this many steps cannot be drawn.
    no_batch_at: Option<u64>,
    /// After this step, the parameters become NaN.
    poison_after: Option<usize>,
    /// After this step, the parameters poisoned are put back.
    heal_after: Option<usize>,
    poisoned: Vec<f32>,
    clock: std::cell::Cell<f64>,
    stepped: Vec<usize>,
    rows: Vec<(MetricsRow, Written)>,
    checkpoints: Vec<(usize, bool, TrainState)>,
}

impl Recorder {
    fn new(cfg: &RunConfig, held_out: usize) -> Self {
        let be = Be::new();
        let (b, t, seed) = (cfg.train.batch, cfg.data.seq_len(), cfg.train.seed);
        let model = cfg.build(&be, b, t, Purpose::Train).unwrap();
        let trainer = Trainer::new(&be, model, cfg.train.clone()).unwrap();
        let source = DataSource::Task(Task::Copy);
        Self {
            train: source.train(b, t, seed).unwrap(),
            held_out: source.held_out(b, t, seed, held_out).unwrap(),
            be,
            trainer,
            yields: false,
            stop_at: None,
            no_batch_at: None,
            poison_after: None,
            heal_after: None,
            poisoned: vec![],
            clock: std::cell::Cell::new(0.0),
            stepped: vec![],
            rows: vec![],
            checkpoints: vec![],
        }
    }

    async fn pause(&self) {
        if self.yields {
            YieldOnce(false).await;
        }
    }

    fn run(&mut self, cadence: &LoopCadence) -> End {
        pollster::block_on(train_loop::train(self, cadence)).unwrap()
    }

    fn row_steps(&self) -> Vec<u64> {
        self.rows.iter().map(|(r, _)| r.step).collect()
    }

    fn checkpoint_steps(&self) -> Vec<(usize, bool)> {
        self.checkpoints.iter().map(|c| (c.0, c.1)).collect()
    }
}

impl Driver<Be, Model> for Recorder {
    type Error = resmem_models::ModelError;

    fn parts(&mut self) -> Parts<'_, Be, Model> {
        Parts {
            be: &self.be,
            trainer: &mut self.trainer,
            held_out: &self.held_out,
        }
    }

    fn batch(&self, done: u64) -> Result<Batch, DataError> {
        if self.no_batch_at == Some(done) {
            return Err(DataError::Invalid("the corpus changed".into()));
        }
        self.train.batch(done)
    }

    fn now(&self) -> f64 {
        // Each reading a second later: rows' timings are then a function of the calls.
        self.clock.set(self.clock.get() + 1.0);
        self.clock.get()
    }

    fn stop(&self) -> bool {
        self.stop_at.is_some_and(|s| self.trainer.step >= s)
    }

    async fn stepped(&mut self, step: usize, batch: &Batch) -> Result<(), Self::Error> {
        self.pause().await;
        assert_eq!(batch.b, self.trainer.cfg.batch, "the step's batch is handed on");
        self.stepped.push(step);
        let params = &self.trainer.model.store().params;
        if self.poison_after == Some(step) {
            self.poisoned = self.be.read(params).await?;
            self.be.write(params, &vec![f32::NAN; self.poisoned.len()]);
        }
        if self.heal_after == Some(step) {
            self.be.write(params, &self.poisoned);
        }
        Ok(())
    }

    async fn logged(&mut self, row: &MetricsRow, why: Written) -> Result<(), Self::Error> {
        self.pause().await;
        self.rows.push((row.clone(), why));
        Ok(())
    }

    async fn checkpoint(&mut self, step: usize, ending: bool) -> Result<(), Self::Error> {
        self.pause().await;
        let state = self.trainer.state(&self.be).await?;
        assert_eq!(state.step, step as u64);
        self.checkpoints.push((step, ending, state));
        Ok(())
    }
}

fn config(steps: usize) -> RunConfig {
    let mut cfg = RunConfig::preset("tiny-rmt").unwrap();
    cfg.train.steps = steps;
    cfg.train.batch = 4;
    assert!(cfg.model.z_loss() > 0.0, "the rows' totals need a z-loss");
    cfg
}

fn cadence(steps: usize, log_every: usize, eval_every: usize, checkpoint_every: usize) -> LoopCadence {
    LoopCadence {
        log_every,
        eval_every,
        checkpoint_every,
        ..LoopCadence::of(&config(steps))
    }
}

/// The bits of a row that must not depend on the driver (timings aside).
fn losses(r: &Recorder) -> Vec<[Option<u64>; 5]> {
    r.rows
        .iter()
        .map(|(row, _)| [row.loss, row.lr, row.total, row.val_loss, row.val_total].map(|v| v.map(f64::to_bits)))
        .collect()
}

#[test]
fn blocking_and_yielding_drivers_train_the_same_bits_as_steps_by_hand() {
    let cfg = config(7);
    let c = cadence(7, 2, 3, 4);
    let mut blocking = Recorder::new(&cfg, 2);
    let mut yielding = Recorder::new(&cfg, 2);
    yielding.yields = true;
    assert!(matches!(blocking.run(&c), End::Finished));
    assert!(matches!(yielding.run(&c), End::Finished));
    assert_eq!(losses(&blocking), losses(&yielding));
    assert_eq!(blocking.checkpoints.len(), yielding.checkpoints.len());
    for (a, b) in blocking.checkpoints.iter().zip(&yielding.checkpoints) {
        assert_eq!(a.2.params, b.2.params);
        assert_eq!((&a.2.m, &a.2.v), (&b.2.m, &b.2.v));
    }
    // By hand: step k trains on batch k − 1; the loop's reads between steps change nothing.
    let mut by_hand = Recorder::new(&cfg, 2);
    let mut loss_at = vec![];
    for k in 0..7u64 {
        let batch = by_hand.train.batch(k).unwrap();
        let lr = by_hand.trainer.step(&by_hand.be, &batch).unwrap();
        let loss = pollster::block_on(by_hand.trainer.loss(&by_hand.be)).unwrap();
        loss_at.push((f64::from(loss).to_bits(), f64::from(lr).to_bits()));
    }
    for (row, _) in &blocking.rows {
        let (loss, lr) = loss_at[row.step as usize - 1];
        assert_eq!(
            (row.loss.map(f64::to_bits), row.lr.map(f64::to_bits)),
            (Some(loss), Some(lr))
        );
    }
    let end = pollster::block_on(by_hand.trainer.state(&by_hand.be)).unwrap();
    assert_eq!(blocking.checkpoints.last().unwrap().2.params, end.params);
}

#[test]
fn rows_evaluations_and_checkpoints_follow_the_cadence() {
    let mut r = Recorder::new(&config(7), 2);
    assert!(matches!(r.run(&cadence(7, 3, 4, 5)), End::Finished));
    assert_eq!(r.stepped, [1, 2, 3, 4, 5, 6, 7]);
    // A row after step 1, every 3 steps, at evaluations (4, and the last) and checkpoints (5).
    assert_eq!(r.row_steps(), [1, 3, 4, 5, 6, 7]);
    let evaluated: Vec<u64> = r
        .rows
        .iter()
        .filter(|(row, _)| row.val_loss.is_some())
        .map(|(row, _)| row.step)
        .collect();
    assert_eq!(evaluated, [4, 7]);
    for (row, why) in &r.rows {
        assert_eq!(why.eval, row.val_loss.is_some());
        assert_eq!(row.val_total.is_some(), why.eval, "a z-loss gives held-out totals");
        assert!(row.total.is_some() && row.loss.is_some() && row.lr.is_some());
        assert_eq!(why.log, row.step == 1 || row.step % 3 == 0 || row.step == 7);
        assert_eq!(why.save, row.step == 5 || row.step == 7);
        assert_eq!(why.last, row.step == 7);
    }
    // Each row's time covers the steps since the previous row.
    let steps: Vec<usize> = r.rows.iter().map(|(_, why)| why.steps).collect();
    assert_eq!(steps, [1, 2, 1, 1, 1, 1]);
    assert_eq!(r.checkpoint_steps(), [(5, false), (7, true)]);
    // Without held-out batches there is no evaluation, even at the last step.
    let mut r = Recorder::new(&config(4), 0);
    assert!(matches!(r.run(&cadence(4, 2, 1, 0)), End::Finished));
    assert!(r.rows.iter().all(|(row, _)| row.val_loss.is_none()));
    assert_eq!(r.row_steps(), [1, 2, 4]);
}

#[test]
fn a_stop_keeps_the_last_finished_step() {
    // The command line's: no row for the stopped step, so that a resumed run's rows are the
    // uninterrupted run's; a checkpoint of it.
    let mut cli = Recorder::new(&config(20), 1);
    cli.stop_at = Some(4);
    assert!(matches!(cli.run(&cadence(20, 3, 0, 0)), End::Stopped { step: 4 }));
    assert_eq!(cli.row_steps(), [1, 3]);
    assert_eq!(cli.checkpoint_steps(), [(4, true)]);
    // The page's: a row of the stopped step first.
    let mut page = Recorder::new(&config(20), 0);
    page.stop_at = Some(4);
    let c = LoopCadence {
        log_on_stop: true,
        ..cadence(20, 3, 0, 0)
    };
    assert!(matches!(page.run(&c), End::Stopped { step: 4 }));
    assert_eq!(page.row_steps(), [1, 3, 4]);
    assert!(page.rows[2].1.last);
    assert_eq!(page.checkpoint_steps(), [(4, true)]);
    // A stop right after a row and a checkpoint writes neither again.
    let mut r = Recorder::new(&config(20), 0);
    r.stop_at = Some(6);
    assert!(matches!(
        r.run(&LoopCadence {
            log_on_stop: true,
            ..cadence(20, 3, 0, 6)
        }),
        End::Stopped { step: 6 }
    ));
    assert_eq!(r.row_steps(), [1, 3, 6]);
    assert_eq!(r.checkpoint_steps(), [(6, false)]);
    // Asked before any step: nothing trains, and the state it started from is kept.
    let mut r = Recorder::new(&config(20), 0);
    r.stop_at = Some(0);
    assert!(matches!(r.run(&cadence(20, 3, 0, 0)), End::Stopped { step: 0 }));
    assert!(r.rows.is_empty() && r.stepped.is_empty());
    assert_eq!(r.checkpoint_steps(), [(0, true)]);
}

#[test]
fn a_batch_that_cannot_be_drawn_keeps_the_steps_before_it() {
    let mut r = Recorder::new(&config(20), 0);
    r.no_batch_at = Some(5);
    match r.run(&cadence(20, 2, 0, 0)) {
        End::NoBatch { step: 5, error } => assert!(error.to_string().contains("corpus changed"), "{error}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(r.stepped, [1, 2, 3, 4, 5]);
    assert_eq!(r.checkpoint_steps(), [(5, true)]);
}

#[test]
fn a_nan_at_any_step_ends_the_run_without_a_checkpoint_after_it() {
    // NaN parameters for step 3 alone, a step without a row: the row of step 4 has a finite
    // loss, but every loss since the last row is checked, and no checkpoint is written.
    let mut r = Recorder::new(&config(20), 0);
    (r.poison_after, r.heal_after) = (Some(2), Some(3));
    assert!(matches!(r.run(&cadence(20, 4, 0, 4)), End::Diverged { step: 4, sum } if sum.is_nan()));
    assert!(pollster::block_on(r.trainer.loss(&r.be)).unwrap().is_finite());
    assert_eq!(r.row_steps(), [1]);
    assert!(r.checkpoints.is_empty(), "no checkpoint of a diverged state");
    // A stop checks before it keeps anything.
    let mut r = Recorder::new(&config(20), 0);
    r.poison_after = Some(2);
    r.stop_at = Some(3);
    assert!(matches!(r.run(&cadence(20, 10, 0, 0)), End::Diverged { step: 3, .. }));
    assert!(r.checkpoints.is_empty());
    // So does a batch that cannot be drawn.
    let mut r = Recorder::new(&config(20), 0);
    r.poison_after = Some(2);
    r.no_batch_at = Some(3);
    assert!(matches!(r.run(&cadence(20, 10, 0, 0)), End::NoBatch { step: 3, .. }));
    assert!(r.checkpoints.is_empty());
}
