//! `[[match]]`: sizes solved before any training, so that points cost what a reference point
//! costs (parameters, forward FLOPs per token, or both) within a stated tolerance; and every
//! point's costs relative to its reference, for the summary.

use super::flags::{flag_name, resolved, set};
use super::points::Point;
use super::summary::PointSummary;
use crate::args::size_names;
use anyhow::{bail, Context, Result};
use models::matching::{self, Cost};
use serde::{Deserialize, Serialize};
use std::path::Path;

fn default_tolerance() -> f64 {
    0.02
}

/// `[[match]]` in an experiment file.
#[derive(Deserialize, Clone, Debug)]
#[serde(deny_unknown_fields)]
pub struct Declared {
    /// The arm whose costs are matched, as a `[[compare]]` arm names it (`"rmt"`, `"d_k=16"`).
    pub to: String,
    /// The arm whose sizes are solved; every point outside `to` when left out.
    pub points: Option<String>,
    /// `["params"]`, `["flops"]` or both.
    pub hold: Vec<Cost>,
    /// One or two sizes, by flag or config name: `d_ff`, `rank`, `layers`, `d_model`, …
    pub solve: Vec<String>,
    /// The largest relative deviation of a held cost.
    #[serde(default = "default_tolerance")]
    pub tolerance: f64,
}

/// What a point's match solved, kept in its summary.
#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct Matched {
    pub to: String,
    pub hold: Vec<Cost>,
    pub solved: Vec<(String, u64)>,
    pub tolerance: f64,
}

/// The run config a point trains, with V set from its data.
fn model_of(p: &Point, out: &Path) -> Result<(models::ModelConfig, usize)> {
    let (_, mut cfg) = resolved(p, out)?;
    cfg.set_vocab(crate::source::open(&cfg.data)?.vocab);
    Ok((cfg.model, cfg.data.seq_len()))
}

fn seed_of(p: &Point) -> Option<&str> {
    p.settings.iter().find(|(k, _)| k == "seed").map(|(_, v)| v.as_str())
}

/// Solves every `[[match]]`, setting the solved sizes as flags of the points it applies to;
/// returns each point's record. Fails before anything trains.
pub fn apply(
    declared: &[Declared],
    points: &mut [Point],
    out: &Path,
    swept: &[String],
) -> Result<Vec<Option<Matched>>> {
    let mut records: Vec<Option<Matched>> = vec![None; points.len()];
    for d in declared {
        let what = format!("[[match]] to = \"{}\"", d.to);
        if !(d.tolerance.is_finite() && d.tolerance > 0.0) {
            bail!("{what}: tolerance must be a positive fraction, e.g. 0.02 for 2%");
        }
        let names = d
            .solve
            .iter()
            .map(|s| size_names(s).with_context(|| what.clone()))
            .collect::<Result<Vec<_>>>()?;
        if let Some((flag, key)) = names
            .iter()
            .find(|(f, k)| swept.iter().any(|s| flag_name(s) == *f || s == k))
        {
            bail!("{what}: `{key}` is swept, so it cannot also be solved for (--{flag})");
        }
        let targets: Vec<usize> = (0..points.len()).filter(|&i| points[i].in_arm(&d.to)).collect();
        if targets.is_empty() {
            bail!("{what}: `{}` selects no point", d.to);
        }
        let keys: Vec<String> = names.iter().map(|(_, k)| k.to_string()).collect();
        for i in 0..points.len() {
            let applies = match &d.points {
                Some(arm) => points[i].in_arm(arm),
                None => !targets.contains(&i),
            };
            if !applies {
                continue;
            }
            if targets.contains(&i) {
                bail!("{what}: the point {} is both matched and the target", points[i].label());
            }
            // The target of the same seed (configs differ only by their seed, but stay exact).
            let t = *targets
                .iter()
                .find(|&&t| seed_of(&points[t]) == seed_of(&points[i]))
                .unwrap_or(&targets[0]);
            let (target, _) = model_of(&points[t], out)?;
            let (model, seq_len) = model_of(&points[i], out)?;
            let (_, solution) = matching::solve(&model, &target, seq_len, &d.hold, &keys, d.tolerance)
                .with_context(|| format!("{what}, for the point {}", points[i].label()))?;
            for ((flag, _), (_, value)) in names.iter().zip(&solution.values) {
                set(&mut points[i].flags, flag.to_string(), value.to_string());
            }
            records[i] = Some(Matched {
                to: points[t].label(),
                hold: d.hold.clone(),
                solved: solution.values,
                tolerance: d.tolerance,
            });
        }
    }
    Ok(records)
}

/// Each point's parameters and FLOPs per token over its reference's: the point it was matched
/// to (a match's target is its own), else the experiment's first `reference` variant, else the
/// sweep's first point, of the same seed where there is one.
pub fn relative_costs(summaries: &mut [PointSummary], points: &[Point], reference: Option<&str>) {
    let targets: Vec<String> = summaries
        .iter()
        .filter_map(|s| Some(s.matched.as_ref()?.to.clone()))
        .collect();
    let reference_of = |i: usize, s: &PointSummary| -> Option<usize> {
        let same_seed = |j: &usize| seed_of(&points[*j]) == seed_of(&points[i]);
        if let Some(m) = &s.matched {
            return (0..points.len()).find(|&j| points[j].label() == m.to);
        }
        if targets.contains(&s.label) {
            return Some(i);
        }
        match reference {
            Some(r) => (0..points.len()).filter(|&j| points[j].in_arm(r)).find(same_seed),
            None => (0..points.len()).find(same_seed),
        }
    };
    let refs: Vec<Option<usize>> = summaries.iter().enumerate().map(|(i, s)| reference_of(i, s)).collect();
    let costs: Vec<(Option<u64>, Option<f64>)> = summaries.iter().map(|s| (s.params, s.flops_per_token)).collect();
    for (s, r) in summaries.iter_mut().zip(refs) {
        let Some(r) = r else { continue };
        s.cost_reference = Some(points[r].label());
        s.params_vs_reference = s.params.zip(costs[r].0).map(|(a, b)| a as f64 / b as f64);
        s.flops_vs_reference = s.flops_per_token.zip(costs[r].1).map(|(a, b)| a / b);
    }
}
