//! One file per op family: the dims struct, the CPU twin (the reference) and the host-side
//! wrapper of its WGSL shader, side by side. The `Backend` impls only delegate here.

pub mod attention;
pub mod cross_entropy;
pub mod elementwise;
pub mod embedding;
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
    /// c (m×n, row stride rsc) = alpha·a·b + beta·c, with arbitrary strides for a and b.
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

#[cfg(feature = "cpu")]
impl Scalar for f32 {
    fn of(x: f64) -> Self {
        x as f32
    }
    fn f64(self) -> f64 {
        self as f64
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
