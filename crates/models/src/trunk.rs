//! One trunk for every architecture: blocks of two sites, attention then a feed-forward core,
//! each reading the residual and writing back into it.
//!
//!   X⁰ = embed(tokens)
//!   X ← write(X, out(attention(in(read(X)))))       in, out: the attention's maps
//!   X ← write(X, core(read(X)))
//!   logits = read_out(X)
//!
//! What `read`, `write`, the embedding and the read-out are is the residual's
//! (`residual::Residual`: a vector, a matrix or n streams); the maps around attention
//! (`attention::AttentionMaps`) and the core (`ff::FfCore`) are units. A model file is a config
//! that names the three (`Parts`) and the paper's equations in its header.
//!
//! The variance probes are recorded here and nowhere else, at each site's read and write, in
//! a pass observing `Observe::Variance`. `backward` is `forward` read in reverse, op for op.

use crate::attention::{Attention, AttentionActs, AttentionMaps, AttentionScratch};
use crate::batch::BatchTensors;
use crate::ff::FfCore;
use crate::interventions::{edits, sites, EditPoint, Edits, Group, Point, ReadOut, Tap};
use crate::loss::{LossHead, Unembedding};
use crate::observe::{self, Inside, Observe};
use crate::params::{LayoutBuilder, ParamId, ParamLayout, ParamStore};
use crate::probes::{self, Layer, Op, Probes, Quantity};
use crate::residual::{Residual, Site};
use crate::train::LanguageModel;
use crate::value_residual::{ValueConstants, ValueMix, ValueScratch};
use crate::{ModelConfig, Result};
use engine::Backend;

/// A model's parts: its residual, the maps around its attention and its feed-forward core.
pub trait Parts: Clone {
    type Residual: Residual;
    type Core: FfCore;
    type Maps: AttentionMaps<Self::Core>;
    /// The residual over batches of `b` sequences of `t` tokens.
    fn residual(&self, b: usize, t: usize) -> Self::Residual;
    /// Attention over batches of `b` sequences of `t` tokens.
    fn attention(&self, b: usize, t: usize) -> Attention;
    /// The maps for `tokens` rows.
    fn maps(&self, tokens: usize) -> Self::Maps;
    /// The core for `tokens` rows.
    fn core(&self, tokens: usize) -> Self::Core;
    fn n_layers(&self) -> usize;
    /// The value residual over `tokens` rows: off but where the config has it.
    fn values(&self, tokens: usize) -> ValueMix {
        let a = self.attention(0, 0);
        ValueMix::off(tokens, a.heads * a.head_dim)
    }
    /// The config in the one enum of architectures.
    fn model(&self) -> ModelConfig;
}

/// The branches of the transformer that a config reroutes the residual of (its
/// `transformer()`): its attention, maps, core and depth, in a `Parts` impl whose residual
/// alone is its own (hyper-connections, AltUp, Attention Residuals).
macro_rules! transformer_branches {
    () => {
        type Core = $crate::ff::Dense;
        type Maps = $crate::attention::Projections;

        fn attention(&self, b: usize, t: usize) -> $crate::attention::Attention {
            self.transformer().attention(b, t)
        }

        /// Each site's branch is the transformer's: the same maps, core and init.
        fn maps(&self, tokens: usize) -> $crate::attention::Projections {
            self.transformer().maps(tokens)
        }

        fn core(&self, tokens: usize) -> $crate::ff::Dense {
            self.transformer().core(tokens)
        }

        fn n_layers(&self) -> usize {
            self.n_layers
        }
    };
}
pub(crate) use transformer_branches;

type SiteParams<C, T> = <<C as Parts>::Residual as Residual>::Site<T>;
type EndParams<C, T> = <<C as Parts>::Residual as Residual>::Ends<T>;
type MapParams<C, T> = <<C as Parts>::Maps as AttentionMaps<<C as Parts>::Core>>::Params<T>;
type CoreParams<C, T> = <<C as Parts>::Core as FfCore>::Params<T>;

struct Block<S, M, K, T> {
    attn: S,
    maps: M,
    /// The value residual's λ, where it is learnable (every block after the first).
    values: Option<T>,
    ff: S,
    core: K,
}

struct Weights<E, S, M, K, T> {
    ends: E,
    blocks: Vec<Block<S, M, K, T>>,
}

/// The parameters (`T` = ParamId when declared, a tensor view after) of a model of config `C`.
type Params<C, T> = Weights<EndParams<C, T>, SiteParams<C, T>, MapParams<C, T>, CoreParams<C, T>, T>;
type Views<B, C> = Params<C, <B as Backend>::Tensor>;

/// The same parameters seen through `f` (a parameter's or its gradient's view).
fn map<C: Parts, T>(ids: &Params<C, ParamId>, f: impl Fn(ParamId) -> T) -> Params<C, T> {
    Weights {
        ends: C::Residual::map_ends(&ids.ends, &f),
        blocks: (ids.blocks.iter())
            .map(|b| Block {
                attn: C::Residual::map_site(&b.attn, &f),
                maps: <C::Maps as AttentionMaps<C::Core>>::map(&b.maps, &f),
                values: b.values.map(&f),
                ff: C::Residual::map_site(&b.ff, &f),
                core: C::Core::map(&b.core, &f),
            })
            .collect(),
    }
}

/// The parameters of the model `cfg` describes, in their order: the embedding's, then each
/// block's (attention's read, its maps, its write; the FF's read, the core, its write), then
/// the head's.
fn declare<C: Parts>(cfg: &C) -> (ParamLayout, Params<C, ParamId>) {
    // The layout does not depend on the batch.
    let (residual, maps, core, values) = (cfg.residual(0, 0), cfg.maps(0), cfg.core(0), cfg.values(0));
    let mut lb = LayoutBuilder::default();
    let (ends, blocks) = residual.declare_ends(&mut lb, |lb| {
        (0..cfg.n_layers())
            .map(|block| {
                let prefix = format!("blocks.{block}");
                let (attn, maps) = residual.declare_site(lb, Site::attn(block), |lb| maps.declare(lb, &prefix));
                let values = values.declare(lb, block);
                let (ff, core) = residual.declare_site(lb, Site::ff(block), |lb| core.declare(lb, &prefix));
                Block {
                    attn,
                    maps,
                    values,
                    ff,
                    core,
                }
            })
            .collect()
    });
    (lb.build(), Weights { ends, blocks })
}

/// The parameter layout of the model `cfg` describes, without building it.
pub fn layout<C: Parts>(cfg: &C) -> ParamLayout {
    declare(cfg).0
}

/// Saved activations of one block.
struct BlockActs<B: Backend, C: Parts> {
    attn: <C::Residual as Residual>::SiteActs<B>,
    maps: <C::Maps as AttentionMaps<C::Core>>::Acts<B>,
    attention: AttentionActs<B>,
    /// Where the maps write qkv before the value residual mixes it into attention's input.
    premix: Option<B::Tensor>,
    ff: <C::Residual as Residual>::SiteActs<B>,
    core: <C::Core as FfCore>::Acts<B>,
}

/// Gradient scratch shared by all blocks: the backward visits one block at a time.
struct Scratch<B: Backend, C: Parts> {
    residual: <C::Residual as Residual>::Scratch<B>,
    attention: AttentionScratch<B>,
    maps: <C::Maps as AttentionMaps<C::Core>>::Scratch<B>,
    core: <C::Core as FfCore>::Scratch<B>,
    values: Option<ValueScratch<B>>,
}

/// The model of config `C`: `Transformer`, `Rmt`, `MemoryFormer`, `Hybrid` and
/// `HyperConnections` are this model with their parts.
pub struct Model<B: Backend, C: Parts> {
    pub cfg: C,
    residual: C::Residual,
    maps: C::Maps,
    attention: Attention,
    core: C::Core,
    values: ValueMix,
    /// The value residual's constants; None where it is off.
    value_constants: Option<ValueConstants<B>>,
    b: usize,
    t: usize,
    vocab: usize,
    store: ParamStore<B>,
    w: Views<B, C>,
    /// Gradient views; None for inference.
    dw: Option<Views<B, C>>,
    ends: <C::Residual as Residual>::EndActs<B>,
    blocks: Vec<BlockActs<B, C>>,
    /// The core's forward scratch, shared by every block (and the maps).
    shared: <C::Core as FfCore>::Shared<B>,
    unembedding: Unembedding<B>,
    /// None for inference.
    s: Option<Scratch<B, C>>,
    /// Variance probes of every site's read and write; None for inference and where the
    /// branch's maps are hashed.
    probes: Option<Probes<B>>,
    /// An intervention's edits; None in training.
    edits: Option<Edits<B>>,
}

/// The probes and the residual's scratch, in a pass observing the variance.
type Probing<'a, B, C> = Option<(&'a Probes<B>, &'a <<C as Parts>::Residual as Residual>::Scratch<B>)>;

/// Records two quantities of the probe site `at` into `probes`.
fn record<B: Backend>(be: &B, probes: &Probes<B>, at: usize, quantities: [(Quantity, &B::Tensor); 2]) {
    for (q, x) in quantities {
        probes.record(be, at, q, x);
    }
}

impl<B: Backend, C: Parts> Model<B, C> {
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
        let l = cfg.n_layers();
        let (layout, ids) = declare(&cfg);
        let store = match seed {
            Some(seed) => ParamStore::new(be, layout, seed)?,
            None => ParamStore::inference(be, layout)?,
        };
        let w = map::<C, _>(&ids, |id| store.param(be, id));
        let dw = store.trainable().then(|| map::<C, _>(&ids, |id| store.grad(be, id)));

        let (residual, attention) = (cfg.residual(b, t), cfg.attention(b, t));
        let (maps, core, values) = (cfg.maps(bt), cfg.core(bt), cfg.values(bt));
        let shared = residual.shared(be)?;
        let blocks = (0..l)
            .map(|block| {
                Ok(BlockActs {
                    attn: residual.site_acts(be, Site::attn(block), &shared)?,
                    maps: maps.acts(be)?,
                    attention: attention.acts(be)?,
                    premix: values.premix(be, block)?,
                    ff: residual.site_acts(be, Site::ff(block), &shared)?,
                    core: core.acts(be)?,
                })
            })
            .collect::<engine::Result<Vec<_>>>()?;
        let trainable = store.trainable();
        let scratch = || -> engine::Result<_> {
            Ok(Scratch {
                residual: residual.scratch(be)?,
                attention: attention.scratch(be)?,
                maps: maps.scratch(be)?,
                core: core.scratch(be)?,
                values: values.scratch(be)?,
            })
        };
        let s = trainable.then(scratch).transpose()?;
        // A keyed residual's retrievals and storages, and its core's own maps where it has
        // them; otherwise the branch's first and last maps, where they are matrix products.
        let sites = match (C::Residual::KEYED, core.has_dense_maps()) {
            (true, true) => Some(probes::block_and_core_sites(l)),
            (true, false) => Some(probes::block_sites(l)),
            (false, dense) => (dense && maps.is_dense()).then(|| probes::block_sites(l)),
        };
        let probes = match (trainable, sites) {
            (true, Some(sites)) => Some(Probes::new(be, sites)?),
            (false, _) | (_, None) => None,
        };
        let ends = residual.end_acts(be, shared)?;
        let (vocab, z_loss) = (cfg.model().vocab(), cfg.model().z_loss());
        let unembedding = Unembedding::new(be, bt, vocab, residual.head_width(), z_loss, trainable)?;
        Ok(Self {
            b,
            t,
            vocab,
            store,
            w,
            dw,
            ends,
            blocks,
            shared: core.shared(be)?,
            value_constants: values.constants(be)?,
            unembedding,
            s,
            probes,
            edits: None,
            cfg,
            residual,
            maps,
            attention,
            core,
            values,
        })
    }

    /// The residual entering block `l`; at `l` = L, the last.
    fn residual_in(&self, l: usize) -> &B::Tensor {
        match l.checked_sub(1).and_then(|i| self.blocks.get(i)) {
            Some(a) => self.residual.after(&a.ff),
            None => self.residual.first(&self.ends),
        }
    }

    /// The probes and the residual's scratch in a pass observing `observe`; None for
    /// `Observe::Loss` and for inference.
    fn probing(&self, observe: Observe) -> Probing<'_, B, C> {
        match (&self.probes, &self.s, observe) {
            (Some(p), Some(s), Observe::Variance) => Some((p, &s.residual)),
            (_, _, Observe::Loss) | (None, ..) | (_, None, _) => None,
        }
    }
}

impl<B: Backend, C: Parts> LanguageModel<B> for Model<B, C> {
    fn store(&self) -> &ParamStore<B> {
        &self.store
    }

    fn batch_shape(&self) -> (usize, usize) {
        (self.b, self.t)
    }

    fn vocab(&self) -> usize {
        self.vocab
    }

    fn forward(&self, be: &B, batch: &BatchTensors<B>, observe: Observe) {
        let (r, w, probing) = (&self.residual, &self.w, self.probing(observe));
        let keyed = C::Residual::KEYED;
        let edit = |point, tensor| edits::apply(be, &self.edits, point, tensor);
        r.embed(be, &self.ends, &w.ends, batch);
        edit(Point::Embedding, r.embedded(&self.ends));
        r.spread(be, &self.ends);
        edit(Point::Residual(0), r.first(&self.ends));
        for (l, (a, p)) in self.blocks.iter().zip(&w.blocks).enumerate() {
            let tap = Tap::new(&self.edits, l);
            let at = |layer, op| probes::site_index(l, layer, op);
            let atty = &a.attention.atty;
            // X ← write(X, out(attention(in(read(X)))))
            let (site, x) = (Site::attn(l), self.residual_in(l));
            let (qkv, input) = (&a.attention.qkv, r.input(&a.attn, &a.attention.qkv));
            r.read(be, &a.attn, x, input, &p.attn, site);
            let raw = a.premix.as_ref().unwrap_or(qkv);
            self.maps
                .qkv_forward(be, raw, input, &a.maps, &self.shared, &p.maps, tap);
            if let Some((probes, s)) = probing {
                let normed = r.normed(be, s, &a.attn, x, input, &p.attn, site);
                let q = [(Quantity::In, normed), (Quantity::Out, raw)];
                record(be, probes, at(Layer::Attn, Op::Retrieval), q);
            }
            // V'_l = ½ V_l + ½ V_0 (the value residual), where it is on.
            if let (Some(premix), Some(c)) = (&a.premix, &self.value_constants) {
                let first = &self.blocks[0].attention.qkv;
                self.values.forward(be, c, qkv, premix, first, l, p.values.as_ref());
            }
            self.attention.forward(be, &a.attention, &batch.doc_start, l);
            edit(Point::Heads(l), atty);
            let out = r.output(&a.attn).unwrap_or(atty);
            let y = self.maps.output_forward(be, out, atty, &p.maps);
            edit(Point::Write(l, Layer::Attn), y);
            r.write(be, &a.attn, x, y, &p.attn, site);
            if let Some((probes, s)) = probing {
                let written = r.written(be, s, y, &p.attn, site);
                let q = [(Quantity::In, atty), (Quantity::Out, written)];
                record(be, probes, at(Layer::Attn, Op::Storage), q);
            }
            edit(Point::Residual(2 * l + 1), r.after(&a.attn));
            // X ← write(X, core(read(X)))
            let (site, x) = (Site::ff(l), r.after(&a.attn));
            let (input, f) = (r.input(&a.ff, qkv), r.output(&a.ff).unwrap_or(atty));
            r.read(be, &a.ff, x, input, &p.ff, site);
            if let (Some((probes, s)), true) = (probing, keyed) {
                let normed = r.normed(be, s, &a.ff, x, input, &p.ff, site);
                let q = [(Quantity::In, normed), (Quantity::Out, input)];
                record(be, probes, at(Layer::Ff, Op::Retrieval), q);
            }
            self.core.forward(be, f, input, &a.core, &self.shared, &p.core, tap);
            let dense = probing.and_then(|(probes, _)| Some((probes, self.core.dense_maps(input, f, &a.core)?)));
            if let Some((probes, [(w1_in, w1_out), (w2_in, w2_out)])) = dense {
                // A keyed residual's core maps are sites of their own; otherwise W1 and W2 are
                // the site's retrieval and storage.
                let core_site = |op| probes::core_site_index(self.blocks.len(), l, op);
                let (w1, w2) = match keyed {
                    true => (core_site(Op::W1), core_site(Op::W2)),
                    false => (at(Layer::Ff, Op::Retrieval), at(Layer::Ff, Op::Storage)),
                };
                record(be, probes, w1, [(Quantity::In, w1_in), (Quantity::Out, w1_out)]);
                record(be, probes, w2, [(Quantity::In, w2_in), (Quantity::Out, w2_out)]);
            }
            edit(Point::Write(l, Layer::Ff), f);
            r.write(be, &a.ff, x, f, &p.ff, site);
            if let (Some((probes, s)), true) = (probing, keyed) {
                let written = r.written(be, s, f, &p.ff, site);
                let q = [(Quantity::In, f), (Quantity::Out, written)];
                record(be, probes, at(Layer::Ff, Op::Storage), q);
            }
            edit(Point::Residual(2 * l + 2), r.after(&a.ff));
        }
        // logits = read_out(X); loss = mean CE (the z-loss enters the gradient only)
        self.read_out(be, self.residual_in(self.blocks.len()));
        self.unembedding.loss.forward(be, batch);
    }

    fn backward(&self, be: &B, batch: &BatchTensors<B>, observe: Observe) {
        // An inference model has no gradients to fill.
        let (w, Some(dw), Some(s)) = (&self.w, &self.dw, &self.s) else {
            return;
        };
        let (r, rs, probing) = (&self.residual, &s.residual, self.probing(observe));
        let keyed = C::Residual::KEYED;
        let seed = edits::seed(&self.edits);
        let last = self.residual_in(self.blocks.len());
        let ends = (&w.ends, &dw.ends);
        r.read_out_backward(be, rs, &self.ends, last, ends, &self.unembedding, batch, seed);
        // Each point's gradient, where an intervention asks for it.
        let grad = |point, dtensor| edits::grad(be, &self.edits, point, dtensor);
        for l in (0..self.blocks.len()).rev() {
            let (a, p, dp) = (&self.blocks[l], &w.blocks[l], &dw.blocks[l]);
            let tap = Tap::new(&self.edits, l);
            let at = |layer, op| probes::site_index(l, layer, op);
            let (atty, dqkv) = (&a.attention.atty, &s.attention.dqkv);
            // The FF's site.
            let (site, x) = (Site::ff(l), r.after(&a.attn));
            let (input, f) = (r.input(&a.ff, &a.attention.qkv), r.output(&a.ff).unwrap_or(atty));
            let g = r.dresidual(rs, site.depth_out());
            grad(Point::Residual(2 * l + 2), g);
            let dout = r.write_backward(be, rs, &a.ff, x, f, (&p.ff, &dp.ff), site);
            if let (Some((probes, _)), true) = (probing, keyed) {
                record(
                    be,
                    probes,
                    at(Layer::Ff, Op::Storage),
                    [(Quantity::GradOut, g), (Quantity::GradIn, dout)],
                );
            }
            grad(Point::Write(l, Layer::Ff), dout);
            let dinput = r.input_grad(rs, dqkv, site);
            let dense = probing.filter(|_| self.core.has_dense_maps());
            let core_site = |op| probes::core_site_index(self.blocks.len(), l, op);
            if let (Some((probes, _)), true) = (dense, keyed) {
                // The core may write its input's gradient over its output's: read it first.
                probes.record(be, core_site(Op::W2), Quantity::GradOut, dout);
            }
            self.core
                .backward(be, &s.core, dinput, &dp.core, dout, input, &a.core, &p.core, tap);
            if let (Some((probes, _)), Some([d_w1_out, d_w2_in])) = (dense, self.core.dense_grads(&s.core)) {
                match keyed {
                    true => {
                        probes.record(be, core_site(Op::W2), Quantity::GradIn, d_w2_in);
                        let q = [(Quantity::GradOut, d_w1_out), (Quantity::GradIn, dinput)];
                        record(be, probes, core_site(Op::W1), q);
                    }
                    false => {
                        let q = [(Quantity::GradOut, dout), (Quantity::GradIn, d_w2_in)];
                        record(be, probes, at(Layer::Ff, Op::Storage), q);
                        let q = [(Quantity::GradOut, d_w1_out), (Quantity::GradIn, dinput)];
                        record(be, probes, at(Layer::Ff, Op::Retrieval), q);
                    }
                }
            }
            if let (Some((probes, rs)), true) = (probing, keyed) {
                let dnormed = r.dnormed(be, rs, dinput, &p.ff, site);
                let q = [(Quantity::GradOut, dinput), (Quantity::GradIn, dnormed)];
                record(be, probes, at(Layer::Ff, Op::Retrieval), q);
            }
            r.read_backward(be, rs, &a.ff, x, dinput, (&p.ff, &dp.ff), site);
            // Attention's site.
            let (site, x) = (Site::attn(l), self.residual_in(l));
            let input = r.input(&a.attn, &a.attention.qkv);
            let y = self.maps.output(r.output(&a.attn).unwrap_or(atty), atty);
            let g = r.dresidual(rs, site.depth_out());
            grad(Point::Residual(2 * l + 1), g);
            let dout = r.write_backward(be, rs, &a.attn, x, y, (&p.attn, &dp.attn), site);
            grad(Point::Write(l, Layer::Attn), dout);
            let datty = self.maps.output_backward(be, &s.maps, &dp.maps, dout, atty, &p.maps);
            grad(Point::Heads(l), datty);
            if let Some((probes, _)) = probing {
                // A keyed residual's storage writes the residual itself; otherwise W_O writes
                // what the residual takes.
                let written = if keyed { g } else { dout };
                let q = [(Quantity::GradOut, written), (Quantity::GradIn, datty)];
                record(be, probes, at(Layer::Attn, Op::Storage), q);
            }
            self.attention
                .backward(be, &s.attention, datty, &a.attention, &batch.doc_start, l);
            // The value residual's backward: the unmixed qkv's gradient, and layer 0's share.
            let dqkv = match (&a.premix, &self.value_constants, &s.values) {
                (Some(premix), Some(c), Some(vs)) => {
                    let inputs = (premix, &self.blocks[0].attention.qkv);
                    self.values.backward(be, c, vs, dqkv, inputs, l, dp.values.as_ref())
                }
                (None, ..) | (_, None, _) | (_, _, None) => dqkv,
            };
            if let (0, Some(vs), true) = (l, &s.values, self.blocks.len() > 1) {
                self.values.into_first(be, vs, dqkv);
            }
            let dinput = r.input_grad(rs, dqkv, site);
            self.maps
                .qkv_backward(be, dinput, &dp.maps, dqkv, input, &a.maps, &p.maps, tap);
            if let Some((probes, rs)) = probing {
                let dnormed = r.dnormed(be, rs, dinput, &p.attn, site);
                let q = [(Quantity::GradOut, dqkv), (Quantity::GradIn, dnormed)];
                record(be, probes, at(Layer::Attn, Op::Retrieval), q);
            }
            r.read_backward(be, rs, &a.attn, x, dinput, (&p.attn, &dp.attn), site);
        }
        grad(Point::Residual(0), r.dresidual(rs, 0));
        grad(Point::Embedding, r.gather(be, rs, &self.ends));
        r.embed_backward(be, rs, &self.ends, ends, batch);
    }

    fn head(&self) -> &LossHead<B> {
        &self.unembedding.loss
    }

    fn read_out(&self, be: &B, x: &B::Tensor) {
        let r = &self.residual;
        r.read_out(be, &self.ends, x, &self.w.ends, &self.unembedding);
    }

    fn edit_points(&self) -> Vec<EditPoint<'_, B>> {
        let r = &self.residual;
        let (width, (_, groups)) = (r.width(), r.groups());
        let embedded = (r.embedded(&self.ends), r.embedding_width());
        let mut points = Vec::from(sites::embedding_points(embedded, (r.first(&self.ends), width, groups)));
        let (heads, head_dim) = (self.attention.heads, self.attention.head_dim);
        for (l, a) in self.blocks.iter().enumerate() {
            let atty = &a.attention.atty;
            let y = self.maps.output(r.output(&a.attn).unwrap_or(atty), atty);
            let f = r.output(&a.ff).unwrap_or(atty);
            points.extend(sites::block_points(
                l,
                (atty, heads * head_dim, heads),
                [(y, r.branch_width()), (f, r.branch_width())],
                [r.after(&a.attn), r.after(&a.ff)],
                (width, groups),
                [self.maps.tables(), self.core.tables()],
            ));
        }
        points
    }

    fn residual_groups(&self) -> Option<Group> {
        self.residual.groups().0
    }

    fn edits(&mut self) -> &mut Option<Edits<B>> {
        &mut self.edits
    }

    fn linear_read_out(&self) -> Option<ReadOut> {
        self.residual.linear_read_out()
    }

    fn inside(&self) -> Inside<'_, B> {
        let r = &self.residual;
        let hashed = (self.blocks.iter().enumerate())
            .flat_map(|(i, a)| {
                let prefix = format!("block{i}");
                let mut layers = self.maps.hashed_layers(&a.maps, &prefix);
                layers.extend(self.core.hashed_layers(&a.core, &prefix));
                layers
            })
            .collect();
        let sites = || {
            (self.blocks.iter().enumerate())
                .flat_map(|(l, a)| [(format!("block{l}.attn"), &a.attn), (format!("block{l}.ff"), &a.ff)])
                .collect()
        };
        Inside {
            residuals: observe::residual_stream(
                r.shape(),
                r.first(&self.ends),
                self.blocks.iter().map(|a| (r.after(&a.attn), r.after(&a.ff))),
            ),
            hashed,
            variance: self.probes.as_ref(),
            attention: self.attention.sites(self.blocks.iter().map(|a| &a.attention)),
            mixing: r.mixing(sites()),
            depth: r.depth(sites(), &self.ends),
            altup: r.sub_blocks(self.w.blocks.iter().map(|b| [&b.attn, &b.ff]).collect()),
        }
    }
}
