//! The two primitives of the Residual Matrix Transformer (SPEC §2), batched over all tokens.
//! Each token's residual is a D_k×D_v matrix X, stored contiguously.
//!
//! - **retrieval** of R' key vectors r^(h) ∈ R^{D_k}: `y^(h) = r^(h)ᵀ X ∈ R^{D_v}`;
//! - **storage** of R' data vectors x^(h) ∈ R^{D_v}: `X_out = X_base + Σ_h w^(h) ⊗ x^(h)`,
//!   with the residual add fused (or `X_out += …` when there is no base);
//! - **key gradient**: `dk[h][i] = Σ_tokens Σ_v a[t,h,v] · b[t,i,v]`, shared by both backwards.
//!
//! Retrievals read normalised matrices, so `retrieve_normed` and `key_grad_normed` take X with
//! its norm's statistics (rows, 2) and gain (D_k·D_v) and normalise as they read: Norm(X) is
//! never written, which saves a write and a read of every matrix per norm, and its memory.
//!
//! The backwards are these same three kernels: the data gradient of a retrieval is a storage of
//! dy with the same keys, and the data gradient of a storage is a retrieval of dX_out.
//! Shapes: keys (R', D_k); vectors (tokens, R', D_v); matrices (tokens, D_k, D_v).

use crate::gpu::{Arg, AsArg, GpuBackend, GpuTensor};
use crate::shaders::{Define, WG};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ResidualDims {
    /// Tokens: B·T.
    pub tokens: usize,
    pub dk: usize,
    pub dv: usize,
    /// R': the number of key vectors (3R for the attention's Q, K, V together).
    pub keys: usize,
}

/// Tokens per partial sum of the key gradient: the first launch writes one partial per chunk,
/// the second adds the chunks in order, so the result never depends on scheduling.
pub const KEY_GRAD_CHUNK: usize = 32;

impl ResidualDims {
    pub fn matrices(&self) -> usize {
        self.tokens * self.dk * self.dv
    }
    pub fn vectors(&self) -> usize {
        self.tokens * self.keys * self.dv
    }
    pub fn key_values(&self) -> usize {
        self.keys * self.dk
    }
    /// Values of the scratch buffer `key_grad` needs for its partial sums; saturating, so that
    /// a model's memory estimate refuses a size past usize rather than a wrapped small one.
    pub fn key_grad_scratch(&self) -> usize {
        self.tokens
            .div_ceil(KEY_GRAD_CHUNK)
            .saturating_mul(self.keys.saturating_mul(self.dk))
    }
    fn check(&self, op: &str, matrices: usize, vectors: usize, keys: usize) {
        assert_eq!(
            matrices,
            self.matrices(),
            "{op}: matrices have {matrices} values for {self:?}"
        );
        assert_eq!(
            vectors,
            self.vectors(),
            "{op}: vectors have {vectors} values for {self:?}"
        );
        assert_eq!(keys, self.key_values(), "{op}: keys have {keys} values for {self:?}");
    }
}

#[cfg(feature = "cpu")]
mod cpu_twin {
    use super::*;
    use crate::ops::{matmul, Scalar};
    use crate::MatmulDims;
    use rayon::prelude::*;

    // Retrieval and storage are batched GEMMs with the key matrix shared across tokens (stride
    // 0 in `matmul::cpu`); the normed retrieval and the key gradient gather chunks of tokens
    // side by side into one GEMM each, the key gradient's chunks summed in a fixed order.

    /// y (tokens, R', D_v) = keys · X per token.
    pub fn cpu_retrieve<T: Scalar>(y: &mut [T], x: &[T], keys: &[T], d: ResidualDims) {
        d.check("retrieve", x.len(), y.len(), keys.len());
        let dims = MatmulDims::new(d.keys, d.dv, d.dk).batched(d.tokens, true, false);
        matmul::cpu(y, keys, x, dims);
    }

    /// out (tokens, D_k, D_v) = base + Σ_h keys[h] ⊗ data[h], or out += Σ … without a base.
    pub fn cpu_store<T: Scalar>(out: &mut [T], base: Option<&[T]>, keys: &[T], data: &[T], d: ResidualDims) {
        d.check("store", out.len(), data.len(), keys.len());
        if let Some(base) = base {
            assert_eq!(base.len(), out.len(), "store: base and out differ in length");
            out.copy_from_slice(base);
        }
        // out[t] (D_k×D_v) += keysᵀ (D_k×R') · data[t] (R'×D_v)
        let dims = MatmulDims::new(d.dk, d.dv, d.keys)
            .trans_a()
            .accumulate()
            .batched(d.tokens, true, false);
        matmul::cpu(out, keys, data, dims);
    }

    /// dkeys (R', D_k) = Σ_t a[t] · b[t]ᵀ, with a (tokens, R', D_v) and b (tokens, D_k, D_v):
    /// each chunk of KEY_GRAD_CHUNK tokens in parallel, then the chunks in order, as on the GPU.
    pub fn cpu_key_grad<T: Scalar>(dkeys: &mut [T], a: &[T], b: &[T], d: ResidualDims) {
        d.check("key_grad", b.len(), a.len(), dkeys.len());
        key_grad_chunks(dkeys, a, b, None, d)
    }

    /// The key gradient's chunks, each one GEMM over its tokens' D_v columns (per-token GEMMs of
    /// R'×D_k×D_v spend their time packing): with A (R', n·D_v) and B (n·D_v, D_k) gathered from
    /// the chunk's a and b, the partial is A·B. With `norm` (stats, gain) b is normalised as it
    /// is gathered, so Norm(X) is never held whole.
    fn key_grad_chunks<T: Scalar>(dkeys: &mut [T], a: &[T], b: &[T], norm: Option<(&[T], &[T])>, d: ResidualDims) {
        let (va, vb) = (d.keys * d.dv, d.dk * d.dv);
        let partials: Vec<Vec<T>> = (0..d.tokens.div_ceil(KEY_GRAD_CHUNK))
            .into_par_iter()
            .map(|c| {
                let t0 = c * KEY_GRAD_CHUNK;
                let n = d.tokens.min(t0 + KEY_GRAD_CHUNK) - t0;
                let cols = n * d.dv;
                let mut at = vec![T::zero(); d.keys * cols];
                for i in 0..n {
                    for h in 0..d.keys {
                        let src = &a[(t0 + i) * va + h * d.dv..][..d.dv];
                        at[h * cols + i * d.dv..][..d.dv].copy_from_slice(src);
                    }
                }
                let mut bt = vec![T::zero(); cols * d.dk];
                for i in 0..n {
                    let x = &b[(t0 + i) * vb..][..vb];
                    let (mean, rstd) = norm.map_or((T::zero(), T::one()), |(st, _)| {
                        (st[2 * (t0 + i)], st[2 * (t0 + i) + 1])
                    });
                    for k in 0..d.dk {
                        for v in 0..d.dv {
                            let e = k * d.dv + v;
                            bt[(i * d.dv + v) * d.dk + k] = match norm {
                                Some((_, gain)) => (x[e] - mean) * rstd * gain[e],
                                None => x[e],
                            };
                        }
                    }
                }
                let mut part = vec![T::zero(); d.key_values()];
                matmul::cpu_single(&mut part, &at, &bt, MatmulDims::new(d.keys, d.dk, cols));
                part
            })
            .collect();
        dkeys.fill(T::zero());
        for part in &partials {
            dkeys.iter_mut().zip(part).for_each(|(g, &p)| *g = *g + p);
        }
    }

    /// Tokens' matrices normalised from their (mean, rstd) pairs and the gain, as
    /// (D_k, tokens·D_v): each row k holds every token's row k side by side, so one GEMM with
    /// the keys retrieves from all of them.
    fn normalise_side_by_side<T: Scalar>(x: &[T], stats: &[T], gain: &[T], d: &ResidualDims) -> Vec<T> {
        let m = d.dk * d.dv;
        let n = x.len() / m;
        let cols = n * d.dv;
        let mut out = vec![T::zero(); x.len()];
        for (i, (row, st)) in x.chunks(m).zip(stats.chunks(2)).enumerate() {
            let (mean, rstd) = (st[0], st[1]);
            for k in 0..d.dk {
                let dst = &mut out[k * cols + i * d.dv..][..d.dv];
                let (src, g) = (&row[k * d.dv..][..d.dv], &gain[k * d.dv..][..d.dv]);
                for ((o, &v), &g) in dst.iter_mut().zip(src).zip(g) {
                    *o = (v - mean) * rstd * g;
                }
            }
        }
        out
    }

    /// Tokens a retrieval normalises and multiplies at a time: the normalised matrices stay in
    /// cache, and Norm(X) is never held whole (as on the GPU).
    const NORMED_TOKENS: usize = 32;

    fn check_norm<T>(stats: &[T], gain: &[T], d: &ResidualDims) {
        assert_eq!(
            stats.len(),
            2 * d.tokens,
            "normed: stats has {} values for {d:?}",
            stats.len()
        );
        assert_eq!(
            gain.len(),
            d.dk * d.dv,
            "normed: gain has {} values for {d:?}",
            gain.len()
        );
    }

    pub fn cpu_retrieve_normed<T: Scalar>(y: &mut [T], x: &[T], stats: &[T], gain: &[T], keys: &[T], d: ResidualDims) {
        d.check("retrieve", x.len(), y.len(), keys.len());
        check_norm(stats, gain, &d);
        let (vy, vx) = (d.keys * d.dv, d.dk * d.dv);
        (y.par_chunks_mut(NORMED_TOKENS * vy)
            .zip(x.par_chunks(NORMED_TOKENS * vx)))
        .enumerate()
        .for_each(|(c, (y, x))| {
            let t0 = c * NORMED_TOKENS;
            let n = x.len() / vx;
            let cols = n * d.dv;
            // One GEMM for the chunk: (R', n·D_v) = keys (R', D_k) · Norm(X) side by side.
            let normed = normalise_side_by_side(x, &stats[2 * t0..2 * (t0 + n)], gain, &d);
            let mut out = vec![T::zero(); d.keys * cols];
            matmul::cpu_single(&mut out, keys, &normed, MatmulDims::new(d.keys, cols, d.dk));
            for i in 0..n {
                for h in 0..d.keys {
                    y[i * vy + h * d.dv..][..d.dv].copy_from_slice(&out[h * cols + i * d.dv..][..d.dv]);
                }
            }
        });
    }

    pub fn cpu_key_grad_normed<T: Scalar>(dkeys: &mut [T], a: &[T], x: &[T], stats: &[T], gain: &[T], d: ResidualDims) {
        d.check("key_grad", x.len(), a.len(), dkeys.len());
        check_norm(stats, gain, &d);
        key_grad_chunks(dkeys, a, x, Some((stats, gain)), d)
    }
}
#[cfg(feature = "cpu")]
pub use cpu_twin::*;

/// Keys each retrieval thread handles, so one read of X serves this many outputs.
const KEYS_PER_THREAD: usize = 8;

/// The switch of `shaders/residual_matrix.wgsl` for the retrieval and key gradient that read
/// through the norm (`retrieve_normed`, `key_grad_normed`); off, they read X itself.
pub(crate) const NORMED: &str = "NORMED";

/// What `shaders/residual_matrix.wgsl` reads from here.
pub(crate) const DEFINES: &[Define] = &[
    Define::u32("KEYS_PER_THREAD", KEYS_PER_THREAD as u32),
    Define::u32("KEY_GRAD_CHUNK", KEY_GRAD_CHUNK as u32),
];

fn params(d: &ResidualDims) -> [u32; 4] {
    [d.tokens as u32, d.dk as u32, d.dv as u32, d.keys as u32]
}

/// The retrieval kernel, through the norm when `norm` holds its (stats, gain): y, x, stats, gain
/// and keys at bindings 1, 2, 4, 5 and 6 (stats and gain at the key gradient's places).
fn launch_retrieve(
    gpu: &GpuBackend,
    y: Arg<'_>,
    x: Arg<'_>,
    norm: Option<[Arg<'_>; 2]>,
    keys: Arg<'_>,
    d: &ResidualDims,
) {
    let threads = d.tokens * d.dv * d.keys.div_ceil(KEYS_PER_THREAD);
    let mut args = vec![(1, y), (2, x)];
    if let Some([stats, gain]) = norm {
        args.extend([(4, stats), (5, gain)]);
    }
    args.push((6, keys));
    gpu.dispatch_with_at(
        "residual_matrix",
        "retrieve",
        &[Define::bool(NORMED, norm.is_some())],
        &params(d),
        &args,
        gpu.grid_1d(threads, WG),
    );
}

/// The key gradient's two launches, the first through the norm or not: (partials, a, b), then
/// (stats, gain) when `normed`.
fn launch_key_grad(gpu: &GpuBackend, dkeys: &GpuTensor, normed: bool, args: &[Arg<'_>], d: &ResidualDims) {
    let pr = params(d);
    gpu.dispatch_with(
        "residual_matrix",
        "key_grad_partial",
        &[Define::bool(NORMED, normed)],
        &pr,
        args,
        gpu.grid_1d(d.key_grad_scratch(), WG),
    );
    let partials = args[0];
    gpu.dispatch(
        "residual_matrix",
        "key_grad_reduce",
        &pr,
        &[dkeys.arg(), partials],
        gpu.grid_1d(d.key_values(), WG),
    );
}

/// The ops on the GPU, as `GpuBackend` runs them: each checks its shapes and records its
/// launches.
pub mod gpu {
    use super::*;

    pub fn retrieve(gpu: &GpuBackend, y: &GpuTensor, x: &GpuTensor, keys: &GpuTensor, d: ResidualDims) {
        d.check("retrieve", x.len, y.len, keys.len);
        launch_retrieve(gpu, y.arg(), x.arg(), None, keys.arg(), &d);
    }

    pub fn store(
        gpu: &GpuBackend,
        out: &GpuTensor,
        base: Option<&GpuTensor>,
        keys: &GpuTensor,
        data: &GpuTensor,
        d: ResidualDims,
    ) {
        d.check("store", out.len, data.len, keys.len);
        let grid = gpu.grid_1d(d.matrices(), WG);
        match base {
            Some(base) => {
                assert_eq!(base.len, out.len, "store: base and out differ in length");
                let args = [out.arg(), base.arg(), keys.arg(), data.arg()];
                gpu.dispatch("residual_matrix", "store", &params(&d), &args, grid);
            }
            None => {
                let args = [(1, out.arg()), (3, keys.arg()), (4, data.arg())];
                gpu.dispatch_at("residual_matrix", "store_accumulate", &params(&d), &args, grid);
            }
        }
    }

    pub fn key_grad(
        gpu: &GpuBackend,
        dkeys: &GpuTensor,
        partials: &GpuTensor,
        a: &GpuTensor,
        b: &GpuTensor,
        d: ResidualDims,
    ) {
        d.check("key_grad", b.len, a.len, dkeys.len);
        assert!(
            partials.len >= d.key_grad_scratch(),
            "key_grad: scratch has {} values, needs {}",
            partials.len,
            d.key_grad_scratch()
        );
        launch_key_grad(gpu, dkeys, false, &[partials.arg(), a.arg(), b.arg()], &d);
    }

    pub fn retrieve_normed(
        gpu: &GpuBackend,
        y: &GpuTensor,
        x: &GpuTensor,
        stats: &GpuTensor,
        gain: &GpuTensor,
        keys: &GpuTensor,
        d: ResidualDims,
    ) {
        d.check("retrieve_normed", x.len, y.len, keys.len);
        assert_eq!(stats.len, 2 * d.tokens, "retrieve_normed: stats");
        assert_eq!(gain.len, d.dk * d.dv, "retrieve_normed: gain");
        launch_retrieve(gpu, y.arg(), x.arg(), Some([stats.arg(), gain.arg()]), keys.arg(), &d);
    }

    #[allow(clippy::too_many_arguments)]
    pub fn key_grad_normed(
        gpu: &GpuBackend,
        dkeys: &GpuTensor,
        partials: &GpuTensor,
        a: &GpuTensor,
        x: &GpuTensor,
        stats: &GpuTensor,
        gain: &GpuTensor,
        d: ResidualDims,
    ) {
        d.check("key_grad_normed", x.len, a.len, dkeys.len);
        assert!(
            partials.len >= d.key_grad_scratch(),
            "key_grad_normed: scratch too short"
        );
        let args = [partials.arg(), a.arg(), x.arg(), stats.arg(), gain.arg()];
        launch_key_grad(gpu, dkeys, true, &args, &d);
    }
}

/// The ops on the CPU, as `CpuBackend` runs them: each borrows its tensors for its twin above.
/// The CPU's key gradient needs no scratch: it leaves `partials` alone.
#[cfg(feature = "cpu")]
pub mod cpu {
    use super::*;
    use crate::cpu::{CpuBackend, CpuTensor};
    use crate::ops::Scalar;

    pub fn retrieve<T: Scalar>(
        _: &CpuBackend<T>,
        y: &CpuTensor<T>,
        x: &CpuTensor<T>,
        keys: &CpuTensor<T>,
        d: ResidualDims,
    ) {
        cpu_retrieve(&mut y.get_mut(), &x.get(), &keys.get(), d)
    }
    pub fn retrieve_normed<T: Scalar>(
        _: &CpuBackend<T>,
        y: &CpuTensor<T>,
        x: &CpuTensor<T>,
        stats: &CpuTensor<T>,
        gain: &CpuTensor<T>,
        keys: &CpuTensor<T>,
        d: ResidualDims,
    ) {
        let (x, stats, gain, keys) = (x.get(), stats.get(), gain.get(), keys.get());
        cpu_retrieve_normed(&mut y.get_mut(), &x, &stats, &gain, &keys, d)
    }
    pub fn store<T: Scalar>(
        _: &CpuBackend<T>,
        out: &CpuTensor<T>,
        base: Option<&CpuTensor<T>>,
        keys: &CpuTensor<T>,
        data: &CpuTensor<T>,
        d: ResidualDims,
    ) {
        let base = base.map(|b| b.get());
        cpu_store(&mut out.get_mut(), base.as_deref(), &keys.get(), &data.get(), d)
    }
    pub fn key_grad<T: Scalar>(
        _: &CpuBackend<T>,
        dkeys: &CpuTensor<T>,
        _partials: &CpuTensor<T>,
        a: &CpuTensor<T>,
        b: &CpuTensor<T>,
        d: ResidualDims,
    ) {
        cpu_key_grad(&mut dkeys.get_mut(), &a.get(), &b.get(), d)
    }
    #[allow(clippy::too_many_arguments)]
    pub fn key_grad_normed<T: Scalar>(
        _: &CpuBackend<T>,
        dkeys: &CpuTensor<T>,
        _partials: &CpuTensor<T>,
        a: &CpuTensor<T>,
        x: &CpuTensor<T>,
        stats: &CpuTensor<T>,
        gain: &CpuTensor<T>,
        d: ResidualDims,
    ) {
        let (a, x, stats, gain) = (a.get(), x.get(), stats.get(), gain.get());
        cpu_key_grad_normed(&mut dkeys.get_mut(), &a, &x, &stats, &gain, d)
    }
}

/// What each op costs (`crate::cost` has the conventions).
pub mod cost {
    use super::*;
    use crate::cost::{f, Cost, Family, W};

    fn residual_flops(d: &ResidualDims) -> f64 {
        2.0 * f(d.tokens) * f(d.keys) * f(d.dk) * f(d.dv)
    }

    fn residual_bytes(d: &ResidualDims, matrices_written: f64) -> f64 {
        W * (f(d.matrices()) * (1.0 + matrices_written) + f(d.vectors()) + f(d.key_values()))
    }

    pub fn retrieve(d: ResidualDims) -> Cost {
        Family::Retrieval.cost(residual_flops(&d), residual_bytes(&d, 0.0))
    }
    pub fn retrieve_normed(d: ResidualDims) -> Cost {
        let bytes = residual_bytes(&d, 0.0) + W * (2.0 * f(d.tokens) + f(d.dk * d.dv));
        Family::Retrieval.cost(residual_flops(&d), bytes)
    }
    pub fn store(d: ResidualDims) -> Cost {
        // The output is written, and read first: from `base`, or itself when accumulating.
        Family::Storage.cost(residual_flops(&d), residual_bytes(&d, 1.0))
    }
    pub fn key_grad(d: ResidualDims) -> Cost {
        Family::KeyGrad.cost(residual_flops(&d), residual_bytes(&d, 0.0))
    }
    pub fn key_grad_normed(d: ResidualDims) -> Cost {
        let bytes = residual_bytes(&d, 0.0) + W * (2.0 * f(d.tokens) + f(d.dk * d.dv));
        Family::KeyGrad.cost(residual_flops(&d), bytes)
    }
}
