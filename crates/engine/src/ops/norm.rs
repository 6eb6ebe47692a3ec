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

#[cfg(feature = "cpu")]
mod cpu_twin {
    use super::*;
    use crate::ops::Scalar;
    use rayon::prelude::*;

    /// (mean, rstd) per row; mean is 0 for RMSNorm.
    pub fn cpu_stats<T: Scalar>(stats: &mut [T], x: &[T], d: NormDims) {
        assert_eq!(
            stats.len(),
            2 * d.rows,
            "norm: stats has {} values for {d:?}",
            stats.len()
        );
        assert_eq!(x.len(), d.rows * d.c, "norm: x has {} values for {d:?}", x.len());
        let n = T::of(d.c as f64);
        stats.par_chunks_mut(2).zip(x.par_chunks(d.c)).for_each(|(st, x)| {
            let mean = match d.kind {
                NormKind::LayerNorm => x.iter().copied().sum::<T>() / n,
                NormKind::RmsNorm => T::zero(),
            };
            let var = x.iter().map(|&v| (v - mean) * (v - mean)).sum::<T>() / n;
            st[0] = mean;
            st[1] = T::one() / (var + T::of(d.eps as f64)).sqrt();
        });
    }

    pub fn cpu_forward<T: Scalar>(out: &mut [T], stats: &mut [T], x: &[T], gain: &[T], d: NormDims) {
        check(&d, x.len(), gain.len(), stats.len());
        cpu_stats(stats, x, d);
        out.par_chunks_mut(d.c)
            .zip(stats.par_chunks(2))
            .zip(x.par_chunks(d.c))
            .for_each(|((o, st), x)| {
                for i in 0..d.c {
                    o[i] = (x[i] - st[0]) * st[1] * gain[i];
                }
            });
    }

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
        let n = T::of(d.c as f64);
        dx.par_chunks_mut(d.c).enumerate().for_each(|(r, dx)| {
            let (mean, rstd) = (stats[2 * r], stats[2 * r + 1]);
            let (x, g) = (&x[r * d.c..(r + 1) * d.c], &dout[r * d.c..(r + 1) * d.c]);
            let mut mean_dn = (0..d.c).map(|i| g[i] * gain[i]).sum::<T>() / n;
            let mean_dn_norm = (0..d.c).map(|i| g[i] * gain[i] * (x[i] - mean) * rstd).sum::<T>() / n;
            if d.kind == NormKind::RmsNorm {
                mean_dn = T::zero();
            }
            for i in 0..d.c {
                let nrm = (x[i] - mean) * rstd;
                dx[i] = dx[i] + rstd * (g[i] * gain[i] - mean_dn - nrm * mean_dn_norm);
            }
        });
        // dgain = Σ_rows dout ⊙ x̂: rows in fixed chunks walked along memory, then the chunks in
        // order, so the sum does not depend on the thread count.
        const ROWS: usize = 64;
        let partials: Vec<Vec<T>> = (0..d.rows.div_ceil(ROWS))
            .into_par_iter()
            .map(|ch| {
                let mut part = vec![T::zero(); d.c];
                for r in ch * ROWS..d.rows.min((ch + 1) * ROWS) {
                    let (mean, rstd) = (stats[2 * r], stats[2 * r + 1]);
                    let (g, x) = (&dout[r * d.c..(r + 1) * d.c], &x[r * d.c..(r + 1) * d.c]);
                    for i in 0..d.c {
                        part[i] = part[i] + g[i] * (x[i] - mean) * rstd;
                    }
                }
                part
            })
            .collect();
        dgain.fill(T::zero());
        for part in &partials {
            dgain.iter_mut().zip(part).for_each(|(a, &b)| *a = *a + b);
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
    pub fn norm_stats<T: Scalar>(_: &CpuBackend<T>, stats: &CpuTensor<T>, x: &CpuTensor<T>, d: NormDims) {
        cpu_stats(&mut stats.get_mut(), &x.get(), d)
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
    pub fn norm_stats(d: NormDims) -> Cost {
        let n = f(d.rows) * f(d.c);
        Family::Norm.cost(3.0 * n, W * (n + 2.0 * f(d.rows)))
    }
    pub fn norm_backward(d: NormDims) -> Cost {
        let n = f(d.rows) * f(d.c);
        // dout and x read, dx read and written; the gain and its gradient; the stats.
        let bytes = W * (4.0 * n + 2.0 * f(d.c) + 2.0 * f(d.rows));
        Family::Norm.cost(12.0 * n, bytes)
    }
}
