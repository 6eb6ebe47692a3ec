//! A D_k×D_v matrix a token, the RMT's residual (SPEC §2; RMT paper §2.2, eqs 14-27): read by
//! retrieval, written by storage.
//!
//!   X⁰ = Σ_h w_E^(h) ⊗ W_E^(h)[token] (+ Σ_h w_PE^(h) ⊗ W_PE^(h)[position], or ALiBi)
//!   read:  r ·₁ Norm(X)               3R keys before attention (Q, K, V at once), R before the FF
//!   write: X + Σ_h w^(h) ⊗ y_h        R storage keys
//!   logits = Σ_h W_U^(h) (r_U^(h) ·₁ Norm(X))
//!
//! Retrieval normalises as it reads, so Norm(X) is never written out. The backward is the
//! forward read in reverse: a retrieval's input gradient is a storage of its output gradient
//! with the same keys, and a storage's data gradient is a retrieval.

use super::{Residual, Site};
use crate::batch::BatchTensors;
use crate::config::Trunk;
use crate::embedding::{MatrixEmbedding, MatrixEmbeddingActs, MatrixEmbeddingParams};
use crate::interventions::{Group, ReadOut};
use crate::loss::Unembedding;
use crate::memory::values;
use crate::observe::Shape;
use crate::params::{Init, LayoutBuilder, ParamId};
use crate::probes::Layer;
use engine::{Backend, NormDims, ResidualDims};

/// A matrix residual of the trunk `trunk` over batches of `embedding.rm.tokens` rows.
#[derive(Clone, Copy, Debug)]
pub struct Matrix {
    pub trunk: Trunk,
    pub embedding: MatrixEmbedding,
}

#[derive(Clone, Copy, Debug)]
pub struct MatrixSite<T> {
    gain: T, // (D_k·D_v) ln1 or ln2
    /// (3R, D_k) r_Q, r_K, r_V before attention; (R, D_k) r_FF before the FF.
    retrieval: T,
    /// (R, D_k) w_O or w_FF.
    storage: T,
}

#[derive(Clone, Copy, Debug)]
pub struct MatrixEnds<T> {
    embedding: MatrixEmbeddingParams<T>,
    lnf: T, // (D_k·D_v)
    r_u: T, // (R, D_k)
    w_u: T, // (V, R·D_v)
}

pub struct MatrixSiteActs<B: Backend> {
    stats: B::Tensor, // (BT, 2)
    /// (BT, R·D_v) the FF adapters' retrievals; attention reads its own qkv.
    xff: Option<B::Tensor>,
    /// (BT, R·D_v) the core's output, stored with w_FF; attention stores its own output.
    f: Option<B::Tensor>,
    after: B::Tensor, // (BT, D_k·D_v)
}

pub struct MatrixEndActs<B: Backend> {
    embedded: MatrixEmbeddingActs<B>,
    encoded: B::Tensor,   // (BT, D_k·D_v)
    lnf_stats: B::Tensor, // (BT, 2)
    yu: B::Tensor,        // (BT, R·D_v) the unembedding's retrievals
}

pub struct MatrixScratch<B: Backend> {
    dresidual: B::Tensor, // (BT, D_k·D_v)
    dln: B::Tensor,       // (BT, D_k·D_v)
    dvec: B::Tensor,      // (BT, R·D_v): gradients of retrieved or stored vectors
    partials: B::Tensor,  // key-gradient partial sums
    /// (BT, D_k·D_v) a storage alone, or Norm(X), for the variance probes.
    stored: B::Tensor,
    probe_stats: B::Tensor, // (BT, 2)
}

impl Matrix {
    /// The residual of `trunk` over batches of `b` sequences of `t` tokens.
    pub fn new(trunk: Trunk, b: usize, t: usize) -> Self {
        let embedding = MatrixEmbedding {
            rm: ResidualDims {
                tokens: b * t,
                dk: trunk.d_k,
                dv: trunk.d_v,
                keys: trunk.rank,
            },
            t,
            vocab: trunk.vocab,
            seq_len: trunk.context,
            position: trunk.position,
            init_std: trunk.init_std,
            weight_init: trunk.weight_init,
        };
        Self { trunk, embedding }
    }

    fn bt(&self) -> usize {
        self.embedding.rm.tokens
    }

    /// Retrieval or storage of `keys` vectors over every token of the batch.
    fn rm(&self, keys: usize) -> ResidualDims {
        ResidualDims {
            keys,
            ..self.embedding.rm
        }
    }

    /// A retrieval or storage with the key tensor `keys`.
    fn rm_of<B: Backend>(&self, be: &B, keys: &B::Tensor) -> ResidualDims {
        self.rm(be.len(keys) / self.trunk.d_k)
    }

    fn norm_dims(&self) -> NormDims {
        NormDims {
            rows: self.bt(),
            c: self.trunk.residual(),
            kind: self.trunk.norm.into(),
            eps: self.trunk.norm_eps,
        }
    }

    // Each buffer named with the settings it grows with, for the memory estimate's messages.
    fn matrices<B: Backend>(&self, be: &B, what: &str) -> engine::Result<B::Tensor> {
        let n = values(&[self.bt(), self.trunk.d_k, self.trunk.d_v]);
        be.zeros(&format!("{what} (batch × seq_len × d_k × d_v)"), n)
    }

    fn vectors<B: Backend>(&self, be: &B, what: &str) -> engine::Result<B::Tensor> {
        let n = values(&[self.bt(), self.trunk.rank, self.trunk.d_v]);
        be.zeros(&format!("{what} (batch × seq_len × rank × d_v)"), n)
    }

    fn stats<B: Backend>(&self, be: &B, what: &str) -> engine::Result<B::Tensor> {
        be.zeros(&format!("{what} (batch × seq_len)"), values(&[self.bt(), 2]))
    }

    /// Every weight ~ N(0, std²/fan_in), fan_in the contracted size, output storage keys with
    /// an extra 1/sqrt(2L); or Xavier's N(0, 2/(fan_in + fan_out)) (SPEC §2).
    fn weight(&self, fan_in: usize, fan_out: usize, scale: f32) -> Init {
        let c = &self.trunk;
        Init::Normal {
            std: c.weight_init.std(c.init_std, fan_in, fan_out, scale),
        }
    }

    fn out_scale(&self) -> f32 {
        match self.trunk.scaled_output_init {
            true => 1.0 / (2.0 * self.trunk.n_layers as f32).sqrt(),
            false => 1.0,
        }
    }
}

impl Residual for Matrix {
    type Site<T> = MatrixSite<T>;
    type Ends<T> = MatrixEnds<T>;
    type SiteActs<B: Backend> = MatrixSiteActs<B>;
    type Shared<B: Backend> = ();
    type EndActs<B: Backend> = MatrixEndActs<B>;
    type Scratch<B: Backend> = MatrixScratch<B>;
    const KEYED: bool = true;

    /// `blocks.{i}.ln1`, `r_qkv`, then `w_o`; or `ln2`, `r_ff`, the core's, then `w_ff`.
    fn declare_site<P>(
        &self,
        lb: &mut LayoutBuilder,
        site: Site,
        branch: impl FnOnce(&mut LayoutBuilder) -> P,
    ) -> (MatrixSite<ParamId>, P) {
        let (dk, dv, r, i) = (self.trunk.d_k, self.trunk.d_v, self.trunk.rank, site.block);
        let (n, keys, read, write) = match site.layer {
            Layer::Attn => (1, 3 * r, "r_qkv", "w_o"),
            Layer::Ff => (2, r, "r_ff", "w_ff"),
        };
        let gain = lb.add(format!("blocks.{i}.ln{n}"), &[dk, dv], false, Init::ONE);
        let retrieval = lb.add(
            format!("blocks.{i}.{read}"),
            &[keys, dk],
            true,
            self.weight(dk, keys, 1.0),
        );
        let branch = branch(lb);
        let storage = lb.add(
            format!("blocks.{i}.{write}"),
            &[r, dk],
            true,
            self.weight(r, dk, self.out_scale()),
        );
        let site = MatrixSite {
            gain,
            retrieval,
            storage,
        };
        (site, branch)
    }

    /// The embedding's tables and keys, the blocks, then `lnf`, `r_u` and `w_u` (from zero with
    /// `zero_unembedding`, so that the first loss is exactly ln V).
    fn declare_ends<P>(
        &self,
        lb: &mut LayoutBuilder,
        blocks: impl FnOnce(&mut LayoutBuilder) -> P,
    ) -> (MatrixEnds<ParamId>, P) {
        let c = &self.trunk;
        let (dk, dv, r, v) = (c.d_k, c.d_v, c.rank, c.vocab);
        let embedding = self.embedding.declare(lb);
        let blocks = blocks(lb);
        let lnf = lb.add("lnf", &[dk, dv], false, Init::ONE);
        let r_u = lb.add("r_u", &[r, dk], true, self.weight(dk, r, 1.0));
        let w_u_init = match c.zero_unembedding {
            true => Init::Normal { std: 0.0 },
            false => self.weight(r * dv, v, 1.0),
        };
        let w_u = lb.add("w_u", &[v, r, dv], false, w_u_init);
        let ends = MatrixEnds {
            embedding,
            lnf,
            r_u,
            w_u,
        };
        (ends, blocks)
    }

    fn map_site<T>(p: &MatrixSite<ParamId>, f: &impl Fn(ParamId) -> T) -> MatrixSite<T> {
        MatrixSite {
            gain: f(p.gain),
            retrieval: f(p.retrieval),
            storage: f(p.storage),
        }
    }

    fn map_ends<T>(p: &MatrixEnds<ParamId>, f: &impl Fn(ParamId) -> T) -> MatrixEnds<T> {
        MatrixEnds {
            embedding: p.embedding.map(f),
            lnf: f(p.lnf),
            r_u: f(p.r_u),
            w_u: f(p.w_u),
        }
    }

    fn shared<B: Backend>(&self, _be: &B) -> engine::Result<()> {
        Ok(())
    }

    fn end_acts<B: Backend>(&self, be: &B, _shared: ()) -> engine::Result<MatrixEndActs<B>> {
        Ok(MatrixEndActs {
            embedded: self.embedding.acts(be)?,
            encoded: self.matrices(be, "the embeddings")?,
            lnf_stats: self.stats(be, "the norm statistics")?,
            yu: self.vectors(be, "the unembedding retrievals")?,
        })
    }

    fn site_acts<B: Backend>(&self, be: &B, site: Site, _shared: &()) -> engine::Result<MatrixSiteActs<B>> {
        let ff = site.layer == Layer::Ff;
        Ok(MatrixSiteActs {
            stats: self.stats(be, "the norm statistics")?,
            xff: ff.then(|| self.vectors(be, "the FF adapters")).transpose()?,
            f: ff.then(|| self.vectors(be, "the FF output")).transpose()?,
            after: self.matrices(be, "the residual matrices")?,
        })
    }

    fn scratch<B: Backend>(&self, be: &B) -> engine::Result<MatrixScratch<B>> {
        let widest = self.rm(3 * self.trunk.rank);
        Ok(MatrixScratch {
            dresidual: self.matrices(be, "the residual gradient")?,
            dln: self.matrices(be, "the norm gradient")?,
            dvec: self.vectors(be, "the vector gradient")?,
            partials: be.zeros(
                "the key-gradient partial sums (batch × seq_len × rank × d_k)",
                widest.key_grad_scratch(),
            )?,
            stored: self.matrices(be, "the probe scratch")?,
            probe_stats: self.stats(be, "the probe statistics")?,
        })
    }

    fn head_width(&self) -> usize {
        self.trunk.rank * self.trunk.d_v
    }

    /// X⁰ = Σ_h w_E ⊗ W_E[token] (+ Σ_h w_PE ⊗ W_PE[position])
    fn embed<B: Backend>(&self, be: &B, e: &MatrixEndActs<B>, p: &MatrixEnds<B::Tensor>, batch: &BatchTensors<B>) {
        self.embedding.forward(be, &e.encoded, &e.embedded, &p.embedding, batch);
    }

    fn embedded<'a, B: Backend>(&self, e: &'a MatrixEndActs<B>) -> &'a B::Tensor {
        &e.encoded
    }

    fn first<'a, B: Backend>(&self, e: &'a MatrixEndActs<B>) -> &'a B::Tensor {
        &e.encoded
    }

    fn after<'a, B: Backend>(&self, a: &'a MatrixSiteActs<B>) -> &'a B::Tensor {
        &a.after
    }

    /// Attention's Q, K, V are the retrieval itself.
    fn input<'a, B: Backend>(&self, a: &'a MatrixSiteActs<B>, qkv: &'a B::Tensor) -> &'a B::Tensor {
        a.xff.as_ref().unwrap_or(qkv)
    }

    /// Attention's output is stored as it is.
    fn output<'a, B: Backend>(&self, a: &'a MatrixSiteActs<B>) -> Option<&'a B::Tensor> {
        a.f.as_ref()
    }

    /// (17-19), (24): r ·₁ Norm(X), normalising as it reads.
    fn read<B: Backend>(
        &self,
        be: &B,
        a: &MatrixSiteActs<B>,
        x: &B::Tensor,
        input: &B::Tensor,
        p: &MatrixSite<B::Tensor>,
        _site: Site,
    ) {
        let d = self.rm_of(be, &p.retrieval);
        be.retrieve_normed(input, &a.stats, x, &p.gain, &p.retrieval, d, self.norm_dims());
    }

    /// (21), (26): X + Σ_h w^(h) ⊗ y_h, the add fused.
    fn write<B: Backend>(
        &self,
        be: &B,
        a: &MatrixSiteActs<B>,
        x: &B::Tensor,
        y: &B::Tensor,
        p: &MatrixSite<B::Tensor>,
        _site: Site,
    ) {
        be.store(&a.after, Some(x), &p.storage, y, self.rm(self.trunk.rank));
    }

    /// logits = Σ_h W_U^(h) (r_U^(h) ·₁ Norm(X))
    fn read_out<B: Backend>(
        &self,
        be: &B,
        e: &MatrixEndActs<B>,
        x: &B::Tensor,
        p: &MatrixEnds<B::Tensor>,
        head: &Unembedding<B>,
    ) {
        let d = self.rm(self.trunk.rank);
        be.retrieve_normed(&e.yu, &e.lnf_stats, x, &p.lnf, &p.r_u, d, self.norm_dims());
        head.logits(be, &e.yu, &p.w_u);
    }

    fn dresidual<'a, B: Backend>(&self, s: &'a MatrixScratch<B>, _depth: usize) -> &'a B::Tensor {
        &s.dresidual
    }

    fn read_out_backward<B: Backend>(
        &self,
        be: &B,
        s: &MatrixScratch<B>,
        e: &MatrixEndActs<B>,
        x: &B::Tensor,
        (p, dp): (&MatrixEnds<B::Tensor>, &MatrixEnds<B::Tensor>),
        head: &Unembedding<B>,
        batch: &BatchTensors<B>,
        seed: Option<&B::Tensor>,
    ) {
        head.backward(be, &s.dvec, &dp.w_u, &e.yu, &p.w_u, batch, seed);
        be.fill(&s.dresidual, 0.0);
        let (x, stats, gain, keys) = (x, &e.lnf_stats, &p.lnf, &p.r_u);
        let d = self.rm(self.trunk.rank);
        be.retrieve_normed_backward(
            &s.dresidual,
            &dp.lnf,
            &dp.r_u,
            &s.dln,
            &s.partials,
            &s.dvec,
            x,
            stats,
            gain,
            keys,
            d,
            self.norm_dims(),
        );
    }

    /// The data's gradient (a retrieval of dX with the keys) into dvec, the keys'; dX flows
    /// through the add unchanged.
    fn write_backward<'a, B: Backend>(
        &self,
        be: &B,
        s: &'a MatrixScratch<B>,
        _a: &MatrixSiteActs<B>,
        _x: &B::Tensor,
        y: &B::Tensor,
        (p, dp): (&MatrixSite<B::Tensor>, &MatrixSite<B::Tensor>),
        _site: Site,
    ) -> &'a B::Tensor {
        let d = self.rm(self.trunk.rank);
        be.store_backward(&s.dvec, &dp.storage, &s.partials, &s.dresidual, &p.storage, y, d);
        &s.dvec
    }

    /// Attention's dqkv is the retrieval's output gradient; the core's input gradient
    /// overwrites its output gradient in dvec.
    fn input_grad<'a, B: Backend>(&self, s: &'a MatrixScratch<B>, dqkv: &'a B::Tensor, site: Site) -> &'a B::Tensor {
        match site.layer {
            Layer::Attn => dqkv,
            Layer::Ff => &s.dvec,
        }
    }

    /// One op: dNorm = Σ keys ⊗ dy through the norm's backward into dX, the gain's gradient and
    /// the keys' against Norm(X).
    fn read_backward<B: Backend>(
        &self,
        be: &B,
        s: &MatrixScratch<B>,
        a: &MatrixSiteActs<B>,
        x: &B::Tensor,
        dinput: &B::Tensor,
        (p, dp): (&MatrixSite<B::Tensor>, &MatrixSite<B::Tensor>),
        _site: Site,
    ) {
        let d = self.rm_of(be, &p.retrieval);
        be.retrieve_normed_backward(
            &s.dresidual,
            &dp.gain,
            &dp.retrieval,
            &s.dln,
            &s.partials,
            dinput,
            x,
            &a.stats,
            &p.gain,
            &p.retrieval,
            d,
            self.norm_dims(),
        );
    }

    fn gather<'a, B: Backend>(&self, _be: &B, s: &'a MatrixScratch<B>, _e: &MatrixEndActs<B>) -> &'a B::Tensor {
        &s.dresidual
    }

    fn embed_backward<B: Backend>(
        &self,
        be: &B,
        s: &MatrixScratch<B>,
        e: &MatrixEndActs<B>,
        (p, dp): (&MatrixEnds<B::Tensor>, &MatrixEnds<B::Tensor>),
        batch: &BatchTensors<B>,
    ) {
        let (de, emb) = (&dp.embedding, &p.embedding);
        self.embedding
            .backward(be, de, &s.dresidual, &s.dvec, &s.partials, &e.embedded, emb, batch);
    }

    fn normed<'a, B: Backend>(
        &self,
        be: &B,
        s: &'a MatrixScratch<B>,
        _a: &MatrixSiteActs<B>,
        x: &B::Tensor,
        _input: &'a B::Tensor,
        p: &MatrixSite<B::Tensor>,
        _site: Site,
    ) -> &'a B::Tensor {
        be.norm_forward(&s.stored, &s.probe_stats, x, &p.gain, self.norm_dims());
        &s.stored
    }

    fn written<'a, B: Backend>(
        &self,
        be: &B,
        s: &'a MatrixScratch<B>,
        y: &'a B::Tensor,
        p: &MatrixSite<B::Tensor>,
        _site: Site,
    ) -> &'a B::Tensor {
        be.fill(&s.stored, 0.0);
        be.store(&s.stored, None, &p.storage, y, self.rm(self.trunk.rank));
        &s.stored
    }

    /// dNorm, which the fused backward never writes out, into dln (its scratch after).
    fn dnormed<'a, B: Backend>(
        &self,
        be: &B,
        s: &'a MatrixScratch<B>,
        dinput: &'a B::Tensor,
        p: &MatrixSite<B::Tensor>,
        _site: Site,
    ) -> &'a B::Tensor {
        be.fill(&s.dln, 0.0);
        be.store(&s.dln, None, &p.retrieval, dinput, self.rm_of(be, &p.retrieval));
        &s.dln
    }

    fn shape(&self) -> Shape {
        Shape::Matrix {
            rows: self.trunk.d_k,
            cols: self.trunk.d_v,
        }
    }

    fn groups(&self) -> (Option<Group>, usize) {
        (Some(Group::Slot), self.trunk.d_k)
    }

    fn width(&self) -> usize {
        self.trunk.residual()
    }

    fn branch_width(&self) -> usize {
        self.trunk.rank * self.trunk.d_v
    }

    fn linear_read_out(&self) -> Option<ReadOut> {
        Some(ReadOut::Keys {
            dk: self.trunk.d_k,
            dv: self.trunk.d_v,
            keys: self.trunk.rank,
            norm: self.trunk.norm.into(),
            eps: self.trunk.norm_eps,
        })
    }
}
