//! How evenly a trained MemoryFormer's or hybrid's hash tables use their buckets, in brief:
//! `resmem analyze buckets` on a few held-out batches.

use anyhow::Result;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// `resmem analyze buckets` of a trained point, in brief.
#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct BucketUse {
    /// Held-out batches counted, of `rows` tokens each.
    pub batches: usize,
    pub rows: usize,
    pub tables: usize,
    /// Normalised entropy of each table's bucket use (1: every bucket alike): mean and lowest.
    pub entropy_mean: f64,
    pub entropy_min: f64,
    /// The share of all buckets that no counted token hit.
    pub dead_fraction: f64,
    /// Counted hits per bucket that was hit, mean over those buckets.
    pub hits_per_live_bucket: f64,
    /// The run's training tokens over a table's buckets, averaged over tables: the hits each
    /// row would have had in training, were the buckets used alike.
    pub train_hits_per_bucket_if_even: f64,
}

/// Held-out batches a sweep counts bucket use over.
const BUCKET_BATCHES: usize = 4;

pub(super) fn bucket_use(dir: &Path, backend: crate::args::BackendKind, tokens: Option<u64>) -> Result<BucketUse> {
    let (stats, rows) =
        crate::with_backend!(backend, be => crate::buckets::measure_run(be, dir, None, BUCKET_BATCHES, backend))?;
    let n = stats.len().max(1) as f64;
    let buckets: usize = stats.iter().map(|s| s.counts.len()).sum();
    let dead: usize = stats.iter().map(|s| s.dead_buckets).sum();
    let hits: u64 = stats.iter().flat_map(|s| s.counts.iter()).sum();
    let even = stats
        .iter()
        .map(|s| tokens.unwrap_or(0) as f64 / s.counts.len().max(1) as f64)
        .sum::<f64>()
        / n;
    Ok(BucketUse {
        batches: BUCKET_BATCHES,
        rows,
        tables: stats.len(),
        entropy_mean: stats.iter().map(|s| s.entropy).sum::<f64>() / n,
        entropy_min: stats.iter().map(|s| s.entropy).fold(f64::INFINITY, f64::min),
        dead_fraction: dead as f64 / buckets.max(1) as f64,
        hits_per_live_bucket: hits as f64 / (buckets - dead).max(1) as f64,
        train_hits_per_bucket_if_even: even,
    })
}
