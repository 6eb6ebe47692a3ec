//! The sweep's points: the grid's settings, the variants and the seeds, crossed; each point
//! its settings and the flags of its `resmem train`.

use super::experiment::Experiment;
use super::flags::{check_flag, flag_name, flag_value, set, setting_name, Flags};
use anyhow::{anyhow, bail, Result};

/// One run of the sweep.
#[derive(Clone, Debug)]
pub(super) struct Point {
    /// What sets it apart, in order: variant, grid settings, seed.
    pub(super) settings: Vec<(String, String)>,
    /// Every flag of its `resmem train`.
    pub(super) flags: Flags,
}

impl Point {
    /// Its directory name: `d_k=4,seed=0`.
    pub(super) fn dir_name(&self) -> String {
        let name: Vec<String> = self.settings.iter().map(|(k, v)| format!("{k}={v}")).collect();
        name.join(",").replace(['/', '\\', ' '], "_")
    }

    pub(super) fn label(&self) -> String {
        let name: Vec<String> = self.settings.iter().map(|(k, v)| format!("{k}={v}")).collect();
        name.join(" ")
    }

    /// Whether the arm `arm` selects it: a variant's label (`rmt`) or settings (`d_k=16`,
    /// `variant=rmt lr=0.01`), all of which it has.
    pub(super) fn in_arm(&self, arm: &str) -> bool {
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
    pub(super) fn arm_label(&self) -> String {
        let name: Vec<String> = self
            .settings
            .iter()
            .filter(|(k, _)| k != "seed")
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        name.join(" ")
    }
}

/// The swept settings: `--set NAME=V1,V2` or the file's `[grid]`, with their values.
pub(super) fn grid(experiment: &Experiment, sets: &[String], given: &[String]) -> Result<Vec<(String, Vec<String>)>> {
    let mut grid = vec![];
    for (name, values) in &experiment.grid {
        let toml::Value::Array(values) = values else {
            bail!("[grid] {name} must be a list of values, e.g. {name} = [4, 8, 16]");
        };
        if values.is_empty() {
            bail!("[grid] {name} has no values, so the sweep would train nothing; give at least one");
        }
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
pub(super) fn variants(tables: &[toml::Table]) -> Result<Vec<(String, Flags)>> {
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

/// The most runs one sweep (or its tuning) may ask for: at a few seconds a run on the smallest
/// models that is a day of work, and its point list is allocated before anything trains.
pub(super) const MAX_RUNS: usize = 10_000;

/// Refuses a sweep of more than [`MAX_RUNS`] runs before its points are made: variants × every
/// grid's values × seeds, each a count the experiment file or the flags give.
pub(super) fn check_count(variants: usize, grid: &[(String, Vec<String>)], seeds: usize) -> Result<()> {
    let mut factors = vec![("[[variants]]".to_string(), variants), ("seeds".to_string(), seeds)];
    factors.extend(
        grid.iter()
            .map(|(name, values)| (format!("[grid] {name}"), values.len())),
    );
    let runs = (factors.iter()).try_fold(1usize, |n, (_, k)| n.checked_mul((*k).max(1)));
    if runs.is_none_or(|n| n > MAX_RUNS) {
        let sizes: Vec<String> = factors.iter().map(|(name, k)| format!("{name}: {k}")).collect();
        bail!(
            "the sweep asks for {} runs ({}), more than the {MAX_RUNS} one sweep may run; give fewer seeds or values, \
             or split it into several sweeps",
            runs.map_or("more than 2^64".to_string(), |n| n.to_string()),
            sizes.join(", ")
        );
    }
    Ok(())
}

/// The first value of `values` that appeared before it.
pub(super) fn first_repeat<T: std::hash::Hash + Eq>(values: &[T]) -> Option<&T> {
    let mut seen = std::collections::HashSet::new();
    values.iter().find(|v| !seen.insert(*v))
}

/// Refuses points that would share a run: the same seed listed twice, the same value twice in a
/// grid, or labels that become one directory name once sanitized (`a/b` and `a_b`).
pub(super) fn check_distinct(points: &[Point], seeds: &[u64]) -> Result<()> {
    if let Some(s) = first_repeat(seeds) {
        bail!("the seed {s} is listed twice; each seed is one run of each point, so list it once");
    }
    let mut seen: std::collections::HashMap<String, String> = Default::default();
    for p in points {
        if let Some(other) = seen.insert(p.dir_name(), p.label()) {
            bail!(
                "the points `{other}` and `{}` would share the run directory `{}`: give each value and label once, \
                 and labels that differ in more than /, \\ or spaces",
                p.label(),
                p.dir_name()
            );
        }
    }
    Ok(())
}

/// Every combination: variants × grid × seeds, in that nesting.
pub(super) fn expand(
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
