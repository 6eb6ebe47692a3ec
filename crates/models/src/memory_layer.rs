//! MemoryFormer's two units (SPEC §3), shared by the MemoryFormer and the hybrid:
//!
//!   Memory Layer   ML(x) = Σ_k p(z_k) · T_k[hash(z_k)] + b        no matrix product
//!   memory block   f = ML2(Norm(ML1(x)))                           ML1: d → (τ+e)K, ML2: → d
//!                  f = ML2(GELU(Norm(ML1(x))))                     with `block_gelu` (Table 6)
//!
//! Each unit declares its parameters, allocates what its forward keeps, and runs its forward and
//! backward; a model only wires them.

use crate::buckets::HashedLayer;
use crate::ff::FfCore;
use crate::interventions::{MemoryLayer, Point, Tap};
use crate::memory::values;
use crate::params::{Init, LayoutBuilder, ParamId};
use crate::Hashing;
use engine::{Backend, MemoryDims, NormDims};

/// One Memory Layer's parameters.
#[derive(Clone, Copy, Debug)]
pub struct MemoryParams<T> {
    pub tables: T, // (K, 2^τ, d_out)
    pub bias: T,   // (d_out)
}

impl MemoryParams<ParamId> {
    /// Tables N(0, table_std²) that learn at table_lr_mult × the learning rate, and a bias
    /// N(0, bias_std²), named `{name}.tables` and `{name}.bias`.
    pub fn declare(lb: &mut LayoutBuilder, name: &str, h: &Hashing, dims: MemoryDims) -> Self {
        Self {
            tables: lb.add_boosted(
                format!("{name}.tables"),
                &[dims.k, dims.buckets(), dims.d_out],
                h.table_lr_mult,
                Init::Normal { std: h.table_std },
            ),
            bias: lb.add(
                format!("{name}.bias"),
                &[dims.d_out],
                false,
                Init::Normal { std: h.bias_std },
            ),
        }
    }

    pub fn map<U>(&self, f: &impl Fn(ParamId) -> U) -> MemoryParams<U> {
        MemoryParams {
            tables: f(self.tables),
            bias: f(self.bias),
        }
    }
}

/// The dims of a Memory Layer hashing `d_in` values of `tokens` rows in K chunks of `tau` bits.
pub fn layer_dims(h: &Hashing, tokens: usize, d_in: usize, k: usize, tau: usize, d_out: usize) -> MemoryDims {
    MemoryDims {
        tokens,
        d_in,
        tau,
        k,
        d_out,
        temperature: h.temperature,
        l1: h.l1_weight,
    }
}

/// What one Memory Layer keeps from the forward for the backward; its bucket starts are also
/// the usage statistics.
pub struct Hashed<B: Backend> {
    codes: B::Index,  // (BT, K)
    p: B::Tensor,     // (BT, K)
    rows: B::Index,   // (K, BT)
    starts: B::Index, // (K, 2^τ + 1)
    pub dims: MemoryDims,
    /// Which of its block's Memory Layers it is, for an intervention's tap.
    layer: MemoryLayer,
}

impl<B: Backend> Hashed<B> {
    pub fn new(be: &B, dims: MemoryDims, layer: MemoryLayer) -> engine::Result<Self> {
        Ok(Self {
            codes: be.index("the hash codes (batch × seq_len × K)", values(&[dims.tokens, dims.k]))?,
            p: be.zeros("the hash weights (batch × seq_len × K)", values(&[dims.tokens, dims.k]))?,
            rows: be.index("the bucket rows (K × batch × seq_len)", values(&[dims.k, dims.tokens]))?,
            starts: be.index("the bucket starts (K × 2^tau)", dims.starts_len())?,
            dims,
            layer,
        })
    }

    /// y = ML(x): hash, group rows by bucket (for the backward and the statistics), gather.
    /// `cursor` is the sort's scratch of at least `dims.sort_scratch()` values. Where `tap`
    /// asks for the tables' terms, they are written apart, edited, then summed: the same bits
    /// as the gather on the CPU, within rounding on a GPU.
    pub fn forward(
        &self,
        be: &B,
        y: &B::Tensor,
        x: &B::Tensor,
        m: &MemoryParams<B::Tensor>,
        cursor: &B::Index,
        tap: Tap<'_, B>,
    ) {
        be.memory_hash(&self.codes, &self.p, x, self.dims);
        be.memory_bucket(&self.rows, &self.starts, cursor, &self.codes, self.dims);
        let point = Point::Tables(tap.block, self.layer);
        match tap.scratch(point) {
            None => be.memory_forward(y, &self.codes, &self.p, &m.tables, &m.bias, self.dims),
            Some(parts) => {
                be.memory_parts(parts, &self.codes, &self.p, &m.tables, self.dims);
                tap.apply(be, point, parts);
                be.memory_sum(y, parts, &m.bias, self.dims);
            }
        }
    }

    /// dx (written) and the tables' and bias's gradients from dy.
    #[allow(clippy::too_many_arguments)]
    pub fn backward(
        &self,
        be: &B,
        dx: &B::Tensor,
        dm: &MemoryParams<B::Tensor>,
        dy: &B::Tensor,
        x: &B::Tensor,
        m: &MemoryParams<B::Tensor>,
        tap: Tap<'_, B>,
    ) {
        // Every table's term has the output's gradient.
        tap.grad(be, Point::Tables(tap.block, self.layer), dy);
        let (codes, p, rows, starts) = (&self.codes, &self.p, &self.rows, &self.starts);
        be.memory_backward(
            dx, &dm.tables, &dm.bias, dy, x, codes, p, rows, starts, &m.tables, self.dims,
        );
    }

    /// The layer's bucket use after a forward, named `name`.
    pub fn layer(&self, name: String) -> HashedLayer<'_, B> {
        HashedLayer {
            name,
            tau: self.dims.tau,
            tables: self.dims.k,
            starts: &self.starts,
        }
    }
}

/// The memory block's parameters.
#[derive(Clone, Copy, Debug)]
pub struct MemoryBlockParams<T> {
    pub ml1: MemoryParams<T>, // d → (τ+e)K
    pub ln3: T,               // ((τ+e)K)
    pub ml2: MemoryParams<T>, // (τ+e)K → d
}

impl MemoryBlockParams<ParamId> {
    pub fn map<U>(&self, f: &impl Fn(ParamId) -> U) -> MemoryBlockParams<U> {
        MemoryBlockParams {
            ml1: self.ml1.map(f),
            ln3: f(self.ln3),
            ml2: self.ml2.map(f),
        }
    }
}

/// What the memory block keeps from the forward for the backward.
pub struct MemoryBlockActs<B: Backend> {
    h1: Hashed<B>,
    hid: B::Tensor, // (BT, (τ+e)K) ML1's output
    ln3: B::Tensor,
    ln3_stats: B::Tensor,
    gelu: Option<B::Tensor>, // GELU(ln3), ML2's input, with `block_gelu`
    h2: Hashed<B>,
}

/// The memory block's backward scratch, shared by every block of a model.
pub struct MemoryBlockScratch<B: Backend> {
    dhid: B::Tensor,          // (BT, (τ+e)K)
    dln3: B::Tensor,          // (BT, (τ+e)K)
    dgelu: Option<B::Tensor>, // with `block_gelu`
}

/// f = ML2(Norm(ML1(x))) for `tokens` rows of width d (SPEC §3's memory block, SPEC §5's core):
/// ML1 hashes K = ⌊d/τ⌋ chunks of τ values into (τ+e)·K, ML2 hashes K chunks of τ + e into d
/// (e = 2 in the paper). There is no activation, the hash is the non-linearity, unless
/// `block_gelu` asks for the paper's Table 6 ablation: ML2(GELU(Norm(ML1(x)))).
/// GELU keeps each value's sign, so it changes ML2's weights p(z), never its buckets.
#[derive(Clone, Copy, Debug)]
pub struct MemoryBlock {
    pub hashing: Hashing,
    pub ml1: MemoryDims,
    pub ml2: MemoryDims,
    /// The inner norm over ML1's (τ+e)·K outputs.
    pub norm: NormDims,
}

impl MemoryBlock {
    /// The block over `tokens` rows of width `d`, its inner norm of `kind` and `eps`.
    pub fn new(h: Hashing, tokens: usize, d: usize, kind: engine::NormKind, eps: f32) -> Self {
        let (k, dh) = (h.chunks(d), h.d_hidden(d));
        Self {
            hashing: h,
            ml1: layer_dims(&h, tokens, d, k, h.tau, dh),
            ml2: layer_dims(&h, tokens, dh, k, h.ml2_bits(), d),
            norm: NormDims {
                rows: tokens,
                c: dh,
                kind,
                eps,
            },
        }
    }
}

impl MemoryBlock {
    /// A buffer of `n` values named `name` when the block has its GELU, else none.
    fn gelu<B: Backend>(&self, be: &B, name: &str, n: usize) -> engine::Result<Option<B::Tensor>> {
        self.hashing.block_gelu.then(|| be.zeros(name, n)).transpose()
    }
}

/// The memory block is a feed-forward core: the hybrid's (SPEC §5), and MemoryFormer's FF.
impl FfCore for MemoryBlock {
    type Params<T> = MemoryBlockParams<T>;
    type Acts<B: Backend> = MemoryBlockActs<B>;
    /// The bucket sort's cursor, shared by every Memory Layer of a model: ML2's
    /// `sort_scratch()`, the most any of them needs (it grows with the buckets).
    type Shared<B: Backend> = B::Index;
    type Scratch<B: Backend> = MemoryBlockScratch<B>;

    /// `{prefix}.ml1`, `{prefix}.ln3` and `{prefix}.ml2`, in that order. Tables and biases start
    /// as MemoryFormer's, not with a fan-in init.
    fn declare(&self, lb: &mut LayoutBuilder, prefix: &str) -> MemoryBlockParams<ParamId> {
        let h = &self.hashing;
        MemoryBlockParams {
            ml1: MemoryParams::declare(lb, &format!("{prefix}.ml1"), h, self.ml1),
            ln3: lb.add(format!("{prefix}.ln3"), &[self.norm.c], false, Init::Constant(1.0)),
            ml2: MemoryParams::declare(lb, &format!("{prefix}.ml2"), h, self.ml2),
        }
    }

    fn map<T>(p: &MemoryBlockParams<ParamId>, f: &impl Fn(ParamId) -> T) -> MemoryBlockParams<T> {
        p.map(f)
    }

    fn acts<B: Backend>(&self, be: &B) -> engine::Result<MemoryBlockActs<B>> {
        let n = values(&[self.ml1.tokens, self.norm.c]);
        Ok(MemoryBlockActs {
            h1: Hashed::new(be, self.ml1, MemoryLayer::Ml1)?,
            hid: be.zeros("the ml1 output (batch × seq_len × d_hidden)", n)?,
            ln3: be.zeros("ln3 (batch × seq_len × d_hidden)", n)?,
            ln3_stats: be.zeros("the norm statistics (batch × seq_len)", values(&[self.ml1.tokens, 2]))?,
            gelu: self.gelu(be, "the GELU of ln3 (batch × seq_len × d_hidden)", n)?,
            h2: Hashed::new(be, self.ml2, MemoryLayer::Ml2)?,
        })
    }

    fn shared<B: Backend>(&self, be: &B) -> engine::Result<B::Index> {
        be.index("the bucket sort's cursor (K × 2^(tau+e))", self.ml2.sort_scratch())
    }

    fn scratch<B: Backend>(&self, be: &B) -> engine::Result<MemoryBlockScratch<B>> {
        let n = values(&[self.ml1.tokens, self.norm.c]);
        Ok(MemoryBlockScratch {
            dhid: be.zeros("the ml1 gradient (batch × seq_len × d_hidden)", n)?,
            dln3: be.zeros("the ln3 gradient (batch × seq_len × d_hidden)", n)?,
            dgelu: self.gelu(be, "the GELU gradient (batch × seq_len × d_hidden)", n)?,
        })
    }

    /// out = ML2(Norm(ML1(x))), or ML2(GELU(Norm(ML1(x)))).
    fn forward<B: Backend>(
        &self,
        be: &B,
        out: &B::Tensor,
        x: &B::Tensor,
        a: &MemoryBlockActs<B>,
        cursor: &B::Index,
        p: &MemoryBlockParams<B::Tensor>,
        tap: Tap<'_, B>,
    ) {
        a.h1.forward(be, &a.hid, x, &p.ml1, cursor, tap);
        be.norm_forward(&a.ln3, &a.ln3_stats, &a.hid, &p.ln3, self.norm);
        let ml2_in = match &a.gelu {
            Some(g) => {
                be.gelu_forward(g, &a.ln3);
                g
            }
            None => &a.ln3,
        };
        a.h2.forward(be, out, ml2_in, &p.ml2, cursor, tap);
    }

    fn backward<B: Backend>(
        &self,
        be: &B,
        s: &MemoryBlockScratch<B>,
        dx: &B::Tensor,
        dp: &MemoryBlockParams<B::Tensor>,
        dout: &B::Tensor,
        x: &B::Tensor,
        a: &MemoryBlockActs<B>,
        p: &MemoryBlockParams<B::Tensor>,
        tap: Tap<'_, B>,
    ) {
        match (&a.gelu, &s.dgelu) {
            (Some(g), Some(dg)) => {
                a.h2.backward(be, dg, &dp.ml2, dout, g, &p.ml2, tap);
                be.gelu_backward(&s.dln3, dg, &a.ln3);
            }
            _ => a.h2.backward(be, &s.dln3, &dp.ml2, dout, &a.ln3, &p.ml2, tap),
        }
        be.fill(&s.dhid, 0.0);
        be.norm_backward(&s.dhid, &dp.ln3, &s.dln3, &a.hid, &p.ln3, &a.ln3_stats, self.norm);
        a.h1.backward(be, dx, &dp.ml1, &s.dhid, x, &p.ml1, tap);
    }

    fn tables(&self) -> Vec<(MemoryLayer, MemoryDims)> {
        vec![(MemoryLayer::Ml1, self.ml1), (MemoryLayer::Ml2, self.ml2)]
    }

    /// ML1's and ML2's bucket use, named `{prefix}.ml1` and `{prefix}.ml2`.
    fn hashed_layers<'a, B: Backend>(&self, a: &'a MemoryBlockActs<B>, prefix: &str) -> Vec<HashedLayer<'a, B>> {
        vec![a.h1.layer(format!("{prefix}.ml1")), a.h2.layer(format!("{prefix}.ml2"))]
    }
}
