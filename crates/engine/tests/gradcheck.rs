//! Every op's backward against central finite differences, in f64, on the CPU reference.
//! Each test takes L = Σ w ⊙ op(inputs) with random w, so dL/dout = w.

use rand::{rngs::SmallRng, Rng, SeedableRng};
use resmem_engine::ops::{
    attention, cross_entropy, depth, elementwise, embedding, gather, matmul, memory, norm, residual_matrix,
};
use resmem_engine::{
    AttentionDims, CrossEntropyDims, DepthDims, EmbeddingDims, GatherDims, MatmulDims, MemoryDims, NormDims, NormKind,
    ResidualDims, TokenBuckets,
};

fn rand_vec(rng: &mut SmallRng, n: usize, scale: f64) -> Vec<f64> {
    (0..n).map(|_| rng.random_range(-1.0..1.0) * scale).collect()
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// Central differences of `f` at `x`, compared with `analytic`; relative error per value.
fn check(name: &str, x: &[f64], analytic: &[f64], f: impl Fn(&[f64]) -> f64) {
    check_step(name, x, analytic, 1e-6, f)
}

/// `check` with the step `h`: a larger one where a loss sums many rounded terms that one input
/// moves together (a normed token's retrievals), whose rounding a small step would magnify.
fn check_step(name: &str, x: &[f64], analytic: &[f64], h: f64, f: impl Fn(&[f64]) -> f64) {
    let mut worst: f64 = 0.0;
    for i in 0..x.len() {
        let (mut xp, mut xm) = (x.to_vec(), x.to_vec());
        xp[i] += h;
        xm[i] -= h;
        let numeric = (f(&xp) - f(&xm)) / (2.0 * h);
        let err = (numeric - analytic[i]).abs() / (numeric.abs() + analytic[i].abs()).max(1e-6);
        worst = worst.max(err);
        assert!(err < 1e-5, "{name}[{i}]: numeric {numeric} vs analytic {}", analytic[i]);
    }
    eprintln!("{name}: {} values, worst relative error {worst:.2e}", x.len());
}

#[test]
fn matmul_all_transposes_and_accumulate() {
    let mut rng = SmallRng::seed_from_u64(1);
    for (ta, tb) in [(false, false), (false, true), (true, false), (true, true)] {
        let mut d = MatmulDims::new(5, 3, 7).batched(2, false, false);
        d.trans_a = ta;
        d.trans_b = tb;
        let a = rand_vec(&mut rng, 2 * 5 * 7, 1.0);
        let b = rand_vec(&mut rng, 2 * 7 * 3, 1.0);
        let w = rand_vec(&mut rng, 2 * 5 * 3, 1.0);
        let fwd = |a: &[f64], b: &[f64]| {
            let mut out = vec![0.0; 30];
            matmul::cpu(&mut out, a, b, d);
            dot(&out, &w)
        };
        // Backward by the transposed products, as the models compute it.
        let (mut da, mut db) = (vec![0.0; a.len()], vec![0.0; b.len()]);
        let batched = |m, n, k| MatmulDims::new(m, n, k).batched(2, false, false);
        match ta {
            false => matmul::cpu(
                &mut da,
                &w,
                &b,
                MatmulDims {
                    trans_b: !tb,
                    ..batched(5, 7, 3)
                },
            ),
            true => matmul::cpu(
                &mut da,
                &b,
                &w,
                MatmulDims {
                    trans_a: tb,
                    trans_b: true,
                    ..batched(7, 5, 3)
                },
            ),
        }
        match tb {
            false => matmul::cpu(
                &mut db,
                &a,
                &w,
                MatmulDims {
                    trans_a: !ta,
                    ..batched(7, 3, 5)
                },
            ),
            true => matmul::cpu(
                &mut db,
                &w,
                &a,
                MatmulDims {
                    trans_a: true,
                    trans_b: ta,
                    ..batched(3, 7, 5)
                },
            ),
        }
        check(&format!("matmul({ta},{tb}).a"), &a, &da, |a| fwd(a, &b));
        check(&format!("matmul({ta},{tb}).b"), &b, &db, |b| fwd(&a, b));
    }
    // accumulate adds to what is there
    let d = MatmulDims::new(2, 2, 2).accumulate();
    let mut out = vec![1.0; 4];
    matmul::cpu(&mut out, &[1.0, 0.0, 0.0, 1.0], &[1.0, 2.0, 3.0, 4.0], d);
    assert_eq!(out, vec![2.0, 3.0, 4.0, 5.0]);
}

#[test]
fn broadcast_matmul_matches_separate_products() {
    let mut rng = SmallRng::seed_from_u64(2);
    let a = rand_vec(&mut rng, 3 * 4 * 5, 1.0);
    let w = rand_vec(&mut rng, 5 * 6, 1.0);
    let mut out = vec![0.0; 3 * 4 * 6];
    matmul::cpu(&mut out, &a, &w, MatmulDims::new(4, 6, 5).batched(3, false, true));
    let mut flat = vec![0.0; 3 * 4 * 6];
    matmul::cpu(&mut flat, &a, &w, MatmulDims::new(12, 6, 5));
    assert_eq!(out, flat);
}

#[test]
fn gelu() {
    let mut rng = SmallRng::seed_from_u64(3);
    let x = rand_vec(&mut rng, 37, 3.0);
    let w = rand_vec(&mut rng, 37, 1.0);
    let mut dx = vec![0.0; 37];
    elementwise::cpu_gelu_backward(&mut dx, &w, &x);
    check("gelu", &x, &dx, |x| {
        let mut y = vec![0.0; 37];
        elementwise::cpu_gelu_forward(&mut y, x);
        dot(&y, &w)
    });
    // GELU_tanh(1) by hand: 0.5·(1 + tanh(sqrt(2/π)·1.044715))
    let mut y = [0.0f64];
    elementwise::cpu_gelu_forward(&mut y, &[1.0]);
    assert!((y[0] - 0.841_191_990_607_477_2).abs() < 1e-12, "{}", y[0]);
}

#[test]
fn norms() {
    let mut rng = SmallRng::seed_from_u64(4);
    for kind in [NormKind::LayerNorm, NormKind::RmsNorm] {
        let d = NormDims {
            rows: 3,
            c: 11,
            kind,
            eps: 1e-5,
        };
        let x = rand_vec(&mut rng, 33, 2.0);
        let gain = rand_vec(&mut rng, 11, 1.0);
        let w = rand_vec(&mut rng, 33, 1.0);
        let fwd = |x: &[f64], g: &[f64]| {
            let (mut y, mut st) = (vec![0.0; 33], vec![0.0; 6]);
            norm::cpu_forward(&mut y, &mut st, x, g, d);
            dot(&y, &w)
        };
        let (mut y, mut st) = (vec![0.0; 33], vec![0.0; 6]);
        norm::cpu_forward(&mut y, &mut st, &x, &gain, d);
        let (mut dx, mut dg) = (vec![0.5; 33], vec![0.0; 11]);
        norm::cpu_backward(&mut dx, &mut dg, &w, &x, &gain, &st, d);
        dx.iter_mut().for_each(|v| *v -= 0.5); // the input gradient accumulates
        check(&format!("{kind:?}.x"), &x, &dx, |x| fwd(x, &gain));
        check(&format!("{kind:?}.gain"), &gain, &dg, |g| fwd(&x, g));
    }
}

/// Attention over depth: every source row's gradient (the rows past `sources` get none), and
/// the pseudo-query's and the key gain's (`query`'s two rows), over tokens with 1, 3 and all 5
/// of 5 rows, with normed keys and raw.
#[test]
fn depth_attention() {
    let mut rng = SmallRng::seed_from_u64(9);
    for (sources, normed_keys) in [1, 3, 5].into_iter().flat_map(|n| [(n, true), (n, false)]) {
        let d = DepthDims {
            tokens: 3,
            rows: 5,
            sources,
            width: 7,
            eps: 1e-6,
            normed_keys,
        };
        let (nx, nh) = (d.tokens * d.rows * d.width, d.tokens * d.width);
        let x = rand_vec(&mut rng, nx, 2.0);
        let query = rand_vec(&mut rng, 14, 1.0);
        let weights = rand_vec(&mut rng, nh, 1.0);
        let fwd = |x: &[f64], q: &[f64]| {
            let (mut h, mut alpha) = (vec![0.0; nh], vec![0.0; d.scratch()]);
            depth::cpu_forward(&mut h, &mut alpha, x, q, d);
            dot(&h, &weights)
        };
        let (mut h, mut alpha) = (vec![0.0; nh], vec![0.0; d.scratch()]);
        depth::cpu_forward(&mut h, &mut alpha, &x, &query, d);
        for a in alpha.chunks(sources) {
            assert!((a.iter().sum::<f64>() - 1.0).abs() < 1e-12 && a.iter().all(|&a| a >= 0.0));
        }
        let (mut dx, mut dq, mut scratch) = (vec![0.5; nx], vec![0.0; 14], vec![0.0; d.scratch()]);
        depth::cpu_backward(&mut dx, &mut dq, &mut scratch, &weights, &x, &alpha, &query, d);
        dx.iter_mut().for_each(|v| *v -= 0.5); // the sources' gradient accumulates
        check(&format!("depth {sources} {normed_keys}.x"), &x, &dx, |x| fwd(x, &query));
        check(&format!("depth {sources} {normed_keys}.query"), &query, &dq, |q| {
            fwd(&x, q)
        });
    }
}

/// SPEC §7.8 T-R2 and T-R3: one source reads as itself; v_0 = (1, 1), v_1 = (3, −1), w = (1, 0),
/// γ = 1 gives α = (0.415411, 0.584589), h = (2.169178, −0.169178), and from dh = (1, 0)
/// dw = (0.165931, −0.702896); with w = 0, h = (2, 0). With raw keys (by hand): z = (1, 3),
/// α = (0.119203, 0.880797), h = (2.761594, −0.761594), dw = Σ dz_i v_i = (0.419974, −0.419974).
#[test]
fn depth_attention_spec_numbers() {
    let read_keys = |x: &[f64], sources, w: [f64; 2], normed_keys| {
        let d = DepthDims {
            tokens: 1,
            rows: 2,
            sources,
            width: 2,
            eps: 0.0,
            normed_keys,
        };
        let query = [w[0], w[1], 1.0, 1.0];
        let (mut h, mut alpha) = (vec![0.0; 2], vec![0.0; sources]);
        depth::cpu_forward(&mut h, &mut alpha, x, &query, d);
        let (mut dx, mut dq, mut scratch) = (vec![0.0; 4], vec![0.0; 4], vec![0.0; sources]);
        depth::cpu_backward(&mut dx, &mut dq, &mut scratch, &[1.0, 0.0], x, &alpha, &query, d);
        (h, alpha, dq[..2].to_vec())
    };
    let read = |x: &[f64], sources, w: [f64; 2]| read_keys(x, sources, w, true);
    let close = |got: &[f64], want: &[f64]| {
        assert!(
            got.iter().zip(want).all(|(g, w)| (g - w).abs() < 5e-7),
            "{got:?} against {want:?}"
        );
    };
    let v = [1.0, 1.0, 3.0, -1.0];
    let (h, _, _) = read(&[0.3, -2.0, 9.0, 9.0], 1, [1.0, 0.0]);
    assert_eq!(h, [0.3, -2.0]);
    let (h, alpha, dw) = read(&v, 2, [1.0, 0.0]);
    close(&alpha, &[0.415411, 0.584589]);
    close(&h, &[2.169178, -0.169178]);
    close(&dw, &[0.165931, -0.702896]);
    let (h, alpha, _) = read(&v, 2, [0.0, 0.0]);
    assert_eq!((h, alpha), (vec![2.0, 0.0], vec![0.5, 0.5]));
    let (h, alpha, dw) = read_keys(&v, 2, [1.0, 0.0], false);
    close(&alpha, &[0.119203, 0.880797]);
    close(&h, &[2.761594, -0.761594]);
    close(&dw, &[0.419974, -0.419974]);
}

#[test]
fn attention_with_awkward_sizes() {
    let d = AttentionDims {
        b: 2,
        t: 5,
        h: 3,
        dh: 4,
        scale: 0.5 / 2.0,
        alibi: false,
    };
    for alibi in [false, true] {
        let d = AttentionDims { alibi, ..d };
        attention_case(d, &[0; 10]);
        // Documents starting at 0, 2 and 3 in the first sequence, at 0 and 4 in the second.
        attention_case(d, &[0, 0, 2, 3, 3, 0, 0, 0, 0, 4]);
    }
}

/// Past the CPU twin's block of 64 query rows: blocks whose keys start at different documents.
#[test]
fn attention_across_query_blocks() {
    let d = AttentionDims {
        b: 1,
        t: 70,
        h: 2,
        dh: 3,
        scale: 0.4,
        alibi: true,
    };
    attention_case(d, &[0; 70]);
    let starts: Vec<u32> = (0..70)
        .map(|i| [0, 30, 66].into_iter().filter(|&s| s <= i).max().unwrap())
        .collect();
    attention_case(d, &starts);
}

/// Attention by its definition, one row at a time: (out, lse).
fn naive_attention(qkv: &[f64], starts: &[u32], d: AttentionDims) -> (Vec<f64>, Vec<f64>) {
    let c = d.h * d.dh;
    let at = |b: usize, t: usize, p: usize, h: usize| (b * d.t + t) * 3 * c + p * c + h * d.dh;
    let (mut out, mut lse) = (vec![0.0; d.b * d.t * c], vec![0.0; d.b * d.h * d.t]);
    for b in 0..d.b {
        for h in 0..d.h {
            for i in 0..d.t {
                let first = (starts[b * d.t + i] as usize).min(i);
                let logits: Vec<f64> = (first..=i)
                    .map(|j| {
                        let q = &qkv[at(b, i, 0, h)..at(b, i, 0, h) + d.dh];
                        let k = &qkv[at(b, j, 1, h)..at(b, j, 1, h) + d.dh];
                        d.scale as f64 * dot(q, k) - d.slope(h) * (i - j) as f64
                    })
                    .collect();
                let z: f64 = logits.iter().map(|l| l.exp()).sum();
                lse[(b * d.h + h) * d.t + i] = z.ln();
                for (l, j) in logits.iter().zip(first..) {
                    for x in 0..d.dh {
                        out[(b * d.t + i) * c + h * d.dh + x] += l.exp() / z * qkv[at(b, j, 2, h) + x];
                    }
                }
            }
        }
    }
    (out, lse)
}

fn attention_case(d: AttentionDims, starts: &[u32]) {
    let mut rng = SmallRng::seed_from_u64(5);
    let c = d.h * d.dh;
    let qkv = rand_vec(&mut rng, d.b * d.t * 3 * c, 1.0);
    let w = rand_vec(&mut rng, d.b * d.t * c, 1.0);
    let fwd = |qkv: &[f64]| {
        let (mut out, mut lse) = (vec![0.0; w.len()], vec![0.0; d.rows()]);
        attention::cpu_forward(&mut out, &mut lse, qkv, starts, d);
        dot(&out, &w)
    };
    let (mut out, mut lse) = (vec![0.0; w.len()], vec![0.0; d.rows()]);
    attention::cpu_forward(&mut out, &mut lse, &qkv, starts, d);
    let (mut dqkv, mut delta) = (vec![0.0; qkv.len()], vec![0.0; d.rows()]);
    attention::cpu_backward(&mut dqkv, &mut delta, &w, &out, &qkv, &lse, starts, d);
    // The larger step: a row's softmax sums up to T rounded exps in lanes, whose rounding a
    // step of 1e-6 would magnify past 1e-5 on the smallest gradients (3e-6 at T 70).
    check_step(
        &format!("attention({d:?}, starts {starts:?}).qkv"),
        &qkv,
        &dqkv,
        1e-5,
        fwd,
    );
    // The output and each row's log-sum-exp are those of the definition: a softmax over the
    // query's document up to itself.
    let (want_out, want_lse) = naive_attention(&qkv, starts, d);
    for (name, got, want) in [("out", &out, &want_out), ("lse", &lse, &want_lse)] {
        let worst = got.iter().zip(want).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
        assert!(worst < 1e-12, "attention {name} differs from the definition by {worst}");
    }
    // delta is dout·out per row.
    for (row, &dl) in delta.iter().enumerate() {
        let (b, h, i) = (row / (d.h * d.t), (row / d.t) % d.h, row % d.t);
        let at = (b * d.t + i) * c + h * d.dh;
        assert!((dl - dot(&w[at..at + d.dh], &out[at..at + d.dh])).abs() < 1e-12);
    }
}

#[test]
fn cross_entropy_with_z_loss_and_ignored_rows() {
    let mut rng = SmallRng::seed_from_u64(6);
    let d = CrossEntropyDims { rows: 4, v: 9, z: 1e-2 };
    let logits = rand_vec(&mut rng, 36, 3.0);
    let targets = [3, cross_entropy::IGNORE, 0, 8];
    let scale = 1.0 / 3.0;
    // The objective: scale · Σ_counted (CE + z·lse²)
    let objective = |l: &[f64]| {
        let (mut losses, mut lse) = (vec![0.0; 4], vec![0.0; 4]);
        cross_entropy::cpu_forward(&mut losses, &mut lse, l, &targets, scale, d);
        let z: f64 = (0..4)
            .filter(|&r| targets[r] != cross_entropy::IGNORE)
            .map(|r| lse[r] * lse[r])
            .sum();
        losses.iter().sum::<f64>() + scale * d.z as f64 * z
    };
    let (mut losses, mut lse) = (vec![0.0; 4], vec![0.0; 4]);
    cross_entropy::cpu_forward(&mut losses, &mut lse, &logits, &targets, scale, d);
    assert_eq!(losses[1], 0.0);
    let mut dl = vec![0.0; 36];
    cross_entropy::cpu_backward(&mut dl, &logits, &lse, &targets, scale, d);
    check("cross_entropy.logits", &logits, &dl, objective);
    // Uniform logits: CE = ln V exactly.
    let (mut l1, mut s1) = (vec![0.0f64], vec![0.0f64]);
    cross_entropy::cpu_forward(
        &mut l1,
        &mut s1,
        &[0.0; 9],
        &[2],
        1.0,
        CrossEntropyDims { rows: 1, v: 9, z: 1e-4 },
    );
    assert!((l1[0] - 9f64.ln()).abs() < 1e-12);
}

#[test]
fn gather_scatter_add() {
    let mut rng = SmallRng::seed_from_u64(8);
    let d = GatherDims { rows: 7, c: 5, v: 4 };
    // Row 2 of the table is never gathered: its gradient is 0.
    let index = [1u32, 3, 1, 0, 1, 3, 0];
    let table = rand_vec(&mut rng, 20, 1.0);
    let w = rand_vec(&mut rng, 35, 1.0);
    let fwd = |table: &[f64]| {
        let mut out = vec![0.0; 35];
        gather::cpu_forward(&mut out, &index, table, d);
        dot(&out, &w)
    };
    let buckets = TokenBuckets::new(&index, 4);
    let mut dtable = vec![9.0; 20];
    gather::cpu_backward(&mut dtable, &w, &buckets.rows, &buckets.start, d);
    assert!(dtable[10..15].iter().all(|&g| g == 0.0));
    check("gather.table", &table, &dtable, fwd);
}

#[test]
fn embedding_scatter_add() {
    let mut rng = SmallRng::seed_from_u64(7);
    let d = EmbeddingDims {
        bt: 6,
        t: 3,
        c: 5,
        v: 4,
    };
    let tokens = [1u32, 3, 1, 0, 1, 3];
    let wte = rand_vec(&mut rng, 20, 1.0);
    let wpe = rand_vec(&mut rng, 15, 1.0);
    let w = rand_vec(&mut rng, 30, 1.0);
    let fwd = |wte: &[f64], wpe: &[f64]| {
        let mut out = vec![0.0; 30];
        embedding::cpu_forward(&mut out, &tokens, wte, wpe, d);
        dot(&out, &w)
    };
    let buckets = TokenBuckets::new(&tokens, 4);
    assert_eq!(buckets.start, vec![0, 1, 4, 4, 6]);
    assert_eq!(buckets.rows, vec![3, 0, 2, 4, 1, 5]);
    let (mut dwte, mut dwpe) = (vec![9.0; 20], vec![9.0; 15]);
    embedding::cpu_backward_wte(&mut dwte, &w, &buckets.rows, &buckets.start, d);
    embedding::cpu_backward_wpe(&mut dwpe, &w, d);
    check("embedding.wte", &wte, &dwte, |x| fwd(x, &wpe));
    check("embedding.wpe", &wpe, &dwpe, |x| fwd(&wte, x));
}

/// out = a + b: its backward adds the incoming gradient into both inputs' (`add_assign`),
/// checked by finite differences of L = Σ w ⊙ (a + b).
#[test]
fn residual_add() {
    let mut rng = SmallRng::seed_from_u64(21);
    let (a, b, w) = (
        rand_vec(&mut rng, 7, 1.0),
        rand_vec(&mut rng, 7, 1.0),
        rand_vec(&mut rng, 7, 1.0),
    );
    let fwd = |a: &[f64], b: &[f64]| {
        let mut out = vec![0.0; a.len()];
        elementwise::cpu_add(&mut out, a, b);
        dot(&out, &w)
    };
    // Each input's gradient buffer already holds a value: the backward accumulates into it.
    let held = rand_vec(&mut rng, 7, 1.0);
    let (mut da, mut db) = (held.clone(), held.clone());
    elementwise::cpu_add_assign(&mut da, &w);
    elementwise::cpu_add_assign(&mut db, &w);
    let minus_held = |g: &[f64]| g.iter().zip(&held).map(|(g, h)| g - h).collect::<Vec<f64>>();
    check("residual_add.a", &a, &minus_held(&da), |x| fwd(x, &b));
    check("residual_add.b", &b, &minus_held(&db), |x| fwd(&a, x));
}

/// AdamW's update against the textbook one, written out for three values at step 2: decay on
/// the first only (decay_end 1), the learning rate boosted on the first two (boost_end 2), and
/// the gradient clipped to a global norm of 1.
#[test]
fn adamw_is_the_textbook_update() {
    use resmem_engine::ops::optim::{cpu_adamw, Hyper};
    use resmem_engine::AdamWDims;
    let h = Hyper {
        lr: 0.01,
        beta1: 0.9,
        beta2: 0.95,
        eps: 1e-8,
        weight_decay: 0.1,
        step: 2,
        max_grad_norm: 1.0,
        lr_boost: 3.0,
    };
    let hyper: Vec<f64> = h.to_array().iter().map(|&x| f64::from(x)).collect();
    let (p0, m0, v0, g) = ([0.5, -1.0, 2.0], [0.1, -0.2, 0.0], [0.01, 0.04, 0.0], [3.0, -4.0, 0.0]);
    let (mut p, mut m, mut v) = (p0.to_vec(), m0.to_vec(), v0.to_vec());
    let norm: f64 = 5.0; // √(3² + 4²): the gradient is scaled by 1/5
    cpu_adamw(
        &mut p,
        &mut m,
        &mut v,
        &g,
        &hyper,
        norm * norm,
        AdamWDims {
            n: 3,
            decay_end: 1,
            boost_end: 2,
        },
    );
    let (b1, b2) = (f64::from(h.beta1), f64::from(h.beta2));
    for i in 0..3 {
        let gi = g[i] / norm;
        let mi = b1 * m0[i] + (1.0 - b1) * gi;
        let vi = b2 * v0[i] + (1.0 - b2) * gi * gi;
        let (m_hat, v_hat) = (mi / (1.0 - b1.powi(2)), vi / (1.0 - b2.powi(2)));
        let lr = f64::from(h.lr) * if i < 2 { f64::from(h.lr_boost) } else { 1.0 };
        let decay = if i < 1 { f64::from(h.weight_decay) } else { 0.0 };
        let want = p0[i] - lr * (m_hat / (v_hat.sqrt() + f64::from(h.eps)) + decay * p0[i]);
        // Hyper::to_array computes the bias corrections in f32, whose rounding (1e-8 relative)
        // is all that may differ.
        assert!((p[i] - want).abs() < 1e-8, "value {i}: {} against {want}", p[i]);
        assert!(
            (m[i] - mi).abs() < 1e-15 && (v[i] - vi).abs() < 1e-15,
            "value {i}'s moments"
        );
    }
    // A value with no gradient and no moments stays where it is, but for its decay (none here).
    assert_eq!(p[2], 2.0);
}

/// Three AdamW steps from zero moments through the f32 CPU backend, as `models::optim::AdamW`
/// runs them (`sum` of squares, then `adamw`), against the textbook update in f64: value 0
/// decays and is boosted, value 1 is boosted, value 2 neither; the first step's gradient is
/// clipped, the others are not, and the learning rate changes every step.
#[test]
fn adamw_three_steps_on_the_cpu_backend() {
    use resmem_engine::cpu::CpuBackend;
    use resmem_engine::{AdamWDims, Backend, Hyper};
    let (beta1, beta2, eps, wd, max_norm, boost) = (0.9, 0.95, 1e-8, 0.1, 1.0, 3.0);
    let grads = [[3.0, -4.0, 0.5], [0.2, 0.1, -0.3], [-0.5, 0.6, 0.0]];
    let lrs = [0.01, 0.02, 0.015];
    let p0 = [0.5, -1.0, 2.0];

    let be = CpuBackend::<f32>::new();
    let tensor = |what: &str, values: &[f64]| {
        let t = be.zeros(what, values.len()).unwrap();
        be.write(&t, &values.iter().map(|&x| x as f32).collect::<Vec<_>>());
        t
    };
    let (p, m, v) = (tensor("p", &p0), tensor("m", &[0.0; 3]), tensor("v", &[0.0; 3]));
    let (g, hyper, sumsq) = (
        tensor("g", &[0.0; 3]),
        tensor("hyper", &[0.0; Hyper::LEN]),
        tensor("sumsq", &[0.0]),
    );
    let read = |t| pollster::block_on(be.read(t)).unwrap();
    let dims = AdamWDims {
        n: 3,
        decay_end: 1,
        boost_end: 2,
    };

    let (mut want_p, mut want_m, mut want_v) = (p0, [0.0f64; 3], [0.0f64; 3]);
    for (t, (grad, lr)) in (1..).zip(grads.iter().zip(lrs)) {
        let h = Hyper {
            lr: lr as f32,
            beta1: beta1 as f32,
            beta2: beta2 as f32,
            eps: eps as f32,
            weight_decay: wd as f32,
            step: t as u32,
            max_grad_norm: max_norm as f32,
            lr_boost: boost as f32,
        };
        be.write(&hyper, &h.to_array());
        be.write(&g, &grad.map(|x| x as f32));
        be.sum(&sumsq, &g, true);
        be.adamw(&p, &m, &v, &g, &hyper, &sumsq, dims);

        let norm = grad.iter().map(|x| x * x).sum::<f64>().sqrt();
        assert_eq!(norm > max_norm, t == 1, "step {t} clips only the first gradient");
        let scale = if norm > max_norm { max_norm / norm } else { 1.0 };
        for i in 0..3 {
            let gi = grad[i] * scale;
            want_m[i] = beta1 * want_m[i] + (1.0 - beta1) * gi;
            want_v[i] = beta2 * want_v[i] + (1.0 - beta2) * gi * gi;
            let m_hat = want_m[i] / (1.0 - beta1.powi(t));
            let v_hat = want_v[i] / (1.0 - beta2.powi(t));
            let lr_i = if i < 2 { lr * boost } else { lr };
            let wd_i = if i < 1 { wd } else { 0.0 };
            want_p[i] -= lr_i * (m_hat / (v_hat.sqrt() + eps) + wd_i * want_p[i]);
        }
        for (name, t_, want) in [("p", &p, want_p), ("m", &m, want_m), ("v", &v, want_v)] {
            let got = read(t_);
            for i in 0..3 {
                let err = (f64::from(got[i]) - want[i]).abs();
                assert!(err < 1e-6, "step {t} {name}[{i}]: {} against {}", got[i], want[i]);
            }
        }
    }
    // Value 2's last gradient is 0, yet it still moves: by its first moment, not by decay.
    assert!((want_p[2] - p0[2]).abs() > 1e-3);
}

/// Storage and the normed retrieval against their backward ops, on a shape with both full
/// register blocks and tails (4-row blocks of 6 keys, 16-column blocks of D_v 19) and two
/// chunks of the key gradient.
#[test]
fn residual_matrix_storage_and_normed_retrieval() {
    let mut rng = SmallRng::seed_from_u64(8);
    let d = ResidualDims {
        tokens: 37,
        dk: 5,
        dv: 19,
        keys: 6,
    };
    let x = rand_vec(&mut rng, d.matrices(), 1.0);
    let keys = rand_vec(&mut rng, d.key_values(), 1.0);
    let data = rand_vec(&mut rng, d.vectors(), 1.0);

    // Each loss is taken against the unperturbed output, Σ w ⊙ (out − out₀): a perturbation of
    // one token's input moves only that token's terms, so the loss's rounding over thousands of
    // values does not swamp a small gradient.
    let against = |out: &[f64], out0: &[f64], w: &[f64]| -> f64 {
        out.iter().zip(out0).zip(w).map(|((o, o0), w)| (o - o0) * w).sum()
    };

    // Storage with the residual add fused: L = Σ wx ⊙ (base + store(keys, data))
    let wx = rand_vec(&mut rng, d.matrices(), 1.0);
    let base = rand_vec(&mut rng, d.matrices(), 1.0);
    let stored = |base: &[f64], keys: &[f64], data: &[f64]| {
        let mut out = vec![0.0; d.matrices()];
        residual_matrix::cpu_store(&mut out, Some(base), keys, data, d);
        out
    };
    let out0 = stored(&base, &keys, &data);
    let store = |base: &[f64], keys: &[f64], data: &[f64]| against(&stored(base, keys, data), &out0, &wx);
    let (mut ddata, mut dkeys) = (vec![0.0; d.vectors()], vec![0.0; d.key_values()]);
    residual_matrix::cpu_store_backward(&mut ddata, &mut dkeys, &wx, &keys, &data, d);
    check("store.base", &base, &wx, |b| store(b, &keys, &data));
    check("store.data", &data, &ddata, |v| store(&base, &keys, v));
    check("store.keys", &keys, &dkeys, |k| store(&base, k, &data));

    // Retrieval from the norm: L = Σ wy ⊙ retrieve_normed(x, gain, keys)
    let wy = rand_vec(&mut rng, d.vectors(), 1.0);
    let gain: Vec<f64> = rand_vec(&mut rng, d.dk * d.dv, 0.5).iter().map(|g| 1.0 + g).collect();
    for kind in [NormKind::LayerNorm, NormKind::RmsNorm] {
        let nd = NormDims {
            rows: d.tokens,
            c: d.dk * d.dv,
            kind,
            eps: 1e-5,
        };
        let retrieve = |x: &[f64], gain: &[f64], keys: &[f64], stats: &mut [f64]| {
            let mut y = vec![0.0; d.vectors()];
            residual_matrix::cpu_retrieve_normed(&mut y, stats, x, gain, keys, d, nd);
            y
        };
        let mut stats = vec![0.0; 2 * d.tokens];
        let y0 = retrieve(&x, &gain, &keys, &mut stats);
        let loss = |x: &[f64], gain: &[f64], keys: &[f64]| {
            against(&retrieve(x, gain, keys, &mut vec![0.0; 2 * d.tokens]), &y0, &wy)
        };
        // dx accumulates: start it at 0.25 and take that off again.
        let (mut dx, mut dgain, mut dkeys) = (vec![0.25; d.matrices()], vec![0.0; gain.len()], vec![0.0; keys.len()]);
        residual_matrix::cpu_retrieve_normed_backward(
            &mut dx, &mut dgain, &mut dkeys, &wy, &x, &stats, &gain, &keys, d, nd,
        );
        dx.iter_mut().for_each(|v| *v -= 0.25);
        check_step(&format!("retrieve_normed.x ({kind:?})"), &x, &dx, 1e-5, |x| {
            loss(x, &gain, &keys)
        });
        check(&format!("retrieve_normed.gain ({kind:?})"), &gain, &dgain, |g| {
            loss(&x, g, &keys)
        });
        check(&format!("retrieve_normed.keys ({kind:?})"), &keys, &dkeys, |k| {
            loss(&x, &gain, k)
        });
    }
}

/// Inputs at least `margin` away from 0, so that ±h never flips a sign bit of the hash.
fn away_from_zero(rng: &mut SmallRng, n: usize, margin: f64) -> Vec<f64> {
    (0..n)
        .map(|_| {
            let v: f64 = rng.random_range(margin..1.5);
            if rng.random_bool(0.5) {
                v
            } else {
                -v
            }
        })
        .collect()
}

/// The memory layer: the table gradient exactly (each bucket's rows summed by definition), the
/// input gradient by finite differences away from the sign boundaries (the hash is piecewise
/// constant there), the bias gradient; with and without the ‖z‖₁ factor, and with input values
/// past K·τ that are not hashed.
#[test]
fn memory_layer() {
    let mut rng = SmallRng::seed_from_u64(9);
    for l1 in [false, true] {
        let d = MemoryDims {
            tokens: 23,
            d_in: 11,
            tau: 4,
            k: 2,
            d_out: 5,
            temperature: 0.7,
            l1,
        };
        let x = away_from_zero(&mut rng, d.tokens * d.d_in, 0.05);
        let tables = rand_vec(&mut rng, d.table_values(), 1.0);
        let bias = rand_vec(&mut rng, d.d_out, 1.0);
        let w = rand_vec(&mut rng, d.tokens * d.d_out, 1.0);
        let forward = |x: &[f64], tables: &[f64], bias: &[f64]| {
            let (mut codes, mut p) = (vec![0; d.tokens * d.k], vec![0.0; d.tokens * d.k]);
            memory::cpu_hash(&mut codes, &mut p, x, d);
            let mut y = vec![0.0; d.tokens * d.d_out];
            memory::cpu_forward(&mut y, &codes, &p, tables, bias, d);
            (codes, p, y)
        };
        let (codes, p, _) = forward(&x, &tables, &bias);
        let (mut rows, mut starts) = (vec![0; d.k * d.tokens], vec![0; d.starts_len()]);
        memory::cpu_bucket(&mut rows, &mut starts, &codes, d);
        let (mut dx, mut dt, mut db) = (vec![0.0; x.len()], vec![0.0; tables.len()], vec![0.0; d.d_out]);
        memory::cpu_backward(
            &mut dx, &mut dt, &mut db, &w, &x, &codes, &p, &rows, &starts, &tables, d,
        );

        // dT_k[c] = Σ_{t: code_tk = c} p_tk · dy_t, straight from the definition.
        let nb = d.buckets();
        let mut want = vec![0.0; tables.len()];
        for t in 0..d.tokens {
            for k in 0..d.k {
                let c = codes[t * d.k + k] as usize;
                for o in 0..d.d_out {
                    want[(k * nb + c) * d.d_out + o] += p[t * d.k + k] * w[t * d.d_out + o];
                }
            }
        }
        let worst = dt.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
        assert!(worst < 1e-12, "table gradient off by {worst}");
        let hit = want.iter().filter(|v| **v != 0.0).count();
        assert!(hit < want.len(), "some buckets should be empty, to check they get 0");
        let loss = |x: &[f64], t: &[f64], b: &[f64]| dot(&forward(x, t, b).2, &w);
        check(&format!("memory(l1 {l1}).x"), &x, &dx, |x| loss(x, &tables, &bias));
        check(&format!("memory(l1 {l1}).bias"), &bias, &db, |b| loss(&x, &tables, b));
        check(&format!("memory(l1 {l1}).tables"), &tables, &dt, |t| loss(&x, t, &bias));
        assert!(dx.chunks(d.d_in).all(|r| r[d.k * d.tau..].iter().all(|v| *v == 0.0)));
    }
}

/// Hyper-connections' gates: the gradients of the logits, the three scales and the bias, through
/// the sigmoids and Sinkhorn's unrolled normalisations or mHC-lite's permutation mixture, and
/// through HC's tanh gates.
#[test]
fn hyper_connection_gates() {
    use resmem_engine::ops::hyper;
    use resmem_engine::{HyperDims, Mixing};
    let mut rng = SmallRng::seed_from_u64(17);
    for (n, mixing) in [
        (1, Mixing::Sinkhorn { iters: 20 }),
        (3, Mixing::Sinkhorn { iters: 1 }),
        (3, Mixing::Sinkhorn { iters: 4 }),
        (4, Mixing::Sinkhorn { iters: 20 }),
        (3, Mixing::Permutations),
        (4, Mixing::Permutations),
        (1, Mixing::Tanh),
        (3, Mixing::Tanh),
        (4, Mixing::Head),
    ] {
        let d = HyperDims { tokens: 3, n, mixing };
        let w = d.width();
        let logits = rand_vec(&mut rng, d.tokens * w, 1.5);
        let scales = d.scales();
        let alpha: Vec<f64> = (0..scales).map(|_| rng.random_range(0.5..1.5)).collect();
        let bias = rand_vec(&mut rng, w, 1.0);
        let (wpre, wpost, wmix) = (
            rand_vec(&mut rng, d.tokens * n, 1.0),
            rand_vec(&mut rng, d.tokens * n, 1.0),
            rand_vec(&mut rng, d.tokens * n * n, 1.0),
        );
        let loss = |logits: &[f64], alpha: &[f64], bias: &[f64]| {
            let (mut pre, mut post, mut mix) = (
                vec![0.0; d.tokens * n],
                vec![0.0; d.tokens * n],
                vec![0.0; d.tokens * n * n],
            );
            hyper::cpu_forward(&mut pre, &mut post, &mut mix, logits, alpha, bias, d);
            dot(&pre, &wpre) + dot(&post, &wpost) + dot(&mix, &wmix)
        };
        let (mut dm, mut dz, mut dalpha) = (
            vec![0.0; d.tokens * w],
            vec![0.0; d.tokens * w],
            vec![0.0; d.tokens * scales],
        );
        hyper::cpu_backward(
            &mut dm,
            &mut dz,
            &mut dalpha,
            &wpre,
            &wpost,
            &wmix,
            &logits,
            &alpha,
            &bias,
            d,
        );
        // The bias's and the scales' gradients are the column sums over tokens.
        let dbias: Vec<f64> = (0..w).map(|i| (0..d.tokens).map(|t| dz[t * w + i]).sum()).collect();
        let dscale: Vec<f64> = (0..scales)
            .map(|s| (0..d.tokens).map(|t| dalpha[t * scales + s]).sum())
            .collect();
        let name = format!("hyper n {n} {mixing:?}");
        // A larger step: some of mHC-lite's 24 mixture weights are tiny, and so are their gradients.
        check_step(&format!("{name} logits"), &logits, &dm, 1e-5, |x| {
            loss(x, &alpha, &bias)
        });
        check_step(&format!("{name} alpha"), &alpha, &dscale, 1e-5, |x| {
            loss(&logits, x, &bias)
        });
        check_step(&format!("{name} bias"), &bias, &dbias, 1e-5, |x| {
            loss(&logits, &alpha, x)
        });
    }
}
