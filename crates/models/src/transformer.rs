//! The baseline Transformer: GPT-2-style pre-norm decoder (SPEC §1; RMT paper §2.1, App. C.1).
//!
//!   X⁰ = W_E[token] + W_PE[position]
//!   X ← X + MHA(Norm(X)),  MHA = W_O · attention(W_QKV · Norm(X))
//!   X ← X + FF(Norm(X)),   FF(x) = W2 · GELU_tanh(W1 · x)
//!   logits = W_U · Norm(X)
//!
//! No biases, no weight tying: the trunk (`trunk.rs`) over a vector residual
//! (`residual::Vector`), with dense projections around attention (`attention::Projections`)
//! and a dense core (`ff::Dense`).

use crate::attention::{Attention, AttentionNames, Projections};
use crate::embedding::VectorEmbedding;
use crate::ff::Dense;
use crate::params::{Init, ParamLayout};
use crate::residual::Vector;
use crate::trunk::{self, Model, Parts};
use crate::value_residual::ValueMix;
use crate::{ModelConfig, TransformerConfig};

/// The transformer: the trunk over a vector residual with dense maps and core.
pub type Transformer<B> = Model<B, TransformerConfig>;

impl TransformerConfig {
    /// W_O's and W2's extra init scale: 1/sqrt(2L), as GPT-2 does (SPEC §2), or 1.
    fn out_scale(&self) -> f32 {
        match self.scaled_output_init {
            true => 1.0 / (2.0 * self.n_layers as f32).sqrt(),
            false => 1.0,
        }
    }
}

impl Parts for TransformerConfig {
    type Residual = Vector;
    type Core = Dense;
    type Maps = Projections;

    /// Embeddings ~ N(0, init_std²), and W_U from zero so that the first loss is exactly ln V
    /// (a weight's init without `zero_unembedding`).
    fn residual(&self, b: usize, t: usize) -> Vector {
        let unembedding_init = match self.zero_unembedding {
            true => Init::Normal { std: 0.0 },
            false => Init::Normal {
                std: self.weight_init.std(self.init_std, self.d_model, self.vocab, 1.0),
            },
        };
        Vector {
            embedding: VectorEmbedding::new(b, t, (self.vocab, self.context, self.d_model), self.init_std),
            n_layers: self.n_layers,
            norm: self.norm,
            norm_eps: self.norm_eps,
            unembedding_init,
            output_per_block: false,
        }
    }

    fn attention(&self, b: usize, t: usize) -> Attention {
        let heads = (self.n_heads, self.head_dim);
        Attention::new(b, t, heads, self.attn_layer_scale, AttentionNames::HEADS)
    }

    /// Weights ~ N(0, init_std²/fan_in) (or Xavier's N(0, 2/(fan_in + fan_out))).
    fn maps(&self, tokens: usize) -> Projections {
        Projections {
            tokens,
            d_model: self.d_model,
            width: self.n_heads * self.head_dim,
            init_std: self.init_std,
            weight_init: self.weight_init,
            out_scale: self.out_scale(),
        }
    }

    fn core(&self, tokens: usize) -> Dense {
        Dense {
            tokens,
            width: self.d_model,
            d_ff: self.d_ff,
            init_std: self.init_std,
            weight_init: self.weight_init,
            w2_scale: self.out_scale(),
        }
    }

    fn n_layers(&self) -> usize {
        self.n_layers
    }

    fn values(&self, tokens: usize) -> ValueMix {
        ValueMix {
            residual: self.value_residual,
            tokens,
            width: self.n_heads * self.head_dim,
            layers: self.n_layers,
        }
    }

    fn model(&self) -> ModelConfig {
        ModelConfig::Transformer(self.clone())
    }
}

/// The parameter layout of the model `cfg` describes, without building it.
pub fn layout(cfg: &TransformerConfig) -> ParamLayout {
    trunk::layout(cfg)
}
