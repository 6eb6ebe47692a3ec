//! Cross-entropy with z-loss (SPEC §1): per row CE + z·(log Z)², averaged over counted rows.
//! The reported loss is the CE alone; the z-loss only shapes the gradient.

use crate::gpu::{AsArg, GpuBackend, GpuIndex, GpuTensor, VIEW_ALIGN};
use crate::shaders::{Define, WG};
use crate::Backend;
use std::ops::Range;

/// A target that is not counted (a prompt position of a synthetic task, say).
pub const IGNORE: u32 = u32::MAX;

/// What `shaders/cross_entropy.wgsl` reads from here.
pub(crate) const DEFINES: &[Define] = &[Define::u32("IGNORE", IGNORE)];

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CrossEntropyDims {
    pub rows: usize,
    pub v: usize,
    /// z-loss weight, 1e-4 by default.
    pub z: f32,
}

impl CrossEntropyDims {
    fn check(&self, logits: usize, rows: usize) {
        assert_eq!(
            logits,
            self.rows * self.v,
            "cross_entropy: logits has {logits} values for {self:?}"
        );
        assert_eq!(
            rows, self.rows,
            "cross_entropy: per-row tensor has {rows} values for {self:?}"
        );
    }
}

#[cfg(feature = "cpu")]
mod cpu_twin {
    use super::*;
    use crate::ops::Scalar;
    use rayon::prelude::*;

    pub fn cpu_forward<T: Scalar>(
        losses: &mut [T],
        lse: &mut [T],
        logits: &[T],
        targets: &[u32],
        scale: T,
        d: CrossEntropyDims,
    ) {
        d.check(logits.len(), losses.len());
        losses
            .par_iter_mut()
            .zip(lse.par_iter_mut())
            .enumerate()
            .for_each(|(r, (loss, lse))| {
                let row = &logits[r * d.v..(r + 1) * d.v];
                let mx = row.iter().copied().fold(T::neg_infinity(), T::max);
                // In lanes, so that the exps vectorise; the lanes' order is fixed.
                let l = mx + crate::cpu::simd::lane_sum(row, |x| (x - mx).softmax_exp()).ln();
                *lse = l;
                *loss = match targets[r] {
                    IGNORE => T::zero(),
                    t => scale * (l - row[t as usize]),
                };
            });
    }

    pub fn cpu_backward<T: Scalar>(
        dlogits: &mut [T],
        logits: &[T],
        lse: &[T],
        targets: &[u32],
        scale: T,
        d: CrossEntropyDims,
    ) {
        d.check(logits.len(), lse.len());
        let two_z = T::of(2.0 * d.z as f64);
        dlogits.par_chunks_mut(d.v).enumerate().for_each(|(r, g)| {
            if targets[r] == IGNORE {
                g.fill(T::zero());
                return;
            }
            let (l, row) = (lse[r], &logits[r * d.v..(r + 1) * d.v]);
            let softmax = |x: T| (x - l).softmax_exp() * (T::one() + two_z * l);
            for (g, &x) in g.iter_mut().zip(row) {
                *g = scale * softmax(x);
            }
            let t = targets[r] as usize;
            g[t] = scale * (softmax(row[t]) - T::one());
        });
    }
}
#[cfg(feature = "cpu")]
pub use cpu_twin::*;

fn params(d: &CrossEntropyDims) -> [u32; 3] {
    [d.rows as u32, d.v as u32, d.z.to_bits()]
}

/// Rows in runs of whole 64s whose logits fit one binding (one run when all of them fit):
/// every row is computed alone, so the runs change nothing but the number of launches.
fn row_ranges(gpu: &GpuBackend, d: &CrossEntropyDims) -> Option<Vec<Range<usize>>> {
    let per = gpu.max_binding_values() / d.v.max(1) / VIEW_ALIGN * VIEW_ALIGN;
    if per == 0 {
        gpu.refuse(format!(
            "cross_entropy: {VIEW_ALIGN} rows of {} logits do not fit this device's binding of {} values",
            d.v,
            gpu.max_binding_values()
        ));
        return None;
    }
    Some(
        (0..d.rows.max(1))
            .step_by(per)
            .map(|s| s..(s + per).min(d.rows))
            .collect(),
    )
}

/// One launch of `entry` per run of rows: `tensors` are bound per row (`false`) or per logit
/// (`true`), then the targets and the scale.
fn launch(
    gpu: &GpuBackend,
    entry: &'static str,
    tensors: [(&GpuTensor, bool); 3],
    targets: &GpuIndex,
    scale: &GpuTensor,
    d: CrossEntropyDims,
    threads_per_row: usize,
) {
    for r in row_ranges(gpu, &d).unwrap_or_default() {
        let part = CrossEntropyDims { rows: r.len(), ..d };
        let views = tensors.map(|(t, per_logit)| match per_logit {
            true => gpu.view(t, r.start * d.v, r.len() * d.v),
            false => gpu.view(t, r.start, r.len()),
        });
        let targets = targets.window(r.start, r.len());
        let args = [
            views[0].arg(),
            views[1].arg(),
            views[2].arg(),
            targets.arg(),
            scale.arg(),
        ];
        let grid = match threads_per_row {
            1 => gpu.grid_1d(part.rows, 1),
            _ => gpu.grid_1d(part.rows * d.v, WG),
        };
        gpu.dispatch("cross_entropy", entry, &params(&part), &args, grid);
    }
}

/// The ops on the GPU, as `GpuBackend` runs them: each checks its shapes and records its
/// launches.
pub mod gpu {
    use super::*;

    /// A workgroup per row.
    pub fn cross_entropy_forward(
        gpu: &GpuBackend,
        losses: &GpuTensor,
        lse: &GpuTensor,
        logits: &GpuTensor,
        targets: &GpuIndex,
        scale: &GpuTensor,
        d: CrossEntropyDims,
    ) {
        d.check(logits.len, losses.len);
        let tensors = [(losses, false), (lse, false), (logits, true)];
        launch(gpu, "cross_entropy_forward", tensors, targets, scale, d, 1);
    }

    /// A thread per logit.
    pub fn cross_entropy_backward(
        gpu: &GpuBackend,
        dlogits: &GpuTensor,
        logits: &GpuTensor,
        lse: &GpuTensor,
        targets: &GpuIndex,
        scale: &GpuTensor,
        d: CrossEntropyDims,
    ) {
        d.check(logits.len, lse.len);
        let tensors = [(dlogits, true), (logits, true), (lse, false)];
        launch(gpu, "cross_entropy_backward", tensors, targets, scale, d, d.v);
    }
}

/// The ops on the CPU, as `CpuBackend` runs them: each borrows its tensors for its twin above.
#[cfg(feature = "cpu")]
pub mod cpu {
    use super::*;
    use crate::cpu::{CpuBackend, CpuIndex, CpuTensor};
    use crate::ops::Scalar;

    pub fn cross_entropy_forward<T: Scalar>(
        _: &CpuBackend<T>,
        losses: &CpuTensor<T>,
        lse: &CpuTensor<T>,
        logits: &CpuTensor<T>,
        targets: &CpuIndex,
        scale: &CpuTensor<T>,
        d: CrossEntropyDims,
    ) {
        let scale = scale.get()[0];
        cpu_forward(
            &mut losses.get_mut(),
            &mut lse.get_mut(),
            &logits.get(),
            &targets.get(),
            scale,
            d,
        )
    }
    pub fn cross_entropy_backward<T: Scalar>(
        _: &CpuBackend<T>,
        dlogits: &CpuTensor<T>,
        logits: &CpuTensor<T>,
        lse: &CpuTensor<T>,
        targets: &CpuIndex,
        scale: &CpuTensor<T>,
        d: CrossEntropyDims,
    ) {
        let scale = scale.get()[0];
        cpu_backward(
            &mut dlogits.get_mut(),
            &logits.get(),
            &lse.get(),
            &targets.get(),
            scale,
            d,
        )
    }
}

/// What each op costs (`crate::cost` has the conventions).
pub mod cost {
    use super::*;
    use crate::cost::{f, Cost, Family, W};

    pub fn cross_entropy_forward(d: CrossEntropyDims) -> Cost {
        let n = f(d.rows) * f(d.v);
        Family::CrossEntropy.cost(4.0 * n, W * (n + 3.0 * f(d.rows)))
    }
    pub fn cross_entropy_backward(d: CrossEntropyDims) -> Cost {
        let n = f(d.rows) * f(d.v);
        Family::CrossEntropy.cost(5.0 * n, W * (2.0 * n + 2.0 * f(d.rows)))
    }
}
