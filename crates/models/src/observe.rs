//! What a page or a tool may look at inside a model, one mechanism for every architecture:
//! - what a pass computes for viewers is chosen when its plan is recorded (`Observe`);
//! - what can be read after a forward is one hook, `LanguageModel::inside` (`Inside`): the
//!   residual stream at every depth, the hashed layers' buckets and the variance sums.

use crate::buckets::HashedLayer;
use crate::probes::Probes;
use crate::Result;
use engine::Backend;
use serde::{Deserialize, Serialize};

/// What a forward and its backward compute for viewers besides the loss and the gradients,
/// fixed when their plan is recorded (`Backend::record_or_replay`): a plan recorded with
/// `Variance` sums every probe site's moments each time it is replayed, and one recorded with
/// `Loss` holds no probe kernel at all. The residual stream and the bucket use need no choice:
/// they are buffers every forward keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Observe {
    /// The loss and, in a backward, the gradients: what training needs.
    Loss,
    /// Also the variance probes of every storage and retrieval (RMT paper Tables 1-2).
    Variance,
}

/// What viewers may read inside a model after a forward.
pub struct Inside<'a, B: Backend> {
    /// The residual stream at every depth.
    pub residuals: Vec<Observable<'a, B>>,
    /// The hashed layers whose bucket use can be read (MemoryFormer's and the hybrid's).
    pub hashed: Vec<HashedLayer<'a, B>>,
    /// The sums of the last pass recorded with `Observe::Variance`; None for a model without
    /// probe sites or built for inference.
    pub variance: Option<&'a Probes<B>>,
    /// Every block's attention, in order.
    pub attention: Vec<crate::attention::AttentionSite<'a, B>>,
    /// Hyper-connections' sites, in order: each token's pre, post and mixing matrix; empty for
    /// the other models.
    pub mixing: Vec<MixingSite<'a, B>>,
    /// Attention Residuals' reads over depth, in order, the head's last: each token's weights
    /// over its sources; empty for the other models.
    pub depth: Vec<DepthRead<'a, B>>,
    /// AltUp's coefficients at every layer; empty for the other models.
    pub altup: Vec<SubBlockLayer<'a, B>>,
}

/// One AltUp layer's coefficients: P (K×K, row i predicts sub-block i) at its attention, g (K)
/// at its FF, and the sub-block it computes on.
pub struct SubBlockLayer<'a, B: Backend> {
    /// `block0`, `block1`, …
    pub name: String,
    pub active: usize,
    pub predict: &'a B::Tensor,
    pub correct: &'a B::Tensor,
}

/// One AltUp layer after a forward: its coefficients and, for one token, how alike its
/// sub-blocks are after it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AltupRow {
    pub layer: String,
    /// The sub-block the layer computes on.
    pub active: usize,
    /// P, K×K row-major: x̂_i = Σ_k P[i,k] x_k (from I). P and g are read from the weights as
    /// they are when read: in training, after the step's update, where the cosines are of the
    /// step's forward.
    pub predict: Vec<f64>,
    /// g: x'_i = x̂_i + g_i (y − x̂_j) (from 1).
    pub correct: Vec<f64>,
    /// The sub-blocks' cosine similarities after the layer, K×K row-major, for the token.
    pub cosine: Vec<f64>,
    /// The sub-blocks' norms after the layer, for the token.
    pub norms: Vec<f64>,
}

impl AltupRow {
    /// The cosines between distinct sub-blocks: 1 each while they are copies.
    pub fn cosines_apart(&self) -> impl Iterator<Item = f64> + '_ {
        let k = self.correct.len().max(1);
        (self.cosine.iter().enumerate())
            .filter(move |(ij, _)| ij / k != ij % k)
            .map(|(_, &c)| c)
    }

    /// Their mean; None with one sub-block.
    pub fn mean_cosine_apart(&self) -> Option<f64> {
        let (sum, n) = self.cosines_apart().fold((0.0, 0), |(s, n), c| (s + c, n + 1));
        (n > 0).then(|| sum / n as f64)
    }

    /// The least of them; None with one sub-block.
    pub fn least_cosine_apart(&self) -> Option<f64> {
        self.cosines_apart().reduce(f64::min)
    }
}

/// One read over depth after a forward: alpha (tokens, sources), the weights a token gives the
/// first `sources` rows of the state before it.
pub struct DepthRead<'a, B: Backend> {
    /// `block0.attn`, `block0.ff`, …, `head`.
    pub name: String,
    pub sources: usize,
    /// Whether the last source is a block still being filled (a site past its block's first).
    pub partial: bool,
    pub alpha: &'a B::Tensor,
}

/// One read's weights for one token, with what each source is and its RMS.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DepthRow {
    pub read: String,
    /// `b0` (the embedding), `b1`, …; a block still being filled is `b3 (partial)`.
    pub sources: Vec<String>,
    pub weights: Vec<f64>,
    /// Each source's RMS for the token, what its key is normalised by.
    pub rms: Vec<f64>,
}

/// One hyper-connection site's gates after a forward: (tokens, n), (tokens, n), (tokens, n, n).
pub struct MixingSite<'a, B: Backend> {
    /// `block0.attn`, `block0.ff`, …
    pub name: String,
    pub streams: usize,
    pub pre: &'a B::Tensor,
    pub post: &'a B::Tensor,
    pub mix: &'a B::Tensor,
}

/// One site's gates for one token, and the composite of every site's P up to it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MixingRow {
    pub site: String,
    pub pre: Vec<f64>,
    pub post: Vec<f64>,
    /// (n, n) row-major: P[j][k], the weight from stream j to stream k.
    pub mix: Vec<f64>,
    /// The forward gain (the largest absolute column sum: what a stream receives) and the
    /// backward gain (the largest row sum) of P₁·P₂·…·P_s, the mixing of every site so far (the
    /// mHC paper's Amax of H_res = Pᵀ).
    pub composite_gain: [f64; 2],
    /// Each stream's norm after the site, ‖x_k‖.
    #[serde(default)]
    pub stream_norms: Vec<f64>,
}

/// Every hyper-connection site's gates for token `token` of sequence `seq` after a forward
/// (batches of T = `t`), with the composite gain by depth; None for a model without them.
pub async fn mixing<B: Backend, M: crate::LanguageModel<B> + ?Sized>(
    be: &B,
    model: &M,
    (seq, t, token): (usize, usize, usize),
) -> Result<Option<Vec<MixingRow>>> {
    let Inside {
        mixing: sites,
        residuals,
        ..
    } = model.inside();
    let Some(n) = sites.first().map(|s| s.streams) else {
        return Ok(None);
    };
    let at = seq * t + token;
    let mut composite = identity(n);
    let mut rows = Vec::new();
    // The streams after site s are the residual at depth s + 1 (depth 0: the embedding's).
    for (s, after) in sites.iter().zip(residuals.iter().skip(1)) {
        let x = be.read(after.tensor).await?;
        let d = after.shape.size() / n;
        let stream_norms = (x[at * n * d..(at + 1) * n * d].chunks(d))
            .map(|v| v.iter().map(|&x| f64::from(x) * f64::from(x)).sum::<f64>().sqrt())
            .collect();
        // Whole tensors (a few values a token): a GPU view must start at an aligned offset.
        let (pre, post, mix) = (be.read(s.pre).await?, be.read(s.post).await?, be.read(s.mix).await?);
        let (pre, post) = (&pre[at * n..(at + 1) * n], &post[at * n..(at + 1) * n]);
        let mix: Vec<f64> = mix[at * n * n..(at + 1) * n * n]
            .iter()
            .map(|&x| f64::from(x))
            .collect();
        composite = then(&composite, &mix, n);
        rows.push(MixingRow {
            site: s.name.clone(),
            pre: pre.iter().map(|&x| f64::from(x)).collect(),
            post: post.iter().map(|&x| f64::from(x)).collect(),
            composite_gain: gains(&composite, n),
            stream_norms,
            mix,
        });
    }
    Ok(Some(rows))
}

/// Every read over depth of an Attention Residuals model for token `token` of sequence `seq`
/// after a forward (batches of T = `t`): its weights over its sources and their RMS; None for a
/// model without them.
pub async fn depth<B: Backend, M: crate::LanguageModel<B> + ?Sized>(
    be: &B,
    model: &M,
    (seq, t, token): (usize, usize, usize),
) -> Result<Option<Vec<DepthRow>>> {
    let Inside {
        depth: reads,
        residuals,
        ..
    } = model.inside();
    if reads.is_empty() {
        return Ok(None);
    }
    let at = seq * t + token;
    let mut rows = Vec::new();
    // Read s sees the state at depth s (the head: the last); its rows are D wide.
    for (read, before) in reads.iter().zip(residuals.iter().chain(residuals.last())) {
        let (size, d) = match before.shape {
            Shape::Matrix { rows, cols } => (rows * cols, cols),
            Shape::Vector { len } => (len, len),
        };
        let state = be.read(before.tensor).await?;
        let token_rows = &state[at * size..(at + 1) * size];
        // Whole tensors (a few values a token): a GPU view must start at an aligned offset.
        let alpha = be.read(read.alpha).await?;
        let n = read.sources;
        let partial = |k: usize| read.partial && k + 1 == n;
        rows.push(DepthRow {
            read: read.name.clone(),
            sources: (0..n)
                .map(|k| match partial(k) {
                    true => format!("b{k} (partial)"),
                    false => format!("b{k}"),
                })
                .collect(),
            weights: alpha[at * n..(at + 1) * n].iter().map(|&x| f64::from(x)).collect(),
            rms: (token_rows.chunks(d).take(n))
                .map(|v| (v.iter().map(|&x| f64::from(x) * f64::from(x)).sum::<f64>() / d as f64).sqrt())
                .collect(),
        });
    }
    Ok(Some(rows))
}

/// Every AltUp layer's P and g and, for token `token` of sequence `seq` after a forward
/// (batches of T = `t`), its sub-blocks' cosine similarities and norms after the layer; None for
/// a model without them.
pub async fn altup<B: Backend, M: crate::LanguageModel<B> + ?Sized>(
    be: &B,
    model: &M,
    (seq, t, token): (usize, usize, usize),
) -> Result<Option<Vec<AltupRow>>> {
    let Inside {
        altup: layers,
        residuals,
        ..
    } = model.inside();
    if layers.is_empty() {
        return Ok(None);
    }
    let at = seq * t + token;
    let mut rows = Vec::new();
    // Layer l's state is the residual after its FF: depth 2l + 2 (depth 0: the embedding's).
    for (l, layer) in layers.iter().enumerate() {
        let after = &residuals[2 * l + 2];
        // K sub-blocks, as many as g has entries, of D each.
        let k = be.len(layer.correct);
        let d = after.shape.size() / k;
        let x = be.read(after.tensor).await?;
        let blocks: Vec<Vec<f64>> = (x[at * k * d..(at + 1) * k * d].chunks(d))
            .map(|v| v.iter().map(|&x| f64::from(x)).collect())
            .collect();
        let norms: Vec<f64> = blocks
            .iter()
            .map(|v| v.iter().map(|x| x * x).sum::<f64>().sqrt())
            .collect();
        let cosine = (0..k * k)
            .map(|ij| {
                let (i, j) = (ij / k, ij % k);
                let dot: f64 = blocks[i].iter().zip(&blocks[j]).map(|(a, b)| a * b).sum();
                dot / (norms[i] * norms[j]).max(f64::MIN_POSITIVE)
            })
            .collect();
        let widen = |v: Vec<f32>| v.into_iter().map(f64::from).collect();
        rows.push(AltupRow {
            layer: layer.name.clone(),
            active: layer.active,
            predict: widen(be.read(layer.predict).await?),
            correct: widen(be.read(layer.correct).await?),
            cosine,
            norms,
        });
    }
    Ok(Some(rows))
}

/// The composite gain through every site (forward, backward), the largest over all the tokens
/// of the last forward: the mHC paper's Amax of the product of every P. None for a model
/// without hyper-connections.
pub async fn composite_gain<B: Backend, M: crate::LanguageModel<B> + ?Sized>(
    be: &B,
    model: &M,
) -> Result<Option<[f64; 2]>> {
    let sites = model.inside().mixing;
    let Some(n) = sites.first().map(|s| s.streams) else {
        return Ok(None);
    };
    let mut composites: Vec<Vec<f64>> = Vec::new();
    for s in &sites {
        let mix = be.read(s.mix).await?;
        if composites.is_empty() {
            composites = vec![identity(n); mix.len() / (n * n)];
        }
        for (c, p) in composites.iter_mut().zip(mix.chunks(n * n)) {
            let p: Vec<f64> = p.iter().map(|&x| f64::from(x)).collect();
            *c = then(c, &p, n);
        }
    }
    Ok(Some(
        composites
            .iter()
            .map(|c| gains(c, n))
            .fold([0.0; 2], |[f, b], [x, y]| [f.max(x), b.max(y)]),
    ))
}

fn identity(n: usize) -> Vec<f64> {
    (0..n * n).map(|i| if i % (n + 1) == 0 { 1.0 } else { 0.0 }).collect()
}

/// The n×n product `composite`·`p`: the mixing so far, then site p's.
fn then(composite: &[f64], p: &[f64], n: usize) -> Vec<f64> {
    (0..n * n)
        .map(|i| (0..n).map(|k| composite[i / n * n + k] * p[k * n + i % n]).sum())
        .collect()
}

/// The forward gain, the largest absolute column sum of M[j,k] (what stream k receives from
/// all j: a row of the paper's H_res = Mᵀ), and the backward gain, the largest row sum.
fn gains(m: &[f64], n: usize) -> [f64; 2] {
    let sum = |at: &dyn Fn(usize) -> usize| (0..n).map(|x| m[at(x)]).sum::<f64>().abs();
    let rows = (0..n).map(|j| sum(&|k| j * n + k)).fold(0.0, f64::max);
    let cols = (0..n).map(|k| sum(&|j| j * n + k)).fold(0.0, f64::max);
    [cols, rows]
}

/// How one token's row of an observable is laid out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase", tag = "kind")]
pub enum Shape {
    /// The RMT's residual: a D_k×D_v matrix, row-major.
    Matrix { rows: usize, cols: usize },
    /// A transformer's or MemoryFormer's residual: a vector of D values.
    Vector { len: usize },
}

impl Shape {
    /// Values per token.
    pub fn size(&self) -> usize {
        match *self {
            Shape::Matrix { rows, cols } => rows * cols,
            Shape::Vector { len } => len,
        }
    }
}

/// One activation of the last forward: (B·T, size) rows, a token each.
pub struct Observable<'a, B: Backend> {
    /// `embedding`, `block0.attn`, `block0.ff`, …: the residual stream after it.
    pub name: String,
    pub shape: Shape,
    pub tensor: &'a B::Tensor,
}

/// The residual stream of a model with blocks of attention then FF: after the embedding, and
/// after each block's attention and FF.
pub fn residual_stream<'a, B: Backend>(
    shape: Shape,
    encoded: &'a B::Tensor,
    blocks: impl Iterator<Item = (&'a B::Tensor, &'a B::Tensor)>,
) -> Vec<Observable<'a, B>> {
    let mut all = vec![Observable {
        name: "embedding".into(),
        shape,
        tensor: encoded,
    }];
    for (l, (att, ff)) in blocks.enumerate() {
        all.push(Observable {
            name: format!("block{l}.attn"),
            shape,
            tensor: att,
        });
        all.push(Observable {
            name: format!("block{l}.ff"),
            shape,
            tensor: ff,
        });
    }
    all
}

/// One sequence's rows of one observable.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    pub name: String,
    pub shape: Shape,
    /// (T, size), row-major.
    pub values: Vec<f32>,
}

impl Snapshot {
    /// Token `i`'s values.
    pub fn token(&self, i: usize) -> &[f32] {
        let n = self.shape.size();
        &self.values[i * n..(i + 1) * n]
    }
}

/// Reads sequence `seq` (of T tokens) of every observable: one small read each.
pub async fn read<B: Backend>(
    be: &B,
    observables: &[Observable<'_, B>],
    seq: usize,
    t: usize,
) -> Result<Vec<Snapshot>> {
    let mut out = vec![];
    for o in observables {
        let n = o.shape.size();
        out.push(Snapshot {
            name: o.name.clone(),
            shape: o.shape,
            values: be.read_range(o.tensor, seq * t * n, t * n).await?,
        });
    }
    Ok(out)
}

/// What one block's attention or FF wrote into the residual, over a sequence's tokens.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Write {
    /// `block0.attn`, …: the residual after the write.
    pub depth: String,
    /// The mean over tokens of ‖X_after − X_before‖ (Frobenius for a matrix).
    pub norm: f64,
    /// The mean over tokens of ‖X_after − X_before‖ / ‖X_before‖: how much the write moves the
    /// residual it lands in.
    pub relative: f64,
}

/// What each block wrote, from consecutive snapshots of one sequence's residual stream (of
/// `t` tokens, in the order of [`residual_stream`]): one row per depth after the embedding.
pub fn writes(snapshots: &[Snapshot], t: usize) -> Vec<Write> {
    let norm = |v: &mut dyn Iterator<Item = f64>| v.map(|x| x * x).sum::<f64>().sqrt();
    snapshots
        .windows(2)
        .map(|pair| {
            let (before, after) = (&pair[0], &pair[1]);
            let (mut sum, mut relative) = (0.0, 0.0);
            for i in 0..t {
                let (b, a) = (before.token(i), after.token(i));
                let w = norm(&mut a.iter().zip(b).map(|(&x, &y)| f64::from(x) - f64::from(y)));
                let base = norm(&mut b.iter().map(|&x| f64::from(x)));
                sum += w;
                relative += w / base.max(f64::MIN_POSITIVE);
            }
            Write {
                depth: after.name.clone(),
                norm: sum / t as f64,
                relative: relative / t as f64,
            }
        })
        .collect()
}

/// One depth of the logit lens, for one token.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LensRow {
    /// `embedding`, `block0.attn`, …: the residual the head read.
    pub depth: String,
    /// The most probable next tokens there, with their probabilities, most probable first.
    pub top: Vec<(u32, f64)>,
    /// KL(final ‖ here) in nats: how far this depth's prediction is from the model's; 0 at the
    /// last depth.
    pub kl_to_final: f64,
}

/// The logit lens of token `token` of sequence `seq` after a forward (batches of T = `t`
/// tokens): at every depth, the model's head (`LanguageModel::lens`) read from the residual
/// there, as the `top` most probable tokens and the KL divergence from the final output. Reads
/// one row of V logits a depth. Overwrites the head's buffers.
pub async fn lens<B: Backend, M: crate::LanguageModel<B> + ?Sized>(
    be: &B,
    model: &M,
    (seq, t, token): (usize, usize, usize),
    top: usize,
) -> Result<Vec<LensRow>> {
    let names: Vec<String> = model.inside().residuals.iter().map(|o| o.name.clone()).collect();
    let v = model.vocab();
    let mut log_probs = Vec::with_capacity(names.len());
    for depth in 0..names.len() {
        model.lens(be, depth);
        let row = be.read_range(&model.head().logits, (seq * t + token) * v, v).await?;
        log_probs.push(log_softmax(&row));
    }
    let last = log_probs.last().cloned().unwrap_or_default();
    Ok(names
        .into_iter()
        .zip(&log_probs)
        .map(|(depth, lp)| {
            let mut order: Vec<usize> = (0..lp.len()).collect();
            order.sort_by(|&a, &b| lp[b].total_cmp(&lp[a]).then(a.cmp(&b)));
            LensRow {
                depth,
                top: order.iter().take(top).map(|&i| (i as u32, lp[i].exp())).collect(),
                kl_to_final: last
                    .iter()
                    .zip(lp)
                    .map(|(&f, &h)| f.exp() * (f - h))
                    .sum::<f64>()
                    .max(0.0),
            }
        })
        .collect())
}

/// log softmax of `logits`, in f64.
fn log_softmax(logits: &[f32]) -> Vec<f64> {
    let max = logits.iter().fold(f64::NEG_INFINITY, |m, &x| m.max(f64::from(x)));
    let log_z = max + logits.iter().map(|&x| (f64::from(x) - max).exp()).sum::<f64>().ln();
    logits.iter().map(|&x| f64::from(x) - log_z).collect()
}

/// One head's attention weights over one sequence.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HeadPattern {
    /// `block0`, `block1`, …
    pub block: String,
    pub head: usize,
    /// (T, T), row-major: row i is query i's weights over the keys, 0 where it may not look
    /// (after i, or before its document's start); each row sums to 1.
    pub weights: Vec<f64>,
}

impl HeadPattern {
    /// Query `i`'s weights over the keys.
    pub fn row(&self, i: usize, t: usize) -> &[f64] {
        &self.weights[i * t..(i + 1) * t]
    }

    /// The mean over queries of the expected distance i − j to the keys they attend: 0 for a
    /// head that looks at its own token, larger for one that looks back.
    pub fn mean_distance(&self, t: usize) -> f64 {
        let per_row = |i: usize| {
            self.row(i, t)
                .iter()
                .enumerate()
                .map(|(j, w)| w * (i - j.min(i)) as f64)
                .sum::<f64>()
        };
        (0..t).map(per_row).sum::<f64>() / t as f64
    }
}

/// Every block's and head's attention weights over sequence `seq` after a forward (batches of
/// T = `t` tokens, `starts` the sequence's document starts, `batch::document_starts`):
/// softmax_j(scale·q_i·k_j − slope·(i − j)) over the keys query i sees, in f64 from the qkv
/// rows the forward kept. Reads one sequence's qkv rows a block.
pub async fn attention_patterns<B: Backend, M: crate::LanguageModel<B> + ?Sized>(
    be: &B,
    model: &M,
    (seq, t): (usize, usize),
    starts: &[u32],
) -> Result<Vec<HeadPattern>> {
    let mut patterns = Vec::new();
    for site in model.inside().attention {
        let d = site.dims;
        let width = 3 * d.h * d.dh;
        let rows = be.read_range(site.qkv, seq * t * width, t * width).await?;
        let at = |part: usize, h: usize, i: usize| &rows[i * width + (part * d.h + h) * d.dh..][..d.dh];
        for h in 0..d.h {
            let mut weights = vec![0.0; t * t];
            for i in 0..t {
                let first = (starts[i] as usize).min(i);
                let q = at(0, h, i);
                let logits: Vec<f64> = (first..=i)
                    .map(|j| {
                        let dot: f64 = q
                            .iter()
                            .zip(at(1, h, j))
                            .map(|(&a, &b)| f64::from(a) * f64::from(b))
                            .sum();
                        f64::from(d.scale) * dot - d.slope(h) * (i - j) as f64
                    })
                    .collect();
                let max = logits.iter().fold(f64::NEG_INFINITY, |m, &x| m.max(x));
                let z: f64 = logits.iter().map(|&x| (x - max).exp()).sum();
                for (j, x) in (first..=i).zip(&logits) {
                    weights[i * t + j] = (x - max).exp() / z;
                }
            }
            patterns.push(HeadPattern {
                block: site.name.clone(),
                head: h,
                weights,
            });
        }
    }
    Ok(patterns)
}

/// One key slot h of an RMT block (SPEC §2): the norms of the keys that read the residual
/// matrix through it (r_Q, r_K, r_V of attention, r_FF of the feed-forward) and of those that
/// write through it (w_O, w_FF), and the share of attention's stored mass it carries.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct KeySlot {
    /// `block0`, `block1`, …
    pub block: String,
    pub slot: usize,
    /// ‖r_Q[h]‖, ‖r_K[h]‖, ‖r_V[h]‖, ‖r_FF[h]‖.
    pub retrieval: [f64; 4],
    /// ‖w_O[h]‖, ‖w_FF[h]‖.
    pub storage: [f64; 2],
    /// Σ_t ‖w_O[h] ⊗ y_t[h]‖ over the sequence's tokens, as a share of all the block's slots:
    /// how much of what attention writes into the residual goes through this slot.
    pub stored_share: f64,
}

/// Every key slot of an RMT's (or the hybrid's) blocks after a forward, over sequence `seq`
/// (batches of T = `t`): the key norms from the parameters, the stored shares from attention's
/// output. None for a model without key slots.
pub async fn key_slots<B: Backend, M: crate::LanguageModel<B> + ?Sized>(
    be: &B,
    model: &M,
    (seq, t): (usize, usize),
) -> Result<Option<Vec<KeySlot>>> {
    let layout = &model.store().layout;
    if !layout.specs.iter().any(|s| s.name == "blocks.0.r_qkv") {
        return Ok(None);
    }
    let mut slots = Vec::new();
    for (i, site) in model.inside().attention.iter().enumerate() {
        let (r, dv) = (site.dims.h, site.dims.dh);
        let store = model.store();
        let r_qkv = key_norms(be, store, &format!("blocks.{i}.r_qkv")).await?;
        let w_o = key_norms(be, store, &format!("blocks.{i}.w_o")).await?;
        let r_ff = key_norms(be, store, &format!("blocks.{i}.r_ff")).await?;
        let w_ff = key_norms(be, store, &format!("blocks.{i}.w_ff")).await?;
        let y = be.read_range(site.out, seq * t * r * dv, t * r * dv).await?;
        let mass: Vec<f64> = (0..r)
            .map(|h| {
                let data = |tok: usize| {
                    y[(tok * r + h) * dv..][..dv]
                        .iter()
                        .map(|&x| f64::from(x).powi(2))
                        .sum::<f64>()
                        .sqrt()
                };
                w_o[h] * (0..t).map(data).sum::<f64>()
            })
            .collect();
        let total = mass.iter().sum::<f64>().max(f64::MIN_POSITIVE);
        let at = |v: &[f64], k: usize| v.get(k).copied().unwrap_or(f64::NAN);
        slots.extend((0..r).map(|h| KeySlot {
            block: site.name.clone(),
            slot: h,
            retrieval: [at(&r_qkv, h), at(&r_qkv, r + h), at(&r_qkv, 2 * r + h), at(&r_ff, h)],
            storage: [at(&w_o, h), at(&w_ff, h)],
            stored_share: mass[h] / total,
        }));
    }
    Ok(Some(slots))
}

/// The norms of the rows of the (rows, D_k) keys parameter `name`, reading only its values;
/// empty where the model has no such parameter.
async fn key_norms<B: Backend>(be: &B, store: &crate::params::ParamStore<B>, name: &str) -> Result<Vec<f64>> {
    let Some(spec) = store.layout.specs.iter().find(|s| s.name == name) else {
        return Ok(vec![]);
    };
    let dk = spec.shape[spec.shape.len() - 1];
    let values = be.read(&be.view(&store.params, spec.offset, spec.len())).await?;
    Ok(values
        .chunks(dk)
        .map(|k| k.iter().map(|&x| f64::from(x).powi(2)).sum::<f64>().sqrt())
        .collect())
}

/// How much of a residual matrix is in use.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Spectrum {
    /// Largest first.
    pub singular_values: Vec<f64>,
    /// exp of the entropy of the singular values normalised to sum to 1: 1 for a rank-one
    /// matrix, min(rows, cols) for one whose singular values are all equal.
    pub effective_rank: f64,
    /// The Frobenius norm.
    pub norm: f64,
}

/// The spectrum of a `rows`×`cols` row-major matrix.
pub fn spectrum(values: &[f32], rows: usize, cols: usize) -> Spectrum {
    let m = nalgebra::DMatrix::from_row_iterator(rows, cols, values.iter().map(|&v| f64::from(v)));
    let mut singular_values: Vec<f64> = m.singular_values().iter().copied().collect();
    singular_values.sort_by(|a, b| b.total_cmp(a));
    let total: f64 = singular_values.iter().sum();
    let entropy: f64 = match total > 0.0 {
        true => singular_values
            .iter()
            .map(|s| s / total)
            .filter(|p| *p > 0.0)
            .map(|p| -p * p.ln())
            .sum(),
        false => 0.0,
    };
    Spectrum {
        norm: singular_values.iter().map(|s| s * s).sum::<f64>().sqrt(),
        effective_rank: if total > 0.0 { entropy.exp() } else { 0.0 },
        singular_values,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spectrum_of_known_matrices() {
        // u vᵀ: rank one, norm |u||v|.
        let (u, v) = ([1.0f32, 2.0, 2.0], [3.0f32, 4.0]);
        let outer: Vec<f32> = u.iter().flat_map(|a| v.iter().map(move |b| a * b)).collect();
        let s = spectrum(&outer, 3, 2);
        assert!((s.norm - 15.0).abs() < 1e-9, "{s:?}");
        assert!((s.singular_values[0] - 15.0).abs() < 1e-9 && s.singular_values[1].abs() < 1e-9);
        assert!((s.effective_rank - 1.0).abs() < 1e-6);
        // 2·I (3×3): three equal singular values, effective rank 3.
        let eye: Vec<f32> = (0..9).map(|i| if i % 4 == 0 { 2.0 } else { 0.0 }).collect();
        let s = spectrum(&eye, 3, 3);
        assert!((s.effective_rank - 3.0).abs() < 1e-9 && (s.norm - 12f64.sqrt()).abs() < 1e-9);
        // diag(3, 1): entropy of (¾, ¼).
        let s = spectrum(&[3.0, 0.0, 0.0, 1.0], 2, 2);
        let h: f64 = -(0.75f64 * 0.75f64.ln() + 0.25 * 0.25f64.ln());
        assert!((s.effective_rank - h.exp()).abs() < 1e-9);
        assert_eq!(spectrum(&[0.0; 4], 2, 2).effective_rank, 0.0);
    }

    fn snapshot(name: &str, values: Vec<f32>) -> Snapshot {
        Snapshot {
            name: name.into(),
            shape: Shape::Vector { len: 2 },
            values,
        }
    }

    #[test]
    fn writes_are_the_differences_of_consecutive_depths() {
        // Two tokens of width 2: the attention adds (3, 4) to token 0 and nothing to token 1;
        // the FF doubles both.
        let stream = [
            snapshot("embedding", vec![1.0, 0.0, 0.0, 2.0]),
            snapshot("block0.attn", vec![4.0, 4.0, 0.0, 2.0]),
            snapshot("block0.ff", vec![8.0, 8.0, 0.0, 4.0]),
        ];
        let w = writes(&stream, 2);
        assert_eq!(w.len(), 2);
        assert_eq!(w[0].depth, "block0.attn");
        assert!((w[0].norm - 2.5).abs() < 1e-12, "{w:?}"); // (5 + 0) / 2
        assert!((w[0].relative - 2.5).abs() < 1e-12, "{w:?}"); // (5/1 + 0/2) / 2
        let n0 = 32f64.sqrt();
        assert!((w[1].norm - (n0 + 2.0) / 2.0).abs() < 1e-12, "{w:?}");
        assert!((w[1].relative - 1.0).abs() < 1e-12, "{w:?}"); // each token doubled: moved by itself
    }
}
