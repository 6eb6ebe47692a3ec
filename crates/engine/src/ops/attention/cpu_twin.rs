//! The strict attention's CPU twin (`super`'s module docs): blocks of query rows, their logits
//! and softmax in the CPU's widest registers, one batch element a thread.

use super::*;
use crate::cpu::product::{columns_at, product, rows_at, Onto, Rows};
use crate::cpu::simd::{lane_max, lane_sum, wide, Madd, LANES};
use crate::ops::Scalar;
use rayon::prelude::*;

/// Query rows per block of the CPU twin: a block's logits are QB × (its keys), never T × T.
const QB: usize = 64;
/// Rows (queries, or keys) per causal step inside a block: each group of SUB queries
/// multiplies only the keys up to its last one (rounded up to a whole block of LANES), each
/// group of SUB keys only the queries from its first one, so the products skip nearly all of
/// the block's masked half. The same in every build, so the FMA builds agree bit for bit.
const SUB: usize = 8;

/// The first key query `i` of a sequence may see: its document's start, at most `i`.
fn first_key(starts: &[u32], i: usize) -> usize {
    (starts[i] as usize).min(i)
}

/// The keys any query of rows `i0..i1` sees: from the earliest first key up to `i1`.
fn block_keys(starts: &[u32], i0: usize, i1: usize) -> usize {
    (i0..i1).map(|i| first_key(starts, i)).min().unwrap_or(i0)
}

/// A block of QB query rows i0..i0+m and the nk keys from k0 that any of them sees, its
/// rows of logits `stride` apart: whole blocks of LANES, for the softmax's loops.
struct Block {
    i0: usize,
    m: usize,
    k0: usize,
    nk: usize,
    stride: usize,
}

/// A sequence's blocks of queries, in order.
fn blocks(starts: &[u32], tt: usize) -> impl Iterator<Item = Block> + '_ {
    (0..tt).step_by(QB).map(move |i0| {
        let i1 = (i0 + QB).min(tt);
        let k0 = block_keys(starts, i0, i1);
        let nk = i1 - k0;
        Block {
            i0,
            m: i1 - i0,
            k0,
            nk,
            stride: nk.next_multiple_of(LANES),
        }
    })
}

impl Block {
    /// Its groups of SUB queries: (the first's row in the block, how many, the keys up to
    /// the last's, from k0).
    fn groups(&self) -> impl Iterator<Item = (usize, usize, usize)> + '_ {
        (0..self.m).step_by(SUB).map(|r0| {
            let rows = SUB.min(self.m - r0);
            (r0, rows, self.i0 + r0 + rows - self.k0)
        })
    }
}

/// Where one batch element's tensors live: q, k, v of head h are (T, Dh) with row stride
/// 3C in qkv; out and dout rows have stride C.
struct Seq {
    b: usize,
    d: AttentionDims,
}

impl Seq {
    fn c(&self) -> usize {
        self.d.h * self.d.dh
    }
    /// Part `p` (0 q, 1 k, 2 v) of head `h` from token `t` of this sequence, in qkv.
    fn qkv(&self, p: usize, h: usize, t: usize) -> Rows {
        let c = self.c();
        Rows {
            offset: (self.b * self.d.t + t) * 3 * c + p * c + h * self.d.dh,
            stride: 3 * c,
        }
    }
    /// Head `h` from token `t`, in out or dout.
    fn out(&self, h: usize, t: usize) -> Rows {
        Rows {
            offset: (self.b * self.d.t + t) * self.c() + h * self.d.dh,
            stride: self.c(),
        }
    }
}

/// The rows of a matrix in a slice (from `at`), each cut to its first n values.
fn rows_of<T>(x: &[T], at: Rows, n: usize) -> impl Iterator<Item = &[T]> + Clone {
    x[at.offset..].chunks(at.stride).map(move |row| &row[..n])
}

/// into (Dh, T) = the head's (T, Dh) rows from `at`, transposed: the right factor of the
/// products that contract over the head dimension.
#[inline(always)]
fn transposed<T: Scalar>(into: &mut [T], x: &[T], at: Rows, tt: usize, dh: usize) {
    // Blocks of LANES tokens, each column's LANES values stored side by side.
    let whole = tt - tt % LANES;
    assert!(into.len() >= dh * tt);
    for t0 in (0..whole).step_by(LANES) {
        let block = &x[at.offset + t0 * at.stride..];
        // The block's last value, (LANES − 1, dh − 1): every value read lies at or before it.
        assert!((LANES - 1) * at.stride + dh <= block.len());
        for c in 0..dh {
            for (l, v) in into[c * tt + t0..][..LANES].iter_mut().enumerate() {
                // SAFETY: l·stride + c < (LANES − 1)·stride + dh, checked above.
                *v = unsafe { *block.get_unchecked(l * at.stride + c) };
            }
        }
    }
    for (t, row) in rows_of(x, at, dh).take(tt).enumerate().skip(whole) {
        for (column, &v) in into.chunks_exact_mut(tt).zip(row) {
            column[t] = v;
        }
    }
}

/// A row of logits: the keys it sees (from k0) and the whole blocks of LANES that cover
/// them, over which its softmax loops run without a remainder; the keys outside `seen` are
/// masked in those loops, so they add exact zeros.
fn row_span(starts: &[u32], i: usize, k0: usize) -> (std::ops::Range<usize>, usize) {
    let seen = first_key(starts, i) - k0..i - k0 + 1;
    let span = seen.end.next_multiple_of(LANES);
    (seen, span)
}

/// Zeros a row's values past its span that the products still read: a group of SUB rows
/// (P·v, dS·k) reads each row up to the group's last key, a group of SUB keys (dSᵀ·q,
/// Pᵀ·dout) reads from its first row on, so neither reads past key `seen.end + SUB − 1`.
/// Nothing further is read, so the rest of the row is left as it was.
fn zero_past_span<T: Scalar>(row: &mut [T], seen_end: usize, span: usize) {
    let read = (seen_end + SUB - 1).min(row.len());
    if read > span {
        row[span..read].fill(T::zero());
    }
}

/// logit(i, j) = scale·(q_i·k_j) − slope·(i − j), from the raw product q_i·k_j and the
/// positions i and j as floats (whole numbers, so i − j is exact): the loop over a row then
/// vectorises, which converting each i − j from an integer kept from doing.
#[inline(always)]
fn logit<T: Scalar>(dot: T, scale: T, slope: T, i: T, j: T) -> T {
    dot * scale - slope * (i - j)
}

/// 0, 1, … as floats, the key positions of [`logit`]: T of them, and a block of LANES past
/// the last for a row's span.
fn positions<T: Scalar>(tt: usize) -> Vec<T> {
    (0..tt + LANES).map(|j| T::of(j as f64)).collect()
}

/// Per batch element and head, in blocks of QB query rows: the block's products with its
/// keys, each row's exps over the keys of the query's document up to itself (its
/// log-sum-exp saved in `lse`), then out = exps · v over the exps' sum.
pub fn cpu_forward<T: Scalar>(out: &mut [T], lse: &mut [T], qkv: &[T], doc_start: &[u32], d: AttentionDims) {
    d.check(qkv.len(), out.len(), lse.len(), doc_start.len());
    out.par_chunks_mut(d.t * d.h * d.dh)
        .zip(lse.par_chunks_mut(d.h * d.t))
        .enumerate()
        .for_each(|(b, (out, lse))| forward_sequence(out, lse, qkv, doc_start, b, d));
}

/// s (from `s_at`) = q_i·k_j for each query i of a group of a block (`rows` of them from
/// `q_at`) and the `seen` keys from the block's first up to its last, from `kt` (Dh, T).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn logits_group<T: Scalar, M: Madd>(
    s: &mut [T],
    s_at: Rows,
    q: &[T],
    q_at: Rows,
    kt: &[T],
    rows: usize,
    blk: &Block,
    seen: usize,
    dh: usize,
    tt: usize,
) {
    // The keys the group's last query sees, rounded up to whole blocks of LANES.
    let (k0, n) = (blk.k0, seen.next_multiple_of(LANES).min(blk.nk));
    let a = rows_at(q, q_at, rows, dh);
    let b = kt.chunks_exact(tt).map(|row| &row[k0..]);
    product::<T, M>(s, s_at, &a, b, n, Onto::Zero);
}

wide! {
    /// One batch element of `cpu_forward`, every head, its products and softmax loops in
    /// the CPU's widest registers.
    fn forward_sequence<T: Scalar, M: Madd>(out: &mut [T], lse: &mut [T], qkv: &[T], doc_start: &[u32], b: usize, d: AttentionDims) {
        let (tt, dh) = (d.t, d.dh);
        let scale = T::of(d.scale as f64);
        let seq = Seq { b, d };
        let starts = &doc_start[b * tt..(b + 1) * tt];
        // The block's logits, then its probabilities: (rows, keys), keys from k0.
        let mut s = vec![T::zero(); QB.min(tt) * tt.next_multiple_of(LANES)];
        let mut kt = vec![T::zero(); dh * tt];
        let pos = positions::<T>(tt);
        // out's rows relative to this batch element's slice.
        let base = b * tt * seq.c();
        for h in 0..d.h {
            let slope = T::of(d.slope(h));
            transposed(&mut kt, qkv, seq.qkv(1, h, 0), tt, dh);
            for blk in blocks(starts, tt) {
                let Block { i0, m, k0, nk: _, stride } = blk;
                for (r0, rows, seen) in blk.groups() {
                    let at = Rows { offset: r0 * stride, stride };
                    logits_group::<T, M>(&mut s, at, qkv, seq.qkv(0, h, i0 + r0), &kt, rows, &blk, seen, dh, tt);
                }
                // Each row's exps and their sum, in two passes over whole blocks of LANES.
                let mut sums = [T::zero(); QB];
                for (r, (row, sum)) in s.chunks_mut(stride).zip(&mut sums).take(m).enumerate() {
                    let i = i0 + r;
                    let (seen, span) = row_span(starts, i, k0);
                    zero_past_span(row, seen.end, span);
                    let row = &mut row[..span];
                    let (first, fi) = (pos[k0 + seen.start], pos[i]);
                    let (lanes, keys) = (row.as_chunks_mut::<LANES>().0, pos[k0..][..span].as_chunks::<LANES>().0);
                    let mut mx = [T::neg_infinity(); LANES];
                    for (a, k) in lanes.iter_mut().zip(keys) {
                        for l in 0..LANES {
                            let seen = k[l] >= first && k[l] <= fi;
                            a[l] = if seen { logit(a[l], scale, slope, fi, k[l]) } else { T::neg_infinity() };
                            mx[l] = mx[l].max(a[l]);
                        }
                    }
                    let mx = lane_max(&mx);
                    let mut sum_lanes = [T::zero(); LANES];
                    for a in lanes.iter_mut() {
                        for l in 0..LANES {
                            a[l] = (a[l] - mx).softmax_exp();
                            sum_lanes[l] = sum_lanes[l] + a[l];
                        }
                    }
                    *sum = lane_sum(&sum_lanes, |a| a);
                    lse[h * tt + i] = mx + sum.ln();
                }
                // out = P·v, each group of queries over the keys up to its last.
                for (r0, rows, seen) in blk.groups() {
                    let p = rows_at(&s, Rows { offset: r0 * stride, stride }, rows, seen);
                    let mut o = seq.out(h, i0 + r0);
                    o.offset -= base;
                    product::<T, M>(out, o, &p, rows_of(qkv, seq.qkv(2, h, k0), dh), dh, Onto::Zero);
                    // The probabilities are the exps over their sum: divided here, Dh values
                    // a row rather than a row of keys.
                    for (row, &sum) in out[o.offset..].chunks_mut(o.stride).zip(&sums[r0..r0 + rows]) {
                        for v in &mut row[..dh] {
                            *v = *v / sum;
                        }
                    }
                }
            }
        }
    }
}

/// Per batch element and head: delta_i = dout_i · out_i; then per block of QB query rows,
/// the probabilities P = exp(logits − lse) recomputed, dP = dout·vᵀ,
/// dS = scale·P ⊙ (dP − delta), and dq = dS·k, dk += dSᵀ·q, dv += Pᵀ·dout, the blocks in
/// order. Masked pairs get P = dS = 0, and the products skip the groups that are all masked.
#[allow(clippy::too_many_arguments)]
pub fn cpu_backward<T: Scalar>(
    dqkv: &mut [T],
    delta: &mut [T],
    dout: &[T],
    out: &[T],
    qkv: &[T],
    lse: &[T],
    doc_start: &[u32],
    d: AttentionDims,
) {
    d.check(qkv.len(), dout.len(), lse.len(), doc_start.len());
    assert_eq!(out.len(), dout.len(), "attention: out and dout differ in length");
    assert_eq!(dqkv.len(), qkv.len(), "attention: dqkv and qkv differ in length");
    assert_eq!(delta.len(), lse.len(), "attention: delta and lse differ in length");
    dqkv.par_chunks_mut(d.t * 3 * d.h * d.dh)
        .zip(delta.par_chunks_mut(d.h * d.t))
        .enumerate()
        .for_each(|(b, (dqkv, delta))| backward_sequence(dqkv, delta, dout, out, qkv, lse, doc_start, b, d));
}

wide! {
    /// One batch element of `cpu_backward`, every head, as `forward_sequence` is of the
    /// forward.
    fn backward_sequence<T: Scalar, M: Madd>(
        dqkv: &mut [T],
        delta: &mut [T],
        dout: &[T],
        out: &[T],
        qkv: &[T],
        lse: &[T],
        doc_start: &[u32],
        b: usize,
        d: AttentionDims,
    ) {
        let (tt, dh) = (d.t, d.dh);
        let scale = T::of(d.scale as f64);
        let seq = Seq { b, d };
        let starts = &doc_start[b * tt..(b + 1) * tt];
        let lse = &lse[b * d.h * tt..(b + 1) * d.h * tt];
        // dk and dv add up over the query blocks.
        dqkv.fill(T::zero());
        // Part p of head h from token t, in this batch element's dqkv.
        let local = |p: usize, h: usize, t: usize| {
            let at = seq.qkv(p, h, t);
            Rows { offset: at.offset - b * tt * at.stride, stride: at.stride }
        };
        let block = QB.min(tt) * tt.next_multiple_of(LANES);
        let (mut pr, mut ds) = (vec![T::zero(); block], vec![T::zero(); block]);
        let c = seq.c();
        let (mut kt, mut vt) = (vec![T::zero(); dh * tt], vec![T::zero(); dh * tt]);
        // delta_i = dout_i · out_i for every head, dout's and out's rows in order.
        for i in 0..tt {
            let at = seq.out(0, i).offset;
            let (dout, out) = (&dout[at..][..c], &out[at..][..c]);
            for (h, (g, o)) in dout.chunks_exact(dh).zip(out.chunks_exact(dh)).enumerate() {
                delta[h * tt + i] = g.iter().zip(o).map(|(&g, &o)| g * o).sum();
            }
        }
        let pos = positions::<T>(tt);
        for h in 0..d.h {
            let slope = T::of(d.slope(h));
            transposed(&mut kt, qkv, seq.qkv(1, h, 0), tt, dh);
            transposed(&mut vt, qkv, seq.qkv(2, h, 0), tt, dh);
            for blk in blocks(starts, tt) {
                let Block { i0, m, k0, nk, stride } = blk;
                for (r0, rows, seen) in blk.groups() {
                    let at = Rows { offset: r0 * stride, stride };
                    logits_group::<T, M>(&mut pr, at, qkv, seq.qkv(0, h, i0 + r0), &kt, rows, &blk, seen, dh, tt);
                    logits_group::<T, M>(&mut ds, at, dout, seq.out(h, i0 + r0), &vt, rows, &blk, seen, dh, tt);
                }
                for (r, (pr, ds)) in pr.chunks_mut(stride).zip(ds.chunks_mut(stride)).take(m).enumerate() {
                    let i = i0 + r;
                    let (seen, span) = row_span(starts, i, k0);
                    let (lse, delta) = (lse[h * tt + i], delta[h * tt + i]);
                    zero_past_span(pr, seen.end, span);
                    zero_past_span(ds, seen.end, span);
                    let (pr, ds) = (&mut pr[..span], &mut ds[..span]);
                    // The keys outside `seen` get P = dS = 0.
                    let fi = pos[i];
                    for (a, &pj) in pr[seen.clone()].iter_mut().zip(&pos[k0 + seen.start..]) {
                        *a = logit(*a, scale, slope, fi, pj) - lse;
                    }
                    pr[..seen.start].fill(T::neg_infinity());
                    pr[seen.end..].fill(T::neg_infinity());
                    // The exps and dS in passes of their own, which vectorise.
                    for a in pr.iter_mut() {
                        *a = a.softmax_exp();
                    }
                    for (g, &p) in ds[seen.clone()].iter_mut().zip(&pr[seen.clone()]) {
                        *g = p * (*g - delta) * scale;
                    }
                    ds[..seen.start].fill(T::zero());
                    ds[seen.end..].fill(T::zero());
                }
                // dq = dS·k, each group of queries over the keys up to its last.
                for (r0, rows, seen) in blk.groups() {
                    let g = rows_at(&ds, Rows { offset: r0 * stride, stride }, rows, seen);
                    let k = rows_of(qkv, seq.qkv(1, h, k0), dh);
                    product::<T, M>(dqkv, local(0, h, i0 + r0), &g, k, dh, Onto::Zero);
                }
                // dk += dSᵀ·q and dv += Pᵀ·dout, each group of keys over the queries from
                // its first (the earlier ones are masked: their dS and P are 0).
                for j0 in (0..nk).step_by(SUB) {
                    let rows = SUB.min(nk - j0);
                    let r0 = (k0 + j0).saturating_sub(i0);
                    if r0 >= m {
                        continue;
                    }
                    let at = Rows { offset: r0 * stride + j0, stride };
                    let g = columns_at(&ds, at, rows, m - r0);
                    let q = rows_of(qkv, seq.qkv(0, h, i0 + r0), dh);
                    product::<T, M>(dqkv, local(1, h, k0 + j0), &g, q, dh, Onto::Out);
                    let p = columns_at(&pr, at, rows, m - r0);
                    let go = rows_of(dout, seq.out(h, i0 + r0), dh);
                    product::<T, M>(dqkv, local(2, h, k0 + j0), &p, go, dh, Onto::Out);
                }
            }
        }
    }
}
