//! LayerNorm and RMSNorm over the last axis, with a gain and no bias (SPEC §1: no biases).
//! The same op normalises a transformer's C values or an RMT's whole D_k×D_v matrix.

use crate::gpu::{AsArg, GpuBackend, GpuTensor};
use crate::shaders::{Define, SUM_COLS};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NormKind {
    /// y = (x - mean)/sqrt(var + eps) · g
    LayerNorm,
    /// y = x/sqrt(mean(x²) + eps) · g
    RmsNorm,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct NormDims {
    pub rows: usize,
    pub c: usize,
    pub kind: NormKind,
    pub eps: f32,
}

fn check(d: &NormDims, x: usize, gain: usize, stats: usize) {
    assert_eq!(x, d.rows * d.c, "norm: x has {x} values for {d:?}");
    assert_eq!(gain, d.c, "norm: gain has {gain} values for {d:?}");
    assert_eq!(stats, 2 * d.rows, "norm: stats has {stats} values for {d:?}");
}

/// One row's (mean, rstd); mean is 0 for RMSNorm. Sums in lanes (`cpu::simd`), so the
/// transformer's norms and the RMT's normed retrievals share these bits.
#[cfg(feature = "cpu")]
#[inline(always)]
pub(crate) fn row_stats<T: crate::ops::Scalar>(x: &[T], kind: NormKind, eps: f32) -> (T, T) {
    use crate::cpu::simd::lane_sum;
    let n = T::of(x.len() as f64);
    let mean = match kind {
        NormKind::LayerNorm => lane_sum(x, |v| v) / n,
        NormKind::RmsNorm => T::zero(),
    };
    let var = lane_sum(x, |v| (v - mean) * (v - mean)) / n;
    (mean, T::one() / (var + T::of(eps as f64)).sqrt())
}

/// x̂ = (x − mean)·rstd, into `out`: what `row_backward` takes.
#[cfg(feature = "cpu")]
#[inline(always)]
pub(crate) fn standardise<T: crate::ops::Scalar>(out: &mut [T], x: &[T], mean: T, rstd: T) {
    for (o, &v) in out.iter_mut().zip(x) {
        *o = (v - mean) * rstd;
    }
}

/// One row's input gradient, added to dx, from its standardised x̂ = (x − mean)·rstd: with
/// dn = dout ⊙ gain, dx += rstd · (dn − mean(dn) − x̂ · mean(dn ⊙ x̂)), mean(dn) left out for
/// RMSNorm. Adds the row's part of the gain's gradient, dout ⊙ x̂, to `dgain` in the same pass
/// as the two means' sums, which read the same values.
#[cfg(feature = "cpu")]
#[inline(always)]
pub(crate) fn row_backward<T: crate::ops::Scalar>(
    dx: &mut [T],
    dgain: &mut [T],
    dout: &[T],
    xhat: &[T],
    gain: &[T],
    rstd: T,
    kind: NormKind,
) {
    use crate::cpu::simd::LANES;
    let n = T::of(xhat.len() as f64);
    // Whole blocks of LANES, each lane's sums in arrays built anew each block: a shape the
    // vectoriser keeps in registers (over zipped values it kept the 32 lanes as scalars, and
    // arrays updated in place it kept on the stack).
    let (g16, g_rest) = dout.as_chunks::<LANES>();
    let (w16, w_rest) = gain.as_chunks::<LANES>();
    let (h16, h_rest) = xhat.as_chunks::<LANES>();
    let (a16, a_rest) = dgain.as_chunks_mut::<LANES>();
    let mut sum_dn = [T::zero(); LANES];
    let mut sum_dn_norm = [T::zero(); LANES];
    for (((g, w), h), a) in g16.iter().zip(w16).zip(h16).zip(a16) {
        let dn: [T; LANES] = std::array::from_fn(|l| g[l] * w[l]);
        sum_dn = std::array::from_fn(|l| sum_dn[l] + dn[l]);
        sum_dn_norm = std::array::from_fn(|l| sum_dn_norm[l] + dn[l] * h[l]);
        *a = std::array::from_fn(|l| a[l] + g[l] * h[l]);
    }
    for (l, (((&g, &w), &h), a)) in g_rest.iter().zip(w_rest).zip(h_rest).zip(a_rest).enumerate() {
        let dn = g * w;
        sum_dn[l] = sum_dn[l] + dn;
        sum_dn_norm[l] = sum_dn_norm[l] + dn * h;
        *a = *a + g * h;
    }
    let total = |s: [T; LANES]| s.iter().fold(T::zero(), |a, &b| a + b);
    let mean_dn = match kind {
        NormKind::LayerNorm => total(sum_dn) / n,
        NormKind::RmsNorm => T::zero(),
    };
    let mean_dn_norm = total(sum_dn_norm) / n;
    for (((d, &g), &w), &h) in dx.iter_mut().zip(dout).zip(gain).zip(xhat) {
        *d = *d + rstd * (g * w - mean_dn - h * mean_dn_norm);
    }
}

#[cfg(feature = "cpu")]
mod cpu_twin {
    use super::*;
    use crate::cpu::simd::{add_in_order, wide};
    use crate::ops::Scalar;
    use rayon::prelude::*;

    /// Rows a task normalises: enough to amortise a task, few enough to balance two threads.
    const ROWS: usize = 64;

    /// out (rows, C) = Norm(x) · gain; stats (rows, 2) = (mean, rstd), mean 0 for RMSNorm.
    pub fn cpu_forward<T: Scalar>(out: &mut [T], stats: &mut [T], x: &[T], gain: &[T], d: NormDims) {
        check(&d, x.len(), gain.len(), stats.len());
        out.par_chunks_mut(ROWS * d.c)
            .zip(stats.par_chunks_mut(ROWS * 2))
            .zip(x.par_chunks(ROWS * d.c))
            .for_each(|((out, stats), x)| forward_rows(out, stats, x, gain, d));
    }

    wide! {
        fn forward_rows<T: Scalar>(out: &mut [T], stats: &mut [T], x: &[T], gain: &[T], d: NormDims) {
            for ((o, st), x) in out.chunks_mut(d.c).zip(stats.chunks_mut(2)).zip(x.chunks(d.c)) {
                let (mean, rstd) = row_stats(x, d.kind, d.eps);
                (st[0], st[1]) = (mean, rstd);
                for ((o, &v), &g) in o.iter_mut().zip(x).zip(gain) {
                    *o = (v - mean) * rstd * g;
                }
            }
        }
    }

    /// dx += ∂L/∂x and dgain = Σ_rows dout ⊙ x̂, the rows in chunks of ROWS added in order, so
    /// the sum does not depend on the thread count.
    pub fn cpu_backward<T: Scalar>(
        dx: &mut [T],
        dgain: &mut [T],
        dout: &[T],
        x: &[T],
        gain: &[T],
        stats: &[T],
        d: NormDims,
    ) {
        check(&d, x.len(), gain.len(), stats.len());
        let parts: Vec<Vec<T>> = dx
            .par_chunks_mut(ROWS * d.c)
            .zip(dout.par_chunks(ROWS * d.c))
            .zip(x.par_chunks(ROWS * d.c))
            .zip(stats.par_chunks(ROWS * 2))
            .map(|(((dx, dout), x), stats)| backward_rows(dx, dout, x, gain, stats, d))
            .collect();
        add_in_order(dgain, parts);
    }

    wide! {
        /// A chunk of rows' dx, and its part of dgain.
        fn backward_rows<T: Scalar>(dx: &mut [T], dout: &[T], x: &[T], gain: &[T], stats: &[T], d: NormDims) -> Vec<T> {
            let (mut dgain, mut xhat) = (vec![T::zero(); d.c], vec![T::zero(); d.c]);
            for (((dx, dout), x), st) in dx.chunks_mut(d.c).zip(dout.chunks(d.c)).zip(x.chunks(d.c)).zip(stats.chunks(2)) {
                let (mean, rstd) = (st[0], st[1]);
                standardise(&mut xhat, x, mean, rstd);
                row_backward(dx, &mut dgain, dout, &xhat, gain, rstd, d.kind);
            }
            dgain
        }
    }
}
#[cfg(feature = "cpu")]
pub use cpu_twin::*;

/// `kind` in the shader's uniform.
const LAYER_NORM: u32 = 0;
const RMS_NORM: u32 = 1;

/// What `shaders/norm.wgsl` reads from here.
pub(crate) const DEFINES: &[Define] = &[Define::u32("LAYER_NORM", LAYER_NORM), Define::u32("RMS_NORM", RMS_NORM)];

fn params(d: &NormDims) -> [u32; 4] {
    let kind = match d.kind {
        NormKind::LayerNorm => LAYER_NORM,
        NormKind::RmsNorm => RMS_NORM,
    };
    [d.rows as u32, d.c as u32, kind, d.eps.to_bits()]
}

/// The ops on the GPU, as `GpuBackend` runs them: each checks its shapes and records its
/// launches.
pub mod gpu {
    use super::*;

    pub fn norm_forward(
        gpu: &GpuBackend,
        out: &GpuTensor,
        stats: &GpuTensor,
        x: &GpuTensor,
        gain: &GpuTensor,
        d: NormDims,
    ) {
        check(&d, x.len, gain.len, stats.len);
        let args = [out.arg(), stats.arg(), x.arg(), gain.arg()];
        gpu.dispatch("norm", "norm_forward", &params(&d), &args, gpu.grid_1d(d.rows, 1));
    }

    pub fn norm_stats(gpu: &GpuBackend, stats: &GpuTensor, x: &GpuTensor, d: NormDims) {
        assert_eq!(stats.len, 2 * d.rows, "norm: stats has {} values for {d:?}", stats.len);
        assert_eq!(x.len, d.rows * d.c, "norm: x has {} values for {d:?}", x.len);
        let args = [(2, stats.arg()), (3, x.arg())];
        gpu.dispatch_at("norm", "norm_stats", &params(&d), &args, gpu.grid_1d(d.rows, 1));
    }

    #[allow(clippy::too_many_arguments)]
    pub fn norm_backward(
        gpu: &GpuBackend,
        dx: &GpuTensor,
        dgain: &GpuTensor,
        dout: &GpuTensor,
        x: &GpuTensor,
        gain: &GpuTensor,
        stats: &GpuTensor,
        d: NormDims,
    ) {
        check(&d, x.len, gain.len, stats.len);
        let args = [dx.arg(), dout.arg(), x.arg(), gain.arg(), stats.arg()];
        gpu.dispatch(
            "norm",
            "norm_backward_input",
            &params(&d),
            &args,
            gpu.grid_1d(d.rows, 1),
        );
        // The gain itself is not needed here, so binding 4 stays empty.
        let args = [(1, dgain.arg()), (2, dout.arg()), (3, x.arg()), (5, stats.arg())];
        gpu.dispatch_at(
            "norm",
            "norm_backward_gain",
            &params(&d),
            &args,
            gpu.grid_1d(d.c, SUM_COLS),
        );
    }
}

/// The ops on the CPU, as `CpuBackend` runs them: each borrows its tensors for its twin above.
#[cfg(feature = "cpu")]
pub mod cpu {
    use super::*;
    use crate::cpu::{CpuBackend, CpuTensor};
    use crate::ops::Scalar;

    pub fn norm_forward<T: Scalar>(
        _: &CpuBackend<T>,
        out: &CpuTensor<T>,
        stats: &CpuTensor<T>,
        x: &CpuTensor<T>,
        gain: &CpuTensor<T>,
        d: NormDims,
    ) {
        cpu_forward(&mut out.get_mut(), &mut stats.get_mut(), &x.get(), &gain.get(), d)
    }
    #[allow(clippy::too_many_arguments)]
    pub fn norm_backward<T: Scalar>(
        _: &CpuBackend<T>,
        dx: &CpuTensor<T>,
        dgain: &CpuTensor<T>,
        dout: &CpuTensor<T>,
        x: &CpuTensor<T>,
        gain: &CpuTensor<T>,
        stats: &CpuTensor<T>,
        d: NormDims,
    ) {
        cpu_backward(
            &mut dx.get_mut(),
            &mut dgain.get_mut(),
            &dout.get(),
            &x.get(),
            &gain.get(),
            &stats.get(),
            d,
        )
    }
}

/// What each op costs (`crate::cost` has the conventions).
pub mod cost {
    use super::*;
    use crate::cost::{f, Cost, Family, W};

    pub fn norm_forward(d: NormDims) -> Cost {
        let n = f(d.rows) * f(d.c);
        Family::Norm.cost(7.0 * n, W * (2.0 * n + f(d.c) + 2.0 * f(d.rows)))
    }
    pub fn norm_backward(d: NormDims) -> Cost {
        let n = f(d.rows) * f(d.c);
        // dout and x read, dx read and written; the gain and its gradient; the stats.
        let bytes = W * (4.0 * n + 2.0 * f(d.c) + 2.0 * f(d.rows));
        Family::Norm.cost(12.0 * n, bytes)
    }
}
