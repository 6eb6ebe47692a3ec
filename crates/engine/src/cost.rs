//! What one call of an op costs: its kernel [`Family`], FLOPs and bytes. Each op file computes
//! its ops' costs from their dims (`ops::<family>::cost`), the op's declaration in `backend.rs`
//! says what to pass, and `profile::Profiled` books them (what `resmem bench` reports).
//!
//! FLOPs follow `models::count`'s conventions, so a forward pass's matmul, attention, retrieval,
//! storage and memory-layer FLOPs add up to the model counter's forward FLOPs: 2 per
//! multiply-add of a product, over the causal triangle only, 3 per attention probability; a
//! retrieval's normalisation on read, a storage's residual add and an accumulating matmul's add
//! are left out as the counter leaves norms and adds out. A backward counts the useful products,
//! twice its forward's, not what a kernel recomputes. Bytes are the least traffic the op needs:
//! each input read once, each output written once (read too when accumulated), 4 bytes a value.
//! The elementwise, norm, cross-entropy and AdamW counts are per-value conventions (e.g. 8 FLOPs
//! a GELU) good for a rate, not an exact count.

/// The kernel families `resmem bench` reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Family {
    Matmul,
    Attention,
    Retrieval,
    Storage,
    /// A normed retrieval's backward: the storage of dy, the key gradient and the norm's.
    RetrievalBackward,
    /// A storage's backward: the retrieval of dX_out and the key gradient.
    StorageBackward,
    Norm,
    Memory,
    Embedding,
    CrossEntropy,
    AdamW,
    Elementwise,
}

impl Family {
    pub const ALL: [Family; 12] = [
        Family::Matmul,
        Family::Attention,
        Family::Retrieval,
        Family::Storage,
        Family::RetrievalBackward,
        Family::StorageBackward,
        Family::Norm,
        Family::Memory,
        Family::Embedding,
        Family::CrossEntropy,
        Family::AdamW,
        Family::Elementwise,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Family::Matmul => "matmul",
            Family::Attention => "attention",
            Family::Retrieval => "retrieval",
            Family::Storage => "storage",
            Family::RetrievalBackward => "retrieval_backward",
            Family::StorageBackward => "storage_backward",
            Family::Norm => "norm",
            Family::Memory => "memory_layer",
            Family::Embedding => "embedding",
            Family::CrossEntropy => "cross_entropy",
            Family::AdamW => "adamw",
            Family::Elementwise => "elementwise",
        }
    }

    /// Whether `models::count` counts this family's FLOPs (it leaves out norms, the loss, the
    /// embedding's gathers, the optimiser and adds). The backwards of retrieval and storage have
    /// no forward, but they are the backward's share of those products.
    pub fn in_model_count(self) -> bool {
        matches!(
            self,
            Family::Matmul
                | Family::Attention
                | Family::Retrieval
                | Family::Storage
                | Family::RetrievalBackward
                | Family::StorageBackward
                | Family::Memory
        )
    }

    /// The place of this family in [`Family::ALL`].
    pub fn index(self) -> usize {
        Family::ALL.iter().position(|&f| f == self).unwrap_or(0)
    }

    /// A cost booked under this family.
    pub fn cost(self, flops: f64, bytes: f64) -> Cost {
        Cost {
            family: self,
            flops,
            bytes,
        }
    }
}

/// One op call's cost, booked under its family.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Cost {
    pub family: Family,
    pub flops: f64,
    pub bytes: f64,
}

/// Values as f64, for cost formulas that must not overflow.
pub(crate) fn f(x: usize) -> f64 {
    x as f64
}

/// 4 bytes a value.
pub(crate) const W: f64 = 4.0;
