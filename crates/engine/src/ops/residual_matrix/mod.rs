//! The two primitives of the Residual Matrix Transformer (SPEC §2), batched over all tokens.
//! Each token's residual is a D_k×D_v matrix X, stored contiguously.
//!
//! - **retrieval** of R' key vectors r^(h) ∈ R^{D_k} from the normalised residual:
//!   `y^(h) = r^(h)ᵀ Norm(X) ∈ R^{D_v}` (`retrieve_normed`, which computes the norm's
//!   statistics as it reads: Norm(X) is never written);
//! - **storage** of R' data vectors x^(h) ∈ R^{D_v}: `X_out = X_base + Σ_h w^(h) ⊗ x^(h)`,
//!   with the residual add fused (or `X_out += …` when there is no base).
//!
//! Their backwards each read the residual once. A storage's (`store_backward`): the data
//! gradient is a retrieval of dX_out, the key gradient `dw[h][k] = Σ_t Σ_v x[t,h,v] ·
//! dX_out[t,k,v]`. A normed retrieval's (`retrieve_normed_backward`): ∂L/∂Norm(X) is a storage
//! of dy with the same keys, fed straight into the norm's backward, and the key gradient reads
//! Norm(X) as the retrieval did.
//!
//! On the GPU each is a few launches of `shaders/residual_matrix.wgsl` and `shaders/norm.wgsl`;
//! on the CPU (`cpu_twin.rs`) one pass over a chunk of tokens at a time.
//! Shapes: keys (R', D_k); vectors (tokens, R', D_v); matrices (tokens, D_k, D_v).

use crate::gpu::{Arg, AsArg, Candidate, GpuBackend, GpuTensor};
use crate::shaders::{Define, SUM_COLS, WG};
use crate::NormDims;

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
mod cpu_twin;
#[cfg(feature = "cpu")]
pub use cpu_twin::*;

/// Keys each retrieval thread handles, so one read of X serves this many outputs: two vec4s
/// in the shader, so 8 and no other.
const KEYS_PER_THREAD: usize = 8;

/// Rows i each storage thread writes, so one read of the data serves this many outputs: a
/// vec4 in the shader, so 4 and no other.
const STORE_ROWS: usize = 4;

/// The side of the GPU key gradient's workgroup tiles of (key, row): (TILE/2)² threads, each
/// with a 2×2 block of outputs. A multiple of 4 (each thread loads 4 of a row block's values).
const KEY_GRAD_TILE: usize = 32;

/// Outputs a side each thread of the wide key gradient (`key_grad_partial_wide`) owns: 4×4,
/// against the default's 2×2. Four vec4s of sums in the shader, so 4 and no other.
const KEY_GRAD_WIDE: usize = 4;

// The wide kernel's threads tile KEY_GRAD_TILE² evenly, each loading 16 of a step's values in
// four reads of four rows.
const _: () = assert!(KEY_GRAD_TILE.is_multiple_of(KEY_GRAD_WIDE * KEY_GRAD_WIDE));

/// The key gradient's first launch, a partial sum per chunk of tokens and tile of (key, row): a
/// 2×2 block of outputs a thread (256 threads), or a 4×4 block (64 threads), whose every value
/// read from workgroup memory feeds twice the multiply-adds. Each output adds the same products
/// in the same order in both, so they differ only in speed, and tuning picks one per adapter
/// and shape (`gpu/tuning.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyGradKernel {
    /// 2×2 outputs a thread: the default.
    Pairs,
    /// 4×4 outputs a thread.
    Wide,
}

/// Every key gradient kernel, the default first.
pub const KEY_GRAD_KERNELS: &[KeyGradKernel] = &[KeyGradKernel::Pairs, KeyGradKernel::Wide];

impl KeyGradKernel {
    fn entry(&self) -> &'static str {
        match self {
            KeyGradKernel::Pairs => "key_grad_partial",
            KeyGradKernel::Wide => "key_grad_partial_wide",
        }
    }
    fn threads(&self) -> usize {
        let side = match self {
            KeyGradKernel::Pairs => 2,
            KeyGradKernel::Wide => KEY_GRAD_WIDE,
        };
        (KEY_GRAD_TILE / side).pow(2)
    }
}

impl Candidate for KeyGradKernel {
    fn name(&self) -> String {
        match self {
            KeyGradKernel::Pairs => "2×2 a thread".to_string(),
            KeyGradKernel::Wide => format!("{KEY_GRAD_WIDE}×{KEY_GRAD_WIDE} a thread"),
        }
    }
    fn fits(&self, gpu: &GpuBackend) -> bool {
        self.threads() as u32 <= gpu.limits.max_compute_invocations_per_workgroup
    }
}

/// The switch of `shaders/residual_matrix.wgsl` for the retrieval and key gradient that read
/// through the norm (`retrieve_normed` and its backward); off, they read X itself (a
/// storage's backward).
pub(crate) const NORMED: &str = "NORMED";

/// What `shaders/residual_matrix.wgsl` reads from here.
pub(crate) const DEFINES: &[Define] = &[
    Define::u32("KEYS_PER_THREAD", KEYS_PER_THREAD as u32),
    Define::u32("STORE_ROWS", STORE_ROWS as u32),
    Define::u32("KEY_GRAD_CHUNK", KEY_GRAD_CHUNK as u32),
    Define::u32("KEY_GRAD_TILE", KEY_GRAD_TILE as u32),
    Define::u32("KEY_GRAD_WIDE", KEY_GRAD_WIDE as u32),
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
/// (stats, gain) when `normed`. The first runs a workgroup per chunk of tokens and tile of
/// (key, row), the second one per `SUM_COLS` keys' values.
/// The first launch runs the [`KeyGradKernel`] tuned for the shape; tuning times it alone, on
/// the real inputs, since all it writes is the scratch `partials` the real launch then rewrites.
fn launch_key_grad(gpu: &GpuBackend, dkeys: &GpuTensor, normed: bool, args: &[Arg<'_>], d: &ResidualDims) {
    let pr = params(d);
    let tiles = d.keys.div_ceil(KEY_GRAD_TILE) * d.dk.div_ceil(KEY_GRAD_TILE);
    let partial = |k: KeyGradKernel| {
        gpu.dispatch_with(
            "residual_matrix",
            k.entry(),
            &[Define::bool(NORMED, normed)],
            &pr,
            args,
            gpu.grid_1d(d.tokens.div_ceil(KEY_GRAD_CHUNK) * tiles, 1),
        )
    };
    let class = || {
        let through = if normed { ", through the norm" } else { "" };
        format!(
            "key gradient {} tokens, {} keys by {}×{}{through}",
            d.tokens, d.keys, d.dk, d.dv
        )
    };
    let k = gpu.tuned("key_grad", class, KEY_GRAD_KERNELS, |k, _| {
        partial(k);
        true
    });
    partial(k);
    let partials = args[0];
    gpu.dispatch(
        "residual_matrix",
        "key_grad_reduce",
        &pr,
        &[dkeys.arg(), partials],
        gpu.grid_1d(d.key_values(), SUM_COLS),
    );
}

/// A storage's launch: a thread per column v and `STORE_ROWS` rows of each token's matrix.
fn store_grid(gpu: &GpuBackend, d: &ResidualDims) -> [u32; 3] {
    gpu.grid_1d(d.tokens * d.dk.div_ceil(STORE_ROWS) * d.dv, WG)
}

fn check_gpu_norm(op: &str, stats: &GpuTensor, gain: &GpuTensor, d: &ResidualDims, norm: &NormDims) {
    assert_eq!(
        stats.len,
        2 * d.tokens,
        "{op}: stats has {} values for {d:?}",
        stats.len
    );
    assert_eq!(gain.len, d.dk * d.dv, "{op}: gain has {} values for {d:?}", gain.len);
    assert!(
        norm.rows == d.tokens && norm.c == d.dk * d.dv,
        "{op}: {norm:?} does not normalise {d:?}"
    );
}

fn check_scratch(op: &str, partials: &GpuTensor, d: &ResidualDims) {
    assert!(
        partials.len >= d.key_grad_scratch(),
        "{op}: scratch has {} values, needs {}",
        partials.len,
        d.key_grad_scratch()
    );
}

/// The ops on the GPU, as `GpuBackend` runs them: each checks its shapes and records its
/// launches.
pub mod gpu {
    use super::*;
    use crate::ops::norm;

    pub fn store(
        gpu: &GpuBackend,
        out: &GpuTensor,
        base: Option<&GpuTensor>,
        keys: &GpuTensor,
        data: &GpuTensor,
        d: ResidualDims,
    ) {
        d.check("store", out.len, data.len, keys.len);
        let grid = store_grid(gpu, &d);
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

    /// The norm's statistics, then the retrieval reading through them.
    #[allow(clippy::too_many_arguments)]
    pub fn retrieve_normed(
        gpu: &GpuBackend,
        y: &GpuTensor,
        stats: &GpuTensor,
        x: &GpuTensor,
        gain: &GpuTensor,
        keys: &GpuTensor,
        d: ResidualDims,
        nd: NormDims,
    ) {
        d.check("retrieve_normed", x.len, y.len, keys.len);
        check_gpu_norm("retrieve_normed", stats, gain, &d, &nd);
        norm::gpu::norm_stats(gpu, stats, x, nd);
        launch_retrieve(gpu, y.arg(), x.arg(), Some([stats.arg(), gain.arg()]), keys.arg(), &d);
    }

    /// The data gradient (a retrieval of dout), then the key gradient's two launches.
    #[allow(clippy::too_many_arguments)]
    pub fn store_backward(
        gpu: &GpuBackend,
        ddata: &GpuTensor,
        dkeys: &GpuTensor,
        partials: &GpuTensor,
        dout: &GpuTensor,
        keys: &GpuTensor,
        data: &GpuTensor,
        d: ResidualDims,
    ) {
        d.check("store_backward", dout.len, ddata.len, dkeys.len);
        assert_eq!(data.len, ddata.len, "store_backward: data and ddata differ in length");
        assert_eq!(keys.len, dkeys.len, "store_backward: keys and dkeys differ in length");
        check_scratch("store_backward", partials, &d);
        launch_retrieve(gpu, ddata.arg(), dout.arg(), None, keys.arg(), &d);
        launch_key_grad(gpu, dkeys, false, &[partials.arg(), data.arg(), dout.arg()], &d);
    }

    /// dNorm = Σ keys ⊗ dy written to `dnorm` (`store_into`: no zero fill first), the key gradient through the norm, then the
    /// norm's backward from dNorm.
    #[allow(clippy::too_many_arguments)]
    pub fn retrieve_normed_backward(
        gpu: &GpuBackend,
        dx: &GpuTensor,
        dgain: &GpuTensor,
        dkeys: &GpuTensor,
        dnorm: &GpuTensor,
        partials: &GpuTensor,
        dy: &GpuTensor,
        x: &GpuTensor,
        stats: &GpuTensor,
        gain: &GpuTensor,
        keys: &GpuTensor,
        d: ResidualDims,
        nd: NormDims,
    ) {
        d.check("retrieve_normed_backward", x.len, dy.len, dkeys.len);
        check_gpu_norm("retrieve_normed_backward", stats, gain, &d, &nd);
        check_scratch("retrieve_normed_backward", partials, &d);
        assert_eq!(
            dnorm.len, x.len,
            "retrieve_normed_backward: dnorm and x differ in length"
        );
        let args = [(1, dnorm.arg()), (3, keys.arg()), (4, dy.arg())];
        gpu.dispatch_at("residual_matrix", "store_into", &params(&d), &args, store_grid(gpu, &d));
        let args = [partials.arg(), dy.arg(), x.arg(), stats.arg(), gain.arg()];
        launch_key_grad(gpu, dkeys, true, &args, &d);
        norm::gpu::norm_backward(gpu, dx, dgain, dnorm, x, gain, stats, nd);
    }
}

/// The ops on the CPU, as `CpuBackend` runs them: each borrows its tensors for its twin in
/// `cpu_twin.rs`. The CPU needs no scratch: it leaves `partials` and `dnorm` alone.
#[cfg(feature = "cpu")]
pub mod cpu {
    use super::*;
    use crate::cpu::{CpuBackend, CpuTensor};
    use crate::ops::Scalar;

    /// Runs `f` on zeroed copies of the small gradients `outs`, then writes each back: the
    /// gradients of one model are views of one buffer, which can be borrowed once at a time.
    fn into_small<T: Scalar, const N: usize>(outs: [&CpuTensor<T>; N], f: impl FnOnce(&mut [Vec<T>; N])) {
        let mut values = outs.map(|t| vec![T::zero(); t.get().len()]);
        f(&mut values);
        for (t, v) in outs.iter().zip(&values) {
            t.get_mut().copy_from_slice(v);
        }
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
    #[allow(clippy::too_many_arguments)]
    pub fn retrieve_normed<T: Scalar>(
        _: &CpuBackend<T>,
        y: &CpuTensor<T>,
        stats: &CpuTensor<T>,
        x: &CpuTensor<T>,
        gain: &CpuTensor<T>,
        keys: &CpuTensor<T>,
        d: ResidualDims,
        nd: NormDims,
    ) {
        let (x, gain, keys) = (x.get(), gain.get(), keys.get());
        cpu_retrieve_normed(&mut y.get_mut(), &mut stats.get_mut(), &x, &gain, &keys, d, nd)
    }
    #[allow(clippy::too_many_arguments)]
    pub fn store_backward<T: Scalar>(
        _: &CpuBackend<T>,
        ddata: &CpuTensor<T>,
        dkeys: &CpuTensor<T>,
        _partials: &CpuTensor<T>,
        dout: &CpuTensor<T>,
        keys: &CpuTensor<T>,
        data: &CpuTensor<T>,
        d: ResidualDims,
    ) {
        into_small([dkeys], |[dk]| {
            let (dout, keys, data) = (dout.get(), keys.get(), data.get());
            cpu_store_backward(&mut ddata.get_mut(), dk, &dout, &keys, &data, d)
        })
    }
    #[allow(clippy::too_many_arguments)]
    pub fn retrieve_normed_backward<T: Scalar>(
        _: &CpuBackend<T>,
        dx: &CpuTensor<T>,
        dgain: &CpuTensor<T>,
        dkeys: &CpuTensor<T>,
        _dnorm: &CpuTensor<T>,
        _partials: &CpuTensor<T>,
        dy: &CpuTensor<T>,
        x: &CpuTensor<T>,
        stats: &CpuTensor<T>,
        gain: &CpuTensor<T>,
        keys: &CpuTensor<T>,
        d: ResidualDims,
        nd: NormDims,
    ) {
        into_small([dgain, dkeys], |[dg, dk]| {
            let (dy, x, stats, gain, keys) = (dy.get(), x.get(), stats.get(), gain.get(), keys.get());
            cpu_retrieve_normed_backward(&mut dx.get_mut(), dg, dk, &dy, &x, &stats, &gain, &keys, d, nd)
        })
    }
}

/// What each op costs (`crate::cost` has the conventions).
pub mod cost {
    use super::*;
    use crate::cost::{f, Cost, Family, W};

    fn residual_flops(d: &ResidualDims) -> f64 {
        2.0 * f(d.tokens) * f(d.keys) * f(d.dk) * f(d.dv)
    }

    /// Each matrix read once and written `matrices_written` times, each vector and key once.
    fn residual_bytes(d: &ResidualDims, matrices_written: f64) -> f64 {
        W * (f(d.matrices()) * (1.0 + matrices_written) + f(d.vectors()) + f(d.key_values()))
    }

    /// The norm's statistics (tokens, 2) and its gain (D_k·D_v).
    fn norm_bytes(d: &ResidualDims) -> f64 {
        W * (2.0 * f(d.tokens) + f(d.dk * d.dv))
    }

    pub fn store(d: ResidualDims) -> Cost {
        // The output is written, and read first: from `base`, or itself when accumulating.
        Family::Storage.cost(residual_flops(&d), residual_bytes(&d, 1.0))
    }
    pub fn retrieve_normed(d: ResidualDims, _: NormDims) -> Cost {
        Family::Retrieval.cost(residual_flops(&d), residual_bytes(&d, 0.0) + norm_bytes(&d))
    }
    pub fn store_backward(d: ResidualDims) -> Cost {
        // dout read; data read, ddata written; keys read, dkeys written.
        let bytes = residual_bytes(&d, 0.0) + W * (f(d.vectors()) + f(d.key_values()));
        Family::StorageBackward.cost(2.0 * residual_flops(&d), bytes)
    }
    pub fn retrieve_normed_backward(d: ResidualDims, _: NormDims) -> Cost {
        // x read, dx read and written; dy and keys read, dkeys written; stats, gain and dgain.
        let bytes = residual_bytes(&d, 2.0) + W * f(d.key_values()) + norm_bytes(&d) + W * f(d.dk * d.dv);
        Family::RetrievalBackward.cost(2.0 * residual_flops(&d), bytes)
    }
}
