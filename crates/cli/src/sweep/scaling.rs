//! `[scaling]`: loss against size for families of variants trained at a fixed number of
//! tokens per parameter, each family's power law fitted, and the parameter-efficiency
//! multiplier of the RMT paper's Figure 2: how many times its parameters the reference family
//! needs to reach another family's loss.
//!
//! - Each point trains round(tokens_per_param · parameters / (B · T)) steps, set before
//!   anything trains.
//! - Per family, ln L = a − α ln N is fitted by least squares to the per-size mean test loss
//!   over seeds, against parameters and against training FLOPs (3 × forward × tokens).
//! - The multiplier at a family's geometric-mean size N: the reference family's fitted size for
//!   the family's fitted loss there, over N.
//! - Intervals: 95% percentile bootstrap over seeds (the same resampled seeds for every family,
//!   2,000 resamples, a fixed generator). With few seeds they are rough; the summary says how
//!   many seeds they rest on.
//!
//! Why a pure power law and not L = E + A·N^−α: with 4 sizes the irreducible loss E is not
//! identified, and the multiplier only needs the curves where they were measured.

use super::flags::{resolved, set};
use super::points::Point;
use super::summary::PointSummary;
use anyhow::{bail, Result};
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

const RESAMPLES: usize = 2000;

/// `[scaling]` in an experiment file.
#[derive(Deserialize, Clone, Debug)]
#[serde(deny_unknown_fields)]
pub struct Declared {
    /// Training tokens per parameter at every point (Chinchilla's is about 20).
    pub tokens_per_param: f64,
    /// Each family's variants, by label: at least 3 sizes.
    pub families: BTreeMap<String, Vec<String>>,
    /// The family the others' losses are converted into parameters of.
    pub reference: String,
}

/// The summary's `scaling`.
#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct Scaling {
    pub tokens_per_param: f64,
    pub seeds: usize,
    pub families: Vec<Family>,
    pub multipliers: Vec<Multiplier>,
}

#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct Family {
    pub name: String,
    pub sizes: Vec<Size>,
    /// ln L = a − α ln N, against parameters and against training FLOPs.
    pub params_fit: PowerLaw,
    pub flops_fit: PowerLaw,
}

#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct Size {
    pub variant: String,
    pub params: f64,
    pub train_flops: f64,
    pub tokens: f64,
    pub mean_test_loss: f64,
    pub per_seed: Vec<f64>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct PowerLaw {
    pub a: f64,
    pub alpha: f64,
    /// The 95% bootstrap interval of α.
    pub alpha_low: f64,
    pub alpha_high: f64,
}

#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct Multiplier {
    pub family: String,
    pub reference: String,
    /// The family's geometric-mean size, where it is read.
    pub at_params: f64,
    /// The reference's parameters (training FLOPs) for the family's loss there, over the family's.
    pub params: f64,
    pub params_low: f64,
    pub params_high: f64,
    pub flops: f64,
    pub flops_low: f64,
    pub flops_high: f64,
}

impl Multiplier {
    /// "transformer needs 1.18× [1.11, 1.22] the parameters and … the training FLOPs of rmt for
    /// its loss", to `digits` decimals.
    pub fn sentence(&self, digits: usize) -> String {
        format!(
            "{} needs {:.d$}× [{:.d$}, {:.d$}] the parameters and {:.d$}× [{:.d$}, {:.d$}] the training FLOPs of {} for \
             its loss",
            self.reference,
            self.params,
            self.params_low,
            self.params_high,
            self.flops,
            self.flops_low,
            self.flops_high,
            self.family,
            d = digits
        )
    }
}

impl Declared {
    fn check(&self) -> Result<()> {
        if !(self.tokens_per_param.is_finite() && self.tokens_per_param > 0.0 && self.tokens_per_param <= 1e4) {
            bail!("[scaling] tokens_per_param must be a positive number of tokens, at most 10,000, e.g. 20");
        }
        if !self.families.contains_key(&self.reference) {
            bail!(
                "[scaling] the reference `{}` is not one of its families",
                self.reference
            );
        }
        if self.families.len() < 2 {
            bail!("[scaling] needs at least 2 families: the reference and one to compare with it");
        }
        for (name, variants) in &self.families {
            if variants.len() < 3 {
                bail!(
                    "[scaling] the family `{name}` has {} sizes; a power law needs at least 3",
                    variants.len()
                );
            }
        }
        Ok(())
    }

    fn family_of(&self, variant: &str) -> Option<&str> {
        self.families
            .iter()
            .find(|(_, v)| v.iter().any(|x| x == variant))
            .map(|(k, _)| k.as_str())
    }
}

fn variant_of(p: &Point) -> Option<&str> {
    p.settings.iter().find(|(k, _)| k == "variant").map(|(_, v)| v.as_str())
}

/// Sets every point's steps from its parameters, before anything trains.
pub(super) fn apply(d: &Declared, points: &mut [Point], out: &Path, given_steps: bool) -> Result<()> {
    d.check()?;
    if given_steps {
        bail!("[scaling] sets each point's steps from tokens_per_param; leave --steps and steps out");
    }
    for variants in d.families.values() {
        for v in variants {
            if !points.iter().any(|p| variant_of(p) == Some(v)) {
                bail!("[scaling]: `{v}` is not the label of one of the experiment's [[variants]]");
            }
        }
    }
    for p in points.iter_mut() {
        let Some(variant) = variant_of(p).map(str::to_string) else {
            bail!("[scaling] needs [[variants]]: each size a variant");
        };
        if d.family_of(&variant).is_none() {
            bail!("[scaling]: the variant `{variant}` is in no family; list it under [scaling.families]");
        }
        let (_, mut cfg) = resolved(p, out)?;
        cfg.set_vocab(crate::source::open(&cfg.data)?.vocab);
        let params = models::count::try_model(&cfg.model)?.params as f64;
        let per_step = (cfg.train.batch * cfg.data.seq_len()) as f64;
        let steps = (d.tokens_per_param * params / per_step).round().max(1.0);
        if steps > 1e7 {
            bail!("[scaling]: `{variant}` would train {steps} steps; lower tokens_per_param or the model's size");
        }
        set(&mut p.flags, "steps".into(), format!("{steps:.0}"));
    }
    Ok(())
}

/// ln y = a − α ln x by least squares over (x, y).
fn power_law(points: &[(f64, f64)]) -> (f64, f64) {
    let xy: Vec<(f64, f64)> = points.iter().map(|&(x, y)| (x.ln(), y.ln())).collect();
    let slope = super::trend::slope(&xy);
    let n = xy.len() as f64;
    let (mx, my) = (
        xy.iter().map(|p| p.0).sum::<f64>() / n,
        xy.iter().map(|p| p.1).sum::<f64>() / n,
    );
    (my - slope * mx, -slope)
}

/// The size the law (a, α) needs for the loss `loss`.
fn size_for(a: f64, alpha: f64, loss: f64) -> f64 {
    ((a - loss.ln()) / alpha).exp()
}

/// One size of a family as the fits read it.
struct Measured {
    params: f64,
    train_flops: f64,
    per_seed: Vec<f64>,
}

/// Fits, the multipliers, and nothing else: one bootstrap replicate's numbers.
struct Fitted {
    params: Vec<(f64, f64)>,
    flops: Vec<(f64, f64)>,
    multipliers: Vec<(f64, f64)>,
}

fn fit_all(families: &[(String, Vec<Measured>)], reference: usize, seeds: &[usize]) -> Fitted {
    let mean = |per_seed: &[f64]| seeds.iter().map(|&s| per_seed[s]).sum::<f64>() / seeds.len() as f64;
    let laws = |pick: &dyn Fn(&Measured) -> f64| -> Vec<(f64, f64)> {
        families
            .iter()
            .map(|(_, sizes)| power_law(&sizes.iter().map(|s| (pick(s), mean(&s.per_seed))).collect::<Vec<_>>()))
            .collect()
    };
    let params = laws(&|s| s.params);
    let flops = laws(&|s| s.train_flops);
    let multipliers = families
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != reference)
        .map(|(i, (_, sizes))| {
            let at = |k: &dyn Fn(&Measured) -> f64| {
                (sizes.iter().map(|s| k(s).ln()).sum::<f64>() / sizes.len() as f64).exp()
            };
            let ratio = |laws: &[(f64, f64)], x: f64| {
                let (a, alpha) = laws[i];
                let loss = (a - alpha * x.ln()).exp();
                size_for(laws[reference].0, laws[reference].1, loss) / x
            };
            (ratio(&params, at(&|s| s.params)), ratio(&flops, at(&|s| s.train_flops)))
        })
        .collect();
    Fitted {
        params,
        flops,
        multipliers,
    }
}

fn percentile(mut v: Vec<f64>, q: f64) -> f64 {
    v.retain(|x| x.is_finite());
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n => v[((q * (n - 1) as f64).round() as usize).min(n - 1)],
    }
}

/// The fits and multipliers from the finished points.
pub(super) fn compute(d: &Declared, points: &[Point], summaries: &[PointSummary]) -> Result<Scaling> {
    let mut seeds: Vec<String> = vec![];
    for p in points {
        if let Some((_, s)) = p.settings.iter().find(|(k, _)| k == "seed") {
            if !seeds.contains(s) {
                seeds.push(s.clone());
            }
        }
    }
    if seeds.len() < 2 {
        bail!("[scaling] needs at least 2 seeds for its intervals");
    }
    let mut families = vec![];
    let mut sizes_out = vec![];
    for (name, variants) in &d.families {
        let mut sizes = vec![];
        let mut shown = vec![];
        for v in variants {
            let mut per_seed = vec![];
            let mut first: Option<&PointSummary> = None;
            for seed in &seeds {
                let i = (0..points.len()).find(|&i| {
                    variant_of(&points[i]) == Some(v)
                        && points[i].settings.iter().any(|(k, x)| k == "seed" && x == seed)
                });
                let Some(s) = i.map(|i| &summaries[i]) else {
                    bail!("[scaling]: `{v}` has no point of seed {seed}");
                };
                let Some(loss) = s.test_loss.filter(|l| l.is_finite() && *l > 0.0) else {
                    bail!("[scaling]: {} has no test loss", s.label);
                };
                per_seed.push(loss);
                first.get_or_insert(s);
            }
            let Some(s) = first else { continue };
            let (Some(params), Some(fpt), Some(tokens)) = (s.params, s.flops_per_token, s.tokens) else {
                bail!("[scaling]: {} has no parameter or FLOP count", s.label);
            };
            let (params, tokens) = (params as f64, tokens as f64);
            // Training: the forward and a backward of twice its cost.
            let train_flops = 3.0 * fpt * tokens;
            let mean = per_seed.iter().sum::<f64>() / per_seed.len() as f64;
            shown.push(Size {
                variant: v.clone(),
                params,
                train_flops,
                tokens,
                mean_test_loss: mean,
                per_seed: per_seed.clone(),
            });
            sizes.push(Measured {
                params,
                train_flops,
                per_seed,
            });
        }
        families.push((name.clone(), sizes));
        sizes_out.push(shown);
    }
    let reference = families.iter().position(|(n, _)| *n == d.reference).unwrap_or(0);
    let all: Vec<usize> = (0..seeds.len()).collect();
    let point = fit_all(&families, reference, &all);
    let mut rng = rand_xoshiro::Xoshiro256PlusPlus::seed_from_u64(0x5CA1_1AB1E);
    let replicates: Vec<Fitted> = (0..RESAMPLES)
        .map(|_| {
            let pick: Vec<usize> = (0..seeds.len()).map(|_| rng.random_range(0..seeds.len())).collect();
            fit_all(&families, reference, &pick)
        })
        .collect();
    let interval = |f: &dyn Fn(&Fitted) -> f64| {
        let v: Vec<f64> = replicates.iter().map(f).collect();
        (percentile(v.clone(), 0.025), percentile(v, 0.975))
    };
    let out_families = families
        .iter()
        .zip(sizes_out)
        .enumerate()
        .map(|(i, ((name, _), sizes))| {
            let law = |get: fn(&Fitted) -> &Vec<(f64, f64)>| {
                let (a, alpha) = get(&point)[i];
                let (low, high) = interval(&|f| get(f)[i].1);
                PowerLaw {
                    a,
                    alpha,
                    alpha_low: low,
                    alpha_high: high,
                }
            };
            Family {
                name: name.clone(),
                sizes,
                params_fit: law(|f| &f.params),
                flops_fit: law(|f| &f.flops),
            }
        })
        .collect::<Vec<_>>();
    let others: Vec<usize> = (0..families.len()).filter(|&i| i != reference).collect();
    let multipliers = others
        .iter()
        .enumerate()
        .map(|(k, &i)| {
            let at = (families[i].1.iter().map(|s| s.params.ln()).sum::<f64>() / families[i].1.len() as f64).exp();
            let (pl, ph) = interval(&|f| f.multipliers[k].0);
            let (fl, fh) = interval(&|f| f.multipliers[k].1);
            Multiplier {
                family: families[i].0.clone(),
                reference: d.reference.clone(),
                at_params: at,
                params: point.multipliers[k].0,
                params_low: pl,
                params_high: ph,
                flops: point.multipliers[k].1,
                flops_low: fl,
                flops_high: fh,
            }
        })
        .collect();
    Ok(Scaling {
        tokens_per_param: d.tokens_per_param,
        seeds: seeds.len(),
        families: out_families,
        multipliers,
    })
}

pub fn print(s: &Option<Scaling>) {
    let Some(s) = s else { return };
    out!(
        "scaling at {} tokens per parameter, {} seeds; ln L = a − α ln N fitted to each size's mean test loss \
         (95% bootstrap intervals over seeds)",
        s.tokens_per_param,
        s.seeds
    );
    for f in &s.families {
        out!(
            "  {}: α {:.4} [{:.4}, {:.4}] against parameters, {:.4} [{:.4}, {:.4}] against training FLOPs",
            f.name,
            f.params_fit.alpha,
            f.params_fit.alpha_low,
            f.params_fit.alpha_high,
            f.flops_fit.alpha,
            f.flops_fit.alpha_low,
            f.flops_fit.alpha_high
        );
        for z in &f.sizes {
            out!(
                "    {:<24} {:>12} parameters {:>10.3e} FLOPs  test loss {:.4}",
                z.variant,
                models::count::thousands(z.params as u64),
                z.train_flops,
                z.mean_test_loss
            );
        }
    }
    for m in &s.multipliers {
        out!(
            "  {} (read at {}'s geometric-mean size, {} parameters)",
            m.sentence(3),
            m.family,
            models::count::thousands(m.at_params.round() as u64)
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_known_law_and_a_known_multiplier_are_recovered() {
        // L = 10·N^−0.1 for the reference; the other family reaches at N what the reference
        // reaches at 2N: L = 10·(2N)^−0.1. Its multiplier is 2 at any size, the exponent 0.1.
        let sizes = [1e5, 2e5, 4e5, 8e5];
        let family = |scale: f64| -> Vec<Measured> {
            sizes
                .iter()
                .map(|&n| Measured {
                    params: n,
                    train_flops: 6.0 * n * n,
                    per_seed: vec![10.0 * (scale * n).powf(-0.1); 2],
                })
                .collect()
        };
        let families = vec![
            ("rmt".to_string(), family(2.0)),
            ("transformer".to_string(), family(1.0)),
        ];
        let f = fit_all(&families, 1, &[0, 1]);
        assert!((f.params[1].1 - 0.1).abs() < 1e-12 && (f.params[1].0 - 10f64.ln()).abs() < 1e-12);
        assert!((f.multipliers[0].0 - 2.0).abs() < 1e-9, "{}", f.multipliers[0].0);
        // Against FLOPs ∝ N²: α halves, and the same loss costs the reference 2² = 4× the FLOPs.
        assert!((f.flops[1].1 - 0.05).abs() < 1e-12);
        assert!((f.multipliers[0].1 - 4.0).abs() < 1e-9, "{}", f.multipliers[0].1);
        // Hand-computed fit: (1, e^1), (e, e^0.5) → ln y = 1 − 0.5 ln x.
        let (a, alpha) = power_law(&[(1.0, 1f64.exp()), (1f64.exp(), 0.5f64.exp())]);
        assert!((a - 1.0).abs() < 1e-12 && (alpha - 0.5).abs() < 1e-12);
        assert_eq!(percentile(vec![3.0, 1.0, 2.0, f64::NAN], 0.5), 2.0);
    }
}
