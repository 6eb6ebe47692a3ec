//! `resmem plot`: runs' loss curves overlaid against step, tokens, training FLOPs or wall time,
//! each sweep's final losses against one of its settings (mean over seeds, min..max bars), or
//! (`--x comparison`) a sweep's declared comparisons as intervals, as SVG or PNG. The font is
//! embedded, so a PNG needs no system fonts.
//!
//! This file holds the command: its flags, its axes and which figure they ask for. The PATHs it
//! reads are `inputs.rs` (runs and sweeps' summaries) and `runs.rs` (a run's config and metrics);
//! each figure is one file, its data and its drawing side by side: `curves.rs` (curves against
//! step, tokens, FLOPs or time, labelled by `labels.rs`), `setting.rs` (final losses against a
//! setting) and `intervals.rs` (the declared comparisons); `figure.rs` writes any of them as SVG
//! or PNG, and `axis.rs` holds the axes' ranges and tick labels.

mod axis;
mod curves;
mod figure;
mod inputs;
mod intervals;
mod labels;
mod runs;
mod setting;

use crate::console::say;
use anyhow::Result;
use axis::plain;
use clap::{Args, ValueEnum};
use curves::curves;
use figure::{format_of, write, Figure};
use inputs::{inputs, Input, Sweep};
use intervals::interval_plot;
use setting::setting_plot;
use std::path::{Path, PathBuf};

#[derive(Args, Debug)]
pub struct PlotArgs {
    /// Run directories (written by `resmem train`) and sweep directories (holding the
    /// summary.json of `resmem sweep`; a sweep stands for its finished runs).
    #[arg(required = true, value_name = "PATH")]
    pub paths: Vec<PathBuf>,
    /// step; tokens (step × batch × T); flops (training FLOPs, 3× the forward); time (wall
    /// seconds); a setting the sweeps varied (e.g. d_k) to plot their final losses against it;
    /// or comparison: each declared comparison's 95% interval of a − b (val_loss: the final
    /// validation loss) with its per-seed differences.
    #[arg(long)]
    pub x: String,
    /// loss (training) or val_loss; against a setting, val_loss is each run's final validation
    /// loss and best_val_loss its best; mixing_gain, the log₁₀ of hyper-connections' composite
    /// gain (forward) at each evaluation.
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
}

impl YAxis {
    fn name(self) -> &'static str {
        match self {
            YAxis::Loss => "loss",
            YAxis::ValLoss => "val_loss",
            YAxis::BestValLoss => "best_val_loss",
            YAxis::MixingGain => "mixing_gain",
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
enum XAxis {
    Step,
    Tokens,
    Flops,
    Time,
    Setting(String),
}

impl XAxis {
    fn parse(s: &str) -> Self {
        match s {
            "step" => XAxis::Step,
            "tokens" => XAxis::Tokens,
            "flops" => XAxis::Flops,
            "time" => XAxis::Time,
            other => XAxis::Setting(other.to_string()),
        }
    }

    fn name(&self) -> &str {
        match self {
            XAxis::Step => "step",
            XAxis::Tokens => "tokens",
            XAxis::Flops => "flops",
            XAxis::Time => "time",
            XAxis::Setting(s) => s,
        }
    }

    fn describe(&self) -> String {
        match self {
            XAxis::Step => "step".into(),
            XAxis::Tokens => "tokens (step × batch × T)".into(),
            XAxis::Flops => "training FLOPs (3× forward)".into(),
            XAxis::Time => "wall time (s)".into(),
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
    let (figure, summary) = match &x {
        XAxis::Setting(setting) if setting == "comparison" => {
            let plot = interval_plot(&sweeps, args.y, title)?;
            let summary = counted(plot.rows.len(), "comparison");
            (Figure::Intervals(plot), summary)
        }
        XAxis::Setting(setting) => {
            let runs: Vec<&Path> = inputs
                .iter()
                .filter_map(|i| match i {
                    Input::Run(r) => Some(r.as_path()),
                    Input::Sweep(_) => None,
                })
                .collect();
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
