//! resmem's engine: one op-level [`Backend`] trait with two implementations that compute and
//! one that counts.
//!
//! - [`cpu::CpuBackend`] is the readable reference, generic over f32/f64 so that gradient checks
//!   run in f64: matmuls and attention's per-head products go through `matrixmultiply`; the
//!   RMT's per-token products and the loops are written for the vectoriser (`cpu::simd`, with
//!   an AVX2 build chosen at run time), split with rayon in chunks that do not depend on the
//!   thread count.
//! - [`gpu::GpuBackend`] runs the same ops as the WGSL compute shaders in `shaders/`, natively
//!   (Vulkan, Metal, DX12) and in the browser (WebGPU).
//! - [`counting::CountingBackend`] allocates nothing and adds up what a model would allocate:
//!   the memory estimate is a model built on it.
//!
//! Each op is declared once, in `backend.rs`: the trait's methods and every implementation's
//! (the profiler's too) are written from that list by a macro. Each op family lives in
//! `ops/<family>.rs`: its shape documentation, its parameter struct, its CPU twin, the host-side
//! wrapper of its shader and its cost, side by side.
//!
//! Shape alphabet used in every comment: B batch, T sequence length, C model width, V vocabulary,
//! H heads, Dh head width, F feed-forward width, BT = B·T rows; for the RMT D_k, D_v and R' keys;
//! for the Memory Layer τ bits, K tables.

pub mod cost;
pub mod counting;
#[cfg(feature = "cpu")]
pub mod cpu;
mod error;
pub mod gpu;
pub mod ops;
pub mod precision;
/// `resmem bench`'s per-family costs and timings (not in the browser build: no clock there).
#[cfg(not(target_arch = "wasm32"))]
pub mod profile;
/// Every op family against its CPU twin, on any backend: `resmem selftest`.
#[cfg(feature = "cpu")]
pub mod selftest;
pub mod shaders;

mod backend;

pub use backend::Backend;

/// Values per alignment unit of a view's offset: 256 bytes, WebGPU's largest
/// `min_storage_buffer_offset_alignment`. Every backend's `view` asserts it, so that code the
/// CPU runs also runs on a GPU.
pub const VIEW_ALIGN: usize = 64;

pub use error::{EngineError, Result};
pub use ops::{
    attention::AttentionDims, cross_entropy::CrossEntropyDims, depth::DepthDims, embedding::EmbeddingDims,
    embedding::TokenBuckets, gather::GatherDims, hyper::HyperDims, hyper::Mixing, matmul::MatmulDims,
    memory::MemoryDims, norm::NormDims, norm::NormKind, optim::AdamWDims, optim::Hyper, residual_matrix::ResidualDims,
};
pub use precision::Precision;

/// Refuses a view of `len` values at `offset` into a tensor of `total` that a GPU could not
/// bind (an offset off [`VIEW_ALIGN`]) or that runs past the end: on every backend alike, so
/// that the CPU catches what a GPU would.
pub(crate) fn check_view(offset: usize, len: usize, total: usize) {
    assert!(
        offset.is_multiple_of(VIEW_ALIGN),
        "views start at multiples of {VIEW_ALIGN} values, as on a GPU, not {offset}"
    );
    assert!(
        offset.checked_add(len).is_some_and(|end| end <= total),
        "view {offset}+{len} past the end of a tensor of {total}"
    );
}

/// Refuses a write of `values` into a tensor of `len`: a write fills a whole tensor.
pub(crate) fn check_write(values: usize, len: usize) {
    assert_eq!(values, len, "write of {values} values into a tensor of {len}");
}
