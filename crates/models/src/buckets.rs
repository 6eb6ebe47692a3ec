//! Bucket statistics of MemoryFormer's hash tables (the paper's Figure 4): how often each
//! bucket is hit over a batch or a window of steps, the normalised entropy of those counts (1
//! when every bucket is hit equally, 0 when one bucket takes every row), and the dead buckets.

use crate::Result;
use engine::Backend;
use serde::{Deserialize, Serialize};

/// A hashed layer's bucket boundaries on the device, as the model exposes them.
pub struct HashedLayer<'a, B: Backend> {
    /// "block0.qkv", "block0.ml1", "block0.ml2"
    pub name: String,
    pub tau: usize,
    pub tables: usize,
    /// (tables, 2^τ + 1) bucket starts of the last forward.
    pub starts: &'a B::Index,
}

/// Hits per bucket of every table of one layer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BucketCounts {
    pub layer: String,
    pub tau: usize,
    /// (tables, 2^τ)
    pub counts: Vec<Vec<u64>>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TableStats {
    pub layer: String,
    pub table: usize,
    pub entropy: f64,
    pub dead_buckets: usize,
    /// Hits of each of the 2^τ buckets.
    pub counts: Vec<u64>,
}

impl TableStats {
    /// Rows counted: the hits of all buckets.
    pub fn hits(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// exp(H): the number of buckets that equally used would give this entropy. It says how
    /// many rows do the work, where the dead count only says how many do none.
    pub fn effective_rows(&self) -> f64 {
        (self.entropy * (self.counts.len() as f64).ln()).exp()
    }

    /// Buckets that a table used uniformly would leave empty in as many hits, K·(1 − 1/K)^N:
    /// an empty bucket is evidence of a dead row only beyond this. With 4,096 hits on 1,024
    /// rows it is 18; with 200k, none.
    pub fn empty_if_uniform(&self) -> f64 {
        let k = self.counts.len() as f64;
        k * (1.0 - 1.0 / k).powf(self.hits() as f64)
    }
}

/// Reads the counts of the last forward from the bucket starts.
pub async fn read<B: Backend>(be: &B, layers: &[HashedLayer<'_, B>]) -> Result<Vec<BucketCounts>> {
    // One readback for every layer: the page reads these after each step.
    let all = be
        .read_indices(&layers.iter().map(|l| l.starts).collect::<Vec<_>>())
        .await?;
    let mut out = vec![];
    for (l, starts) in layers.iter().zip(all) {
        let nb = 1 << l.tau;
        let counts = starts
            .chunks(nb + 1)
            .take(l.tables)
            .map(|s| s.windows(2).map(|w| (w[1] - w[0]) as u64).collect())
            .collect();
        out.push(BucketCounts {
            layer: l.name.clone(),
            tau: l.tau,
            counts,
        });
    }
    Ok(out)
}

/// H(counts)/ln(buckets): 1 for a uniform use of every bucket, 0 for a single one.
pub fn normalised_entropy(counts: &[u64]) -> f64 {
    let total: u64 = counts.iter().sum();
    if total == 0 || counts.len() < 2 {
        return 0.0;
    }
    let h: f64 = counts
        .iter()
        .filter(|&&c| c > 0)
        .map(|&c| {
            let p = c as f64 / total as f64;
            -p * p.ln()
        })
        .sum();
    // One bucket used: its term is -1·ln 1 = -0.0, printed "-0.000"; adding 0.0 makes it +0.0.
    h / (counts.len() as f64).ln() + 0.0
}

impl BucketCounts {
    /// Adds another measurement of the same layer, for a window of steps.
    pub fn accumulate(&mut self, other: &BucketCounts) {
        for (mine, theirs) in self.counts.iter_mut().zip(&other.counts) {
            mine.iter_mut().zip(theirs).for_each(|(a, b)| *a += b);
        }
    }

    pub fn stats(&self) -> Vec<TableStats> {
        self.counts
            .iter()
            .enumerate()
            .map(|(table, c)| TableStats {
                layer: self.layer.clone(),
                table,
                entropy: normalised_entropy(c),
                dead_buckets: c.iter().filter(|&&n| n == 0).count(),
                counts: c.clone(),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn effective_rows_and_the_empty_buckets_chance_leaves() {
        let table = |counts: Vec<u64>| TableStats {
            layer: "l".into(),
            table: 0,
            entropy: normalised_entropy(&counts),
            dead_buckets: counts.iter().filter(|&&c| c == 0).count(),
            counts,
        };
        // Two of four buckets used alike: exp(ln 2) = 2 effective rows.
        assert!((table(vec![7, 7, 0, 0]).effective_rows() - 2.0).abs() < 1e-12);
        assert!((table(vec![3, 3, 3, 3]).effective_rows() - 4.0).abs() < 1e-12);
        assert!((table(vec![9, 0, 0, 0]).effective_rows() - 1.0).abs() < 1e-12);
        // Hand-computed: 4 buckets, 2 hits: 4·(3/4)² = 2.25 empty expected.
        assert!((table(vec![1, 1, 0, 0]).empty_if_uniform() - 2.25).abs() < 1e-12);
        // 1,024 rows, 4,096 hits: 1024·(1023/1024)^4096 ≈ 18.7.
        let mut c = vec![4u64; 1024];
        c[0] = 4;
        assert!((table(c).empty_if_uniform() - 18.7).abs() < 0.1);
    }

    #[test]
    fn entropy_is_one_when_uniform_and_zero_when_one_bucket() {
        assert!((normalised_entropy(&[5, 5, 5, 5]) - 1.0).abs() < 1e-12);
        assert_eq!(
            normalised_entropy(&[0, 9, 0, 0]).to_bits(),
            0.0f64.to_bits(),
            "not -0.0"
        );
        let skewed = normalised_entropy(&[10, 1, 1, 0]);
        assert!(skewed > 0.0 && skewed < 0.6, "{skewed}");
    }
}
