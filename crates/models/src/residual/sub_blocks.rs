//! K sub-blocks of D a token, AltUp's residual (SPEC §7.2, the paper variant): each layer
//! computes on one sub-block, x_j with j = j*(ℓ), and predicts and corrects the others.
//!
//!   X⁰ = (e, e, …, e)                                 e = W_E[token] + W_PE[position]
//!   predict:  x̂_i = Σ_k P[i,k] x_k                    P ∈ R^{K×K}, row i the destination
//!   compute:  y = T_ℓ(x_j)                            the transformer's layer, on the old x_j
//!             y = T_ℓ(x̂_j)                            or on the prediction (`compute_on`)
//!   correct:  x'_i = x̂_i + g_i (y − x̂_j)              g ∈ R^K
//!   logits = W_U · Norm(Σ_k x_k)
//!
//! As sites: attention reads Norm(x_j) and writes the state with its output added to x_j,
//! X^mid = X + e_j ⊗ y_attn, so that the FF reads Norm(x_j + y_attn) as in the transformer;
//! the same write puts x̂ = P X into the layer's output. The FF's write then takes
//! δ = X^mid_j + y_ff − x̂_j and adds g ⊗ δ. Computing on the prediction, attention's read
//! makes x̂ first and reads x̂_j, and X^mid = x̂ + e_j ⊗ y_attn. Every step is a batched matmul
//! of a token's K×D block by a constant or by P and g, so AltUp needs no op of its own.

use super::{Residual, Site};
use crate::batch::BatchTensors;
use crate::embedding::{VectorEmbedding, VectorEmbeddingParams};
use crate::interventions::{Group, ReadOut};
use crate::loss::Unembedding;
use crate::observe::{Shape, SubBlockLayer};
use crate::params::{Init, LayoutBuilder, ParamId};
use crate::probes::Layer;
use crate::{AltupConfig, AltupInput, Norm};
use engine::{Backend, MatmulDims, NormDims};

/// The sub-blocks of the config `cfg` over batches of `embedding.tokens` rows.
#[derive(Clone, Debug)]
pub struct SubBlocks {
    pub cfg: AltupConfig,
    pub embedding: VectorEmbedding,
}

/// A site's norm gain, and its write's coefficients: P (K×K) at attention, g (K) at the FF.
#[derive(Clone, Copy, Debug)]
pub struct SubBlockSite<T> {
    gain: T,
    coefs: T,
}

#[derive(Clone, Copy, Debug)]
pub struct SubBlockEnds<T> {
    embedding: VectorEmbeddingParams<T>,
    lnf: T,
    w_u: T,
}

/// Constant coefficients: e_j and −e_j for each j (which sub-block a layer reads and
/// corrects), the identity (a state's copy), ones over the sub-blocks (the spread and the
/// sum) and over the tokens (the coefficients' gradients, summed in token order).
pub struct Constants<B: Backend> {
    select: Vec<B::Tensor>,
    unselect: Vec<B::Tensor>,
    identity: B::Tensor,
    ones: B::Tensor,
    ones_bt: B::Tensor,
}

impl<B: Backend> Constants<B> {
    fn new(be: &B, k: usize, bt: usize) -> engine::Result<Self> {
        let constant = |what: &str, values: Vec<f32>| -> engine::Result<B::Tensor> {
            let t = be.zeros(what, values.len())?;
            be.write(&t, &values);
            Ok(t)
        };
        let one_hot = |j: usize, on: f32| (0..k).map(|i| if i == j { on } else { 0.0 }).collect();
        Ok(Constants {
            select: (0..k)
                .map(|j| constant("e_j", one_hot(j, 1.0)))
                .collect::<Result<_, _>>()?,
            unselect: (0..k)
                .map(|j| constant("−e_j", one_hot(j, -1.0)))
                .collect::<Result<_, _>>()?,
            identity: constant(
                "the identity",
                (0..k * k).map(|i| f32::from(i % (k + 1) == 0)).collect(),
            )?,
            ones: constant("ones over the sub-blocks", vec![1.0; k])?,
            ones_bt: constant("ones over the tokens", vec![1.0; bt])?,
        })
    }

    fn views(&self, be: &B) -> Self {
        let view = |t: &B::Tensor| be.view(t, 0, be.len(t));
        Constants {
            select: self.select.iter().map(view).collect(),
            unselect: self.unselect.iter().map(view).collect(),
            identity: view(&self.identity),
            ones: view(&self.ones),
            ones_bt: view(&self.ones_bt),
        }
    }
}

/// What every site shares: the constants, the branches' one output buffer (no backward reads
/// it), and each layer's output state, which its attention's write starts as x̂ = P X.
pub struct SubBlockShared<B: Backend> {
    constants: Constants<B>,
    branch_out: B::Tensor,
    layer_out: Vec<B::Tensor>,
}

pub struct SubBlockSiteActs<B: Backend> {
    u: B::Tensor,     // (BT, D) the active sub-block x_j
    ln: B::Tensor,    // (BT, D) Norm(x_j)
    stats: B::Tensor, // (BT, 2)
    y: B::Tensor,     // (BT, D) the branch's output: a view of the one buffer
    /// (BT, D) the FF's δ = y − x̂_j, the correction's input; none at attention.
    delta: Option<B::Tensor>,
    /// (BT, K, D) attention's X^mid, its own; the FF's: a view of the layer's output.
    after: B::Tensor,
    /// Attention's view of the layer's output, where x̂ = P X goes.
    predicted: Option<B::Tensor>,
    c: Constants<B>,
}

pub struct SubBlockEndActs<B: Backend> {
    encoded: B::Tensor, // (BT, D) e
    state0: B::Tensor,  // (BT, K, D) X⁰
    h: B::Tensor,       // (BT, D) Σ_k x_k
    lnf: B::Tensor,     // (BT, D)
    lnf_stats: B::Tensor,
    c: Constants<B>,
    _shared: (B::Tensor, Vec<B::Tensor>),
}

/// Gradient scratch shared by every site.
pub struct SubBlockScratch<B: Backend> {
    /// (BT, K, D) each: the state's gradient after a site and before it, taking turns.
    dstate: [B::Tensor; 2],
    /// (BT, K, D) the gradient of x̂, from the FF's write to its attention's.
    dpredicted: B::Tensor,
    dy: B::Tensor,  // (BT, D) a branch output's gradient (the FF's is dδ)
    dln: B::Tensor, // (BT, D)
    du: B::Tensor,  // (BT, D)
    /// (BT, K·K) a token's share of dP or dg, summed over the tokens after.
    dcoefs: B::Tensor,
    dh: B::Tensor, // (BT, D)
    de: B::Tensor, // (BT, D)
}

impl SubBlocks {
    fn bt(&self) -> usize {
        self.embedding.tokens
    }

    fn kd(&self) -> (usize, usize) {
        (self.cfg.sub_blocks, self.cfg.d_model)
    }

    /// A token's (m×k)·(k×n) for every token, with the first operand one constant matrix.
    fn each_token(&self, m: usize, n: usize, k: usize) -> MatmulDims {
        MatmulDims::new(m, n, k).batched(self.bt(), true, false)
    }

    /// A token's row x_j out of its K×D state, or a D-row into each of its K (by a column).
    fn pick(&self) -> MatmulDims {
        let (k, d) = self.kd();
        self.each_token(1, d, k)
    }
    fn spread_row(&self) -> MatmulDims {
        let (k, d) = self.kd();
        self.each_token(k, d, 1)
    }
    /// A K×K matrix times a token's state.
    fn mix(&self) -> MatmulDims {
        let (k, d) = self.kd();
        self.each_token(k, d, k)
    }

    fn norm_dims(&self) -> NormDims {
        NormDims {
            rows: self.bt(),
            c: self.cfg.d_model,
            kind: self.cfg.norm.into(),
            eps: self.cfg.norm_eps,
        }
    }

    fn j(&self, site: Site) -> usize {
        self.cfg.active(site.block)
    }

    /// Whether the layer computes on the prediction x̂_j rather than the old x_j.
    fn on_predicted(&self) -> bool {
        match self.cfg.compute_on {
            AltupInput::Old => false,
            AltupInput::Predicted => true,
        }
    }

    /// x̂ = P X's backward from dx̂ (the scratch's): dX (+)= Pᵀ dx̂ into `h`, dP = Σ_t dx̂ Xᵀ.
    #[allow(clippy::too_many_arguments)]
    fn predict_backward<B: Backend>(
        &self,
        be: &B,
        s: &SubBlockScratch<B>,
        a: &SubBlockSiteActs<B>,
        h: &B::Tensor,
        x: &B::Tensor,
        (p, dp): (&SubBlockSite<B::Tensor>, &SubBlockSite<B::Tensor>),
        accumulate: bool,
    ) {
        let (k, d, bt) = (self.cfg.sub_blocks, self.cfg.d_model, self.bt());
        let onto = match accumulate {
            true => self.mix().trans_a().accumulate(),
            false => self.mix().trans_a(),
        };
        be.matmul(h, &p.coefs, &s.dpredicted, onto);
        let per_token = MatmulDims::new(k, k, d).trans_b().batched(bt, false, false);
        be.matmul(&s.dcoefs, &s.dpredicted, x, per_token);
        self.sum_tokens(be, &dp.coefs, &a.c, &s.dcoefs, k * k);
    }

    /// Σ over the tokens of the per-token rows of `dcoefs` into a coefficient's gradient.
    fn sum_tokens<B: Backend>(&self, be: &B, out: &B::Tensor, c: &Constants<B>, dcoefs: &B::Tensor, len: usize) {
        let bt = self.bt();
        be.matmul(
            out,
            &c.ones_bt,
            &be.view(dcoefs, 0, bt * len),
            MatmulDims::new(1, len, bt),
        );
    }
}

impl Residual for SubBlocks {
    type Site<T> = SubBlockSite<T>;
    type Ends<T> = SubBlockEnds<T>;
    type SiteActs<B: Backend> = SubBlockSiteActs<B>;
    type Shared<B: Backend> = SubBlockShared<B>;
    type EndActs<B: Backend> = SubBlockEndActs<B>;
    type Scratch<B: Backend> = SubBlockScratch<B>;
    const KEYED: bool = false;

    /// `blocks.{i}.ln1`, attention's, `blocks.{i}.altup.predict` (P from I); `blocks.{i}.ln2`,
    /// the FF's, `blocks.{i}.altup.correct` (g from 1). With the identity init and the copies of
    /// e the model is the transformer (SPEC §7.2.4); no decay on P and g.
    fn declare_site<P>(
        &self,
        lb: &mut LayoutBuilder,
        site: Site,
        branch: impl FnOnce(&mut LayoutBuilder) -> P,
    ) -> (SubBlockSite<ParamId>, P) {
        let (i, k, d) = (site.block, self.cfg.sub_blocks, self.cfg.d_model);
        let (n, name, shape, init) = match site.layer {
            Layer::Attn => {
                let identity = (0..k * k).map(|x| f32::from(x % (k + 1) == 0)).collect();
                (1, "predict", vec![k, k], Init::Values(identity))
            }
            Layer::Ff => (2, "correct", vec![k], Init::ONE),
        };
        let gain = lb.add(format!("blocks.{i}.ln{n}"), &[d], false, Init::ONE);
        let branch = branch(lb);
        let coefs = lb.add(format!("blocks.{i}.altup.{name}"), &shape, false, init);
        (SubBlockSite { gain, coefs }, branch)
    }

    fn declare_ends<P>(
        &self,
        lb: &mut LayoutBuilder,
        blocks: impl FnOnce(&mut LayoutBuilder) -> P,
    ) -> (SubBlockEnds<ParamId>, P) {
        let embedding = self.embedding.declare(lb);
        let blocks = blocks(lb);
        let lnf = lb.add("lnf", &[self.cfg.d_model], false, Init::ONE);
        let w_u = lb.add(
            "w_u",
            &[self.cfg.vocab, self.cfg.d_model],
            false,
            Init::Normal { std: 0.0 },
        );
        (SubBlockEnds { embedding, lnf, w_u }, blocks)
    }

    fn map_site<T>(p: &SubBlockSite<ParamId>, f: &impl Fn(ParamId) -> T) -> SubBlockSite<T> {
        SubBlockSite {
            gain: f(p.gain),
            coefs: f(p.coefs),
        }
    }

    fn map_ends<T>(p: &SubBlockEnds<ParamId>, f: &impl Fn(ParamId) -> T) -> SubBlockEnds<T> {
        SubBlockEnds {
            embedding: p.embedding.map(f),
            lnf: f(p.lnf),
            w_u: f(p.w_u),
        }
    }

    fn shared<B: Backend>(&self, be: &B) -> engine::Result<SubBlockShared<B>> {
        let (k, d, bt) = (self.cfg.sub_blocks, self.cfg.d_model, self.bt());
        let state = "the sub-blocks (batch × seq_len × sub_blocks·d_model)";
        Ok(SubBlockShared {
            constants: Constants::new(be, k, bt)?,
            branch_out: be.zeros("the projection (batch × seq_len × d_model)", bt * d)?,
            layer_out: (0..self.cfg.n_layers)
                .map(|_| be.zeros(state, bt * k * d))
                .collect::<Result<_, _>>()?,
        })
    }

    fn site_acts<B: Backend>(
        &self,
        be: &B,
        site: Site,
        shared: &SubBlockShared<B>,
    ) -> engine::Result<SubBlockSiteActs<B>> {
        let (k, d, bt) = (self.cfg.sub_blocks, self.cfg.d_model, self.bt());
        let z = |what: &str, len: usize| be.zeros(what, len);
        let view = |t: &B::Tensor| be.view(t, 0, be.len(t));
        let out = &shared.layer_out[site.block];
        let (after, predicted, delta) = match site.layer {
            Layer::Attn => (
                z("the sub-blocks (batch × seq_len × sub_blocks·d_model)", bt * k * d)?,
                Some(view(out)),
                None,
            ),
            Layer::Ff => (view(out), None, Some(z("δ (batch × seq_len × d_model)", bt * d)?)),
        };
        Ok(SubBlockSiteActs {
            u: z("the active sub-block (batch × seq_len × d_model)", bt * d)?,
            ln: z("the branch's norm (batch × seq_len × d_model)", bt * d)?,
            stats: z("the norm statistics (batch × seq_len)", bt * 2)?,
            y: view(&shared.branch_out),
            delta,
            after,
            predicted,
            c: shared.constants.views(be),
        })
    }

    fn end_acts<B: Backend>(&self, be: &B, shared: SubBlockShared<B>) -> engine::Result<SubBlockEndActs<B>> {
        let (k, d, bt) = (self.cfg.sub_blocks, self.cfg.d_model, self.bt());
        let z = |what: &str, len: usize| be.zeros(what, len);
        Ok(SubBlockEndActs {
            encoded: z("the embeddings", bt * d)?,
            state0: z("the sub-blocks", bt * k * d)?,
            h: z("the sum of the sub-blocks", bt * d)?,
            lnf: z("the final norm", bt * d)?,
            lnf_stats: z("the final norm statistics", bt * 2)?,
            c: shared.constants.views(be),
            _shared: (shared.branch_out, shared.layer_out),
        })
    }

    fn scratch<B: Backend>(&self, be: &B) -> engine::Result<SubBlockScratch<B>> {
        let (k, d, bt) = (self.cfg.sub_blocks, self.cfg.d_model, self.bt());
        let z = |what: &str, len: usize| be.zeros(what, len);
        Ok(SubBlockScratch {
            dstate: [
                z("the sub-blocks' gradient", bt * k * d)?,
                z("the sub-blocks' gradient", bt * k * d)?,
            ],
            dpredicted: z("the prediction's gradient", bt * k * d)?,
            dy: z("dy", bt * d)?,
            dln: z("dln", bt * d)?,
            du: z("du", bt * d)?,
            dcoefs: z("the coefficients' gradient a token", bt * k * k)?,
            dh: z("dh", bt * d)?,
            de: z("de", bt * d)?,
        })
    }

    fn head_width(&self) -> usize {
        self.cfg.d_model
    }

    /// X⁰ = (e, …, e)
    fn spread<B: Backend>(&self, be: &B, e: &SubBlockEndActs<B>) {
        be.matmul(&e.state0, &e.c.ones, &e.encoded, self.spread_row());
    }

    rows_of_d!(first: state0);

    /// Norm(x_j); computing on the prediction, attention's read makes x̂ = P X first and reads
    /// Norm(x̂_j).
    fn read<B: Backend>(
        &self,
        be: &B,
        a: &SubBlockSiteActs<B>,
        x: &B::Tensor,
        input: &B::Tensor,
        p: &SubBlockSite<B::Tensor>,
        site: Site,
    ) {
        let x = match (&a.predicted, self.on_predicted()) {
            (Some(predicted), true) => {
                be.matmul(predicted, &p.coefs, x, self.mix());
                predicted
            }
            (Some(_), false) | (None, _) => x,
        };
        be.matmul(&a.u, &a.c.select[self.j(site)], x, self.pick());
        be.norm_forward(input, &a.stats, &a.u, &p.gain, self.norm_dims());
    }

    /// Attention: X^mid = X + e_j ⊗ y, and the layer's output starts as x̂ = P X (on the
    /// prediction: X^mid = x̂ + e_j ⊗ y, x̂ made by the read). The FF: δ = X^mid_j + y − x̂_j, then
    /// X' = x̂ + g ⊗ δ.
    fn write<B: Backend>(
        &self,
        be: &B,
        a: &SubBlockSiteActs<B>,
        x: &B::Tensor,
        y: &B::Tensor,
        p: &SubBlockSite<B::Tensor>,
        site: Site,
    ) {
        let j = self.j(site);
        match (&a.predicted, &a.delta) {
            (Some(predicted), _) => {
                let base = if self.on_predicted() { predicted } else { x };
                be.matmul(&a.after, &a.c.identity, base, self.mix());
                be.matmul(&a.after, &a.c.select[j], y, self.spread_row().accumulate());
                if !self.on_predicted() {
                    be.matmul(predicted, &p.coefs, x, self.mix());
                }
            }
            (None, Some(delta)) => {
                be.matmul(delta, &a.c.select[j], x, self.pick());
                be.add_assign(delta, y);
                be.matmul(delta, &a.c.unselect[j], &a.after, self.pick().accumulate());
                be.matmul(&a.after, &p.coefs, delta, self.spread_row().accumulate());
            }
            (None, None) => unreachable!("an FF site has its δ"),
        }
    }

    /// logits = W_U · Norm(Σ_k x_k)
    fn read_out<B: Backend>(
        &self,
        be: &B,
        e: &SubBlockEndActs<B>,
        x: &B::Tensor,
        p: &SubBlockEnds<B::Tensor>,
        head: &Unembedding<B>,
    ) {
        be.matmul(&e.h, &e.c.ones, x, self.pick());
        be.norm_forward(&e.lnf, &e.lnf_stats, &e.h, &p.lnf, self.norm_dims());
        head.logits(be, &e.lnf, &p.w_u);
    }

    /// The gradients of the state before and after a site take turns in two buffers: the last
    /// residual's (depth 2L) in the first.
    fn dresidual<'a, B: Backend>(&self, s: &'a SubBlockScratch<B>, depth: usize) -> &'a B::Tensor {
        &s.dstate[(2 * self.cfg.n_layers).abs_diff(depth) % 2]
    }

    fn read_out_backward<B: Backend>(
        &self,
        be: &B,
        s: &SubBlockScratch<B>,
        e: &SubBlockEndActs<B>,
        _x: &B::Tensor,
        (p, dp): (&SubBlockEnds<B::Tensor>, &SubBlockEnds<B::Tensor>),
        head: &Unembedding<B>,
        batch: &BatchTensors<B>,
        seed: Option<&B::Tensor>,
    ) {
        head.backward(be, &s.dln, &dp.w_u, &e.lnf, &p.w_u, batch, seed);
        be.fill(&s.dh, 0.0);
        be.norm_backward(&s.dh, &dp.lnf, &s.dln, &e.h, &p.lnf, &e.lnf_stats, self.norm_dims());
        let last = self.dresidual(s, 2 * self.cfg.n_layers);
        be.matmul(last, &e.c.ones, &s.dh, self.spread_row());
    }

    /// Attention: dy = dX^mid_j, dX = dX^mid + Pᵀ dx̂, dP = Σ_t dx̂ Xᵀ (on the prediction,
    /// dx̂ += dX^mid, and the read's backward takes dX and dP once it has added its own).
    /// The FF: dg = Σ_t ⟨dX', δ⟩, dδ = gᵀ dX' (the branch's gradient), dx̂ = dX' − e_j ⊗ dδ kept
    /// for attention, and dX^mid = e_j ⊗ dδ.
    fn write_backward<'a, B: Backend>(
        &self,
        be: &B,
        s: &'a SubBlockScratch<B>,
        a: &SubBlockSiteActs<B>,
        x: &B::Tensor,
        _y: &B::Tensor,
        (p, dp): (&SubBlockSite<B::Tensor>, &SubBlockSite<B::Tensor>),
        site: Site,
    ) -> &'a B::Tensor {
        let (k, d, bt) = (self.cfg.sub_blocks, self.cfg.d_model, self.bt());
        let (g, h, j) = (
            self.dresidual(s, site.depth_out()),
            self.dresidual(s, site.depth_in()),
            self.j(site),
        );
        match &a.delta {
            None if self.on_predicted() => {
                be.matmul(&s.dy, &a.c.select[j], g, self.pick());
                be.matmul(&s.dpredicted, &a.c.identity, g, self.mix().accumulate());
            }
            None => {
                be.matmul(&s.dy, &a.c.select[j], g, self.pick());
                be.matmul(h, &a.c.identity, g, self.mix());
                self.predict_backward(be, s, a, h, x, (p, dp), true);
            }
            Some(delta) => {
                let dcoefs = be.view(&s.dcoefs, 0, bt * k);
                be.matmul(&dcoefs, g, delta, MatmulDims::new(k, 1, d).batched(bt, false, false));
                self.sum_tokens(be, &dp.coefs, &a.c, &s.dcoefs, k);
                be.matmul(&s.dy, &p.coefs, g, self.pick());
                be.matmul(&s.dpredicted, &a.c.identity, g, self.mix());
                be.matmul(&s.dpredicted, &a.c.unselect[j], &s.dy, self.spread_row().accumulate());
                be.matmul(h, &a.c.select[j], &s.dy, self.spread_row());
            }
        }
        &s.dy
    }

    fn input_grad<'a, B: Backend>(
        &self,
        s: &'a SubBlockScratch<B>,
        _dqkv: &'a B::Tensor,
        _site: Site,
    ) -> &'a B::Tensor {
        &s.dln
    }

    /// Through the norm into dx_j (on the prediction, attention's into dx̂_j, then through P).
    fn read_backward<B: Backend>(
        &self,
        be: &B,
        s: &SubBlockScratch<B>,
        a: &SubBlockSiteActs<B>,
        x: &B::Tensor,
        dinput: &B::Tensor,
        (p, dp): (&SubBlockSite<B::Tensor>, &SubBlockSite<B::Tensor>),
        site: Site,
    ) {
        be.fill(&s.du, 0.0);
        be.norm_backward(&s.du, &dp.gain, dinput, &a.u, &p.gain, &a.stats, self.norm_dims());
        let h = self.dresidual(s, site.depth_in());
        let select = &a.c.select[self.j(site)];
        match (&a.predicted, self.on_predicted()) {
            (Some(_), true) => {
                be.matmul(&s.dpredicted, select, &s.du, self.spread_row().accumulate());
                self.predict_backward(be, s, a, h, x, (p, dp), false);
            }
            (Some(_), false) | (None, _) => be.matmul(h, select, &s.du, self.spread_row().accumulate()),
        }
    }

    /// de = Σ_k dX⁰_k
    fn gather<'a, B: Backend>(&self, be: &B, s: &'a SubBlockScratch<B>, e: &SubBlockEndActs<B>) -> &'a B::Tensor {
        be.matmul(&s.de, &e.c.ones, self.dresidual(s, 0), self.pick());
        &s.de
    }

    fn embed_backward<B: Backend>(
        &self,
        be: &B,
        s: &SubBlockScratch<B>,
        _e: &SubBlockEndActs<B>,
        (_p, dp): (&SubBlockEnds<B::Tensor>, &SubBlockEnds<B::Tensor>),
        batch: &BatchTensors<B>,
    ) {
        self.embedding.backward(be, &dp.embedding, &s.de, batch);
    }

    fn sub_blocks<'a, B: Backend>(&self, layers: Vec<[&'a SubBlockSite<B::Tensor>; 2]>) -> Vec<SubBlockLayer<'a, B>> {
        (layers.into_iter().enumerate())
            .map(|(l, [attn, ff])| SubBlockLayer {
                name: format!("block{l}"),
                active: self.cfg.active(l),
                predict: &attn.coefs,
                correct: &ff.coefs,
            })
            .collect()
    }

    fn shape(&self) -> Shape {
        Shape::Matrix {
            rows: self.cfg.sub_blocks,
            cols: self.cfg.d_model,
        }
    }

    fn groups(&self) -> (Option<Group>, usize) {
        (Some(Group::SubBlock), self.cfg.sub_blocks)
    }

    fn width(&self) -> usize {
        self.cfg.sub_blocks * self.cfg.d_model
    }

    fn branch_width(&self) -> usize {
        self.cfg.d_model
    }

    fn embedding_width(&self) -> usize {
        self.cfg.d_model
    }

    fn linear_read_out(&self) -> Option<ReadOut> {
        let norm: Norm = self.cfg.norm;
        Some(ReadOut::Norm {
            width: self.cfg.d_model,
            streams: self.cfg.sub_blocks,
            norm: norm.into(),
            eps: self.cfg.norm_eps,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::TransformerConfig;
    use engine::cpu::CpuBackend;

    /// SPEC §7.8 T-A3: K = 2, D = 2, x_0 = (1, 0), x_1 = (0, 2), P = [[0.5, 0.5], [0.25, 1]],
    /// g = (1, 0.5), j = 0, and the toy layer T(x) = x + (1, 1) (attention's output (1, 1), the
    /// FF's 0). Forward: X' = ((2, 1), (1, 2)); backward from dX' = ((1, 0), (0, 1)): dg = (1.5, 0),
    /// dP = [[0, −1], [0, 2]], dx_0 = (1, 0.5), dx_1 = (0, 0.75).
    #[test]
    fn the_spec_worked_example_forward_and_backward() {
        let be = CpuBackend::<f64>::new();
        let cfg = AltupConfig {
            d_model: 2,
            n_layers: 1,
            ..AltupConfig::widening(&TransformerConfig::tiny(5, 1), 2)
        };
        let r = SubBlocks {
            embedding: VectorEmbedding::new(1, 1, (5, 1, 2), 0.02),
            cfg,
        };
        let t = |values: &[f64]| {
            let x = be.zeros("", values.len()).unwrap();
            be.write(&x, &values.iter().map(|&v| v as f32).collect::<Vec<_>>());
            x
        };
        let read = |x| pollster::block_on(be.read(x)).unwrap();
        let shared = r.shared(&be).unwrap();
        let (attn, ff) = (Site::attn(0), Site::ff(0));
        let (a_attn, a_ff) = (
            r.site_acts(&be, attn, &shared).unwrap(),
            r.site_acts(&be, ff, &shared).unwrap(),
        );
        let s = r.scratch(&be).unwrap();
        let p = |coefs| SubBlockSite {
            gain: t(&[1.0, 1.0]),
            coefs,
        };
        let (p_attn, p_ff) = (p(t(&[0.5, 0.5, 0.25, 1.0])), p(t(&[1.0, 0.5])));
        let (dp_attn, dp_ff) = (p(t(&[0.0; 4])), p(t(&[0.0; 2])));
        let x = t(&[1.0, 0.0, 0.0, 2.0]);
        r.write(&be, &a_attn, &x, &t(&[1.0, 1.0]), &p_attn, attn);
        r.write(&be, &a_ff, &a_attn.after, &t(&[0.0, 0.0]), &p_ff, ff);
        assert_eq!(read(&a_ff.after), [2.0, 1.0, 1.0, 2.0]);
        assert_eq!(read(a_ff.delta.as_ref().unwrap()), [1.5, 0.0]);
        be.write(r.dresidual(&s, 2), &[1.0, 0.0, 0.0, 1.0]);
        let y = t(&[0.0, 0.0]);
        let dy = r.write_backward(&be, &s, &a_ff, &a_attn.after, &y, (&p_ff, &dp_ff), ff);
        assert_eq!(read(dy), [1.0, 0.5]);
        r.write_backward(&be, &s, &a_attn, &x, &y, (&p_attn, &dp_attn), attn);
        assert_eq!(read(&dp_ff.coefs), [1.5, 0.0]);
        assert_eq!(read(&dp_attn.coefs), [0.0, -1.0, 0.0, 2.0]);
        assert_eq!(read(r.dresidual(&s, 0)), [1.0, 0.5, 0.0, 0.75]);

        // Computing on the prediction (the same P and g): y = (1.5, 2), δ = (1, 1),
        // X' = ((1.5, 2), (0.75, 2.5)).
        let r = SubBlocks {
            cfg: AltupConfig {
                compute_on: AltupInput::Predicted,
                ..r.cfg
            },
            ..r
        };
        let normed = be.zeros("", 2).unwrap();
        r.read(&be, &a_attn, &x, &normed, &p_attn, attn);
        r.write(&be, &a_attn, &x, &t(&[1.0, 1.0]), &p_attn, attn);
        r.write(&be, &a_ff, &a_attn.after, &t(&[0.0, 0.0]), &p_ff, ff);
        assert_eq!(read(a_ff.delta.as_ref().unwrap()), [1.0, 1.0]);
        assert_eq!(read(&a_ff.after), [1.5, 2.0, 0.75, 2.5]);
    }
}
