//! One file per op family: the dims struct, the CPU twin over slices (the reference), and per op
//! of `backend.rs`'s `declare_ops!` list `cpu::<op>` (the twin on `CpuTensor`s), `gpu::<op>`
//! (the host-side wrapper of its WGSL shader) and `cost::<op>` (its family, FLOPs and bytes),
//! side by side. The `Backend` impls, written by a macro from that list, only call these.

pub mod attention;
pub mod cross_entropy;
pub mod depth;
pub mod elementwise;
pub mod embedding;
pub mod gather;
pub mod hyper;
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
    /// exp for the softmaxes: exact in f64, a polynomial in f32 that vectorises ([`fast_exp`]).
    fn softmax_exp(self) -> Self;
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

/// e^x in f32 without a libm call, so that the softmax loops vectorise: x = n·ln2 + r with
/// |r| ≤ ln2/2 (n rounded by the 1.5·2^23 trick, ln2 in two parts), e^r by Cephes' degree-7
/// polynomial, times 2^n as two normal powers of two. Within 2 ulps of the exact exp where
/// the result is normal; 0 below e^−87 (≈1.6e−38, where it would be subnormal or nearly),
/// infinity past f32's largest, NaN stays NaN (tests/gelu.rs checks the range).
#[cfg(feature = "cpu")]
#[inline(always)]
pub fn fast_exp(x: f32) -> f32 {
    const LOW: f32 = -87.0;
    const HIGH: f32 = 88.722_84;
    const ROUND: f32 = 12_582_912.0;
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    const P: [f32; 6] = [
        1.987_569_1e-4,
        1.398_199_9e-3,
        8.333_452e-3,
        4.166_579_6e-2,
        1.666_666_5e-1,
        0.5,
    ];
    let (nan, under, over) = (x.is_nan(), x < LOW, x > HIGH);
    let xc = x.clamp(LOW, HIGH);
    let shifted = xc * std::f32::consts::LOG2_E + ROUND;
    let n = shifted - ROUND;
    let r = (xc - n * LN2_HI) - n * LN2_LO;
    // Plain multiply-adds: without the fma target feature `mul_add` is a libm call.
    let p = r * P[0] + P[1];
    let p = r * p + P[2];
    let p = r * p + P[3];
    let p = r * p + P[4];
    let p = r * p + P[5];
    let y = p * (r * r) + r + 1.0;
    // n as an integer from the bits of n + ROUND, whose last bit is worth 1: `n as i32` would
    // saturate, a compare and blend a lane that kept the loop from vectorising. NaN gives
    // nonsense here, and x below.
    let n = (shifted.to_bits() as i32).wrapping_sub(ROUND.to_bits() as i32);
    let pow2 = |e: i32| f32::from_bits((e.wrapping_add(127) as u32) << 23);
    let v = y * pow2(n >> 1) * pow2(n - (n >> 1));
    if nan {
        x
    } else if under {
        0.0
    } else if over {
        f32::INFINITY
    } else {
        v
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
    #[inline(always)]
    fn softmax_exp(self) -> f32 {
        fast_exp(self)
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
    #[inline(always)]
    fn softmax_exp(self) -> f64 {
        self.exp()
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
