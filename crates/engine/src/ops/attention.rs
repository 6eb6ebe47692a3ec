//! Causal multi-head attention in f32 (SPEC §1): softmax(scale·q·kᵀ + bias + causal mask)·v per
//! head, where the bias is ALiBi's `−slope_h·(i − j)` when it is on and 0 otherwise (SPEC §2a).

use crate::gpu::{grid_1d, AsArg, GpuBackend, GpuIndex, GpuTensor};

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
    fn check(&self, qkv: usize, out: usize, att: usize, doc_start: usize) {
        assert_eq!(
            doc_start,
            self.b * self.t,
            "attention: doc_start has {doc_start} values for {self:?}"
        );
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

    /// The first key query `t` (at flat row `row`) may see: its document's start, at most `t`.
    fn first_key(doc_start: &[u32], row: usize, t: usize) -> usize {
        (doc_start[row] as usize).min(t)
    }
    use crate::ops::Scalar;
    use rayon::prelude::*;

    /// A matrix in a slice: the element (i, j) is at `offset + i·rs + j·cs`.
    #[derive(Clone, Copy)]
    struct Mat {
        offset: usize,
        rs: usize,
        cs: usize,
    }

    /// c (m×n, row stride rsc, from `c_at`) = a (m×k) · b (k×n), on the calling thread.
    #[allow(clippy::too_many_arguments)]
    fn gemm<T: Scalar>(
        m: usize,
        k: usize,
        n: usize,
        a: &[T],
        am: Mat,
        b: &[T],
        bm: Mat,
        c: &mut [T],
        c_at: usize,
        rsc: usize,
    ) {
        let last = |x: Mat, rows: usize, cols: usize| x.offset + (rows - 1) * x.rs + (cols - 1) * x.cs;
        assert!(last(am, m, k) < a.len() && last(bm, k, n) < b.len() && c_at + (m - 1) * rsc + n <= c.len());
        // SAFETY: the last element each operand touches was checked against its slice above.
        unsafe {
            T::gemm(
                m,
                k,
                n,
                a.as_ptr().add(am.offset),
                am.rs as isize,
                am.cs as isize,
                b.as_ptr().add(bm.offset),
                bm.rs as isize,
                bm.cs as isize,
                T::zero(),
                c.as_mut_ptr().add(c_at),
                rsc as isize,
            )
        }
    }

    /// Per batch element and head: scores = scale·q·kᵀ + bias by GEMM, a softmax per row over
    /// the keys of the query's document up to itself, then out = att·v by GEMM. att keeps the
    /// probabilities, 0 outside the mask.
    pub fn cpu_forward<T: Scalar>(out: &mut [T], att: &mut [T], qkv: &[T], doc_start: &[u32], d: AttentionDims) {
        d.check(qkv.len(), out.len(), att.len(), doc_start.len());
        let (tt, c) = (d.t, d.h * d.dh);
        let scale = T::of(d.scale as f64);
        out.par_chunks_mut(tt * c)
            .zip(att.par_chunks_mut(d.h * tt * tt))
            .enumerate()
            .for_each(|(b, (out, att))| {
                // q, k, v of head h: (T, Dh) with row stride 3C inside this batch's tokens.
                let part = |p: usize, h: usize| Mat {
                    offset: b * tt * 3 * c + p * c + h * d.dh,
                    rs: 3 * c,
                    cs: 1,
                };
                for h in 0..d.h {
                    let k = part(1, h);
                    let kt = Mat {
                        offset: k.offset,
                        rs: 1,
                        cs: 3 * c,
                    };
                    gemm(tt, d.dh, tt, qkv, part(0, h), qkv, kt, att, h * tt * tt, tt);
                    let slope = T::of(d.slope(h));
                    for t in 0..tt {
                        let first = first_key(doc_start, b * tt + t, t);
                        let row = &mut att[(h * tt + t) * tt..(h * tt + t + 1) * tt];
                        for (s, a) in row.iter_mut().enumerate().take(t + 1).skip(first) {
                            *a = *a * scale - slope * T::of((t - s) as f64);
                        }
                        let seen = &mut row[first..=t];
                        let mx = seen.iter().copied().fold(T::neg_infinity(), T::max);
                        let mut sum = T::zero();
                        for a in seen.iter_mut() {
                            *a = (*a - mx).exp();
                            sum = sum + *a;
                        }
                        for a in seen.iter_mut() {
                            *a = *a / sum;
                        }
                        row[..first].fill(T::zero());
                        row[t + 1..].fill(T::zero());
                    }
                    let probs = Mat {
                        offset: h * tt * tt,
                        rs: tt,
                        cs: 1,
                    };
                    let att_h: &[T] = att;
                    gemm(tt, tt, d.dh, att_h, probs, qkv, part(2, h), out, h * d.dh, c);
                }
            });
    }

    /// Per batch element and head, by GEMM: datt = dout·vᵀ; dpre = att ⊙ (datt − Σ att·datt);
    /// dq = scale·dpre·k, dk = scale·dpreᵀ·q, dv = attᵀ·dout.
    /// att is 0 outside the mask, so masked pairs get dpre = 0 with no test of their own.
    pub fn cpu_backward<T: Scalar>(
        dqkv: &mut [T],
        dpre: &mut [T],
        dout: &[T],
        qkv: &[T],
        att: &[T],
        doc_start: &[u32],
        d: AttentionDims,
    ) {
        d.check(qkv.len(), dout.len(), att.len(), doc_start.len());
        let (tt, c) = (d.t, d.h * d.dh);
        let scale = T::of(d.scale as f64);
        dqkv.par_chunks_mut(tt * 3 * c)
            .zip(dpre.par_chunks_mut(d.h * tt * tt))
            .enumerate()
            .for_each(|(b, (dqkv, dpre))| {
                let part = |p: usize, h: usize| Mat {
                    offset: b * tt * 3 * c + p * c + h * d.dh,
                    rs: 3 * c,
                    cs: 1,
                };
                let att = &att[b * d.h * tt * tt..(b + 1) * d.h * tt * tt];
                for h in 0..d.h {
                    let go = Mat {
                        offset: b * tt * c + h * d.dh,
                        rs: c,
                        cs: 1,
                    };
                    let v = part(2, h);
                    let vt = Mat {
                        offset: v.offset,
                        rs: 1,
                        cs: 3 * c,
                    };
                    gemm(tt, d.dh, tt, dout, go, qkv, vt, dpre, h * tt * tt, tt);
                    for t in 0..tt {
                        let r = (h * tt + t) * tt;
                        let tmp: T = (0..=t).map(|s| att[r + s] * dpre[r + s]).sum();
                        for s in 0..tt {
                            dpre[r + s] = if s <= t {
                                att[r + s] * (dpre[r + s] - tmp) * scale
                            } else {
                                T::zero()
                            };
                        }
                    }
                    // With dpre scaled, dq and dk are plain products.
                    let dp = Mat {
                        offset: h * tt * tt,
                        rs: tt,
                        cs: 1,
                    };
                    let dpt = Mat {
                        offset: h * tt * tt,
                        rs: 1,
                        cs: tt,
                    };
                    let local = |p: usize| p * c + h * d.dh;
                    let dpre_h: &[T] = dpre;
                    gemm(tt, tt, d.dh, dpre_h, dp, qkv, part(1, h), dqkv, local(0), 3 * c);
                    gemm(tt, tt, d.dh, dpre_h, dpt, qkv, part(0, h), dqkv, local(1), 3 * c);
                    let at = Mat {
                        offset: h * tt * tt,
                        rs: 1,
                        cs: tt,
                    };
                    gemm(tt, tt, d.dh, att, at, dout, go, dqkv, local(2), 3 * c);
                }
                // dpre keeps the logits' gradient itself, without the scale, as the GPU's does.
                dpre.iter_mut().for_each(|g| *g = *g / scale);
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

pub fn gpu_forward(
    gpu: &GpuBackend,
    out: &GpuTensor,
    att: &GpuTensor,
    qkv: &GpuTensor,
    doc_start: &GpuIndex,
    d: AttentionDims,
) {
    d.check(qkv.len, out.len, att.len, doc_start.len);
    let grid = grid_1d(d.b * d.h * d.t, 256);
    gpu.dispatch(
        "attention",
        "attention_forward",
        &params(&d),
        &[out.arg(), att.arg(), qkv.arg(), doc_start.arg()],
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
    doc_start: &GpuIndex,
    d: AttentionDims,
) {
    d.check(qkv.len, dout.len, att.len, doc_start.len);
    assert_eq!(dpre.len, att.len, "attention: dpre must match att");
    let args = [
        dqkv.arg(),
        dpre.arg(),
        dout.arg(),
        qkv.arg(),
        att.arg(),
        doc_start.arg(),
    ];
    let grid = grid_1d(d.b * d.h * d.t, 256);
    gpu.dispatch("attention", "attention_backward_query", &params(&d), &args, grid);
    gpu.dispatch("attention", "attention_backward_key", &params(&d), &args, grid);
}
