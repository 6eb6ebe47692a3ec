//! Variance hooks: σ²(out)/σ²(in) of every storage and retrieval in the forward pass, and
//! σ²(grad in)/σ²(grad out) in the backward (RMT paper §3.2), measured on a real batch.
//!
//! Each probed tensor is reduced on the device to Σx and Σx² by the engine's fixed-order `sum`;
//! only those two numbers per tensor come back, so a measurement costs a few small launches and
//! one tiny read, in the browser too.

use crate::Result;
use engine::Backend;
use engine::VIEW_ALIGN;
use serde::{Deserialize, Serialize};
use std::cell::Cell;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Layer {
    Attn,
    Ff,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Op {
    Storage,
    Retrieval,
    /// The RMT's own dense FF maps, inside its core between retrieval and storage: W1
    /// (R·D_v → D_FF) and W2 (D_FF → R·D_v).
    W1,
    W2,
}

/// One storage or retrieval of one block.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Site {
    /// Block index, from 0.
    pub block: usize,
    pub layer: Layer,
    pub op: Op,
}

/// The probed sites of every block, in the order [`site_index`] numbers them: the RMT's
/// storages and retrievals, and the transformer's linear maps in their places (W_QKV and W1
/// retrieve, W_O and W2 store; RMT paper Table 2).
const BLOCK_SITES: [(Layer, Op); 4] = [
    (Layer::Attn, Op::Retrieval),
    (Layer::Attn, Op::Storage),
    (Layer::Ff, Op::Retrieval),
    (Layer::Ff, Op::Storage),
];

/// Every probed site of a model of `n_layers` blocks.
pub fn block_sites(n_layers: usize) -> Vec<Site> {
    (0..n_layers)
        .flat_map(|block| BLOCK_SITES.map(|(layer, op)| Site { block, layer, op }))
        .collect()
}

/// The index of block `l`'s storage or retrieval site in [`block_sites`].
pub fn site_index(l: usize, layer: Layer, op: Op) -> usize {
    let within = match (layer, op) {
        (Layer::Attn, Op::Retrieval) => 0,
        (Layer::Attn, Op::Storage) => 1,
        (Layer::Ff, Op::Retrieval) => 2,
        (Layer::Ff, Op::Storage) => 3,
        (_, Op::W1 | Op::W2) => unreachable!("W1 and W2 are core sites: core_site_index"),
    };
    l * BLOCK_SITES.len() + within
}

/// The sites of a model of `n_layers` blocks whose FF core has dense maps of its own (the
/// RMT's W1 and W2): [`block_sites`], then each block's W1 and W2.
pub fn block_and_core_sites(n_layers: usize) -> Vec<Site> {
    let core = (0..n_layers).flat_map(|block| {
        [Op::W1, Op::W2].map(|op| Site {
            block,
            layer: Layer::Ff,
            op,
        })
    });
    block_sites(n_layers).into_iter().chain(core).collect()
}

/// The index of block `l`'s W1 (`Op::W1`) or W2 in [`block_and_core_sites`].
pub fn core_site_index(n_layers: usize, l: usize, op: Op) -> usize {
    n_layers * BLOCK_SITES.len() + 2 * l + usize::from(op == Op::W2)
}

/// The four tensors a site's two ratios come from.
#[derive(Clone, Copy, Debug)]
pub enum Quantity {
    In = 0,
    Out = 1,
    GradOut = 2,
    GradIn = 3,
}

/// The measured ratios of one site. A ratio is None when its denominator is zero (for example
/// every gradient of a model whose unembedding is still all zeros).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Measured {
    #[serde(flatten)]
    pub site: Site,
    pub forward_ratio: Option<f64>,
    pub backward_ratio: Option<f64>,
}

pub struct Probes<B: Backend> {
    pub sites: Vec<Site>,
    /// (sites, 4 quantities, 2 sums), each sum in its own 64-aligned slot.
    sums: B::Tensor,
    /// Values in each probed tensor, filled in as they are recorded.
    counts: Vec<Cell<usize>>,
}

impl<B: Backend> Probes<B> {
    pub fn new(be: &B, sites: Vec<Site>) -> engine::Result<Self> {
        let slots = sites.len() * 4 * 2;
        Ok(Self {
            sums: be.zeros("variance probes", slots.max(1) * VIEW_ALIGN)?,
            counts: (0..sites.len() * 4).map(|_| Cell::new(0)).collect(),
            sites,
        })
    }

    /// Records Σx and Σx² of `x` as quantity `q` of site `i`: a pass observing
    /// `Observe::Variance` calls it, and no other.
    pub fn record(&self, be: &B, i: usize, q: Quantity, x: &B::Tensor) {
        let slot = (i * 4 + q as usize) * 2;
        self.counts[i * 4 + q as usize].set(be.len(x));
        be.sum(&be.view(&self.sums, slot * VIEW_ALIGN, 1), x, false);
        be.sum(&be.view(&self.sums, (slot + 1) * VIEW_ALIGN, 1), x, true);
    }

    /// The ratios of the last probed forward and backward.
    pub async fn read(&self, be: &B) -> Result<Vec<Measured>> {
        let sums = be.read(&self.sums).await?;
        let variance = |i: usize, q: Quantity| {
            let slot = (i * 4 + q as usize) * 2;
            let n = self.counts[i * 4 + q as usize].get().max(1) as f64;
            let mean = sums[slot * VIEW_ALIGN] as f64 / n;
            (sums[(slot + 1) * VIEW_ALIGN] as f64 / n - mean * mean).max(0.0)
        };
        let ratio = |num: f64, den: f64| (den > 0.0 && num.is_finite()).then(|| num / den);
        Ok(self
            .sites
            .iter()
            .enumerate()
            .map(|(i, &site)| Measured {
                site,
                forward_ratio: ratio(variance(i, Quantity::Out), variance(i, Quantity::In)),
                backward_ratio: ratio(variance(i, Quantity::GradIn), variance(i, Quantity::GradOut)),
            })
            .collect())
    }
}
