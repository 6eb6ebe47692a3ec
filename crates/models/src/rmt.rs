//! The Residual Matrix Transformer (SPEC §2; RMT paper §2.2, eqs 14-27). Each token's residual
//! is a D_k×D_v matrix X; layers read it by retrieval (r ·₁ X) and write it by storage (w ⊗ x).
//!
//!   X⁰ = Σ_h w_E^(h) ⊗ W_E^(h)[token] (+ Σ_h w_PE^(h) ⊗ W_PE^(h)[position], or ALiBi)
//!   Q, K, V = r_Q ·₁ Norm(X), r_K ·₁ Norm(X), r_V ·₁ Norm(X)         3R retrievals at once
//!   X ← X + Σ_h w_O^(h) ⊗ SHA^(h)(Q, K, V)
//!   X ← X + Σ_h w_FF^(h) ⊗ f_h,  f = core(concat_h(r_FF^(h) ·₁ Norm(X)))
//!   logits = Σ_h W_U^(h) (r_U^(h) ·₁ Norm(X))
//!
//! The feed-forward core is a unit (`ff::FfCore`): the RMT's is W2 · GELU(W1 · x), the
//! hybrid's (`hybrid.rs`) MemoryFormer's memory block. Everything else is this file, once.
//!
//! The backward is the forward read in reverse. A retrieval's input gradient is a storage of
//! its output gradient with the same keys, and a storage's data gradient is a retrieval.

use crate::batch::BatchTensors;
use crate::buckets::HashedLayer;
use crate::config::{Position, Trunk};
use crate::ff::{Dense, FfCore};
use crate::loss::LossHead;
use crate::memory::{values, LOGIT_GRADIENTS};
use crate::observe::{self, Observable, Shape};
use crate::params::{Init, LayoutBuilder, ParamId, ParamLayout, ParamStore};
use crate::probes::{self, Layer, Op, Probes, Quantity};
use crate::train::LanguageModel;
use crate::{ModelConfig, Result, RmtConfig};
use engine::{AttentionDims, Backend, GatherDims, MatmulDims, NormDims, ResidualDims};

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

/// The RMT: the trunk around a dense core.
pub type Rmt<B> = ResidualMatrix<B, RmtConfig>;

impl ResidualMatrixConfig for RmtConfig {
    type Core = Dense;

    fn trunk(&self) -> Trunk {
        RmtConfig::trunk(self)
    }

    fn core(&self, tokens: usize) -> Dense {
        Dense {
            tokens,
            width: self.trunk().width(),
            d_ff: self.d_ff,
            init_std: self.init_std,
            weight_init: self.weight_init,
        }
    }

    fn model(&self) -> ModelConfig {
        ModelConfig::Rmt(self.clone())
    }
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
    wte: T,         // (V, R·D_v)
    w_e: T,         // (R, D_k)
    wpe: Option<T>, // (N, R·D_v) with learned positions
    w_pe: Option<T>,
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
            wte: f(self.wte),
            w_e: f(self.w_e),
            wpe: self.wpe.map(&f),
            w_pe: self.w_pe.map(&f),
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
    let table = Init::Normal { std };
    let mut lb = LayoutBuilder::default();
    let wte = lb.add("wte", &[v, r, dv], false, table);
    let w_e = lb.add("w_e", &[r, dk], true, weight(r, dk, 1.0));
    let (wpe, w_pe) = match c.position {
        Position::Learned => (
            Some(lb.add("wpe", &[c.seq_len, r, dv], false, table)),
            Some(lb.add("w_pe", &[r, dk], true, weight(r, dk, 1.0))),
        ),
        Position::Alibi => (None, None),
    };
    let gain = Init::Constant(1.0);
    let blocks = (0..l)
        .map(|i| Block {
            ln1: lb.add(format!("blocks.{i}.ln1"), &[dk, dv], false, gain),
            r_qkv: lb.add(format!("blocks.{i}.r_qkv"), &[3 * r, dk], true, weight(dk, 3 * r, 1.0)),
            w_o: lb.add(format!("blocks.{i}.w_o"), &[r, dk], true, weight(r, dk, out_scale)),
            ln2: lb.add(format!("blocks.{i}.ln2"), &[dk, dv], false, gain),
            r_ff: lb.add(format!("blocks.{i}.r_ff"), &[r, dk], true, weight(dk, r, 1.0)),
            core: core.declare(&mut lb, &format!("blocks.{i}")),
            w_ff: lb.add(format!("blocks.{i}.w_ff"), &[r, dk], true, weight(r, dk, out_scale)),
        })
        .collect();
    let lnf = lb.add("lnf", &[dk, dv], false, gain);
    let r_u = lb.add("r_u", &[r, dk], true, weight(dk, r, 1.0));
    let w_u_init = match c.zero_unembedding {
        true => Init::Normal { std: 0.0 },
        false => weight(rv, v, 1.0),
    };
    let w_u = lb.add("w_u", &[v, r, dv], false, w_u_init);
    let ids = Weights {
        wte,
        w_e,
        wpe,
        w_pe,
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
    qkv: B::Tensor,       // (BT, 3R·D_v)
    atty: B::Tensor,      // (BT, R·D_v)
    lse: B::Tensor,       // (B, R, T) each row's log-sum-exp of its attention logits
    res_att: B::Tensor,   // (BT, D_k·D_v)
    ln2_stats: B::Tensor,
    xff: B::Tensor,    // (BT, R·D_v) the FF adapters' retrievals
    core: K::Acts<B>,  // the core's
    f: B::Tensor,      // (BT, R·D_v) the core's output, stored with w_FF
    res_ff: B::Tensor, // (BT, D_k·D_v)
}

/// Gradient scratch shared by all blocks.
struct Scratch<B: Backend, K: FfCore> {
    dlogits: B::Tensor,     // (BT, V)
    dresidual: B::Tensor,   // (BT, D_k·D_v)
    dln: B::Tensor,         // (BT, D_k·D_v)
    dvec: B::Tensor,        // (BT, R·D_v): gradients of retrieved or stored vectors
    dqkv: B::Tensor,        // (BT, 3R·D_v)
    delta: B::Tensor,       // (B, R, T) attention's dout·out per row
    core: K::Scratch<B>,    // the core's
    partials: B::Tensor,    // key-gradient partial sums
    stored: B::Tensor,      // (BT, D_k·D_v) a storage alone, or Norm(X), for the variance probes
    probe_stats: B::Tensor, // (BT, 2)
}

/// The probes and their scratch, while probing.
type Probing<'a, B, K> = (&'a Probes<B>, &'a Scratch<B, K>);

/// The position of every row and its buckets, for gathering W_PE like a token table.
struct Positions<B: Backend> {
    rows: B::Index,
    bucket_rows: B::Index,
    bucket_start: B::Index,
}

/// The RMT of SPEC §2 around the feed-forward core `C::Core`: `Rmt` and `Hybrid` are this
/// model with a dense core and with a memory block.
pub struct ResidualMatrix<B: Backend, C: ResidualMatrixConfig> {
    pub cfg: C,
    /// The dims of `cfg` that every residual-matrix model has.
    trunk: Trunk,
    core: C::Core,
    b: usize,
    t: usize,
    store: ParamStore<B>,
    w: Views<B, C>,
    /// Gradient views; None for inference.
    dw: Option<Views<B, C>>,
    etok: B::Tensor,         // (BT, R·D_v) W_E[token]
    epos: Option<B::Tensor>, // (BT, R·D_v) W_PE[position]
    positions: Option<Positions<B>>,
    encoded: B::Tensor, // (BT, D_k·D_v)
    blocks: Vec<BlockActs<B, C::Core>>,
    /// The core's forward scratch, shared by every block.
    shared: <C::Core as FfCore>::Shared<B>,
    lnf_stats: B::Tensor,
    yu: B::Tensor, // (BT, R·D_v) the unembedding's retrievals
    head: LossHead<B>,
    /// Backward and probe scratch, and the probes; None for inference.
    s: Option<Scratch<B, C::Core>>,
    probes: Option<Probes<B>>,
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
        // Each buffer named with the settings it grows with, for the memory estimate's messages.
        let z = |what: &str, dims: &[usize]| be.zeros(what, values(dims));
        let stats = "the norm statistics (batch × seq_len)";
        let res = "the residual matrices (batch × seq_len × d_k × d_v)";
        let vectors = |what: &str| format!("{what} (batch × seq_len × rank × d_v)");
        let blocks = (0..l)
            .map(|_| {
                Ok(BlockActs {
                    ln1_stats: z(stats, &[bt, 2])?,
                    qkv: z("qkv (batch × seq_len × 3·rank·d_v)", &[bt, 3, r, dv])?,
                    atty: z(&vectors("the attention output"), &[bt, r, dv])?,
                    lse: z("the attention log-sum-exps (batch × rank × seq_len)", &[b, r, t])?,
                    res_att: z(res, &[bt, dk, dv])?,
                    ln2_stats: z(stats, &[bt, 2])?,
                    xff: z(&vectors("the FF adapters"), &[bt, r, dv])?,
                    core: core.acts(be)?,
                    f: z(&vectors("the FF output"), &[bt, r, dv])?,
                    res_ff: z(res, &[bt, dk, dv])?,
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
                dlogits: z(LOGIT_GRADIENTS, &[bt, v])?,
                dresidual: z("the residual gradient (batch × seq_len × d_k × d_v)", &[bt, dk, dv])?,
                dln: z("the norm gradient (batch × seq_len × d_k × d_v)", &[bt, dk, dv])?,
                dvec: z(&vectors("the vector gradient"), &[bt, r, dv])?,
                dqkv: z("the qkv gradient (batch × seq_len × 3·rank·d_v)", &[bt, 3, r, dv])?,
                delta: z("attention's dout·out per row (batch × rank × seq_len)", &[b, r, t])?,
                core: core.scratch(be)?,
                partials: z(
                    "the key-gradient partial sums (batch × seq_len × rank × d_k)",
                    &[widest.key_grad_scratch()],
                )?,
                stored: z("the probe scratch (batch × seq_len × d_k × d_v)", &[bt, dk, dv])?,
                probe_stats: z("the probe statistics (batch × seq_len)", &[bt, 2])?,
            })
        };
        let s = match store.trainable() {
            true => Some(scratch()?),
            false => None,
        };
        let positions = match trunk.position {
            Position::Learned => {
                let index = |what: &str, len: usize| be.index(what, len);
                let p = Positions {
                    rows: index("the positions (batch × seq_len)", bt)?,
                    bucket_rows: index("the position buckets (batch × seq_len)", bt)?,
                    bucket_start: index("the position bucket starts (seq_len)", trunk.seq_len.saturating_add(1))?,
                };
                // Nothing to compute for a backend that only counts, whatever the batch.
                if be.holds_values() {
                    let rows: Vec<u32> = (0..bt).map(|i| (i % t) as u32).collect();
                    let buckets = engine::TokenBuckets::new(&rows, trunk.seq_len);
                    be.write_index(&p.rows, &rows);
                    be.write_index(&p.bucket_rows, &buckets.rows);
                    be.write_index(&p.bucket_start, &buckets.start);
                }
                Some(p)
            }
            Position::Alibi => None,
        };
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
        Ok(Self {
            b,
            t,
            store,
            w,
            dw,
            etok: z(&vectors("the token embeddings"), &[bt, r, dv])?,
            epos: match trunk.position {
                Position::Learned => Some(z(&vectors("the position embeddings"), &[bt, r, dv])?),
                Position::Alibi => None,
            },
            positions,
            encoded: z(res, &[bt, dk, dv])?,
            blocks,
            shared: core.shared(be)?,
            lnf_stats: z(stats, &[bt, 2])?,
            yu: z(&vectors("the unembedding retrievals"), &[bt, r, dv])?,
            head: LossHead::new(be, bt, v, trunk.z_loss)?,
            s,
            probes,
            cfg,
            trunk,
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

    fn attention(&self, layer: usize) -> AttentionDims {
        let mut scale = 1.0 / (self.trunk.d_v as f32).sqrt();
        if self.trunk.attn_layer_scale {
            scale /= (layer + 1) as f32;
        }
        AttentionDims {
            b: self.b,
            t: self.t,
            h: self.trunk.rank,
            dh: self.trunk.d_v,
            scale,
            alibi: self.trunk.position == Position::Alibi,
        }
    }

    /// A gather from a table of `rows` rows of R·D_v values, one row per token of the batch.
    fn gather(&self, rows: usize) -> GatherDims {
        GatherDims {
            rows: self.b * self.t,
            c: self.trunk.rank * self.trunk.d_v,
            v: rows,
        }
    }

    fn residual_in(&self, l: usize) -> &B::Tensor {
        if l == 0 {
            &self.encoded
        } else {
            &self.blocks[l - 1].res_ff
        }
    }

    /// Storage with the residual add fused; with probes on, also records σ² of the storage
    /// alone (out − base) and of its input vectors.
    #[allow(clippy::too_many_arguments)]
    fn store_probed(&self, be: &B, site: usize, out: &B::Tensor, base: &B::Tensor, keys: &B::Tensor, data: &B::Tensor) {
        be.store(out, Some(base), keys, data, self.rm(self.trunk.rank));
        if let Some((probes, s)) = self.probing() {
            be.fill(&s.stored, 0.0);
            be.store(&s.stored, None, keys, data, self.rm(self.trunk.rank));
            probes.record(be, site, Quantity::In, data);
            probes.record(be, site, Quantity::Out, &s.stored);
        }
    }

    /// The probes and their scratch while probing is on; None otherwise and for inference.
    fn probing(&self) -> Option<Probing<'_, B, C::Core>> {
        match (&self.probes, &self.s) {
            (Some(p), Some(s)) if p.on.get() => Some((p, s)),
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
        probes: &Probes<B>,
        site: usize,
        ddata: &B::Tensor,
        dkeys: &B::Tensor,
        keys: &B::Tensor,
        data: &B::Tensor,
    ) {
        let d = self.rm(self.trunk.rank);
        be.retrieve(ddata, &s.dresidual, keys, d);
        be.key_grad(dkeys, &s.partials, data, &s.dresidual, d);
        probes.record(be, site, Quantity::GradOut, &s.dresidual);
        probes.record(be, site, Quantity::GradIn, ddata);
    }

    /// `y = keys ·₁ Norm(x)`, normalising as it reads; with probes on, also records σ² of
    /// Norm(x) and of y.
    fn retrieve_from_norm(&self, be: &B, site: Option<usize>, y: &B::Tensor, keys: &B::Tensor, n: Normed<'_, B>) {
        let d = self.rm(be.len(keys) / self.trunk.d_k);
        be.norm_stats(n.stats, n.x, self.norm());
        be.retrieve_normed(y, n.x, n.stats, n.gain, keys, d);
        if let (Some(site), Some((probes, s))) = (site, self.probing()) {
            be.norm_forward(&s.stored, &s.probe_stats, n.x, n.gain, self.norm());
            probes.record(be, site, Quantity::In, &s.stored);
            probes.record(be, site, Quantity::Out, y);
        }
    }

    /// Backward of `retrieve_from_norm`: dNorm = Σ keys ⊗ dy, the key gradient against Norm(x)
    /// read on the fly, then the norm's backward into dresidual and the gain's gradient.
    #[allow(clippy::too_many_arguments)]
    fn retrieve_from_norm_backward(
        &self,
        be: &B,
        s: &Scratch<B, C::Core>,
        probes: &Probes<B>,
        site: Option<usize>,
        dkeys: &B::Tensor,
        dgain: &B::Tensor,
        dy: &B::Tensor,
        keys: &B::Tensor,
        n: Normed<'_, B>,
    ) {
        let d = self.rm(be.len(keys) / self.trunk.d_k);
        be.fill(&s.dln, 0.0);
        be.store(&s.dln, None, keys, dy, d);
        be.key_grad_normed(dkeys, &s.partials, dy, n.x, n.stats, n.gain, d);
        if let Some(site) = site {
            probes.record(be, site, Quantity::GradOut, dy);
            probes.record(be, site, Quantity::GradIn, &s.dln);
        }
        be.norm_backward(&s.dresidual, dgain, &s.dln, n.x, n.gain, n.stats, self.norm());
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

    fn forward(&self, be: &B, batch: &BatchTensors<B>) {
        let (bt, v, r) = (self.b * self.t, self.trunk.vocab, self.trunk.rank);
        let rv = r * self.trunk.d_v;
        let w = &self.w;
        // X⁰ = Σ_h w_E ⊗ W_E[token] (+ Σ_h w_PE ⊗ W_PE[position])
        be.gather_forward(&self.etok, &batch.tokens, &w.wte, self.gather(v));
        be.fill(&self.encoded, 0.0);
        be.store(&self.encoded, None, &w.w_e, &self.etok, self.rm(r));
        if let (Some(epos), Some(pos), Some(wpe), Some(w_pe)) = (&self.epos, &self.positions, &w.wpe, &w.w_pe) {
            be.gather_forward(epos, &pos.rows, wpe, self.gather(self.trunk.seq_len));
            be.store(&self.encoded, None, w_pe, epos, self.rm(r));
        }
        for (l, (a, q)) in self.blocks.iter().zip(&w.blocks).enumerate() {
            let x = self.residual_in(l);
            let site = |layer, op| Some(probes::site_index(l, layer, op));
            // Q, K, V = r_QKV ·₁ Norm(X); X ← X + Σ_h w_O ⊗ SHA_h
            let n1 = Normed {
                x,
                stats: &a.ln1_stats,
                gain: &q.ln1,
            };
            self.retrieve_from_norm(be, site(Layer::Attn, Op::Retrieval), &a.qkv, &q.r_qkv, n1);
            be.attention_forward(&a.atty, &a.lse, &a.qkv, &batch.doc_start, self.attention(l));
            let at = probes::site_index(l, Layer::Attn, Op::Storage);
            self.store_probed(be, at, &a.res_att, x, &q.w_o, &a.atty);
            // x_FF = r_FF ·₁ Norm(X); f = core(x_FF); X ← X + Σ_h w_FF ⊗ f_h
            let n2 = Normed {
                x: &a.res_att,
                stats: &a.ln2_stats,
                gain: &q.ln2,
            };
            self.retrieve_from_norm(be, site(Layer::Ff, Op::Retrieval), &a.xff, &q.r_ff, n2);
            self.core.forward(be, &a.f, &a.xff, &a.core, &self.shared, &q.core);
            if let (Some((probes, _)), Some(maps)) = (self.probing(), self.core.dense_maps(&a.xff, &a.f, &a.core)) {
                for (op, (input, output)) in [Op::W1, Op::W2].into_iter().zip(maps) {
                    let at = probes::core_site_index(self.trunk.n_layers, l, op);
                    probes.record(be, at, Quantity::In, input);
                    probes.record(be, at, Quantity::Out, output);
                }
            }
            let at = probes::site_index(l, Layer::Ff, Op::Storage);
            self.store_probed(be, at, &a.res_ff, &a.res_att, &q.w_ff, &a.f);
        }
        // logits = Σ_h W_U^(h) (r_U^(h) ·₁ Norm(X))
        let last = self.residual_in(self.trunk.n_layers);
        let nf = Normed {
            x: last,
            stats: &self.lnf_stats,
            gain: &w.lnf,
        };
        self.retrieve_from_norm(be, None, &self.yu, &w.r_u, nf);
        be.matmul(
            &self.head.logits,
            &self.yu,
            &w.w_u,
            MatmulDims::new(bt, v, rv).trans_b(),
        );
        self.head.forward(be, batch);
    }

    fn backward(&self, be: &B, batch: &BatchTensors<B>) {
        let (bt, v, r) = (self.b * self.t, self.trunk.vocab, self.trunk.rank);
        let rv = r * self.trunk.d_v;
        // An inference model has no gradients to fill.
        let (w, Some(dw), Some(s), Some(probes)) = (&self.w, &self.dw, &self.s, &self.probes) else {
            return;
        };
        self.head.backward(be, &s.dlogits, batch);
        be.matmul(&dw.w_u, &s.dlogits, &self.yu, MatmulDims::new(v, rv, bt).trans_a());
        be.matmul(&s.dvec, &s.dlogits, &w.w_u, MatmulDims::new(bt, rv, v));
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
            let at = probes::site_index(l, Layer::Ff, Op::Storage);
            self.store_backward(be, s, probes, at, &s.dvec, &dq.w_ff, &q.w_ff, &a.f);
            // The core's input gradient overwrites its output gradient in dvec.
            let core_site = |op| probes::core_site_index(self.trunk.n_layers, l, op);
            let dense = self.core.has_dense_maps();
            if dense {
                probes.record(be, core_site(Op::W2), Quantity::GradOut, &s.dvec);
            }
            self.core
                .backward(be, &s.core, &s.dvec, &dq.core, &s.dvec, &a.xff, &a.core, &q.core);
            if let (true, Some([d_w1_out, d_w2_in])) = (dense, self.core.dense_grads(&s.core)) {
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
            let at = probes::site_index(l, Layer::Attn, Op::Storage);
            self.store_backward(be, s, probes, at, &s.dvec, &dq.w_o, &q.w_o, &a.atty);
            be.attention_backward(
                &s.dqkv,
                &s.delta,
                &s.dvec,
                &a.atty,
                &a.qkv,
                &a.lse,
                &batch.doc_start,
                self.attention(l),
            );
            let n1 = Normed {
                x: self.residual_in(l),
                stats: &a.ln1_stats,
                gain: &q.ln1,
            };
            let at = site(Layer::Attn, Op::Retrieval);
            self.retrieve_from_norm_backward(be, s, probes, at, &dq.r_qkv, &dq.ln1, &s.dqkv, &q.r_qkv, n1);
        }
        // Embedding: the gathered rows' gradients are retrievals of dX⁰ with the storage keys.
        be.retrieve(&s.dvec, &s.dresidual, &w.w_e, self.rm(r));
        be.key_grad(&dw.w_e, &s.partials, &self.etok, &s.dresidual, self.rm(r));
        be.gather_backward(
            &dw.wte,
            &s.dvec,
            &batch.bucket_rows,
            &batch.bucket_start,
            self.gather(v),
        );
        if let (Some(epos), Some(pos), Some(dwpe), Some(w_pe), Some(dw_pe)) =
            (&self.epos, &self.positions, &dw.wpe, &w.w_pe, &dw.w_pe)
        {
            be.retrieve(&s.dvec, &s.dresidual, w_pe, self.rm(r));
            be.key_grad(dw_pe, &s.partials, epos, &s.dresidual, self.rm(r));
            // Rows of the position table past T have no rows in their buckets: their gradient is 0.
            be.gather_backward(
                dwpe,
                &s.dvec,
                &pos.bucket_rows,
                &pos.bucket_start,
                self.gather(self.trunk.seq_len),
            );
        }
    }

    fn head(&self) -> &LossHead<B> {
        &self.head
    }

    fn probes(&self) -> Option<&Probes<B>> {
        self.probes.as_ref()
    }

    fn observables(&self) -> Vec<Observable<'_, B>> {
        let shape = Shape::Matrix {
            rows: self.trunk.d_k,
            cols: self.trunk.d_v,
        };
        observe::residual_stream(
            shape,
            &self.encoded,
            self.blocks.iter().map(|a| (&a.res_att, &a.res_ff)),
        )
    }

    fn hashed_layers(&self) -> Vec<HashedLayer<'_, B>> {
        self.blocks
            .iter()
            .enumerate()
            .flat_map(|(i, a)| self.core.hashed_layers(&a.core, &format!("block{i}")))
            .collect()
    }
}
