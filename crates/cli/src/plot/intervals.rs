//! `--x comparison`: a sweep's declared comparisons, each its 95% interval of a − b with the
//! seeds' differences (under a sequential design also its wider repeated interval), and its
//! declared trends, each the interval of its seeds' slopes, in a panel of their own below (a
//! slope is on another scale than a difference); read from summary.json, and their drawing.

use super::axis::{decimals, padded, span, TickedAxis};
use super::figure::{chart_builder, draw_legend, drawn, fitting, font, titled, with_panel, Entry, Mark};
use super::inputs::{ComparedMetric, Sweep, SUMMARY_FILE};
use super::YAxis;
use crate::console::warn;
use anyhow::{bail, Result};
use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

/// Which side of 0 an interval lies on: what its colour says.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Side {
    /// Wholly below: a better, or a decreasing trend.
    Below,
    /// Wholly above: b better, or an increasing trend.
    Above,
    Across,
}

impl Side {
    fn of(verdict: &str) -> Self {
        match verdict {
            "a better" | "decreasing" => Side::Below,
            "b better" | "increasing" => Side::Above,
            _ => Side::Across,
        }
    }

    fn colour(self) -> RGBColor {
        match self {
            Side::Below => RGBColor(31, 119, 180),
            Side::Above => RGBColor(255, 127, 14),
            Side::Across => RGBColor(128, 128, 128),
        }
    }
}

/// The key's marks: shapes, not verdicts, so neither blue nor orange.
const INK: RGBColor = RGBColor(64, 64, 64);

/// One declared comparison's interval of a − b, or one trend's of its slope.
pub(super) struct IntervalRow {
    label: String,
    /// A second line under the label: the sequential design's look, Holm's verdict.
    notes: Vec<String>,
    estimate: f64,
    low: f64,
    high: f64,
    per_seed: Vec<f64>,
    side: Side,
    /// The sequential design's repeated interval, and its own verdict.
    repeated: Option<(f64, f64, Side)>,
}

pub(super) struct IntervalPlot {
    pub(super) title: Option<String>,
    /// "test loss" or "final validation loss".
    what: &'static str,
    pub(super) rows: Vec<IntervalRow>,
    pub(super) trends: Vec<IntervalRow>,
}

/// `m`'s interval as a row, or None where it has none (fewer than 2 seeds with the metric).
/// `verdict` names what a side means in Holm's note: the better arm, or the trend's direction.
fn row(
    label: String,
    mut notes: Vec<String>,
    m: &ComparedMetric,
    verdict: impl Fn(&str) -> String,
) -> Option<IntervalRow> {
    let (Some(estimate), Some(low), Some(high)) = (m.estimate, m.low, m.high) else {
        return None;
    };
    if let Some(q) = &m.sequential {
        notes.push(format!("look {} of {}, {} seeds", q.stopped_at, q.looks.len(), q.seeds));
    }
    // A family of one is adjusted by nothing: its verdict is the row's own.
    if let Some(h) = m.holm.as_ref().filter(|h| h.family >= 2) {
        notes.push(format!("Holm: {}", verdict(&h.verdict)));
    }
    Some(IntervalRow {
        label,
        notes,
        estimate,
        low,
        high,
        per_seed: m.per_seed.iter().flatten().copied().collect(),
        side: Side::of(&m.verdict),
        repeated: m.sequential.as_ref().map(|q| (q.low, q.high, Side::of(&q.verdict))),
    })
}

/// The sweeps' declared comparisons and trends of the test loss (`--y test_loss`) or of the
/// final validation loss (`--y val_loss`), read from their summaries.
pub(super) fn interval_plot(sweeps: &[&Sweep], y: YAxis, title: Option<String>) -> Result<IntervalPlot> {
    // (the metric, what it is, the other metric and its --y).
    let (metric, what, (other, other_y)) = match y {
        YAxis::TestLoss => ("test_loss", "test loss", ("final_val_loss", "val_loss")),
        YAxis::ValLoss => ("final_val_loss", "final validation loss", ("test_loss", "test_loss")),
        _ => bail!(
            "--x comparison draws the declared comparisons' intervals of the test loss or of the final \
             validation loss: give --y test_loss (what comparisons decide on) or --y val_loss, not --y {}",
            y.name()
        ),
    };
    if sweeps.is_empty() {
        bail!(
            "--x comparison draws sweeps' declared comparisons, but no PATH is a sweep directory (with {SUMMARY_FILE}); \
             give the directory `resmem sweep` wrote"
        );
    }
    let (mut rows, mut trends) = (vec![], vec![]);
    // Whether the sweeps compare the other loss: the error then names it.
    let mut other_found = false;
    for sweep in sweeps {
        for c in &sweep.summary.comparisons {
            other_found |= c.metrics.iter().any(|m| m.metric == other && m.estimate.is_some());
            let Some(m) = c.metrics.iter().find(|m| m.metric == metric) else {
                let has: Vec<&str> = c.metrics.iter().map(|m| m.metric.as_str()).collect();
                warn(&format!(
                    "leaving out the comparison {} − {} of {}: it does not compare {metric} (it compares {}; the \
                     experiment's [[compare]] metrics say which)",
                    c.a,
                    c.b,
                    sweep.dir.display(),
                    has.join(", ")
                ));
                continue;
            };
            let named = |v: &str| match Side::of(v) {
                Side::Below => format!("{} better", c.a),
                Side::Above => format!("{} better", c.b),
                Side::Across => "not resolved".into(),
            };
            match row(format!("{} − {}", c.a, c.b), vec![], m, named) {
                Some(r) => rows.push(r),
                None => warn(&format!(
                    "leaving out the comparison {} − {} of {}: its {metric} has no interval (it needs at least 2 \
                     seeds with one)",
                    c.a,
                    c.b,
                    sweep.dir.display()
                )),
            }
        }
        for t in sweep.summary.trends.iter().filter(|t| t.result.metric == metric) {
            let label = match &t.select {
                Some(s) => format!("slope along {} ({s})", t.axis),
                None => format!("slope along {}", t.axis),
            };
            let per = match t.scale.as_deref() {
                Some("linear") => format!("per unit of {}", t.axis),
                Some("log2") | None => format!("per doubling of {}", t.axis),
                Some(other) => format!("on the {other} scale of {}", t.axis),
            };
            match row(label, vec![per], &t.result, |v| v.to_string()) {
                Some(r) => trends.push(r),
                None => warn(&format!(
                    "leaving out the trend along {} of {}: it has no interval",
                    t.axis,
                    sweep.dir.display()
                )),
            }
        }
    }
    if rows.is_empty() && trends.is_empty() {
        let dirs = sweeps
            .iter()
            .map(|s| s.dir.display().to_string())
            .collect::<Vec<_>>()
            .join(", ");
        if other_found {
            bail!(
                "no declared comparison of {dirs} has an interval of {metric}, but some have one of {other}: give \
                 --y {other_y}"
            );
        }
        bail!(
            "no declared comparison with a {what} in {dirs}; declare [[compare]] in the experiment file and run it \
             with at least 2 seeds"
        );
    }
    Ok(IntervalPlot {
        title,
        what,
        rows,
        trends,
    })
}

/// The chart's margin, its x axis's labels and their description: a panel's height without rows.
const PANEL_FRAME: u32 = 20 + 20 + 55;

/// Each comparison a row: its 95% interval as a bar, the estimate as a dot, every seed's
/// difference as a cross, the line of no difference, and under a sequential design the repeated
/// interval as a thin, wider bar behind; the trends likewise in a panel below. The key, right of
/// the chart, says what the colours and marks mean.
pub(super) fn draw_intervals<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, p: &IntervalPlot) -> Result<()> {
    let (area, panel) = with_panel(&titled(root, &p.title)?);
    // One label width for both panels, so that their plots line up.
    let (area_w, area_h) = area.dim_in_pixel();
    let mut widest = 0;
    for r in p.rows.iter().chain(&p.trends) {
        widest = widest.max(drawn(area.estimate_text_size(&r.label, &font(15, Pos::default())))?.0);
        let notes = r.notes.join(", ");
        widest = widest.max(drawn(area.estimate_text_size(&notes, &font(13, Pos::default())))?.0);
    }
    // Labels wider than 45% of the chart shrink to fit it (see `draw_rows`).
    let label_w = (widest + 20).clamp(80, area_w * 45 / 100);
    let comparisons = format!("a − b, {} (95% interval over seeds; below 0: a better)", p.what);
    let slopes = format!(
        "slope of the {} along the setting (95% interval over seeds; below 0: it falls)",
        p.what
    );
    match (p.rows.is_empty(), p.trends.is_empty()) {
        (false, false) => {
            // Each panel its frame, and the rest of the height shared by rows.
            let (n1, n2) = (p.rows.len() as u32, p.trends.len() as u32);
            let rest = area_h.saturating_sub(2 * PANEL_FRAME);
            let (top, bottom) = area.split_vertically(PANEL_FRAME + rest * n1 / (n1 + n2));
            draw_rows(&top, &p.rows, &comparisons, label_w)?;
            draw_rows(&bottom, &p.trends, &slopes, label_w)?;
        }
        (false, true) => draw_rows(&area, &p.rows, &comparisons, label_w)?,
        // `interval_plot` refuses a figure with neither.
        (true, false) | (true, true) => draw_rows(&area, &p.trends, &slopes, label_w)?,
    }
    let mut key = vec![
        Entry::new(vec![Mark::Dot(INK)], "mean over seeds"),
        Entry::new(vec![Mark::Bar(INK, 3)], "95% interval"),
    ];
    if p.rows.iter().chain(&p.trends).any(|r| r.repeated.is_some()) {
        key.push(Entry::new(
            vec![Mark::Bar(INK, 1)],
            "repeated interval of the sequential design, at the look it stopped at",
        ));
    }
    let seed = match p.trends.is_empty() {
        true => "one seed's a − b",
        false => "one seed's a − b, or its slope",
    };
    key.push(Entry::new(vec![Mark::Cross(INK)], seed));
    let (below, above) = match p.trends.is_empty() {
        true => ("a better (below 0)", "b better (above 0)"),
        false => ("a better / decreasing", "b better / increasing"),
    };
    key.push(Entry::new(vec![Mark::Swatch(Side::Below.colour())], below));
    key.push(Entry::new(vec![Mark::Swatch(Side::Above.colour())], above));
    key.push(Entry::new(vec![Mark::Swatch(Side::Across.colour())], "not resolved"));
    draw_legend(&panel, &key)
}

/// An interval from `lo` to `hi` at height `y`, its ends capped `cap` pixels up and down (not
/// plotters' error bar, which rings its middle).
fn bar<DB: DrawingBackend>(
    chart: &mut ChartContext<'_, DB, Cartesian2d<RangedCoordf64, TickedAxis>>,
    (y, lo, hi): (f64, f64, f64),
    style: ShapeStyle,
    cap: i32,
) -> Result<()> {
    drawn(chart.draw_series(LineSeries::new([(lo, y), (hi, y)], style)))?;
    drawn(
        chart.draw_series(
            [lo, hi].map(|x| EmptyElement::at((x, y)) + PathElement::new(vec![(0, -cap), (0, cap)], style)),
        ),
    )?;
    Ok(())
}

/// One panel of rows on `area`: the x axis described by `x_desc`, the labels `label_w` wide.
fn draw_rows<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    rows: &[IntervalRow],
    x_desc: &str,
    label_w: u32,
) -> Result<()> {
    let values = rows.iter().flat_map(|r| {
        let repeated = r.repeated.map(|(lo, hi, _)| [lo, hi]).into_iter().flatten();
        [r.low, r.high, 0.0]
            .into_iter()
            .chain(repeated)
            .chain(r.per_seed.iter().copied())
    });
    let (x0, x1) = padded(span(values), 0.08);
    let n = rows.len();
    let ticks: Vec<f64> = (0..n).map(|i| i as f64).collect();
    let mut chart = drawn(chart_builder(area).y_label_area_size(label_w).build_cartesian_2d(
        x0..x1,
        TickedAxis {
            range: (-0.5..n as f64 - 0.5).into(),
            ticks,
        },
    ))?;
    let digits = decimals((x0, x1));
    drawn(
        chart
            .configure_mesh()
            .x_desc(x_desc)
            .x_label_formatter(&|v| format!("{v:.digits$}"))
            // The rows' labels are drawn below, in two lines where they have notes.
            .y_label_formatter(&|_| String::new())
            .label_style(("sans-serif", 15))
            .axis_desc_style(("sans-serif", 16))
            .draw(),
    )?;
    drawn(chart.draw_series(LineSeries::new(
        vec![(0.0, -0.5), (0.0, n as f64 - 0.5)],
        BLACK.stroke_width(1),
    )))?;
    let base = area.get_base_pixel();
    for (i, r) in rows.iter().enumerate() {
        // The first row on top.
        let y = (n - 1 - i) as f64;
        if let Some((lo, hi, side)) = r.repeated {
            bar(&mut chart, (y, lo, hi), side.colour().stroke_width(1), 10)?;
        }
        let colour = r.side.colour();
        bar(&mut chart, (y, r.low, r.high), colour.stroke_width(3), 6)?;
        drawn(chart.draw_series(std::iter::once(Circle::new((r.estimate, y), 5, colour.filled()))))?;
        drawn(
            chart.draw_series(
                r.per_seed
                    .iter()
                    // Just above the bar, where it shows between the rows.
                    .map(|&d| EmptyElement::at((d, y)) + Cross::new((0, -14), 4, colour.stroke_width(1))),
            ),
        )?;
        // The label right-aligned left of the axis, level with its row.
        let (px, py) = chart.backend_coord(&(x0, y));
        let (lx, ly) = (px - base.0 - 10, py - base.1);
        let anchor = Pos::new(HPos::Right, VPos::Center);
        let room = label_w.saturating_sub(16);
        let px = fitting(area, &r.label, (15, 9), room)?;
        match r.notes.is_empty() {
            true => drawn(area.draw(&Text::new(r.label.as_str(), (lx, ly), font(px, anchor))))?,
            false => {
                drawn(area.draw(&Text::new(r.label.as_str(), (lx, ly - 9), font(px, anchor))))?;
                let notes = r.notes.join(", ");
                let px = fitting(area, &notes, (13, 9), room)?;
                drawn(area.draw(&Text::new(notes, (lx, ly + 9), font(px, anchor).color(&INK))))?;
            }
        }
    }
    Ok(())
}
