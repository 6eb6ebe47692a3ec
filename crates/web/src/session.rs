//! A training session in the browser: the GPU backend, the model and its trainer. It lives
//! outside the reactive graph (wgpu objects are not Send on wasm); the page sees plain numbers.

use data::{Batch, Task, TaskSampler};
use engine::gpu::GpuBackend;
use models::buckets::{self, BucketCounts};
use models::count::{self, Counts, HybridCounts};
use models::probes::Measured;
use models::variance::{self, ClosedForm, InitScheme};
use models::{LanguageModel, ModelConfig, Purpose, RunConfig, Trainer};

/// The architectures the page offers, each its `tiny-ARCH` training preset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arch {
    Transformer,
    Rmt,
    MemoryFormer,
    Hybrid,
}

impl Arch {
    pub const ALL: [Arch; 4] = [Arch::Transformer, Arch::Rmt, Arch::MemoryFormer, Arch::Hybrid];

    /// The `arch` of its config.
    pub fn name(self) -> &'static str {
        match self {
            Arch::Transformer => "transformer",
            Arch::Rmt => "rmt",
            Arch::MemoryFormer => "memoryformer",
            Arch::Hybrid => "hybrid",
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Arch::Transformer => "Transformer",
            Arch::Rmt => "Residual Matrix Transformer",
            Arch::MemoryFormer => "MemoryFormer",
            Arch::Hybrid => "Hybrid: RMT with a memory block",
        }
    }

    pub fn parse(s: &str) -> Option<Arch> {
        Arch::ALL.into_iter().find(|a| a.name() == s)
    }

    /// Its storages and retrievals (the transformer's linear maps in their places) have
    /// variance probes and a closed form.
    pub fn has_variance(self) -> bool {
        matches!(self, Arch::Rmt | Arch::Hybrid | Arch::Transformer)
    }

    /// It has hash tables whose buckets the page can show.
    pub fn has_buckets(self) -> bool {
        matches!(self, Arch::MemoryFormer | Arch::Hybrid)
    }

    /// The `tiny-ARCH` preset: the model and the copy task at T = 16.
    pub fn preset(self) -> RunConfig {
        RunConfig::preset(&format!("tiny-{}", self.name())).expect("every architecture has a tiny preset")
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

/// The tiny RMT's and hybrid's counts, and those of the transformer of matching dimensions
/// (H = R, D_h = D_v, D = R·D_v), for the page's cost table.
pub struct Costs {
    pub rmt: models::RmtConfig,
    pub rmt_counts: Counts,
    pub hybrid: models::HybridConfig,
    pub hybrid_counts: HybridCounts,
    /// The transformer of the RMT's dimensions: D = R·D_v, H = R, D_h = D_v.
    pub transformer: models::TransformerConfig,
    pub transformer_counts: Counts,
    /// The transformer the page trains (tiny-transformer).
    pub trained_transformer: models::TransformerConfig,
    pub trained_transformer_counts: Counts,
}

pub fn costs() -> Costs {
    let (ModelConfig::Rmt(rmt), ModelConfig::Hybrid(hybrid), ModelConfig::Transformer(trained_transformer)) = (
        Arch::Rmt.preset().model,
        Arch::Hybrid.preset().model,
        Arch::Transformer.preset().model,
    ) else {
        unreachable!("tiny-rmt, tiny-hybrid and tiny-transformer are an RMT, a hybrid and a transformer")
    };
    let transformer = models::TransformerConfig {
        d_model: rmt.rank * rmt.d_v,
        n_layers: rmt.n_layers,
        n_heads: rmt.rank,
        head_dim: rmt.d_v,
        d_ff: rmt.d_ff,
        ..models::TransformerConfig::tiny(rmt.vocab, rmt.seq_len)
    };
    Costs {
        rmt_counts: count::rmt(&rmt),
        hybrid_counts: count::hybrid(&hybrid),
        transformer_counts: count::transformer(&transformer),
        trained_transformer_counts: count::transformer(&trained_transformer),
        rmt,
        hybrid,
        transformer,
        trained_transformer,
    }
}

type Parts = (
    Trainer<GpuBackend, Box<dyn LanguageModel<GpuBackend>>>,
    TaskSampler,
    usize,
    Vec<ClosedForm>,
);

pub struct Session {
    pub be: GpuBackend,
    pub trainer: Trainer<GpuBackend, Box<dyn LanguageModel<GpuBackend>>>,
    pub sampler: TaskSampler,
    pub settings: Settings,
    pub params: usize,
    /// The closed form of the paper's Table 1 for this model's dims and init (RMT and hybrid).
    pub closed_form: Vec<ClosedForm>,
    last_batch: Option<Batch>,
}

impl Session {
    /// The `tiny-ARCH` model, built by the one constructor every command uses. On failure the
    /// device comes back with the message, so that the page can start again.
    pub fn new(be: GpuBackend, s: Settings, seed: u64) -> Result<Self, (GpuBackend, String)> {
        match Self::parts(&be, s, seed) {
            Ok((trainer, sampler, params, closed_form)) => Ok(Self {
                be,
                trainer,
                sampler,
                settings: s,
                params,
                closed_form,
                last_batch: None,
            }),
            Err(e) => Err((be, e)),
        }
    }

    /// What a session holds besides its device.
    fn parts(be: &GpuBackend, s: Settings, seed: u64) -> Result<Parts, String> {
        let mut cfg = s.arch.preset();
        cfg.train.batch = s.batch;
        cfg.train.steps = s.steps;
        cfg.train.seed = seed;
        let err = |e: models::ModelError| e.to_string();
        let closed_form = match s.arch.has_variance() {
            true => variance::closed_form(&cfg.model, InitScheme::Default).unwrap_or_default(),
            false => vec![],
        };
        let model = cfg.build(be, s.batch, s.seq_len, Purpose::Train).map_err(err)?;
        let params = model.store().layout.count();
        let trainer = Trainer::new(be, model, cfg.train.clone()).map_err(err)?;
        let sampler = TaskSampler::new(s.task, s.batch, s.seq_len, seed + 1).map_err(|e| e.to_string())?;
        Ok((trainer, sampler, params, closed_form))
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

    /// The residual stream of sequence `seq` at every depth in the last step's forward, with
    /// that sequence's input tokens. Read it before anything else runs a forward.
    pub async fn residuals(&self, seq: usize) -> Result<(Vec<models::observe::Snapshot>, Vec<u32>), String> {
        let Some(batch) = &self.last_batch else {
            return Ok((vec![], vec![]));
        };
        let (b, t) = (batch.b, batch.t);
        let seq = seq.min(b.saturating_sub(1));
        let observables = self.trainer.model.observables();
        let snapshots = models::observe::read(&self.be, &observables, seq, t)
            .await
            .map_err(|e| e.to_string())?;
        Ok((snapshots, batch.inputs[seq * t..(seq + 1) * t].to_vec()))
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
