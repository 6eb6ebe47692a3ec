//! A `reference` variant (RMT paper Table 3's form): what each other variant spends in tokens,
//! FLOPs and parameters to reach the reference's final validation loss, from the seeds' mean
//! validation curves.

use super::summary::{PointSummary, Summary};
use crate::run_dir::{self, CONFIG_FILE};
use anyhow::{anyhow, bail, Result};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::path::Path;

/// RMT paper Table 3's form: what a variant spends to reach the reference's final validation
/// loss. Losses are means over seeds, at each evaluation.
#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct EqualLoss {
    pub variant: String,
    pub reference: String,
    /// The reference's final validation loss.
    pub target_val_loss: f64,
    pub final_val_loss: f64,
    /// Training tokens and FLOPs (3× forward) at which the variant's loss first reaches the
    /// target, interpolated linearly between evaluations; None when it never does.
    pub tokens: Option<f64>,
    pub flops: Option<f64>,
    pub reference_tokens: f64,
    pub reference_flops: f64,
    pub params: u64,
    pub reference_params: u64,
    /// 1 − variant / reference.
    pub tokens_saving: Option<f64>,
    pub flops_saving: Option<f64>,
    pub params_saving: f64,
}

/// (training tokens, validation loss) at each evaluation.
pub(super) type Curve = Vec<(f64, f64)>;

/// A point's validation curve.
pub(super) fn curve(out: &Path, p: &PointSummary) -> Result<Curve> {
    let dir = out.join(&p.dir);
    let cfg = crate::resolve::read_config(&dir.join(CONFIG_FILE))?;
    let per_step = (cfg.train.batch * cfg.data.seq_len()) as f64;
    let metrics = run_dir::read_metrics(&dir)?.unwrap_or_default();
    Ok(metrics
        .rows
        .iter()
        .filter_map(|(_, r)| Some((r.step as f64 * per_step, r.val_loss?)))
        .collect())
}

/// A variant's validation curve, the mean over its seeds.
fn mean_curve(out: &Path, points: &[&PointSummary]) -> Result<Curve> {
    let curves = points.iter().map(|p| curve(out, p)).collect::<Result<Vec<_>>>()?;
    let Some(first) = curves.first() else {
        return Ok(vec![]);
    };
    if curves.iter().any(|c| c.len() != first.len()) {
        bail!("the seeds of a variant evaluated at different steps; they cannot be averaged");
    }
    Ok((0..first.len())
        .map(|i| {
            let mean = curves.iter().map(|c| c[i].1).sum::<f64>() / curves.len() as f64;
            (first[i].0, mean)
        })
        .collect())
}

/// The tokens at which `curve` first reaches `target`, interpolated between evaluations.
pub(super) fn tokens_to_reach(curve: &[(f64, f64)], target: f64) -> Option<f64> {
    let i = curve.iter().position(|&(_, v)| v <= target)?;
    if i == 0 {
        return Some(curve[0].0);
    }
    let ((t0, v0), (t1, v1)) = (curve[i - 1], curve[i]);
    Some(t0 + (v0 - target) / (v0 - v1) * (t1 - t0))
}

pub(super) fn equal_loss(out: &Path, summary: &Summary, reference: &str) -> Result<Vec<EqualLoss>> {
    let variant = |p: &PointSummary| p.settings.get("variant").and_then(Value::as_str).map(str::to_string);
    let mut labels: Vec<String> = vec![];
    for l in summary.points.iter().filter_map(variant) {
        if !labels.contains(&l) {
            labels.push(l);
        }
    }
    let of = |label: &str| -> Vec<&PointSummary> {
        summary
            .points
            .iter()
            .filter(|p| variant(p).as_deref() == Some(label))
            .collect()
    };
    let facts = |label: &str| -> Result<(Curve, f64, u64)> {
        let points = of(label);
        let curve = mean_curve(out, &points)?;
        let p = points
            .first()
            .ok_or_else(|| anyhow!("no points of the variant {label}"))?;
        Ok((curve, p.flops_per_token.unwrap_or(0.0), p.params.unwrap_or(0)))
    };
    let (ref_curve, ref_fpt, ref_params) = facts(reference)?;
    let Some(&(ref_tokens, target)) = ref_curve.last() else {
        bail!("the reference `{reference}` has no validation losses; give it an eval_every");
    };
    let mut rows = vec![];
    for label in labels.iter().filter(|l| *l != reference) {
        let (curve, fpt, params) = facts(label)?;
        let tokens = tokens_to_reach(&curve, target);
        let flops = tokens.map(|t| 3.0 * fpt * t);
        let reference_flops = 3.0 * ref_fpt * ref_tokens;
        rows.push(EqualLoss {
            variant: label.clone(),
            reference: reference.to_string(),
            target_val_loss: target,
            final_val_loss: curve.last().map_or(f64::NAN, |c| c.1),
            tokens,
            flops,
            reference_tokens: ref_tokens,
            reference_flops,
            params,
            reference_params: ref_params,
            tokens_saving: tokens.map(|t| 1.0 - t / ref_tokens),
            flops_saving: flops.map(|f| 1.0 - f / reference_flops),
            params_saving: 1.0 - params as f64 / ref_params.max(1) as f64,
        });
    }
    Ok(rows)
}

pub(super) fn print_equal_loss(rows: &[EqualLoss]) {
    let Some(first) = rows.first() else { return };
    out!(
        "at {}'s final validation loss {:.4} ({} tokens, {:.3e} training FLOPs, {} parameters):",
        first.reference,
        first.target_val_loss,
        first.reference_tokens,
        first.reference_flops,
        models::count::thousands(first.reference_params)
    );
    out!(
        "{:<20} {:>9} {:>12} {:>11} {:>11} {:>9} {:>9} {:>9}",
        "variant",
        "final",
        "tokens",
        "FLOPs",
        "params",
        "−tokens",
        "−FLOPs",
        "−params"
    );
    let pct = |x: Option<f64>| x.map_or("never".to_string(), |x| format!("{:.1}%", 100.0 * x));
    for r in rows {
        out!(
            "{:<20} {:>9.4} {:>12} {:>11} {:>11} {:>9} {:>9} {:>9}",
            r.variant,
            r.final_val_loss,
            r.tokens.map_or("never".into(), |t| format!("{t:.0}")),
            r.flops.map_or("never".into(), |f| format!("{f:.3e}")),
            models::count::thousands(r.params),
            pct(r.tokens_saving),
            pct(r.flops_saving),
            pct(Some(r.params_saving)),
        );
    }
    out!(
        "(−tokens, −FLOPs, −params: what a variant saves against {} to reach that loss; a negative saving is how much \
         more it spends; never: it did not reach the loss)",
        first.reference
    );
}
