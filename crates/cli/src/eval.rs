//! `resmem eval`: the validation loss and perplexity of a run's checkpoint, on the same fixed
//! held-out batches its training evaluated, or on every window of the validation split's
//! tuning or test slice (`--slice`), where a sweep chooses and decides.

use crate::args::{BackendKind, EvalArgs};
use crate::console::say;
use crate::run_dir::MODEL_FILE;
use crate::{load, source};
use anyhow::{bail, Context, Result};
use data::{Batch, EvalSlice};
use engine::Backend;
use models::{Evaluator, Purpose, RunConfig};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

pub fn run(args: EvalArgs) -> Result<()> {
    crate::with_backend!(args.backend, be => eval(be, &args))
}

fn eval<B: Backend + 'static>(be: &B, args: &EvalArgs) -> Result<()> {
    let cfg = load::config(&args.run)?;
    let data = source::open(&cfg.data)?;
    let (b, t) = (cfg.train.batch, cfg.data.seq_len());
    let (held_out, what) = match args.slice.map(EvalSlice::from) {
        Some(slice) => {
            let batches = data.slice_batches(b, t, cfg.train.seed, slice)?;
            let host = crate::Host::batches(batches.len(), b, t, "the run's batch or seq_len");
            crate::check_memory(&cfg.model, b, t, Purpose::Infer, args.backend, host)?;
            let what = format!("every window of the validation split's {slice}");
            (batches, what)
        }
        None => {
            let m = args.batches.unwrap_or(cfg.cadence.eval_batches);
            anyhow::ensure!(m >= 1, "--batches must be at least 1");
            models::run::check_eval_batches(m).context("--batches is too large")?;
            let host = crate::Host::batches(m, b, t, "--batches, or the run's batch or seq_len");
            crate::check_memory(&cfg.model, b, t, Purpose::Infer, args.backend, host)?;
            (data.held_out(b, t, cfg.train.seed, m)?, "held-out".to_string())
        }
    };
    let m = held_out.len();
    let loss = held_out_loss(be, &cfg, &args.run, args.checkpoint.as_deref(), &held_out)?;
    // Finite weights can still overflow a forward: that is no loss to report, or to exit 0 on.
    if !(loss.ce.is_finite() && loss.total.is_finite()) {
        bail!(
            "the held-out loss of {} is {} ({} with the z-loss): its forward overflows (weights too large for \
             f32 somewhere); evaluate an earlier checkpoint with --checkpoint",
            loss.path.display(),
            loss.ce,
            loss.total
        );
    }
    let with_z = cfg.model.z_loss() > 0.0;
    // The targets the loss counts (a task masks some).
    let tokens: usize = held_out.iter().map(Batch::counted).sum();
    if args.json {
        let mut row = serde_json::json!({
            "val_loss": loss.ce,
            "perplexity": loss.ce.exp(),
            "tokens": tokens,
            "checkpoint": loss.path,
        });
        if let Some(slice) = args.slice {
            row["slice"] = serde_json::to_value(EvalSlice::from(slice))?;
        }
        if with_z {
            row["val_total"] = loss.total.into();
        }
        say(&row.to_string());
    } else {
        let total = match with_z {
            true => format!("  total {:.6} (with the z-loss)", loss.total),
            false => String::new(),
        };
        say(&format!(
            "val_loss {:.6}  perplexity {:.2}{total}  ({m} batches of {b}×{t} {what} tokens, {})",
            loss.ce,
            loss.ce.exp(),
            loss.path.display()
        ));
    }
    Ok(())
}

/// A checkpoint's mean losses over held-out batches.
struct HeldOutLoss {
    /// Cross-entropy, mean over the batches.
    ce: f64,
    /// With the z-loss: what the official RMT code reports as its loss.
    total: f64,
    path: PathBuf,
}

fn held_out_loss<B: Backend + 'static>(
    be: &B,
    cfg: &RunConfig,
    run: &Path,
    checkpoint: Option<&Path>,
    batches: &[Batch],
) -> Result<HeldOutLoss> {
    let (b, t) = (cfg.train.batch, cfg.data.seq_len());
    let model = cfg.build(be, b, t, Purpose::Infer)?;
    let (values, path) = load::params(run, checkpoint, &model.store().layout)?;
    be.write(&model.store().params, &values);
    let mut evaluator = Evaluator::new(be, &model)?;
    evaluator.mask_documents(cfg.data.separator());
    let (mut ce, mut z) = (0.0f64, 0.0f64);
    for batch in batches {
        let (c, zt) = pollster::block_on(evaluator.losses(be, &model, batch))?;
        (ce, z) = (ce + f64::from(c), z + f64::from(zt));
    }
    let m = batches.len().max(1) as f64;
    Ok(HeldOutLoss {
        ce: ce / m,
        total: (ce + z) / m,
        path,
    })
}

/// A finished run's final model on every window of a slice of the validation split, as a
/// sweep measures it (`resmem eval --run DIR --checkpoint DIR/model.safetensors --slice S`
/// prints the same number).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct SliceLoss {
    pub slice: EvalSlice,
    pub loss: f64,
    /// Target tokens evaluated.
    pub tokens: u64,
    /// Only the slice's first `eval_batches` batches, as `sweep --quick` measures (a check of
    /// the pipeline, not a measurement).
    #[serde(default)]
    pub quick: bool,
    /// The model file it was measured on, by size and modification time: a cache key.
    model_bytes: u64,
    model_modified_ns: u128,
}

/// The cache of `slice_loss`, in the run's directory.
fn cache_file(run: &Path, slice: EvalSlice) -> PathBuf {
    run.join(match slice {
        EvalSlice::Tuning => "eval-tuning.json",
        EvalSlice::Test => "eval-test.json",
    })
}

/// Whether the run in `run` was measured on a slice: only a finished run is, so a run carried
/// without its weights (a sweep committed in pieces) still counts as finished.
pub fn measured(run: &Path) -> bool {
    [EvalSlice::Tuning, EvalSlice::Test]
        .iter()
        .any(|&s| cache_file(run, s).is_file())
}

/// [`SliceLoss`] of the run in `run`, measured once and then read from the run's directory
/// while its model file is unchanged. Evaluated in the strict class whatever the run trained
/// in, so that every arm is measured alike.
pub fn slice_loss(run: &Path, backend: BackendKind, slice: EvalSlice, quick: bool) -> Result<SliceLoss> {
    let model_file = run.join(MODEL_FILE);
    let cache = cache_file(run, slice);
    let cached = data::read_text(&cache)
        .ok()
        .and_then(|text| serde_json::from_str::<SliceLoss>(&text).ok())
        .filter(|c| c.slice == slice && c.quick == quick);
    let meta = match std::fs::metadata(&model_file) {
        Ok(meta) => meta,
        Err(e) => {
            // A finished run carried to another machine without its weights (a sweep
            // committed in pieces): its measurement came with it.
            return cached
                .ok_or(e)
                .with_context(|| format!("cannot evaluate {}: it has no {MODEL_FILE}", run.display()));
        }
    };
    let modified = meta
        .modified()
        .ok()
        .and_then(|m| m.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_nanos());
    if let Some(cached) = cached.filter(|c| c.model_bytes == meta.len() && c.model_modified_ns == modified) {
        return Ok(cached);
    }
    let cfg = load::config(run)?;
    let data = source::open(&cfg.data)?;
    let (b, t) = (cfg.train.batch, cfg.data.seq_len());
    let mut batches = data.slice_batches(b, t, cfg.train.seed, slice)?;
    if quick {
        batches.truncate(cfg.cadence.eval_batches.max(1));
    }
    let loss = crate::with_backend!(crate::choose_backend(backend, Some(run)), be => {
        held_out_loss(be, &cfg, run, Some(&model_file), &batches)
    })?;
    let measured = SliceLoss {
        slice,
        loss: loss.ce,
        tokens: batches.iter().map(|x| x.counted() as u64).sum(),
        quick,
        model_bytes: meta.len(),
        model_modified_ns: modified,
    };
    let json = serde_json::to_string_pretty(&measured)?;
    crate::run_dir::write_atomic(&cache, |tmp| {
        std::fs::write(tmp, &json).with_context(|| format!("cannot write {}", tmp.display()))
    })?;
    Ok(measured)
}
