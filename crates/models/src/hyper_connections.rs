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

use crate::attention::{Attention, AttentionNames, Projections};
use crate::embedding::VectorEmbedding;
use crate::ff::Dense;
use crate::params::{Init, LayoutBuilder, ParamId, ParamLayout};
use crate::residual::Streams;
use crate::trunk::{self, Model, Parts};
use crate::{ModelError, Norm, Result, TransformerConfig, WeightInit};
use engine::{HyperDims, Mixing, NormDims, NormKind};
use serde::{Deserialize, Serialize};

/// The hyper-connected transformer: the trunk over n streams with the transformer's maps and
/// core.
pub type HyperConnections<B> = Model<B, HcConfig>;

/// How each site mixes the streams.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum HcMixing {
    /// HC: dynamic hyper-connections with tanh, P unconstrained.
    #[serde(rename = "hc")]
    Hc,
    /// mHC: Sinkhorn's projection of n² logits (`sinkhorn_iters` rounds).
    #[serde(rename = "mhc")]
    Mhc,
    /// mHC-lite: a mixture of the n! permutations, exactly doubly stochastic.
    #[serde(rename = "mhc-lite")]
    MhcLite,
}

impl HcMixing {
    pub const ALL: [HcMixing; 3] = [HcMixing::Hc, HcMixing::Mhc, HcMixing::MhcLite];

    pub fn name(self) -> &'static str {
        match self {
            HcMixing::Hc => "hc",
            HcMixing::Mhc => "mhc",
            HcMixing::MhcLite => "mhc-lite",
        }
    }
}

/// How the sites' gates start (SPEC §6.6).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum HcInit {
    /// Near the identity mixing, Φ = 0: HC's Eq. 14, mHC's and mHC-lite's published code.
    #[default]
    #[serde(rename = "identity")]
    Identity,
    /// Φ ~ N(0, 0.02²), b = 0: P near J/n (mHC and mHC-lite only).
    #[serde(rename = "zero-bias")]
    ZeroBias,
}

impl HcInit {
    pub fn name(self) -> &'static str {
        match self {
            HcInit::Identity => "identity",
            HcInit::ZeroBias => "zero-bias",
        }
    }
}

/// How the n streams become the head's one vector (SPEC §6.2).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum HcCollapse {
    /// The mixing's own (SPEC §6.12): HC `sum`, mHC `head`, mHC-lite `norm-then-sum`.
    #[default]
    #[serde(rename = "auto")]
    Auto,
    /// Σ_j x_j, then the final Norm (HC).
    #[serde(rename = "sum")]
    Sum,
    /// Σ_j q_j x_j with learned gates q, then the final Norm (DeepSeek-V4's `hc_head`).
    #[serde(rename = "head")]
    Head,
    /// The final Norm of each stream, then their sum (mHC-lite's code).
    #[serde(rename = "norm-then-sum")]
    NormThenSum,
}

impl HcCollapse {
    pub fn name(self) -> &'static str {
        match self {
            HcCollapse::Auto => "auto",
            HcCollapse::Sum => "sum",
            HcCollapse::Head => "head",
            HcCollapse::NormThenSum => "norm-then-sum",
        }
    }
}

/// A hyper-connected model's sizes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HcConfig {
    pub vocab: usize,
    pub seq_len: usize,
    /// D, one stream's width.
    pub d_model: usize,
    pub n_layers: usize,
    pub n_heads: usize,
    pub head_dim: usize,
    pub d_ff: usize,
    /// n, the streams.
    pub streams: usize,
    pub mixing: HcMixing,
    /// Sinkhorn's rounds (DeepSeek-V4: 20); unused by mHC-lite.
    pub sinkhorn_iters: u32,
    /// How the gates start (SPEC §6.12: `identity`).
    #[serde(default)]
    pub stream_init: HcInit,
    /// The collapse before the head.
    #[serde(default)]
    pub collapse: HcCollapse,
    pub norm: Norm,
    pub norm_eps: f32,
    pub init_std: f32,
    pub z_loss: f32,
}

impl HcConfig {
    /// The copy task's tiny model: the tiny transformer widened to 4 streams, 20 Sinkhorn rounds.
    pub fn tiny(vocab: usize, seq_len: usize) -> Self {
        Self::widening(&TransformerConfig::tiny(vocab, seq_len), 4, HcMixing::Mhc)
    }

    /// The transformer `t` with `streams` residual streams mixed by `mixing`: its sizes, norm
    /// and init, 20 Sinkhorn rounds, and the mixing's init and collapse (SPEC §6.12).
    pub fn widening(t: &TransformerConfig, streams: usize, mixing: HcMixing) -> Self {
        Self {
            vocab: t.vocab,
            seq_len: t.seq_len,
            d_model: t.d_model,
            n_layers: t.n_layers,
            n_heads: t.n_heads,
            head_dim: t.head_dim,
            d_ff: t.d_ff,
            streams,
            mixing,
            sinkhorn_iters: 20,
            stream_init: HcInit::Identity,
            collapse: HcCollapse::Auto,
            norm: t.norm,
            norm_eps: t.norm_eps,
            init_std: t.init_std,
            z_loss: t.z_loss,
        }
    }

    /// The transformer whose residual these streams widen: each site's branch is its block's
    /// attention or FF (the same maps, core and init), and its counts are the base of
    /// [`counts`]. The inverse of [`Self::widening`].
    pub fn transformer(&self) -> TransformerConfig {
        TransformerConfig {
            d_model: self.d_model,
            n_layers: self.n_layers,
            n_heads: self.n_heads,
            head_dim: self.head_dim,
            d_ff: self.d_ff,
            norm: self.norm,
            norm_eps: self.norm_eps,
            attn_layer_scale: false,
            scaled_output_init: true,
            init_std: self.init_std,
            weight_init: WeightInit::FanIn,
            z_loss: self.z_loss,
            ..TransformerConfig::tiny(self.vocab, self.seq_len)
        }
    }

    /// How the gates start.
    pub fn init(&self) -> HcInit {
        self.stream_init
    }

    /// The collapse before the head, `auto` resolved to the mixing's.
    pub fn collapse(&self) -> HcCollapse {
        match (self.collapse, self.mixing) {
            (HcCollapse::Auto, HcMixing::Hc) => HcCollapse::Sum,
            (HcCollapse::Auto, HcMixing::Mhc) => HcCollapse::Head,
            (HcCollapse::Auto, HcMixing::MhcLite) => HcCollapse::NormThenSum,
            (c, _) => c,
        }
    }

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

    pub fn validate(&self) -> Result<()> {
        let bad = |why: String| Err(ModelError::Config(why));
        if [
            self.vocab,
            self.seq_len,
            self.d_model,
            self.n_layers,
            self.n_heads,
            self.head_dim,
            self.d_ff,
        ]
        .contains(&0)
        {
            return bad("every size of an mHC model must be at least 1".into());
        }
        let most = match self.mixing {
            HcMixing::Hc | HcMixing::Mhc => engine::ops::hyper::MAX_STREAMS,
            HcMixing::MhcLite => engine::ops::hyper::MAX_PERMUTED_STREAMS,
        };
        if !(1..=most).contains(&self.streams) {
            let mixing = self.mixing.name();
            return bad(format!(
                "streams must be 1 to {most} with mixing {mixing}, not {}",
                self.streams
            ));
        }
        if self.mixing == HcMixing::Hc && self.init() == HcInit::ZeroBias {
            return bad(
                "HC's gates are unconstrained: with b = 0 its pre would be 0; use stream_init identity \
                 (zero-bias is for mHC and mHC-lite)"
                    .into(),
            );
        }
        if self.mixing == HcMixing::Hc && self.collapse() == HcCollapse::Head {
            return bad("the head collapse's gates are mHC's; use collapse sum or norm-then-sum with HC".into());
        }
        let rounds = engine::ops::hyper::MAX_ITERS;
        if self.mixing == HcMixing::Mhc && !(1..=rounds).contains(&self.sinkhorn_iters) {
            return bad(format!(
                "sinkhorn_iters must be 1 to {rounds}, not {}",
                self.sinkhorn_iters
            ));
        }
        crate::param_sizes::hc_params(self)?.addressable()?;
        Ok(())
    }
}

/// What a hyper-connected model costs beside the transformer of its D, H, D_h, D_FF and L
/// (SPEC §6.8).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct HcCounts {
    /// The whole model: the transformer's counts plus its sites', as built and in the papers'
    /// conventions; FLOPs per sequence of seq_len tokens, products only (2 a multiply-add).
    pub model: crate::count::Counts,
    /// One site's parameters as built: Φ, its bias and α, (W)(n·D + 1) + 3; HC's W (n + 2 × D),
    /// bias, α and its norm's gain, (n + 3)·D + n(n + 2) + 3.
    pub site_params: u64,
    /// The papers' conventions: mHC's Eq. 7 with the RMSNorm gain counted apart, n·D·W + n·D +
    /// W + 3; HC's Eq. 25 with one s_α, (n + 3)·D + n(n + 2) + 2.
    pub site_params_paper: u64,
    /// One site's multiply-adds a token: the projection (mHC W·n·D, HC n(n + 2)·D), the norm,
    /// the collapse, the mixing and the write-back: (n³ + 3n² + 3n)·D for Sinkhorn, (2n² + 5n)·D
    /// for HC; the gates' own arithmetic not counted.
    pub site_macs: u64,
}

/// The counts of the model `cfg` describes.
pub fn counts(cfg: &HcConfig) -> Result<HcCounts> {
    let base = crate::count::try_transformer(&cfg.transformer())?;
    let overflow = || ModelError::Config("the mHC model's counts overflow 64 bits".into());
    let (n, d, w) = (cfg.streams as u64, cfg.d_model as u64, cfg.gate_width() as u64);
    let sites = 2 * cfg.n_layers as u64;
    let nd = n.checked_mul(d).ok_or_else(overflow)?;
    // Φ (or W) with its bias and three scales, and HC's gain; the paper's convention.
    let (phi, gain, paper) = match cfg.mixing {
        HcMixing::Hc => ((n + 2) * d, d, -1i64),
        _ => (w.checked_mul(nd).ok_or_else(overflow)?, 0, nd as i64),
    };
    let site_params = (phi.checked_add(w + 3 + gain)).ok_or_else(overflow)?;
    let site_params_paper = site_params.checked_add_signed(paper).ok_or_else(overflow)?;
    let (rows, cols, k) = cfg.projection(1);
    let site_macs = ((rows * cols) as u64)
        .checked_mul(k as u64)
        .and_then(|x| x.checked_add(3 * nd + n * n * d))
        .ok_or_else(overflow)?;
    // The collapse before the head: the sum (n·D a token); the head's gates (Φ_h, n × n·D, its
    // bias and α, and x̂'s norm) before it; or a norm of each stream.
    let (collapse_params, collapse_macs) = match cfg.collapse() {
        HcCollapse::Sum | HcCollapse::Auto => (0, nd),
        HcCollapse::Head => {
            let phi = n.checked_mul(nd).ok_or_else(overflow)?;
            (phi + n + 1, phi + 2 * nd)
        }
        HcCollapse::NormThenSum => (0, 2 * nd),
    };
    // The expansion to n streams (n·D a token), the sites and the collapse.
    let macs = sites
        .checked_mul(site_macs)
        .and_then(|x| x.checked_add(nd + collapse_macs))
        .ok_or_else(overflow)?;
    let flops = (cfg.seq_len as u64).checked_mul(2 * macs).ok_or_else(overflow)?;
    let add = |a: u64, b: u64| a.checked_add(b).ok_or_else(overflow);
    let params = sites.checked_mul(site_params).ok_or_else(overflow)?;
    let params_paper = sites.checked_mul(site_params_paper).ok_or_else(overflow)?;
    Ok(HcCounts {
        model: crate::count::Counts {
            params: add(base.params, add(params, collapse_params)?)?,
            params_paper: add(base.params_paper, add(params_paper, collapse_params)?)?,
            flops_fwd: add(base.flops_fwd, flops)?,
            flops_fwd_paper: add(base.flops_fwd_paper, flops)?,
        },
        site_params,
        site_params_paper,
        site_macs,
    })
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
    type Core = Dense;
    type Maps = Projections;

    fn residual(&self, b: usize, t: usize) -> Streams {
        Streams {
            cfg: self.clone(),
            embedding: VectorEmbedding::new(b, t, (self.vocab, self.seq_len, self.d_model), self.init_std),
        }
    }

    fn attention(&self, b: usize, t: usize) -> Attention {
        Attention::new(b, t, (self.n_heads, self.head_dim), false, AttentionNames::HEADS)
    }

    /// Each site's branch is the transformer's: the same maps, core and init.
    fn maps(&self, tokens: usize) -> Projections {
        self.transformer().maps(tokens)
    }

    fn core(&self, tokens: usize) -> Dense {
        self.transformer().core(tokens)
    }

    fn n_layers(&self) -> usize {
        self.n_layers
    }

    fn model(&self) -> crate::ModelConfig {
        crate::ModelConfig::Hc(self.clone())
    }
}

/// The parameter layout of the model `cfg` describes, without building it.
pub fn layout(cfg: &HcConfig) -> ParamLayout {
    trunk::layout(cfg)
}
