//! A sweep's summary: each point's line (its costs and losses, read from its run directory),
//! written as summary.json and summary.csv after every point, and printed as a table.

use super::buckets::BucketUse;
use super::equal_loss::EqualLoss;
use super::points::Point;
use super::variance::{PointVariance, VarianceRow};
use super::{compare, matching, tune, COMPARISONS_CSV, CURVES_CSV, SUMMARY_CSV, SUMMARY_JSON};
use crate::run_dir::{self, CONFIG_FILE};
use anyhow::{Context, Result};
use models::run::MetricsRow;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::path::Path;

/// A point's line of summary.json.
#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct PointSummary {
    /// Its run directory, relative to the sweep's.
    pub dir: String,
    pub label: String,
    /// The swept settings, the variant and the seed: numbers where they read as one.
    pub settings: serde_json::Map<String, Value>,
    /// `done`, or why not.
    pub status: String,
    pub arch: Option<String>,
    pub params: Option<u64>,
    /// Forward FLOPs per token as built, at T (2 per multiply-add; `count::try_model`).
    pub flops_per_token: Option<f64>,
    /// Training tokens seen: steps × batch × T.
    pub tokens: Option<u64>,
    pub final_loss: Option<f64>,
    pub final_val_loss: Option<f64>,
    pub best_val_loss: Option<f64>,
    /// The final model's loss on every window of the validation split's test slice, the
    /// measurement comparisons decide on (`data::EvalSlice`), and the tokens it counted.
    #[serde(default)]
    pub test_loss: Option<f64>,
    #[serde(default)]
    pub test_tokens: Option<u64>,
    /// The backend, device and numeric class it trained on (its backend.json).
    #[serde(default)]
    pub device: Option<String>,
    /// Wall seconds of training, summed over resumed segments.
    pub wall_s: Option<f64>,
    pub tokens_per_s: Option<f64>,
    /// With `variance = true`: the ratios at init and after training.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variance: Option<PointVariance>,
    /// For a MemoryFormer or hybrid: how evenly its hash tables' buckets are used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub buckets: Option<BucketUse>,
    /// The sizes a `[[match]]` solved for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub matched: Option<matching::Matched>,
    /// The point its costs are relative to, and its parameters and FLOPs per token over that
    /// point's: how fixed a fixed-cost sweep really is.
    #[serde(default)]
    pub cost_reference: Option<String>,
    #[serde(default)]
    pub params_vs_reference: Option<f64>,
    #[serde(default)]
    pub flops_vs_reference: Option<f64>,
}

#[derive(Serialize, Deserialize, Debug)]
pub struct Summary {
    pub experiment: Option<String>,
    /// The commit the binary was built from, and the machine: what made these numbers.
    #[serde(default)]
    pub commit: String,
    pub machine: Option<crate::provenance::Machine>,
    /// What the comparisons' `test_loss` and the tuning's loss were measured on.
    #[serde(default)]
    pub evaluation: String,
    /// Settings that vary between points, the seed left out.
    pub swept: Vec<String>,
    pub points: Vec<PointSummary>,
    /// With `variance = true`: per variant and site, the closed form and the measured ratios.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub variance: Vec<VarianceRow>,
    /// Per arm with hash tables: how many collapse, and the loss with and without.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub collapse: Vec<super::buckets::Collapse>,
    /// With a `reference` variant: each other variant at the reference's final loss.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub equal_loss: Vec<EqualLoss>,
    /// The experiment's `[[compare]]`: paired intervals and verdicts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub comparisons: Vec<compare::Comparison>,
    /// The experiment's `[[trend]]`: per-seed slopes, their interval and verdict.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub trends: Vec<super::trend::Trend>,
    /// The experiment's `[scaling]`: each family's power law and the multipliers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scaling: Option<super::scaling::Scaling>,
    /// The experiment's `[tune]`: every arm's grid on the tuning seeds, and its choice.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tuning: Vec<tune::Tuned>,
    /// The bigram entropy of the corpus every point trained on: a loss at or above it learned
    /// nothing that the token before does not give.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bigram_entropy: Option<f64>,
}

/// A number where the text reads as one.
fn json_value(s: &str) -> Value {
    s.parse::<i64>()
        .map(Value::from)
        .or_else(|_| s.parse::<f64>().map(Value::from))
        .unwrap_or_else(|_| Value::from(s))
}

/// A point's summary from its run directory.
pub(super) fn summarize(p: &Point, dir: &Path, status: String) -> Result<PointSummary> {
    let mut s = PointSummary {
        dir: p.dir_name(),
        label: p.label(),
        settings: p.settings.iter().map(|(k, v)| (k.clone(), json_value(v))).collect(),
        status,
        arch: None,
        params: None,
        flops_per_token: None,
        tokens: None,
        final_loss: None,
        final_val_loss: None,
        best_val_loss: None,
        test_loss: None,
        test_tokens: None,
        device: None,
        wall_s: None,
        tokens_per_s: None,
        variance: None,
        buckets: None,
        matched: None,
        cost_reference: None,
        params_vs_reference: None,
        flops_vs_reference: None,
    };
    let Ok(cfg) = crate::resolve::read_config(&dir.join(CONFIG_FILE)) else {
        return Ok(s);
    };
    let t = cfg.data.seq_len();
    let mut model = cfg.model.clone();
    model.set_context(t);
    let counts = models::count::try_model(&model)?;
    s.arch = Some(cfg.arch().to_string());
    s.params = Some(models::count::try_model(&cfg.model)?.params);
    s.flops_per_token = Some(counts.flops_per_token(t));
    let metrics = run_dir::read_metrics(dir)?.unwrap_or_default();
    let rows: Vec<&MetricsRow> = metrics.rows.iter().map(|(_, row)| row).collect();
    let last_step = rows.iter().map(|r| r.step).max().unwrap_or(0);
    s.tokens = Some(last_step * (cfg.train.batch * t) as u64);
    s.final_loss = rows.last().and_then(|r| r.loss);
    let vals: Vec<f64> = rows.iter().filter_map(|r| r.val_loss).collect();
    s.final_val_loss = vals.last().copied();
    s.best_val_loss = vals.iter().copied().reduce(f64::min);
    let wall = metrics.wall_seconds();
    s.wall_s = Some(wall);
    s.tokens_per_s = s.tokens.map(|n| n as f64 / wall.max(1e-9));
    Ok(s)
}

/// `write_summary` of a sweep still under way, unless the summary already written holds more
/// points (a resumed sweep summarises its finished points again as it passes them): a stop or a
/// failure part-way never leaves less than there was.
pub(super) fn write_progress(out: &Path, summary: &Summary) -> Result<()> {
    let written = data::read_text(&out.join(SUMMARY_JSON)).ok().and_then(|text| {
        let v: serde_json::Value = serde_json::from_str(&text).ok()?;
        Some(v["points"].as_array()?.len())
    });
    match written {
        Some(n) if n > summary.points.len() => Ok(()),
        _ => write_summary(out, summary),
    }
}

pub(super) fn write_summary(out: &Path, summary: &Summary) -> Result<()> {
    let json = serde_json::to_string_pretty(summary)?;
    crate::run_dir::write_atomic(&out.join(SUMMARY_JSON), |tmp| {
        std::fs::write(tmp, &json).with_context(|| format!("cannot write {}", tmp.display()))
    })?;
    if !summary.comparisons.is_empty() {
        let csv = compare::to_csv(&summary.comparisons);
        crate::run_dir::write_atomic(&out.join(COMPARISONS_CSV), |tmp| {
            std::fs::write(tmp, &csv).with_context(|| format!("cannot write {}", tmp.display()))
        })?;
    }
    let csv = to_csv(summary);
    crate::run_dir::write_atomic(&out.join(SUMMARY_CSV), |tmp| {
        std::fs::write(tmp, &csv).with_context(|| format!("cannot write {}", tmp.display()))
    })?;
    let curves = curves_csv(out, summary)?;
    crate::run_dir::write_atomic(&out.join(CURVES_CSV), |tmp| {
        std::fs::write(tmp, &curves).with_context(|| format!("cannot write {}", tmp.display()))
    })
}

/// curves.csv: every run's evaluations during training, with the training loss and
/// hyper-connections' composite mixing gains logged at the same steps (the comparisons' points
/// and the tuning runs), so that a tokens-to-target ratio or a gain re-derives from committed
/// files without the runs. The other logged rows stay in each
/// run's metrics.jsonl: at a row every 10 steps they would make the file ten times larger.
fn curves_csv(out: &Path, summary: &Summary) -> Result<String> {
    let mut lines =
        vec!["dir,step,tokens,loss,val_loss,grad_norm,mixing_gain_forward,mixing_gain_backward".to_string()];
    let dirs = summary.points.iter().map(|p| p.dir.clone()).chain(
        summary
            .tuning
            .iter()
            .flat_map(|t| t.rows.iter())
            .flat_map(|r| r.dirs.clone()),
    );
    let opt = |v: Option<f64>| v.map_or(String::new(), |x| format!("{x:.6}"));
    for dir in dirs {
        let path = out.join(&dir);
        let Ok(cfg) = crate::resolve::read_config(&path.join(CONFIG_FILE)) else {
            continue;
        };
        let per_step = (cfg.train.batch * cfg.data.seq_len()) as u64;
        let metrics = run_dir::read_metrics(&path)?.unwrap_or_default();
        let last = metrics.rows.last().map(|(_, r)| r.step);
        for (_, row) in metrics
            .rows
            .iter()
            .filter(|(_, r)| r.val_loss.is_some() || Some(r.step) == last)
        {
            // Gains reach 1e20 (HC's blow-up): in full, not to 6 decimals.
            let gain = |k: usize| row.mixing_gain.map_or(String::new(), |g| format!("{:e}", g[k]));
            lines.push(format!(
                "{},{},{},{},{},{},{},{}",
                quote(&dir),
                row.step,
                row.step * per_step,
                opt(row.loss),
                opt(row.val_loss),
                opt(row.grad_norm),
                gain(0),
                gain(1)
            ));
        }
    }
    Ok(lines.join("\n") + "\n")
}

/// A CSV field: quoted where it holds a comma (a run's directory, `variant=a,seed=0`), a
/// quote or a line break.
fn quote(s: &str) -> String {
    match s.contains([',', '"', '\n']) {
        true => format!("\"{}\"", s.replace('"', "\"\"")),
        false => s.to_string(),
    }
}

fn to_csv(summary: &Summary) -> String {
    let mut names: Vec<String> = vec![];
    for p in &summary.points {
        for k in p.settings.keys() {
            if !names.contains(k) {
                names.push(k.clone());
            }
        }
    }
    let fixed = [
        "dir",
        "status",
        "arch",
        "params",
        "flops_per_token",
        "tokens",
        "final_loss",
        "final_val_loss",
        "best_val_loss",
        "test_loss",
        "test_tokens",
        "wall_s",
        "tokens_per_s",
        "cost_reference",
        "params_vs_reference",
        "flops_vs_reference",
    ];
    let mut lines = vec![names
        .iter()
        .map(String::as_str)
        .chain(fixed)
        .collect::<Vec<_>>()
        .join(",")];
    let opt = |v: Option<String>| v.unwrap_or_default();
    for p in &summary.points {
        let mut cells: Vec<String> = names
            .iter()
            .map(|k| match p.settings.get(k) {
                Some(Value::String(s)) => quote(s),
                Some(v) => v.to_string(),
                None => String::new(),
            })
            .collect();
        cells.extend([
            quote(&p.dir),
            quote(&p.status),
            opt(p.arch.clone()),
            opt(p.params.map(|x| x.to_string())),
            opt(p.flops_per_token.map(|x| format!("{x:.0}"))),
            opt(p.tokens.map(|x| x.to_string())),
            opt(p.final_loss.map(|x| format!("{x:.6}"))),
            opt(p.final_val_loss.map(|x| format!("{x:.6}"))),
            opt(p.best_val_loss.map(|x| format!("{x:.6}"))),
            opt(p.test_loss.map(|x| format!("{x:.6}"))),
            opt(p.test_tokens.map(|x| x.to_string())),
            opt(p.wall_s.map(|x| format!("{x:.1}"))),
            opt(p.tokens_per_s.map(|x| format!("{x:.0}"))),
            opt(p.cost_reference.as_deref().map(quote)),
            opt(p.params_vs_reference.map(|x| format!("{x:.6}"))),
            opt(p.flops_vs_reference.map(|x| format!("{x:.6}"))),
        ]);
        lines.push(cells.join(","));
    }
    lines.join("\n") + "\n"
}

pub(super) fn print_table(summary: &Summary) {
    let width = summary.points.iter().map(|p| p.label.len()).max().unwrap_or(5).max(5);
    out!(
        "{:<width$} {:>12} {:>14} {:>8} {:>8} {:>10} {:>10} {:>10} {:>9}",
        "point",
        "params",
        "FLOPs/token",
        "params×",
        "FLOPs×",
        "val_loss",
        "best_val",
        "test_loss",
        "wall_s"
    );
    let f = |v: Option<f64>, p: usize| v.map_or("-".to_string(), |x| format!("{x:.p$}"));
    for p in &summary.points {
        out!(
            "{:<width$} {:>12} {:>14} {:>8} {:>8} {:>10} {:>10} {:>10} {:>9}{}",
            p.label,
            p.params.map_or("-".into(), models::count::thousands),
            p.flops_per_token
                .map_or("-".into(), |x| models::count::thousands(x.round() as u64)),
            f(p.params_vs_reference, 3),
            f(p.flops_vs_reference, 3),
            f(p.final_val_loss, 4),
            f(p.best_val_loss, 4),
            f(p.test_loss, 4),
            f(p.wall_s, 1),
            if p.status == "done" {
                String::new()
            } else {
                format!("  ({})", p.status)
            }
        );
    }
    if summary.points.iter().any(|p| p.buckets.is_some()) {
        out!("bucket use of the hash tables, per table, over every window of the test slice:");
        out!(
            "{:<width$} {:>7} {:>9} {:>9} {:>10} {:>10} {:>9} {:>10} {:>12}",
            "point",
            "tables",
            "entropy",
            "lowest",
            "effective",
            "collapsed",
            "empty",
            "dead*",
            "train/row**"
        );
        for p in &summary.points {
            let Some(b) = &p.buckets else { continue };
            out!(
                "{:<width$} {:>7} {:>9.3} {:>9.3} {:>9.1}% {:>10} {:>8.1}% {:>9.1}% {:>12.0}",
                p.label,
                b.tables,
                b.entropy_mean,
                b.entropy_min,
                100.0 * b.effective_share_mean,
                b.collapsed,
                100.0 * b.dead_fraction,
                100.0 * b.dead_beyond_chance,
                b.train_hits_per_bucket_if_even
            );
        }
        out!(
            "(effective: exp(entropy) rows as a share of a table's, mean over tables; collapsed: tables with at most \
             2 effective rows; * empty rows beyond those uniform use leaves empty in as many hits; ** the training \
             hits per row had every row of a table been used alike)"
        );
    }
    if let Some(r) = summary.points.iter().find_map(|p| p.cost_reference.as_ref()) {
        out!("(params× and FLOPs× are over the reference point's, e.g. {r}, of the same seed)");
    }
    if let Some(floor) = summary.bigram_entropy {
        let ended: Vec<f64> = summary
            .points
            .iter()
            .filter_map(|p| p.test_loss.or(p.final_val_loss))
            .collect();
        let above = ended.iter().filter(|&&l| l >= floor).count();
        out!(
            "(the corpus's bigram entropy, the loss of predicting each token from the one before alone, is {floor:.4} \
             nats; {above} of {} points end at or above it{})",
            ended.len(),
            match above {
                0 => String::new(),
                _ => ": those learned nothing beyond it; train longer or at another rate".to_string(),
            }
        );
    }
}
