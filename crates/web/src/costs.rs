//! What a config costs, by the counters `resmem count` prints, beside the transformer of matching
//! dimensions (the page's cost table).

use models::count::{self, ModelCounts};
use models::{ModelConfig, RunConfig};

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
        name: cfg.model.describe(),
        counts: count(&cfg.model)?,
    }];
    let matching = cfg.model.matching_transformer();
    if let Some(t) = matching {
        let t = ModelConfig::Transformer(t);
        rows.push(CostRow {
            name: format!("Transformer of matching dimensions: {}", t.describe()),
            counts: count(&t)?,
        });
    }
    Ok(rows)
}
