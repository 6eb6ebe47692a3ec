//! `resmem train`: resolve the run's config, claim its directory, and train with logging,
//! evaluation and checkpoints; `--resume` continues bit for bit from the newest checkpoint.

use crate::args::{BackendKind, TrainArgs};
use crate::console::{say, warn, Console};
use crate::corpus_identity::{self, CorpusIdentity};
use crate::drive::Cli;
use crate::resolve::{extension, read_config, refuse_overrides, resolve};
use crate::run_dir::{self, RunDir, BACKEND_FILE, CONFIG_FILE, METRICS_FILE, MODEL_FILE};
use crate::source;
use anyhow::{anyhow, bail, Context, Result};
use engine::Backend;
use models::checkpoint::{self, TrainState};
use models::run::{train_loop, End, LoopCadence};
use models::{Purpose, RunConfig, Trainer};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

pub fn run(args: TrainArgs) -> Result<()> {
    if args.list_presets {
        for p in models::run::presets() {
            say(&format!("{:<26} {}", p.name, p.about));
        }
        return Ok(());
    }
    let (cfg, dir, resuming, corpus) = match &args.resume {
        Some(path) => {
            refuse_overrides(&args)?;
            let dir = RunDir::resume(path)?;
            let mut cfg = read_config(&dir.file(CONFIG_FILE))?;
            // Before an extension is recorded: a refused resume changes nothing.
            let corpus = corpus_of(&cfg, &dir, true, args.corpus_changed)?;
            if let Some(steps) = extension(&args, &cfg)? {
                // Recorded before a step is taken: a resume after a kill continues the extension.
                let from = cfg.train.steps;
                cfg.train = cfg.train.extended(steps);
                cfg.validate()?;
                let text = cfg.to_toml()?;
                run_dir::write_atomic(&dir.file(CONFIG_FILE), |tmp| {
                    std::fs::write(tmp, &text).with_context(|| format!("cannot write {}", tmp.display()))
                })?;
                say(&format!(
                    "extending {} from {from} to {steps} steps: a new cycle of the schedule (warmup over {} steps, \
                     then cosine decay to the floor) from step {from}, recorded as train.restarts in its {CONFIG_FILE}",
                    dir.path.display(),
                    models::Schedule::new(&cfg.train).warmup(steps - from),
                ));
            }
            (cfg, dir, true, corpus)
        }
        None => {
            let mut cfg = resolve(&args)?;
            if let Some(from) = &args.init_from {
                // Absolute, so that a resume from another directory finds it.
                let from = std::path::absolute(from)
                    .with_context(|| format!("cannot resolve --init-from {}", from.display()))?;
                if !from.exists() {
                    bail!("--init-from {}: no such run or file", from.display());
                }
                cfg.train.init_from = Some(from.to_string_lossy().into_owned());
            }
            let out = args
                .out
                .as_ref()
                .ok_or_else(|| anyhow!("--out DIR is required for a new run"))?;
            let dir = RunDir::create(out)?;
            let corpus = corpus_of(&cfg, &dir, false, false)?;
            (cfg, dir, false, corpus)
        }
    };
    // Sized before a backend starts or a batch is drawn, so that a refusal costs nothing.
    let mut cfg = cfg;
    let data = source::open(&cfg.data)?;
    cfg.set_vocab(data.vocab);
    cfg.validate()?;
    let (b, t) = (cfg.train.batch, cfg.data.seq_len());
    // The held-out batches and a training batch.
    let host = crate::Host::batches(
        cfg.cadence.eval_batches + 1,
        b,
        t,
        "--eval-batches, --batch or --seq-len",
    );
    let (backend, trained_on) = match resuming {
        true => resumed_backend(&dir, &args),
        false => (crate::choose_backend(args.backend, None), None),
    };
    let precision = match resuming {
        true => resumed_precision(&dir, &cfg, trained_on.as_ref(), &args)?,
        false => cfg.train.precision,
    };
    crate::check_memory(&cfg.model, b, t, Purpose::Train, backend, host)?;
    let stop = stop_flag()?;
    let prepared = PreparedRun {
        backend,
        cfg,
        corpus,
        data,
        dir,
        resuming,
        trained_on,
        stop,
    };
    crate::with_backend!(backend, precision, be => prepared.train(be))
}

/// The corpus `cfg` trains on, checked against what a resumed run recorded; None on a task.
fn corpus_of(cfg: &RunConfig, dir: &RunDir, resuming: bool, changed_is_meant: bool) -> Result<Option<CorpusIdentity>> {
    match &cfg.data {
        models::DataConfig::Text { path, .. } | models::DataConfig::Tokens { path, .. } => {
            corpus_identity::check(dir, path, resuming, changed_is_meant)
        }
        models::DataConfig::Task { .. } => Ok(None),
    }
}

/// The backend and device a run trains on (`backend.json` in its directory), and the numeric
/// class it ran in (absent in runs from before the fast class: strict).
#[derive(serde::Serialize, serde::Deserialize)]
struct Device {
    backend: String,
    device: String,
    #[serde(default)]
    precision: Option<String>,
}

/// The class a resumed run continues in: the one it ran in (which is strict where fast was
/// asked for and not available), unless `--precision` moves it, with a warning: its numerics
/// change.
fn resumed_precision(
    dir: &RunDir,
    cfg: &RunConfig,
    trained_on: Option<&Device>,
    args: &TrainArgs,
) -> Result<engine::Precision> {
    let recorded = trained_on
        .and_then(|d| d.precision.as_deref())
        .map(str::parse::<engine::Precision>);
    let ran = match recorded {
        Some(Ok(p)) => p,
        Some(Err(e)) => bail!("{} in {}: {e}", BACKEND_FILE, dir.path.display()),
        None => cfg.train.precision,
    };
    let Some(given) = crate::resolve::given_precision(args)? else {
        if ran != cfg.train.precision {
            say(&format!(
                "note: {} asked for the {} class and ran in the {} class (what its device offered); it \
                 continues in the {ran} class; --precision {} moves it",
                dir.path.display(),
                cfg.train.precision,
                ran,
                cfg.train.precision
            ));
        }
        return Ok(ran);
    };
    if given != ran {
        warn(&format!(
            "warning: {} ran in the {ran} class; it continues in the {given} class, so its numerics differ from the \
             checkpoint it resumes from on: its losses will not match those of a run left in the {ran} class",
            dir.path.display()
        ));
    }
    Ok(given)
}

impl Device {
    fn kind(&self) -> Option<BackendKind> {
        clap::ValueEnum::from_str(&self.backend, false).ok()
    }
}

fn backend_name(kind: BackendKind) -> &'static str {
    match kind {
        BackendKind::Auto => "auto",
        BackendKind::Cpu => "cpu",
        BackendKind::Gpu => "gpu",
    }
}

/// The backend the run in `dir` trained on, where it recorded one (`backend.json`).
/// What a run trained on, in words: "cpu: <device>, strict".
pub fn recorded_device(dir: &Path) -> Option<String> {
    let text = data::read_text(&dir.join(BACKEND_FILE)).ok()?;
    let d = serde_json::from_str::<Device>(&text).ok()?;
    Some(format!(
        "{}: {}, {}",
        d.backend,
        d.device,
        d.precision.as_deref().unwrap_or("strict")
    ))
}

pub fn recorded_backend(dir: &Path) -> Option<BackendKind> {
    let text = data::read_text(&dir.join(BACKEND_FILE)).ok()?;
    serde_json::from_str::<Device>(&text).ok()?.kind()
}

/// The backend a resumed run continues on: the one it trained on, unless --backend moves it
/// (with a warning: its numerics change). Also returns what it trained on, when recorded.
fn resumed_backend(dir: &RunDir, args: &TrainArgs) -> (BackendKind, Option<Device>) {
    let path = dir.file(BACKEND_FILE);
    let recorded = data::read_text(&path)
        .ok()
        .and_then(|text| serde_json::from_str::<Device>(&text).ok())
        .and_then(|d| d.kind().map(|k| (k, d)));
    let Some((kind, device)) = recorded else {
        warn(&format!(
            "warning: {} does not record the backend it trained on ({BACKEND_FILE} is missing or unreadable: it \
             was imported, or trained by an older resmem); continuing it on --backend {}",
            dir.path.display(),
            backend_name(args.backend)
        ));
        return (crate::choose_backend(args.backend, None), None);
    };
    if args.backend_given && args.backend != kind {
        warn(&format!(
            "warning: {} trained on --backend {} ({}); it continues on --backend {}, so its numerics differ from the \
             checkpoint it resumes from on: its losses will not match those of a run left on {}",
            dir.path.display(),
            device.backend,
            device.device,
            backend_name(args.backend),
            device.backend
        ));
        return (args.backend, Some(device));
    }
    (kind, Some(device))
}

/// The process's stop request: set by Ctrl-C and SIGTERM once [`stop_flag`] installed their
/// handler, or by [`request_stop`].
fn stop() -> &'static Arc<AtomicBool> {
    static STOP: OnceLock<Arc<AtomicBool>> = OnceLock::new();
    STOP.get_or_init(|| Arc::new(AtomicBool::new(false)))
}

/// Set by Ctrl-C and SIGTERM: the step finishes and a checkpoint is written. A second signal
/// stops the process at once with status 130, keeping the last checkpoint written (checkpoints
/// are written whole or not at all). One handler per process, shared by every run a sweep
/// trains in turn.
pub fn stop_flag() -> Result<Arc<AtomicBool>> {
    static HANDLER: OnceLock<()> = OnceLock::new();
    if HANDLER.get().is_none() {
        let set = stop().clone();
        let signals = AtomicUsize::new(0);
        ctrlc::set_handler(move || {
            if signals.fetch_add(1, Ordering::SeqCst) == 0 {
                set.store(true, Ordering::SeqCst);
                return;
            }
            let resume = resume_hint()
                .lock()
                .ok()
                .and_then(|h| h.clone())
                .map_or(String::new(), |h| format!("; {h}"));
            crate::console::warn(&format!(
                "a second stop request: stopped at once, without finishing the step; the last checkpoint is \
                 kept{resume}"
            ));
            std::process::exit(130);
        })
        .context("cannot install the signal handler")?;
        let _ = HANDLER.set(());
    }
    Ok(stop().clone())
}

/// How to continue what this process runs, said when a second signal stops it at once: the
/// first command to set it (a sweep before the runs it trains) wins.
fn resume_hint() -> &'static Mutex<Option<String>> {
    static HINT: OnceLock<Mutex<Option<String>>> = OnceLock::new();
    HINT.get_or_init(|| Mutex::new(None))
}

pub fn set_resume_hint(hint: String) {
    if let Ok(mut h) = resume_hint().lock() {
        h.get_or_insert(hint);
    }
}

/// A run that stopped on request after writing its checkpoint: not a failure. The binary says
/// it without "error:" and exits with status 0.
#[derive(Debug)]
pub struct StoppedOnRequest(pub String);

impl std::fmt::Display for StoppedOnRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for StoppedOnRequest {}

/// Asks (`true`) every training loop of this process to stop as Ctrl-C does, or (`false`)
/// withdraws the request. For a program that runs commands in-process, such as a test that
/// bounds each command's time: a run stops with an "interrupted" error after its current step.
pub fn request_stop(stop_now: bool) {
    stop().store(stop_now, Ordering::SeqCst);
}

/// Whether a stop was requested (by a signal or [`request_stop`]).
pub fn stop_requested() -> bool {
    stop().load(Ordering::SeqCst)
}

/// An "interrupted" error naming `what` once a stop was requested: the loops of the commands that
/// do not checkpoint (bench, analyze) call it every step.
pub fn check_stop(what: &str) -> Result<()> {
    if stop_requested() {
        bail!("interrupted during {what}");
    }
    Ok(())
}

/// A run whose config is final (its vocabulary set, validated) and whose sizes were checked.
struct PreparedRun {
    backend: BackendKind,
    cfg: RunConfig,
    /// The corpus as checked, recorded once the run starts; None on a task.
    corpus: Option<CorpusIdentity>,
    data: source::Data,
    dir: RunDir,
    resuming: bool,
    /// The backend and device a resumed run trained on, when it recorded them.
    trained_on: Option<Device>,
    stop: Arc<AtomicBool>,
}

impl PreparedRun {
    fn train<B: Backend + 'static>(self, be: &B) -> Result<()> {
        let (cfg, data) = (&self.cfg, &self.data);
        let (b, t) = (cfg.train.batch, cfg.data.seq_len());
        let train = data.train(b, t, cfg.train.seed)?;
        let held_out = data.held_out(b, t, cfg.train.seed, cfg.cadence.eval_batches)?;
        let model = cfg.build(be, b, t, Purpose::Train)?;
        let params = model.store().layout.count();
        let layout = model.store().layout.clone();
        let mut trainer = Trainer::new(be, model, cfg.train.clone())?;
        trainer.mask_documents(cfg.data.separator());
        let config_toml = cfg.to_toml()?;

        let resumed_from = if self.resuming {
            match newest_checkpoint(&self.dir.path, &layout, cfg)? {
                Some((state, path)) => {
                    // Resumed, it would end the run at once: declared done, not trained.
                    if state.step > cfg.train.steps as u64 {
                        bail!(
                            "the newest checkpoint {} is at step {}, past this run's steps = {} in its {CONFIG_FILE}, \
                             so this run did not write it and resuming from it would train nothing; move it out \
                             of {} to resume from the checkpoint before it, or read it with \
                             `resmem eval --run {} --checkpoint {}`",
                            path.display(),
                            state.step,
                            cfg.train.steps,
                            self.dir.checkpoints().display(),
                            self.dir.path.display(),
                            path.display()
                        );
                    }
                    // Finished, with its model written: there is nothing to resume (a run killed
                    // between its last checkpoint and its model goes on, and writes the model).
                    let model_file = self.dir.file(MODEL_FILE);
                    if state.step as usize == cfg.train.steps && model_file.exists() {
                        say(&format!(
                            "{} finished its {} steps already (its model is {}); there is nothing to resume. To \
                             train it further, extend it: resmem train --resume {} --steps N (N above {}); to \
                             train another model like it, start a new run from its {CONFIG_FILE}: resmem train \
                             --config {} --out NEW_DIR",
                            self.dir.path.display(),
                            cfg.train.steps,
                            model_file.display(),
                            self.dir.path.display(),
                            cfg.train.steps,
                            self.dir.file(CONFIG_FILE).display()
                        ));
                        return Ok(());
                    }
                    trainer.restore(be, &state)?;
                    say(&format!(
                        "resuming {} from {} (step {})",
                        self.dir.path.display(),
                        path.display(),
                        state.step
                    ));
                    Some(state.step)
                }
                None if !run_dir::checkpoints_in(&self.dir.path)?.is_empty() => bail!(
                    "none of the checkpoints in {} loads with its {CONFIG_FILE} (see above), so the run cannot \
                     continue; undo any edit of {CONFIG_FILE}, or to train it again from step 0, move {} away",
                    self.dir.path.display(),
                    self.dir.checkpoints().display()
                ),
                // Killed before its first checkpoint: the same config from step 0 is the same run.
                None => {
                    say(&format!(
                        "{} has no valid checkpoint yet; starting it again from step 0",
                        self.dir.path.display()
                    ));
                    Some(0)
                }
            }
        } else {
            run_dir::write_atomic(&self.dir.file(CONFIG_FILE), |tmp| {
                std::fs::write(tmp, &config_toml).with_context(|| format!("cannot write {}", tmp.display()))
            })?;
            None
        };
        // A run that starts at step 0 (new, or killed before its first checkpoint) starts from
        // --init-from's weights; one that resumes has them in its checkpoint already.
        if let (Some(from), None | Some(0)) = (&cfg.train.init_from, resumed_from) {
            let (values, file) = crate::load::params(Path::new(from), None, &layout).with_context(|| {
                format!(
                    "--init-from {from} does not fit this model: it needs the same architecture and sizes \
                     (start from its config with --config {from}/{CONFIG_FILE})"
                )
            })?;
            be.write(&trainer.model.store().params, &values);
            say(&format!("starting from the weights of {}", file.display()));
        }
        let device = Device {
            backend: backend_name(self.backend).into(),
            device: be.describe(),
            precision: Some(be.precision().name().into()),
        };
        if let Some(was) = self
            .trained_on
            .as_ref()
            .filter(|d| d.backend == device.backend && d.device != device.device)
        {
            warn(&format!(
                "note: {} trained on {}; it continues on {}, whose numerics may differ",
                self.dir.path.display(),
                was.device,
                device.device
            ));
        }
        run_dir::write_atomic(&self.dir.file(BACKEND_FILE), |tmp| {
            std::fs::write(tmp, serde_json::to_string(&device)?)
                .with_context(|| format!("cannot write {}", tmp.display()))
        })?;
        if let Some(corpus) = &self.corpus {
            corpus_identity::record(&self.dir, corpus)?;
        }
        let metrics = self.dir.metrics(Some(resumed_from.unwrap_or(0)))?;
        let steps = cfg.train.steps;
        say(&format!(
            "{} with {params} parameters on {}, {}, {}, {} steps of {b}×{t} tokens into {}",
            cfg.arch(),
            be.describe(),
            crate::class_line(be),
            data.describe,
            steps,
            self.dir.path.display()
        ));
        let console = Console::new(trainer.step as u64, steps as u64);
        let sampler = match held_out.first() {
            Some(first) => crate::samples::Sampler::new(be, cfg, first, self.dir.file(crate::samples::SAMPLES_FILE))?,
            None => None,
        };
        let mut cli = Cli::new(
            be,
            trainer,
            train,
            held_out,
            &self.stop,
            &self.dir,
            &layout,
            &config_toml,
            cfg.cadence.keep,
            metrics,
            console,
        );
        cli.sampler = sampler;
        set_resume_hint(format!(
            "resume with: resmem train --resume {}",
            self.dir.path.display()
        ));
        let end = pollster::block_on(train_loop::train(&mut cli, &LoopCadence::of(cfg)));
        cli.console.finish();
        let resume = || format!("Resume with: resmem train --resume {}", self.dir.path.display());
        let last = cli.last_checkpoint.clone();
        match end? {
            End::Finished => {}
            End::Stopped { step } => {
                let kept = last.map_or("no checkpoint was written".into(), |p| {
                    format!("the checkpoint is {}", p.display())
                });
                return Err(StoppedOnRequest(format!("interrupted after step {step}; {kept}. {}", resume())).into());
            }
            // The corpus changed under the run: what was trained is kept, then said.
            End::NoBatch { step, error } => {
                let kept = last.map_or("no checkpoint yet".into(), |p| {
                    format!("the checkpoint is {}", p.display())
                });
                bail!("stopped after step {step}: {error}; {kept}. {}", resume());
            }
            End::Diverged { step, .. } => {
                // In the fast class, the product that first met a NaN or an infinity.
                let fault = pollster::block_on(be.fast_fault()).ok().flatten();
                return Err(diverged(step, cfg, last.as_deref(), &self.dir.path, fault));
            }
        }
        let values = pollster::block_on(be.read(&cli.trainer.model.store().params))?;
        let model_path = self.dir.file(MODEL_FILE);
        run_dir::write_atomic(&model_path, |tmp| {
            let bytes = checkpoint::to_bytes(&layout, &values)?;
            std::fs::write(tmp, bytes).with_context(|| format!("cannot write {}", tmp.display()))
        })?;
        let checkpoint_note = last.map(|p| format!(" and {}", p.display())).unwrap_or_default();
        say(&format!(
            "done: {steps} steps in {:.1} s; wrote {}, {}{checkpoint_note}",
            cli.clock.elapsed().as_secs_f64(),
            self.dir.file(METRICS_FILE).display(),
            model_path.display(),
        ));
        Ok(())
    }
}

/// The error of a run whose loss became NaN or Inf; `fast_fault`, in the fast class, the first
/// product that met a NaN or an infinity in an operand.
fn diverged(
    step: usize,
    cfg: &RunConfig,
    last: Option<&Path>,
    dir: &Path,
    fast_fault: Option<String>,
) -> anyhow::Error {
    let kept = match last {
        Some(p) => format!("the last good checkpoint, {}, is kept", p.display()),
        None => "no checkpoint was written before it".into(),
    };
    if let Some(product) = fast_fault {
        return anyhow!(
            "the training loss became NaN or Inf by step {step} in the fast class: the first matrix product to meet a \
             NaN or an infinity in an operand was `{product}`, so the run stopped; {kept} (in {}). The fast class \
             scales every operand into f16's range, so the value came from elsewhere (the learning rate, --lr {:e}, \
             is the usual cause); to see whether f16 is to blame, resume with --precision strict",
            dir.display(),
            cfg.train.lr
        );
    }
    anyhow!(
        "the training loss became NaN or Inf by step {step}, so the run stopped; {kept} (in {}). Likely causes: \
         a learning rate too high (--lr {:e}; try a third of it), an init scale too large (--init-std), a weight decay too large (--weight-decay), or bad \
         data (re-run `resmem data prepare`)",
        dir.display(),
        cfg.train.lr
    )
}

/// The newest checkpoint of the run that loads (checksum, shapes, finite values) and was
/// written with this config; broken ones are reported and skipped. None when there is none.
pub fn newest_checkpoint(
    run: &Path,
    layout: &models::ParamLayout,
    cfg: &RunConfig,
) -> Result<Option<(TrainState, PathBuf)>> {
    for (_, path) in run_dir::checkpoints_in(run)?.iter().rev() {
        let loaded = data::read_file(path).map_err(anyhow::Error::from).and_then(|bytes| {
            // Compared as configs, not as text: a setting added since it was written reads as
            // its default, which is what the run trained with.
            // The same config, or the same before `--steps` extended the run.
            let written = RunConfig::from_toml(&checkpoint::config_of(&bytes)?)?;
            let same_but_train = RunConfig {
                train: cfg.train.clone(),
                ..written.clone()
            } == *cfg;
            if !(same_but_train && cfg.train.continues(&written.train)) {
                bail!("it was written with another config than {CONFIG_FILE}");
            }
            Ok(checkpoint::state_from_bytes(layout, &bytes)?)
        });
        match loaded {
            Ok(state) => return Ok(Some((state, path.clone()))),
            Err(e) => warn(&format!("skipping the checkpoint {}: {e:#}", path.display())),
        }
    }
    Ok(None)
}
