//! MemoryFormer (SPEC §3; MemoryFormer paper §3-4): the transformer's fully-connected layers
//! replaced by Memory Layers, ML(x) = Σ_k p(z_k) · T_k[hash(z_k)] + b.
//!
//!   X⁰ = W_E[token] + W_PE[position]                      dense
//!   Q, K, V = ML_QKV(Norm(X))                              one hash serves all three
//!   X ← X + MHA(Q, K, V)                                   no output projection
//!   X ← X + ML2(Norm(ML1(Norm(X))))                        ML1 expands to (τ+2)·K; no activation
//!   logits = W_U · Norm(X)                                 dense
//!
//! The trunk (`trunk.rs`) over a vector residual (`residual::Vector`) with ML_QKV before attention
//! (`attention::HashedQkv`) and the memory block as its core (`memory_layer::MemoryBlock`).
//! The tables learn at `table_lr_mult` times the learning rate.

use crate::attention::{Attention, AttentionNames, HashedQkv};
use crate::embedding::VectorEmbedding;
use crate::memory_layer::{layer_dims, MemoryBlock};
use crate::params::{Init, ParamLayout};
use crate::residual::Vector;
use crate::trunk::{self, Model, Parts};
use crate::{MemoryFormerConfig, ModelConfig};

/// MemoryFormer: the trunk over a vector residual with hashed maps and a memory block.
pub type MemoryFormer<B> = Model<B, MemoryFormerConfig>;

impl Parts for MemoryFormerConfig {
    type Residual = Vector;
    type Core = MemoryBlock;
    type Maps = HashedQkv;

    /// Embeddings ~ N(0, embed_std²); W_U from zero, so the first loss is exactly ln V.
    fn residual(&self, b: usize, t: usize) -> Vector {
        Vector {
            embedding: VectorEmbedding::new(b, t, (self.vocab, self.context, self.d_model), self.embed_std),
            n_layers: self.n_layers,
            norm: self.norm,
            norm_eps: self.norm_eps,
            unembedding_init: Init::Normal { std: 0.0 },
            output_per_block: true,
        }
    }

    fn attention(&self, b: usize, t: usize) -> Attention {
        let names = AttentionNames {
            heads: "n_heads",
            width: "d_model",
        };
        Attention::new(b, t, (self.n_heads, self.head_dim()), self.attn_layer_scale, names)
    }

    /// ML_QKV: d → 3d in K chunks of τ bits.
    fn maps(&self, tokens: usize) -> HashedQkv {
        let (d, h) = (self.d_model, self.hashing());
        HashedQkv {
            dims: layer_dims(&h, tokens, d, self.chunks(), self.tau, 3 * d),
            hashing: h,
        }
    }

    /// Its inner norm is the residual's kind and eps over ML1's (τ+2)·K outputs.
    fn core(&self, tokens: usize) -> MemoryBlock {
        MemoryBlock::new(self.hashing(), tokens, self.d_model, self.norm.into(), self.norm_eps)
    }

    fn n_layers(&self) -> usize {
        self.n_layers
    }

    fn model(&self) -> ModelConfig {
        ModelConfig::MemoryFormer(self.clone())
    }
}

/// The parameter layout of the model `cfg` describes, without building it.
pub fn layout(cfg: &MemoryFormerConfig) -> ParamLayout {
    trunk::layout(cfg)
}
