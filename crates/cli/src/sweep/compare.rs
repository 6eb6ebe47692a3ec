//! Comparisons an experiment declares before its runs (`[[compare]]`): arm a against arm b,
//! paired by seed. Each metric gets its per-seed values, an estimate, a 95% interval and a
//! verdict read from the interval alone, so that nothing is chosen after seeing the data.
//!
//! - `test_loss`: a − b per seed of the final models' losses on the validation split's test
//!   slice (every window once); the mean, Student's t interval (lower is better).
//! - `final_val_loss`: the same on the run's last evaluation during training (eval_batches
//!   batches, whose own sampling error no interval over seeds can see).
//! - `tokens_to_target`, `flops_to_target`: per seed, the tokens (training FLOPs) a needs to
//!   first reach b's final validation loss, over b's; "never" is +∞ and stays in. The median,
//!   with the sign test's distribution-free interval over seeds (below 1: a needs less).
//! - `wall_s`: a − b per seed, as `final_val_loss`; noisy, as any timing on a shared machine.

use super::equal_loss::curve;
use super::points::Point;
use super::sequential::Sequential;
use super::summary::PointSummary;
use crate::stats;
use anyhow::{bail, Result};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// `[[compare]]` in an experiment file.
#[derive(Deserialize, Clone, Debug)]
#[serde(deny_unknown_fields)]
pub struct Declared {
    /// An arm: a variant's label (`"rmt"`) or settings (`"d_k=16"`, `"variant=rmt lr=0.01"`).
    pub a: String,
    pub b: String,
    /// The claim under test, in words; kept in the summary.
    pub claim: Option<String>,
    /// Which metrics; test_loss, tokens_to_target, flops_to_target and wall_s when left out.
    #[serde(default)]
    pub metrics: Vec<Metric>,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    TestLoss,
    FinalValLoss,
    TokensToTarget,
    FlopsToTarget,
    WallS,
}

impl Metric {
    /// The metrics of a comparison that names none.
    const DEFAULT: [Metric; 4] = [
        Metric::TestLoss,
        Metric::TokensToTarget,
        Metric::FlopsToTarget,
        Metric::WallS,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Metric::TestLoss => "test_loss",
            Metric::FinalValLoss => "final_val_loss",
            Metric::TokensToTarget => "tokens_to_target",
            Metric::FlopsToTarget => "flops_to_target",
            Metric::WallS => "wall_s",
        }
    }

    /// Differences (a − b, the mean) or ratios (a / b, the median).
    pub fn is_ratio(self) -> bool {
        matches!(self, Metric::TokensToTarget | Metric::FlopsToTarget)
    }
}

/// One declared comparison's results, as summary.json keeps them.
#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct Comparison {
    pub a: String,
    pub b: String,
    pub claim: Option<String>,
    /// The seeds, in the order of every `per_seed`.
    pub seeds: Vec<String>,
    /// What each arm costs (its first seed's point): parameters, forward FLOPs per token, and
    /// a's over b's.
    pub params: [Option<u64>; 2],
    pub flops_per_token: [Option<f64>; 2],
    pub params_ratio: Option<f64>,
    pub flops_per_token_ratio: Option<f64>,
    pub metrics: Vec<MetricResult>,
}

#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct MetricResult {
    pub metric: Metric,
    /// "a - b" or "a / b".
    pub statistic: String,
    pub method: String,
    /// Per seed; null where a never reached b's final loss (a ratio of +∞).
    pub per_seed: Vec<Option<f64>>,
    /// The mean difference or the median ratio; null where it is +∞.
    pub estimate: Option<f64>,
    /// The differences' sample standard deviation (ratios: none).
    pub sd: Option<f64>,
    /// The 95% interval; a null bound is +∞. A ratio's interval is (0, +∞) below 6 seeds,
    /// where no order-statistic interval reaches 95%.
    pub low: Option<f64>,
    pub high: Option<f64>,
    /// "a better", "b better" or "not resolved", from the interval alone.
    pub verdict: String,
    /// Seeds a paired t-test needs to resolve this effect at 80% power (ratios: on their logs,
    /// where every seed reached the target); null where the effect is zero or needs more than
    /// 10,000.
    pub seeds_for_power: Option<usize>,
    /// Timings on a shared machine.
    pub noisy: bool,
    /// The two-sided p of the paired t-test (differences only).
    #[serde(default)]
    pub p: Option<f64>,
    /// Under `[sequential]`, the first metric's decision at the look it stopped at.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sequential: Option<Sequential>,
    /// The first metric's p and verdict adjusted by Holm over the experiment's family.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holm: Option<Holm>,
}

/// Holm's step-down adjustment over the experiment's family of tests.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Holm {
    /// Tests in the family.
    pub family: usize,
    pub p: f64,
    pub verdict: String,
}

fn seed_of(p: &Point) -> String {
    p.settings
        .iter()
        .find(|(k, _)| k == "seed")
        .map_or_else(|| "-".to_string(), |(_, v)| v.clone())
}

/// The indices of a's and b's points, paired by seed; every error names the comparison and
/// what to change. Run before any training.
pub fn pair(declared: &Declared, points: &[Point]) -> Result<Vec<(String, usize, usize)>> {
    let what = format!("[[compare]] a = \"{}\", b = \"{}\"", declared.a, declared.b);
    let select = |arm: &str| -> Result<Vec<usize>> {
        if arm.trim().is_empty() {
            bail!("{what}: an arm is empty; name a variant label or settings such as d_k=16");
        }
        let hits: Vec<usize> = (0..points.len()).filter(|&i| points[i].in_arm(arm)).collect();
        if hits.is_empty() {
            let mut labels: Vec<String> = points.iter().map(Point::arm_label).collect();
            labels.dedup();
            labels.retain(|l| !l.is_empty());
            if labels.is_empty() {
                bail!("{what}: `{arm}` selects no point, and the sweep has one arm: declare [[variants]] or a [grid] to compare");
            }
            bail!("{what}: `{arm}` selects no point; the arms are: {}", labels.join("; "));
        }
        Ok(hits)
    };
    let (a, b) = (select(&declared.a)?, select(&declared.b)?);
    if a.iter().any(|i| b.contains(i)) {
        bail!("{what}: the two arms share points; name settings that tell them apart");
    }
    let mut pairs = vec![];
    for &i in &a {
        let seed = seed_of(&points[i]);
        let of_seed = |arm: &[usize]| {
            arm.iter()
                .copied()
                .filter(|&j| seed_of(&points[j]) == seed)
                .collect::<Vec<_>>()
        };
        match (of_seed(&a).as_slice(), of_seed(&b).as_slice()) {
            ([_], [j]) => pairs.push((seed, i, *j)),
            ([_], []) => bail!("{what}: b has no point of seed {seed}; give both arms the same seeds"),
            _ => bail!(
                "{what}: an arm selects several points of seed {seed}; name more settings, e.g. \"{} d_k=16\"",
                declared.a
            ),
        }
    }
    if b.len() != pairs.len() {
        bail!("{what}: b has points of seeds that a lacks; give both arms the same seeds");
    }
    if pairs.len() < 2 {
        bail!("{what}: a comparison needs at least 2 seeds for an interval (`seeds = [0, 1, …]`); 8 or more resolve most effects");
    }
    Ok(pairs)
}

impl Declared {
    /// Its metrics, the first of which a sequential design and Holm's adjustment decide on.
    pub fn metrics(&self) -> Vec<Metric> {
        match self.metrics.is_empty() {
            true => Metric::DEFAULT.to_vec(),
            false => self.metrics.clone(),
        }
    }
}

/// Computes a declared comparison from its finished points, on the seeds `seeds` where given
/// (a sequential design's look), else on all.
pub fn compute(
    declared: &Declared,
    out: &Path,
    points: &[Point],
    summaries: &[PointSummary],
    seeds: Option<&[String]>,
) -> Result<Comparison> {
    let mut pairs = pair(declared, points)?;
    if let Some(seeds) = seeds {
        pairs.retain(|(seed, _, _)| seeds.contains(seed));
    }
    let metrics = declared.metrics();
    let (first_a, first_b) = (&summaries[pairs[0].1], &summaries[pairs[0].2]);
    let ratio = |x: Option<f64>, y: Option<f64>| Some(x? / y?);
    let mut results = vec![];
    for metric in metrics {
        let values = values(metric, out, &pairs, summaries)?;
        results.push(summarize(metric, &values));
    }
    Ok(Comparison {
        a: declared.a.clone(),
        b: declared.b.clone(),
        claim: declared.claim.clone(),
        seeds: pairs.iter().map(|(s, _, _)| s.clone()).collect(),
        params: [first_a.params, first_b.params],
        flops_per_token: [first_a.flops_per_token, first_b.flops_per_token],
        params_ratio: ratio(first_a.params.map(|p| p as f64), first_b.params.map(|p| p as f64)),
        flops_per_token_ratio: ratio(first_a.flops_per_token, first_b.flops_per_token),
        metrics: results,
    })
}

/// The first metric's per-seed values on the seeds `seeds`: what a look decides on.
pub fn first_values(
    declared: &Declared,
    out: &Path,
    points: &[Point],
    summaries: &[PointSummary],
    seeds: &[String],
) -> Result<Vec<f64>> {
    let mut pairs = pair(declared, points)?;
    pairs.retain(|(seed, _, _)| seeds.contains(seed));
    values(declared.metrics()[0], out, &pairs, summaries)
}

/// One metric's per-seed values over seed-paired points (a, b).
fn values(
    metric: Metric,
    out: &Path,
    pairs: &[(String, usize, usize)],
    summaries: &[PointSummary],
) -> Result<Vec<f64>> {
    let mut values = vec![];
    for (seed, i, j) in pairs {
        let (a, b) = (&summaries[*i], &summaries[*j]);
        let need = |v: Option<f64>, what: &str| -> Result<f64> {
            v.ok_or_else(|| {
                anyhow::anyhow!(
                    "{} against {} (seed {seed}): no {what}; comparisons need a validation loss (eval_every)",
                    a.label,
                    b.label
                )
            })
        };
        values.push(match metric {
            Metric::TestLoss => need(a.test_loss, "test-slice loss")? - need(b.test_loss, "test-slice loss")?,
            Metric::FinalValLoss => {
                need(a.final_val_loss, "final validation loss")? - need(b.final_val_loss, "final validation loss")?
            }
            Metric::WallS => need(a.wall_s, "wall time")? - need(b.wall_s, "wall time")?,
            Metric::TokensToTarget | Metric::FlopsToTarget => {
                let target = need(b.final_val_loss, "final validation loss")?;
                let b_tokens = curve(out, b)?.last().map_or(0.0, |c| c.0);
                let reached = super::equal_loss::tokens_to_reach(&curve(out, a)?, target);
                let tokens = reached.map_or(f64::INFINITY, |t| t / b_tokens);
                match metric {
                    Metric::TokensToTarget => tokens,
                    _ => tokens * need(a.flops_per_token, "FLOPs count")? / need(b.flops_per_token, "FLOPs count")?,
                }
            }
        });
    }
    Ok(values)
}

/// The estimate, interval and verdict of one metric's per-seed values.
pub fn summarize(metric: Metric, values: &[f64]) -> MetricResult {
    let finite = |x: f64| x.is_finite().then_some(x);
    let (estimate, sd, low, high, seeds_for_power, statistic, method, better_below) = if metric.is_ratio() {
        let (low, high) = stats::median_interval(values);
        let logs: Vec<f64> = values.iter().map(|v| v.ln()).collect();
        // The sign test's interval needs 6 seeds before it can exclude 1 at all.
        let power = stats::t_interval(&logs)
            .and_then(|m| m.seeds_for_power)
            .map(|n| n.max(6));
        let method = "median over seeds, order-statistic (sign test) interval; power from a t-test on the logs";
        (
            stats::median(values),
            None,
            low.max(0.0),
            high,
            power,
            "a / b",
            method.to_string(),
            1.0,
        )
    } else {
        let m = stats::t_interval(values);
        let get = |f: fn(&stats::MeanInterval) -> f64| m.as_ref().map_or(f64::NAN, f);
        (
            get(|m| m.mean),
            m.as_ref().map(|m| m.sd),
            get(|m| m.low),
            get(|m| m.high),
            m.as_ref().and_then(|m| m.seeds_for_power),
            "a - b",
            "mean over seeds, Student's t on the seed-paired differences".to_string(),
            0.0,
        )
    };
    let p = match metric.is_ratio() {
        true => None,
        false => stats::t_interval(values).map(|m| {
            let n = m.n as f64;
            match m.sd > 0.0 {
                true => stats::sequential::two_sided_p_t(m.mean / (m.sd / n.sqrt()), n - 1.0),
                false => f64::from(u8::from(m.mean == 0.0)),
            }
        }),
    };
    let verdict = if high < better_below {
        "a better"
    } else if low > better_below {
        "b better"
    } else {
        "not resolved"
    };
    MetricResult {
        metric,
        statistic: statistic.to_string(),
        method,
        per_seed: values.iter().map(|&v| finite(v)).collect(),
        estimate: finite(estimate),
        sd,
        low: finite(low),
        high: finite(high),
        verdict: verdict.to_string(),
        seeds_for_power,
        noisy: metric == Metric::WallS,
        p,
        sequential: None,
        holm: None,
    }
}

/// A p-value as printed: 4 decimals, or its order below 0.0001.
pub fn p_text(p: f64) -> String {
    match p < 1e-4 {
        true => format!("{p:.1e}"),
        false => format!("{p:.4}"),
    }
}

pub fn metric_name(m: Metric) -> &'static str {
    m.name()
}

/// The sequential decision and the Holm adjustment of a first metric, as printed after it.
pub fn adjusted_text(m: &MetricResult) -> String {
    let mut text = String::new();
    if let Some(q) = &m.sequential {
        text += &format!(
            "\n    sequential ({}, looks at {} seeds): {} at look {} of {} ({} seeds, |z| {:.2} against {:.2}); \
             repeated interval [{:+.4}, {:+.4}], repeated p {}",
            q.boundary,
            q.looks.iter().map(usize::to_string).collect::<Vec<_>>().join(", "),
            if q.resolved { "stopped" } else { "ran to the end" },
            q.stopped_at,
            q.looks.len(),
            q.seeds,
            q.z_seen.last().copied().unwrap_or(f64::NAN),
            q.z_boundaries[q.stopped_at - 1],
            q.low,
            q.high,
            p_text(q.repeated_p)
        );
    }
    if let Some(h) = &m.holm {
        text += &format!(
            "\n    Holm over the {} tests of the experiment: p {}, {}",
            h.family,
            p_text(h.p),
            h.verdict
        );
    }
    text
}

/// The printed table: one block per comparison.
pub fn print(comparisons: &[Comparison]) {
    if comparisons.is_empty() {
        return;
    }
    out!(
        "declared comparisons: {:.0}% intervals over seeds, paired by seed",
        100.0 * stats::LEVEL
    );
    let num = |v: Option<f64>, none: &str| v.map_or(none.to_string(), |x| format!("{x:.4}"));
    for c in comparisons {
        let times = |r: Option<f64>| r.map_or("-".to_string(), |r| format!("{r:.3}×"));
        out!(
            "{} against {} ({} seeds): parameters {}, FLOPs per token {}{}",
            c.a,
            c.b,
            c.seeds.len(),
            times(c.params_ratio),
            times(c.flops_per_token_ratio),
            c.claim.as_ref().map_or(String::new(), |t| format!("; claim: {t}"))
        );
        for m in &c.metrics {
            let (never, unbounded) = match m.statistic == "a / b" {
                true => ("never", "∞"),
                false => ("-", "-"),
            };
            let power = match (m.seeds_for_power, m.per_seed.iter().any(Option::is_none)) {
                (Some(n), _) => format!("{n} seeds"),
                // A seed that never reached the target has no log: no power to compute.
                (None, true) => "not computable (a seed never reached the target)".to_string(),
                (None, false) => "more than 10,000 seeds or no effect".to_string(),
            };
            let name = |v: &str| match v {
                "a better" => format!("{} better", c.a),
                "b better" => format!("{} better", c.b),
                v => v.to_string(),
            };
            let verdict = name(&m.verdict);
            let mut adjusted = m.clone();
            if let Some(q) = adjusted.sequential.as_mut() {
                q.verdict = name(&q.verdict);
            }
            if let Some(h) = adjusted.holm.as_mut() {
                h.verdict = name(&h.verdict);
            }
            out!(
                "  {:<17} {} = {:>9} [{}, {}]  {}{}; {}per seed {}; 80% power needs {}{}",
                m.metric.name(),
                m.statistic,
                num(m.estimate, unbounded),
                num(m.low, unbounded),
                num(m.high, unbounded),
                verdict,
                if m.noisy { " (noisy)" } else { "" },
                m.p.map_or(String::new(), |p| format!("p {}; ", p_text(p))),
                m.per_seed.iter().map(|v| num(*v, never)).collect::<Vec<_>>().join(" "),
                power,
                adjusted_text(&adjusted)
            );
        }
    }
}

/// comparisons.csv: one row per comparison and metric.
pub fn to_csv(comparisons: &[Comparison]) -> String {
    let mut lines = vec![
        "a,b,metric,statistic,seeds,estimate,sd,low,high,verdict,seeds_for_power,params_ratio,flops_per_token_ratio,per_seed"
            .to_string(),
    ];
    let opt = |v: Option<f64>, none: &str| v.map_or(none.to_string(), |x| format!("{x}"));
    let quote = |s: &str| format!("\"{}\"", s.replace('"', "\"\""));
    for c in comparisons {
        for m in &c.metrics {
            let never = if m.statistic == "a / b" { "inf" } else { "" };
            lines.push(
                [
                    quote(&c.a),
                    quote(&c.b),
                    m.metric.name().to_string(),
                    m.statistic.clone(),
                    c.seeds.len().to_string(),
                    opt(m.estimate, never),
                    opt(m.sd, ""),
                    opt(m.low, never),
                    opt(m.high, never),
                    m.verdict.clone(),
                    m.seeds_for_power.map_or(String::new(), |n| n.to_string()),
                    opt(c.params_ratio, ""),
                    opt(c.flops_per_token_ratio, ""),
                    m.per_seed.iter().map(|v| opt(*v, never)).collect::<Vec<_>>().join(" "),
                ]
                .join(","),
            );
        }
    }
    lines.join("\n") + "\n"
}
