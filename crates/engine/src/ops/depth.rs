//! Attention over depth, Attention Residuals' read (SPEC §7.3): a token's sources v_0 … v_{n−1},
//! the first `sources` rows of its (rows, D) block, mixed by a softmax over one learned
//! pseudo-query w with the keys' RMSNorm gain γ, both in `query` (2, D): row 0 w, row 1 γ, so
//! that their gradient is one tensor (a model's gradients are views of one buffer):
//!
//!   rstd_i = 1/sqrt(mean(v_i²) + ε)    z_i = (w ⊙ γ)·v_i · rstd_i    α = softmax(z)    h = Σ_i α_i v_i
//!
//! (with raw keys, the paper's Table 4 ablation, rstd_i = 1 and the backward's x̂_i z_i / D term
//! goes)
//!
//! The keys are normalised for the logits only; the values are mixed raw. The backward
//! (SPEC §7.3.4), with q = w ⊙ γ, x̂_i = v_i·rstd_i and dz_i = α_i (⟨dh, v_i⟩ − Σ_k α_k ⟨dh, v_k⟩):
//!
//!   dv_i += α_i dh + dz_i·rstd_i·(q − x̂_i z_i / D)        dw = γ ⊙ s,  dγ = w ⊙ s,  s = Σ_t Σ_i dz_i x̂_i
//!
//! The parameters' gradients sum over the tokens in a fixed order: the first pass keeps each
//! token's dz_i·rstd_i in `scratch`, and a column pass adds the tokens up in order, so neither
//! backend's bits depend on its thread count.

use crate::gpu::{AsArg, GpuBackend, GpuTensor};
use crate::shaders::{Define, SUM_COLS};

/// The most sources one read takes: a GPU thread keeps each one's logit and statistics.
pub const MAX_SOURCES: usize = 64;

/// What `shaders/depth.wgsl` reads from here.
pub const DEFINES: &[Define] = &[Define::u32("MAX_SOURCES", MAX_SOURCES as u32)];

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DepthDims {
    pub tokens: usize,
    /// Rows a token's block holds: the sources are its first `sources`.
    pub rows: usize,
    pub sources: usize,
    /// D, the values a source holds.
    pub width: usize,
    /// The keys' RMSNorm ε.
    pub eps: f32,
    /// Whether the keys are RMS-normalised (the paper's); raw keys (rstd_i = 1) are its Table 4
    /// ablation.
    pub normed_keys: bool,
}

impl DepthDims {
    fn check(&self, x: usize, query: usize, alpha: usize) {
        assert!(
            (1..=MAX_SOURCES).contains(&self.sources) && self.sources <= self.rows && self.width > 0,
            "depth: {self:?} reads 1 to {MAX_SOURCES} sources of its rows"
        );
        assert_eq!(
            x,
            self.tokens * self.rows * self.width,
            "depth: x has {x} values for {self:?}"
        );
        assert_eq!(query, 2 * self.width, "depth: query (w and γ) for {self:?}");
        assert_eq!(
            alpha,
            self.tokens * self.sources,
            "depth: alpha has {alpha} values for {self:?}"
        );
    }

    /// The scratch the backward needs: a value a source and token.
    pub fn scratch(&self) -> usize {
        self.tokens * self.sources
    }
}

fn params(d: &DepthDims) -> [u32; 6] {
    [
        d.tokens as u32,
        d.rows as u32,
        d.sources as u32,
        d.width as u32,
        d.eps.to_bits(),
        u32::from(d.normed_keys),
    ]
}

#[cfg(feature = "cpu")]
mod cpu_twin {
    use super::*;
    use crate::ops::norm::{row_stats, NormKind};
    use crate::ops::Scalar;
    use rayon::prelude::*;

    /// Tokens a task reads: enough to amortise a task, few enough to balance two threads.
    const TOKENS: usize = 32;
    /// Columns a task of the parameters' pass sums.
    const COLS: usize = 64;

    /// One token's rstd_i and z_i, for its sources `v` (sources, D), into `z` (a task's buffer,
    /// so that the token loop does not allocate).
    fn logits<T: Scalar>(z: &mut Vec<(T, T)>, v: &[T], q: &[T], d: &DepthDims) {
        z.clear();
        z.extend(v.chunks(d.width).map(|v| {
            let rstd = match d.normed_keys {
                true => row_stats(v, NormKind::RmsNorm, d.eps).1,
                false => T::one(),
            };
            let qv = v.iter().zip(q).fold(T::zero(), |a, (&v, &q)| a + q * v);
            (rstd, qv * rstd)
        }));
    }

    /// q = w ⊙ γ from `query`'s two rows.
    fn product<T: Scalar>(query: &[T]) -> Vec<T> {
        let (w, gain) = query.split_at(query.len() / 2);
        w.iter().zip(gain).map(|(&w, &g)| w * g).collect()
    }

    /// h (tokens, D) and alpha (tokens, sources) from x (tokens, rows, D).
    pub fn cpu_forward<T: Scalar>(h: &mut [T], alpha: &mut [T], x: &[T], query: &[T], d: DepthDims) {
        d.check(x.len(), query.len(), alpha.len());
        assert_eq!(h.len(), d.tokens * d.width, "depth: h for {d:?}");
        let q = product(query);
        let (n, c, block) = (d.sources, d.width, d.rows * d.width);
        h.par_chunks_mut(TOKENS * c)
            .zip(alpha.par_chunks_mut(TOKENS * n))
            .zip(x.par_chunks(TOKENS * block))
            .for_each(|((h, alpha), x)| {
                let mut z = Vec::with_capacity(n);
                for ((h, a), x) in h.chunks_mut(c).zip(alpha.chunks_mut(n)).zip(x.chunks(block)) {
                    let v = &x[..n * c];
                    logits(&mut z, v, &q, &d);
                    let top = z.iter().fold(T::neg_infinity(), |m, &(_, z)| m.max(z));
                    for (a, &(_, z)) in a.iter_mut().zip(&z) {
                        *a = (z - top).exp();
                    }
                    let total = a.iter().fold(T::zero(), |s, &e| s + e);
                    a.iter_mut().for_each(|a| *a = *a / total);
                    h.fill(T::zero());
                    for (&a, v) in a.iter().zip(v.chunks(c)) {
                        for (h, &v) in h.iter_mut().zip(v) {
                            *h = *h + a * v;
                        }
                    }
                }
            });
    }

    /// dx += ∂L/∂x over each token's sources, dquery (dw, then dγ) written; `scratch` (tokens,
    /// sources) ends holding dz_i·rstd_i.
    #[allow(clippy::too_many_arguments)]
    pub fn cpu_backward<T: Scalar>(
        dx: &mut [T],
        dquery: &mut [T],
        scratch: &mut [T],
        dh: &[T],
        x: &[T],
        alpha: &[T],
        query: &[T],
        d: DepthDims,
    ) {
        d.check(x.len(), query.len(), alpha.len());
        assert_eq!(dquery.len(), query.len(), "depth: dquery for {d:?}");
        assert_eq!(
            (dx.len(), dh.len()),
            (x.len(), d.tokens * d.width),
            "depth: dx, dh for {d:?}"
        );
        assert_eq!(scratch.len(), d.scratch(), "depth: scratch for {d:?}");
        let q = product(query);
        let (n, c, block) = (d.sources, d.width, d.rows * d.width);
        let width = T::of(c as f64);
        dx.par_chunks_mut(TOKENS * block)
            .zip(scratch.par_chunks_mut(TOKENS * n))
            .zip(dh.par_chunks(TOKENS * c))
            .zip(x.par_chunks(TOKENS * block).zip(alpha.par_chunks(TOKENS * n)))
            .for_each(|(((dx, scratch), dh), (x, alpha))| {
                let (mut z, mut da) = (Vec::with_capacity(n), Vec::with_capacity(n));
                let tokens = dx.chunks_mut(block).zip(scratch.chunks_mut(n)).zip(dh.chunks(c));
                for (((dx, dzr), dh), (x, a)) in tokens.zip(x.chunks(block).zip(alpha.chunks(n))) {
                    let v = &x[..n * c];
                    logits(&mut z, v, &q, &d);
                    da.clear();
                    da.extend((v.chunks(c)).map(|v| v.iter().zip(dh).fold(T::zero(), |s, (&v, &g)| s + v * g)));
                    let mean = a.iter().zip(&da).fold(T::zero(), |s, (&a, &da)| s + a * da);
                    for i in 0..n {
                        let ((rstd, z), a) = (z[i], a[i]);
                        let dz = a * (da[i] - mean);
                        dzr[i] = dz * rstd;
                        let dx = &mut dx[i * c..(i + 1) * c];
                        let v = &v[i * c..(i + 1) * c];
                        // Raw keys have no norm to pass the gradient through.
                        for (((dx, &g), &q), &v) in dx.iter_mut().zip(dh).zip(&q).zip(v) {
                            let through_norm = match d.normed_keys {
                                true => v * rstd * z / width,
                                false => T::zero(),
                            };
                            *dx = *dx + a * g + dzr[i] * (q - through_norm);
                        }
                    }
                }
            });
        // s_d = Σ_t Σ_i dz_i·rstd_i·v_{t,i,d}, the tokens and sources in order.
        let mut s = vec![T::zero(); c];
        s.par_chunks_mut(COLS).enumerate().for_each(|(k, s)| {
            let cols = k * COLS..k * COLS + s.len();
            for (x, dzr) in x.chunks(block).zip(scratch.chunks(n)) {
                for (v, &dzr) in x.chunks(c).zip(dzr) {
                    for (s, &v) in s.iter_mut().zip(&v[cols.clone()]) {
                        *s = *s + dzr * v;
                    }
                }
            }
        });
        let (w, gain) = query.split_at(c);
        let (dw, dgain) = dquery.split_at_mut(c);
        for (((dw, dg), &s), (&w, &g)) in dw.iter_mut().zip(dgain).zip(&s).zip(w.iter().zip(gain)) {
            *dw = g * s;
            *dg = w * s;
        }
    }
}
#[cfg(feature = "cpu")]
pub use cpu_twin::*;

/// The ops on the GPU: a workgroup a token, then a workgroup per SUM_COLS columns.
pub mod gpu {
    use super::*;

    pub fn depth_read(
        gpu: &GpuBackend,
        h: &GpuTensor,
        alpha: &GpuTensor,
        x: &GpuTensor,
        query: &GpuTensor,
        d: DepthDims,
    ) {
        d.check(x.len, query.len, alpha.len);
        assert_eq!(h.len, d.tokens * d.width, "depth: h for {d:?}");
        let args = [h.arg(), alpha.arg(), x.arg(), query.arg()];
        gpu.dispatch("depth", "depth_read", &params(&d), &args, gpu.grid_1d(d.tokens, 1));
    }

    #[allow(clippy::too_many_arguments)]
    pub fn depth_read_backward(
        gpu: &GpuBackend,
        dx: &GpuTensor,
        dquery: &GpuTensor,
        scratch: &GpuTensor,
        dh: &GpuTensor,
        x: &GpuTensor,
        alpha: &GpuTensor,
        query: &GpuTensor,
        d: DepthDims,
    ) {
        d.check(x.len, query.len, alpha.len);
        assert_eq!(dquery.len, query.len, "depth: dquery for {d:?}");
        assert_eq!((dx.len, dh.len), (x.len, d.tokens * d.width), "depth: dx, dh for {d:?}");
        assert_eq!(scratch.len, d.scratch(), "depth: scratch for {d:?}");
        let args = [
            (1, dx.arg()),
            (2, scratch.arg()),
            (3, x.arg()),
            (4, query.arg()),
            (6, dh.arg()),
            (7, alpha.arg()),
        ];
        let p = params(&d);
        gpu.dispatch_at("depth", "depth_backward_sources", &p, &args, gpu.grid_1d(d.tokens, 1));
        let args = [(1, dquery.arg()), (3, x.arg()), (4, query.arg()), (8, scratch.arg())];
        let groups = gpu.grid_1d(d.width, SUM_COLS);
        gpu.dispatch_at("depth", "depth_backward_query", &p, &args, groups);
    }
}

/// The ops on the CPU, as `CpuBackend` runs them: each borrows its tensors for its twin above.
#[cfg(feature = "cpu")]
pub mod cpu {
    use super::*;
    use crate::cpu::{CpuBackend, CpuTensor};
    use crate::ops::Scalar;

    pub fn depth_read<T: Scalar>(
        _: &CpuBackend<T>,
        h: &CpuTensor<T>,
        alpha: &CpuTensor<T>,
        x: &CpuTensor<T>,
        query: &CpuTensor<T>,
        d: DepthDims,
    ) {
        cpu_forward(&mut h.get_mut(), &mut alpha.get_mut(), &x.get(), &query.get(), d)
    }

    #[allow(clippy::too_many_arguments)]
    pub fn depth_read_backward<T: Scalar>(
        _: &CpuBackend<T>,
        dx: &CpuTensor<T>,
        dquery: &CpuTensor<T>,
        scratch: &CpuTensor<T>,
        dh: &CpuTensor<T>,
        x: &CpuTensor<T>,
        alpha: &CpuTensor<T>,
        query: &CpuTensor<T>,
        d: DepthDims,
    ) {
        cpu_backward(
            &mut dx.get_mut(),
            &mut dquery.get_mut(),
            &mut scratch.get_mut(),
            &dh.get(),
            &x.get(),
            &alpha.get(),
            &query.get(),
            d,
        )
    }
}

/// What each op costs (`crate::cost` has the conventions).
pub mod cost {
    use super::*;
    use crate::cost::{f, Cost, Family, W};

    /// Per token: the sources' squares and logits (4 FLOPs a value), then the weighted sum (2);
    /// the sources read twice, h written.
    pub fn depth_read(d: DepthDims) -> Cost {
        let values = f(d.tokens) * f(d.sources) * f(d.width);
        let bytes = W * (2.0 * values + f(d.tokens) * (f(d.width) + f(d.sources)));
        Family::Norm.cost(6.0 * values, bytes)
    }

    /// The logits again, ⟨dh, v_i⟩, dx (6 a value), then the parameters' pass (2): the sources
    /// read three times and their gradient read and written.
    pub fn depth_read_backward(d: DepthDims) -> Cost {
        let values = f(d.tokens) * f(d.sources) * f(d.width);
        let bytes = W * (5.0 * values + f(d.tokens) * (f(d.width) + 2.0 * f(d.sources)));
        Family::Norm.cost(14.0 * values, bytes)
    }
}
