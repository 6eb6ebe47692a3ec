//! How evenly a trained MemoryFormer's or hybrid's hash tables use their buckets: `resmem
//! analyze buckets` over every window of the validation split's test slice, per table and in
//! brief.
//!
//! Per table, not pooled: the tables of one model have 256 to 1,024 rows, and a pooled share of
//! empty rows mixes them. An empty row is counted against what chance leaves empty in as many
//! hits (`TableStats::empty_if_uniform`); the entropy gives the rows that do the work
//! (`effective_rows`), and a table with at most `COLLAPSED_ROWS` of them has collapsed.

use anyhow::Result;
use data::EvalSlice;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// A table with at most this many effective rows has collapsed: nearly every token reads the
/// same one or two rows.
pub const COLLAPSED_ROWS: f64 = 2.0;

/// Bucket use of a trained point, in brief and per table.
#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct BucketUse {
    /// Tokens counted: every window of the test slice once.
    #[serde(default)]
    pub tokens: u64,
    pub tables: usize,
    /// Normalised entropy of each table's bucket use (1: every bucket alike): mean and lowest,
    /// and which table is lowest.
    pub entropy_mean: f64,
    pub entropy_min: f64,
    #[serde(default)]
    pub lowest_table: String,
    /// exp(H), the rows doing the work, per table: their mean as a share of the table's rows.
    #[serde(default)]
    pub effective_share_mean: f64,
    /// Tables with at most `COLLAPSED_ROWS` effective rows.
    #[serde(default)]
    pub collapsed: usize,
    /// The share of all buckets that no counted token hit.
    pub dead_fraction: f64,
    /// The same beyond what uniform use would leave empty in as many hits: dead rows, not
    /// rows the sample missed.
    #[serde(default)]
    pub dead_beyond_chance: f64,
    /// Counted hits per bucket that was hit, mean over those buckets.
    pub hits_per_live_bucket: f64,
    /// The run's training tokens over a table's buckets, averaged over tables: the hits each
    /// row would have had in training, were the buckets used alike.
    pub train_hits_per_bucket_if_even: f64,
    #[serde(default)]
    pub per_table: Vec<TableUse>,
}

/// One table's use.
#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct TableUse {
    pub layer: String,
    pub table: usize,
    pub rows: usize,
    pub entropy: f64,
    pub effective_rows: f64,
    pub empty: usize,
    pub empty_if_uniform: f64,
}

pub(super) fn bucket_use(
    dir: &Path,
    backend: crate::args::BackendKind,
    tokens: Option<u64>,
    quick: bool,
) -> Result<BucketUse> {
    // --quick checks the pipeline on the run's own held-out batches, not the whole slice.
    let held = match quick {
        false => crate::buckets::Held::Slice(EvalSlice::Test),
        true => crate::buckets::Held::Batches(1),
    };
    let (stats, _) = crate::with_backend!(backend, be => crate::buckets::measure_run(be, dir, None, held, backend))?;
    let n = stats.len().max(1) as f64;
    let buckets: usize = stats.iter().map(|s| s.counts.len()).sum();
    let dead: usize = stats.iter().map(|s| s.dead_buckets).sum();
    let hits: u64 = stats.iter().flat_map(|s| s.counts.iter()).sum();
    let chance: f64 = stats.iter().map(|s| s.empty_if_uniform()).sum();
    let even = stats
        .iter()
        .map(|s| tokens.unwrap_or(0) as f64 / s.counts.len().max(1) as f64)
        .sum::<f64>()
        / n;
    let lowest = stats.iter().min_by(|a, b| a.entropy.total_cmp(&b.entropy));
    let per_table: Vec<TableUse> = stats
        .iter()
        .map(|s| TableUse {
            layer: s.layer.clone(),
            table: s.table,
            rows: s.counts.len(),
            entropy: s.entropy,
            effective_rows: s.effective_rows(),
            empty: s.dead_buckets,
            empty_if_uniform: s.empty_if_uniform(),
        })
        .collect();
    Ok(BucketUse {
        // Every table of a layer counts each token once.
        tokens: stats.first().map_or(0, |s| s.hits()),
        tables: stats.len(),
        entropy_mean: stats.iter().map(|s| s.entropy).sum::<f64>() / n,
        entropy_min: lowest.map_or(f64::NAN, |s| s.entropy),
        lowest_table: lowest.map_or(String::new(), |s| format!("{} table {}", s.layer, s.table)),
        effective_share_mean: per_table.iter().map(|t| t.effective_rows / t.rows as f64).sum::<f64>() / n,
        collapsed: per_table.iter().filter(|t| t.effective_rows <= COLLAPSED_ROWS).count(),
        dead_fraction: dead as f64 / buckets.max(1) as f64,
        dead_beyond_chance: (dead as f64 - chance).max(0.0) / buckets.max(1) as f64,
        hits_per_live_bucket: hits as f64 / (buckets - dead).max(1) as f64,
        train_hits_per_bucket_if_even: even,
        per_table,
    })
}

/// One arm's collapse: how many of its runs' tables collapse and in which layers, and the
/// loss of its runs with a collapsed table against those without (do they explain its gap?).
#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct Collapse {
    pub arm: String,
    pub runs: usize,
    /// Tables per run, and collapsed tables over all runs.
    pub tables: usize,
    pub collapsed: usize,
    /// Runs with at least one collapsed table.
    pub runs_with: usize,
    /// Per layer: its collapsed tables over all runs, and its tables over all runs.
    pub layers: Vec<(String, usize, usize)>,
    /// Mean test loss of the runs with a collapsed table and of those without.
    pub loss_with: Option<f64>,
    pub loss_without: Option<f64>,
    /// with − without, Welch's interval.
    pub difference: Option<crate::stats::Welch>,
    /// Test loss against the number of collapsed tables, over runs: the slope is the loss a
    /// collapsed table costs, the intercept the loss the fit gives a run with none.
    #[serde(default)]
    pub per_table: Option<crate::stats::Line>,
}

/// [`Collapse`] of every arm whose points measured their tables (a variant, or a point's
/// label where there are none), in the order they first appear.
pub fn collapse(points: &[super::summary::PointSummary]) -> Vec<Collapse> {
    let arm = |p: &super::summary::PointSummary| match p.settings.get("variant").and_then(serde_json::Value::as_str) {
        Some(v) => v.to_string(),
        None => p.label.clone(),
    };
    let mut arms: Vec<String> = vec![];
    for p in points
        .iter()
        .filter(|p| p.buckets.as_ref().is_some_and(|b| !b.per_table.is_empty()))
    {
        if !arms.contains(&arm(p)) {
            arms.push(arm(p));
        }
    }
    arms.into_iter()
        .map(|name| {
            let runs: Vec<(&BucketUse, Option<f64>)> = (points.iter())
                .filter(|p| arm(p) == name)
                .filter_map(|p| Some((p.buckets.as_ref().filter(|b| !b.per_table.is_empty())?, p.test_loss)))
                .collect();
            let mut layers: Vec<(String, usize, usize)> = vec![];
            for t in runs.iter().flat_map(|(b, _)| &b.per_table) {
                let i = match layers.iter().position(|l| l.0 == t.layer) {
                    Some(i) => i,
                    None => {
                        layers.push((t.layer.clone(), 0, 0));
                        layers.len() - 1
                    }
                };
                layers[i].1 += usize::from(t.effective_rows <= COLLAPSED_ROWS);
                layers[i].2 += 1;
            }
            let losses = |with: bool| -> Vec<f64> {
                (runs.iter())
                    .filter(|(b, _)| (b.collapsed > 0) == with)
                    .filter_map(|(_, l)| *l)
                    .collect()
            };
            let (with, without) = (losses(true), losses(false));
            let (counts, all): (Vec<f64>, Vec<f64>) = (runs.iter())
                .filter_map(|(b, l)| Some((b.collapsed as f64, (*l)?)))
                .unzip();
            let mean = |x: &[f64]| (!x.is_empty()).then(|| x.iter().sum::<f64>() / x.len() as f64);
            Collapse {
                arm: name,
                runs: runs.len(),
                tables: runs.first().map_or(0, |(b, _)| b.tables),
                collapsed: runs.iter().map(|(b, _)| b.collapsed).sum(),
                runs_with: runs.iter().filter(|(b, _)| b.collapsed > 0).count(),
                layers,
                loss_with: mean(&with),
                loss_without: mean(&without),
                difference: crate::stats::welch_interval(&with, &without),
                per_table: crate::stats::line(&counts, &all),
            }
        })
        .collect()
}

/// The collapse table, as the sweep prints it and `resmem analyze collapse` reprints it.
pub fn print_collapse(rows: &[Collapse]) {
    if rows.is_empty() {
        return;
    }
    out!(
        "hash-table collapse (at most {COLLAPSED_ROWS} effective rows, exp of the entropy of a table's bucket use over the test slice):"
    );
    for c in rows {
        let share = c.collapsed as f64 / (c.runs * c.tables).max(1) as f64;
        out!(
            "{}: {} of {} tables collapsed ({:.1}%) over {} runs; {} runs have at least one",
            c.arm,
            c.collapsed,
            c.runs * c.tables,
            100.0 * share,
            c.runs,
            c.runs_with
        );
        let layers: Vec<String> = (c.layers.iter())
            .map(|(layer, collapsed, tables)| format!("{layer} {collapsed}/{tables}"))
            .collect();
        out!("  by layer: {}", layers.join(", "));
        let loss = |l: Option<f64>| l.map_or("–".to_string(), |l| format!("{l:.4}"));
        let difference = match c.difference {
            Some(w) => format!(
                "{:+.4} [{:+.4}, {:+.4}] (Welch, df {:.1})",
                w.difference, w.low, w.high, w.df
            ),
            None => "not computable (fewer than 2 runs on a side)".to_string(),
        };
        out!(
            "  test loss with a collapsed table {} ({} runs), without {} ({} runs): with − without {difference}",
            loss(c.loss_with),
            c.runs_with,
            loss(c.loss_without),
            c.runs - c.runs_with
        );
        match c.per_table {
            Some(l) => out!(
                "  test loss against collapsed tables, over {} runs: {:+.4} [{:+.4}, {:+.4}] a table; with none the line \
                 gives {:.4} [{:.4}, {:.4}], {:+.4} from the runs' mean at {:.1} collapsed tables",
                l.n,
                l.slope,
                l.slope_low,
                l.slope_high,
                l.intercept,
                l.intercept_low,
                l.intercept_high,
                l.slope * c.collapsed as f64 / c.runs as f64,
                c.collapsed as f64 / c.runs as f64
            ),
            None => out!("  test loss against collapsed tables: no line (fewer than 3 runs, or every run alike)"),
        }
    }
}
