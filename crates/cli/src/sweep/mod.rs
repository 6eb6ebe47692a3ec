//! `resmem sweep`: a grid of `resmem train` runs, one directory per point, trained one after
//! another; finished points are skipped and unfinished ones resumed, so re-running the same
//! command continues a sweep. Writes summary.csv and summary.json after every point.
//!
//! A point's settings are `resmem train` flags by name (`d_k` or `d-k`), so a sweep can vary
//! anything a run can set. They come, later winning, from an experiment file's `[flags]`, its
//! `[quick.flags]` under `--quick`, the command line, the variant, the grid and the seed.

mod compare;
mod matching;
mod tune;

use crate::args::{SweepArgs, TrainArgs};
use crate::console::{say, warn};
use crate::run_dir::{CONFIG_FILE, METRICS_FILE, MODEL_FILE};
use crate::train;
use anyhow::{anyhow, bail, Context, Result};
use clap::parser::ValueSource;
use clap::{ArgMatches, CommandFactory, Parser};
use models::probes::{Layer, Measured, Op};
use models::variance::{self, InitScheme};
use models::RunConfig;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::path::Path;

pub const SUMMARY_JSON: &str = "summary.json";
pub const SUMMARY_CSV: &str = "summary.csv";
pub const COMPARISONS_CSV: &str = "comparisons.csv";
const SWEEP_LOCK: &str = ".resmem-sweep.lock";

/// `resmem train`'s flags alone, to read a point's flags exactly as `resmem train` would.
#[derive(Parser)]
#[command(name = "resmem train")]
struct TrainCli {
    #[command(flatten)]
    args: TrainArgs,
}

/// An experiment file (experiments/*.toml).
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct Experiment {
    /// What it reproduces, printed and kept in the summary.
    title: Option<String>,
    /// `resmem train` flags every point shares.
    #[serde(default)]
    flags: toml::Table,
    /// Swept settings: every combination of their values.
    #[serde(default)]
    grid: toml::Table,
    /// Alternatives crossed with the grid: each a `label` and its flags.
    #[serde(default)]
    variants: Vec<toml::Table>,
    #[serde(default)]
    seeds: Vec<u64>,
    /// Variants the others are compared with at equal loss (RMT paper Table 3's form): one
    /// label, or a list of them.
    #[serde(default)]
    reference: References,
    /// Measure every point's variance ratios at init and after training (RMT paper Tables 1-2).
    #[serde(default)]
    variance: bool,
    /// Comparisons declared before the runs: arm a against arm b, paired by seed.
    #[serde(default)]
    compare: Vec<compare::Declared>,
    /// Sizes solved before the runs so that points cost what a reference point costs.
    #[serde(default, rename = "match")]
    matches: Vec<matching::Declared>,
    /// Each arm's settings chosen on tuning seeds before the runs.
    tune: Option<tune::Declared>,
    /// `--quick`: its flags are added, and its grid, variants and seeds replace the full ones.
    quick: Option<Box<Experiment>>,
}

/// `resmem train` flags by long name, with their values, in order.
type Flags = Vec<(String, String)>;

/// `reference = "a"` or `reference = ["a", "b"]`.
#[derive(Deserialize, Default)]
#[serde(untagged)]
enum References {
    #[default]
    None,
    One(String),
    Many(Vec<String>),
}

impl References {
    fn labels(&self) -> Vec<String> {
        match self {
            References::None => vec![],
            References::One(r) => vec![r.clone()],
            References::Many(r) => r.clone(),
        }
    }
}

/// One run of the sweep.
#[derive(Clone, Debug)]
struct Point {
    /// What sets it apart, in order: variant, grid settings, seed.
    settings: Vec<(String, String)>,
    /// Every flag of its `resmem train`.
    flags: Flags,
}

impl Point {
    /// Its directory name: `d_k=4,seed=0`.
    fn dir_name(&self) -> String {
        let name: Vec<String> = self.settings.iter().map(|(k, v)| format!("{k}={v}")).collect();
        name.join(",").replace(['/', '\\', ' '], "_")
    }

    fn label(&self) -> String {
        let name: Vec<String> = self.settings.iter().map(|(k, v)| format!("{k}={v}")).collect();
        name.join(" ")
    }

    /// Whether the arm `arm` selects it: a variant's label (`rmt`) or settings (`d_k=16`,
    /// `variant=rmt lr=0.01`), all of which it has.
    fn in_arm(&self, arm: &str) -> bool {
        let want: Vec<(String, String)> = arm
            .split_whitespace()
            .map(|part| match part.split_once('=') {
                Some((k, v)) => (setting_name(k), v.to_string()),
                None => ("variant".to_string(), part.to_string()),
            })
            .collect();
        !want.is_empty() && want.iter().all(|w| self.settings.contains(w))
    }

    /// Its label without the seed: the arm a comparison may select.
    fn arm_label(&self) -> String {
        let name: Vec<String> = self
            .settings
            .iter()
            .filter(|(k, _)| k != "seed")
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        name.join(" ")
    }
}

/// A point's line of summary.json.
#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct PointSummary {
    /// Its run directory, relative to the sweep's.
    pub dir: String,
    pub label: String,
    /// The swept settings, the variant and the seed: numbers where they read as one.
    pub settings: serde_json::Map<String, Value>,
    /// `done`, or why not.
    pub status: String,
    pub arch: Option<String>,
    pub params: Option<u64>,
    /// Forward FLOPs per token as built, at T (2 per multiply-add; `count::try_model`).
    pub flops_per_token: Option<f64>,
    /// Training tokens seen: steps × batch × T.
    pub tokens: Option<u64>,
    pub final_loss: Option<f64>,
    pub final_val_loss: Option<f64>,
    pub best_val_loss: Option<f64>,
    /// Wall seconds of training, summed over resumed segments.
    pub wall_s: Option<f64>,
    pub tokens_per_s: Option<f64>,
    /// With `variance = true`: the ratios at init and after training.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variance: Option<PointVariance>,
    /// For a MemoryFormer or hybrid: how evenly its hash tables' buckets are used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub buckets: Option<BucketUse>,
    /// The sizes a `[[match]]` solved for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub matched: Option<matching::Matched>,
    /// The point its costs are relative to, and its parameters and FLOPs per token over that
    /// point's: how fixed a fixed-cost sweep really is.
    #[serde(default)]
    pub cost_reference: Option<String>,
    #[serde(default)]
    pub params_vs_reference: Option<f64>,
    #[serde(default)]
    pub flops_vs_reference: Option<f64>,
}

/// `resmem analyze buckets` of a trained point, in brief.
#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct BucketUse {
    /// Held-out batches counted, of `rows` tokens each.
    pub batches: usize,
    pub rows: usize,
    pub tables: usize,
    /// Normalised entropy of each table's bucket use (1: every bucket alike): mean and lowest.
    pub entropy_mean: f64,
    pub entropy_min: f64,
    /// The share of all buckets that no counted token hit.
    pub dead_fraction: f64,
    /// Counted hits per bucket that was hit, mean over those buckets.
    pub hits_per_live_bucket: f64,
    /// The run's training tokens over a table's buckets, averaged over tables: the hits each
    /// row would have had in training, were the buckets used alike.
    pub train_hits_per_bucket_if_even: f64,
}

/// Held-out batches a sweep counts bucket use over.
const BUCKET_BATCHES: usize = 4;

fn bucket_use(dir: &Path, backend: crate::args::BackendKind, tokens: Option<u64>) -> Result<BucketUse> {
    let (stats, rows) =
        crate::with_backend!(backend, be => crate::buckets::measure_run(be, dir, None, BUCKET_BATCHES, backend))?;
    let n = stats.len().max(1) as f64;
    let buckets: usize = stats.iter().map(|s| s.counts.len()).sum();
    let dead: usize = stats.iter().map(|s| s.dead_buckets).sum();
    let hits: u64 = stats.iter().flat_map(|s| s.counts.iter()).sum();
    let even = stats
        .iter()
        .map(|s| tokens.unwrap_or(0) as f64 / s.counts.len().max(1) as f64)
        .sum::<f64>()
        / n;
    Ok(BucketUse {
        batches: BUCKET_BATCHES,
        rows,
        tables: stats.len(),
        entropy_mean: stats.iter().map(|s| s.entropy).sum::<f64>() / n,
        entropy_min: stats.iter().map(|s| s.entropy).fold(f64::INFINITY, f64::min),
        dead_fraction: dead as f64 / buckets.max(1) as f64,
        hits_per_live_bucket: hits as f64 / (buckets - dead).max(1) as f64,
        train_hits_per_bucket_if_even: even,
    })
}

#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct PointVariance {
    pub init: Vec<Measured>,
    pub trained: Vec<Measured>,
}

#[derive(Serialize, Deserialize, Debug)]
pub struct Summary {
    pub experiment: Option<String>,
    /// Settings that vary between points, the seed left out.
    pub swept: Vec<String>,
    pub points: Vec<PointSummary>,
    /// With `variance = true`: per variant and site, the closed form and the measured ratios.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub variance: Vec<VarianceRow>,
    /// With a `reference` variant: each other variant at the reference's final loss.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub equal_loss: Vec<EqualLoss>,
    /// The experiment's `[[compare]]`: paired intervals and verdicts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub comparisons: Vec<compare::Comparison>,
    /// The experiment's `[tune]`: every arm's grid on the tuning seeds, and its choice.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tuning: Vec<tune::Tuned>,
}

/// One site kind of one variant: the closed form at init, and the geometric means of the
/// measured ratios over its blocks and seeds (ratios multiply, so their logs are averaged).
#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct VarianceRow {
    pub variant: String,
    pub layer: Layer,
    pub op: Op,
    pub closed_forward: f64,
    pub closed_backward: f64,
    pub init_forward: Option<f64>,
    pub init_backward: Option<f64>,
    pub trained_forward: Option<f64>,
    pub trained_backward: Option<f64>,
}

/// RMT paper Table 3's form: what a variant spends to reach the reference's final validation
/// loss. Losses are means over seeds, at each evaluation.
#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct EqualLoss {
    pub variant: String,
    pub reference: String,
    /// The reference's final validation loss.
    pub target_val_loss: f64,
    pub final_val_loss: f64,
    /// Training tokens and FLOPs (3× forward) at which the variant's loss first reaches the
    /// target, interpolated linearly between evaluations; None when it never does.
    pub tokens: Option<f64>,
    pub flops: Option<f64>,
    pub reference_tokens: f64,
    pub reference_flops: f64,
    pub params: u64,
    pub reference_params: u64,
    /// 1 − variant / reference.
    pub tokens_saving: Option<f64>,
    pub flops_saving: Option<f64>,
    pub params_saving: f64,
}

pub fn run(args: SweepArgs, matches: &ArgMatches) -> Result<()> {
    let mut experiment = match &args.experiment {
        Some(path) => read_experiment(path)?,
        None if args.quick => bail!("--quick runs an experiment file's quick variant; give the file too"),
        None => Experiment::default(),
    };
    if args.quick {
        let quick = experiment
            .quick
            .take()
            .ok_or_else(|| anyhow!("the experiment has no [quick] table for --quick"))?;
        experiment.flags.extend(quick.flags);
        if !quick.grid.is_empty() {
            experiment.grid = quick.grid;
        }
        if !quick.variants.is_empty() {
            experiment.variants = quick.variants;
        }
        if !quick.seeds.is_empty() {
            experiment.seeds = quick.seeds;
        }
        // --quick tunes only with its own [quick.tune].
        experiment.tune = quick.tune;
    }
    let out = args
        .train
        .out
        .clone()
        .ok_or_else(|| anyhow!("--out DIR is required: the sweep's directory"))?;
    if args.train.resume.is_some() {
        bail!("a sweep resumes by itself: run the same `resmem sweep` command again");
    }
    let (base, given) = base_flags(&experiment, matches)?;
    let grid = grid(&experiment, &args.set, &given)?;
    let variants = variants(&experiment.variants)?;
    for r in experiment.reference.labels() {
        if !variants.iter().any(|(label, _)| *label == r) {
            bail!("the reference `{r}` is not the label of one of the experiment's [[variants]]");
        }
        if !grid.is_empty() {
            bail!("a reference compares variants at equal loss; give it a sweep without a [grid]");
        }
    }
    let seeds = match (args.seeds.is_empty(), experiment.seeds.is_empty()) {
        (false, _) => args.seeds.clone(),
        (true, false) => experiment.seeds.clone(),
        (true, true) => vec![],
    };
    let mut points = expand(&base, &variants, &grid, &seeds);
    let swept_names: Vec<String> = grid.iter().map(|(k, _)| k.clone()).collect();
    let matched = matching::apply(&experiment.matches, &mut points, &out, &swept_names)?;
    if let Some(t) = &experiment.tune {
        tune::check(t, &swept_names, &seeds, &variants)?;
    }
    // Refuse a bad point before training any: each resolves as `resmem train` would.
    for p in &points {
        resolved(p, &out).with_context(|| format!("in the sweep's point {}", p.label()))?;
    }
    // And a comparison that cannot pair its arms. --quick runs one seed, too few for an interval.
    let compare_now = !(args.quick && seeds.len() < 2);
    if compare_now {
        for c in &experiment.compare {
            compare::pair(c, &points)?;
        }
    }
    let mut swept: Vec<String> = variants.iter().take(1).map(|_| "variant".to_string()).collect();
    swept.extend(grid.iter().map(|(k, _)| k.clone()));
    std::fs::create_dir_all(&out).with_context(|| format!("cannot create the sweep directory {}", out.display()))?;
    // One sweep at a time writes a directory's summary: a second would see the first's running
    // points as locked, and report them failed.
    let _lock = crate::run_dir::lock_file(&out.join(SWEEP_LOCK), || {
        format!(
            "another resmem sweep is running in {}; wait for it to finish, or give this one another --out",
            out.display()
        )
    })?;
    if let Some(title) = &experiment.title {
        say(title);
    }
    say(&format!("{} points into {}", points.len(), out.display()));
    let mut summary = Summary {
        experiment: experiment.title.clone(),
        swept,
        points: vec![],
        variance: vec![],
        equal_loss: vec![],
        comparisons: vec![],
        tuning: vec![],
    };
    let stop = train::stop_flag()?;
    if let Some(t) = &experiment.tune {
        summary.tuning = tune::run(t, &mut points, &out, &swept_names, &seeds, &stop)?;
        write_summary(&out, &summary)?;
    }
    let mut failed = vec![];
    for (i, p) in points.iter().enumerate() {
        let dir = out.join(p.dir_name());
        let status = match train_point(p, &dir, &out, &format!("[{}/{}]", i + 1, points.len()), &stop) {
            Ok(status) => status,
            Err(e) => {
                write_summary(&out, &summary)?;
                return Err(e);
            }
        };
        if status != "done" {
            failed.push(p.label());
        }
        let mut point = summarize(p, &dir, status)?;
        point.matched = matched[i].clone();
        let hashed = point
            .arch
            .as_deref()
            .is_some_and(|a| a == "memoryformer" || a == "hybrid");
        if hashed && point.status == "done" {
            point.buckets = Some(bucket_use(&dir, backend_of(&p.flags), point.tokens)?);
        }
        if experiment.variance && point.status == "done" {
            let measure = |at_init| crate::analyze::measure_run(&dir, backend_of(&p.flags), None, at_init);
            point.variance = Some(PointVariance {
                init: measure(true)?.2,
                trained: measure(false)?.2,
            });
        }
        summary.points.push(point);
        write_summary(&out, &summary)?;
    }
    // Everything is computed and written before anything is printed.
    let references = experiment.reference.labels();
    matching::relative_costs(&mut summary.points, &points, references.first().map(String::as_str));
    write_summary(&out, &summary)?;
    if failed.is_empty() {
        if experiment.variance {
            summary.variance = variance_rows(&out, &summary)?;
        }
        for reference in experiment.reference.labels() {
            let rows = equal_loss(&out, &summary, &reference)?;
            summary.equal_loss.extend(rows);
        }
        if compare_now {
            for c in &experiment.compare {
                summary
                    .comparisons
                    .push(compare::compute(c, &out, &points, &summary.points)?);
            }
        }
        write_summary(&out, &summary)?;
    }
    if let Some(t) = &experiment.tune {
        tune::print(&summary.tuning, &t.seeds);
    }
    print_table(&summary);
    print_variance(&summary.variance);
    for reference in experiment.reference.labels() {
        let rows: Vec<EqualLoss> = summary
            .equal_loss
            .iter()
            .filter(|r| r.reference == reference)
            .cloned()
            .collect();
        print_equal_loss(&rows);
    }
    compare::print(&summary.comparisons);
    if !compare_now && !experiment.compare.is_empty() {
        say("the declared comparisons need at least 2 seeds; --quick runs one, so they are left out");
    }
    say(&format!(
        "wrote {} and {}",
        out.join(SUMMARY_CSV).display(),
        out.join(SUMMARY_JSON).display()
    ));
    if !failed.is_empty() {
        bail!(
            "{} of {} points failed: {}; their errors are in {} (fix the cause and run the same command again)",
            failed.len(),
            points.len(),
            failed.join(", "),
            out.join(SUMMARY_JSON).display()
        );
    }
    Ok(())
}

/// Trains one point in `dir`, which is `out` joined with its directory name: skipped when
/// finished, resumed when not. Its status, "done" or
/// "failed: …"; Err when a signal stopped it, so that the sweep stops.
fn train_point(
    p: &Point,
    dir: &Path,
    out: &Path,
    progress: &str,
    stop: &std::sync::atomic::AtomicBool,
) -> Result<String> {
    let (train_args, cfg) = resolved(p, out)?;
    let state = state(dir, &cfg)?;
    if let State::Done = state {
        say(&format!("{progress} {}: done already", p.label()));
        return Ok("done".to_string());
    }
    say(&format!("{progress} {}", p.label()));
    let args = match state {
        State::Resume => resume_args(&train_args, dir)?,
        _ => train_args,
    };
    match train::run(args) {
        Ok(()) => Ok("done".to_string()),
        Err(e) if stop.load(std::sync::atomic::Ordering::SeqCst) => {
            Err(e.context("the sweep stopped; run the same command again to continue it"))
        }
        Err(e) => {
            warn(&format!("{}: {e:#}", p.label()));
            Ok(format!("failed: {e:#}"))
        }
    }
}

fn read_experiment(path: &Path) -> Result<Experiment> {
    let text = data::read_text(path).with_context(|| format!("cannot read the experiment {}", path.display()))?;
    toml::from_str(&text).with_context(|| {
        format!(
            "{} is not a valid experiment: it may have title, seeds, reference, variance, [flags], [grid], \
             [[variants]], [[compare]] (a, b, claim, metrics) and [quick]",
            path.display()
        )
    })
}

/// `d_k` and `--d-k` both name the flag `d-k`.
fn flag_name(name: &str) -> String {
    name.trim_start_matches("--").replace('_', "-")
}

/// A setting's name as the summary shows it: `d_k`.
fn setting_name(name: &str) -> String {
    flag_name(name).replace('-', "_")
}

/// The long names of `resmem train`'s flags.
fn train_flags() -> Vec<String> {
    TrainCli::command()
        .get_arguments()
        .filter_map(|a| a.get_long().map(str::to_string))
        .collect()
}

/// Checks that `name` is a flag a point may set; `what` says where it was given.
fn check_flag(name: &str, what: &str) -> Result<String> {
    let flag = flag_name(name);
    match flag.as_str() {
        "out" | "resume" | "list-presets" | "help" => bail!("{what} cannot set --{flag}: the sweep sets it"),
        "seed" => bail!("{what} cannot set the seed; give the seeds with --seeds 0,1,2 (or `seeds` in the file)"),
        _ => {}
    }
    let flags = train_flags();
    if !flags.contains(&flag) {
        let usable: Vec<&str> = flags
            .iter()
            .map(String::as_str)
            .filter(|f| !["out", "resume", "list-presets", "seed"].contains(f))
            .collect();
        bail!(
            "{what}: `{name}` is not a `resmem train` flag; use one of {}",
            usable.join(", ")
        );
    }
    Ok(flag)
}

/// A TOML value as a flag's text.
fn flag_value(v: &toml::Value) -> Result<String> {
    Ok(match v {
        toml::Value::String(s) => s.clone(),
        toml::Value::Integer(i) => i.to_string(),
        toml::Value::Float(f) => f.to_string(),
        toml::Value::Boolean(b) => b.to_string(),
        other => bail!("a flag's value must be a string, number or boolean, not {other}"),
    })
}

fn set(flags: &mut Vec<(String, String)>, flag: String, value: String) {
    match flags.iter_mut().find(|(f, _)| *f == flag) {
        Some(slot) => slot.1 = value,
        None => flags.push((flag, value)),
    }
}

/// The flags every point shares: the file's, then the command line's `resmem train` flags;
/// and the names of the latter.
fn base_flags(experiment: &Experiment, matches: &ArgMatches) -> Result<(Flags, Vec<String>)> {
    let (mut flags, mut given) = (vec![], vec![]);
    for (name, value) in &experiment.flags {
        set(
            &mut flags,
            check_flag(name, "the experiment's [flags]")?,
            flag_value(value)?,
        );
    }
    for arg in TrainCli::command().get_arguments() {
        let id = arg.get_id().as_str();
        let Some(long) = arg.get_long() else { continue };
        if long == "out" || matches.value_source(id) != Some(ValueSource::CommandLine) {
            continue;
        }
        let raw: Vec<String> = matches
            .get_raw(id)
            .into_iter()
            .flatten()
            .map(|v| v.to_string_lossy().into_owned())
            .collect();
        match raw.as_slice() {
            [value] => {
                given.push(check_flag(long, "the command line")?);
                set(&mut flags, long.to_string(), value.clone());
            }
            _ => bail!("--{long} takes no part in a sweep"),
        }
    }
    Ok((flags, given))
}

/// The swept settings: `--set NAME=V1,V2` or the file's `[grid]`, with their values.
fn grid(experiment: &Experiment, sets: &[String], given: &[String]) -> Result<Vec<(String, Vec<String>)>> {
    let mut grid = vec![];
    for (name, values) in &experiment.grid {
        let toml::Value::Array(values) = values else {
            bail!("[grid] {name} must be a list of values, e.g. {name} = [4, 8, 16]");
        };
        let values = values.iter().map(flag_value).collect::<Result<Vec<_>>>()?;
        grid.push((check_flag(name, "the experiment's [grid]")?, values));
    }
    let mut from_sets = vec![];
    for s in sets {
        let (name, values) = s
            .split_once('=')
            .ok_or_else(|| anyhow!("--set {s}: write NAME=V1,V2,…, e.g. --set d_k=4,8,16"))?;
        let flag = check_flag(name, &format!("--set {s}"))?;
        let values: Vec<String> = values.split(',').map(str::trim).map(str::to_string).collect();
        if values.iter().any(String::is_empty) {
            bail!("--set {s} has an empty value");
        }
        if from_sets.contains(&flag) {
            bail!("--set {name} is given twice; give all its values once, e.g. --set {name}=4,8");
        }
        from_sets.push(flag.clone());
        // The command line's values replace the file's.
        grid.retain(|(f, _)| *f != flag);
        grid.push((flag, values));
    }
    if let Some((flag, _)) = grid.iter().find(|(f, _)| given.contains(f)) {
        bail!("--{flag} is both swept and given as a flag; drop one of them");
    }
    Ok(grid.into_iter().map(|(f, v)| (setting_name(&f), v)).collect())
}

/// Each variant's label and flags.
fn variants(tables: &[toml::Table]) -> Result<Vec<(String, Flags)>> {
    let mut out = vec![];
    for t in tables {
        let label = match t.get("label") {
            Some(toml::Value::String(s)) => s.clone(),
            _ => bail!("every [[variants]] needs a label = \"…\""),
        };
        if out.iter().any(|(l, _)| *l == label) {
            bail!("two variants are labelled `{label}`");
        }
        let mut flags = vec![];
        for (name, value) in t.iter().filter(|(k, _)| *k != "label") {
            set(
                &mut flags,
                check_flag(name, &format!("the variant `{label}`"))?,
                flag_value(value)?,
            );
        }
        out.push((label, flags));
    }
    Ok(out)
}

/// Every combination: variants × grid × seeds, in that nesting.
fn expand(
    base: &[(String, String)],
    variants: &[(String, Flags)],
    grid: &[(String, Vec<String>)],
    seeds: &[u64],
) -> Vec<Point> {
    let mut points = vec![Point {
        settings: vec![],
        flags: base.to_vec(),
    }];
    if !variants.is_empty() {
        points = points
            .iter()
            .flat_map(|p| {
                variants.iter().map(move |(label, flags)| {
                    let mut q = p.clone();
                    q.settings.push(("variant".into(), label.clone()));
                    for (f, v) in flags {
                        set(&mut q.flags, f.clone(), v.clone());
                    }
                    q
                })
            })
            .collect();
    }
    for (name, values) in grid {
        points = points
            .iter()
            .flat_map(|p| {
                values.iter().map(move |v| {
                    let mut q = p.clone();
                    q.settings.push((name.clone(), v.clone()));
                    set(&mut q.flags, flag_name(name), v.clone());
                    q
                })
            })
            .collect();
    }
    if !seeds.is_empty() {
        points = points
            .iter()
            .flat_map(|p| {
                seeds.iter().map(move |s| {
                    let mut q = p.clone();
                    q.settings.push(("seed".into(), s.to_string()));
                    set(&mut q.flags, "seed".into(), s.to_string());
                    q
                })
            })
            .collect();
    }
    points
}

/// The point's `resmem train` arguments and its config, resolved as `resmem train` would.
fn resolved(p: &Point, out: &Path) -> Result<(TrainArgs, RunConfig)> {
    let dir = out.join(p.dir_name());
    // The path stays an OsString: a directory whose name is not UTF-8 is still that directory.
    let mut argv: Vec<std::ffi::OsString> = vec!["resmem train".into()];
    for (f, v) in &p.flags {
        argv.push(format!("--{f}").into());
        argv.push(v.into());
    }
    argv.push("--out".into());
    argv.push(dir.into_os_string());
    // clap's first line says it all; its usage hint would name `resmem train`'s --help.
    let cli = TrainCli::try_parse_from(&argv).map_err(|e| {
        let text = e.to_string();
        anyhow!(
            "{}",
            text.lines().next().unwrap_or_default().trim_start_matches("error: ")
        )
    })?;
    let cfg = train::resolve(&cli.args)?;
    Ok((cli.args, cfg))
}

/// `args` turned into the resumption of the run in `dir` (only the backend carries over).
fn resume_args(args: &TrainArgs, dir: &Path) -> Result<TrainArgs> {
    let backend = match args.backend {
        crate::args::BackendKind::Cpu => "cpu",
        crate::args::BackendKind::Gpu => "gpu",
    };
    let argv: [std::ffi::OsString; 5] = [
        "resmem train".into(),
        "--resume".into(),
        dir.into(),
        "--backend".into(),
        backend.into(),
    ];
    Ok(TrainCli::try_parse_from(argv)?.args)
}

enum State {
    New,
    Resume,
    Done,
}

/// Where the point's run stands, refusing a directory that holds another config's run.
fn state(dir: &Path, cfg: &RunConfig) -> Result<State> {
    let config = dir.join(CONFIG_FILE);
    if !config.is_file() {
        return Ok(State::New);
    }
    let mut existing = train::read_config(&config)?;
    // V follows the data and is set when training starts.
    let mut wanted = cfg.clone();
    wanted.set_vocab(existing.vocab());
    existing.set_vocab(existing.vocab());
    if existing.to_toml()? != wanted.to_toml()? {
        bail!(
            "{} holds a run of another config than this sweep's point; give the sweep another --out, or move that \
             run away",
            dir.display()
        );
    }
    Ok(if dir.join(MODEL_FILE).is_file() {
        State::Done
    } else {
        State::Resume
    })
}

/// A number where the text reads as one.
fn json_value(s: &str) -> Value {
    s.parse::<i64>()
        .map(Value::from)
        .or_else(|_| s.parse::<f64>().map(Value::from))
        .unwrap_or_else(|_| Value::from(s))
}

/// A point's summary from its run directory.
fn summarize(p: &Point, dir: &Path, status: String) -> Result<PointSummary> {
    let mut s = PointSummary {
        dir: p.dir_name(),
        label: p.label(),
        settings: p.settings.iter().map(|(k, v)| (k.clone(), json_value(v))).collect(),
        status,
        arch: None,
        params: None,
        flops_per_token: None,
        tokens: None,
        final_loss: None,
        final_val_loss: None,
        best_val_loss: None,
        wall_s: None,
        tokens_per_s: None,
        variance: None,
        buckets: None,
        matched: None,
        cost_reference: None,
        params_vs_reference: None,
        flops_vs_reference: None,
    };
    let Ok(cfg) = train::read_config(&dir.join(CONFIG_FILE)) else {
        return Ok(s);
    };
    let t = cfg.data.seq_len();
    let mut model = cfg.model.clone();
    model.set_context(t);
    let counts = models::count::try_model(&model)?;
    s.arch = Some(cfg.arch().to_string());
    s.params = Some(models::count::try_model(&cfg.model)?.params);
    s.flops_per_token = Some(counts.flops_per_token(t));
    let rows = read_metrics(&dir.join(METRICS_FILE))?;
    let last_step = rows.iter().filter_map(|r| r["step"].as_u64()).max().unwrap_or(0);
    s.tokens = Some(last_step * (cfg.train.batch * t) as u64);
    s.final_loss = rows.last().and_then(|r| r["loss"].as_f64());
    let vals: Vec<f64> = rows.iter().filter_map(|r| r["val_loss"].as_f64()).collect();
    s.final_val_loss = vals.last().copied();
    s.best_val_loss = vals.iter().copied().reduce(f64::min);
    let wall = wall_seconds(&rows);
    s.wall_s = Some(wall);
    s.tokens_per_s = s.tokens.map(|n| n as f64 / wall.max(1e-9));
    Ok(s)
}

pub fn read_metrics(path: &Path) -> Result<Vec<Value>> {
    let text = match data::read_text(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(vec![]),
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
    };
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).with_context(|| format!("a broken line in {}", path.display())))
        .collect()
}

/// Training wall time: `elapsed_s` restarts at each resume, so the segments add.
pub fn wall_seconds(rows: &[Value]) -> f64 {
    let mut total = 0.0;
    let mut segment = 0.0;
    for e in rows.iter().filter_map(|r| r["elapsed_s"].as_f64()) {
        if e < segment {
            total += segment;
        }
        segment = e;
    }
    total + segment
}

fn write_summary(out: &Path, summary: &Summary) -> Result<()> {
    let json = serde_json::to_string_pretty(summary)?;
    crate::run_dir::write_atomic(&out.join(SUMMARY_JSON), |tmp| {
        std::fs::write(tmp, &json).with_context(|| format!("cannot write {}", tmp.display()))
    })?;
    if !summary.comparisons.is_empty() {
        let csv = compare::to_csv(&summary.comparisons);
        crate::run_dir::write_atomic(&out.join(COMPARISONS_CSV), |tmp| {
            std::fs::write(tmp, &csv).with_context(|| format!("cannot write {}", tmp.display()))
        })?;
    }
    let csv = to_csv(summary);
    crate::run_dir::write_atomic(&out.join(SUMMARY_CSV), |tmp| {
        std::fs::write(tmp, &csv).with_context(|| format!("cannot write {}", tmp.display()))
    })
}

fn to_csv(summary: &Summary) -> String {
    let mut names: Vec<String> = vec![];
    for p in &summary.points {
        for k in p.settings.keys() {
            if !names.contains(k) {
                names.push(k.clone());
            }
        }
    }
    let fixed = [
        "dir",
        "status",
        "arch",
        "params",
        "flops_per_token",
        "tokens",
        "final_loss",
        "final_val_loss",
        "best_val_loss",
        "wall_s",
        "tokens_per_s",
        "cost_reference",
        "params_vs_reference",
        "flops_vs_reference",
    ];
    let mut lines = vec![names
        .iter()
        .map(String::as_str)
        .chain(fixed)
        .collect::<Vec<_>>()
        .join(",")];
    let opt = |v: Option<String>| v.unwrap_or_default();
    let quote = |s: &str| match s.contains([',', '"', '\n']) {
        true => format!("\"{}\"", s.replace('"', "\"\"")),
        false => s.to_string(),
    };
    for p in &summary.points {
        let mut cells: Vec<String> = names
            .iter()
            .map(|k| match p.settings.get(k) {
                Some(Value::String(s)) => quote(s),
                Some(v) => v.to_string(),
                None => String::new(),
            })
            .collect();
        cells.extend([
            quote(&p.dir),
            quote(&p.status),
            opt(p.arch.clone()),
            opt(p.params.map(|x| x.to_string())),
            opt(p.flops_per_token.map(|x| format!("{x:.0}"))),
            opt(p.tokens.map(|x| x.to_string())),
            opt(p.final_loss.map(|x| format!("{x:.6}"))),
            opt(p.final_val_loss.map(|x| format!("{x:.6}"))),
            opt(p.best_val_loss.map(|x| format!("{x:.6}"))),
            opt(p.wall_s.map(|x| format!("{x:.1}"))),
            opt(p.tokens_per_s.map(|x| format!("{x:.0}"))),
            opt(p.cost_reference.as_deref().map(quote)),
            opt(p.params_vs_reference.map(|x| format!("{x:.6}"))),
            opt(p.flops_vs_reference.map(|x| format!("{x:.6}"))),
        ]);
        lines.push(cells.join(","));
    }
    lines.join("\n") + "\n"
}

fn print_table(summary: &Summary) {
    let width = summary.points.iter().map(|p| p.label.len()).max().unwrap_or(5).max(5);
    out!(
        "{:<width$} {:>12} {:>14} {:>8} {:>8} {:>10} {:>10} {:>9}",
        "point",
        "params",
        "FLOPs/token",
        "params×",
        "FLOPs×",
        "val_loss",
        "best_val",
        "wall_s"
    );
    let f = |v: Option<f64>, p: usize| v.map_or("-".to_string(), |x| format!("{x:.p$}"));
    for p in &summary.points {
        out!(
            "{:<width$} {:>12} {:>14} {:>8} {:>8} {:>10} {:>10} {:>9}{}",
            p.label,
            p.params.map_or("-".into(), models::count::thousands),
            p.flops_per_token
                .map_or("-".into(), |x| models::count::thousands(x.round() as u64)),
            f(p.params_vs_reference, 3),
            f(p.flops_vs_reference, 3),
            f(p.final_val_loss, 4),
            f(p.best_val_loss, 4),
            f(p.wall_s, 1),
            if p.status == "done" {
                String::new()
            } else {
                format!("  ({})", p.status)
            }
        );
    }
    if summary.points.iter().any(|p| p.buckets.is_some()) {
        out!("bucket use of the hash tables, on held-out batches:");
        out!(
            "{:<width$} {:>7} {:>9} {:>9} {:>9} {:>10} {:>12}",
            "point",
            "tables",
            "entropy",
            "lowest",
            "dead",
            "hits/row",
            "train/row*"
        );
        for p in &summary.points {
            let Some(b) = &p.buckets else { continue };
            out!(
                "{:<width$} {:>7} {:>9.3} {:>9.3} {:>8.1}% {:>10.1} {:>12.0}",
                p.label,
                b.tables,
                b.entropy_mean,
                b.entropy_min,
                100.0 * b.dead_fraction,
                b.hits_per_live_bucket,
                b.train_hits_per_bucket_if_even
            );
        }
        out!("(* the training hits per row had every row of a table been used alike)");
    }
    if let Some(r) = summary.points.iter().find_map(|p| p.cost_reference.as_ref()) {
        out!("(params× and FLOPs× are over the reference point's, e.g. {r}, of the same seed)");
    }
}

/// (training tokens, validation loss) at each evaluation.
type Curve = Vec<(f64, f64)>;

/// A point's validation curve.
fn curve(out: &Path, p: &PointSummary) -> Result<Curve> {
    let dir = out.join(&p.dir);
    let cfg = train::read_config(&dir.join(CONFIG_FILE))?;
    let per_step = (cfg.train.batch * cfg.data.seq_len()) as f64;
    let rows = read_metrics(&dir.join(METRICS_FILE))?;
    Ok(rows
        .iter()
        .filter_map(|r| Some((r["step"].as_f64()? * per_step, r["val_loss"].as_f64()?)))
        .collect())
}

/// A variant's validation curve, the mean over its seeds.
fn mean_curve(out: &Path, points: &[&PointSummary]) -> Result<Curve> {
    let curves = points.iter().map(|p| curve(out, p)).collect::<Result<Vec<_>>>()?;
    let Some(first) = curves.first() else {
        return Ok(vec![]);
    };
    if curves.iter().any(|c| c.len() != first.len()) {
        bail!("the seeds of a variant evaluated at different steps; they cannot be averaged");
    }
    Ok((0..first.len())
        .map(|i| {
            let mean = curves.iter().map(|c| c[i].1).sum::<f64>() / curves.len() as f64;
            (first[i].0, mean)
        })
        .collect())
}

/// The tokens at which `curve` first reaches `target`, interpolated between evaluations.
fn tokens_to_reach(curve: &[(f64, f64)], target: f64) -> Option<f64> {
    let i = curve.iter().position(|&(_, v)| v <= target)?;
    if i == 0 {
        return Some(curve[0].0);
    }
    let ((t0, v0), (t1, v1)) = (curve[i - 1], curve[i]);
    Some(t0 + (v0 - target) / (v0 - v1) * (t1 - t0))
}

fn equal_loss(out: &Path, summary: &Summary, reference: &str) -> Result<Vec<EqualLoss>> {
    let variant = |p: &PointSummary| p.settings.get("variant").and_then(Value::as_str).map(str::to_string);
    let mut labels: Vec<String> = vec![];
    for l in summary.points.iter().filter_map(variant) {
        if !labels.contains(&l) {
            labels.push(l);
        }
    }
    let of = |label: &str| -> Vec<&PointSummary> {
        summary
            .points
            .iter()
            .filter(|p| variant(p).as_deref() == Some(label))
            .collect()
    };
    let facts = |label: &str| -> Result<(Curve, f64, u64)> {
        let points = of(label);
        let curve = mean_curve(out, &points)?;
        let p = points
            .first()
            .ok_or_else(|| anyhow!("no points of the variant {label}"))?;
        Ok((curve, p.flops_per_token.unwrap_or(0.0), p.params.unwrap_or(0)))
    };
    let (ref_curve, ref_fpt, ref_params) = facts(reference)?;
    let Some(&(ref_tokens, target)) = ref_curve.last() else {
        bail!("the reference `{reference}` has no validation losses; give it an eval_every");
    };
    let mut rows = vec![];
    for label in labels.iter().filter(|l| *l != reference) {
        let (curve, fpt, params) = facts(label)?;
        let tokens = tokens_to_reach(&curve, target);
        let flops = tokens.map(|t| 3.0 * fpt * t);
        let reference_flops = 3.0 * ref_fpt * ref_tokens;
        rows.push(EqualLoss {
            variant: label.clone(),
            reference: reference.to_string(),
            target_val_loss: target,
            final_val_loss: curve.last().map_or(f64::NAN, |c| c.1),
            tokens,
            flops,
            reference_tokens: ref_tokens,
            reference_flops,
            params,
            reference_params: ref_params,
            tokens_saving: tokens.map(|t| 1.0 - t / ref_tokens),
            flops_saving: flops.map(|f| 1.0 - f / reference_flops),
            params_saving: 1.0 - params as f64 / ref_params.max(1) as f64,
        });
    }
    Ok(rows)
}

fn print_equal_loss(rows: &[EqualLoss]) {
    let Some(first) = rows.first() else { return };
    out!(
        "at {}'s final validation loss {:.4} ({} tokens, {:.3e} training FLOPs, {} parameters):",
        first.reference,
        first.target_val_loss,
        first.reference_tokens,
        first.reference_flops,
        models::count::thousands(first.reference_params)
    );
    out!(
        "{:<20} {:>9} {:>12} {:>11} {:>11} {:>9} {:>9} {:>9}",
        "variant",
        "final",
        "tokens",
        "FLOPs",
        "params",
        "−tokens",
        "−FLOPs",
        "−params"
    );
    let pct = |x: Option<f64>| x.map_or("never".to_string(), |x| format!("{:.1}%", 100.0 * x));
    for r in rows {
        out!(
            "{:<20} {:>9.4} {:>12} {:>11} {:>11} {:>9} {:>9} {:>9}",
            r.variant,
            r.final_val_loss,
            r.tokens.map_or("never".into(), |t| format!("{t:.0}")),
            r.flops.map_or("never".into(), |f| format!("{f:.3e}")),
            models::count::thousands(r.params),
            pct(r.tokens_saving),
            pct(r.flops_saving),
            pct(Some(r.params_saving)),
        );
    }
}

/// The backend a point trains on (`resmem train`'s default when no flag says).
fn backend_of(flags: &[(String, String)]) -> crate::args::BackendKind {
    match flags.iter().find(|(f, _)| f == "backend").map(|(_, v)| v.as_str()) {
        Some("cpu") => crate::args::BackendKind::Cpu,
        _ => crate::args::BackendKind::Gpu,
    }
}

/// The variance table: per variant (or per point label without variants) and site kind.
fn variance_rows(out: &Path, summary: &Summary) -> Result<Vec<VarianceRow>> {
    let group = |p: &PointSummary| match p.settings.get("variant").and_then(Value::as_str) {
        Some(v) => v.to_string(),
        None => p.label.clone(),
    };
    let mut groups: Vec<String> = vec![];
    for p in &summary.points {
        if !groups.contains(&group(p)) {
            groups.push(group(p));
        }
    }
    let geomean = |xs: Vec<Option<f64>>| -> Option<f64> {
        let xs: Option<Vec<f64>> = xs.into_iter().collect();
        let xs = xs.filter(|x| !x.is_empty() && x.iter().all(|v| *v > 0.0))?;
        Some((xs.iter().map(|x| x.ln()).sum::<f64>() / xs.len() as f64).exp())
    };
    let mut rows = vec![];
    for g in groups {
        let points: Vec<&PointSummary> = summary.points.iter().filter(|p| group(p) == g).collect();
        let Some(first) = points.first() else { continue };
        let cfg = train::read_config(&out.join(&first.dir).join(CONFIG_FILE))?;
        let Some(closed) = variance::closed_form(&cfg.model, InitScheme::Default) else {
            continue;
        };
        for c in closed {
            let of = |pick: fn(&PointVariance) -> &Vec<Measured>, fwd: bool| -> Vec<Option<f64>> {
                points
                    .iter()
                    .filter_map(|p| p.variance.as_ref())
                    .flat_map(|v| pick(v).iter())
                    .filter(|m| (m.site.layer, m.site.op) == (c.layer, c.op))
                    .map(|m| if fwd { m.forward_ratio } else { m.backward_ratio })
                    .collect()
            };
            rows.push(VarianceRow {
                variant: g.clone(),
                layer: c.layer,
                op: c.op,
                closed_forward: c.forward_ratio,
                closed_backward: c.backward_ratio,
                init_forward: geomean(of(|v| &v.init, true)),
                init_backward: geomean(of(|v| &v.init, false)),
                trained_forward: geomean(of(|v| &v.trained, true)),
                trained_backward: geomean(of(|v| &v.trained, false)),
            });
        }
    }
    Ok(rows)
}

/// How far a variant's ratios are from 1, as one factor: exp of the mean |ln ratio| over its
/// sites (1 when every ratio is 1; 2 when they are off by 2× on average, either way). None when
/// a ratio is missing.
fn distance_from_one(ratios: impl Iterator<Item = Option<f64>>) -> Option<f64> {
    let logs: Option<Vec<f64>> = ratios.map(|r| r.filter(|r| *r > 0.0).map(|r| r.ln().abs())).collect();
    let logs = logs.filter(|l| !l.is_empty())?;
    Some((logs.iter().sum::<f64>() / logs.len() as f64).exp())
}

fn print_variance(rows: &[VarianceRow]) {
    if rows.is_empty() {
        return;
    }
    out!("variance ratios, geometric means over blocks and seeds (forward σ²out/σ²in, backward σ²gin/σ²gout):");
    out!(
        "{:<14} {:<5} {:<10} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}",
        "variant",
        "layer",
        "op",
        "closed",
        "init",
        "trained",
        "closed",
        "init",
        "trained"
    );
    let f = |x: Option<f64>| x.map_or("n/a".to_string(), |x| format!("{x:.4}"));
    for r in rows {
        out!(
            "{:<14} {:<5} {:<10} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}",
            r.variant,
            format!("{:?}", r.layer).to_lowercase(),
            format!("{:?}", r.op).to_lowercase(),
            f(Some(r.closed_forward)),
            f(r.init_forward),
            f(r.trained_forward),
            f(Some(r.closed_backward)),
            f(r.init_backward),
            f(r.trained_backward),
        );
    }
    // Over the four sites every model has (the RMT's W1 and W2 are listed above, not here), so
    // that the models compare.
    out!("distance from 1, exp of the mean |ln ratio| over the four storage and retrieval sites:");
    let mut variants: Vec<&str> = vec![];
    for r in rows {
        if !variants.contains(&r.variant.as_str()) {
            variants.push(&r.variant);
        }
    }
    for v in variants {
        let of = |pick: fn(&VarianceRow) -> Option<f64>| {
            let sites = rows
                .iter()
                .filter(|r| r.variant == v && matches!(r.op, Op::Storage | Op::Retrieval));
            distance_from_one(sites.map(pick))
        };
        out!(
            "{:<14} {:<16} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}",
            v,
            "",
            f(of(|r| Some(r.closed_forward))),
            f(of(|r| r.init_forward)),
            f(of(|r| r.trained_forward)),
            f(of(|r| Some(r.closed_backward))),
            f(of(|r| r.init_backward)),
            f(of(|r| r.trained_backward)),
        );
    }
}
