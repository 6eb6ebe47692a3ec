//! AltUp, the paper variant (Baykal et al., NeurIPS 2023; SPEC §7.2.2, §7.2.7): a residual of K
//! sub-blocks of D a token, at the compute of width D. Each layer ℓ runs on one sub-block and
//! predicts and corrects the others with K² + K static scalars.
//!
//!   X⁰ = (e, e, …, e)                    replicate (Recycled-AltUp)
//!   j = ℓ mod K                          alternating (or 0: `fixed`)
//!   x̂_i = Σ_k P_ℓ[i,k] x_k               predict, P_ℓ from I
//!   y = T_ℓ(x_j)                         the transformer's layer on the old x_j
//!                                        (on x̂_j with `compute_on = predicted`, Gemma 3n's)
//!   x'_i = x̂_i + g_ℓ,i (y − x̂_j)         correct, g_ℓ from 1
//!   logits = W_U · Norm(Σ_k x_k)         sum
//!
//! With P = I and g = 1 every sub-block carries the transformer's residual: the model starts as
//! the transformer of its D, H, D_h, D_FF and L (SPEC T-A2). The trunk (`trunk.rs`) over the
//! sub-blocks (`residual::SubBlocks`), with the transformer's maps and core; its counts are
//! `count::try_altup`.

use crate::embedding::VectorEmbedding;
use crate::params::ParamLayout;
use crate::residual::SubBlocks;
use crate::trunk::{self, Model, Parts};
use crate::{AltupConfig, ModelConfig};

pub type Altup<B> = Model<B, AltupConfig>;

impl Parts for AltupConfig {
    type Residual = SubBlocks;
    trunk::transformer_branches!();

    fn residual(&self, b: usize, t: usize) -> SubBlocks {
        SubBlocks {
            cfg: self.clone(),
            embedding: VectorEmbedding::new(b, t, (self.vocab, self.context, self.d_model), self.init_std),
        }
    }

    fn model(&self) -> ModelConfig {
        ModelConfig::Altup(self.clone())
    }
}

/// The parameter layout of the model `cfg` describes, without building it.
pub fn layout(cfg: &AltupConfig) -> ParamLayout {
    trunk::layout(cfg)
}
