//! `resmem export jax`: a run made ready to continue in JAX (python/resmem_jax), on one machine
//! or many. The JAX side reads resmem's run directory as it is (config.toml, checkpoints,
//! metrics.jsonl, model.safetensors) and writes it back in the same formats, so the export is
//! the run's files, its newest checkpoint checked to load, and the command to go on there.

use crate::console::say;
use crate::run_dir::{self, RunDir, BACKEND_FILE, CHECKPOINT_DIR, CONFIG_FILE, METRICS_FILE, MODEL_FILE};
use anyhow::{bail, Context, Result};
use clap::Args;
use models::{DataConfig, Purpose};
use std::path::PathBuf;

#[derive(Args, Debug)]
pub struct JaxArgs {
    /// The run directory to continue in JAX.
    #[arg(long)]
    pub run: PathBuf,
    /// The run directory to write (config.toml, the newest checkpoint, metrics.jsonl and the
    /// model); it must not hold a run.
    #[arg(long)]
    pub out: PathBuf,
}

pub fn export(args: JaxArgs) -> Result<()> {
    let cfg = crate::load::config(&args.run)?;
    if args.run.is_file() {
        bail!(
            "--run {} is one file; give the run directory, whose checkpoints and metrics go too",
            args.run.display()
        );
    }
    // The layout a checkpoint must fit: the model's, built once on the CPU for one sequence.
    let be = engine::cpu::CpuBackend::<f32>::new();
    let layout = cfg
        .build(&be, 1, cfg.data.seq_len(), Purpose::Infer)?
        .store()
        .layout
        .clone();
    let newest = crate::train::newest_checkpoint(&args.run, &layout, &cfg)?;
    let model = args.run.join(MODEL_FILE);
    if newest.is_none() && !model.exists() {
        bail!(
            "{} has neither a checkpoint that loads nor a {MODEL_FILE}: nothing to continue from",
            args.run.display()
        );
    }
    let out = RunDir::create(&args.out)?;
    let copy = |from: PathBuf, to: PathBuf| -> Result<()> {
        run_dir::write_atomic(&to, |tmp| {
            std::fs::copy(&from, tmp)
                .map(|_| ())
                .with_context(|| format!("cannot copy {}", from.display()))
        })
    };
    for name in [CONFIG_FILE, METRICS_FILE, BACKEND_FILE, MODEL_FILE] {
        if args.run.join(name).exists() {
            copy(args.run.join(name), out.file(name))?;
        }
    }
    if let Some((state, path)) = &newest {
        std::fs::create_dir_all(out.checkpoints())
            .with_context(|| format!("cannot create {}", out.checkpoints().display()))?;
        let name = path
            .file_name()
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(CHECKPOINT_DIR));
        copy(path.clone(), out.checkpoints().join(name))?;
        say(&format!(
            "copied the checkpoint at step {} of {} steps",
            state.step, cfg.train.steps
        ));
    }
    let data = match &cfg.data {
        DataConfig::Task { task, .. } => format!("the {task} task needs no files"),
        DataConfig::Text { path, .. } | DataConfig::Tokens { path, .. } => format!(
            "it reads {} (config.toml's data path): keep it at that path there, relative to where you launch",
            path.display()
        ),
    };
    let at = args.out.display();
    say(&format!(
        "wrote {at}; {data}. Continue it in JAX:\n  pip install ./python\n  python -m resmem_jax.train --run {at}            \
         # every device of this machine\n  python -m resmem_jax.train --run {at} --steps N  # extended to N steps\n  \
         python -m resmem_jax.train --run {at} --coordinator HOST:PORT --num-processes P --process-id I  # one per host\n\
         resmem eval, sample, analyze and plot read the result, and resmem train --resume {at} continues it here"
    ));
    Ok(())
}
