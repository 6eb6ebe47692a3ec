//! N + 1 depth blocks of D a token, Block Attention Residuals' state (SPEC §7.3.2): row 0 holds
//! the embedding b_0 = e, row n the sum of depth block n's branch outputs so far, and the rows
//! past the block being filled are 0.
//!
//!   site s in block n = ⌊s/S⌋ + 1, at place i = s mod S:
//!   read:  h = Σ_k α_k b_k over b_0 … b_{n−1} (and b_n's partial sum when i ≥ 1),
//!          α = softmax_k((w_s ⊙ γ_s)·RMSNorm(b_k)), then the branch's own Norm(h)
//!   write: b_n += y                                  (no residual add: the stream is replaced)
//!   logits = W_U · Norm(Σ_k α_k b_k) over b_0 … b_N, with the head's own w and γ
//!
//! The read is the engine's `depth_read`; the write is a token's state copied with y added to
//! row n (a product with e_n), so its backward passes the state's gradient through and takes
//! row n for the branch: one gradient buffer serves every depth, as for a vector.

use super::{Residual, Site};
use crate::batch::BatchTensors;
use crate::config::DEPTH_KEY_EPS;
use crate::embedding::{VectorEmbedding, VectorEmbeddingParams};
use crate::interventions::{Group, ReadOut};
use crate::loss::Unembedding;
use crate::observe::{DepthRead, Shape};
use crate::params::{Init, LayoutBuilder, ParamId};
use crate::probes::Layer;
use crate::{AttnResConfig, DepthKeys};
use engine::{Backend, DepthDims, MatmulDims, NormDims};

/// The depth blocks of the config `cfg` over batches of `embedding.tokens` rows.
#[derive(Clone, Debug)]
pub struct DepthBlocks {
    pub cfg: AttnResConfig,
    pub embedding: VectorEmbedding,
}

/// A site's read: its query (2, D), the pseudo-query w and the keys' gain γ, then the branch's
/// norm gain.
#[derive(Clone, Copy, Debug)]
pub struct DepthSite<T> {
    query: T,
    gain: T,
}

#[derive(Clone, Copy, Debug)]
pub struct DepthEnds<T> {
    embedding: VectorEmbeddingParams<T>,
    query: T,
    lnf: T,
    w_u: T,
}

/// e_n for each row n of a token's state: which row a write adds to and a read-out picks.
pub struct Rows<B: Backend>(Vec<B::Tensor>);

impl<B: Backend> Rows<B> {
    fn new(be: &B, rows: usize) -> engine::Result<Self> {
        let one_hot = |n: usize| -> engine::Result<B::Tensor> {
            let t = be.zeros("e_n", rows)?;
            be.write(&t, &(0..rows).map(|i| f32::from(i == n)).collect::<Vec<_>>());
            Ok(t)
        };
        Ok(Rows((0..rows).map(one_hot).collect::<Result<_, _>>()?))
    }

    fn views(&self, be: &B) -> Self {
        Rows(self.0.iter().map(|t| be.view(t, 0, be.len(t))).collect())
    }
}

/// What every site shares: the rows' one-hots and the branches' one output buffer (no
/// backward reads it).
pub struct DepthShared<B: Backend> {
    rows: Rows<B>,
    branch_out: B::Tensor,
}

pub struct DepthSiteActs<B: Backend> {
    h: B::Tensor,     // (BT, D) the read's mixture
    alpha: B::Tensor, // (BT, sources) its weights
    ln: B::Tensor,    // (BT, D) Norm(h)
    stats: B::Tensor, // (BT, 2)
    y: B::Tensor,     // (BT, D) the branch's output: a view of the one buffer
    after: B::Tensor, // (BT, N + 1, D)
    rows: Rows<B>,
}

pub struct DepthEndActs<B: Backend> {
    encoded: B::Tensor, // (BT, D) e
    state0: B::Tensor,  // (BT, N + 1, D): e in row 0
    h: B::Tensor,       // (BT, D) the head's mixture
    alpha: B::Tensor,   // (BT, N + 1)
    lnf: B::Tensor,     // (BT, D)
    lnf_stats: B::Tensor,
    rows: Rows<B>,
    _branch_out: B::Tensor,
}

/// Gradient scratch shared by every site.
pub struct DepthScratch<B: Backend> {
    dstate: B::Tensor, // (BT, N + 1, D) at every depth: the write passes it through
    dy: B::Tensor,     // (BT, D) a branch output's gradient
    dln: B::Tensor,    // (BT, D)
    dh: B::Tensor,     // (BT, D)
    /// (BT, N + 1) each token's dz_k·rstd_k, `depth_read_backward`'s.
    dz: B::Tensor,
}

impl DepthBlocks {
    fn bt(&self) -> usize {
        self.embedding.tokens
    }

    /// N + 1, the rows of a token's state.
    fn rows(&self) -> usize {
        self.cfg.depth_blocks + 1
    }

    fn d(&self) -> usize {
        self.cfg.d_model
    }

    /// A token's (m×k)·(k×n) for every token, the first operand one constant matrix.
    fn each_token(&self, m: usize, n: usize, k: usize) -> MatmulDims {
        MatmulDims::new(m, n, k).batched(self.bt(), true, false)
    }

    /// A row of a token's state picked by e_nᵀ, or a D-row put into row n by e_n.
    fn pick(&self) -> MatmulDims {
        self.each_token(1, self.d(), self.rows())
    }
    fn put(&self) -> MatmulDims {
        self.each_token(self.rows(), self.d(), 1)
    }

    fn norm_dims(&self) -> NormDims {
        NormDims {
            rows: self.bt(),
            c: self.d(),
            kind: self.cfg.norm.into(),
            eps: self.cfg.norm_eps,
        }
    }

    /// A read of the first `sources` rows.
    fn depth_dims(&self, sources: usize) -> DepthDims {
        DepthDims {
            tokens: self.bt(),
            rows: self.rows(),
            sources,
            width: self.d(),
            eps: DEPTH_KEY_EPS,
            normed_keys: match self.cfg.depth_keys {
                DepthKeys::Normed => true,
                DepthKeys::Raw => false,
            },
        }
    }

    fn sources(&self, site: Site) -> usize {
        self.cfg.sources(site.index())
    }

    /// The row the site writes: its depth block n.
    fn block(&self, site: Site) -> usize {
        self.cfg.depth_block(site.index()).0
    }

    /// A read's query (2, D): the pseudo-query w from 0 (SPEC §7.3.3), then the keys' gain γ
    /// from 1; no decay.
    fn declare_query(&self, lb: &mut LayoutBuilder, site: Option<Site>) -> ParamId {
        let d = self.d();
        let init = Init::Values((0..2 * d).map(|i| f32::from(i >= d)).collect());
        lb.add(read_name(site), &[2, d], false, init)
    }

    fn zeros<B: Backend>(&self, be: &B, what: &str, per_token: usize) -> engine::Result<B::Tensor> {
        be.zeros(what, self.bt() * per_token)
    }
}

/// `blocks.{i}.attnres.{attn|ff}` or the head's `attnres.out`: a read's query.
fn read_name(site: Option<Site>) -> String {
    match site {
        Some(Site { block, layer }) => {
            let at = match layer {
                Layer::Attn => "attn",
                Layer::Ff => "ff",
            };
            format!("blocks.{block}.attnres.{at}")
        }
        None => "attnres.out".into(),
    }
}

impl Residual for DepthBlocks {
    type Site<T> = DepthSite<T>;
    type Ends<T> = DepthEnds<T>;
    type SiteActs<B: Backend> = DepthSiteActs<B>;
    type Shared<B: Backend> = DepthShared<B>;
    type EndActs<B: Backend> = DepthEndActs<B>;
    type Scratch<B: Backend> = DepthScratch<B>;
    const KEYED: bool = false;

    /// `blocks.{i}.attnres.{attn|ff}` (w from 0, SPEC §7.3.3, and γ from 1), then the branch's
    /// `blocks.{i}.ln{1|2}`; no decay on w and γ.
    fn declare_site<P>(
        &self,
        lb: &mut LayoutBuilder,
        site: Site,
        branch: impl FnOnce(&mut LayoutBuilder) -> P,
    ) -> (DepthSite<ParamId>, P) {
        let query = self.declare_query(lb, Some(site));
        let n = match site.layer {
            Layer::Attn => 1,
            Layer::Ff => 2,
        };
        let gain = lb.add(format!("blocks.{}.ln{n}", site.block), &[self.d()], false, Init::ONE);
        (DepthSite { query, gain }, branch(lb))
    }

    fn declare_ends<P>(
        &self,
        lb: &mut LayoutBuilder,
        blocks: impl FnOnce(&mut LayoutBuilder) -> P,
    ) -> (DepthEnds<ParamId>, P) {
        let d = self.d();
        let embedding = self.embedding.declare(lb);
        let blocks = blocks(lb);
        let query = self.declare_query(lb, None);
        let lnf = lb.add("lnf", &[d], false, Init::ONE);
        let w_u = lb.add("w_u", &[self.cfg.vocab, d], false, Init::Normal { std: 0.0 });
        let ends = DepthEnds {
            embedding,
            query,
            lnf,
            w_u,
        };
        (ends, blocks)
    }

    fn map_site<T>(p: &DepthSite<ParamId>, f: &impl Fn(ParamId) -> T) -> DepthSite<T> {
        DepthSite {
            query: f(p.query),
            gain: f(p.gain),
        }
    }

    fn map_ends<T>(p: &DepthEnds<ParamId>, f: &impl Fn(ParamId) -> T) -> DepthEnds<T> {
        DepthEnds {
            embedding: p.embedding.map(f),
            query: f(p.query),
            lnf: f(p.lnf),
            w_u: f(p.w_u),
        }
    }

    fn shared<B: Backend>(&self, be: &B) -> engine::Result<DepthShared<B>> {
        Ok(DepthShared {
            rows: Rows::new(be, self.rows())?,
            branch_out: self.zeros(be, "the projection (batch × seq_len × d_model)", self.d())?,
        })
    }

    fn site_acts<B: Backend>(&self, be: &B, site: Site, shared: &DepthShared<B>) -> engine::Result<DepthSiteActs<B>> {
        let (d, nd) = (self.d(), self.rows() * self.d());
        let token = |what: &str| format!("{what} (batch × seq_len × d_model)");
        Ok(DepthSiteActs {
            h: self.zeros(be, &token("the depth read"), d)?,
            alpha: self.zeros(be, "the depth weights (batch × seq_len × sources)", self.sources(site))?,
            ln: self.zeros(be, &token("the branch's norm"), d)?,
            stats: self.zeros(be, "the norm statistics (batch × seq_len)", 2)?,
            y: be.view(&shared.branch_out, 0, be.len(&shared.branch_out)),
            after: self.zeros(
                be,
                "the depth blocks (batch × seq_len × (depth_blocks + 1)·d_model)",
                nd,
            )?,
            rows: shared.rows.views(be),
        })
    }

    fn end_acts<B: Backend>(&self, be: &B, shared: DepthShared<B>) -> engine::Result<DepthEndActs<B>> {
        let (d, n) = (self.d(), self.rows());
        Ok(DepthEndActs {
            encoded: self.zeros(be, "the embeddings", d)?,
            state0: self.zeros(be, "the depth blocks", n * d)?,
            h: self.zeros(be, "the head's depth read", d)?,
            alpha: self.zeros(be, "the head's depth weights", n)?,
            lnf: self.zeros(be, "the final norm", d)?,
            lnf_stats: self.zeros(be, "the final norm statistics", 2)?,
            rows: shared.rows.views(be),
            _branch_out: shared.branch_out,
        })
    }

    fn scratch<B: Backend>(&self, be: &B) -> engine::Result<DepthScratch<B>> {
        let (d, n) = (self.d(), self.rows());
        Ok(DepthScratch {
            dstate: self.zeros(be, "the depth blocks' gradient", n * d)?,
            dy: self.zeros(be, "dy", d)?,
            dln: self.zeros(be, "dln", d)?,
            dh: self.zeros(be, "dh", d)?,
            dz: self.zeros(be, "the depth logits' gradient", n)?,
        })
    }

    fn head_width(&self) -> usize {
        self.d()
    }

    /// b_0 = e, the other rows 0.
    fn spread<B: Backend>(&self, be: &B, e: &DepthEndActs<B>) {
        be.matmul(&e.state0, &e.rows.0[0], &e.encoded, self.put());
    }

    rows_of_d!(first: state0);

    /// Norm(Σ_k α_k b_k) over the site's sources.
    fn read<B: Backend>(
        &self,
        be: &B,
        a: &DepthSiteActs<B>,
        x: &B::Tensor,
        input: &B::Tensor,
        p: &DepthSite<B::Tensor>,
        site: Site,
    ) {
        let dims = self.depth_dims(self.sources(site));
        be.depth_read(&a.h, &a.alpha, x, &p.query, dims);
        be.norm_forward(input, &a.stats, &a.h, &p.gain, self.norm_dims());
    }

    /// b_n += y: the state with e_n ⊗ y added (y + x bit for bit as a vector's x + y).
    fn write<B: Backend>(
        &self,
        be: &B,
        a: &DepthSiteActs<B>,
        x: &B::Tensor,
        y: &B::Tensor,
        _p: &DepthSite<B::Tensor>,
        site: Site,
    ) {
        be.matmul(&a.after, &a.rows.0[self.block(site)], y, self.put());
        be.add_assign(&a.after, x);
    }

    /// logits = W_U · Norm(Σ_k α_k b_k) over b_0 … b_N.
    fn read_out<B: Backend>(
        &self,
        be: &B,
        e: &DepthEndActs<B>,
        x: &B::Tensor,
        p: &DepthEnds<B::Tensor>,
        head: &Unembedding<B>,
    ) {
        let dims = self.depth_dims(self.rows());
        be.depth_read(&e.h, &e.alpha, x, &p.query, dims);
        be.norm_forward(&e.lnf, &e.lnf_stats, &e.h, &p.lnf, self.norm_dims());
        head.logits(be, &e.lnf, &p.w_u);
    }

    fn dresidual<'a, B: Backend>(&self, s: &'a DepthScratch<B>, _depth: usize) -> &'a B::Tensor {
        &s.dstate
    }

    fn read_out_backward<B: Backend>(
        &self,
        be: &B,
        s: &DepthScratch<B>,
        e: &DepthEndActs<B>,
        x: &B::Tensor,
        (p, dp): (&DepthEnds<B::Tensor>, &DepthEnds<B::Tensor>),
        head: &Unembedding<B>,
        batch: &BatchTensors<B>,
        seed: Option<&B::Tensor>,
    ) {
        head.backward(be, &s.dln, &dp.w_u, &e.lnf, &p.w_u, batch, seed);
        be.fill(&s.dh, 0.0);
        be.norm_backward(&s.dh, &dp.lnf, &s.dln, &e.h, &p.lnf, &e.lnf_stats, self.norm_dims());
        be.fill(&s.dstate, 0.0);
        let dims = self.depth_dims(self.rows());
        let dz = be.view(&s.dz, 0, dims.scratch());
        be.depth_read_backward(&s.dstate, &dp.query, &dz, &s.dh, x, &e.alpha, &p.query, dims);
    }

    /// The state's gradient passes through; the branch's is row n of it.
    fn write_backward<'a, B: Backend>(
        &self,
        be: &B,
        s: &'a DepthScratch<B>,
        a: &DepthSiteActs<B>,
        _x: &B::Tensor,
        _y: &B::Tensor,
        _params: (&DepthSite<B::Tensor>, &DepthSite<B::Tensor>),
        site: Site,
    ) -> &'a B::Tensor {
        be.matmul(&s.dy, &a.rows.0[self.block(site)], &s.dstate, self.pick());
        &s.dy
    }

    fn input_grad<'a, B: Backend>(&self, s: &'a DepthScratch<B>, _dqkv: &'a B::Tensor, _site: Site) -> &'a B::Tensor {
        &s.dln
    }

    /// Through the branch's norm into dh, then the depth read's backward into the sources.
    fn read_backward<B: Backend>(
        &self,
        be: &B,
        s: &DepthScratch<B>,
        a: &DepthSiteActs<B>,
        x: &B::Tensor,
        dinput: &B::Tensor,
        (p, dp): (&DepthSite<B::Tensor>, &DepthSite<B::Tensor>),
        site: Site,
    ) {
        be.fill(&s.dh, 0.0);
        be.norm_backward(&s.dh, &dp.gain, dinput, &a.h, &p.gain, &a.stats, self.norm_dims());
        let dims = self.depth_dims(self.sources(site));
        let dz = be.view(&s.dz, 0, dims.scratch());
        be.depth_read_backward(&s.dstate, &dp.query, &dz, &s.dh, x, &a.alpha, &p.query, dims);
    }

    /// de = the gradient of b_0.
    fn gather<'a, B: Backend>(&self, be: &B, s: &'a DepthScratch<B>, e: &DepthEndActs<B>) -> &'a B::Tensor {
        be.matmul(&s.dy, &e.rows.0[0], &s.dstate, self.pick());
        &s.dy
    }

    fn embed_backward<B: Backend>(
        &self,
        be: &B,
        s: &DepthScratch<B>,
        _e: &DepthEndActs<B>,
        (_p, dp): (&DepthEnds<B::Tensor>, &DepthEnds<B::Tensor>),
        batch: &BatchTensors<B>,
    ) {
        self.embedding.backward(be, &dp.embedding, &s.dy, batch);
    }

    fn shape(&self) -> Shape {
        Shape::Matrix {
            rows: self.rows(),
            cols: self.d(),
        }
    }

    fn groups(&self) -> (Option<Group>, usize) {
        (Some(Group::DepthBlock), self.rows())
    }

    fn width(&self) -> usize {
        self.rows() * self.d()
    }

    fn branch_width(&self) -> usize {
        self.d()
    }

    fn embedding_width(&self) -> usize {
        self.d()
    }

    /// The head's softmax depends on the state: no linear read-out.
    fn linear_read_out(&self) -> Option<ReadOut> {
        None
    }

    fn depth<'a, B: Backend>(
        &self,
        sites: Vec<(String, &'a DepthSiteActs<B>)>,
        ends: &'a DepthEndActs<B>,
    ) -> Vec<DepthRead<'a, B>> {
        let head = DepthRead {
            name: "head".into(),
            sources: self.rows(),
            partial: false,
            alpha: &ends.alpha,
        };
        (sites.into_iter().enumerate())
            .map(|(index, (name, a))| DepthRead {
                name,
                sources: self.cfg.sources(index),
                partial: self.cfg.depth_block(index).1 > 0,
                alpha: &a.alpha,
            })
            .chain([head])
            .collect()
    }
}
