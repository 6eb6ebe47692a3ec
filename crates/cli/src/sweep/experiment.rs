//! An experiment file (experiments/*.toml): what a sweep trains and what it measures and
//! compares, as declared before the runs.

use super::{compare, matching, scaling, sequential, trend, tune};
use anyhow::{Context, Result};
use serde::Deserialize;
use std::path::Path;

/// An experiment file (experiments/*.toml).
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct Experiment {
    /// What it reproduces, printed and kept in the summary.
    pub(super) title: Option<String>,
    /// `resmem train` flags every point shares.
    #[serde(default)]
    pub(super) flags: toml::Table,
    /// Swept settings: every combination of their values.
    #[serde(default)]
    pub(super) grid: toml::Table,
    /// Alternatives crossed with the grid: each a `label` and its flags.
    #[serde(default)]
    pub(super) variants: Vec<toml::Table>,
    #[serde(default)]
    pub(super) seeds: Vec<u64>,
    /// Variants the others are compared with at equal loss (RMT paper Table 3's form): one
    /// label, or a list of them.
    #[serde(default)]
    pub(super) reference: References,
    /// Measure every point's variance ratios at init and after training (RMT paper Tables 1-2).
    #[serde(default)]
    pub(super) variance: bool,
    /// Comparisons declared before the runs: arm a against arm b, paired by seed.
    #[serde(default)]
    pub(super) compare: Vec<compare::Declared>,
    /// Trends declared before the runs: a metric's per-seed slope along a swept setting.
    #[serde(default)]
    pub(super) trend: Vec<trend::Declared>,
    /// Looks at which the comparisons and trends are decided, and the boundary.
    pub(super) sequential: Option<sequential::Declared>,
    /// Families of sizes trained at a fixed tokens per parameter, and their power laws.
    pub(super) scaling: Option<scaling::Declared>,
    /// Sizes solved before the runs so that points cost what a reference point costs.
    #[serde(default, rename = "match")]
    pub(super) matches: Vec<matching::Declared>,
    /// Each arm's settings chosen on tuning seeds before the runs.
    pub(super) tune: Option<tune::Declared>,
    /// `--quick`: its flags are added, and its grid, variants and seeds replace the full ones.
    pub(super) quick: Option<Box<Experiment>>,
}

/// `reference = "a"` or `reference = ["a", "b"]`.
#[derive(Deserialize, Default)]
#[serde(untagged)]
pub(super) enum References {
    #[default]
    None,
    One(String),
    Many(Vec<String>),
}

impl References {
    pub(super) fn labels(&self) -> Vec<String> {
        match self {
            References::None => vec![],
            References::One(r) => vec![r.clone()],
            References::Many(r) => r.clone(),
        }
    }
}

pub(super) fn read_experiment(path: &Path) -> Result<Experiment> {
    let text = data::read_small_text(path, crate::resolve::TEXT_FILE_LIMIT)
        .with_context(|| format!("cannot read the experiment {}", path.display()))?;
    toml::from_str(&text).with_context(|| {
        format!(
            "{} is not a valid experiment: it may have title, seeds, reference, variance, [flags], [grid], \
             [[variants]], [[match]], [tune], [[compare]] (a, b, claim, metrics), [[trend]] (axis, select, scale, \
             metric, claim), [sequential] (looks, boundary), [scaling] (tokens_per_param, families, reference) and [quick]",
            path.display()
        )
    })
}
