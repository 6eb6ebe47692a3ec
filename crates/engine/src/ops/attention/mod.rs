//! Causal multi-head attention in f32 (SPEC §1): softmax(scale·q·kᵀ + bias + causal mask)·v per
//! head, where the bias is ALiBi's `−slope_h·(i − j)` when it is on and 0 otherwise (SPEC §2a).
//!
//! FlashAttention-style: no (T, T) matrix is ever kept. The forward saves only each row's
//! log-sum-exp of its logits, `lse` (B, H, T); the backward recomputes the probabilities
//! `P_ij = exp(logit_ij − lse_i)` from q, k and `lse`, with `D_i = Σ_d dout_i·out_i` (the
//! softmax's row term, equal to Σ_j P_ij·dP_ij) computed first into the scratch `delta` (B, H, T).
//!
//! On the GPU (`shaders/attention.wgsl` and `attention_blocked.wgsl`, after their prelude
//! `attention_common.wgsl`) the forward runs one workgroup per (batch, head, tile of
//! [`ROWS`] query rows), a thread per row, walking the tiles of ROWS keys with an online softmax;
//! q, k and v tiles sit in workgroup memory [`CHUNK`] head dimensions at a time (12.4 KiB in all,
//! under WebGPU's default 16 KiB). A thread accumulates [`COLUMNS`] output columns; a wider head
//! takes one workgroup per group of columns, each recomputing the logits. The backward is three
//! launches without atomics: `delta`; per query tile, dq; per key tile (a thread per key), dk and
//! dv. Each output value is written by one thread, summed in a fixed order.
//!
//! In the fast class (`crate::precision`) a head of 16 to 64 dimensions, a multiple of 16, runs
//! [`fast`]'s kernels instead: the same passes with the products on cooperative matrices.

use crate::gpu::{AsArg, Candidate, GpuBackend, GpuIndex, GpuTensor};
use crate::shaders::{Define, WG};

pub mod fast;

/// Query rows (or keys) per workgroup of the GPU kernels, one thread each, and keys (or
/// queries) per tile they sweep.
pub const ROWS: usize = 32;
/// Head dimensions per chunk held in workgroup memory.
pub const CHUNK: usize = 32;
/// Output columns one GPU workgroup accumulates in registers (4 chunks).
pub const COLUMNS: usize = 128;

// The shader accumulates COLUMNS / CHUNK whole chunks.
const _: () = assert!(COLUMNS.is_multiple_of(CHUNK));

/// What `shaders/attention_common.wgsl` and `attention.wgsl` read from here.
pub(crate) const DEFINES: &[Define] = &[
    Define::u32("ROWS", ROWS as u32),
    Define::u32("CHUNK", CHUNK as u32),
    Define::u32("COLUMNS", COLUMNS as u32),
];

/// What `shaders/attention_blocked.wgsl` reads from here, beside its prelude's.
pub(crate) const BLOCKED_DEFINES: &[Define] = &[
    Define::u32("ROWS", ROWS as u32),
    Define::u32("CHUNK", CHUNK as u32),
    Define::u32("COLUMNS", COLUMNS as u32),
    Define::u32("BLOCK_THREADS", BLOCK_THREADS),
];

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AttentionDims {
    pub b: usize,
    pub t: usize,
    pub h: usize,
    pub dh: usize,
    /// Multiplies q·k: 1/sqrt(Dh), divided by (layer + 1) when logit scaling by depth is on.
    pub scale: f32,
    /// Adds ALiBi's position bias after the scale (SPEC §2a): `−2^(−8(h+1)/H)·(i − j)`.
    pub alibi: bool,
}

impl AttentionDims {
    /// ALiBi's slope of head `h` (0-based), or 0 when ALiBi is off.
    pub fn slope(&self, h: usize) -> f64 {
        if self.alibi {
            (-8.0 * (h + 1) as f64 / self.h as f64).exp2()
        } else {
            0.0
        }
    }

    /// B·H·T: one value per (batch, head, query row), the length of the saved `lse` and of the
    /// backward's `delta`.
    pub fn rows(&self) -> usize {
        self.b * self.h * self.t
    }
}

impl AttentionDims {
    fn check(&self, qkv: usize, out: usize, lse: usize, doc_start: usize) {
        assert_eq!(
            doc_start,
            self.b * self.t,
            "attention: doc_start has {doc_start} values for {self:?}"
        );
        let c = self.h * self.dh;
        assert_eq!(
            qkv,
            self.b * self.t * 3 * c,
            "attention: qkv has {qkv} values for {self:?}"
        );
        assert_eq!(out, self.b * self.t * c, "attention: out has {out} values for {self:?}");
        assert_eq!(lse, self.rows(), "attention: lse has {lse} values for {self:?}");
    }
}

#[cfg(feature = "cpu")]
mod cpu_twin {
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
}
#[cfg(feature = "cpu")]
pub use cpu_twin::*;

pub(crate) fn params(d: &AttentionDims) -> [u32; 6] {
    [
        d.b as u32,
        d.t as u32,
        d.h as u32,
        d.dh as u32,
        d.scale.to_bits(),
        d.alibi as u32,
    ]
}

/// One workgroup per (batch, head, tile of ROWS rows, COLUMNS output columns), folded past
/// 65 535 like every launch.
fn tiles(gpu: &GpuBackend, d: &AttentionDims) -> [u32; 3] {
    gpu.grid_1d(d.b * d.h * d.t.div_ceil(ROWS) * d.dh.div_ceil(COLUMNS).max(1), 1)
}

/// How the forward's and the backward's tiles are spread over a workgroup's threads: one thread
/// per query row (or key), or [`Kernel::Blocked`]'s threads sharing each tile's dot products and
/// outputs. Both compute every value as the same chain in the same order
/// (`shaders/attention.wgsl`, `attention_blocked.wgsl`), so they differ only in speed, and tuning picks one per adapter
/// and shape (`gpu/tuning.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kernel {
    /// ROWS threads, each a row's logits, softmax and COLUMNS outputs in registers.
    RowPerThread,
    /// [`BLOCK_THREADS`] threads, each a 2×4 block of a tile's dot products and outputs: a
    /// value read from workgroup memory feeds several multiply-adds.
    Blocked,
    /// [`Kernel::Blocked`]'s forward with its softmax step over each tile spread over every
    /// thread (the `SPREAD` switch) instead of one thread a row; a forward kernel only
    /// ([`BACKWARD_KERNELS`] leaves it out).
    BlockedSpread,
}

/// The blocked kernels' threads: 16 × 8, each rows r and r + 16 by columns c + 8·b of a 32 × 32
/// tile (`shaders/attention_blocked.wgsl`).
const BLOCK_THREADS: u32 = 128;
const _: () = assert!(ROWS == 32 && CHUNK == 32);

/// Every kernel, the default first: the row-per-thread kernel needs the fewest threads and a
/// CPU-like adapter (lavapipe) keeps it; the blocked ones keep a few registers a thread, which a
/// GPU with many lanes fills better (an H100 chose them at every shape). The tiled kernels, 256
/// or 128 threads a few dot products each, are retired: the blocked ones replaced them on the
/// H100 and no adapter measured since chose them (bench/RESULTS.md).
pub const KERNELS: &[Kernel] = &[Kernel::RowPerThread, Kernel::Blocked, Kernel::BlockedSpread];

/// The backward's kernels: [`KERNELS`] but the spread one, whose backward is the blocked one's.
/// The first of [`KERNELS`] in the same order, so that a candidate's index is the same in both
/// (tests force a kernel by its index in each).
pub const BACKWARD_KERNELS: &[Kernel] = &[Kernel::RowPerThread, Kernel::Blocked];

/// The blocked forward's switch: its softmax step on every thread.
const SPREAD: &str = "SPREAD";
pub(crate) const SWITCHES: &[Define] = &[Define::bool(SPREAD, false)];
// The spread softmax gives each of a row's threads an equal share of a tile's keys.
const _: () =
    assert!((BLOCK_THREADS as usize).is_multiple_of(ROWS) && ROWS.is_multiple_of(BLOCK_THREADS as usize / ROWS));

impl Kernel {
    /// The switches of its shader variant.
    pub fn switches(&self) -> Vec<Define> {
        match self {
            Kernel::RowPerThread | Kernel::Blocked => vec![],
            Kernel::BlockedSpread => vec![Define::bool(SPREAD, true)],
        }
    }

    /// Its shader: `shaders/attention.wgsl` or `attention_blocked.wgsl`, each after the prelude
    /// `attention_common.wgsl`.
    pub fn shader(&self) -> &'static str {
        match self {
            Kernel::RowPerThread => "attention",
            Kernel::Blocked | Kernel::BlockedSpread => "attention_blocked",
        }
    }

    /// The entry point of `pass` in this kernel.
    fn entry(&self, pass: Pass) -> &'static str {
        match (self, pass) {
            (Kernel::RowPerThread, Pass::Forward) => "attention_forward",
            (Kernel::RowPerThread, Pass::Query) => "attention_backward_query",
            (Kernel::RowPerThread, Pass::Key) => "attention_backward_key",
            (Kernel::Blocked | Kernel::BlockedSpread, Pass::Forward) => "attention_forward_blocked",
            (Kernel::Blocked | Kernel::BlockedSpread, Pass::Query) => "attention_backward_query_blocked",
            (Kernel::Blocked | Kernel::BlockedSpread, Pass::Key) => "attention_backward_key_blocked",
        }
    }
}

impl Candidate for Kernel {
    fn name(&self) -> String {
        match self {
            Kernel::RowPerThread => "row per thread".to_string(),
            Kernel::Blocked => format!("blocked {BLOCK_THREADS}"),
            Kernel::BlockedSpread => format!("blocked {BLOCK_THREADS}, spread softmax"),
        }
    }
    fn fits(&self, gpu: &GpuBackend) -> bool {
        match self {
            Kernel::RowPerThread => true,
            Kernel::Blocked | Kernel::BlockedSpread => {
                BLOCK_THREADS <= gpu.limits.max_compute_invocations_per_workgroup
            }
        }
    }
}

/// The shape class tuning measures once: the kernels' speed depends on B·H, T and Dh.
pub(crate) fn class(pass: &str, d: &AttentionDims) -> String {
    format!("attention {pass} batch {} T {} heads {}×{}", d.b, d.t, d.h, d.dh)
}

/// `d` with at most as many sequences as keep a tuning measurement within 2^(28 + 2·growth)
/// multiply-adds of the forward (q·k and p·v over the causal half) and its scratch outputs
/// within 2^24 values (64 MiB): the kernels then read and write only those sequences' rows.
/// Also says whether that is every sequence.
pub(crate) fn for_tuning(d: &AttentionDims, growth: u32) -> (AttentionDims, bool) {
    let values = (d.t * 3 * d.h * d.dh).max(1);
    let work = (d.h * d.t * d.t * d.dh).max(1);
    let b =
        d.b.min((1 << 24) / values)
            .min((1usize << (28 + 2 * growth.min(8))) / work)
            .max(1);
    (AttentionDims { b, ..*d }, b == d.b)
}

/// The launches a [`Kernel`] has its own entry point for.
#[derive(Clone, Copy)]
enum Pass {
    Forward,
    Query,
    Key,
}

/// Records one launch of `pass` of kernel `k`.
fn launch(
    gpu: &GpuBackend,
    k: Kernel,
    pass: Pass,
    params: &[u32],
    args: &[(u32, crate::gpu::Arg<'_>)],
    d: &AttentionDims,
) {
    gpu.dispatch_with_at(k.shader(), k.entry(pass), &k.switches(), params, args, tiles(gpu, d));
}

/// The ops on the GPU, as `GpuBackend` runs them: each checks its shapes and records its
/// launches, in the kernel tuned for its shape ([`KERNELS`]), or in the fast class the fast
/// kernels where the head fits them ([`fast`]).
pub mod gpu {
    use super::*;
    use crate::Backend;

    pub fn attention_forward(
        gpu: &GpuBackend,
        out: &GpuTensor,
        lse: &GpuTensor,
        qkv: &GpuTensor,
        doc_start: &GpuIndex,
        d: AttentionDims,
    ) {
        d.check(qkv.len, out.len, lse.len, doc_start.len);
        if fast::runs_fast(gpu, &d) {
            return fast::gpu_forward(gpu, out, lse, qkv, doc_start, d);
        }
        let forward = |out: &GpuTensor, lse: &GpuTensor, d: &AttentionDims, k: Kernel| {
            let args = [(1, out.arg()), (2, lse.arg()), (3, qkv.arg()), (4, doc_start.arg())];
            launch(gpu, k, Pass::Forward, &params(d), &args, d)
        };
        let k = gpu.tuned(
            "attention_forward",
            || class("forward", &d),
            KERNELS,
            |k, growth| {
                let (t, whole) = for_tuning(&d, growth);
                if let (Ok(out), Ok(lse)) = (
                    gpu.zeros("tuning out", t.b * t.t * t.h * t.dh),
                    gpu.zeros("tuning lse", t.rows()),
                ) {
                    forward(&out, &lse, &t, k)
                }
                whole
            },
        );
        forward(out, lse, &d, k)
    }

    #[allow(clippy::too_many_arguments)]
    pub fn attention_backward(
        gpu: &GpuBackend,
        dqkv: &GpuTensor,
        delta: &GpuTensor,
        dout: &GpuTensor,
        out: &GpuTensor,
        qkv: &GpuTensor,
        lse: &GpuTensor,
        doc_start: &GpuIndex,
        d: AttentionDims,
    ) {
        d.check(qkv.len, dout.len, lse.len, doc_start.len);
        assert_eq!(out.len, dout.len, "attention: out and dout differ in length");
        assert_eq!(dqkv.len, qkv.len, "attention: dqkv and qkv differ in length");
        assert_eq!(delta.len, lse.len, "attention: delta and lse differ in length");
        if fast::runs_fast(gpu, &d) {
            return fast::gpu_backward(gpu, dqkv, delta, dout, out, qkv, lse, doc_start, d);
        }
        let backward = |dqkv: &GpuTensor, delta: &GpuTensor, d: &AttentionDims, k: Kernel| {
            let p = params(d);
            let rows = [(2, delta.arg()), (3, dout.arg()), (4, out.arg())];
            gpu.dispatch_at(
                "attention",
                "attention_backward_delta",
                &p,
                &rows,
                gpu.grid_1d(d.rows(), WG),
            );
            let args = [
                (1, dqkv.arg()),
                (2, delta.arg()),
                (3, dout.arg()),
                (5, qkv.arg()),
                (6, lse.arg()),
                (7, doc_start.arg()),
            ];
            launch(gpu, k, Pass::Query, &p, &args, d);
            launch(gpu, k, Pass::Key, &p, &args, d);
        };
        let k = gpu.tuned(
            "attention_backward",
            || class("backward", &d),
            BACKWARD_KERNELS,
            |k, growth| {
                let (t, whole) = for_tuning(&d, growth);
                if let (Ok(dqkv), Ok(delta)) = (
                    gpu.zeros("tuning dqkv", t.b * t.t * 3 * t.h * t.dh),
                    gpu.zeros("tuning delta", t.rows()),
                ) {
                    backward(&dqkv, &delta, &t, k)
                }
                whole
            },
        );
        backward(dqkv, delta, &d, k)
    }
}

/// The ops on the CPU, as `CpuBackend` runs them: each borrows its tensors for its twin above.
#[cfg(feature = "cpu")]
pub mod cpu {
    use super::*;
    use crate::cpu::{CpuBackend, CpuIndex, CpuTensor};
    use crate::ops::Scalar;
    use crate::Backend;

    /// f32 copies of tensors, for the fast class's twin (which only `CpuBackend<f32>` runs).
    fn f32s<T: Scalar>(x: &[T]) -> Vec<f32> {
        x.iter().map(|v| v.f64() as f32).collect()
    }

    fn write_back<T: Scalar>(into: &CpuTensor<T>, x: &[f32]) {
        for (o, &v) in into.get_mut().iter_mut().zip(x) {
            *o = T::of(v as f64);
        }
    }

    /// The strict forward, or on the fast class's twin its forward for the heads in that
    /// class ([`fast::cpu_forward`]).
    pub fn attention_forward<T: Scalar>(
        be: &CpuBackend<T>,
        out: &CpuTensor<T>,
        lse: &CpuTensor<T>,
        qkv: &CpuTensor<T>,
        doc_start: &CpuIndex,
        d: AttentionDims,
    ) {
        if be.precision().is_strict() || !d.in_fast_class() {
            return cpu_forward(&mut out.get_mut(), &mut lse.get_mut(), &qkv.get(), &doc_start.get(), d);
        }
        let (mut o, mut l) = (vec![0f32; out.get().len()], vec![0f32; lse.get().len()]);
        if !fast::cpu_forward(&mut o, &mut l, &f32s(&qkv.get()), &doc_start.get(), d) {
            be.fast_fault_at(|| d.describe("forward"));
        }
        write_back(out, &o);
        write_back(lse, &l);
    }
    /// The strict backward, or on the fast class's twin its backward ([`fast::cpu_backward`]).
    #[allow(clippy::too_many_arguments)]
    pub fn attention_backward<T: Scalar>(
        be: &CpuBackend<T>,
        dqkv: &CpuTensor<T>,
        delta: &CpuTensor<T>,
        dout: &CpuTensor<T>,
        out: &CpuTensor<T>,
        qkv: &CpuTensor<T>,
        lse: &CpuTensor<T>,
        doc_start: &CpuIndex,
        d: AttentionDims,
    ) {
        if !be.precision().is_strict() && d.in_fast_class() {
            let (mut g, mut dl) = (vec![0f32; dqkv.get().len()], vec![0f32; delta.get().len()]);
            let (go, o, x, l) = (f32s(&dout.get()), f32s(&out.get()), f32s(&qkv.get()), f32s(&lse.get()));
            if !fast::cpu_backward(&mut g, &mut dl, &go, &o, &x, &l, &doc_start.get(), d) {
                be.fast_fault_at(|| d.describe("backward"));
            }
            write_back(dqkv, &g);
            return write_back(delta, &dl);
        }
        cpu_backward(
            &mut dqkv.get_mut(),
            &mut delta.get_mut(),
            &dout.get(),
            &out.get(),
            &qkv.get(),
            &lse.get(),
            &doc_start.get(),
            d,
        )
    }
}

/// What each op costs (`crate::cost` has the conventions).
pub mod cost {
    use super::*;
    use crate::cost::{f, Cost, Family, W};

    /// The causal triangle of one (batch, head): T(T+1)/2 (query, key) pairs.
    fn causal(d: &AttentionDims) -> f64 {
        f(d.b * d.h) * f(d.t) * (f(d.t) + 1.0) / 2.0
    }

    fn forward_flops(d: &AttentionDims) -> f64 {
        causal(d) * (4.0 * f(d.dh) + 3.0)
    }

    pub fn attention_forward(d: AttentionDims) -> Cost {
        let v = f(d.b) * f(d.t) * f(d.h) * f(d.dh);
        let bytes = W * (4.0 * v + f(d.rows()) + f(d.b) * f(d.t));
        Family::Attention.cost(forward_flops(&d), bytes)
    }
    pub fn attention_backward(d: AttentionDims) -> Cost {
        let v = f(d.b) * f(d.t) * f(d.h) * f(d.dh);
        // dout, out and qkv read, dqkv written; lse read, delta written and read.
        let bytes = W * (8.0 * v + 3.0 * f(d.rows()) + f(d.b) * f(d.t));
        Family::Attention.cost(2.0 * forward_flops(&d), bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A kernel's index in the backward's list is its index in the forward's.
    #[test]
    fn backward_kernels_begin_the_forward_list() {
        assert_eq!(&KERNELS[..BACKWARD_KERNELS.len()], BACKWARD_KERNELS);
        assert!(!BACKWARD_KERNELS.contains(&Kernel::BlockedSpread));
    }
}
