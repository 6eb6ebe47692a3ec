//! Attention, the unit every model shares, and the maps that feed a vector residual's attention
//! and turn its output into what the residual adds:
//!
//!   Attention     y_h = softmax(Q_h K_hᵀ · scale, causal) V_h from packed [Q | K | V] rows
//!   Projections   qkv = W_QKV · x,   out = W_O · y              the transformer (SPEC §1)
//!   HashedQkv     qkv = ML_QKV(x),   out = y                    MemoryFormer (SPEC §3)
//!   Direct        qkv = x,           out = y                    the RMT and the hybrid
//!
//! The RMT's maps are its residual's own read and write, retrievals and a storage
//! (`residual/matrix.rs`): attention reads what the retrieval wrote and the storage takes its
//! output, so its maps are `Direct`.

use crate::buckets::HashedLayer;
use crate::ff::FfCore;
use crate::interventions::{MemoryLayer, Tap};
use crate::memory::values;
use crate::memory_layer::{Hashed, MemoryBlock, MemoryParams};
use crate::params::{Init, LayoutBuilder, ParamId};
use crate::{Hashing, WeightInit};
use engine::{AttentionDims, Backend, MatmulDims, MemoryDims};

/// Causal multi-head attention over batches of `b` sequences of `t` tokens.
#[derive(Clone, Copy, Debug)]
pub struct Attention {
    pub b: usize,
    pub t: usize,
    pub heads: usize,
    pub head_dim: usize,
    /// Divide the logits by (layer index + 1), a stability tweak of the RMT paper.
    pub layer_scale: bool,
    /// ALiBi's position biases instead of position embeddings (the RMT's option).
    pub alibi: bool,
    /// The settings its sizes grow with, for the memory estimate's messages.
    pub names: AttentionNames,
}

/// The settings that name attention's heads and its width (heads × head_dim) in a model.
#[derive(Clone, Copy, Debug)]
pub struct AttentionNames {
    /// "n_heads", or the RMT's "rank".
    pub heads: &'static str,
    /// "n_heads·head_dim", the MemoryFormer's "d_model", or the RMT's "rank·d_v".
    pub width: &'static str,
}

/// What one block's attention keeps from the forward for the backward.
pub struct AttentionActs<B: Backend> {
    pub qkv: B::Tensor,  // (BT, 3·H·D_h) its input
    pub atty: B::Tensor, // (BT, H·D_h) its output
    lse: B::Tensor,      // (B, H, T) each row's log-sum-exp of its logits
}

/// One block's attention after a forward: its input rows [Q | K | V] and the op's dims, from
/// which `observe::attention_patterns` recomputes its weights.
pub struct AttentionSite<'a, B: Backend> {
    /// `block0`, `block1`, …
    pub name: String,
    pub qkv: &'a B::Tensor,
    /// Its output (BT, H·D_h): what an RMT stores, a head a key slot.
    pub out: &'a B::Tensor,
    pub dims: AttentionDims,
}

/// Attention's backward scratch, shared by every block.
pub struct AttentionScratch<B: Backend> {
    pub dqkv: B::Tensor, // (BT, 3·H·D_h)
    delta: B::Tensor,    // (B, H, T) dout·out per row
}

impl AttentionNames {
    /// A transformer's: H heads of D_h.
    pub const HEADS: AttentionNames = AttentionNames {
        heads: "n_heads",
        width: "n_heads·head_dim",
    };
    /// The RMT's: R heads of D_v.
    pub const RANK: AttentionNames = AttentionNames {
        heads: "rank",
        width: "rank·d_v",
    };
}

impl Attention {
    /// `heads` heads of `head_dim` over batches of `b` sequences of `t` tokens, without ALiBi.
    pub fn new(
        b: usize,
        t: usize,
        (heads, head_dim): (usize, usize),
        layer_scale: bool,
        names: AttentionNames,
    ) -> Self {
        Attention {
            b,
            t,
            heads,
            head_dim,
            layer_scale,
            alibi: false,
            names,
        }
    }

    /// The op's dims in block `layer`.
    pub fn dims(&self, layer: usize) -> AttentionDims {
        let mut scale = 1.0 / (self.head_dim as f32).sqrt();
        if self.layer_scale {
            scale /= (layer + 1) as f32;
        }
        AttentionDims {
            b: self.b,
            t: self.t,
            h: self.heads,
            dh: self.head_dim,
            scale,
            alibi: self.alibi,
        }
    }

    pub fn acts<B: Backend>(&self, be: &B) -> engine::Result<AttentionActs<B>> {
        let (bt, AttentionNames { heads, width }) = (self.b * self.t, self.names);
        Ok(AttentionActs {
            qkv: be.zeros(&format!("qkv (batch × seq_len × 3·{width})"), self.values(&[bt, 3]))?,
            atty: be.zeros(
                &format!("the attention output (batch × seq_len × {width})"),
                self.values(&[bt]),
            )?,
            lse: be.zeros(
                &format!("the attention log-sum-exps (batch × {heads} × seq_len)"),
                values(&[self.b, self.heads, self.t]),
            )?,
        })
    }

    /// What a viewer may read of each block's attention after a forward, blocks in order.
    pub fn sites<'a, B: Backend + 'a>(
        &self,
        acts: impl Iterator<Item = &'a AttentionActs<B>>,
    ) -> Vec<AttentionSite<'a, B>> {
        (acts.enumerate())
            .map(|(layer, a)| AttentionSite {
                name: format!("block{layer}"),
                qkv: &a.qkv,
                out: &a.atty,
                dims: self.dims(layer),
            })
            .collect()
    }

    pub fn scratch<B: Backend>(&self, be: &B) -> engine::Result<AttentionScratch<B>> {
        let (bt, AttentionNames { heads, width }) = (self.b * self.t, self.names);
        Ok(AttentionScratch {
            dqkv: be.zeros(
                &format!("the qkv gradient (batch × seq_len × 3·{width})"),
                self.values(&[bt, 3]),
            )?,
            delta: be.zeros(
                &format!("attention's dout·out per row (batch × {heads} × seq_len)"),
                values(&[self.b, self.heads, self.t]),
            )?,
        })
    }

    /// The values of a buffer of `dims` × heads × head_dim.
    fn values(&self, dims: &[usize]) -> usize {
        values(&[values(dims), self.heads, self.head_dim])
    }

    /// a.atty = attention(a.qkv) in block `layer`; no row attends past `doc_start`'s boundaries.
    pub fn forward<B: Backend>(&self, be: &B, a: &AttentionActs<B>, doc_start: &B::Index, layer: usize) {
        be.attention_forward(&a.atty, &a.lse, &a.qkv, doc_start, self.dims(layer));
    }

    /// s.dqkv from the output's gradient `datty`.
    pub fn backward<B: Backend>(
        &self,
        be: &B,
        s: &AttentionScratch<B>,
        datty: &B::Tensor,
        a: &AttentionActs<B>,
        doc_start: &B::Index,
        layer: usize,
    ) {
        be.attention_backward(
            &s.dqkv,
            &s.delta,
            datty,
            &a.atty,
            &a.qkv,
            &a.lse,
            doc_start,
            self.dims(layer),
        );
    }
}

/// The maps around a block's attention: qkv = in(read(X)) before it, and after it the output
/// the residual's write takes. `K` is the block's feed-forward core, whose forward scratch a
/// hashed map sorts with.
pub trait AttentionMaps<K: FfCore> {
    /// One block's parameters: ids when declared, then views of the parameters or gradients.
    type Params<T>;
    /// What one block keeps from the forward for the backward.
    type Acts<B: Backend>;
    /// Backward scratch shared by every block.
    type Scratch<B: Backend>;

    /// Declares one block's parameters, named `{prefix}.…`.
    fn declare(&self, lb: &mut LayoutBuilder, prefix: &str) -> Self::Params<ParamId>;
    fn map<T>(p: &Self::Params<ParamId>, f: &impl Fn(ParamId) -> T) -> Self::Params<T>;
    fn acts<B: Backend>(&self, be: &B) -> engine::Result<Self::Acts<B>>;
    fn scratch<B: Backend>(&self, be: &B) -> engine::Result<Self::Scratch<B>>;
    /// qkv = in(x); `tap` reaches its Memory Layer's tables, if it is one.
    #[allow(clippy::too_many_arguments)]
    fn qkv_forward<B: Backend>(
        &self,
        be: &B,
        qkv: &B::Tensor,
        x: &B::Tensor,
        a: &Self::Acts<B>,
        shared: &K::Shared<B>,
        p: &Self::Params<B::Tensor>,
        tap: Tap<'_, B>,
    );
    /// Where `output_forward` leaves what the residual takes: `out`, or `y` itself.
    fn output<'a, T>(&self, out: &'a T, y: &'a T) -> &'a T;
    /// What the residual adds for attention's output `y`: written into `out` and returned, or
    /// `y` itself when there is no output map.
    fn output_forward<'a, B: Backend>(
        &self,
        be: &B,
        out: &'a B::Tensor,
        y: &'a B::Tensor,
        p: &Self::Params<B::Tensor>,
    ) -> &'a B::Tensor;
    /// The output map's gradients and dy from `dout`: dy in the scratch, or `dout` itself.
    fn output_backward<'a, B: Backend>(
        &self,
        be: &B,
        s: &'a Self::Scratch<B>,
        dp: &Self::Params<B::Tensor>,
        dout: &'a B::Tensor,
        y: &B::Tensor,
        p: &Self::Params<B::Tensor>,
    ) -> &'a B::Tensor;
    /// dx (written) and the input map's gradients from dqkv.
    #[allow(clippy::too_many_arguments)]
    fn qkv_backward<B: Backend>(
        &self,
        be: &B,
        dx: &B::Tensor,
        dp: &Self::Params<B::Tensor>,
        dqkv: &B::Tensor,
        x: &B::Tensor,
        a: &Self::Acts<B>,
        p: &Self::Params<B::Tensor>,
        tap: Tap<'_, B>,
    );
    /// Its Memory Layer, whose tables are sites; none for dense maps.
    fn tables(&self) -> Vec<(MemoryLayer, engine::MemoryDims)> {
        vec![]
    }
    /// Whether both maps are matrix products, which the variance probes measure.
    fn is_dense(&self) -> bool {
        false
    }
    /// The maps' hash tables, for bucket statistics; none for dense maps.
    fn hashed_layers<'a, B: Backend>(&self, _a: &'a Self::Acts<B>, _prefix: &str) -> Vec<HashedLayer<'a, B>> {
        vec![]
    }
}

/// W_QKV ∈ R^{3·H·D_h×D} and W_O ∈ R^{D×H·D_h}, both N(0, init_std²/fan_in), W_O with an
/// extra `out_scale`.
#[derive(Clone, Copy, Debug)]
pub struct Projections {
    pub tokens: usize,
    /// D
    pub d_model: usize,
    /// H·D_h
    pub width: usize,
    pub init_std: f32,
    pub weight_init: WeightInit,
    pub out_scale: f32,
}

#[derive(Clone, Copy, Debug)]
pub struct ProjectionParams<T> {
    w_qkv: T, // (3·H·D_h, D)
    w_o: T,   // (D, H·D_h)
}

impl<K: FfCore> AttentionMaps<K> for Projections {
    type Params<T> = ProjectionParams<T>;
    type Acts<B: Backend> = ();
    /// The gradient of attention's output.
    type Scratch<B: Backend> = B::Tensor;

    fn declare(&self, lb: &mut LayoutBuilder, prefix: &str) -> ProjectionParams<ParamId> {
        let (c, hd) = (self.d_model, self.width);
        let weight = |fan_in: usize, fan_out: usize, scale: f32| Init::Normal {
            std: self.weight_init.std(self.init_std, fan_in, fan_out, scale),
        };
        ProjectionParams {
            w_qkv: lb.add(format!("{prefix}.w_qkv"), &[3 * hd, c], true, weight(c, 3 * hd, 1.0)),
            w_o: lb.add(format!("{prefix}.w_o"), &[c, hd], true, weight(hd, c, self.out_scale)),
        }
    }

    fn map<T>(p: &ProjectionParams<ParamId>, f: &impl Fn(ParamId) -> T) -> ProjectionParams<T> {
        ProjectionParams {
            w_qkv: f(p.w_qkv),
            w_o: f(p.w_o),
        }
    }

    fn acts<B: Backend>(&self, _be: &B) -> engine::Result<()> {
        Ok(())
    }

    fn scratch<B: Backend>(&self, be: &B) -> engine::Result<B::Tensor> {
        be.zeros(
            "the attention gradient (batch × seq_len × n_heads·head_dim)",
            values(&[self.tokens, self.width]),
        )
    }

    fn qkv_forward<B: Backend>(
        &self,
        be: &B,
        qkv: &B::Tensor,
        x: &B::Tensor,
        _a: &(),
        _shared: &K::Shared<B>,
        p: &ProjectionParams<B::Tensor>,
        _tap: Tap<'_, B>,
    ) {
        let (bt, c, hd) = (self.tokens, self.d_model, self.width);
        be.matmul(qkv, x, &p.w_qkv, MatmulDims::new(bt, 3 * hd, c).trans_b());
    }

    fn output<'a, T>(&self, out: &'a T, _y: &'a T) -> &'a T {
        out
    }

    fn output_forward<'a, B: Backend>(
        &self,
        be: &B,
        out: &'a B::Tensor,
        y: &'a B::Tensor,
        p: &ProjectionParams<B::Tensor>,
    ) -> &'a B::Tensor {
        let (bt, c, hd) = (self.tokens, self.d_model, self.width);
        be.matmul(out, y, &p.w_o, MatmulDims::new(bt, c, hd).trans_b());
        out
    }

    fn output_backward<'a, B: Backend>(
        &self,
        be: &B,
        datty: &'a B::Tensor,
        dp: &ProjectionParams<B::Tensor>,
        dout: &'a B::Tensor,
        y: &B::Tensor,
        p: &ProjectionParams<B::Tensor>,
    ) -> &'a B::Tensor {
        let (bt, c, hd) = (self.tokens, self.d_model, self.width);
        be.matmul(&dp.w_o, dout, y, MatmulDims::new(c, hd, bt).trans_a());
        be.matmul(datty, dout, &p.w_o, MatmulDims::new(bt, hd, c));
        datty
    }

    fn qkv_backward<B: Backend>(
        &self,
        be: &B,
        dx: &B::Tensor,
        dp: &ProjectionParams<B::Tensor>,
        dqkv: &B::Tensor,
        x: &B::Tensor,
        _a: &(),
        p: &ProjectionParams<B::Tensor>,
        _tap: Tap<'_, B>,
    ) {
        let (bt, c, hd) = (self.tokens, self.d_model, self.width);
        be.matmul(&dp.w_qkv, dqkv, x, MatmulDims::new(3 * hd, c, bt).trans_a());
        be.matmul(dx, dqkv, &p.w_qkv, MatmulDims::new(bt, c, 3 * hd));
    }

    fn is_dense(&self) -> bool {
        true
    }
}

/// ML_QKV: ML_Q, ML_K and ML_V read the same input, so they are one Memory Layer whose tables
/// hold [Q | K | V] rows: one hash, one gather, and exactly the packed qkv attention reads.
/// There is no output map. It sorts its buckets with the memory block's cursor, which is sized
/// for ML2's, the most buckets of any layer.
#[derive(Clone, Copy, Debug)]
pub struct HashedQkv {
    pub hashing: Hashing,
    pub dims: MemoryDims,
}

impl AttentionMaps<MemoryBlock> for HashedQkv {
    type Params<T> = MemoryParams<T>;
    type Acts<B: Backend> = Hashed<B>;
    type Scratch<B: Backend> = ();

    /// `{prefix}.qkv.tables` and `{prefix}.qkv.bias`.
    fn declare(&self, lb: &mut LayoutBuilder, prefix: &str) -> MemoryParams<ParamId> {
        MemoryParams::declare(lb, &format!("{prefix}.qkv"), &self.hashing, self.dims)
    }

    fn map<T>(p: &MemoryParams<ParamId>, f: &impl Fn(ParamId) -> T) -> MemoryParams<T> {
        p.map(f)
    }

    fn acts<B: Backend>(&self, be: &B) -> engine::Result<Hashed<B>> {
        Hashed::new(be, self.dims, MemoryLayer::Qkv)
    }

    fn scratch<B: Backend>(&self, _be: &B) -> engine::Result<()> {
        Ok(())
    }

    fn qkv_forward<B: Backend>(
        &self,
        be: &B,
        qkv: &B::Tensor,
        x: &B::Tensor,
        a: &Hashed<B>,
        cursor: &B::Index,
        p: &MemoryParams<B::Tensor>,
        tap: Tap<'_, B>,
    ) {
        a.forward(be, qkv, x, p, cursor, tap);
    }

    fn output<'a, T>(&self, _out: &'a T, y: &'a T) -> &'a T {
        y
    }

    fn output_forward<'a, B: Backend>(
        &self,
        _be: &B,
        _out: &'a B::Tensor,
        y: &'a B::Tensor,
        _p: &MemoryParams<B::Tensor>,
    ) -> &'a B::Tensor {
        y
    }

    fn output_backward<'a, B: Backend>(
        &self,
        _be: &B,
        _s: &'a (),
        _dp: &MemoryParams<B::Tensor>,
        dout: &'a B::Tensor,
        _y: &B::Tensor,
        _p: &MemoryParams<B::Tensor>,
    ) -> &'a B::Tensor {
        dout
    }

    fn qkv_backward<B: Backend>(
        &self,
        be: &B,
        dx: &B::Tensor,
        dp: &MemoryParams<B::Tensor>,
        dqkv: &B::Tensor,
        x: &B::Tensor,
        a: &Hashed<B>,
        p: &MemoryParams<B::Tensor>,
        tap: Tap<'_, B>,
    ) {
        a.backward(be, dx, dp, dqkv, x, p, tap);
    }

    fn tables(&self) -> Vec<(MemoryLayer, engine::MemoryDims)> {
        vec![(MemoryLayer::Qkv, self.dims)]
    }

    fn hashed_layers<'a, B: Backend>(&self, a: &'a Hashed<B>, prefix: &str) -> Vec<HashedLayer<'a, B>> {
        vec![a.layer(format!("{prefix}.qkv"))]
    }
}

/// No maps: the residual's read writes attention's qkv itself and its write takes attention's
/// output as it is (the RMT's retrieval and storage keys, `residual::Matrix`).
#[derive(Clone, Copy, Debug)]
pub struct Direct;

impl<K: FfCore> AttentionMaps<K> for Direct {
    type Params<T> = ();
    type Acts<B: Backend> = ();
    type Scratch<B: Backend> = ();

    fn declare(&self, _lb: &mut LayoutBuilder, _prefix: &str) {}

    fn map<T>(_p: &(), _f: &impl Fn(ParamId) -> T) {}

    fn acts<B: Backend>(&self, _be: &B) -> engine::Result<()> {
        Ok(())
    }

    fn scratch<B: Backend>(&self, _be: &B) -> engine::Result<()> {
        Ok(())
    }

    /// `x` is `qkv` itself: the residual read into it.
    fn qkv_forward<B: Backend>(
        &self,
        _be: &B,
        _qkv: &B::Tensor,
        _x: &B::Tensor,
        _a: &(),
        _shared: &K::Shared<B>,
        _p: &(),
        _tap: Tap<'_, B>,
    ) {
    }

    fn output<'a, T>(&self, _out: &'a T, y: &'a T) -> &'a T {
        y
    }

    fn output_forward<'a, B: Backend>(&self, _be: &B, _out: &'a B::Tensor, y: &'a B::Tensor, _p: &()) -> &'a B::Tensor {
        y
    }

    fn output_backward<'a, B: Backend>(
        &self,
        _be: &B,
        _s: &'a (),
        _dp: &(),
        dout: &'a B::Tensor,
        _y: &B::Tensor,
        _p: &(),
    ) -> &'a B::Tensor {
        dout
    }

    /// `dx` is `dqkv` itself: the residual's read takes it.
    fn qkv_backward<B: Backend>(
        &self,
        _be: &B,
        _dx: &B::Tensor,
        _dp: &(),
        _dqkv: &B::Tensor,
        _x: &B::Tensor,
        _a: &(),
        _p: &(),
        _tap: Tap<'_, B>,
    ) {
    }
}
