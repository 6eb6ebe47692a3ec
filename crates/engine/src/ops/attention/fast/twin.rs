//! The fast attention's CPU twin, and the bound the GPU keeps against it per element: what
//! `CpuBackend::fast_twin` runs, and what the tests and `resmem selftest --precision fast`
//! check the GPU with. Each sequence of the batch on its own thread; within one, every sum in
//! order, so the twin gives the same bits whatever the thread count.

use super::{AttentionDims, P_EXPONENT};
use crate::precision::{amax, gradient_exponent, pow2, round_operand, scale_exponent};
use rayon::prelude::*;

/// qkv as the fast class stages it, and the power of two that unscales it.
struct Staged {
    /// f16(qkv · 2^sQ), as f32s.
    qkv: Vec<f32>,
    /// 2^-sQ.
    uq: f32,
}

fn staged_qkv(qkv: &[f32]) -> (Staged, bool) {
    let (s, finite) = match scale_exponent(amax(qkv.iter().copied())) {
        Some(s) => (s, true),
        None => (0, false),
    };
    let staged = Staged {
        qkv: qkv.iter().map(|&x| round_operand(x, s)).collect(),
        uq: pow2(-s),
    };
    (staged, finite)
}

/// Where a sequence's rows of part `part` (0 q, 1 k, 2 v) of head h, and of out, start.
#[derive(Clone, Copy)]
struct Head {
    b: usize,
    h: usize,
    d: AttentionDims,
}

impl Head {
    fn qkv(&self, part: usize, t: usize) -> usize {
        let c = self.d.h * self.d.dh;
        (self.b * self.d.t + t) * 3 * c + part * c + self.h * self.d.dh
    }
    fn out(&self, t: usize) -> usize {
        (self.b * self.d.t + t) * self.d.h * self.d.dh + self.h * self.d.dh
    }
    fn row(&self, t: usize) -> usize {
        (self.b * self.d.h + self.h) * self.d.t + t
    }
    /// The keys query i sees.
    fn keys(&self, starts: &[u32], i: usize) -> std::ops::Range<usize> {
        (starts[self.b * self.d.t + i] as usize).min(i)..i + 1
    }
    /// ALiBi's −slope·(i − j) as the shader computes it, in f32.
    fn bias(&self, i: usize, j: usize) -> f32 {
        let slope = match self.d.alibi {
            true => (-8.0 * (self.h + 1) as f32 / self.d.h as f32).exp2(),
            false => 0.0,
        };
        -(slope * (i - j) as f32)
    }
}

/// Σ x·y over a head's dh values, in order, in f32.
fn dot(x: &[f32], y: &[f32]) -> f32 {
    x.iter().zip(y).fold(0.0, |acc, (a, b)| acc + a * b)
}

/// The logit of query i and key j from the staged q and k: (q̂·k̂ · 2^-sQ · 2^-sQ)·scale + bias.
fn logit(st: &Staged, hd: Head, i: usize, j: usize) -> f32 {
    let dh = hd.d.dh;
    let s = dot(&st.qkv[hd.qkv(0, i)..][..dh], &st.qkv[hd.qkv(1, j)..][..dh]);
    ((s * st.uq) * st.uq).mul_add(hd.d.scale, hd.bias(i, j))
}

/// f16(P · 2^14) as an f32, with P = exp(logit − lse).
fn staged_p(logit: f32, lse: f32) -> f32 {
    round_operand((logit - lse).exp(), P_EXPONENT)
}

/// The forward's CPU twin: lse as the f32 log-sum-exp of each row's logits from the staged q and
/// k, out = (Σ_j f16(P·2^14)·v̂) · 2^-14 · 2^-sQ. False when qkv held a NaN or an infinity
/// (the outputs carry it).
pub fn cpu_forward(out: &mut [f32], lse: &mut [f32], qkv: &[f32], doc_start: &[u32], d: AttentionDims) -> bool {
    d.check(qkv.len(), out.len(), lse.len(), doc_start.len());
    let (st, finite) = staged_qkv(qkv);
    let c = d.h * d.dh;
    out.par_chunks_mut(d.t * c)
        .zip(lse.par_chunks_mut(d.h * d.t))
        .enumerate()
        .for_each(|(b, (out, lse))| forward_sequence(out, lse, &st, doc_start, b, d));
    finite
}

/// Sequence `b` of [`cpu_forward`], every head: its out (T, H·Dh) and lse (H, T).
fn forward_sequence(out: &mut [f32], lse: &mut [f32], st: &Staged, doc_start: &[u32], b: usize, d: AttentionDims) {
    let unscale = pow2(-P_EXPONENT);
    // This sequence's first value of out, and of lse.
    let (o0, l0) = (b * d.t * d.h * d.dh, b * d.h * d.t);
    for h in 0..d.h {
        let hd = Head { b, h, d };
        for i in 0..d.t {
            let keys = hd.keys(doc_start, i);
            let logits: Vec<f32> = keys.clone().map(|j| logit(st, hd, i, j)).collect();
            let m = logits.iter().fold(f32::MIN, |m, &x| m.max(x));
            let l = logits.iter().fold(0.0f32, |l, &x| l + (x - m).exp());
            let row_lse = m + l.ln();
            lse[hd.row(i) - l0] = row_lse;
            let o = &mut out[hd.out(i) - o0..][..d.dh];
            o.fill(0.0);
            for (j, &x) in keys.zip(&logits) {
                let p = staged_p(x, row_lse);
                for (o, &v) in o.iter_mut().zip(&st.qkv[hd.qkv(2, j)..][..d.dh]) {
                    *o += p * v;
                }
            }
            for o in o.iter_mut() {
                *o = (*o * unscale) * st.uq;
            }
        }
    }
}

/// The backward's CPU twin: delta = dout·out per row in f32, then from P recomputed as the
/// forward stages it, dS = (P̂·2^-14)·(dout̂·v̂ · 2^-sD · 2^-sQ − delta) staged as f16(dS·2^sS),
/// dq = scale·Σ dŜ·k̂, dk = scale·Σ dŜ·q̂ and dv = Σ P̂·dout̂, each sum unscaled by its operands'
/// powers of two. False when qkv or dout held a NaN or an infinity.
#[allow(clippy::too_many_arguments)]
pub fn cpu_backward(
    dqkv: &mut [f32],
    delta: &mut [f32],
    dout: &[f32],
    out: &[f32],
    qkv: &[f32],
    lse: &[f32],
    doc_start: &[u32],
    d: AttentionDims,
) -> bool {
    d.check(qkv.len(), dout.len(), lse.len(), doc_start.len());
    let (st, finite_qkv) = staged_qkv(qkv);
    let sd = scale_exponent(amax(dout.iter().copied()));
    let sq = scale_exponent(amax(qkv.iter().copied())).unwrap_or(0);
    let g = Gradients {
        dout: dout.iter().map(|&x| round_operand(x, sd.unwrap_or(0))).collect(),
        ud: pow2(-sd.unwrap_or(0)),
        ss: gradient_exponent(sq, sd.unwrap_or(0), d.dh),
    };
    dqkv.par_chunks_mut(d.t * 3 * d.h * d.dh)
        .zip(delta.par_chunks_mut(d.h * d.t))
        .enumerate()
        .for_each(|(b, (dqkv, delta))| backward_sequence(dqkv, delta, dout, out, lse, &st, &g, doc_start, b, d));
    finite_qkv && sd.is_some()
}

/// dout as the fast class stages it, the power of two that unscales it, and dS's exponent.
struct Gradients {
    dout: Vec<f32>,
    ud: f32,
    ss: i32,
}

/// Sequence `b` of [`cpu_backward`], every head: its dqkv (T, 3·H·Dh) and delta (H, T).
#[allow(clippy::too_many_arguments)]
fn backward_sequence(
    dqkv: &mut [f32],
    delta: &mut [f32],
    dout: &[f32],
    out: &[f32],
    lse: &[f32],
    st: &Staged,
    g: &Gradients,
    doc_start: &[u32],
    b: usize,
    d: AttentionDims,
) {
    let dh = d.dh;
    let (us, up) = (pow2(-g.ss), pow2(-P_EXPONENT));
    // This sequence's first value of dqkv, and of delta.
    let (q0, l0) = (b * d.t * 3 * d.h * dh, b * d.h * d.t);
    for h in 0..d.h {
        let hd = Head { b, h, d };
        for i in 0..d.t {
            delta[hd.row(i) - l0] = dot(&dout[hd.out(i)..][..dh], &out[hd.out(i)..][..dh]);
        }
        // Sums of staged products, unscaled at the end.
        let mut dq = vec![0f32; d.t * dh];
        let mut dk = vec![0f32; d.t * dh];
        let mut dv = vec![0f32; d.t * dh];
        for i in 0..d.t {
            let (row_lse, row_delta) = (lse[hd.row(i)], delta[hd.row(i) - l0]);
            let go = &g.dout[hd.out(i)..][..dh];
            for j in hd.keys(doc_start, i) {
                let p = staged_p(logit(st, hd, i, j), row_lse);
                let dp = (dot(go, &st.qkv[hd.qkv(2, j)..][..dh]) * g.ud) * st.uq;
                let ds = round_operand((p * up) * (dp - row_delta), g.ss);
                for x in 0..dh {
                    dq[i * dh + x] += ds * st.qkv[hd.qkv(1, j) + x];
                    dk[j * dh + x] += ds * st.qkv[hd.qkv(0, i) + x];
                    dv[j * dh + x] += p * go[x];
                }
            }
        }
        for t in 0..d.t {
            for x in 0..dh {
                dqkv[hd.qkv(0, t) - q0 + x] = ((dq[t * dh + x] * us) * st.uq) * d.scale;
                dqkv[hd.qkv(1, t) - q0 + x] = ((dk[t * dh + x] * us) * st.uq) * d.scale;
                dqkv[hd.qkv(2, t) - q0 + x] = (dv[t * dh + x] * up) * g.ud;
            }
        }
    }
}

/// One f16 ulp, relative: two conversions of the same value (or of values a hair apart) to f16
/// differ by at most this much when one rounds to nearest and the other does not (WGSL leaves the
/// rounding to the implementation).
const ULP16: f64 = 1.0 / 1024.0;
/// f32's unit roundoff.
const U32: f64 = 1.0 / 16_777_216.0;

/// What the bounds read: the twin's staged operands in f64 and the row statistics.
struct Exact<'a> {
    st: Staged,
    doc_start: &'a [u32],
    d: AttentionDims,
}

impl Exact<'_> {
    fn value(&self, at: usize) -> f64 {
        self.st.qkv[at] as f64 * self.st.uq as f64
    }
    /// The exact logit of (i, j) from the staged operands, and the bound on the difference
    /// between any two f32 evaluations of it: `precision::fast_bound` on Σ|q̂·k̂| (sums in any
    /// order, conversions rounded either way), and an f32 ulp of ALiBi's slope times i − j.
    fn logit(&self, hd: Head, i: usize, j: usize) -> (f64, f64) {
        let (mut s, mut mag) = (0.0, 0.0);
        for x in 0..self.d.dh {
            let v = self.value(hd.qkv(0, i) + x) * self.value(hd.qkv(1, j) + x);
            s += v;
            mag += v.abs();
        }
        let bias = hd.bias(i, j) as f64;
        let scale = self.d.scale as f64;
        let err = crate::precision::fast_bound(self.d.dh, mag) * scale + 2.0 * U32 * bias.abs();
        (s * scale + bias, err)
    }
    /// Row i's logits over its keys, with their error bounds; its exact log-sum-exp, and the bound
    /// on any f32 evaluation's difference from another: the logits' own, the sum's order and
    /// WGSL's exp (3 + 2|x| ulp) and log (2^-21 absolute near 1, else 3 ulp).
    fn row(&self, hd: Head, i: usize) -> (Vec<(usize, f64, f64)>, f64, f64) {
        let row: Vec<(usize, f64, f64)> = hd
            .keys(self.doc_start, i)
            .map(|j| {
                let (x, e) = self.logit(hd, i, j);
                (j, x, e)
            })
            .collect();
        let m = row.iter().fold(f64::MIN, |m, r| m.max(r.1));
        let lse = m + row.iter().map(|r| (r.1 - m).exp()).sum::<f64>().ln();
        let worst = row.iter().fold(0.0f64, |w, r| w.max(r.2));
        let n = row.len() as f64;
        let err = worst + (8.0 + 2.0 * n) * U32 + 8.0 * U32 + 6.0 * U32 * lse.abs();
        (row, lse, err)
    }
    /// P and the bound on the relative difference of two f16 stagings of it: e^δ − 1 for δ the
    /// logit's and the lse's errors and exp's, and one f16 ulp.
    fn p(&self, x: f64, e: f64, lse: f64, lse_err: f64) -> (f64, f64) {
        let z = x - lse;
        let delta = e + lse_err + (6.0 + 4.0 * z.abs()) * U32;
        (z.exp(), delta.exp_m1() * 1.01 + ULP16)
    }
}

/// The bound each value of the fast forward keeps against [`cpu_forward`], per element of out
/// and of lse, derived from f16 rounding and f32 summation in any order (module docs): each
/// out value within Σ_j P_j·|v_j|·(ρ_j + 2 ulp16 + (n + 32)·2^-22), ρ_j the relative bound on
/// P_j's staging, doubled as a margin.
pub fn forward_bounds(qkv: &[f32], doc_start: &[u32], d: AttentionDims) -> (Vec<f64>, Vec<f64>) {
    let ex = Exact {
        st: staged_qkv(qkv).0,
        doc_start,
        d,
    };
    let mut out = vec![0.0; d.b * d.t * d.h * d.dh];
    let mut lse = vec![0.0; d.rows()];
    for b in 0..d.b {
        for h in 0..d.h {
            let hd = Head { b, h, d };
            for i in 0..d.t {
                let (row, row_lse, lse_err) = ex.row(hd, i);
                lse[hd.row(i)] = 2.0 * lse_err;
                let acc = (row.len() as f64 + 32.0) * 4.0 * U32;
                for (j, x, e) in row {
                    let (p, rho) = ex.p(x, e, row_lse, lse_err);
                    for c in 0..d.dh {
                        let v = ex.value(hd.qkv(2, j) + c).abs();
                        out[hd.out(i) + c] += 2.0 * p * v * (rho + 2.0 * ULP16 + acc);
                    }
                }
            }
        }
    }
    (out, lse)
}

/// The bound each value of dqkv from the fast backward keeps against [`cpu_backward`] given the
/// same inputs, derived the same way through dS = P·(dP − delta): P's relative bound, dP's
/// (`fast_bound` on Σ|dout̂·v̂|), delta's f32 sum, dS's staging (one f16 ulp, and the f16
/// subnormal step at 2^-sS), and the final sum's order, doubled as a margin.
pub fn backward_bounds(
    qkv: &[f32],
    dout: &[f32],
    out: &[f32],
    lse: &[f32],
    doc_start: &[u32],
    d: AttentionDims,
) -> Vec<f64> {
    let ex = Exact {
        st: staged_qkv(qkv).0,
        doc_start,
        d,
    };
    let sd = scale_exponent(amax(dout.iter().copied())).unwrap_or(0);
    let sq = scale_exponent(amax(qkv.iter().copied())).unwrap_or(0);
    let step = 2f64.powi(-24 - gradient_exponent(sq, sd, d.dh));
    let go = |at: usize| round_operand(dout[at], sd) as f64 * pow2(-sd) as f64;
    let dh = d.dh;
    let mut bound = vec![0.0; qkv.len()];
    let scale = d.scale as f64;
    for b in 0..d.b {
        for h in 0..d.h {
            let hd = Head { b, h, d };
            for i in 0..d.t {
                // The inputs' lse, not the exact one: both backends read it.
                let (row, _, _) = ex.row(hd, i);
                let lse_i = lse[hd.row(i)] as f64;
                let (mut delta, mut delta_mag) = (0.0, 0.0);
                for x in 0..dh {
                    let v = dout[hd.out(i) + x] as f64 * out[hd.out(i) + x] as f64;
                    delta += v;
                    delta_mag += v.abs();
                }
                let delta_err = (dh as f64 + 8.0) * 2.0 * U32 * delta_mag;
                let n = row.len() as f64;
                for (j, x, e) in row {
                    // Both backends read the same lse: only the logit and exp differ.
                    let (p, rho) = ex.p(x, e, lse_i, 0.0);
                    let (mut dp, mut dp_mag) = (0.0, 0.0);
                    for y in 0..dh {
                        let v = go(hd.out(i) + y) * ex.value(hd.qkv(2, j) + y);
                        dp += v;
                        dp_mag += v.abs();
                    }
                    let dp_err = crate::precision::fast_bound(dh, dp_mag);
                    let g = p * (dp - delta);
                    let g_err =
                        p * rho * (dp - delta).abs() + p * (dp_err + delta_err) + (ULP16 + 4.0 * U32) * g.abs() + step;
                    let acc = |n: f64| (n + 32.0) * 4.0 * U32;
                    for y in 0..dh {
                        let (k, q) = (ex.value(hd.qkv(1, j) + y).abs(), ex.value(hd.qkv(0, i) + y).abs());
                        let o = go(hd.out(i) + y).abs();
                        let dq_err = scale * (g_err + (ULP16 + acc(n)) * g.abs()) * k;
                        let dk_err = scale * (g_err + (ULP16 + acc(d.t as f64)) * g.abs()) * q;
                        let dv_err = p * (rho + 2.0 * ULP16 + acc(d.t as f64)) * o;
                        bound[hd.qkv(0, i) + y] += 2.0 * dq_err;
                        bound[hd.qkv(1, j) + y] += 2.0 * dk_err;
                        bound[hd.qkv(2, j) + y] += 2.0 * dv_err;
                    }
                }
            }
        }
    }
    bound
}
