//! Parameter and forward-FLOP counts per sequence of N tokens: the paper's Table 7 formulas
//! (with the V·D correction of SPEC §2) and the exact count of the model as built.
//!
//! The exact count takes the parameters from the model's own layout, norm gains included, and
//! the FLOPs from the forward as written: 2 per multiply-add of every matrix product, retrieval,
//! storage and attention product, over the causal triangle only, plus 3 per attention
//! probability (the paper's softmax term). Norms, GELU and the loss are left out, as the paper
//! leaves them out.

use crate::{rmt, transformer, MemoryFormerConfig, Position, RmtConfig, TransformerConfig};
use serde::Serialize;

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

/// The transformer at sequence length `cfg.seq_len`.
pub fn transformer(cfg: &TransformerConfig) -> Counts {
    let [v, n, d, l, h, dh, f] = [
        cfg.vocab,
        cfg.seq_len,
        cfg.d_model,
        cfg.n_layers,
        cfg.n_heads,
        cfg.head_dim,
        cfg.d_ff,
    ]
    .map(|x| x as u64);
    let causal = n * (n + 1) / 2;
    let attention = h * (2 * 2 * dh * causal + 3 * causal);
    let layer = 2 * n * d * 3 * h * dh + attention + 2 * n * h * dh * d + 2 * 2 * n * d * f;
    Counts {
        params: transformer::layout(cfg).count() as u64,
        params_paper: d * (l * (4 * h * dh + 2 * f) + v),
        flops_fwd: l * layer + 2 * n * v * d,
        // 4N(V·D + L·D(2·D_h·H + D_FF) + L(N·D_h·H + ¾·N·H)); 4N·L·¾·N·H = 3·L·N²·H.
        flops_fwd_paper: 4 * n * (v * d + l * d * (2 * dh * h + f) + l * n * dh * h) + 3 * l * n * n * h,
    }
}

/// The RMT at sequence length `cfg.seq_len`.
pub fn rmt(cfg: &RmtConfig) -> Counts {
    let [v, n, dk, dv, r, l, f] = [
        cfg.vocab,
        cfg.seq_len,
        cfg.d_k,
        cfg.d_v,
        cfg.rank,
        cfg.n_layers,
        cfg.d_ff,
    ]
    .map(|x| x as u64);
    let causal = n * (n + 1) / 2;
    // One retrieval or storage of R vectors over N tokens.
    let rs = 2 * n * r * dk * dv;
    let positions = match cfg.position {
        Position::Learned => 1,
        Position::Alibi => 0,
    };
    let embedding = rs * (1 + positions);
    let attention = 3 * rs + r * (2 * 2 * dv * causal + 3 * causal) + rs;
    let ff = rs + 2 * 2 * n * r * dv * f + rs;
    let unembedding = rs + 2 * n * v * r * dv;
    Counts {
        params: rmt::layout(cfg).count() as u64,
        params_paper: r * (2 * dk * (3 * l + 1) + dv * (2 * l * f + v + n)),
        flops_fwd: embedding + l * (attention + ff) + unembedding,
        flops_fwd_paper: 6 * n * r * dk * dv * (1 + l) + n * r * (4 * v * dv + l * (4 * n * dv + 3 * n + 4 * dv * f)),
    }
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

pub fn memoryformer_block(cfg: &MemoryFormerConfig) -> BlockCounts {
    let [s, d, h, k, tau, dh] = [
        cfg.seq_len,
        cfg.d_model,
        cfg.n_heads,
        cfg.chunks(),
        cfg.tau,
        cfg.d_hidden(),
    ]
    .map(|x| x as u64);
    // (bits hashed per chunk, output width) of ML_QKV, ML1, ML2.
    let layers = [(tau, 3 * d), (tau, dh), (tau + 2, d)];
    let per_row: u64 = layers.iter().map(|&(bits, out)| k * out + out + 2 * k * bits).sum();
    let causal = s * (s + 1) / 2;
    let attention = 2 * d * causal + 3 * h * causal;
    let mb = |bits: u64, out: u64| (k * (1 << bits) * out * 2) as f64 / 1e6;
    BlockCounts {
        block_flops_paper: 2 * s * s * d + 6 * k * s * d,
        block_flops_no_attn_paper: 6 * k * s * d,
        dense_block_flops_paper: 2 * s * s * d + 12 * s * d * d,
        dense_block_flops_no_attn_paper: 12 * s * d * d,
        block_flops: attention + s * per_row,
        block_flops_no_attn: s * per_row,
        table_mb_f16: TableMemory {
            q: mb(tau, d),
            k: mb(tau, d),
            v: mb(tau, d),
            ml1: mb(tau, dh),
            ml2: mb(tau + 2, d),
        },
    }
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
