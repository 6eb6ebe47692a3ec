//! The model part of a run config: `ModelConfig`'s methods over every architecture (its name,
//! its sizes V and N, its checks and its constructor), the one place an architecture is chosen.

use crate::memory::Purpose;
use crate::{Hybrid, LanguageModel, MemoryFormer, ModelConfig, Result, Rmt, Transformer};
use engine::Backend;

/// The one place an architecture is chosen: every constructor, estimate and counter of a
/// `ModelConfig` goes through these.
impl ModelConfig {
    /// transformer, rmt, memoryformer or hybrid: the `arch` of the config.
    pub fn arch(&self) -> &'static str {
        match self {
            ModelConfig::Transformer(_) => "transformer",
            ModelConfig::Rmt(_) => "rmt",
            ModelConfig::MemoryFormer(_) => "memoryformer",
            ModelConfig::Hybrid(_) => "hybrid",
        }
    }

    /// The weight of the z-loss, which every architecture has.
    pub fn z_loss(&self) -> f32 {
        match self {
            ModelConfig::Transformer(c) => c.z_loss,
            ModelConfig::Rmt(c) => c.z_loss,
            ModelConfig::MemoryFormer(c) => c.z_loss,
            ModelConfig::Hybrid(c) => c.z_loss,
        }
    }

    pub fn validate(&self) -> Result<()> {
        match self {
            ModelConfig::Transformer(c) => c.validate(),
            ModelConfig::Rmt(c) => c.validate(),
            ModelConfig::MemoryFormer(c) => c.validate(),
            ModelConfig::Hybrid(c) => c.validate(),
        }
    }

    /// (V, N): the vocabulary and the context length, which every architecture has.
    fn sizes(&self) -> (usize, usize) {
        match self {
            ModelConfig::Transformer(c) => (c.vocab, c.seq_len),
            ModelConfig::Rmt(c) => (c.vocab, c.seq_len),
            ModelConfig::MemoryFormer(c) => (c.vocab, c.seq_len),
            ModelConfig::Hybrid(c) => (c.vocab, c.seq_len),
        }
    }

    fn sizes_mut(&mut self) -> (&mut usize, &mut usize) {
        match self {
            ModelConfig::Transformer(c) => (&mut c.vocab, &mut c.seq_len),
            ModelConfig::Rmt(c) => (&mut c.vocab, &mut c.seq_len),
            ModelConfig::MemoryFormer(c) => (&mut c.vocab, &mut c.seq_len),
            ModelConfig::Hybrid(c) => (&mut c.vocab, &mut c.seq_len),
        }
    }

    /// V
    pub fn vocab(&self) -> usize {
        self.sizes().0
    }

    /// N, the context length.
    pub fn context(&self) -> usize {
        self.sizes().1
    }

    pub fn set_vocab(&mut self, vocab: usize) {
        *self.sizes_mut().0 = vocab;
    }

    /// Sets N.
    pub fn set_context(&mut self, seq_len: usize) {
        *self.sizes_mut().1 = seq_len;
    }

    /// Whether the model has hash tables whose bucket use can be read (`hashed_layers`).
    pub fn has_hash_tables(&self) -> bool {
        matches!(self, ModelConfig::MemoryFormer(_) | ModelConfig::Hybrid(_))
    }

    /// Builds the model for (B, T) batches: for training, initialised from `seed`, or forward
    /// only, with no gradient buffers (`seed` unused).
    pub fn build<B: Backend + 'static>(
        &self,
        be: &B,
        b: usize,
        t: usize,
        purpose: Purpose,
        seed: u64,
    ) -> Result<Box<dyn LanguageModel<B>>> {
        Ok(match (self, purpose) {
            (ModelConfig::Transformer(c), Purpose::Train) => Box::new(Transformer::new(be, c.clone(), b, t, seed)?),
            (ModelConfig::Transformer(c), Purpose::Infer) => Box::new(Transformer::inference(be, c.clone(), b, t)?),
            (ModelConfig::Rmt(c), Purpose::Train) => Box::new(Rmt::new(be, c.clone(), b, t, seed)?),
            (ModelConfig::Rmt(c), Purpose::Infer) => Box::new(Rmt::inference(be, c.clone(), b, t)?),
            (ModelConfig::MemoryFormer(c), Purpose::Train) => Box::new(MemoryFormer::new(be, c.clone(), b, t, seed)?),
            (ModelConfig::MemoryFormer(c), Purpose::Infer) => Box::new(MemoryFormer::inference(be, c.clone(), b, t)?),
            (ModelConfig::Hybrid(c), Purpose::Train) => Box::new(Hybrid::new(be, c.clone(), b, t, seed)?),
            (ModelConfig::Hybrid(c), Purpose::Infer) => Box::new(Hybrid::inference(be, c.clone(), b, t)?),
        })
    }
}
