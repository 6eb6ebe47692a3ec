//! `--x comparison`: a sweep's declared comparisons, each its 95% interval of a − b with the
//! seeds' differences, read from summary.json, and their drawing.

use super::axis::{decimals, padded, span, TickedAxis};
use super::figure::{chart_builder, drawn};
use super::inputs::Sweep;
use super::YAxis;
use anyhow::{bail, Result};
use plotters::coord::Shift;
use plotters::prelude::*;

/// One declared comparison's interval of a − b.
pub(super) struct IntervalRow {
    label: String,
    estimate: f64,
    low: f64,
    high: f64,
    per_seed: Vec<f64>,
    verdict: String,
}

pub(super) struct IntervalPlot {
    pub(super) title: Option<String>,
    pub(super) rows: Vec<IntervalRow>,
}

/// The sweeps' declared comparisons of the final validation loss, read from their summaries.
pub(super) fn interval_plot(sweeps: &[&Sweep], y: YAxis, title: Option<String>) -> Result<IntervalPlot> {
    if y != YAxis::ValLoss {
        bail!("--x comparison draws the final validation loss's intervals: give --y val_loss");
    }
    let mut rows = vec![];
    for sweep in sweeps {
        for c in &sweep.summary.comparisons {
            let Some(m) = c.metrics.iter().find(|m| m.metric == "final_val_loss") else {
                continue;
            };
            let (Some(estimate), Some(low), Some(high)) = (m.estimate, m.low, m.high) else {
                continue;
            };
            rows.push(IntervalRow {
                label: format!("{} − {}", c.a, c.b),
                estimate,
                low,
                high,
                per_seed: m.per_seed.iter().flatten().copied().collect(),
                verdict: m.verdict.clone(),
            });
        }
    }
    if rows.is_empty() {
        bail!(
            "no declared comparison with a final validation loss in {}; declare [[compare]] in the experiment \
             file and run it with at least 2 seeds",
            sweeps
                .iter()
                .map(|s| s.dir.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    Ok(IntervalPlot { title, rows })
}

/// Each comparison a row: its 95% interval as a bar, the estimate as a dot, every seed's
/// difference as a cross, and the line of no difference; blue where a is better, orange where
/// b is, grey where the interval does not say.
pub(super) fn draw_intervals<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, p: &IntervalPlot) -> Result<()> {
    let values = p
        .rows
        .iter()
        .flat_map(|r| [r.low, r.high, 0.0].into_iter().chain(r.per_seed.iter().copied()));
    let (x0, x1) = padded(span(values), 0.08);
    let n = p.rows.len();
    let ticks: Vec<f64> = (0..n).map(|i| i as f64).collect();
    let longest = p.rows.iter().map(|r| r.label.chars().count()).max().unwrap_or(10);
    let mut chart = drawn(
        chart_builder(root, &p.title)
            .y_label_area_size((longest as u32 * 9).clamp(80, 400))
            .build_cartesian_2d(
                x0..x1,
                TickedAxis {
                    range: (-0.5..n as f64 - 0.5).into(),
                    ticks,
                },
            ),
    )?;
    let digits = decimals((x0, x1));
    // The first comparison on top.
    let row_at = |i: usize| (n - 1 - i) as f64;
    let label = |v: &f64| {
        let i = n as f64 - 1.0 - v.round();
        p.rows.get(i as usize).map(|r| r.label.clone()).unwrap_or_default()
    };
    drawn(
        chart
            .configure_mesh()
            .x_desc("a − b, final validation loss (95% interval over seeds; below 0: a better)")
            .x_label_formatter(&|v| format!("{v:.digits$}"))
            .y_label_formatter(&label)
            .label_style(("sans-serif", 15))
            .axis_desc_style(("sans-serif", 16))
            .draw(),
    )?;
    drawn(chart.draw_series(LineSeries::new(
        vec![(0.0, -0.5), (0.0, n as f64 - 0.5)],
        BLACK.stroke_width(1),
    )))?;
    for (i, r) in p.rows.iter().enumerate() {
        let colour = match r.verdict.as_str() {
            "a better" => RGBColor(31, 119, 180),
            "b better" => RGBColor(255, 127, 14),
            _ => RGBColor(128, 128, 128),
        };
        let y = row_at(i);
        drawn(chart.draw_series(std::iter::once(ErrorBar::new_horizontal(
            y,
            r.low,
            r.estimate,
            r.high,
            colour.stroke_width(3),
            12,
        ))))?;
        drawn(chart.draw_series(std::iter::once(Circle::new((r.estimate, y), 5, colour.filled()))))?;
        drawn(
            chart.draw_series(
                r.per_seed
                    .iter()
                    .map(|&d| Cross::new((d, y + 0.18), 4, colour.stroke_width(1))),
            ),
        )?;
    }
    Ok(())
}
