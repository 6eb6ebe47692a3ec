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

use crate::attention::{
    Attention, AttentionActs, AttentionMaps, AttentionNames, AttentionScratch, ProjectionParams, Projections,
};
use crate::batch::BatchTensors;
use crate::embedding::{VectorEmbedding, VectorEmbeddingParams};
use crate::ff::{Dense, DenseActs, DenseParams, DenseScratch, FfCore};
use crate::interventions::{edits, sites, EditPoint, Edits, Group, Point, ReadOut, Tap};
use crate::loss::{LossHead, Unembedding};
use crate::observe::{self, Inside, Shape};
use crate::params::{Init, LayoutBuilder, ParamId, ParamLayout, ParamStore};
use crate::probes::Layer;
use crate::residual_vector::ResidualVectorConfig;
use crate::train::LanguageModel;
use crate::{ModelError, Norm, Observe, Result, TransformerConfig, WeightInit};
use engine::{Backend, HyperDims, MatmulDims, Mixing, NormDims, NormKind};
use serde::{Deserialize, Serialize};

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
    fn projection(&self, tokens: usize) -> (usize, usize, usize) {
        let (n, d) = (self.streams, self.d_model);
        match self.mixing {
            HcMixing::Hc => (tokens * n, n + 2, d),
            _ => (tokens, self.gate_width(), n * d),
        }
    }

    fn gates(&self, tokens: usize) -> HyperDims {
        HyperDims {
            tokens,
            n: self.streams,
            mixing: self.engine_mixing(),
        }
    }

    /// One site's gates: their op, their input's norm and their projection.
    fn site_dims(&self, tokens: usize) -> GateDims {
        GateDims {
            gates: self.gates(tokens),
            norm: self.stream_norm(tokens),
            projection: self.projection(tokens),
        }
    }

    /// The `head` collapse's gates: n logits from mHC's x̂ over all n·D values.
    fn head_dims(&self, tokens: usize) -> GateDims {
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
    fn final_norm(&self, tokens: usize) -> NormDims {
        match self.collapse() {
            HcCollapse::NormThenSum => self.branch_norm(tokens * self.streams),
            _ => self.branch_norm(tokens),
        }
    }

    /// One site's statistic over all n·D values of a token (the gain-free RMSNorm of §6.4), or
    /// HC's RMSNorm of each stream (§6.12: the engine's RMSNorm with gain for its LayerNorm).
    fn stream_norm(&self, tokens: usize) -> NormDims {
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

    fn branch_norm(&self, rows: usize) -> NormDims {
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

    fn attention_maps(&self, tokens: usize) -> Projections {
        self.transformer().maps(tokens)
    }

    fn core(&self, tokens: usize) -> Dense {
        self.transformer().core(tokens)
    }

    fn embedding(&self, b: usize, t: usize) -> VectorEmbedding {
        VectorEmbedding {
            tokens: b * t,
            t,
            d_model: self.d_model,
            vocab: self.vocab,
            seq_len: self.seq_len,
            std: self.init_std,
        }
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
struct GateDims {
    gates: HyperDims,
    norm: NormDims,
    projection: (usize, usize, usize),
}

/// One site's hyper-connection: Φ (W, n·D; HC's W is n + 2 × D), its bias (W), its three
/// scales (the head's one), and HC's norm gain (D).
#[derive(Clone, Copy, Debug)]
struct SiteParams<T> {
    phi: T,
    bias: T,
    alpha: T,
    gain: Option<T>,
}

impl SiteParams<ParamId> {
    /// The parameters of site `site`'s gates (0: block 0's attention, 1: its FF, …, 2L: the
    /// head's collapse), of `dims`. Weight decay on Φ only: the static parts take none (HC §4).
    fn declare(lb: &mut LayoutBuilder, prefix: &str, cfg: &HcConfig, site: usize, dims: GateDims) -> Self {
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

    fn map<T>(&self, f: &impl Fn(ParamId) -> T) -> SiteParams<T> {
        SiteParams {
            phi: f(self.phi),
            bias: f(self.bias),
            alpha: f(self.alpha),
            gain: self.gain.map(f),
        }
    }
}

#[derive(Clone, Debug)]
struct Block<T> {
    attn_hc: SiteParams<T>,
    ln1: T,
    maps: ProjectionParams<T>,
    ff_hc: SiteParams<T>,
    ln2: T,
    core: DenseParams<T>,
}

#[derive(Clone, Debug)]
struct Weights<T> {
    embedding: VectorEmbeddingParams<T>,
    blocks: Vec<Block<T>>,
    /// The `head` collapse's gates.
    head: Option<SiteParams<T>>,
    lnf: T,
    w_u: T,
}

impl Weights<ParamId> {
    fn map<T>(&self, f: impl Fn(ParamId) -> T) -> Weights<T> {
        Weights {
            embedding: self.embedding.map(&f),
            blocks: (self.blocks.iter())
                .map(|b| Block {
                    attn_hc: b.attn_hc.map(&f),
                    ln1: f(b.ln1),
                    maps: <Projections as AttentionMaps<Dense>>::map(&b.maps, &f),
                    ff_hc: b.ff_hc.map(&f),
                    ln2: f(b.ln2),
                    core: Dense::map(&b.core, &f),
                })
                .collect(),
            head: self.head.as_ref().map(|h| h.map(&f)),
            lnf: f(self.lnf),
            w_u: f(self.w_u),
        }
    }
}

fn declare(cfg: &HcConfig) -> (ParamLayout, Weights<ParamId>) {
    let (d, v) = (cfg.d_model, cfg.vocab);
    let (maps, core) = (cfg.attention_maps(0), cfg.core(0));
    let mut lb = LayoutBuilder::default();
    let embedding = cfg.embedding(0, 0).declare(&mut lb);
    let blocks = (0..cfg.n_layers)
        .map(|i| Block {
            attn_hc: SiteParams::declare(&mut lb, &format!("blocks.{i}.attn"), cfg, 2 * i, cfg.site_dims(0)),
            ln1: lb.add(format!("blocks.{i}.ln1"), &[d], false, Init::ONE),
            maps: <Projections as AttentionMaps<Dense>>::declare(&maps, &mut lb, &format!("blocks.{i}")),
            ff_hc: SiteParams::declare(&mut lb, &format!("blocks.{i}.ff"), cfg, 2 * i + 1, cfg.site_dims(0)),
            ln2: lb.add(format!("blocks.{i}.ln2"), &[d], false, Init::ONE),
            core: core.declare(&mut lb, &format!("blocks.{i}")),
        })
        .collect();
    let head = (cfg.collapse() == HcCollapse::Head)
        .then(|| SiteParams::declare(&mut lb, "head", cfg, 2 * cfg.n_layers, cfg.head_dims(0)));
    let lnf = lb.add("lnf", &[d], false, Init::ONE);
    // W_U from zero: the first loss is exactly ln V.
    let w_u = lb.add("w_u", &[v, d], false, Init::Normal { std: 0.0 });
    let ids = Weights {
        embedding,
        blocks,
        head,
        lnf,
        w_u,
    };
    (lb.build(), ids)
}

/// The parameter layout of the model `cfg` describes, without building it.
pub fn layout(cfg: &HcConfig) -> ParamLayout {
    declare(cfg).0
}

/// What one set of gates keeps for its backward.
struct Gates<B: Backend> {
    xhat: B::Tensor,   // (BT, n·D)
    xstats: B::Tensor, // (BT, 2); HC's (BT·n, 2)
    m: B::Tensor,      // (BT, W)
    pre: B::Tensor,    // (BT, n)
    post: B::Tensor,   // (BT, n), unused by the head
    mix: B::Tensor,    // (BT, n, n), unused by the head
    u: B::Tensor,      // (BT, D) the collapsed input
}

impl<B: Backend> Gates<B> {
    fn new(be: &B, d: GateDims, d_model: usize) -> engine::Result<Self> {
        let (bt, n) = (d.gates.tokens, d.gates.n);
        let z = |what: &str, len: usize| be.zeros(what, len);
        Ok(Gates {
            xhat: z(
                "the streams' norm (batch × seq_len × streams·d_model)",
                bt * n * d_model,
            )?,
            xstats: z("the streams' norm statistics", 2 * d.norm.rows)?,
            m: z("the gates' logits", bt * d.gates.width())?,
            pre: z("pre", bt * n)?,
            post: z("post", bt * n)?,
            mix: z("the mixing matrices (batch × seq_len × streams²)", bt * n * n)?,
            u: z("the collapsed input (batch × seq_len × d_model)", bt * d_model)?,
        })
    }
}

/// What one site keeps for its backward.
struct SiteActs<B: Backend> {
    gates: Gates<B>,
    ln: B::Tensor, // (BT, D) Norm(u)
    ln_stats: B::Tensor,
    f: B::Tensor,   // (BT, D) the branch's output
    out: B::Tensor, // (BT, n, D) the streams after the site
}

struct BlockActs<B: Backend> {
    attn: SiteActs<B>,
    attention: AttentionActs<B>,
    ff: SiteActs<B>,
    core: DenseActs<B>,
}

/// Gradient scratch shared by every site.
struct Scratch<B: Backend> {
    /// (BT, n, D) each: the gradient of a site's output streams and of its input, swapped
    /// from site to site.
    dstreams: [B::Tensor; 2],
    du: B::Tensor,  // (BT, D)
    dln: B::Tensor, // (BT, D)
    df: B::Tensor,  // (BT, D)
    dpre: B::Tensor,
    dpost: B::Tensor,
    dmix: B::Tensor,
    dm: B::Tensor,
    dz: B::Tensor,
    dalpha: B::Tensor, // (BT, 3)
    dxhat: B::Tensor,  // (BT, n·D)
    dgain: B::Tensor,  // (n·D) the gain-free norm's, unused
    dh: B::Tensor,     // (BT, D) the head's collapse
    de: B::Tensor,     // (BT, D) the embedding's
    attention: AttentionScratch<B>,
    maps: B::Tensor,
    core: DenseScratch<B>,
}

/// The mHC (or mHC-lite) model of an [`HcConfig`].
pub struct HyperConnections<B: Backend> {
    pub cfg: HcConfig,
    b: usize,
    t: usize,
    embedding: VectorEmbedding,
    maps: Projections,
    attention: Attention,
    core: Dense,
    store: ParamStore<B>,
    w: Weights<B::Tensor>,
    dw: Option<Weights<B::Tensor>>,
    encoded: B::Tensor,  // (BT, D) e
    streams0: B::Tensor, // (BT, n, D) X⁰
    blocks: Vec<BlockActs<B>>,
    /// The `head` collapse's gates.
    head: Option<Gates<B>>,
    /// Constant ones: over the streams, a token's n·D values (the norm's gain) and the tokens
    /// (the column sums of the gates' gradients).
    ones_n: B::Tensor,
    ones_nd: B::Tensor,
    ones_bt: B::Tensor,
    h: B::Tensor,         // (BT, D) the collapse: Σ_j x_j, Σ_j q_j x_j, or Σ_j Norm(x_j)
    lnf: B::Tensor,       // (BT, D) Norm(h); (BT, n, D) with `norm-then-sum`
    lnf_stats: B::Tensor, // (BT, 2); (BT·n, 2)
    unembedding: Unembedding<B>,
    s: Option<Scratch<B>>,
    /// An intervention's edits; None in training.
    edits: Option<Edits<B>>,
}

impl<B: Backend> HyperConnections<B> {
    /// Builds the model for batches of `b` sequences of `t` ≤ N tokens, initialised from `seed`.
    pub fn new(be: &B, cfg: HcConfig, b: usize, t: usize, seed: u64) -> Result<Self> {
        Self::build(be, cfg, b, t, Some(seed))
    }

    /// Forward only: parameters (all 0 until written) and activations, but no gradients or
    /// backward scratch. `backward` does nothing on it.
    pub fn inference(be: &B, cfg: HcConfig, b: usize, t: usize) -> Result<Self> {
        Self::build(be, cfg, b, t, None)
    }

    fn build(be: &B, cfg: HcConfig, b: usize, t: usize, seed: Option<u64>) -> Result<Self> {
        crate::ModelConfig::Hc(cfg.clone()).check_batch(b, t)?;
        let (bt, d, n) = (b * t, cfg.d_model, cfg.streams);
        let (w_gates, nd) = (cfg.gate_width(), n * d);
        let (layout, ids) = declare(&cfg);
        let store = match seed {
            Some(seed) => ParamStore::new(be, layout, seed)?,
            None => ParamStore::inference(be, layout)?,
        };
        let w = ids.map(|id| store.param(be, id));
        let dw = store.trainable().then(|| ids.map(|id| store.grad(be, id)));
        let (maps, core) = (cfg.attention_maps(bt), cfg.core(bt));
        let attention = Attention {
            b,
            t,
            heads: cfg.n_heads,
            head_dim: cfg.head_dim,
            layer_scale: false,
            alibi: false,
            names: AttentionNames {
                heads: "n_heads",
                width: "n_heads·head_dim",
            },
        };
        let z = |what: &str, len: usize| be.zeros(what, len);
        let site = || -> engine::Result<SiteActs<B>> {
            Ok(SiteActs {
                gates: Gates::new(be, cfg.site_dims(bt), d)?,
                ln: z("the branch's norm", bt * d)?,
                ln_stats: z("the branch's norm statistics", bt * 2)?,
                f: z("the branch's output", bt * d)?,
                out: z("the streams (batch × seq_len × streams·d_model)", bt * nd)?,
            })
        };
        let blocks = (0..cfg.n_layers)
            .map(|_| {
                Ok(BlockActs {
                    attn: site()?,
                    attention: attention.acts(be)?,
                    ff: site()?,
                    core: core.acts(be)?,
                })
            })
            .collect::<engine::Result<Vec<_>>>()?;
        let ones = |what: &str, len: usize| -> engine::Result<B::Tensor> {
            let t = be.zeros(what, len)?;
            be.fill(&t, 1.0);
            Ok(t)
        };
        let scratch = || -> engine::Result<Scratch<B>> {
            Ok(Scratch {
                dstreams: [
                    z("the streams' gradient", bt * nd)?,
                    z("the streams' gradient", bt * nd)?,
                ],
                du: z("du", bt * d)?,
                dln: z("dln", bt * d)?,
                df: z("df", bt * d)?,
                dpre: z("dpre", bt * n)?,
                dpost: z("dpost", bt * n)?,
                dmix: z("dmix", bt * n * n)?,
                dm: z("dm", bt * w_gates)?,
                dz: z("dz", bt * w_gates)?,
                dalpha: z("dalpha", bt * 3)?,
                dxhat: z("dxhat", bt * nd)?,
                dgain: z("dgain", nd)?,
                dh: z("dh", bt * d)?,
                de: z("de", bt * d)?,
                attention: attention.scratch(be)?,
                maps: <Projections as AttentionMaps<Dense>>::scratch(&maps, be)?,
                core: core.scratch(be)?,
            })
        };
        let trainable = store.trainable();
        let s = trainable.then(scratch).transpose()?;
        Ok(Self {
            b,
            t,
            embedding: cfg.embedding(b, t),
            maps,
            attention,
            core,
            store,
            w,
            dw,
            encoded: z("the embeddings", bt * d)?,
            streams0: z("the streams", bt * nd)?,
            blocks,
            head: (cfg.collapse() == HcCollapse::Head)
                .then(|| Gates::new(be, cfg.head_dims(bt), d))
                .transpose()?,
            ones_n: ones("ones", n)?,
            ones_nd: ones("ones", nd)?,
            ones_bt: ones("ones", bt)?,
            h: z("the collapsed streams", bt * d)?,
            lnf: z("the final norm", cfg.final_norm(bt).rows * d)?,
            lnf_stats: z("the final norm statistics", cfg.final_norm(bt).rows * 2)?,
            unembedding: Unembedding::new(be, bt, cfg.vocab, d, cfg.z_loss, trainable)?,
            s,
            edits: None,
            cfg,
        })
    }

    fn bt(&self) -> usize {
        self.b * self.t
    }

    /// The streams entering site `s` (0: block 0's attention, 1: its FF, …).
    fn streams_in(&self, site: usize) -> &B::Tensor {
        match site {
            0 => &self.streams0,
            s => {
                let a = &self.blocks[(s - 1) / 2];
                match (s - 1) % 2 {
                    0 => &a.attn.out,
                    _ => &a.ff.out,
                }
            }
        }
    }

    /// A batched product over the tokens: each token's (m×k)·(k×n).
    fn per_token(&self, m: usize, n: usize, k: usize) -> MatmulDims {
        MatmulDims::new(m, n, k).batched(self.bt(), false, false)
    }

    /// A set of gates and their collapse: x̂, m, pre (post, P) and u from the streams `x`.
    fn gates_in(&self, be: &B, a: &Gates<B>, x: &B::Tensor, p: &SiteParams<B::Tensor>, dims: GateDims) {
        let (n, d) = (self.cfg.streams, self.cfg.d_model);
        let (rows, cols, k) = dims.projection;
        let gain = p.gain.as_ref().unwrap_or(&self.ones_nd);
        be.norm_forward(&a.xhat, &a.xstats, x, gain, dims.norm);
        be.matmul(&a.m, &a.xhat, &p.phi, MatmulDims::new(rows, cols, k).trans_b());
        be.hyper_gates(&a.pre, &a.post, &a.mix, &a.m, &p.alpha, &p.bias, dims.gates);
        be.matmul(&a.u, &a.pre, x, self.per_token(1, d, n));
    }

    /// The site's write-back: out = Pᵀ x + post ⊗ f.
    fn site_out(&self, be: &B, a: &SiteActs<B>, x: &B::Tensor) {
        let (n, d) = (self.cfg.streams, self.cfg.d_model);
        be.matmul(&a.out, &a.gates.mix, x, self.per_token(n, d, n).trans_a());
        be.matmul(&a.out, &a.gates.post, &a.f, self.per_token(n, d, 1).accumulate());
    }

    /// The write-back's backward, from the output streams' gradient `g`: df, dpost, dP, and
    /// the input streams' gradient through the mixing, written to `h`.
    fn site_out_backward(&self, be: &B, s: &Scratch<B>, g: &B::Tensor, h: &B::Tensor, a: &SiteActs<B>, x: &B::Tensor) {
        let (n, d) = (self.cfg.streams, self.cfg.d_model);
        be.matmul(&s.df, &a.gates.post, g, self.per_token(1, d, n));
        be.matmul(&s.dpost, g, &a.f, self.per_token(n, 1, d));
        be.matmul(&s.dmix, x, g, self.per_token(n, n, d).trans_b());
        be.matmul(h, &a.gates.mix, g, self.per_token(n, d, n));
    }

    /// The collapse's and the gates' backward, from du: dpre, then dx += pre ⊗ du, the gates'
    /// gradients and dx through x̂, into `h`. The head's gates read no dpost or dP.
    #[allow(clippy::too_many_arguments)]
    fn gates_in_backward(
        &self,
        be: &B,
        s: &Scratch<B>,
        h: &B::Tensor,
        a: &Gates<B>,
        x: &B::Tensor,
        (p, dp): (&SiteParams<B::Tensor>, &SiteParams<B::Tensor>),
        dims: GateDims,
    ) {
        let (n, d, bt) = (self.cfg.streams, self.cfg.d_model, self.bt());
        let (rows, cols, k) = dims.projection;
        let (w, scales) = (dims.gates.width(), dims.gates.scales());
        be.matmul(&s.dpre, x, &s.du, self.per_token(n, 1, d));
        be.matmul(h, &a.pre, &s.du, self.per_token(n, d, 1).accumulate());
        // The head's gates are fewer than a site's: the scratch's first values.
        let (dm, dz, dalpha) = (
            be.view(&s.dm, 0, bt * w),
            be.view(&s.dz, 0, bt * w),
            be.view(&s.dalpha, 0, bt * scales),
        );
        be.hyper_gates_backward(
            &dm, &dz, &dalpha, &s.dpre, &s.dpost, &s.dmix, &a.m, &p.alpha, &p.bias, dims.gates,
        );
        be.matmul(&dp.phi, &dm, &a.xhat, MatmulDims::new(cols, k, rows).trans_a());
        be.matmul(&s.dxhat, &dm, &p.phi, MatmulDims::new(rows, k, cols));
        let (gain, dgain) = match (&p.gain, &dp.gain) {
            (Some(g), Some(dg)) => (g, dg),
            _ => (&self.ones_nd, &s.dgain),
        };
        be.norm_backward(h, dgain, &s.dxhat, x, gain, &a.xstats, dims.norm);
        // The bias's and the scales' gradients: column sums over the tokens, in token order.
        be.matmul(&dp.bias, &self.ones_bt, &dz, MatmulDims::new(1, w, bt));
        be.matmul(&dp.alpha, &self.ones_bt, &dalpha, MatmulDims::new(1, scales, bt));
    }

    /// The head's input, W_U's operand: Norm(h), or h itself with `norm-then-sum`.
    fn head_input(&self) -> &B::Tensor {
        match self.cfg.collapse() {
            HcCollapse::NormThenSum => &self.h,
            _ => &self.lnf,
        }
    }
}

impl<B: Backend> LanguageModel<B> for HyperConnections<B> {
    fn store(&self) -> &ParamStore<B> {
        &self.store
    }

    fn batch_shape(&self) -> (usize, usize) {
        (self.b, self.t)
    }

    fn vocab(&self) -> usize {
        self.cfg.vocab
    }

    fn forward(&self, be: &B, batch: &BatchTensors<B>, _observe: Observe) {
        let (cfg, bt, w) = (&self.cfg, self.bt(), &self.w);
        let (n, d) = (cfg.streams, cfg.d_model);
        // X⁰ = (e, …, e)
        self.embedding.forward(be, &self.encoded, &w.embedding, batch);
        let edit = |point, tensor| edits::apply(be, &self.edits, point, tensor);
        edit(Point::Embedding, &self.encoded);
        be.matmul(
            &self.streams0,
            &self.ones_n,
            &self.encoded,
            MatmulDims::new(n, d, 1).batched(bt, true, false),
        );
        edit(Point::Residual(0), &self.streams0);
        for (l, (a, p)) in self.blocks.iter().zip(&w.blocks).enumerate() {
            // Attention's site: f = MHA(Norm(u))
            let x = self.streams_in(2 * l);
            self.gates_in(be, &a.attn.gates, x, &p.attn_hc, cfg.site_dims(bt));
            be.norm_forward(
                &a.attn.ln,
                &a.attn.ln_stats,
                &a.attn.gates.u,
                &p.ln1,
                cfg.branch_norm(bt),
            );
            <Projections as AttentionMaps<Dense>>::qkv_forward(
                &self.maps,
                be,
                &a.attention.qkv,
                &a.attn.ln,
                &(),
                &(),
                &p.maps,
                Tap::new(&self.edits, l),
            );
            self.attention.forward(be, &a.attention, &batch.doc_start, l);
            edit(Point::Heads(l), &a.attention.atty);
            <Projections as AttentionMaps<Dense>>::output_forward(
                &self.maps,
                be,
                &a.attn.f,
                &a.attention.atty,
                &p.maps,
            );
            edit(Point::Write(l, Layer::Attn), &a.attn.f);
            self.site_out(be, &a.attn, x);
            edit(Point::Residual(2 * l + 1), &a.attn.out);
            // The FF's site: f = W2 · GELU(W1 · Norm(u))
            let x = &a.attn.out;
            self.gates_in(be, &a.ff.gates, x, &p.ff_hc, cfg.site_dims(bt));
            be.norm_forward(&a.ff.ln, &a.ff.ln_stats, &a.ff.gates.u, &p.ln2, cfg.branch_norm(bt));
            self.core
                .forward(be, &a.ff.f, &a.ff.ln, &a.core, &(), &p.core, Tap::new(&self.edits, l));
            edit(Point::Write(l, Layer::Ff), &a.ff.f);
            self.site_out(be, &a.ff, x);
            edit(Point::Residual(2 * l + 2), &a.ff.out);
        }
        self.read_out(be, self.streams_in(2 * cfg.n_layers));
        self.unembedding.loss.forward(be, batch);
    }

    fn backward(&self, be: &B, batch: &BatchTensors<B>, _observe: Observe) {
        let (w, Some(dw), Some(s)) = (&self.w, &self.dw, &self.s) else {
            return;
        };
        let (cfg, bt) = (&self.cfg, self.bt());
        let (n, d) = (cfg.streams, cfg.d_model);
        let every_stream = MatmulDims::new(n, d, 1).batched(bt, true, false);
        let [mut g, mut h] = [&s.dstreams[0], &s.dstreams[1]];
        // The head, back to the last streams' gradient g.
        let x = self.streams_in(2 * cfg.n_layers);
        let seed = edits::seed(&self.edits);
        self.unembedding
            .backward(be, &s.dln, &dw.w_u, self.head_input(), &w.w_u, batch, seed);
        // Each point's gradient, where an intervention asks for it.
        let grad = |point, dtensor| edits::grad(be, &self.edits, point, dtensor);
        match (cfg.collapse(), &self.head, &w.head, &dw.head) {
            // W_U · Σ_j Norm(x_j): every stream's norm gets dln.
            (HcCollapse::NormThenSum, ..) => {
                be.matmul(h, &self.ones_n, &s.dln, every_stream);
                be.fill(g, 0.0);
                be.norm_backward(g, &dw.lnf, h, x, &w.lnf, &self.lnf_stats, cfg.final_norm(bt));
            }
            // W_U · Norm(Σ_j q_j x_j): the head's gates take du.
            (HcCollapse::Head, Some(gates), Some(p), Some(dp)) => {
                be.fill(&s.du, 0.0);
                be.norm_backward(
                    &s.du,
                    &dw.lnf,
                    &s.dln,
                    &gates.u,
                    &w.lnf,
                    &self.lnf_stats,
                    cfg.final_norm(bt),
                );
                be.fill(g, 0.0);
                self.gates_in_backward(be, s, g, gates, x, (p, dp), cfg.head_dims(bt));
            }
            // W_U · Norm(Σ_j x_j): every stream gets dh.
            _ => {
                be.fill(&s.dh, 0.0);
                be.norm_backward(
                    &s.dh,
                    &dw.lnf,
                    &s.dln,
                    &self.h,
                    &w.lnf,
                    &self.lnf_stats,
                    cfg.final_norm(bt),
                );
                be.matmul(g, &self.ones_n, &s.dh, every_stream);
            }
        }
        for l in (0..cfg.n_layers).rev() {
            let (a, p, dp) = (&self.blocks[l], &w.blocks[l], &dw.blocks[l]);
            // The FF's site.
            let x = &a.attn.out;
            grad(Point::Residual(2 * l + 2), g);
            self.site_out_backward(be, s, g, h, &a.ff, x);
            grad(Point::Write(l, Layer::Ff), &s.df);
            let tap = Tap::new(&self.edits, l);
            self.core
                .backward(be, &s.core, &s.dln, &dp.core, &s.df, &a.ff.ln, &a.core, &p.core, tap);
            be.fill(&s.du, 0.0);
            be.norm_backward(
                &s.du,
                &dp.ln2,
                &s.dln,
                &a.ff.gates.u,
                &p.ln2,
                &a.ff.ln_stats,
                cfg.branch_norm(bt),
            );
            self.gates_in_backward(be, s, h, &a.ff.gates, x, (&p.ff_hc, &dp.ff_hc), cfg.site_dims(bt));
            std::mem::swap(&mut g, &mut h);
            // Attention's site.
            let x = self.streams_in(2 * l);
            grad(Point::Residual(2 * l + 1), g);
            self.site_out_backward(be, s, g, h, &a.attn, x);
            grad(Point::Write(l, Layer::Attn), &s.df);
            let datty = <Projections as AttentionMaps<Dense>>::output_backward(
                &self.maps,
                be,
                &s.maps,
                &dp.maps,
                &s.df,
                &a.attention.atty,
                &p.maps,
            );
            grad(Point::Heads(l), datty);
            self.attention
                .backward(be, &s.attention, datty, &a.attention, &batch.doc_start, l);
            <Projections as AttentionMaps<Dense>>::qkv_backward(
                &self.maps,
                be,
                &s.dln,
                &dp.maps,
                &s.attention.dqkv,
                &a.attn.ln,
                &(),
                &p.maps,
                tap,
            );
            be.fill(&s.du, 0.0);
            be.norm_backward(
                &s.du,
                &dp.ln1,
                &s.dln,
                &a.attn.gates.u,
                &p.ln1,
                &a.attn.ln_stats,
                cfg.branch_norm(bt),
            );
            self.gates_in_backward(be, s, h, &a.attn.gates, x, (&p.attn_hc, &dp.attn_hc), cfg.site_dims(bt));
            std::mem::swap(&mut g, &mut h);
        }
        // X⁰ = (e, …, e): de = Σ_j dX⁰_j.
        grad(Point::Residual(0), g);
        be.matmul(
            &s.de,
            &self.ones_n,
            g,
            MatmulDims::new(1, d, n).batched(bt, true, false),
        );
        grad(Point::Embedding, &s.de);
        self.embedding.backward(be, &dw.embedding, &s.de, batch);
    }

    fn head(&self) -> &LossHead<B> {
        &self.unembedding.loss
    }

    /// logits = W_U · Norm(Σ_j x_j), read from the streams `x`.
    fn read_out(&self, be: &B, x: &B::Tensor) {
        let (cfg, bt, w) = (&self.cfg, self.bt(), &self.w);
        let sum = MatmulDims::new(1, cfg.d_model, cfg.streams).batched(bt, true, false);
        let norm = cfg.final_norm(bt);
        match (cfg.collapse(), &self.head, &w.head) {
            (HcCollapse::NormThenSum, ..) => {
                be.norm_forward(&self.lnf, &self.lnf_stats, x, &w.lnf, norm);
                be.matmul(&self.h, &self.ones_n, &self.lnf, sum);
            }
            (HcCollapse::Head, Some(gates), Some(p)) => {
                self.gates_in(be, gates, x, p, cfg.head_dims(bt));
                be.norm_forward(&self.lnf, &self.lnf_stats, &gates.u, &w.lnf, norm);
            }
            _ => {
                be.matmul(&self.h, &self.ones_n, x, sum);
                be.norm_forward(&self.lnf, &self.lnf_stats, &self.h, &w.lnf, norm);
            }
        }
        self.unembedding.logits(be, self.head_input(), &w.w_u);
    }

    fn edit_points(&self) -> Vec<EditPoint<'_, B>> {
        let (n, d, heads) = (self.cfg.streams, self.cfg.d_model, self.cfg.n_heads);
        let mut points = Vec::from(sites::embedding_points((&self.encoded, d), (&self.streams0, n * d, n)));
        for (l, a) in self.blocks.iter().enumerate() {
            points.extend(sites::block_points(
                l,
                (&a.attention.atty, heads * self.cfg.head_dim, heads),
                [(&a.attn.f, d), (&a.ff.f, d)],
                [&a.attn.out, &a.ff.out],
                (n * d, n),
                [vec![], vec![]],
            ));
        }
        points
    }

    fn residual_groups(&self) -> Option<Group> {
        Some(Group::Stream)
    }

    fn edits(&mut self) -> &mut Option<Edits<B>> {
        &mut self.edits
    }

    /// Linear but for the `head` collapse, whose gates are read from the streams themselves.
    fn linear_read_out(&self) -> Option<ReadOut> {
        let (width, streams, norm, eps) = (
            self.cfg.d_model,
            self.cfg.streams,
            self.cfg.norm.into(),
            self.cfg.norm_eps,
        );
        match self.cfg.collapse() {
            HcCollapse::NormThenSum => Some(ReadOut::EachNormed {
                width,
                streams,
                norm,
                eps,
            }),
            HcCollapse::Head => None,
            // `auto` is resolved by `collapse()`; HC's sum.
            HcCollapse::Sum | HcCollapse::Auto => Some(ReadOut::Norm {
                width,
                streams,
                norm,
                eps,
            }),
        }
    }

    fn inside(&self) -> Inside<'_, B> {
        let shape = Shape::Matrix {
            rows: self.cfg.streams,
            cols: self.cfg.d_model,
        };
        Inside {
            residuals: observe::residual_stream(
                shape,
                &self.streams0,
                self.blocks.iter().map(|a| (&a.attn.out, &a.ff.out)),
            ),
            hashed: Vec::new(),
            variance: None,
            attention: self.attention.sites(self.blocks.iter().map(|a| &a.attention)),
            mixing: (self.blocks.iter().enumerate())
                .flat_map(|(l, a)| [(format!("block{l}.attn"), &a.attn), (format!("block{l}.ff"), &a.ff)])
                .map(|(name, s)| observe::MixingSite {
                    name,
                    streams: self.cfg.streams,
                    pre: &s.gates.pre,
                    post: &s.gates.post,
                    mix: &s.gates.mix,
                })
                .collect(),
        }
    }
}
