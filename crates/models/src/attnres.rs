//! Block Attention Residuals (Kimi Team, 2026, §3.2; SPEC §7.3): the transformer's sites do not
//! add their outputs to one stream; each reads a softmax over depth. A paper "layer" is a site.
//!
//!   b_0 = e                                  the embedding, a source of its own
//!   depth block n = 1 … N holds sites (n−1)S … nS−1, S = 2L/N
//!   b_n^i = Σ of the first i outputs of block n;  b_n = b_n^S
//!   site s = (n−1)S + i reads   h_s = Σ_k α_k v_k over [b_0, …, b_{n−1}] (and b_n^i when i ≥ 1)
//!                               α = softmax_k(w_sᵀ RMSNorm_s(v_k))      w_s from 0, RMSNorm's γ_s from 1
//!   y_s = F_s(Norm(h_s))                     the transformer's attention or feed-forward branch
//!   logits = W_U · Norm(h_out),  h_out over [b_0, …, b_N] with its own w and γ
//!
//! With every w = 0 the weights are uniform, h_s is the transformer's residual over the number
//! of sources, and the scale-invariant norms make the model the transformer of its D, H, D_h,
//! D_FF and L (SPEC T-R1; their ε scaled by n², hence ε ≤ 1e-8). N = 2L is Full AttnRes.
//! The trunk (`trunk.rs`) over the depth blocks (`residual::DepthBlocks`), with the
//! transformer's maps and core; its counts are `count::try_attnres`.

use crate::embedding::VectorEmbedding;
use crate::params::ParamLayout;
use crate::residual::DepthBlocks;
use crate::trunk::{self, Model, Parts};
use crate::{AttnResConfig, ModelConfig};

pub type AttnRes<B> = Model<B, AttnResConfig>;

impl Parts for AttnResConfig {
    type Residual = DepthBlocks;
    trunk::transformer_branches!();

    fn residual(&self, b: usize, t: usize) -> DepthBlocks {
        DepthBlocks {
            cfg: self.clone(),
            embedding: VectorEmbedding::new(b, t, (self.vocab, self.context, self.d_model), self.init_std),
        }
    }

    fn model(&self) -> ModelConfig {
        ModelConfig::AttnRes(self.clone())
    }
}

/// The parameter layout of the model `cfg` describes, without building it.
pub fn layout(cfg: &AttnResConfig) -> ParamLayout {
    trunk::layout(cfg)
}
