//! A model whose residual is one vector a token (SPEC §1, §3): pre-norm blocks of attention
//! then a feed-forward core, the transformer's and MemoryFormer's trunk.
//!
//!   X⁰ = W_E[token] + W_PE[position]
//!   X ← X + out(attention(in(Norm(X))))      in, out: W_QKV and W_O, or ML_QKV and nothing
//!   X ← X + core(Norm(X))                     W2·GELU(W1·x), or the memory block
//!   logits = W_U · Norm(X)
//!
//! The config picks the attention's maps (`attention::AttentionMaps`) and the core
//! (`ff::FfCore`): `transformer.rs` and `memoryformer.rs`. Everything else is this file, once.
//! No biases outside the units. `backward` is `forward` read in reverse, op for op.

use crate::attention::{Attention, AttentionActs, AttentionMaps, AttentionNames, AttentionScratch};
use crate::batch::BatchTensors;
use crate::embedding::{VectorEmbedding, VectorEmbeddingParams};
use crate::ff::FfCore;
use crate::interventions::{edits, sites, EditPoint, Edits, Group, Point, ReadOut, Tap};
use crate::loss::{LossHead, Unembedding};
use crate::memory::values;
use crate::observe::{self, Inside, Observe, Shape};
use crate::params::{Init, LayoutBuilder, ParamId, ParamLayout, ParamStore};
use crate::probes::{self, Layer, Op, Probes, Quantity};
use crate::train::LanguageModel;
use crate::{ModelConfig, Norm, Result};
use engine::{Backend, NormDims};

/// What every vector-residual model has, whatever its maps and core.
#[derive(Clone, Debug)]
pub struct VectorTrunk {
    pub vocab: usize,
    /// N: the learned position table has this many rows.
    pub seq_len: usize,
    /// D, the residual's width.
    pub d_model: usize,
    pub n_layers: usize,
    pub n_heads: usize,
    pub head_dim: usize,
    pub norm: Norm,
    pub norm_eps: f32,
    pub attn_layer_scale: bool,
    /// The settings attention's heads and width are named by.
    pub attention_names: AttentionNames,
    pub z_loss: f32,
    /// W_E and W_PE ~ N(0, embed_std²).
    pub embed_std: f32,
    pub unembedding_init: Init,
}

/// A vector-residual model's config: the trunk, the attention's maps and the core.
pub trait ResidualVectorConfig: Clone {
    type Core: FfCore;
    type Maps: AttentionMaps<Self::Core>;
    /// Whether each block keeps its core's output (MemoryFormer) rather than writing it, like
    /// W_O's, into one buffer every block reuses (the transformer): the same values, in the
    /// buffers the memory estimate counts for each.
    const CORE_OUTPUT_PER_BLOCK: bool;
    fn trunk(&self) -> VectorTrunk;
    /// The maps for `tokens` rows.
    fn maps(&self, tokens: usize) -> Self::Maps;
    /// The core for `tokens` rows.
    fn core(&self, tokens: usize) -> Self::Core;
    /// The config in the one enum of architectures.
    fn model(&self) -> ModelConfig;
}

type MapParams<C, T> =
    <<C as ResidualVectorConfig>::Maps as AttentionMaps<<C as ResidualVectorConfig>::Core>>::Params<T>;
type CoreParams<C, T> = <<C as ResidualVectorConfig>::Core as FfCore>::Params<T>;

#[derive(Clone, Debug)]
struct Block<T, M, K> {
    ln1: T, // (D)
    maps: M,
    ln2: T, // (D)
    core: K,
}

#[derive(Clone, Debug)]
struct Weights<T, M, K> {
    embedding: VectorEmbeddingParams<T>,
    blocks: Vec<Block<T, M, K>>,
    lnf: T, // (D)
    w_u: T, // (V, D)
}

/// The parameters (`T` = ParamId when declared, a tensor view after) of a model of config `C`.
type Params<C, T> = Weights<T, MapParams<C, T>, CoreParams<C, T>>;
type Views<B, C> = Params<C, <B as Backend>::Tensor>;

/// The same parameters seen through `f` (a parameter's or its gradient's view).
fn map<C: ResidualVectorConfig, T>(ids: &Params<C, ParamId>, f: impl Fn(ParamId) -> T) -> Params<C, T> {
    Weights {
        embedding: ids.embedding.map(&f),
        blocks: ids
            .blocks
            .iter()
            .map(|b| Block {
                ln1: f(b.ln1),
                maps: <C::Maps as AttentionMaps<C::Core>>::map(&b.maps, &f),
                ln2: f(b.ln2),
                core: C::Core::map(&b.core, &f),
            })
            .collect(),
        lnf: f(ids.lnf),
        w_u: f(ids.w_u),
    }
}

/// The embedding of the trunk `tr` over batches of `b` sequences of `t` tokens.
fn embedding(tr: &VectorTrunk, b: usize, t: usize) -> VectorEmbedding {
    VectorEmbedding {
        tokens: b * t,
        t,
        d_model: tr.d_model,
        vocab: tr.vocab,
        seq_len: tr.seq_len,
        std: tr.embed_std,
    }
}

/// The parameters of the model `cfg` describes: their layout and where each one sits.
fn declare<C: ResidualVectorConfig>(cfg: &C) -> (ParamLayout, Params<C, ParamId>) {
    let tr = cfg.trunk();
    let (d, v) = (tr.d_model, tr.vocab);
    // The layout does not depend on the batch.
    let (maps, core) = (cfg.maps(0), cfg.core(0));
    let mut lb = LayoutBuilder::default();
    let embedding = embedding(&tr, 0, 0).declare(&mut lb);
    let blocks = (0..tr.n_layers)
        .map(|i| Block {
            ln1: lb.add(format!("blocks.{i}.ln1"), &[d], false, Init::ONE),
            maps: maps.declare(&mut lb, &format!("blocks.{i}")),
            ln2: lb.add(format!("blocks.{i}.ln2"), &[d], false, Init::ONE),
            core: core.declare(&mut lb, &format!("blocks.{i}")),
        })
        .collect();
    let lnf = lb.add("lnf", &[d], false, Init::ONE);
    let w_u = lb.add("w_u", &[v, d], false, tr.unembedding_init);
    let ids = Weights {
        embedding,
        blocks,
        lnf,
        w_u,
    };
    (lb.build(), ids)
}

/// The parameter layout of the model `cfg` describes, without building it.
pub fn layout<C: ResidualVectorConfig>(cfg: &C) -> ParamLayout {
    declare(cfg).0
}

/// Saved activations of one block.
struct BlockActs<B: Backend, C: ResidualVectorConfig> {
    ln1: B::Tensor,       // (BT, D)
    ln1_stats: B::Tensor, // (BT, 2)
    maps: <C::Maps as AttentionMaps<C::Core>>::Acts<B>,
    attention: AttentionActs<B>,
    res_att: B::Tensor,   // (BT, D) residual after attention
    ln2: B::Tensor,       // (BT, D)
    ln2_stats: B::Tensor, // (BT, 2)
    core: <C::Core as FfCore>::Acts<B>,
    res_ff: B::Tensor, // (BT, D) residual after the core
}

/// Gradient scratch shared by all blocks: the backward visits one block at a time.
struct Scratch<B: Backend, C: ResidualVectorConfig> {
    dresidual: B::Tensor, // (BT, D)
    dln: B::Tensor,       // (BT, D)
    attention: AttentionScratch<B>,
    maps: <C::Maps as AttentionMaps<C::Core>>::Scratch<B>,
    core: <C::Core as FfCore>::Scratch<B>,
}

/// The vector-residual model of config `C`: `Transformer` and `MemoryFormer` are this model
/// with dense maps and core and with hashed ones.
pub struct ResidualVector<B: Backend, C: ResidualVectorConfig> {
    pub cfg: C,
    /// The dims of `cfg` that every vector-residual model has.
    trunk: VectorTrunk,
    embedding: VectorEmbedding,
    maps: C::Maps,
    attention: Attention,
    core: C::Core,
    b: usize,
    t: usize,
    store: ParamStore<B>,
    w: Views<B, C>,
    /// Gradient views; None for inference.
    dw: Option<Views<B, C>>,
    encoded: B::Tensor, // (BT, D)
    blocks: Vec<BlockActs<B, C>>,
    /// (BT, D) what W_O and the core write before their residual adds: one buffer for every
    /// block, or one a block (`CORE_OUTPUT_PER_BLOCK`).
    outputs: Vec<B::Tensor>,
    /// The core's forward scratch, shared by every block (and the maps).
    shared: <C::Core as FfCore>::Shared<B>,
    lnf: B::Tensor,       // (BT, D)
    lnf_stats: B::Tensor, // (BT, 2)
    unembedding: Unembedding<B>,
    /// None for inference.
    s: Option<Scratch<B, C>>,
    /// Variance probes of the dense maps W_QKV, W_O, W1 and W2; None for inference and for
    /// hashed ones.
    probes: Option<Probes<B>>,
    /// An intervention's edits; None in training.
    edits: Option<Edits<B>>,
}

impl<B: Backend, C: ResidualVectorConfig> ResidualVector<B, C> {
    /// Builds the model for batches of `b` sequences of `t` ≤ N tokens, initialised from `seed`.
    pub fn new(be: &B, cfg: C, b: usize, t: usize, seed: u64) -> Result<Self> {
        Self::build(be, cfg, b, t, Some(seed))
    }

    /// Forward only: parameters (all 0 until written) and activations, hash codes and buckets
    /// included, but no gradients, backward scratch or probes. `backward` does nothing on it.
    pub fn inference(be: &B, cfg: C, b: usize, t: usize) -> Result<Self> {
        Self::build(be, cfg, b, t, None)
    }

    /// Trainable, initialised from the seed, with one; for inference without.
    fn build(be: &B, cfg: C, b: usize, t: usize, seed: Option<u64>) -> Result<Self> {
        let bt = cfg.model().check_batch(b, t)?;
        let trunk = cfg.trunk();
        let (d, l) = (trunk.d_model, trunk.n_layers);
        let (layout, ids) = declare(&cfg);
        let store = match seed {
            Some(seed) => ParamStore::new(be, layout, seed)?,
            None => ParamStore::inference(be, layout)?,
        };
        let w = map::<C, _>(&ids, |id| store.param(be, id));
        let dw = store.trainable().then(|| map::<C, _>(&ids, |id| store.grad(be, id)));

        let (maps, core) = (cfg.maps(bt), cfg.core(bt));
        let attention = Attention {
            b,
            t,
            heads: trunk.n_heads,
            head_dim: trunk.head_dim,
            layer_scale: trunk.attn_layer_scale,
            alibi: false,
            names: trunk.attention_names,
        };
        // Each buffer named with the settings it grows with, for the memory estimate's messages.
        let z = |what: &str| be.zeros(&format!("{what} (batch × seq_len × d_model)"), values(&[bt, d]));
        let stats = || be.zeros("the norm statistics (batch × seq_len)", values(&[bt, 2]));
        let blocks = (0..l)
            .map(|_| {
                Ok(BlockActs {
                    ln1: z("ln1")?,
                    ln1_stats: stats()?,
                    maps: maps.acts(be)?,
                    attention: attention.acts(be)?,
                    res_att: z("the residual")?,
                    ln2: z("ln2")?,
                    ln2_stats: stats()?,
                    core: core.acts(be)?,
                    res_ff: z("the residual")?,
                })
            })
            .collect::<engine::Result<Vec<_>>>()?;
        let (n_outputs, what) = match C::CORE_OUTPUT_PER_BLOCK {
            true => (l, "the ml2 output"),
            false => (1, "the projection"),
        };
        let outputs = (0..n_outputs).map(|_| z(what)).collect::<engine::Result<Vec<_>>>()?;
        let scratch = || -> engine::Result<_> {
            Ok(Scratch {
                dresidual: z("the residual gradient")?,
                dln: z("the norm gradient")?,
                attention: attention.scratch(be)?,
                maps: maps.scratch(be)?,
                core: core.scratch(be)?,
            })
        };
        let trainable = store.trainable();
        let s = trainable.then(scratch).transpose()?;
        // The probes measure linear maps: W_QKV, W_O, W1 and W2 (RMT paper Table 2).
        let probed = trainable && maps.is_dense() && core.has_dense_maps();
        let probes = probed.then(|| Probes::new(be, probes::block_sites(l))).transpose()?;
        Ok(Self {
            b,
            t,
            store,
            w,
            dw,
            encoded: z("the embeddings")?,
            blocks,
            outputs,
            shared: core.shared(be)?,
            lnf: z("the final norm")?,
            lnf_stats: stats()?,
            unembedding: Unembedding::new(be, bt, trunk.vocab, d, trunk.z_loss, trainable)?,
            s,
            probes,
            edits: None,
            cfg,
            embedding: embedding(&trunk, b, t),
            trunk,
            maps,
            attention,
            core,
        })
    }

    fn norm(&self) -> NormDims {
        NormDims {
            rows: self.b * self.t,
            c: self.trunk.d_model,
            kind: self.trunk.norm.into(),
            eps: self.trunk.norm_eps,
        }
    }

    /// The residual stream entering block `l`.
    fn residual_in(&self, l: usize) -> &B::Tensor {
        if l == 0 {
            &self.encoded
        } else {
            &self.blocks[l - 1].res_ff
        }
    }

    /// Where block `l`'s W_O and core write.
    fn output(&self, l: usize) -> &B::Tensor {
        match self.outputs.len() {
            1 => &self.outputs[0],
            _ => &self.outputs[l],
        }
    }

    /// The probes a pass observing `observe` records into; None for `Observe::Loss`.
    fn probes(&self, observe: Observe) -> Option<&Probes<B>> {
        self.probes.as_ref().filter(|_| observe == Observe::Variance)
    }
}

/// Records two quantities of block `l`'s site into `probes` (a pass observing the variance):
/// a map's input and output in the forward, its output and input gradients in the backward.
fn probe<B: Backend>(
    be: &B,
    probes: Option<&Probes<B>>,
    (l, layer, op): (usize, Layer, Op),
    quantities: [(Quantity, &B::Tensor); 2],
) {
    if let Some(p) = probes {
        let i = probes::site_index(l, layer, op);
        for (q, x) in quantities {
            p.record(be, i, q, x);
        }
    }
}

impl<B: Backend, C: ResidualVectorConfig> LanguageModel<B> for ResidualVector<B, C> {
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
        let (w, probes) = (&self.w, self.probes(observe));
        // X⁰ = W_E[token] + W_PE[position]
        self.embedding.forward(be, &self.encoded, &w.embedding, batch);
        let edit = |point, tensor| edits::apply(be, &self.edits, point, tensor);
        edit(Point::Embedding, &self.encoded);
        edit(Point::Residual(0), &self.encoded);
        for (l, (a, p)) in self.blocks.iter().zip(&w.blocks).enumerate() {
            let (x, out) = (self.residual_in(l), self.output(l));
            // X ← X + out(attention(in(Norm(X))))
            be.norm_forward(&a.ln1, &a.ln1_stats, x, &p.ln1, self.norm());
            let qkv = &a.attention.qkv;
            let tap = Tap::new(&self.edits, l);
            self.maps
                .qkv_forward(be, qkv, &a.ln1, &a.maps, &self.shared, &p.maps, tap);
            probe(
                be,
                probes,
                (l, Layer::Attn, Op::Retrieval),
                [(Quantity::In, &a.ln1), (Quantity::Out, qkv)],
            );
            self.attention.forward(be, &a.attention, &batch.doc_start, l);
            edit(Point::Heads(l), &a.attention.atty);
            let y = self.maps.output_forward(be, out, &a.attention.atty, &p.maps);
            edit(Point::Write(l, Layer::Attn), y);
            probe(
                be,
                probes,
                (l, Layer::Attn, Op::Storage),
                [(Quantity::In, &a.attention.atty), (Quantity::Out, y)],
            );
            be.add(&a.res_att, x, y);
            edit(Point::Residual(2 * l + 1), &a.res_att);
            // X ← X + core(Norm(X)); W1 and W2 of a dense core are its retrieval and storage.
            be.norm_forward(&a.ln2, &a.ln2_stats, &a.res_att, &p.ln2, self.norm());
            self.core.forward(be, out, &a.ln2, &a.core, &self.shared, &p.core, tap);
            if let Some([(w1_in, w1_out), (w2_in, w2_out)]) = self.core.dense_maps(&a.ln2, out, &a.core) {
                probe(
                    be,
                    probes,
                    (l, Layer::Ff, Op::Retrieval),
                    [(Quantity::In, w1_in), (Quantity::Out, w1_out)],
                );
                probe(
                    be,
                    probes,
                    (l, Layer::Ff, Op::Storage),
                    [(Quantity::In, w2_in), (Quantity::Out, w2_out)],
                );
            }
            edit(Point::Write(l, Layer::Ff), out);
            be.add(&a.res_ff, &a.res_att, out);
            edit(Point::Residual(2 * l + 2), &a.res_ff);
        }
        // logits = W_U · Norm(X); loss = mean CE (the z-loss enters the gradient only)
        self.read_out(be, self.residual_in(self.trunk.n_layers));
        self.unembedding.loss.forward(be, batch);
    }

    fn backward(&self, be: &B, batch: &BatchTensors<B>, observe: Observe) {
        // An inference model has no gradients to fill.
        let (w, Some(dw), Some(s)) = (&self.w, &self.dw, &self.s) else {
            return;
        };
        let probes = self.probes(observe);
        let seed = edits::seed(&self.edits);
        self.unembedding
            .backward(be, &s.dln, &dw.w_u, &self.lnf, &w.w_u, batch, seed);
        // Each point's gradient, where an intervention asks for it.
        let grad = |point, dtensor| edits::grad(be, &self.edits, point, dtensor);
        be.fill(&s.dresidual, 0.0);
        let last = self.residual_in(self.trunk.n_layers);
        be.norm_backward(
            &s.dresidual,
            &dw.lnf,
            &s.dln,
            last,
            &w.lnf,
            &self.lnf_stats,
            self.norm(),
        );
        for l in (0..self.trunk.n_layers).rev() {
            let (a, p, dp) = (&self.blocks[l], &w.blocks[l], &dw.blocks[l]);
            grad(Point::Residual(2 * l + 2), &s.dresidual);
            grad(Point::Write(l, Layer::Ff), &s.dresidual);
            // Core: dresidual flows through the add unchanged into its output.
            let tap = Tap::new(&self.edits, l);
            self.core.backward(
                be,
                &s.core,
                &s.dln,
                &dp.core,
                &s.dresidual,
                &a.ln2,
                &a.core,
                &p.core,
                tap,
            );
            if let Some([d_w1_out, d_w2_in]) = self.core.dense_grads(&s.core) {
                probe(
                    be,
                    probes,
                    (l, Layer::Ff, Op::Storage),
                    [(Quantity::GradOut, &s.dresidual), (Quantity::GradIn, d_w2_in)],
                );
                probe(
                    be,
                    probes,
                    (l, Layer::Ff, Op::Retrieval),
                    [(Quantity::GradOut, d_w1_out), (Quantity::GradIn, &s.dln)],
                );
            }
            be.norm_backward(
                &s.dresidual,
                &dp.ln2,
                &s.dln,
                &a.res_att,
                &p.ln2,
                &a.ln2_stats,
                self.norm(),
            );
            grad(Point::Residual(2 * l + 1), &s.dresidual);
            grad(Point::Write(l, Layer::Attn), &s.dresidual);
            // Attention: dresidual flows into its output map, or straight into it.
            let atty = &a.attention.atty;
            let datty = self
                .maps
                .output_backward(be, &s.maps, &dp.maps, &s.dresidual, atty, &p.maps);
            grad(Point::Heads(l), datty);
            probe(
                be,
                probes,
                (l, Layer::Attn, Op::Storage),
                [(Quantity::GradOut, &s.dresidual), (Quantity::GradIn, datty)],
            );
            self.attention
                .backward(be, &s.attention, datty, &a.attention, &batch.doc_start, l);
            let dqkv = &s.attention.dqkv;
            self.maps
                .qkv_backward(be, &s.dln, &dp.maps, dqkv, &a.ln1, &a.maps, &p.maps, tap);
            probe(
                be,
                probes,
                (l, Layer::Attn, Op::Retrieval),
                [(Quantity::GradOut, dqkv), (Quantity::GradIn, &s.dln)],
            );
            let x = self.residual_in(l);
            be.norm_backward(&s.dresidual, &dp.ln1, &s.dln, x, &p.ln1, &a.ln1_stats, self.norm());
        }
        grad(Point::Residual(0), &s.dresidual);
        grad(Point::Embedding, &s.dresidual);
        self.embedding.backward(be, &dw.embedding, &s.dresidual, batch);
    }

    fn head(&self) -> &LossHead<B> {
        &self.unembedding.loss
    }

    /// logits = W_U · Norm(x): the head, read from the residual `x`.
    fn read_out(&self, be: &B, x: &B::Tensor) {
        let w = &self.w;
        be.norm_forward(&self.lnf, &self.lnf_stats, x, &w.lnf, self.norm());
        self.unembedding.logits(be, &self.lnf, &w.w_u);
    }

    fn edit_points(&self) -> Vec<EditPoint<'_, B>> {
        let (d, heads) = (self.trunk.d_model, self.trunk.n_heads);
        let mut points = Vec::from(sites::embedding_points((&self.encoded, d), (&self.encoded, d, 1)));
        for (l, a) in self.blocks.iter().enumerate() {
            points.extend(sites::block_points(
                l,
                (&a.attention.atty, heads * self.trunk.head_dim, heads),
                [(self.output(l), d), (self.output(l), d)],
                [&a.res_att, &a.res_ff],
                (d, 1),
                [self.maps.tables(), self.core.tables()],
            ));
        }
        points
    }

    fn residual_groups(&self) -> Option<Group> {
        None
    }

    fn edits(&mut self) -> &mut Option<Edits<B>> {
        &mut self.edits
    }

    fn linear_read_out(&self) -> Option<ReadOut> {
        Some(ReadOut::Norm {
            width: self.trunk.d_model,
            streams: 1,
            norm: self.trunk.norm.into(),
            eps: self.trunk.norm_eps,
        })
    }

    fn inside(&self) -> Inside<'_, B> {
        let hashed = self
            .blocks
            .iter()
            .enumerate()
            .flat_map(|(i, a)| {
                let prefix = format!("block{i}");
                let mut layers = self.maps.hashed_layers(&a.maps, &prefix);
                layers.extend(self.core.hashed_layers(&a.core, &prefix));
                layers
            })
            .collect();
        let shape = Shape::Vector {
            len: self.trunk.d_model,
        };
        let residuals = observe::residual_stream(
            shape,
            &self.encoded,
            self.blocks.iter().map(|a| (&a.res_att, &a.res_ff)),
        );
        Inside {
            residuals,
            hashed,
            variance: self.probes.as_ref(),
            attention: self.attention.sites(self.blocks.iter().map(|a| &a.attention)),
            mixing: Vec::new(),
        }
    }
}
