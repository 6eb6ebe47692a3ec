//! `resmem plot`: runs' loss curves overlaid against step, tokens, training FLOPs or wall time
//! (a colour per arm, its seeds together), each sweep's final or test losses against one of its
//! settings (mean over seeds, min..max bars), (`--x comparison`) a sweep's declared comparisons
//! and trends as intervals, (`--x tuning`) its `[tune]` curves, or (`--x scaling`) its
//! `[scaling]` fit, as SVG or PNG. The font is embedded, so a PNG needs no system fonts; every
//! legend sits right of its chart, never on the data.
//!
//! This file holds the command: its flags, its axes and which figure they ask for. The PATHs it
//! reads are `inputs.rs` (runs and sweeps' summaries) and `runs.rs` (a run's config and metrics);
//! each figure is one file, its data and its drawing side by side: `curves.rs` (curves against
//! step, tokens, FLOPs or time, labelled by `labels.rs`), `setting.rs` (final losses against a
//! setting), `intervals.rs` (the declared comparisons and trends), `tuning.rs` (the tuning) and
//! `scaling.rs` (the scaling fit);
//! `figure.rs` writes any of them as SVG or PNG, with their titles and legends, and `axis.rs`
//! holds the axes' ranges and tick labels.

mod axis;
mod curves;
mod figure;
mod inputs;
mod intervals;
mod labels;
mod runs;
mod scaling;
mod setting;
mod tuning;

use crate::console::say;
use anyhow::Result;
use axis::plain;
use clap::{Args, ValueEnum};
use curves::curves;
use figure::{format_of, write, Figure};
use inputs::{inputs, Input, Sweep};
use intervals::interval_plot;
use scaling::scaling_plot;
use setting::setting_plot;
use std::path::{Path, PathBuf};
use tuning::tuning_plot;

#[derive(Args, Debug)]
pub struct PlotArgs {
    /// Run directories (written by `resmem train`) and sweep directories (holding the
    /// summary.json of `resmem sweep`; a sweep stands for its finished runs).
    #[arg(required = true, value_name = "PATH")]
    pub paths: Vec<PathBuf>,
    /// step; tokens (step × batch × T); flops (training FLOPs, 3× the forward); time (wall
    /// seconds): runs' curves, a colour per arm (runs that differ only by their seed). A setting
    /// the sweeps varied (e.g. d_k): their final losses against it. comparison: each declared
    /// comparison's 95% interval of a − b with its per-seed differences (--y test_loss, what
    /// comparisons decide on, or val_loss), under a sequential design also its repeated
    /// interval and look, and its Holm verdict where the family has 2 tests or more; the
    /// declared trends' slopes in a second panel. tuning: each arm's [tune] on a log scale of
    /// the one numeric setting tuned, every seed's loss, their mean, the fitted parabola and the
    /// value chosen (--y tuning_loss). scaling: a [scaling] sweep's test loss against parameters
    /// and training FLOPs on log scales, every seed, the means and each family's fitted power
    /// law, with the exponents' intervals and the multiplier (--y test_loss).
    #[arg(long)]
    pub x: String,
    /// loss (training) or val_loss, for curves; against a setting, val_loss is each run's final
    /// validation loss, best_val_loss its best and test_loss its final model's loss on the
    /// validation split's test slice (one number per run, so never a curve); mixing_gain, the
    /// log₁₀ of hyper-connections' composite gain (forward) at each evaluation; tuning_loss, the
    /// tuning runs' loss on the tuning slice, for --x tuning only.
    #[arg(long, value_enum)]
    pub y: YAxis,
    /// The figure to write: FIG.svg, or FIG.png (1024×640 pixels).
    #[arg(long)]
    pub out: PathBuf,
    /// The figure's title (default: the sweep's experiment name, if one sweep has one).
    #[arg(long)]
    pub title: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum YAxis {
    Loss,
    #[value(name = "val_loss")]
    ValLoss,
    #[value(name = "best_val_loss")]
    BestValLoss,
    /// The forward composite gain of a hyper-connected model's mixing (`mixing_gain`).
    #[value(name = "mixing_gain")]
    MixingGain,
    /// A finished run's final model on the validation split's test slice.
    #[value(name = "test_loss")]
    TestLoss,
    /// A tuning run's final model on the validation split's tuning slice.
    #[value(name = "tuning_loss")]
    TuningLoss,
}

impl YAxis {
    fn name(self) -> &'static str {
        match self {
            YAxis::Loss => "loss",
            YAxis::ValLoss => "val_loss",
            YAxis::BestValLoss => "best_val_loss",
            YAxis::MixingGain => "mixing_gain",
            YAxis::TestLoss => "test_loss",
            YAxis::TuningLoss => "tuning_loss",
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
enum XAxis {
    Step,
    Tokens,
    Flops,
    Time,
    /// The declared comparisons and trends, as intervals.
    Comparison,
    /// The `[tune]` of each arm.
    Tuning,
    /// The `[scaling]` fit: loss against parameters and FLOPs.
    Scaling,
    Setting(String),
}

impl XAxis {
    fn parse(s: &str) -> Self {
        match s {
            "step" => XAxis::Step,
            "tokens" => XAxis::Tokens,
            "flops" => XAxis::Flops,
            "time" => XAxis::Time,
            "comparison" => XAxis::Comparison,
            "tuning" => XAxis::Tuning,
            "scaling" => XAxis::Scaling,
            other => XAxis::Setting(other.to_string()),
        }
    }

    fn name(&self) -> &str {
        match self {
            XAxis::Step => "step",
            XAxis::Tokens => "tokens",
            XAxis::Flops => "flops",
            XAxis::Time => "time",
            XAxis::Comparison => "comparison",
            XAxis::Tuning => "tuning",
            XAxis::Scaling => "scaling",
            XAxis::Setting(s) => s,
        }
    }

    fn describe(&self) -> String {
        match self {
            XAxis::Step => "step".into(),
            XAxis::Tokens => "tokens (step × batch × T)".into(),
            XAxis::Flops => "training FLOPs (3× forward)".into(),
            XAxis::Time => "wall time (s)".into(),
            XAxis::Comparison | XAxis::Tuning | XAxis::Scaling => self.name().into(),
            XAxis::Setting(s) => s.clone(),
        }
    }
}

pub fn run(args: PlotArgs) -> Result<()> {
    let format = format_of(&args.out)?;
    let x = XAxis::parse(&args.x);
    let inputs = inputs(&args.paths)?;
    let sweeps: Vec<&Sweep> = inputs
        .iter()
        .filter_map(|i| match i {
            Input::Sweep(s) => Some(s),
            Input::Run(_) => None,
        })
        .collect();
    // A sweep's own name titles a figure of it alone.
    let title = args.title.clone().or(match sweeps.as_slice() {
        [one] if inputs.len() == 1 => one.summary.experiment.clone(),
        _ => None,
    });
    let runs: Vec<&Path> = inputs
        .iter()
        .filter_map(|i| match i {
            Input::Run(r) => Some(r.as_path()),
            Input::Sweep(_) => None,
        })
        .collect();
    let (figure, summary) = match &x {
        XAxis::Comparison => {
            let plot = interval_plot(&sweeps, args.y, title)?;
            let summary = match plot.trends.len() {
                0 => counted(plot.rows.len(), "comparison"),
                n => format!("{}, {}", counted(plot.rows.len(), "comparison"), counted(n, "trend")),
            };
            (Figure::Intervals(plot), summary)
        }
        XAxis::Scaling => {
            let plot = scaling_plot(&sweeps, runs.len(), args.y, title)?;
            let summary = counted(plot.scaling.families.len(), "fitted power law");
            (Figure::Scaling(plot), summary)
        }
        XAxis::Tuning => {
            let plot = tuning_plot(&sweeps, &runs, args.y, title)?;
            let summary = format!("{} tuned over {}", counted(plot.arms.len(), "arm"), plot.setting);
            (Figure::Tuning(plot), summary)
        }
        XAxis::Setting(setting) => {
            let plot = setting_plot(&sweeps, &runs, setting, args.y, title)?;
            say(&plot.table());
            let points: usize = plot.groups.iter().map(|g| g.stats.len()).sum();
            let summary = format!("{}, {}", counted(plot.groups.len(), "line"), counted(points, "point"));
            (Figure::Setting(plot), summary)
        }
        _ => {
            let plot = curves(&inputs, &x, args.y, title)?;
            let summary = format!(
                "{}; x ({}) from {} to {}, y ({}) from {:.4} to {:.4}",
                counted(plot.series.len(), "curve"),
                x.name(),
                plain(plot.x_span.0),
                plain(plot.x_span.1),
                args.y.name(),
                plot.y_span.0,
                plot.y_span.1
            );
            (Figure::Curves(plot), summary)
        }
    };
    write(&figure, &args.out, format)?;
    say(&format!("wrote {}: {summary}", args.out.display()));
    Ok(())
}

/// "1 curve", "2 curves".
fn counted(n: usize, noun: &str) -> String {
    match n {
        1 => format!("1 {noun}"),
        _ => format!("{n} {noun}s"),
    }
}
