//! A training session in the browser: the GPU backend, the model and its trainer. It lives
//! outside the reactive graph (wgpu objects are not Send on wasm); the page sees plain numbers.

use data::{Batch, Task, TaskSampler};
use engine::gpu::GpuBackend;
use models::buckets::{self, BucketCounts};
use models::count::{self, Counts};
use models::probes::Measured;
use models::variance::{self, ClosedForm, InitScheme};
use models::{
    LanguageModel, MemoryFormer, MemoryFormerConfig, Rmt, RmtConfig, TrainConfig, Trainer, Transformer,
    TransformerConfig,
};

/// The architectures the page offers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arch {
    Transformer,
    Rmt,
    MemoryFormer,
}

impl Arch {
    pub const ALL: [Arch; 3] = [Arch::Transformer, Arch::Rmt, Arch::MemoryFormer];

    pub fn name(self) -> &'static str {
        match self {
            Arch::Transformer => "transformer",
            Arch::Rmt => "rmt",
            Arch::MemoryFormer => "memoryformer",
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Arch::Transformer => "Transformer",
            Arch::Rmt => "Residual Matrix Transformer",
            Arch::MemoryFormer => "MemoryFormer",
        }
    }

    pub fn parse(s: &str) -> Option<Arch> {
        Arch::ALL.into_iter().find(|a| a.name() == s)
    }
}

/// What the page asks for.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Settings {
    pub arch: Arch,
    pub task: Task,
    pub steps: usize,
    pub batch: usize,
    pub seq_len: usize,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            arch: Arch::Transformer,
            task: Task::Copy,
            steps: 300,
            batch: 32,
            seq_len: 16,
        }
    }
}

/// The tiny RMT and the transformer of matching dimensions (H = R, D_h = D_v, D = R·D_v).
pub fn configs(seq_len: usize) -> (RmtConfig, TransformerConfig) {
    let rmt = RmtConfig::tiny(data::ByteTokenizer::VOCAB, seq_len);
    let transformer = TransformerConfig {
        d_model: rmt.rank * rmt.d_v,
        n_layers: rmt.n_layers,
        n_heads: rmt.rank,
        head_dim: rmt.d_v,
        d_ff: rmt.d_ff,
        ..TransformerConfig::tiny(rmt.vocab, seq_len)
    };
    (rmt, transformer)
}

/// Parameters and FLOPs of the tiny RMT beside the matching transformer, for the page.
pub fn counts(seq_len: usize) -> (Counts, Counts) {
    let (rmt, transformer) = configs(seq_len);
    (count::rmt(&rmt), count::transformer(&transformer))
}

pub struct Session {
    pub be: GpuBackend,
    pub trainer: Trainer<GpuBackend, Box<dyn LanguageModel<GpuBackend>>>,
    pub sampler: TaskSampler,
    pub settings: Settings,
    pub params: usize,
    /// The closed form of the paper's Table 1 for this model's dims and init (RMT only).
    pub closed_form: Vec<ClosedForm>,
    last_batch: Option<Batch>,
}

impl Session {
    pub fn new(be: GpuBackend, s: Settings, seed: u64) -> Result<Self, String> {
        let (rmt, transformer) = configs(s.seq_len);
        let err = |e: models::ModelError| e.to_string();
        let (model, closed_form): (Box<dyn LanguageModel<GpuBackend>>, _) = match s.arch {
            Arch::Transformer => {
                let cfg = TransformerConfig::tiny(transformer.vocab, s.seq_len);
                (
                    Box::new(Transformer::new(&be, cfg, s.batch, s.seq_len, seed).map_err(err)?),
                    vec![],
                )
            }
            Arch::Rmt => {
                let closed = variance::rmt(&rmt, InitScheme::Default);
                (
                    Box::new(Rmt::new(&be, rmt, s.batch, s.seq_len, seed).map_err(err)?),
                    closed,
                )
            }
            Arch::MemoryFormer => {
                let cfg = MemoryFormerConfig::tiny(transformer.vocab, s.seq_len);
                (
                    Box::new(MemoryFormer::new(&be, cfg, s.batch, s.seq_len, seed).map_err(err)?),
                    vec![],
                )
            }
        };
        let params = model.store().layout.count();
        let train = TrainConfig {
            batch: s.batch,
            steps: s.steps,
            seed,
            ..Default::default()
        };
        let trainer = Trainer::new(&be, model, train).map_err(err)?;
        let sampler = TaskSampler::new(s.task, s.batch, s.seq_len, seed + 1).map_err(|e| e.to_string())?;
        Ok(Self {
            be,
            trainer,
            sampler,
            settings: s,
            params,
            closed_form,
            last_batch: None,
        })
    }

    /// One step; returns the learning rate used.
    pub fn step(&mut self) -> Result<f32, String> {
        let batch = self.sampler.next_batch();
        let lr = self.trainer.step(&self.be, &batch).map_err(|e| e.to_string())?;
        self.last_batch = Some(batch);
        Ok(lr)
    }

    pub async fn loss(&self) -> Result<f32, String> {
        self.trainer.loss(&self.be).await.map_err(|e| e.to_string())
    }

    /// Bucket hits of every hash table in the last step's forward; empty for models without.
    pub async fn bucket_counts(&self) -> Result<Vec<BucketCounts>, String> {
        let layers = self.trainer.model.hashed_layers();
        buckets::read(&self.be, &layers).await.map_err(|e| e.to_string())
    }

    /// Variance ratios of every storage and retrieval on the last step's batch; None for models
    /// without probes or before the first step.
    pub async fn measure(&mut self) -> Result<Option<Vec<Measured>>, String> {
        let Some(batch) = self.last_batch.take() else {
            return Ok(None);
        };
        let measured = self.trainer.measure(&self.be, &batch).await.map_err(|e| e.to_string());
        self.last_batch = Some(batch);
        measured
    }
}
