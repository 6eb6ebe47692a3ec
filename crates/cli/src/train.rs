//! `resmem train`: resolve the run's config, claim its directory, and train with logging,
//! evaluation and checkpoints; `--resume` continues bit for bit from the newest checkpoint.

use crate::args::{BackendKind, TrainArgs};
use crate::console::{say, warn, Console};
use crate::resolve::{read_config, refuse_overrides, resolve};
use crate::run_dir::{self, RunDir, BACKEND_FILE, CONFIG_FILE, METRICS_FILE, MODEL_FILE};
use crate::source;
use anyhow::{anyhow, bail, Context, Result};
use engine::Backend;
use models::checkpoint::{self, TrainState};
use models::{Purpose, RunConfig, Trainer};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

/// A loss past this multiple of the first one warns of divergence.
const DIVERGENCE: f32 = 1.5;

pub fn run(args: TrainArgs) -> Result<()> {
    if args.list_presets {
        for p in models::run::presets() {
            say(&format!("{:<26} {}", p.name, p.about));
        }
        return Ok(());
    }
    let (cfg, dir, resuming) = match &args.resume {
        Some(path) => {
            refuse_overrides(&args)?;
            let dir = RunDir::resume(path)?;
            (read_config(&dir.file(CONFIG_FILE))?, dir, true)
        }
        None => {
            let cfg = resolve(&args)?;
            let out = args
                .out
                .as_ref()
                .ok_or_else(|| anyhow!("--out DIR is required for a new run"))?;
            (cfg, RunDir::create(out)?, false)
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
        false => (args.backend, None),
    };
    crate::check_memory(&cfg.model, b, t, Purpose::Train, backend, host)?;
    let stop = stop_flag()?;
    let prepared = PreparedRun {
        backend,
        cfg,
        data,
        dir,
        resuming,
        trained_on,
        stop,
    };
    crate::with_backend!(backend, be => prepared.train(be))
}

/// The backend and device a run trains on (`backend.json` in its directory).
#[derive(serde::Serialize, serde::Deserialize)]
struct Device {
    backend: String,
    device: String,
}

impl Device {
    fn kind(&self) -> Option<BackendKind> {
        clap::ValueEnum::from_str(&self.backend, false).ok()
    }
}

fn backend_name(kind: BackendKind) -> &'static str {
    match kind {
        BackendKind::Cpu => "cpu",
        BackendKind::Gpu => "gpu",
    }
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
        return (args.backend, None);
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

/// Set by Ctrl-C and SIGTERM: the step finishes and a checkpoint is written; a second signal is
/// not special. One handler per process, shared by every run a sweep trains in turn.
pub fn stop_flag() -> Result<Arc<AtomicBool>> {
    static HANDLER: OnceLock<()> = OnceLock::new();
    if HANDLER.get().is_none() {
        let set = stop().clone();
        ctrlc::set_handler(move || set.store(true, Ordering::SeqCst)).context("cannot install the signal handler")?;
        let _ = HANDLER.set(());
    }
    Ok(stop().clone())
}

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
        let device = Device {
            backend: backend_name(self.backend).into(),
            device: be.describe(),
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
        let mut metrics = self.dir.metrics(Some(resumed_from.unwrap_or(0)))?;
        let steps = cfg.train.steps;
        say(&format!(
            "{} with {params} parameters on {}, {}, {} steps of {b}×{t} tokens into {}",
            cfg.arch(),
            be.describe(),
            data.describe,
            steps,
            self.dir.path.display()
        ));
        let cadence = cfg.cadence.clone();
        let console = Console::new(trainer.step as u64, steps as u64);
        let start = Instant::now();
        let mut window = (Instant::now(), 0usize);
        let mut first_loss: Option<f32> = None;
        let mut warned = false;
        let mut last_checkpoint: Option<PathBuf> = None;
        let mut last_val: Option<f32> = None;
        let z_loss = cfg.model.z_loss() > 0.0;
        // Writes the trainer's state atomically and remembers it as the last good checkpoint.
        let checkpoint = |trainer: &Trainer<B, _>, last: &mut Option<PathBuf>| -> Result<PathBuf> {
            let state: TrainState = pollster::block_on(trainer.state(be))?;
            let path = self.dir.write_checkpoint(state.step, cadence.keep, |tmp| {
                checkpoint::write_state(&layout, &state, &config_toml, tmp).map_err(anyhow::Error::from)
            })?;
            *last = Some(path.clone());
            Ok(path)
        };

        while trainer.step < steps {
            if self.stop.load(Ordering::SeqCst) {
                // A signal: checkpoint the last finished step, if its losses were finite.
                console.finish();
                if !pollster::block_on(trainer.loss_sum(be))?.is_finite() {
                    return Err(diverged(trainer.step, cfg, last_checkpoint.as_deref(), &self.dir.path));
                }
                let path = checkpoint(&trainer, &mut last_checkpoint)?;
                bail!(
                    "interrupted after step {}; the checkpoint is {}. Resume with: resmem train --resume {}",
                    trainer.step,
                    path.display(),
                    self.dir.path.display()
                );
            }
            let step = trainer.step + 1;
            let batch = match train.batch(step as u64 - 1) {
                Ok(batch) => batch,
                // The corpus changed under the run: keep what was trained, then say so.
                Err(e) => {
                    console.finish();
                    let kept = match pollster::block_on(trainer.loss_sum(be))?.is_finite() {
                        true => Some(checkpoint(&trainer, &mut last_checkpoint)?),
                        false => last_checkpoint.clone(),
                    };
                    let kept = kept.map_or("no checkpoint yet".to_string(), |p| {
                        format!("the checkpoint is {}", p.display())
                    });
                    bail!(
                        "stopped after step {}: {e}; {kept}. Resume with: resmem train --resume {}",
                        trainer.step,
                        self.dir.path.display()
                    );
                }
            };
            let lr = trainer.step(be, &batch)?;
            window.1 += b * t;
            let last = step == steps;
            let log = step % cadence.log_every == 0 || step == 1 || last;
            let eval = last || (cadence.eval_every > 0 && step % cadence.eval_every == 0);
            let save = last || (cadence.checkpoint_every > 0 && step % cadence.checkpoint_every == 0);
            if !(log || eval || save) {
                continue;
            }
            // Every step since the last check added its loss on the device: one read checks them all.
            let sum = pollster::block_on(trainer.loss_sum(be))?;
            trainer.reset_loss_sum(be);
            if !sum.is_finite() {
                console.finish();
                return Err(diverged(step, cfg, last_checkpoint.as_deref(), &self.dir.path));
            }
            let loss = pollster::block_on(trainer.loss(be))?;
            let first = *first_loss.get_or_insert(loss);
            if loss > DIVERGENCE * first && !warned {
                warned = true;
                console.line(&format!(
                    "warning: the loss {loss:.4} at step {step} is more than {DIVERGENCE}× its first value {first:.4}; \
                     the run may be diverging (a lower --lr often helps)"
                ));
            }
            let tokens_per_s = window.1 as f64 / window.0.elapsed().as_secs_f64();
            let mut row = serde_json::json!({
                "step": step, "loss": loss, "lr": lr,
                "tokens_per_s": tokens_per_s, "elapsed_s": start.elapsed().as_secs_f64(),
            });
            window = (Instant::now(), 0);
            // With a z-loss, the total (CE + z-loss) too: the official RMT code reports that.
            if z_loss {
                row["total"] = (loss + pollster::block_on(trainer.z_term(be, &batch))?).into();
            }
            if eval {
                let (mut ce, mut z) = (0.0f64, 0.0f64);
                for batch in &held_out {
                    let (c, zt) = pollster::block_on(trainer.eval_losses(be, batch))?;
                    (ce, z) = (ce + f64::from(c), z + f64::from(zt));
                }
                let val = (ce / held_out.len() as f64) as f32;
                row["val_loss"] = val.into();
                if z_loss {
                    row["val_total"] = ((ce + z) / held_out.len() as f64).into();
                }
                last_val = Some(val);
            }
            metrics.append(&row)?;
            let speed = row["tokens_per_s"]
                .as_f64()
                .map(|s| format!("  {s:>8.0} tok/s"))
                .unwrap_or_default();
            // With a bar, lines only for evaluations and the last step; without, every log.
            if log && !console.is_bar() || eval || last {
                let val = row["val_loss"]
                    .as_f64()
                    .map(|v| format!("  val {v:.4}"))
                    .unwrap_or_default();
                console.line(&format!("step {step:>6}  loss {loss:.4}{val}  lr {lr:.2e}{speed}"));
            }
            let val = last_val.map(|v| format!("  val {v:.4}")).unwrap_or_default();
            console.progress(step as u64, &format!("loss {loss:.4}{val}{speed}"));
            if save {
                let path = checkpoint(&trainer, &mut last_checkpoint)?;
                if !last {
                    console.line(&format!("checkpoint {}", path.display()));
                }
            }
        }
        console.finish();
        let values = pollster::block_on(be.read(&trainer.model.store().params))?;
        let model_path = self.dir.file(MODEL_FILE);
        run_dir::write_atomic(&model_path, |tmp| {
            let bytes = checkpoint::to_bytes(&layout, &values)?;
            std::fs::write(tmp, bytes).with_context(|| format!("cannot write {}", tmp.display()))
        })?;
        let checkpoint_note = last_checkpoint
            .map(|p| format!(" and {}", p.display()))
            .unwrap_or_default();
        say(&format!(
            "done: {steps} steps in {:.1} s; wrote {}, {}{checkpoint_note}",
            start.elapsed().as_secs_f64(),
            self.dir.file(METRICS_FILE).display(),
            model_path.display(),
        ));
        Ok(())
    }
}

/// The error of a run whose loss became NaN or Inf.
fn diverged(step: usize, cfg: &RunConfig, last: Option<&Path>, dir: &Path) -> anyhow::Error {
    let kept = match last {
        Some(p) => format!("the last good checkpoint, {}, is kept", p.display()),
        None => "no checkpoint was written before it".into(),
    };
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
            if RunConfig::from_toml(&checkpoint::config_of(&bytes)?)? != *cfg {
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
