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
    AttentionDims, Backend, CrossEntropyDims, EmbeddingDims, GatherDims, MatmulDims, MemoryDims, NormDims, NormKind,
    ResidualDims, Result,
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

/// `checks` by family, in the order each family first ran.
pub fn by_family(checks: &[Check]) -> Vec<Family> {
    let mut out: Vec<Family> = Vec::new();
    for c in checks {
        let at = match out.iter().position(|f| f.family == c.family) {
            Some(at) => at,
            None => {
                out.push(Family {
                    family: c.family.to_string(),
                    checks: 0,
                    failed: 0,
                    worst: 0.0,
                    tolerance: c.tolerance,
                    failures: vec![],
                });
                out.len() - 1
            }
        };
        let f = &mut out[at];
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
pub mod cases;

/// Runs one case on `be` and on the CPU twin and compares every output.
macro_rules! check {
    ($checks:ident, $be:expr, $family:literal, $case:expr, $tol:expr, $f:ident ( $($arg:expr),* )) => {{
        let got = cases::$f($be, $($arg),*).await?;
        let want = cases::$f(&CpuBackend::<f32>::new(), $($arg),*).await?;
        let case: String = $case.into();
        $checks.extend(compare($family, &case, &got, &want, $tol));
    }};
}

/// The matmul in every transpose and with accumulation, and batched over one A; each case's name
/// starts with `label`.
async fn matmul_cases<B: Backend>(be: &B, rng: &mut SmallRng, label: &str, checks: &mut Vec<Check>) -> Result<()> {
    for (ta, tb, acc) in (0..8).map(|i| (i & 1 != 0, i & 2 != 0, i & 4 != 0)) {
        let mut d = MatmulDims::new(67, 45, 93);
        (d.trans_a, d.trans_b, d.accumulate) = (ta, tb, acc);
        let (a, b, init) = (
            random(rng, 67 * 93, 1.0),
            random(rng, 93 * 45, 1.0),
            random(rng, 67 * 45, 1.0),
        );
        let case = format!("{label}67×45×93, ta {ta}, tb {tb}, accumulate {acc}");
        check!(checks, be, "matmul", case, 1e-5, matmul(&a, &b, &init, d));
    }
    let d = MatmulDims::new(100, 68, 36).batched(3, true, false);
    let (a, b, init) = (
        random(rng, 100 * 36, 1.0),
        random(rng, 3 * 36 * 68, 1.0),
        random(rng, 3 * 100 * 68, 1.0),
    );
    check!(
        checks,
        be,
        "matmul",
        format!("{label}100×68×36, batch 3 over one A"),
        1e-5,
        matmul(&a, &b, &init, d)
    );
    Ok(())
}

/// The fast class's matmul (`crate::precision`) against its CPU twin, in every transpose, with
/// accumulation, batched over one A, at ragged and whole-tile shapes (a whole tile is stored
/// straight from the cooperative matrices, an edge through the checked copy), each twice:
/// - integers in [−8, 8], exact in f16 at any scale with every partial sum exact in f32, so
///   the backend must give the twin's bits whatever its order of summation: what sees a wrong
///   layout, a transpose, an off-by-one in K (tolerance 0);
/// - real values at three magnitudes, each element within `precision::fast_bound` of the twin:
///   the check's error is the largest |backend − twin| as a fraction of that element's bound,
///   and passes at most 1.
async fn fast_matmul_cases<B: Backend>(be: &B, rng: &mut SmallRng, label: &str, checks: &mut Vec<Check>) -> Result<()> {
    let twin = CpuBackend::fast_twin();
    let mut shapes: Vec<MatmulDims> = (0..8)
        .map(|i| {
            let mut d = MatmulDims::new(67, 45, 93);
            (d.trans_a, d.trans_b, d.accumulate) = (i & 1 != 0, i & 2 != 0, i & 4 != 0);
            d
        })
        .collect();
    shapes.push(MatmulDims::new(128, 64, 48).trans_b());
    shapes.push(MatmulDims::new(100, 68, 36).batched(3, true, false));
    for d in shapes {
        let (na, nb) = d.spans();
        let out = d.batch * d.m * d.n;
        let name = format!("{label}{}", d.describe());
        let ints =
            |rng: &mut SmallRng, n: usize| (0..n).map(|_| rng.random_range(-8i32..=8) as f32).collect::<Vec<_>>();
        let (a, b, init) = (ints(rng, na), ints(rng, nb), ints(rng, out));
        let got = cases::matmul(be, &a, &b, &init, d).await?;
        let want = cases::matmul(&twin, &a, &b, &init, d).await?;
        checks.extend(compare(
            "matmul fast",
            &format!("{name}, integers (bit for bit)"),
            &got,
            &want,
            0.0,
        ));
        for scale in [1e-4f32, 1.0, 1e3] {
            let (a, b, init) = (random(rng, na, scale), random(rng, nb, 1.0), random(rng, out, 1.0));
            let got = cases::matmul(be, &a, &b, &init, d).await?.remove(0);
            let want = cases::matmul(&twin, &a, &b, &init, d).await?.remove(0);
            let abs = |x: &[f32]| x.iter().map(|v| v.abs()).collect::<Vec<_>>();
            let plain = MatmulDims { accumulate: false, ..d };
            let p = cases::matmul(&twin, &abs(&a), &abs(&b), &vec![0.0; out], plain)
                .await?
                .remove(0);
            let mut worst = 0f64;
            for i in 0..out {
                // An add to out rounds once more on either side.
                let carry = if d.accumulate {
                    f64::from(init[i].abs() + p[i]) * 2f64.powi(-23)
                } else {
                    0.0
                };
                let bound = crate::precision::fast_bound(d.k, f64::from(p[i])) + carry;
                let err = (f64::from(got[i]) - f64::from(want[i])).abs();
                worst = worst.max(if err == 0.0 {
                    0.0
                } else {
                    err / bound.max(f64::MIN_POSITIVE)
                });
            }
            checks.push(Check {
                family: "matmul fast",
                case: format!("{name}, values to {scale:e} (error / f16 bound)"),
                worst: worst as f32,
                scale: 1.0,
                tolerance: 1.0,
                finite: got.iter().all(|x| x.is_finite()),
            });
        }
    }
    Ok(())
}

/// Attention causal and over documents, with ALiBi, at a head width past one tile; each case's
/// name starts with `label`. On a fast backend a head in the fast class runs the fast kernels
/// and is checked against the fast class's twin ([`fast_attention_check`]), with three more
/// heads of 16, 32 and 48 at awkward lengths, two with operands far from 1 (0.01 and 300, the
/// logits' scale divided by their square so that the logits stay where training keeps them:
/// what tests the operands' scales, not f16's rounding of logits in the thousands).
async fn attention_cases<B: Backend>(be: &B, rng: &mut SmallRng, label: &str, checks: &mut Vec<Check>) -> Result<()> {
    let fast = be.precision() == crate::Precision::Fast;
    let mut shapes = vec![
        (2, 19, 3, 5, false, 2.0),
        (2, 37, 3, 7, true, 2.0),
        (1, 33, 2, 64, true, 2.0),
    ];
    if fast {
        shapes.extend([
            (2, 37, 2, 16, true, 0.01),
            (1, 70, 1, 32, false, 2.0),
            (1, 45, 2, 48, true, 300.0),
        ]);
    }
    for (b, t, h, dh, alibi, magnitude) in shapes {
        let far = if magnitude == 2.0 { 1.0 } else { magnitude * magnitude };
        let d = AttentionDims {
            b,
            t,
            h,
            dh,
            scale: 1.0 / (dh as f32).sqrt() / 2.0 / far,
            alibi,
        };
        let qkv = random(rng, b * t * 3 * h * dh, magnitude);
        let dout = random(rng, b * t * h * dh, 1.0);
        let plain = vec![0u32; b * t];
        let docs = documents(t, &[0, t as u32 / 3, t as u32 / 3 + 1, t as u32 - 1]).repeat(b);
        for (mask, starts) in [("causal", &plain), ("documents", &docs)] {
            let case = format!("{label}B {b}, T {t}, H {h}, Dh {dh}, ALiBi {alibi}, {mask}");
            if fast && d.in_fast_class() {
                fast_attention_check(be, &qkv, &dout, starts, d, &case, checks).await?;
            } else {
                check!(checks, be, "attention", case, 2e-5, attention(&qkv, &dout, starts, d));
            }
        }
    }
    Ok(())
}

/// The fast class's attention (`ops::attention::fast`) against its CPU twin: out and lse from
/// the same qkv, and dqkv from the same qkv, dout, out and lse (the twin's), each value's error
/// as a fraction of its own bound (`forward_bounds`, `backward_bounds`: f16 rounding and f32
/// sums in any order), passing at most 1.
async fn fast_attention_check<B: Backend>(
    be: &B,
    qkv: &[f32],
    dout: &[f32],
    starts: &[u32],
    d: AttentionDims,
    case: &str,
    checks: &mut Vec<Check>,
) -> Result<()> {
    use crate::ops::attention::fast::{backward_bounds, forward_bounds};
    let twin = CpuBackend::fast_twin();
    let got = cases::attention(be, qkv, dout, starts, d).await?;
    let want = cases::attention(&twin, qkv, dout, starts, d).await?;
    let (out, lse) = forward_bounds(qkv, starts, d);
    checks.push(bounded(
        "attention fast",
        &format!("{case}: out (error / bound)"),
        &got[0],
        &want[0],
        &out,
    ));
    checks.push(bounded(
        "attention fast",
        &format!("{case}: lse (error / bound)"),
        &got[1],
        &want[1],
        &lse,
    ));
    let got = cases::attention_backward(be, qkv, dout, &want[0], &want[1], starts, d).await?;
    let back = cases::attention_backward(&twin, qkv, dout, &want[0], &want[1], starts, d).await?;
    let dqkv = backward_bounds(qkv, dout, &want[0], &want[1], starts, d);
    checks.push(bounded(
        "attention fast",
        &format!("{case}: dqkv (error / bound)"),
        &got[0],
        &back[0],
        &dqkv,
    ));
    Ok(())
}

/// The largest |got − want| as a fraction of each value's own bound: passes at most 1.
fn bounded(family: &'static str, case: &str, got: &[f32], want: &[f32], bound: &[f64]) -> Check {
    let ratio = |((&g, &w), &b): ((&f32, &f32), &f64)| {
        let err = (f64::from(g) - f64::from(w)).abs();
        if err == 0.0 {
            0.0
        } else {
            err / b.max(f64::MIN_POSITIVE)
        }
    };
    let worst = match got.len() == want.len() && want.len() == bound.len() {
        true => got.iter().zip(want).zip(bound).map(ratio).fold(0.0, f64::max),
        false => f64::INFINITY,
    };
    Check {
        family,
        case: case.to_string(),
        worst: worst as f32,
        scale: 1.0,
        tolerance: 1.0,
        finite: got.iter().all(|x| x.is_finite()),
    }
}

/// The RMT's retrieval, storage and key gradient, plain and fused with the norm, on shapes that
/// split every tile unevenly; each case's name starts with `label`.
async fn residual_matrix_cases<B: Backend>(
    be: &B,
    rng: &mut SmallRng,
    label: &str,
    checks: &mut Vec<Check>,
) -> Result<()> {
    for (tokens, dk, dv, keys) in [(7, 5, 13, 3), (71, 9, 17, 21), (40, 33, 35, 37)] {
        let d = ResidualDims { tokens, dk, dv, keys };
        let (x, k) = (random(rng, d.matrices(), 1.0), random(rng, d.key_values(), 1.0));
        let (data, base) = (random(rng, d.vectors(), 1.0), random(rng, d.matrices(), 1.0));
        check!(
            checks,
            be,
            "residual_matrix",
            format!("{label}{d:?}"),
            1e-5,
            residual_matrix(&x, &k, &data, &base, d)
        );
    }
    Ok(())
}

/// The kernels tuning may choose on `gpu` besides the defaults [`run`] checks: every other matmul
/// tile, attention kernel and key gradient kernel that fits, each forced in turn through its
/// family's cases, named with the candidate. Natively only, where tuning runs.
#[cfg(not(target_arch = "wasm32"))]
pub async fn run_candidates(gpu: &crate::gpu::GpuBackend) -> Result<Vec<Check>> {
    use crate::gpu::Candidate;
    use crate::ops::attention::{BACKWARD_KERNELS, KERNELS};
    use crate::ops::{matmul::TILES, residual_matrix::KEY_GRAD_KERNELS};
    let mut checks = Vec::new();
    let others = |fits: Vec<bool>| -> Vec<usize> {
        let fitting: Vec<usize> = (0..fits.len()).filter(|&i| fits[i]).collect();
        fitting.into_iter().skip(1).collect()
    };
    use crate::ops::matmul::FAST_TILES;
    if gpu.precision() == crate::Precision::Fast {
        for i in others(FAST_TILES.iter().map(|t| t.fits(gpu)).collect()) {
            gpu.force_candidate("matmul_fast", i);
            let label = format!("{}: ", FAST_TILES[i].name());
            fast_matmul_cases(gpu, &mut SmallRng::seed_from_u64(0x5e1f), &label, &mut checks).await?;
        }
        gpu.unforce("matmul_fast");
        // The fast attention's other workgroup, 32 rows, which fits wherever the default does.
        let (forward, backward) = ("attention_forward_fast", "attention_backward_fast");
        gpu.force_candidate(forward, 1);
        gpu.force_candidate(backward, 1);
        let label = format!(
            "{}: ",
            crate::ops::attention::fast::FastAttentionTile::all(16)[1].name()
        );
        attention_cases(gpu, &mut SmallRng::seed_from_u64(0x5e1f), &label, &mut checks).await?;
        gpu.unforce(forward);
        gpu.unforce(backward);
    } else {
        for i in others(TILES.iter().map(|t| t.fits(gpu)).collect()) {
            gpu.force_candidate("matmul", i);
            let label = format!("tile {}: ", TILES[i].name());
            matmul_cases(gpu, &mut SmallRng::seed_from_u64(0x5e1f), &label, &mut checks).await?;
        }
        gpu.unforce("matmul");
    }
    for i in others(KERNELS.iter().map(|k| k.fits(gpu)).collect()) {
        gpu.force_candidate("attention_forward", i);
        // A forward-only kernel runs with the default backward.
        match i < BACKWARD_KERNELS.len() {
            true => gpu.force_candidate("attention_backward", i),
            false => gpu.unforce("attention_backward"),
        }
        let label = format!("{}: ", KERNELS[i].name());
        attention_cases(gpu, &mut SmallRng::seed_from_u64(0x5e1f), &label, &mut checks).await?;
    }
    gpu.unforce("attention_forward");
    gpu.unforce("attention_backward");
    for i in others(KEY_GRAD_KERNELS.iter().map(|k| k.fits(gpu)).collect()) {
        gpu.force_candidate("key_grad", i);
        let label = format!("key gradient {}: ", KEY_GRAD_KERNELS[i].name());
        residual_matrix_cases(gpu, &mut SmallRng::seed_from_u64(0x5e1f), &label, &mut checks).await?;
    }
    gpu.unforce("key_grad");
    Ok(checks)
}

/// Every family on `be` against the CPU twin, on shapes that are no multiple of any workgroup
/// or tile: matmul in every transpose, with accumulation and batched with a broadcast operand;
/// the elementwise ops; the embedding and the gather; both norms; attention causal and over
/// documents, with ALiBi, at a head width past one tile; cross-entropy over more than two
/// workgroup passes a row; the sum of squares with AdamW; the RMT's retrieval, storage and key
/// gradient, plain and fused with the norm; the Memory Layer's hash, bucket sort, forward and
/// backward; hyper-connections' gates, forward and backward; and attention over depth, forward and
/// backward. Takes a few seconds on a GPU, and under a minute on an emulated one.
pub async fn run<B: Backend>(be: &B) -> Result<Vec<Check>> {
    let mut rng = SmallRng::seed_from_u64(0x5e1f);
    let mut checks = Vec::new();

    // In the fast class the products of at least 16 each way have their own twin and bound;
    // every other family is f32 in both classes.
    match be.precision() {
        crate::Precision::Strict => matmul_cases(be, &mut rng, "", &mut checks).await?,
        crate::Precision::Fast => fast_matmul_cases(be, &mut rng, "", &mut checks).await?,
    }

    let (a, b) = (random(&mut rng, 1000, 4.0), random(&mut rng, 1000, 1.0));
    check!(
        checks,
        be,
        "elementwise",
        "add, add_assign, GELU, fill, replace over 1,000",
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

    for (rows, c) in [(37, 300), (5, 7), (150, 33)] {
        for kind in [NormKind::LayerNorm, NormKind::RmsNorm] {
            let d = NormDims {
                rows,
                c,
                kind,
                eps: 1e-5,
            };
            let [x, gain, dout, dx0] = cases::norm_inputs(&mut rng, rows, c);
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

    attention_cases(be, &mut rng, "", &mut checks).await?;

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

    let (p, g, m, v, hyper, d) = cases::adamw_inputs(&mut rng);
    check!(
        checks,
        be,
        "optim",
        "70,001 values",
        1e-5,
        adamw(&p, &g, &m, &v, hyper, d)
    );

    residual_matrix_cases(be, &mut rng, "", &mut checks).await?;

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
        let [x, tables, bias, dy] = cases::memory_inputs(&mut rng, d);
        let (gc, gb, g) = cases::memory(be, &x, &tables, &bias, &dy, d).await?;
        let (cc, cb, c) = cases::memory(&CpuBackend::<f32>::new(), &x, &tables, &bias, &dy, d).await?;
        let case = format!("{tokens} tokens, d_in {d_in}, τ {tau}, K {k}, d_out {d_out}, l1 {l1}");
        checks.push(compare_exact("memory", &format!("{case}, hash codes"), &gc, &cc));
        checks.push(compare_exact("memory", &format!("{case}, buckets"), &gb, &cb));
        checks.extend(compare("memory", &case, &g, &c, 1e-5));
    }

    // Hyper-connections' gates: Sinkhorn at 3 streams and 20 rounds, mHC-lite at 4, HC's tanh
    // at 4, over token counts that leave a workgroup part-empty.
    for (tokens, n, mixing) in [
        (37, 3, crate::Mixing::Sinkhorn { iters: 20 }),
        (300, 4, crate::Mixing::Permutations),
        (37, 4, crate::Mixing::Tanh),
    ] {
        let d = crate::HyperDims { tokens, n, mixing };
        let logits = random(&mut rng, tokens * d.width(), 1.5);
        let bias = random(&mut rng, d.width(), 1.0);
        let (dpre, dpost) = (random(&mut rng, tokens * n, 1.0), random(&mut rng, tokens * n, 1.0));
        let dmix = random(&mut rng, tokens * n * n, 1.0);
        check!(
            checks,
            be,
            "hyper",
            format!("{tokens} tokens, {n} streams, {mixing:?}"),
            2e-5,
            hyper(&logits, &[0.7, 1.1, 0.9], &bias, &dpre, &dpost, &dmix, d)
        );
    }

    // Attention over depth: a token count that leaves a column pass part-empty, a width past
    // one workgroup, and a read of fewer sources than rows; with normed keys and raw.
    let (tokens, rows, width) = (37, 5, 133);
    let x = random(&mut rng, tokens * rows * width, 2.0);
    let mut query = random(&mut rng, width, 0.3);
    query.extend(random(&mut rng, width, 1.0));
    let (dh, dx0) = (random(&mut rng, tokens * width, 1.0), random(&mut rng, x.len(), 1.0));
    for normed_keys in [true, false] {
        let d = crate::DepthDims {
            tokens,
            rows,
            sources: 4,
            width,
            eps: 1e-8,
            normed_keys,
        };
        let keys = if normed_keys { "normed" } else { "raw" };
        check!(
            checks,
            be,
            "depth",
            format!("37 tokens, 4 sources of 5 rows of 133, {keys} keys"),
            2e-5,
            depth(&x, &query, &dh, &dx0, d)
        );
    }
    Ok(checks)
}
