//! Causal multi-head attention in f32 (SPEC §1): softmax(scale·q·kᵀ + bias + causal mask)·v per
//! head, where the bias is ALiBi's `−slope_h·(i − j)` when it is on and 0 otherwise (SPEC §2a).

use crate::gpu::{grid_1d, AsArg, GpuBackend, GpuTensor};

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AttentionDims {
    pub b: usize,
    pub t: usize,
    pub h: usize,
    pub dh: usize,
    /// Multiplies q·k: 1/sqrt(Dh), divided by (layer + 1) when logit scaling by depth is on.
    pub scale: f32,
    /// Adds ALiBi's position bias after the scale (SPEC §2a): `−2^(−8(h+1)/H)·(i − j)`.
    pub alibi: bool,
}

impl AttentionDims {
    /// ALiBi's slope of head `h` (0-based), or 0 when ALiBi is off.
    pub fn slope(&self, h: usize) -> f64 {
        if self.alibi {
            (-8.0 * (h + 1) as f64 / self.h as f64).exp2()
        } else {
            0.0
        }
    }
}

impl AttentionDims {
    fn check(&self, qkv: usize, out: usize, att: usize) {
        let c = self.h * self.dh;
        assert_eq!(
            qkv,
            self.b * self.t * 3 * c,
            "attention: qkv has {qkv} values for {self:?}"
        );
        assert_eq!(out, self.b * self.t * c, "attention: out has {out} values for {self:?}");
        assert_eq!(
            att,
            self.b * self.h * self.t * self.t,
            "attention: att has {att} values for {self:?}"
        );
    }
}

#[cfg(feature = "cpu")]
mod cpu_twin {
    use super::*;
    use crate::ops::Scalar;
    use rayon::prelude::*;

    pub fn cpu_forward<T: Scalar>(out: &mut [T], att: &mut [T], qkv: &[T], d: AttentionDims) {
        d.check(qkv.len(), out.len(), att.len());
        let (tt, c) = (d.t, d.h * d.dh);
        let scale = T::of(d.scale as f64);
        out.par_chunks_mut(tt * c)
            .zip(att.par_chunks_mut(d.h * tt * tt))
            .enumerate()
            .for_each(|(b, (out, att))| {
                let at = |t: usize, h: usize, part: usize| (b * tt + t) * 3 * c + part * c + h * d.dh;
                for h in 0..d.h {
                    for t in 0..tt {
                        let row = &mut att[(h * tt + t) * tt..(h * tt + t + 1) * tt];
                        let q = &qkv[at(t, h, 0)..at(t, h, 0) + d.dh];
                        let slope = T::of(d.slope(h));
                        for s in 0..=t {
                            let k = &qkv[at(s, h, 1)..at(s, h, 1) + d.dh];
                            let bias = -slope * T::of((t - s) as f64);
                            row[s] = q.iter().zip(k).map(|(&a, &b)| a * b).sum::<T>() * scale + bias;
                        }
                        let mx = row[..=t].iter().copied().fold(T::neg_infinity(), T::max);
                        let mut sum = T::zero();
                        for a in &mut row[..=t] {
                            *a = (*a - mx).exp();
                            sum = sum + *a;
                        }
                        for a in &mut row[..=t] {
                            *a = *a / sum;
                        }
                        row[t + 1..].fill(T::zero());
                        for dd in 0..d.dh {
                            out[t * c + h * d.dh + dd] = (0..=t).map(|s| row[s] * qkv[at(s, h, 2) + dd]).sum();
                        }
                    }
                }
            });
    }

    pub fn cpu_backward<T: Scalar>(dqkv: &mut [T], dpre: &mut [T], dout: &[T], qkv: &[T], att: &[T], d: AttentionDims) {
        d.check(qkv.len(), dout.len(), att.len());
        let (tt, c) = (d.t, d.h * d.dh);
        let scale = T::of(d.scale as f64);
        dqkv.par_chunks_mut(tt * 3 * c)
            .zip(dpre.par_chunks_mut(d.h * tt * tt))
            .enumerate()
            .for_each(|(b, (dqkv, dpre))| {
                let at = |t: usize, h: usize, part: usize| (b * tt + t) * 3 * c + part * c + h * d.dh;
                let local = |t: usize, h: usize, part: usize| t * 3 * c + part * c + h * d.dh;
                let att = &att[b * d.h * tt * tt..];
                let dout = &dout[b * tt * c..];
                for h in 0..d.h {
                    // Per query row t: the logits' gradient, then dq.
                    for t in 0..tt {
                        let arow = (h * tt + t) * tt;
                        let go = &dout[t * c + h * d.dh..t * c + (h + 1) * d.dh];
                        let datt: Vec<T> = (0..=t)
                            .map(|s| {
                                go.iter()
                                    .zip(&qkv[at(s, h, 2)..at(s, h, 2) + d.dh])
                                    .map(|(&a, &b)| a * b)
                                    .sum()
                            })
                            .collect();
                        let tmp: T = (0..=t).map(|s| att[arow + s] * datt[s]).sum();
                        for s in 0..tt {
                            dpre[arow + s] = if s <= t {
                                att[arow + s] * (datt[s] - tmp)
                            } else {
                                T::zero()
                            };
                        }
                        for dd in 0..d.dh {
                            let acc: T = (0..=t).map(|s| dpre[arow + s] * qkv[at(s, h, 1) + dd]).sum();
                            dqkv[local(t, h, 0) + dd] = acc * scale;
                        }
                    }
                    // Per key row s: dk and dv over the query rows t ≥ s.
                    for s in 0..tt {
                        for dd in 0..d.dh {
                            let (mut dk, mut dv) = (T::zero(), T::zero());
                            for t in s..tt {
                                let a = (h * tt + t) * tt + s;
                                dk = dk + dpre[a] * qkv[at(t, h, 0) + dd];
                                dv = dv + att[a] * dout[t * c + h * d.dh + dd];
                            }
                            dqkv[local(s, h, 1) + dd] = dk * scale;
                            dqkv[local(s, h, 2) + dd] = dv;
                        }
                    }
                }
            });
    }
}
#[cfg(feature = "cpu")]
pub use cpu_twin::*;

fn params(d: &AttentionDims) -> [u32; 6] {
    [
        d.b as u32,
        d.t as u32,
        d.h as u32,
        d.dh as u32,
        d.scale.to_bits(),
        d.alibi as u32,
    ]
}

pub fn gpu_forward(gpu: &GpuBackend, out: &GpuTensor, att: &GpuTensor, qkv: &GpuTensor, d: AttentionDims) {
    d.check(qkv.len, out.len, att.len);
    let grid = grid_1d(d.b * d.h * d.t, 256);
    gpu.dispatch(
        "attention",
        "attention_forward",
        &params(&d),
        &[out.arg(), att.arg(), qkv.arg()],
        grid,
    );
}

pub fn gpu_backward(
    gpu: &GpuBackend,
    dqkv: &GpuTensor,
    dpre: &GpuTensor,
    dout: &GpuTensor,
    qkv: &GpuTensor,
    att: &GpuTensor,
    d: AttentionDims,
) {
    d.check(qkv.len, dout.len, att.len);
    assert_eq!(dpre.len, att.len, "attention: dpre must match att");
    let args = [dqkv.arg(), dpre.arg(), dout.arg(), qkv.arg(), att.arg()];
    let grid = grid_1d(d.b * d.h * d.t, 256);
    gpu.dispatch("attention", "attention_backward_query", &params(&d), &args, grid);
    gpu.dispatch("attention", "attention_backward_key", &params(&d), &args, grid);
}
