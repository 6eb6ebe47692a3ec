//! Runs' loss curves against step, tokens, training FLOPs or wall time: the points of every
//! finished run the PATHs name, and their drawing.

use super::axis::{compact, decimals, padded, span};
use super::figure::{chart_builder, colour, drawn, legend_corner};
use super::inputs::Input;
use super::labels::legend_labels;
use super::runs::{train_flops_per_token, Run};
use super::{XAxis, YAxis};
use crate::run_dir::{CONFIG_FILE, METRICS_FILE};
use anyhow::{bail, Context, Result};
use plotters::coord::Shift;
use plotters::prelude::*;
use std::collections::HashSet;
use std::path::PathBuf;

pub(super) struct Series {
    pub(super) label: String,
    pub(super) points: Vec<(f64, f64)>,
}

pub(super) struct Curves {
    pub(super) title: Option<String>,
    pub(super) x_desc: String,
    pub(super) y_desc: String,
    pub(super) series: Vec<Series>,
    /// Draw a dot at each point: validation losses are few and far apart.
    markers: bool,
    pub(super) x_span: (f64, f64),
    pub(super) y_span: (f64, f64),
}

pub(super) fn curves(inputs: &[Input], x: &XAxis, y: YAxis, title: Option<String>) -> Result<Curves> {
    if y == YAxis::BestValLoss {
        bail!(
            "--y best_val_loss is a sweep's summary value: plot it against a setting (e.g. --x d_k), or plot \
             curves with --y loss or --y val_loss"
        );
    }
    let mut dirs: Vec<PathBuf> = vec![];
    let mut seen = HashSet::new();
    for input in inputs {
        let found: Vec<PathBuf> = match input {
            Input::Run(dir) => vec![dir.clone()],
            Input::Sweep(s) => s.done().map(|p| s.dir.join(&p.dir)).collect(),
        };
        for dir in found {
            if !dir.join(CONFIG_FILE).is_file() {
                bail!(
                    "{} is not a run directory (it has no {CONFIG_FILE}), though a sweep lists it as done",
                    dir.display()
                );
            }
            // A run named twice (directly and through its sweep) is one curve.
            if seen.insert(dir.canonicalize().unwrap_or_else(|_| dir.clone())) {
                dirs.push(dir);
            }
        }
    }
    if dirs.is_empty() {
        bail!("there is nothing to plot: no PATH holds a finished run");
    }
    let runs = dirs.iter().map(|d| Run::read(d)).collect::<Result<Vec<_>>>()?;
    let labels = legend_labels(&runs)?;
    let mut series = vec![];
    for (run, label) in runs.iter().zip(labels) {
        let fpt = match x {
            XAxis::Flops => train_flops_per_token(&run.cfg)
                .with_context(|| format!("cannot count the FLOPs of {}", run.dir.display()))?,
            _ => 0.0,
        };
        let mut points = vec![];
        for row in &run.rows {
            let value = match y {
                YAxis::ValLoss => row.metrics.val_loss,
                // Gains span orders of magnitude (HC's reach 10^3 and more): their logarithm.
                YAxis::MixingGain => row.metrics.mixing_gain.map(|g| g[0].log10()),
                _ => row.metrics.loss,
            };
            let Some(value) = value else { continue };
            let Some(at) = run.x(x, row, fpt) else {
                bail!(
                    "{} has a row without elapsed_s (step {}), so --x time cannot place it; plot it with --x step",
                    run.dir.join(METRICS_FILE).display(),
                    row.metrics.step
                );
            };
            // Huge finite values can sum (wall time across resumes) or multiply (FLOPs) past f64.
            if !(at.is_finite() && value.is_finite()) {
                bail!(
                    "line {} of {} gives the point ({at}, {value}), which is not finite, so it cannot be plotted; \
                     plot another --x, or correct that line",
                    row.line,
                    run.dir.join(METRICS_FILE).display()
                );
            }
            points.push((at, value));
        }
        if points.is_empty() {
            match y {
                YAxis::ValLoss => bail!(
                    "{} has no val_loss rows (it never evaluated); plot --y loss, or train with --eval-every N to \
                     evaluate every N steps",
                    run.dir.display()
                ),
                YAxis::MixingGain => bail!(
                    "{} has no mixing_gain rows: only hyper-connected models (--arch hc) log it, at each \
                     evaluation (--eval-every N)",
                    run.dir.display()
                ),
                _ => bail!(
                    "{} has no rows with a training loss",
                    run.dir.join(METRICS_FILE).display()
                ),
            }
        }
        series.push(Series { label, points });
    }
    let all = || series.iter().flat_map(|s| s.points.iter());
    let x_span = span(all().map(|p| p.0));
    let y_span = span(all().map(|p| p.1));
    Ok(Curves {
        title,
        x_desc: x.describe(),
        y_desc: match y {
            YAxis::ValLoss => "validation loss".into(),
            YAxis::MixingGain => "log₁₀ composite gain of the mixing (forward)".into(),
            _ => "training loss".into(),
        },
        markers: matches!(y, YAxis::ValLoss | YAxis::MixingGain),
        series,
        x_span,
        y_span,
    })
}

pub(super) fn draw_curves<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, c: &Curves) -> Result<()> {
    // Steps, tokens, FLOPs and seconds all count from 0: the axis starts there.
    let (x0, x1) = (c.x_span.0.min(0.0), c.x_span.1);
    let (x0, x1) = padded((x0, x1), 0.0);
    let (y0, y1) = padded(c.y_span, 0.05);
    let digits = decimals((y0, y1));
    let mut chart = drawn(chart_builder(root, &c.title).build_cartesian_2d(x0..x1, y0..y1))?;
    drawn(
        chart
            .configure_mesh()
            .x_desc(c.x_desc.as_str())
            .y_desc(c.y_desc.as_str())
            .x_label_formatter(&|v| compact(*v))
            .y_label_formatter(&|v| format!("{v:.digits$}"))
            .label_style(("sans-serif", 15))
            .axis_desc_style(("sans-serif", 16))
            .draw(),
    )?;
    for (i, s) in c.series.iter().enumerate() {
        let colour = colour(i);
        let style = colour.stroke_width(2);
        drawn(chart.draw_series(LineSeries::new(s.points.iter().copied(), style)))?
            .label(s.label.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
        if c.markers {
            drawn(chart.draw_series(s.points.iter().map(|&p| Circle::new(p, 3, colour.filled()))))?;
        }
    }
    drawn(
        chart
            .configure_series_labels()
            .position(legend_corner(
                c.series.iter().map(|s| s.points.as_slice()),
                (x0, x1),
                (y0, y1),
            ))
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .label_font(("sans-serif", 15))
            .draw(),
    )
}
