//! The Residual Matrix Transformer (SPEC §2; RMT paper §2.2, eqs 14-27): the trunk (`trunk.rs`)
//! over a matrix residual (`residual::Matrix`) around the dense core W2 · GELU(W1 · x) (`ff::Dense`):
//!
//!   x_FF = concat_h(r_FF^(h) ·₁ Norm(X)) ∈ R^{R·D_v}
//!   f = W2 · GELU_tanh(W1 · x_FF)       W1 ∈ R^{D_FF×R·D_v}, both N(0, init_std²/fan_in)
//!   X ← X + Σ_h w_FF^(h) ⊗ f_h
//!
//! W2 has no extra output scaling: the storage keys w_FF carry the trunk's 1/sqrt(2L).

use crate::attention::{Attention, Direct};
use crate::ff::Dense;
use crate::params::ParamLayout;
use crate::residual::Matrix;
use crate::trunk::{self, Model, Parts};
use crate::{ModelConfig, RmtConfig};

/// The RMT: the trunk over a matrix residual around a dense core.
pub type Rmt<B> = Model<B, RmtConfig>;

impl Parts for RmtConfig {
    type Residual = Matrix;
    type Core = Dense;
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

    fn n_layers(&self) -> usize {
        self.n_layers
    }

    fn model(&self) -> ModelConfig {
        ModelConfig::Rmt(self.clone())
    }
}

/// The parameter layout of the model `cfg` describes, without building it.
pub fn layout(cfg: &RmtConfig) -> ParamLayout {
    trunk::layout(cfg)
}
