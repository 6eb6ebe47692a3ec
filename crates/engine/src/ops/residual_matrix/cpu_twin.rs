//! The residual-matrix ops on the CPU: each token's products done in registers, straight from
//! its D_k×D_v matrix, and every op reading each matrix once.
//!
//! A token's products are small (R'×D_k by D_k×D_v, a few thousand multiply-adds): a GEMM
//! library spends longer packing them than multiplying. `cpu::product` and [`dots`] are the
//! two shapes they take, in register blocks the compiler vectorises (`cpu::simd`), and every op runs
//! a chunk of tokens at a time with the chunk's matrices in cache: the normed retrieval
//! computes its token's norm statistics as it normalises, and the normed retrieval's backward
//! does the storage of dy, the key gradient, the norm's backward and the gain's gradient in one
//! pass, never writing ∂L/∂Norm(X) out.
//!
//! Every value is summed in a fixed order (over the contracted index from 0; the key and gain
//! gradients in chunks of [`KEY_GRAD_CHUNK`] tokens added in chunk order), so results do not
//! depend on the thread count. Every product is a chain of multiply-adds (`Madd`), fused where
//! the CPU has FMA (`cpu::simd`).

use super::{ResidualDims, KEY_GRAD_CHUNK};
use crate::cpu::product::{block_rows, product, Left, Onto, Rows};
use crate::cpu::simd::{add_in_order, madd_lanes, wide, Madd};
use crate::ops::norm::{row_backward, row_stats, standardise};
use crate::ops::Scalar;
use crate::NormDims;
use rayon::prelude::*;

/// The left factor of [`product`], the same for every token (the keys, or their transpose),
/// packed once a chunk for the register blocks: a(i, c) = a[i·ra + c·ca] (m×kk), the rows in
/// blocks of `rows` with each c's values side by side, then the rows past the last block one by
/// one. A block reads it front to back, with no index to check.
struct Packed<T> {
    values: Vec<T>,
    m: usize,
    kk: usize,
    /// Rows a register block holds in the build that packed it.
    block: usize,
}

impl<T: Scalar> Packed<T> {
    /// Packs a for the register blocks of the build `M`: 8 registers of sums in flight, whatever
    /// their width.
    #[inline(always)]
    fn new<M: Madd>(a: &[T], (ra, ca): (usize, usize), (m, kk): (usize, usize)) -> Self {
        let rows = block_rows::<M>();
        let blocked = m - m % rows;
        let mut values = Vec::with_capacity(m * kk);
        for i0 in (0..blocked).step_by(rows) {
            for c in 0..kk {
                values.extend((i0..i0 + rows).map(|i| a[i * ra + c * ca]));
            }
        }
        for i in blocked..m {
            values.extend((0..kk).map(|c| a[i * ra + c * ca]));
        }
        Self {
            values,
            m,
            kk,
            block: rows,
        }
    }
}

/// [`product`]'s blocks are `block` rows, then single rows: each is a run of R·kk values.
impl<T: Scalar> Left<T> for Packed<T> {
    fn rows(&self) -> usize {
        self.m
    }
    #[inline(always)]
    fn columns<const R: usize>(&self, i0: usize) -> impl Iterator<Item = [T; R]> + Clone {
        debug_assert!(R == self.block || R == 1);
        self.values[i0 * self.kk..][..R * self.kk]
            .as_chunks::<R>()
            .0
            .iter()
            .copied()
    }
}

/// A token's matrix, or its retrieved vectors: `n` values a row, from the start.
fn whole(n: usize) -> Rows {
    Rows { offset: 0, stride: n }
}

/// Lanes of partial sums each dot product of [`dots`] keeps: one AVX-512 register, two AVX2
/// ones, so that both builds sum in the same order.
const DOT_LANES: usize = 16;
/// Tokens whose rows [`dots`] pairs while they are in L1 (4 × 7 KB at D_k = D_v = 32, R' = 24),
/// before moving to the next block of pairs: more tokens a pass save reloading the block's
/// sums (2 were 10% slower in the normed retrieval's backward, interleaved A/B), and 8 no
/// longer fit. The tokens still add in order, so the count changes no bits.
const DOT_TOKENS: usize = 4;

/// The side of [`dots`]' square register blocks of pairs in the build `M`: 16 registers of
/// sums and 8 of rows in AVX-512's 32, 4 (of two registers each) and 4 in AVX2's 16.
const fn dot_block<M: Madd>() -> usize {
    if M::REGISTER >= 16 {
        4
    } else {
        2
    }
}

/// Adds Σ_t Σ_c a_t[i, c] · b_t[j, c] over the token pairs of a (tokens, m, kk) and b (tokens,
/// n, kk) into the lane sums `acc` (m×n): the key gradient. Each (i, j) keeps DOT_LANES partial
/// sums (c into lane c mod DOT_LANES, tokens in order), which [`total`] adds in lane order; a
/// block of pairs holds its sums in registers over DOT_TOKENS tokens at a time. The blocks
/// differ by build, the order of each pair's sums does not.
#[inline(always)]
fn dots<T: Scalar, M: Madd>(acc: &mut [[T; DOT_LANES]], a: &[T], b: &[T], m: usize, n: usize, kk: usize) {
    const fn side(left: usize, block: usize) -> usize {
        if left >= block {
            block
        } else if left >= 2 {
            2
        } else {
            1
        }
    }
    let tokens = a.len() / (m * kk);
    let block = dot_block::<M>();
    for t0 in (0..tokens).step_by(DOT_TOKENS) {
        let t1 = tokens.min(t0 + DOT_TOKENS);
        let (a, b) = (&a[t0 * m * kk..t1 * m * kk], &b[t0 * n * kk..t1 * n * kk]);
        let mut i0 = 0;
        while i0 < m {
            let ri = side(m - i0, block);
            let mut j0 = 0;
            while j0 < n {
                let rj = side(n - j0, block);
                let at = (&mut acc[..], a, b, (m, n, kk), (i0, j0));
                // Direct calls, so that each block inlines into the wide build that runs it.
                match (ri, rj) {
                    (4, 4) => dots_block::<T, M, 4, 4>(at),
                    (4, 2) => dots_block::<T, M, 4, 2>(at),
                    (4, _) => dots_block::<T, M, 4, 1>(at),
                    (2, 4) => dots_block::<T, M, 2, 4>(at),
                    (2, 2) => dots_block::<T, M, 2, 2>(at),
                    (2, _) => dots_block::<T, M, 2, 1>(at),
                    (_, 4) => dots_block::<T, M, 1, 4>(at),
                    (_, 2) => dots_block::<T, M, 1, 2>(at),
                    _ => dots_block::<T, M, 1, 1>(at),
                }
                j0 += rj;
            }
            i0 += ri;
        }
    }
}

/// Each dot product of [`dots`]: its lanes added in order.
fn total<T: Scalar>(acc: &[[T; DOT_LANES]]) -> Vec<T> {
    acc.iter()
        .map(|lanes| lanes.iter().fold(T::zero(), |s, &v| s + v))
        .collect()
}

/// What a block of [`dots`] reads and adds to: the partial sums, a and b of a few tokens,
/// (m, n, kk), and the block's first pair (i0, j0).
type DotsAt<'a, T> = (
    &'a mut [[T; DOT_LANES]],
    &'a [T],
    &'a [T],
    (usize, usize, usize),
    (usize, usize),
);

/// The pairs (i0..i0+I) × (j0..j0+J) of [`dots`], over every token of a and b, their sums in
/// registers. Rows are read through pointers that step a token at a time, the rows' offsets
/// within a token fixed: with slices, or offsets computed from t, the compiler rebuilt every
/// row's address each token, which took as long as the multiply-adds (kk is a few blocks of
/// lanes).
#[inline(always)]
fn dots_block<T: Scalar, M: Madd, const I: usize, const J: usize>(
    (acc_all, a, b, (m, n, kk), (i0, j0)): DotsAt<'_, T>,
) {
    const L: usize = DOT_LANES;
    let tokens = a.len() / (m * kk);
    // Every row the block reads, in every token, lies in a or b.
    assert!(i0 + I <= m && j0 + J <= n && a.len() == tokens * m * kk && b.len() == tokens * n * kk);
    let full = kk - kk % L;
    let mut acc = [[[T::zero(); L]; J]; I];
    for i in 0..I {
        for j in 0..J {
            acc[i][j] = acc_all[(i0 + i) * n + j0 + j];
        }
    }
    let (mut ta, mut tb) = (a[i0 * kk..].as_ptr(), b[j0 * kk..].as_ptr());
    for _ in 0..tokens {
        // SAFETY: ta and tb point at rows i0 and j0 of this token; row i0 + i (i < I) spans
        // ta[i·kk..][..kk], inside a (asserted above); likewise rows j0 + j of b. Each block
        // of L reads below kk.
        let row_a = |i: usize, c0: usize| unsafe { &*ta.add(i * kk + c0).cast::<[T; L]>() };
        // SAFETY: as above.
        let row_b = |j: usize, c0: usize| unsafe { &*tb.add(j * kk + c0).cast::<[T; L]>() };
        for c0 in (0..full).step_by(L) {
            let rows_b: [&[T; L]; J] = std::array::from_fn(|j| row_b(j, c0));
            for (i, acc) in acc.iter_mut().enumerate() {
                let row_a = row_a(i, c0);
                for (acc, row_b) in acc.iter_mut().zip(rows_b) {
                    madd_lanes::<T, M>(acc, row_a, row_b);
                }
            }
        }
        if full < kk {
            // The tail zero-padded to a full set of lanes: the partial sums are indexed by
            // constants only, which keeps them in registers.
            let (mut va, mut vb) = ([[T::zero(); L]; I], [[T::zero(); L]; J]);
            for (i, va) in va.iter_mut().enumerate() {
                // SAFETY: as above; the row's last kk − full values.
                va[..kk - full]
                    .copy_from_slice(unsafe { std::slice::from_raw_parts(ta.add(i * kk + full), kk - full) });
            }
            for (j, vb) in vb.iter_mut().enumerate() {
                // SAFETY: as above.
                vb[..kk - full]
                    .copy_from_slice(unsafe { std::slice::from_raw_parts(tb.add(j * kk + full), kk - full) });
            }
            for i in 0..I {
                for j in 0..J {
                    madd_lanes::<T, M>(&mut acc[i][j], &va[i], &vb[j]);
                }
            }
        }
        // The next token's rows; past the last token the pointers are never read.
        (ta, tb) = (ta.wrapping_add(m * kk), tb.wrapping_add(n * kk));
    }
    for (i, row) in acc.iter().enumerate() {
        for (j, lanes) in row.iter().enumerate() {
            acc_all[(i0 + i) * n + j0 + j] = *lanes;
        }
    }
}

/// Norm(x) = (x − mean)·rstd·gain, into `out`.
#[inline(always)]
fn normalise<T: Scalar>(out: &mut [T], x: &[T], gain: &[T], mean: T, rstd: T) {
    for ((o, &v), &g) in out.iter_mut().zip(x).zip(gain) {
        *o = (v - mean) * rstd * g;
    }
}

fn check_norm<T>(stats: &[T], gain: &[T], d: &ResidualDims, norm: &NormDims) {
    assert_eq!(
        stats.len(),
        2 * d.tokens,
        "normed: stats has {} values for {d:?}",
        stats.len()
    );
    assert_eq!(
        gain.len(),
        d.dk * d.dv,
        "normed: gain has {} values for {d:?}",
        gain.len()
    );
    assert!(
        norm.rows == d.tokens && norm.c == d.dk * d.dv,
        "normed: {norm:?} does not normalise {d:?}"
    );
}

/// out (tokens, D_k, D_v) = base + Σ_h keys[h] ⊗ data[h], or out += Σ … without a base.
pub fn cpu_store<T: Scalar>(out: &mut [T], base: Option<&[T]>, keys: &[T], data: &[T], d: ResidualDims) {
    d.check("store", out.len(), data.len(), keys.len());
    let (vm, vv) = (d.dk * d.dv, d.keys * d.dv);
    if let Some(base) = base {
        assert_eq!(base.len(), out.len(), "store: base and out differ in length");
    }
    let chunks = out
        .par_chunks_mut(KEY_GRAD_CHUNK * vm)
        .zip(data.par_chunks(KEY_GRAD_CHUNK * vv));
    match base {
        Some(base) => {
            let bases = base.par_chunks(KEY_GRAD_CHUNK * vm);
            chunks
                .zip(bases)
                .for_each(|((out, data), base)| store_tokens(out, Some(base), keys, data, d));
        }
        None => chunks.for_each(|(out, data)| store_tokens(out, None, keys, data, d)),
    }
}

wide! {
    /// A chunk's storage: out[t] (D_k×D_v) = base[t] + keysᵀ · data[t] (R'×D_v), or out[t] += ….
    fn store_tokens<T: Scalar, M: Madd>(out: &mut [T], base: Option<&[T]>, keys: &[T], data: &[T], d: ResidualDims) {
        let (vm, vv) = (d.dk * d.dv, d.keys * d.dv);
        let keys_t = Packed::new::<M>(keys, (1, d.dk), (d.dk, d.keys));
        for (t, (out, data)) in out.chunks_mut(vm).zip(data.chunks(vv)).enumerate() {
            let onto = base.map_or(Onto::Out, |b| Onto::Base(&b[t * vm..][..vm]));
            product::<T, M>(out, whole(d.dv), &keys_t, data.chunks_exact(d.dv), d.dv, onto);
        }
    }
}

/// y (tokens, R', D_v) = keys · Norm(X) per token, and stats (tokens, 2) = each token's (mean,
/// rstd) as `norm_forward` computes them: Norm(X) is only ever a token's worth in cache.
#[allow(clippy::too_many_arguments)]
pub fn cpu_retrieve_normed<T: Scalar>(
    y: &mut [T],
    stats: &mut [T],
    x: &[T],
    gain: &[T],
    keys: &[T],
    d: ResidualDims,
    norm: NormDims,
) {
    d.check("retrieve_normed", x.len(), y.len(), keys.len());
    check_norm(stats, gain, &d, &norm);
    let (vm, vv) = (d.dk * d.dv, d.keys * d.dv);
    y.par_chunks_mut(KEY_GRAD_CHUNK * vv)
        .zip(stats.par_chunks_mut(KEY_GRAD_CHUNK * 2))
        .zip(x.par_chunks(KEY_GRAD_CHUNK * vm))
        .for_each(|((y, stats), x)| retrieve_normed_tokens(y, stats, x, gain, keys, d, norm));
}

wide! {
    fn retrieve_normed_tokens<T: Scalar, M: Madd>(
        y: &mut [T],
        stats: &mut [T],
        x: &[T],
        gain: &[T],
        keys: &[T],
        d: ResidualDims,
        norm: NormDims,
    ) {
        let (vm, vv) = (d.dk * d.dv, d.keys * d.dv);
        let mut normed = vec![T::zero(); vm];
        let keys = Packed::new::<M>(keys, (d.dk, 1), (d.keys, d.dk));
        for ((y, st), x) in y.chunks_mut(vv).zip(stats.chunks_mut(2)).zip(x.chunks(vm)) {
            let (mean, rstd) = row_stats(x, norm.kind, norm.eps);
            (st[0], st[1]) = (mean, rstd);
            normalise(&mut normed, x, gain, mean, rstd);
            product::<T, M>(y, whole(d.dv), &keys, normed.chunks_exact(d.dv), d.dv, Onto::Zero);
        }
    }
}

/// The backward of a storage `out = base + Σ keys ⊗ data` in one pass over dout: ddata
/// (tokens, R', D_v) = keys · dout per token (a retrieval), dkeys (R', D_k) = Σ_t data[t] ·
/// dout[t]ᵀ. The base's gradient is dout itself.
pub fn cpu_store_backward<T: Scalar>(
    ddata: &mut [T],
    dkeys: &mut [T],
    dout: &[T],
    keys: &[T],
    data: &[T],
    d: ResidualDims,
) {
    d.check("store_backward", dout.len(), ddata.len(), dkeys.len());
    assert_eq!(
        data.len(),
        ddata.len(),
        "store_backward: data and ddata differ in length"
    );
    assert_eq!(
        keys.len(),
        dkeys.len(),
        "store_backward: keys and dkeys differ in length"
    );
    let (vm, vv) = (d.dk * d.dv, d.keys * d.dv);
    let parts: Vec<Vec<T>> = ddata
        .par_chunks_mut(KEY_GRAD_CHUNK * vv)
        .zip(dout.par_chunks(KEY_GRAD_CHUNK * vm))
        .zip(data.par_chunks(KEY_GRAD_CHUNK * vv))
        .map(|((ddata, dout), data)| store_backward_tokens(ddata, dout, keys, data, d))
        .collect();
    add_in_order(dkeys, parts);
}

wide! {
    /// A chunk of `cpu_store_backward`: its data gradients, and its part of the key gradient.
    fn store_backward_tokens<T: Scalar, M: Madd>(ddata: &mut [T], dout: &[T], keys: &[T], data: &[T], d: ResidualDims) -> Vec<T> {
        let (vm, vv) = (d.dk * d.dv, d.keys * d.dv);
        let packed = Packed::new::<M>(keys, (d.dk, 1), (d.keys, d.dk));
        for (ddata, dout) in ddata.chunks_mut(vv).zip(dout.chunks(vm)) {
            product::<T, M>(ddata, whole(d.dv), &packed, dout.chunks_exact(d.dv), d.dv, Onto::Zero);
        }
        let mut acc = vec![[T::zero(); DOT_LANES]; d.keys * d.dk];
        dots::<T, M>(&mut acc, data, dout, d.keys, d.dk, d.dv);
        total(&acc)
    }
}

/// The backward of `cpu_retrieve_normed` in one pass over X: with dN = Σ_h keys[h] ⊗ dy[h] per
/// token (never written out), dx += ∂Norm/∂x · dN, dgain = Σ_t dN ⊙ x̂, dkeys = Σ_t dy[t] ·
/// Norm(X)[t]ᵀ.
#[allow(clippy::too_many_arguments)]
pub fn cpu_retrieve_normed_backward<T: Scalar>(
    dx: &mut [T],
    dgain: &mut [T],
    dkeys: &mut [T],
    dy: &[T],
    x: &[T],
    stats: &[T],
    gain: &[T],
    keys: &[T],
    d: ResidualDims,
    norm: NormDims,
) {
    d.check("retrieve_normed_backward", x.len(), dy.len(), dkeys.len());
    check_norm(stats, gain, &d, &norm);
    assert_eq!(dx.len(), x.len(), "retrieve_normed_backward: dx and x differ in length");
    assert_eq!(
        dgain.len(),
        gain.len(),
        "retrieve_normed_backward: dgain and gain differ"
    );
    assert_eq!(
        keys.len(),
        dkeys.len(),
        "retrieve_normed_backward: keys and dkeys differ"
    );
    let (vm, vv) = (d.dk * d.dv, d.keys * d.dv);
    let parts: Vec<(Vec<T>, Vec<T>)> = dx
        .par_chunks_mut(KEY_GRAD_CHUNK * vm)
        .zip(dy.par_chunks(KEY_GRAD_CHUNK * vv))
        .zip(x.par_chunks(KEY_GRAD_CHUNK * vm))
        .zip(stats.par_chunks(KEY_GRAD_CHUNK * 2))
        .map(|(((dx, dy), x), stats)| retrieve_normed_backward_tokens(dx, dy, x, stats, gain, keys, d, norm))
        .collect();
    let (key_parts, gain_parts): (Vec<_>, Vec<_>) = parts.into_iter().unzip();
    add_in_order(dkeys, key_parts);
    add_in_order(dgain, gain_parts);
}

wide! {
    /// A chunk of `cpu_retrieve_normed_backward`: its dx, and its parts of dkeys and dgain.
    fn retrieve_normed_backward_tokens<T: Scalar, M: Madd>(
        dx: &mut [T],
        dy: &[T],
        x: &[T],
        stats: &[T],
        gain: &[T],
        keys: &[T],
        d: ResidualDims,
        norm: NormDims,
    ) -> (Vec<T>, Vec<T>) {
        let (vm, vv) = (d.dk * d.dv, d.keys * d.dv);
        let mut normed = vec![T::zero(); DOT_TOKENS * vm];
        let (mut xhat, mut dn, mut dgain) = (vec![T::zero(); vm], vec![T::zero(); vm], vec![T::zero(); vm]);
        let mut acc = vec![[T::zero(); DOT_LANES]; d.keys * d.dk];
        let keys_t = Packed::new::<M>(keys, (1, d.dk), (d.dk, d.keys));
        // DOT_TOKENS tokens at a time, so that their matrices and Norm(X) stay in L1.
        let groups = dx.chunks_mut(DOT_TOKENS * vm).zip(dy.chunks(DOT_TOKENS * vv));
        for ((dx, dy), (x, stats)) in groups.zip(x.chunks(DOT_TOKENS * vm).zip(stats.chunks(DOT_TOKENS * 2))) {
            let normed = &mut normed[..x.len()];
            for (t, ((dx, x), st)) in dx.chunks_mut(vm).zip(x.chunks(vm)).zip(stats.chunks(2)).enumerate() {
                standardise(&mut xhat, x, st[0], st[1]);
                for ((o, &h), &g) in normed[t * vm..][..vm].iter_mut().zip(&xhat).zip(gain) {
                    *o = h * g;
                }
                product::<T, M>(&mut dn, whole(d.dv), &keys_t, dy[t * vv..][..vv].chunks_exact(d.dv), d.dv, Onto::Zero);
                row_backward(dx, &mut dgain, &dn, &xhat, gain, st[1], norm.kind);
            }
            dots::<T, M>(&mut acc, dy, normed, d.keys, d.dk, d.dv);
        }
        (total(&acc), dgain)
    }
}
