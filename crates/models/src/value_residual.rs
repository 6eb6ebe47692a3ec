//! The value residual (ResFormer, Zhou et al., arXiv:2410.17897; SPEC §7.4), an option of the
//! transformer: every layer n ≥ 1 attends with its values mixed with layer 0's,
//!
//!   V'_n = ½ V_n + ½ V_0                 `half`, the official code's fixed mix
//!   V'_n = (1 − λ_n) V_n + λ_n V_0       `learnable`, λ_n from ½ (modded-nanogpt's tied form)
//!
//! before the heads split. V_0 is not detached: its gradient gathers λ_n dV'_n from every later
//! layer and joins layer 0's own. A token's qkv row is [Q | K | V], a 3×C block (C = H·D_h),
//! so the mix is that block times two 3×3 matrices: diag(1, 1, 1 − λ) on the layer's own and
//! λ e_v e_vᵀ on layer 0's. Both are symmetric, so the backward multiplies by the same two;
//! dλ_n = Σ_t ⟨dV'_n, V_0 − V_n⟩ is read off each token's 3×3 products dV' Vᵀ, summed over the
//! tokens in order.

use crate::params::{Init, LayoutBuilder, ParamId};
use crate::ValueResidual;
use engine::{Backend, MatmulDims};

/// The mix over `tokens` rows of attention `width` C = H·D_h, in a model of `layers` layers.
#[derive(Clone, Copy, Debug)]
pub struct ValueMix {
    pub residual: ValueResidual,
    pub tokens: usize,
    pub width: usize,
    pub layers: usize,
}

/// Each layer's two 3×3 matrices (layer 0's unused): constants for `half`, made from λ_n at each
/// forward for `learnable`, with what makes them.
pub struct ValueConstants<B: Backend> {
    own: Vec<B::Tensor>,
    first: Vec<B::Tensor>,
    /// The identity, −e_v e_vᵀ and e_v e_vᵀ (9 each), 1, and ones over the tokens.
    parts: Option<[B::Tensor; 5]>,
}

/// Backward scratch: the gradient of a layer's unmixed qkv, what its maps read, and layer 0's
/// share of every later layer's, (BT, 3C) each; for `learnable`, each token's 3×3 products
/// dV' V_0ᵀ and dV' V_nᵀ (BT, 9 each) and their sums over the tokens (9 each).
pub struct ValueScratch<B: Backend> {
    dpremix: B::Tensor,
    dfirst: B::Tensor,
    dlambda: Option<LambdaScratch<B>>,
}

/// Each token's products dV' V_0ᵀ and dV' V_nᵀ, then their sums over the tokens.
type LambdaScratch<B> = ([<B as Backend>::Tensor; 2], [<B as Backend>::Tensor; 2]);

impl ValueMix {
    /// No mix: the maps write attention's input themselves.
    pub fn off(tokens: usize, width: usize) -> Self {
        ValueMix {
            residual: ValueResidual::Off,
            tokens,
            width,
            layers: 0,
        }
    }

    fn on(&self) -> bool {
        match self.residual {
            ValueResidual::Off => false,
            ValueResidual::Half | ValueResidual::Learnable => true,
        }
    }

    fn learnable(&self) -> bool {
        match self.residual {
            ValueResidual::Off | ValueResidual::Half => false,
            ValueResidual::Learnable => true,
        }
    }

    fn rows(&self) -> usize {
        self.tokens * 3 * self.width
    }

    /// Each token's 3×3 matrix times its 3×C block.
    fn per_token(&self) -> MatmulDims {
        MatmulDims::new(3, self.width, 3).batched(self.tokens, true, false)
    }

    /// `blocks.{layer}.value_lambda`, λ_n from ½ with no decay, for every layer after the first
    /// of a learnable mix.
    pub fn declare(&self, lb: &mut LayoutBuilder, layer: usize) -> Option<ParamId> {
        (self.learnable() && layer > 0)
            .then(|| lb.add(format!("blocks.{layer}.value_lambda"), &[1], false, Init::Constant(0.5)))
    }

    /// Where block `layer`'s maps write their qkv before the mix: a buffer of its own for every
    /// layer after the first, when the mix is on.
    pub fn premix<B: Backend>(&self, be: &B, layer: usize) -> engine::Result<Option<B::Tensor>> {
        (self.on() && layer > 0)
            .then(|| be.zeros("the unmixed qkv (batch × seq_len × 3·n_heads·head_dim)", self.rows()))
            .transpose()
    }

    pub fn constants<B: Backend>(&self, be: &B) -> engine::Result<Option<ValueConstants<B>>> {
        let constant = |values: &[f32]| -> engine::Result<B::Tensor> {
            let t = be.zeros("the value mix", values.len())?;
            be.write(&t, values);
            Ok(t)
        };
        let (own, first) = (
            [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.5],
            [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.5],
        );
        let vv = [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0];
        let parts = || -> engine::Result<[B::Tensor; 5]> {
            Ok([
                constant(&[1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0])?,
                constant(&vv.map(|v: f32| -v))?,
                constant(&vv)?,
                constant(&[1.0])?,
                constant(&vec![1.0; self.tokens])?,
            ])
        };
        self.on()
            .then(|| {
                Ok(ValueConstants {
                    own: (0..self.layers).map(|_| constant(&own)).collect::<Result<_, _>>()?,
                    first: (0..self.layers).map(|_| constant(&first)).collect::<Result<_, _>>()?,
                    parts: self.learnable().then(parts).transpose()?,
                })
            })
            .transpose()
    }

    pub fn scratch<B: Backend>(&self, be: &B) -> engine::Result<Option<ValueScratch<B>>> {
        let z = |what: &str, len| be.zeros(what, len);
        let dlambda = || -> engine::Result<LambdaScratch<B>> {
            let products = || z("each token's value-mix products", self.tokens * 9);
            let sums = || z("the value-mix products", 9);
            Ok(([products()?, products()?], [sums()?, sums()?]))
        };
        self.on()
            .then(|| {
                Ok(ValueScratch {
                    dpremix: z("the unmixed qkv's gradient", self.rows())?,
                    dfirst: z("layer 0's values' gradient from later layers", self.rows())?,
                    dlambda: self.learnable().then(dlambda).transpose()?,
                })
            })
            .transpose()
    }

    /// qkv = [Q | K | (1 − λ) V_n] + [0 | 0 | λ V_0] for layer `layer`, from its unmixed `premix`
    /// and layer 0's `first`; a learnable mix makes its two matrices from λ first.
    #[allow(clippy::too_many_arguments)]
    pub fn forward<B: Backend>(
        &self,
        be: &B,
        c: &ValueConstants<B>,
        qkv: &B::Tensor,
        premix: &B::Tensor,
        first: &B::Tensor,
        layer: usize,
        lambda: Option<&B::Tensor>,
    ) {
        let (own, mixed) = (&c.own[layer], &c.first[layer]);
        if let (Some([identity, minus_vv, vv, one, _]), Some(lambda)) = (&c.parts, lambda) {
            let scalar = MatmulDims::new(9, 1, 1);
            be.matmul(own, identity, one, scalar);
            be.matmul(own, minus_vv, lambda, scalar.accumulate());
            be.matmul(mixed, vv, lambda, scalar);
        }
        be.matmul(qkv, own, premix, self.per_token());
        be.matmul(qkv, mixed, first, self.per_token().accumulate());
    }

    /// From attention's `dqkv`, the unmixed qkv's gradient (returned, for the maps) and layer
    /// 0's share, written at the last layer (the backward's first) and added after; a learnable
    /// mix's dλ = Σ_t ⟨dV', V_0⟩ − ⟨dV', V_n⟩ from the forward's `premix` and `first`.
    #[allow(clippy::too_many_arguments)]
    pub fn backward<'a, B: Backend>(
        &self,
        be: &B,
        c: &ValueConstants<B>,
        s: &'a ValueScratch<B>,
        dqkv: &B::Tensor,
        (premix, first): (&B::Tensor, &B::Tensor),
        layer: usize,
        dlambda: Option<&B::Tensor>,
    ) -> &'a B::Tensor {
        be.matmul(&s.dpremix, &c.own[layer], dqkv, self.per_token());
        let onto = match layer + 1 == self.layers {
            true => self.per_token(),
            false => self.per_token().accumulate(),
        };
        be.matmul(&s.dfirst, &c.first[layer], dqkv, onto);
        if let (Some([_, minus_vv, vv, _, ones]), Some((products, sums)), Some(dlambda)) =
            (&c.parts, &s.dlambda, dlambda)
        {
            let bt = self.tokens;
            // Each token's dV' Xᵀ (3×3), for X = V_0 and X = V_n, summed over the tokens; dλ is
            // the sums' [2, 2] entries, the first's less the second's.
            let outer = MatmulDims::new(3, 3, self.width).trans_b().batched(bt, false, false);
            for ((p, sum), x) in products.iter().zip(sums).zip([first, premix]) {
                be.matmul(p, dqkv, x, outer);
                be.matmul(sum, ones, p, MatmulDims::new(1, 9, bt));
            }
            be.matmul(dlambda, vv, &sums[0], MatmulDims::new(1, 1, 9));
            be.matmul(dlambda, minus_vv, &sums[1], MatmulDims::new(1, 1, 9).accumulate());
        }
        &s.dpremix
    }

    /// Layer 0's qkv gradient gets what the later layers' mixes sent it.
    pub fn into_first<B: Backend>(&self, be: &B, s: &ValueScratch<B>, dqkv: &B::Tensor) {
        be.add_assign(dqkv, &s.dfirst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use engine::cpu::CpuBackend;
    use engine::AttentionDims;

    /// SPEC §7.8 T-V1: one head of 2, two tokens, V_0 rows (2, 0) and (0, 2), V_n rows (0, 4) and
    /// (4, 0). `half` makes V'_n's rows (1, 2) and (2, 1), and Q and K pass unchanged; with equal
    /// scores (Q = K = 0), token 0's attention output is (1, 2) and token 1's (1.5, 1.5).
    #[test]
    fn the_spec_worked_example() {
        let be = CpuBackend::<f64>::new();
        let mix = ValueMix {
            residual: ValueResidual::Half,
            tokens: 2,
            width: 2,
            layers: 2,
        };
        let t = |values: &[f32]| {
            let x = be.zeros("", values.len()).unwrap();
            be.write(&x, values);
            x
        };
        let read = |x| pollster::block_on(be.read(x)).unwrap();
        // A token's row: [q | k | v], 2 values each.
        let first = t(&[0.0, 0.0, 0.0, 0.0, 2.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 2.0]);
        let premix = t(&[0.0, 0.0, 0.0, 0.0, 0.0, 4.0, 0.0, 0.0, 0.0, 0.0, 4.0, 0.0]);
        let qkv = t(&[0.0; 12]);
        let c = mix.constants(&be).unwrap().unwrap();
        mix.forward(&be, &c, &qkv, &premix, &first, 1, None);
        assert_eq!(read(&qkv), [0.0, 0.0, 0.0, 0.0, 1.0, 2.0, 0.0, 0.0, 0.0, 0.0, 2.0, 1.0]);
        let (out, lse, doc_start) = (t(&[0.0; 4]), t(&[0.0; 2]), be.index("", 2).unwrap());
        let dims = AttentionDims {
            b: 1,
            t: 2,
            h: 1,
            dh: 2,
            scale: 1.0,
            alibi: false,
        };
        be.attention_forward(&out, &lse, &qkv, &doc_start, dims);
        assert_eq!(read(&out), [1.0, 2.0, 1.5, 1.5]);
    }
}
