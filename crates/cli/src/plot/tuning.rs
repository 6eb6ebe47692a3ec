//! `--x tuning`: a sweep's `[tune]`, per arm: every tuning seed's loss on the validation split's
//! tuning slice against the tuned setting on a log scale, their means joined, the parabola in
//! ln(value) the choice was read from, and the value chosen; read from summary.json, and its
//! drawing.

use super::axis::{decimals, padded, span, tick_label, TickedAxis};
use super::figure::{chart_builder, colour, draw_legend, draw_mesh, drawn, star, titled, with_panel, Entry, Mark};
use super::inputs::{Sweep, Tuned, SUMMARY_FILE};
use super::setting::MAX_TICKS;
use super::YAxis;
use crate::console::warn;
use anyhow::{bail, Result};
use plotters::coord::Shift;
use plotters::prelude::*;
use std::path::Path;

/// The key's marks: shapes, not arms, so in no arm's colour.
const INK: RGBColor = RGBColor(64, 64, 64);

/// One value of the tuned setting for one arm.
struct Cell {
    /// ln(value): where it sits on the axis, and the fit's x.
    at: f64,
    losses: Vec<f64>,
    mean: Option<f64>,
}

pub(super) struct TuneArm {
    label: String,
    cells: Vec<Cell>,
    /// ln(low), ln(high) and the coefficients a, b, c of loss = a + b·x + c·x².
    fit: Option<(f64, f64, [f64; 3])>,
    /// ln(value) and the loss of the value chosen.
    chosen: Option<(f64, f64)>,
}

pub(super) struct TuningPlot {
    pub(super) title: Option<String>,
    pub(super) setting: String,
    /// The tried values: their positions and text.
    ticks: Vec<(f64, String)>,
    pub(super) arms: Vec<TuneArm>,
}

/// The one setting every arm's tuning varies, or an error that says what else to do.
fn the_setting(sweeps: &[&Sweep]) -> Result<String> {
    let mut found: Option<(String, &Path, &str)> = None;
    for sweep in sweeps {
        for t in &sweep.summary.tuning {
            for r in &t.rows {
                let [(name, _)] = r.settings.as_slice() else {
                    let names: Vec<&str> = r.settings.iter().map(|s| s.0.as_str()).collect();
                    bail!(
                        "the tuning of {} in {} varies {} settings ({}), but --x tuning draws the tuning of one \
                         numeric setting; read its rows in {}, or tune one setting (e.g. [tune] lr = [...]) to \
                         plot it",
                        t.arm,
                        sweep.dir.display(),
                        names.len(),
                        names.join(", "),
                        sweep.dir.join(SUMMARY_FILE).display()
                    );
                };
                match &found {
                    Some((other, dir, arm)) if other != name => bail!(
                        "the arms tune different settings ({other} for {arm} in {}, {name} for {} in {}), which \
                         share no axis; plot the sweeps one at a time",
                        dir.display(),
                        t.arm,
                        sweep.dir.display()
                    ),
                    Some(_) => {}
                    None => found = Some((name.clone(), &sweep.dir, &t.arm)),
                }
            }
        }
    }
    match found {
        Some((name, _, _)) => Ok(name),
        None => bail!(
            "no sweep among {} has a tuning to plot; declare [tune] in the experiment file, e.g. [tune] seeds = \
             [100, 101, 102] and lr = [0.001, 0.003, 0.01], and run it",
            sweeps
                .iter()
                .map(|s| s.dir.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// ln of a tuned value, which must be a positive number to sit on a log scale.
fn ln_of(value: &str, setting: &str, t: &Tuned, sweep: &Sweep) -> Result<f64> {
    match value.trim().parse::<f64>() {
        Ok(v) if v > 0.0 && v.is_finite() => Ok(v.ln()),
        _ => bail!(
            "{setting} = {value} in the tuning of {} in {} is not a positive number, so it has no place on a log \
             scale; --x tuning draws a numeric setting's tuning, read this one's rows in {}",
            t.arm,
            sweep.dir.display(),
            sweep.dir.join(SUMMARY_FILE).display()
        ),
    }
}

/// The sweeps' tunings, one arm a line; `runs` are the PATHs that are runs: an error here.
pub(super) fn tuning_plot(sweeps: &[&Sweep], runs: &[&Path], y: YAxis, title: Option<String>) -> Result<TuningPlot> {
    if y != YAxis::TuningLoss {
        bail!(
            "--x tuning draws the tuning runs' losses on the validation split's tuning slice, not their {}: give \
             --y tuning_loss",
            y.name()
        );
    }
    if let Some(run) = runs.first() {
        bail!(
            "--x tuning plots sweeps' tunings, but {} is a run directory; give only sweep directories (written by \
             `resmem sweep` with [tune])",
            run.display()
        );
    }
    if sweeps.is_empty() {
        bail!("--x tuning plots sweeps' tunings, but no PATH is a sweep directory (with {SUMMARY_FILE})");
    }
    let setting = the_setting(sweeps)?;
    let mut arms = vec![];
    let mut ticks: Vec<(f64, String)> = vec![];
    for sweep in sweeps {
        for t in &sweep.summary.tuning {
            let mut cells: Vec<Cell> = vec![];
            for r in &t.rows {
                let value = r.settings.first().map_or("", |s| s.1.as_str());
                let at = ln_of(value, &setting, t, sweep)?;
                if !ticks.iter().any(|k| (k.0 - at).abs() < 1e-9) {
                    ticks.push((at, value.to_string()));
                }
                cells.push(Cell {
                    at,
                    losses: r.per_seed.iter().flatten().copied().filter(|l| l.is_finite()).collect(),
                    mean: r.mean.filter(|m| m.is_finite()),
                });
            }
            cells.sort_by(|a, b| a.at.total_cmp(&b.at));
            let fit = t
                .fit
                .as_ref()
                .filter(|f| f.low > 0.0 && f.high > f.low)
                .map(|f| (f.low.ln(), f.high.ln(), [f.a, f.b, f.c]));
            let chosen_value = t.chosen.iter().find(|c| c.0 == setting).map(|c| c.1.clone());
            let chosen = match &chosen_value {
                Some(v) => {
                    let at = ln_of(v, &setting, t, sweep)?;
                    // On the curve it was read from; else the mean of the grid value it is.
                    let loss = match fit {
                        Some((lo, hi, c)) if (lo - 1e-9..=hi + 1e-9).contains(&at) => Some(parabola(c, at)),
                        _ => cells.iter().find(|c| (c.at - at).abs() < 1e-9).and_then(|c| c.mean),
                    };
                    if loss.is_none() {
                        warn(&format!(
                            "the chosen {setting} = {v} of {} in {} has no loss to place it at; it is left out",
                            t.arm,
                            sweep.dir.display()
                        ));
                    }
                    loss.map(|l| (at, l))
                }
                None => None,
            };
            let mut label = match sweeps.len() {
                1 => t.arm.clone(),
                _ => format!("{} {}", sweep.name(), t.arm),
            };
            if let Some(v) = &chosen_value {
                label.push_str(&format!(": {setting}={v}"));
            }
            if t.at_edge {
                label.push_str(" (at the grid's edge)");
            }
            arms.push(TuneArm {
                label,
                cells,
                fit,
                chosen,
            });
        }
    }
    if arms.iter().all(|a| a.cells.iter().all(|c| c.losses.is_empty())) {
        bail!("no tuning run of the sweeps has a loss (every one failed or diverged), so there is nothing to plot");
    }
    ticks.sort_by(|a, b| a.0.total_cmp(&b.0));
    // Too many values to label each: every k-th, so that the labels do not overlap.
    let every = ticks.len().div_ceil(MAX_TICKS).max(1);
    let ticks = ticks.into_iter().step_by(every).collect();
    Ok(TuningPlot {
        title,
        setting,
        ticks,
        arms,
    })
}

fn parabola([a, b, c]: [f64; 3], x: f64) -> f64 {
    a + b * x + c * x * x
}

/// The fitted curve at 64 points over [low, high].
fn fitted((lo, hi, c): (f64, f64, [f64; 3])) -> Vec<(f64, f64)> {
    (0..=64)
        .map(|k| {
            let x = lo + (hi - lo) * f64::from(k) / 64.0;
            (x, parabola(c, x))
        })
        .collect()
}

/// Per arm one colour: every seed's loss a cross, the means dots joined by a line, the fitted
/// parabola dashed, the chosen value a star; the legend right of the chart.
pub(super) fn draw_tuning<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, t: &TuningPlot) -> Result<()> {
    let (area, panel) = with_panel(&titled(root, &t.title)?);
    let curves: Vec<Vec<(f64, f64)>> = t.arms.iter().map(|a| a.fit.map(fitted).unwrap_or_default()).collect();
    let xs = t
        .arms
        .iter()
        .flat_map(|a| a.cells.iter().map(|c| c.at).chain(a.chosen.map(|c| c.0)));
    let (x0, x1) = padded(span(xs), 0.06);
    let ys = t
        .arms
        .iter()
        .flat_map(|a| {
            a.cells
                .iter()
                .flat_map(|c| c.losses.iter().copied().chain(c.mean))
                .chain(a.chosen.map(|c| c.1))
        })
        .chain(curves.iter().flatten().map(|p| p.1));
    let (y0, y1) = padded(span(ys), 0.08);
    let digits = decimals((y0, y1));
    let mut chart = drawn(chart_builder(&area).build_cartesian_2d(
        TickedAxis {
            range: (x0..x1).into(),
            ticks: t.ticks.iter().map(|k| k.0).collect(),
        },
        y0..y1,
    ))?;
    let tick = |v: &f64| tick_label(&t.ticks, *v);
    let x_desc = format!("{} (log scale)", t.setting);
    let descs = (x_desc.as_str(), "loss on the tuning slice (final model)");
    draw_mesh(&mut chart, descs, &tick, &|v| format!("{v:.digits$}"))?;
    for (i, (arm, curve)) in t.arms.iter().zip(&curves).enumerate() {
        let colour = colour(i);
        drawn(chart.draw_series(arm.cells.iter().flat_map(|c| {
            c.losses
                .iter()
                .map(move |&l| Cross::new((c.at, l), 4, colour.stroke_width(1)))
        })))?;
        let means: Vec<(f64, f64)> = arm.cells.iter().filter_map(|c| c.mean.map(|m| (c.at, m))).collect();
        drawn(chart.draw_series(LineSeries::new(means.iter().copied(), colour.stroke_width(2))))?;
        drawn(chart.draw_series(means.iter().map(|&p| Circle::new(p, 4, colour.filled()))))?;
        if !curve.is_empty() {
            drawn(chart.draw_series(DashedLineSeries::new(
                curve.iter().copied(),
                8,
                5,
                colour.stroke_width(2),
            )))?;
        }
        if let Some(at) = arm.chosen {
            // Outlined in black, so that it shows over its own line.
            drawn(chart.draw_series(std::iter::once(
                EmptyElement::at(at)
                    + Polygon::new(star(10.0), BLACK.filled())
                    + Polygon::new(star(8.0), colour.filled()),
            )))?;
        }
    }
    let mut entries: Vec<Entry> = t
        .arms
        .iter()
        .enumerate()
        .map(|(i, a)| Entry::new(vec![Mark::Line(colour(i)), Mark::Dot(colour(i))], a.label.as_str()))
        .collect();
    entries.push(Entry::new(vec![Mark::Cross(INK)], "one tuning seed's loss"));
    entries.push(Entry::new(
        vec![Mark::Line(INK), Mark::Dot(INK)],
        "mean over the tuning seeds",
    ));
    if curves.iter().any(|c| !c.is_empty()) {
        entries.push(Entry::new(
            vec![Mark::Dashed(INK)],
            format!("parabola fitted in ln {}", t.setting),
        ));
    }
    if t.arms.iter().any(|a| a.chosen.is_some()) {
        entries.push(Entry::new(vec![Mark::Star(INK)], format!("the {} chosen", t.setting)));
    }
    draw_legend(&panel, &entries)
}
