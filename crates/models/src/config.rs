//! Model and training configs: documented structs with named presets, shared by the CLI and the
//! page, and saved with every run.
//!
//! One file over 600 lines because the architectures' configs share their checks and
//! their serde shape (`deny_unknown_fields`, the `arch` tag), and each is mostly documented
//! fields: split by architecture, every file would import the same helpers for little gain.

use crate::attention::{Attention, AttentionNames};
use crate::{ModelError, Result};
use serde::{Deserialize, Serialize};

/// The most blocks a model may be built with: ten times the deepest published transformers.
/// Building a model, and measuring its memory on the counting backend, takes host memory and
/// time per block whatever its widths, so a depth past any model's is refused before building
/// (`ModelConfig::check_batch`); counting its parameters and FLOPs needs no limit.
pub const MAX_LAYERS: usize = 10_000;

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
    #[serde(alias = "seq_len")]
    pub context: usize,
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
    /// Xavier instead of the fan-in init above; configs written before it mean fan_in.
    #[serde(default)]
    pub weight_init: WeightInit,
    /// W_U starts at zero, so the first loss is exactly ln V. Variance measurements at init turn
    /// this off: with W_U = 0 no gradient reaches the blocks. Older configs mean true.
    #[serde(default = "yes")]
    pub zero_unembedding: bool,
    /// Weight of the z-loss 1e-4·(log Z)².
    pub z_loss: f32,
    /// Every layer after the first attends with its values mixed with layer 0's (ResFormer's
    /// value residual); older configs mean off.
    #[serde(default)]
    pub value_residual: ValueResidual,
}

/// The value residual's mix (`value_residual.rs`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ValueResidual {
    #[default]
    Off,
    /// V'_n = ½ V_n + ½ V_0 for n ≥ 1, the official code's fixed mix.
    Half,
    /// V'_n = (1 − λ_n) V_n + λ_n V_0 for n ≥ 1, λ_n from ½ (modded-nanogpt's tied form): L − 1
    /// parameters, no decay.
    Learnable,
}

fn yes() -> bool {
    true
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
            context: seq_len,
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
            weight_init: WeightInit::FanIn,
            zero_unembedding: true,
            z_loss: 1e-4,
            value_residual: ValueResidual::Off,
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
            ("context", self.context),
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
        crate::param_sizes::transformer_params(self)?.addressable().map(|_| ())
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
    #[serde(alias = "seq_len")]
    pub context: usize,
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
    /// Xavier instead of the fan-in init above; configs written before it mean fan_in.
    #[serde(default)]
    pub weight_init: WeightInit,
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
        Self::new(Trunk::tiny(vocab, seq_len), 256)
    }

    /// The RMT of `trunk` with a dense core of width `d_ff`.
    pub fn new(trunk: Trunk, d_ff: usize) -> Self {
        Self::from_parts(trunk, d_ff)
    }

    /// The residual size D_k·D_v, the RMT's counterpart of the transformer's D.
    pub fn residual(&self) -> usize {
        self.trunk().residual()
    }

    pub fn validate(&self) -> Result<()> {
        self.trunk().validate(&[("d_ff", self.d_ff)])?;
        crate::param_sizes::rmt_params(self)?.addressable().map(|_| ())
    }
}

/// How weights start; embeddings and hash tables are N(0, std²) either way, norm gains 1.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WeightInit {
    /// N(0, init_std²/fan_in), output maps times 1/(2L) with `scaled_output_init` (SPEC §2).
    #[default]
    FanIn,
    /// N(0, 2/(fan_in + fan_out)) for every weight, without output scaling (Glorot & Bengio):
    /// what the RMT paper's Table 2 assumes.
    Xavier,
}

impl WeightInit {
    /// The std of a weight of these fans; `out_scale` is the fan-in init's output scaling (1 for
    /// other weights).
    pub fn std(self, init_std: f32, fan_in: usize, fan_out: usize, out_scale: f32) -> f32 {
        match self {
            Self::FanIn => init_std / (fan_in as f32).sqrt() * out_scale,
            Self::Xavier => (2.0 / (fan_in + fan_out) as f32).sqrt(),
        }
    }
}

/// What every residual-matrix model shares, whatever its feed-forward core: the RMT of SPEC §2
/// with the core taken out. `RmtConfig` (a dense core) and `HybridConfig` (a memory block) are
/// each a trunk and a core.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Trunk {
    pub vocab: usize,
    pub context: usize,
    pub d_k: usize,
    pub d_v: usize,
    pub rank: usize,
    pub n_layers: usize,
    pub norm: Norm,
    pub norm_eps: f32,
    pub position: Position,
    pub attn_layer_scale: bool,
    pub scaled_output_init: bool,
    pub init_std: f32,
    pub weight_init: WeightInit,
    pub zero_unembedding: bool,
    pub z_loss: f32,
}

impl Trunk {
    /// R heads of D_v over batches of `b` sequences of `t` tokens: the attention of SPEC §2.
    pub fn attention(&self, b: usize, t: usize) -> Attention {
        let heads = (self.rank, self.d_v);
        let attention = Attention::new(b, t, heads, self.attn_layer_scale, AttentionNames::RANK);
        Attention {
            alibi: self.position == Position::Alibi,
            ..attention
        }
    }
}

impl Trunk {
    /// The tiny RMT's: R=8 heads of D_v=16, D_k=8, two layers.
    pub fn tiny(vocab: usize, seq_len: usize) -> Self {
        Self {
            vocab,
            context: seq_len,
            d_k: 8,
            d_v: 16,
            rank: 8,
            n_layers: 2,
            norm: Norm::RmsNorm,
            norm_eps: 1e-6,
            position: Position::Learned,
            attn_layer_scale: true,
            scaled_output_init: true,
            init_std: 0.5,
            weight_init: WeightInit::FanIn,
            zero_unembedding: true,
            z_loss: 1e-4,
        }
    }

    /// The residual size D_k·D_v.
    pub fn residual(&self) -> usize {
        // Saturates rather than wraps on a config `validate` would refuse.
        self.d_k.saturating_mul(self.d_v)
    }

    /// R·D_v: the width of the R vectors that one retrieval reads per token, the feed-forward
    /// core's input and output.
    pub fn width(&self) -> usize {
        self.rank.saturating_mul(self.d_v)
    }

    /// Checks the trunk's settings, and that the core's `sizes` are at least 1.
    fn validate(&self, sizes: &[(&str, usize)]) -> Result<()> {
        require_positive(&[
            ("vocab", self.vocab),
            ("context", self.context),
            ("d_k", self.d_k),
            ("d_v", self.d_v),
            ("rank", self.rank),
            ("n_layers", self.n_layers),
        ])?;
        require_positive(sizes)?;
        require_in_range(&[
            ("norm_eps", self.norm_eps, Range::Positive),
            ("init_std", self.init_std, Range::Positive),
            ("z_loss", self.z_loss, Range::NonNegative),
        ])
    }
}

/// The MemoryFormer paper's expansion: ML2 hashes 2 more bits than ML1 (its Table 5).
pub const PAPER_EXPANSION_BITS: usize = 2;

/// The most bits a chunk hashes: the kernels' bucket codes and the tables' 2^bits rows.
pub const MAX_HASH_BITS: usize = 16;

fn paper_expansion_bits() -> usize {
    PAPER_EXPANSION_BITS
}

/// How a model's Memory Layers hash and start (SPEC §3), the same for MemoryFormer and the
/// hybrid: K = ⌊d/τ⌋ chunks of τ bits read tables of 2^τ rows.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Hashing {
    pub tau: usize,
    /// ML1 expands to (τ + e)·K, so ML2 hashes chunks of τ + e bits (paper Table 5; e = 2).
    pub expansion_bits: usize,
    /// A GELU between ML1 and ML2, after the inner norm (paper Table 6; off in its model).
    pub block_gelu: bool,
    pub temperature: f32,
    pub l1_weight: bool,
    pub table_std: f32,
    pub bias_std: f32,
    pub table_lr_mult: f32,
}

impl Hashing {
    /// The MemoryFormer paper's: temperature 1, tables N(0, 0.02²), biases N(0, 1e-3²), tables
    /// at 3× the learning rate.
    pub fn paper(tau: usize) -> Self {
        Self {
            tau,
            expansion_bits: PAPER_EXPANSION_BITS,
            block_gelu: false,
            temperature: 1.0,
            l1_weight: false,
            table_std: 0.02,
            bias_std: 1e-3,
            table_lr_mult: 3.0,
        }
    }

    /// K = ⌊d/τ⌋ chunks of an input of width `d`; values past K·τ are not hashed.
    pub fn chunks(&self, d: usize) -> usize {
        d.checked_div(self.tau).unwrap_or(0)
    }

    /// τ + e: the bits ML2 hashes per chunk; its tables have 2^(τ + e) rows.
    pub fn ml2_bits(&self) -> usize {
        // Saturates rather than wraps on a config `validate` would refuse.
        self.tau.saturating_add(self.expansion_bits)
    }

    /// The width the memory block's ML1 expands to, (τ + e)·K, which ML2 hashes in K chunks of
    /// τ + e bits.
    pub fn d_hidden(&self, d: usize) -> usize {
        self.ml2_bits().saturating_mul(self.chunks(d))
    }

    /// Checks τ against the width `d` it hashes (named `d_name`), and the float settings.
    pub(crate) fn validate(&self, d_name: &str, d: usize) -> Result<()> {
        require_positive(&[("tau", self.tau)])?;
        if self.expansion_bits >= MAX_HASH_BITS {
            return Err(ModelError::Config(format!(
                "expansion_bits = {} leaves ML2 no room for tau's bits; use expansion_bits of at most {}",
                self.expansion_bits,
                MAX_HASH_BITS - 1
            )));
        }
        if self.ml2_bits() > MAX_HASH_BITS {
            return Err(ModelError::Config(format!(
                "tau = {} with expansion_bits = {} makes tables of 2^{} rows for ML2; use tau of at most {}",
                self.tau,
                self.expansion_bits,
                self.ml2_bits(),
                MAX_HASH_BITS - self.expansion_bits
            )));
        }
        if self.tau > d {
            return Err(ModelError::Config(format!(
                "tau = {} exceeds {d_name} = {d}: there is not one whole chunk to hash",
                self.tau
            )));
        }
        require_in_range(&[
            ("temperature", self.temperature, Range::Positive),
            ("table_std", self.table_std, Range::NonNegative),
            ("bias_std", self.bias_std, Range::NonNegative),
            ("table_lr_mult", self.table_lr_mult, Range::Positive),
        ])
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
    #[serde(alias = "seq_len")]
    pub context: usize,
    /// d: the width of the residual stream.
    pub d_model: usize,
    /// L
    pub n_layers: usize,
    /// H; the head width is d/H.
    pub n_heads: usize,
    /// τ: bits per chunk; each table has 2^τ rows. ML2 hashes τ + expansion_bits bits.
    pub tau: usize,
    /// e: ML1 expands to (τ + e)·K (paper Table 5; 2). Configs written before it existed mean 2.
    #[serde(default = "paper_expansion_bits")]
    pub expansion_bits: usize,
    /// A GELU between ML1 and ML2, after the inner norm (paper Table 6; off in its model).
    #[serde(default)]
    pub block_gelu: bool,
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
            context: seq_len,
            d_model: 64,
            n_layers: 2,
            n_heads: 8,
            tau: 4,
            expansion_bits: PAPER_EXPANSION_BITS,
            block_gelu: false,
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
        self.hashing().chunks(self.d_model)
    }

    /// The width ML1 expands to, (τ + 2)·K, which ML2 hashes in K chunks of τ + 2 bits.
    pub fn d_hidden(&self) -> usize {
        self.hashing().d_hidden(self.d_model)
    }

    pub fn head_dim(&self) -> usize {
        self.d_model.checked_div(self.n_heads).unwrap_or(0)
    }

    pub fn validate(&self) -> Result<()> {
        require_positive(&[
            ("vocab", self.vocab),
            ("context", self.context),
            ("d_model", self.d_model),
            ("n_layers", self.n_layers),
            ("n_heads", self.n_heads),
        ])?;
        self.hashing().validate("d_model", self.d_model)?;
        if !self.d_model.is_multiple_of(self.n_heads) {
            return Err(ModelError::Config(format!(
                "d_model = {} is not a multiple of n_heads = {}",
                self.d_model, self.n_heads
            )));
        }
        require_in_range(&[
            ("norm_eps", self.norm_eps, Range::Positive),
            ("embed_std", self.embed_std, Range::Positive),
            ("z_loss", self.z_loss, Range::NonNegative),
        ])?;
        crate::param_sizes::memoryformer_params(self)?.addressable().map(|_| ())
    }
}

/// The hybrid of SPEC §5: an RMT whose feed-forward core W2·GELU(W1·x) is MemoryFormer's
/// memory block ML2(Norm(ML1(x))). The settings are the RMT's without d_ff, and the memory
/// block's: it hashes the R·D_v values that the FF adapters retrieve in K = ⌊R·D_v/τ⌋ chunks.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HybridConfig {
    /// V
    pub vocab: usize,
    /// N, the context length.
    #[serde(alias = "seq_len")]
    pub context: usize,
    /// D_k: rows of each token's residual matrix.
    pub d_k: usize,
    /// D_v: columns of the residual matrix; also the attention head width.
    pub d_v: usize,
    /// R: heads = storage/retrieval vectors per layer = FF adapter vectors.
    pub rank: usize,
    /// L
    pub n_layers: usize,
    /// The residual's norm (whole matrix) and the memory block's inner norm.
    pub norm: Norm,
    pub norm_eps: f32,
    pub position: Position,
    /// Divide attention logits by (layer index + 1); ALiBi's bias is added after, undivided.
    pub attn_layer_scale: bool,
    /// Storage keys of the attention and FF outputs get an extra 1/sqrt(2L).
    pub scaled_output_init: bool,
    /// Keys ~ N(0, init_std²/fan_in); embedding tables ~ N(0, init_std²).
    pub init_std: f32,
    /// Xavier instead of the fan-in init above; configs written before it mean fan_in.
    #[serde(default)]
    pub weight_init: WeightInit,
    /// W_U starts at zero, so the first loss is exactly ln V.
    pub zero_unembedding: bool,
    /// τ: ML1 hashes chunks of τ bits (tables of 2^τ rows), ML2 chunks of τ + expansion_bits.
    pub tau: usize,
    /// e: ML1 expands to (τ + e)·K (MemoryFormer's Table 5; 2). Older configs mean 2.
    #[serde(default = "paper_expansion_bits")]
    pub expansion_bits: usize,
    /// A GELU between ML1 and ML2, after the inner norm (MemoryFormer's Table 6; off).
    #[serde(default)]
    pub block_gelu: bool,
    /// t in p(z) = Π_j 1/(1 + exp(−2|z_j|/t)).
    pub temperature: f32,
    /// Multiply p(z) by ‖z‖₁, as MemoryFormer's community code does.
    pub l1_weight: bool,
    /// Tables ~ N(0, table_std²); MemoryFormer's 0.02.
    pub table_std: f32,
    /// Biases ~ N(0, bias_std²); MemoryFormer's 1e-3.
    pub bias_std: f32,
    /// Tables learn at this multiple of the learning rate: their gradients are sparse.
    pub table_lr_mult: f32,
    pub z_loss: f32,
}

impl HybridConfig {
    /// The tiny RMT's trunk (R·D_v = 128) with a memory block of τ = 4: K = 32 tables of 16
    /// rows in ML1, 32 of 64 rows in ML2.
    pub fn tiny(vocab: usize, seq_len: usize) -> Self {
        Self::new(Trunk::tiny(vocab, seq_len), Hashing::paper(4))
    }

    /// The hybrid of `trunk` whose core hashes as `h` says.
    pub fn new(trunk: Trunk, h: Hashing) -> Self {
        Self::from_parts(
            trunk,
            h.tau,
            h.expansion_bits,
            h.block_gelu,
            h.temperature,
            h.l1_weight,
            h.table_std,
            h.bias_std,
            h.table_lr_mult,
        )
    }

    /// The residual size D_k·D_v.
    pub fn residual(&self) -> usize {
        self.trunk().residual()
    }

    /// d = R·D_v: the width the memory block reads and writes.
    pub fn width(&self) -> usize {
        self.trunk().width()
    }

    /// K = ⌊R·D_v/τ⌋ tables per Memory Layer.
    pub fn chunks(&self) -> usize {
        self.hashing().chunks(self.width())
    }

    /// The width ML1 expands to, (τ + e)·K.
    pub fn d_hidden(&self) -> usize {
        self.hashing().d_hidden(self.width())
    }

    pub fn validate(&self) -> Result<()> {
        self.trunk().validate(&[])?;
        self.hashing().validate("rank × d_v", self.width())?;
        crate::param_sizes::hybrid_params(self)?.addressable().map(|_| ())
    }
}

/// `trunk()` and `from_parts(trunk, core settings…)` for a config made of `Trunk`'s fields
/// (under their names) and its core's `$field`s: the one place each field is mapped.
macro_rules! trunk_and_core {
    ($cfg:ident { $($field:ident: $ty:ty),* }) => {
        impl $cfg {
            /// Everything but the feed-forward core.
            pub fn trunk(&self) -> Trunk {
                Trunk {
                    vocab: self.vocab,
                    context: self.context,
                    d_k: self.d_k,
                    d_v: self.d_v,
                    rank: self.rank,
                    n_layers: self.n_layers,
                    norm: self.norm,
                    norm_eps: self.norm_eps,
                    position: self.position,
                    attn_layer_scale: self.attn_layer_scale,
                    scaled_output_init: self.scaled_output_init,
                    init_std: self.init_std,
                    weight_init: self.weight_init,
                    zero_unembedding: self.zero_unembedding,
                    z_loss: self.z_loss,
                }
            }

            #[allow(clippy::too_many_arguments)]
            fn from_parts(t: Trunk, $($field: $ty),*) -> Self {
                Self {
                    vocab: t.vocab,
                    context: t.context,
                    d_k: t.d_k,
                    d_v: t.d_v,
                    rank: t.rank,
                    n_layers: t.n_layers,
                    norm: t.norm,
                    norm_eps: t.norm_eps,
                    position: t.position,
                    attn_layer_scale: t.attn_layer_scale,
                    scaled_output_init: t.scaled_output_init,
                    init_std: t.init_std,
                    weight_init: t.weight_init,
                    zero_unembedding: t.zero_unembedding,
                    z_loss: t.z_loss,
                    $($field),*
                }
            }
        }
    };
}

trunk_and_core!(RmtConfig { d_ff: usize });
trunk_and_core!(HybridConfig {
    tau: usize,
    expansion_bits: usize,
    block_gelu: bool,
    temperature: f32,
    l1_weight: bool,
    table_std: f32,
    bias_std: f32,
    table_lr_mult: f32
});

/// `hashing()` for a config with `Hashing`'s fields under their names.
macro_rules! has_hashing {
    ($($cfg:ident),*) => {$(
        impl $cfg {
            /// How its Memory Layers hash and start.
            pub fn hashing(&self) -> Hashing {
                Hashing {
                    tau: self.tau,
                    expansion_bits: self.expansion_bits,
                    block_gelu: self.block_gelu,
                    temperature: self.temperature,
                    l1_weight: self.l1_weight,
                    table_std: self.table_std,
                    bias_std: self.bias_std,
                    table_lr_mult: self.table_lr_mult,
                }
            }
        }
    )*};
}

has_hashing!(MemoryFormerConfig, HybridConfig);

/// How each site mixes the streams.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum HcMixing {
    /// HC: dynamic hyper-connections with tanh, P unconstrained.
    #[serde(rename = "hc")]
    Hc,
    /// mHC: Sinkhorn's projection of n² logits (`sinkhorn_iters` rounds).
    #[serde(rename = "mhc")]
    Mhc,
    /// mHC-lite: a mixture of the n! permutations, exactly doubly stochastic.
    #[serde(rename = "mhc-lite")]
    MhcLite,
}

impl HcMixing {
    pub const ALL: [HcMixing; 3] = [HcMixing::Hc, HcMixing::Mhc, HcMixing::MhcLite];

    pub fn name(self) -> &'static str {
        match self {
            HcMixing::Hc => "hc",
            HcMixing::Mhc => "mhc",
            HcMixing::MhcLite => "mhc-lite",
        }
    }
}

/// How the sites' gates start (SPEC §6.6).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum HcInit {
    /// Near the identity mixing, Φ = 0: HC's Eq. 14, mHC's and mHC-lite's published code.
    #[default]
    #[serde(rename = "identity")]
    Identity,
    /// Φ ~ N(0, 0.02²), b = 0: P near J/n (mHC and mHC-lite only).
    #[serde(rename = "zero-bias")]
    ZeroBias,
}

impl HcInit {
    pub fn name(self) -> &'static str {
        match self {
            HcInit::Identity => "identity",
            HcInit::ZeroBias => "zero-bias",
        }
    }
}

/// How the n streams become the head's one vector (SPEC §6.2).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum HcCollapse {
    /// The mixing's own (SPEC §6.12): HC `sum`, mHC `head`, mHC-lite `norm-then-sum`.
    #[default]
    #[serde(rename = "auto")]
    Auto,
    /// Σ_j x_j, then the final Norm (HC).
    #[serde(rename = "sum")]
    Sum,
    /// Σ_j q_j x_j with learned gates q, then the final Norm (DeepSeek-V4's `hc_head`).
    #[serde(rename = "head")]
    Head,
    /// The final Norm of each stream, then their sum (mHC-lite's code).
    #[serde(rename = "norm-then-sum")]
    NormThenSum,
}

impl HcCollapse {
    pub fn name(self) -> &'static str {
        match self {
            HcCollapse::Auto => "auto",
            HcCollapse::Sum => "sum",
            HcCollapse::Head => "head",
            HcCollapse::NormThenSum => "norm-then-sum",
        }
    }
}

/// A hyper-connected model's sizes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HcConfig {
    pub vocab: usize,
    #[serde(alias = "seq_len")]
    pub context: usize,
    /// D, one stream's width.
    pub d_model: usize,
    pub n_layers: usize,
    pub n_heads: usize,
    pub head_dim: usize,
    pub d_ff: usize,
    /// n, the streams.
    pub streams: usize,
    pub mixing: HcMixing,
    /// Sinkhorn's rounds (DeepSeek-V4: 20); unused by mHC-lite.
    pub sinkhorn_iters: u32,
    /// How the gates start (SPEC §6.12: `identity`).
    #[serde(default)]
    pub stream_init: HcInit,
    /// The collapse before the head.
    #[serde(default)]
    pub collapse: HcCollapse,
    pub norm: Norm,
    pub norm_eps: f32,
    pub init_std: f32,
    pub z_loss: f32,
}

/// A config that reroutes a transformer's residual (hyper-connections, AltUp, Attention
/// Residuals) keeps the transformer's own settings under their names: `rerouting!(t, { own })`
/// is `Self` with `t`'s and the config's `own` fields.
macro_rules! rerouting {
    ($t:expr, { $($own:tt)* }) => {{
        let t: &TransformerConfig = $t;
        Self {
            vocab: t.vocab,
            context: t.context,
            d_model: t.d_model,
            n_layers: t.n_layers,
            n_heads: t.n_heads,
            head_dim: t.head_dim,
            d_ff: t.d_ff,
            norm: t.norm,
            norm_eps: t.norm_eps,
            init_std: t.init_std,
            z_loss: t.z_loss,
            $($own)*
        }
    }};
}

/// Such a config's transformer, `rerouting!`'s inverse.
macro_rules! rerouted_transformer {
    () => {
        /// The transformer whose residual this config reroutes: each site's branch is its
        /// block's attention or FF, with the same maps, core and init; its counts are the base
        /// of this config's. The inverse of [`Self::widening`] (but for a norm ε it caps).
        pub fn transformer(&self) -> TransformerConfig {
            TransformerConfig {
                d_model: self.d_model,
                n_layers: self.n_layers,
                n_heads: self.n_heads,
                head_dim: self.head_dim,
                d_ff: self.d_ff,
                norm: self.norm,
                norm_eps: self.norm_eps,
                attn_layer_scale: false,
                scaled_output_init: true,
                init_std: self.init_std,
                weight_init: WeightInit::FanIn,
                z_loss: self.z_loss,
                ..TransformerConfig::tiny(self.vocab, self.context)
            }
        }
    };
}

impl HcConfig {
    /// The copy task's tiny model: the tiny transformer widened to 4 streams, 20 Sinkhorn rounds.
    pub fn tiny(vocab: usize, seq_len: usize) -> Self {
        Self::widening(&TransformerConfig::tiny(vocab, seq_len), 4, HcMixing::Mhc)
    }

    /// The transformer `t` with `streams` residual streams mixed by `mixing`: its sizes, norm
    /// and init, 20 Sinkhorn rounds, and the mixing's init and collapse (SPEC §6.12).
    pub fn widening(t: &TransformerConfig, streams: usize, mixing: HcMixing) -> Self {
        rerouting!(t, {
            streams,
            mixing,
            sinkhorn_iters: 20,
            stream_init: HcInit::Identity,
            collapse: HcCollapse::Auto,
        })
    }

    rerouted_transformer!();

    /// How the gates start.
    pub fn init(&self) -> HcInit {
        self.stream_init
    }

    /// The collapse before the head, `auto` resolved to the mixing's.
    pub fn collapse(&self) -> HcCollapse {
        match (self.collapse, self.mixing) {
            (HcCollapse::Auto, HcMixing::Hc) => HcCollapse::Sum,
            (HcCollapse::Auto, HcMixing::Mhc) => HcCollapse::Head,
            (HcCollapse::Auto, HcMixing::MhcLite) => HcCollapse::NormThenSum,
            (c, _) => c,
        }
    }

    pub fn validate(&self) -> Result<()> {
        let bad = |why: String| Err(ModelError::Config(why));
        if [
            self.vocab,
            self.context,
            self.d_model,
            self.n_layers,
            self.n_heads,
            self.head_dim,
            self.d_ff,
        ]
        .contains(&0)
        {
            return bad("every size of an mHC model must be at least 1".into());
        }
        let most = match self.mixing {
            HcMixing::Hc | HcMixing::Mhc => engine::ops::hyper::MAX_STREAMS,
            HcMixing::MhcLite => engine::ops::hyper::MAX_PERMUTED_STREAMS,
        };
        if !(1..=most).contains(&self.streams) {
            let mixing = self.mixing.name();
            return bad(format!(
                "streams must be 1 to {most} with mixing {mixing}, not {}",
                self.streams
            ));
        }
        if self.mixing == HcMixing::Hc && self.init() == HcInit::ZeroBias {
            return bad(
                "HC's gates are unconstrained: with b = 0 its pre would be 0; use stream_init identity \
                 (zero-bias is for mHC and mHC-lite)"
                    .into(),
            );
        }
        if self.mixing == HcMixing::Hc && self.collapse() == HcCollapse::Head {
            return bad("the head collapse's gates are mHC's; use collapse sum or norm-then-sum with HC".into());
        }
        let rounds = engine::ops::hyper::MAX_ITERS;
        if self.mixing == HcMixing::Mhc && !(1..=rounds).contains(&self.sinkhorn_iters) {
            return bad(format!(
                "sinkhorn_iters must be 1 to {rounds}, not {}",
                self.sinkhorn_iters
            ));
        }
        crate::param_sizes::hc_params(self)?.addressable()?;
        Ok(())
    }
}

/// Which sub-block an AltUp layer computes on (SPEC §7.2.2).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AltupActive {
    /// Layer ℓ computes on sub-block ℓ mod K, the paper's default: every sub-block is active
    /// once L ≥ K, which breaks their symmetry.
    #[default]
    Alternating,
    /// Every layer computes on sub-block 0: with the identity init the K − 1 others stay
    /// equal forever, effectively K = 2 (SPEC §7.2.4; the symmetry test).
    Fixed,
}

/// Which value of the active sub-block an AltUp layer computes on (SPEC §7.2.2, §7.2.3).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AltupInput {
    /// x_j before the prediction: the paper's (as CeresTrain implements it).
    #[default]
    Old,
    /// x̂_j, the prediction: Gemma 3n's. The two differ unless row j of P is e_j.
    Predicted,
}

/// AltUp, the paper variant (SPEC §7.2.2, §7.2.7): the transformer of D, H, D_h, D_FF and L
/// with a residual of K sub-blocks of D a token. Each layer computes on one sub-block and
/// predicts and corrects the others with static K×K and K scalars; the embedding is copied
/// into every sub-block and the head reads their sum.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AltupConfig {
    pub vocab: usize,
    #[serde(alias = "seq_len")]
    pub context: usize,
    /// D, one sub-block's width and the layers' width.
    pub d_model: usize,
    pub n_layers: usize,
    pub n_heads: usize,
    pub head_dim: usize,
    pub d_ff: usize,
    /// K, the sub-blocks: the residual is K·D a token.
    pub sub_blocks: usize,
    #[serde(default)]
    pub active: AltupActive,
    /// What the active layer computes on; older configs mean `old`.
    #[serde(default)]
    pub compute_on: AltupInput,
    pub norm: Norm,
    pub norm_eps: f32,
    pub init_std: f32,
    pub z_loss: f32,
}

/// The most sub-blocks an AltUp residual may have: Gemma 3n uses 4, the paper 2 to 8.
pub const MAX_SUB_BLOCKS: usize = 16;

impl AltupConfig {
    /// The copy task's tiny model: the tiny transformer with 4 sub-blocks.
    pub fn tiny(vocab: usize, seq_len: usize) -> Self {
        Self::widening(&TransformerConfig::tiny(vocab, seq_len), 4)
    }

    /// The transformer `t` with a residual of `sub_blocks` sub-blocks: its sizes, norm and init.
    pub fn widening(t: &TransformerConfig, sub_blocks: usize) -> Self {
        rerouting!(t, {
            sub_blocks,
            active: AltupActive::Alternating,
            compute_on: AltupInput::Old,
        })
    }

    rerouted_transformer!();

    /// j*(ℓ), the sub-block layer `layer` computes on.
    pub fn active(&self, layer: usize) -> usize {
        match self.active {
            AltupActive::Alternating => layer % self.sub_blocks,
            AltupActive::Fixed => 0,
        }
    }

    pub fn validate(&self) -> Result<()> {
        if !(1..=MAX_SUB_BLOCKS).contains(&self.sub_blocks) {
            return Err(ModelError::Config(format!(
                "sub_blocks must be 1 to {MAX_SUB_BLOCKS}, not {}",
                self.sub_blocks
            )));
        }
        self.transformer().validate()?;
        crate::param_sizes::altup_params(self)?.addressable().map(|_| ())
    }
}

/// Block Attention Residuals (Kimi, 2026; SPEC §7.3): the transformer of D, H, D_h, D_FF and L,
/// whose sites do not add to one stream but read a softmax over depth. The 2L sites fall into N
/// depth blocks of S = 2L/N; the embedding is source b_0, each finished block's outputs summed
/// are one more, and a site reads those and its own block's partial sum with a learned
/// pseudo-query (from 0: uniform weights, the transformer up to the norms' ε). The head reads
/// b_0 … b_N with its own.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AttnResConfig {
    pub vocab: usize,
    #[serde(alias = "seq_len")]
    pub context: usize,
    pub d_model: usize,
    pub n_layers: usize,
    pub n_heads: usize,
    pub head_dim: usize,
    pub d_ff: usize,
    /// N, the depth blocks: N divides 2L; N = 2L is Full AttnRes, N = 1 the transformer with
    /// the embedding kept apart.
    pub depth_blocks: usize,
    /// The keys each read scores: RMS-normalised (the paper's), or raw (its Table 4 ablation:
    /// +0.006 nats for Full and +0.004 for Block at 436M). Absent in configs written before.
    #[serde(default)]
    pub depth_keys: DepthKeys,
    pub norm: Norm,
    /// The branches' and the head's norm ε: uniform weights over n sources scale it by n²
    /// (SPEC §7.3.3), so the presets keep it at 1e-8 or below.
    pub norm_eps: f32,
    pub init_std: f32,
    pub z_loss: f32,
}

/// What a read over depth scores its sources by.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DepthKeys {
    /// (w ⊙ γ)·v_i / RMS(v_i): the keys RMS-normalised, with the gain γ (SPEC §7.3.4).
    #[default]
    Normed,
    /// (w ⊙ γ)·v_i: the paper's "no key norm" ablation (Table 4). γ stays, a second factor of
    /// the query, so that both forms count the same parameters.
    Raw,
}

impl DepthKeys {
    /// What a model's one-line description adds: nothing for the paper's normed keys.
    pub fn described(self) -> &'static str {
        match self {
            DepthKeys::Normed => "",
            DepthKeys::Raw => ", raw keys",
        }
    }
}

/// The keys' RMSNorm ε (tokenbender's).
pub const DEPTH_KEY_EPS: f32 = 1e-8;
/// The largest norm ε an AttnRes preset keeps.
pub const ATTNRES_NORM_EPS: f32 = 1e-8;

impl AttnResConfig {
    /// The copy task's tiny model: the tiny transformer, one depth block a layer.
    pub fn tiny(vocab: usize, seq_len: usize) -> Self {
        let t = TransformerConfig::tiny(vocab, seq_len);
        Self::widening(&t, t.n_layers)
    }

    /// The transformer `t` read over `depth_blocks` depth blocks: its sizes, norm (its ε capped
    /// at [`ATTNRES_NORM_EPS`]) and init.
    pub fn widening(t: &TransformerConfig, depth_blocks: usize) -> Self {
        Self {
            norm_eps: t.norm_eps.min(ATTNRES_NORM_EPS),
            ..rerouting!(t, { depth_blocks, depth_keys: DepthKeys::Normed })
        }
    }

    rerouted_transformer!();

    /// The paper's ≈ 8 depth blocks at L layers: the divisor of 2L nearest 8, the smaller of two.
    pub fn paper_blocks(n_layers: usize) -> usize {
        let sites = 2 * n_layers.max(1);
        (1..=sites)
            .filter(|&n| sites.is_multiple_of(n))
            .min_by_key(|&n| (n.abs_diff(8), n))
            .unwrap_or(1)
    }

    /// S, the sites a depth block holds.
    pub fn block_sites(&self) -> usize {
        2 * self.n_layers / self.depth_blocks.max(1)
    }

    /// Site `index` (0 … 2L − 1)'s depth block n (1 … N) and its place i in it (0 … S − 1).
    pub fn depth_block(&self, index: usize) -> (usize, usize) {
        let s = self.block_sites().max(1);
        (index / s + 1, index % s)
    }

    /// The sources site `index` reads: b_0 … b_{n−1}, and b_n's partial sum past its first site.
    pub fn sources(&self, index: usize) -> usize {
        let (n, i) = self.depth_block(index);
        n + usize::from(i > 0)
    }

    pub fn validate(&self) -> Result<()> {
        let (l, n) = (self.n_layers, self.depth_blocks);
        if n == 0 || n > 2 * l || (2 * l) % n != 0 || n + 1 > engine::ops::depth::MAX_SOURCES {
            return Err(ModelError::Config(format!(
                "depth_blocks must divide 2·n_layers = {} and be at most {}, not {n}",
                2 * l,
                (2 * l).min(engine::ops::depth::MAX_SOURCES - 1)
            )));
        }
        self.transformer().validate()?;
        crate::param_sizes::attnres_params(self)?.addressable().map(|_| ())
    }
}

/// Which architecture, with its config.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "arch", rename_all = "lowercase")]
pub enum ModelConfig {
    Transformer(TransformerConfig),
    Rmt(RmtConfig),
    MemoryFormer(MemoryFormerConfig),
    Hybrid(HybridConfig),
    Hc(HcConfig),
    Altup(AltupConfig),
    AttnRes(AttnResConfig),
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
    /// The numeric class of the matrix products (`engine::precision`): strict f32, or fast
    /// (f16 multiplicands into f32 sums on a GPU's cooperative matrices). Absent in configs from
    /// before it: strict.
    #[serde(default, with = "precision_name")]
    pub precision: engine::Precision,
    /// The steps at which `resmem train --resume DIR --steps N` extended the run: each starts
    /// a new cycle of the schedule (warmup, then cosine) that ends at the next one or at
    /// `steps`. Empty for a run never extended, and absent from its TOML.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub restarts: Vec<usize>,
    /// The run or parameter file the weights start from (`resmem train --init-from`), in place
    /// of the seed's initialisation: fine-tuning. The optimiser and schedule start afresh.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub init_from: Option<String>,
}

/// A precision class as its name in TOML (`"strict"`, `"fast"`).
mod precision_name {
    use serde::{de::Error, Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(p: &engine::Precision, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(p.name())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<engine::Precision, D::Error> {
        String::deserialize(d)?.parse().map_err(D::Error::custom)
    }
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
            precision: engine::Precision::Strict,
            restarts: Vec::new(),
            init_from: None,
        }
    }
}

impl TrainConfig {
    /// The schedule's cycle boundaries: 0, each restart, then `steps`.
    pub fn cycles(&self) -> Vec<usize> {
        std::iter::once(0)
            .chain(self.restarts.iter().copied())
            .chain([self.steps])
            .collect()
    }

    /// This config extended to `steps` (more than it has): a new cycle of the schedule from
    /// its current end.
    pub fn extended(&self, steps: usize) -> Self {
        let mut restarts = self.restarts.clone();
        restarts.push(self.steps);
        Self {
            steps,
            restarts,
            ..self.clone()
        }
    }

    /// Whether this config is `earlier`, or `earlier` extended (once or more): what a
    /// checkpoint written before an extension needs to resume under it.
    pub fn continues(&self, earlier: &Self) -> bool {
        let n = earlier.restarts.len();
        let ended_at = self.restarts.get(n).copied().unwrap_or(self.steps);
        let same_otherwise = Self {
            steps: self.steps,
            restarts: self.restarts.clone(),
            ..earlier.clone()
        } == *self;
        self.restarts.starts_with(&earlier.restarts) && earlier.steps == ended_at && same_otherwise
    }

    pub fn validate(&self) -> Result<()> {
        require_positive(&[("batch", self.batch), ("steps", self.steps)])?;
        if self.cycles().windows(2).any(|w| w[0] >= w[1]) {
            return Err(ModelError::Config(format!(
                "train.restarts = {:?} must rise from above 0 to below steps = {}",
                self.restarts, self.steps
            )));
        }
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
