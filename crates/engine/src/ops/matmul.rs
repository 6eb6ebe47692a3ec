//! Batched matmul with the transposes a transformer needs.
//!
//! A linear layer y = x·Wᵀ with W (OC, C) as PyTorch stores it: forward `y = x·Wᵀ` (trans_b),
//! backward `dx = dy·W` and `dW = dyᵀ·x` (trans_a).

use crate::gpu::{AsArg, GpuBackend, GpuTensor};

/// out[b] (M×N) = op(a[b]) (M×K) · op(b[b]) (K×N) (+ out[b] when `accumulate`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MatmulDims {
    pub batch: usize,
    pub m: usize,
    pub n: usize,
    pub k: usize,
    /// a is stored (K, M).
    pub trans_a: bool,
    /// b is stored (N, K).
    pub trans_b: bool,
    pub accumulate: bool,
    /// Values between consecutive batches of a and b; 0 broadcasts one matrix over the batch.
    pub stride_a: usize,
    pub stride_b: usize,
}

impl MatmulDims {
    /// One (M×K)·(K×N) product.
    pub fn new(m: usize, n: usize, k: usize) -> Self {
        Self {
            batch: 1,
            m,
            n,
            k,
            trans_a: false,
            trans_b: false,
            accumulate: false,
            stride_a: m * k,
            stride_b: k * n,
        }
    }
    pub fn trans_a(self) -> Self {
        Self { trans_a: true, ..self }
    }
    pub fn trans_b(self) -> Self {
        Self { trans_b: true, ..self }
    }
    pub fn accumulate(self) -> Self {
        Self {
            accumulate: true,
            ..self
        }
    }
    /// `batch` products; a and b advance by their full size per batch unless broadcast.
    pub fn batched(self, batch: usize, broadcast_a: bool, broadcast_b: bool) -> Self {
        let stride_a = if broadcast_a { 0 } else { self.m * self.k };
        let stride_b = if broadcast_b { 0 } else { self.k * self.n };
        Self {
            batch,
            stride_a,
            stride_b,
            ..self
        }
    }
    fn check(&self, out: usize, a: usize, b: usize) {
        assert_eq!(
            out,
            self.batch * self.m * self.n,
            "matmul: out has {out} values for {self:?}"
        );
        let need_a = (self.batch - 1) * self.stride_a + self.m * self.k;
        let need_b = (self.batch - 1) * self.stride_b + self.k * self.n;
        assert!(
            a >= need_a && b >= need_b,
            "matmul: a ({a}) or b ({b}) too short for {self:?}"
        );
    }
    /// Strides (row, column) of the logical a (M×K) and b (K×N) in storage.
    #[cfg(feature = "cpu")]
    fn strides(&self) -> ((usize, usize), (usize, usize)) {
        let sa = if self.trans_a { (1, self.m) } else { (self.k, 1) };
        let sb = if self.trans_b { (1, self.k) } else { (self.n, 1) };
        (sa, sb)
    }
}

/// One product on the calling thread, for callers that already split the work: the RMT's
/// per-token key gradients.
#[cfg(feature = "cpu")]
pub fn cpu_single<T: crate::ops::Scalar>(out: &mut [T], a: &[T], b: &[T], d: MatmulDims) {
    assert_eq!(d.batch, 1, "cpu_single multiplies one pair of matrices");
    d.check(out.len(), a.len(), b.len());
    let ((rsa, csa), (rsb, csb)) = d.strides();
    let beta = if d.accumulate { T::one() } else { T::zero() };
    // SAFETY: the strides and extents were checked against the slice lengths above.
    unsafe {
        T::gemm(
            d.m,
            d.k,
            d.n,
            a.as_ptr(),
            rsa as isize,
            csa as isize,
            b.as_ptr(),
            rsb as isize,
            csb as isize,
            beta,
            out.as_mut_ptr(),
            d.n as isize,
        )
    }
}

#[cfg(feature = "cpu")]
pub fn cpu<T: crate::ops::Scalar>(out: &mut [T], a: &[T], b: &[T], d: MatmulDims) {
    use rayon::prelude::*;
    d.check(out.len(), a.len(), b.len());
    let ((rsa, csa), (rsb, csb)) = d.strides();
    let beta = if d.accumulate { T::one() } else { T::zero() };
    // Rows per task: enough tasks to balance the threads, each still a real GEMM.
    let rows = d.m.div_ceil(4 * rayon::current_num_threads()).max(16);
    out.par_chunks_mut(d.m * d.n).enumerate().for_each(|(bi, out_b)| {
        let a_b = &a[bi * d.stride_a..];
        let b_b = &b[bi * d.stride_b..];
        out_b.par_chunks_mut(rows * d.n).enumerate().for_each(|(ci, c)| {
            let r0 = ci * rows;
            let mr = c.len() / d.n;
            // SAFETY: the strides and extents were checked against the slice lengths above.
            unsafe {
                T::gemm(
                    mr,
                    d.k,
                    d.n,
                    a_b.as_ptr().add(r0 * rsa),
                    rsa as isize,
                    csa as isize,
                    b_b.as_ptr(),
                    rsb as isize,
                    csb as isize,
                    beta,
                    c.as_mut_ptr(),
                    d.n as isize,
                )
            }
        });
    });
}

pub fn gpu(gpu: &GpuBackend, out: &GpuTensor, a: &GpuTensor, b: &GpuTensor, d: MatmulDims) {
    d.check(out.len, a.len, b.len);
    let params = [
        d.batch,
        d.m,
        d.n,
        d.k,
        d.trans_a as usize,
        d.trans_b as usize,
        d.accumulate as usize,
        d.stride_a,
        d.stride_b,
    ]
    .map(|x| x as u32);
    let groups = [d.n.div_ceil(64) as u32, d.m.div_ceil(64) as u32, d.batch as u32];
    gpu.dispatch("matmul", "matmul", &params, &[out.arg(), a.arg(), b.arg()], groups);
}
