//! n streams of D a token, hyper-connections' residual (HC, mHC, mHC-lite; SPEC §6): each site
//! reads a gated sum of the streams and writes back by mixing them with an n×n P.
//!
//!   X⁰ = (e, e, …, e)                                 e = W_E[token] + W_PE[position]
//!   pre, post, P = gates(Φ x̂; α, b)                   x̂ the streams' norm (`engine::ops::hyper`)
//!   read:  Norm(u),  u = Σ_j pre_j x_j
//!   write: x'_k = Σ_j P[j,k] x_j + post_k y           P[j,k]: from stream j to stream k
//!   logits = W_U · Norm(Σ_j x_j)                       the collapse `sum`;
//!            W_U · Norm(Σ_j q_j x_j)                   `head`, q = σ(α·Φ_h x̂ + b) + ε;
//!            W_U · Σ_j Norm(x_j)                       `norm-then-sum`
//!
//! Every per-token product of streams is a batched matmul (a token's n×n, n×D or 1×n matrices),
//! so the only op of its own is the gates'. The config and its inits are in `config.rs`, its
//! counts in `count.rs`, the gates' dims and parameters in `hyper_connections.rs`.

use super::{Residual, Site};
use crate::batch::BatchTensors;
use crate::embedding::{VectorEmbedding, VectorEmbeddingParams};
use crate::hyper_connections::{GateDims, SiteParams};
use crate::interventions::{Group, ReadOut};
use crate::loss::Unembedding;
use crate::observe::{MixingSite, Shape};
use crate::params::{Init, LayoutBuilder, ParamId};
use crate::probes::Layer;
use crate::{HcCollapse, HcConfig};
use engine::{Backend, MatmulDims};

/// The streams of the config `cfg` over batches of `embedding.tokens` rows.
#[derive(Clone, Debug)]
pub struct Streams {
    pub cfg: HcConfig,
    pub embedding: VectorEmbedding,
}

#[derive(Clone, Debug)]
pub struct StreamSite<T> {
    gates: SiteParams<T>,
    gain: T, // (D) the branch's norm: ln1 or ln2
}

#[derive(Clone, Debug)]
pub struct StreamEnds<T> {
    embedding: VectorEmbeddingParams<T>,
    /// The `head` collapse's gates.
    head: Option<SiteParams<T>>,
    lnf: T,
    w_u: T,
}

/// Constant ones: over the streams, a token's n·D values (the norm's gain) and the tokens (the
/// column sums of the gates' gradients); each site holds views of the model's one set.
pub struct Ones<B: Backend> {
    n: B::Tensor,
    nd: B::Tensor,
    bt: B::Tensor,
}

impl<B: Backend> Ones<B> {
    fn new(be: &B, n: usize, nd: usize, bt: usize) -> engine::Result<Self> {
        let ones = |len: usize| -> engine::Result<B::Tensor> {
            let t = be.zeros("ones", len)?;
            be.fill(&t, 1.0);
            Ok(t)
        };
        Ok(Ones {
            n: ones(n)?,
            nd: ones(nd)?,
            bt: ones(bt)?,
        })
    }

    fn views(&self, be: &B) -> Self {
        let view = |t: &B::Tensor| be.view(t, 0, be.len(t));
        Ones {
            n: view(&self.n),
            nd: view(&self.nd),
            bt: view(&self.bt),
        }
    }
}

/// What one set of gates keeps for its backward.
pub struct Gates<B: Backend> {
    xhat: B::Tensor,   // (BT, n·D)
    xstats: B::Tensor, // (BT, 2); HC's (BT·n, 2)
    m: B::Tensor,      // (BT, W)
    pre: B::Tensor,    // (BT, n)
    post: B::Tensor,   // (BT, n), unused by the head
    mix: B::Tensor,    // (BT, n, n), unused by the head
    u: B::Tensor,      // (BT, D) the collapsed input
}

impl<B: Backend> Gates<B> {
    fn new(be: &B, d: GateDims, d_model: usize) -> engine::Result<Self> {
        let (bt, n) = (d.gates.tokens, d.gates.n);
        let z = |what: &str, len: usize| be.zeros(what, len);
        Ok(Gates {
            xhat: z(
                "the streams' norm (batch × seq_len × streams·d_model)",
                bt * n * d_model,
            )?,
            xstats: z("the streams' norm statistics", 2 * d.norm.rows)?,
            m: z("the gates' logits", bt * d.gates.width())?,
            pre: z("pre", bt * n)?,
            post: z("post", bt * n)?,
            mix: z("the mixing matrices (batch × seq_len × streams²)", bt * n * n)?,
            u: z("the collapsed input (batch × seq_len × d_model)", bt * d_model)?,
        })
    }
}

/// What one site keeps for its backward.
pub struct StreamSiteActs<B: Backend> {
    gates: Gates<B>,
    ln: B::Tensor, // (BT, D) Norm(u)
    ln_stats: B::Tensor,
    y: B::Tensor,     // (BT, D) the branch's output
    after: B::Tensor, // (BT, n, D) the streams after the site
    ones: Ones<B>,
}

pub struct StreamEndActs<B: Backend> {
    encoded: B::Tensor, // (BT, D) e
    state0: B::Tensor,  // (BT, n, D) X⁰
    /// The `head` collapse's gates.
    head: Option<Gates<B>>,
    ones: Ones<B>,
    h: B::Tensor,         // (BT, D) the collapse: Σ_j x_j, Σ_j q_j x_j, or Σ_j Norm(x_j)
    lnf: B::Tensor,       // (BT, D) Norm(h); (BT, n, D) with `norm-then-sum`
    lnf_stats: B::Tensor, // (BT, 2); (BT·n, 2)
}

/// Gradient scratch shared by every site.
pub struct StreamScratch<B: Backend> {
    /// (BT, n, D) each: the gradient of a site's output streams and of its input, taking turns
    /// from site to site.
    dstreams: [B::Tensor; 2],
    du: B::Tensor,  // (BT, D)
    dln: B::Tensor, // (BT, D)
    df: B::Tensor,  // (BT, D)
    dpre: B::Tensor,
    dpost: B::Tensor,
    dmix: B::Tensor,
    dm: B::Tensor,
    dz: B::Tensor,
    dalpha: B::Tensor, // (BT, 3)
    dxhat: B::Tensor,  // (BT, n·D)
    dgain: B::Tensor,  // (n·D) the gain-free norm's, unused
    dh: B::Tensor,     // (BT, D) the head's collapse
    de: B::Tensor,     // (BT, D) the embedding's
}

impl Streams {
    fn bt(&self) -> usize {
        self.embedding.tokens
    }

    /// A batched product over the tokens: each token's (m×k)·(k×n).
    fn per_token(&self, m: usize, n: usize, k: usize) -> MatmulDims {
        MatmulDims::new(m, n, k).batched(self.bt(), false, false)
    }

    /// A set of gates and their collapse: x̂, m, pre (post, P) and u from the streams `x`.
    fn gates_in<B: Backend>(
        &self,
        be: &B,
        a: &Gates<B>,
        ones: &Ones<B>,
        x: &B::Tensor,
        p: &SiteParams<B::Tensor>,
        dims: GateDims,
    ) {
        let (n, d) = (self.cfg.streams, self.cfg.d_model);
        let (rows, cols, k) = dims.projection;
        let gain = p.gain.as_ref().unwrap_or(&ones.nd);
        be.norm_forward(&a.xhat, &a.xstats, x, gain, dims.norm);
        be.matmul(&a.m, &a.xhat, &p.phi, MatmulDims::new(rows, cols, k).trans_b());
        be.hyper_gates(&a.pre, &a.post, &a.mix, &a.m, &p.alpha, &p.bias, dims.gates);
        be.matmul(&a.u, &a.pre, x, self.per_token(1, d, n));
    }

    /// The collapse's and the gates' backward, from du: dpre, then dx += pre ⊗ du, the gates'
    /// gradients and dx through x̂, into `h`. The head's gates read no dpost or dP.
    #[allow(clippy::too_many_arguments)]
    fn gates_in_backward<B: Backend>(
        &self,
        be: &B,
        s: &StreamScratch<B>,
        h: &B::Tensor,
        (a, ones): (&Gates<B>, &Ones<B>),
        x: &B::Tensor,
        (p, dp): (&SiteParams<B::Tensor>, &SiteParams<B::Tensor>),
        dims: GateDims,
    ) {
        let (n, d, bt) = (self.cfg.streams, self.cfg.d_model, self.bt());
        let (rows, cols, k) = dims.projection;
        let (w, scales) = (dims.gates.width(), dims.gates.scales());
        be.matmul(&s.dpre, x, &s.du, self.per_token(n, 1, d));
        be.matmul(h, &a.pre, &s.du, self.per_token(n, d, 1).accumulate());
        // The head's gates are fewer than a site's: the scratch's first values.
        let (dm, dz, dalpha) = (
            be.view(&s.dm, 0, bt * w),
            be.view(&s.dz, 0, bt * w),
            be.view(&s.dalpha, 0, bt * scales),
        );
        be.hyper_gates_backward(
            &dm, &dz, &dalpha, &s.dpre, &s.dpost, &s.dmix, &a.m, &p.alpha, &p.bias, dims.gates,
        );
        be.matmul(&dp.phi, &dm, &a.xhat, MatmulDims::new(cols, k, rows).trans_a());
        be.matmul(&s.dxhat, &dm, &p.phi, MatmulDims::new(rows, k, cols));
        let (gain, dgain) = match (&p.gain, &dp.gain) {
            (Some(g), Some(dg)) => (g, dg),
            // mHC's statistic over n·D values has no gain (nor has the head's).
            (None, _) | (Some(_), None) => (&ones.nd, &s.dgain),
        };
        be.norm_backward(h, dgain, &s.dxhat, x, gain, &a.xstats, dims.norm);
        // The bias's and the scales' gradients: column sums over the tokens, in token order.
        be.matmul(&dp.bias, &ones.bt, &dz, MatmulDims::new(1, w, bt));
        be.matmul(&dp.alpha, &ones.bt, &dalpha, MatmulDims::new(1, scales, bt));
    }

    /// The head's input, W_U's operand: Norm(h), or h itself with `norm-then-sum`.
    fn head_input<'a, B: Backend>(&self, e: &'a StreamEndActs<B>) -> &'a B::Tensor {
        match self.cfg.collapse() {
            HcCollapse::NormThenSum => &e.h,
            HcCollapse::Sum | HcCollapse::Head | HcCollapse::Auto => &e.lnf,
        }
    }

    /// One stream's width for every stream of every token: X⁰ = (e, …, e) and its sum.
    fn every_stream(&self) -> MatmulDims {
        MatmulDims::new(self.cfg.streams, self.cfg.d_model, 1).batched(self.bt(), true, false)
    }
}

impl Residual for Streams {
    type Site<T> = StreamSite<T>;
    type Ends<T> = StreamEnds<T>;
    type SiteActs<B: Backend> = StreamSiteActs<B>;
    type Shared<B: Backend> = Ones<B>;
    type EndActs<B: Backend> = StreamEndActs<B>;
    type Scratch<B: Backend> = StreamScratch<B>;
    const KEYED: bool = false;

    /// `blocks.{i}.attn.hc_*` and `blocks.{i}.ln1`, or `blocks.{i}.ff.hc_*` and `ln2`, then the
    /// branch's.
    fn declare_site<P>(
        &self,
        lb: &mut LayoutBuilder,
        site: Site,
        branch: impl FnOnce(&mut LayoutBuilder) -> P,
    ) -> (StreamSite<ParamId>, P) {
        let (i, cfg) = (site.block, &self.cfg);
        let (name, n) = match site.layer {
            Layer::Attn => ("attn", 1),
            Layer::Ff => ("ff", 2),
        };
        let prefix = format!("blocks.{i}.{name}");
        let gates = SiteParams::declare(lb, &prefix, cfg, site.index(), cfg.site_dims(0));
        let gain = lb.add(format!("blocks.{i}.ln{n}"), &[cfg.d_model], false, Init::ONE);
        (StreamSite { gates, gain }, branch(lb))
    }

    /// The embedding, the blocks, the `head` collapse's gates, `lnf`, and W_U from zero: the
    /// first loss is exactly ln V.
    fn declare_ends<P>(
        &self,
        lb: &mut LayoutBuilder,
        blocks: impl FnOnce(&mut LayoutBuilder) -> P,
    ) -> (StreamEnds<ParamId>, P) {
        let cfg = &self.cfg;
        let embedding = self.embedding.declare(lb);
        let blocks = blocks(lb);
        let head = (cfg.collapse() == HcCollapse::Head)
            .then(|| SiteParams::declare(lb, "head", cfg, 2 * cfg.n_layers, cfg.head_dims(0)));
        let lnf = lb.add("lnf", &[cfg.d_model], false, Init::ONE);
        let w_u = lb.add("w_u", &[cfg.vocab, cfg.d_model], false, Init::Normal { std: 0.0 });
        let ends = StreamEnds {
            embedding,
            head,
            lnf,
            w_u,
        };
        (ends, blocks)
    }

    fn map_site<T>(p: &StreamSite<ParamId>, f: &impl Fn(ParamId) -> T) -> StreamSite<T> {
        StreamSite {
            gates: p.gates.map(f),
            gain: f(p.gain),
        }
    }

    fn map_ends<T>(p: &StreamEnds<ParamId>, f: &impl Fn(ParamId) -> T) -> StreamEnds<T> {
        StreamEnds {
            embedding: p.embedding.map(f),
            head: p.head.as_ref().map(|h| h.map(f)),
            lnf: f(p.lnf),
            w_u: f(p.w_u),
        }
    }

    fn shared<B: Backend>(&self, be: &B) -> engine::Result<Ones<B>> {
        let (n, d) = (self.cfg.streams, self.cfg.d_model);
        Ones::new(be, n, n * d, self.bt())
    }

    fn end_acts<B: Backend>(&self, be: &B, ones: Ones<B>) -> engine::Result<StreamEndActs<B>> {
        let (cfg, bt) = (&self.cfg, self.bt());
        let (d, nd) = (cfg.d_model, cfg.streams * cfg.d_model);
        let z = |what: &str, len: usize| be.zeros(what, len);
        let lnf_rows = cfg.final_norm(bt).rows;
        Ok(StreamEndActs {
            encoded: z("the embeddings", bt * d)?,
            state0: z("the streams", bt * nd)?,
            head: (cfg.collapse() == HcCollapse::Head)
                .then(|| Gates::new(be, cfg.head_dims(bt), d))
                .transpose()?,
            ones,
            h: z("the collapsed streams", bt * d)?,
            lnf: z("the final norm", lnf_rows * d)?,
            lnf_stats: z("the final norm statistics", lnf_rows * 2)?,
        })
    }

    fn site_acts<B: Backend>(&self, be: &B, _site: Site, ones: &Ones<B>) -> engine::Result<StreamSiteActs<B>> {
        let (cfg, bt) = (&self.cfg, self.bt());
        let d = cfg.d_model;
        let z = |what: &str, len: usize| be.zeros(what, len);
        Ok(StreamSiteActs {
            gates: Gates::new(be, cfg.site_dims(bt), d)?,
            ln: z("the branch's norm", bt * d)?,
            ln_stats: z("the branch's norm statistics", bt * 2)?,
            y: z("the branch's output", bt * d)?,
            after: z("the streams (batch × seq_len × streams·d_model)", bt * cfg.streams * d)?,
            ones: ones.views(be),
        })
    }

    fn scratch<B: Backend>(&self, be: &B) -> engine::Result<StreamScratch<B>> {
        let (cfg, bt) = (&self.cfg, self.bt());
        let (n, d, w) = (cfg.streams, cfg.d_model, cfg.gate_width());
        let z = |what: &str, len: usize| be.zeros(what, len);
        Ok(StreamScratch {
            dstreams: [
                z("the streams' gradient", bt * n * d)?,
                z("the streams' gradient", bt * n * d)?,
            ],
            du: z("du", bt * d)?,
            dln: z("dln", bt * d)?,
            df: z("df", bt * d)?,
            dpre: z("dpre", bt * n)?,
            dpost: z("dpost", bt * n)?,
            dmix: z("dmix", bt * n * n)?,
            dm: z("dm", bt * w)?,
            dz: z("dz", bt * w)?,
            dalpha: z("dalpha", bt * 3)?,
            dxhat: z("dxhat", bt * n * d)?,
            dgain: z("dgain", n * d)?,
            dh: z("dh", bt * d)?,
            de: z("de", bt * d)?,
        })
    }

    fn head_width(&self) -> usize {
        self.cfg.d_model
    }

    /// X⁰ = (e, …, e)
    fn spread<B: Backend>(&self, be: &B, e: &StreamEndActs<B>) {
        be.matmul(&e.state0, &e.ones.n, &e.encoded, self.every_stream());
    }

    rows_of_d!(first: state0);

    /// Norm(u), u = Σ_j pre_j x_j
    fn read<B: Backend>(
        &self,
        be: &B,
        a: &StreamSiteActs<B>,
        x: &B::Tensor,
        input: &B::Tensor,
        p: &StreamSite<B::Tensor>,
        _site: Site,
    ) {
        let bt = self.bt();
        self.gates_in(be, &a.gates, &a.ones, x, &p.gates, self.cfg.site_dims(bt));
        be.norm_forward(input, &a.ln_stats, &a.gates.u, &p.gain, self.cfg.branch_norm(bt));
    }

    /// after = Pᵀ x + post ⊗ y
    fn write<B: Backend>(
        &self,
        be: &B,
        a: &StreamSiteActs<B>,
        x: &B::Tensor,
        y: &B::Tensor,
        _p: &StreamSite<B::Tensor>,
        _site: Site,
    ) {
        let (n, d) = (self.cfg.streams, self.cfg.d_model);
        be.matmul(&a.after, &a.gates.mix, x, self.per_token(n, d, n).trans_a());
        be.matmul(&a.after, &a.gates.post, y, self.per_token(n, d, 1).accumulate());
    }

    /// logits = W_U · Norm(Σ_j x_j), W_U · Norm(Σ_j q_j x_j) or W_U · Σ_j Norm(x_j)
    fn read_out<B: Backend>(
        &self,
        be: &B,
        e: &StreamEndActs<B>,
        x: &B::Tensor,
        p: &StreamEnds<B::Tensor>,
        unembedding: &Unembedding<B>,
    ) {
        let (cfg, bt) = (&self.cfg, self.bt());
        let sum = MatmulDims::new(1, cfg.d_model, cfg.streams).batched(bt, true, false);
        let norm = cfg.final_norm(bt);
        match (cfg.collapse(), &e.head, &p.head) {
            (HcCollapse::NormThenSum, ..) => {
                be.norm_forward(&e.lnf, &e.lnf_stats, x, &p.lnf, norm);
                be.matmul(&e.h, &e.ones.n, &e.lnf, sum);
            }
            (HcCollapse::Head, Some(gates), Some(q)) => {
                self.gates_in(be, gates, &e.ones, x, q, cfg.head_dims(bt));
                be.norm_forward(&e.lnf, &e.lnf_stats, &gates.u, &p.lnf, norm);
            }
            // `sum` (`auto` is resolved by `collapse()`; the head always has its gates).
            (HcCollapse::Sum | HcCollapse::Auto | HcCollapse::Head, ..) => {
                be.matmul(&e.h, &e.ones.n, x, sum);
                be.norm_forward(&e.lnf, &e.lnf_stats, &e.h, &p.lnf, norm);
            }
        }
        unembedding.logits(be, self.head_input(e), &p.w_u);
    }

    /// The gradients of the streams before and after a site take turns in two buffers: the
    /// last residual's (depth 2L) in the first.
    fn dresidual<'a, B: Backend>(&self, s: &'a StreamScratch<B>, depth: usize) -> &'a B::Tensor {
        &s.dstreams[(2 * self.cfg.n_layers).abs_diff(depth) % 2]
    }

    fn read_out_backward<B: Backend>(
        &self,
        be: &B,
        s: &StreamScratch<B>,
        e: &StreamEndActs<B>,
        x: &B::Tensor,
        (p, dp): (&StreamEnds<B::Tensor>, &StreamEnds<B::Tensor>),
        unembedding: &Unembedding<B>,
        batch: &BatchTensors<B>,
        seed: Option<&B::Tensor>,
    ) {
        let (cfg, bt) = (&self.cfg, self.bt());
        let [g, h] = &s.dstreams;
        unembedding.backward(be, &s.dln, &dp.w_u, self.head_input(e), &p.w_u, batch, seed);
        let norm = cfg.final_norm(bt);
        match (cfg.collapse(), &e.head, &p.head, &dp.head) {
            // W_U · Σ_j Norm(x_j): every stream's norm gets dln.
            (HcCollapse::NormThenSum, ..) => {
                be.matmul(h, &e.ones.n, &s.dln, self.every_stream());
                be.fill(g, 0.0);
                be.norm_backward(g, &dp.lnf, h, x, &p.lnf, &e.lnf_stats, norm);
            }
            // W_U · Norm(Σ_j q_j x_j): the head's gates take du.
            (HcCollapse::Head, Some(gates), Some(q), Some(dq)) => {
                be.fill(&s.du, 0.0);
                be.norm_backward(&s.du, &dp.lnf, &s.dln, &gates.u, &p.lnf, &e.lnf_stats, norm);
                be.fill(g, 0.0);
                self.gates_in_backward(be, s, g, (gates, &e.ones), x, (q, dq), cfg.head_dims(bt));
            }
            // W_U · Norm(Σ_j x_j): every stream gets dh.
            (HcCollapse::Sum | HcCollapse::Auto | HcCollapse::Head, ..) => {
                be.fill(&s.dh, 0.0);
                be.norm_backward(&s.dh, &dp.lnf, &s.dln, &e.h, &p.lnf, &e.lnf_stats, norm);
                be.matmul(g, &e.ones.n, &s.dh, self.every_stream());
            }
        }
    }

    /// From the output streams' gradient: dy, dpost, dP, and the input streams' gradient
    /// through the mixing (written).
    fn write_backward<'a, B: Backend>(
        &self,
        be: &B,
        s: &'a StreamScratch<B>,
        a: &StreamSiteActs<B>,
        x: &B::Tensor,
        y: &B::Tensor,
        _params: (&StreamSite<B::Tensor>, &StreamSite<B::Tensor>),
        site: Site,
    ) -> &'a B::Tensor {
        let (n, d) = (self.cfg.streams, self.cfg.d_model);
        let (g, h) = (self.dresidual(s, site.depth_out()), self.dresidual(s, site.depth_in()));
        be.matmul(&s.df, &a.gates.post, g, self.per_token(1, d, n));
        be.matmul(&s.dpost, g, y, self.per_token(n, 1, d));
        be.matmul(&s.dmix, x, g, self.per_token(n, n, d).trans_b());
        be.matmul(h, &a.gates.mix, g, self.per_token(n, d, n));
        &s.df
    }

    fn input_grad<'a, B: Backend>(&self, s: &'a StreamScratch<B>, _dqkv: &'a B::Tensor, _site: Site) -> &'a B::Tensor {
        &s.dln
    }

    /// Through the branch's norm into du, then the collapse and the gates into the input
    /// streams' gradient.
    fn read_backward<B: Backend>(
        &self,
        be: &B,
        s: &StreamScratch<B>,
        a: &StreamSiteActs<B>,
        x: &B::Tensor,
        dinput: &B::Tensor,
        (p, dp): (&StreamSite<B::Tensor>, &StreamSite<B::Tensor>),
        site: Site,
    ) {
        let (cfg, bt) = (&self.cfg, self.bt());
        be.fill(&s.du, 0.0);
        let norm = cfg.branch_norm(bt);
        be.norm_backward(&s.du, &dp.gain, dinput, &a.gates.u, &p.gain, &a.ln_stats, norm);
        let h = self.dresidual(s, site.depth_in());
        let dims = cfg.site_dims(bt);
        self.gates_in_backward(be, s, h, (&a.gates, &a.ones), x, (&p.gates, &dp.gates), dims);
    }

    /// de = Σ_j dX⁰_j
    fn gather<'a, B: Backend>(&self, be: &B, s: &'a StreamScratch<B>, e: &StreamEndActs<B>) -> &'a B::Tensor {
        let (n, d) = (self.cfg.streams, self.cfg.d_model);
        let sum = MatmulDims::new(1, d, n).batched(self.bt(), true, false);
        be.matmul(&s.de, &e.ones.n, self.dresidual(s, 0), sum);
        &s.de
    }

    fn embed_backward<B: Backend>(
        &self,
        be: &B,
        s: &StreamScratch<B>,
        _e: &StreamEndActs<B>,
        (_p, dp): (&StreamEnds<B::Tensor>, &StreamEnds<B::Tensor>),
        batch: &BatchTensors<B>,
    ) {
        self.embedding.backward(be, &dp.embedding, &s.de, batch);
    }

    fn shape(&self) -> Shape {
        Shape::Matrix {
            rows: self.cfg.streams,
            cols: self.cfg.d_model,
        }
    }

    fn groups(&self) -> (Option<Group>, usize) {
        (Some(Group::Stream), self.cfg.streams)
    }

    fn width(&self) -> usize {
        self.cfg.streams * self.cfg.d_model
    }

    fn branch_width(&self) -> usize {
        self.cfg.d_model
    }

    fn embedding_width(&self) -> usize {
        self.cfg.d_model
    }

    /// Linear but for the `head` collapse, whose gates are read from the streams themselves.
    fn linear_read_out(&self) -> Option<ReadOut> {
        let c = &self.cfg;
        let (width, streams, norm, eps) = (c.d_model, c.streams, c.norm.into(), c.norm_eps);
        match c.collapse() {
            HcCollapse::NormThenSum => Some(ReadOut::EachNormed {
                width,
                streams,
                norm,
                eps,
            }),
            HcCollapse::Head => None,
            // `auto` is resolved by `collapse()`; HC's sum.
            HcCollapse::Sum | HcCollapse::Auto => Some(ReadOut::Norm {
                width,
                streams,
                norm,
                eps,
            }),
        }
    }

    fn mixing<'a, B: Backend>(&self, sites: Vec<(String, &'a StreamSiteActs<B>)>) -> Vec<MixingSite<'a, B>> {
        (sites.into_iter())
            .map(|(name, s)| MixingSite {
                name,
                streams: self.cfg.streams,
                pre: &s.gates.pre,
                post: &s.gates.post,
                mix: &s.gates.mix,
            })
            .collect()
    }
}
