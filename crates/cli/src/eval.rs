//! `resmem eval`: the validation loss and perplexity of a run's checkpoint, on the same fixed
//! held-out batches its training evaluated.

use crate::args::EvalArgs;
use crate::console::say;
use crate::{load, source};
use anyhow::{Context, Result};
use engine::Backend;
use models::{Evaluator, Purpose};

pub fn run(args: EvalArgs) -> Result<()> {
    crate::with_backend!(args.backend, be => eval(be, &args))
}

fn eval<B: Backend + 'static>(be: &B, args: &EvalArgs) -> Result<()> {
    let cfg = load::config(&args.run)?;
    let data = source::open(&cfg.data)?;
    let (b, t) = (cfg.train.batch, cfg.data.seq_len());
    let m = args.batches.unwrap_or(cfg.cadence.eval_batches);
    anyhow::ensure!(m >= 1, "--batches must be at least 1");
    models::run::check_eval_batches(m).context("--batches is too large")?;
    let host = crate::Host::batches(m, b, t, "--batches, or the run's batch or seq_len");
    crate::check_memory(&cfg.model, b, t, Purpose::Infer, args.backend, host)?;
    let held_out = data.held_out(b, t, cfg.train.seed, m)?;
    let model = cfg.build(be, b, t, Purpose::Infer)?;
    let (values, path) = load::params(&args.run, args.checkpoint.as_deref(), &model.store().layout)?;
    be.write(&model.store().params, &values);
    let mut evaluator = Evaluator::new(be, &model)?;
    evaluator.mask_documents(cfg.data.separator());
    let (mut ce, mut z) = (0.0f64, 0.0f64);
    for batch in &held_out {
        let (c, zt) = pollster::block_on(evaluator.losses(be, &model, batch))?;
        (ce, z) = (ce + f64::from(c), z + f64::from(zt));
    }
    let loss = ce / m as f64;
    // The official RMT code reports CE + z-loss as its loss: both are printed.
    let total = (ce + z) / m as f64;
    let with_z = cfg.model.z_loss() > 0.0;
    let tokens = m * b * t;
    if args.json {
        let mut row = serde_json::json!({
            "val_loss": loss,
            "perplexity": loss.exp(),
            "tokens": tokens,
            "checkpoint": path,
        });
        if with_z {
            row["val_total"] = total.into();
        }
        say(&row.to_string());
    } else {
        let total = match with_z {
            true => format!("  total {total:.6} (with the z-loss)"),
            false => String::new(),
        };
        say(&format!(
            "val_loss {loss:.6}  perplexity {:.2}{total}  ({m} batches of {b}×{t} held-out tokens, {})",
            loss.exp(),
            path.display()
        ));
    }
    Ok(())
}
