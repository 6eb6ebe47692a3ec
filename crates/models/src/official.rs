//! The official RMT code's parameters (bmac3/residual-matrix-transformer, JAX/Equinox/Haliax),
//! in and out, bit for bit. SPEC §2a; the names, axes and conventions are those of
//! `tests/fixtures/official-rmt/rmt_official_small.json` (a copy of
//! the shared fixture).
//!
//! The official code names every array axis (haliax) and stacks per-layer parameters on a
//! leading `Layer` axis; resmem keeps one tensor per layer with its own axis order. Each
//! official tensor is therefore a list of named axes, and moving it is a transpose by name
//! (plus a split or a stack along `Layer`). Values are copied, never computed, so
//! import-then-export gives back the same bytes.

use crate::config::{Norm, Position};
use crate::params::ParamLayout;
use crate::{ModelError, Result, RmtConfig};
use safetensors::tensor::{Dtype, SafeTensors, TensorView};
use std::collections::{BTreeMap, HashMap};

/// The official code's axis names (haliax `Axis.name`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Axis {
    Layer,
    Vocab,
    ResKey,
    ResVal,
    Rank,
    Qkv,
    Neuron,
}

impl Axis {
    pub fn name(self) -> &'static str {
        match self {
            Axis::Layer => "Layer",
            Axis::Vocab => "Vocab",
            Axis::ResKey => "ResKey",
            Axis::ResVal => "ResVal",
            Axis::Rank => "Rank",
            Axis::Qkv => "QKV",
            Axis::Neuron => "Neuron",
        }
    }

    /// resmem's symbol for the size, for messages and docs.
    pub fn symbol(self) -> &'static str {
        match self {
            Axis::Layer => "L",
            Axis::Vocab => "V",
            Axis::ResKey => "D_k",
            Axis::ResVal => "D_v",
            Axis::Rank => "R",
            Axis::Qkv => "3",
            Axis::Neuron => "D_FF",
        }
    }
}

/// One official tensor and the resmem parameter(s) it is.
pub struct Mapping {
    /// The official name (the Param's path below `RMTModel.module`).
    pub official: &'static str,
    /// Its axes, outermost first.
    pub axes: &'static [Axis],
    /// The resmem parameter; `{i}` stands for the layer when `axes` starts with `Layer`.
    pub resmem: &'static str,
    /// The resmem parameter's axes, outermost first (never `Layer`).
    pub resmem_axes: &'static [Axis],
}

use Axis::*;

/// Every parameter of an official RMT, in the fixture's order. resmem stores a residual as
/// (D_k, D_v) where the official code stores (ResVal, ResKey); a head's vectors are (Rank, ResVal)
/// blocks of R·D_v; retrieval and storage keys are (Rank, ResKey); r_qkv's 3R keys are Q, K, V
/// blocks of R.
pub const MAPPINGS: [Mapping; 13] = [
    Mapping {
        official: "embedding.weight",
        axes: &[Vocab, ResVal, Rank],
        resmem: "wte",
        resmem_axes: &[Vocab, Rank, ResVal],
    },
    Mapping {
        official: "storage_linear.weight",
        axes: &[Rank, ResKey],
        resmem: "w_e",
        resmem_axes: &[Rank, ResKey],
    },
    Mapping {
        official: "rmt_stack.attention.norm.weight",
        axes: &[Layer, ResVal, ResKey],
        resmem: "blocks.{i}.ln1",
        resmem_axes: &[ResKey, ResVal],
    },
    Mapping {
        official: "rmt_stack.attention.qkv_linear.weight",
        axes: &[Layer, ResKey, Qkv, Rank],
        resmem: "blocks.{i}.r_qkv",
        resmem_axes: &[Qkv, Rank, ResKey],
    },
    Mapping {
        official: "rmt_stack.attention.out_linear.weight",
        axes: &[Layer, Rank, ResKey],
        resmem: "blocks.{i}.w_o",
        resmem_axes: &[Rank, ResKey],
    },
    Mapping {
        official: "rmt_stack.mlp.norm.weight",
        axes: &[Layer, ResVal, ResKey],
        resmem: "blocks.{i}.ln2",
        resmem_axes: &[ResKey, ResVal],
    },
    Mapping {
        official: "rmt_stack.mlp.retrieval_linear.weight",
        axes: &[Layer, ResKey, Rank],
        resmem: "blocks.{i}.r_ff",
        resmem_axes: &[Rank, ResKey],
    },
    Mapping {
        official: "rmt_stack.mlp.W1.weight",
        axes: &[Layer, ResVal, Rank, Neuron],
        resmem: "blocks.{i}.w1",
        resmem_axes: &[Neuron, Rank, ResVal],
    },
    Mapping {
        official: "rmt_stack.mlp.W2.weight",
        axes: &[Layer, Neuron, ResVal, Rank],
        resmem: "blocks.{i}.w2",
        resmem_axes: &[Rank, ResVal, Neuron],
    },
    Mapping {
        official: "rmt_stack.mlp.storage_linear.weight",
        axes: &[Layer, Rank, ResKey],
        resmem: "blocks.{i}.w_ff",
        resmem_axes: &[Rank, ResKey],
    },
    Mapping {
        official: "norm.weight",
        axes: &[ResVal, ResKey],
        resmem: "lnf",
        resmem_axes: &[ResKey, ResVal],
    },
    Mapping {
        official: "retrieval_linear.weight",
        axes: &[ResKey, Rank],
        resmem: "r_u",
        resmem_axes: &[Rank, ResKey],
    },
    Mapping {
        official: "unembedding.weight",
        axes: &[ResVal, Rank, Vocab],
        resmem: "w_u",
        resmem_axes: &[Vocab, Rank, ResVal],
    },
];

/// The metadata key under which an exported file lists each tensor's axes (a JSON object of
/// name → axis names), and which an import checks when it is present.
pub const AXES_KEY: &str = "axes";

/// The sizes an official file's shapes imply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OfficialDims {
    pub vocab: usize,
    pub d_k: usize,
    pub d_v: usize,
    pub rank: usize,
    pub n_layers: usize,
    pub d_ff: usize,
}

impl OfficialDims {
    pub fn of(cfg: &RmtConfig) -> Self {
        Self {
            vocab: cfg.vocab,
            d_k: cfg.d_k,
            d_v: cfg.d_v,
            rank: cfg.rank,
            n_layers: cfg.n_layers,
            d_ff: cfg.d_ff,
        }
    }

    pub fn size(&self, axis: Axis) -> usize {
        match axis {
            Layer => self.n_layers,
            Vocab => self.vocab,
            ResKey => self.d_k,
            ResVal => self.d_v,
            Rank => self.rank,
            Qkv => 3,
            Neuron => self.d_ff,
        }
    }

    fn shape(&self, axes: &[Axis]) -> Vec<usize> {
        axes.iter().map(|&a| self.size(a)).collect()
    }

    /// An RMT with the official code's conventions (SPEC §2a) and these sizes, for windows of
    /// up to `seq_len` tokens.
    pub fn config(&self, seq_len: usize) -> RmtConfig {
        RmtConfig {
            vocab: self.vocab,
            d_k: self.d_k,
            d_v: self.d_v,
            rank: self.rank,
            n_layers: self.n_layers,
            d_ff: self.d_ff,
            ..official_conventions(seq_len)
        }
    }
}

/// The official code's conventions (SPEC §2a), at the small-rmt preset's sizes: ALiBi and no
/// position table, whole-matrix RMSNorm with eps 1e-6, logits divided by (layer + 1) with ALiBi
/// added after, tanh GELU (resmem's only GELU), z-loss 1e-4, init std 0.02/sqrt(fan_in) with a
/// zero unembedding and output keys scaled by 1/sqrt(2L), and documents masked apart.
pub fn official_conventions(seq_len: usize) -> RmtConfig {
    RmtConfig {
        vocab: 50257,
        context: seq_len,
        d_k: 16,
        d_v: 16,
        rank: 4,
        n_layers: 2,
        d_ff: 256,
        norm: Norm::RmsNorm,
        norm_eps: 1e-6,
        position: Position::Alibi,
        attn_layer_scale: true,
        scaled_output_init: true,
        init_std: 0.02,
        weight_init: crate::WeightInit::FanIn,
        zero_unembedding: true,
        z_loss: 1e-4,
    }
}

/// Checks that `cfg` computes what the official code computes, naming what differs.
pub fn check_conventions(cfg: &RmtConfig) -> Result<()> {
    let want = official_conventions(cfg.context);
    let mut differ = vec![];
    if cfg.norm != want.norm {
        differ.push("norm = \"rmsnorm\"");
    }
    if cfg.position != want.position {
        differ.push("position = \"alibi\"");
    }
    if !cfg.attn_layer_scale {
        differ.push("attn_layer_scale = true");
    }
    match differ.is_empty() {
        true => Ok(()),
        false => Err(ModelError::Config(format!(
            "the official RMT code has no equivalent of this model; it needs {} (start from --preset official)",
            differ.join(", ")
        ))),
    }
}

fn bad(msg: impl Into<String>) -> ModelError {
    ModelError::Checkpoint(msg.into())
}

/// Row-major strides of `shape`.
fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1];
    }
    s
}

/// Copies `src` (axes `from`, sizes from `dims`) into `dst` laid out with axes `to`; `fixed`
/// pins one axis of `from` that `to` lacks (the layer) to an index.
fn transpose(
    src: &[f32],
    from: &[Axis],
    dst: &mut [f32],
    to: &[Axis],
    dims: &OfficialDims,
    fixed: Option<(Axis, usize)>,
) {
    let src_strides = strides(&dims.shape(from));
    let stride_of = |a: Axis| src_strides[from.iter().position(|&x| x == a).expect("mapped axes match")];
    let base = fixed.map_or(0, |(a, i)| i * stride_of(a));
    let to_shape = dims.shape(to);
    let to_strides: Vec<usize> = to.iter().map(|&a| stride_of(a)).collect();
    let mut index = vec![0usize; to.len()];
    for value in dst.iter_mut() {
        *value = src[base + index.iter().zip(&to_strides).map(|(i, s)| i * s).sum::<usize>()];
        // Odometer over `to`'s shape, last axis fastest.
        for d in (0..to.len()).rev() {
            index[d] += 1;
            if index[d] < to_shape[d] {
                break;
            }
            index[d] = 0;
        }
    }
}

/// The inverse of `transpose`: scatters `src` (axes `to`) into the slice of `dst` (axes `from`).
fn untranspose(
    src: &[f32],
    to: &[Axis],
    dst: &mut [f32],
    from: &[Axis],
    dims: &OfficialDims,
    fixed: Option<(Axis, usize)>,
) {
    let dst_strides = strides(&dims.shape(from));
    let stride_of = |a: Axis| dst_strides[from.iter().position(|&x| x == a).expect("mapped axes match")];
    let base = fixed.map_or(0, |(a, i)| i * stride_of(a));
    let to_shape = dims.shape(to);
    let to_strides: Vec<usize> = to.iter().map(|&a| stride_of(a)).collect();
    let mut index = vec![0usize; to.len()];
    for &value in src {
        dst[base + index.iter().zip(&to_strides).map(|(i, s)| i * s).sum::<usize>()] = value;
        for d in (0..to.len()).rev() {
            index[d] += 1;
            if index[d] < to_shape[d] {
                break;
            }
            index[d] = 0;
        }
    }
}

/// The resmem parameter names of mapping `m`: one, or one per layer.
fn resmem_names(m: &Mapping, dims: &OfficialDims) -> Vec<(String, Option<(Axis, usize)>)> {
    match m.axes.first() {
        Some(Layer) => (0..dims.n_layers)
            .map(|i| (m.resmem.replace("{i}", &i.to_string()), Some((Layer, i))))
            .collect(),
        _ => vec![(m.resmem.to_string(), None)],
    }
}

/// An official parameter file, read and checked.
pub struct Imported {
    pub dims: OfficialDims,
    /// Every official tensor by name, as f32 values in the official axis order.
    pub tensors: BTreeMap<String, Vec<f32>>,
    /// Tensors whose axis order the shapes alone cannot prove (two axes of equal size) and the
    /// file did not name: checked only by the conformance of the model's outputs.
    pub unverified_axes: Vec<String>,
}

/// The axis names recorded in the file's metadata, if it has any.
fn recorded_axes(bytes: &[u8]) -> Result<Option<HashMap<String, Vec<String>>>> {
    let (_, header) = SafeTensors::read_metadata(bytes).map_err(|e| bad(format!("not a safetensors file ({e})")))?;
    let Some(json) = header.metadata().as_ref().and_then(|m| m.get(AXES_KEY)) else {
        return Ok(None);
    };
    serde_json::from_str(json).map(Some).map_err(|e| {
        bad(format!(
            "its `{AXES_KEY}` metadata is not a JSON object of axis-name lists ({e})"
        ))
    })
}

/// Reads an official parameter file: every name, dtype, shape and (where recorded) axis order
/// checked, the sizes inferred from the shapes, every value finite.
pub fn read(bytes: &[u8]) -> Result<Imported> {
    let file = SafeTensors::deserialize(bytes).map_err(|e| bad(format!("not a safetensors file ({e})")))?;
    let axes_meta = recorded_axes(bytes)?;
    let names: Vec<String> = file.names().into_iter().map(|n| n.to_string()).collect();
    let known: Vec<&str> = MAPPINGS.iter().map(|m| m.official).collect();
    let mut unknown: Vec<&String> = names.iter().filter(|n| !known.contains(&n.as_str())).collect();
    unknown.sort();
    if !unknown.is_empty() {
        let hint = if names.iter().any(|n| n.starts_with("blocks.") || n == "wte") {
            " (this looks like a resmem file: load it with --checkpoint, or import only official ones)"
        } else {
            ""
        };
        let more = match unknown.len() {
            n if n > 6 => format!(" and {} more", n - 6),
            _ => String::new(),
        };
        return Err(bad(format!(
            "it has tensors the official RMT does not: {}{more}{hint}",
            unknown
                .iter()
                .take(6)
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    let missing: Vec<&str> = known
        .iter()
        .copied()
        .filter(|k| !names.iter().any(|n| n == k))
        .collect();
    if !missing.is_empty() {
        return Err(bad(format!(
            "it lacks the official RMT tensors {}; export every parameter of the model",
            missing.join(", ")
        )));
    }
    let shape_of = |name: &str| file.tensor(name).map(|t| t.shape().to_vec()).unwrap_or_default();
    // Sizes from three tensors that together name every axis; every shape is checked below.
    let (emb, key, w1) = (
        shape_of("embedding.weight"),
        shape_of("storage_linear.weight"),
        shape_of("rmt_stack.mlp.W1.weight"),
    );
    let dims = match (emb.as_slice(), key.as_slice(), w1.as_slice()) {
        ([v, dv, r], [_, dk], [l, _, _, f]) => OfficialDims {
            vocab: *v,
            d_k: *dk,
            d_v: *dv,
            rank: *r,
            n_layers: *l,
            d_ff: *f,
        },
        _ => {
            return Err(bad(format!(
                "embedding.weight {emb:?}, storage_linear.weight {key:?} or rmt_stack.mlp.W1.weight {w1:?} does not \
                 have the official rank (Vocab, ResVal, Rank), (Rank, ResKey), (Layer, ResVal, Rank, Neuron)"
            )))
        }
    };
    if [dims.vocab, dims.d_k, dims.d_v, dims.rank, dims.n_layers, dims.d_ff].contains(&0) {
        return Err(bad(format!("a size is 0: {dims:?}")));
    }
    let mut tensors = BTreeMap::new();
    let mut unverified_axes = vec![];
    for m in &MAPPINGS {
        let view = file.tensor(m.official).map_err(|e| bad(e.to_string()))?;
        let axis_list = m.axes.iter().map(|a| a.name()).collect::<Vec<_>>().join(", ");
        if view.dtype() != Dtype::F32 {
            return Err(bad(format!(
                "{} is {:?}; the importer reads float32 (the official parameters' full_dtype): cast with \
                 .astype(jnp.float32) before saving",
                m.official,
                view.dtype()
            )));
        }
        let want = dims.shape(m.axes);
        if view.shape() != want.as_slice() {
            let named: Vec<String> = m
                .axes
                .iter()
                .zip(&want)
                .map(|(a, n)| format!("{}={n}", a.symbol()))
                .collect();
            return Err(bad(format!(
                "{} has shape {:?}; with the sizes the other tensors imply it must be [{}] (axes {axis_list})",
                m.official,
                view.shape(),
                named.join(", ")
            )));
        }
        match axes_meta.as_ref().and_then(|a| a.get(m.official)) {
            Some(recorded) if recorded.iter().map(String::as_str).ne(m.axes.iter().map(|a| a.name())) => {
                return Err(bad(format!(
                    "{} has axes ({}) where the official RMT has ({axis_list}); transpose it before saving",
                    m.official,
                    recorded.join(", ")
                )))
            }
            Some(_) => {}
            None => {
                let sizes: Vec<usize> = m.axes.iter().filter(|&&a| a != Qkv).map(|&a| dims.size(a)).collect();
                let ambiguous = (0..sizes.len()).any(|i| sizes[i + 1..].contains(&sizes[i]));
                if ambiguous {
                    unverified_axes.push(m.official.to_string());
                }
            }
        }
        let values: Vec<f32> = view
            .data()
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        if let Some(i) = values.iter().position(|v| !v.is_finite()) {
            return Err(bad(format!(
                "{} holds a non-finite value ({}) at flat index {i}",
                m.official, values[i]
            )));
        }
        tensors.insert(m.official.to_string(), values);
    }
    Ok(Imported {
        dims,
        tensors,
        unverified_axes,
    })
}

/// The official tensors as the flat parameter buffer of `layout` (an RMT of `dims` with ALiBi).
pub fn to_flat(imported: &Imported, layout: &ParamLayout) -> Result<Vec<f32>> {
    let dims = &imported.dims;
    let mut flat = vec![0.0f32; layout.total];
    let mut filled = 0;
    for m in &MAPPINGS {
        let src = &imported.tensors[m.official];
        for (name, fixed) in resmem_names(m, dims) {
            let spec = layout
                .specs
                .iter()
                .find(|s| s.name == name)
                .ok_or_else(|| bad(format!("the resmem model has no parameter {name}")))?;
            // r_qkv's (QKV, Rank) axes are one (3R) axis in resmem: compare sizes.
            if spec.len() != dims.shape(m.resmem_axes).iter().product::<usize>() {
                return Err(bad(format!("{name} has shape {:?} in the resmem model", spec.shape)));
            }
            transpose(
                src,
                m.axes,
                &mut flat[spec.offset..spec.offset + spec.len()],
                m.resmem_axes,
                dims,
                fixed,
            );
            filled += 1;
        }
    }
    if filled != layout.specs.len() {
        return Err(bad(format!(
            "the resmem model has {} parameters, the official file fills {filled}: it is not an official-convention RMT",
            layout.specs.len()
        )));
    }
    Ok(flat)
}

/// The flat buffer of `layout` (parameters, or their gradients) as official tensors.
pub fn from_flat(flat: &[f32], layout: &ParamLayout, dims: &OfficialDims) -> Result<BTreeMap<String, Vec<f32>>> {
    if flat.len() != layout.total {
        return Err(bad(format!(
            "a buffer of {} values for a layout of {}",
            flat.len(),
            layout.total
        )));
    }
    let mut out = BTreeMap::new();
    for m in &MAPPINGS {
        let mut dst = vec![0.0f32; dims.shape(m.axes).iter().product()];
        for (name, fixed) in resmem_names(m, dims) {
            let spec = layout.specs.iter().find(|s| s.name == name).ok_or_else(|| {
                bad(format!(
                    "the model has no parameter {name}: only an RMT with ALiBi (the official conventions) exports"
                ))
            })?;
            untranspose(
                &flat[spec.offset..spec.offset + spec.len()],
                m.resmem_axes,
                &mut dst,
                m.axes,
                dims,
                fixed,
            );
        }
        out.insert(m.official.to_string(), dst);
    }
    Ok(out)
}

/// Official tensors as safetensors bytes, each tensor's axes named in the metadata.
pub fn to_bytes(tensors: &BTreeMap<String, Vec<f32>>, dims: &OfficialDims) -> Result<Vec<u8>> {
    let mut views = vec![];
    let mut axes = BTreeMap::new();
    for m in &MAPPINGS {
        let values = tensors
            .get(m.official)
            .ok_or_else(|| bad(format!("no tensor {}", m.official)))?;
        let data = bytemuck::cast_slice::<f32, u8>(values);
        let view = TensorView::new(Dtype::F32, dims.shape(m.axes), data).map_err(|e| bad(e.to_string()))?;
        views.push((m.official.to_string(), view));
        axes.insert(m.official, m.axes.iter().map(|a| a.name()).collect::<Vec<_>>());
    }
    let meta = HashMap::from([
        (
            AXES_KEY.to_string(),
            serde_json::to_string(&axes).map_err(|e| bad(e.to_string()))?,
        ),
        ("format".to_string(), "official-rmt".to_string()),
    ]);
    safetensors::serialize(views, Some(meta)).map_err(|e| bad(e.to_string()))
}
