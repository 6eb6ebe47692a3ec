//! What a config costs, by the counters `resmem count` prints, beside a transformer of matching
//! dimensions (the page's cost table); and a model's sizes in the papers' letters.

use models::count::{self, ModelCounts};
use models::{ModelConfig, RunConfig, TransformerConfig};

/// One row of the cost table: a name, its parameters and forward FLOPs per token.
pub struct CostRow {
    pub name: String,
    pub counts: ModelCounts,
}

/// The chosen config's counts, and a transformer of matching dimensions, computed by the
/// counters `resmem count` prints.
pub fn costs(cfg: &RunConfig) -> Result<Vec<CostRow>, String> {
    let count = |m: &ModelConfig| count::try_model(m).map_err(|e| e.to_string());
    let mut rows = vec![CostRow {
        name: describe(&cfg.model),
        counts: count(&cfg.model)?,
    }];
    let (vocab, n) = (cfg.model.vocab(), cfg.model.context());
    let twin = |d: usize, l: usize, h: usize, dh: usize, ff: usize| TransformerConfig {
        d_model: d,
        n_layers: l,
        n_heads: h,
        head_dim: dh,
        d_ff: ff,
        ..TransformerConfig::tiny(vocab, n)
    };
    let matching = match &cfg.model {
        ModelConfig::Rmt(r) => Some(twin(r.rank * r.d_v, r.n_layers, r.rank, r.d_v, r.d_ff)),
        ModelConfig::Hybrid(h) => {
            let d = h.rank * h.d_v;
            Some(twin(d, h.n_layers, h.rank, h.d_v, 4 * d))
        }
        ModelConfig::MemoryFormer(m) => Some(twin(m.d_model, m.n_layers, m.n_heads, m.head_dim(), 4 * m.d_model)),
        ModelConfig::Transformer(_) => None,
    };
    if let Some(t) = matching {
        let t = ModelConfig::Transformer(t);
        rows.push(CostRow {
            name: format!("Transformer of matching dimensions: {}", describe(&t)),
            counts: count(&t)?,
        });
    }
    Ok(rows)
}

/// A model's sizes in the papers' letters.
pub fn describe(m: &ModelConfig) -> String {
    match m {
        ModelConfig::Transformer(c) => format!(
            "Transformer D={} H={} D_h={} D_FF={} L={}",
            c.d_model, c.n_heads, c.head_dim, c.d_ff, c.n_layers
        ),
        ModelConfig::Rmt(c) => format!(
            "RMT D_k={} D_v={} R={} D_FF={} L={} (residual {})",
            c.d_k,
            c.d_v,
            c.rank,
            c.d_ff,
            c.n_layers,
            c.residual()
        ),
        ModelConfig::Hybrid(c) => format!(
            "Hybrid D_k={} D_v={} R={} τ={} L={}",
            c.d_k, c.d_v, c.rank, c.tau, c.n_layers
        ),
        ModelConfig::MemoryFormer(c) => format!(
            "MemoryFormer d={} H={} τ={} L={}",
            c.d_model, c.n_heads, c.tau, c.n_layers
        ),
    }
}
