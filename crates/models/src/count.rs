//! Parameter and forward-FLOP counts per sequence of N tokens: the paper's Table 7 formulas
//! (with the V·D correction of SPEC §2; for the hybrid, SPEC §5's change of them) and the exact
//! count of the model as built.
//!
//! Every count is checked: a config whose counts overflow u64 is an error naming the setting to
//! shrink (the `try_` functions), never a wrapped number.
//!
//! The exact count takes the parameters from the checked closed form of the model's own layout
//! (`param_sizes::*_params`, tested equal to `layout().count()`), norm gains included, and
//! the FLOPs from the forward as written: 2 per multiply-add of every matrix product, retrieval,
//! storage and attention product, over the causal triangle only, plus 3 per attention
//! probability (the paper's softmax term). Norms, GELU and the loss are left out, as the paper
//! leaves them out.

use crate::param_sizes;
use crate::{
    AltupConfig, AttnResConfig, HcCollapse, HcConfig, HcMixing, HybridConfig, MemoryFormerConfig, ModelConfig,
    ModelError, Position, Result, RmtConfig, TransformerConfig, Trunk,
};
use serde::Serialize;
use std::ops::{Add, Div, Mul};

/// A count in checked arithmetic: None once any step overflows u128, so a formula reads as
/// written and is never silently wrapped.
#[derive(Clone, Copy, Debug)]
struct N(Option<u128>);

fn n(x: impl Into<u128>) -> N {
    N(Some(x.into()))
}

fn dim(x: usize) -> N {
    n(x as u64)
}

impl Add for N {
    type Output = N;
    fn add(self, o: N) -> N {
        N(self.0.zip(o.0).and_then(|(a, b)| a.checked_add(b)))
    }
}

impl Mul for N {
    type Output = N;
    fn mul(self, o: N) -> N {
        N(self.0.zip(o.0).and_then(|(a, b)| a.checked_mul(b)))
    }
}

impl Div for N {
    type Output = N;
    fn div(self, o: N) -> N {
        N(self.0.zip(o.0).and_then(|(a, b)| a.checked_div(b)))
    }
}

impl N {
    /// The value as a u64, or an error naming the largest of `settings` as the one to shrink.
    fn get(self, settings: &[(&str, usize)]) -> Result<u64> {
        if let Some(x) = self.0.and_then(|x| u64::try_from(x).ok()) {
            return Ok(x);
        }
        let (name, value) = settings
            .iter()
            .max_by_key(|s| s.1)
            .copied()
            .unwrap_or(("a dimension", 0));
        Err(ModelError::Config(format!(
            "the parameter and FLOP counts overflow 64-bit integers; {name} = {value} is too large, make it smaller"
        )))
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Counts {
    /// Parameters of the model as built.
    pub params: u64,
    /// The paper's Table 7 parameter formula.
    pub params_paper: u64,
    /// Forward FLOPs per sequence of the model as built.
    pub flops_fwd: u64,
    /// The paper's Table 7 FLOP formula.
    pub flops_fwd_paper: u64,
}

impl Counts {
    /// Every count at u64::MAX: what the infallible counters show for a config that overflows.
    const SATURATED: Counts = Counts {
        params: u64::MAX,
        params_paper: u64::MAX,
        flops_fwd: u64::MAX,
        flops_fwd_paper: u64::MAX,
    };
}

/// The transformer at sequence length `cfg.seq_len`; u64::MAX everywhere if a count overflows
/// (see [`try_transformer`] for the error).
pub fn transformer(cfg: &TransformerConfig) -> Counts {
    try_transformer(cfg).unwrap_or(Counts::SATURATED)
}

/// The transformer at sequence length `cfg.seq_len`, or an error naming the setting that makes
/// a count overflow.
pub fn try_transformer(cfg: &TransformerConfig) -> Result<Counts> {
    let settings = [
        ("vocab", cfg.vocab),
        ("context", cfg.context),
        ("d_model", cfg.d_model),
        ("layers", cfg.n_layers),
        ("heads", cfg.n_heads),
        ("head_dim", cfg.head_dim),
        ("d_ff", cfg.d_ff),
    ];
    let [v, n_, d, l, h, dh, f] = settings.map(|s| dim(s.1));
    let causal = n_ * (n_ + n(1u8)) / n(2u8);
    let attention = h * (n(4u8) * dh * causal + n(3u8) * causal);
    let layer = n(6u8) * n_ * d * h * dh + attention + n(2u8) * n_ * h * dh * d + n(4u8) * n_ * d * f;
    let params = param_sizes::transformer_params(cfg)
        .map(|p| p.count)
        .or_else(|_| N(None).get(&settings))?;
    // The value residual mixes the L − 1 later layers' values with layer 0's: as built, a
    // token's 3×3 constants times two 3×H·D_h blocks (18·H·D_h multiply-adds); as the paper
    // counts it, 2·H·D_h.
    let mixed = dim(match cfg.value_residual {
        crate::ValueResidual::Off => 0,
        crate::ValueResidual::Half | crate::ValueResidual::Learnable => cfg.n_layers.saturating_sub(1),
    });
    // The learnable mix's λ_n, one a mixed layer.
    let learned = match cfg.value_residual {
        crate::ValueResidual::Off | crate::ValueResidual::Half => n(0u8),
        crate::ValueResidual::Learnable => mixed,
    };
    Ok(Counts {
        params,
        params_paper: (d * (l * (n(4u8) * h * dh + n(2u8) * f) + v) + learned).get(&settings)?,
        flops_fwd: (l * layer + n(2u8) * n_ * v * d + n(36u8) * mixed * n_ * h * dh).get(&settings)?,
        // 4N(V·D + L·D(2·D_h·H + D_FF) + L(N·D_h·H + ¾·N·H)); 4N·L·¾·N·H = 3·L·N²·H.
        flops_fwd_paper: (n(4u8) * n_ * (v * d + l * d * (n(2u8) * dh * h + f) + l * n_ * dh * h)
            + n(3u8) * l * n_ * n_ * h
            + n(4u8) * mixed * n_ * h * dh)
            .get(&settings)?,
    })
}

/// The settings an overflowing count of a residual-matrix model may name: the trunk's and the
/// core's `core`.
fn trunk_settings(t: &Trunk, core: (&'static str, usize)) -> [(&'static str, usize); 7] {
    [
        ("vocab", t.vocab),
        ("context", t.context),
        ("d_k", t.d_k),
        ("d_v", t.d_v),
        ("rank", t.rank),
        ("layers", t.n_layers),
        core,
    ]
}

/// Table 7's RMT formulas without the feed-forward core's terms: (parameters, FLOPs).
fn trunk_paper(t: &Trunk) -> (N, N) {
    let [v, n_, dk, dv, r, l] = [t.vocab, t.context, t.d_k, t.d_v, t.rank, t.n_layers].map(dim);
    let params = r * (n(2u8) * dk * (n(3u8) * l + n(1u8)) + dv * (v + n_));
    let flops =
        n(6u8) * n_ * r * dk * dv * (n(1u8) + l) + n_ * r * (n(4u8) * v * dv + l * (n(4u8) * n_ * dv + n(3u8) * n_));
    (params, flops)
}

/// A residual-matrix model's forward FLOPs per sequence as built, around a feed-forward core
/// of `core` FLOPs per layer and sequence.
fn residual_matrix_flops(t: &Trunk, core: N) -> N {
    let [v, n_, dk, dv, r, l] = [t.vocab, t.context, t.d_k, t.d_v, t.rank, t.n_layers].map(dim);
    let causal = n_ * (n_ + n(1u8)) / n(2u8);
    // One retrieval or storage of R vectors over N tokens.
    let rs = n(2u8) * n_ * r * dk * dv;
    let positions = match t.position {
        Position::Learned => n(1u8),
        Position::Alibi => n(0u8),
    };
    let embedding = rs * (n(1u8) + positions);
    let attention = n(3u8) * rs + r * (n(4u8) * dv * causal + n(3u8) * causal) + rs;
    // The FF adapters' retrieval and storage around the core.
    let ff = rs + core + rs;
    let unembedding = rs + n(2u8) * n_ * v * r * dv;
    embedding + l * (attention + ff) + unembedding
}

/// The RMT at sequence length `cfg.seq_len`; u64::MAX everywhere if a count overflows (see
/// [`try_rmt`] for the error).
pub fn rmt(cfg: &RmtConfig) -> Counts {
    try_rmt(cfg).unwrap_or(Counts::SATURATED)
}

/// The RMT at sequence length `cfg.seq_len`, or an error naming the setting that makes a count
/// overflow.
pub fn try_rmt(cfg: &RmtConfig) -> Result<Counts> {
    let t = cfg.trunk();
    let settings = trunk_settings(&t, ("d_ff", cfg.d_ff));
    let [n_, dv, r, l, f] = [t.context, t.d_v, t.rank, t.n_layers, cfg.d_ff].map(dim);
    // W1 and W2: 2·R·D_v·D_FF multiply-adds per token.
    let dense = n(4u8) * n_ * r * dv * f;
    let (trunk_params, trunk_flops) = trunk_paper(&t);
    let params = param_sizes::rmt_params(cfg)
        .map(|p| p.count)
        .or_else(|_| N(None).get(&settings))?;
    Ok(Counts {
        params,
        params_paper: (trunk_params + n(2u8) * l * r * dv * f).get(&settings)?,
        flops_fwd: residual_matrix_flops(&t, dense).get(&settings)?,
        flops_fwd_paper: (trunk_flops + l * dense).get(&settings)?,
    })
}

/// The hybrid's counts: the RMT's kinds, and its hash tables.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct HybridCounts {
    #[serde(flatten)]
    pub counts: Counts,
    /// Values in the hash tables of every layer, a part of `params`.
    pub table_params: u64,
    /// Their memory in MB (10^6 bytes) of f32, as resmem stores them.
    pub table_mb_f32: f64,
}

/// 2^bits, None past u128.
fn pow2(bits: N) -> N {
    N(bits
        .0
        .and_then(|b| u32::try_from(b).ok())
        .and_then(|b| 1u128.checked_shl(b)))
}

/// FLOPs of one row through one Memory Layer of K tables hashing `bits` bits into `out`
/// values, at `mac` FLOPs per multiply-add: K·out to weigh and add the rows read, `out` for
/// the bias, 2 per hashed value for the sign and p(z).
fn memory_layer_row(mac: N, k: N, bits: N, out: N) -> N {
    mac * k * out + out + n(2u8) * k * bits
}

/// The hybrid at sequence length `cfg.seq_len`; u64::MAX everywhere if a count overflows (see
/// [`try_hybrid`] for the error).
pub fn hybrid(cfg: &HybridConfig) -> HybridCounts {
    try_hybrid(cfg).unwrap_or(HybridCounts {
        counts: Counts::SATURATED,
        table_params: u64::MAX,
        table_mb_f32: f64::INFINITY,
    })
}

/// The hybrid at sequence length `cfg.seq_len` (SPEC §5), or an error naming the setting that
/// makes a count overflow. Its memory block replaces the RMT's W1 and W2:
/// - paper: Table 7's RMT formulas without the two FF products, plus per layer the tables
///   `K·2^τ·(τ+e)K + K·2^(τ+e)·d` (e = 2 in the paper), the biases and the inner norm's gain,
///   and the memory block's `K·(τ+e)K + K·d` multiply-adds per token, at 2 FLOPs each as everywhere in the RMT's count;
/// - as built: the layout's parameters, and per row and Memory Layer the multiply-adds, the
///   bias and the hashing (as MemoryFormer's block is counted).
pub fn try_hybrid(cfg: &HybridConfig) -> Result<HybridCounts> {
    // τ sizes the tables exponentially: an overflow it causes is τ's to name, not the largest
    // setting's.
    cfg.hashing().validate("rank × d_v", cfg.width())?;
    let t = cfg.trunk();
    let settings = trunk_settings(&t, ("tau", cfg.tau));
    let [n_, l, tau, d, k, dh] = [
        t.context,
        t.n_layers,
        cfg.tau,
        cfg.width(),
        cfg.chunks(),
        cfg.d_hidden(),
    ]
    .map(dim);
    let tau2 = dim(cfg.hashing().ml2_bits());
    let tables = k * pow2(tau) * dh + k * pow2(tau2) * d;
    let macs = k * dh + k * d;
    let rows = memory_layer_row(n(2u8), k, tau, dh) + memory_layer_row(n(2u8), k, tau2, d);
    let (trunk_params, trunk_flops) = trunk_paper(&t);
    let params = param_sizes::hybrid_params(cfg)
        .map(|p| p.count)
        .or_else(|_| N(None).get(&settings))?;
    let table_params = (l * tables).get(&settings)?;
    Ok(HybridCounts {
        counts: Counts {
            params,
            // Biases of (τ+e)K and d, and the inner norm's gain of (τ+e)K.
            params_paper: (trunk_params + l * (tables + dh + d + dh)).get(&settings)?,
            flops_fwd: residual_matrix_flops(&t, n_ * rows).get(&settings)?,
            flops_fwd_paper: (trunk_flops + l * n(2u8) * n_ * macs).get(&settings)?,
        },
        table_params,
        table_mb_f32: table_params as f64 * 4.0 / 1e6,
    })
}

/// One MemoryFormer block at sequence length s, in the MemoryFormer paper's convention: one
/// FLOP per multiply-accumulate (so its standard block is `2s²d + 12sd²`).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct BlockCounts {
    /// `2s²d + 6Ksd`
    pub block_flops_paper: u64,
    /// `6Ksd`
    pub block_flops_no_attn_paper: u64,
    /// The dense block of the same width: `2s²d + 12sd²`.
    pub dense_block_flops_paper: u64,
    /// `12sd²`
    pub dense_block_flops_no_attn_paper: u64,
    /// The block as built: causal attention (its products over the triangle, 3 per
    /// probability for the softmax) and the Memory Layers (K·d_out per row to weigh and add the
    /// rows read, d_out for the bias, 2 per hashed value for the sign and p(z)).
    pub block_flops: u64,
    pub block_flops_no_attn: u64,
    /// Table memory of each Memory Layer in MB (10^6 bytes) of f16: K·2^τ·d_out·2.
    pub table_mb_f16: TableMemory,
}

#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct TableMemory {
    pub q: f64,
    pub k: f64,
    pub v: f64,
    pub ml1: f64,
    pub ml2: f64,
}

/// One MemoryFormer block; u64::MAX in every FLOP count if one overflows (see
/// [`try_memoryformer_block`] for the error).
pub fn memoryformer_block(cfg: &MemoryFormerConfig) -> BlockCounts {
    try_memoryformer_block(cfg).unwrap_or(BlockCounts {
        block_flops_paper: u64::MAX,
        block_flops_no_attn_paper: u64::MAX,
        dense_block_flops_paper: u64::MAX,
        dense_block_flops_no_attn_paper: u64::MAX,
        block_flops: u64::MAX,
        block_flops_no_attn: u64::MAX,
        table_mb_f16: table_memory(cfg),
    })
}

/// Table memory in MB of f16, real-valued: it cannot overflow.
fn table_memory(cfg: &MemoryFormerConfig) -> TableMemory {
    let (k, d, dh) = (cfg.chunks() as f64, cfg.d_model as f64, cfg.d_hidden() as f64);
    let mb = |bits: usize, out: f64| k * 2f64.powi(bits.min(1024) as i32) * out * 2.0 / 1e6;
    let tau = cfg.tau;
    TableMemory {
        q: mb(tau, d),
        k: mb(tau, d),
        v: mb(tau, d),
        ml1: mb(tau, dh),
        ml2: mb(cfg.hashing().ml2_bits(), d),
    }
}

/// One MemoryFormer block, or an error naming the setting that makes a count overflow.
pub fn try_memoryformer_block(cfg: &MemoryFormerConfig) -> Result<BlockCounts> {
    let settings = [
        ("context", cfg.context),
        ("d_model", cfg.d_model),
        ("heads", cfg.n_heads),
        ("tau", cfg.tau),
    ];
    let [s, d, _, _] = settings.map(|x| dim(x.1));
    let k = dim(cfg.chunks());
    let (attention, per_row) = memoryformer_block_parts(cfg, n(1u8));
    let get = |x: N| x.get(&settings);
    Ok(BlockCounts {
        block_flops_paper: get(n(2u8) * s * s * d + n(6u8) * k * s * d)?,
        block_flops_no_attn_paper: get(n(6u8) * k * s * d)?,
        dense_block_flops_paper: get(n(2u8) * s * s * d + n(12u8) * s * d * d)?,
        dense_block_flops_no_attn_paper: get(n(12u8) * s * d * d)?,
        block_flops: get(attention + s * per_row)?,
        block_flops_no_attn: get(s * per_row)?,
        table_mb_f16: table_memory(cfg),
    })
}

/// One MemoryFormer block at `mac` FLOPs per multiply-add: its causal attention per sequence
/// (QKᵀ and AV over the triangle, 3 per probability for the softmax) and its Memory Layers per
/// row (ML_QKV, ML1 and ML2).
fn memoryformer_block_parts(cfg: &MemoryFormerConfig, mac: N) -> (N, N) {
    let [s, d, h, tau] = [cfg.context, cfg.d_model, cfg.n_heads, cfg.tau].map(dim);
    let (k, dh) = (dim(cfg.chunks()), dim(cfg.d_hidden()));
    // (bits hashed per chunk, output width) of ML_QKV, ML1, ML2.
    let layers = [(tau, n(3u8) * d), (tau, dh), (dim(cfg.hashing().ml2_bits()), d)];
    let per_row = layers
        .iter()
        .fold(n(0u8), |acc, &(bits, out)| acc + memory_layer_row(mac, k, bits, out));
    let causal = s * (s + n(1u8)) / n(2u8);
    let attention = mac * n(2u8) * d * causal + n(3u8) * h * causal;
    (attention, per_row)
}

/// What a hyper-connected model costs beside the transformer of its D, H, D_h, D_FF and L
/// (SPEC §6.8).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct HcCounts {
    /// The whole model: the transformer's counts plus its sites', as built and in the papers'
    /// conventions; FLOPs per sequence of seq_len tokens, products only (2 a multiply-add).
    pub model: Counts,
    /// One site's parameters as built: Φ, its bias and α, (W)(n·D + 1) + 3; HC's W (n + 2 × D),
    /// bias, α and its norm's gain, (n + 3)·D + n(n + 2) + 3.
    pub site_params: u64,
    /// The papers' conventions: mHC's Eq. 7 with the RMSNorm gain counted apart, n·D·W + n·D +
    /// W + 3; HC's Eq. 25 with one s_α, (n + 3)·D + n(n + 2) + 2.
    pub site_params_paper: u64,
    /// One site's multiply-adds a token: the projection (mHC W·n·D, HC n(n + 2)·D), the norm,
    /// the collapse, the mixing and the write-back: (n³ + 3n² + 3n)·D for Sinkhorn, (2n² + 5n)·D
    /// for HC; the gates' own arithmetic not counted.
    pub site_macs: u64,
}

/// The counts of the model `cfg` describes.
pub fn try_hc(cfg: &HcConfig) -> Result<HcCounts> {
    let base = try_transformer(&cfg.transformer())?;
    let overflow = || ModelError::Config("the mHC model's counts overflow 64 bits".into());
    let (n, d, w) = (cfg.streams as u64, cfg.d_model as u64, cfg.gate_width() as u64);
    let sites = 2 * cfg.n_layers as u64;
    let nd = n.checked_mul(d).ok_or_else(overflow)?;
    // Φ (or W) with its bias and three scales, and HC's gain; the paper's convention.
    let (phi, gain, paper) = match cfg.mixing {
        HcMixing::Hc => ((n + 2) * d, d, -1i64),
        HcMixing::Mhc | HcMixing::MhcLite => (w.checked_mul(nd).ok_or_else(overflow)?, 0, nd as i64),
    };
    let site_params = (phi.checked_add(w + 3 + gain)).ok_or_else(overflow)?;
    let site_params_paper = site_params.checked_add_signed(paper).ok_or_else(overflow)?;
    let (rows, cols, k) = cfg.projection(1);
    let site_macs = ((rows * cols) as u64)
        .checked_mul(k as u64)
        .and_then(|x| x.checked_add(3 * nd + n * n * d))
        .ok_or_else(overflow)?;
    // The collapse before the head: the sum (n·D a token); the head's gates (Φ_h, n × n·D, its
    // bias and α, and x̂'s norm) before it; or a norm of each stream.
    let (collapse_params, collapse_macs) = match cfg.collapse() {
        HcCollapse::Sum | HcCollapse::Auto => (0, nd),
        HcCollapse::Head => {
            let phi = n.checked_mul(nd).ok_or_else(overflow)?;
            (phi + n + 1, phi + 2 * nd)
        }
        HcCollapse::NormThenSum => (0, 2 * nd),
    };
    // The expansion to n streams (n·D a token), the sites and the collapse.
    let macs = sites
        .checked_mul(site_macs)
        .and_then(|x| x.checked_add(nd + collapse_macs))
        .ok_or_else(overflow)?;
    let flops = (cfg.context as u64).checked_mul(2 * macs).ok_or_else(overflow)?;
    let add = |a: u64, b: u64| a.checked_add(b).ok_or_else(overflow);
    let params = sites.checked_mul(site_params).ok_or_else(overflow)?;
    let params_paper = sites.checked_mul(site_params_paper).ok_or_else(overflow)?;
    Ok(HcCounts {
        model: Counts {
            params: add(base.params, add(params, collapse_params)?)?,
            params_paper: add(base.params_paper, add(params_paper, collapse_params)?)?,
            flops_fwd: add(base.flops_fwd, flops)?,
            flops_fwd_paper: add(base.flops_fwd_paper, flops)?,
        },
        site_params,
        site_params_paper,
        site_macs,
    })
}

/// The counts of the model `cfg` describes: its transformer's, plus K² + K parameters a layer.
/// FLOPs as built count every product of a token's K×D state (a layer's 2K²D + 5KD
/// multiply-adds: the two reads of x_j, attention's copy of X with y added to x_j, P X, and
/// the FF's δ and g ⊗ δ; and the spread and the sum, KD each); in the paper's convention
/// (SPEC §7.2.6) a layer costs (K² + K + 1)D and the sum KD.
pub fn try_altup(cfg: &AltupConfig) -> Result<Counts> {
    let base = try_transformer(&cfg.transformer())?;
    let overflow = || ModelError::Config("the AltUp model's counts overflow 64 bits".into());
    let [k, d, l, n] = [cfg.sub_blocks, cfg.d_model, cfg.n_layers, cfg.context].map(|x| x as u64);
    // FLOPs a sequence: L layers of `layer` multiply-adds a token, and the ends' `ends`.
    let flops = |layer: u64, ends: u64| -> Result<u64> {
        let macs = l.checked_mul(layer).and_then(|m| m.checked_add(ends));
        macs.and_then(|m| m.checked_mul(2 * n)).ok_or_else(overflow)
    };
    let built = flops((2 * k * k + 5 * k) * d, 2 * k * d)?;
    let paper = flops((k * k + k + 1) * d, k * d)?;
    let params = l.checked_mul(k * k + k).ok_or_else(overflow)?;
    let add = |a: u64, b: u64| a.checked_add(b).ok_or_else(overflow);
    Ok(Counts {
        params: add(base.params, params)?,
        params_paper: add(base.params_paper, params)?,
        flops_fwd: add(base.flops_fwd, built)?,
        flops_fwd_paper: add(base.flops_fwd_paper, paper)?,
    })
}

/// The sources every depth read of the model `cfg` takes together, the head's included:
/// L(N + 3) + 1 (SPEC §7.3.5).
pub fn attnres_sources(cfg: &AttnResConfig) -> usize {
    (0..2 * cfg.n_layers).map(|s| cfg.sources(s)).sum::<usize>() + cfg.depth_blocks + 1
}

/// The counts of the model `cfg` describes: its transformer's, plus a pseudo-query and a key
/// gain (2D) at each of the 2L sites and at the head. In the paper's convention (SPEC §7.3.5) a
/// read of n sources costs 2nD multiply-adds (the logits, then the weighted sum), 2D(L(N + 3) + 1)
/// a token in all; as built it costs 3nD (the keys' squares too), and every write copies the
/// token's (N + 1)·D state with y added to a row, as does the embedding's spread.
pub fn try_attnres(cfg: &AttnResConfig) -> Result<Counts> {
    let base = try_transformer(&cfg.transformer())?;
    let overflow = || ModelError::Config("the AttnRes model's counts overflow 64 bits".into());
    let [d, l, n, rows] = [cfg.d_model, cfg.n_layers, cfg.context, cfg.depth_blocks + 1].map(|x| x as u64);
    let sources = attnres_sources(cfg) as u64;
    // FLOPs a sequence from multiply-adds a token.
    let flops = |macs: Option<u64>| macs.and_then(|m| m.checked_mul(2 * n)).ok_or_else(overflow);
    let writes = (2 * l + 1).checked_mul(rows).and_then(|w| w.checked_mul(d));
    let built = flops(
        sources
            .checked_mul(3 * d)
            .zip(writes)
            .and_then(|(r, w)| r.checked_add(w)),
    )?;
    let paper = flops(sources.checked_mul(2 * d))?;
    let params = (2 * l + 1).checked_mul(2 * d).ok_or_else(overflow)?;
    let add = |a: u64, b: u64| a.checked_add(b).ok_or_else(overflow);
    Ok(Counts {
        params: add(base.params, params)?,
        params_paper: add(base.params_paper, params)?,
        flops_fwd: add(base.flops_fwd, built)?,
        flops_fwd_paper: add(base.flops_fwd_paper, paper)?,
    })
}

/// A whole model as built at sequence length N = its context: parameters, and forward FLOPs
/// per sequence at 2 FLOPs per multiply-add for every architecture, so that models of different
/// kinds compare (a MemoryFormer's blocks converted from its paper's 1 per multiply-add).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct ModelCounts {
    pub params: u64,
    pub flops_fwd: u64,
}

impl ModelCounts {
    /// Forward FLOPs per token.
    pub fn flops_per_token(&self, seq_len: usize) -> f64 {
        self.flops_fwd as f64 / seq_len.max(1) as f64
    }
}

/// Any model's [`ModelCounts`], or an error naming the setting that makes a count overflow.
pub fn try_model(cfg: &ModelConfig) -> Result<ModelCounts> {
    let (params, flops_fwd) = match cfg {
        ModelConfig::Transformer(c) => try_transformer(c).map(|c| (c.params, c.flops_fwd))?,
        ModelConfig::Rmt(c) => try_rmt(c).map(|c| (c.params, c.flops_fwd))?,
        ModelConfig::Hybrid(c) => try_hybrid(c).map(|h| (h.counts.params, h.counts.flops_fwd))?,
        ModelConfig::Hc(c) => try_hc(c).map(|h| (h.model.params, h.model.flops_fwd))?,
        ModelConfig::Altup(c) => try_altup(c).map(|c| (c.params, c.flops_fwd))?,
        ModelConfig::AttnRes(c) => try_attnres(c).map(|c| (c.params, c.flops_fwd))?,
        ModelConfig::MemoryFormer(c) => try_memoryformer_model(c)?,
    };
    Ok(ModelCounts { params, flops_fwd })
}

/// A MemoryFormer as built: L blocks (attention over the causal triangle, 3 per probability,
/// and the Memory Layers' rows at 2 per multiply-add) and the dense LM head.
fn try_memoryformer_model(cfg: &MemoryFormerConfig) -> Result<(u64, u64)> {
    let settings = [
        ("vocab", cfg.vocab),
        ("context", cfg.context),
        ("d_model", cfg.d_model),
        ("layers", cfg.n_layers),
        ("heads", cfg.n_heads),
        ("tau", cfg.tau),
    ];
    let [v, s, d, l, _, _] = settings.map(|x| dim(x.1));
    let (attention, per_row) = memoryformer_block_parts(cfg, n(2u8));
    let params = param_sizes::memoryformer_params(cfg)
        .map(|p| p.count)
        .or_else(|_| N(None).get(&settings))?;
    let flops = (l * (attention + s * per_row) + n(2u8) * s * v * d).get(&settings)?;
    Ok((params, flops))
}

/// 1234567 → "1,234,567", for tables of counts.
pub fn thousands(x: u64) -> String {
    let s = x.to_string();
    let mut out = String::new();
    for (i, ch) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(ch);
    }
    out
}
