//! MemoryFormer (SPEC §3; MemoryFormer paper §3-4): the transformer's fully-connected layers
//! replaced by Memory Layers, ML(x) = Σ_k p(z_k) · T_k[hash(z_k)] + b.
//!
//!   X⁰ = W_E[token] + W_PE[position]                      dense
//!   Q, K, V = ML_QKV(Norm(X))                              one hash serves all three
//!   X ← X + MHA(Q, K, V)                                   no output projection
//!   X ← X + ML2(Norm(ML1(Norm(X))))                        ML1 expands to (τ+2)·K; no activation
//!   logits = W_U · Norm(X)                                 dense
//!
//! ML_Q, ML_K and ML_V read the same input, so they are one Memory Layer whose tables hold
//! [Q | K | V] rows: one hash, one gather, and exactly the packed qkv the attention op reads.
//! The tables learn at `table_lr_mult` times the learning rate.

use crate::batch::BatchTensors;
use crate::buckets::HashedLayer;
use crate::loss::LossHead;
use crate::memory::{self, Purpose};
use crate::params::{Init, LayoutBuilder, ParamId, ParamLayout, ParamStore};
use crate::train::LanguageModel;
use crate::{MemoryFormerConfig, ModelConfig, Result};
use engine::{AttentionDims, Backend, EmbeddingDims, MatmulDims, MemoryDims, NormDims};

/// One Memory Layer's parameters.
#[derive(Clone, Copy, Debug)]
struct Memory<T> {
    tables: T, // (K, 2^τ, d_out)
    bias: T,   // (d_out)
}

#[derive(Clone, Debug)]
struct Block<T> {
    ln1: T,
    qkv: Memory<T>, // d → 3d
    ln2: T,
    ml1: Memory<T>, // d → (τ+2)K
    ln3: T,         // ((τ+2)K)
    ml2: Memory<T>, // (τ+2)K → d
}

#[derive(Clone, Debug)]
struct Weights<T> {
    wte: T, // (V, d)
    wpe: T, // (N, d)
    blocks: Vec<Block<T>>,
    lnf: T,
    w_u: T, // (V, d)
}

impl<T: Copy> Memory<T> {
    fn map<U>(&self, f: &impl Fn(T) -> U) -> Memory<U> {
        Memory {
            tables: f(self.tables),
            bias: f(self.bias),
        }
    }
}

impl Weights<ParamId> {
    fn map<T>(&self, f: impl Fn(ParamId) -> T) -> Weights<T> {
        Weights {
            wte: f(self.wte),
            wpe: f(self.wpe),
            blocks: self
                .blocks
                .iter()
                .map(|b| Block {
                    ln1: f(b.ln1),
                    qkv: b.qkv.map(&f),
                    ln2: f(b.ln2),
                    ml1: b.ml1.map(&f),
                    ln3: f(b.ln3),
                    ml2: b.ml2.map(&f),
                })
                .collect(),
            lnf: f(self.lnf),
            w_u: f(self.w_u),
        }
    }
}

/// The three Memory Layers of a block: (name, input width, τ, output width).
fn layer_shapes(cfg: &MemoryFormerConfig) -> [(&'static str, usize, usize, usize); 3] {
    let d = cfg.d_model;
    [
        ("qkv", d, cfg.tau, 3 * d),
        ("ml1", d, cfg.tau, cfg.d_hidden()),
        ("ml2", cfg.d_hidden(), cfg.tau + 2, d),
    ]
}

fn declare(cfg: &MemoryFormerConfig) -> (ParamLayout, Weights<ParamId>) {
    let (d, v, k) = (cfg.d_model, cfg.vocab, cfg.chunks());
    let mut lb = LayoutBuilder::default();
    let table = Init::Normal { std: cfg.table_std };
    let bias = Init::Normal { std: cfg.bias_std };
    let gain = Init::Constant(1.0);
    let embed = Init::Normal { std: cfg.embed_std };
    let wte = lb.add("wte", &[v, d], false, embed);
    let wpe = lb.add("wpe", &[cfg.seq_len, d], false, embed);
    let memory = |lb: &mut LayoutBuilder, name: String, tau: usize, d_out: usize| Memory {
        tables: lb.add_boosted(
            format!("{name}.tables"),
            &[k, 1 << tau, d_out],
            cfg.table_lr_mult,
            table,
        ),
        bias: lb.add(format!("{name}.bias"), &[d_out], false, bias),
    };
    let [(_, _, tq, dq), (_, _, t1, d1), (_, _, t2, d2)] = layer_shapes(cfg);
    let blocks = (0..cfg.n_layers)
        .map(|i| Block {
            ln1: lb.add(format!("blocks.{i}.ln1"), &[d], false, gain),
            qkv: memory(&mut lb, format!("blocks.{i}.qkv"), tq, dq),
            ln2: lb.add(format!("blocks.{i}.ln2"), &[d], false, gain),
            ml1: memory(&mut lb, format!("blocks.{i}.ml1"), t1, d1),
            ln3: lb.add(format!("blocks.{i}.ln3"), &[cfg.d_hidden()], false, gain),
            ml2: memory(&mut lb, format!("blocks.{i}.ml2"), t2, d2),
        })
        .collect();
    let lnf = lb.add("lnf", &[d], false, gain);
    // The head starts at zero: the first loss is exactly ln V.
    let w_u = lb.add("w_u", &[v, d], false, Init::Normal { std: 0.0 });
    let ids = Weights {
        wte,
        wpe,
        blocks,
        lnf,
        w_u,
    };
    (lb.build(), ids)
}

/// The parameter layout of the model `cfg` describes, without building it.
pub fn layout(cfg: &MemoryFormerConfig) -> ParamLayout {
    declare(cfg).0
}

/// What one Memory Layer keeps from the forward for the backward.
struct Hashed<B: Backend> {
    codes: B::Index,  // (BT, K)
    p: B::Tensor,     // (BT, K)
    rows: B::Index,   // (K, BT)
    starts: B::Index, // (K, 2^τ + 1)
    dims: MemoryDims,
}

impl<B: Backend> Hashed<B> {
    fn new(be: &B, dims: MemoryDims) -> engine::Result<Self> {
        Ok(Self {
            codes: be.index("hash codes", dims.tokens * dims.k)?,
            p: be.zeros("hash weights", dims.tokens * dims.k)?,
            rows: be.index("bucket rows", dims.k * dims.tokens)?,
            starts: be.index("bucket starts", dims.starts_len())?,
            dims,
        })
    }
}

struct BlockActs<B: Backend> {
    ln1: B::Tensor,
    ln1_stats: B::Tensor,
    hq: Hashed<B>,
    qkv: B::Tensor,  // (BT, 3d)
    atty: B::Tensor, // (BT, d)
    att: B::Tensor,  // (B, H, T, T)
    res_att: B::Tensor,
    ln2: B::Tensor,
    ln2_stats: B::Tensor,
    h1: Hashed<B>,
    hid: B::Tensor, // (BT, (τ+2)K) ML1's output
    ln3: B::Tensor,
    ln3_stats: B::Tensor,
    h2: Hashed<B>,
    out: B::Tensor, // (BT, d) ML2's output
    res_ff: B::Tensor,
}

struct Scratch<B: Backend> {
    dlogits: B::Tensor,
    dresidual: B::Tensor, // (BT, d)
    dln: B::Tensor,       // (BT, d)
    dqkv: B::Tensor,      // (BT, 3d)
    dpre: B::Tensor,
    dhid: B::Tensor, // (BT, (τ+2)K)
    dln3: B::Tensor, // (BT, (τ+2)K)
}

pub struct MemoryFormer<B: Backend> {
    pub cfg: MemoryFormerConfig,
    b: usize,
    t: usize,
    store: ParamStore<B>,
    w: Weights<B::Tensor>,
    /// Gradient views; None for inference.
    dw: Option<Weights<B::Tensor>>,
    encoded: B::Tensor,
    blocks: Vec<BlockActs<B>>,
    lnf: B::Tensor,
    lnf_stats: B::Tensor,
    /// The sort's scratch, sized for the widest layer; each sort uses its first K·2^τ values.
    cursor: B::Index,
    head: LossHead<B>,
    /// None for inference.
    s: Option<Scratch<B>>,
}

impl<B: Backend> MemoryFormer<B> {
    /// Builds the model for batches of `b` sequences of `t` ≤ N tokens, initialised from `seed`.
    pub fn new(be: &B, cfg: MemoryFormerConfig, b: usize, t: usize, seed: u64) -> Result<Self> {
        Self::build(be, cfg, b, t, Some(seed))
    }

    /// Forward only: parameters (all 0 until written) and activations, hash codes and buckets
    /// included, but no gradients or backward scratch. `backward` does nothing on it.
    pub fn inference(be: &B, cfg: MemoryFormerConfig, b: usize, t: usize) -> Result<Self> {
        Self::build(be, cfg, b, t, None)
    }

    fn build(be: &B, cfg: MemoryFormerConfig, b: usize, t: usize, seed: Option<u64>) -> Result<Self> {
        // Validates and checks every size below, so no product here can overflow.
        let purpose = seed.map_or(Purpose::Infer, |_| Purpose::Train);
        memory::estimate(&ModelConfig::MemoryFormer(cfg.clone()), b, t, purpose)?;
        let (d, v, h) = (cfg.d_model, cfg.vocab, cfg.n_heads);
        let (layout, ids) = declare(&cfg);
        let store = match seed {
            Some(seed) => ParamStore::new(be, layout, seed)?,
            None => ParamStore::inference(be, layout)?,
        };
        let w = ids.map(|id| store.param(be, id));
        let dw = store.trainable().then(|| ids.map(|id| store.grad(be, id)));
        let bt = b * t;
        let z = |what: &str, n: usize| be.zeros(what, n);
        let dims = layer_shapes(&cfg).map(|(_, d_in, tau, d_out)| MemoryDims {
            tokens: bt,
            d_in,
            tau,
            k: cfg.chunks(),
            d_out,
            temperature: cfg.temperature,
            l1: cfg.l1_weight,
        });
        let dh = cfg.d_hidden();
        let blocks = (0..cfg.n_layers)
            .map(|_| {
                Ok(BlockActs {
                    ln1: z("ln1", bt * d)?,
                    ln1_stats: z("ln1 stats", bt * 2)?,
                    hq: Hashed::new(be, dims[0])?,
                    qkv: z("qkv", bt * 3 * d)?,
                    atty: z("attention output", bt * d)?,
                    att: z("attention probabilities", b * h * t * t)?,
                    res_att: z("residual", bt * d)?,
                    ln2: z("ln2", bt * d)?,
                    ln2_stats: z("ln2 stats", bt * 2)?,
                    h1: Hashed::new(be, dims[1])?,
                    hid: z("ml1 output", bt * dh)?,
                    ln3: z("ln3", bt * dh)?,
                    ln3_stats: z("ln3 stats", bt * 2)?,
                    h2: Hashed::new(be, dims[2])?,
                    out: z("ml2 output", bt * d)?,
                    res_ff: z("residual", bt * d)?,
                })
            })
            .collect::<engine::Result<Vec<_>>>()?;
        let widest = dims.iter().map(|d| d.k * d.buckets()).max().unwrap_or(1);
        let scratch = || -> engine::Result<_> {
            Ok(Scratch {
                dlogits: z("logit gradients", bt * v)?,
                dresidual: z("residual gradient", bt * d)?,
                dln: z("norm gradient", bt * d)?,
                dqkv: z("qkv gradient", bt * 3 * d)?,
                dpre: z("attention logit gradient", b * h * t * t)?,
                dhid: z("ml1 gradient", bt * dh)?,
                dln3: z("ln3 gradient", bt * dh)?,
            })
        };
        let s = match store.trainable() {
            true => Some(scratch()?),
            false => None,
        };
        Ok(Self {
            b,
            t,
            store,
            w,
            dw,
            encoded: z("embeddings", bt * d)?,
            blocks,
            lnf: z("final norm", bt * d)?,
            lnf_stats: z("final norm stats", bt * 2)?,
            cursor: be.index("bucket cursor", widest)?,
            head: LossHead::new(be, bt, v, cfg.z_loss)?,
            s,
            cfg,
        })
    }

    fn norm(&self, c: usize) -> NormDims {
        NormDims {
            rows: self.b * self.t,
            c,
            kind: self.cfg.norm.into(),
            eps: self.cfg.norm_eps,
        }
    }

    fn attention(&self, layer: usize) -> AttentionDims {
        let dh = self.cfg.head_dim();
        let mut scale = 1.0 / (dh as f32).sqrt();
        if self.cfg.attn_layer_scale {
            scale /= (layer + 1) as f32;
        }
        AttentionDims {
            b: self.b,
            t: self.t,
            h: self.cfg.n_heads,
            dh,
            scale,
            alibi: false,
        }
    }

    fn residual_in(&self, l: usize) -> &B::Tensor {
        if l == 0 {
            &self.encoded
        } else {
            &self.blocks[l - 1].res_ff
        }
    }

    /// y = ML(x): hash, group rows by bucket (for the backward and the statistics), gather.
    fn memory(&self, be: &B, y: &B::Tensor, x: &B::Tensor, h: &Hashed<B>, m: &Memory<B::Tensor>) {
        be.memory_hash(&h.codes, &h.p, x, h.dims);
        be.memory_bucket(&h.rows, &h.starts, &self.cursor, &h.codes, h.dims);
        be.memory_forward(y, &h.codes, &h.p, &m.tables, &m.bias, h.dims);
    }

    #[allow(clippy::too_many_arguments)]
    fn memory_backward(
        &self,
        be: &B,
        dx: &B::Tensor,
        dm: &Memory<B::Tensor>,
        dy: &B::Tensor,
        x: &B::Tensor,
        h: &Hashed<B>,
        m: &Memory<B::Tensor>,
    ) {
        be.memory_backward(
            dx, &dm.tables, &dm.bias, dy, x, &h.codes, &h.p, &h.rows, &h.starts, &m.tables, h.dims,
        );
    }
}

impl<B: Backend> LanguageModel<B> for MemoryFormer<B> {
    fn store(&self) -> &ParamStore<B> {
        &self.store
    }

    fn batch_shape(&self) -> (usize, usize) {
        (self.b, self.t)
    }

    fn vocab(&self) -> usize {
        self.cfg.vocab
    }

    fn forward(&self, be: &B, batch: &BatchTensors<B>) {
        let (bt, d, v, dh) = (self.b * self.t, self.cfg.d_model, self.cfg.vocab, self.cfg.d_hidden());
        let w = &self.w;
        let wpe = be.view(&w.wpe, 0, self.t * d);
        let emb = EmbeddingDims { bt, t: self.t, c: d, v };
        be.embedding_forward(&self.encoded, &batch.tokens, &w.wte, &wpe, emb);
        for (l, (a, q)) in self.blocks.iter().zip(&w.blocks).enumerate() {
            let x = self.residual_in(l);
            // X ← X + MHA(ML_QKV(Norm(X)))
            be.norm_forward(&a.ln1, &a.ln1_stats, x, &q.ln1, self.norm(d));
            self.memory(be, &a.qkv, &a.ln1, &a.hq, &q.qkv);
            be.attention_forward(&a.atty, &a.att, &a.qkv, &batch.doc_start, self.attention(l));
            be.add(&a.res_att, x, &a.atty);
            // X ← X + ML2(Norm(ML1(Norm(X))))
            be.norm_forward(&a.ln2, &a.ln2_stats, &a.res_att, &q.ln2, self.norm(d));
            self.memory(be, &a.hid, &a.ln2, &a.h1, &q.ml1);
            be.norm_forward(&a.ln3, &a.ln3_stats, &a.hid, &q.ln3, self.norm(dh));
            self.memory(be, &a.out, &a.ln3, &a.h2, &q.ml2);
            be.add(&a.res_ff, &a.res_att, &a.out);
        }
        let last = self.residual_in(self.cfg.n_layers);
        be.norm_forward(&self.lnf, &self.lnf_stats, last, &w.lnf, self.norm(d));
        be.matmul(
            &self.head.logits,
            &self.lnf,
            &w.w_u,
            MatmulDims::new(bt, v, d).trans_b(),
        );
        self.head.forward(be, batch);
    }

    fn backward(&self, be: &B, batch: &BatchTensors<B>) {
        let (bt, d, v, dh) = (self.b * self.t, self.cfg.d_model, self.cfg.vocab, self.cfg.d_hidden());
        // An inference model has no gradients to fill.
        let (w, Some(dw), Some(s)) = (&self.w, &self.dw, &self.s) else {
            return;
        };
        self.head.backward(be, &s.dlogits, batch);
        be.matmul(&dw.w_u, &s.dlogits, &self.lnf, MatmulDims::new(v, d, bt).trans_a());
        be.matmul(&s.dln, &s.dlogits, &w.w_u, MatmulDims::new(bt, d, v));
        be.fill(&s.dresidual, 0.0);
        let last = self.residual_in(self.cfg.n_layers);
        be.norm_backward(
            &s.dresidual,
            &dw.lnf,
            &s.dln,
            last,
            &w.lnf,
            &self.lnf_stats,
            self.norm(d),
        );
        for l in (0..self.cfg.n_layers).rev() {
            let (a, q, dq) = (&self.blocks[l], &w.blocks[l], &dw.blocks[l]);
            // Memory Block: dresidual flows through the add into ML2's output.
            self.memory_backward(be, &s.dln3, &dq.ml2, &s.dresidual, &a.ln3, &a.h2, &q.ml2);
            be.fill(&s.dhid, 0.0);
            be.norm_backward(&s.dhid, &dq.ln3, &s.dln3, &a.hid, &q.ln3, &a.ln3_stats, self.norm(dh));
            self.memory_backward(be, &s.dln, &dq.ml1, &s.dhid, &a.ln2, &a.h1, &q.ml1);
            be.norm_backward(
                &s.dresidual,
                &dq.ln2,
                &s.dln,
                &a.res_att,
                &q.ln2,
                &a.ln2_stats,
                self.norm(d),
            );
            // Attention, straight from the residual: there is no output projection.
            be.attention_backward(&s.dqkv, &s.dpre, &s.dresidual, &a.qkv, &a.att, &batch.doc_start, self.attention(l));
            self.memory_backward(be, &s.dln, &dq.qkv, &s.dqkv, &a.ln1, &a.hq, &q.qkv);
            let x = self.residual_in(l);
            be.norm_backward(&s.dresidual, &dq.ln1, &s.dln, x, &q.ln1, &a.ln1_stats, self.norm(d));
        }
        let dwpe = be.view(&dw.wpe, 0, self.t * d);
        let emb = EmbeddingDims { bt, t: self.t, c: d, v };
        be.embedding_backward(
            &dw.wte,
            &dwpe,
            &s.dresidual,
            &batch.bucket_rows,
            &batch.bucket_start,
            emb,
        );
    }

    fn head(&self) -> &LossHead<B> {
        &self.head
    }

    fn hashed_layers(&self) -> Vec<HashedLayer<'_, B>> {
        self.blocks
            .iter()
            .enumerate()
            .flat_map(|(i, a)| {
                [("qkv", &a.hq), ("ml1", &a.h1), ("ml2", &a.h2)].map(|(name, h)| HashedLayer {
                    name: format!("block{i}.{name}"),
                    tau: h.dims.tau,
                    tables: h.dims.k,
                    starts: &h.starts,
                })
            })
            .collect()
    }
}
