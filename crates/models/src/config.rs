//! Model and training configs: documented structs with named presets, shared by the CLI and the
//! page, and saved with every run.

use crate::{ModelError, Result};
use serde::{Deserialize, Serialize};

/// Fails with the first of `fields` that is 0.
fn require_positive(fields: &[(&str, usize)]) -> Result<()> {
    match fields.iter().find(|(_, v)| *v == 0) {
        Some((name, _)) => Err(ModelError::Config(format!("{name} must be at least 1"))),
        None => Ok(()),
    }
}

/// The values an f32 setting may take; every one must also be finite.
#[derive(Clone, Copy)]
enum Range {
    Positive,
    NonNegative,
    /// [0, 1)
    Fraction,
    /// [0, 1]
    FractionOrOne,
}

/// Fails with the first of `fields` that is not finite or not in its range, naming it and its value.
fn require_in_range(fields: &[(&str, f32, Range)]) -> Result<()> {
    for &(name, value, range) in fields {
        let (ok, want) = match range {
            Range::Positive => (value > 0.0, "above 0"),
            Range::NonNegative => (value >= 0.0, "of at least 0"),
            Range::Fraction => ((0.0..1.0).contains(&value), "in [0, 1)"),
            Range::FractionOrOne => ((0.0..=1.0).contains(&value), "in [0, 1]"),
        };
        if !value.is_finite() || !ok {
            return Err(ModelError::Config(format!(
                "{name} = {value} is out of range; it must be a finite number {want}"
            )));
        }
    }
    Ok(())
}

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
        require_positive(&[
            ("vocab", self.vocab),
            ("seq_len", self.seq_len),
            ("d_model", self.d_model),
            ("n_layers", self.n_layers),
            ("n_heads", self.n_heads),
            ("head_dim", self.head_dim),
            ("d_ff", self.d_ff),
        ])?;
        require_in_range(&[
            ("norm_eps", self.norm_eps, Range::Positive),
            ("init_std", self.init_std, Range::Positive),
            ("z_loss", self.z_loss, Range::NonNegative),
        ])?;
        // Every parameter shape's product, checked, so that building the layout cannot overflow.
        crate::memory::transformer_params(self)?.addressable().map(|_| ())
    }
}

/// How an RMT learns positions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Position {
    /// A learned N×R×D_v table stored with its own keys w_PE (the paper's eq. 14).
    Learned,
    /// No position table; attention logits get ALiBi's bias (the official code).
    Alibi,
}

/// The Residual Matrix Transformer of SPEC §2 (RMT paper §2.2, eqs 14-27).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RmtConfig {
    /// V
    pub vocab: usize,
    /// N, the context length.
    pub seq_len: usize,
    /// D_k: rows of each token's residual matrix, the dimension keys contract over.
    pub d_k: usize,
    /// D_v: columns of the residual matrix; also the attention head width.
    pub d_v: usize,
    /// R: heads = storage/retrieval vectors per layer = FF adapter vectors.
    pub rank: usize,
    /// L
    pub n_layers: usize,
    /// D_FF; W1 is D_FF × R·D_v.
    pub d_ff: usize,
    /// Normalises each token's whole D_k×D_v matrix, with a D_k×D_v gain.
    pub norm: Norm,
    pub norm_eps: f32,
    pub position: Position,
    /// Divide attention logits by (layer index + 1); ALiBi's bias is added after, undivided.
    pub attn_layer_scale: bool,
    /// Storage keys of the attention and FF outputs get an extra 1/sqrt(2L).
    pub scaled_output_init: bool,
    /// Weights ~ N(0, init_std²/fan_in); embedding tables ~ N(0, init_std²).
    pub init_std: f32,
    /// W_U starts at zero (SPEC §2), so the first loss is exactly ln V. Variance measurements
    /// at init turn this off: with W_U = 0 no gradient reaches the blocks.
    pub zero_unembedding: bool,
    pub z_loss: f32,
}

impl RmtConfig {
    /// An RMT that learns the synthetic tasks in a few hundred steps on a CPU or in a browser:
    /// R=8 heads of D_v=16 (as the tiny transformer's 8×16), D_k=8, so the residual holds 128
    /// values against the transformer's 64, at about the same parameter count.
    pub fn tiny(vocab: usize, seq_len: usize) -> Self {
        Self {
            vocab,
            seq_len,
            d_k: 8,
            d_v: 16,
            rank: 8,
            n_layers: 2,
            d_ff: 256,
            norm: Norm::RmsNorm,
            norm_eps: 1e-6,
            position: Position::Learned,
            attn_layer_scale: true,
            scaled_output_init: true,
            init_std: 0.5,
            zero_unembedding: true,
            z_loss: 1e-4,
        }
    }

    /// The residual size D_k·D_v, the RMT's counterpart of the transformer's D.
    pub fn residual(&self) -> usize {
        // Saturates rather than wraps on a config `validate` would refuse.
        self.d_k.saturating_mul(self.d_v)
    }

    pub fn validate(&self) -> Result<()> {
        require_positive(&[
            ("vocab", self.vocab),
            ("seq_len", self.seq_len),
            ("d_k", self.d_k),
            ("d_v", self.d_v),
            ("rank", self.rank),
            ("n_layers", self.n_layers),
            ("d_ff", self.d_ff),
        ])?;
        require_in_range(&[
            ("norm_eps", self.norm_eps, Range::Positive),
            ("init_std", self.init_std, Range::Positive),
            ("z_loss", self.z_loss, Range::NonNegative),
        ])?;
        crate::memory::rmt_params(self)?.addressable().map(|_| ())
    }
}

/// MemoryFormer (SPEC §3; MemoryFormer paper §3-4): every fully-connected layer of the blocks
/// is a Memory Layer of K = ⌊d/τ⌋ hash tables; embeddings and the head stay dense.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemoryFormerConfig {
    /// V
    pub vocab: usize,
    /// N, the context length: the learned position table has this many rows.
    pub seq_len: usize,
    /// d: the width of the residual stream.
    pub d_model: usize,
    /// L
    pub n_layers: usize,
    /// H; the head width is d/H.
    pub n_heads: usize,
    /// τ: bits per chunk; each table has 2^τ rows. ML2 hashes τ + 2 bits.
    pub tau: usize,
    pub norm: Norm,
    pub norm_eps: f32,
    /// Divide attention logits by (layer index + 1).
    pub attn_layer_scale: bool,
    /// t in p(z) = Π_j 1/(1 + exp(−2|z_j|/t)).
    pub temperature: f32,
    /// Multiply p(z) by ‖z‖₁, as the community code does.
    pub l1_weight: bool,
    /// Tables ~ N(0, table_std²); the paper's 0.02.
    pub table_std: f32,
    /// Biases ~ N(0, bias_std²); the paper's 1e-3.
    pub bias_std: f32,
    /// Token and position embeddings ~ N(0, embed_std²).
    pub embed_std: f32,
    /// Tables learn at this multiple of the learning rate: their gradients are sparse (paper
    /// Table 4: 3× the dense model's rate).
    pub table_lr_mult: f32,
    pub z_loss: f32,
}

impl MemoryFormerConfig {
    /// A MemoryFormer that learns the synthetic tasks on a CPU or in a browser: d = 64 in
    /// K = 16 chunks of τ = 4 bits, 8 heads of 8.
    pub fn tiny(vocab: usize, seq_len: usize) -> Self {
        Self {
            vocab,
            seq_len,
            d_model: 64,
            n_layers: 2,
            n_heads: 8,
            tau: 4,
            norm: Norm::LayerNorm,
            norm_eps: 1e-5,
            attn_layer_scale: true,
            temperature: 1.0,
            l1_weight: false,
            table_std: 0.02,
            bias_std: 1e-3,
            embed_std: 0.5,
            table_lr_mult: 3.0,
            z_loss: 1e-4,
        }
    }

    /// K = ⌊d/τ⌋; values of d past K·τ are not hashed (the paper's d = 510 = 51·10 case).
    pub fn chunks(&self) -> usize {
        self.d_model.checked_div(self.tau).unwrap_or(0)
    }

    /// The width ML1 expands to, (τ + 2)·K, which ML2 hashes in K chunks of τ + 2 bits.
    pub fn d_hidden(&self) -> usize {
        // Saturates rather than wraps on a config `validate` would refuse.
        self.tau.saturating_add(2).saturating_mul(self.chunks())
    }

    pub fn head_dim(&self) -> usize {
        self.d_model.checked_div(self.n_heads).unwrap_or(0)
    }

    pub fn validate(&self) -> Result<()> {
        require_positive(&[
            ("vocab", self.vocab),
            ("seq_len", self.seq_len),
            ("d_model", self.d_model),
            ("n_layers", self.n_layers),
            ("n_heads", self.n_heads),
            ("tau", self.tau),
        ])?;
        if self.tau > 14 {
            return Err(ModelError::Config(format!(
                "tau = {} makes tables of 2^(tau + 2) rows for ML2; use tau of at most 14",
                self.tau
            )));
        }
        if self.tau > self.d_model {
            return Err(ModelError::Config(format!(
                "tau = {} exceeds d_model = {}: there is not one whole chunk to hash",
                self.tau, self.d_model
            )));
        }
        if !self.d_model.is_multiple_of(self.n_heads) {
            return Err(ModelError::Config(format!(
                "d_model = {} is not a multiple of n_heads = {}",
                self.d_model, self.n_heads
            )));
        }
        require_in_range(&[
            ("norm_eps", self.norm_eps, Range::Positive),
            ("temperature", self.temperature, Range::Positive),
            ("table_std", self.table_std, Range::NonNegative),
            ("bias_std", self.bias_std, Range::NonNegative),
            ("embed_std", self.embed_std, Range::Positive),
            ("table_lr_mult", self.table_lr_mult, Range::Positive),
            ("z_loss", self.z_loss, Range::NonNegative),
        ])?;
        crate::memory::memoryformer_params(self)?.addressable().map(|_| ())
    }
}

/// Which architecture, with its config.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "arch", rename_all = "lowercase")]
pub enum ModelConfig {
    Transformer(TransformerConfig),
    Rmt(RmtConfig),
    MemoryFormer(MemoryFormerConfig),
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
        require_positive(&[("batch", self.batch), ("steps", self.steps)])?;
        require_in_range(&[
            ("lr", self.lr, Range::Positive),
            ("warmup_frac", self.warmup_frac, Range::Fraction),
            ("min_lr_frac", self.min_lr_frac, Range::FractionOrOne),
            ("weight_decay", self.weight_decay, Range::NonNegative),
            ("beta1", self.beta1, Range::Fraction),
            ("beta2", self.beta2, Range::Fraction),
            ("eps", self.eps, Range::Positive),
            ("max_grad_norm", self.max_grad_norm, Range::Positive),
        ])
    }
}
