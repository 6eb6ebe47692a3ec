//! How a partial config (a user's file, the flags, the page's settings) merges onto a whole one
//! as TOML tables: every key must exist, and a table that names another architecture or data
//! source replaces the one it is merged onto.

use super::RunConfig;
use crate::{ModelError, Result};
use serde::de::DeserializeOwned;
use serde::Serialize;

/// `value` with `overrides` merged on top, read back through TOML text so that a wrong type is
/// reported with its key and line.
pub(super) fn merged<T: Serialize + DeserializeOwned>(value: &T, overrides: &toml::Table) -> Result<T> {
    let mut table = to_table(value)?;
    merge(&mut table, overrides, "")?;
    let text = toml::to_string(&table).map_err(|e| ModelError::Config(e.to_string()))?;
    toml::from_str(&text).map_err(|e: toml::de::Error| ModelError::Config(format!("in the merged config: {e}")))
}

/// A value as a TOML table, through JSON so that f32s keep their shortest decimal form.
pub(super) fn to_table<T: Serialize>(value: &T) -> Result<toml::Table> {
    let bad = |e: String| ModelError::Config(format!("cannot write the config: {e}"));
    let json = serde_json::to_string(value).map_err(|e| bad(e.to_string()))?;
    serde_json::from_str(&json).map_err(|e| bad(e.to_string()))
}

/// Whether `over` names another variant (`arch` of a model, `source` of data) than `base`.
fn retagged(base: &toml::Table, over: &toml::Table) -> bool {
    ["arch", "source"]
        .iter()
        .any(|tag| matches!((base.get(*tag), over.get(*tag)), (Some(a), Some(b)) if a != b))
}

/// What a table that switches to another variant is merged onto: for another `arch`, that
/// architecture's tiny preset at `base`'s vocabulary and context (so that a partial file, say
/// only `arch = "rmt"`, is a whole model); for another data `source`, `over` alone.
fn retagged_base(base: &toml::Table, over: &toml::Table) -> Result<toml::Table> {
    let Some(arch) = over.get("arch").and_then(toml::Value::as_str) else {
        return Ok(over.clone());
    };
    let Ok(preset) = RunConfig::preset(&format!("tiny-{arch}")) else {
        // An unknown arch: its own error, from the merged config.
        return Ok(over.clone());
    };
    let mut table = to_table(&preset.model)?;
    for key in ["vocab", "context"] {
        if let Some(v) = base.get(key) {
            table.insert(key.into(), v.clone());
        }
    }
    Ok(table)
}

/// Settings that a whole config leaves out while unset (serde's `skip_serializing_if`, so that
/// the configs of runs that never set them read as they always did): a partial config may set
/// them all the same.
const UNSET_WHEN_DEFAULT: &[&str] = &["train.restarts", "train.init_from", "cadence.sample_every"];

/// Merges `over` into `base`; every key of `over` must already be in `base`, or be one of
/// [`UNSET_WHEN_DEFAULT`].
pub(super) fn merge(base: &mut toml::Table, over: &toml::Table, path: &str) -> Result<()> {
    for (key, value) in over {
        // A model's context was called `seq_len` before 2026-11-28: older overrides still say so.
        let key: &str = match (path, key.as_str()) {
            ("model", "seq_len") if base.contains_key("context") => "context",
            (_, key) => key,
        };
        let name = if path.is_empty() {
            key.to_string()
        } else {
            format!("{path}.{key}")
        };
        match (base.get_mut(key), value) {
            // Another architecture or data source is a table of other settings: it replaces.
            (Some(toml::Value::Table(b)), toml::Value::Table(o)) if retagged(b, o) => {
                *b = retagged_base(b, o)?;
                merge(b, o, &name)?;
            }
            (Some(toml::Value::Table(b)), toml::Value::Table(o)) => merge(b, o, &name)?,
            // No setting holds nan or inf: refused here, by name, rather than as a null in the
            // JSON the config is written through.
            (Some(_), toml::Value::Float(f)) if !f.is_finite() => {
                return Err(ModelError::Config(format!("{name} = {f}: it must be a finite number")));
            }
            // Every float setting is an f32: past its largest it would be infinite.
            (Some(_), toml::Value::Float(f)) if f.abs() > f64::from(f32::MAX) => {
                return Err(ModelError::Config(format!(
                    "{name} = {f:e}: it must be a finite number of at most 3.4e38 in magnitude (settings are f32)"
                )));
            }
            (Some(slot), v) => *slot = v.clone(),
            (None, v) if UNSET_WHEN_DEFAULT.contains(&name.as_str()) => {
                base.insert(key.to_string(), v.clone());
            }
            (None, _) => {
                let known: Vec<&str> = base.keys().map(String::as_str).collect();
                return Err(ModelError::Config(format!(
                    "unknown setting `{name}`; {} has {}",
                    if path.is_empty() { "a run config" } else { path },
                    known.join(", ")
                )));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ModelConfig;

    #[test]
    fn overrides_merge_and_unknown_keys_name_themselves() {
        let base = RunConfig::preset("tiny-rmt").unwrap();
        let over: toml::Table = toml::from_str("[model]\nd_k = 4\n[train]\nlr = 0.5").unwrap();
        let cfg = base.merged(&over).unwrap();
        let ModelConfig::Rmt(m) = &cfg.model else {
            unreachable!()
        };
        assert_eq!((m.d_k, cfg.train.lr), (4, 0.5));
        let over: toml::Table = toml::from_str("[model]\ntau = 4").unwrap();
        let err = base.merged(&over).unwrap_err().to_string();
        assert!(err.contains("`model.tau`") && err.contains("d_k"), "{err}");
        // A config.toml that records an extension, a fine-tuning source or a sampling cadence
        // merges as any other: those keys are absent only while unset.
        let over: toml::Table =
            toml::from_str("[train]\nrestarts = [100]\nsteps = 400\ninit_from = \"/r\"\n[cadence]\nsample_every = 10")
                .unwrap();
        let cfg = base.merged(&over).unwrap();
        assert_eq!(
            (
                cfg.train.restarts,
                cfg.train.init_from.as_deref(),
                cfg.cadence.sample_every
            ),
            (vec![100], Some("/r"), 10)
        );
    }
}
