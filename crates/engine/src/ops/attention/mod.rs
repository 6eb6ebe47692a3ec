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
mod cpu_twin;
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
