//! Runs' loss curves against step, tokens, training FLOPs or wall time: the points of every
//! finished run the PATHs name, and their drawing, a colour per arm (the runs that differ only
//! by their seed).

use super::axis::{compact, decimals, padded, span};
use super::figure::{chart_builder, colour, draw_legend, draw_mesh, drawn, titled, with_panel, Entry, Mark};
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
    /// Its arm, an index into `Curves::arms`.
    arm: usize,
    pub(super) points: Vec<(f64, f64)>,
}

pub(super) struct Curves {
    pub(super) title: Option<String>,
    pub(super) x_desc: String,
    pub(super) y_desc: String,
    pub(super) series: Vec<Series>,
    /// The arms' legend labels, in order of appearance.
    arms: Vec<String>,
    /// Draw a dot at each point: validation losses are few and far apart.
    markers: bool,
    pub(super) x_span: (f64, f64),
    pub(super) y_span: (f64, f64),
}

pub(super) fn curves(inputs: &[Input], x: &XAxis, y: YAxis, title: Option<String>) -> Result<Curves> {
    match y {
        YAxis::BestValLoss => bail!(
            "--y best_val_loss is a sweep's summary value: plot it against a setting (e.g. --x d_k), or plot \
             curves with --y loss or --y val_loss"
        ),
        YAxis::TestLoss => bail!(
            "--y test_loss is one number per finished run (its final model on the validation split's test \
             slice), not a curve: plot it against a setting of a sweep (e.g. --x d_k) or as the declared \
             comparisons (--x comparison), or plot curves with --y loss or --y val_loss"
        ),
        YAxis::TuningLoss => bail!(
            "--y tuning_loss is the loss of a sweep's tuning runs on the tuning slice: plot it with --x tuning, \
             or plot curves with --y loss or --y val_loss"
        ),
        YAxis::Loss | YAxis::ValLoss | YAxis::MixingGain => {}
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
    let (arms, arm_of) = arms(&labels);
    let mut series = vec![];
    for (run, arm) in runs.iter().zip(arm_of) {
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
        series.push(Series { arm, points });
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
        arms,
        x_span,
        y_span,
    })
}

/// Whether a legend label's word names the seed (`seed=3`, `train.seed=3`).
fn is_seed(word: &str) -> bool {
    word.split_once('=')
        .is_some_and(|(k, _)| k == "seed" || k.ends_with(".seed"))
}

/// The arms of runs labelled `labels`: runs whose labels differ only by their seed are one arm,
/// one colour and one legend entry ("variant=rmt (8 seeds)"), so that 40 runs of 5 arms read as
/// 5. Returns the arms' labels, in order of appearance, and each run's arm.
fn arms(labels: &[String]) -> (Vec<String>, Vec<usize>) {
    let keys: Vec<String> = labels
        .iter()
        .map(|l| l.split(' ').filter(|w| !is_seed(w)).collect::<Vec<_>>().join(" "))
        .collect();
    let mut order: Vec<&String> = vec![];
    let arm_of: Vec<usize> = keys
        .iter()
        .map(|k| match order.iter().position(|o| *o == k) {
            Some(i) => i,
            None => {
                order.push(k);
                order.len() - 1
            }
        })
        .collect();
    let names = order
        .iter()
        .enumerate()
        .map(|(i, key)| {
            let members: Vec<usize> = (0..labels.len()).filter(|&r| arm_of[r] == i).collect();
            match members.as_slice() {
                // A lone run keeps its whole label, seed and all.
                [one] => labels[*one].clone(),
                many if key.is_empty() => format!("{} seeds", many.len()),
                many => format!("{key} ({} seeds)", many.len()),
            }
        })
        .collect();
    (names, arm_of)
}

pub(super) fn draw_curves<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, c: &Curves) -> Result<()> {
    let (area, panel) = with_panel(&titled(root, &c.title)?);
    // Steps, tokens, FLOPs and seconds all count from 0: the axis starts there.
    let (x0, x1) = (c.x_span.0.min(0.0), c.x_span.1);
    let (x0, x1) = padded((x0, x1), 0.0);
    let (y0, y1) = padded(c.y_span, 0.05);
    let digits = decimals((y0, y1));
    let mut chart = drawn(chart_builder(&area).build_cartesian_2d(x0..x1, y0..y1))?;
    draw_mesh(&mut chart, (&c.x_desc, &c.y_desc), &|v| compact(*v), &|v| {
        format!("{v:.digits$}")
    })?;
    let mut banded = false;
    // Arms of several seeds drawn one by one, which the legend says: their x values differ
    // (wall seconds; or a run missing an evaluation, which a reader should see).
    let mut alone = vec![false; c.arms.len()];
    for (arm, alone) in alone.iter_mut().enumerate() {
        let colour = colour(arm);
        let members: Vec<&Series> = c.series.iter().filter(|s| s.arm == arm).collect();
        // Several seeds on shared x values: their mean, and a band from the lowest to the highest.
        let lines: Vec<Vec<(f64, f64)>> = match spread(&members) {
            Some(Spread { mean, low, high }) => {
                let outline = low.iter().chain(high.iter().rev()).copied().collect::<Vec<_>>();
                drawn(chart.draw_series(std::iter::once(Polygon::new(outline, colour.mix(0.2).filled()))))?;
                banded = true;
                vec![mean]
            }
            None => {
                *alone = members.len() > 1;
                members.iter().map(|s| s.points.clone()).collect()
            }
        };
        for points in lines {
            drawn(chart.draw_series(LineSeries::new(points.iter().copied(), colour.stroke_width(2))))?;
            if c.markers {
                drawn(chart.draw_series(points.iter().map(|&p| Circle::new(p, 3, colour.filled()))))?;
            }
        }
    }
    let mut entries: Vec<Entry> = c
        .arms
        .iter()
        .enumerate()
        .map(|(i, label)| {
            let mut marks = vec![Mark::Line(colour(i))];
            if c.markers {
                marks.push(Mark::Dot(colour(i)));
            }
            match alone[i] {
                true => Entry::new(marks, format!("{label}; each seed alone: their x values differ")),
                false => Entry::new(marks, label.as_str()),
            }
        })
        .collect();
    if banded {
        entries.push(Entry::new(
            vec![Mark::Swatch(RGBColor(200, 200, 200))],
            "band: the seeds' lowest to highest; line: their mean",
        ));
    }
    draw_legend(&panel, &entries)
}

/// An arm's seeds summarised at each x.
struct Spread {
    mean: Vec<(f64, f64)>,
    low: Vec<(f64, f64)>,
    high: Vec<(f64, f64)>,
}

/// The mean and range over an arm's runs where there are at least two and they share their x
/// values (steps, tokens, FLOPs); None where they do not (seconds differ run by run), so that
/// each run is drawn on its own.
fn spread(runs: &[&Series]) -> Option<Spread> {
    let first = &runs.first()?.points;
    let shared = runs.len() >= 2
        && runs.iter().all(|r| {
            r.points.len() == first.len() && r.points.iter().zip(first).all(|(a, b)| a.0.to_bits() == b.0.to_bits())
        });
    if !shared {
        return None;
    }
    let at = |i: usize| runs.iter().map(move |r| r.points[i].1);
    let xs = first.iter().map(|p| p.0).enumerate();
    Some(Spread {
        mean: xs
            .clone()
            .map(|(i, x)| (x, at(i).sum::<f64>() / runs.len() as f64))
            .collect(),
        low: xs
            .clone()
            .map(|(i, x)| (x, at(i).fold(f64::INFINITY, f64::min)))
            .collect(),
        high: xs.map(|(i, x)| (x, at(i).fold(f64::NEG_INFINITY, f64::max))).collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Seeds on the same steps are one mean line within a band from the lowest to the highest;
    /// runs on their own x values (seconds) are not summarised.
    #[test]
    fn seeds_on_shared_steps_are_a_mean_in_a_band() {
        let run = |ys: [f64; 3]| Series {
            arm: 0,
            points: vec![(10.0, ys[0]), (20.0, ys[1]), (30.0, ys[2])],
        };
        let (a, b) = (run([3.0, 2.0, 1.0]), run([5.0, 2.0, 2.0]));
        let s = spread(&[&a, &b]).unwrap();
        assert_eq!(s.mean, [(10.0, 4.0), (20.0, 2.0), (30.0, 1.5)]);
        assert_eq!(s.low, [(10.0, 3.0), (20.0, 2.0), (30.0, 1.0)]);
        assert_eq!(s.high, [(10.0, 5.0), (20.0, 2.0), (30.0, 2.0)]);
        assert!(spread(&[&a]).is_none(), "one run is drawn as it is");
        let mut timed = run([1.0, 1.0, 1.0]);
        timed.points[1].0 = 21.5;
        assert!(spread(&[&a, &timed]).is_none(), "other x values: each run on its own");
    }
}
