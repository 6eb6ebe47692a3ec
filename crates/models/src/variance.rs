//! Closed-form variance propagation at initialisation (RMT paper Table 1, App. B), for the
//! RMT's storage and retrieval and for the transformer's linear layers they replace.
//!
//! A product of fan_in inputs with zero-mean weights of variance σ²_w multiplies the variance
//! by fan_in·σ²_w forward and by fan_out·σ²_w backward (zero-mean inputs and gradients):
//! - RMT retrieval of R' vectors: fan_in D_k, fan_out R' (3R for attention, R for the FF);
//! - RMT storage of R' vectors: fan_in R', fan_out D_k;
//! - transformer: W_QKV (D → 3·H·D_h) and W1 (D → D_FF) in place of retrieval, W_O
//!   (H·D_h → D) and W2 (D_FF → D) in place of storage;
//! - the RMT's own W1 (R·D_v → D_FF) and W2 (D_FF → R·D_v), inside its FF core.

use crate::probes::{Layer, Op};
use crate::{HybridConfig, ModelConfig, RmtConfig, TransformerConfig, Trunk};
use serde::Serialize;

/// How weights start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InitScheme {
    /// σ²_w = 2/(fan_in + fan_out) (Glorot & Bengio, the assumption of the paper's Table 2).
    Xavier,
    /// σ²_w = 1/fan_in.
    Lecun,
    /// The model's own init: σ²_w = init_std²/fan_in, times 1/(2L) on output storage keys and
    /// output projections when `scaled_output_init` is on (SPEC §2).
    Default,
}

#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct ClosedForm {
    pub model: &'static str,
    pub layer: Layer,
    pub op: Op,
    pub forward_ratio: f64,
    pub backward_ratio: f64,
}

/// One linear map of the given fans; `output` marks the layers scaled by 1/(2L).
struct Map {
    layer: Layer,
    op: Op,
    fan_in: usize,
    fan_out: usize,
    output: bool,
}

/// The output maps' weight variance factor: 1/(2L) with the scaled output init (its std ÷ √(2L)), 1
/// without.
fn output_scale(scaled: bool, n_layers: usize) -> f64 {
    match scaled {
        true => 1.0 / (2.0 * n_layers as f64),
        false => 1.0,
    }
}

fn from_maps(model: &'static str, maps: &[Map], init: InitScheme, std: f64, out_scale: f64) -> Vec<ClosedForm> {
    maps.iter()
        .map(|m| {
            let (fi, fo) = (m.fan_in as f64, m.fan_out as f64);
            let var_w = match init {
                InitScheme::Xavier => 2.0 / (fi + fo),
                InitScheme::Lecun => 1.0 / fi,
                InitScheme::Default => std * std / fi * if m.output { out_scale } else { 1.0 },
            };
            ClosedForm {
                model,
                layer: m.layer,
                op: m.op,
                forward_ratio: fi * var_w,
                backward_ratio: fo * var_w,
            }
        })
        .collect()
}

/// The sites every model has: storages and retrievals (the transformer's maps in their places),
/// not the RMT's own W1 and W2, so that distances of different models compare.
pub fn shared_site(op: Op) -> bool {
    match op {
        Op::Storage | Op::Retrieval => true,
        Op::W1 | Op::W2 => false,
    }
}

/// How far ratios sit from 1, as one factor: exp of the mean |ln ratio| (1 when every ratio is
/// 1; 2 when they are off by 2× on average, either way). None when there are none, or when one
/// is missing (a zero denominator, `probes::Measured`), not positive (ln has no value; a 0 would
/// be infinitely far) or not finite: a distance over only some of the sites would not compare
/// with one over all of them, so neither the CLI's table nor the page shows one.
pub fn distance_from_one(ratios: impl IntoIterator<Item = Option<f64>>) -> Option<f64> {
    let logs: Option<Vec<f64>> = (ratios.into_iter())
        .map(|r| r.filter(|r| *r > 0.0 && r.is_finite()).map(|r| r.ln().abs()))
        .collect();
    let logs = logs.filter(|l| !l.is_empty())?;
    Some((logs.iter().sum::<f64>() / logs.len() as f64).exp())
}

/// The RMT's storages and retrievals, then its own W1 (R·D_v → D_FF) and W2 (D_FF → R·D_v),
/// neither output-scaled.
pub fn rmt(cfg: &RmtConfig, init: InitScheme) -> Vec<ClosedForm> {
    let (rv, f) = (cfg.trunk().width(), cfg.d_ff);
    let dense = [
        Map {
            layer: Layer::Ff,
            op: Op::W1,
            fan_in: rv,
            fan_out: f,
            output: false,
        },
        Map {
            layer: Layer::Ff,
            op: Op::W2,
            fan_in: f,
            fan_out: rv,
            output: false,
        },
    ];
    let mut forms = residual_matrix("rmt", &cfg.trunk(), init);
    forms.extend(from_maps("rmt", &dense, init, cfg.init_std as f64, 1.0));
    forms
}

/// The hybrid's storages and retrievals are the RMT's: the memory block between the FF
/// adapters changes neither side of them (SPEC §5).
pub fn hybrid(cfg: &HybridConfig, init: InitScheme) -> Vec<ClosedForm> {
    residual_matrix("hybrid", &cfg.trunk(), init)
}

/// The closed form of any architecture that has one: the transformer's linear layers, the
/// storages and retrievals of the RMT and the hybrid; None for MemoryFormer, which has neither.
pub fn closed_form(cfg: &ModelConfig, init: InitScheme) -> Option<Vec<ClosedForm>> {
    match cfg {
        ModelConfig::Transformer(c) => Some(transformer(c, init)),
        ModelConfig::Rmt(c) => Some(rmt(c, init)),
        ModelConfig::Hybrid(c) => Some(hybrid(c, init)),
        ModelConfig::Hc(_) | ModelConfig::Altup(_) | ModelConfig::AttnRes(_) => None,
        ModelConfig::MemoryFormer(_) => None,
    }
}

fn residual_matrix(model: &'static str, cfg: &Trunk, init: InitScheme) -> Vec<ClosedForm> {
    let (dk, r) = (cfg.d_k, cfg.rank);
    let maps = [
        Map {
            layer: Layer::Attn,
            op: Op::Retrieval,
            fan_in: dk,
            fan_out: 3 * r,
            output: false,
        },
        Map {
            layer: Layer::Attn,
            op: Op::Storage,
            fan_in: r,
            fan_out: dk,
            output: true,
        },
        Map {
            layer: Layer::Ff,
            op: Op::Retrieval,
            fan_in: dk,
            fan_out: r,
            output: false,
        },
        Map {
            layer: Layer::Ff,
            op: Op::Storage,
            fan_in: r,
            fan_out: dk,
            output: true,
        },
    ];
    let out_scale = output_scale(cfg.scaled_output_init, cfg.n_layers);
    from_maps(model, &maps, init, cfg.init_std as f64, out_scale)
}

pub fn transformer(cfg: &TransformerConfig, init: InitScheme) -> Vec<ClosedForm> {
    let (d, hd, f) = (cfg.d_model, cfg.n_heads * cfg.head_dim, cfg.d_ff);
    let maps = [
        Map {
            layer: Layer::Attn,
            op: Op::Retrieval,
            fan_in: d,
            fan_out: 3 * hd,
            output: false,
        },
        Map {
            layer: Layer::Attn,
            op: Op::Storage,
            fan_in: hd,
            fan_out: d,
            output: true,
        },
        Map {
            layer: Layer::Ff,
            op: Op::Retrieval,
            fan_in: d,
            fan_out: f,
            output: false,
        },
        Map {
            layer: Layer::Ff,
            op: Op::Storage,
            fan_in: f,
            fan_out: d,
            output: true,
        },
    ];
    let out_scale = output_scale(cfg.scaled_output_init, cfg.n_layers);
    from_maps("transformer", &maps, init, cfg.init_std as f64, out_scale)
}

#[cfg(test)]
mod tests {
    use super::distance_from_one;

    #[test]
    fn distance_from_one_by_policy() {
        let d = |r: &[Option<f64>]| distance_from_one(r.iter().copied());
        assert_eq!(d(&[Some(1.0), Some(1.0)]), Some(1.0));
        // 2× up and 2× down are each a factor 2 away.
        let two = d(&[Some(2.0), Some(0.5)]).unwrap();
        assert!((two - 2.0).abs() < 1e-12, "{two}");
        // 4× and 1×: exp((ln 4 + 0) / 2) = 2.
        let mean = d(&[Some(4.0), Some(1.0)]).unwrap();
        assert!((mean - 2.0).abs() < 1e-12, "{mean}");
        // Undefined: no ratios, one missing, one not positive, one not finite.
        assert_eq!(d(&[]), None);
        assert_eq!(d(&[Some(2.0), None]), None);
        assert_eq!(d(&[Some(2.0), Some(0.0)]), None);
        assert_eq!(d(&[Some(2.0), Some(-1.0)]), None);
        assert_eq!(d(&[Some(2.0), Some(f64::INFINITY)]), None);
        assert_eq!(d(&[Some(2.0), Some(f64::NAN)]), None);
    }
}
