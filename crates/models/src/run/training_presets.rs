//! The named training presets `resmem train --preset` and the page start from: the tiny ones on
//! the copy task, the small ones on Shakespeare, and the papers' sizes (from `crate::presets`)
//! with their training settings.

use super::{Cadence, DataConfig, RunConfig};
use crate::presets::{self, Dims};
use crate::{Hashing, HybridConfig, MemoryFormerConfig, ModelConfig, RmtConfig, TrainConfig, TransformerConfig};
use data::{Task, TokenizerKind};

/// A named starting point: (name, what it is, how to build it).
pub struct Preset {
    pub name: &'static str,
    pub about: &'static str,
    pub(super) build: fn() -> RunConfig,
}

/// Where `cargo xtask corpus` puts Shakespeare with GPT-2's BPE.
pub const SHAKESPEARE_GPT2: &str = "data/shakespeare-gpt2";
pub const SHAKESPEARE_BYTES: &str = "data/shakespeare-bytes";
const GPT2_VOCAB: usize = 50257;

fn tiny_task(model: ModelConfig) -> RunConfig {
    RunConfig {
        model,
        train: TrainConfig::default(),
        data: DataConfig::Task {
            task: Task::Copy,
            seq_len: 16,
        },
        cadence: Cadence::default(),
    }
}

/// The small Shakespeare presets: context N = 128, windows of T = 64, batch 16. Measured on
/// 2 CPU cores: about 1,400 tokens/s for the RMT, so 300 steps take about 4 minutes; the
/// validation loss is 5.3 after 200 steps, against a unigram entropy of 6.43.
fn small_text(model: ModelConfig) -> RunConfig {
    RunConfig {
        model,
        train: TrainConfig {
            batch: 16,
            steps: 300,
            lr: 1e-2,
            warmup_frac: 0.05,
            min_lr_frac: 0.1,
            weight_decay: 0.1,
            ..TrainConfig::default()
        },
        data: DataConfig::Text {
            path: SHAKESPEARE_GPT2.into(),
            tokenizer: TokenizerKind::Gpt2,
            seq_len: 64,
            doc_mask: false,
        },
        cadence: Cadence {
            log_every: 10,
            eval_every: 50,
            eval_batches: 8,
            checkpoint_every: 100,
            keep: 2,
            sample_every: 0,
        },
    }
}

/// The paper sizes train on real text at N = T = their context length, batch 8.
fn paper(model: ModelConfig) -> RunConfig {
    let seq_len = model.context();
    RunConfig {
        model,
        train: TrainConfig {
            batch: 8,
            steps: 20_000,
            ..TrainConfig::default()
        },
        data: DataConfig::Text {
            path: SHAKESPEARE_GPT2.into(),
            tokenizer: TokenizerKind::Gpt2,
            seq_len,
            doc_mask: false,
        },
        cadence: Cadence {
            log_every: 10,
            eval_every: 500,
            eval_batches: 20,
            checkpoint_every: 1000,
            keep: 3,
            sample_every: 0,
        },
    }
}

/// The small RMT: R = 4 heads of D_v = 16 and D_k = 16, so R·D_v = 64 and a residual of 256.
/// GPT-2's vocabulary dominates the cost: W_E and W_U are 50,257 × 64.
fn small_rmt() -> RmtConfig {
    RmtConfig {
        d_k: 16,
        d_v: 16,
        rank: 4,
        n_layers: 2,
        d_ff: 256,
        init_std: 0.02,
        ..RmtConfig::tiny(GPT2_VOCAB, 128)
    }
}

/// The transformer of the small RMT's dimensions: H = R, D_h = D_v, D = R·D_v. Measured over
/// 150 steps on Shakespeare, init_std 1 (weights N(0, 1/fan_in)) reaches a validation loss of
/// 6.09 where 0.02 stays on the unigram plateau (6.36) and 0.5 reaches 6.28.
fn small_transformer() -> TransformerConfig {
    let twin = ModelConfig::Rmt(small_rmt()).matching_transformer();
    TransformerConfig {
        init_std: 1.0,
        ..twin.unwrap_or_else(|| TransformerConfig::tiny(GPT2_VOCAB, 128))
    }
}

/// A MemoryFormer of the small transformer's width: K = 8 tables of τ = 8 bits per layer.
fn small_memoryformer() -> MemoryFormerConfig {
    MemoryFormerConfig {
        d_model: 64,
        n_layers: 2,
        n_heads: 4,
        tau: 8,
        embed_std: 0.02,
        ..MemoryFormerConfig::tiny(GPT2_VOCAB, 128)
    }
}

/// The small RMT with a memory block in place of its dense core: d = R·D_v = 64 in K = 8
/// chunks of τ = 8, as small-memoryformer hashes its d = 64.
fn small_hybrid() -> HybridConfig {
    HybridConfig::new(small_rmt().trunk(), Hashing::paper(8))
}

/// Hyper-connections at small-transformer's width: its D, H, D_h, D_FF, L and init with n = 4
/// streams, so that the sites are all that differs (SPEC §6.10 E1).
fn small_hc(mixing: crate::HcMixing) -> crate::HcConfig {
    crate::HcConfig::widening(&small_transformer(), 4, mixing)
}

/// AltUp at small-transformer's width: its D, H, D_h, D_FF, L and init with K = 4 sub-blocks.
fn small_altup() -> crate::AltupConfig {
    crate::AltupConfig::widening(&small_transformer(), 4)
}

/// Block AttnRes at small-transformer's width: its D, H, D_h, D_FF, L and init, one depth block
/// a layer (SPEC §7.10: S = 2).
fn small_attnres() -> crate::AttnResConfig {
    let t = small_transformer();
    crate::AttnResConfig::widening(&t, t.n_layers)
}

fn dims(name: &str) -> Dims {
    Dims::preset(name).expect("every paper preset named below exists in presets::PRESETS")
}

fn pythia(name: &str) -> MemoryFormerConfig {
    presets::memoryformer(name).expect("every Pythia preset named below exists in presets::PYTHIA")
}

/// The paper's dimensions `$name` as a transformer `$t`, an RMT `$r`, a hybrid `$name-hybrid`
/// the transformer widened to 4 mHC streams, `$name-mhc`, and to 4 AltUp sub-blocks,
/// `$name-altup`, and read over about 8 depth blocks (Block AttnRes), `$name-attnres`.
macro_rules! paper_family {
    ($t:literal, $r:literal, $name:literal) => {
        [
            Preset {
                name: $t,
                about: concat!($name, ", the transformer"),
                build: || paper(ModelConfig::Transformer(dims($name).transformer())),
            },
            Preset {
                name: $r,
                about: concat!($name, ", the RMT of the same dimensions"),
                build: || paper(ModelConfig::Rmt(dims($name).rmt())),
            },
            Preset {
                name: concat!($name, "-hybrid"),
                about: concat!($name, ", the RMT with a memory block (τ8) for its FF core"),
                build: || paper(ModelConfig::Hybrid(dims($name).hybrid())),
            },
            Preset {
                name: concat!($name, "-mhc"),
                about: concat!($name, ", the transformer with 4 mHC streams (Sinkhorn 20)"),
                build: || {
                    let t = dims($name).transformer();
                    paper(ModelConfig::Hc(crate::HcConfig::widening(&t, 4, crate::HcMixing::Mhc)))
                },
            },
            Preset {
                name: concat!($name, "-altup"),
                about: concat!($name, ", the transformer with 4 AltUp sub-blocks"),
                build: || {
                    paper(ModelConfig::Altup(crate::AltupConfig::widening(
                        &dims($name).transformer(),
                        4,
                    )))
                },
            },
            Preset {
                name: concat!($name, "-attnres"),
                about: concat!(
                    $name,
                    ", the transformer read over about 8 depth blocks (Block AttnRes)"
                ),
                build: || {
                    let t = dims($name).transformer();
                    let n = crate::AttnResConfig::paper_blocks(t.n_layers);
                    paper(ModelConfig::AttnRes(crate::AttnResConfig::widening(&t, n)))
                },
            },
        ]
    };
}

/// Every preset `resmem train --preset` knows.
pub fn presets() -> Vec<Preset> {
    let mut all = vec![
        Preset {
            name: "tiny-transformer",
            about: "learns the copy task in 300 steps (the default for --arch transformer)",
            build: || tiny_task(ModelConfig::Transformer(TransformerConfig::tiny(256, 16))),
        },
        Preset {
            name: "tiny-rmt",
            about: "learns the copy task in 300 steps (the default for --arch rmt)",
            build: || tiny_task(ModelConfig::Rmt(RmtConfig::tiny(256, 16))),
        },
        Preset {
            name: "tiny-memoryformer",
            about: "learns the copy task in 300 steps (the default for --arch memoryformer)",
            build: || tiny_task(ModelConfig::MemoryFormer(MemoryFormerConfig::tiny(256, 16))),
        },
        Preset {
            name: "tiny-hybrid",
            about: "learns the copy task in 300 steps (the default for --arch hybrid)",
            build: || tiny_task(ModelConfig::Hybrid(HybridConfig::tiny(256, 16))),
        },
        Preset {
            name: "tiny-hc",
            about: "mHC, 4 streams: learns the copy task in 300 steps (the default for --arch hc)",
            build: || tiny_task(ModelConfig::Hc(crate::HcConfig::tiny(256, 16))),
        },
        Preset {
            name: "tiny-altup",
            about: "AltUp, 4 sub-blocks: learns the copy task in 300 steps (the default for --arch altup)",
            build: || tiny_task(ModelConfig::Altup(crate::AltupConfig::tiny(256, 16))),
        },
        Preset {
            name: "tiny-attnres",
            about: "Block AttnRes, a depth block a layer: learns the copy task in 300 steps (the default for --arch attnres)",
            build: || tiny_task(ModelConfig::AttnRes(crate::AttnResConfig::tiny(256, 16))),
        },
        Preset {
            name: "small-rmt",
            about: "Shakespeare with GPT-2 BPE in minutes on 2 CPU cores: L2, R4, D_k16, D_v16",
            build: || small_text(ModelConfig::Rmt(small_rmt())),
        },
        Preset {
            name: "small-transformer",
            about: "the transformer of small-rmt's dimensions: L2, D64, 4×16",
            build: || small_text(ModelConfig::Transformer(small_transformer())),
        },
        Preset {
            name: "small-memoryformer",
            about: "a MemoryFormer of small-transformer's width: L2, d64, τ8",
            build: || small_text(ModelConfig::MemoryFormer(small_memoryformer())),
        },
        Preset {
            name: "official",
            about:
                "the official RMT code's conventions (docs/models.md: ALiBi, whole-matrix RMSNorm eps 1e-6, logits / \
                    (layer + 1), tanh GELU, z-loss 1e-4, documents masked apart) at small-rmt's sizes",
            build: || RunConfig {
                data: DataConfig::Text {
                    path: SHAKESPEARE_GPT2.into(),
                    tokenizer: TokenizerKind::Gpt2,
                    seq_len: 64,
                    doc_mask: true,
                },
                ..small_text(ModelConfig::Rmt(crate::official::official_conventions(128)))
            },
        },
        Preset {
            name: "small-hybrid",
            about: "small-rmt with a memory block for its FF core: L2, R4, D_k16, D_v16, τ8",
            build: || small_text(ModelConfig::Hybrid(small_hybrid())),
        },
        Preset {
            name: "small-hc",
            about:
                "HC at small-transformer's width: L2, D64, 4×16, 4 streams (residual 256), tanh gates, P unconstrained",
            build: || small_text(ModelConfig::Hc(small_hc(crate::HcMixing::Hc))),
        },
        Preset {
            name: "small-mhc",
            about: "mHC at small-transformer's width: L2, D64, 4×16, 4 streams (residual 256), Sinkhorn 20",
            build: || small_text(ModelConfig::Hc(small_hc(crate::HcMixing::Mhc))),
        },
        Preset {
            name: "small-mhc-lite",
            about: "mHC-lite at small-transformer's width: L2, D64, 4×16, 4 streams mixed by the 24 permutations",
            build: || small_text(ModelConfig::Hc(small_hc(crate::HcMixing::MhcLite))),
        },
        Preset {
            name: "small-altup",
            about:
                "AltUp at small-transformer's width: L2, D64, 4×16, 4 sub-blocks (residual 256), one computed a layer",
            build: || small_text(ModelConfig::Altup(small_altup())),
        },
        Preset {
            name: "small-attnres",
            about: "Block AttnRes at small-transformer's width: L2, D64, 4×16, a depth block a layer (3 sources and the head's)",
            build: || small_text(ModelConfig::AttnRes(small_attnres())),
        },
        Preset {
            name: "memoryformer-tiny",
            about: "MemoryFormer paper, tiny (Pythia-70M's d, L, H; τ8)",
            build: || paper(ModelConfig::MemoryFormer(pythia("pythia-70m"))),
        },
        Preset {
            name: "memoryformer-small",
            about: "MemoryFormer paper, small (Pythia-160M's d, L, H; τ8)",
            build: || paper(ModelConfig::MemoryFormer(pythia("pythia-160m"))),
        },
        Preset {
            name: "memoryformer-base",
            about: "MemoryFormer paper, base (Pythia-410M's d, L, H; τ8)",
            build: || paper(ModelConfig::MemoryFormer(pythia("pythia-410m"))),
        },
    ];
    all.extend(paper_family!("gpt2-small", "gpt2-small-rmt", "gpt2-small"));
    all.extend(paper_family!("gpt2-medium", "gpt2-medium-rmt", "gpt2-medium"));
    all.extend(paper_family!("table8-49m", "table8-49m-rmt", "table8-49m"));
    all.extend(paper_family!("table8-160m", "table8-160m-rmt", "table8-160m"));
    all.extend(paper_family!("table8-260m", "table8-260m-rmt", "table8-260m"));
    all.extend(paper_family!("table8-405m", "table8-405m-rmt", "table8-405m"));
    all.extend(paper_family!("table9-46m-transformer", "table9-46m", "table9-46m"));
    all.extend(paper_family!("table9-134m-transformer", "table9-134m", "table9-134m"));
    all.extend(paper_family!("table9-206m-transformer", "table9-206m", "table9-206m"));
    all.extend(paper_family!("table9-305m-transformer", "table9-305m", "table9-305m"));
    all.extend(paper_family!("table10-transformer", "table10-rmt", "table10"));
    all
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_preset_is_valid_and_round_trips_through_toml() {
        for p in presets() {
            let cfg = (p.build)();
            cfg.validate().unwrap_or_else(|e| panic!("{}: {e}", p.name));
            let text = cfg.to_toml().unwrap();
            assert_eq!(RunConfig::from_toml(&text).unwrap(), cfg, "{}:\n{text}", p.name);
        }
    }
}
