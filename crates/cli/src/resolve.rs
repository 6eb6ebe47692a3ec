//! A run's config from `resmem train`'s arguments: the preset (or tiny-ARCH), then `--config`,
//! then the settings given as flags, each a TOML override that `RunConfig::merged` checks; then
//! the data source. A sweep's points resolve the same way, from arguments built without argv.

use crate::args::TrainArgs;
use anyhow::{bail, Context, Result};
use models::{DataConfig, RunConfig};
use std::path::Path;

/// The most bytes a config or experiment file may have: a whole config.toml is about 1 KiB.
pub const TEXT_FILE_LIMIT: u64 = 1 << 20;

pub fn read_config(path: &Path) -> Result<RunConfig> {
    let text =
        data::read_small_text(path, TEXT_FILE_LIMIT).with_context(|| format!("cannot read {}", path.display()))?;
    RunConfig::from_toml(&text).with_context(|| format!("{} is not a valid run config", path.display()))
}

/// `--resume` continues a fixed config: any other setting would break the bit-identical replay.
/// Two may be given: the class (the backend's, which a resumed run may change, with a warning)
/// and `--steps`, which extends the run ([`extension`]).
pub fn refuse_overrides(args: &TrainArgs) -> Result<()> {
    let mut changed: Vec<String> = args
        .settings
        .given()
        .filter(|(s, _)| s.key != PRECISION && !(s.table == "train" && s.key == "steps"))
        .map(|(s, _)| format!("--{}", s.flag))
        .chain(args.arch.map(|_| "--arch".to_string()))
        .chain(args.task.map(|_| "--task".to_string()))
        .chain(args.data.as_ref().map(|_| "--data".to_string()))
        .chain(args.doc_mask.map(|_| "--doc-mask".to_string()))
        .collect();
    changed.sort();
    if !changed.is_empty() {
        bail!(
            "--resume continues the run with its own config.toml, so {} cannot be changed; \
             start a new run with --config DIR/config.toml and the changes instead",
            changed.join(", ")
        );
    }
    Ok(())
}

/// The steps `--resume DIR --steps N` extends a run to: more than it has, or an error that
/// says what `--steps` means there. None when not given.
pub fn extension(args: &TrainArgs, cfg: &RunConfig) -> Result<Option<usize>> {
    let Some(text) = args.settings.get("train", "steps") else {
        return Ok(None);
    };
    let steps: usize = text
        .parse()
        .map_err(|_| anyhow::anyhow!("--steps must be a whole number, not \"{text}\""))?;
    if steps <= cfg.train.steps {
        bail!(
            "--resume with --steps {steps} extends a run, and this one has steps = {} already; give more \
             steps than that, or leave --steps out to finish the run as it is",
            cfg.train.steps
        );
    }
    Ok(Some(steps))
}

/// The setting of the numeric class, `--precision`.
const PRECISION: &str = "precision";

/// The class `--precision` asks for, when given.
pub fn given_precision(args: &TrainArgs) -> Result<Option<engine::Precision>> {
    let given = args.settings.given().find(|(s, _)| s.key == PRECISION);
    given
        .map(|(_, text)| text.parse::<engine::Precision>().map_err(anyhow::Error::msg))
        .transpose()
}

/// The preset (or tiny-ARCH), then `--config`, then the settings, then the data flags.
pub fn resolve(args: &TrainArgs) -> Result<RunConfig> {
    if let (Some(task), Some(data)) = (&args.task, &args.data) {
        bail!(
            "--task {task} and --data {} both choose what to train on; give one",
            data.display()
        );
    }
    let file: Option<toml::Table> = match &args.config {
        Some(path) => {
            let text = data::read_small_text(path, TEXT_FILE_LIMIT)
                .with_context(|| format!("cannot read the config {}", path.display()))?;
            Some(toml::from_str(&text).with_context(|| format!("{} is not valid TOML", path.display()))?)
        }
        None => None,
    };
    let file_preset = match file.as_ref().and_then(|f| f.get("preset")) {
        Some(toml::Value::String(s)) => Some(s.clone()),
        Some(_) => bail!("`preset` in the config file must be a string"),
        None => None,
    };
    let file_arch = file
        .as_ref()
        .and_then(|f| f.get("model"))
        .and_then(|m| m.get("arch"))
        .and_then(|a| a.as_str())
        .map(str::to_string);
    let arch = args.arch.map(|a| a.name());
    if let (Some(flag), Some(file), Some(path)) = (arch, file_arch.as_deref(), &args.config) {
        if flag != file {
            bail!(
                "{} sets [model] arch = \"{file}\" but --arch is {flag}; drop one of them",
                path.display()
            );
        }
    }
    let preset = args
        .preset
        .clone()
        .or(file_preset)
        .unwrap_or_else(|| format!("tiny-{}", arch.or(file_arch.as_deref()).unwrap_or("transformer")));
    let mut cfg = RunConfig::preset(&preset)?;
    if let (Some(mut file), Some(path)) = (file, &args.config) {
        file.remove("preset");
        cfg = cfg.merged(&file).with_context(|| format!("in {}", path.display()))?;
    }
    if let Some(arch) = arch {
        if arch != cfg.arch().name() {
            bail!(
                "the preset `{preset}` is a {} model, not --arch {arch}; drop --arch or choose a {arch} preset \
                 (`resmem train --list-presets`)",
                cfg.arch()
            );
        }
    }
    cfg = cfg.merged(&args.settings.overrides(cfg.arch())?)?;
    let t = cfg.data.seq_len();
    let doc_mask = args.doc_mask.unwrap_or(match &cfg.data {
        DataConfig::Text { doc_mask, .. } | DataConfig::Tokens { doc_mask, .. } => *doc_mask,
        DataConfig::Task { .. } => false,
    });
    if args.doc_mask == Some(true) && args.task.is_some() {
        bail!("--doc-mask applies to text corpora; a --task has no documents to mask apart");
    }
    cfg.data = match (&args.task, &args.data, cfg.data) {
        (Some(task), _, _) => DataConfig::Task {
            task: *task,
            seq_len: t,
        },
        (None, None, DataConfig::Task { .. }) if args.doc_mask == Some(true) => {
            bail!("--doc-mask applies to text corpora; give --data DIR")
        }
        (None, Some(path), _) => DataConfig::Text {
            path: path.clone(),
            // meta.json alone: the run opens (and checks) the tokens once, later.
            tokenizer: data::Meta::read(path)
                .with_context(|| format!("cannot use --data {}", path.display()))?
                .tokenizer,
            seq_len: t,
            doc_mask,
        },
        (None, None, DataConfig::Task { task, .. }) => DataConfig::Task { task, seq_len: t },
        (None, None, DataConfig::Text { path, tokenizer, .. }) => DataConfig::Text {
            path,
            tokenizer,
            seq_len: t,
            doc_mask,
        },
        (None, None, DataConfig::Tokens { path, tokenizer, .. }) => DataConfig::Tokens {
            path,
            tokenizer,
            seq_len: t,
            doc_mask,
        },
    };
    Ok(cfg)
}
