//! `resmem analyze buckets`: load a trained MemoryFormer or hybrid from its run directory, run
//! batches of the run's task through it, and report how evenly each hash table's buckets are
//! used.

use crate::args::BucketsArgs;
use crate::console::say;
use crate::{load, source};
use anyhow::{bail, Context, Result};
use engine::Backend;
use models::buckets::{self, BucketCounts, TableStats};
use models::{Evaluator, Purpose};
use std::path::Path;

/// Each hash table's bucket use over `batches` held-out batches of the run in `run` (or one
/// checkpoint file), and the rows (tokens) of one batch. `resmem sweep` reports the same for
/// every MemoryFormer and hybrid it trains.
pub fn measure_run<B: Backend + 'static>(
    be: &B,
    run: &Path,
    checkpoint: Option<&Path>,
    batches: usize,
    backend: crate::args::BackendKind,
) -> Result<(Vec<TableStats>, usize)> {
    anyhow::ensure!(batches >= 1, "--batches must be at least 1");
    models::run::check_eval_batches(batches).context("--batches is too large")?;
    let cfg = load::config(run)?;
    if !cfg.model.has_hash_tables() {
        bail!(
            "{} holds a {} run; bucket statistics need hash tables: a MemoryFormer or a hybrid \
             (`resmem train --arch memoryformer` or `--arch hybrid`)",
            run.display(),
            cfg.arch()
        );
    }
    let (b, t) = (cfg.train.batch, cfg.data.seq_len());
    // Batches the run did not train on: its held-out ones.
    let host = crate::Host::batches(batches, b, t, "--batches, or the run's batch or seq_len");
    crate::check_memory(&cfg.model, b, t, Purpose::Infer, backend, host)?;
    let held_out = source::open(&cfg.data)?.held_out(b, t, cfg.train.seed, batches)?;
    let model = cfg.build(be, b, t, Purpose::Infer)?;
    let (values, _) = load::params(run, checkpoint, &model.store().layout)?;
    be.write(&model.store().params, &values);
    let mut evaluator = Evaluator::new(be, &model)?;
    evaluator.mask_documents(cfg.data.separator());
    let mut total: Option<Vec<BucketCounts>> = None;
    for batch in &held_out {
        evaluator.forward(be, &model, batch)?;
        let counts = pollster::block_on(buckets::read(be, &model.inside().hashed))?;
        match &mut total {
            None => total = Some(counts),
            Some(total) => total.iter_mut().zip(&counts).for_each(|(a, b)| a.accumulate(b)),
        }
    }
    Ok((
        total.unwrap_or_default().iter().flat_map(|c| c.stats()).collect(),
        b * t,
    ))
}

pub fn run(args: BucketsArgs) -> Result<()> {
    crate::with_backend!(args.backend, be => measure(be, &args))
}

fn measure<B: Backend + 'static>(be: &B, args: &BucketsArgs) -> Result<()> {
    let (stats, rows) = measure_run(be, &args.run, args.checkpoint.as_deref(), args.batches, args.backend)?;
    if args.json {
        say(&serde_json::to_string_pretty(&stats)?);
        return Ok(());
    }
    say(&format!(
        "{} held-out batches of {} rows; entropy is 1 when every bucket is used equally",
        args.batches, rows
    ));
    say(&format!(
        "{:<12} {:>5} {:>8} {:>6}",
        "layer", "table", "entropy", "dead"
    ));
    for s in &stats {
        say(&format!(
            "{:<12} {:>5} {:>8.3} {:>6}",
            s.layer, s.table, s.entropy, s.dead_buckets
        ));
    }
    Ok(())
}
