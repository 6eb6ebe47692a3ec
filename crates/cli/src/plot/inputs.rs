//! The PATHs `resmem plot` is given, as runs and sweeps: a sweep directory's summary.json, read
//! for what the figures need of it.

use crate::console::warn;
use crate::run_dir::CONFIG_FILE;
use anyhow::{bail, Context, Result};
use serde::Deserialize;
use serde_json::Value;
use std::collections::HashSet;
use std::path::{Path, PathBuf};

/// The file `resmem sweep` writes into a sweep directory.
pub const SUMMARY_FILE: &str = "summary.json";

/// One point of a sweep's summary.json (`resmem sweep`'s `PointSummary`, read back); fields it
/// does not need are ignored, so a newer summary still plots.
#[derive(Deserialize)]
pub(super) struct PointSummary {
    pub(super) dir: String,
    #[serde(default)]
    pub(super) label: Option<String>,
    #[serde(default)]
    pub(super) settings: serde_json::Map<String, Value>,
    status: String,
    #[serde(default)]
    pub(super) final_val_loss: Option<f64>,
    #[serde(default)]
    pub(super) best_val_loss: Option<f64>,
    /// The final model's loss on the validation split's test slice.
    #[serde(default)]
    pub(super) test_loss: Option<f64>,
}

impl PointSummary {
    pub(super) fn name(&self) -> &str {
        self.label.as_deref().unwrap_or(&self.dir)
    }
}

#[derive(Deserialize)]
pub(super) struct Summary {
    #[serde(default)]
    pub(super) experiment: Option<String>,
    #[serde(default)]
    pub(super) swept: Vec<String>,
    pub(super) points: Vec<PointSummary>,
    #[serde(default)]
    pub(super) comparisons: Vec<Comparison>,
    #[serde(default)]
    pub(super) trends: Vec<Trend>,
    #[serde(default)]
    pub(super) tuning: Vec<Tuned>,
    #[serde(default)]
    pub(super) scaling: Option<Box<crate::sweep::scaling::Scaling>>,
}

/// What `--x comparison` reads of a declared comparison in summary.json.
#[derive(Deserialize)]
pub(super) struct Comparison {
    pub(super) a: String,
    pub(super) b: String,
    pub(super) metrics: Vec<ComparedMetric>,
}

#[derive(Deserialize)]
pub(super) struct ComparedMetric {
    pub(super) metric: String,
    pub(super) estimate: Option<f64>,
    pub(super) low: Option<f64>,
    pub(super) high: Option<f64>,
    pub(super) per_seed: Vec<Option<f64>>,
    pub(super) verdict: String,
    /// Under `[sequential]`, the first metric's decision at the look it stopped at.
    #[serde(default)]
    pub(super) sequential: Option<Sequential>,
    /// The first metric's verdict adjusted by Holm over the experiment's family of tests.
    #[serde(default)]
    pub(super) holm: Option<Holm>,
}

/// A sequential design's decision: the look it stopped at and its repeated interval.
#[derive(Deserialize)]
pub(super) struct Sequential {
    pub(super) looks: Vec<usize>,
    /// From 1.
    pub(super) stopped_at: usize,
    pub(super) seeds: usize,
    pub(super) low: f64,
    pub(super) high: f64,
    pub(super) verdict: String,
}

#[derive(Deserialize)]
pub(super) struct Holm {
    /// Tests in the family.
    pub(super) family: usize,
    pub(super) verdict: String,
}

/// A declared `[[trend]]`: each seed's slope of a metric along a swept setting.
#[derive(Deserialize)]
pub(super) struct Trend {
    pub(super) axis: String,
    #[serde(default)]
    pub(super) select: Option<String>,
    /// "log2" (per doubling) or "linear" (per unit).
    #[serde(default)]
    pub(super) scale: Option<String>,
    /// The slopes: their mean, 95% interval, per seed, and "decreasing", "increasing" or "not
    /// resolved".
    pub(super) result: ComparedMetric,
}

/// One arm's `[tune]`: its grid's losses on the tuning slice, and the value chosen.
#[derive(Deserialize)]
pub(super) struct Tuned {
    pub(super) arm: String,
    pub(super) rows: Vec<TuneRow>,
    pub(super) chosen: Vec<(String, String)>,
    #[serde(default)]
    pub(super) at_edge: bool,
    #[serde(default)]
    pub(super) fit: Option<Fit>,
}

#[derive(Deserialize)]
pub(super) struct TuneRow {
    pub(super) settings: Vec<(String, String)>,
    /// Each tuning seed's final model on the tuning slice; null where a run failed.
    pub(super) per_seed: Vec<Option<f64>>,
    #[serde(default)]
    pub(super) mean: Option<f64>,
}

/// loss = a + b·x + c·x², x = ln(value), fitted over the values [low, high].
#[derive(Deserialize)]
pub(super) struct Fit {
    pub(super) low: f64,
    pub(super) high: f64,
    pub(super) a: f64,
    pub(super) b: f64,
    pub(super) c: f64,
}

pub(super) struct Sweep {
    pub(super) dir: PathBuf,
    pub(super) summary: Summary,
}

impl Sweep {
    /// The sweep of `dir`, or of a summary file kept elsewhere (docs/experiments/NAME.json),
    /// whose runs are read from the directory holding it: a plot of its points alone needs none.
    fn read(dir: &Path) -> Result<Self> {
        let (path, dir) = match dir.is_file() {
            true => (dir.to_path_buf(), dir.parent().unwrap_or(Path::new(".")).to_path_buf()),
            false => (dir.join(SUMMARY_FILE), dir.to_path_buf()),
        };
        let text = data::read_text(&path).with_context(|| format!("cannot read {}", path.display()))?;
        let summary = serde_json::from_str(&text).with_context(|| {
            format!(
                "{} is not a sweep summary (a JSON object with experiment, swept and points, as `resmem sweep` \
                 writes)",
                path.display()
            )
        })?;
        Ok(Self { dir, summary })
    }

    /// Its experiment's name, else its directory's.
    pub(super) fn name(&self) -> String {
        self.summary.experiment.clone().unwrap_or_else(|| dir_name(&self.dir))
    }

    /// The finished points; the others are reported on stderr and left out.
    pub(super) fn done(&self) -> impl Iterator<Item = &PointSummary> {
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

pub(super) enum Input {
    Run(PathBuf),
    Sweep(Sweep),
}

/// The PATHs as runs and sweeps, each once however often it was given.
pub(super) fn inputs(paths: &[PathBuf]) -> Result<Vec<Input>> {
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
        if path.join(SUMMARY_FILE).is_file() || (path.is_file() && path.extension().is_some_and(|e| e == "json")) {
            inputs.push(Input::Sweep(Sweep::read(path)?));
        } else if path.join(CONFIG_FILE).is_file() {
            inputs.push(Input::Run(path.clone()));
        } else {
            bail!(
                "{} is neither a run directory (it has no {CONFIG_FILE}, which `resmem train` writes) nor a sweep \
                 directory or summary (it has no {SUMMARY_FILE}, which `resmem sweep` writes)",
                path.display()
            );
        }
    }
    Ok(inputs)
}

pub(super) fn dir_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_else(|| path.display().to_string())
}
