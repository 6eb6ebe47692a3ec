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

use crate::gpu::{AsArg, GpuBackend, GpuTensor};

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
    /// Values of the scratch buffer `key_grad` needs for its partial sums.
    pub fn key_grad_scratch(&self) -> usize {
        self.tokens.div_ceil(KEY_GRAD_CHUNK) * self.key_values()
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
    // 0 in `matmul::cpu`); the key gradient sums per-token GEMMs in fixed chunks of tokens.

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
        let (va, vb) = (d.keys * d.dv, d.dk * d.dv);
        let partials: Vec<Vec<T>> = (0..d.tokens.div_ceil(KEY_GRAD_CHUNK))
            .into_par_iter()
            .map(|c| {
                let mut part = vec![T::zero(); d.key_values()];
                for t in c * KEY_GRAD_CHUNK..d.tokens.min((c + 1) * KEY_GRAD_CHUNK) {
                    let dims = MatmulDims::new(d.keys, d.dk, d.dv).trans_b().accumulate();
                    matmul::cpu_single(&mut part, &a[t * va..(t + 1) * va], &b[t * vb..(t + 1) * vb], dims);
                }
                part
            })
            .collect();
        dkeys.fill(T::zero());
        for part in &partials {
            dkeys.iter_mut().zip(part).for_each(|(g, &p)| *g = *g + p);
        }
    }

    /// Norm(X) per token from its statistics (mean, rstd) and gain: the reference for the fused
    /// kernels, which compute the same values as they read.
    pub fn cpu_normalised<T: Scalar>(x: &[T], stats: &[T], gain: &[T], d: ResidualDims) -> Vec<T> {
        let m = d.dk * d.dv;
        assert_eq!(
            stats.len(),
            2 * d.tokens,
            "normed: stats has {} values for {d:?}",
            stats.len()
        );
        assert_eq!(gain.len(), m, "normed: gain has {} values for {d:?}", gain.len());
        let mut out = vec![T::zero(); x.len()];
        out.par_chunks_mut(m)
            .zip(x.par_chunks(m))
            .enumerate()
            .for_each(|(t, (o, row))| {
                let (mean, rstd) = (stats[2 * t], stats[2 * t + 1]);
                for i in 0..m {
                    o[i] = (row[i] - mean) * rstd * gain[i];
                }
            });
        out
    }

    pub fn cpu_retrieve_normed<T: Scalar>(y: &mut [T], x: &[T], stats: &[T], gain: &[T], keys: &[T], d: ResidualDims) {
        cpu_retrieve(y, &cpu_normalised(x, stats, gain, d), keys, d)
    }

    pub fn cpu_key_grad_normed<T: Scalar>(dkeys: &mut [T], a: &[T], x: &[T], stats: &[T], gain: &[T], d: ResidualDims) {
        cpu_key_grad(dkeys, a, &cpu_normalised(x, stats, gain, d), d)
    }
}
#[cfg(feature = "cpu")]
pub use cpu_twin::*;

/// Keys each retrieval thread handles, so one read of X serves this many outputs.
const RETRIEVE_KEYS_PER_THREAD: usize = 8;

fn params(d: &ResidualDims) -> [u32; 4] {
    [d.tokens as u32, d.dk as u32, d.dv as u32, d.keys as u32]
}

pub fn gpu_retrieve(gpu: &GpuBackend, y: &GpuTensor, x: &GpuTensor, keys: &GpuTensor, d: ResidualDims) {
    d.check("retrieve", x.len, y.len, keys.len);
    let threads = d.tokens * d.dv * d.keys.div_ceil(RETRIEVE_KEYS_PER_THREAD);
    gpu.dispatch(
        "residual_matrix",
        "retrieve",
        &params(&d),
        &[y.arg(), x.arg(), keys.arg()],
        gpu.grid_1d(threads, 256),
    );
}

pub fn gpu_store(
    gpu: &GpuBackend,
    out: &GpuTensor,
    base: Option<&GpuTensor>,
    keys: &GpuTensor,
    data: &GpuTensor,
    d: ResidualDims,
) {
    d.check("store", out.len, data.len, keys.len);
    let grid = gpu.grid_1d(d.matrices(), 256);
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

pub fn gpu_key_grad(
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
    gpu.dispatch(
        "residual_matrix",
        "key_grad_partial",
        &params(&d),
        &[partials.arg(), a.arg(), b.arg()],
        gpu.grid_1d(d.key_grad_scratch(), 256),
    );
    gpu.dispatch(
        "residual_matrix",
        "key_grad_reduce",
        &params(&d),
        &[dkeys.arg(), partials.arg()],
        gpu.grid_1d(d.key_values(), 256),
    );
}

/// Statistics and gain of the norm a fused retrieval applies as it reads.
pub struct NormedInput<'a> {
    pub stats: &'a GpuTensor,
    pub gain: &'a GpuTensor,
}

pub fn gpu_retrieve_normed(
    gpu: &GpuBackend,
    y: &GpuTensor,
    x: &GpuTensor,
    norm: NormedInput<'_>,
    keys: &GpuTensor,
    d: ResidualDims,
) {
    d.check("retrieve_normed", x.len, y.len, keys.len);
    assert_eq!(norm.stats.len, 2 * d.tokens, "retrieve_normed: stats");
    assert_eq!(norm.gain.len, d.dk * d.dv, "retrieve_normed: gain");
    let threads = d.tokens * d.dv * d.keys.div_ceil(RETRIEVE_KEYS_PER_THREAD);
    let args = [y.arg(), x.arg(), keys.arg(), norm.stats.arg(), norm.gain.arg()];
    gpu.dispatch(
        "residual_matrix",
        "retrieve_normed",
        &params(&d),
        &args,
        gpu.grid_1d(threads, 256),
    );
}

pub fn gpu_key_grad_normed(
    gpu: &GpuBackend,
    dkeys: &GpuTensor,
    partials: &GpuTensor,
    a: &GpuTensor,
    x: &GpuTensor,
    norm: NormedInput<'_>,
    d: ResidualDims,
) {
    d.check("key_grad_normed", x.len, a.len, dkeys.len);
    assert!(
        partials.len >= d.key_grad_scratch(),
        "key_grad_normed: scratch too short"
    );
    let args = [partials.arg(), a.arg(), x.arg(), norm.stats.arg(), norm.gain.arg()];
    let pr = params(&d);
    gpu.dispatch(
        "residual_matrix",
        "key_grad_partial_normed",
        &pr,
        &args,
        gpu.grid_1d(d.key_grad_scratch(), 256),
    );
    let args = [dkeys.arg(), partials.arg()];
    gpu.dispatch(
        "residual_matrix",
        "key_grad_reduce",
        &pr,
        &args,
        gpu.grid_1d(d.key_values(), 256),
    );
}
