//! `[tune]`: each arm at its own best settings. Before the sweep's runs, every arm (a point
//! without its seed) trains a small grid (the learning rate, say, and weight decay where it
//! matters) on tuning seeds that the comparisons never use; the setting with the lowest mean
//! final validation loss over those seeds is the one the arm's runs then train with. The whole
//! grid and the choice go into the summary.

use super::flags::{check_flag, flag_value, set, setting_name, Flags};
use super::points::Point;
use super::summary::summarize;
use super::train_point;
use anyhow::{bail, Result};
use serde::{Deserialize, Serialize};
use std::path::Path;
use std::sync::atomic::AtomicBool;

/// Where the tuning runs live, inside the sweep's directory.
pub const TUNE_DIR: &str = "tune";

/// `[tune]` in an experiment file: `seeds`, and each tuned flag with its values.
#[derive(Deserialize, Clone, Debug, Default)]
pub struct Declared {
    pub seeds: Vec<u64>,
    #[serde(flatten)]
    pub grid: toml::Table,
}

/// One arm's tuning, as the summary keeps it.
#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct Tuned {
    pub arm: String,
    pub rows: Vec<TuneRow>,
    /// The chosen settings, as flags the arm's runs train with.
    pub chosen: Vec<(String, String)>,
    /// Whether a chosen value is the first or last of its list: the best may lie beyond it.
    pub at_edge: bool,
}

#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct TuneRow {
    pub settings: Vec<(String, String)>,
    /// Final validation loss per tuning seed (null where a run failed or diverged).
    pub per_seed: Vec<Option<f64>>,
    /// Their mean; null unless every seed has one.
    pub mean: Option<f64>,
}

/// The tuned flags with their values, every combination, checked as `resmem train` flags.
fn combinations(d: &Declared, swept: &[String], main_seeds: &[u64]) -> Result<Vec<Vec<(String, String)>>> {
    if d.seeds.is_empty() {
        bail!("[tune] needs its own seeds, e.g. seeds = [100, 101], which the comparisons never use");
    }
    if let Some(s) = d.seeds.iter().find(|s| main_seeds.contains(s)) {
        bail!("[tune] seed {s} is also a seed of the sweep; tuning seeds must be others, so that nothing is chosen on the runs compared");
    }
    let mut combos: Vec<Vec<(String, String)>> = vec![vec![]];
    for (name, values) in &d.grid {
        let flag = check_flag(name, "[tune]")?;
        if swept.iter().any(|s| super::flags::flag_name(s) == flag) {
            bail!("[tune] {name} is also swept in [grid]; tune it or sweep it");
        }
        let toml::Value::Array(values) = values else {
            bail!("[tune] {name} must be a list of values, e.g. {name} = [0.003, 0.01, 0.03]");
        };
        if values.is_empty() {
            bail!("[tune] {name} has no values");
        }
        let values = values.iter().map(flag_value).collect::<Result<Vec<_>>>()?;
        combos = combos
            .iter()
            .flat_map(|c| {
                let flag = &flag;
                values.iter().map(move |v| {
                    let mut c = c.clone();
                    c.push((flag.clone(), v.clone()));
                    c
                })
            })
            .collect();
    }
    if combos[0].is_empty() {
        bail!("[tune] names no flag to tune; add one, e.g. lr = [0.003, 0.01, 0.03]");
    }
    Ok(combos)
}

/// Checks the declaration before anything trains: its seeds, its flags, and no flag that a
/// variant sets itself.
pub fn check(d: &Declared, swept: &[String], main_seeds: &[u64], variants: &[(String, Flags)]) -> Result<()> {
    let combos = combinations(d, swept, main_seeds)?;
    for (flag, _) in &combos[0] {
        if let Some((label, _)) = variants.iter().find(|(_, flags)| flags.iter().any(|(f, _)| f == flag)) {
            bail!("[tune] tunes --{flag}, which the variant `{label}` sets itself; drop one of them");
        }
    }
    Ok(())
}

/// Trains every arm's tuning grid, then sets each arm's chosen flags on its points. Err when a
/// signal stops it, or where an arm has no usable result.
pub fn run(
    d: &Declared,
    points: &mut [Point],
    out: &Path,
    swept: &[String],
    main_seeds: &[u64],
    stop: &AtomicBool,
) -> Result<Vec<Tuned>> {
    let combos = combinations(d, swept, main_seeds)?;
    // The arms, in order: each point without its seed.
    let mut arms: Vec<(String, Point)> = vec![];
    for p in points.iter() {
        let arm = p.arm_label();
        if !arms.iter().any(|(a, _)| *a == arm) {
            arms.push((arm, p.clone()));
        }
    }
    let total = arms.len() * combos.len() * d.seeds.len();
    let mut done = 0;
    let mut tuned = vec![];
    for (arm, template) in &arms {
        let mut rows = vec![];
        for combo in &combos {
            let mut per_seed = vec![];
            for &seed in &d.seeds {
                let mut p = template.clone();
                p.settings.retain(|(k, _)| k != "seed");
                for (flag, value) in combo {
                    p.settings.push((setting_name(flag), value.clone()));
                    set(&mut p.flags, flag.clone(), value.clone());
                }
                p.settings.push(("seed".into(), seed.to_string()));
                set(&mut p.flags, "seed".into(), seed.to_string());
                let tune_out = out.join(TUNE_DIR);
                let dir = tune_out.join(p.dir_name());
                done += 1;
                let status = train_point(&p, &dir, &tune_out, &format!("[tune {done}/{total}]"), stop)?;
                let loss = summarize(&p, &dir, status)?.final_val_loss.filter(|l| l.is_finite());
                per_seed.push(loss);
            }
            let mean = per_seed
                .iter()
                .copied()
                .sum::<Option<f64>>()
                .map(|s| s / per_seed.len() as f64);
            rows.push(TuneRow {
                settings: combo.iter().map(|(f, v)| (setting_name(f), v.clone())).collect(),
                per_seed,
                mean,
            });
        }
        let best = (0..rows.len()).filter(|&i| rows[i].mean.is_some()).min_by(|&i, &j| {
            rows[i]
                .mean
                .unwrap_or(f64::INFINITY)
                .total_cmp(&rows[j].mean.unwrap_or(f64::INFINITY))
        });
        let Some(best) = best else {
            bail!(
                "[tune]: no setting of the arm `{arm}` finished with a validation loss on every tuning seed (see {}); \
                 widen the grid or set eval_every",
                out.join(TUNE_DIR).display()
            );
        };
        let at_edge = combos[best].iter().enumerate().any(|(k, (_, v))| {
            let values: Vec<&String> = combos.iter().map(|c| &c[k].1).collect();
            values.first() == Some(&v) || values.last() == Some(&v)
        }) && combos.len() > 1;
        tuned.push(Tuned {
            arm: arm.clone(),
            rows,
            chosen: combos[best].clone(),
            at_edge,
        });
    }
    for p in points.iter_mut() {
        let arm = p.arm_label();
        if let Some(t) = tuned.iter().find(|t| t.arm == arm) {
            for (flag, value) in &t.chosen {
                set(&mut p.flags, flag.clone(), value.clone());
            }
        }
    }
    Ok(tuned)
}

/// The tuning table: each arm's grid, mean loss over the tuning seeds, and its choice.
pub fn print(tuned: &[Tuned], seeds: &[u64]) {
    if tuned.is_empty() {
        return;
    }
    let seeds: Vec<String> = seeds.iter().map(u64::to_string).collect();
    out!(
        "tuning: final validation loss, mean over tuning seeds {} (never compared)",
        seeds.join(", ")
    );
    for t in tuned {
        let chosen: Vec<String> = t
            .chosen
            .iter()
            .map(|(f, v)| format!("{}={v}", setting_name(f)))
            .collect();
        out!(
            "{}: chose {}{}",
            if t.arm.is_empty() { "(all points)" } else { &t.arm },
            chosen.join(" "),
            if t.at_edge {
                " (at the grid's edge: the best may lie beyond it; widen the grid)"
            } else {
                ""
            }
        );
        for r in &t.rows {
            let settings: Vec<String> = r.settings.iter().map(|(k, v)| format!("{k}={v}")).collect();
            let per: Vec<String> = r
                .per_seed
                .iter()
                .map(|l| l.map_or("-".into(), |l| format!("{l:.4}")))
                .collect();
            out!(
                "  {:<30} {:>9}   per seed {}",
                settings.join(" "),
                r.mean.map_or("-".into(), |m| format!("{m:.4}")),
                per.join(" ")
            );
        }
    }
}
