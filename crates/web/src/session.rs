//! A training session in the browser: the GPU backend, the model and its trainer. It lives
//! outside the reactive graph (wgpu objects are not Send on wasm); the page sees plain numbers.

use data::{Task, TaskSampler};
use engine::gpu::GpuBackend;
use models::{TrainConfig, Trainer, Transformer, TransformerConfig};

/// What the page asks for.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Settings {
    pub task: Task,
    pub steps: usize,
    pub batch: usize,
    pub seq_len: usize,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            task: Task::Copy,
            steps: 300,
            batch: 32,
            seq_len: 16,
        }
    }
}

pub struct Session {
    pub be: GpuBackend,
    pub trainer: Trainer<GpuBackend, Transformer<GpuBackend>>,
    pub sampler: TaskSampler,
    pub settings: Settings,
    pub params: usize,
}

impl Session {
    pub fn new(be: GpuBackend, s: Settings, seed: u64) -> Result<Self, String> {
        let cfg = TransformerConfig::tiny(data::ByteTokenizer::VOCAB, s.seq_len);
        let model = Transformer::new(&be, cfg, s.batch, s.seq_len, seed).map_err(|e| e.to_string())?;
        let params = models::LanguageModel::store(&model).layout.count();
        let train = TrainConfig {
            batch: s.batch,
            steps: s.steps,
            seed,
            ..Default::default()
        };
        let trainer = Trainer::new(&be, model, train).map_err(|e| e.to_string())?;
        let sampler = TaskSampler::new(s.task, s.batch, s.seq_len, seed + 1)?;
        Ok(Self {
            be,
            trainer,
            sampler,
            settings: s,
            params,
        })
    }

    /// One step; returns the learning rate used.
    pub fn step(&mut self) -> Result<f32, String> {
        let batch = self.sampler.next_batch();
        self.trainer.step(&self.be, &batch).map_err(|e| e.to_string())
    }

    pub async fn loss(&self) -> Result<f32, String> {
        self.trainer.loss(&self.be).await.map_err(|e| e.to_string())
    }
}
