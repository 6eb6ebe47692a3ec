//! Direct logit attribution: each part of the last residual's share of one logit (or of the
//! difference of two), through the read-out with the final norm's scale frozen at its value on
//! the whole residual, as TransformerLens's `apply_ln_to_stack` freezes it. With the scale
//! frozen the read-out is linear, so the parts' shares add up to the logit; the final norms
//! here have a gain and no bias, so there is no bias term to add.

use crate::params::ParamLayout;
use crate::{ModelError, Result};
use engine::NormKind;

/// How a model reads its logits from the last residual.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ReadOut {
    /// logits = W_U · Norm(Σ_j x_j): a vector residual (`streams` 1) or hyper-connections'
    /// streams summed first.
    Norm {
        width: usize,
        streams: usize,
        norm: NormKind,
        eps: f32,
    },
    /// logits = W_U · Σ_j Norm(x_j): each of hyper-connections' streams normed on its own.
    EachNormed {
        width: usize,
        streams: usize,
        norm: NormKind,
        eps: f32,
    },
    /// logits = W_U · (r_U ·₁ Norm(X)): an RMT's D_k×D_v residual read along its `keys` read-out
    /// keys r_U.
    Keys {
        dk: usize,
        dv: usize,
        keys: usize,
        norm: NormKind,
        eps: f32,
    },
}

/// The weights attribution reads, by the names the models give them.
pub struct Weights(pub std::collections::BTreeMap<String, Vec<f64>>);

impl Weights {
    /// Reads the weights named `names` that `layout` has (the others are left out).
    pub async fn read<B: engine::Backend>(
        be: &B,
        layout: &ParamLayout,
        params: &B::Tensor,
        names: &[String],
    ) -> Result<Self> {
        let mut all = std::collections::BTreeMap::new();
        for spec in layout.specs.iter().filter(|s| names.contains(&s.name)) {
            let values = be.read_range(params, spec.offset, spec.len()).await?;
            all.insert(spec.name.clone(), values.iter().map(|&x| f64::from(x)).collect());
        }
        Ok(Self(all))
    }

    pub fn get(&self, name: &str) -> Result<&[f64]> {
        (self.0.get(name).map(Vec::as_slice))
            .ok_or_else(|| ModelError::Config(format!("the model has no weight `{name}`")))
    }
}

/// Mean (0 for RMSNorm) and 1/std of `x`, as the norm ops compute them, in f64.
fn stats(x: &[f64], norm: NormKind, eps: f32) -> (f64, f64) {
    let n = x.len() as f64;
    let mean = match norm {
        NormKind::LayerNorm => x.iter().sum::<f64>() / n,
        NormKind::RmsNorm => 0.0,
    };
    let var = x.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / n;
    (mean, 1.0 / (var + f64::from(eps)).sqrt())
}

/// gain ⊙ (c − its mean) · rstd: the norm, with the whole residual's scale `rstd`, applied to one
/// part c (a part's own mean is its share of the whole's).
fn frozen(c: &[f64], gain: &[f64], norm: NormKind, rstd: f64) -> Vec<f64> {
    let mean = match norm {
        NormKind::LayerNorm => c.iter().sum::<f64>() / c.len() as f64,
        NormKind::RmsNorm => 0.0,
    };
    c.iter().zip(gain).map(|(v, g)| g * (v - mean) * rstd).collect()
}

/// The read-out of one token, frozen at its last residual `whole`: a linear map from a part of
/// that residual to the head's input, then the unembedding rows of a logit or a difference.
pub struct Frozen {
    read: ReadOut,
    gain: Vec<f64>,
    r_u: Vec<f64>,
    /// W_U[target] − W_U[versus] (or W_U[target]).
    direction: Vec<f64>,
    /// rstd of the whole, or of each stream.
    rstd: Vec<f64>,
}

impl Frozen {
    pub fn new(read: ReadOut, weights: &Weights, whole: &[f32], target: u32, versus: Option<u32>) -> Result<Self> {
        let whole: Vec<f64> = whole.iter().map(|&x| f64::from(x)).collect();
        let w_u = weights.get("w_u")?;
        let width = match read {
            ReadOut::Norm { width, .. } | ReadOut::EachNormed { width, .. } => width,
            ReadOut::Keys { keys, dv, .. } => keys * dv,
        };
        let vocab = w_u.len() / width;
        let row = |v: u32| -> Result<&[f64]> {
            match (v as usize) < vocab {
                true => Ok(&w_u[v as usize * width..(v as usize + 1) * width]),
                false => Err(ModelError::Config(format!(
                    "token {v} is past the vocabulary of {vocab}"
                ))),
            }
        };
        let direction: Vec<f64> = match versus {
            Some(b) => row(target)?.iter().zip(row(b)?).map(|(a, b)| a - b).collect(),
            None => row(target)?.to_vec(),
        };
        let rstd = match read {
            ReadOut::Norm { width, norm, eps, .. } => vec![stats(&sum_streams(&whole, width), norm, eps).1],
            ReadOut::EachNormed { width, norm, eps, .. } => {
                whole.chunks(width).map(|x| stats(x, norm, eps).1).collect()
            }
            ReadOut::Keys { norm, eps, .. } => vec![stats(&whole, norm, eps).1],
        };
        let r_u = match read {
            ReadOut::Keys { .. } => weights.get("r_u")?.to_vec(),
            ReadOut::Norm { .. } | ReadOut::EachNormed { .. } => Vec::new(),
        };
        Ok(Self {
            read,
            gain: weights.get("lnf")?.to_vec(),
            r_u,
            direction,
            rstd,
        })
    }

    /// The logit (or difference) that `part` of the last residual (as many values as it) makes.
    pub fn share(&self, part: &[f64]) -> f64 {
        let y = match self.read {
            ReadOut::Norm { width, norm, .. } => frozen(&sum_streams(part, width), &self.gain, norm, self.rstd[0]),
            ReadOut::EachNormed { width, norm, .. } => {
                let mut y = vec![0.0; width];
                for (x, rstd) in part.chunks(width).zip(&self.rstd) {
                    let n = frozen(x, &self.gain, norm, *rstd);
                    y.iter_mut().zip(n).for_each(|(y, n)| *y += n);
                }
                y
            }
            ReadOut::Keys { dk, dv, keys, norm, .. } => {
                let n = frozen(part, &self.gain, norm, self.rstd[0]);
                let mut y = vec![0.0; keys * dv];
                for k in 0..keys {
                    for i in 0..dk {
                        let r = self.r_u[k * dk + i];
                        let (y, n) = (&mut y[k * dv..(k + 1) * dv], &n[i * dv..(i + 1) * dv]);
                        y.iter_mut().zip(n).for_each(|(y, n)| *y += r * n);
                    }
                }
                y
            }
        };
        y.iter().zip(&self.direction).map(|(y, d)| y * d).sum()
    }
}

/// Σ_j x_j of `x`'s streams of `width` values (x itself when it is one).
fn sum_streams(x: &[f64], width: usize) -> Vec<f64> {
    let mut s = vec![0.0; width];
    for stream in x.chunks(width) {
        s.iter_mut().zip(stream).for_each(|(s, x)| *s += x);
    }
    s
}
