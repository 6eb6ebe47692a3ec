//! `variance = true`: every point's variance ratios at init and after training, and the table
//! of them per variant and site kind beside the closed form (RMT paper Tables 1-2).

use super::summary::{PointSummary, Summary};
use crate::run_dir::CONFIG_FILE;
use anyhow::Result;
use models::probes::{Layer, Measured, Op};
use models::variance::{self, InitScheme};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::path::Path;

#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct PointVariance {
    pub init: Vec<Measured>,
    pub trained: Vec<Measured>,
}

/// One site kind of one variant: the closed form at init, and the geometric means of the
/// measured ratios over its blocks and seeds (ratios multiply, so their logs are averaged).
#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct VarianceRow {
    pub variant: String,
    pub layer: Layer,
    pub op: Op,
    pub closed_forward: f64,
    pub closed_backward: f64,
    pub init_forward: Option<f64>,
    pub init_backward: Option<f64>,
    pub trained_forward: Option<f64>,
    pub trained_backward: Option<f64>,
}

/// The variance table: per variant (or per point label without variants) and site kind.
pub(super) fn variance_rows(out: &Path, summary: &Summary) -> Result<Vec<VarianceRow>> {
    let group = |p: &PointSummary| match p.settings.get("variant").and_then(Value::as_str) {
        Some(v) => v.to_string(),
        None => p.label.clone(),
    };
    let mut groups: Vec<String> = vec![];
    for p in &summary.points {
        if !groups.contains(&group(p)) {
            groups.push(group(p));
        }
    }
    let geomean = |xs: Vec<Option<f64>>| -> Option<f64> {
        let xs: Option<Vec<f64>> = xs.into_iter().collect();
        let xs = xs.filter(|x| !x.is_empty() && x.iter().all(|v| *v > 0.0))?;
        Some((xs.iter().map(|x| x.ln()).sum::<f64>() / xs.len() as f64).exp())
    };
    let mut rows = vec![];
    for g in groups {
        let points: Vec<&PointSummary> = summary.points.iter().filter(|p| group(p) == g).collect();
        let Some(first) = points.first() else { continue };
        let cfg = crate::resolve::read_config(&out.join(&first.dir).join(CONFIG_FILE))?;
        let Some(closed) = variance::closed_form(&cfg.model, InitScheme::Default) else {
            continue;
        };
        for c in closed {
            let of = |pick: fn(&PointVariance) -> &Vec<Measured>, fwd: bool| -> Vec<Option<f64>> {
                points
                    .iter()
                    .filter_map(|p| p.variance.as_ref())
                    .flat_map(|v| pick(v).iter())
                    .filter(|m| (m.site.layer, m.site.op) == (c.layer, c.op))
                    .map(|m| if fwd { m.forward_ratio } else { m.backward_ratio })
                    .collect()
            };
            rows.push(VarianceRow {
                variant: g.clone(),
                layer: c.layer,
                op: c.op,
                closed_forward: c.forward_ratio,
                closed_backward: c.backward_ratio,
                init_forward: geomean(of(|v| &v.init, true)),
                init_backward: geomean(of(|v| &v.init, false)),
                trained_forward: geomean(of(|v| &v.trained, true)),
                trained_backward: geomean(of(|v| &v.trained, false)),
            });
        }
    }
    Ok(rows)
}

pub(super) fn print_variance(rows: &[VarianceRow]) {
    if rows.is_empty() {
        return;
    }
    out!("variance ratios, geometric means over blocks and seeds (forward σ²out/σ²in, backward σ²gin/σ²gout):");
    out!(
        "{:<14} {:<5} {:<10} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}",
        "variant",
        "layer",
        "op",
        "closed",
        "init",
        "trained",
        "closed",
        "init",
        "trained"
    );
    let f = |x: Option<f64>| x.map_or("n/a".to_string(), |x| format!("{x:.4}"));
    for r in rows {
        out!(
            "{:<14} {:<5} {:<10} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}",
            r.variant,
            format!("{:?}", r.layer).to_lowercase(),
            format!("{:?}", r.op).to_lowercase(),
            f(Some(r.closed_forward)),
            f(r.init_forward),
            f(r.trained_forward),
            f(Some(r.closed_backward)),
            f(r.init_backward),
            f(r.trained_backward),
        );
    }
    // Over the four sites every model has (the RMT's W1 and W2 are listed above, not here), so
    // that the models compare.
    out!("distance from 1, exp of the mean |ln ratio| over the four storage and retrieval sites:");
    let mut variants: Vec<&str> = vec![];
    for r in rows {
        if !variants.contains(&r.variant.as_str()) {
            variants.push(&r.variant);
        }
    }
    for v in variants {
        let of = |pick: fn(&VarianceRow) -> Option<f64>| {
            let sites = rows.iter().filter(|r| r.variant == v && variance::shared_site(r.op));
            variance::distance_from_one(sites.map(pick))
        };
        out!(
            "{:<14} {:<16} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}",
            v,
            "",
            f(of(|r| Some(r.closed_forward))),
            f(of(|r| r.init_forward)),
            f(of(|r| r.trained_forward)),
            f(of(|r| Some(r.closed_backward))),
            f(of(|r| r.init_backward)),
            f(of(|r| r.trained_backward)),
        );
    }
}
