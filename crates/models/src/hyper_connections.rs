//! Hyper-connections (HC, SPEC §6.3), manifold-constrained ones (mHC, §6.2, §6.4) and mHC-lite
//! (§6.5): a transformer whose residual is n streams of D, X ∈ R^{n×D} a token, mixed at every
//! site (each block's attention, then its FF) by an n×n P, doubly stochastic but in HC:
//!
//!   X⁰ = (e, e, …, e)                                 e = W_E[token] + W_PE[position]
//!   x̂ = vec(X) / rms(vec(X)),  m = Φ x̂                mHC: one statistic over all n·D values
//!   x̂_j = g ⊙ x_j / rms(x_j),  m_j = W x̂_j            HC: each stream its own n + 2 logits
//!   pre, post, P = gates(m; α, b)                      `engine::ops::hyper`
//!   u = Σ_j pre_j x_j,  f = F(u)                       F = MHA(Norm(·)) or FF(Norm(·))
//!   x'_k = Σ_j P[j,k] x_j + post_k f                   P[j,k]: from stream j to stream k
//!   logits = W_U · Norm(Σ_j x_j)                       the collapse `sum`;
//!            W_U · Norm(Σ_j q_j x_j)                   `head`, q = σ(α·Φ_h x̂ + b) + ε;
//!            W_U · Σ_j Norm(x_j)                       `norm-then-sum`
//!
//! Every per-token product of streams is a batched matmul (a token's n×n, n×D or 1×n matrices),
//! so the only op of its own is the gates'. Two inits (SPEC §6.6), each breaking the streams'
//! symmetry: `identity` starts every site near the identity mixing with Φ = 0 and α = 0.01 (HC's
//! Eq. 14: A_m = e_{s mod n} at site s, B = 1, A_r = I, so that its logits equal the transformer's;
//! mHC's and mHC-lite's logits ±1 for pre and post at stream s mod n, and 0 on P's diagonal or the
//! identity permutation, −8 elsewhere); `zero-bias` (mHC and mHC-lite) has Φ ~ N(0, 0.02²), b = 0,
//! α = 0.01, so that P starts near J/n and the model near a transformer, the random Φ breaking the
//! symmetry. HC's α_pre and α_res are two scales, not the paper's one s_α (one scalar more a site).

use crate::embedding::VectorEmbedding;
use crate::params::{Init, LayoutBuilder, ParamId, ParamLayout};
use crate::residual::Streams;
use crate::trunk::{self, Model, Parts};
use crate::{HcCollapse, HcConfig, HcInit, HcMixing};
use engine::{HyperDims, Mixing, NormDims, NormKind};

/// The hyper-connected transformer: the trunk over n streams with the transformer's maps and
/// core.
pub type HyperConnections<B> = Model<B, HcConfig>;

impl HcConfig {
    /// The logits a site's Φ makes a token: pre, post and the mixing's.
    pub fn gate_width(&self) -> usize {
        self.gates(0).width()
    }

    /// The engine's mixing.
    pub fn engine_mixing(&self) -> Mixing {
        match self.mixing {
            HcMixing::Mhc => Mixing::Sinkhorn {
                iters: self.sinkhorn_iters,
            },
            HcMixing::MhcLite => Mixing::Permutations,
            HcMixing::Hc => Mixing::Tanh,
        }
    }

    /// The gates' projection as one matmul (rows × k)·(cols × k)ᵀ over `tokens` tokens: a
    /// token's n·D values to W logits (mHC), or each stream's D values to its n + 2 (HC).
    pub(crate) fn projection(&self, tokens: usize) -> (usize, usize, usize) {
        let (n, d) = (self.streams, self.d_model);
        match self.mixing {
            HcMixing::Hc => (tokens * n, n + 2, d),
            _ => (tokens, self.gate_width(), n * d),
        }
    }

    pub(crate) fn gates(&self, tokens: usize) -> HyperDims {
        HyperDims {
            tokens,
            n: self.streams,
            mixing: self.engine_mixing(),
        }
    }

    /// One site's gates: their op, their input's norm and their projection.
    pub(crate) fn site_dims(&self, tokens: usize) -> GateDims {
        GateDims {
            gates: self.gates(tokens),
            norm: self.stream_norm(tokens),
            projection: self.projection(tokens),
        }
    }

    /// The `head` collapse's gates: n logits from mHC's x̂ over all n·D values.
    pub(crate) fn head_dims(&self, tokens: usize) -> GateDims {
        let (n, d) = (self.streams, self.d_model);
        GateDims {
            gates: HyperDims {
                tokens,
                n,
                mixing: Mixing::Head,
            },
            norm: NormDims {
                rows: tokens,
                c: n * d,
                kind: NormKind::RmsNorm,
                eps: engine::ops::hyper::EPS,
            },
            projection: (tokens, n, n * d),
        }
    }

    /// The final Norm: of the collapsed vector, or of each stream (`norm-then-sum`).
    pub(crate) fn final_norm(&self, tokens: usize) -> NormDims {
        match self.collapse() {
            HcCollapse::NormThenSum => self.branch_norm(tokens * self.streams),
            _ => self.branch_norm(tokens),
        }
    }

    /// One site's statistic over all n·D values of a token (the gain-free RMSNorm of §6.4), or
    /// HC's RMSNorm of each stream (§6.12: the engine's RMSNorm with gain for its LayerNorm).
    pub(crate) fn stream_norm(&self, tokens: usize) -> NormDims {
        let (n, d) = (self.streams, self.d_model);
        match self.mixing {
            HcMixing::Hc => NormDims {
                rows: tokens * n,
                c: d,
                kind: NormKind::RmsNorm,
                eps: self.norm_eps,
            },
            _ => NormDims {
                rows: tokens,
                c: n * d,
                kind: NormKind::RmsNorm,
                eps: engine::ops::hyper::EPS,
            },
        }
    }

    pub(crate) fn branch_norm(&self, rows: usize) -> NormDims {
        NormDims {
            rows,
            c: self.d_model,
            kind: self.norm.into(),
            eps: self.norm_eps,
        }
    }
}

/// One set of gates: a site's (pre, post and P) or the head collapse's (pre only), with the norm
/// of their input and their projection Φ as one matmul (rows × k)·(cols × k)ᵀ.
#[derive(Clone, Copy, Debug)]
pub(crate) struct GateDims {
    pub(crate) gates: HyperDims,
    pub(crate) norm: NormDims,
    pub(crate) projection: (usize, usize, usize),
}

/// One site's hyper-connection: Φ (W, n·D; HC's W is n + 2 × D), its bias (W), its three
/// scales (the head's one), and HC's norm gain (D).
#[derive(Clone, Copy, Debug)]
pub(crate) struct SiteParams<T> {
    pub(crate) phi: T,
    pub(crate) bias: T,
    pub(crate) alpha: T,
    pub(crate) gain: Option<T>,
}

impl SiteParams<ParamId> {
    /// The parameters of site `site`'s gates (0: block 0's attention, 1: its FF, …, 2L: the
    /// head's collapse), of `dims`. Weight decay on Φ only: the static parts take none (HC §4).
    pub(crate) fn declare(lb: &mut LayoutBuilder, prefix: &str, cfg: &HcConfig, site: usize, dims: GateDims) -> Self {
        let (_, cols, k) = dims.projection;
        let (n, w, at) = (cfg.streams, dims.gates.width(), site % cfg.streams);
        let one_hot = |j: usize, on: f32, off: f32| if j == at { on } else { off };
        let (phi, bias) = match (cfg.init(), dims.gates.mixing) {
            (HcInit::ZeroBias, _) => (Init::Normal { std: 0.02 }, Init::Constant(0.0)),
            // HC's Eq. 14, stream by stream: [A_m,j = (j = s mod n), B_j = 1, A_r[j,·] = e_j].
            (HcInit::Identity, Mixing::Tanh) => {
                let stream = |j: usize| {
                    [one_hot(j, 1.0, 0.0), 1.0]
                        .into_iter()
                        .chain((0..n).map(move |k| (j == k) as u8 as f32))
                };
                (
                    Init::Normal { std: 0.0 },
                    Init::Values((0..n).flat_map(stream).collect()),
                )
            }
            // mHC's and mHC-lite's: pre and post logits ±1 at stream s mod n, P near I (its
            // diagonal, or the identity permutation, 0 and the rest −8).
            (HcInit::Identity, mixing) => {
                let gates: Vec<f32> = (0..n).map(|j| one_hot(j, 1.0, -1.0)).collect();
                let res: Vec<f32> = match mixing {
                    Mixing::Sinkhorn { .. } => (0..n * n).map(|i| if i % (n + 1) == 0 { 0.0 } else { -8.0 }).collect(),
                    Mixing::Permutations => (0..dims.gates.res_logits())
                        .map(|p| if p == 0 { 0.0 } else { -8.0 })
                        .collect(),
                    _ => vec![],
                };
                let post = if mixing == Mixing::Head { &[][..] } else { &gates[..] };
                let values = gates.iter().chain(post).chain(&res).copied().collect();
                (Init::Normal { std: 0.0 }, Init::Values(values))
            }
        };
        SiteParams {
            phi: lb.add(format!("{prefix}.hc_phi"), &[cols, k], true, phi),
            bias: lb.add(format!("{prefix}.hc_bias"), &[w], false, bias),
            alpha: lb.add(
                format!("{prefix}.hc_alpha"),
                &[dims.gates.scales()],
                false,
                Init::Constant(0.01),
            ),
            // HC's per-stream norm has a gain; mHC's one statistic over n·D has none.
            gain: (dims.gates.mixing == Mixing::Tanh)
                .then(|| lb.add(format!("{prefix}.hc_norm"), &[cfg.d_model], false, Init::ONE)),
        }
    }

    pub(crate) fn map<T>(&self, f: &impl Fn(ParamId) -> T) -> SiteParams<T> {
        SiteParams {
            phi: f(self.phi),
            bias: f(self.bias),
            alpha: f(self.alpha),
            gain: self.gain.map(f),
        }
    }
}

impl Parts for HcConfig {
    type Residual = Streams;
    trunk::transformer_branches!();

    fn residual(&self, b: usize, t: usize) -> Streams {
        Streams {
            cfg: self.clone(),
            embedding: VectorEmbedding::new(b, t, (self.vocab, self.context, self.d_model), self.init_std),
        }
    }

    fn model(&self) -> crate::ModelConfig {
        crate::ModelConfig::Hc(self.clone())
    }
}

/// The parameter layout of the model `cfg` describes, without building it.
pub fn layout(cfg: &HcConfig) -> ParamLayout {
    trunk::layout(cfg)
}
