//! `resmem sweep`: a grid of `resmem train` runs, one directory per point, trained one after
//! another; finished points are skipped and unfinished ones resumed, so re-running the same
//! command continues a sweep. Writes summary.csv and summary.json after every point. A point
//! is finished when it has its weights, or its measurement (`eval-*.json`) and no checkpoints,
//! so a sweep carried without weights and checkpoints (as experiments/runs/ is committed)
//! continues on another machine: its finished points stay finished and its unfinished ones
//! start again.
//!
//! A point's settings are `resmem train` flags by name (`d_k` or `d-k`), so a sweep can vary
//! anything a run can set. They come, later winning, from an experiment file's `[flags]`, its
//! `[quick.flags]` under `--quick`, the command line, the variant, the grid and the seed.
//!
//! This file runs a sweep: it reads the experiment (`experiment.rs`), crosses its points
//! (`points.rs`, from flags checked and resolved as `resmem train` would in `flags.rs`), trains
//! each point or finds it done, and writes the summary (`summary.rs`) with what each finished
//! point is measured for: its hash tables' bucket use (`buckets.rs`), its variance ratios
//! (`variance.rs`), the variants at equal loss (`equal_loss.rs`), the declared comparisons
//! (`compare.rs`) and trends (`trend.rs`), decided at declared looks (`sequential.rs`) and
//! adjusted by Holm over the experiment's family, sizes matched in cost (`matching.rs`),
//! families of sizes fitted to power laws (`scaling.rs`) and settings tuned on curves
//! (`tune.rs`). Every finished point is evaluated on the validation split's test slice
//! (`crate::eval::slice_loss`), and every summary records the commit and machine
//! (`crate::provenance`) beside curves.csv.

pub mod buckets;
mod compare;
mod equal_loss;
mod experiment;
mod flags;
mod matching;
mod points;
pub(crate) mod scaling;
mod sequential;
mod summary;
mod trend;
mod tune;
mod variance;

use crate::args::SweepArgs;
use crate::console::{say, warn};
use crate::run_dir::{CONFIG_FILE, MODEL_FILE};
use crate::train;
use anyhow::{anyhow, bail, Context, Result};
use buckets::bucket_use;
use clap::ArgMatches;
use data::EvalSlice;
use equal_loss::{equal_loss, print_equal_loss, EqualLoss};
use experiment::{read_experiment, Experiment};
use flags::{base_flags, resolved, resume_args};
use models::settings::{Setting, SETTINGS};
use models::RunConfig;
use points::{expand, grid, variants, Point};
use std::path::Path;
use summary::{print_table, summarize, write_progress, write_summary, Summary};
use variance::{print_variance, variance_rows, PointVariance};

pub const SUMMARY_JSON: &str = "summary.json";
pub const SUMMARY_CSV: &str = "summary.csv";
pub const COMPARISONS_CSV: &str = "comparisons.csv";
pub const CURVES_CSV: &str = "curves.csv";
const SWEEP_LOCK: &str = ".resmem-sweep.lock";

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
        // --quick tunes, looks and scales only with its own [quick.tune], [quick.sequential]
        // and [quick.scaling].
        experiment.tune = quick.tune;
        experiment.sequential = quick.sequential;
        experiment.scaling = quick.scaling;
    }
    let out = args
        .train
        .out
        .clone()
        .ok_or_else(|| anyhow!("--out DIR is required: the sweep's directory"))?;
    if args.train.resume.is_some() {
        bail!("a sweep resumes by itself: run the same `resmem sweep` command again");
    }
    // What is wrong with an experiment file is said with the file's name: it is what to edit.
    let file = args.experiment.clone();
    let named = |e: anyhow::Error| match &file {
        Some(path) => e.context(format!("the experiment file {}", path.display())),
        None => e,
    };
    let (base, given) = base_flags(&experiment, matches).map_err(&named)?;
    let grid = grid(&experiment, &args.set, &given).map_err(&named)?;
    let variants = variants(&experiment.variants).map_err(&named)?;
    for r in experiment.reference.labels() {
        if !variants.iter().any(|(label, _)| *label == r) {
            return Err(named(anyhow!(
                "the reference `{r}` is not the label of one of the experiment's [[variants]]"
            )));
        }
        if !grid.is_empty() {
            return Err(named(anyhow!(
                "a reference compares variants at equal loss; give it a sweep without a [grid]"
            )));
        }
    }
    let seeds = match (args.seeds.is_empty(), experiment.seeds.is_empty()) {
        (false, _) => args.seeds.clone(),
        (true, false) => experiment.seeds.clone(),
        (true, true) => vec![],
    };
    let schedule = match &experiment.sequential {
        Some(_) if experiment.compare.is_empty() && experiment.trend.is_empty() => {
            return Err(named(anyhow!(
                "[sequential] decides the experiment's [[compare]] and [[trend]]; declare one"
            )))
        }
        Some(d) => Some(sequential::Schedule::new(d, seeds.len()).map_err(&named)?),
        None => None,
    };
    points::check_count(variants.len(), &grid, seeds.len()).map_err(&named)?;
    let mut points = expand(&base, &variants, &grid, &seeds);
    points::check_distinct(&points, &seeds).map_err(&named)?;
    // Under a sequential design, every arm's first look's seeds train first, then the next's.
    if let Some(s) = &schedule {
        points.sort_by_key(|p| s.look_of(seed_position(p, &seeds)));
    }
    let swept_names: Vec<String> = grid.iter().map(|(k, _)| k.clone()).collect();
    let matched = matching::apply(&experiment.matches, &mut points, &out, &swept_names).map_err(&named)?;
    if let Some(d) = &experiment.scaling {
        let steps_given = experiment.flags.contains_key("steps") || given.iter().any(|g| g == "steps");
        scaling::apply(d, &mut points, &out, steps_given).map_err(&named)?;
    }
    if let Some(t) = &experiment.tune {
        tune::check(t, &swept_names, &seeds, &variants).map_err(&named)?;
    }
    // Refuse a bad point before training any: each resolves as `resmem train` would, and its
    // directory holds nothing or its own run, never another config's.
    // Tuning has not chosen yet, so the settings it tunes are compared once it has.
    let tuned: Vec<&Setting> = experiment
        .tune
        .iter()
        .flat_map(|t| t.grid.keys())
        .filter_map(|k| SETTINGS.iter().find(|s| s.flag == flags::flag_name(k)))
        .collect();
    for p in &points {
        let (_, cfg) = resolved(p, &out)
            .with_context(|| format!("in the sweep's point {}", p.label()))
            .map_err(&named)?;
        state(&out.join(p.dir_name()), &cfg, &tuned)?;
    }
    // And a comparison that cannot pair its arms. --quick runs one seed, too few for an interval.
    let compare_now = !(args.quick && seeds.len() < 2);
    if compare_now {
        for c in &experiment.compare {
            compare::pair(c, &points).map_err(&named)?;
        }
        for t in &experiment.trend {
            trend::group(t, &points).map_err(&named)?;
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
        commit: crate::provenance::COMMIT.to_string(),
        machine: Some(crate::provenance::machine()),
        evaluation: match args.quick {
            false => EVALUATION.to_string(),
            true => format!("{EVALUATION}. --quick: test_loss on the test slice's first eval_batches batches only"),
        },
        swept,
        points: vec![],
        variance: vec![],
        collapse: vec![],
        equal_loss: vec![],
        comparisons: vec![],
        trends: vec![],
        scaling: None,
        tuning: vec![],
        bigram_entropy: None,
    };
    train::set_resume_hint("run the same `resmem sweep` command again to continue the sweep".into());
    let stop = train::stop_flag()?;
    if let Some(t) = &experiment.tune {
        summary.tuning = tune::run(t, &mut points, &out, (&swept_names, &seeds), args.quick, &stop)?;
        write_progress(&out, &summary)?;
    }
    let mut failed = vec![];
    // The look after which every sequential test had stopped, from 0.
    let mut stopped_after: Option<usize> = None;
    for (i, p) in points.iter().enumerate() {
        let dir = out.join(p.dir_name());
        if let (Some(k), Some(s)) = (stopped_after, &schedule) {
            let why = format!(
                "not trained: every sequential test stopped at look {} of {}",
                k + 1,
                s.looks.len()
            );
            summary.points.push(summarize(p, &dir, why)?);
            continue;
        }
        let status = match train_point(p, &dir, &out, &format!("[{}/{}]", i + 1, points.len()), &stop) {
            Ok(status) => status,
            Err(e) => {
                write_progress(&out, &summary)?;
                return Err(e);
            }
        };
        if status != "done" {
            failed.push(p.label());
        }
        let mut point = summarize(p, &dir, status)?;
        point.matched = matched[i].clone();
        if point.status == "done" {
            let test = crate::eval::slice_loss(&dir, backend_of(&p.flags, &dir), EvalSlice::Test, args.quick)
                .with_context(|| format!("cannot evaluate the point {} on the test slice", p.label()))?;
            point.test_loss = Some(test.loss);
            point.test_tokens = Some(test.tokens);
            point.device = train::recorded_device(&dir);
        }
        let hashed = point
            .arch
            .as_deref()
            .is_some_and(|a| a == "memoryformer" || a == "hybrid");
        if (hashed || experiment.variance) && point.status == "done" && !dir.join(MODEL_FILE).is_file() {
            bail!(
                "{} finished without its weights here ({MODEL_FILE} was not carried with its results), and this \
                 experiment measures its buckets or variance from them; delete {} to train it again",
                p.label(),
                dir.display()
            );
        }
        if hashed && point.status == "done" {
            point.buckets = Some(bucket_use(&dir, backend_of(&p.flags, &dir), point.tokens, args.quick)?);
        }
        if experiment.variance && point.status == "done" {
            let measure = |at_init| crate::analyze::measure_run(&dir, backend_of(&p.flags, &dir), None, at_init);
            point.variance = Some(PointVariance {
                init: measure(true)?.2,
                trained: measure(false)?.2,
            });
        }
        summary.points.push(point);
        write_progress(&out, &summary)?;
        // At the end of a look, stop where every test has crossed its boundary.
        if let (Some(s), true, true) = (&schedule, failed.is_empty(), compare_now) {
            let look = s.look_of(seed_position(p, &seeds));
            let next = points.get(i + 1).map(|q| s.look_of(seed_position(q, &seeds)));
            if next.is_some_and(|n| n != look) {
                let decided = decisions(s, look, &experiment, &out, &points, &summary.points, &seeds);
                if decided.is_ok_and(|d| d.iter().all(|x| x.as_ref().is_some_and(|x| x.resolved))) {
                    say(&format!(
                        "every sequential test has crossed its boundary at look {} of {} ({} seeds): the rest is not trained",
                        look + 1,
                        s.looks.len(),
                        s.looks[look]
                    ));
                    stopped_after = Some(look);
                }
            }
        }
    }
    // Everything is computed and written before anything is printed.
    let references = experiment.reference.labels();
    matching::relative_costs(&mut summary.points, &points, references.first().map(String::as_str));
    summary.bigram_entropy = bigram_entropy(&points)?;
    write_summary(&out, &summary)?;
    if failed.is_empty() {
        if experiment.variance {
            summary.variance = variance_rows(&out, &summary)?;
        }
        summary.collapse = buckets::collapse(&summary.points);
        for reference in experiment.reference.labels() {
            let rows = equal_loss(&out, &summary, &reference)?;
            summary.equal_loss.extend(rows);
        }
        if compare_now {
            decide(
                &experiment,
                schedule.as_ref(),
                stopped_after,
                &out,
                &points,
                &mut summary,
                &seeds,
            )?;
            if let Some(d) = &experiment.scaling {
                summary.scaling = Some(scaling::compute(d, &points, &summary.points)?);
            }
        }
        write_summary(&out, &summary)?;
    }
    if let Some(t) = &experiment.tune {
        tune::print(&summary.tuning, &t.seeds);
    }
    print_table(&summary);
    print_variance(&summary.variance);
    buckets::print_collapse(&summary.collapse);
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
    trend::print(&summary.trends);
    scaling::print(&summary.scaling);
    let declared_tests = !(experiment.compare.is_empty() && experiment.trend.is_empty());
    if !compare_now && declared_tests {
        say("the declared comparisons and trends need at least 2 seeds; --quick runs one, so they are left out");
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

/// The position of a point's seed in the experiment's list (0 where it has none).
fn seed_position(p: &Point, seeds: &[u64]) -> usize {
    p.settings
        .iter()
        .find(|(k, _)| k == "seed")
        .and_then(|(_, v)| seeds.iter().position(|s| s.to_string() == *v))
        .unwrap_or(0)
}

/// The first `n` seeds of the experiment's list, as points name them.
fn first_seeds(seeds: &[u64], n: usize) -> Vec<String> {
    seeds.iter().take(n).map(u64::to_string).collect()
}

/// Each comparison's and then each trend's sequential decision from the looks up to `look`:
/// None while one is undecided.
fn decisions(
    s: &sequential::Schedule,
    look: usize,
    experiment: &Experiment,
    out: &Path,
    points: &[Point],
    summaries: &[summary::PointSummary],
    seeds: &[u64],
) -> Result<Vec<Option<sequential::Sequential>>> {
    let looks = || (0..=look).map(|k| first_seeds(seeds, s.looks[k]));
    let mut decided = vec![];
    for c in &experiment.compare {
        let by_look = looks()
            .map(|at| compare::first_values(c, out, points, summaries, &at))
            .collect::<Result<Vec<_>>>()?;
        decided.push(s.decide(&by_look, "a better", "b better"));
    }
    for t in &experiment.trend {
        let by_look = looks()
            .map(|at| {
                Ok(trend::slopes(t, points, summaries, Some(&at))?
                    .into_iter()
                    .map(|(_, v)| v)
                    .collect())
            })
            .collect::<Result<Vec<Vec<f64>>>>()?;
        decided.push(s.decide(&by_look, "decreasing", "increasing"));
    }
    Ok(decided)
}

/// The declared comparisons and trends: each on every seed, or under a sequential design on
/// the seeds of the look it stopped at, with its decision; then Holm's adjustment over all of
/// them, the experiment's family.
fn decide(
    experiment: &Experiment,
    schedule: Option<&sequential::Schedule>,
    stopped_after: Option<usize>,
    out: &Path,
    points: &[Point],
    summary: &mut Summary,
    seeds: &[u64],
) -> Result<()> {
    let decided = match schedule {
        Some(s) => {
            let look = stopped_after.unwrap_or(s.looks.len() - 1);
            decisions(s, look, experiment, out, points, &summary.points, seeds)?
        }
        None => vec![None; experiment.compare.len() + experiment.trend.len()],
    };
    let (for_compare, for_trend) = decided.split_at(experiment.compare.len());
    for (c, d) in experiment.compare.iter().zip(for_compare) {
        let at = d.as_ref().map(|d| first_seeds(seeds, d.seeds));
        let mut result = compare::compute(c, out, points, &summary.points, at.as_deref())?;
        result.metrics[0].sequential = d.clone();
        summary.comparisons.push(result);
    }
    for (t, d) in experiment.trend.iter().zip(for_trend) {
        let at = d.as_ref().map(|d| first_seeds(seeds, d.seeds));
        let mut result = trend::compute(t, points, &summary.points, at.as_deref())?;
        result.result.sequential = d.clone();
        summary.trends.push(result);
    }
    // Holm over every test with a p: the repeated p of a sequential one.
    let mut family: Vec<(&mut compare::MetricResult, [&str; 2])> = summary
        .comparisons
        .iter_mut()
        .map(|c| (&mut c.metrics[0], ["a better", "b better"]))
        .chain(
            summary
                .trends
                .iter_mut()
                .map(|t| (&mut t.result, ["decreasing", "increasing"])),
        )
        .filter(|(m, _)| m.p.is_some())
        .collect();
    let p: Vec<f64> = family
        .iter()
        .map(|(m, _)| m.sequential.as_ref().map_or(m.p.unwrap_or(f64::NAN), |s| s.repeated_p))
        .collect();
    let adjusted = crate::stats::sequential::holm(&p);
    let size = family.len();
    for ((m, [below, above]), p) in family.iter_mut().zip(adjusted) {
        let verdict = match (p < 1.0 - crate::stats::LEVEL, m.estimate.is_some_and(|e| e < 0.0)) {
            (false, _) => "not resolved",
            (true, true) => below,
            (true, false) => above,
        };
        m.holm = Some(compare::Holm {
            family: size,
            p,
            verdict: verdict.to_string(),
        });
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
    let state = state(dir, &cfg, &[])?;
    if let State::Done = state {
        say(&format!("{progress} {}: done already", p.label()));
        return Ok("done".to_string());
    }
    say(&format!("{progress} {}", p.label()));
    let args = match state {
        State::Resume => resume_args(&train_args, dir),
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

enum State {
    New,
    Resume,
    Done,
}

/// Where the point's run stands, refusing a directory that holds another config's run, whatever
/// its `unknown` settings (those not chosen yet).
fn state(dir: &Path, cfg: &RunConfig, unknown: &[&Setting]) -> Result<State> {
    let config = dir.join(CONFIG_FILE);
    if !config.is_file() {
        return Ok(State::New);
    }
    let mut existing = crate::resolve::read_config(&config)?;
    // V follows the data and is set when training starts.
    let mut wanted = cfg.clone();
    wanted.set_vocab(existing.vocab());
    existing.set_vocab(existing.vocab());
    let table = |c: &RunConfig| -> Result<toml::Table> {
        let mut t: toml::Table = toml::from_str(&c.to_toml()?)?;
        for s in unknown {
            if let Some(toml::Value::Table(section)) = t.get_mut(s.table) {
                section.remove(s.key);
            }
        }
        Ok(t)
    };
    if table(&existing)? != table(&wanted)? {
        bail!(
            "{} holds a run of another config than this sweep's point; give the sweep another --out, or move that \
             run away",
            dir.display()
        );
    }
    // Carried without weights or checkpoints, a measured point is finished; with its
    // checkpoints here, it resumes to write its weights again.
    let carried = crate::eval::measured(dir) && !dir.join(crate::run_dir::CHECKPOINT_DIR).exists();
    Ok(if dir.join(MODEL_FILE).is_file() || carried {
        State::Done
    } else {
        State::Resume
    })
}

/// The bigram entropy of the corpus every point trains on (None on a task, or on several
/// corpora): the floor a summary reads its losses against.
fn bigram_entropy(points: &[Point]) -> Result<Option<f64>> {
    let mut dirs: Vec<&str> = points
        .iter()
        .filter_map(|p| p.flags.iter().find(|(k, _)| k == "data").map(|(_, v)| v.as_str()))
        .collect();
    dirs.dedup();
    match (
        dirs.as_slice(),
        points.iter().all(|p| p.flags.iter().any(|(k, _)| k == "data")),
    ) {
        ([dir], true) => {
            let corpus = data::Corpus::open(Path::new(dir)).with_context(|| format!("cannot read the corpus {dir}"))?;
            Ok(Some(corpus.bigram_entropy()?))
        }
        _ => Ok(None),
    }
}

/// The backend a finished point is measured on: its flag's, else the one it trained on.
pub(super) fn backend_of(flags: &[(String, String)], dir: &Path) -> crate::args::BackendKind {
    use crate::args::BackendKind::{Auto, Cpu, Gpu};
    let given = match flags.iter().find(|(f, _)| f == "backend").map(|(_, v)| v.as_str()) {
        Some("cpu") => Cpu,
        Some("gpu") => Gpu,
        _ => Auto,
    };
    crate::choose_backend(given, Some(dir))
}

/// Where the summary's losses come from, in its own words.
const EVALUATION: &str = "test_loss: each finished run's final model on every window of the validation split's \
     test slice (its last 80%), once, in the strict class; tuning: on the tuning slice (its first 20%), which \
     no comparison reads; val_loss and best_val_loss: the run's own evaluations during training, on eval_batches \
     batches spread over the whole validation split (what tokens_to_target reads)";

/// `resmem analyze collapse`: the collapse table of a sweep's summary, recomputed from its points.
pub fn collapse_of(args: &crate::args::CollapseArgs) -> Result<()> {
    let path = match args.summary.is_dir() {
        true => args.summary.join(SUMMARY_JSON),
        false => args.summary.clone(),
    };
    let text = data::read_small_text(&path, 1 << 30).with_context(|| format!("cannot read {}", path.display()))?;
    let summary: Summary =
        serde_json::from_str(&text).with_context(|| format!("{} is not a sweep's summary.json", path.display()))?;
    let rows = buckets::collapse(&summary.points);
    if rows.is_empty() {
        bail!(
            "{} has no point whose hash tables were measured per table (a MemoryFormer or hybrid sweep since 8aa7778)",
            path.display()
        );
    }
    match args.json {
        true => out!("{}", serde_json::to_string_pretty(&rows)?),
        false => buckets::print_collapse(&rows),
    }
    Ok(())
}
