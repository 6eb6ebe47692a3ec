//! The hybrid (SPEC §5): an RMT whose feed-forward core is MemoryFormer's memory block. No paper
//! has it; it is the trunk over the RMT's matrix residual (`residual::Matrix`) with `memory_layer::MemoryBlock`
//! in place of W2·GELU(W1·x):
//!
//!   x_FF = concat_h(r_FF^(h) ·₁ Norm(X)) ∈ R^d,  d = R·D_v
//!   f = ML2(Norm(ML1(x_FF)))            ML1 hashes K = ⌊d/τ⌋ chunks of τ into (τ+2)·K values,
//!                                        ML2 hashes K chunks of τ + 2 into d; no activation
//!   X ← X + Σ_h w_FF^(h) ⊗ f_h
//!
//! Attention, the embedding and the unembedding are the RMT's, so the only matrix products left
//! are those three. Keys and embeddings start as the RMT's, tables and biases as MemoryFormer's,
//! and the tables learn at `table_lr_mult` times the learning rate.

use crate::attention::{Attention, Direct};
use crate::memory_layer::MemoryBlock;
use crate::residual::Matrix;
use crate::trunk::{Model, Parts};
use crate::{HybridConfig, ModelConfig};

/// The hybrid: the RMT's matrix residual around a memory block.
pub type Hybrid<B> = Model<B, HybridConfig>;

impl Parts for HybridConfig {
    type Residual = Matrix;
    type Core = MemoryBlock;
    type Maps = Direct;

    fn residual(&self, b: usize, t: usize) -> Matrix {
        Matrix::new(self.trunk(), b, t)
    }

    fn attention(&self, b: usize, t: usize) -> Attention {
        self.trunk().attention(b, t)
    }

    fn maps(&self, _tokens: usize) -> Direct {
        Direct
    }

    /// Its inner norm is the residual's kind and eps over ML1's (τ+2)·K outputs.
    fn core(&self, tokens: usize) -> MemoryBlock {
        MemoryBlock::new(self.hashing(), tokens, self.width(), self.norm.into(), self.norm_eps)
    }

    fn n_layers(&self) -> usize {
        self.n_layers
    }

    fn model(&self) -> ModelConfig {
        ModelConfig::Hybrid(self.clone())
    }
}
