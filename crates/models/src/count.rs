//! Parameter and forward-FLOP counts per sequence of N tokens: the paper's Table 7 formulas
//! (with the V·D correction of SPEC §2) and the exact count of the model as built.
//!
//! Every count is checked: a config whose counts overflow u64 is an error naming the setting to
//! shrink (the `try_` functions), never a wrapped number.
//!
//! The exact count takes the parameters from the checked closed form of the model's own layout
//! (`memory::*_params`, tested equal to `layout().count()`), norm gains included, and
//! the FLOPs from the forward as written: 2 per multiply-add of every matrix product, retrieval,
//! storage and attention product, over the causal triangle only, plus 3 per attention
//! probability (the paper's softmax term). Norms, GELU and the loss are left out, as the paper
//! leaves them out.

use crate::memory;
use crate::{MemoryFormerConfig, ModelError, Position, Result, RmtConfig, TransformerConfig};
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
        ("seq_len", cfg.seq_len),
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
    let params = memory::transformer_params(cfg)
        .map(|p| p.count)
        .or_else(|_| N(None).get(&settings))?;
    Ok(Counts {
        params,
        params_paper: (d * (l * (n(4u8) * h * dh + n(2u8) * f) + v)).get(&settings)?,
        flops_fwd: (l * layer + n(2u8) * n_ * v * d).get(&settings)?,
        // 4N(V·D + L·D(2·D_h·H + D_FF) + L(N·D_h·H + ¾·N·H)); 4N·L·¾·N·H = 3·L·N²·H.
        flops_fwd_paper: (n(4u8) * n_ * (v * d + l * d * (n(2u8) * dh * h + f) + l * n_ * dh * h)
            + n(3u8) * l * n_ * n_ * h)
            .get(&settings)?,
    })
}

/// The RMT at sequence length `cfg.seq_len`; u64::MAX everywhere if a count overflows (see
/// [`try_rmt`] for the error).
pub fn rmt(cfg: &RmtConfig) -> Counts {
    try_rmt(cfg).unwrap_or(Counts::SATURATED)
}

/// The RMT at sequence length `cfg.seq_len`, or an error naming the setting that makes a count
/// overflow.
pub fn try_rmt(cfg: &RmtConfig) -> Result<Counts> {
    let settings = [
        ("vocab", cfg.vocab),
        ("seq_len", cfg.seq_len),
        ("d_k", cfg.d_k),
        ("d_v", cfg.d_v),
        ("rank", cfg.rank),
        ("layers", cfg.n_layers),
        ("d_ff", cfg.d_ff),
    ];
    let [v, n_, dk, dv, r, l, f] = settings.map(|s| dim(s.1));
    let causal = n_ * (n_ + n(1u8)) / n(2u8);
    // One retrieval or storage of R vectors over N tokens.
    let rs = n(2u8) * n_ * r * dk * dv;
    let positions = match cfg.position {
        Position::Learned => n(1u8),
        Position::Alibi => n(0u8),
    };
    let embedding = rs * (n(1u8) + positions);
    let attention = n(3u8) * rs + r * (n(4u8) * dv * causal + n(3u8) * causal) + rs;
    let ff = rs + n(4u8) * n_ * r * dv * f + rs;
    let unembedding = rs + n(2u8) * n_ * v * r * dv;
    let params = memory::rmt_params(cfg)
        .map(|p| p.count)
        .or_else(|_| N(None).get(&settings))?;
    Ok(Counts {
        params,
        params_paper: (r * (n(2u8) * dk * (n(3u8) * l + n(1u8)) + dv * (n(2u8) * l * f + v + n_))).get(&settings)?,
        flops_fwd: (embedding + l * (attention + ff) + unembedding).get(&settings)?,
        flops_fwd_paper: (n(6u8) * n_ * r * dk * dv * (n(1u8) + l)
            + n_ * r * (n(4u8) * v * dv + l * (n(4u8) * n_ * dv + n(3u8) * n_ + n(4u8) * dv * f)))
            .get(&settings)?,
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
        ml2: mb(tau.saturating_add(2), d),
    }
}

/// One MemoryFormer block, or an error naming the setting that makes a count overflow.
pub fn try_memoryformer_block(cfg: &MemoryFormerConfig) -> Result<BlockCounts> {
    let settings = [
        ("seq_len", cfg.seq_len),
        ("d_model", cfg.d_model),
        ("heads", cfg.n_heads),
        ("tau", cfg.tau),
    ];
    let [s, d, h, tau] = settings.map(|x| dim(x.1));
    let (k, dh) = (dim(cfg.chunks()), dim(cfg.d_hidden()));
    // (bits hashed per chunk, output width) of ML_QKV, ML1, ML2.
    let layers = [(tau, n(3u8) * d), (tau, dh), (tau + n(2u8), d)];
    let per_row = layers
        .iter()
        .fold(n(0u8), |acc, &(bits, out)| acc + k * out + out + n(2u8) * k * bits);
    let causal = s * (s + n(1u8)) / n(2u8);
    let attention = n(2u8) * d * causal + n(3u8) * h * causal;
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
