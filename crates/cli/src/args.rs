//! Command-line arguments. Model flags override the preset's dimensions.

use clap::{Args, Parser, Subcommand, ValueEnum};
use data::Task;
use models::{Norm, TrainConfig, TransformerConfig};
use std::path::PathBuf;

#[derive(Parser)]
#[command(
    name = "resmem",
    version,
    about = "Train and study Residual Matrix Transformers, MemoryFormers and baseline transformers"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand)]
pub enum Command {
    /// Train a model and write metrics.jsonl and config.json into --out.
    Train(TrainArgs),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Arch {
    Transformer,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum BackendKind {
    /// The CPU reference backend (rayon + GEMM).
    Cpu,
    /// WebGPU through wgpu: Vulkan, Metal or DX12.
    Gpu,
}

#[derive(Args, Debug)]
pub struct TrainArgs {
    #[arg(long, value_enum, default_value = "transformer")]
    pub arch: Arch,
    /// copy, reverse or mqar
    #[arg(long, default_value = "copy")]
    pub task: Task,
    #[arg(long, value_enum, default_value = "gpu")]
    pub backend: BackendKind,
    #[arg(long, default_value_t = 300)]
    pub steps: usize,
    /// Directory for config.json and metrics.jsonl; it must not hold an earlier run.
    #[arg(long)]
    pub out: PathBuf,
    /// Print and record the loss every this many steps.
    #[arg(long, default_value_t = 10)]
    pub log_every: usize,
    #[arg(long, default_value_t = 32)]
    pub batch: usize,
    /// Tokens per training sequence (T).
    #[arg(long, default_value_t = 16)]
    pub seq_len: usize,
    /// Peak learning rate.
    #[arg(long)]
    pub lr: Option<f32>,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    #[command(flatten)]
    pub dims: ModelDims,
}

/// Overrides of the tiny preset's dimensions.
#[derive(Args, Debug)]
pub struct ModelDims {
    #[arg(long)]
    pub d_model: Option<usize>,
    #[arg(long)]
    pub layers: Option<usize>,
    #[arg(long)]
    pub heads: Option<usize>,
    #[arg(long)]
    pub head_dim: Option<usize>,
    #[arg(long)]
    pub d_ff: Option<usize>,
    #[arg(long, value_parser = parse_norm)]
    pub norm: Option<Norm>,
    /// Weights start N(0, init_std²/fan_in).
    #[arg(long)]
    pub init_std: Option<f32>,
}

fn parse_norm(s: &str) -> Result<Norm, String> {
    match s {
        "layernorm" => Ok(Norm::LayerNorm),
        "rmsnorm" => Ok(Norm::RmsNorm),
        _ => Err(format!("unknown norm `{s}`; use layernorm or rmsnorm")),
    }
}

impl TrainArgs {
    pub fn transformer_config(&self, vocab: usize) -> TransformerConfig {
        let mut c = TransformerConfig::tiny(vocab, self.seq_len);
        let d = &self.dims;
        c.d_model = d.d_model.unwrap_or(c.d_model);
        c.n_layers = d.layers.unwrap_or(c.n_layers);
        c.n_heads = d.heads.unwrap_or(c.n_heads);
        c.head_dim = d.head_dim.unwrap_or(c.head_dim);
        c.d_ff = d.d_ff.unwrap_or(c.d_ff);
        c.norm = d.norm.unwrap_or(c.norm);
        c.init_std = d.init_std.unwrap_or(c.init_std);
        c
    }

    pub fn train_config(&self) -> TrainConfig {
        let d = TrainConfig::default();
        TrainConfig {
            batch: self.batch,
            steps: self.steps,
            lr: self.lr.unwrap_or(d.lr),
            seed: self.seed,
            ..d
        }
    }
}
