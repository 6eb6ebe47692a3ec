//! Costs matched by construction: solve one or two integer sizes of a config (`d_ff`,
//! `rank`, `layers`, …) so that its parameters, its forward FLOPs per token, or both, match
//! another config's within a stated tolerance. `resmem count --match` and experiment files'
//! `match` tables both go through [`solve`].

use crate::count::try_model;
use crate::{ModelConfig, ModelError, Result};
use serde::{Deserialize, Serialize};

/// A cost a match can hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Cost {
    Params,
    Flops,
}

impl std::str::FromStr for Cost {
    type Err = ModelError;
    fn from_str(s: &str) -> Result<Cost> {
        match s.trim() {
            "params" => Ok(Cost::Params),
            "flops" => Ok(Cost::Flops),
            other => Err(ModelError::Config(format!(
                "`{other}` is not a cost to hold; use params, flops or both"
            ))),
        }
    }
}

/// A config's costs: parameters as built, and forward FLOPs per token at T (2 per
/// multiply-add, `count::try_model`), the two numbers every sweep summary reports.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Costs {
    pub params: f64,
    pub flops_per_token: f64,
}

impl Costs {
    pub fn of(model: &ModelConfig, seq_len: usize) -> Result<Costs> {
        let params = try_model(model)?.params as f64;
        let mut at_t = model.clone();
        at_t.set_context(seq_len);
        let flops_per_token = try_model(&at_t)?.flops_per_token(seq_len);
        Ok(Costs {
            params,
            flops_per_token,
        })
    }

    fn get(&self, cost: Cost) -> f64 {
        match cost {
            Cost::Params => self.params,
            Cost::Flops => self.flops_per_token,
        }
    }

    /// The largest relative deviation from `target` over the held costs.
    pub fn error(&self, target: &Costs, hold: &[Cost]) -> f64 {
        hold.iter()
            .map(|&c| (self.get(c) / target.get(c) - 1.0).abs())
            .fold(0.0, f64::max)
    }
}

/// What [`solve`] found.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Solution {
    /// The solved sizes, in the order asked.
    pub values: Vec<(String, u64)>,
    pub costs: Costs,
    pub target: Costs,
    /// Solved over target, per cost.
    pub params_ratio: f64,
    pub flops_ratio: f64,
    /// The largest deviation over the held costs.
    pub error: f64,
}

/// The config with the integer `key` set to `value`; an error names a key the architecture
/// does not have.
pub fn with_size(model: &ModelConfig, key: &str, value: u64) -> Result<ModelConfig> {
    let mut table = toml::Table::try_from(model).map_err(|e| ModelError::Config(e.to_string()))?;
    match table.get(key) {
        Some(toml::Value::Integer(_)) => {}
        Some(_) => {
            return Err(ModelError::Config(format!(
                "{key} is not a size that can be solved for"
            )))
        }
        None => {
            return Err(ModelError::Config(format!(
                "{} models have no {key} to solve for",
                model.arch()
            )))
        }
    }
    let value = i64::try_from(value).map_err(|_| ModelError::Config(format!("{key} = {value} is too large")))?;
    table.insert(key.to_string(), toml::Value::Integer(value));
    table
        .try_into()
        .map_err(|e: toml::de::Error| ModelError::Config(e.to_string()))
}

fn size(model: &ModelConfig, key: &str) -> Result<u64> {
    let table = toml::Table::try_from(model).map_err(|e| ModelError::Config(e.to_string()))?;
    match table.get(key) {
        Some(toml::Value::Integer(v)) => Ok((*v).max(1) as u64),
        _ => Err(ModelError::Config(format!(
            "{} models have no {key} to solve for",
            model.arch()
        ))),
    }
}

/// The costs of `model` with `key` at `value`, or None where that config is invalid or its
/// counts overflow.
fn costs_at(model: &ModelConfig, key: &str, value: u64, seq_len: usize) -> Option<(ModelConfig, Costs)> {
    let m = with_size(model, key, value).ok()?;
    m.validate().ok()?;
    let c = Costs::of(&m, seq_len).ok()?;
    Some((m, c))
}

/// Candidate values of one key: 1 to 32× its current value (at least 64), in order. Wide
/// enough to match a dense core to a hash-table model's parameters (the small hybrid needs the
/// small RMT's D_FF 21× larger); each candidate is one count, cheap.
fn range(model: &ModelConfig, key: &str) -> Result<std::ops::RangeInclusive<u64>> {
    let start = size(model, key)?;
    let end = start.saturating_mul(32).max(64);
    if end > MAX_SCAN {
        return Err(ModelError::Config(format!(
            "solving {key} from {start} would scan its values up to {end} (32× the start), past the {MAX_SCAN} \
             a solve scans: start from a {key} nearer the answer"
        )));
    }
    Ok(1..=end)
}

/// The most values of one size a solve scans, so that a start given as 10⁸ is refused at once
/// rather than scanned for hours: 32× the start must stay under it.
const MAX_SCAN: u64 = 1 << 20;

/// Solves `keys` (one or two) of `model` so that the `hold` costs match `target`'s at T =
/// `seq_len`, each within `tolerance` (relative): the closest match, and of equally close ones
/// the one that changes the sizes least.
/// Every candidate is a valid config; with two keys, the first is scanned and the second found
/// by bisection on the first held cost, which grows with every size. Fails, with the closest it
/// found, where no candidate is in tolerance.
pub fn solve(
    model: &ModelConfig,
    target: &ModelConfig,
    seq_len: usize,
    hold: &[Cost],
    keys: &[String],
    tolerance: f64,
) -> Result<(ModelConfig, Solution)> {
    if hold.is_empty() {
        return Err(ModelError::Config("hold at least one of params, flops".into()));
    }
    if keys.is_empty() || keys.len() > 2 {
        return Err(ModelError::Config(format!(
            "solve for one or two sizes (e.g. d_ff, or d_ff and rank), not {}",
            keys.len()
        )));
    }
    if hold.len() > keys.len() {
        return Err(ModelError::Config(format!(
            "holding {} costs needs as many sizes to solve for; name a second, e.g. `d_ff,rank`",
            hold.len()
        )));
    }
    let goal = Costs::of(target, seq_len)?;
    let start: Vec<f64> = keys
        .iter()
        .map(|k| size(model, k).map(|v| v as f64))
        .collect::<Result<_>>()?;
    // The smallest error wins; of equal errors, the smallest change of the sizes (log scale).
    let score = |values: &[u64], e: f64| {
        (
            e,
            values
                .iter()
                .zip(&start)
                .map(|(&v, s)| (v as f64 / s).ln().abs())
                .sum::<f64>(),
        )
    };
    // (score, error, values, config, costs) of the best candidate so far.
    type Candidate = ((f64, f64), f64, Vec<u64>, ModelConfig, Costs);
    let mut best: Option<Candidate> = None;
    let mut consider = |values: Vec<u64>, m: ModelConfig, c: Costs| {
        let e = c.error(&goal, hold);
        let sc = score(&values, e);
        // Errors equal to rounding are ties.
        let better = |b: &(f64, f64)| match (sc.0 - b.0).abs() <= 1e-12 {
            true => sc.1 < b.1,
            false => sc.0 < b.0,
        };
        if best.as_ref().is_none_or(|b| better(&b.0)) {
            best = Some((sc, e, values, m, c));
        }
    };
    let first = &keys[0];
    for v in range(model, first)? {
        let Some((m1, c1)) = costs_at(model, first, v, seq_len) else {
            continue;
        };
        match keys.get(1) {
            None => consider(vec![v], m1, c1),
            Some(second) => {
                // The smallest value whose first held cost reaches the goal, and its neighbour.
                let r = range(&m1, second)?;
                let (mut lo, mut hi) = (*r.start(), *r.end());
                while lo < hi {
                    let mid = lo + (hi - lo) / 2;
                    match costs_at(&m1, second, mid, seq_len) {
                        Some((_, c)) if c.get(hold[0]) >= goal.get(hold[0]) => hi = mid,
                        _ => lo = mid + 1,
                    }
                }
                for w in [lo.saturating_sub(1).max(1), lo] {
                    if let Some((m2, c2)) = costs_at(&m1, second, w, seq_len) {
                        consider(vec![v, w], m2, c2);
                    }
                }
            }
        }
    }
    let Some((_, error, values, solved, costs)) = best else {
        return Err(ModelError::Config(format!(
            "no valid config for any value of {}",
            keys.join(" and ")
        )));
    };
    let named: Vec<String> = keys.iter().zip(&values).map(|(k, v)| format!("{k} = {v}")).collect();
    if error > tolerance {
        return Err(ModelError::Config(format!(
            "solving {} cannot hold {} within {:.1}%: the closest, {}, is {:.2}% off (parameters {:.3}×, FLOPs per \
             token {:.3}×); solve for another size, or widen the tolerance",
            keys.join(" and "),
            hold.iter()
                .map(|c| format!("{c:?}").to_lowercase())
                .collect::<Vec<_>>()
                .join(" and "),
            100.0 * tolerance,
            named.join(", "),
            100.0 * error,
            costs.params / goal.params,
            costs.flops_per_token / goal.flops_per_token
        )));
    }
    Ok((
        solved,
        Solution {
            values: keys.iter().cloned().zip(values).collect(),
            costs,
            target: goal,
            params_ratio: costs.params / goal.params,
            flops_ratio: costs.flops_per_token / goal.flops_per_token,
            error,
        },
    ))
}
