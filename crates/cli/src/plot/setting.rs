//! Sweeps' final (or best) validation losses, or test losses, against one of their settings: a
//! line per group of the other settings, the mean over seeds with min..max bars, its table on
//! stdout, and its drawing.

use super::axis::{decimals, padded, span, tick_label, TickedAxis};
use super::figure::{chart_builder, colour, draw_legend, draw_mesh, drawn, titled, with_panel, Entry, Mark};
use super::inputs::{Sweep, SUMMARY_FILE};
use super::YAxis;
use crate::console::warn;
use anyhow::{bail, Result};
use plotters::coord::Shift;
use plotters::prelude::*;
use serde_json::Value;
use std::path::Path;

/// More distinct tick labels than this on a setting axis would overlap.
pub(super) const MAX_TICKS: usize = 12;

/// One group's metrics at one value: (its position, the value as text, the seeds' metrics).
type Cell = (f64, String, Vec<f64>);

/// The points of one line of a setting plot at one x: the seeds' final losses.
pub(super) struct Stat {
    /// Where it sits on the axis: the value (its log2 on a log axis), or a category's index.
    pub(super) at: f64,
    pub(super) label: String,
    pub(super) n: usize,
    mean: f64,
    pub(super) min: f64,
    pub(super) max: f64,
}

pub(super) struct Group {
    pub(super) label: String,
    pub(super) stats: Vec<Stat>,
}

pub(super) struct SettingPlot {
    pub(super) title: Option<String>,
    pub(super) setting: String,
    pub(super) y_desc: String,
    log2: bool,
    /// The values are labels, placed in order of appearance.
    categorical: bool,
    /// Tick positions and their labels: the setting's values.
    pub(super) ticks: Vec<(f64, String)>,
    pub(super) groups: Vec<Group>,
}

impl SettingPlot {
    /// One row per (group, value): seeds, mean, min, max.
    pub(super) fn table(&self) -> String {
        let gw = self
            .groups
            .iter()
            .map(|g| g.label.chars().count())
            .max()
            .unwrap_or(0)
            .max(5);
        let xw = self
            .groups
            .iter()
            .flat_map(|g| g.stats.iter().map(|s| s.label.chars().count()))
            .chain([self.setting.chars().count()])
            .max()
            .unwrap_or(1);
        let mut lines = vec![format!(
            "{:<gw$}  {:>xw$}  {:>5}  {:>8}  {:>8}  {:>8}",
            "group", self.setting, "seeds", "mean", "min", "max"
        )];
        for g in &self.groups {
            for s in &g.stats {
                lines.push(format!(
                    "{:<gw$}  {:>xw$}  {:>5}  {:>8.4}  {:>8.4}  {:>8.4}",
                    g.label, s.label, s.n, s.mean, s.min, s.max
                ));
            }
        }
        lines.join("\n")
    }
}

/// A setting's value: a number, or a label placed as a category.
fn setting_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Each sweep's final (or best) validation losses, or test losses, against `setting`, one line per group of
/// the other settings but the seed. `runs` are the PATHs that are runs: an error here.
pub(super) fn setting_plot(
    sweeps: &[&Sweep],
    runs: &[&Path],
    setting: &str,
    y: YAxis,
    title: Option<String>,
) -> Result<SettingPlot> {
    if sweeps.is_empty() {
        bail!(
            "--x {setting} is not step, tokens, flops or time, so it must be a setting of a sweep, but no PATH is \
             a sweep directory (with {SUMMARY_FILE})"
        );
    }
    let available = || {
        let mut names: Vec<&str> = sweeps
            .iter()
            .flat_map(|s| {
                s.summary
                    .points
                    .iter()
                    .flat_map(|p| p.settings.keys().map(String::as_str))
            })
            .collect();
        names.sort();
        names.dedup();
        names
    };
    if !sweeps
        .iter()
        .any(|s| s.summary.points.iter().any(|p| p.settings.contains_key(setting)))
    {
        let names = available();
        bail!(
            "no point of the sweeps has the setting `{setting}`; --x takes step, tokens, flops, time{}",
            if names.is_empty() {
                String::new()
            } else {
                format!(" or one of their settings: {}", names.join(", "))
            }
        );
    }
    if let Some(run) = runs.first() {
        bail!(
            "--x {setting} plots sweeps' final losses against a setting, but {} is a run directory; give only \
             sweep directories, or plot runs' curves with --x step, tokens, flops or time",
            run.display()
        );
    }
    let metric = match y {
        YAxis::ValLoss => "final_val_loss",
        YAxis::BestValLoss => "best_val_loss",
        YAxis::TestLoss => "test_loss",
        YAxis::Loss | YAxis::MixingGain => bail!(
            "a sweep's summary has no final training loss or mixing gain; plot --y val_loss (its final \
             validation loss), --y best_val_loss or --y test_loss against --x {setting}, or the curves with \
             --x step"
        ),
        YAxis::TuningLoss => bail!(
            "--y tuning_loss is the loss of a sweep's tuning runs, which are not its points: plot it with --x \
             tuning, or plot --y val_loss, --y best_val_loss or --y test_loss against --x {setting}"
        ),
    };
    // (sweep, group label, the setting's value, the metric) for every finished point.
    let mut found: Vec<(usize, String, Value, f64)> = vec![];
    for (si, sweep) in sweeps.iter().enumerate() {
        for p in sweep.done() {
            let Some(xv) = p.settings.get(setting) else {
                warn(&format!(
                    "leaving out {} of {}: it has no setting {setting}",
                    p.name(),
                    sweep.dir.display()
                ));
                continue;
            };
            let value = match y {
                YAxis::BestValLoss => p.best_val_loss,
                YAxis::TestLoss => p.test_loss,
                _ => p.final_val_loss,
            };
            let Some(value) = value.filter(|v| v.is_finite()) else {
                warn(&format!(
                    "leaving out {} of {}: it has no {metric}",
                    p.name(),
                    sweep.dir.display()
                ));
                continue;
            };
            // The group: every other setting but the seed, the swept ones in their order.
            let mut keys: Vec<&String> = sweep
                .summary
                .swept
                .iter()
                .filter(|k| p.settings.contains_key(*k))
                .collect();
            let mut rest: Vec<&String> = p.settings.keys().filter(|k| !keys.contains(k)).collect();
            rest.sort();
            keys.extend(rest);
            let mut parts: Vec<String> = keys
                .iter()
                .filter(|k| k.as_str() != setting && k.as_str() != "seed")
                .map(|k| format!("{k}={}", setting_text(&p.settings[k.as_str()])))
                .collect();
            if sweeps.len() > 1 || parts.is_empty() {
                parts.insert(0, sweep.name());
            }
            found.push((si, parts.join(" "), xv.clone(), value));
        }
    }
    if found.is_empty() {
        bail!("no finished point of the sweeps has both {setting} and a {metric}, so there is nothing to plot");
    }
    let numeric = found.iter().all(|f| f.2.is_number());
    let numbers: Vec<f64> = found.iter().filter_map(|f| f.2.as_f64()).collect();
    let (lo, hi) = span(numbers.iter().copied());
    let log2 = numeric && lo > 0.0 && hi / lo >= 8.0;
    // Categories in order of appearance.
    let mut categories: Vec<String> = vec![];
    for f in &found {
        let t = setting_text(&f.2);
        if !categories.contains(&t) {
            categories.push(t);
        }
    }
    let position = |v: &Value| -> f64 {
        match v.as_f64() {
            Some(x) if numeric && log2 => x.log2(),
            Some(x) if numeric => x,
            _ => categories.iter().position(|c| *c == setting_text(v)).unwrap_or(0) as f64,
        }
    };
    // (sweep, group label, its cells), in order of appearance.
    let mut groups: Vec<(usize, String, Vec<Cell>)> = vec![];
    for (si, label, xv, value) in &found {
        let gi = match groups.iter().position(|g| g.0 == *si && g.1 == *label) {
            Some(i) => i,
            None => {
                groups.push((*si, label.clone(), vec![]));
                groups.len() - 1
            }
        };
        let at = position(xv);
        let cells = &mut groups[gi].2;
        match cells.iter_mut().find(|c| c.0 == at) {
            Some(c) => c.2.push(*value),
            None => cells.push((at, setting_text(xv), vec![*value])),
        }
    }
    let groups: Vec<Group> = groups
        .into_iter()
        .map(|(_, label, mut cells)| {
            cells.sort_by(|a, b| a.0.total_cmp(&b.0));
            let stats = cells
                .into_iter()
                .map(|(at, label, ys)| Stat {
                    at,
                    label,
                    n: ys.len(),
                    // Each term divided first: a sum of huge losses would overflow.
                    mean: ys.iter().map(|y| y / ys.len() as f64).sum(),
                    min: ys.iter().copied().fold(f64::INFINITY, f64::min),
                    max: ys.iter().copied().fold(f64::NEG_INFINITY, f64::max),
                })
                .collect();
            Group { label, stats }
        })
        .collect();
    let mut ticks: Vec<(f64, String)> = vec![];
    for s in groups.iter().flat_map(|g| g.stats.iter()) {
        if !ticks.iter().any(|t| t.0 == s.at) {
            ticks.push((s.at, s.label.clone()));
        }
    }
    ticks.sort_by(|a, b| a.0.total_cmp(&b.0));
    // Too many values to label each: every k-th, so that the labels do not overlap.
    let every = ticks.len().div_ceil(MAX_TICKS).max(1);
    let ticks = ticks.into_iter().step_by(every).collect();
    Ok(SettingPlot {
        title,
        setting: setting.to_string(),
        y_desc: match y {
            YAxis::BestValLoss => "best validation loss".into(),
            YAxis::TestLoss => "test loss (final model, test slice)".into(),
            _ => "final validation loss".into(),
        },
        log2,
        categorical: !numeric,
        ticks,
        groups,
    })
}

pub(super) fn draw_setting<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, s: &SettingPlot) -> Result<()> {
    let area = titled(root, &s.title)?;
    // One line needs no legend (the title names it): the chart takes the whole width.
    let (area, panel) = match s.groups.len() {
        0 | 1 => (area, None),
        _ => {
            let (chart, panel) = with_panel(&area);
            (chart, Some(panel))
        }
    };
    let stats = || s.groups.iter().flat_map(|g| g.stats.iter());
    let (lo, hi) = span(stats().map(|p| p.at));
    // Categories sit at 0, 1, …: half a slot of room on each side.
    let (x0, x1) = match s.categorical {
        true => (lo - 0.5, hi + 0.5),
        false => padded((lo, hi), 0.08),
    };
    let (y0, y1) = padded(span(stats().flat_map(|p| [p.min, p.max])), 0.08);
    let digits = decimals((y0, y1));
    let keys: Vec<f64> = s.ticks.iter().map(|t| t.0).collect();
    let mut chart = drawn(chart_builder(&area).build_cartesian_2d(
        TickedAxis {
            range: (x0..x1).into(),
            ticks: keys,
        },
        y0..y1,
    ))?;
    let tick = |v: &f64| tick_label(&s.ticks, *v);
    let x_desc = match s.log2 {
        true => format!("{} (log scale)", s.setting),
        false => s.setting.clone(),
    };
    draw_mesh(&mut chart, (&x_desc, &s.y_desc), &tick, &|v| format!("{v:.digits$}"))?;
    for (i, g) in s.groups.iter().enumerate() {
        let colour = colour(i);
        let style = colour.stroke_width(2);
        drawn(chart.draw_series(LineSeries::new(g.stats.iter().map(|p| (p.at, p.mean)), style)))?;
        drawn(
            chart.draw_series(
                g.stats
                    .iter()
                    .map(|p| ErrorBar::new_vertical(p.at, p.min, p.mean, p.max, style, 10)),
            ),
        )?;
        drawn(chart.draw_series(g.stats.iter().map(|p| Circle::new((p.at, p.mean), 4, colour.filled()))))?;
    }
    let Some(panel) = panel else { return Ok(()) };
    let entries: Vec<Entry> = s
        .groups
        .iter()
        .enumerate()
        .map(|(i, g)| Entry::new(vec![Mark::Line(colour(i)), Mark::Dot(colour(i))], g.label.as_str()))
        .collect();
    draw_legend(&panel, &entries)
}
