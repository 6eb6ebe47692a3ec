//! `resmem plot`: runs' loss curves overlaid against step, tokens, training FLOPs or wall time,
//! each sweep's final losses against one of its settings (mean over seeds, min..max bars), or
//! (`--x comparison`) a sweep's declared comparisons as intervals, as SVG or PNG. The font is
//! embedded, so a PNG needs no system fonts.

use crate::console::{say, warn};
use crate::run_dir::{CONFIG_FILE, METRICS_FILE};
use anyhow::{anyhow, bail, Context, Result};
use clap::{Args, ValueEnum};
use models::RunConfig;
use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint};
use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;
use serde::Deserialize;
use serde_json::Value;
use std::collections::HashSet;
use std::ops::Range;
use std::path::{Path, PathBuf};

/// The file `resmem sweep` writes into a sweep directory.
pub const SUMMARY_FILE: &str = "summary.json";
/// Pixels of a PNG, and the SVG's view.
const SIZE: (u32, u32) = (1024, 640);
/// More distinct tick labels than this on a setting axis would overlap.
const MAX_TICKS: usize = 12;

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
    /// loss and best_val_loss its best.
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
}

impl YAxis {
    fn name(self) -> &'static str {
        match self {
            YAxis::Loss => "loss",
            YAxis::ValLoss => "val_loss",
            YAxis::BestValLoss => "best_val_loss",
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

#[derive(Clone, Copy, PartialEq, Eq)]
enum Format {
    Svg,
    Png,
}

fn format_of(out: &Path) -> Result<Format> {
    let ext = out.extension().map(|e| e.to_string_lossy().to_ascii_lowercase());
    match ext.as_deref() {
        Some("svg") => Ok(Format::Svg),
        Some("png") => Ok(Format::Png),
        _ => bail!(
            "--out {} must end in .png or .svg: the extension picks the format",
            out.display()
        ),
    }
}

/// One point of a sweep's summary.json; fields it does not need are ignored, so a newer
/// summary still plots.
#[derive(Deserialize)]
struct Point {
    dir: String,
    #[serde(default)]
    label: Option<String>,
    #[serde(default)]
    settings: serde_json::Map<String, Value>,
    status: String,
    #[serde(default)]
    final_val_loss: Option<f64>,
    #[serde(default)]
    best_val_loss: Option<f64>,
}

impl Point {
    fn name(&self) -> &str {
        self.label.as_deref().unwrap_or(&self.dir)
    }
}

#[derive(Deserialize)]
struct Summary {
    #[serde(default)]
    experiment: Option<String>,
    #[serde(default)]
    swept: Vec<String>,
    points: Vec<Point>,
    #[serde(default)]
    comparisons: Vec<Comparison>,
}

/// What `--x comparison` reads of a declared comparison in summary.json.
#[derive(Deserialize)]
struct Comparison {
    a: String,
    b: String,
    metrics: Vec<ComparedMetric>,
}

#[derive(Deserialize)]
struct ComparedMetric {
    metric: String,
    estimate: Option<f64>,
    low: Option<f64>,
    high: Option<f64>,
    per_seed: Vec<Option<f64>>,
    verdict: String,
}

struct Sweep {
    dir: PathBuf,
    summary: Summary,
}

impl Sweep {
    fn read(dir: &Path) -> Result<Self> {
        let path = dir.join(SUMMARY_FILE);
        let text = data::read_text(&path).with_context(|| format!("cannot read {}", path.display()))?;
        let summary = serde_json::from_str(&text).with_context(|| {
            format!(
                "{} is not a sweep summary (a JSON object with experiment, swept and points, as `resmem sweep` \
                 writes)",
                path.display()
            )
        })?;
        Ok(Self {
            dir: dir.to_path_buf(),
            summary,
        })
    }

    /// Its experiment's name, else its directory's.
    fn name(&self) -> String {
        self.summary.experiment.clone().unwrap_or_else(|| dir_name(&self.dir))
    }

    /// The finished points; the others are reported on stderr and left out.
    fn done(&self) -> impl Iterator<Item = &Point> {
        self.summary.points.iter().filter(|p| {
            let done = p.status == "done";
            if !done {
                warn(&format!(
                    "leaving out {} of {}: its status is `{}`, not done",
                    p.name(),
                    self.dir.display(),
                    p.status
                ));
            }
            done
        })
    }
}

enum Input {
    Run(PathBuf),
    Sweep(Sweep),
}

/// The PATHs as runs and sweeps, each once however often it was given.
fn inputs(paths: &[PathBuf]) -> Result<Vec<Input>> {
    let mut seen = HashSet::new();
    let mut inputs = vec![];
    for path in paths {
        if !path.exists() {
            bail!(
                "{} does not exist; give run directories (written by `resmem train`) or sweep directories \
                 (written by `resmem sweep`)",
                path.display()
            );
        }
        if !seen.insert(path.canonicalize().unwrap_or_else(|_| path.clone())) {
            continue;
        }
        if path.join(SUMMARY_FILE).is_file() {
            inputs.push(Input::Sweep(Sweep::read(path)?));
        } else if path.join(CONFIG_FILE).is_file() {
            inputs.push(Input::Run(path.clone()));
        } else {
            bail!(
                "{} is neither a run directory (it has no {CONFIG_FILE}, which `resmem train` writes) nor a sweep \
                 directory (it has no {SUMMARY_FILE}, which `resmem sweep` writes)",
                path.display()
            );
        }
    }
    Ok(inputs)
}

fn dir_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_else(|| path.display().to_string())
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

/// One logged step of a run.
struct Row {
    /// Its line in metrics.jsonl, from 1.
    line: usize,
    step: u64,
    loss: Option<f64>,
    val_loss: Option<f64>,
    /// Wall seconds since the run first started, across resumes.
    time: Option<f64>,
}

struct Run {
    dir: PathBuf,
    cfg: RunConfig,
    rows: Vec<Row>,
}

impl Run {
    fn read(dir: &Path) -> Result<Self> {
        let cfg = crate::train::read_config(&dir.join(CONFIG_FILE))?;
        let rows = read_metrics(dir)?;
        Ok(Self {
            dir: dir.to_path_buf(),
            cfg,
            rows,
        })
    }

    /// The x value of `row`, given the training FLOPs per token (for --x flops).
    fn x(&self, x: &XAxis, row: &Row, flops_per_token: f64) -> Option<f64> {
        let tokens = row.step as f64 * (self.cfg.train.batch * self.cfg.data.seq_len()) as f64;
        match x {
            XAxis::Step => Some(row.step as f64),
            XAxis::Tokens => Some(tokens),
            XAxis::Flops => Some(tokens * flops_per_token),
            XAxis::Time => row.time,
            XAxis::Setting(_) => None,
        }
    }
}

/// The rows of DIR/metrics.jsonl. A line that does not parse (a run killed mid-write) is
/// skipped with a warning. A resumed run's `elapsed_s` restarts from 0, so each restart adds
/// the previous segment's last value as an offset.
fn read_metrics(dir: &Path) -> Result<Vec<Row>> {
    let path = dir.join(METRICS_FILE);
    let text = match data::read_text(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => bail!(
            "{} has no {METRICS_FILE}: it has not logged a step; train it (`resmem train --resume {}`) or leave it out",
            dir.display(),
            dir.display()
        ),
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
    };
    let (mut offset, mut last) = (0.0, 0.0);
    let mut rows = vec![];
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let row = serde_json::from_str::<Value>(line).ok();
        let Some((row, step)) = row.and_then(|r| r["step"].as_u64().map(|s| (r, s))) else {
            warn(&format!(
                "skipping line {} of {}: not a metrics row",
                i + 1,
                path.display()
            ));
            continue;
        };
        let time = row["elapsed_s"].as_f64().map(|e| {
            if e < last {
                offset += last;
            }
            last = e;
            offset + e
        });
        rows.push(Row {
            line: i + 1,
            step,
            loss: row["loss"].as_f64(),
            val_loss: row["val_loss"].as_f64(),
            time,
        });
    }
    if rows.is_empty() {
        bail!(
            "{} has no metrics rows yet: train it (`resmem train --resume {}`) or leave it out",
            path.display(),
            dir.display()
        );
    }
    Ok(rows)
}

/// Training FLOPs per token: 3× the forward (forward, and a backward of twice its cost), the
/// forward counted at the run's window length T.
fn train_flops_per_token(cfg: &RunConfig) -> Result<f64> {
    let t = cfg.data.seq_len();
    let mut model = cfg.model.clone();
    model.set_context(t);
    let counts = models::count::try_model(&model)?;
    Ok(3.0 * counts.flops_per_token(t))
}

struct Series {
    label: String,
    points: Vec<(f64, f64)>,
}

struct Curves {
    title: Option<String>,
    x_desc: String,
    y_desc: String,
    series: Vec<Series>,
    /// Draw a dot at each point: validation losses are few and far apart.
    markers: bool,
    x_span: (f64, f64),
    y_span: (f64, f64),
}

fn curves(inputs: &[Input], x: &XAxis, y: YAxis, title: Option<String>) -> Result<Curves> {
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
                YAxis::ValLoss => row.val_loss,
                _ => row.loss,
            };
            let Some(value) = value else { continue };
            let Some(at) = run.x(x, row, fpt) else {
                bail!(
                    "{} has a row without elapsed_s (step {}), so --x time cannot place it; plot it with --x step",
                    run.dir.join(METRICS_FILE).display(),
                    row.step
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
            _ => "training loss".into(),
        },
        markers: y == YAxis::ValLoss,
        series,
        x_span,
        y_span,
    })
}

/// A run's config as `path=value` pairs, floats in their shortest form.
fn flatten(cfg: &RunConfig) -> Result<Vec<(String, String)>> {
    fn walk(prefix: &str, value: &toml::Value, out: &mut Vec<(String, String)>) {
        match value {
            toml::Value::Table(t) => {
                for (k, v) in t {
                    let path = if prefix.is_empty() {
                        k.clone()
                    } else {
                        format!("{prefix}.{k}")
                    };
                    walk(&path, v, out);
                }
            }
            toml::Value::String(s) => out.push((prefix.to_string(), s.clone())),
            other => out.push((prefix.to_string(), other.to_string())),
        }
    }
    let table: toml::Table = toml::from_str(&cfg.to_toml()?)?;
    let mut out = vec![];
    walk("", &toml::Value::Table(table), &mut out);
    Ok(out)
}

/// Each run's legend: the settings whose values differ across the runs, by their last path
/// segment (`d_k=4 seed=0`, `arch=rmt`), or the directory names when none differ. A run
/// without a setting (another architecture's) shows the others.
fn legend_labels(runs: &[Run]) -> Result<Vec<String>> {
    let flat = runs.iter().map(|r| flatten(&r.cfg)).collect::<Result<Vec<_>>>()?;
    let value = |i: usize, key: &str| flat[i].iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str());
    let mut keys: Vec<&str> = vec![];
    for (k, _) in flat.iter().flatten() {
        if !keys.contains(&k.as_str()) {
            keys.push(k);
        }
    }
    let arch = |i: usize| value(i, "model.arch");
    // A model setting that only changes with the architecture (an RMT's d_k beside a
    // transformer's d_model) says nothing the arch does not.
    let by_arch = |k: &str| {
        k.starts_with("model.")
            && (0..runs.len()).all(|i| (0..runs.len()).all(|j| arch(i) != arch(j) || value(i, k) == value(j, k)))
    };
    let mut differ: Vec<&str> = keys
        .into_iter()
        .filter(|k| (1..runs.len()).any(|i| value(i, k) != value(0, k)))
        .filter(|k| *k == "model.arch" || !by_arch(k))
        .collect();
    // The architecture first: it explains most of what else differs.
    differ.sort_by_key(|k| *k != "model.arch");
    let last = |k: &str| k.rsplit('.').next().unwrap_or(k).to_string();
    let short = |k: &str| {
        let clash = differ.iter().any(|o| *o != k && last(o) == last(k));
        if clash {
            k.to_string()
        } else {
            last(k)
        }
    };
    let names = unique_names(runs);
    let labels: Vec<String> = (0..runs.len())
        .map(|i| {
            let parts: Vec<String> = differ
                .iter()
                .filter_map(|k| value(i, k).map(|v| format!("{}={v}", short(k))))
                .collect();
            if parts.is_empty() {
                names[i].clone()
            } else {
                parts.join(" ")
            }
        })
        .collect();
    // Runs with the same config in different directories: the directory tells them apart.
    Ok(labels
        .iter()
        .enumerate()
        .map(|(i, l)| match labels.iter().filter(|o| *o == l).count() {
            1 => l.clone(),
            _ if *l == names[i] => l.clone(),
            _ => format!("{l} ({})", names[i]),
        })
        .collect())
}

/// The runs' directory names, or their whole paths where two names are the same.
fn unique_names(runs: &[Run]) -> Vec<String> {
    let names: Vec<String> = runs.iter().map(|r| dir_name(&r.dir)).collect();
    names
        .iter()
        .zip(runs)
        .map(|(n, r)| match names.iter().filter(|o| *o == n).count() {
            1 => n.clone(),
            _ => r.dir.display().to_string(),
        })
        .collect()
}

/// One group's metrics at one value: (its position, the value as text, the seeds' metrics).
type Cell = (f64, String, Vec<f64>);

/// The points of one line of a setting plot at one x: the seeds' final losses.
struct Stat {
    /// Where it sits on the axis: the value (its log2 on a log axis), or a category's index.
    at: f64,
    label: String,
    n: usize,
    mean: f64,
    min: f64,
    max: f64,
}

struct Group {
    label: String,
    stats: Vec<Stat>,
}

struct SettingPlot {
    title: Option<String>,
    setting: String,
    y_desc: String,
    log2: bool,
    /// The values are labels, placed in order of appearance.
    categorical: bool,
    /// Tick positions and their labels: the setting's values.
    ticks: Vec<(f64, String)>,
    groups: Vec<Group>,
}

impl SettingPlot {
    /// One row per (group, value): seeds, mean, min, max.
    fn table(&self) -> String {
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

/// Each sweep's final (or best) validation losses against `setting`, one line per group of
/// the other settings but the seed. `runs` are the PATHs that are runs: an error here.
fn setting_plot(
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
        YAxis::Loss => bail!(
            "a sweep's summary has no final training loss; plot --y val_loss (its final validation loss) or \
             --y best_val_loss against --x {setting}, or the training curves with --x step"
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
            _ => "final validation loss".into(),
        },
        log2,
        categorical: !numeric,
        ticks,
        groups,
    })
}

/// The smallest and largest of `values` ((0, 0) when there are none).
fn span(values: impl Iterator<Item = f64>) -> (f64, f64) {
    let (lo, hi) = values.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| (lo.min(v), hi.max(v)));
    if lo > hi {
        (0.0, 0.0)
    } else {
        (lo, hi)
    }
}

/// The axis of values from `lo` to `hi`: widened by `frac` of its width on each side, or, when
/// it is narrower than a millionth of its values (a single point), by half their size (at least
/// 0.5). For any finite values the axis and its width are finite and the width is many floats
/// wide: plotters' search for round ticks never ends otherwise.
fn padded((lo, hi): (f64, f64), frac: f64) -> (f64, f64) {
    // Values beyond a quarter of f64's range are drawn off the axis.
    const LIMIT: f64 = f64::MAX / 4.0;
    let (lo, hi) = (lo.clamp(-LIMIT, LIMIT), hi.clamp(-LIMIT, LIMIT));
    let size = lo.abs().max(hi.abs());
    let pad = if hi - lo > size * 1e-6 {
        (hi - lo) * frac
    } else {
        size.max(1.0) * 0.5
    };
    (lo - pad, hi + pad)
}

/// A number for a message: integers whole, others with up to 4 significant digits.
fn plain(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{v:.0}")
    } else {
        format!("{v:.4e}")
            .parse::<f64>()
            .map(|r| r.to_string())
            .unwrap_or_else(|_| v.to_string())
    }
}

/// An axis label: 1.5k, 3M, 1.2G for large numbers, up to 3 decimals for small ones.
fn compact(v: f64) -> String {
    let trim = |s: String| {
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            s
        }
    };
    for (scale, suffix) in [
        (1e18, "E"),
        (1e15, "P"),
        (1e12, "T"),
        (1e9, "G"),
        (1e6, "M"),
        (1e3, "k"),
    ] {
        if v.abs() >= scale {
            return format!("{}{suffix}", trim(format!("{:.2}", v / scale)));
        }
    }
    trim(format!("{v:.3}"))
}

/// Tick labels of a loss axis with enough decimals to tell its ticks apart.
fn decimals((lo, hi): (f64, f64)) -> usize {
    let step = ((hi - lo) / 8.0).max(1e-9);
    (-step.log10()).ceil().clamp(1.0, 6.0) as usize
}

/// Distinct colours: Tableau 10, then plotters' palette.
fn colour(i: usize) -> RGBColor {
    const TAB10: [(u8, u8, u8); 10] = [
        (31, 119, 180),
        (255, 127, 14),
        (44, 160, 44),
        (214, 39, 40),
        (148, 103, 189),
        (140, 86, 75),
        (227, 119, 194),
        (127, 127, 127),
        (188, 189, 34),
        (23, 190, 207),
    ];
    match TAB10.get(i) {
        Some(&(r, g, b)) => RGBColor(r, g, b),
        None => {
            let c = Palette99::pick(i - TAB10.len()).to_rgba();
            RGBColor(c.0, c.1, c.2)
        }
    }
}

enum Figure {
    Curves(Curves),
    Setting(SettingPlot),
    Intervals(IntervalPlot),
}

/// Plotters' errors as anyhow's, with what was being done.
fn drawn<T, E: std::fmt::Display>(r: std::result::Result<T, E>) -> Result<T> {
    r.map_err(|e| anyhow!("cannot draw the figure: {e}"))
}

fn write(figure: &Figure, out: &Path, format: Format) -> Result<()> {
    // Text is measured and drawn with this font whatever the backend, so no system font is read.
    plotters::style::register_font("sans-serif", FontStyle::Normal, dejavu::sans::regular())
        .map_err(|_| anyhow!("cannot load the embedded DejaVu Sans font"))?;
    if let Some(parent) = out.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).with_context(|| format!("cannot create {}", parent.display()))?;
    }
    let written = |e: String| anyhow!("cannot write {}: {e}", out.display());
    match format {
        Format::Svg => {
            let root = SVGBackend::new(out, SIZE).into_drawing_area();
            figure.draw(&root)?;
            root.present().map_err(|e| written(e.to_string()))
        }
        Format::Png => {
            let root = BitMapBackend::new(out, SIZE).into_drawing_area();
            figure.draw(&root)?;
            root.present().map_err(|e| written(e.to_string()))
        }
    }
}

impl Figure {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<()> {
        drawn(root.fill(&WHITE))?;
        match self {
            Figure::Curves(c) => draw_curves(root, c),
            Figure::Setting(s) => draw_setting(root, s),
            Figure::Intervals(p) => draw_intervals(root, p),
        }
    }
}

/// The corner of the plot that the lines (sampled along each segment) cross least, the upper
/// right on a tie: where the legend hides the least.
fn legend_corner<'a>(
    lines: impl Iterator<Item = &'a [(f64, f64)]>,
    (x0, x1): (f64, f64),
    (y0, y1): (f64, f64),
) -> SeriesLabelPosition {
    // (position, x range, y range) of each corner, as fractions of the plot.
    let corners = [
        (SeriesLabelPosition::UpperRight, (0.5, 1.0), (0.6, 1.0)),
        (SeriesLabelPosition::LowerLeft, (0.0, 0.5), (0.0, 0.4)),
        (SeriesLabelPosition::UpperLeft, (0.0, 0.5), (0.6, 1.0)),
        (SeriesLabelPosition::LowerRight, (0.5, 1.0), (0.0, 0.4)),
    ];
    let mut hits = [0usize; 4];
    let norm = |(x, y): (f64, f64)| ((x - x0) / (x1 - x0), (y - y0) / (y1 - y0));
    for line in lines {
        let samples = line.windows(2).flat_map(|w| {
            let (a, b) = (norm(w[0]), norm(w[1]));
            (0..=16).map(move |k| {
                let t = f64::from(k) / 16.0;
                (a.0 + (b.0 - a.0) * t, a.1 + (b.1 - a.1) * t)
            })
        });
        for (x, y) in samples.chain(line.iter().map(|&p| norm(p))) {
            for (n, (_, xs, ys)) in hits.iter_mut().zip(&corners) {
                if (xs.0..=xs.1).contains(&x) && (ys.0..=ys.1).contains(&y) {
                    *n += 1;
                }
            }
        }
    }
    let best = (0..corners.len()).min_by_key(|&i| hits[i]).unwrap_or(0);
    corners
        .into_iter()
        .nth(best)
        .map_or(SeriesLabelPosition::UpperRight, |c| c.0)
}

/// A linear axis whose ticks are given values (a setting's), not round numbers.
struct TickedAxis {
    range: RangedCoordf64,
    ticks: Vec<f64>,
}

impl Ranged for TickedAxis {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        self.range.map(value, limit)
    }

    fn key_points<Hint: KeyPointHint>(&self, hint: Hint) -> Vec<f64> {
        // No fine grid between the values: it would suggest values that were not run.
        match hint.weight().allow_light_points() {
            true => vec![],
            false => self.ticks.clone(),
        }
    }

    fn range(&self) -> Range<f64> {
        self.range.range()
    }
}

fn chart_builder<'a, 'b, DB: DrawingBackend>(
    root: &'a DrawingArea<DB, Shift>,
    title: &Option<String>,
) -> ChartBuilder<'a, 'b, DB> {
    let mut chart = ChartBuilder::on(root);
    chart.margin(20).x_label_area_size(55).y_label_area_size(80);
    if let Some(t) = title {
        chart.caption(t, ("sans-serif", 24));
    }
    chart
}

fn draw_curves<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, c: &Curves) -> Result<()> {
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

fn draw_setting<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, s: &SettingPlot) -> Result<()> {
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
    let mut chart = drawn(chart_builder(root, &s.title).build_cartesian_2d(
        TickedAxis {
            range: (x0..x1).into(),
            ticks: keys,
        },
        y0..y1,
    ))?;
    let tick = |v: &f64| {
        s.ticks
            .iter()
            .find(|t| (t.0 - v).abs() < 1e-9)
            .map(|t| t.1.clone())
            .unwrap_or_default()
    };
    let x_desc = match s.log2 {
        true => format!("{} (log scale)", s.setting),
        false => s.setting.clone(),
    };
    drawn(
        chart
            .configure_mesh()
            .x_desc(x_desc)
            .y_desc(s.y_desc.as_str())
            .x_label_formatter(&tick)
            .y_label_formatter(&|v| format!("{v:.digits$}"))
            .label_style(("sans-serif", 15))
            .axis_desc_style(("sans-serif", 16))
            .draw(),
    )?;
    // The legend must not hide a bar: its ends count as points of the lines.
    let lines: Vec<Vec<(f64, f64)>> = s
        .groups
        .iter()
        .map(|g| {
            g.stats
                .iter()
                .flat_map(|p| [(p.at, p.min), (p.at, p.mean), (p.at, p.max)])
                .collect()
        })
        .collect();
    for (i, g) in s.groups.iter().enumerate() {
        let colour = colour(i);
        let style = colour.stroke_width(2);
        drawn(chart.draw_series(LineSeries::new(g.stats.iter().map(|p| (p.at, p.mean)), style)))?
            .label(g.label.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
        drawn(
            chart.draw_series(
                g.stats
                    .iter()
                    .map(|p| ErrorBar::new_vertical(p.at, p.min, p.mean, p.max, style, 10)),
            ),
        )?;
        drawn(chart.draw_series(g.stats.iter().map(|p| Circle::new((p.at, p.mean), 4, colour.filled()))))?;
    }
    // One line needs no legend: the title names it.
    if s.groups.len() < 2 {
        return Ok(());
    }
    drawn(
        chart
            .configure_series_labels()
            .position(legend_corner(lines.iter().map(Vec::as_slice), (x0, x1), (y0, y1)))
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .label_font(("sans-serif", 15))
            .draw(),
    )
}

/// One declared comparison's interval of a − b.
struct IntervalRow {
    label: String,
    estimate: f64,
    low: f64,
    high: f64,
    per_seed: Vec<f64>,
    verdict: String,
}

struct IntervalPlot {
    title: Option<String>,
    rows: Vec<IntervalRow>,
}

/// The sweeps' declared comparisons of the final validation loss, read from their summaries.
fn interval_plot(sweeps: &[&Sweep], y: YAxis, title: Option<String>) -> Result<IntervalPlot> {
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
fn draw_intervals<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, p: &IntervalPlot) -> Result<()> {
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
