//! Every op family on a backend against its CPU twin, on shapes that fit no workgroup: what
//! `resmem selftest` and the page's "Check this GPU" run. WebGPU drivers differ, and a user
//! should know that the kernels compute right on their adapter before trusting a run.
//!
//! [`cases`] runs one family's ops on any backend and reads back every output; the GPU tests
//! (`tests/gpu_vs_cpu.rs`) compare the same cases over many more shapes, bit for bit where a
//! launch is split or folded. [`run`] checks each family on a few awkward shapes: each output
//! within its family's tolerance of the CPU's largest magnitude, hash codes and buckets equal.

use crate::cpu::CpuBackend;
use crate::{
    AttentionDims, Backend, CrossEntropyDims, EmbeddingDims, GatherDims, Hyper, MatmulDims, MemoryDims, NormDims,
    NormKind, ResidualDims, Result,
};
use rand::{rngs::SmallRng, Rng, SeedableRng};
use serde::{Deserialize, Serialize};

/// One output of one case, against the CPU twin.
#[derive(Clone, Debug)]
pub struct Check {
    /// The op family, as `resmem bench` names it.
    pub family: &'static str,
    /// The case and the output, with its shape.
    pub case: String,
    /// The largest |backend − CPU| over the output; for indices, the count that differ.
    pub worst: f32,
    /// The CPU output's largest magnitude (at least 1e-6); 1 for indices.
    pub scale: f32,
    /// The family's tolerance, relative to `scale`; 0 for indices.
    pub tolerance: f32,
    /// Every value the backend wrote is finite.
    pub finite: bool,
}

impl Check {
    pub fn passed(&self) -> bool {
        self.finite && self.worst <= self.tolerance * self.scale
    }

    /// The worst error relative to the scale.
    pub fn relative(&self) -> f32 {
        self.worst / self.scale
    }
}

/// One family's checks in brief: what `resmem selftest` and the page print a row of.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Family {
    pub family: String,
    pub checks: usize,
    pub failed: usize,
    /// The worst check's error relative to its scale, and its tolerance.
    pub worst: f32,
    pub tolerance: f32,
    /// The failed checks' cases, with their errors.
    pub failures: Vec<String>,
}

/// `checks` by family, in the order they ran.
pub fn by_family(checks: &[Check]) -> Vec<Family> {
    let mut out: Vec<Family> = Vec::new();
    for c in checks {
        if out.last().is_none_or(|f| f.family != c.family) {
            out.push(Family {
                family: c.family.to_string(),
                checks: 0,
                failed: 0,
                worst: 0.0,
                tolerance: c.tolerance,
                failures: vec![],
            });
        }
        let f = out.last_mut().expect("pushed above");
        f.checks += 1;
        let relative = if c.finite { c.relative() } else { f32::INFINITY };
        if relative >= f.worst {
            (f.worst, f.tolerance) = (relative, c.tolerance);
        }
        if !c.passed() {
            f.failed += 1;
            f.failures.push(match c.finite {
                true => format!("{} ({:.2e} against {:.0e})", c.case, c.relative(), c.tolerance),
                false => format!("{} (non-finite values)", c.case),
            });
        }
    }
    out
}

/// The checks of each output of `got` against `want`, within `tolerance` of each output's scale.
pub fn compare(family: &'static str, case: &str, got: &[Vec<f32>], want: &[Vec<f32>], tolerance: f32) -> Vec<Check> {
    got.iter()
        .zip(want)
        .enumerate()
        .map(|(i, (g, c))| {
            let worst = match g.len() == c.len() {
                true => g.iter().zip(c).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max),
                false => f32::INFINITY,
            };
            Check {
                family,
                case: format!("{case}, output {i}"),
                worst,
                scale: c.iter().fold(0f32, |m, x| m.max(x.abs())).max(1e-6),
                tolerance,
                finite: g.iter().all(|x| x.is_finite()),
            }
        })
        .collect()
}

/// Indices that must be equal: the count that differ (and any difference in length) is the error.
fn compare_exact(family: &'static str, case: &str, got: &[u32], want: &[u32]) -> Check {
    let differing = got.iter().zip(want).filter(|(a, b)| a != b).count() + got.len().abs_diff(want.len());
    Check {
        family,
        case: case.to_string(),
        worst: differing as f32,
        scale: 1.0,
        tolerance: 0.0,
        finite: true,
    }
}

/// Uniform values in (−scale, scale).
pub fn random(rng: &mut SmallRng, n: usize, scale: f32) -> Vec<f32> {
    (0..n).map(|_| rng.random_range(-1.0..1.0) * scale).collect()
}

/// Each token's document start for documents beginning at `starts` (the first at 0).
pub fn documents(t: usize, starts: &[u32]) -> Vec<u32> {
    (0..t as u32)
        .map(|i| starts.iter().copied().filter(|&s| s <= i).max().unwrap_or(0))
        .collect()
}

/// One family's ops on a backend, from given inputs, with every output read back.
pub mod cases {
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
    pub async fn matmul<B: Backend>(
        be: &B,
        a: &[f32],
        b: &[f32],
        init: &[f32],
        d: MatmulDims,
    ) -> Result<Vec<Vec<f32>>> {
        let (a, b, out) = (upload(be, a)?, upload(be, b)?, upload(be, init)?);
        be.matmul(&out, &a, &b, d);
        read(be, &[&out]).await
    }

    /// add, add_assign, GELU forward and backward, fill.
    pub async fn elementwise<B: Backend>(be: &B, a: &[f32], b: &[f32]) -> Result<Vec<Vec<f32>>> {
        let (ta, tb) = (upload(be, a)?, upload(be, b)?);
        let (sum, acc, gelu, dgelu, filled) = (
            upload(be, a)?,
            upload(be, b)?,
            upload(be, a)?,
            upload(be, a)?,
            upload(be, a)?,
        );
        be.add(&sum, &ta, &tb);
        be.add_assign(&acc, &ta);
        be.gelu_forward(&gelu, &ta);
        be.gelu_backward(&dgelu, &tb, &ta);
        be.fill(&filled, 0.25);
        read(be, &[&sum, &acc, &gelu, &dgelu, &filled]).await
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

    /// Retrieval, storage onto a base and in place, the key gradient; then for each norm kind
    /// the fused forms against the same ops on Norm(X) written out. Outputs: y, stored,
    /// accumulated, dkeys, then per kind: `norm_stats`'s and `norm_forward`'s statistics, fused
    /// y, unfused y, fused dkeys, unfused dkeys.
    pub async fn residual_matrix<B: Backend>(
        be: &B,
        x: &[f32],
        keys: &[f32],
        data: &[f32],
        base: &[f32],
        d: ResidualDims,
    ) -> Result<Vec<Vec<f32>>> {
        let (xt, keys, data, base) = (upload(be, x)?, upload(be, keys)?, upload(be, data)?, upload(be, base)?);
        let y = be.zeros("y", d.vectors())?;
        let stored = be.zeros("stored", d.matrices())?;
        let accumulated = upload(be, x)?;
        let dkeys = be.zeros("dkeys", d.key_values())?;
        let partials = be.zeros("partials", d.key_grad_scratch())?;
        be.retrieve(&y, &xt, &keys, d);
        be.store(&stored, Some(&base), &keys, &data, d);
        be.store(&accumulated, None, &keys, &data, d);
        be.key_grad(&dkeys, &partials, &data, &xt, d);
        let mut outputs = read(be, &[&y, &stored, &accumulated, &dkeys]).await?;
        let gain: Vec<f32> = (0..d.dk * d.dv).map(|i| 0.5 + (i % 7) as f32 * 0.25).collect();
        let gain = upload(be, &gain)?;
        for kind in [NormKind::LayerNorm, NormKind::RmsNorm] {
            let nd = NormDims {
                rows: d.tokens,
                c: d.dk * d.dv,
                kind,
                eps: 1e-5,
            };
            let (stats, normed, stats_only) = (
                be.zeros("stats", 2 * d.tokens)?,
                be.zeros("normed", d.matrices())?,
                be.zeros("stats", 2 * d.tokens)?,
            );
            let (y_fused, y_plain) = (be.zeros("y", d.vectors())?, be.zeros("y", d.vectors())?);
            let (dk_fused, dk_plain) = (be.zeros("dk", d.key_values())?, be.zeros("dk", d.key_values())?);
            be.norm_forward(&normed, &stats, &xt, &gain, nd);
            be.norm_stats(&stats_only, &xt, nd);
            be.retrieve_normed(&y_fused, &xt, &stats_only, &gain, &keys, d);
            be.retrieve(&y_plain, &normed, &keys, d);
            be.key_grad_normed(&dk_fused, &partials, &data, &xt, &stats_only, &gain, d);
            be.key_grad(&dk_plain, &partials, &data, &normed, d);
            outputs.extend(read(be, &[&stats_only, &stats, &y_fused, &y_plain, &dk_fused, &dk_plain]).await?);
        }
        Ok(outputs)
    }

    /// What a Memory Layer's hash and bucket sort wrote (the codes; the bucket starts then rows),
    /// and its values: p, y, dx, the table and bias gradients.
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
        let values = read(be, &[&p, &y, &dx, &dt, &db]).await?;
        let codes = be.read_index(&codes).await?;
        let mut bucketed = be.read_index(&starts).await?;
        bucketed.extend(be.read_index(&rows).await?);
        Ok((codes, bucketed, values))
    }
}

/// Runs one case on `be` and on the CPU twin and compares every output.
macro_rules! check {
    ($checks:ident, $be:expr, $family:literal, $case:expr, $tol:expr, $f:ident ( $($arg:expr),* )) => {{
        let got = cases::$f($be, $($arg),*).await?;
        let want = cases::$f(&CpuBackend::<f32>::new(), $($arg),*).await?;
        let case: String = $case.into();
        $checks.extend(compare($family, &case, &got, &want, $tol));
    }};
}

/// Every family on `be` against the CPU twin, on shapes that are no multiple of any workgroup
/// or tile: matmul in every transpose, with accumulation and batched with a broadcast operand;
/// the elementwise ops; the embedding and the gather; both norms; attention causal and over
/// documents, with ALiBi, at a head width past one tile; cross-entropy over more than two
/// workgroup passes a row; the sum of squares with AdamW; the RMT's retrieval, storage and key
/// gradient, plain and fused with the norm; and the Memory Layer's hash, bucket sort, forward
/// and backward. Takes a few seconds on a GPU, and under a minute on an emulated one.
pub async fn run<B: Backend>(be: &B) -> Result<Vec<Check>> {
    let mut rng = SmallRng::seed_from_u64(0x5e1f);
    let mut checks = Vec::new();

    for (ta, tb, acc) in (0..8).map(|i| (i & 1 != 0, i & 2 != 0, i & 4 != 0)) {
        let mut d = MatmulDims::new(67, 45, 93);
        (d.trans_a, d.trans_b, d.accumulate) = (ta, tb, acc);
        let (a, b, init) = (
            random(&mut rng, 67 * 93, 1.0),
            random(&mut rng, 93 * 45, 1.0),
            random(&mut rng, 67 * 45, 1.0),
        );
        let case = format!("67×45×93, ta {ta}, tb {tb}, accumulate {acc}");
        check!(checks, be, "matmul", case, 1e-5, matmul(&a, &b, &init, d));
    }
    let d = MatmulDims::new(100, 68, 36).batched(3, true, false);
    let (a, b, init) = (
        random(&mut rng, 100 * 36, 1.0),
        random(&mut rng, 3 * 36 * 68, 1.0),
        random(&mut rng, 3 * 100 * 68, 1.0),
    );
    check!(
        checks,
        be,
        "matmul",
        "100×68×36, batch 3 over one A",
        1e-5,
        matmul(&a, &b, &init, d)
    );

    let (a, b) = (random(&mut rng, 1000, 4.0), random(&mut rng, 1000, 1.0));
    check!(
        checks,
        be,
        "elementwise",
        "add, add_assign, GELU, fill over 1,000",
        1e-5,
        elementwise(&a, &b)
    );

    let d = EmbeddingDims {
        bt: 39,
        t: 13,
        c: 19,
        v: 29,
    };
    let tokens: Vec<u32> = (0..d.bt).map(|_| rng.random_range(0..7) * 4).collect();
    let (wte, wpe, dout) = (
        random(&mut rng, d.v * d.c, 1.0),
        random(&mut rng, d.t * d.c, 1.0),
        random(&mut rng, d.bt * d.c, 1.0),
    );
    check!(
        checks,
        be,
        "embedding",
        format!("{d:?}"),
        1e-5,
        embedding(&tokens, &wte, &wpe, &dout, d)
    );
    let d = GatherDims { rows: 41, c: 19, v: 29 };
    let index: Vec<u32> = (0..d.rows).map(|_| rng.random_range(0..8) * 4).collect();
    let (table, dout) = (random(&mut rng, d.v * d.c, 1.0), random(&mut rng, d.rows * d.c, 1.0));
    check!(
        checks,
        be,
        "embedding",
        format!("gather {d:?}"),
        1e-5,
        gather(&index, &table, &dout, d)
    );

    for (rows, c) in [(37, 300), (5, 7)] {
        for kind in [NormKind::LayerNorm, NormKind::RmsNorm] {
            let d = NormDims {
                rows,
                c,
                kind,
                eps: 1e-5,
            };
            let x: Vec<f32> = random(&mut rng, rows * c, 2.0).iter().map(|v| v + 0.5).collect();
            let (gain, dout, dx0) = (
                random(&mut rng, c, 1.0),
                random(&mut rng, rows * c, 1.0),
                random(&mut rng, rows * c, 1.0),
            );
            check!(
                checks,
                be,
                "norm",
                format!("{kind:?} {rows}×{c}"),
                2e-5,
                norm(&x, &gain, &dout, &dx0, d)
            );
        }
    }

    for (b, t, h, dh, alibi) in [(2, 19, 3, 5, false), (2, 37, 3, 7, true), (1, 33, 2, 64, true)] {
        let d = AttentionDims {
            b,
            t,
            h,
            dh,
            scale: 1.0 / (dh as f32).sqrt() / 2.0,
            alibi,
        };
        let qkv = random(&mut rng, b * t * 3 * h * dh, 2.0);
        let dout = random(&mut rng, b * t * h * dh, 1.0);
        let plain = vec![0u32; b * t];
        let docs = documents(t, &[0, t as u32 / 3, t as u32 / 3 + 1, t as u32 - 1]).repeat(b);
        for (mask, starts) in [("causal", &plain), ("documents", &docs)] {
            let case = format!("B {b}, T {t}, H {h}, Dh {dh}, ALiBi {alibi}, {mask}");
            check!(checks, be, "attention", case, 2e-5, attention(&qkv, &dout, starts, d));
        }
    }

    let d = CrossEntropyDims {
        rows: 23,
        v: 517,
        z: 1e-4,
    };
    let (logits, targets) = cases::cross_entropy_inputs(&mut rng, d);
    check!(
        checks,
        be,
        "cross_entropy",
        format!("{} rows of {}", d.rows, d.v),
        2e-5,
        cross_entropy(&logits, &targets, d)
    );

    let (p, g) = (random(&mut rng, 70_001, 1.0), random(&mut rng, 70_001, 0.1));
    let m = random(&mut rng, 70_001, 0.01);
    let v: Vec<f32> = random(&mut rng, 70_001, 0.01).iter().map(|x| x.abs()).collect();
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
    let d = crate::AdamWDims {
        n: 70_001,
        decay_end: 40_000,
        boost_end: 10_048,
    };
    check!(
        checks,
        be,
        "optim",
        "70,001 values",
        1e-5,
        adamw(&p, &g, &m, &v, hyper, d)
    );

    for (tokens, dk, dv, keys) in [(7, 5, 13, 3), (71, 9, 17, 21)] {
        let d = ResidualDims { tokens, dk, dv, keys };
        let (x, k) = (
            random(&mut rng, d.matrices(), 1.0),
            random(&mut rng, d.key_values(), 1.0),
        );
        let (data, base) = (random(&mut rng, d.vectors(), 1.0), random(&mut rng, d.matrices(), 1.0));
        check!(
            checks,
            be,
            "residual_matrix",
            format!("{d:?}"),
            1e-5,
            residual_matrix(&x, &k, &data, &base, d)
        );
    }

    for (tokens, d_in, tau, k, d_out, l1) in [(300, 23, 5, 4, 19, false), (37, 64, 8, 8, 7, true)] {
        let d = MemoryDims {
            tokens,
            d_in,
            tau,
            k,
            d_out,
            temperature: 1.0,
            l1,
        };
        let x = random(&mut rng, tokens * d_in, 1.0);
        let tables = random(&mut rng, d.table_values(), 0.5);
        let bias = random(&mut rng, d_out, 0.1);
        let dy = random(&mut rng, tokens * d_out, 1.0);
        let (gc, gb, g) = cases::memory(be, &x, &tables, &bias, &dy, d).await?;
        let (cc, cb, c) = cases::memory(&CpuBackend::<f32>::new(), &x, &tables, &bias, &dy, d).await?;
        let case = format!("{tokens} tokens, d_in {d_in}, τ {tau}, K {k}, d_out {d_out}, l1 {l1}");
        checks.push(compare_exact("memory", &format!("{case}, hash codes"), &gc, &cc));
        checks.push(compare_exact("memory", &format!("{case}, buckets"), &gb, &cb));
        checks.extend(compare("memory", &case, &g, &c, 1e-5));
    }
    Ok(checks)
}
