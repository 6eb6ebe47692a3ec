//! The curves' legend: what tells the runs apart, from the settings that differ across their
//! configs, or their directories' names.

use super::inputs::dir_name;
use super::runs::Run;
use anyhow::Result;
use models::RunConfig;

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
pub(super) fn legend_labels(runs: &[Run]) -> Result<Vec<String>> {
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
