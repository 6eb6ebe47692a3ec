//! One file per op family: the dims struct, the CPU twin over slices (the reference), and per op
//! of `backend.rs`'s `declare_ops!` list `cpu::<op>` (the twin on `CpuTensor`s), `gpu::<op>`
//! (the host-side wrapper of its WGSL shader) and `cost::<op>` (its family, FLOPs and bytes),
//! side by side. The `Backend` impls, written by a macro from that list, only call these.

pub mod attention;
pub mod cross_entropy;
pub mod elementwise;
pub mod embedding;
pub mod gather;
pub mod matmul;
pub mod memory;
pub mod norm;
pub mod optim;
pub mod residual_matrix;

/// The float type of the CPU backend: f32 for training, f64 for gradient checks.
#[cfg(feature = "cpu")]
pub trait Scalar:
    num_traits::Float + num_traits::FromPrimitive + Send + Sync + std::fmt::Debug + Default + std::iter::Sum + 'static
{
    fn of(x: f64) -> Self;
    fn f64(self) -> f64;
    /// tanh for the GELU: exact in f64 (the gradient checks' precision), a rational
    /// approximation in f32 that vectorises and stays within a few ulps of the exact one.
    fn gelu_tanh(self) -> Self;
    /// c (m×n, row stride rsc) = a·b + beta·c, with arbitrary strides for a and b.
    ///
    /// # Safety
    /// `a` (m×k), `b` (k×n) and `c` (m×n) must be valid for every element their strides
    /// reach, and `c` must not overlap `a` or `b`.
    #[allow(clippy::too_many_arguments)]
    unsafe fn gemm(
        m: usize,
        k: usize,
        n: usize,
        a: *const Self,
        rsa: isize,
        csa: isize,
        b: *const Self,
        rsb: isize,
        csb: isize,
        beta: Self,
        c: *mut Self,
        rsc: isize,
    );
}

/// tanh(x) in f32 as a 13/6 rational minimax approximation (Eigen's `generic_fast_tanh_float`):
/// no exp and no branch but clamps, so the GELU loops vectorise; within 8 ulps of the exact
/// tanh, and NaN stays NaN (tests/gelu.rs checks the whole f32 range).
#[cfg(feature = "cpu")]
#[inline(always)]
pub fn fast_tanh(x: f32) -> f32 {
    // Past 9 tanh rounds to ±1 in f32; between 7.9 and 9 the rational form overshoots 1 by an
    // ulp or two, so its result is clamped too (clamping the input at 7.9 instead would lose
    // the GELU gradient's tail, up to 4e-6).
    const CLAMP: f32 = 9.0;
    const A: [f32; 7] = [
        4.893_524_6e-3,
        6.372_619_3e-4,
        1.485_722_4e-5,
        5.122_297e-8,
        -8.604_672e-11,
        2.000_188e-13,
        -2.760_768_5e-16,
    ];
    const B: [f32; 4] = [4.893_525e-3, 2.268_434_6e-3, 1.185_347_1e-4, 1.198_258_4e-6];
    let small = x.abs() < 4e-4;
    let x = x.clamp(-CLAMP, CLAMP);
    let x2 = x * x;
    // Plain multiply-adds: without the fma target feature `mul_add` is a libm call.
    let p = x2 * A[6] + A[5];
    let p = x2 * p + A[4];
    let p = x2 * p + A[3];
    let p = x2 * p + A[2];
    let p = x2 * p + A[1];
    let p = x2 * p + A[0];
    let q = x2 * B[3] + B[2];
    let q = x2 * q + B[1];
    let q = x2 * q + B[0];
    // Below 4e-4 tanh(x) rounds to x, where the rational form would lose its last bits.
    if small {
        x
    } else {
        (x * p / q).clamp(-1.0, 1.0)
    }
}

#[cfg(feature = "cpu")]
impl Scalar for f32 {
    fn of(x: f64) -> Self {
        x as f32
    }
    fn f64(self) -> f64 {
        self as f64
    }
    // Inlined so that the GELU loops vectorise through it.
    #[inline(always)]
    fn gelu_tanh(self) -> f32 {
        fast_tanh(self)
    }
    unsafe fn gemm(
        m: usize,
        k: usize,
        n: usize,
        a: *const f32,
        rsa: isize,
        csa: isize,
        b: *const f32,
        rsb: isize,
        csb: isize,
        beta: f32,
        c: *mut f32,
        rsc: isize,
    ) {
        matrixmultiply::sgemm(m, k, n, 1.0, a, rsa, csa, b, rsb, csb, beta, c, rsc, 1)
    }
}

#[cfg(feature = "cpu")]
impl Scalar for f64 {
    fn of(x: f64) -> Self {
        x
    }
    fn f64(self) -> f64 {
        self
    }
    #[inline(always)]
    fn gelu_tanh(self) -> f64 {
        self.tanh()
    }
    unsafe fn gemm(
        m: usize,
        k: usize,
        n: usize,
        a: *const f64,
        rsa: isize,
        csa: isize,
        b: *const f64,
        rsb: isize,
        csb: isize,
        beta: f64,
        c: *mut f64,
        rsc: isize,
    ) {
        matrixmultiply::dgemm(m, k, n, 1.0, a, rsa, csa, b, rsb, csb, beta, c, rsc, 1)
    }
}
