//! MemoryFormer (SPEC §3; MemoryFormer paper §3-4): the transformer's fully-connected layers
//! replaced by Memory Layers, ML(x) = Σ_k p(z_k) · T_k[hash(z_k)] + b.
//!
//!   X⁰ = W_E[token] + W_PE[position]                      dense
//!   Q, K, V = ML_QKV(Norm(X))                              one hash serves all three
//!   X ← X + MHA(Q, K, V)                                   no output projection
//!   X ← X + ML2(Norm(ML1(Norm(X))))                        ML1 expands to (τ+2)·K; no activation
//!   logits = W_U · Norm(X)                                 dense
//!
//! The vector-residual trunk (`residual_vector.rs`) with ML_QKV before attention
//! (`attention::HashedQkv`) and the memory block as its core (`memory_layer::MemoryBlock`).
//! The tables learn at `table_lr_mult` times the learning rate.

use crate::attention::{AttentionNames, HashedQkv};
use crate::memory_layer::{layer_dims, MemoryBlock};
use crate::params::{Init, ParamLayout};
use crate::residual_vector::{self, ResidualVector, ResidualVectorConfig, VectorTrunk};
use crate::{MemoryFormerConfig, ModelConfig};

/// MemoryFormer: the vector trunk with hashed maps and a memory block.
pub type MemoryFormer<B> = ResidualVector<B, MemoryFormerConfig>;

impl ResidualVectorConfig for MemoryFormerConfig {
    type Core = MemoryBlock;
    type Maps = HashedQkv;
    const CORE_OUTPUT_PER_BLOCK: bool = true;

    /// Embeddings ~ N(0, embed_std²); W_U from zero, so the first loss is exactly ln V.
    fn trunk(&self) -> VectorTrunk {
        VectorTrunk {
            vocab: self.vocab,
            seq_len: self.seq_len,
            d_model: self.d_model,
            n_layers: self.n_layers,
            n_heads: self.n_heads,
            head_dim: self.head_dim(),
            norm: self.norm,
            norm_eps: self.norm_eps,
            attn_layer_scale: self.attn_layer_scale,
            attention_names: AttentionNames {
                heads: "n_heads",
                width: "d_model",
            },
            z_loss: self.z_loss,
            embed_std: self.embed_std,
            unembedding_init: Init::Normal { std: 0.0 },
        }
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

    fn model(&self) -> ModelConfig {
        ModelConfig::MemoryFormer(self.clone())
    }
}

/// The parameter layout of the model `cfg` describes, without building it.
pub fn layout(cfg: &MemoryFormerConfig) -> ParamLayout {
    residual_vector::layout(cfg)
}
