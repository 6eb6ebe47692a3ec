//! `--x scaling`: a sweep's `[scaling]` fit, read from summary.json. Two log-log panels, the
//! test loss against parameters and against training FLOPs: per family every seed's loss, the
//! mean at each size, and the fitted power law L = e^a · N^(−α) over the sizes measured, with
//! each exponent's bootstrap interval and the parameter multiplier in the legend.

use super::axis::{compact, padded, span, TickedAxis};
use super::figure::{chart_builder, colour, draw_legend, draw_mesh, drawn, titled, with_panel, Entry, Mark};
use super::inputs::{Sweep, SUMMARY_FILE};
use super::YAxis;
use crate::sweep::scaling::{Family, PowerLaw, Scaling, Size};
use anyhow::{bail, Result};
use plotters::coord::Shift;
use plotters::prelude::*;

/// The key's marks: shapes, not families, so in no family's colour.
const INK: RGBColor = RGBColor(64, 64, 64);

pub(super) struct ScalingPlot {
    pub(super) title: Option<String>,
    pub(super) scaling: Scaling,
}

/// The one sweep's scaling fit, or an error that says what to give.
pub(super) fn scaling_plot(sweeps: &[&Sweep], runs: usize, y: YAxis, title: Option<String>) -> Result<ScalingPlot> {
    if y != YAxis::TestLoss {
        bail!(
            "--x scaling draws the fit of the final models' test_loss, not their {}: give --y test_loss",
            y.name()
        );
    }
    let ([sweep], 0) = (sweeps, runs) else {
        bail!("--x scaling plots one sweep's [scaling] fit: give one sweep directory (or its summary.json)");
    };
    let Some(scaling) = sweep.summary.scaling.as_deref().cloned() else {
        bail!(
            "{} has no [scaling] fit; declare [scaling] in the experiment file (experiments/scaling.toml is one) and \
             run it",
            sweep.dir.join(SUMMARY_FILE).display()
        );
    };
    if !scaling
        .families
        .iter()
        .any(|f| f.sizes.iter().any(|z| z.mean_test_loss.is_finite()))
    {
        bail!(
            "no size of the [scaling] families of {} has a test loss to plot",
            sweep.dir.display()
        );
    }
    Ok(ScalingPlot { title, scaling })
}

/// Which cost a panel puts on its x axis.
#[derive(Clone, Copy)]
enum Cost {
    Params,
    Flops,
}

/// Ticks at round losses (0.05, 0.1, 0.25 or 0.5 apart) in ln(loss), labelled as losses.
fn loss_ticks((lo, hi): (f64, f64)) -> Vec<(f64, String)> {
    let (a, b) = (lo.exp(), hi.exp());
    let step = [0.05, 0.1, 0.25, 0.5, 1.0]
        .into_iter()
        .find(|s| (b - a) / s <= 8.0)
        .unwrap_or(1.0);
    let mut v = (a / step).ceil() * step;
    let mut ticks = vec![];
    while v <= b && ticks.len() < 12 {
        ticks.push((v.ln(), format!("{v:.2}")));
        v += step;
    }
    ticks
}

fn draw_panel<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, s: &Scaling, cost: Cost) -> Result<()> {
    let of = |size: &Size| match cost {
        Cost::Params => size.params,
        Cost::Flops => size.train_flops,
    };
    let fit_of = |f: &Family| -> PowerLaw {
        match cost {
            Cost::Params => f.params_fit.clone(),
            Cost::Flops => f.flops_fit.clone(),
        }
    };
    let finite = |v: f64| v.is_finite() && v > 0.0;
    let xs = s
        .families
        .iter()
        .flat_map(|f| f.sizes.iter().map(of))
        .filter(|&v| finite(v))
        .map(f64::ln);
    let (x0, x1) = padded(span(xs), 0.06);
    let ys = s
        .families
        .iter()
        .flat_map(|f| {
            f.sizes
                .iter()
                .flat_map(|z| z.per_seed.iter().copied().chain([z.mean_test_loss]))
        })
        .filter(|&v| finite(v))
        .map(f64::ln);
    let (y0, y1) = padded(span(ys), 0.08);
    let mut x_ticks: Vec<(f64, String)> = s
        .families
        .iter()
        .flat_map(|f| f.sizes.iter().map(of))
        .filter(|&v| finite(v))
        .map(|v| (v.ln(), compact(v)))
        .collect();
    x_ticks.sort_by(|a, b| a.0.total_cmp(&b.0));
    // Labels closer than a fifth of the axis would overlap: the first of each such run.
    let mut kept: Vec<(f64, String)> = vec![];
    for t in x_ticks {
        if kept.last().is_none_or(|k| t.0 - k.0 > (x1 - x0) / 5.0) {
            kept.push(t);
        }
    }
    let y_ticks = loss_ticks((y0, y1));
    let mut chart = drawn(chart_builder(area).build_cartesian_2d(
        TickedAxis {
            range: (x0..x1).into(),
            ticks: kept.iter().map(|t| t.0).collect(),
        },
        TickedAxis {
            range: (y0..y1).into(),
            ticks: y_ticks.iter().map(|t| t.0).collect(),
        },
    ))?;
    let label = |ticks: &[(f64, String)], v: f64| super::axis::tick_label(ticks, v);
    let x_desc = match cost {
        Cost::Params => "parameters (log scale)",
        Cost::Flops => "training FLOPs (log scale)",
    };
    draw_mesh(
        &mut chart,
        (x_desc, "test loss (log scale)"),
        &|v| label(&kept, *v),
        &|v| label(&y_ticks, *v),
    )?;
    for (i, f) in s.families.iter().enumerate() {
        let colour = colour(i);
        let sizes: Vec<(f64, &Size)> = f
            .sizes
            .iter()
            .filter(|z| finite(of(z)))
            .map(|z| (of(z).ln(), z))
            .collect();
        drawn(chart.draw_series(sizes.iter().flat_map(|&(x, z)| {
            z.per_seed
                .iter()
                .filter(|&&l| finite(l))
                .map(move |&l| Cross::new((x, l.ln()), 4, colour.stroke_width(1)))
        })))?;
        let means: Vec<(f64, f64)> = sizes
            .iter()
            .filter(|(_, z)| finite(z.mean_test_loss))
            .map(|&(x, z)| (x, z.mean_test_loss.ln()))
            .collect();
        drawn(chart.draw_series(means.iter().map(|&p| Circle::new(p, 5, colour.filled()))))?;
        // ln L = a − α ln N: a straight line here, over the sizes this family measured.
        let fit = fit_of(f);
        let (lo, hi) = span(sizes.iter().map(|p| p.0));
        if fit.a.is_finite() && fit.alpha.is_finite() && hi > lo {
            let line = [lo, hi].map(|x| (x, fit.a - fit.alpha * x));
            drawn(chart.draw_series(DashedLineSeries::new(line, 8, 5, colour.stroke_width(2))))?;
        }
    }
    Ok(())
}

/// Both panels side by side, and the legend right of them: per family its colour with both
/// exponents' intervals, then the multipliers, then the marks.
pub(super) fn draw_scaling<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, p: &ScalingPlot) -> Result<()> {
    let (area, panel) = with_panel(&titled(root, &p.title)?);
    let (w, _) = area.dim_in_pixel();
    let (left, right) = area.split_horizontally(w / 2);
    draw_panel(&left, &p.scaling, Cost::Params)?;
    draw_panel(&right, &p.scaling, Cost::Flops)?;
    let interval = |f: &PowerLaw| format!("{:.3} [{:.3}, {:.3}]", f.alpha, f.alpha_low, f.alpha_high);
    let mut entries: Vec<Entry> = p
        .scaling
        .families
        .iter()
        .enumerate()
        .map(|(i, f)| {
            Entry::new(
                vec![Mark::Dashed(colour(i)), Mark::Dot(colour(i))],
                format!(
                    "{}: α {} against parameters, {} against FLOPs",
                    f.name,
                    interval(&f.params_fit),
                    interval(&f.flops_fit)
                ),
            )
        })
        .collect();
    for m in &p.scaling.multipliers {
        entries.push(Entry::new(
            vec![],
            format!("{} at {} parameters", m.sentence(2), compact(m.at_params)),
        ));
    }
    entries.push(Entry::new(vec![Mark::Cross(INK)], "one seed's final model"));
    entries.push(Entry::new(vec![Mark::Dot(INK)], "mean over seeds"));
    entries.push(Entry::new(
        vec![Mark::Dashed(INK)],
        format!(
            "power law fitted to the means; α's 95% bootstrap interval over {} seeds",
            p.scaling.seeds
        ),
    ));
    draw_legend(&panel, &entries)
}
