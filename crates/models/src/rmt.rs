//! The Residual Matrix Transformer (SPEC §2; RMT paper §2.2, eqs 14-27): the residual-matrix
//! trunk (`residual_matrix.rs`) around the dense core W2 · GELU(W1 · x) (`ff::Dense`):
//!
//!   x_FF = concat_h(r_FF^(h) ·₁ Norm(X)) ∈ R^{R·D_v}
//!   f = W2 · GELU_tanh(W1 · x_FF)       W1 ∈ R^{D_FF×R·D_v}, both N(0, init_std²/fan_in)
//!   X ← X + Σ_h w_FF^(h) ⊗ f_h
//!
//! W2 has no extra output scaling: the storage keys w_FF carry the trunk's 1/sqrt(2L).

use crate::config::Trunk;
use crate::ff::Dense;
use crate::params::ParamLayout;
use crate::residual_matrix::{self, ResidualMatrix, ResidualMatrixConfig};
use crate::{ModelConfig, RmtConfig};

/// The RMT: the trunk around a dense core.
pub type Rmt<B> = ResidualMatrix<B, RmtConfig>;

impl ResidualMatrixConfig for RmtConfig {
    type Core = Dense;

    fn trunk(&self) -> Trunk {
        RmtConfig::trunk(self)
    }

    fn core(&self, tokens: usize) -> Dense {
        Dense {
            tokens,
            width: self.trunk().width(),
            d_ff: self.d_ff,
            init_std: self.init_std,
            weight_init: self.weight_init,
            w2_scale: 1.0,
        }
    }

    fn model(&self) -> ModelConfig {
        ModelConfig::Rmt(self.clone())
    }
}

/// The parameter layout of the model `cfg` describes, without building it.
pub fn layout(cfg: &RmtConfig) -> ParamLayout {
    residual_matrix::layout(cfg)
}
