//! `[[trend]]`: one test across an axis in place of many pairwise ones. For each seed, the
//! least-squares slope of a metric against a swept setting (in log2, per doubling, by default:
//! D_k, streams, τ), then the mean slope over seeds with Student's t interval. Five values of
//! D_k compared pairwise are four tests, each needing 130–950 seeds for the RMT paper's Fig. 6
//! effect; as one slope they need about 71.

use super::compare::{summarize, Metric, MetricResult};
use super::points::Point;
use super::summary::PointSummary;
use anyhow::{bail, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// `[[trend]]` in an experiment file.
#[derive(Deserialize, Clone, Debug)]
#[serde(deny_unknown_fields)]
pub struct Declared {
    /// The swept setting the slope runs along, e.g. "d_k".
    pub axis: String,
    /// Settings that fix every other difference between points, e.g. "variant=rmt".
    pub select: Option<String>,
    #[serde(default)]
    pub scale: Scale,
    /// The metric; test_loss by default.
    pub metric: Option<Metric>,
    pub claim: Option<String>,
}

#[derive(Deserialize, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Scale {
    /// Per doubling of the setting.
    #[default]
    Log2,
    /// Per unit of the setting.
    Linear,
}

/// A trend's result, as summary.json keeps it.
#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct Trend {
    pub axis: String,
    pub select: Option<String>,
    pub scale: Scale,
    pub claim: Option<String>,
    /// The axis values each seed's slope is fitted over.
    pub values: Vec<f64>,
    pub seeds: Vec<String>,
    /// Per-seed slopes, their mean and t interval; the verdict is "decreasing", "increasing" or
    /// "not resolved".
    pub result: MetricResult,
}

impl Declared {
    pub fn metric(&self) -> Metric {
        self.metric.unwrap_or(Metric::TestLoss)
    }

    fn what(&self) -> String {
        format!(
            "[[trend]] axis = \"{}\"{}",
            self.axis,
            self.select
                .as_ref()
                .map_or(String::new(), |s| format!(", select = \"{s}\""))
        )
    }
}

/// Per seed, its points' (axis value, point index), in axis order; refused before training
/// where the points do not make one curve per seed.
pub fn group(d: &Declared, points: &[Point]) -> Result<BTreeMap<String, Vec<(f64, usize)>>> {
    let what = d.what();
    if d.metric().is_ratio() {
        bail!("{what}: a trend needs a loss or time metric, not a ratio");
    }
    let axis = super::flags::setting_name(&d.axis);
    let mut by_seed: BTreeMap<String, Vec<(f64, usize)>> = BTreeMap::new();
    for (i, p) in points.iter().enumerate() {
        if d.select.as_ref().is_some_and(|s| !p.in_arm(s)) {
            continue;
        }
        let Some((_, v)) = p.settings.iter().find(|(k, _)| *k == axis) else {
            continue;
        };
        let Ok(x) = v.parse::<f64>() else {
            bail!("{what}: the value {v} of {axis} is not a number");
        };
        if d.scale == Scale::Log2 && x <= 0.0 {
            bail!("{what}: {axis} = {v} has no log2; give scale = \"linear\"");
        }
        let seed = p
            .settings
            .iter()
            .find(|(k, _)| k == "seed")
            .map_or_else(|| "-".to_string(), |(_, s)| s.clone());
        by_seed.entry(seed).or_default().push((x, i));
    }
    let Some(first) = by_seed.values().next() else {
        bail!("{what}: no point has the setting {axis}; name a [grid] setting");
    };
    let mut axis_values: Vec<f64> = first.iter().map(|(x, _)| *x).collect();
    axis_values.sort_by(f64::total_cmp);
    for (seed, curve) in by_seed.iter_mut() {
        curve.sort_by(|a, b| a.0.total_cmp(&b.0));
        if curve.windows(2).any(|w| w[0].0 == w[1].0) {
            bail!("{what}: seed {seed} has several points at one {axis}; select settings that fix the others");
        }
        if curve.iter().map(|c| c.0).collect::<Vec<_>>() != axis_values {
            bail!("{what}: seed {seed} has other {axis} values than the first seed; give every seed the same");
        }
    }
    if axis_values.len() < 3 {
        bail!("{what}: a trend needs at least 3 values of {axis}; with 2, declare a [[compare]]");
    }
    if by_seed.len() < 2 {
        bail!("{what}: a trend needs at least 2 seeds for an interval");
    }
    Ok(by_seed)
}

/// The least-squares slope of y on x.
pub fn slope(points: &[(f64, f64)]) -> f64 {
    let n = points.len() as f64;
    let (mx, my) = (
        points.iter().map(|p| p.0).sum::<f64>() / n,
        points.iter().map(|p| p.1).sum::<f64>() / n,
    );
    let sxy: f64 = points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    let sxx: f64 = points.iter().map(|p| (p.0 - mx).powi(2)).sum();
    sxy / sxx
}

/// Each seed's slope, on the seeds `seeds` where given.
pub fn slopes(
    d: &Declared,
    points: &[Point],
    summaries: &[PointSummary],
    seeds: Option<&[String]>,
) -> Result<Vec<(String, f64)>> {
    let mut out = vec![];
    for (seed, curve) in group(d, points)? {
        if seeds.is_some_and(|s| !s.contains(&seed)) {
            continue;
        }
        let mut xy = vec![];
        for &(x, i) in &curve {
            let s = &summaries[i];
            let y = match d.metric() {
                Metric::TestLoss => s.test_loss,
                Metric::FinalValLoss => s.final_val_loss,
                Metric::WallS => s.wall_s,
                // `group` refuses ratios before anything trains.
                Metric::TokensToTarget | Metric::FlopsToTarget => None,
            };
            let Some(y) = y else {
                bail!(
                    "{}: {} has no {}",
                    d.what(),
                    s.label,
                    super::compare::metric_name(d.metric())
                );
            };
            xy.push((if d.scale == Scale::Log2 { x.log2() } else { x }, y));
        }
        out.push((seed, slope(&xy)));
    }
    Ok(out)
}

pub fn compute(d: &Declared, points: &[Point], summaries: &[PointSummary], seeds: Option<&[String]>) -> Result<Trend> {
    let per_seed = slopes(d, points, summaries, seeds)?;
    let values: Vec<f64> = per_seed.iter().map(|(_, v)| *v).collect();
    let mut result = summarize(d.metric(), &values);
    let per = match d.scale {
        Scale::Log2 => format!("per doubling of {}", d.axis),
        Scale::Linear => format!("per unit of {}", d.axis),
    };
    result.statistic = format!("slope {per}");
    result.method = "mean over seeds of each seed's least-squares slope, Student's t interval".into();
    result.verdict = match result.verdict.as_str() {
        "a better" => "decreasing",
        "b better" => "increasing",
        v => v,
    }
    .to_string();
    let groups = group(d, points)?;
    let axis_values = groups
        .values()
        .next()
        .map_or(vec![], |c| c.iter().map(|(x, _)| *x).collect());
    Ok(Trend {
        axis: d.axis.clone(),
        select: d.select.clone(),
        scale: d.scale,
        claim: d.claim.clone(),
        values: axis_values,
        seeds: per_seed.into_iter().map(|(s, _)| s).collect(),
        result,
    })
}

/// The printed block of each trend.
pub fn print(trends: &[Trend]) {
    for t in trends {
        let r = &t.result;
        let num = |v: Option<f64>| v.map_or("-".to_string(), |x| format!("{x:+.4}"));
        out!(
            "trend of {} along {} ({}){}; {} seeds",
            super::compare::metric_name(r.metric),
            t.axis,
            t.values.iter().map(|v| v.to_string()).collect::<Vec<_>>().join(", "),
            t.claim.as_ref().map_or(String::new(), |c| format!("; claim: {c}")),
            t.seeds.len()
        );
        out!(
            "  {} = {} [{}, {}]  {}; p {}{}",
            r.statistic,
            num(r.estimate),
            num(r.low),
            num(r.high),
            r.verdict,
            r.p.map_or("-".into(), super::compare::p_text),
            super::compare::adjusted_text(r)
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_slope_is_least_squares() {
        // Hand-computed: x = 0, 1, 2, 3, y = 1, 3, 2, 5 → slope = Σ(x−1.5)(y−2.75)/Σ(x−1.5)² = 5.5/5 = 1.1.
        let s = slope(&[(0.0, 1.0), (1.0, 3.0), (2.0, 2.0), (3.0, 5.0)]);
        assert!((s - 1.1).abs() < 1e-12, "{s}");
        // Per doubling of D_k: log2 of 4, 8, 16, 32 is 2, 3, 4, 5, and a loss falling 0.01 a doubling.
        let xy: Vec<(f64, f64)> = [4.0f64, 8.0, 16.0, 32.0]
            .iter()
            .map(|d| (d.log2(), 2.0 - 0.01 * d.log2()))
            .collect();
        assert!((slope(&xy) + 0.01).abs() < 1e-12);
    }
}
