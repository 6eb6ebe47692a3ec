//! The fast class's attention (`crate::precision`): q·kᵀ, P·v and the backward's four products
//! with f16 multiplicands into f32 sums; the softmax's statistics, the mask, ALiBi and every
//! output stay f32. Its CPU twin here, the bound the GPU keeps against it, and on the GPU the
//! scale pass (`shaders/fast_scale.wgsl`) and the cooperative-matrix kernels
//! (`shaders/attention_fast.wgsl`).
//!
//! Each operand is staged as f16 after a power-of-two scale: q, k and v by 2^sQ from qkv's
//! largest magnitude, dout by 2^sD from its own, P (in [0, 1]) by 2^14, and dS by 2^sS from its
//! bound 2·Dh·amax(dout)·amax(v) ([`crate::precision::gradient_exponent`]), so that nothing
//! overflows f16 and nothing that matters flushes. The forward sweeps the keys twice, so that P
//! is normalised before it is rounded: first each row's log-sum-exp, then out = P·v.

use super::AttentionDims;
use crate::gpu::{AsArg, Candidate, GpuBackend, GpuIndex, GpuTensor};
use crate::shaders::{Define, WG};

/// The widest head the fast kernels take: with more, the key pass's staged tiles outgrow the
/// 48 KiB of workgroup memory NVIDIA's Vulkan driver offers. Wider heads run the strict kernels.
pub const FAST_MAX_DH: usize = 64;

/// P is staged as f16(P · 2^14): at most 2^14, and P down to 2^-38 keeps its precision.
pub const P_EXPONENT: i32 = 14;

/// The rows a workgroup of the fast kernels may own, 16 for each of its subgroups of 32: the
/// tuner's candidates ([`FastAttentionTile`]), the default first. 64 stages each swept tile for
/// twice the rows; 32 needs half the workgroup memory (at Dh 64, 29 KiB against 47), so that
/// more workgroups share a multiprocessor, and fits where 32 KiB is all a device offers
/// (lavapipe). Both sum every value in the same order, so the choice changes no bit.
pub const FAST_OWNS: [usize; 2] = [64, 32];

/// A fast attention's workgroup: `own` rows for a head of `dh`, whose tiles must fit the
/// device's workgroup memory ([`fast_shared_bytes`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FastAttentionTile {
    pub own: usize,
    pub dh: usize,
}

impl FastAttentionTile {
    /// Every candidate for a head of `dh`, the default first.
    pub fn all(dh: usize) -> [Self; 2] {
        FAST_OWNS.map(|own| Self { own, dh })
    }
}

impl Candidate for FastAttentionTile {
    fn name(&self) -> String {
        format!("fast {} rows", self.own)
    }
    fn fits(&self, gpu: &GpuBackend) -> bool {
        let limits = &gpu.limits;
        fast_shared_bytes(self.dh, self.own) <= limits.max_compute_workgroup_storage_size as usize
            && 2 * self.own <= limits.max_compute_invocations_per_workgroup as usize
    }
}

/// The shader's switches with their defaults: the head dimension, the rows a workgroup owns,
/// and the cooperative built-ins (on) or their emulation (off).
pub(crate) const FAST_SWITCHES: &[Define] = &fast_variant(FAST_MAX_DH, FAST_OWNS[0], true);

/// The variant of `shaders/attention_fast.wgsl` for a head of `dh`, `own` rows a workgroup, on
/// cooperative matrices or not.
pub const fn fast_variant(dh: usize, own: usize, coop: bool) -> [Define; 3] {
    [
        Define::u32("DH", dh as u32),
        Define::u32("OWN", own as u32),
        Define::bool(crate::ops::matmul::COOP, coop),
    ]
}

/// What `shaders/attention_fast.wgsl` reads from here.
pub(crate) const FAST_DEFINES: &[Define] = &[
    Define::i32("MAX_SCALE_EXPONENT", crate::precision::MAX_SCALE_EXPONENT),
    Define::i32("SCALED_LOG2", crate::precision::SCALED_LOG2),
];

impl AttentionDims {
    /// Whether this attention runs in the fast class on a fast backend: a head of 16 to
    /// [`FAST_MAX_DH`] dimensions, a multiple of 16 (the cooperative tile).
    pub fn in_fast_class(&self) -> bool {
        self.dh.is_multiple_of(16) && (16..=FAST_MAX_DH).contains(&self.dh)
    }

    /// The name a fault of its fast products carries.
    pub fn describe(&self, pass: &str) -> String {
        format!(
            "attention {pass} batch {} T {} heads {}×{}",
            self.b, self.t, self.h, self.dh
        )
    }
}

/// Workgroup memory of the fast kernels at head dimension `dh` with `own` rows a workgroup, the
/// largest pass's (dk and dv): `own` staged rows of k and v, 32 of q and dout, in f16 at a stride
/// of dh + 8; the scores in f32; P and dS in f16; the forward's row statistics; and
/// common.wgsl's reduction tree.
pub fn fast_shared_bytes(dh: usize, own: usize) -> usize {
    let swept = 32;
    let staged = (2 * own + 2 * swept) * (dh + 8) * 2;
    staged + own * swept * 4 + 2 * own * (swept + 8) * 2 + own * 4 * 4 + crate::shaders::WG * 4
}

#[cfg(feature = "cpu")]
mod twin;
#[cfg(feature = "cpu")]
pub use twin::{backward_bounds, cpu_backward, cpu_forward, forward_bounds};

/// Whether `d` runs the fast kernels on `gpu`: a fast backend, a head in the fast class, and a
/// workgroup whose tiles fit. Otherwise the strict kernels run.
pub(crate) fn runs_fast(gpu: &GpuBackend, d: &AttentionDims) -> bool {
    gpu.fast.is_some() && d.in_fast_class() && FastAttentionTile::all(d.dh).iter().any(|t| t.fits(gpu))
}

/// One launch of a fast pass in `tile`'s variant: a workgroup per (batch, head, `own` rows).
fn launch(
    gpu: &GpuBackend,
    entry: &'static str,
    tile: FastAttentionTile,
    args: &[(u32, crate::gpu::Arg<'_>)],
    d: &AttentionDims,
) {
    let Some(state) = gpu.fast.as_ref() else {
        return gpu.refuse("attention: a fast kernel on a backend without the fast class".into());
    };
    let defines = fast_variant(d.dh, tile.own, state.coop);
    let groups = gpu.grid_1d(d.b * d.h * d.t.div_ceil(tile.own), 1);
    gpu.dispatch_with_at("attention_fast", entry, &defines, &super::params(d), args, groups);
}

/// The fast forward: qkv's scales, then one launch in the tile tuned for the shape.
pub(crate) fn gpu_forward(
    gpu: &GpuBackend,
    out: &GpuTensor,
    lse: &GpuTensor,
    qkv: &GpuTensor,
    doc_start: &GpuIndex,
    d: AttentionDims,
) {
    // q, k and v share one scale: the second operand's is unused.
    gpu.fast_scales((qkv, qkv.len), (qkv, 0), || d.describe("forward"));
    let Some(scales) = gpu.fast.as_ref().map(|s| &s.scales) else {
        return;
    };
    let forward = |out: &GpuTensor, lse: &GpuTensor, d: &AttentionDims, tile| {
        let args = [
            (1, out.arg()),
            (2, lse.arg()),
            (3, qkv.arg()),
            (4, doc_start.arg()),
            (5, scales.arg()),
        ];
        launch(gpu, "attention_forward_fast", tile, &args, d)
    };
    let class = || super::class("fast forward", &d);
    let tile = gpu.tuned(
        "attention_forward_fast",
        class,
        &FastAttentionTile::all(d.dh),
        |tile, growth| {
            let (t, whole) = super::for_tuning(&d, growth);
            if let (Ok(out), Ok(lse)) = (
                crate::Backend::zeros(gpu, "tuning out", t.b * t.t * t.h * t.dh),
                crate::Backend::zeros(gpu, "tuning lse", t.rows()),
            ) {
                forward(&out, &lse, &t, tile)
            }
            whole
        },
    );
    forward(out, lse, &d, tile)
}

/// The fast backward: delta (the strict pass: f32 in both classes), the scales of qkv and dout,
/// then the dq pass and the dk/dv pass in the tile tuned for the shape.
#[allow(clippy::too_many_arguments)]
pub(crate) fn gpu_backward(
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
    let rows = [(2, delta.arg()), (3, dout.arg()), (4, out.arg())];
    let p = super::params(&d);
    gpu.dispatch_at(
        "attention",
        "attention_backward_delta",
        &p,
        &rows,
        gpu.grid_1d(d.rows(), WG),
    );
    gpu.fast_scales((qkv, qkv.len), (dout, dout.len), || d.describe("backward"));
    let Some(scales) = gpu.fast.as_ref().map(|s| &s.scales) else {
        return;
    };
    let backward = |dqkv: &GpuTensor, d: &AttentionDims, tile| {
        let args = [
            (1, dqkv.arg()),
            (2, lse.arg()),
            (3, qkv.arg()),
            (4, doc_start.arg()),
            (5, scales.arg()),
            (6, delta.arg()),
            (7, dout.arg()),
        ];
        launch(gpu, "attention_backward_query_fast", tile, &args, d);
        launch(gpu, "attention_backward_key_fast", tile, &args, d);
    };
    let class = || super::class("fast backward", &d);
    let tile = gpu.tuned(
        "attention_backward_fast",
        class,
        &FastAttentionTile::all(d.dh),
        |tile, growth| {
            let (t, whole) = super::for_tuning(&d, growth);
            if let Ok(dqkv) = crate::Backend::zeros(gpu, "tuning dqkv", t.b * t.t * 3 * t.h * t.dh) {
                backward(&dqkv, &t, tile)
            }
            whole
        },
    );
    backward(dqkv, &d, tile)
}
