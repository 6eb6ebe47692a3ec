//! `resmem analyze buckets`: load a trained MemoryFormer from its run directory, run batches of
//! the run's task through it, and report how evenly each hash table's buckets are used.

use crate::args::{BackendKind, BucketsArgs};
use crate::train::MODEL_FILE;
use anyhow::{bail, Context, Result};
use data::{Task, TaskSampler};
use engine::cpu::CpuBackend;
use engine::gpu::GpuBackend;
use engine::Backend;
use models::buckets::{self, BucketCounts};
use models::{LanguageModel, MemoryFormer, ModelConfig, TrainConfig, Trainer};

pub fn run(args: BucketsArgs) -> Result<()> {
    match args.backend {
        BackendKind::Cpu => measure(&CpuBackend::<f32>::new(), &args),
        BackendKind::Gpu => {
            let be = pollster::block_on(GpuBackend::new()).context("cannot use --backend gpu")?;
            measure(&be, &args)
        }
    }
}

fn measure<B: Backend>(be: &B, args: &BucketsArgs) -> Result<()> {
    anyhow::ensure!(args.batches >= 1, "--batches must be at least 1");
    let config_path = args.run.join("config.json");
    let text = std::fs::read_to_string(&config_path).with_context(|| {
        format!(
            "cannot read {}; is --run a directory written by `resmem train`?",
            config_path.display()
        )
    })?;
    let saved: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("{} is not valid JSON", config_path.display()))?;
    let model: ModelConfig = serde_json::from_value(saved["model"].clone())
        .with_context(|| format!("{} has no model config resmem can read", config_path.display()))?;
    let train: TrainConfig = serde_json::from_value(saved["train"].clone())
        .with_context(|| format!("{} has no train config resmem can read", config_path.display()))?;
    let task: Task = serde_json::from_value(saved["task"].clone())
        .with_context(|| format!("{} names no task resmem knows", config_path.display()))?;
    let cfg = match model {
        ModelConfig::MemoryFormer(cfg) => cfg,
        other => bail!(
            "{} holds a {} run; bucket statistics need a MemoryFormer (`resmem train --arch memoryformer`)",
            args.run.display(),
            serde_json::to_value(&other)?["arch"].as_str().unwrap_or("different")
        ),
    };
    let (b, t) = (train.batch, cfg.seq_len);
    let model = MemoryFormer::new(be, cfg, b, t, train.seed)?;
    let model_path = args.run.join(MODEL_FILE);
    let bytes = std::fs::read(&model_path)
        .with_context(|| format!("cannot read {}; runs save it when training ends", model_path.display()))?;
    let values = models::checkpoint::from_bytes(&model.store().layout, &bytes)
        .with_context(|| format!("cannot load {}", model_path.display()))?;
    be.write(&model.store().params, &values);
    let mut trainer = Trainer::new(be, model, train.clone())?;
    // Batches the run did not train on: another seed of the same task.
    let mut sampler = TaskSampler::new(task, b, t, train.seed.wrapping_add(2)).map_err(anyhow::Error::msg)?;
    let mut total: Option<Vec<BucketCounts>> = None;
    for _ in 0..args.batches {
        pollster::block_on(trainer.eval(be, &sampler.next_batch()))?;
        let counts = pollster::block_on(buckets::read(be, &trainer.model.hashed_layers()))?;
        match &mut total {
            None => total = Some(counts),
            Some(total) => total.iter_mut().zip(&counts).for_each(|(a, b)| a.accumulate(b)),
        }
    }
    let stats: Vec<_> = total.unwrap_or_default().iter().flat_map(|c| c.stats()).collect();
    if args.json {
        println!("{}", serde_json::to_string_pretty(&stats)?);
        return Ok(());
    }
    println!(
        "{} batches of {} rows of {task}; entropy is 1 when every bucket is used equally",
        args.batches,
        b * t
    );
    println!("{:<12} {:>5} {:>8} {:>6}", "layer", "table", "entropy", "dead");
    for s in &stats {
        println!(
            "{:<12} {:>5} {:>8.3} {:>6}",
            s.layer, s.table, s.entropy, s.dead_buckets
        );
    }
    Ok(())
}
