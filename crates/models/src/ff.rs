//! The feed-forward cores: what turns a block's normalised residual read, x ∈ R^width, into
//! what it writes back. In the RMT and the hybrid x is the R vectors the FF adapters retrieve,
//! x_FF = concat_h(r_FF^(h) ·₁ Norm(X)) ∈ R^{R·D_v}; in the transformer and MemoryFormer it is
//! Norm(X) itself.
//!
//!   Dense         f = W2 · GELU(W1 · x)           the RMT (SPEC §2) and the transformer, here
//!   MemoryBlock   f = ML2(Norm(ML1(x)))           the hybrid (SPEC §5) and MemoryFormer, in
//!                                                 memory_layer.rs
//!
//! The trunk around a core (`trunk::Model`) is the same for both, whatever the residual.

use crate::buckets::HashedLayer;
use crate::interventions::{MemoryLayer, Tap};
use crate::memory::values;
use crate::params::{Init, LayoutBuilder, ParamId};
use engine::{Backend, MatmulDims};

/// A feed-forward core over `tokens` rows of `width` values, in and out.
pub trait FfCore {
    /// One block's parameters: ids when declared, then views of the parameters or gradients.
    type Params<T>;
    /// What one block keeps from the forward for the backward.
    type Acts<B: Backend>;
    /// Forward scratch shared by every block, allocated for inference too.
    type Shared<B: Backend>;
    /// Backward scratch shared by every block.
    type Scratch<B: Backend>;

    /// Declares one block's parameters, named `{prefix}.…`.
    fn declare(&self, lb: &mut LayoutBuilder, prefix: &str) -> Self::Params<ParamId>;
    fn map<T>(p: &Self::Params<ParamId>, f: &impl Fn(ParamId) -> T) -> Self::Params<T>;
    fn acts<B: Backend>(&self, be: &B) -> engine::Result<Self::Acts<B>>;
    fn shared<B: Backend>(&self, be: &B) -> engine::Result<Self::Shared<B>>;
    fn scratch<B: Backend>(&self, be: &B) -> engine::Result<Self::Scratch<B>>;
    /// f = core(x); `tap` reaches its Memory Layers' tables, if it has any.
    #[allow(clippy::too_many_arguments)]
    fn forward<B: Backend>(
        &self,
        be: &B,
        f: &B::Tensor,
        x: &B::Tensor,
        a: &Self::Acts<B>,
        shared: &Self::Shared<B>,
        p: &Self::Params<B::Tensor>,
        tap: Tap<'_, B>,
    );
    /// dx (written) and the core's parameter gradients from df. dx may be df's own buffer: df
    /// is read before dx is written.
    #[allow(clippy::too_many_arguments)]
    fn backward<B: Backend>(
        &self,
        be: &B,
        s: &Self::Scratch<B>,
        dx: &B::Tensor,
        dp: &Self::Params<B::Tensor>,
        df: &B::Tensor,
        x: &B::Tensor,
        a: &Self::Acts<B>,
        p: &Self::Params<B::Tensor>,
        tap: Tap<'_, B>,
    );
    /// Its Memory Layers, in forward order, whose tables are sites; none for a dense core.
    fn tables(&self) -> Vec<(MemoryLayer, engine::MemoryDims)> {
        vec![]
    }
    /// Whether the core has dense maps of its own (W1, W2) for the variance probes.
    fn has_dense_maps(&self) -> bool {
        false
    }
    /// After a forward of `x` into `f`: W1's and W2's (input, output), for the variance probes.
    fn dense_maps<'a, B: Backend>(
        &self,
        _x: &'a B::Tensor,
        _f: &'a B::Tensor,
        _a: &'a Self::Acts<B>,
    ) -> Option<[(&'a B::Tensor, &'a B::Tensor); 2]> {
        None
    }
    /// After a backward: the gradients at W1's output and at W2's input, which the core keeps
    /// in its scratch (W2's output gradient is df, W1's input gradient dx).
    fn dense_grads<'a, B: Backend>(&self, _s: &'a Self::Scratch<B>) -> Option<[&'a B::Tensor; 2]> {
        None
    }
    /// The core's hash tables, for bucket statistics; none for a dense core.
    fn hashed_layers<'a, B: Backend>(&self, _a: &'a Self::Acts<B>, _prefix: &str) -> Vec<HashedLayer<'a, B>> {
        vec![]
    }
}

/// f = W2 · GELU(W1 · x), W1 ∈ R^{D_FF×width}, both N(0, init_std²/fan_in), W2 with an extra
/// `w2_scale`.
#[derive(Clone, Copy, Debug)]
pub struct Dense {
    pub tokens: usize,
    /// R·D_v in the RMT, D in the transformer.
    pub width: usize,
    pub d_ff: usize,
    pub init_std: f32,
    pub weight_init: crate::WeightInit,
    /// The transformer's output scaling of W2; 1 in the RMT, whose w_FF takes it.
    pub w2_scale: f32,
}

#[derive(Clone, Copy, Debug)]
pub struct DenseParams<T> {
    w1: T, // (F, width)
    w2: T, // (width, F)
}

pub struct DenseActs<B: Backend> {
    fch: B::Tensor,      // (BT, F)
    fch_gelu: B::Tensor, // (BT, F)
}

pub struct DenseScratch<B: Backend> {
    dfch: B::Tensor,      // (BT, F)
    dfch_gelu: B::Tensor, // (BT, F)
}

/// The hidden layer before and after GELU.
const HIDDEN: &str = "the FF hidden (batch × seq_len × d_ff)";

impl FfCore for Dense {
    type Params<T> = DenseParams<T>;
    type Acts<B: Backend> = DenseActs<B>;
    type Shared<B: Backend> = ();
    type Scratch<B: Backend> = DenseScratch<B>;

    fn declare(&self, lb: &mut LayoutBuilder, prefix: &str) -> DenseParams<ParamId> {
        let (rv, f) = (self.width, self.d_ff);
        let weight = |fan_in: usize, fan_out: usize, scale: f32| Init::Normal {
            std: self.weight_init.std(self.init_std, fan_in, fan_out, scale),
        };
        DenseParams {
            w1: lb.add(format!("{prefix}.w1"), &[f, rv], true, weight(rv, f, 1.0)),
            w2: lb.add(format!("{prefix}.w2"), &[rv, f], true, weight(f, rv, self.w2_scale)),
        }
    }

    fn map<T>(p: &DenseParams<ParamId>, f: &impl Fn(ParamId) -> T) -> DenseParams<T> {
        DenseParams {
            w1: f(p.w1),
            w2: f(p.w2),
        }
    }

    fn acts<B: Backend>(&self, be: &B) -> engine::Result<DenseActs<B>> {
        let n = values(&[self.tokens, self.d_ff]);
        Ok(DenseActs {
            fch: be.zeros(HIDDEN, n)?,
            fch_gelu: be.zeros(HIDDEN, n)?,
        })
    }

    fn shared<B: Backend>(&self, _be: &B) -> engine::Result<()> {
        Ok(())
    }

    fn scratch<B: Backend>(&self, be: &B) -> engine::Result<DenseScratch<B>> {
        let n = values(&[self.tokens, self.d_ff]);
        Ok(DenseScratch {
            dfch: be.zeros("the FF gradient (batch × seq_len × d_ff)", n)?,
            dfch_gelu: be.zeros("the FF gradient (batch × seq_len × d_ff)", n)?,
        })
    }

    fn forward<B: Backend>(
        &self,
        be: &B,
        f: &B::Tensor,
        x: &B::Tensor,
        a: &DenseActs<B>,
        _shared: &(),
        p: &DenseParams<B::Tensor>,
        _tap: Tap<'_, B>,
    ) {
        let (bt, rv, ff) = (self.tokens, self.width, self.d_ff);
        be.matmul(&a.fch, x, &p.w1, MatmulDims::new(bt, ff, rv).trans_b());
        be.gelu_forward(&a.fch_gelu, &a.fch);
        be.matmul(f, &a.fch_gelu, &p.w2, MatmulDims::new(bt, rv, ff).trans_b());
    }

    fn backward<B: Backend>(
        &self,
        be: &B,
        s: &DenseScratch<B>,
        dx: &B::Tensor,
        dp: &DenseParams<B::Tensor>,
        df: &B::Tensor,
        x: &B::Tensor,
        a: &DenseActs<B>,
        p: &DenseParams<B::Tensor>,
        _tap: Tap<'_, B>,
    ) {
        let (bt, rv, ff) = (self.tokens, self.width, self.d_ff);
        be.matmul(&dp.w2, df, &a.fch_gelu, MatmulDims::new(rv, ff, bt).trans_a());
        be.matmul(&s.dfch_gelu, df, &p.w2, MatmulDims::new(bt, ff, rv));
        be.gelu_backward(&s.dfch, &s.dfch_gelu, &a.fch);
        be.matmul(&dp.w1, &s.dfch, x, MatmulDims::new(ff, rv, bt).trans_a());
        be.matmul(dx, &s.dfch, &p.w1, MatmulDims::new(bt, rv, ff));
    }

    fn has_dense_maps(&self) -> bool {
        true
    }

    fn dense_maps<'a, B: Backend>(
        &self,
        x: &'a B::Tensor,
        f: &'a B::Tensor,
        a: &'a DenseActs<B>,
    ) -> Option<[(&'a B::Tensor, &'a B::Tensor); 2]> {
        Some([(x, &a.fch), (&a.fch_gelu, f)])
    }

    fn dense_grads<'a, B: Backend>(&self, s: &'a DenseScratch<B>) -> Option<[&'a B::Tensor; 2]> {
        Some([&s.dfch, &s.dfch_gelu])
    }
}
