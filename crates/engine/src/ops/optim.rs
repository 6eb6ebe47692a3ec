//! Deterministic reductions and AdamW with decay groups and global-norm clipping.

use crate::gpu::{AsArg, GpuBackend, GpuTensor, VIEW_ALIGN};
use crate::shaders::{Define, WG};
use crate::Backend;

/// The per-step values AdamW reads from a small tensor, written by the host every step.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Hyper {
    pub lr: f32,
    pub beta1: f32,
    pub beta2: f32,
    pub eps: f32,
    pub weight_decay: f32,
    /// 1-based step number, for the bias corrections.
    pub step: u32,
    pub max_grad_norm: f32,
    /// The learning-rate multiplier of the boosted values [0, boost_end).
    pub lr_boost: f32,
}

/// The slots of the per-step tensor, in the layout `shaders/optim.wgsl` reads (`hyper[LR]`…).
impl Hyper {
    pub const LR: usize = 0;
    pub const BETA1: usize = 1;
    pub const BETA2: usize = 2;
    pub const EPS: usize = 3;
    pub const WEIGHT_DECAY: usize = 4;
    /// 1 − β₁ᵗ, the first moment's bias correction.
    pub const BIAS1: usize = 5;
    /// 1 − β₂ᵗ.
    pub const BIAS2: usize = 6;
    pub const MAX_GRAD_NORM: usize = 7;
    pub const LR_BOOST: usize = 8;
    pub const LEN: usize = 9;

    pub fn to_array(self) -> [f32; Self::LEN] {
        let t = self.step as i32;
        let mut a = [0.0; Self::LEN];
        a[Self::LR] = self.lr;
        a[Self::BETA1] = self.beta1;
        a[Self::BETA2] = self.beta2;
        a[Self::EPS] = self.eps;
        a[Self::WEIGHT_DECAY] = self.weight_decay;
        a[Self::BIAS1] = 1.0 - self.beta1.powi(t);
        a[Self::BIAS2] = 1.0 - self.beta2.powi(t);
        a[Self::MAX_GRAD_NORM] = self.max_grad_norm;
        a[Self::LR_BOOST] = self.lr_boost;
        a
    }
}

/// What `shaders/optim.wgsl` reads from here: the slots of [`Hyper`].
pub(crate) const DEFINES: &[Define] = &[
    Define::u32("LR", Hyper::LR as u32),
    Define::u32("BETA1", Hyper::BETA1 as u32),
    Define::u32("BETA2", Hyper::BETA2 as u32),
    Define::u32("EPS", Hyper::EPS as u32),
    Define::u32("WEIGHT_DECAY", Hyper::WEIGHT_DECAY as u32),
    Define::u32("BIAS1", Hyper::BIAS1 as u32),
    Define::u32("BIAS2", Hyper::BIAS2 as u32),
    Define::u32("MAX_GRAD_NORM", Hyper::MAX_GRAD_NORM as u32),
    Define::u32("LR_BOOST", Hyper::LR_BOOST as u32),
    Define::u32("HYPER_LEN", Hyper::LEN as u32),
];

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdamWDims {
    pub n: usize,
    /// Values [0, decay_end) get weight decay; the rest do not.
    pub decay_end: usize,
    /// Values [0, boost_end) learn at `lr_boost` times the learning rate.
    pub boost_end: usize,
}

#[cfg(feature = "cpu")]
mod cpu_twin {
    use super::*;
    use crate::cpu::simd::{halves, wide, LANES};
    use crate::ops::Scalar;
    use rayon::prelude::*;

    /// Σ x or Σ x², in f64 whatever T is: the reference for the GPU's tree order. Chunks of
    /// CHUNK values are summed side by side, each in lanes, then the chunks' sums in order: the
    /// order depends on the length alone, not on the threads. (One chain of f64 additions, a
    /// value at a time, took 4 cycles a value: 45 ms a step for the mid-size RMT's 29M gradients.)
    pub fn cpu_sum<T: Scalar>(x: &[T], squares: bool) -> T {
        let parts: Vec<f64> = x.par_chunks(CHUNK).map(|c| chunk_sum(c, squares)).collect();
        T::of(parts.iter().fold(0.0, |s, &p| s + p))
    }

    wide! {
        /// Σ x or Σ x² over one chunk, in f64, value i into lane i mod LANES, the lanes folded in
        /// halves.
        fn chunk_sum<T: Scalar>(x: &[T], squares: bool) -> f64 {
            let mut acc = [0f64; LANES];
            let mut blocks = x.chunks_exact(LANES);
            for b in &mut blocks {
                for l in 0..LANES {
                    let v = b[l].f64();
                    acc[l] += if squares { v * v } else { v };
                }
            }
            for (l, &v) in blocks.remainder().iter().enumerate() {
                let v = v.f64();
                acc[l] += if squares { v * v } else { v };
            }
            halves(acc, |a, b| a + b)
        }
    }

    pub fn cpu_adamw<T: Scalar>(
        params: &mut [T],
        m: &mut [T],
        v: &mut [T],
        grads: &[T],
        hyper: &[T],
        grad_sumsq: T,
        d: AdamWDims,
    ) {
        assert!(
            params.len() == d.n && m.len() == d.n && v.len() == d.n && grads.len() == d.n,
            "adamw: lengths differ from {d:?}"
        );
        let norm = grad_sumsq.sqrt();
        let max_norm = hyper[Hyper::MAX_GRAD_NORM];
        let clip = if norm > max_norm { max_norm / norm } else { T::one() };
        (params.par_chunks_mut(CHUNK).zip(m.par_chunks_mut(CHUNK)))
            .zip(v.par_chunks_mut(CHUNK).zip(grads.par_chunks(CHUNK)))
            .enumerate()
            .for_each(|(c, ((p, m), (v, g)))| adamw_chunk(p, m, v, g, hyper, clip, c * CHUNK, d));
    }

    /// Values a task of `cpu_adamw` updates: each value's update is its own, so the split
    /// changes no bits.
    const CHUNK: usize = 1 << 14;

    wide! {
        /// The values from `first` on of `cpu_adamw`, in the CPU's widest registers.
        fn adamw_chunk<T: Scalar>(p: &mut [T], m: &mut [T], v: &mut [T], g: &[T], hyper: &[T], clip: T, first: usize, d: AdamWDims) {
            let h = |i: usize| hyper[i];
            let (beta1, beta2) = (h(Hyper::BETA1), h(Hyper::BETA2));
            for (i, ((p, m), (v, &g))) in (first..).zip(p.iter_mut().zip(m).zip(v.iter_mut().zip(g))) {
                let g = g * clip;
                *m = beta1 * *m + (T::one() - beta1) * g;
                *v = beta2 * *v + (T::one() - beta2) * g * g;
                let wd = if i < d.decay_end {
                    h(Hyper::WEIGHT_DECAY)
                } else {
                    T::zero()
                };
                let lr = if i < d.boost_end {
                    h(Hyper::LR) * h(Hyper::LR_BOOST)
                } else {
                    h(Hyper::LR)
                };
                let update = (*m / h(Hyper::BIAS1)) / ((*v / h(Hyper::BIAS2)).sqrt() + h(Hyper::EPS)) + wd * *p;
                *p = *p - lr * update;
            }
        }
    }
}
#[cfg(feature = "cpu")]
pub use cpu_twin::*;

/// Workgroups of the first launch of `sum`: one per 16 384 values, at most SUM_BLOCKS. It
/// depends on n alone, so the order of every addition is fixed by n.
pub(crate) const SUM_BLOCKS: usize = 1024;

fn sum_blocks(n: usize) -> usize {
    n.div_ceil(16 * 1024).clamp(1, SUM_BLOCKS)
}

/// The ops on the GPU, as `GpuBackend` runs them: each checks its shapes and records its
/// launches.
pub mod gpu {
    use super::*;

    /// Σ x in two launches. The blocks of the first depend on n alone; when x is larger than one
    /// binding, runs of whole blocks are bound in windows, one launch each, and every block still
    /// adds its values in the same order, so the sum is the same bits at any binding size.
    pub fn sum(gpu: &GpuBackend, out: &GpuTensor, x: &GpuTensor, squares: bool) {
        assert!(out.len >= 1, "sum: out needs one value");
        let g = sum_blocks(x.len);
        let block = x.len.div_ceil(g);
        let partials = gpu.sum_partials();
        // A window starts at the aligned value at or before its first block: up to 63 more values.
        let Some(per) = gpu
            .max_binding_values()
            .checked_sub(VIEW_ALIGN - 1)
            .map(|v| v / block.max(1))
            .filter(|&p| p > 0)
        else {
            return gpu.refuse(format!(
                "sum: one block of {block} values is over this device's binding of {} values",
                gpu.max_binding_values()
            ));
        };
        for first in (0..g).step_by(per) {
            let last = (first + per).min(g);
            let base = (first * block).min(x.len) / VIEW_ALIGN * VIEW_ALIGN;
            let end = (last * block).min(x.len);
            let window = gpu.view(x, base, end - base);
            gpu.dispatch(
                "optim",
                "sum_partial",
                &[x.len as u32, squares as u32, g as u32, first as u32, base as u32],
                &[partials.arg(), window.arg()],
                [(last - first) as u32, 1, 1],
            );
        }
        gpu.dispatch(
            "optim",
            "sum_final",
            &[g as u32, 0, 0],
            &[out.arg(), gpu.view(&partials, 0, g).arg()],
            [1, 1, 1],
        );
    }

    /// AdamW over binding-sized ranges, one launch each: every value is updated alone, and each
    /// range's decay and boost ends are moved to its own start.
    #[allow(clippy::too_many_arguments)]
    pub fn adamw(
        gpu: &GpuBackend,
        params: &GpuTensor,
        m: &GpuTensor,
        v: &GpuTensor,
        grads: &GpuTensor,
        hyper: &GpuTensor,
        grad_sumsq: &GpuTensor,
        d: AdamWDims,
    ) {
        assert!(
            params.len == d.n && m.len == d.n && v.len == d.n && grads.len == d.n,
            "adamw: lengths differ from {d:?}"
        );
        assert_eq!(hyper.len, Hyper::LEN, "adamw: hyper has {} values", hyper.len);
        let Some(ranges) = gpu.split(d.n, VIEW_ALIGN) else {
            return gpu.refuse("adamw: this device binds no storage at all".into());
        };
        for r in ranges {
            let local = |end: usize| end.clamp(r.start, r.end) - r.start;
            let views = [params, m, v, grads].map(|t| gpu.view(t, r.start, r.len()));
            let args = [
                views[0].arg(),
                views[1].arg(),
                views[2].arg(),
                views[3].arg(),
                hyper.arg(),
                grad_sumsq.arg(),
            ];
            gpu.dispatch(
                "optim",
                "adamw",
                &[r.len() as u32, local(d.decay_end) as u32, local(d.boost_end) as u32],
                &args,
                gpu.grid_1d(r.len(), WG),
            );
        }
    }
}

/// The ops on the CPU, as `CpuBackend` runs them: each borrows its tensors for its twin above.
#[cfg(feature = "cpu")]
pub mod cpu {
    use super::*;
    use crate::cpu::{CpuBackend, CpuTensor};
    use crate::ops::Scalar;

    pub fn sum<T: Scalar>(_: &CpuBackend<T>, out: &CpuTensor<T>, x: &CpuTensor<T>, squares: bool) {
        out.get_mut()[0] = cpu_sum(&x.get(), squares)
    }
    #[allow(clippy::too_many_arguments)]
    pub fn adamw<T: Scalar>(
        _: &CpuBackend<T>,
        params: &CpuTensor<T>,
        m: &CpuTensor<T>,
        v: &CpuTensor<T>,
        grads: &CpuTensor<T>,
        hyper: &CpuTensor<T>,
        grad_sumsq: &CpuTensor<T>,
        d: AdamWDims,
    ) {
        cpu_adamw(
            &mut params.get_mut(),
            &mut m.get_mut(),
            &mut v.get_mut(),
            &grads.get(),
            &hyper.get(),
            grad_sumsq.get()[0],
            d,
        )
    }
}

/// What each op costs (`crate::cost` has the conventions).
pub mod cost {
    use super::*;
    use crate::cost::{f, Cost, Family, W};

    pub fn sum(n: usize, squares: bool) -> Cost {
        let n = f(n);
        // Σx² is the global gradient norm AdamW clips by; Σx is the mean loss.
        let family = if squares { Family::AdamW } else { Family::CrossEntropy };
        let flops = if squares { 2.0 * n } else { n };
        family.cost(flops, W * n)
    }
    pub fn adamw(d: AdamWDims) -> Cost {
        let n = f(d.n);
        // Parameters and both moments read and written, the gradient read.
        Family::AdamW.cost(15.0 * n, 7.0 * W * n)
    }
}

#[cfg(all(test, feature = "cpu"))]
mod tests {
    use super::cpu_sum;

    /// The chunked, laned sum agrees with one f64 chain at lengths that leave a partial chunk and
    /// a partial block of lanes, in f32 and in f64, for sums and sums of squares.
    #[test]
    fn sums_every_value_once() {
        for n in [0, 1, 17, (1 << 14) + 3, 70_001] {
            let x: Vec<f64> = (0..n)
                .map(|i| ((i * 7919) % 1000) as f64 / 500.0 - 1.0 + 1e-3)
                .collect();
            let plain: f64 = x.iter().sum();
            let squares: f64 = x.iter().map(|v| v * v).sum();
            let close = |got: f64, want: f64, tol: f64| (got - want).abs() <= tol * want.abs().max(1.0);
            assert!(close(cpu_sum(&x, false), plain, 1e-12), "Σx, n {n}");
            assert!(close(cpu_sum(&x, true), squares, 1e-12), "Σx², n {n}");
            let x32: Vec<f32> = x.iter().map(|&v| v as f32).collect();
            let want: f64 = x32.iter().map(|&v| v as f64 * v as f64).sum();
            assert!(close(cpu_sum(&x32, true) as f64, want, 1e-6), "f32 Σx², n {n}");
        }
    }
}
