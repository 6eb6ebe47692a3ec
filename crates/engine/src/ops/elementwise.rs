//! Elementwise ops over flat tensors of n values: fill, add, add_assign, tanh-GELU, and
//! replace, which overwrites a product of rows and columns (an intervention's edit).

use crate::gpu::{AsArg, GpuBackend, GpuTensor, VIEW_ALIGN};
use crate::shaders::{Define, WG};
use crate::Backend;

/// The tanh-GELU's constants: sqrt(2/π), the cubic term's 0.044715, and 3 times it (the
/// derivative's), each rounded to f32 once from its f64 value on the GPU.
const GELU_K: f64 = 0.797_884_560_802_865_4;
const GELU_C: f64 = 0.044715;
const GELU_C3: f64 = 3.0 * GELU_C;

/// What `shaders/elementwise.wgsl` reads from here.
pub(crate) const DEFINES: &[Define] = &[
    Define::f32("GELU_K", GELU_K as f32),
    Define::f32("GELU_C", GELU_C as f32),
    Define::f32("GELU_C3", GELU_C3 as f32),
];

#[cfg(feature = "cpu")]
mod cpu_twin {
    use super::{GELU_C, GELU_C3, GELU_K};
    use crate::cpu::simd::wide;
    use crate::ops::Scalar;
    use rayon::prelude::*;

    /// Values per rayon task: each task is a plain loop the compiler vectorises (a per-value
    /// parallel iterator is not), and the split cannot change a value.
    const CHUNK: usize = 1 << 14;

    pub fn cpu_add<T: Scalar>(out: &mut [T], a: &[T], b: &[T]) {
        assert!(out.len() == a.len() && a.len() == b.len(), "add: lengths differ");
        (out.par_chunks_mut(CHUNK)
            .zip(a.par_chunks(CHUNK))
            .zip(b.par_chunks(CHUNK)))
        .for_each(|((o, a), b)| o.iter_mut().zip(a).zip(b).for_each(|((o, &a), &b)| *o = a + b));
    }

    pub fn cpu_add_assign<T: Scalar>(out: &mut [T], a: &[T]) {
        assert_eq!(out.len(), a.len(), "add_assign: lengths differ");
        (out.par_chunks_mut(CHUNK).zip(a.par_chunks(CHUNK)))
            .for_each(|(o, a)| o.iter_mut().zip(a).for_each(|(o, &a)| *o = *o + a));
    }

    pub fn cpu_replace<T: Scalar>(out: &mut [T], rows: &[T], cols: &[T], value: &[T]) {
        let w = cols.len();
        assert!(
            out.len() == rows.len() * w && value.len() == out.len(),
            "replace: out is not rows × cols, or value differs from it"
        );
        (out.par_chunks_mut(w).zip(value.par_chunks(w)).zip(rows))
            .filter(|(_, &r)| r != T::zero())
            .for_each(|((o, v), _)| {
                for ((o, &v), &c) in o.iter_mut().zip(v).zip(cols) {
                    if c != T::zero() {
                        *o = v;
                    }
                }
            });
    }

    pub fn cpu_gelu_forward<T: Scalar>(out: &mut [T], x: &[T]) {
        assert_eq!(out.len(), x.len(), "gelu: lengths differ");
        out.par_chunks_mut(CHUNK)
            .zip(x.par_chunks(CHUNK))
            .for_each(|(out, x)| gelu_forward_chunk(out, x));
    }

    wide! {
        /// A chunk of `cpu_gelu_forward`, in the CPU's widest registers.
        fn gelu_forward_chunk<T: Scalar>(out: &mut [T], x: &[T]) {
            let (k, c, half) = (T::of(GELU_K), T::of(GELU_C), T::of(0.5));
            for (o, &x) in out.iter_mut().zip(x) {
                let t = (k * (x + c * x * x * x)).gelu_tanh();
                *o = half * x * (T::one() + t);
            }
        }
    }

    pub fn cpu_gelu_backward<T: Scalar>(dx: &mut [T], dout: &[T], x: &[T]) {
        assert!(
            dx.len() == dout.len() && dout.len() == x.len(),
            "gelu_backward: lengths differ"
        );
        (dx.par_chunks_mut(CHUNK)
            .zip(dout.par_chunks(CHUNK))
            .zip(x.par_chunks(CHUNK)))
        .for_each(|((dx, dout), x)| gelu_backward_chunk(dx, dout, x));
    }

    wide! {
        /// A chunk of `cpu_gelu_backward`, in the CPU's widest registers.
        fn gelu_backward_chunk<T: Scalar>(dx: &mut [T], dout: &[T], x: &[T]) {
            let (k, c, c3, half) = (T::of(GELU_K), T::of(GELU_C), T::of(GELU_C3), T::of(0.5));
            for ((d, &g), &x) in dx.iter_mut().zip(dout).zip(x) {
                let t = (k * (x + c * x * x * x)).gelu_tanh();
                let dt = (T::one() - t * t) * k * (T::one() + c3 * x * x);
                *d = g * (half * (T::one() + t) + half * x * dt);
            }
        }
    }
}

#[cfg(feature = "cpu")]
pub use cpu_twin::*;

/// One launch per binding-sized range of equal-length tensors: each value is computed alone,
/// so the split changes nothing but the number of launches.
fn launch(gpu: &GpuBackend, entry: &'static str, value: f32, tensors: &[&GpuTensor]) {
    let n = tensors[0].len;
    let Some(ranges) = gpu.split(n, VIEW_ALIGN) else {
        return gpu.refuse(format!("`{entry}`: this device binds no storage at all"));
    };
    for r in ranges {
        let views: Vec<GpuTensor> = tensors.iter().map(|t| gpu.view(t, r.start, r.len())).collect();
        let args: Vec<_> = views.iter().map(|t| t.arg()).collect();
        gpu.dispatch(
            "elementwise",
            entry,
            &[r.len() as u32, value.to_bits()],
            &args,
            gpu.grid_1d(r.len(), WG),
        );
    }
}

/// The ops on the GPU, as `GpuBackend` runs them: each checks its shapes and records its
/// launches.
pub mod gpu {
    use super::*;

    pub fn fill(gpu: &GpuBackend, out: &GpuTensor, value: f32) {
        launch(gpu, "fill", value, &[out]);
    }

    pub fn add(gpu: &GpuBackend, out: &GpuTensor, a: &GpuTensor, b: &GpuTensor) {
        assert!(out.len == a.len && a.len == b.len, "add: lengths differ");
        launch(gpu, "add", 0.0, &[out, a, b]);
    }

    pub fn add_assign(gpu: &GpuBackend, out: &GpuTensor, a: &GpuTensor) {
        assert_eq!(out.len, a.len, "add_assign: lengths differ");
        launch(gpu, "add_assign", 0.0, &[out, a]);
    }

    /// One launch per binding-sized range of whole rows, each starting at a multiple of 64
    /// rows so that every view is aligned; a value's row is found from its index.
    pub fn replace(gpu: &GpuBackend, out: &GpuTensor, rows: &GpuTensor, cols: &GpuTensor, value: &GpuTensor) {
        let w = cols.len;
        assert!(
            out.len == rows.len * w && value.len == out.len,
            "replace: out is not rows × cols, or value differs from it"
        );
        let per = gpu.max_binding_values() / w.max(1) / VIEW_ALIGN * VIEW_ALIGN;
        if per == 0 {
            return gpu.refuse(format!(
                "`replace`: 64 rows of {w} values are more than this device binds at once; edit a smaller layer"
            ));
        }
        for start in (0..rows.len).step_by(per) {
            let n = (start + per).min(rows.len) - start;
            let (o, r, v) = (
                gpu.view(out, start * w, n * w),
                gpu.view(rows, start, n),
                gpu.view(value, start * w, n * w),
            );
            gpu.dispatch(
                "elementwise",
                "replace",
                &[(n * w) as u32, 0, w as u32],
                &[o.arg(), r.arg(), cols.arg(), v.arg()],
                gpu.grid_1d(n * w, WG),
            );
        }
    }

    pub fn gelu_forward(gpu: &GpuBackend, out: &GpuTensor, x: &GpuTensor) {
        assert_eq!(out.len, x.len, "gelu: lengths differ");
        launch(gpu, "gelu_forward", 0.0, &[out, x]);
    }

    pub fn gelu_backward(gpu: &GpuBackend, dx: &GpuTensor, dout: &GpuTensor, x: &GpuTensor) {
        assert!(dx.len == dout.len && dout.len == x.len, "gelu_backward: lengths differ");
        launch(gpu, "gelu_backward", 0.0, &[dx, dout, x]);
    }
}

/// The ops on the CPU, as `CpuBackend` runs them: each borrows its tensors for its twin above.
#[cfg(feature = "cpu")]
pub mod cpu {
    use super::*;
    use crate::cpu::{CpuBackend, CpuTensor};
    use crate::ops::Scalar;

    pub fn fill<T: Scalar>(_: &CpuBackend<T>, out: &CpuTensor<T>, value: f32) {
        out.get_mut().fill(T::of(value as f64))
    }
    pub fn add<T: Scalar>(_: &CpuBackend<T>, out: &CpuTensor<T>, a: &CpuTensor<T>, b: &CpuTensor<T>) {
        cpu_add(&mut out.get_mut(), &a.get(), &b.get())
    }
    pub fn add_assign<T: Scalar>(_: &CpuBackend<T>, out: &CpuTensor<T>, a: &CpuTensor<T>) {
        cpu_add_assign(&mut out.get_mut(), &a.get())
    }
    pub fn replace<T: Scalar>(
        _: &CpuBackend<T>,
        out: &CpuTensor<T>,
        rows: &CpuTensor<T>,
        cols: &CpuTensor<T>,
        value: &CpuTensor<T>,
    ) {
        cpu_replace(&mut out.get_mut(), &rows.get(), &cols.get(), &value.get())
    }
    pub fn gelu_forward<T: Scalar>(_: &CpuBackend<T>, out: &CpuTensor<T>, x: &CpuTensor<T>) {
        cpu_gelu_forward(&mut out.get_mut(), &x.get())
    }
    pub fn gelu_backward<T: Scalar>(_: &CpuBackend<T>, dx: &CpuTensor<T>, dout: &CpuTensor<T>, x: &CpuTensor<T>) {
        cpu_gelu_backward(&mut dx.get_mut(), &dout.get(), &x.get())
    }
}

/// What each op costs, from the length of its output (`crate::cost` has the conventions).
pub mod cost {
    use crate::cost::{f, Cost, Family, W};

    pub fn fill(n: usize) -> Cost {
        let n = f(n);
        Family::Elementwise.cost(0.0, W * n)
    }
    pub fn add(n: usize) -> Cost {
        let n = f(n);
        Family::Elementwise.cost(n, 3.0 * W * n)
    }
    pub fn add_assign(n: usize) -> Cost {
        let n = f(n);
        Family::Elementwise.cost(n, 3.0 * W * n)
    }
    pub fn replace(n: usize) -> Cost {
        let n = f(n);
        Family::Elementwise.cost(0.0, 3.0 * W * n)
    }
    pub fn gelu_forward(n: usize) -> Cost {
        let n = f(n);
        Family::Elementwise.cost(8.0 * n, 2.0 * W * n)
    }
    pub fn gelu_backward(n: usize) -> Cost {
        let n = f(n);
        Family::Elementwise.cost(14.0 * n, 3.0 * W * n)
    }
}

#[cfg(all(test, feature = "cpu"))]
mod tests {
    use super::cpu_replace;

    #[test]
    fn replace_writes_the_chosen_rows_and_columns_only() {
        let mut out = vec![1.0f32, -0.0, 3.0, 4.0, 5.0, 6.0];
        cpu_replace(&mut out, &[0.0, 1.0], &[1.0, 0.0, 1.0], &[9.0; 6]);
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&out), bits(&[1.0, -0.0, 3.0, 9.0, 5.0, 9.0]));
    }
}
