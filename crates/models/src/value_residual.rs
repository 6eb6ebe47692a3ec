//! The value residual (ResFormer, Zhou et al., arXiv:2410.17897; SPEC §7.4), an option of the
//! transformer: every layer n ≥ 1 attends with its values mixed with layer 0's,
//!
//!   V'_n = ½ V_n + ½ V_0          `half`, the official code's fixed mix
//!
//! before the heads split. V_0 is not detached: its gradient gathers ½ dV'_n from every later
//! layer and joins layer 0's own. A token's qkv row is [Q | K | V], a 3×C block (C = H·D_h),
//! so the mix is that block times constant 3×3 matrices: diag(1, 1, ½) on the layer's own and
//! ½ e_v e_vᵀ on layer 0's. Both are symmetric, so the backward multiplies by the same two.

use crate::ValueResidual;
use engine::{Backend, MatmulDims};

/// The mix over `tokens` rows of attention `width` C = H·D_h.
#[derive(Clone, Copy, Debug)]
pub struct ValueMix {
    pub residual: ValueResidual,
    pub tokens: usize,
    pub width: usize,
}

/// The two constant 3×3 matrices.
pub struct ValueConstants<B: Backend> {
    own: B::Tensor,
    first: B::Tensor,
}

/// Backward scratch: the gradient of a layer's unmixed qkv, what its maps read, and layer 0's
/// share of every later layer's, (BT, 3C) each.
pub struct ValueScratch<B: Backend> {
    dpremix: B::Tensor,
    dfirst: B::Tensor,
}

impl ValueMix {
    /// No mix: the maps write attention's input themselves.
    pub fn off(tokens: usize, width: usize) -> Self {
        ValueMix {
            residual: ValueResidual::Off,
            tokens,
            width,
        }
    }

    fn on(&self) -> bool {
        match self.residual {
            ValueResidual::Off => false,
            ValueResidual::Half => true,
        }
    }

    fn rows(&self) -> usize {
        self.tokens * 3 * self.width
    }

    /// Each token's 3×3 constant times its 3×C block.
    fn per_token(&self) -> MatmulDims {
        MatmulDims::new(3, self.width, 3).batched(self.tokens, true, false)
    }

    /// Where block `layer`'s maps write their qkv before the mix: a buffer of its own for every
    /// layer after the first, when the mix is on.
    pub fn premix<B: Backend>(&self, be: &B, layer: usize) -> engine::Result<Option<B::Tensor>> {
        (self.on() && layer > 0)
            .then(|| be.zeros("the unmixed qkv (batch × seq_len × 3·n_heads·head_dim)", self.rows()))
            .transpose()
    }

    pub fn constants<B: Backend>(&self, be: &B) -> engine::Result<Option<ValueConstants<B>>> {
        let constant = |values: [f32; 9]| -> engine::Result<B::Tensor> {
            let t = be.zeros("the value mix", 9)?;
            be.write(&t, &values);
            Ok(t)
        };
        let half = 0.5;
        self.on()
            .then(|| {
                Ok(ValueConstants {
                    own: constant([1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, half])?,
                    first: constant([0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, half])?,
                })
            })
            .transpose()
    }

    pub fn scratch<B: Backend>(&self, be: &B) -> engine::Result<Option<ValueScratch<B>>> {
        let z = |what: &str| be.zeros(what, self.rows());
        self.on()
            .then(|| {
                Ok(ValueScratch {
                    dpremix: z("the unmixed qkv's gradient")?,
                    dfirst: z("layer 0's values' gradient from later layers")?,
                })
            })
            .transpose()
    }

    /// qkv = [Q | K | ½ V_n] + [0 | 0 | ½ V_0], from the layer's unmixed `premix` and layer 0's
    /// `first`.
    pub fn forward<B: Backend>(
        &self,
        be: &B,
        c: &ValueConstants<B>,
        qkv: &B::Tensor,
        premix: &B::Tensor,
        first: &B::Tensor,
    ) {
        be.matmul(qkv, &c.own, premix, self.per_token());
        be.matmul(qkv, &c.first, first, self.per_token().accumulate());
    }

    /// From attention's `dqkv`, the unmixed qkv's gradient (returned, for the maps) and layer
    /// 0's share, written at the last layer (the backward's first) and added after.
    pub fn backward<'a, B: Backend>(
        &self,
        be: &B,
        c: &ValueConstants<B>,
        s: &'a ValueScratch<B>,
        dqkv: &B::Tensor,
        last: bool,
    ) -> &'a B::Tensor {
        be.matmul(&s.dpremix, &c.own, dqkv, self.per_token());
        let onto = match last {
            true => self.per_token(),
            false => self.per_token().accumulate(),
        };
        be.matmul(&s.dfirst, &c.first, dqkv, onto);
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
        mix.forward(&be, &c, &qkv, &premix, &first);
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
