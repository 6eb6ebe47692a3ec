//! `resmem train`: the training loop with logging, for either backend.

use crate::args::{Arch, BackendKind, TrainArgs};
use anyhow::{bail, Context, Result};
use data::{ByteTokenizer, TaskSampler};
use engine::cpu::CpuBackend;
use engine::gpu::GpuBackend;
use engine::Backend;
use models::{
    LanguageModel, MemoryFormer, MemoryFormerConfig, ModelConfig, Rmt, RmtConfig, Trainer, Transformer,
    TransformerConfig,
};
use serde::Serialize;
use std::io::Write;
use std::time::Instant;

/// One line of metrics.jsonl.
#[derive(Serialize)]
struct Metrics {
    step: usize,
    loss: f32,
    lr: f32,
    tokens_per_s: f64,
    elapsed_s: f64,
}

pub fn run(args: TrainArgs) -> Result<()> {
    if args.log_every == 0 {
        bail!("--log-every must be at least 1");
    }
    match args.backend {
        BackendKind::Cpu => train(&CpuBackend::<f32>::new(), &args),
        BackendKind::Gpu => {
            let be = pollster::block_on(GpuBackend::new()).context("cannot use --backend gpu")?;
            train(&be, &args)
        }
    }
}

fn train<B: Backend>(be: &B, args: &TrainArgs) -> Result<()> {
    let metrics_path = args.out.join("metrics.jsonl");
    if metrics_path.exists() {
        bail!(
            "{} already holds a run; choose another --out or remove it first",
            args.out.display()
        );
    }
    std::fs::create_dir_all(&args.out).with_context(|| format!("cannot create {}", args.out.display()))?;

    let vocab = ByteTokenizer::VOCAB;
    match args.arch {
        Arch::Transformer => {
            let cfg = args.dims.transformer(TransformerConfig::tiny(vocab, args.seq_len));
            let model = Transformer::new(be, cfg.clone(), args.batch, args.seq_len, args.seed)?;
            train_model(be, args, ModelConfig::Transformer(cfg), model)
        }
        Arch::Rmt => {
            let cfg = args.dims.rmt(RmtConfig::tiny(vocab, args.seq_len));
            let model = Rmt::new(be, cfg.clone(), args.batch, args.seq_len, args.seed)?;
            train_model(be, args, ModelConfig::Rmt(cfg), model)
        }
        Arch::Memoryformer => {
            let cfg = args.dims.memoryformer(MemoryFormerConfig::tiny(vocab, args.seq_len));
            let model = MemoryFormer::new(be, cfg.clone(), args.batch, args.seq_len, args.seed)?;
            train_model(be, args, ModelConfig::MemoryFormer(cfg), model)
        }
    }
}

fn train_model<B: Backend, M: LanguageModel<B>>(
    be: &B,
    args: &TrainArgs,
    model_cfg: ModelConfig,
    model: M,
) -> Result<()> {
    let metrics_path = args.out.join("metrics.jsonl");
    let train_cfg = args.train_config();
    let mut sampler =
        TaskSampler::new(args.task, args.batch, args.seq_len, args.seed.wrapping_add(1)).map_err(anyhow::Error::msg)?;
    let saved =
        serde_json::json!({ "model": model_cfg, "train": train_cfg, "task": args.task, "backend": be.describe() });
    std::fs::write(args.out.join("config.json"), serde_json::to_string_pretty(&saved)?)?;

    let params = model.store().layout.count();
    println!(
        "{:?} with {params} parameters on {}, task {}, {} steps",
        args.arch,
        be.describe(),
        args.task,
        args.steps
    );
    let mut trainer = Trainer::new(be, model, train_cfg)?;
    let mut log = std::fs::File::create(&metrics_path)?;
    let start = Instant::now();
    let mut window = (Instant::now(), 0usize);
    for step in 1..=args.steps {
        let lr = trainer.step(be, &sampler.next_batch())?;
        window.1 += args.batch * args.seq_len;
        if step % args.log_every == 0 || step == 1 || step == args.steps {
            let loss = pollster::block_on(trainer.loss(be))?;
            if !loss.is_finite() {
                bail!("the loss became {loss} at step {step}; try a lower --lr");
            }
            let tokens_per_s = window.1 as f64 / window.0.elapsed().as_secs_f64();
            let m = Metrics {
                step,
                loss,
                lr,
                tokens_per_s,
                elapsed_s: start.elapsed().as_secs_f64(),
            };
            writeln!(log, "{}", serde_json::to_string(&m)?)?;
            println!("step {step:>6}  loss {loss:.4}  lr {lr:.2e}  {tokens_per_s:>9.0} tok/s");
            window = (Instant::now(), 0);
        }
    }
    let store = trainer.model.store();
    let values = pollster::block_on(be.read(&store.params))?;
    let model_path = args.out.join(MODEL_FILE);
    std::fs::write(&model_path, models::checkpoint::to_bytes(&store.layout, &values)?)
        .with_context(|| format!("cannot write {}", model_path.display()))?;
    println!("wrote {} and {}", metrics_path.display(), model_path.display());
    Ok(())
}

/// The final parameters in a run directory.
pub const MODEL_FILE: &str = "model.safetensors";
