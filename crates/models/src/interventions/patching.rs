//! Activation patching of a clean and a corrupted prompt held in two sequences of one batch:
//! each site, patched from the clean forward into the corrupted one at one position (and at
//! all), recovers a fraction of the logit difference between them; attribution patching
//! estimates the same fractions to first order from one forward and one backward.

use super::drive::{self, Outcome};
use super::edits::Edit;
use super::sites::{Point, Site, Target};
use crate::{LanguageModel, ModelError, Result};
use data::Batch;
use engine::Backend;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The two prompts' sequences, the token whose logit (difference) is read, and the logits.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Pair {
    /// The clean prompt's sequence.
    pub from: usize,
    /// The corrupted prompt's sequence: the one patched.
    pub to: usize,
    /// The prompts' length in tokens (the positions patched are 0..valid).
    pub valid: usize,
    /// The position whose logit is read.
    pub token: usize,
    pub target: u32,
    pub versus: Option<u32>,
}

impl Pair {
    /// The rows a patching forward reads, in windows of `t`: the clean prompt's token, then the
    /// corrupted prompt's.
    pub fn rows(&self, t: usize) -> [usize; 2] {
        [self.from * t + self.token, self.to * t + self.token]
    }
}

/// One site's patches: the fraction of the logit difference recovered at each position, then
/// at all of them; and attribution patching's first-order estimates of the same.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Patched {
    pub site: String,
    pub positions: Vec<f64>,
    pub all: f64,
    pub estimated_positions: Vec<f64>,
    pub estimated_all: f64,
}

/// How well attribution patching's estimates follow the patches: Pearson's correlation over
/// every cell, and the largest difference.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Agreement {
    pub correlation: f64,
    pub largest_difference: f64,
}

impl Agreement {
    pub fn of(rows: &[Patched]) -> Self {
        let pairs: Vec<(f64, f64)> = (rows.iter())
            .flat_map(|r| {
                let cells = r.positions.iter().zip(&r.estimated_positions);
                cells.chain([(&r.all, &r.estimated_all)])
            })
            .map(|(&a, &b)| (a, b))
            .collect();
        let n = pairs.len() as f64;
        let mean = |f: fn(&(f64, f64)) -> f64| pairs.iter().map(f).sum::<f64>() / n;
        let (ma, mb) = (mean(|p| p.0), mean(|p| p.1));
        let cov: f64 = pairs.iter().map(|(a, b)| (a - ma) * (b - mb)).sum();
        let va: f64 = pairs.iter().map(|(a, _)| (a - ma).powi(2)).sum();
        let vb: f64 = pairs.iter().map(|(_, b)| (b - mb).powi(2)).sum();
        Self {
            correlation: cov / (va * vb).sqrt(),
            largest_difference: pairs.iter().map(|(a, b)| (a - b).abs()).fold(0.0, f64::max),
        }
    }
}

/// The unedited forward's points and gradients for one pair, from which each site is patched.
pub struct Patcher {
    pair: Pair,
    t: usize,
    /// logit difference of the clean and of the corrupted prompt, unedited.
    pub clean: f64,
    pub corrupt: f64,
    values: BTreeMap<Point, (Vec<f32>, usize)>,
    grads: BTreeMap<Point, (Vec<f32>, usize)>,
}

impl Patcher {
    /// From `base`, the unedited forward's logits at the two prompts' token (clean first, as
    /// [`Pair::rows`] lists them), which the caller has read to choose the logits: one forward
    /// for every point's values and one backward at the corrupted prompt's token. Fails where
    /// the two prompts give the same difference: a patch would have nothing to recover.
    pub async fn new<B: Backend, M: LanguageModel<B>>(
        be: &B,
        model: &mut M,
        on: (&Batch, Option<u32>),
        pair: Pair,
        base: &Outcome,
    ) -> Result<Self> {
        let t = model.batch_shape().1;
        let (clean, corrupt) = differences(base, pair);
        if clean == corrupt {
            return Err(ModelError::Config(format!(
                "the clean and corrupted prompts give the same logit difference ({clean:.4}): nothing for a patch to recover"
            )));
        }
        let values = drive::read_points(be, model, on).await?;
        let row = pair.to * t + pair.token;
        let grads = drive::gradients(be, model, on, row, (pair.target, pair.versus)).await?;
        Ok(Self {
            pair,
            t,
            clean,
            corrupt,
            values,
            grads,
        })
    }

    /// `site` (whose points are `targets`) patched at each position, then at all of them.
    pub async fn site<B: Backend, M: LanguageModel<B>>(
        &self,
        be: &B,
        model: &mut M,
        on: (&Batch, Option<u32>),
        site: Site,
        targets: &[Target],
    ) -> Result<Patched> {
        let Pair { from, to, valid, .. } = self.pair;
        let span = self.clean - self.corrupt;
        let estimated = |positions: &[usize]| -> Result<f64> {
            let (values, grads) = (&self.values, &self.grads);
            Ok(drive::estimate(values, grads, targets, (from, to), positions, self.t)? / span)
        };
        let (mut positions, mut estimated_positions) = (Vec::new(), Vec::new());
        for p in 0..valid {
            let edits = drive::patch(&self.values, targets, (from, to), &[p], self.t)?;
            positions.push(self.recovered(be, model, on, &edits).await?);
            estimated_positions.push(estimated(&[p])?);
        }
        let every: Vec<usize> = (0..valid).collect();
        let edits = drive::patch(&self.values, targets, (from, to), &every, self.t)?;
        Ok(Patched {
            site: site.to_string(),
            positions,
            all: self.recovered(be, model, on, &edits).await?,
            estimated_positions,
            estimated_all: estimated(&every)?,
        })
    }

    /// The fraction of the logit difference that the corrupted prompt recovers with `edits`.
    async fn recovered<B: Backend, M: LanguageModel<B>>(
        &self,
        be: &B,
        model: &mut M,
        on: (&Batch, Option<u32>),
        edits: &BTreeMap<Point, Edit>,
    ) -> Result<f64> {
        let o = drive::forward(be, model, on, edits, &self.pair.rows(self.t)).await?;
        Ok((differences(&o, self.pair).1 - self.corrupt) / (self.clean - self.corrupt))
    }
}

/// The logit differences of the clean and the corrupted prompt in a forward of `rows`.
fn differences(o: &Outcome, pair: Pair) -> (f64, f64) {
    let d = |i| o.difference(i, pair.target, pair.versus);
    (d(0), d(1))
}
