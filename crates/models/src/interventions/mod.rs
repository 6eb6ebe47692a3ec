//! Reaching inside a model: sites with one vocabulary for every architecture (`sites`), the
//! edits that ablate or patch them during a forward (`edits`, `drive`), and direct logit
//! attribution (`dla`).

pub mod dla;
pub mod drive;
pub mod edits;
pub mod patching;
pub mod sites;

pub use dla::ReadOut;
pub use drive::{Ablation, Outcome};
pub use edits::{Edit, Edits, Tap};
pub use patching::{Agreement, Pair, Patched, Patcher};
pub use sites::{EditPoint, Group, MemoryLayer, Point, Points, Site};

use crate::{LanguageModel, Result};
use dla::{Frozen, Weights};
use engine::Backend;
use serde::{Deserialize, Serialize};

/// One part of the last residual and the logit (or difference) it makes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Share {
    pub site: String,
    pub logit: f64,
}

/// Direct logit attribution of one token's logit (or difference of two) to the parts of its
/// last residual; each family of parts adds up to the logit, with the final norm's scale frozen.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Attribution {
    /// The model's own logit (or difference), from its forward.
    pub logit: f64,
    /// The embedding and every layer's write (vector and matrix residuals): they add up to
    /// the logit. Empty for hyper-connections, whose mixing moves writes between streams.
    pub writes: Vec<Share>,
    /// Each head's part of its attention's write, where the output map is linear (dense maps,
    /// an RMT's w_O keys): a block's heads add up to its attention's share.
    pub heads: Vec<Share>,
    /// Each key slot (an RMT's row) or stream of the last residual: they add up to the logit.
    pub groups: Vec<Share>,
    /// Each table of a block's ML2 (`block0.ml2.table3`) and its bias (`block0.ml2.bias`), where
    /// ML2's output is the FF's write: a block's add up to its FF's share.
    #[serde(default)]
    pub tables: Vec<Share>,
}

/// Attributes logit `target` (minus `versus`'s) of token `token` of sequence `seq` (windows of
/// `t`) in the forward of `batch`, which it runs. None where the read-out is not linear once its
/// norm is frozen (hyper-connections' gated head).
pub async fn attribute<B: Backend, M: LanguageModel<B>>(
    be: &B,
    model: &mut M,
    on: (&data::Batch, Option<u32>),
    (seq, t, token): (usize, usize, usize),
    target: u32,
    versus: Option<u32>,
) -> Result<Option<Attribution>> {
    let Some(read) = model.linear_read_out() else {
        return Ok(None);
    };
    let row = seq * t + token;
    // The forward, with a copy of each ML2's table terms (the forward computes them apart only
    // when asked); everything below reads this forward.
    let terms = drive::read_some(be, model, on, |p| matches!(p, Point::Tables(_, MemoryLayer::Ml2))).await?;
    let model = &*model;
    let inside = model.inside();
    let mut residuals = Vec::new();
    for r in &inside.residuals {
        let w = r.shape.size();
        residuals.push(be.read_range(r.tensor, row * w, w).await?);
    }
    let v = model.vocab();
    if let Some(past) = [Some(target), versus].into_iter().flatten().find(|&x| x as usize >= v) {
        return Err(crate::ModelError::Config(format!(
            "token {past} is past the vocabulary of {v}"
        )));
    }
    let logits = be.read_range(&model.head().logits, row * v, v).await?;
    let logit = f64::from(logits[target as usize]) - versus.map_or(0.0, |b| f64::from(logits[b as usize]));
    let store = model.store();
    let points = model.edit_points();
    // Each block's heads, where its output map is a plain weight.
    let head_maps: Vec<(&EditPoint<'_, B>, String)> = (points.iter())
        .filter_map(|p| match p.point {
            Point::Heads(l) => head_map(&store.layout, l).map(|name| (p, name)),
            Point::Embedding | Point::Write(..) | Point::Residual(_) | Point::Tables(..) => None,
        })
        .collect();
    let mut names: Vec<String> = ["lnf", "w_u", "r_u"].map(String::from).to_vec();
    names.extend(head_maps.iter().map(|(_, n)| n.clone()));
    // Each ML2's bias, and (an RMT's) the FF keys that store its output.
    for point in terms.keys() {
        if let Point::Tables(l, _) = point {
            names.extend([format!("blocks.{l}.w_ff"), ml2_bias(&store.layout, *l)?]);
        }
    }
    let weights = Weights::read(be, &store.layout, &store.params, &names).await?;
    let whole = residuals.last().cloned().unwrap_or_default();
    let frozen = Frozen::new(read, &weights, &whole, target, versus)?;
    let f64s = |x: &[f32]| x.iter().map(|&x| f64::from(x)).collect::<Vec<f64>>();
    let share = |site: String, part: &[f64]| Share {
        site,
        logit: frozen.share(part),
    };

    let streams = matches!(read, ReadOut::Norm { streams: 2.., .. } | ReadOut::EachNormed { .. });
    let mut writes = Vec::new();
    if !streams {
        for (d, r) in residuals.iter().enumerate() {
            let part: Vec<f64> = match d {
                0 => f64s(r),
                _ => r
                    .iter()
                    .zip(&residuals[d - 1])
                    .map(|(a, b)| f64::from(*a) - f64::from(*b))
                    .collect(),
            };
            writes.push(share(sites::depth_name(d), &part));
        }
    }
    let mut heads = Vec::new();
    for (p, name) in head_maps.iter().filter(|_| !streams) {
        let (Point::Heads(l), width, groups, Some(tensor)) = (p.point, p.width, p.groups, p.tensor) else {
            continue;
        };
        let z = f64s(&be.read_range(tensor, row * width, width).await?);
        let w_o = weights.get(name)?;
        let dh = width / groups;
        for h in 0..groups {
            let z_h = &z[h * dh..(h + 1) * dh];
            let part: Vec<f64> = match read {
                // An RMT head writes its values along its key: w_O[h] ⊗ z_h (D_k × D_v).
                ReadOut::Keys { dk, .. } => (0..dk)
                    .flat_map(|i| z_h.iter().map(move |z| w_o[h * dk + i] * z))
                    .collect(),
                // A dense head writes W_O[:, its columns] · z_h (W_O is (D, H·D_h)).
                ReadOut::Norm { .. } | ReadOut::EachNormed { .. } => (0..w_o.len() / width)
                    .map(|c| (0..dh).map(|j| w_o[c * width + h * dh + j] * z_h[j]).sum())
                    .collect(),
            };
            heads.push(share(Site::Head(l, h).to_string(), &part));
        }
    }
    let mut groups = Vec::new();
    let last = points.iter().rfind(|p| matches!(p.point, Point::Residual(_)));
    if let (Some(group), Some(&EditPoint { width, groups: n, .. })) = (model.residual_groups(), last) {
        let size = width / n;
        for k in 0..n {
            let mut part = vec![0.0; width];
            part[k * size..(k + 1) * size].copy_from_slice(&f64s(&whole[k * size..(k + 1) * size]));
            let site = Site::Group {
                group,
                index: k,
                depth: None,
            };
            groups.push(share(site.to_string(), &part));
        }
    }
    let mut tables = Vec::new();
    for (point, (values, width)) in terms.iter().filter(|_| !streams) {
        let Point::Tables(l, _) = *point else { continue };
        let bias = weights.get(&ml2_bias(&store.layout, l)?)?;
        let d_out = bias.len();
        // What ML2 writes into the residual: itself (a vector), or stored along the FF's keys
        // w_FF (an RMT's matrix, from R·D_v values).
        let written = |c: &[f64]| -> Result<Vec<f64>> {
            Ok(match read {
                ReadOut::Keys { dk, dv, .. } => {
                    let w_ff = weights.get(&format!("blocks.{l}.w_ff"))?;
                    let r = d_out / dv;
                    (0..dk * dv)
                        .map(|ij| (0..r).map(|q| w_ff[q * dk + ij / dv] * c[q * dv + ij % dv]).sum())
                        .collect()
                }
                ReadOut::Norm { .. } | ReadOut::EachNormed { .. } => c.to_vec(),
            })
        };
        let row_terms = &values[row * width..(row + 1) * width];
        for (k, c) in row_terms.chunks(d_out).enumerate() {
            let site = Site::Table {
                block: l,
                layer: MemoryLayer::Ml2,
                index: k,
            };
            tables.push(share(site.to_string(), &written(&f64s(c))?));
        }
        tables.push(share(format!("block{l}.ml2.bias"), &written(bias)?));
    }
    Ok(Some(Attribution {
        logit,
        writes,
        heads,
        groups,
        tables,
    }))
}

/// The name of block `l`'s ML2 bias.
fn ml2_bias(layout: &crate::ParamLayout, l: usize) -> Result<String> {
    let prefix = format!("blocks.{l}.");
    (layout.specs.iter())
        .find(|s| s.name.starts_with(&prefix) && s.name.ends_with("ml2.bias"))
        .map(|s| s.name.clone())
        .ok_or_else(|| crate::ModelError::Config(format!("block {l} has no ML2 bias")))
}

/// The name of block `l`'s attention output map where it is a plain weight (`blocks.{l}.w_o`
/// for an RMT, `blocks.{l}.….w_o` for dense maps); None for a hashed one.
fn head_map(layout: &crate::ParamLayout, l: usize) -> Option<String> {
    let prefix = format!("blocks.{l}.");
    (layout.specs.iter())
        .find(|s| s.name.starts_with(&prefix) && s.name.ends_with("w_o"))
        .map(|s| s.name.clone())
}
