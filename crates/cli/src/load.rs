//! Reading a run back: its config.toml, and the parameters of a checkpoint or its model file.

use crate::resolve::read_config;
use crate::run_dir::{checkpoints_in, CONFIG_FILE, MODEL_FILE};
use anyhow::{bail, Context, Result};
use models::{checkpoint, ParamLayout, RunConfig};
use std::path::{Path, PathBuf};

/// The config of the run in `run`: a run directory, or one checkpoint file, which carries its
/// run's config (the playground's downloads are such files).
pub fn config(run: &Path) -> Result<RunConfig> {
    if run.is_file() {
        let bytes = data::read_file(run).with_context(|| format!("cannot read {}", run.display()))?;
        let text = checkpoint::config_of(&bytes).with_context(|| format!("cannot use {} as a run", run.display()))?;
        return RunConfig::from_toml(&text)
            .with_context(|| format!("the config inside {} is not a valid run config", run.display()));
    }
    let path = run.join(CONFIG_FILE);
    if !path.is_file() {
        bail!(
            "{} is not a run directory (it has no {CONFIG_FILE}); give --run a directory written by `resmem train`, \
             or a checkpoint file",
            run.display()
        );
    }
    read_config(&path)
}

/// The parameters to use: `explicit` (a checkpoint or model file) when given, else the run's
/// newest checkpoint that loads, else its model.safetensors. Returns them with their file.
pub fn params(run: &Path, explicit: Option<&Path>, layout: &ParamLayout) -> Result<(Vec<f32>, PathBuf)> {
    let load = |path: &Path| -> Result<Vec<f32>> {
        let bytes = data::read_file(path).with_context(|| format!("cannot read {}", path.display()))?;
        checkpoint::from_bytes(layout, &bytes).with_context(|| format!("cannot load {}", path.display()))
    };
    if let Some(path) = explicit.or(run.is_file().then_some(run)) {
        return Ok((load(path)?, path.to_path_buf()));
    }
    let mut candidates: Vec<PathBuf> = checkpoints_in(run)?.into_iter().rev().map(|(_, p)| p).collect();
    candidates.push(run.join(MODEL_FILE));
    let mut errors = vec![];
    for path in candidates {
        if !path.exists() {
            continue;
        }
        match load(&path) {
            Ok(values) => {
                // An older file in place of the newest is said, never silent.
                if !errors.is_empty() {
                    crate::console::warn(&format!(
                        "warning: the newest parameters of {} cannot be loaded, so older ones are used:\n  {}\n\
                         using {}; remove or repair the skipped file, or choose one with --checkpoint",
                        run.display(),
                        errors.join("\n  "),
                        path.display()
                    ));
                }
                return Ok((values, path));
            }
            Err(e) => errors.push(format!("{e:#}")),
        }
    }
    if errors.is_empty() {
        bail!(
            "{} has no checkpoint and no {MODEL_FILE} yet; train it first, or give --checkpoint",
            run.display()
        );
    }
    bail!(
        "no parameters of {} could be loaded:\n  {}",
        run.display(),
        errors.join("\n  ")
    )
}
