//! The baseline Transformer: GPT-2-style pre-norm decoder (SPEC §1; RMT paper §2.1, App. C.1).
//!
//!   X⁰ = W_E[token] + W_PE[position]
//!   X ← X + MHA(Norm(X)),  MHA = W_O · attention(W_QKV · Norm(X))
//!   X ← X + FF(Norm(X)),   FF(x) = W2 · GELU_tanh(W1 · x)
//!   logits = W_U · Norm(X)
//!
//! No biases, no weight tying. `backward` is `forward` read in reverse, op for op.

use crate::batch::BatchTensors;
use crate::loss::LossHead;
use crate::memory::{values, LOGIT_GRADIENTS};
use crate::observe::{self, Observable, Shape};
use crate::params::{Init, LayoutBuilder, ParamId, ParamLayout, ParamStore};
use crate::probes::{self, Layer, Op, Probes, Quantity};
use crate::train::LanguageModel;
use crate::{ModelConfig, Result, TransformerConfig};
use engine::{AttentionDims, Backend, EmbeddingDims, MatmulDims, NormDims};

/// Parameters of one block, as ids into the layout; `map` turns them into views.
#[derive(Clone, Debug)]
struct Block<T> {
    ln1: T,   // (C)
    w_qkv: T, // (3·H·Dh, C)
    w_o: T,   // (C, H·Dh)
    ln2: T,   // (C)
    w1: T,    // (F, C)
    w2: T,    // (C, F)
}

#[derive(Clone, Debug)]
struct Weights<T> {
    wte: T, // (V, C)
    wpe: T, // (N, C)
    blocks: Vec<Block<T>>,
    lnf: T, // (C)
    w_u: T, // (V, C)
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
                    w_qkv: f(b.w_qkv),
                    w_o: f(b.w_o),
                    ln2: f(b.ln2),
                    w1: f(b.w1),
                    w2: f(b.w2),
                })
                .collect(),
            lnf: f(self.lnf),
            w_u: f(self.w_u),
        }
    }
}

/// The parameters of the model `cfg` describes: their layout and where each one sits.
fn declare(cfg: &TransformerConfig) -> (ParamLayout, Weights<ParamId>) {
    let (c, v, f, l) = (cfg.d_model, cfg.vocab, cfg.d_ff, cfg.n_layers);
    let hd = cfg.n_heads * cfg.head_dim;
    // Weights ~ N(0, std²/fan_in), output projections with an extra 1/sqrt(2L) (SPEC §2), or
    // Xavier's N(0, 2/(fan_in + fan_out)).
    let std = cfg.init_std;
    let out_scale = if cfg.scaled_output_init {
        1.0 / (2.0 * l as f32).sqrt()
    } else {
        1.0
    };
    let weight = |fan_in: usize, fan_out: usize, scale: f32| Init::Normal {
        std: cfg.weight_init.std(std, fan_in, fan_out, scale),
    };
    let mut lb = LayoutBuilder::default();
    let wte = lb.add("wte", &[v, c], false, Init::Normal { std });
    let wpe = lb.add("wpe", &[cfg.seq_len, c], false, Init::Normal { std });
    let blocks = (0..l)
        .map(|i| Block {
            ln1: lb.add(format!("blocks.{i}.ln1"), &[c], false, Init::Constant(1.0)),
            w_qkv: lb.add(format!("blocks.{i}.w_qkv"), &[3 * hd, c], true, weight(c, 3 * hd, 1.0)),
            w_o: lb.add(format!("blocks.{i}.w_o"), &[c, hd], true, weight(hd, c, out_scale)),
            ln2: lb.add(format!("blocks.{i}.ln2"), &[c], false, Init::Constant(1.0)),
            w1: lb.add(format!("blocks.{i}.w1"), &[f, c], true, weight(c, f, 1.0)),
            w2: lb.add(format!("blocks.{i}.w2"), &[c, f], true, weight(f, c, out_scale)),
        })
        .collect();
    let lnf = lb.add("lnf", &[c], false, Init::Constant(1.0));
    // The unembedding starts at zero: the first loss is exactly ln V.
    let w_u_init = match cfg.zero_unembedding {
        true => Init::Normal { std: 0.0 },
        false => weight(c, v, 1.0),
    };
    let w_u = lb.add("w_u", &[v, c], false, w_u_init);
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
pub fn layout(cfg: &TransformerConfig) -> ParamLayout {
    declare(cfg).0
}

/// Saved activations of one block.
struct BlockActs<T> {
    ln1: T,       // (BT, C)
    ln1_stats: T, // (BT, 2)
    qkv: T,       // (BT, 3·H·Dh)
    atty: T,      // (BT, H·Dh)
    lse: T,       // (B, H, T) each row's log-sum-exp of its attention logits
    res_att: T,   // (BT, C) residual after attention
    ln2: T,       // (BT, C)
    ln2_stats: T, // (BT, 2)
    fch: T,       // (BT, F)
    fch_gelu: T,  // (BT, F)
    res_ff: T,    // (BT, C) residual after the FF
}

/// Gradient scratch shared by all blocks: the backward visits one block at a time.
struct Scratch<T> {
    dlogits: T,   // (BT, V)
    dresidual: T, // (BT, C)
    dln: T,       // (BT, C)
    datty: T,     // (BT, H·Dh)
    dqkv: T,      // (BT, 3·H·Dh)
    delta: T,     // (B, H, T) attention's dout·out per row
    dfch: T,      // (BT, F)
    dfch_gelu: T, // (BT, F)
}

pub struct Transformer<B: Backend> {
    pub cfg: TransformerConfig,
    b: usize,
    t: usize,
    store: ParamStore<B>,
    w: Weights<B::Tensor>,
    /// Gradient views; None for inference.
    dw: Option<Weights<B::Tensor>>,
    proj: B::Tensor,    // (BT, C) output of W_O or W2 before the residual add
    encoded: B::Tensor, // (BT, C)
    blocks: Vec<BlockActs<B::Tensor>>,
    lnf: B::Tensor,       // (BT, C)
    lnf_stats: B::Tensor, // (BT, 2)
    head: LossHead<B>,
    /// None for inference.
    s: Option<Scratch<B::Tensor>>,
    /// Variance probes of W_QKV, W_O, W1 and W2; None for inference.
    probes: Option<Probes<B>>,
}

impl<B: Backend> Transformer<B> {
    /// Builds the model for batches of `b` sequences of `t` ≤ N tokens, initialised from `seed`.
    pub fn new(be: &B, cfg: TransformerConfig, b: usize, t: usize, seed: u64) -> Result<Self> {
        Self::build(be, cfg, b, t, Some(seed))
    }

    /// Forward only: parameters (all 0 until written) and activations, no gradients or backward
    /// scratch. `backward` does nothing on it.
    pub fn inference(be: &B, cfg: TransformerConfig, b: usize, t: usize) -> Result<Self> {
        Self::build(be, cfg, b, t, None)
    }

    /// Trainable, initialised from the seed, with one; for inference without.
    fn build(be: &B, cfg: TransformerConfig, b: usize, t: usize, seed: Option<u64>) -> Result<Self> {
        let bt = ModelConfig::Transformer(cfg.clone()).check_batch(b, t)?;
        let (c, v, f, l) = (cfg.d_model, cfg.vocab, cfg.d_ff, cfg.n_layers);
        let hd = cfg.n_heads * cfg.head_dim;
        let (layout, ids) = declare(&cfg);
        let store = match seed {
            Some(seed) => ParamStore::new(be, layout, seed)?,
            None => ParamStore::inference(be, layout)?,
        };
        let w = ids.map(|id| store.param(be, id));
        let dw = store.trainable().then(|| ids.map(|id| store.grad(be, id)));

        // Each buffer named with the settings it grows with, for the memory estimate's messages.
        let z = |what: &str, dims: &[usize]| be.zeros(what, values(dims));
        let lse = "the attention log-sum-exps (batch × n_heads × seq_len)";
        let stats = "the norm statistics (batch × seq_len)";
        let blocks = (0..l)
            .map(|_| {
                Ok(BlockActs {
                    ln1: z("ln1 (batch × seq_len × d_model)", &[bt, c])?,
                    ln1_stats: z(stats, &[bt, 2])?,
                    qkv: z("qkv (batch × seq_len × 3·n_heads·head_dim)", &[bt, 3, hd])?,
                    atty: z("the attention output (batch × seq_len × n_heads·head_dim)", &[bt, hd])?,
                    lse: z(lse, &[b, cfg.n_heads, t])?,
                    res_att: z("the residual (batch × seq_len × d_model)", &[bt, c])?,
                    ln2: z("ln2 (batch × seq_len × d_model)", &[bt, c])?,
                    ln2_stats: z(stats, &[bt, 2])?,
                    fch: z("the FF hidden (batch × seq_len × d_ff)", &[bt, f])?,
                    fch_gelu: z("the FF hidden (batch × seq_len × d_ff)", &[bt, f])?,
                    res_ff: z("the residual (batch × seq_len × d_model)", &[bt, c])?,
                })
            })
            .collect::<engine::Result<Vec<_>>>()?;
        let scratch = || -> engine::Result<_> {
            Ok(Scratch {
                dlogits: z(LOGIT_GRADIENTS, &[bt, v])?,
                dresidual: z("the residual gradient (batch × seq_len × d_model)", &[bt, c])?,
                dln: z("the norm gradient (batch × seq_len × d_model)", &[bt, c])?,
                datty: z("the attention gradient (batch × seq_len × n_heads·head_dim)", &[bt, hd])?,
                dqkv: z("the qkv gradient (batch × seq_len × 3·n_heads·head_dim)", &[bt, 3, hd])?,
                delta: z(
                    "attention's dout·out per row (batch × n_heads × seq_len)",
                    &[b, cfg.n_heads, t],
                )?,
                dfch: z("the FF gradient (batch × seq_len × d_ff)", &[bt, f])?,
                dfch_gelu: z("the FF gradient (batch × seq_len × d_ff)", &[bt, f])?,
            })
        };
        let (s, probes) = match store.trainable() {
            true => (Some(scratch()?), Some(Probes::new(be, probes::block_sites(l))?)),
            false => (None, None),
        };
        Ok(Self {
            b,
            t,
            store,
            w,
            dw,
            proj: z("the projection (batch × seq_len × d_model)", &[bt, c])?,
            encoded: z("the embeddings (batch × seq_len × d_model)", &[bt, c])?,
            blocks,
            lnf: z("the final norm (batch × seq_len × d_model)", &[bt, c])?,
            lnf_stats: z(stats, &[bt, 2])?,
            head: LossHead::new(be, bt, v, cfg.z_loss)?,
            s,
            probes,
            cfg,
        })
    }

    fn norm(&self, rows: usize) -> NormDims {
        NormDims {
            rows,
            c: self.cfg.d_model,
            kind: self.cfg.norm.into(),
            eps: self.cfg.norm_eps,
        }
    }

    fn attention(&self, layer: usize) -> AttentionDims {
        let mut scale = 1.0 / (self.cfg.head_dim as f32).sqrt();
        if self.cfg.attn_layer_scale {
            scale /= (layer + 1) as f32;
        }
        AttentionDims {
            b: self.b,
            t: self.t,
            h: self.cfg.n_heads,
            dh: self.cfg.head_dim,
            scale,
            alibi: false,
        }
    }

    fn embedding(&self) -> EmbeddingDims {
        EmbeddingDims {
            bt: self.b * self.t,
            t: self.t,
            c: self.cfg.d_model,
            v: self.cfg.vocab,
        }
    }

    /// Records the forward quantities of block `l`'s site, when probing.
    fn probe(&self, be: &B, l: usize, layer: Layer, op: Op, input: &B::Tensor, output: &B::Tensor) {
        if let Some(p) = &self.probes {
            let i = probes::site_index(l, layer, op);
            p.record(be, i, Quantity::In, input);
            p.record(be, i, Quantity::Out, output);
        }
    }

    /// Records the backward quantities of block `l`'s site: the map's output gradient and the
    /// gradient it passes to its input.
    fn probe_grad(&self, be: &B, l: usize, layer: Layer, op: Op, grad_out: &B::Tensor, grad_in: &B::Tensor) {
        if let Some(p) = &self.probes {
            let i = probes::site_index(l, layer, op);
            p.record(be, i, Quantity::GradOut, grad_out);
            p.record(be, i, Quantity::GradIn, grad_in);
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
}

impl<B: Backend> LanguageModel<B> for Transformer<B> {
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
        let (bt, c, f, v) = (self.b * self.t, self.cfg.d_model, self.cfg.d_ff, self.cfg.vocab);
        let hd = self.cfg.n_heads * self.cfg.head_dim;
        let w = &self.w;
        // X⁰ = W_E[token] + W_PE[position]
        // Sequences shorter than N use the first T rows of the position table.
        let wpe = be.view(&w.wpe, 0, self.t * c);
        be.embedding_forward(&self.encoded, &batch.tokens, &w.wte, &wpe, self.embedding());
        for (l, (a, p)) in self.blocks.iter().zip(&w.blocks).enumerate() {
            let x = self.residual_in(l);
            // X ← X + W_O · attention(W_QKV · Norm(X))
            be.norm_forward(&a.ln1, &a.ln1_stats, x, &p.ln1, self.norm(bt));
            be.matmul(&a.qkv, &a.ln1, &p.w_qkv, MatmulDims::new(bt, 3 * hd, c).trans_b());
            self.probe(be, l, Layer::Attn, Op::Retrieval, &a.ln1, &a.qkv);
            be.attention_forward(&a.atty, &a.lse, &a.qkv, &batch.doc_start, self.attention(l));
            be.matmul(&self.proj, &a.atty, &p.w_o, MatmulDims::new(bt, c, hd).trans_b());
            self.probe(be, l, Layer::Attn, Op::Storage, &a.atty, &self.proj);
            be.add(&a.res_att, x, &self.proj);
            // X ← X + W2 · GELU(W1 · Norm(X))
            be.norm_forward(&a.ln2, &a.ln2_stats, &a.res_att, &p.ln2, self.norm(bt));
            be.matmul(&a.fch, &a.ln2, &p.w1, MatmulDims::new(bt, f, c).trans_b());
            self.probe(be, l, Layer::Ff, Op::Retrieval, &a.ln2, &a.fch);
            be.gelu_forward(&a.fch_gelu, &a.fch);
            be.matmul(&self.proj, &a.fch_gelu, &p.w2, MatmulDims::new(bt, c, f).trans_b());
            self.probe(be, l, Layer::Ff, Op::Storage, &a.fch_gelu, &self.proj);
            be.add(&a.res_ff, &a.res_att, &self.proj);
        }
        // logits = W_U · Norm(X); loss = mean CE (the z-loss enters the gradient only)
        let last = self.residual_in(self.cfg.n_layers);
        be.norm_forward(&self.lnf, &self.lnf_stats, last, &w.lnf, self.norm(bt));
        be.matmul(
            &self.head.logits,
            &self.lnf,
            &w.w_u,
            MatmulDims::new(bt, v, c).trans_b(),
        );
        self.head.forward(be, batch);
    }

    fn backward(&self, be: &B, batch: &BatchTensors<B>) {
        let (bt, c, f, v) = (self.b * self.t, self.cfg.d_model, self.cfg.d_ff, self.cfg.vocab);
        let hd = self.cfg.n_heads * self.cfg.head_dim;
        // An inference model has no gradients to fill.
        let (w, Some(dw), Some(s)) = (&self.w, &self.dw, &self.s) else {
            return;
        };
        self.head.backward(be, &s.dlogits, batch);
        be.matmul(&dw.w_u, &s.dlogits, &self.lnf, MatmulDims::new(v, c, bt).trans_a());
        be.matmul(&s.dln, &s.dlogits, &w.w_u, MatmulDims::new(bt, c, v));
        be.fill(&s.dresidual, 0.0);
        let last = self.residual_in(self.cfg.n_layers);
        be.norm_backward(
            &s.dresidual,
            &dw.lnf,
            &s.dln,
            last,
            &w.lnf,
            &self.lnf_stats,
            self.norm(bt),
        );
        for l in (0..self.cfg.n_layers).rev() {
            let (a, p, dp) = (&self.blocks[l], &w.blocks[l], &dw.blocks[l]);
            // FF: dresidual flows through the add unchanged into W2's output.
            be.matmul(&dp.w2, &s.dresidual, &a.fch_gelu, MatmulDims::new(c, f, bt).trans_a());
            be.matmul(&s.dfch_gelu, &s.dresidual, &p.w2, MatmulDims::new(bt, f, c));
            self.probe_grad(be, l, Layer::Ff, Op::Storage, &s.dresidual, &s.dfch_gelu);
            be.gelu_backward(&s.dfch, &s.dfch_gelu, &a.fch);
            be.matmul(&dp.w1, &s.dfch, &a.ln2, MatmulDims::new(f, c, bt).trans_a());
            be.matmul(&s.dln, &s.dfch, &p.w1, MatmulDims::new(bt, c, f));
            self.probe_grad(be, l, Layer::Ff, Op::Retrieval, &s.dfch, &s.dln);
            be.norm_backward(
                &s.dresidual,
                &dp.ln2,
                &s.dln,
                &a.res_att,
                &p.ln2,
                &a.ln2_stats,
                self.norm(bt),
            );
            // Attention
            be.matmul(&dp.w_o, &s.dresidual, &a.atty, MatmulDims::new(c, hd, bt).trans_a());
            be.matmul(&s.datty, &s.dresidual, &p.w_o, MatmulDims::new(bt, hd, c));
            self.probe_grad(be, l, Layer::Attn, Op::Storage, &s.dresidual, &s.datty);
            be.attention_backward(
                &s.dqkv,
                &s.delta,
                &s.datty,
                &a.atty,
                &a.qkv,
                &a.lse,
                &batch.doc_start,
                self.attention(l),
            );
            be.matmul(&dp.w_qkv, &s.dqkv, &a.ln1, MatmulDims::new(3 * hd, c, bt).trans_a());
            be.matmul(&s.dln, &s.dqkv, &p.w_qkv, MatmulDims::new(bt, c, 3 * hd));
            self.probe_grad(be, l, Layer::Attn, Op::Retrieval, &s.dqkv, &s.dln);
            be.norm_backward(
                &s.dresidual,
                &dp.ln1,
                &s.dln,
                self.residual_in(l),
                &p.ln1,
                &a.ln1_stats,
                self.norm(bt),
            );
        }
        // Rows of the position table past T get no gradient; they stay 0.
        let dwpe = be.view(&dw.wpe, 0, self.t * c);
        be.embedding_backward(
            &dw.wte,
            &dwpe,
            &s.dresidual,
            &batch.bucket_rows,
            &batch.bucket_start,
            self.embedding(),
        );
    }

    fn head(&self) -> &LossHead<B> {
        &self.head
    }

    fn probes(&self) -> Option<&Probes<B>> {
        self.probes.as_ref()
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
