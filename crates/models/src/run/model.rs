//! The model part of a run config: `ModelConfig`'s methods over every architecture (its name,
//! its sizes V and N, its checks and its constructor), the one place an architecture is chosen.

use crate::config::MAX_LAYERS;
use crate::memory::Purpose;
use crate::{
    Altup, Arch, AttnRes, Hybrid, HyperConnections, LanguageModel, MemoryFormer, ModelConfig, ModelError, Result, Rmt,
    Transformer, TransformerConfig,
};
use engine::Backend;

/// The one place an architecture is chosen: every constructor, estimate and counter of a
/// `ModelConfig` goes through these.
impl ModelConfig {
    /// The architecture: the `arch` tag of the config.
    pub fn arch(&self) -> Arch {
        match self {
            ModelConfig::Transformer(_) => Arch::Transformer,
            ModelConfig::Rmt(_) => Arch::Rmt,
            ModelConfig::MemoryFormer(_) => Arch::MemoryFormer,
            ModelConfig::Hybrid(_) => Arch::Hybrid,
            ModelConfig::Hc(_) => Arch::Hc,
            ModelConfig::Altup(_) => Arch::Altup,
            ModelConfig::AttnRes(_) => Arch::AttnRes,
        }
    }

    /// This model with `overrides` (a partial `[model]` table, keys as its config names them)
    /// merged on top, checked as `RunConfig::merged` checks a run's.
    pub fn merged(&self, overrides: &toml::Table) -> Result<ModelConfig> {
        super::merge::merged(self, overrides)
    }

    /// The weight of the z-loss, which every architecture has.
    pub fn z_loss(&self) -> f32 {
        match self {
            ModelConfig::Transformer(c) => c.z_loss,
            ModelConfig::Rmt(c) => c.z_loss,
            ModelConfig::MemoryFormer(c) => c.z_loss,
            ModelConfig::Hybrid(c) => c.z_loss,
            ModelConfig::Hc(c) => c.z_loss,
            ModelConfig::Altup(c) => c.z_loss,
            ModelConfig::AttnRes(c) => c.z_loss,
        }
    }

    pub fn validate(&self) -> Result<()> {
        match self {
            ModelConfig::Transformer(c) => c.validate(),
            ModelConfig::Rmt(c) => c.validate(),
            ModelConfig::MemoryFormer(c) => c.validate(),
            ModelConfig::Hybrid(c) => c.validate(),
            ModelConfig::Hc(c) => c.validate(),
            ModelConfig::Altup(c) => c.validate(),
            ModelConfig::AttnRes(c) => c.validate(),
        }
    }

    /// (V, N): the vocabulary and the context length, which every architecture has.
    fn sizes(&self) -> (usize, usize) {
        match self {
            ModelConfig::Transformer(c) => (c.vocab, c.context),
            ModelConfig::Rmt(c) => (c.vocab, c.context),
            ModelConfig::MemoryFormer(c) => (c.vocab, c.context),
            ModelConfig::Hybrid(c) => (c.vocab, c.context),
            ModelConfig::Hc(c) => (c.vocab, c.context),
            ModelConfig::Altup(c) => (c.vocab, c.context),
            ModelConfig::AttnRes(c) => (c.vocab, c.context),
        }
    }

    fn sizes_mut(&mut self) -> (&mut usize, &mut usize) {
        match self {
            ModelConfig::Transformer(c) => (&mut c.vocab, &mut c.context),
            ModelConfig::Rmt(c) => (&mut c.vocab, &mut c.context),
            ModelConfig::MemoryFormer(c) => (&mut c.vocab, &mut c.context),
            ModelConfig::Hybrid(c) => (&mut c.vocab, &mut c.context),
            ModelConfig::Hc(c) => (&mut c.vocab, &mut c.context),
            ModelConfig::Altup(c) => (&mut c.vocab, &mut c.context),
            ModelConfig::AttnRes(c) => (&mut c.vocab, &mut c.context),
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
        self.arch().has_hash_tables()
    }

    /// Checks the config and a batch of `b` sequences of `t` tokens for it, before anything is
    /// allocated: every constructor calls it first. Returns B·T, which then cannot overflow.
    pub fn check_batch(&self, b: usize, t: usize) -> Result<usize> {
        self.validate()?;
        let n_layers = match self {
            ModelConfig::Transformer(c) => c.n_layers,
            ModelConfig::Rmt(c) => c.n_layers,
            ModelConfig::MemoryFormer(c) => c.n_layers,
            ModelConfig::Hybrid(c) => c.n_layers,
            ModelConfig::Hc(c) => c.n_layers,
            ModelConfig::Altup(c) => c.n_layers,
            ModelConfig::AttnRes(c) => c.n_layers,
        };
        if n_layers > MAX_LAYERS {
            return Err(ModelError::Config(format!(
                "n_layers = {n_layers} is more than the {MAX_LAYERS} blocks a model may be built with; use fewer layers"
            )));
        }
        if b == 0 || t == 0 {
            return Err(ModelError::Config(format!(
                "a batch of {b} sequences of {t} tokens is empty; use a batch and a sequence length of at least 1"
            )));
        }
        let seq_len = self.context();
        if t > seq_len {
            return Err(ModelError::Config(format!(
                "sequences of {t} tokens exceed the context length {seq_len}"
            )));
        }
        b.checked_mul(t).ok_or_else(|| {
            ModelError::Config(format!(
                "the batch × sequence length overflows ({b} × {t}); use a smaller batch or sequence length"
            ))
        })
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
            (ModelConfig::Hc(c), Purpose::Train) => Box::new(HyperConnections::new(be, c.clone(), b, t, seed)?),
            (ModelConfig::Hc(c), Purpose::Infer) => Box::new(HyperConnections::inference(be, c.clone(), b, t)?),
            (ModelConfig::Altup(c), Purpose::Train) => Box::new(Altup::new(be, c.clone(), b, t, seed)?),
            (ModelConfig::Altup(c), Purpose::Infer) => Box::new(Altup::inference(be, c.clone(), b, t)?),
            (ModelConfig::AttnRes(c), Purpose::Train) => Box::new(AttnRes::new(be, c.clone(), b, t, seed)?),
            (ModelConfig::AttnRes(c), Purpose::Infer) => Box::new(AttnRes::inference(be, c.clone(), b, t)?),
        })
    }

    /// The transformer of matching dimensions, the one mapping every comparison uses: for an RMT
    /// H = R, D_h = D_v, D = R·D_v with its L and D_FF (RMT paper §4); for the hybrid the same
    /// with D_FF = 4D; for a MemoryFormer its d, H and L with D_FF = 4d. Its other settings are
    /// the tiny transformer's, at this config's V and N. None for a transformer.
    pub fn matching_transformer(&self) -> Option<TransformerConfig> {
        let (vocab, n) = self.sizes();
        let twin = |d_model, n_layers, n_heads, head_dim, d_ff| TransformerConfig {
            d_model,
            n_layers,
            n_heads,
            head_dim,
            d_ff,
            ..TransformerConfig::tiny(vocab, n)
        };
        match self {
            ModelConfig::Rmt(r) => Some(twin(r.rank * r.d_v, r.n_layers, r.rank, r.d_v, r.d_ff)),
            ModelConfig::Hybrid(h) => {
                let d = h.rank * h.d_v;
                Some(twin(d, h.n_layers, h.rank, h.d_v, 4 * d))
            }
            ModelConfig::MemoryFormer(m) => Some(twin(m.d_model, m.n_layers, m.n_heads, m.head_dim(), 4 * m.d_model)),
            // The transformer its streams widen: what the sites are added to.
            ModelConfig::Hc(h) => Some(h.transformer()),
            // The transformer each layer is.
            ModelConfig::Altup(a) => Some(a.transformer()),
            // The transformer whose sites read over depth.
            ModelConfig::AttnRes(a) => Some(a.transformer()),
            ModelConfig::Transformer(_) => None,
        }
    }

    /// The model's sizes in the papers' letters.
    pub fn describe(&self) -> String {
        match self {
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
            ModelConfig::Hc(c) => format!(
                "{} n={} D={} H={} D_h={} D_FF={} L={} (residual {})",
                match c.mixing {
                    crate::HcMixing::Hc => "HC",
                    crate::HcMixing::Mhc => "mHC",
                    crate::HcMixing::MhcLite => "mHC-lite",
                },
                c.streams,
                c.d_model,
                c.n_heads,
                c.head_dim,
                c.d_ff,
                c.n_layers,
                c.streams * c.d_model
            ),
            ModelConfig::Altup(c) => format!(
                "AltUp K={} D={} H={} D_h={} D_FF={} L={} (residual {})",
                c.sub_blocks,
                c.d_model,
                c.n_heads,
                c.head_dim,
                c.d_ff,
                c.n_layers,
                c.sub_blocks * c.d_model
            ),
            ModelConfig::AttnRes(c) => format!(
                "AttnRes N={} (S={}) D={} H={} D_h={} D_FF={} L={} (residual {}){}",
                c.depth_blocks,
                c.block_sites(),
                c.d_model,
                c.n_heads,
                c.head_dim,
                c.d_ff,
                c.n_layers,
                (c.depth_blocks + 1) * c.d_model,
                c.depth_keys.described()
            ),
        }
    }
}
