//! The CPU's small products, in registers: out (m×n) = Σ_c a(i, c) · b[c, ·], for shapes a GEMM
//! library spends longer packing than multiplying: a token's residual matrix against the keys
//! (a few thousand multiply-adds), or one head's block of attention (64 queries by 128 keys by
//! 32 dimensions).
//!
//! A block of rows of `a` is read one column at a time (each value broadcast to every lane) and
//! multiplied into a row of b, [`LANES`] columns of out at a time (two blocks of them in the
//! AVX-512 build), the block's sums in registers: at least 8 registers in flight, whatever the
//! build's width. Every value sums c in order from the
//! first, in a block or in the tail alike, as a chain of `M::madd`, so the result does not
//! depend on the block's shape or the build's width, only on whether the CPU fuses (`Madd`).
//! Callers run it inside a `wide!` function, which picks the build.

use crate::cpu::simd::{madd_lanes, Madd, LANES};
use crate::ops::Scalar;

/// Rows of `a` a register block holds in the build `M`: 8 registers of sums, whatever their
/// width (8 rows with AVX-512, 4 with AVX2, 2 in the baseline).
pub const fn block_rows<M: Madd>() -> usize {
    let rows = 8 * M::REGISTER / LANES;
    if rows == 0 {
        1
    } else {
        rows
    }
}

/// Rows of a matrix in a slice: row r starts at `offset + r·stride`, its values side by side.
#[derive(Clone, Copy, Debug)]
pub struct Rows {
    pub offset: usize,
    pub stride: usize,
}

/// What [`product`] adds its sums to.
#[derive(Clone, Copy)]
pub enum Onto<'a, T> {
    /// Nothing: out = the sums.
    Zero,
    /// out itself: out += the sums.
    Out,
    /// Another matrix of out's shape (the same rows): out = base + the sums, without copying
    /// base first.
    Base(&'a [T]),
}

/// The left factor a (m × kk) of a [`product`], read a block of R rows at a time.
pub trait Left<T> {
    /// Its rows.
    fn rows(&self) -> usize;
    /// The columns of rows i0..i0+R, c from 0: (a(i0, c), …, a(i0+R−1, c)) for each c.
    fn columns<const R: usize>(&self, i0: usize) -> impl Iterator<Item = [T; R]> + Clone;
}

/// out[i, j] (from `o`), i < a.rows(), j < n: Σ_c a(i, c) · b_c[j], where b_c are b's rows in
/// order (each at least n long), added to what `onto` says. The columns below the last whole
/// block of LANES go in register blocks, the rest one at a time; each value sums c from 0 in
/// either.
#[inline(always)]
pub fn product<'b, T: Scalar + 'b, M: Madd>(
    out: &mut [T],
    o: Rows,
    a: &impl Left<T>,
    b: impl Iterator<Item = &'b [T]> + Clone,
    n: usize,
    onto: Onto<'_, T>,
) {
    let rows = block_rows::<M>();
    let m = a.rows();
    let blocked = m - m % rows;
    // Direct calls, so that each block inlines into the wide build that runs it.
    for i0 in (0..blocked).step_by(rows) {
        match rows {
            8 => product_block::<T, M, 8>(out, o, a, i0, b.clone(), n, onto),
            4 => product_block::<T, M, 4>(out, o, a, i0, b.clone(), n, onto),
            2 => product_block::<T, M, 2>(out, o, a, i0, b.clone(), n, onto),
            _ => product_block::<T, M, 1>(out, o, a, i0, b.clone(), n, onto),
        }
    }
    for i0 in blocked..m {
        product_block::<T, M, 1>(out, o, a, i0, b.clone(), n, onto);
    }
}

/// Rows i0..i0+R of [`product`].
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn product_block<'b, T: Scalar + 'b, M: Madd, const R: usize>(
    out: &mut [T],
    o: Rows,
    a: &impl Left<T>,
    i0: usize,
    b_rows: impl Iterator<Item = &'b [T]> + Clone,
    n: usize,
    onto: Onto<'_, T>,
) {
    let full = n - n % LANES;
    let columns = a.columns::<R>(i0);
    let write = |out: &mut [T], at: usize, acc: &[T]| {
        let o = &mut out[at..][..acc.len()];
        match onto {
            Onto::Zero => o.copy_from_slice(acc),
            Onto::Out => o.iter_mut().zip(acc).for_each(|(o, &s)| *o = *o + s),
            Onto::Base(base) => {
                let base = &base[at..][..acc.len()];
                o.iter_mut()
                    .zip(base.iter().zip(acc))
                    .for_each(|(o, (&b, &s))| *o = b + s);
            }
        }
    };
    // Two blocks of LANES columns a pass where the build has the registers for their 2R sums
    // (AVX-512's 32), which halves the values of `a` loaded per multiply-add; then one. Not onto
    // a base, which streams from memory: its pass would end on twice the misses at once (the
    // storage was 15% slower so, interleaved A/B).
    let two = M::REGISTER >= 16 && !matches!(onto, Onto::Base(_));
    let wide = if two { full - full % (2 * LANES) } else { 0 };
    for c0 in (0..wide).step_by(2 * LANES) {
        let mut acc = [[[T::zero(); LANES]; 2]; R];
        for (s, row) in columns.clone().zip(b_rows.clone()) {
            let row = &row[c0..][..2 * LANES].as_chunks::<LANES>().0;
            for i in 0..R {
                for (acc, row) in acc[i].iter_mut().zip(row.iter()) {
                    madd_lanes::<T, M>(acc, &[s[i]; LANES], row);
                }
            }
        }
        for (i, acc) in acc.iter().enumerate() {
            write(out, o.offset + (i0 + i) * o.stride + c0, acc.as_flattened());
        }
    }
    for c0 in (wide..full).step_by(LANES) {
        let mut acc = [[T::zero(); LANES]; R];
        for (s, row) in columns.clone().zip(b_rows.clone()) {
            let row = &row[c0..][..LANES].as_chunks::<LANES>().0[0];
            for i in 0..R {
                madd_lanes::<T, M>(&mut acc[i], &[s[i]; LANES], row);
            }
        }
        for (i, acc) in acc.iter().enumerate() {
            write(out, o.offset + (i0 + i) * o.stride + c0, acc);
        }
    }
    if full < n {
        // The columns past the last whole block of LANES, in the same order.
        let mut acc = [[T::zero(); LANES]; R];
        for (s, row) in columns.zip(b_rows) {
            let row = &row[full..n];
            for i in 0..R {
                for (acc, &v) in acc[i].iter_mut().zip(row) {
                    *acc = M::madd(s[i], v, *acc);
                }
            }
        }
        for (i, acc) in acc.iter().enumerate() {
            write(out, o.offset + (i0 + i) * o.stride + full, &acc[..n - full]);
        }
    }
}

/// A left factor in a slice whose rows start `at` (cs = 1: a block of queries, or of their
/// probabilities), or the transpose of such rows (`TRANSPOSED`: the keys' side of an attention
/// block's probabilities): a(i, c) = a[offset + i·stride + c], or a[offset + c·stride + i];
/// i < m, c < kk. Which stride is 1 is a constant, so that a block's values compile to
/// neighbouring loads (a run-time unit stride was 8% slower in attention's backward).
pub struct Strided<'a, T, const TRANSPOSED: bool> {
    a: &'a [T],
    at: Rows,
    m: usize,
    kk: usize,
}

/// The m×kk matrix whose rows start `at`.
pub fn rows_at<T>(a: &[T], at: Rows, m: usize, kk: usize) -> Strided<'_, T, false> {
    Strided { a, at, m, kk }
}

/// The m×kk transpose of the kk rows that start `at`.
pub fn columns_at<T>(a: &[T], at: Rows, m: usize, kk: usize) -> Strided<'_, T, true> {
    Strided { a, at, m, kk }
}

impl<T: Scalar, const TRANSPOSED: bool> Left<T> for Strided<'_, T, TRANSPOSED> {
    fn rows(&self) -> usize {
        self.m
    }
    #[inline(always)]
    fn columns<const R: usize>(&self, i0: usize) -> impl Iterator<Item = [T; R]> + Clone {
        let (stride, kk) = (self.at.stride, self.kk);
        // a(i0 + i, c) = block[i·rs + c·cs].
        let (rs, cs) = if TRANSPOSED { (1, stride) } else { (stride, 1) };
        let block = &self.a[self.at.offset + i0 * rs..];
        // The block's last value, (R−1, kk−1): every value it reads lies at or before it.
        assert!(R >= 1 && (kk == 0 || (R - 1) * rs + (kk - 1) * cs < block.len()));
        // SAFETY: i < R and c < kk, so i·rs + c·cs ≤ (R−1)·rs + (kk−1)·cs, checked above.
        (0..kk).map(move |c| std::array::from_fn(|i| unsafe { *block.get_unchecked(i * rs + c * cs) }))
    }
}
