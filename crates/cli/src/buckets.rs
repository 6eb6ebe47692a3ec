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

/// Which held-out tokens a measurement counts.
pub enum Held {
    /// The run's first n held-out batches, as its training evaluated them.
    Batches(usize),
    /// Every window of a slice of the validation split: enough hits that an empty row is
    /// evidence, not chance.
    Slice(data::EvalSlice),
}

/// Each hash table's bucket use over held-out tokens of the run in `run` (or one checkpoint
/// file), and the rows (tokens) of one batch. `resmem sweep` reports the same for every
/// MemoryFormer and hybrid it trains, over the test slice.
pub fn measure_run<B: Backend + 'static>(
    be: &B,
    run: &Path,
    checkpoint: Option<&Path>,
    held: Held,
    backend: crate::args::BackendKind,
) -> Result<(Vec<TableStats>, usize)> {
    if let Held::Batches(batches) = held {
        anyhow::ensure!(batches >= 1, "--batches must be at least 1");
        models::run::check_eval_batches(batches).context("--batches is too large")?;
    }
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
    let data = source::open(&cfg.data)?;
    let held_out = match held {
        Held::Batches(batches) => {
            let host = crate::Host::batches(batches, b, t, "--batches, or the run's batch or seq_len");
            crate::check_memory(&cfg.model, b, t, Purpose::Infer, backend, host)?;
            data.held_out(b, t, cfg.train.seed, batches)?
        }
        Held::Slice(slice) => {
            let batches = data.slice_batches(b, t, cfg.train.seed, slice)?;
            let host = crate::Host::batches(batches.len(), b, t, "the run's batch or seq_len");
            crate::check_memory(&cfg.model, b, t, Purpose::Infer, backend, host)?;
            batches
        }
    };
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
    let held = match args.slice {
        Some(slice) => Held::Slice(slice.into()),
        None => Held::Batches(args.batches),
    };
    let (stats, rows) = measure_run(be, &args.run, args.checkpoint.as_deref(), held, args.backend)?;
    if args.json {
        say(&serde_json::to_string_pretty(&stats)?);
        return Ok(());
    }
    let counted = match args.slice {
        Some(slice) => format!(
            "every window of the validation split's {}",
            data::EvalSlice::from(slice)
        ),
        None => format!("{} held-out batches of {rows} rows", args.batches),
    };
    say(&format!("{counted}; entropy is 1 when every bucket is used equally"));
    say(&format!(
        "{:<12} {:>5} {:>8} {:>6} {:>6} {:>8}",
        "layer", "table", "entropy", "dead", "rows", "chance*"
    ));
    for s in &stats {
        let rows = s.counts.len();
        // Rows that uniform use would leave empty in as many hits: rows · (1 − 1/rows)^hits.
        let chance = rows as f64 * (1.0 - 1.0 / rows.max(1) as f64).powf(s.hits() as f64);
        say(&format!(
            "{:<12} {:>5} {:>8.3} {:>6} {:>6} {:>8.1}",
            s.layer, s.table, s.entropy, s.dead_buckets, rows, chance
        ));
    }
    say(
        "(dead: rows no token hit, of the table's rows; * the rows uniform use would leave empty in as many hits. \
         A table is the site `LAYER.tableN` of `resmem analyze ablate`.)",
    );
    Ok(())
}
