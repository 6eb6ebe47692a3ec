//! Parameters and training state as safetensors: one tensor per parameter, named and shaped as
//! the layout declares it (the flat buffer's padding is not stored).
//!
//! - A model file holds the parameters alone.
//! - A checkpoint also holds AdamW's moments (`adamw.m/NAME`, `adamw.v/NAME`), and in its
//!   metadata the step and the run's config.toml, so that it alone can resume a run.
//!
//! Both carry a CRC-32 of their tensors and metadata: a flipped bit anywhere is "corrupt", not
//! a model that loads with one wrong weight.

use crate::params::ParamLayout;
use crate::{ModelError, Result};
use safetensors::tensor::{Dtype, SafeTensors, TensorView};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

const FORMAT: &str = "resmem";
const CRC: &str = "crc32";

/// What a checkpoint restores: the step it was written after, and the device state.
#[derive(Clone, Debug, PartialEq)]
pub struct TrainState {
    /// Steps taken.
    pub step: u64,
    /// Flat buffers of `layout.total` values each, padding included.
    pub params: Vec<f32>,
    pub m: Vec<f32>,
    pub v: Vec<f32>,
}

/// The parameters `values` (the flat buffer, padding included) as safetensors bytes.
pub fn to_bytes(layout: &ParamLayout, values: &[f32]) -> Result<Vec<u8>> {
    let (tensors, meta) = prepare(layout, &[("", values)], BTreeMap::new())?;
    safetensors::serialize(tensors, Some(meta)).map_err(|e| ModelError::Checkpoint(e.to_string()))
}

/// Writes a checkpoint of `state` to `path` (not atomically: the caller writes a temporary
/// file and renames it).
pub fn write_state(layout: &ParamLayout, state: &TrainState, config_toml: &str, path: &Path) -> Result<()> {
    let (tensors, meta) = prepare_state(layout, state, config_toml)?;
    safetensors::serialize_to_file(tensors, Some(meta), path)
        .map_err(|e| ModelError::Checkpoint(format!("cannot write {}: {e}", path.display())))
}

/// The bytes `write_state` writes (the page downloads them).
pub fn state_to_bytes(layout: &ParamLayout, state: &TrainState, config_toml: &str) -> Result<Vec<u8>> {
    let (tensors, meta) = prepare_state(layout, state, config_toml)?;
    safetensors::serialize(tensors, Some(meta)).map_err(|e| ModelError::Checkpoint(e.to_string()))
}

#[allow(clippy::type_complexity)]
fn prepare_state<'a>(
    layout: &ParamLayout,
    state: &'a TrainState,
    config_toml: &str,
) -> Result<(Vec<(String, TensorView<'a>)>, HashMap<String, String>)> {
    let meta = BTreeMap::from([
        ("step".to_string(), state.step.to_string()),
        ("config".to_string(), config_toml.to_string()),
    ]);
    let groups = [
        ("", &state.params[..]),
        ("adamw.m/", &state.m[..]),
        ("adamw.v/", &state.v[..]),
    ];
    prepare(layout, &groups, meta)
}

/// The named tensors of `groups` (prefix, flat buffer) and the metadata with its CRC.
#[allow(clippy::type_complexity)]
fn prepare<'a>(
    layout: &ParamLayout,
    groups: &[(&str, &'a [f32])],
    mut meta: BTreeMap<String, String>,
) -> Result<(Vec<(String, TensorView<'a>)>, HashMap<String, String>)> {
    meta.insert("format".into(), FORMAT.into());
    let mut tensors = Vec::new();
    for (prefix, values) in groups {
        if values.len() != layout.total {
            return Err(ModelError::Checkpoint(format!(
                "a buffer of {} values for a layout of {}",
                values.len(),
                layout.total
            )));
        }
        for s in &layout.specs {
            // safetensors is little-endian, as every target resmem builds for.
            let data = bytemuck::cast_slice::<f32, u8>(&values[s.offset..s.offset + s.len()]);
            let view = TensorView::new(Dtype::F32, s.shape.clone(), data)
                .map_err(|e| ModelError::Checkpoint(e.to_string()))?;
            tensors.push((format!("{prefix}{}", s.name), view));
        }
    }
    let crc = checksum(tensors.iter().map(|(n, t)| (n.as_str(), t.data())), &meta);
    meta.insert(CRC.into(), format!("{crc:08x}"));
    // One metadata entry holding a sorted JSON object: safetensors writes its metadata map in
    // hash order, and the same state must give the same bytes.
    let json = serde_json::to_string(&meta).map_err(|e| ModelError::Checkpoint(e.to_string()))?;
    Ok((tensors, HashMap::from([(FORMAT.to_string(), json)])))
}

/// CRC-32 over the tensors in name order, then the metadata (but the CRC itself) in key order.
fn checksum<'a>(tensors: impl Iterator<Item = (&'a str, &'a [u8])>, meta: &BTreeMap<String, String>) -> u32 {
    let mut sorted: Vec<_> = tensors.collect();
    sorted.sort_by_key(|(name, _)| *name);
    let mut h = crc32fast::Hasher::new();
    for (name, data) in sorted {
        h.update(name.as_bytes());
        h.update(&(data.len() as u64).to_le_bytes());
        h.update(data);
    }
    for (k, v) in meta.iter().filter(|(k, _)| *k != CRC) {
        h.update(&(k.len() as u64).to_le_bytes());
        h.update(k.as_bytes());
        h.update(&(v.len() as u64).to_le_bytes());
        h.update(v.as_bytes());
    }
    h.finalize()
}

/// A parsed file whose CRC matched.
struct Checked<'a> {
    file: SafeTensors<'a>,
    meta: BTreeMap<String, String>,
}

fn corrupt(what: impl std::fmt::Display) -> ModelError {
    ModelError::Checkpoint(format!("corrupt or truncated: {what}"))
}

fn open(bytes: &[u8]) -> Result<Checked<'_>> {
    let file = SafeTensors::deserialize(bytes).map_err(|e| corrupt(format!("not a safetensors file ({e})")))?;
    let (_, header) = SafeTensors::read_metadata(bytes).map_err(|e| corrupt(e.to_string()))?;
    let meta: BTreeMap<String, String> = match header.metadata().as_ref().and_then(|m| m.get(FORMAT)) {
        Some(json) => serde_json::from_str(json).map_err(|e| corrupt(format!("its metadata is not JSON ({e})")))?,
        None => {
            return Err(ModelError::Checkpoint(
                "not written by resmem (its metadata has no `resmem` entry); `resmem import` reads other formats"
                    .into(),
            ))
        }
    };
    if meta.get("format").map(String::as_str) != Some(FORMAT) {
        return Err(corrupt("its metadata does not say `format: resmem`"));
    }
    let stored = meta.get(CRC).ok_or_else(|| corrupt("its checksum is missing"))?;
    let tensors: Vec<(String, TensorView<'_>)> = file.tensors();
    let actual = format!(
        "{:08x}",
        checksum(tensors.iter().map(|(n, t)| (n.as_str(), t.data())), &meta)
    );
    // Compared as text: "Efbbc029" is a flipped bit too.
    if actual != *stored {
        return Err(corrupt(format!("its checksum is {actual}, not the stored {stored}")));
    }
    Ok(Checked { file, meta })
}

/// Fills `out` (a flat buffer) with the tensors `prefix`NAME of `layout`, which must all be
/// there with their shapes, and finite.
fn fill(c: &Checked<'_>, layout: &ParamLayout, prefix: &str, out: &mut [f32]) -> Result<()> {
    for s in &layout.specs {
        let name = format!("{prefix}{}", s.name);
        let t = c.file.tensor(&name).map_err(|_| {
            ModelError::Checkpoint(format!(
                "it has no tensor `{name}`; was it saved by another model or architecture?"
            ))
        })?;
        if t.dtype() != Dtype::F32 || t.shape() != s.shape.as_slice() {
            return Err(ModelError::Checkpoint(format!(
                "`{name}` is {:?} {:?}, but this model needs f32 {:?}; was it saved by another config?",
                t.dtype(),
                t.shape(),
                s.shape
            )));
        }
        let dst = &mut out[s.offset..s.offset + s.len()];
        for (v, b) in dst.iter_mut().zip(t.data().chunks_exact(4)) {
            *v = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        }
        if let Some(i) = dst.iter().position(|v| !v.is_finite()) {
            return Err(ModelError::Checkpoint(format!(
                "`{name}` holds a non-finite value ({}) at index {i}; the run that wrote it diverged",
                dst[i]
            )));
        }
    }
    Ok(())
}

/// The flat parameter buffer of `layout` from a model file or a checkpoint.
pub fn from_bytes(layout: &ParamLayout, bytes: &[u8]) -> Result<Vec<f32>> {
    let c = open(bytes)?;
    let mut values = vec![0.0; layout.total];
    fill(&c, layout, "", &mut values)?;
    Ok(values)
}

/// The config.toml a checkpoint was written with, without reading its tensors' values.
pub fn config_of(bytes: &[u8]) -> Result<String> {
    let c = open(bytes)?;
    c.meta
        .get("config")
        .cloned()
        .ok_or_else(|| ModelError::Checkpoint("it is a model file, not a checkpoint (it has no config)".into()))
}

/// The full training state of a checkpoint for `layout`.
pub fn state_from_bytes(layout: &ParamLayout, bytes: &[u8]) -> Result<TrainState> {
    let c = open(bytes)?;
    let step = c
        .meta
        .get("step")
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| ModelError::Checkpoint("it is a model file, not a checkpoint (it has no step)".into()))?;
    let mut state = TrainState {
        step,
        params: vec![0.0; layout.total],
        m: vec![0.0; layout.total],
        v: vec![0.0; layout.total],
    };
    fill(&c, layout, "", &mut state.params)?;
    fill(&c, layout, "adamw.m/", &mut state.m)?;
    fill(&c, layout, "adamw.v/", &mut state.v)?;
    Ok(state)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::params::{Init, LayoutBuilder};

    fn layout(width: usize) -> ParamLayout {
        let mut lb = LayoutBuilder::default();
        lb.add("a", &[3, width], true, Init::Normal { std: 1.0 });
        lb.add("b", &[5], false, Init::Constant(1.0));
        lb.build()
    }

    #[test]
    fn round_trip_keeps_every_value_and_padding_stays_zero() {
        let l = layout(7);
        let values = l.init_values(3);
        let back = from_bytes(&l, &to_bytes(&l, &values).unwrap()).unwrap();
        assert_eq!(back, values);
    }

    #[test]
    fn a_checkpoint_restores_step_params_and_moments() {
        let l = layout(7);
        let state = TrainState {
            step: 42,
            params: l.init_values(1),
            m: l.init_values(2),
            v: l.init_values(3).iter().map(|x| x * x).collect(),
        };
        let dir = std::env::temp_dir().join(format!("resmem-ckpt-{}", std::process::id()));
        write_state(&l, &state, "a = 1\n", &dir).unwrap();
        let bytes = std::fs::read(&dir).unwrap();
        std::fs::remove_file(&dir).unwrap();
        // The page's download is the same file.
        assert_eq!(state_to_bytes(&l, &state, "a = 1\n").unwrap(), bytes);
        assert_eq!(state_from_bytes(&l, &bytes).unwrap(), state);
        assert_eq!(config_of(&bytes).unwrap(), "a = 1\n");
        // A checkpoint is also a model file.
        assert_eq!(from_bytes(&l, &bytes).unwrap(), state.params);
    }

    #[test]
    fn wrong_shapes_corrupt_files_and_non_finite_weights_are_clear_errors() {
        let bytes = to_bytes(&layout(7), &layout(7).init_values(3)).unwrap();
        let err = from_bytes(&layout(8), &bytes).unwrap_err().to_string();
        assert!(err.contains("`a`") && err.contains("[3, 8]"), "{err}");
        let err = from_bytes(&layout(7), &bytes[..bytes.len() / 2])
            .unwrap_err()
            .to_string();
        assert!(err.contains("corrupt or truncated"), "{err}");
        // One flipped bit in the last weight.
        let mut flipped = bytes.clone();
        *flipped.last_mut().unwrap() ^= 1;
        let err = from_bytes(&layout(7), &flipped).unwrap_err().to_string();
        assert!(
            err.contains("corrupt or truncated") && err.contains("checksum"),
            "{err}"
        );
        let mut values = layout(7).init_values(3);
        values[2] = f32::NAN;
        let err = from_bytes(&layout(7), &to_bytes(&layout(7), &values).unwrap())
            .unwrap_err()
            .to_string();
        assert!(err.contains("`a`") && err.contains("non-finite"), "{err}");
    }
}
