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
use crate::ff::FfCore;
use crate::loss::LossHead;
use crate::memory::{values, LOGIT_GRADIENTS};
use crate::memory_layer::{
    layer_dims, Hashed, MemoryBlock, MemoryBlockActs, MemoryBlockParams, MemoryBlockScratch, MemoryParams,
};
use crate::observe::{self, Observable, Shape};
use crate::params::{Init, LayoutBuilder, ParamId, ParamLayout, ParamStore};
use crate::train::LanguageModel;
use crate::{MemoryFormerConfig, ModelConfig, Result};
use engine::{AttentionDims, Backend, EmbeddingDims, MatmulDims, MemoryDims, NormDims};

#[derive(Clone, Debug)]
struct Block<T> {
    ln1: T,
    qkv: MemoryParams<T>, // d → 3d
    ln2: T,
    ff: MemoryBlockParams<T>,
}

#[derive(Clone, Debug)]
struct Weights<T> {
    wte: T, // (V, d)
    wpe: T, // (N, d)
    blocks: Vec<Block<T>>,
    lnf: T,
    w_u: T, // (V, d)
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
                    ff: b.ff.map(&f),
                })
                .collect(),
            lnf: f(self.lnf),
            w_u: f(self.w_u),
        }
    }
}

/// The Memory Layer ML_QKV (d → 3d) and the memory block over `tokens` rows.
fn units(cfg: &MemoryFormerConfig, tokens: usize) -> (MemoryDims, MemoryBlock) {
    let (d, h) = (cfg.d_model, cfg.hashing());
    let qkv = layer_dims(&h, tokens, d, cfg.chunks(), cfg.tau, 3 * d);
    (qkv, MemoryBlock::new(h, tokens, d, cfg.norm.into(), cfg.norm_eps))
}

fn declare(cfg: &MemoryFormerConfig) -> (ParamLayout, Weights<ParamId>) {
    let (d, v) = (cfg.d_model, cfg.vocab);
    // The layout does not depend on the batch.
    let (qkv, ff) = units(cfg, 0);
    let mut lb = LayoutBuilder::default();
    let gain = Init::Constant(1.0);
    let embed = Init::Normal { std: cfg.embed_std };
    let wte = lb.add("wte", &[v, d], false, embed);
    let wpe = lb.add("wpe", &[cfg.seq_len, d], false, embed);
    let blocks = (0..cfg.n_layers)
        .map(|i| Block {
            ln1: lb.add(format!("blocks.{i}.ln1"), &[d], false, gain),
            qkv: MemoryParams::declare(&mut lb, &format!("blocks.{i}.qkv"), &cfg.hashing(), qkv),
            ln2: lb.add(format!("blocks.{i}.ln2"), &[d], false, gain),
            ff: ff.declare(&mut lb, &format!("blocks.{i}")),
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

struct BlockActs<B: Backend> {
    ln1: B::Tensor,
    ln1_stats: B::Tensor,
    hq: Hashed<B>,
    qkv: B::Tensor,  // (BT, 3d)
    atty: B::Tensor, // (BT, d)
    lse: B::Tensor,  // (B, H, T) each row's log-sum-exp of its attention logits
    res_att: B::Tensor,
    ln2: B::Tensor,
    ln2_stats: B::Tensor,
    ff: MemoryBlockActs<B>,
    out: B::Tensor, // (BT, d) the memory block's output
    res_ff: B::Tensor,
}

struct Scratch<B: Backend> {
    dlogits: B::Tensor,
    dresidual: B::Tensor, // (BT, d)
    dln: B::Tensor,       // (BT, d)
    dqkv: B::Tensor,      // (BT, 3d)
    delta: B::Tensor,     // (B, H, T) attention's dout·out per row
    ff: MemoryBlockScratch<B>,
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
    /// The sort's scratch, sized for the widest layer (ML2); each sort uses its first K·2^τ values.
    cursor: B::Index,
    ff: MemoryBlock,
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
        let bt = ModelConfig::MemoryFormer(cfg.clone()).check_batch(b, t)?;
        let (d, v, h) = (cfg.d_model, cfg.vocab, cfg.n_heads);
        let (layout, ids) = declare(&cfg);
        let store = match seed {
            Some(seed) => ParamStore::new(be, layout, seed)?,
            None => ParamStore::inference(be, layout)?,
        };
        let w = ids.map(|id| store.param(be, id));
        let dw = store.trainable().then(|| ids.map(|id| store.grad(be, id)));
        // Each buffer named with the settings it grows with, for the memory estimate's messages.
        let z = |what: &str, dims: &[usize]| be.zeros(what, values(dims));
        let stats = "the norm statistics (batch × seq_len)";
        let residual = "the residual (batch × seq_len × d_model)";
        let (qkv, ff) = units(&cfg, bt);
        let blocks = (0..cfg.n_layers)
            .map(|_| {
                Ok(BlockActs {
                    ln1: z("ln1 (batch × seq_len × d_model)", &[bt, d])?,
                    ln1_stats: z(stats, &[bt, 2])?,
                    hq: Hashed::new(be, qkv)?,
                    qkv: z("qkv (batch × seq_len × 3·d_model)", &[bt, 3, d])?,
                    atty: z("the attention output (batch × seq_len × d_model)", &[bt, d])?,
                    lse: z("the attention log-sum-exps (batch × n_heads × seq_len)", &[b, h, t])?,
                    res_att: z(residual, &[bt, d])?,
                    ln2: z("ln2 (batch × seq_len × d_model)", &[bt, d])?,
                    ln2_stats: z(stats, &[bt, 2])?,
                    ff: ff.acts(be)?,
                    out: z("the ml2 output (batch × seq_len × d_model)", &[bt, d])?,
                    res_ff: z(residual, &[bt, d])?,
                })
            })
            .collect::<engine::Result<Vec<_>>>()?;
        let scratch = || -> engine::Result<_> {
            Ok(Scratch {
                dlogits: z(LOGIT_GRADIENTS, &[bt, v])?,
                dresidual: z("the residual gradient (batch × seq_len × d_model)", &[bt, d])?,
                dln: z("the norm gradient (batch × seq_len × d_model)", &[bt, d])?,
                dqkv: z("the qkv gradient (batch × seq_len × 3·d_model)", &[bt, 3, d])?,
                delta: z("attention's dout·out per row (batch × n_heads × seq_len)", &[b, h, t])?,
                ff: ff.scratch(be)?,
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
            encoded: z("the embeddings (batch × seq_len × d_model)", &[bt, d])?,
            blocks,
            lnf: z("the final norm (batch × seq_len × d_model)", &[bt, d])?,
            lnf_stats: z(stats, &[bt, 2])?,
            cursor: ff.shared(be)?,
            ff,
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
        let (bt, d, v) = (self.b * self.t, self.cfg.d_model, self.cfg.vocab);
        let w = &self.w;
        let wpe = be.view(&w.wpe, 0, self.t * d);
        let emb = EmbeddingDims { bt, t: self.t, c: d, v };
        be.embedding_forward(&self.encoded, &batch.tokens, &w.wte, &wpe, emb);
        for (l, (a, q)) in self.blocks.iter().zip(&w.blocks).enumerate() {
            let x = self.residual_in(l);
            // X ← X + MHA(ML_QKV(Norm(X)))
            be.norm_forward(&a.ln1, &a.ln1_stats, x, &q.ln1, self.norm(d));
            a.hq.forward(be, &a.qkv, &a.ln1, &q.qkv, &self.cursor);
            be.attention_forward(&a.atty, &a.lse, &a.qkv, &batch.doc_start, self.attention(l));
            be.add(&a.res_att, x, &a.atty);
            // X ← X + ML2(Norm(ML1(Norm(X))))
            be.norm_forward(&a.ln2, &a.ln2_stats, &a.res_att, &q.ln2, self.norm(d));
            self.ff.forward(be, &a.out, &a.ln2, &a.ff, &self.cursor, &q.ff);
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
        let (bt, d, v) = (self.b * self.t, self.cfg.d_model, self.cfg.vocab);
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
            self.ff
                .backward(be, &s.ff, &s.dln, &dq.ff, &s.dresidual, &a.ln2, &a.ff, &q.ff);
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
            be.attention_backward(
                &s.dqkv,
                &s.delta,
                &s.dresidual,
                &a.atty,
                &a.qkv,
                &a.lse,
                &batch.doc_start,
                self.attention(l),
            );
            a.hq.backward(be, &s.dln, &dq.qkv, &s.dqkv, &a.ln1, &q.qkv);
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
                let mut layers = vec![a.hq.layer(format!("block{i}.qkv"))];
                layers.extend(self.ff.hashed_layers(&a.ff, &format!("block{i}")));
                layers
            })
            .collect()
    }

    fn observables(&self) -> Vec<Observable<'_, B>> {
        let shape = Shape::Vector { len: self.cfg.d_model };
        observe::residual_stream(
            shape,
            &self.encoded,
            self.blocks.iter().map(|a| (&a.res_att, &a.res_ff)),
        )
    }
}
