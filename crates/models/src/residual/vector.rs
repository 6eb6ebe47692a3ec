//! A vector a token (SPEC §1, §3): the transformer's and MemoryFormer's residual.
//!
//!   X⁰ = W_E[token] + W_PE[position]
//!   read:  Norm(X)                    a gain a site
//!   write: X + y
//!   logits = W_U · Norm(X)

use super::{Residual, Site};
use crate::batch::BatchTensors;
use crate::embedding::{VectorEmbedding, VectorEmbeddingParams};
use crate::interventions::{Group, ReadOut};
use crate::loss::Unembedding;
use crate::memory::values;
use crate::observe::Shape;
use crate::params::{Init, LayoutBuilder, ParamId};
use crate::probes::Layer;
use crate::Norm;
use engine::{Backend, NormDims};

/// A vector residual of width D over batches of `embedding.tokens` rows.
#[derive(Clone, Debug)]
pub struct Vector {
    pub embedding: VectorEmbedding,
    pub n_layers: usize,
    pub norm: Norm,
    pub norm_eps: f32,
    pub unembedding_init: Init,
    /// Whether each block keeps its branches' output (MemoryFormer) rather than every block
    /// writing into one buffer (the transformer): the same values, in the buffers the memory
    /// estimate counts for each.
    pub output_per_block: bool,
}

#[derive(Clone, Copy, Debug)]
pub struct VectorSite<T> {
    gain: T, // (D) ln1 or ln2
}

#[derive(Clone, Copy, Debug)]
pub struct VectorEnds<T> {
    embedding: VectorEmbeddingParams<T>,
    lnf: T, // (D)
    w_u: T, // (V, D)
}

pub struct VectorSiteActs<B: Backend> {
    ln: B::Tensor,    // (BT, D) Norm(x)
    stats: B::Tensor, // (BT, 2)
    /// (BT, D) what W_O or the core writes: a view of the block's or the model's one buffer.
    y: B::Tensor,
    after: B::Tensor, // (BT, D)
}

pub struct VectorEndActs<B: Backend> {
    encoded: B::Tensor, // (BT, D)
    /// The branches' outputs, one buffer or one a block, owned here: the sites hold views.
    _outputs: Vec<B::Tensor>,
    lnf: B::Tensor,       // (BT, D)
    lnf_stats: B::Tensor, // (BT, 2)
}

pub struct VectorScratch<B: Backend> {
    dresidual: B::Tensor, // (BT, D)
    dln: B::Tensor,       // (BT, D)
}

impl Vector {
    fn d(&self) -> usize {
        self.embedding.d_model
    }

    fn norm_dims(&self) -> NormDims {
        NormDims {
            rows: self.embedding.tokens,
            c: self.d(),
            kind: self.norm.into(),
            eps: self.norm_eps,
        }
    }

    fn zeros<B: Backend>(&self, be: &B, what: &str) -> engine::Result<B::Tensor> {
        let n = values(&[self.embedding.tokens, self.d()]);
        be.zeros(&format!("{what} (batch × seq_len × d_model)"), n)
    }

    fn stats<B: Backend>(&self, be: &B) -> engine::Result<B::Tensor> {
        let n = values(&[self.embedding.tokens, 2]);
        be.zeros("the norm statistics (batch × seq_len)", n)
    }
}

impl Residual for Vector {
    type Site<T> = VectorSite<T>;
    type Ends<T> = VectorEnds<T>;
    type SiteActs<B: Backend> = VectorSiteActs<B>;
    type Shared<B: Backend> = Vec<B::Tensor>;
    type EndActs<B: Backend> = VectorEndActs<B>;
    type Scratch<B: Backend> = VectorScratch<B>;
    const KEYED: bool = false;

    /// `blocks.{i}.ln1` or `ln2`, then the branch's.
    fn declare_site<P>(
        &self,
        lb: &mut LayoutBuilder,
        site: Site,
        branch: impl FnOnce(&mut LayoutBuilder) -> P,
    ) -> (VectorSite<ParamId>, P) {
        let gain = lb.add(gain_name(site), &[self.d()], false, Init::ONE);
        (VectorSite { gain }, branch(lb))
    }

    fn declare_ends<P>(
        &self,
        lb: &mut LayoutBuilder,
        blocks: impl FnOnce(&mut LayoutBuilder) -> P,
    ) -> (VectorEnds<ParamId>, P) {
        let embedding = self.embedding.declare(lb);
        let blocks = blocks(lb);
        let lnf = lb.add("lnf", &[self.d()], false, Init::ONE);
        let w_u = lb.add(
            "w_u",
            &[self.embedding.vocab, self.d()],
            false,
            self.unembedding_init.clone(),
        );
        (VectorEnds { embedding, lnf, w_u }, blocks)
    }

    fn map_site<T>(p: &VectorSite<ParamId>, f: &impl Fn(ParamId) -> T) -> VectorSite<T> {
        VectorSite { gain: f(p.gain) }
    }

    fn map_ends<T>(p: &VectorEnds<ParamId>, f: &impl Fn(ParamId) -> T) -> VectorEnds<T> {
        VectorEnds {
            embedding: p.embedding.map(f),
            lnf: f(p.lnf),
            w_u: f(p.w_u),
        }
    }

    /// The branches' outputs: one buffer, or one a block.
    fn shared<B: Backend>(&self, be: &B) -> engine::Result<Vec<B::Tensor>> {
        let (n, what) = match self.output_per_block {
            true => (self.n_layers.max(1), "the ml2 output"),
            false => (1, "the projection"),
        };
        (0..n).map(|_| self.zeros(be, what)).collect()
    }

    fn end_acts<B: Backend>(&self, be: &B, outputs: Vec<B::Tensor>) -> engine::Result<VectorEndActs<B>> {
        Ok(VectorEndActs {
            encoded: self.zeros(be, "the embeddings")?,
            _outputs: outputs,
            lnf: self.zeros(be, "the final norm")?,
            lnf_stats: self.stats(be)?,
        })
    }

    fn site_acts<B: Backend>(&self, be: &B, site: Site, outputs: &Vec<B::Tensor>) -> engine::Result<VectorSiteActs<B>> {
        // `shared` makes at least one.
        let shared = outputs.get(site.block).unwrap_or(&outputs[0]);
        Ok(VectorSiteActs {
            ln: self.zeros(be, gain_name(site).rsplit('.').next().unwrap_or("ln"))?,
            stats: self.stats(be)?,
            y: be.view(shared, 0, be.len(shared)),
            after: self.zeros(be, "the residual")?,
        })
    }

    fn scratch<B: Backend>(&self, be: &B) -> engine::Result<VectorScratch<B>> {
        Ok(VectorScratch {
            dresidual: self.zeros(be, "the residual gradient")?,
            dln: self.zeros(be, "the norm gradient")?,
        })
    }

    fn head_width(&self) -> usize {
        self.d()
    }

    rows_of_d!(first: encoded);

    /// Norm(x)
    fn read<B: Backend>(
        &self,
        be: &B,
        a: &VectorSiteActs<B>,
        x: &B::Tensor,
        input: &B::Tensor,
        p: &VectorSite<B::Tensor>,
        _site: Site,
    ) {
        be.norm_forward(input, &a.stats, x, &p.gain, self.norm_dims());
    }

    /// x + y
    fn write<B: Backend>(
        &self,
        be: &B,
        a: &VectorSiteActs<B>,
        x: &B::Tensor,
        y: &B::Tensor,
        _p: &VectorSite<B::Tensor>,
        _site: Site,
    ) {
        be.add(&a.after, x, y);
    }

    /// logits = W_U · Norm(x)
    fn read_out<B: Backend>(
        &self,
        be: &B,
        e: &VectorEndActs<B>,
        x: &B::Tensor,
        p: &VectorEnds<B::Tensor>,
        head: &Unembedding<B>,
    ) {
        be.norm_forward(&e.lnf, &e.lnf_stats, x, &p.lnf, self.norm_dims());
        head.logits(be, &e.lnf, &p.w_u);
    }

    fn dresidual<'a, B: Backend>(&self, s: &'a VectorScratch<B>, _depth: usize) -> &'a B::Tensor {
        &s.dresidual
    }

    fn read_out_backward<B: Backend>(
        &self,
        be: &B,
        s: &VectorScratch<B>,
        e: &VectorEndActs<B>,
        x: &B::Tensor,
        (p, dp): (&VectorEnds<B::Tensor>, &VectorEnds<B::Tensor>),
        head: &Unembedding<B>,
        batch: &BatchTensors<B>,
        seed: Option<&B::Tensor>,
    ) {
        head.backward(be, &s.dln, &dp.w_u, &e.lnf, &p.w_u, batch, seed);
        be.fill(&s.dresidual, 0.0);
        let d = self.norm_dims();
        be.norm_backward(&s.dresidual, &dp.lnf, &s.dln, x, &p.lnf, &e.lnf_stats, d);
    }

    /// The gradient flows through the add unchanged, into y as into x.
    fn write_backward<'a, B: Backend>(
        &self,
        _be: &B,
        s: &'a VectorScratch<B>,
        _a: &VectorSiteActs<B>,
        _x: &B::Tensor,
        _y: &B::Tensor,
        _params: (&VectorSite<B::Tensor>, &VectorSite<B::Tensor>),
        _site: Site,
    ) -> &'a B::Tensor {
        &s.dresidual
    }

    fn input_grad<'a, B: Backend>(&self, s: &'a VectorScratch<B>, _dqkv: &'a B::Tensor, _site: Site) -> &'a B::Tensor {
        &s.dln
    }

    fn read_backward<B: Backend>(
        &self,
        be: &B,
        s: &VectorScratch<B>,
        a: &VectorSiteActs<B>,
        x: &B::Tensor,
        dinput: &B::Tensor,
        (p, dp): (&VectorSite<B::Tensor>, &VectorSite<B::Tensor>),
        _site: Site,
    ) {
        be.norm_backward(&s.dresidual, &dp.gain, dinput, x, &p.gain, &a.stats, self.norm_dims());
    }

    fn gather<'a, B: Backend>(&self, _be: &B, s: &'a VectorScratch<B>, _e: &VectorEndActs<B>) -> &'a B::Tensor {
        &s.dresidual
    }

    fn embed_backward<B: Backend>(
        &self,
        be: &B,
        s: &VectorScratch<B>,
        _e: &VectorEndActs<B>,
        (_p, dp): (&VectorEnds<B::Tensor>, &VectorEnds<B::Tensor>),
        batch: &BatchTensors<B>,
    ) {
        self.embedding.backward(be, &dp.embedding, &s.dresidual, batch);
    }

    fn shape(&self) -> Shape {
        Shape::Vector { len: self.d() }
    }

    fn groups(&self) -> (Option<Group>, usize) {
        (None, 1)
    }

    fn width(&self) -> usize {
        self.d()
    }

    fn branch_width(&self) -> usize {
        self.d()
    }

    fn linear_read_out(&self) -> Option<ReadOut> {
        Some(ReadOut::Norm {
            width: self.d(),
            streams: 1,
            norm: self.norm.into(),
            eps: self.norm_eps,
        })
    }
}

/// `blocks.{i}.ln1` before attention, `blocks.{i}.ln2` before the FF.
fn gain_name(site: Site) -> String {
    let n = match site.layer {
        Layer::Attn => 1,
        Layer::Ff => 2,
    };
    format!("blocks.{}.ln{n}", site.block)
}
