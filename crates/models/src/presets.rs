//! The paper's model dimensions (RMT paper App. C, Tables 8-10; GPT-2), as one flat set of
//! numbers from which each architecture is built, for `resmem count` and `analyze variance`.
//!
//! An RMT built from transformer dimensions takes R = H, D_v = D_h and D_k = D / D_h, so both
//! have the same residual size; a transformer built from RMT dimensions takes H = R, D_h = D_v
//! and D = R·D_v (the paper's footnote 3: "RMT's R·D_v equals transformer's D").
//! Every preset uses N = 512, the sequence length of the paper's experiments (App. C.1).

use crate::{Hashing, HybridConfig, ModelError, Norm, Position, Result, RmtConfig, TransformerConfig};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dims {
    pub vocab: usize,
    pub seq_len: usize,
    pub layers: usize,
    pub d_ff: usize,
    // The transformer's
    pub d_model: usize,
    pub heads: usize,
    pub head_dim: usize,
    // The RMT's
    pub d_k: usize,
    pub d_v: usize,
    pub rank: usize,
}

const GPT2_VOCAB: usize = 50257;
const PAPER_SEQ_LEN: usize = 512;

/// From transformer dimensions: R = H, D_v = D_h, D_k = D / D_h.
const fn from_transformer(layers: usize, d_model: usize, d_ff: usize, heads: usize, head_dim: usize) -> Dims {
    Dims {
        vocab: GPT2_VOCAB,
        seq_len: PAPER_SEQ_LEN,
        layers,
        d_ff,
        d_model,
        heads,
        head_dim,
        d_k: d_model / head_dim,
        d_v: head_dim,
        rank: heads,
    }
}

/// From RMT dimensions: H = R, D_h = D_v, D = R·D_v.
const fn from_rmt(layers: usize, d_k: usize, d_v: usize, rank: usize, d_ff: usize) -> Dims {
    Dims {
        vocab: GPT2_VOCAB,
        seq_len: PAPER_SEQ_LEN,
        layers,
        d_ff,
        d_model: rank * d_v,
        heads: rank,
        head_dim: d_v,
        d_k,
        d_v,
        rank,
    }
}

/// (name, where it comes from, dimensions)
pub const PRESETS: &[(&str, &str, Dims)] = &[
    ("gpt2-small", "GPT-2 small", from_transformer(12, 768, 3072, 12, 64)),
    ("gpt2-medium", "GPT-2 medium", from_transformer(24, 1024, 4096, 16, 64)),
    (
        "table8-49m",
        "RMT paper Table 8, transformer 49M",
        from_transformer(6, 384, 1536, 12, 32),
    ),
    (
        "table8-160m",
        "RMT paper Table 8, transformer 160M",
        from_transformer(12, 768, 3072, 12, 64),
    ),
    (
        "table8-260m",
        "RMT paper Table 8, transformer 260M",
        from_transformer(18, 896, 3584, 14, 64),
    ),
    (
        "table8-405m",
        "RMT paper Table 8, transformer 405M",
        from_transformer(24, 1024, 4096, 16, 64),
    ),
    (
        "table9-46m",
        "RMT paper Table 9, RMT 46M",
        from_rmt(6, 32, 32, 12, 1536),
    ),
    (
        "table9-134m",
        "RMT paper Table 9, RMT 134M",
        from_rmt(12, 32, 64, 12, 3072),
    ),
    // The source prints this row and the next column-shifted; SPEC §2 gives the reading.
    (
        "table9-206m",
        "RMT paper Table 9, RMT 206M",
        from_rmt(18, 48, 64, 14, 3584),
    ),
    (
        "table9-305m",
        "RMT paper Table 9, RMT 305M",
        from_rmt(24, 64, 64, 16, 4096),
    ),
    (
        "table10",
        "RMT paper Table 10: transformer 160M (D=768) and RMT 134M (D_k=32, D_v=64)",
        Dims {
            d_k: 32,
            ..from_transformer(12, 768, 3072, 12, 64)
        },
    ),
];

impl Dims {
    pub fn preset(name: &str) -> Result<Dims> {
        PRESETS
            .iter()
            .find(|(n, _, _)| *n == name)
            .map(|&(_, _, d)| d)
            .ok_or_else(|| {
                let names: Vec<&str> = PRESETS.iter().map(|(n, _, _)| *n).collect();
                ModelError::Config(format!("no preset named `{name}`; choose one of {}", names.join(", ")))
            })
    }

    /// The paper's transformer (App. C.1): LayerNorm, eps 1e-6, init std 0.02.
    pub fn transformer(&self) -> TransformerConfig {
        TransformerConfig {
            vocab: self.vocab,
            context: self.seq_len,
            d_model: self.d_model,
            n_layers: self.layers,
            n_heads: self.heads,
            head_dim: self.head_dim,
            d_ff: self.d_ff,
            norm: Norm::LayerNorm,
            norm_eps: 1e-6,
            init_std: 0.02,
            ..TransformerConfig::tiny(self.vocab, self.seq_len)
        }
    }

    /// The paper's RMT: learned positions (eq. 14), init std 0.02, the official code's norm.
    pub fn rmt(&self) -> RmtConfig {
        RmtConfig {
            d_k: self.d_k,
            d_v: self.d_v,
            rank: self.rank,
            n_layers: self.layers,
            d_ff: self.d_ff,
            position: Position::Learned,
            init_std: 0.02,
            ..RmtConfig::tiny(self.vocab, self.seq_len)
        }
    }

    /// The paper's RMT with a memory block of τ = 8 for its dense core (SPEC §5), as the
    /// MemoryFormer paper's models hash with τ = 8.
    pub fn hybrid(&self) -> HybridConfig {
        HybridConfig::new(self.rmt().trunk(), Hashing::paper(8))
    }
}

/// The dense baselines of the MemoryFormer paper (Table 1: Pythia-70M, -160M, -410M) at its
/// sequence length s = 2048; MemoryFormer tiny, small and base are built on them with τ = 8.
/// (name, d, L, H)
pub const PYTHIA: &[(&str, usize, usize, usize)] = &[
    ("pythia-70m", 512, 6, 8),
    ("pythia-160m", 768, 12, 12),
    ("pythia-410m", 1024, 24, 16),
];

/// The MemoryFormer built on the Pythia preset `name`.
pub fn memoryformer(name: &str) -> Result<crate::MemoryFormerConfig> {
    let &(_, d, l, h) = PYTHIA.iter().find(|p| p.0 == name).ok_or_else(|| {
        let names: Vec<&str> = PYTHIA.iter().map(|p| p.0).collect();
        ModelError::Config(format!("no preset named `{name}`; choose one of {}", names.join(", ")))
    })?;
    Ok(crate::MemoryFormerConfig {
        d_model: d,
        n_layers: l,
        n_heads: h,
        tau: 8,
        ..crate::MemoryFormerConfig::tiny(50304, 2048)
    })
}
