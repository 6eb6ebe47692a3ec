//! Model and training configs: documented structs with named presets, shared by the CLI and the
//! page, and saved with every run.

use crate::{ModelError, Result};
use serde::{Deserialize, Serialize};

/// The norm every block uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Norm {
    LayerNorm,
    RmsNorm,
}

impl From<Norm> for engine::NormKind {
    fn from(n: Norm) -> Self {
        match n {
            Norm::LayerNorm => engine::NormKind::LayerNorm,
            Norm::RmsNorm => engine::NormKind::RmsNorm,
        }
    }
}

/// The GPT-2-style pre-norm baseline of SPEC §1 (RMT paper §2.1, App. C.1).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TransformerConfig {
    /// V
    pub vocab: usize,
    /// N, the context length: the learned position table has this many rows.
    pub seq_len: usize,
    /// D
    pub d_model: usize,
    /// L
    pub n_layers: usize,
    /// H
    pub n_heads: usize,
    /// D_h; H·D_h need not equal D.
    pub head_dim: usize,
    /// D_FF
    pub d_ff: usize,
    /// GPT-2 uses LayerNorm; both are bias-free (SPEC §1: no biases).
    pub norm: Norm,
    pub norm_eps: f32,
    /// Divide attention logits by (layer index + 1), a stability tweak of the RMT paper.
    pub attn_layer_scale: bool,
    /// Initialise W_O and W2 with an extra 1/sqrt(2L), as GPT-2 does.
    pub scaled_output_init: bool,
    /// Weights ~ N(0, init_std²/fan_in); embeddings ~ N(0, init_std²) (SPEC §2, official code).
    pub init_std: f32,
    /// Weight of the z-loss 1e-4·(log Z)².
    pub z_loss: f32,
}

impl TransformerConfig {
    /// A model that learns the synthetic tasks in a few hundred steps on a CPU or in a browser.
    ///
    /// Measured on the copy task (T=16, batch 32, lr 1e-2, 300 steps, seeds 0-3): with 4 heads
    /// and init_std 0.02 the loss stays on the unigram plateau (ln 16); with 8 heads and
    /// init_std 0.5 every seed reaches 0.003. The copy skill needs attention to lock onto a
    /// position, and weights of 0.02/sqrt(64) leave its logits too flat to find it in time.
    pub fn tiny(vocab: usize, seq_len: usize) -> Self {
        Self {
            vocab,
            seq_len,
            d_model: 64,
            n_layers: 2,
            n_heads: 8,
            head_dim: 16,
            d_ff: 256,
            norm: Norm::LayerNorm,
            norm_eps: 1e-5,
            attn_layer_scale: true,
            scaled_output_init: true,
            init_std: 0.5,
            z_loss: 1e-4,
        }
    }

    /// GPT-2 small (124M): L=12, D=768, H=12, D_h=64, D_FF=3072, V=50257, N=1024.
    pub fn gpt2_small() -> Self {
        Self {
            d_model: 768,
            n_layers: 12,
            n_heads: 12,
            head_dim: 64,
            d_ff: 3072,
            init_std: 0.02,
            ..Self::tiny(50257, 1024)
        }
    }

    /// GPT-2 medium (350M): L=24, D=1024, H=16, D_h=64, D_FF=4096, V=50257, N=1024.
    pub fn gpt2_medium() -> Self {
        Self {
            d_model: 1024,
            n_layers: 24,
            n_heads: 16,
            head_dim: 64,
            d_ff: 4096,
            init_std: 0.02,
            ..Self::tiny(50257, 1024)
        }
    }

    pub fn validate(&self) -> Result<()> {
        let positive = [
            ("vocab", self.vocab),
            ("seq_len", self.seq_len),
            ("d_model", self.d_model),
            ("n_layers", self.n_layers),
            ("n_heads", self.n_heads),
            ("head_dim", self.head_dim),
            ("d_ff", self.d_ff),
        ];
        for (name, v) in positive {
            if v == 0 {
                return Err(ModelError::Config(format!("{name} must be at least 1")));
            }
        }
        if !(self.norm_eps > 0.0) || !(self.init_std > 0.0) || !(self.z_loss >= 0.0) {
            return Err(ModelError::Config(
                "norm_eps and init_std must be positive and z_loss not negative".into(),
            ));
        }
        Ok(())
    }
}

/// Which architecture, with its config. RMT and MemoryFormer join here.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "arch", rename_all = "lowercase")]
pub enum ModelConfig {
    Transformer(TransformerConfig),
}

/// How to train: AdamW with warmup and cosine decay (SPEC §2, App. C of the RMT paper).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrainConfig {
    pub batch: usize,
    pub steps: usize,
    /// Peak learning rate; 1e-2 for the paper's small models.
    pub lr: f32,
    /// Linear warmup over this fraction of the steps.
    pub warmup_frac: f32,
    /// Cosine decay ends at this fraction of the peak.
    pub min_lr_frac: f32,
    /// Applied to matrices only, never to norms or embeddings.
    pub weight_decay: f32,
    pub beta1: f32,
    pub beta2: f32,
    pub eps: f32,
    /// Clip the global gradient norm to this.
    pub max_grad_norm: f32,
    pub seed: u64,
}

impl Default for TrainConfig {
    fn default() -> Self {
        Self {
            batch: 32,
            steps: 300,
            lr: 1e-2,
            warmup_frac: 0.05,
            min_lr_frac: 0.1,
            weight_decay: 1e-4,
            beta1: 0.9,
            beta2: 0.95,
            eps: 1e-8,
            max_grad_norm: 1.0,
            seed: 0,
        }
    }
}

impl TrainConfig {
    pub fn validate(&self) -> Result<()> {
        if self.batch == 0 || self.steps == 0 {
            return Err(ModelError::Config("batch and steps must be at least 1".into()));
        }
        if !(self.lr > 0.0) || !(0.0..1.0).contains(&self.warmup_frac) || !(0.0..=1.0).contains(&self.min_lr_frac) {
            return Err(ModelError::Config(
                "lr must be positive, warmup_frac in [0, 1), min_lr_frac in [0, 1]".into(),
            ));
        }
        Ok(())
    }
}
