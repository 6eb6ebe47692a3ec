//! A model whose residual is a matrix a token, the RMT's (SPEC §2; RMT paper §2.2, eqs 14-27):
//! each token's residual is a D_k×D_v matrix X; layers read it by retrieval (r ·₁ X) and write
//! it by storage (w ⊗ x).
//!
//!   X⁰ = Σ_h w_E^(h) ⊗ W_E^(h)[token] (+ Σ_h w_PE^(h) ⊗ W_PE^(h)[position], or ALiBi)
//!   Q, K, V = r_Q ·₁ Norm(X), r_K ·₁ Norm(X), r_V ·₁ Norm(X)         3R retrievals at once
//!   X ← X + Σ_h w_O^(h) ⊗ SHA^(h)(Q, K, V)
//!   X ← X + Σ_h w_FF^(h) ⊗ f_h,  f = core(concat_h(r_FF^(h) ·₁ Norm(X)))
//!   logits = Σ_h W_U^(h) (r_U^(h) ·₁ Norm(X))
//!
//! The feed-forward core is a unit (`ff::FfCore`): the RMT's (`rmt.rs`) is W2 · GELU(W1 · x),
//! the hybrid's (`hybrid.rs`) MemoryFormer's memory block. The embedding, attention and the
//! unembedding are units too (`embedding.rs`, `attention.rs`, `loss.rs`); the retrievals and
//! storages that wire them to the residual are this file, once.
//!
//! The backward is the forward read in reverse. A retrieval's input gradient is a storage of
//! its output gradient with the same keys, and a storage's data gradient is a retrieval.
//!
//! One file over 600 lines, because the forward, the backward and the probes that ride them
//! share the buffers and helpers below; split, each half would re-declare them.

use crate::attention::{Attention, AttentionActs, AttentionNames, AttentionScratch};
use crate::batch::BatchTensors;
use crate::config::{Position, Trunk};
use crate::embedding::{MatrixEmbedding, MatrixEmbeddingActs, MatrixEmbeddingParams};
use crate::ff::FfCore;
use crate::interventions::{edits, sites, EditPoint, Edits, Group, Point, ReadOut, Tap};
use crate::loss::{LossHead, Unembedding};
use crate::memory::values;
use crate::observe::{self, Inside, Observe, Shape};
use crate::params::{Init, LayoutBuilder, ParamId, ParamLayout, ParamStore};
use crate::probes::{self, Layer, Op, Probes, Quantity};
use crate::train::LanguageModel;
use crate::{ModelConfig, Result};
use engine::{Backend, NormDims, ResidualDims};

/// A residual-matrix model's config: the trunk (everything of SPEC §2 but the feed-forward
/// core) and the core that fills it.
pub trait ResidualMatrixConfig: Clone {
    type Core: FfCore;
    fn trunk(&self) -> Trunk;
    /// The core for `tokens` rows of x_FF.
    fn core(&self, tokens: usize) -> Self::Core;
    /// The config in the one enum of architectures.
    fn model(&self) -> ModelConfig;
}

/// A core's parameters for the config `C`.
type CoreParams<C, T> = <<C as ResidualMatrixConfig>::Core as FfCore>::Params<T>;

#[derive(Clone, Debug)]
struct Block<T, P> {
    ln1: T,   // (D_k·D_v)
    r_qkv: T, // (3R, D_k) retrieval keys r_Q, r_K, r_V
    w_o: T,   // (R, D_k) storage keys
    ln2: T,   // (D_k·D_v)
    r_ff: T,  // (R, D_k)
    core: P,  // the feed-forward core's
    w_ff: T,  // (R, D_k)
}

#[derive(Clone, Debug)]
struct Weights<T, P> {
    embedding: MatrixEmbeddingParams<T>,
    blocks: Vec<Block<T, P>>,
    lnf: T, // (D_k·D_v)
    r_u: T, // (R, D_k)
    w_u: T, // (V, R·D_v)
}

impl<P> Weights<ParamId, P> {
    /// The same parameters seen through `f` (a parameter's or its gradient's view); the core
    /// `K` maps its own.
    fn map<K: FfCore<Params<ParamId> = P>, T>(&self, f: impl Fn(ParamId) -> T) -> Weights<T, K::Params<T>> {
        Weights {
            embedding: self.embedding.map(&f),
            blocks: self
                .blocks
                .iter()
                .map(|b| Block {
                    ln1: f(b.ln1),
                    r_qkv: f(b.r_qkv),
                    w_o: f(b.w_o),
                    ln2: f(b.ln2),
                    r_ff: f(b.r_ff),
                    core: K::map(&b.core, &f),
                    w_ff: f(b.w_ff),
                })
                .collect(),
            lnf: f(self.lnf),
            r_u: f(self.r_u),
            w_u: f(self.w_u),
        }
    }
}

type Ids<C> = Weights<ParamId, CoreParams<C, ParamId>>;
/// The parameters' or the gradients' views of a model of config `C`.
type Views<B, C> = Weights<<B as Backend>::Tensor, CoreParams<C, <B as Backend>::Tensor>>;

/// The embedding of the trunk `c` over batches of `b` sequences of `t` tokens.
fn embedding(c: &Trunk, b: usize, t: usize) -> MatrixEmbedding {
    MatrixEmbedding {
        rm: ResidualDims {
            tokens: b * t,
            dk: c.d_k,
            dv: c.d_v,
            keys: c.rank,
        },
        t,
        vocab: c.vocab,
        seq_len: c.seq_len,
        position: c.position,
        init_std: c.init_std,
        weight_init: c.weight_init,
    }
}

/// The parameters of the model `cfg` describes: their layout and where each one sits.
fn declare<C: ResidualMatrixConfig>(cfg: &C) -> (ParamLayout, Ids<C>) {
    let c = cfg.trunk();
    let (dk, dv, r, v, l) = (c.d_k, c.d_v, c.rank, c.vocab, c.n_layers);
    let rv = r * dv;
    // The layout does not depend on the batch.
    let core = cfg.core(0);
    // Every weight ~ N(0, std²/fan_in), fan_in the contracted size; output storage keys get an
    // extra 1/sqrt(2L); tables ~ N(0, std²); the unembedding starts at zero (SPEC §2).
    // Or Xavier's N(0, 2/(fan_in + fan_out)) for every weight.
    let std = c.init_std;
    let out_scale = if c.scaled_output_init {
        1.0 / (2.0 * l as f32).sqrt()
    } else {
        1.0
    };
    let weight = |fan_in: usize, fan_out: usize, scale: f32| Init::Normal {
        std: c.weight_init.std(std, fan_in, fan_out, scale),
    };
    let mut lb = LayoutBuilder::default();
    let embedding = embedding(&c, 0, 0).declare(&mut lb);
    let blocks = (0..l)
        .map(|i| Block {
            ln1: lb.add(format!("blocks.{i}.ln1"), &[dk, dv], false, Init::ONE),
            r_qkv: lb.add(format!("blocks.{i}.r_qkv"), &[3 * r, dk], true, weight(dk, 3 * r, 1.0)),
            w_o: lb.add(format!("blocks.{i}.w_o"), &[r, dk], true, weight(r, dk, out_scale)),
            ln2: lb.add(format!("blocks.{i}.ln2"), &[dk, dv], false, Init::ONE),
            r_ff: lb.add(format!("blocks.{i}.r_ff"), &[r, dk], true, weight(dk, r, 1.0)),
            core: core.declare(&mut lb, &format!("blocks.{i}")),
            w_ff: lb.add(format!("blocks.{i}.w_ff"), &[r, dk], true, weight(r, dk, out_scale)),
        })
        .collect();
    let lnf = lb.add("lnf", &[dk, dv], false, Init::ONE);
    let r_u = lb.add("r_u", &[r, dk], true, weight(dk, r, 1.0));
    let w_u_init = match c.zero_unembedding {
        true => Init::Normal { std: 0.0 },
        false => weight(rv, v, 1.0),
    };
    let w_u = lb.add("w_u", &[v, r, dv], false, w_u_init);
    let ids = Weights {
        embedding,
        blocks,
        lnf,
        r_u,
        w_u,
    };
    (lb.build(), ids)
}

/// The parameter layout of the model `cfg` describes, without building it.
pub fn layout<C: ResidualMatrixConfig>(cfg: &C) -> ParamLayout {
    declare(cfg).0
}

/// Saved activations of one block.
struct BlockActs<B: Backend, K: FfCore> {
    ln1_stats: B::Tensor, // (BT, 2): Norm(X) itself is never written; retrievals normalise as they read
    attention: AttentionActs<B>, // R heads of D_v: qkv (BT, 3R·D_v), its output (BT, R·D_v)
    res_att: B::Tensor,   // (BT, D_k·D_v)
    ln2_stats: B::Tensor,
    xff: B::Tensor,    // (BT, R·D_v) the FF adapters' retrievals
    core: K::Acts<B>,  // the core's
    f: B::Tensor,      // (BT, R·D_v) the core's output, stored with w_FF
    res_ff: B::Tensor, // (BT, D_k·D_v)
}

/// Gradient scratch shared by all blocks.
struct Scratch<B: Backend, K: FfCore> {
    dresidual: B::Tensor, // (BT, D_k·D_v)
    dln: B::Tensor,       // (BT, D_k·D_v)
    dvec: B::Tensor,      // (BT, R·D_v): gradients of retrieved or stored vectors
    attention: AttentionScratch<B>,
    core: K::Scratch<B>,    // the core's
    partials: B::Tensor,    // key-gradient partial sums
    stored: B::Tensor,      // (BT, D_k·D_v) a storage alone, or Norm(X), for the variance probes
    probe_stats: B::Tensor, // (BT, 2)
}

/// The probes and their scratch, in a pass observing the variance.
type Probing<'a, B, K> = Option<(&'a Probes<B>, &'a Scratch<B, K>)>;

/// The RMT of SPEC §2 around the feed-forward core `C::Core`: `Rmt` and `Hybrid` are this
/// model with a dense core and with a memory block.
pub struct ResidualMatrix<B: Backend, C: ResidualMatrixConfig> {
    pub cfg: C,
    /// The dims of `cfg` that every residual-matrix model has.
    trunk: Trunk,
    embedding: MatrixEmbedding,
    attention: Attention,
    core: C::Core,
    b: usize,
    t: usize,
    store: ParamStore<B>,
    w: Views<B, C>,
    /// Gradient views; None for inference.
    dw: Option<Views<B, C>>,
    embedded: MatrixEmbeddingActs<B>,
    encoded: B::Tensor, // (BT, D_k·D_v)
    blocks: Vec<BlockActs<B, C::Core>>,
    /// The core's forward scratch, shared by every block.
    shared: <C::Core as FfCore>::Shared<B>,
    lnf_stats: B::Tensor,
    yu: B::Tensor, // (BT, R·D_v) the unembedding's retrievals
    unembedding: Unembedding<B>,
    /// Backward and probe scratch, and the probes; None for inference.
    s: Option<Scratch<B, C::Core>>,
    probes: Option<Probes<B>>,
    /// An intervention's edits; None in training.
    edits: Option<Edits<B>>,
}

/// A residual, its norm's statistics and gain: the input of a retrieval, normalised as read.
struct Normed<'a, B: Backend> {
    x: &'a B::Tensor,
    stats: &'a B::Tensor,
    gain: &'a B::Tensor,
}

impl<B: Backend, C: ResidualMatrixConfig> ResidualMatrix<B, C> {
    /// Builds the model for batches of `b` sequences of `t` ≤ N tokens, initialised from `seed`.
    pub fn new(be: &B, cfg: C, b: usize, t: usize, seed: u64) -> Result<Self> {
        Self::build(be, cfg, b, t, Some(seed))
    }

    /// Forward only: parameters (all 0 until written) and activations, no gradients, backward
    /// scratch or variance probes. `backward` does nothing on it.
    pub fn inference(be: &B, cfg: C, b: usize, t: usize) -> Result<Self> {
        Self::build(be, cfg, b, t, None)
    }

    fn build(be: &B, cfg: C, b: usize, t: usize, seed: Option<u64>) -> Result<Self> {
        let bt = cfg.model().check_batch(b, t)?;
        let trunk = cfg.trunk();
        let (dk, dv, r, v, l) = (trunk.d_k, trunk.d_v, trunk.rank, trunk.vocab, trunk.n_layers);
        let (layout, ids) = declare(&cfg);
        let store = match seed {
            Some(seed) => ParamStore::new(be, layout, seed)?,
            None => ParamStore::inference(be, layout)?,
        };
        let w = ids.map::<C::Core, _>(|id| store.param(be, id));
        let dw = store
            .trainable()
            .then(|| ids.map::<C::Core, _>(|id| store.grad(be, id)));

        let core = cfg.core(bt);
        let attention = Attention {
            b,
            t,
            heads: r,
            head_dim: dv,
            layer_scale: trunk.attn_layer_scale,
            alibi: trunk.position == Position::Alibi,
            names: AttentionNames {
                heads: "rank",
                width: "rank·d_v",
            },
        };
        // Each buffer named with the settings it grows with, for the memory estimate's messages.
        let matrices = |what: &str| be.zeros(&format!("{what} (batch × seq_len × d_k × d_v)"), values(&[bt, dk, dv]));
        let vectors = |what: &str| be.zeros(&format!("{what} (batch × seq_len × rank × d_v)"), values(&[bt, r, dv]));
        let stats = |what: &str| be.zeros(&format!("{what} (batch × seq_len)"), values(&[bt, 2]));
        let blocks = (0..l)
            .map(|_| {
                Ok(BlockActs {
                    ln1_stats: stats("the norm statistics")?,
                    attention: attention.acts(be)?,
                    res_att: matrices("the residual matrices")?,
                    ln2_stats: stats("the norm statistics")?,
                    xff: vectors("the FF adapters")?,
                    core: core.acts(be)?,
                    f: vectors("the FF output")?,
                    res_ff: matrices("the residual matrices")?,
                })
            })
            .collect::<engine::Result<Vec<_>>>()?;
        let widest = ResidualDims {
            tokens: bt,
            dk,
            dv,
            keys: 3 * r,
        };
        let scratch = || -> engine::Result<_> {
            Ok(Scratch {
                dresidual: matrices("the residual gradient")?,
                dln: matrices("the norm gradient")?,
                dvec: vectors("the vector gradient")?,
                attention: attention.scratch(be)?,
                core: core.scratch(be)?,
                partials: be.zeros(
                    "the key-gradient partial sums (batch × seq_len × rank × d_k)",
                    widest.key_grad_scratch(),
                )?,
                stored: matrices("the probe scratch")?,
                probe_stats: stats("the probe statistics")?,
            })
        };
        let s = match store.trainable() {
            true => Some(scratch()?),
            false => None,
        };
        let embedding = embedding(&trunk, b, t);
        let probes = match store.trainable() {
            true => {
                let sites = match core.has_dense_maps() {
                    true => probes::block_and_core_sites(l),
                    false => probes::block_sites(l),
                };
                Some(Probes::new(be, sites)?)
            }
            false => None,
        };
        let unembedding = Unembedding::new(be, bt, v, r * dv, trunk.z_loss, store.trainable())?;
        Ok(Self {
            b,
            t,
            store,
            w,
            dw,
            embedded: embedding.acts(be)?,
            encoded: matrices("the embeddings")?,
            blocks,
            shared: core.shared(be)?,
            lnf_stats: stats("the norm statistics")?,
            yu: vectors("the unembedding retrievals")?,
            unembedding,
            s,
            probes,
            edits: None,
            cfg,
            trunk,
            embedding,
            attention,
            core,
        })
    }

    /// Retrieval or storage of `keys` vectors over every token of the batch.
    fn rm(&self, keys: usize) -> ResidualDims {
        ResidualDims {
            tokens: self.b * self.t,
            dk: self.trunk.d_k,
            dv: self.trunk.d_v,
            keys,
        }
    }

    fn norm(&self) -> NormDims {
        NormDims {
            rows: self.b * self.t,
            c: self.trunk.residual(),
            kind: self.trunk.norm.into(),
            eps: self.trunk.norm_eps,
        }
    }

    fn residual_in(&self, l: usize) -> &B::Tensor {
        if l == 0 {
            &self.encoded
        } else {
            &self.blocks[l - 1].res_ff
        }
    }

    /// Storage with the residual add fused; when probing, also records σ² of the storage
    /// alone (out − base) and of its input vectors.
    #[allow(clippy::too_many_arguments)]
    fn store_probed(
        &self,
        be: &B,
        probing: Probing<'_, B, C::Core>,
        site: usize,
        out: &B::Tensor,
        base: &B::Tensor,
        keys: &B::Tensor,
        data: &B::Tensor,
    ) {
        be.store(out, Some(base), keys, data, self.rm(self.trunk.rank));
        if let Some((probes, s)) = probing {
            be.fill(&s.stored, 0.0);
            be.store(&s.stored, None, keys, data, self.rm(self.trunk.rank));
            probes.record(be, site, Quantity::In, data);
            probes.record(be, site, Quantity::Out, &s.stored);
        }
    }

    /// The probes and their scratch in a pass observing the variance; None otherwise and for
    /// inference.
    fn probing(&self, observe: Observe) -> Probing<'_, B, C::Core> {
        match (&self.probes, &self.s, observe) {
            (Some(p), Some(s), Observe::Variance) => Some((p, s)),
            _ => None,
        }
    }

    /// Backward of `out = base + Σ keys ⊗ data` with dout = dresidual: the data gradient into
    /// `ddata`, the key gradient into `dkeys`; the base's gradient is dresidual itself.
    #[allow(clippy::too_many_arguments)]
    fn store_backward(
        &self,
        be: &B,
        s: &Scratch<B, C::Core>,
        probes: Option<&Probes<B>>,
        site: usize,
        ddata: &B::Tensor,
        dkeys: &B::Tensor,
        keys: &B::Tensor,
        data: &B::Tensor,
    ) {
        let d = self.rm(self.trunk.rank);
        be.store_backward(ddata, dkeys, &s.partials, &s.dresidual, keys, data, d);
        if let Some(probes) = probes {
            probes.record(be, site, Quantity::GradOut, &s.dresidual);
            probes.record(be, site, Quantity::GradIn, ddata);
        }
    }

    /// `y = keys ·₁ Norm(x)`, normalising as it reads; when probing, also records σ² of
    /// Norm(x) and of y.
    #[allow(clippy::too_many_arguments)]
    fn retrieve_from_norm(
        &self,
        be: &B,
        probing: Probing<'_, B, C::Core>,
        site: Option<usize>,
        y: &B::Tensor,
        keys: &B::Tensor,
        n: Normed<'_, B>,
    ) {
        let d = self.rm(be.len(keys) / self.trunk.d_k);
        be.retrieve_normed(y, n.stats, n.x, n.gain, keys, d, self.norm());
        if let (Some(site), Some((probes, s))) = (site, probing) {
            be.norm_forward(&s.stored, &s.probe_stats, n.x, n.gain, self.norm());
            probes.record(be, site, Quantity::In, &s.stored);
            probes.record(be, site, Quantity::Out, y);
        }
    }

    /// Backward of `retrieve_from_norm`, one op: dNorm = Σ keys ⊗ dy through the norm's backward
    /// into dresidual, the gain's gradient and the key gradient against Norm(x).
    #[allow(clippy::too_many_arguments)]
    fn retrieve_from_norm_backward(
        &self,
        be: &B,
        s: &Scratch<B, C::Core>,
        probes: Option<&Probes<B>>,
        site: Option<usize>,
        dkeys: &B::Tensor,
        dgain: &B::Tensor,
        dy: &B::Tensor,
        keys: &B::Tensor,
        n: Normed<'_, B>,
    ) {
        let d = self.rm(be.len(keys) / self.trunk.d_k);
        if let (Some(site), Some(probes)) = (site, probes) {
            // dNorm, which the op itself never writes out, for the probes alone.
            be.fill(&s.dln, 0.0);
            be.store(&s.dln, None, keys, dy, d);
            probes.record(be, site, Quantity::GradOut, dy);
            probes.record(be, site, Quantity::GradIn, &s.dln);
        }
        let (x, stats, gain) = (n.x, n.stats, n.gain);
        let (dx, partials) = (&s.dresidual, &s.partials);
        be.retrieve_normed_backward(
            dx,
            dgain,
            dkeys,
            &s.dln,
            partials,
            dy,
            x,
            stats,
            gain,
            keys,
            d,
            self.norm(),
        );
    }
}

impl<B: Backend, C: ResidualMatrixConfig> LanguageModel<B> for ResidualMatrix<B, C> {
    fn store(&self) -> &ParamStore<B> {
        &self.store
    }

    fn batch_shape(&self) -> (usize, usize) {
        (self.b, self.t)
    }

    fn vocab(&self) -> usize {
        self.trunk.vocab
    }

    fn forward(&self, be: &B, batch: &BatchTensors<B>, observe: Observe) {
        let (w, probing) = (&self.w, self.probing(observe));
        // X⁰ = Σ_h w_E ⊗ W_E[token] (+ Σ_h w_PE ⊗ W_PE[position])
        let (x0, e) = (&self.encoded, &self.embedded);
        self.embedding.forward(be, x0, e, &w.embedding, batch);
        let edit = |point, tensor| edits::apply(be, &self.edits, point, tensor);
        edit(Point::Embedding, x0);
        edit(Point::Residual(0), x0);
        for (l, (a, q)) in self.blocks.iter().zip(&w.blocks).enumerate() {
            let x = self.residual_in(l);
            let site = |layer, op| Some(probes::site_index(l, layer, op));
            // Q, K, V = r_QKV ·₁ Norm(X); X ← X + Σ_h w_O ⊗ SHA_h
            let n1 = Normed {
                x,
                stats: &a.ln1_stats,
                gain: &q.ln1,
            };
            let at = site(Layer::Attn, Op::Retrieval);
            self.retrieve_from_norm(be, probing, at, &a.attention.qkv, &q.r_qkv, n1);
            self.attention.forward(be, &a.attention, &batch.doc_start, l);
            // Heads and the whole write are both the values stored along w_O's keys.
            edit(Point::Heads(l), &a.attention.atty);
            edit(Point::Write(l, Layer::Attn), &a.attention.atty);
            let at = probes::site_index(l, Layer::Attn, Op::Storage);
            self.store_probed(be, probing, at, &a.res_att, x, &q.w_o, &a.attention.atty);
            edit(Point::Residual(2 * l + 1), &a.res_att);
            // x_FF = r_FF ·₁ Norm(X); f = core(x_FF); X ← X + Σ_h w_FF ⊗ f_h
            let n2 = Normed {
                x: &a.res_att,
                stats: &a.ln2_stats,
                gain: &q.ln2,
            };
            self.retrieve_from_norm(be, probing, site(Layer::Ff, Op::Retrieval), &a.xff, &q.r_ff, n2);
            let tap = Tap::new(&self.edits, l);
            self.core.forward(be, &a.f, &a.xff, &a.core, &self.shared, &q.core, tap);
            if let (Some((probes, _)), Some(maps)) = (probing, self.core.dense_maps(&a.xff, &a.f, &a.core)) {
                for (op, (input, output)) in [Op::W1, Op::W2].into_iter().zip(maps) {
                    let at = probes::core_site_index(self.trunk.n_layers, l, op);
                    probes.record(be, at, Quantity::In, input);
                    probes.record(be, at, Quantity::Out, output);
                }
            }
            edit(Point::Write(l, Layer::Ff), &a.f);
            let at = probes::site_index(l, Layer::Ff, Op::Storage);
            self.store_probed(be, probing, at, &a.res_ff, &a.res_att, &q.w_ff, &a.f);
            edit(Point::Residual(2 * l + 2), &a.res_ff);
        }
        // logits = Σ_h W_U^(h) (r_U^(h) ·₁ Norm(X))
        self.read_out(be, self.residual_in(self.trunk.n_layers));
        self.unembedding.loss.forward(be, batch);
    }

    fn backward(&self, be: &B, batch: &BatchTensors<B>, observe: Observe) {
        // An inference model has no gradients to fill.
        let (w, Some(dw), Some(s)) = (&self.w, &self.dw, &self.s) else {
            return;
        };
        let probes = self.probing(observe).map(|(p, _)| p);
        let seed = edits::seed(&self.edits);
        self.unembedding
            .backward(be, &s.dvec, &dw.w_u, &self.yu, &w.w_u, batch, seed);
        // Each point's gradient, where an intervention asks for it.
        let grad = |point, dtensor| edits::grad(be, &self.edits, point, dtensor);
        be.fill(&s.dresidual, 0.0);
        let last = self.residual_in(self.trunk.n_layers);
        let nf = Normed {
            x: last,
            stats: &self.lnf_stats,
            gain: &w.lnf,
        };
        self.retrieve_from_norm_backward(be, s, probes, None, &dw.r_u, &dw.lnf, &s.dvec, &w.r_u, nf);
        for l in (0..self.trunk.n_layers).rev() {
            let (a, q, dq) = (&self.blocks[l], &w.blocks[l], &dw.blocks[l]);
            let site = |layer, op| Some(probes::site_index(l, layer, op));
            // FF: dresidual flows through the add unchanged into the storage.
            grad(Point::Residual(2 * l + 2), &s.dresidual);
            let at = probes::site_index(l, Layer::Ff, Op::Storage);
            self.store_backward(be, s, probes, at, &s.dvec, &dq.w_ff, &q.w_ff, &a.f);
            grad(Point::Write(l, Layer::Ff), &s.dvec);
            // The core's input gradient overwrites its output gradient in dvec.
            let core_site = |op| probes::core_site_index(self.trunk.n_layers, l, op);
            let dense = self.core.has_dense_maps().then_some(probes).flatten();
            if let Some(probes) = dense {
                probes.record(be, core_site(Op::W2), Quantity::GradOut, &s.dvec);
            }
            let tap = Tap::new(&self.edits, l);
            self.core
                .backward(be, &s.core, &s.dvec, &dq.core, &s.dvec, &a.xff, &a.core, &q.core, tap);
            if let (Some(probes), Some([d_w1_out, d_w2_in])) = (dense, self.core.dense_grads(&s.core)) {
                probes.record(be, core_site(Op::W2), Quantity::GradIn, d_w2_in);
                probes.record(be, core_site(Op::W1), Quantity::GradOut, d_w1_out);
                probes.record(be, core_site(Op::W1), Quantity::GradIn, &s.dvec);
            }
            let n2 = Normed {
                x: &a.res_att,
                stats: &a.ln2_stats,
                gain: &q.ln2,
            };
            let at = site(Layer::Ff, Op::Retrieval);
            self.retrieve_from_norm_backward(be, s, probes, at, &dq.r_ff, &dq.ln2, &s.dvec, &q.r_ff, n2);
            // Attention
            grad(Point::Residual(2 * l + 1), &s.dresidual);
            let at = probes::site_index(l, Layer::Attn, Op::Storage);
            self.store_backward(be, s, probes, at, &s.dvec, &dq.w_o, &q.w_o, &a.attention.atty);
            grad(Point::Write(l, Layer::Attn), &s.dvec);
            grad(Point::Heads(l), &s.dvec);
            self.attention
                .backward(be, &s.attention, &s.dvec, &a.attention, &batch.doc_start, l);
            let n1 = Normed {
                x: self.residual_in(l),
                stats: &a.ln1_stats,
                gain: &q.ln1,
            };
            let at = site(Layer::Attn, Op::Retrieval);
            let dqkv = &s.attention.dqkv;
            self.retrieve_from_norm_backward(be, s, probes, at, &dq.r_qkv, &dq.ln1, dqkv, &q.r_qkv, n1);
        }
        grad(Point::Residual(0), &s.dresidual);
        grad(Point::Embedding, &s.dresidual);
        let (dx0, e) = (&s.dresidual, &self.embedded);
        let (de, emb) = (&dw.embedding, &w.embedding);
        self.embedding
            .backward(be, de, dx0, &s.dvec, &s.partials, e, emb, batch);
    }

    fn head(&self) -> &LossHead<B> {
        &self.unembedding.loss
    }

    /// logits = Σ_h W_U^(h) (r_U^(h) ·₁ Norm(x)): the head, read from the residual `x`.
    fn read_out(&self, be: &B, x: &B::Tensor) {
        let w = &self.w;
        let nf = Normed {
            x,
            stats: &self.lnf_stats,
            gain: &w.lnf,
        };
        self.retrieve_from_norm(be, None, None, &self.yu, &w.r_u, nf);
        self.unembedding.logits(be, &self.yu, &w.w_u);
    }

    fn edit_points(&self) -> Vec<EditPoint<'_, B>> {
        let (dk, dv, r) = (self.trunk.d_k, self.trunk.d_v, self.trunk.rank);
        let x0 = &self.encoded;
        let mut points = Vec::from(sites::embedding_points((x0, dk * dv), (x0, dk * dv, dk)));
        for (l, a) in self.blocks.iter().enumerate() {
            let atty = &a.attention.atty;
            points.extend(sites::block_points(
                l,
                (atty, r * dv, r),
                [(atty, r * dv), (&a.f, r * dv)],
                [&a.res_att, &a.res_ff],
                (dk * dv, dk),
                [vec![], self.core.tables()],
            ));
        }
        points
    }

    fn residual_groups(&self) -> Option<Group> {
        Some(Group::Slot)
    }

    fn edits(&mut self) -> &mut Option<Edits<B>> {
        &mut self.edits
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

    fn inside(&self) -> Inside<'_, B> {
        let shape = Shape::Matrix {
            rows: self.trunk.d_k,
            cols: self.trunk.d_v,
        };
        Inside {
            residuals: observe::residual_stream(
                shape,
                &self.encoded,
                self.blocks.iter().map(|a| (&a.res_att, &a.res_ff)),
            ),
            hashed: self
                .blocks
                .iter()
                .enumerate()
                .flat_map(|(i, a)| self.core.hashed_layers(&a.core, &format!("block{i}")))
                .collect(),
            variance: self.probes.as_ref(),
            attention: self.attention.sites(self.blocks.iter().map(|a| &a.attention)),
            mixing: Vec::new(),
        }
    }
}
