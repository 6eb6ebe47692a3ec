//! Batched matmul with the transposes a transformer needs.
//!
//! A linear layer y = x·Wᵀ with W (OC, C) as PyTorch stores it: forward `y = x·Wᵀ` (trans_b),
//! backward `dx = dy·W` and `dW = dyᵀ·x` (trans_a).

use crate::gpu::{AsArg, Candidate, GpuBackend, GpuTensor, VIEW_ALIGN};
use crate::shaders::{Define, SUBGROUPS, WG};
use crate::Backend;

mod fast;
pub use fast::{exponents, FastTile, COOP, FAST_TILES};
pub(crate) use fast::{FAST_DEFINES, FAST_SWITCHES, PARTIALS_B, SCALE_DEFINES};

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
    /// Values of a and of b from the first the product reads to the last: what the fast
    /// class's scales are taken over.
    pub fn spans(&self) -> (usize, usize) {
        let need_a = (self.batch - 1) * self.stride_a + self.m * self.k;
        let need_b = (self.batch - 1) * self.stride_b + self.k * self.n;
        (need_a, need_b)
    }
    /// The product's shape class, as the tuner and messages name it:
    /// `matmul 4096×1024×256 batch 1 a·bᵀ`.
    pub fn describe(&self) -> String {
        let op = |t: bool, x: &str| if t { format!("{x}ᵀ") } else { x.to_string() };
        let acc = if self.accumulate { " +=" } else { "" };
        format!(
            "matmul {}×{}×{} batch {} {}·{}{acc}",
            self.m,
            self.n,
            self.k,
            self.batch,
            op(self.trans_a, "a"),
            op(self.trans_b, "b")
        )
    }
    fn check(&self, out: usize, a: usize, b: usize) {
        assert_eq!(
            out,
            self.batch * self.m * self.n,
            "matmul: out has {out} values for {self:?}"
        );
        let (need_a, need_b) = self.spans();
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
    // Rows per task: a band per thread. Each task's GEMM packs the whole of b, so more bands
    // than threads pack it more often for nothing (4 a thread were 9% slower on the toy pair's
    // matmuls, interleaved A/B, bench/RESULTS.md).
    let tasks = rayon::current_num_threads();
    let rows = d.m.div_ceil(tasks).max(16);
    // Rows `r0..` of product `bi` into `c`.
    let rows_of = |bi: usize, r0: usize, c: &mut [T]| {
        let mr = c.len() / d.n;
        // SAFETY: the strides and extents were checked against the slice lengths above.
        unsafe {
            T::gemm(
                mr,
                d.k,
                d.n,
                a[bi * d.stride_a..].as_ptr().add(r0 * rsa),
                rsa as isize,
                csa as isize,
                b[bi * d.stride_b..].as_ptr(),
                rsb as isize,
                csb as isize,
                beta,
                c.as_mut_ptr(),
                d.n as isize,
            )
        }
    };
    let size = d.m * d.n;
    if d.batch >= tasks && d.m * d.n * d.k < SMALL_PRODUCT {
        // Many small products (hyper-connections' per-token n×n, n×D and 1×n ones): a task
        // runs a run of them, each as the same GEMM calls, so the bits do not change.
        let per_task = d.batch.div_ceil(tasks);
        out.par_chunks_mut(size * per_task).enumerate().for_each(|(ti, run)| {
            for (j, out_b) in run.chunks_mut(size).enumerate() {
                for (ci, c) in out_b.chunks_mut(rows * d.n).enumerate() {
                    rows_of(ti * per_task + j, ci * rows, c);
                }
            }
        });
        return;
    }
    out.par_chunks_mut(size).enumerate().for_each(|(bi, out_b)| {
        out_b
            .par_chunks_mut(rows * d.n)
            .enumerate()
            .for_each(|(ci, c)| rows_of(bi, ci * rows, c));
    });
}

/// Multiply-adds below which a product of a batch is too small to be a task of its own.
#[cfg(feature = "cpu")]
const SMALL_PRODUCT: usize = 1 << 14;

/// The extent of one launch of a split product: rows of out, columns of out, and the shared
/// dimension.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Block {
    m: (usize, usize),
    n: (usize, usize),
    k: (usize, usize),
}

/// An operand stored row-major with `ld` values a row, of which a launch reads rows
/// `rows` and columns `cols`: the window it binds, as (first value, values).
fn window(ld: usize, rows: (usize, usize), cols: (usize, usize)) -> (usize, usize) {
    let first = rows.0 * ld + cols.0;
    let last = (rows.1 - 1) * ld + cols.1;
    (first, last - first)
}

impl MatmulDims {
    /// The windows of out, a and b that `blk` reads: (first value, values) each.
    fn windows(&self, blk: &Block) -> [(usize, usize); 3] {
        let out = window(self.n, blk.m, blk.n);
        let a = match self.trans_a {
            false => window(self.k, blk.m, blk.k),
            true => window(self.m, blk.k, blk.m),
        };
        let b = match self.trans_b {
            false => window(self.n, blk.k, blk.n),
            true => window(self.k, blk.n, blk.k),
        };
        [out, a, b]
    }

    /// Sizes (M, N, K) of the launches when any operand or grid is too large for one: each
    /// window, padded by up to 63 values to start aligned, must fit `cap`, and each grid
    /// dimension `groups` workgroups of `tile`. K is split at multiples of the shader's K tile,
    /// so that every launch after the first continues the same chain of fmas. None when no
    /// split fits.
    fn split(&self, cap: usize, groups: usize, (bm, bn): (usize, usize)) -> Option<(usize, usize, usize)> {
        let (mut mc, mut nc, mut kc) = (self.m.min(groups * bm), self.n.min(groups * bn), self.k);
        loop {
            let blk = Block {
                m: (0, mc.max(1)),
                n: (0, nc.max(1)),
                k: (0, kc.max(1)),
            };
            let too_big = |i: usize| self.windows(&blk)[i].1 + VIEW_ALIGN > cap;
            // Halve the outer dimension of the first operand that does not fit: the rows of
            // its storage, which is what shrinks its window; then its columns.
            let shrink = |x: &mut usize, min: usize| {
                let before = *x;
                *x = (*x / 2).next_multiple_of(min).max(min).min(before);
                *x < before
            };
            let shrunk = if too_big(0) {
                shrink(&mut mc, 1) || shrink(&mut nc, 1)
            } else if too_big(1) {
                match self.trans_a {
                    false => shrink(&mut mc, 1) || shrink(&mut kc, TK),
                    true => shrink(&mut kc, TK) || shrink(&mut mc, 1),
                }
            } else if too_big(2) {
                match self.trans_b {
                    false => shrink(&mut kc, TK) || shrink(&mut nc, 1),
                    true => shrink(&mut nc, 1) || shrink(&mut kc, TK),
                }
            } else {
                return Some((mc, nc, kc));
            };
            if !shrunk {
                return None;
            }
        }
    }
}

impl MatmulDims {
    /// The part of this product a tuning measurement times, on a scratch out: the largest of M,
    /// N and K halved until it does at most 2^(28 + 2·growth) multiply-adds (at growth 0 a tenth
    /// of a second emulated, a fraction of a millisecond on a GPU, which is why the tuner grows
    /// it there) and its out holds at most 2^24 values (64 MiB), none below 512 (4 of the
    /// largest tile), so that every tile is timed on whole tiles. Each operand is then read in
    /// its first rows and columns only, at its own strides. Also says whether the part is the
    /// whole product.
    fn for_tuning(&self, growth: u32) -> (MatmulDims, bool) {
        const FLOOR: usize = 512;
        let work = 1usize << (28 + 2 * growth.min(8));
        let mut dims = [self.m, self.n, self.k];
        let too_big =
            |d: &[usize; 3]| self.batch * d.iter().product::<usize>() > work || self.batch * d[0] * d[1] > 1 << 24;
        while too_big(&dims) {
            // The largest dimension that may still shrink: K only for the work, M or N for both.
            let shrinkable =
                |i: usize| dims[i] > FLOOR && (i < 2 || self.batch * dims.iter().product::<usize>() > work);
            let Some(at) = (0..3)
                .filter(|&i| shrinkable(i))
                .max_by_key(|&i| (dims[i], std::cmp::Reverse(i)))
            else {
                break;
            };
            dims[at] = (dims[at] / 2).max(FLOOR);
        }
        let [m, n, k] = dims;
        let whole = dims == [self.m, self.n, self.k];
        (MatmulDims { m, n, k, ..*self }, whole)
    }
}

/// The shader's K tile: its zero padding only ever ends a chain.
const TK: usize = 16;

/// K slices ([`GpuOptions::k_slices`](crate::gpu::GpuOptions::k_slices)): a product aᵀ·b of one
/// pair with K at least [`SLICE_MIN_K`] and fewer than [`SLICE_TILES`] tiles of 64×64 in out is
/// summed in up to [`MAX_SLICES`] slices of K side by side, each at least [`SLICE_MIN_LEN`] long
/// and a whole number of K tiles, their partial outs (at most [`SLICE_VALUES`] values) then added
/// in slice order. These are the weight gradients Xᵀ·dY, whose K is every token of the batch:
/// the toy's 256×256 out is 16 such tiles, where a large GPU has over a hundred multiprocessors.
const SLICE_MIN_K: usize = 2048;
const SLICE_TILES: usize = 128;
const MAX_SLICES: usize = 8;
const SLICE_MIN_LEN: usize = 512;
const SLICE_VALUES: usize = 1 << 22;

impl MatmulDims {
    /// The K slices this product is summed in: 1 for one chain over K. It depends on the
    /// shape alone, so every tile gives the same bits.
    fn k_slices(&self) -> usize {
        if self.batch != 1 || !self.trans_a || self.trans_b || self.k < SLICE_MIN_K || self.m * self.n == 0 {
            return 1;
        }
        let tiles = self.m.div_ceil(64) * self.n.div_ceil(64);
        let mut slices = 1;
        while slices < MAX_SLICES
            && tiles * slices < SLICE_TILES
            && self.k.is_multiple_of(2 * slices * TK)
            && self.k / (2 * slices) >= SLICE_MIN_LEN
            && 2 * slices * self.m * self.n <= SLICE_VALUES
        {
            slices *= 2;
        }
        slices
    }
}

/// The rows (`BM`) and columns (`BN`) of out one workgroup computes, and whether a's slice
/// reaches the registers through subgroup shuffles (`SUBGROUPS`): the shader's switches. Every
/// tile computes each out value as the same chain of fmas (`shaders/matmul.wgsl`), so the
/// tiles differ only in speed, and tuning picks one per adapter and shape (`gpu/tuning.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tile {
    pub bm: u32,
    pub bn: u32,
    pub subgroups: bool,
    /// On the subgroup path, the next K tile's operands are read while this one's products
    /// are added (`matmul_subgroup_prefetch`).
    pub prefetch: bool,
}

impl Tile {
    /// The shader variant's switches.
    pub const fn defines(&self) -> [Define; 3] {
        [
            Define::u32("BM", self.bm),
            Define::u32("BN", self.bn),
            Define::bool(SUBGROUPS, self.subgroups),
        ]
    }
    /// Threads of one workgroup: each computes an 8×8 block.
    fn threads(&self) -> u32 {
        (self.bm / 8) * (self.bn / 8)
    }
    /// Bytes of workgroup memory: the staged TK-deep slices of a and b (a's only without
    /// subgroups, but the declaration is the same).
    fn shared_bytes(&self) -> u32 {
        (TK as u32) * (self.bm + self.bn) * 4
    }
}

/// Every tile, the default first: 128×128 needs 256 invocations and 16 KiB of workgroup memory,
/// WebGPU's default limits; the smaller tiles launch more workgroups, which fills a large GPU
/// on thin products. Each also with subgroups, where the device has them, with and without the
/// next K tile read ahead.
pub const TILES: &[Tile] = &[
    Tile {
        bm: 128,
        bn: 128,
        subgroups: false,
        prefetch: false,
    },
    Tile {
        bm: 64,
        bn: 128,
        subgroups: false,
        prefetch: false,
    },
    Tile {
        bm: 128,
        bn: 64,
        subgroups: false,
        prefetch: false,
    },
    Tile {
        bm: 64,
        bn: 64,
        subgroups: false,
        prefetch: false,
    },
    Tile {
        bm: 128,
        bn: 128,
        subgroups: true,
        prefetch: false,
    },
    Tile {
        bm: 64,
        bn: 128,
        subgroups: true,
        prefetch: false,
    },
    Tile {
        bm: 128,
        bn: 64,
        subgroups: true,
        prefetch: false,
    },
    Tile {
        bm: 64,
        bn: 64,
        subgroups: true,
        prefetch: false,
    },
    Tile {
        bm: 128,
        bn: 128,
        subgroups: true,
        prefetch: true,
    },
    Tile {
        bm: 64,
        bn: 128,
        subgroups: true,
        prefetch: true,
    },
    Tile {
        bm: 128,
        bn: 64,
        subgroups: true,
        prefetch: true,
    },
    Tile {
        bm: 64,
        bn: 64,
        subgroups: true,
        prefetch: true,
    },
];

impl Candidate for Tile {
    fn name(&self) -> String {
        let path = match (self.subgroups, self.prefetch) {
            (true, true) => "subgroups prefetch",
            (true, false) => "subgroups",
            (false, _) => "plain",
        };
        format!("{}x{} {path}", self.bm, self.bn)
    }
    fn fits(&self, gpu: &GpuBackend) -> bool {
        let limits = &gpu.limits;
        self.subgroups == gpu.subgroups()
            && self.threads() <= limits.max_compute_invocations_per_workgroup
            && self.shared_bytes() <= limits.max_compute_workgroup_storage_size
    }
}

/// The shader's switches with their defaults: the default tile's.
pub(crate) const SWITCHES: &[Define] = &[
    Define::u32("BM", TILES[0].bm),
    Define::u32("BN", TILES[0].bn),
    Define::bool(SUBGROUPS, TILES[0].subgroups),
];

/// `mode` of a launch: write the sum to out…
const WRITE: u32 = 0;
/// …add it to out…
const ADD: u32 = 1;
/// …or, for a launch after the first along K, start the sum from out instead of 0.
const CONTINUE: u32 = 2;

/// What `shaders/matmul.wgsl` reads from here, beside a [`Tile`]'s switches.
pub(crate) const DEFINES: &[Define] = &[
    Define::u32("TK", TK as u32),
    Define::u32("MODE_ADD", ADD),
    Define::u32("MODE_CONTINUE", CONTINUE),
];

/// The u32s of the shader's `Params`, in every launch's uniform.
const PARAMS: usize = 17;

/// The mode of the first launch along K.
fn first_mode(accumulate: bool) -> u32 {
    match accumulate {
        true => ADD,
        false => WRITE,
    }
}

/// The kernel a product runs: a strict tile, or a fast one (whose scales were computed just
/// before, `fast_scales`).
#[derive(Clone, Copy, Debug)]
enum Kernel {
    Strict(Tile),
    Fast(FastTile),
}

impl Kernel {
    /// Rows and columns of out one workgroup computes.
    fn tile(&self) -> (usize, usize) {
        match self {
            Kernel::Strict(t) => (t.bm as usize, t.bn as usize),
            Kernel::Fast(t) => (t.size(), t.size()),
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn launch(
    gpu: &GpuBackend,
    out: &GpuTensor,
    a: &GpuTensor,
    b: &GpuTensor,
    d: &MatmulDims,
    blk: &Block,
    windows: [(usize, usize); 3],
    mode: u32,
    kernel: Kernel,
) {
    // Each window starts at the aligned value at or before its first; the shader adds the rest.
    let bind = |t: &GpuTensor, (first, len): (usize, usize)| {
        let base = first / VIEW_ALIGN * VIEW_ALIGN;
        (gpu.view(t, base, (first + len).min(t.len) - base), first - base)
    };
    let (out, off_o) = bind(out, windows[0]);
    let (a, off_a) = bind(a, windows[1]);
    let (b, off_b) = bind(b, windows[2]);
    let (m, n, k) = (blk.m.1 - blk.m.0, blk.n.1 - blk.n.0, blk.k.1 - blk.k.0);
    let (lda, ldb) = (if d.trans_a { d.m } else { d.k }, if d.trans_b { d.k } else { d.n });
    // The shader reads a and b as vec4s where each batch's rows start at multiples of 4 values.
    let whole_vec4s = |off: usize, ld: usize, stride: usize| {
        off.is_multiple_of(4) && ld.is_multiple_of(4) && (d.batch == 1 || stride.is_multiple_of(4))
    };
    let params: [u32; PARAMS] = [
        d.batch,
        m,
        n,
        k,
        d.trans_a as usize,
        d.trans_b as usize,
        mode as usize,
        d.stride_a,
        d.stride_b,
        // Row strides of the whole operands, which a block's windows keep.
        lda,
        ldb,
        d.n,
        off_a,
        off_b,
        off_o,
        whole_vec4s(off_a, lda, d.stride_a) as usize,
        whole_vec4s(off_b, ldb, d.stride_b) as usize,
    ]
    .map(|x| x as u32);
    let (bm, bn) = kernel.tile();
    let groups = [n.div_ceil(bn) as u32, m.div_ceil(bm) as u32, d.batch as u32];
    let tile = match kernel {
        Kernel::Strict(tile) => tile,
        Kernel::Fast(tile) => {
            let Some(state) = gpu.fast.as_ref() else {
                return gpu.refuse("matmul: a fast kernel on a backend without the fast class".into());
            };
            let args = [out.arg(), a.vec4_arg(), b.vec4_arg(), state.scales.arg()];
            let defines = tile.defines(state.coop);
            return gpu.dispatch_with("matmul_fast", "matmul_fast", &defines, &params, &args, groups);
        }
    };
    let args = [out.arg(), a.vec4_arg(), b.vec4_arg()];
    // Both entry points run the same chains: which one runs changes no bit of out.
    let entry = match (tile.subgroups, tile.prefetch) {
        (true, true) => "matmul_subgroup_prefetch",
        (true, false) => "matmul_subgroup",
        (false, _) => "matmul",
    };
    gpu.dispatch_with("matmul", entry, &tile.defines(), &params, &args, groups);
}

/// The ops on the GPU, as `GpuBackend` runs them: each checks its shapes and records its
/// launches.
pub mod gpu {
    use super::*;

    /// The product in the tile tuned for its shape ([`TILES`]); in the fast class (a backend
    /// made with it, and a product at least [`crate::precision::FAST_MIN`] each way) its
    /// operands' scales first, then the fast tile tuned for it ([`FAST_TILES`]).
    pub fn matmul(gpu: &GpuBackend, out: &GpuTensor, a: &GpuTensor, b: &GpuTensor, d: MatmulDims) {
        d.check(out.len, a.len, b.len);
        if gpu.fast.is_some() && d.in_fast_class() {
            let (na, nb) = d.spans();
            gpu.fast_scales((a, na), (b, nb), || d.describe());
            let class = || format!("fast {}", d.describe());
            let tile = gpu.tuned("matmul_fast", class, FAST_TILES, |tile, growth| {
                let (part, whole) = d.for_tuning(growth);
                if let Ok(scratch) = gpu.zeros("tuning scratch", part.batch * part.m * part.n) {
                    product(gpu, &scratch, a, b, part, Kernel::Fast(tile))
                }
                whole
            });
            return product(gpu, out, a, b, d, Kernel::Fast(tile));
        }
        let class = || match slices(gpu, &d) {
            1 => d.describe(),
            n => format!("{} in {n} K slices", d.describe()),
        };
        let tile = gpu.tuned("matmul", class, TILES, |tile, growth| {
            let (part, whole) = d.for_tuning(growth);
            if let Ok(scratch) = gpu.zeros("tuning scratch", part.batch * part.m * part.n) {
                product(gpu, &scratch, a, b, part, Kernel::Strict(tile))
            }
            whole
        });
        product(gpu, out, a, b, d, Kernel::Strict(tile))
    }

    /// The product in one launch, or, when an operand is larger than one binding or the grid
    /// than one dimension allows, in blocks of out (and of K) that each bind windows of the
    /// operands. Each out value sees the same fmas in the same order either way: the first K block
    /// starts from 0 as the single launch does, later ones continue from what out holds.
    fn product(gpu: &GpuBackend, out: &GpuTensor, a: &GpuTensor, b: &GpuTensor, d: MatmulDims, kernel: Kernel) {
        let (bm, bn) = kernel.tile();
        let cap = gpu.max_binding_values();
        let groups = gpu.max_groups() as usize;
        let whole = Block {
            m: (0, d.m),
            n: (0, d.n),
            k: (0, d.k),
        };
        let fits = [out.len, a.len, b.len].iter().all(|&l| l <= cap)
            && d.m.div_ceil(bm) <= groups
            && d.n.div_ceil(bn) <= groups;
        if fits || d.m == 0 || d.n == 0 {
            let slices = slices(gpu, &d);
            if let (true, Kernel::Strict(tile)) = (slices > 1 && slices * d.m * d.n <= cap, kernel) {
                return in_slices(gpu, out, a, b, d, slices, tile);
            }
            let all = [(0, out.len), (0, a.len), (0, b.len)];
            return launch(gpu, out, a, b, &d, &whole, all, first_mode(d.accumulate), kernel);
        }
        let split = d.split(cap, groups, (bm, bn));
        let Some((mc, nc, kc)) = split.filter(|_| d.batch == 1 && d.batch <= groups) else {
            return gpu.refuse(format!(
                "matmul: a {}×{}×{} product (batch {}) does not split into this device's bindings of {} values",
                d.m, d.k, d.n, d.batch, cap
            ));
        };
        if d.accumulate && kc < d.k && matches!(kernel, Kernel::Strict(_)) {
            // Adding to out would need the first K block's sum kept apart from out (the fast
            // kernel adds each K block's scaled sum to out, so it splits either way).
            return gpu.refuse(format!(
                "matmul: an accumulating product over K = {} is too large for one binding of {} values",
                d.k, cap
            ));
        }
        for m0 in (0..d.m).step_by(mc) {
            for n0 in (0..d.n).step_by(nc) {
                for k0 in (0..d.k.max(1)).step_by(kc.max(1)) {
                    let blk = Block {
                        m: (m0, (m0 + mc).min(d.m)),
                        n: (n0, (n0 + nc).min(d.n)),
                        k: (k0, (k0 + kc).min(d.k)),
                    };
                    let mode = match k0 {
                        0 => first_mode(d.accumulate),
                        _ => CONTINUE,
                    };
                    launch(gpu, out, a, b, &d, &blk, d.windows(&blk), mode, kernel);
                }
            }
        }
    }

    /// The K slices `d` is summed in on this device: 1 unless [`GpuOptions::k_slices`] is on.
    ///
    /// [`GpuOptions::k_slices`]: crate::gpu::GpuOptions::k_slices
    fn slices(gpu: &GpuBackend, d: &MatmulDims) -> usize {
        if gpu.k_slices {
            d.k_slices()
        } else {
            1
        }
    }

    /// aᵀ·b in `slices` slices of K: one launch computes every slice's partial out side by side
    /// (slice s a batch whose a and b start s·K/slices rows on), then each out value is the
    /// partials added in slice order, onto out when accumulating.
    fn in_slices(
        gpu: &GpuBackend,
        out: &GpuTensor,
        a: &GpuTensor,
        b: &GpuTensor,
        d: MatmulDims,
        slices: usize,
        tile: Tile,
    ) {
        let (mn, ks) = (d.m * d.n, d.k / slices);
        let held = gpu.k_slice_partials.borrow().clone();
        let all = match held {
            Some(all) => all,
            None => match gpu.zeros("matmul K slices", SLICE_VALUES) {
                Ok(all) => gpu.k_slice_partials.borrow_mut().insert(all).clone(),
                Err(e) => return gpu.refuse(format!("matmul: no room for the K slices' partials: {e}")),
            },
        };
        let partials = gpu.view(&all, 0, slices * mn);
        let parts = MatmulDims {
            batch: slices,
            k: ks,
            stride_a: ks * d.m,
            stride_b: ks * d.n,
            accumulate: false,
            ..d
        };
        let whole = Block {
            m: (0, d.m),
            n: (0, d.n),
            k: (0, ks),
        };
        let all = [(0, partials.len), (0, a.len), (0, b.len)];
        launch(gpu, &partials, a, b, &parts, &whole, all, WRITE, Kernel::Strict(tile));
        let mut params = [0u32; PARAMS];
        (params[0], params[1], params[2], params[6]) =
            (slices as u32, d.m as u32, d.n as u32, first_mode(d.accumulate));
        let args = [(1, out.arg()), (4, partials.arg())];
        gpu.dispatch_with_at(
            "matmul",
            "matmul_slices_total",
            &tile.defines(),
            &params,
            &args,
            gpu.grid_1d(mn, WG),
        );
    }
}

/// The op on the CPU, as `CpuBackend` runs it: it borrows its tensors for the function `cpu` above.
#[cfg(feature = "cpu")]
pub mod cpu {
    use super::*;
    use crate::cpu::{CpuBackend, CpuTensor};
    use crate::ops::Scalar;

    /// The strict product, or on the fast class's twin ([`CpuBackend::fast_twin`]) the fast one
    /// ([`super::fast::cpu`]) for the products in that class.
    pub fn matmul<T: Scalar>(
        be: &CpuBackend<T>,
        out: &CpuTensor<T>,
        a: &CpuTensor<T>,
        b: &CpuTensor<T>,
        d: MatmulDims,
    ) {
        if be.precision().is_strict() || !d.in_fast_class() {
            return super::cpu(&mut out.get_mut(), &a.get(), &b.get(), d);
        }
        if !super::fast::cpu(&mut out.get_mut(), &a.get(), &b.get(), d) {
            be.fast_fault_at(|| d.describe());
        }
    }
}

/// What the op costs (`crate::cost` has the conventions).
pub mod cost {
    use super::*;
    use crate::cost::{f, Cost, Family, W};

    pub fn matmul(d: MatmulDims) -> Cost {
        let flops = 2.0 * f(d.batch) * f(d.m) * f(d.n) * f(d.k);
        let reads = |stride: usize, size: usize| if stride == 0 { f(size) } else { f(d.batch) * f(size) };
        let c = f(d.batch) * f(d.m) * f(d.n);
        let bytes = W
            * (reads(d.stride_a, d.m * d.k) + reads(d.stride_b, d.k * d.n) + c * if d.accumulate { 2.0 } else { 1.0 });
        Family::Matmul.cost(flops, bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tuning part stays within its work and its scratch, keeps K last to shrink when only the
    /// scratch is too large, and grows 4× a step up to the whole product.
    #[test]
    fn tuning_parts_grow_to_the_whole_product() {
        let vocab = MatmulDims::new(4096, 50257, 768);
        let mut last = 0;
        for growth in 0..6 {
            let (part, whole) = vocab.for_tuning(growth);
            let macs = part.m * part.n * part.k;
            assert!(
                macs <= 1 << (28 + 2 * growth) || part.m.max(part.n).max(part.k) == 512,
                "{growth}: {part:?}"
            );
            assert!(part.m * part.n <= 1 << 24, "{growth}: the scratch of {part:?}");
            assert!(part.m >= 512 && part.n >= 512 && part.k >= 512, "{growth}: {part:?}");
            assert!(macs >= last && !whole, "{growth}: {part:?}");
            last = macs;
        }
        // Small enough: whole at once; a 4× larger product needs one step more.
        let small = MatmulDims::new(600, 700, 500);
        assert_eq!(small.for_tuning(0), (small, true));
        let toy = MatmulDims::new(4096, 1024, 256);
        assert!(!toy.for_tuning(0).1 && toy.for_tuning(1) == (toy, true));
    }
}
