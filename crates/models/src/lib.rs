//! Models written once against the engine's `Backend` trait: configs, parameter layouts, init,
//! the Transformer, the RMT, the MemoryFormer and the hybrid (built from shared units), AdamW
//! and the training step, the counters and the variance analysis.

pub mod altup;
pub mod arch;
pub mod attention;
pub mod attnres;
pub mod batch;
pub mod buckets;
pub mod checkpoint;
pub mod config;
pub mod count;
pub mod embedding;
pub mod ff;
pub mod generate;
pub mod hybrid;
pub mod hyper_connections;
pub mod interventions;
pub mod loss;
pub mod matching;
pub mod memory;
pub mod memory_layer;
pub mod memoryformer;
pub mod observe;
pub mod official;
pub mod optim;
pub mod param_sizes;
pub mod params;
pub mod presets;
pub mod probes;
pub mod residual;
pub mod rmt;
pub mod run;
pub mod settings;
pub mod train;
pub mod transformer;
pub mod trunk;
pub mod value_residual;
pub mod variance;

pub use altup::Altup;
pub use arch::Arch;
pub use attnres::AttnRes;
pub use batch::BatchTensors;
pub use config::{
    AltupActive, AltupConfig, AltupInput, AttnResConfig, DepthKeys, Hashing, HcCollapse, HcConfig, HcInit, HcMixing,
    HybridConfig, MemoryFormerConfig, ModelConfig, Norm, Position, RmtConfig, TrainConfig, TransformerConfig, Trunk,
    ValueResidual, WeightInit,
};
pub use hybrid::Hybrid;
pub use hyper_connections::HyperConnections;
pub use memory::{MemoryEstimate, Purpose};
pub use memoryformer::MemoryFormer;
pub use observe::{Inside, Observe};
pub use optim::{AdamW, Schedule};
pub use params::{ParamLayout, ParamSpec, ParamStore};
pub use rmt::Rmt;
pub use run::{Cadence, DataConfig, RunConfig};
pub use train::{Evaluator, LanguageModel, Trainer};
pub use transformer::Transformer;

/// Errors a user can act on: bad configs, data that does not fit the model.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error("invalid config: {0}")]
    Config(String),
    #[error("bad batch: {0}")]
    Batch(String),
    #[error("cannot read the checkpoint: {0}")]
    Checkpoint(String),
    #[error(transparent)]
    Engine(#[from] engine::EngineError),
}

pub type Result<T, E = ModelError> = std::result::Result<T, E>;
