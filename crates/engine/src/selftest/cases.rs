//! One family's ops on a backend, from given inputs, with every output read back: what
//! `selftest::run` compares with the CPU twin, and `tests/gpu_vs_cpu.rs` over more shapes.

use crate::ops::cross_entropy::IGNORE;
use crate::{
    AdamWDims, AttentionDims, Backend, CrossEntropyDims, EmbeddingDims, GatherDims, Hyper, MatmulDims, MemoryDims,
    NormDims, NormKind, ResidualDims, Result, TokenBuckets,
};

pub fn upload<B: Backend>(be: &B, data: &[f32]) -> Result<B::Tensor> {
    let t = be.zeros("selftest input", data.len())?;
    be.write(&t, data);
    Ok(t)
}

pub fn upload_index<B: Backend>(be: &B, data: &[u32]) -> Result<B::Index> {
    let t = be.index("selftest index", data.len())?;
    be.write_index(&t, data);
    Ok(t)
}

/// Submits what is recorded, then reads `tensors` in one round trip each.
pub async fn read<B: Backend>(be: &B, tensors: &[&B::Tensor]) -> Result<Vec<Vec<f32>>> {
    be.flush()?;
    let mut out = Vec::with_capacity(tensors.len());
    for t in tensors {
        out.push(be.read(t).await?);
    }
    Ok(out)
}

/// out = a·b (+ init when accumulating).
pub async fn matmul<B: Backend>(be: &B, a: &[f32], b: &[f32], init: &[f32], d: MatmulDims) -> Result<Vec<Vec<f32>>> {
    let (a, b, out) = (upload(be, a)?, upload(be, b)?, upload(be, init)?);
    be.matmul(&out, &a, &b, d);
    read(be, &[&out]).await
}

/// add, add_assign, GELU forward and backward, fill, and replace (a's first values as rows of
/// 25, b's values where every third row and every other column are chosen).
pub async fn elementwise<B: Backend>(be: &B, a: &[f32], b: &[f32]) -> Result<Vec<Vec<f32>>> {
    let (ta, tb) = (upload(be, a)?, upload(be, b)?);
    let (cols, rows) = (25.min(a.len()).max(1), a.len() / 25.min(a.len()).max(1));
    let (sum, acc, gelu, dgelu, filled, replaced) = (
        upload(be, a)?,
        upload(be, b)?,
        upload(be, a)?,
        upload(be, a)?,
        upload(be, a)?,
        upload(be, &a[..rows * cols])?,
    );
    let mask = |n: usize, every: usize| (0..n).map(|i| f32::from(u8::from(i % every == 0))).collect::<Vec<_>>();
    let (row_mask, col_mask) = (upload(be, &mask(rows, 3))?, upload(be, &mask(cols, 2))?);
    be.replace(&replaced, &row_mask, &col_mask, &upload(be, &b[..rows * cols])?);
    be.add(&sum, &ta, &tb);
    be.add_assign(&acc, &ta);
    be.gelu_forward(&gelu, &ta);
    be.gelu_backward(&dgelu, &tb, &ta);
    be.fill(&filled, 0.25);
    read(be, &[&sum, &acc, &gelu, &dgelu, &filled, &replaced]).await
}

/// The embedding's forward and both table gradients.
pub async fn embedding<B: Backend>(
    be: &B,
    tokens: &[u32],
    wte: &[f32],
    wpe: &[f32],
    dout: &[f32],
    d: EmbeddingDims,
) -> Result<Vec<Vec<f32>>> {
    let tok = upload_index(be, tokens)?;
    let buckets = TokenBuckets::new(tokens, d.v);
    let (rows, start) = (upload_index(be, &buckets.rows)?, upload_index(be, &buckets.start)?);
    let (wte, wpe, dout) = (upload(be, wte)?, upload(be, wpe)?, upload(be, dout)?);
    let out = be.zeros("out", d.bt * d.c)?;
    let (dwte, dwpe) = (be.zeros("dwte", d.v * d.c)?, be.zeros("dwpe", d.t * d.c)?);
    be.embedding_forward(&out, &tok, &wte, &wpe, d);
    be.embedding_backward(&dwte, &dwpe, &dout, &rows, &start, d);
    read(be, &[&out, &dwte, &dwpe]).await
}

/// The gather's forward and its table gradient (over a table that was not zero).
pub async fn gather<B: Backend>(
    be: &B,
    index: &[u32],
    table: &[f32],
    dout: &[f32],
    d: GatherDims,
) -> Result<Vec<Vec<f32>>> {
    let ix = upload_index(be, index)?;
    let buckets = TokenBuckets::new(index, d.v);
    let (rows, start) = (upload_index(be, &buckets.rows)?, upload_index(be, &buckets.start)?);
    let (table, dout) = (upload(be, table)?, upload(be, dout)?);
    let out = be.zeros("out", d.rows * d.c)?;
    // Filled, so that a table row nobody gathered must be written 0, not left alone.
    let dtable = upload(be, &vec![7.0; d.v * d.c])?;
    be.gather_forward(&out, &ix, &table, d);
    be.gather_backward(&dtable, &dout, &rows, &start, d);
    read(be, &[&out, &dtable]).await
}

/// The norm's forward (output and statistics) and backward (input and gain gradients).
pub async fn norm<B: Backend>(
    be: &B,
    x: &[f32],
    gain: &[f32],
    dout: &[f32],
    dx0: &[f32],
    d: NormDims,
) -> Result<Vec<Vec<f32>>> {
    let (xt, g, go, dx) = (upload(be, x)?, upload(be, gain)?, upload(be, dout)?, upload(be, dx0)?);
    let out = be.zeros("out", x.len())?;
    let stats = be.zeros("stats", 2 * d.rows)?;
    let dgain = be.zeros("dgain", d.c)?;
    be.norm_forward(&out, &stats, &xt, &g, d);
    be.norm_backward(&dx, &dgain, &go, &xt, &g, &stats, d);
    read(be, &[&out, &stats, &dx, &dgain]).await
}

/// Hyper-connections' gates and their backward: pre, post, the mixing matrices, dm, dz, dalpha.
#[allow(clippy::too_many_arguments)]
pub async fn hyper<B: Backend>(
    be: &B,
    logits: &[f32],
    alpha: &[f32],
    bias: &[f32],
    dpre: &[f32],
    dpost: &[f32],
    dmix: &[f32],
    d: crate::HyperDims,
) -> Result<Vec<Vec<f32>>> {
    let (m, a, b) = (upload(be, logits)?, upload(be, alpha)?, upload(be, bias)?);
    let (gpre, gpost, gmix) = (upload(be, dpre)?, upload(be, dpost)?, upload(be, dmix)?);
    let (t, n, w) = (d.tokens, d.n, d.width());
    let (pre, post, mix) = (
        be.zeros("pre", t * n)?,
        be.zeros("post", t * n)?,
        be.zeros("mix", t * n * n)?,
    );
    let (dm, dz, dalpha) = (
        be.zeros("dm", t * w)?,
        be.zeros("dz", t * w)?,
        be.zeros("dalpha", t * d.scales())?,
    );
    be.hyper_gates(&pre, &post, &mix, &m, &a, &b, d);
    be.hyper_gates_backward(&dm, &dz, &dalpha, &gpre, &gpost, &gmix, &m, &a, &b, d);
    read(be, &[&pre, &post, &mix, &dm, &dz, &dalpha]).await
}

/// Attention over depth and its backward: h, α, the sources' gradient (added to `dx0`), and
/// the query's (w's, then the key gain's).
pub async fn depth<B: Backend>(
    be: &B,
    x: &[f32],
    query: &[f32],
    dh: &[f32],
    dx0: &[f32],
    d: crate::DepthDims,
) -> Result<Vec<Vec<f32>>> {
    let (xt, qt, dht, dx) = (upload(be, x)?, upload(be, query)?, upload(be, dh)?, upload(be, dx0)?);
    let h = be.zeros("h", d.tokens * d.width)?;
    let alpha = be.zeros("alpha", d.scratch())?;
    let scratch = be.zeros("scratch", d.scratch())?;
    let dq = be.zeros("dquery", 2 * d.width)?;
    be.depth_read(&h, &alpha, &xt, &qt, d);
    be.depth_read_backward(&dx, &dq, &scratch, &dht, &xt, &alpha, &qt, d);
    read(be, &[&h, &alpha, &dx, &dq]).await
}

/// Attention's output and log-sum-exps, and the qkv gradient.
pub async fn attention<B: Backend>(
    be: &B,
    qkv: &[f32],
    dout: &[f32],
    starts: &[u32],
    d: AttentionDims,
) -> Result<Vec<Vec<f32>>> {
    let (qkv, dout, starts) = (upload(be, qkv)?, upload(be, dout)?, upload_index(be, starts)?);
    let out = be.zeros("out", d.b * d.t * d.h * d.dh)?;
    let lse = be.zeros("lse", d.rows())?;
    let delta = be.zeros("delta", d.rows())?;
    let dqkv = be.zeros("dqkv", d.b * d.t * 3 * d.h * d.dh)?;
    be.attention_forward(&out, &lse, &qkv, &starts, d);
    be.attention_backward(&dqkv, &delta, &dout, &out, &qkv, &lse, &starts, d);
    read(be, &[&out, &lse, &dqkv]).await
}

/// The attention backward alone, from a given out and lse: dqkv and delta. What compares two
/// backends' backward where their forwards may differ (the fast class).
#[allow(clippy::too_many_arguments)]
pub async fn attention_backward<B: Backend>(
    be: &B,
    qkv: &[f32],
    dout: &[f32],
    out: &[f32],
    lse: &[f32],
    starts: &[u32],
    d: AttentionDims,
) -> Result<Vec<Vec<f32>>> {
    let (qkv, dout, starts) = (upload(be, qkv)?, upload(be, dout)?, upload_index(be, starts)?);
    let (out, lse) = (upload(be, out)?, upload(be, lse)?);
    let delta = be.zeros("delta", d.rows())?;
    let dqkv = be.zeros("dqkv", d.b * d.t * 3 * d.h * d.dh)?;
    be.attention_backward(&dqkv, &delta, &dout, &out, &qkv, &lse, &starts, d);
    read(be, &[&dqkv, &delta]).await
}

/// Random logits, and targets of which every fourth is ignored.
pub fn cross_entropy_inputs(rng: &mut rand::rngs::SmallRng, d: CrossEntropyDims) -> (Vec<f32>, Vec<u32>) {
    use rand::Rng;
    let logits = super::random(rng, d.rows * d.v, 5.0);
    let targets = (0..d.rows)
        .map(|r| match r % 4 {
            1 => IGNORE,
            _ => rng.random_range(0..d.v as u32),
        })
        .collect();
    (logits, targets)
}

/// Per-row losses, log Z, the logits' gradient and the summed loss.
pub async fn cross_entropy<B: Backend>(
    be: &B,
    logits: &[f32],
    targets: &[u32],
    d: CrossEntropyDims,
) -> Result<Vec<Vec<f32>>> {
    let (lg, tg) = (upload(be, logits)?, upload_index(be, targets)?);
    let counted = targets.iter().filter(|&&t| t != IGNORE).count().max(1);
    let scale = upload(be, &[1.0 / counted as f32])?;
    let (losses, lse) = (be.zeros("losses", d.rows)?, be.zeros("lse", d.rows)?);
    let dlogits = be.zeros("dlogits", logits.len())?;
    let mean = be.zeros("mean", 1)?;
    be.cross_entropy_forward(&losses, &lse, &lg, &tg, &scale, d);
    be.cross_entropy_backward(&dlogits, &lg, &lse, &tg, &scale, d);
    be.sum(&mean, &losses, false);
    read(be, &[&losses, &lse, &dlogits, &mean]).await
}

/// The gradient's sum of squares, then one AdamW update: parameters and both moments.
#[allow(clippy::too_many_arguments)]
pub async fn adamw<B: Backend>(
    be: &B,
    p: &[f32],
    g: &[f32],
    m: &[f32],
    v: &[f32],
    hyper: Hyper,
    d: AdamWDims,
) -> Result<Vec<Vec<f32>>> {
    let (pt, gt, mt, vt) = (upload(be, p)?, upload(be, g)?, upload(be, m)?, upload(be, v)?);
    let h = upload(be, &hyper.to_array())?;
    let sumsq = be.zeros("sumsq", 1)?;
    be.sum(&sumsq, &gt, true);
    be.adamw(&pt, &mt, &vt, &gt, &h, &sumsq, d);
    read(be, &[&sumsq, &pt, &mt, &vt]).await
}

/// Storage onto a base and in place, its backward; then for each norm kind the normed
/// retrieval and its backward, and `norm_forward`'s statistics of the same X. Outputs: stored,
/// accumulated, ddata, dkeys, then per kind: y, stats, `norm_forward`'s stats, dx (added to
/// `base`), dgain, dkeys. `data` serves as the storage's data and as the retrieval's dy, `base`
/// as the storage's dout.
pub async fn residual_matrix<B: Backend>(
    be: &B,
    x: &[f32],
    keys: &[f32],
    data: &[f32],
    base: &[f32],
    d: ResidualDims,
) -> Result<Vec<Vec<f32>>> {
    let (xt, keys, data, dout) = (upload(be, x)?, upload(be, keys)?, upload(be, data)?, upload(be, base)?);
    let stored = be.zeros("stored", d.matrices())?;
    let accumulated = upload(be, x)?;
    let (ddata, dkeys) = (be.zeros("ddata", d.vectors())?, be.zeros("dkeys", d.key_values())?);
    let partials = be.zeros("partials", d.key_grad_scratch())?;
    be.store(&stored, Some(&dout), &keys, &data, d);
    be.store(&accumulated, None, &keys, &data, d);
    be.store_backward(&ddata, &dkeys, &partials, &dout, &keys, &data, d);
    let mut outputs = read(be, &[&stored, &accumulated, &ddata, &dkeys]).await?;
    let gain: Vec<f32> = (0..d.dk * d.dv).map(|i| 0.5 + (i % 7) as f32 * 0.25).collect();
    let gain = upload(be, &gain)?;
    for kind in [NormKind::LayerNorm, NormKind::RmsNorm] {
        let nd = NormDims {
            rows: d.tokens,
            c: d.dk * d.dv,
            kind,
            eps: 1e-5,
        };
        let (y, stats, forward_stats) = (
            be.zeros("y", d.vectors())?,
            be.zeros("stats", 2 * d.tokens)?,
            be.zeros("stats", 2 * d.tokens)?,
        );
        let normed = be.zeros("normed", d.matrices())?;
        be.retrieve_normed(&y, &stats, &xt, &gain, &keys, d, nd);
        be.norm_forward(&normed, &forward_stats, &xt, &gain, nd);
        let (dx, dgain) = (upload(be, base)?, be.zeros("dgain", d.dk * d.dv)?);
        // dnorm is scratch that the GPU overwrites: start it dirty, as a model's reused buffer is.
        let (dkeys, dnorm) = (be.zeros("dkeys", d.key_values())?, upload(be, base)?);
        be.retrieve_normed_backward(
            &dx, &dgain, &dkeys, &dnorm, &partials, &data, &xt, &stats, &gain, &keys, d, nd,
        );
        outputs.extend(read(be, &[&y, &stats, &forward_stats, &dx, &dgain, &dkeys]).await?);
    }
    Ok(outputs)
}

/// What a Memory Layer's hash and bucket sort wrote (the codes; the bucket starts then rows),
/// and its values: p, y, dx, the table and bias gradients, each table's part of y and y summed
/// from its parts.
pub type MemoryOutputs = (Vec<u32>, Vec<u32>, Vec<Vec<f32>>);

/// Hash, bucket, forward and backward of one Memory Layer.
pub async fn memory<B: Backend>(
    be: &B,
    x: &[f32],
    tables: &[f32],
    bias: &[f32],
    dy: &[f32],
    d: MemoryDims,
) -> Result<MemoryOutputs> {
    let (x, tables, bias, dy) = (upload(be, x)?, upload(be, tables)?, upload(be, bias)?, upload(be, dy)?);
    let codes = be.index("codes", d.tokens * d.k)?;
    let rows = be.index("rows", d.k * d.tokens)?;
    let starts = be.index("starts", d.starts_len())?;
    let cursor = be.index("cursor", d.sort_scratch())?;
    let p = be.zeros("p", d.tokens * d.k)?;
    let y = be.zeros("y", d.tokens * d.d_out)?;
    let dx = be.zeros("dx", d.tokens * d.d_in)?;
    let dt = be.zeros("dtables", d.table_values())?;
    let db = be.zeros("dbias", d.d_out)?;
    be.memory_hash(&codes, &p, &x, d);
    be.memory_bucket(&rows, &starts, &cursor, &codes, d);
    be.memory_forward(&y, &codes, &p, &tables, &bias, d);
    be.memory_backward(&dx, &dt, &db, &dy, &x, &codes, &p, &rows, &starts, &tables, d);
    let parts = be.zeros("parts", d.parts_len())?;
    let summed = be.zeros("y from its parts", d.tokens * d.d_out)?;
    be.memory_parts(&parts, &codes, &p, &tables, d);
    be.memory_sum(&summed, &parts, &bias, d);
    let values = read(be, &[&p, &y, &dx, &dt, &db, &parts, &summed]).await?;
    let codes = be.read_index(&codes).await?;
    let mut bucketed = be.read_index(&starts).await?;
    bucketed.extend(be.read_index(&rows).await?);
    Ok((codes, bucketed, values))
}

/// AdamW's inputs: parameters, gradient, both moments, the step's values and the dims.
pub type AdamWInputs = (Vec<f32>, Vec<f32>, Vec<f32>, Vec<f32>, Hyper, AdamWDims);

/// 70,001 values: five blocks of `sum`, with the decay and boost ends inside blocks.
pub fn adamw_inputs(rng: &mut rand::rngs::SmallRng) -> AdamWInputs {
    let n = 70_001;
    let (p, g) = (super::random(rng, n, 1.0), super::random(rng, n, 0.1));
    let m = super::random(rng, n, 0.01);
    let v: Vec<f32> = super::random(rng, n, 0.01).iter().map(|x| x.abs()).collect();
    let hyper = Hyper {
        lr: 1e-2,
        beta1: 0.9,
        beta2: 0.95,
        eps: 1e-8,
        weight_decay: 0.1,
        step: 3,
        max_grad_norm: 1.0,
        lr_boost: 3.0,
    };
    let d = AdamWDims {
        n,
        decay_end: 40_000,
        boost_end: 10_048,
    };
    (p, g, m, v, hyper, d)
}

/// A norm's inputs over `rows` of `c`: x (off centre, so LayerNorm's mean matters), the gain,
/// the output gradient and the input gradient it adds to.
pub fn norm_inputs(rng: &mut rand::rngs::SmallRng, rows: usize, c: usize) -> [Vec<f32>; 4] {
    let x: Vec<f32> = super::random(rng, rows * c, 2.0).iter().map(|v| v + 0.5).collect();
    [
        x,
        super::random(rng, c, 1.0),
        super::random(rng, rows * c, 1.0),
        super::random(rng, rows * c, 1.0),
    ]
}

/// A Memory Layer's inputs for `d`: x, the tables, the bias and the output gradient.
pub fn memory_inputs(rng: &mut rand::rngs::SmallRng, d: MemoryDims) -> [Vec<f32>; 4] {
    [
        super::random(rng, d.tokens * d.d_in, 1.0),
        super::random(rng, d.table_values(), 0.5),
        super::random(rng, d.d_out, 0.1),
        super::random(rng, d.tokens * d.d_out, 1.0),
    ]
}
