//! `resmem import official` and `resmem export official`: weights in and out of the official RMT
//! code (bmac3/residual-matrix-transformer), under its names and axes (docs/interop.md).

use crate::console::say;
use crate::run_dir::{self, RunDir, CONFIG_FILE, MODEL_FILE};
use crate::{load, source};
use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use data::TokenizerKind;
use models::official::{self, OfficialDims};
use models::run::check_eval_batches;
use models::{checkpoint, Cadence, DataConfig, ModelConfig, RunConfig, TrainConfig};
use std::path::{Path, PathBuf};

#[derive(Subcommand)]
pub enum ImportCommand {
    /// A safetensors file of the official RMT code's parameters (its names and axes, per-layer
    /// tensors stacked on a leading Layer axis) into a resmem run directory.
    Official(ImportArgs),
}

#[derive(Subcommand)]
pub enum ExportCommand {
    /// A run's RMT parameters under the official RMT code's names and axes, for JAX.
    Official(ExportArgs),
    /// A run's metrics.jsonl as a TensorBoard event file.
    Tensorboard(crate::tensorboard::TensorboardArgs),
    /// A run ready to continue in JAX (python/resmem_jax), on one machine or many.
    Jax(crate::jax::JaxArgs),
}

#[derive(Args, Debug)]
pub struct ImportArgs {
    /// The parameters, e.g. tests/fixtures/official-rmt/rmt_official_small_params.safetensors.
    pub params: PathBuf,
    /// The run directory to write (config.toml and model.safetensors); it must not hold a run.
    #[arg(long)]
    pub out: PathBuf,
    /// A corpus prepared by `resmem data prepare` to evaluate and train on.
    #[arg(long, conflicts_with = "tokens")]
    pub data: Option<PathBuf>,
    /// Fixed windows to evaluate and train on: a safetensors file with a `tokens` tensor of
    /// (rows, T + 1) ids. Default: the `tokens` of NAME_outputs.safetensors beside
    /// NAME_params.safetensors, as the official fixture is laid out.
    #[arg(long)]
    pub tokens: Option<PathBuf>,
    /// T, tokens per window, with --data (default 256); with token rows, their width − 1.
    #[arg(long)]
    pub seq_len: Option<usize>,
    /// N, the longest window the model will see (default T); ALiBi has no position table.
    #[arg(long)]
    pub context: Option<usize>,
}

#[derive(Args, Debug)]
pub struct ExportArgs {
    /// A run directory of an RMT with the official conventions (--preset official, or imported).
    #[arg(long)]
    pub run: PathBuf,
    /// A checkpoint or model file (default: the run's newest checkpoint, else its model).
    #[arg(long)]
    pub checkpoint: Option<PathBuf>,
    /// The safetensors file to write; it must not exist.
    #[arg(long)]
    pub out: PathBuf,
}

pub fn import(cmd: ImportCommand) -> Result<()> {
    let ImportCommand::Official(args) = cmd;
    let bytes = data::read_file(&args.params).with_context(|| format!("cannot read {}", args.params.display()))?;
    let imported = official::read(&bytes).with_context(|| format!("cannot import {}", args.params.display()))?;
    let dims = imported.dims;
    let (data, batch, eval_batches) = data_for(&args, &dims)?;
    let t = data.seq_len();
    let n = args.context.unwrap_or(t);
    let cfg = RunConfig {
        model: ModelConfig::Rmt(dims.config(n)),
        train: TrainConfig {
            batch,
            ..TrainConfig::default()
        },
        data,
        cadence: Cadence {
            eval_batches,
            ..Cadence::default()
        },
    };
    cfg.validate().context("the imported model's config is invalid")?;
    let layout = models::rmt::layout(match &cfg.model {
        ModelConfig::Rmt(c) => c,
        _ => unreachable!("the config built above is an RMT"),
    });
    let values = official::to_flat(&imported, &layout)?;
    let dir = RunDir::create(&args.out)?;
    let toml = cfg.to_toml()?;
    run_dir::write_atomic(&dir.file(CONFIG_FILE), |tmp| {
        std::fs::write(tmp, &toml).with_context(|| format!("cannot write {}", tmp.display()))
    })?;
    let model = dir.file(MODEL_FILE);
    run_dir::write_atomic(&model, |tmp| {
        let bytes = checkpoint::to_bytes(&layout, &values)?;
        std::fs::write(tmp, bytes).with_context(|| format!("cannot write {}", tmp.display()))
    })?;
    say(&format!(
        "imported {} official tensors ({} parameters): L {}, R {}, D_k {}, D_v {}, D_FF {}, V {}, with the official \
         conventions (ALiBi, whole-matrix RMSNorm eps 1e-6, logits / (layer + 1), tanh GELU, z-loss 1e-4)",
        official::MAPPINGS.len(),
        layout.count(),
        dims.n_layers,
        dims.rank,
        dims.d_k,
        dims.d_v,
        dims.d_ff,
        dims.vocab
    ));
    if !imported.unverified_axes.is_empty() {
        say(&format!(
            "note: the file names no axes, and two axes of {} have equal sizes, so their order was taken on trust; \
             check the model's loss with `resmem eval`",
            imported.unverified_axes.join(", ")
        ));
    }
    say(&format!(
        "wrote {} and {}\nevaluate with: resmem eval --run {}",
        dir.file(CONFIG_FILE).display(),
        model.display(),
        args.out.display()
    ));
    Ok(())
}

/// The data config of an imported run, its batch size and its number of held-out batches.
fn data_for(args: &ImportArgs, dims: &OfficialDims) -> Result<(DataConfig, usize, usize)> {
    if let Some(path) = &args.data {
        let meta = data::Meta::read(path).with_context(|| format!("cannot use --data {}", path.display()))?;
        if meta.vocab != dims.vocab {
            bail!(
                "the corpus {} has a vocabulary of {} ({} tokenizer); the imported model's is {}",
                path.display(),
                meta.vocab,
                meta.tokenizer,
                dims.vocab
            );
        }
        let data = DataConfig::Text {
            path: path.clone(),
            tokenizer: meta.tokenizer,
            seq_len: args.seq_len.unwrap_or(256),
            doc_mask: meta.tokenizer.end_of_text().is_some(),
        };
        return Ok((data, 8, Cadence::default().eval_batches));
    }
    let path = match &args.tokens {
        Some(p) => p.clone(),
        None => beside(&args.params).ok_or_else(|| {
            anyhow::anyhow!(
                "say what to evaluate the model on: --data DIR (a corpus from `resmem data prepare` with the model's \
                 tokenizer) or --tokens FILE (a safetensors file with a `tokens` tensor of (rows, T + 1) ids)"
            )
        })?,
    };
    let (tokens, width) = source::read_rows(&path)?;
    // t + 1 overflows for t = usize::MAX: compare t with width − 1 (width ≥ 2 here: `read_rows` says so).
    if let Some(t) = args.seq_len.filter(|&t| Some(t) != width.checked_sub(1)) {
        bail!(
            "--seq-len {t} does not match the rows of {width} tokens in {}",
            path.display()
        );
    }
    let tokenizer = match dims.vocab {
        256 => TokenizerKind::Bytes,
        50257 => TokenizerKind::Gpt2,
        v => bail!(
            "the model's vocabulary of {v} is neither bytes (256) nor GPT-2's (50,257), the tokenizers resmem has"
        ),
    };
    let rows = tokens.len() / width;
    let batch = rows.min(32);
    let eval_batches = rows / batch;
    check_eval_batches(eval_batches)?;
    if args.tokens.is_none() {
        say(&format!(
            "evaluation windows: the `tokens` of {} (found beside the parameters)",
            path.display()
        ));
    }
    let data = DataConfig::Tokens {
        path: std::path::absolute(&path).unwrap_or(path),
        tokenizer,
        seq_len: width - 1,
        doc_mask: tokenizer.end_of_text().is_some(),
    };
    Ok((data, batch, eval_batches))
}

/// NAME_outputs.safetensors beside NAME_params.safetensors, when it exists.
fn beside(params: &Path) -> Option<PathBuf> {
    let name = params.file_name()?.to_str()?;
    let stem = name.strip_suffix("_params.safetensors")?;
    let outputs = params.with_file_name(format!("{stem}_outputs.safetensors"));
    outputs.is_file().then_some(outputs)
}

pub fn export(cmd: ExportCommand) -> Result<()> {
    let args = match cmd {
        ExportCommand::Official(args) => args,
        ExportCommand::Tensorboard(args) => return crate::tensorboard::export(args),
        ExportCommand::Jax(args) => return crate::jax::export(args),
    };
    if args.out.exists() {
        bail!(
            "{} exists; choose another --out, or remove it first",
            args.out.display()
        );
    }
    let cfg = load::config(&args.run)?;
    let ModelConfig::Rmt(rmt) = &cfg.model else {
        bail!(
            "{} is a {} run; only an RMT exports to the official RMT code",
            args.run.display(),
            cfg.arch()
        );
    };
    official::check_conventions(rmt).with_context(|| format!("cannot export {}", args.run.display()))?;
    let layout = models::rmt::layout(rmt);
    let (values, from) = load::params(&args.run, args.checkpoint.as_deref(), &layout)?;
    let dims = OfficialDims::of(rmt);
    let bytes = official::to_bytes(&official::from_flat(&values, &layout, &dims)?, &dims)?;
    run_dir::write_atomic(&args.out, |tmp| {
        std::fs::write(tmp, bytes).with_context(|| format!("cannot write {}", tmp.display()))
    })?;
    say(&format!(
        "wrote {} ({} official tensors from {}); load it in JAX as docs/interop.md shows",
        args.out.display(),
        official::MAPPINGS.len(),
        from.display()
    ));
    if rmt.norm_eps != 1e-6 || rmt.z_loss != 1e-4 {
        say(&format!(
            "note: this model uses norm_eps {} and z_loss {}; set rmsnorm_eps and z_loss alike in the official config",
            rmt.norm_eps, rmt.z_loss
        ));
    }
    Ok(())
}
