//! `resmem eval`: the validation loss and perplexity of a run's checkpoint, on the same fixed
//! held-out batches its training evaluated.

use crate::args::EvalArgs;
use crate::console::say;
use crate::{load, source};
use anyhow::Result;
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
    models::run::check_eval_batches(m)?;
    let held_out = data.held_out(b, t, cfg.train.seed, m)?;
    crate::check_memory(&cfg, b, t, Purpose::Infer, args.backend)?;
    let model = cfg.build(be, b, t, Purpose::Infer)?;
    let (values, path) = load::params(&args.run, args.checkpoint.as_deref(), &model.store().layout)?;
    be.write(&model.store().params, &values);
    let mut evaluator = Evaluator::new(be, &model)?;
    let mut total = 0.0f64;
    for batch in &held_out {
        total += f64::from(pollster::block_on(evaluator.loss(be, &model, batch))?);
    }
    let loss = total / m as f64;
    let tokens = m * b * t;
    if args.json {
        say(&serde_json::json!({
            "val_loss": loss,
            "perplexity": loss.exp(),
            "tokens": tokens,
            "checkpoint": path,
        })
        .to_string());
    } else {
        say(&format!(
            "val_loss {loss:.4}  perplexity {:.2}  ({m} batches of {b}×{t} held-out tokens, {})",
            loss.exp(),
            path.display()
        ));
    }
    Ok(())
}
