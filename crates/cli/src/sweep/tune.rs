//! `[tune]`: each arm at its own best settings. Before the sweep's runs, every arm (a point
//! without its seed) trains a small grid on tuning seeds that the comparisons never use, and
//! is measured on the validation split's tuning slice, which no comparison reads.
//!
//! With one numeric setting on at least 3 values (the learning rate, say), the choice is made
//! on the curve, not on a point: a quadratic in ln(value) is fitted by least squares to every
//! tuning seed's loss at the best mean value and one value each side, and the arm trains
//! at the fitted minimum. One seed's noise picks a grid point by a coin flip where the means
//! differ by less than the seeds' spread; the fit pools every seed and neighbour. A best mean
//! at the grid's edge first widens the grid, a step of the same ratio at a time (`widen`, 2 by
//! default); where it is still at the edge, the summary and the table say so.
//!
//! Any other grid (several settings, or words) takes the value of the lowest mean.

use super::flags::{check_flag, flag_value, set, setting_name, Flags};
use super::points::Point;
use super::summary::summarize;
use super::{backend_of, train_point};
use anyhow::{bail, Result};
use data::EvalSlice;
use serde::{Deserialize, Serialize};
use std::path::Path;
use std::sync::atomic::AtomicBool;

/// Where the tuning runs live, inside the sweep's directory.
pub const TUNE_DIR: &str = "tune";
/// Tuning seeds an arm needs at least: the median of 3 would have avoided both wrong choices
/// that one seed made in the experiments of 2026-11 (docs/experiments.md).
pub const MIN_SEEDS: usize = 3;
/// How far from the best mean the fit reaches, in grid values each side: one, so that the
/// parabola describes the minimum and not the cliff of a diverging rate two steps away.
const FIT_REACH: usize = 1;

/// `[tune]` in an experiment file: `seeds`, `widen`, and each tuned flag with its values.
#[derive(Deserialize, Clone, Debug, Default)]
pub struct Declared {
    pub seeds: Vec<u64>,
    /// How many values a best mean at the grid's edge may add past it (default 2).
    pub widen: Option<usize>,
    #[serde(flatten)]
    pub grid: toml::Table,
}

/// One arm's tuning, as the summary keeps it.
#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct Tuned {
    pub arm: String,
    pub rows: Vec<TuneRow>,
    /// The chosen settings, as flags the arm's runs train with.
    pub chosen: Vec<(String, String)>,
    /// Whether the best mean is still the first or last value after widening: the best may lie
    /// beyond it.
    pub at_edge: bool,
    /// Values added past the declared grid's edges.
    #[serde(default)]
    pub widened: Vec<String>,
    /// The curve the choice was read from, where one numeric setting is tuned.
    #[serde(default)]
    pub fit: Option<Fit>,
}

#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct TuneRow {
    pub settings: Vec<(String, String)>,
    /// The tuning runs' directories, relative to the sweep's, in the order of `per_seed`.
    #[serde(default)]
    pub dirs: Vec<String>,
    /// Each tuning seed's final model on the tuning slice (null where a run failed or diverged).
    pub per_seed: Vec<Option<f64>>,
    /// Their mean; null unless every seed has one.
    pub mean: Option<f64>,
}

/// loss ≈ a + b·x + c·x², x = ln(value), fitted by least squares to every seed's loss over the
/// grid values [low, high].
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Fit {
    pub setting: String,
    pub low: f64,
    pub high: f64,
    /// The (seed, value) losses fitted.
    pub points: usize,
    pub a: f64,
    pub b: f64,
    pub c: f64,
    /// The fitted minimum's value (rounded to 3 significant digits, as the runs train at it) and
    /// the curve's loss there; where the curve is not convex, the best mean's value.
    pub minimum: f64,
    pub fitted_loss: f64,
    pub convex: bool,
}

/// The tuned flags with their values, every combination, checked as `resmem train` flags.
fn combinations(d: &Declared, swept: &[String], main_seeds: &[u64]) -> Result<Vec<Vec<(String, String)>>> {
    if d.seeds.len() < MIN_SEEDS {
        bail!(
            "[tune] needs at least {MIN_SEEDS} seeds of its own, e.g. seeds = [100, 101, 102], which the comparisons \
             never use: one seed chose the worse rate for 2 of 4 RMT-family arms that could be checked"
        );
    }
    if let Some(s) = d.seeds.iter().find(|s| main_seeds.contains(s)) {
        bail!("[tune] seed {s} is also a seed of the sweep; tuning seeds must be others, so that nothing is chosen on the runs compared");
    }
    if let Some(s) = super::points::first_repeat(&d.seeds) {
        bail!("[tune] the seed {s} is listed twice");
    }
    // Refuse a grid too large to tune before its combinations are made.
    let sizes = (d.grid.values()).map(|v| if let toml::Value::Array(a) = v { a.len() } else { 1 });
    let runs = sizes
        .chain([d.seeds.len()])
        .try_fold(1usize, |n, k| n.checked_mul(k.max(1)));
    if runs.is_none_or(|n| n > super::points::MAX_RUNS) {
        bail!(
            "[tune] asks for {} runs an arm (every combination of its values, on each of its {} seeds), more than \
             the {} a sweep may run; give fewer values or seeds",
            runs.map_or("more than 2^64".to_string(), |n| n.to_string()),
            d.seeds.len(),
            super::points::MAX_RUNS
        );
    }
    let mut combos: Vec<Vec<(String, String)>> = vec![vec![]];
    for (name, values) in &d.grid {
        let flag = check_flag(name, "[tune]")?;
        if swept.iter().any(|s| super::flags::flag_name(s) == flag) {
            bail!("[tune] {name} is also swept in [grid]; tune it or sweep it");
        }
        let toml::Value::Array(values) = values else {
            bail!("[tune] {name} must be a list of values, e.g. {name} = [0.003, 0.01, 0.03]");
        };
        if values.is_empty() {
            bail!("[tune] {name} has no values");
        }
        let values = values.iter().map(flag_value).collect::<Result<Vec<_>>>()?;
        combos = combos
            .iter()
            .flat_map(|c| {
                let flag = &flag;
                values.iter().map(move |v| {
                    let mut c = c.clone();
                    c.push((flag.clone(), v.clone()));
                    c
                })
            })
            .collect();
    }
    if combos[0].is_empty() {
        bail!("[tune] names no flag to tune; add one, e.g. lr = [0.003, 0.01, 0.03]");
    }
    Ok(combos)
}

/// The values of a grid of one numeric setting on at least 3 positive, increasing values: a
/// curve to fit. None for any other grid.
fn curve_values(combos: &[Vec<(String, String)>]) -> Option<Vec<f64>> {
    if combos.len() < 3 || combos.iter().any(|c| c.len() != 1) {
        return None;
    }
    let values: Vec<f64> = combos
        .iter()
        .map(|c| c[0].1.parse::<f64>().ok())
        .collect::<Option<_>>()?;
    let increasing = values.windows(2).all(|w| w[0] < w[1]);
    (increasing && values.iter().all(|v| v.is_finite() && *v > 0.0)).then_some(values)
}

/// Checks the declaration before anything trains: its seeds, its flags, and no flag that a
/// variant sets itself.
pub fn check(d: &Declared, swept: &[String], main_seeds: &[u64], variants: &[(String, Flags)]) -> Result<()> {
    let combos = combinations(d, swept, main_seeds)?;
    for (flag, _) in &combos[0] {
        if let Some((label, _)) = variants.iter().find(|(_, flags)| flags.iter().any(|(f, _)| f == flag)) {
            bail!("[tune] tunes --{flag}, which the variant `{label}` sets itself; drop one of them");
        }
    }
    if d.widen.is_some_and(|w| w > 8) {
        bail!("[tune] widen is at most 8 values past an edge; give a wider grid instead");
    }
    Ok(())
}

/// `v` to 3 significant digits, as a flag's text: 0.021434 → "0.0214".
fn three_digits(v: f64) -> String {
    let decimals = (2 - v.log10().floor() as i64).clamp(0, 20) as usize;
    let text = format!("{v:.decimals$}");
    // "0.0300" → "0.03": the same value a hand-written grid would give.
    match text.contains('.') {
        true => text.trim_end_matches('0').trim_end_matches('.').to_string(),
        false => text,
    }
}

/// Least squares of y ≈ a + b·x + c·x² over (x, y) points; None where they do not fix a
/// parabola (fewer than 3 distinct x).
fn quadratic(points: &[(f64, f64)]) -> Option<(f64, f64, f64)> {
    // Centred for conditioning; the normal equations of 3 unknowns, by Cramer's rule.
    let n = points.len() as f64;
    let m = points.iter().map(|p| p.0).sum::<f64>() / n;
    let mut s = [0.0f64; 5];
    let mut t = [0.0f64; 3];
    for &(x, y) in points {
        let u = x - m;
        let mut p = 1.0;
        for k in 0..5 {
            s[k] += p;
            if k < 3 {
                t[k] += p * y;
            }
            p *= u;
        }
    }
    let det3 = |a: [[f64; 3]; 3]| {
        a[0][0] * (a[1][1] * a[2][2] - a[1][2] * a[2][1]) - a[0][1] * (a[1][0] * a[2][2] - a[1][2] * a[2][0])
            + a[0][2] * (a[1][0] * a[2][1] - a[1][1] * a[2][0])
    };
    let matrix = [[s[0], s[1], s[2]], [s[1], s[2], s[3]], [s[2], s[3], s[4]]];
    let det = det3(matrix);
    if det.abs() < 1e-12 * s[4].abs().max(1.0) * s[0] {
        return None;
    }
    let solve = |k: usize| {
        let mut a = matrix;
        for (row, &value) in a.iter_mut().zip(&t) {
            row[k] = value;
        }
        det3(a) / det
    };
    let (a0, b0, c0) = (solve(0), solve(1), solve(2));
    // Back from u = x − m: a0 + b0·(x − m) + c0·(x − m)².
    Some((a0 - b0 * m + c0 * m * m, b0 - 2.0 * c0 * m, c0))
}

/// The fit around the best mean, and the value it chooses.
fn fit(setting: &str, values: &[f64], rows: &[TuneRow], best: usize) -> Option<Fit> {
    let lo = best.saturating_sub(FIT_REACH);
    let hi = (best + FIT_REACH).min(values.len() - 1);
    let points: Vec<(f64, f64)> = (lo..=hi)
        .flat_map(|i| {
            let x = values[i].ln();
            rows[i].per_seed.iter().flatten().map(move |&y| (x, y))
        })
        .collect();
    let (a, b, c) = quadratic(&points)?;
    // Curvature below this is flat data and rounding, not a minimum.
    let convex = c > 1e-9;
    let (x_lo, x_hi) = (values[lo].ln(), values[hi].ln());
    let x = match convex {
        true => (-b / (2.0 * c)).clamp(x_lo, x_hi),
        false => values[best].ln(),
    };
    let minimum: f64 = three_digits(x.exp()).parse().ok()?;
    let xm = minimum.ln();
    Some(Fit {
        setting: setting.to_string(),
        low: values[lo],
        high: values[hi],
        points: points.len(),
        a,
        b,
        c,
        minimum,
        fitted_loss: a + b * xm + c * xm * xm,
        convex,
    })
}

/// The index of the lowest mean.
fn best_mean(rows: &[TuneRow]) -> Option<usize> {
    (0..rows.len()).filter(|&i| rows[i].mean.is_some()).min_by(|&i, &j| {
        rows[i]
            .mean
            .unwrap_or(f64::INFINITY)
            .total_cmp(&rows[j].mean.unwrap_or(f64::INFINITY))
    })
}

/// Trains every arm's tuning grid, then sets each arm's chosen flags on its points. Err when a
/// signal stops it, or where an arm has no usable result. `quick` (`sweep --quick`) reads only
/// the tuning slice's first eval_batches batches: a check of the pipeline.
pub fn run(
    d: &Declared,
    points: &mut [Point],
    out: &Path,
    (swept, main_seeds): (&[String], &[u64]),
    quick: bool,
    stop: &AtomicBool,
) -> Result<Vec<Tuned>> {
    let declared = combinations(d, swept, main_seeds)?;
    // The arms, in order: each point without its seed.
    let mut arms: Vec<(String, Point)> = vec![];
    for p in points.iter() {
        let arm = p.arm_label();
        if !arms.iter().any(|(a, _)| *a == arm) {
            arms.push((arm, p.clone()));
        }
    }
    let tune_out = out.join(TUNE_DIR);
    let mut done = 0;
    let total = arms.len() * declared.len() * d.seeds.len();
    let mut tuned = vec![];
    for (arm, template) in &arms {
        let mut train_row = |combo: &[(String, String)], widening: bool| -> Result<TuneRow> {
            let mut per_seed = vec![];
            let mut dirs = vec![];
            for &seed in &d.seeds {
                let mut p = template.clone();
                p.settings.retain(|(k, _)| k != "seed");
                for (flag, value) in combo {
                    p.settings.push((setting_name(flag), value.clone()));
                    set(&mut p.flags, flag.clone(), value.clone());
                }
                p.settings.push(("seed".into(), seed.to_string()));
                set(&mut p.flags, "seed".into(), seed.to_string());
                let dir = tune_out.join(p.dir_name());
                done += 1;
                let progress = match widening {
                    false => format!("[tune {done}/{total}]"),
                    true => format!("[tune {done}, widening the grid]"),
                };
                let status = train_point(&p, &dir, &tune_out, &progress, stop)?;
                let loss = match summarize(&p, &dir, status)?.status.as_str() {
                    "done" => {
                        let measured =
                            crate::eval::slice_loss(&dir, backend_of(&p.flags, &dir), EvalSlice::Tuning, quick)?;
                        Some(measured.loss).filter(|l| l.is_finite())
                    }
                    _ => None,
                };
                per_seed.push(loss);
                dirs.push(format!("{TUNE_DIR}/{}", p.dir_name()));
            }
            let mean = per_seed
                .iter()
                .copied()
                .sum::<Option<f64>>()
                .map(|s| s / per_seed.len() as f64);
            Ok(TuneRow {
                settings: combo.iter().map(|(f, v)| (setting_name(f), v.clone())).collect(),
                dirs,
                per_seed,
                mean,
            })
        };
        let mut combos = declared.clone();
        let mut rows = combos.iter().map(|c| train_row(c, false)).collect::<Result<Vec<_>>>()?;
        let mut widened = vec![];
        if let Some(mut values) = curve_values(&combos) {
            // Past an edge by the ratio of the last step, while the best mean sits on it.
            for _ in 0..d.widen.unwrap_or(2) {
                let n = values.len();
                let next = match best_mean(&rows) {
                    Some(0) => values[0] * values[0] / values[1],
                    Some(i) if i == n - 1 => values[n - 1] * values[n - 1] / values[n - 2],
                    _ => break,
                };
                let text = three_digits(next);
                let Ok(next) = text.parse::<f64>() else { break };
                let flag = combos[0][0].0.clone();
                let combo = vec![(flag, text.clone())];
                let row = train_row(&combo, true)?;
                widened.push(text);
                if next < values[0] {
                    values.insert(0, next);
                    combos.insert(0, combo);
                    rows.insert(0, row);
                } else {
                    values.push(next);
                    combos.push(combo);
                    rows.push(row);
                }
            }
        }
        let Some(best) = best_mean(&rows) else {
            bail!(
                "[tune]: no setting of the arm `{arm}` finished on every tuning seed (see {}); widen the grid",
                tune_out.display()
            );
        };
        let at_edge = combos.len() > 1 && (best == 0 || best == combos.len() - 1);
        let mut chosen = combos[best].clone();
        let fit = curve_values(&combos).and_then(|values| {
            let f = fit(&setting_name(&combos[0][0].0), &values, &rows, best)?;
            if !at_edge {
                chosen[0].1 = three_digits(f.minimum);
            }
            Some(f)
        });
        tuned.push(Tuned {
            arm: arm.clone(),
            rows,
            chosen,
            at_edge,
            widened,
            fit,
        });
    }
    for p in points.iter_mut() {
        let arm = p.arm_label();
        if let Some(t) = tuned.iter().find(|t| t.arm == arm) {
            for (flag, value) in &t.chosen {
                set(&mut p.flags, flag.clone(), value.clone());
            }
        }
    }
    Ok(tuned)
}

/// The tuning table: each arm's grid, mean loss over the tuning seeds, the fit and its choice.
pub fn print(tuned: &[Tuned], seeds: &[u64]) {
    if tuned.is_empty() {
        return;
    }
    let seeds: Vec<String> = seeds.iter().map(u64::to_string).collect();
    out!(
        "tuning: loss on the validation split's tuning slice, mean over tuning seeds {} (never compared)",
        seeds.join(", ")
    );
    for t in tuned {
        let chosen: Vec<String> = t
            .chosen
            .iter()
            .map(|(f, v)| format!("{}={v}", setting_name(f)))
            .collect();
        let how = match (&t.fit, t.at_edge) {
            (_, true) => " (the best mean is at the grid's edge, even widened: the best may lie beyond it)".to_string(),
            (Some(f), false) if f.convex => format!(
                ", the minimum of loss = {:.4} {:+.4}·x {:+.4}·x², x = ln {}, fitted to {} losses over {}–{} \
                 (fitted loss {:.4})",
                f.a, f.b, f.c, f.setting, f.points, f.low, f.high, f.fitted_loss
            ),
            (Some(f), false) => format!(
                ", the best mean: the losses over {}–{} are not convex in ln {}",
                f.low, f.high, f.setting
            ),
            (None, false) => ", the best mean".to_string(),
        };
        let widened = match t.widened.is_empty() {
            true => String::new(),
            false => format!("; the grid was widened by {}", t.widened.join(", ")),
        };
        out!(
            "{}: chose {}{how}{widened}",
            if t.arm.is_empty() { "(all points)" } else { &t.arm },
            chosen.join(" ")
        );
        for r in &t.rows {
            let settings: Vec<String> = r.settings.iter().map(|(k, v)| format!("{k}={v}")).collect();
            let per: Vec<String> = r
                .per_seed
                .iter()
                .map(|l| l.map_or("-".into(), |l| format!("{l:.4}")))
                .collect();
            out!(
                "  {:<30} {:>9}   per seed {}",
                settings.join(" "),
                r.mean.map_or("-".into(), |m| format!("{m:.4}")),
                per.join(" ")
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_quadratic_fit_recovers_a_known_parabola_and_its_minimum() {
        // loss = 2 + 0.05·(x − ln 0.02)², sampled at 5 rates with ±noise that cancels in pairs.
        let x0 = 0.02f64.ln();
        let values = [0.003, 0.01, 0.03, 0.1, 0.3];
        let rows: Vec<TuneRow> = values
            .iter()
            .map(|&v: &f64| {
                let y = 2.0 + 0.05 * (v.ln() - x0).powi(2);
                TuneRow {
                    settings: vec![],
                    dirs: vec![],
                    per_seed: vec![Some(y - 0.01), Some(y), Some(y + 0.01)],
                    mean: Some(y),
                }
            })
            .collect();
        let f = fit("lr", &values, &rows, 2).unwrap();
        assert!((f.c - 0.05).abs() < 1e-9 && f.convex, "{f:?}");
        assert!((f.a + f.b * x0 + f.c * x0 * x0 - 2.0).abs() < 1e-9, "{f:?}");
        assert_eq!(f.minimum, 0.02);
        assert_eq!((f.low, f.high, f.points), (0.01, 0.1, 9));
        // Hand-computed: three points (x, y) = (0, 1), (1, 0), (2, 1) → y = 1 − 2x + x².
        let (a, b, c) = quadratic(&[(0.0, 1.0), (1.0, 0.0), (2.0, 1.0)]).unwrap();
        assert!((a - 1.0).abs() < 1e-12 && (b + 2.0).abs() < 1e-12 && (c - 1.0).abs() < 1e-12);
        // Two distinct x fix no parabola.
        assert!(quadratic(&[(0.0, 1.0), (1.0, 0.0), (1.0, 0.5)]).is_none());
    }

    #[test]
    fn a_flat_curve_falls_back_to_the_best_mean_and_values_print_as_written() {
        // Flat around the best mean: no curvature, so the best mean's value.
        let values = [0.01, 0.03, 0.1];
        let rows: Vec<TuneRow> = [2.0, 2.0, 2.0]
            .iter()
            .map(|&y| TuneRow {
                settings: vec![],
                dirs: vec![],
                per_seed: vec![Some(y)],
                mean: Some(y),
            })
            .collect();
        let f = fit("lr", &values, &rows, 1).unwrap();
        assert!(!f.convex);
        assert_eq!(f.minimum, 0.03);
        // A best at the edge has one neighbour: two values fix no parabola.
        assert!(fit("lr", &values, &rows, 2).is_none());
        assert_eq!(three_digits(0.021434), "0.0214");
        assert_eq!(three_digits(0.03), "0.03");
        assert_eq!(three_digits(3.3333), "3.33");
        assert_eq!(three_digits(333.3), "333");
        assert_eq!(three_digits(0.3 * 0.3 / 0.1), "0.9");
        assert_eq!(curve_values(&[vec![("lr".into(), "0.1".into())]]), None);
        let grid = |v: &[&str]| {
            v.iter()
                .map(|x| vec![("lr".to_string(), x.to_string())])
                .collect::<Vec<_>>()
        };
        assert_eq!(
            curve_values(&grid(&["0.01", "0.03", "0.1"])),
            Some(vec![0.01, 0.03, 0.1])
        );
        assert_eq!(curve_values(&grid(&["0.03", "0.01", "0.1"])), None);
        assert_eq!(curve_values(&grid(&["a", "b", "c"])), None);
    }
}
