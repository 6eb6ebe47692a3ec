//! What a device does for the page, and what it tells the page as it goes: training runs,
//! continuing one from its checkpoint, importing a checkpoint, sampling. The same code runs on
//! the page's thread for the GPU and in the CPU engine's Web Worker (`worker.rs`), so a job
//! takes plain data in ([`Job`], and what the page wants as it changes, through a [`Steer`]
//! handle) and gives plain data out ([`Report`]), which the page applies to what it shows.

use crate::dataset::Dataset;
use crate::interventions::Patching;
use crate::observed::{self, Kind, Observed};
use crate::residual::{Look, Residuals};
use crate::runs::RunState;
use crate::sample;
use crate::session::{check_limits, Session};
use crate::setup::Setup;
use crate::training::{self, Event, Steer};
use engine::Backend;
use models::checkpoint;
use models::count::thousands;
use models::RunConfig;
use serde::{Deserialize, Serialize};
use std::cell::Cell;
use std::sync::Arc;

/// What the page asks of the device.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum Job {
    /// New runs of these setups, one after another, numbered from `first_id`.
    Train { first_id: usize, setups: Vec<Setup> },
    /// Run `id` trains on from its checkpoint.
    Continue {
        id: usize,
        data: Dataset,
        #[serde(skip)]
        checkpoint: Arc<Vec<u8>>,
    },
    /// A checkpoint file becomes run `id`, to look at.
    Import {
        id: usize,
        name: String,
        #[serde(skip)]
        bytes: Arc<Vec<u8>>,
    },
    /// Run `id`'s checkpoint, of `step`, continues the prompt.
    Sample {
        id: usize,
        data: Dataset,
        step: usize,
        #[serde(skip)]
        checkpoint: Arc<Vec<u8>>,
    },
    /// Run `id`'s checkpoint, of `step`, read again as the viewer now asks (the sequence, the
    /// token, the ablation, the prompts to patch), on its first held-out batch.
    Look {
        id: usize,
        data: Dataset,
        step: usize,
        #[serde(skip)]
        checkpoint: Arc<Vec<u8>>,
        /// The patching shown for this checkpoint, kept where the prompts did not change.
        patched: Option<Box<Patching>>,
    },
    /// Every kernel family on the device against its CPU twin (`engine::selftest`).
    Selftest,
}

/// What the device tells the page.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum Report {
    /// The device is ready to take jobs: what it is.
    Ready(String),
    /// A line for the status bar.
    Status(String),
    /// Runs train (Stop applies) or no longer do.
    Training(bool),
    /// Run `id` is about to be built: a new run of `setup`, or (None) one continued.
    Begin {
        id: usize,
        new: Option<(Setup, String)>,
    },
    /// Run `id`'s model is built, at `step` (0, or its checkpoint's).
    Built {
        id: usize,
        params: usize,
        step: usize,
    },
    /// A checkpoint file became run `id`.
    Imported {
        id: usize,
        name: String,
        setup: Setup,
        model: String,
        params: usize,
        step: usize,
    },
    /// What run `id` read as it trained or was looked at.
    Event {
        id: usize,
        event: Event,
    },
    State {
        id: usize,
        state: RunState,
    },
    /// The selftest's rows, one per kernel family, on the device described; or why it could
    /// not run.
    Selftest {
        device: String,
        families: Result<Vec<engine::selftest::Family>, String>,
    },
    /// The GPU device was lost, for this reason.
    Lost(String),
    /// The job is over; the device takes another.
    Done,
    /// The engine hit a bug and stopped.
    Crashed(String),
}

/// How a report reaches the page.
pub type Tell<'a> = &'a dyn Fn(Report);

/// What a job is handed besides its device: what the page wants, and how to tell it.
#[derive(Clone, Copy)]
pub struct Page<'a> {
    pub steer: &'a Steer,
    pub tell: Tell<'a>,
}

impl Page<'_> {
    fn tell(&self, report: Report) {
        (self.tell)(report)
    }
}

/// Does `job` on `be`, whose buffers may be up to `limit` bytes, telling the page as it goes,
/// and gives the backend back. Every job ends with [`Report::Done`].
pub async fn run<B: Backend + 'static>(mut be: B, limit: u64, job: Job, page: Page<'_>) -> B {
    let tell = page.tell;
    match job {
        Job::Train { first_id, setups } => be = train(be, limit, first_id, setups, page).await,
        Job::Continue { id, data, checkpoint } => match checkpoint_config(&checkpoint) {
            Ok(cfg) => {
                start_training(page);
                (be, _) = train_run(be, limit, id, cfg, data, None, Some(checkpoint), page).await;
                tell(Report::Training(false));
            }
            Err(e) => tell(Report::Status(format!("Cannot continue run #{id}: {e}"))),
        },
        Job::Import { id, name, bytes } => be = import(be, limit, id, &name, bytes, page).await,
        Job::Sample {
            id,
            data,
            step,
            checkpoint,
        } => be = sample_from(be, limit, id, data, step, &checkpoint, page).await,
        Job::Look {
            id,
            data,
            step,
            checkpoint,
            patched,
        } => be = look_again(be, limit, (id, data, step), &checkpoint, patched, page).await,
        Job::Selftest => {
            tell(Report::Status("Checking every kernel against the CPU…".into()));
            let families = engine::selftest::run(&be)
                .await
                .map(|checks| engine::selftest::by_family(&checks))
                .map_err(|e| e.to_string());
            tell(Report::Selftest {
                device: be.describe(),
                families,
            });
        }
    }
    tell(Report::Done);
    be
}

fn start_training(page: Page) {
    page.steer.go();
    page.tell(Report::Training(true));
}

/// New runs, one after another, until one fails or Stop.
async fn train<B: Backend + 'static>(mut be: B, limit: u64, first_id: usize, setups: Vec<Setup>, page: Page<'_>) -> B {
    let tell = page.tell;
    // Every config is checked, against the device's limits too, before anything is built.
    let mut planned = vec![];
    for s in setups {
        match s.config().and_then(|cfg| check_limits(&cfg, limit).map(|_| cfg)) {
            Ok(cfg) => planned.push((s, cfg)),
            Err(e) => {
                tell(Report::Status(format!(
                    "Refused before building anything: {e}. Change it and press Start again."
                )));
                return be;
            }
        }
    }
    start_training(page);
    for (id, (s, cfg)) in (first_id..).zip(planned) {
        if page.steer.stopping() {
            break;
        }
        let model = cfg.model.describe();
        let data = s.data;
        let ok;
        (be, ok) = train_run(be, limit, id, cfg, data, Some((s, model)), None, page).await;
        if !ok {
            break;
        }
    }
    tell(Report::Training(false));
    be
}

/// The run config inside a checkpoint file, checked.
pub fn checkpoint_config(bytes: &[u8]) -> Result<RunConfig, String> {
    let text = checkpoint::config_of(bytes).map_err(|e| e.to_string())?;
    RunConfig::from_toml(&text).map_err(|e| format!("its config is not one this page reads: {e}"))
}

/// Trains run `id` (new, or from `from`, a checkpoint) until its schedule ends or Stop; false
/// when it failed and later runs should not start.
#[allow(clippy::too_many_arguments)]
async fn train_run<B: Backend + 'static>(
    be: B,
    limit: u64,
    id: usize,
    cfg: RunConfig,
    data: Dataset,
    new: Option<(Setup, String)>,
    from: Option<Arc<Vec<u8>>>,
    page: Page<'_>,
) -> (B, bool) {
    let tell = page.tell;
    let label = cfg.arch().label();
    tell(Report::Begin { id, new });
    let mut session = match Session::open(be, cfg, data, limit, from.as_deref().map(|b| &b[..])).await {
        Ok(session) => session,
        Err((back, e)) => {
            tell(Report::Status(format!("Cannot build the model: {e}")));
            tell(Report::State {
                id,
                state: RunState::Failed(e),
            });
            return (back, false);
        }
    };
    tell(Report::Status(format!(
        "Training a {}-parameter {label} on {} ({}){}",
        thousands(session.params as u64),
        data.label(),
        session.be.describe(),
        match from {
            Some(_) => format!(", from step {}", session.trainer.step),
            None => String::new(),
        }
    )));
    tell(Report::Built {
        id,
        params: session.params,
        step: session.trainer.step,
    });
    // The step of the newest checkpoint, which a lost device's run continues from.
    let kept = Cell::new(from.is_some().then_some(session.trainer.step));
    let emit = |event: Event| {
        if let Event::Checkpoint { step, .. } = event {
            kept.set(Some(step));
        }
        tell(Report::Event { id, event })
    };
    let outcome = training::train(&mut session, page.steer, &emit).await;
    let n = session.trainer.step;
    let be = session.be;
    let Err(e) = outcome else {
        tell(Report::State {
            id,
            state: RunState::Stopped,
        });
        tell(Report::Status(format!("Stopped after {n} steps.")));
        return (be, true);
    };
    let lost = be_lost(&be).await;
    let (status, state) = match (&lost, kept.get()) {
        (Some(reason), Some(k)) => (
            format!(
                "The GPU device was lost at step {n} ({reason}). Run #{id} kept its checkpoint of step {k}: \
                 make a new device, then press \"continue\" to train on from there."
            ),
            RunState::Interrupted(format!("the device was lost at step {n}")),
        ),
        (Some(reason), None) => (
            format!(
                "The GPU device was lost at step {n} ({reason}), before run #{id} kept a checkpoint: make a new \
                 device and start again."
            ),
            RunState::Failed(format!("the device was lost at step {n}")),
        ),
        _ => (format!("Training failed: {e}"), RunState::Failed(e)),
    };
    if let Some(reason) = lost {
        tell(Report::Lost(reason));
    }
    tell(Report::Status(status));
    tell(Report::State { id, state });
    (be, false)
}

/// Why the backend's device was lost, after a failure; None for the CPU, which cannot be.
/// The browser may report the loss after the failed read that revealed it (or not to wgpu at
/// all), so a one-value round trip decides: a live device reads back what was written.
async fn be_lost<B: Backend + 'static>(be: &B) -> Option<String> {
    if let Some(reason) = be.lost() {
        return Some(reason);
    }
    let probe = be.zeros("device check", 1).ok()?;
    be.write(&probe, &[1.0]);
    match be.read(&probe).await {
        Ok(v) if v == [1.0] => None,
        Ok(v) => Some(format!("it read back {v:?} for [1.0]")),
        Err(e) => Some(be.lost().unwrap_or(e.to_string())),
    }
}

/// A checkpoint file becomes a run: its weights on the first held-out batch, so that the views
/// show what `resmem analyze` computes for it, and a sample.
async fn import<B: Backend + 'static>(
    be: B,
    limit: u64,
    id: usize,
    name: &str,
    bytes: Arc<Vec<u8>>,
    page: Page<'_>,
) -> B {
    let tell = page.tell;
    let refuse = |e: String| tell(Report::Status(format!("Cannot import {name}: {e}")));
    let cfg = match checkpoint_config(&bytes) {
        Ok(cfg) => cfg,
        Err(e) => {
            refuse(e);
            return be;
        }
    };
    let Some(setup) = Setup::from_config(&cfg) else {
        refuse(format!(
            "it was trained on data this page does not have ({:?}); look at it with resmem analyze instead",
            cfg.data
        ));
        return be;
    };
    let data = setup.data;
    let mut session = match Session::open(be, cfg, data, limit, Some(&bytes)).await {
        Ok(s) => s,
        Err((back, e)) => {
            refuse(e);
            return back;
        }
    };
    let step = session.trainer.step;
    tell(Report::Imported {
        id,
        name: name.to_string(),
        setup,
        model: session.cfg.model.describe(),
        params: session.params,
        step,
    });
    let event = |event: Event| tell(Report::Event { id, event });
    event(Event::Checkpoint { step, bytes });
    let look = page.steer.look();
    let views = async {
        let loss = session.inspect().await?;
        event(Event::Loss { step, loss });
        // Every kind of reading, then the residuals: the variance probes' forward is of the
        // same batch and weights as the inspection's.
        let observed = |o: Observed| event(Event::Observed(o));
        observed::observe_each(&mut session, Kind::ALL, step, &look, &observed).await?;
        event(Event::Residuals(read_residuals(&mut session, step, &look).await?));
        event(Event::Sample(
            sample::draw(&mut session, step, &page.steer.get().prompt).await?,
        ));
        Ok::<f32, String>(loss)
    };
    match views.await {
        Ok(loss) => tell(Report::Status(format!(
            "Imported {name}: step {step}, held-out loss {loss:.4} ({})",
            session.be.describe()
        ))),
        Err(e) => refuse(e),
    }
    session.be
}

/// The residuals `look` asks for, on the batch the session read last: read first, then the
/// interventions, which run forwards of their own.
async fn read_residuals<B: Backend + 'static>(
    session: &mut Session<B>,
    step: usize,
    look: &Look,
) -> Result<Residuals, String> {
    let read = session.residuals(look.seq, look.token).await?;
    let interventions = session.intervene(look).await?;
    Ok(Residuals {
        step,
        interventions,
        ..read
    })
}

/// A session on the weights of a checkpoint the page keeps, or why not (the device comes back).
async fn open_checkpoint<B: Backend + 'static>(
    be: B,
    limit: u64,
    data: Dataset,
    bytes: &[u8],
) -> Result<Session<B>, (B, String)> {
    match checkpoint_config(bytes) {
        Ok(cfg) => Session::open(be, cfg, data, limit, Some(bytes)).await,
        Err(e) => Err((be, e)),
    }
}

/// Run `id`'s checkpoint, read again on its first held-out batch as the viewer asks now.
async fn look_again<B: Backend + 'static>(
    be: B,
    limit: u64,
    (id, data, step): (usize, Dataset, usize),
    bytes: &[u8],
    patched: Option<Box<Patching>>,
    page: Page<'_>,
) -> B {
    let tell = page.tell;
    let fail = |e: String| tell(Report::Status(format!("Cannot read run #{id} again: {e}")));
    let mut session = match open_checkpoint(be, limit, data, bytes).await {
        Ok(s) => s,
        Err((back, e)) => {
            fail(e);
            return back;
        }
    };
    if let Some(patched) = patched {
        session.reuse_patching(patched);
    }
    let look = page.steer.look();
    let read = async {
        session.inspect().await?;
        read_residuals(&mut session, step, &look).await
    };
    match read.await {
        Ok(residuals) => {
            tell(Report::Event {
                id,
                event: Event::Residuals(residuals),
            });
            tell(Report::Status(format!(
                "Read run #{id}'s checkpoint of step {step} again, on its first held-out batch."
            )));
        }
        Err(e) => fail(e),
    }
    session.be
}

/// Run `id`'s checkpoint continues the prompt.
async fn sample_from<B: Backend + 'static>(
    be: B,
    limit: u64,
    id: usize,
    data: Dataset,
    step: usize,
    bytes: &[u8],
    page: Page<'_>,
) -> B {
    let tell = page.tell;
    let fail = |e: String| tell(Report::Status(format!("Cannot sample from run #{id}: {e}")));
    let mut session = match open_checkpoint(be, limit, data, bytes).await {
        Ok(s) => s,
        Err((back, e)) => {
            fail(e);
            return back;
        }
    };
    match sample::draw(&mut session, step, &page.steer.get().prompt).await {
        Ok(s) => {
            tell(Report::Event {
                id,
                event: Event::Sample(s),
            });
            tell(Report::Status(format!("Sampled from run #{id} at step {step}.")));
        }
        Err(e) => fail(e),
    }
    session.be
}
