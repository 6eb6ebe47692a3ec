//! Every op on the wgpu backend against the CPU reference, on random inputs whose shapes are not
//! multiples of any workgroup size. Needs a GPU adapter (lavapipe on CI) and fails without one.

use rand::{rngs::SmallRng, Rng, SeedableRng};
use resmem_engine::cpu::CpuBackend;
use resmem_engine::gpu::{Candidate, Choice, GpuBackend, GpuOptions};
use resmem_engine::ops::memory::sort_tiles;
use resmem_engine::selftest::{self, cases, documents, random as rand_vec};
use resmem_engine::*;

fn gpu() -> GpuBackend {
    gpu_with(GpuOptions::default())
}

fn gpu_with(options: GpuOptions) -> GpuBackend {
    std::env::set_var("XDG_RUNTIME_DIR", std::env::temp_dir());
    pollster::block_on(GpuBackend::with_options(options))
        .expect("these tests need a GPU adapter; on Debian install mesa-vulkan-drivers")
}

/// 1-D launches fold past 3 workgroups a dimension, so every op's small test shapes fold.
const FOLDED: GpuOptions = GpuOptions {
    max_binding_bytes: None,
    max_groups_per_dim: Some(3),
    ..GpuOptions::DEFAULT
};

fn assert_same_bits(name: &str, got: &[Vec<f32>], want: &[Vec<f32>]) {
    let bits = |v: &[Vec<f32>]| {
        v.iter()
            .map(|o| o.iter().map(|x| x.to_bits()).collect::<Vec<_>>())
            .collect::<Vec<_>>()
    };
    assert!(bits(got) == bits(want), "{name}: the outputs are not the same bits");
}

/// The selftest's cases (`resmem_engine::selftest::cases`), run to completion.
fn block<T>(f: impl std::future::Future<Output = resmem_engine::Result<T>>) -> T {
    pollster::block_on(f).unwrap()
}

fn upload<B: Backend>(be: &B, data: &[f32]) -> B::Tensor {
    cases::upload(be, data).unwrap()
}

fn upload_index<B: Backend>(be: &B, data: &[u32]) -> B::Index {
    cases::upload_index(be, data).unwrap()
}

fn read<B: Backend>(be: &B, t: &B::Tensor) -> Vec<f32> {
    block(cases::read(be, &[t])).remove(0)
}

fn matmul_case<B: Backend>(be: &B, a: &[f32], b: &[f32], init: &[f32], d: MatmulDims) -> Vec<Vec<f32>> {
    block(cases::matmul(be, a, b, init, d))
}

fn elementwise_case<B: Backend>(be: &B, a: &[f32], b: &[f32]) -> Vec<Vec<f32>> {
    block(cases::elementwise(be, a, b))
}

fn embedding_case<B: Backend>(
    be: &B,
    tokens: &[u32],
    wte: &[f32],
    wpe: &[f32],
    dout: &[f32],
    d: EmbeddingDims,
) -> Vec<Vec<f32>> {
    block(cases::embedding(be, tokens, wte, wpe, dout, d))
}

fn gather_case<B: Backend>(be: &B, index: &[u32], table: &[f32], dout: &[f32], d: GatherDims) -> Vec<Vec<f32>> {
    block(cases::gather(be, index, table, dout, d))
}

fn norm_case<B: Backend>(be: &B, x: &[f32], gain: &[f32], dout: &[f32], dx0: &[f32], d: NormDims) -> Vec<Vec<f32>> {
    block(cases::norm(be, x, gain, dout, dx0, d))
}

#[allow(clippy::too_many_arguments)]
fn hyper_case<B: Backend>(
    be: &B,
    logits: &[f32],
    alpha: &[f32],
    bias: &[f32],
    dpre: &[f32],
    dpost: &[f32],
    dmix: &[f32],
    d: HyperDims,
) -> Vec<Vec<f32>> {
    block(cases::hyper(be, logits, alpha, bias, dpre, dpost, dmix, d))
}

fn depth_case<B: Backend>(be: &B, x: &[f32], query: &[f32], dh: &[f32], dx0: &[f32], d: DepthDims) -> Vec<Vec<f32>> {
    block(cases::depth(be, x, query, dh, dx0, d))
}

fn attention_case<B: Backend>(be: &B, qkv: &[f32], dout: &[f32], starts: &[u32], d: AttentionDims) -> Vec<Vec<f32>> {
    block(cases::attention(be, qkv, dout, starts, d))
}

fn cross_entropy_case<B: Backend>(be: &B, logits: &[f32], targets: &[u32], d: CrossEntropyDims) -> Vec<Vec<f32>> {
    block(cases::cross_entropy(be, logits, targets, d))
}

fn optim_case<B: Backend>(
    be: &B,
    p: &[f32],
    g: &[f32],
    m: &[f32],
    v: &[f32],
    hyper: Hyper,
    d: AdamWDims,
) -> Vec<Vec<f32>> {
    block(cases::adamw(be, p, g, m, v, hyper, d))
}

/// The residual-matrix case, with what the fused forms promise checked on this backend: the
/// normed retrieval's statistics equal to `norm_forward`'s, and its y and key gradient within
/// rounding of the same products over Norm(X) written out here, in f64.
fn residual_matrix_case<B: Backend>(
    be: &B,
    x: &[f32],
    keys: &[f32],
    data: &[f32],
    base: &[f32],
    d: ResidualDims,
) -> Vec<Vec<f32>> {
    let outputs = block(cases::residual_matrix(be, x, keys, data, base, d));
    let (m, dv) = (d.dk * d.dv, d.dv);
    for kind in outputs[4..].chunks(6) {
        let [y, stats, forward_stats, _dx, _dgain, dkeys] = kind else {
            unreachable!()
        };
        assert_eq!(
            stats, forward_stats,
            "retrieve_normed's and norm_forward's stats differ"
        );
        let gain = |e: usize| 0.5 + (e % 7) as f64 * 0.25; // as `cases::residual_matrix` sets it
        let normed =
            |t: usize, e: usize| (x[t * m + e] as f64 - stats[2 * t] as f64) * stats[2 * t + 1] as f64 * gain(e);
        let close = |got: f32, want: f64| (got as f64 - want).abs() <= 1e-4 * (1.0 + want.abs());
        for t in 0..d.tokens {
            for h in 0..d.keys {
                for v in 0..dv {
                    let want: f64 = (0..d.dk)
                        .map(|k| keys[h * d.dk + k] as f64 * normed(t, k * dv + v))
                        .sum();
                    assert!(close(y[(t * d.keys + h) * dv + v], want), "y[{t}, {h}, {v}] of {d:?}");
                }
            }
        }
        for h in 0..d.keys {
            for k in 0..d.dk {
                let want: f64 = (0..d.tokens)
                    .flat_map(|t| (0..dv).map(move |v| (t, v)))
                    .map(|(t, v)| data[(t * d.keys + h) * dv + v] as f64 * normed(t, k * dv + v))
                    .sum();
                assert!(close(dkeys[h * d.dk + k], want), "dkeys[{h}, {k}] of {d:?}");
            }
        }
    }
    outputs
}

fn memory_case<B: Backend>(
    be: &B,
    x: &[f32],
    tables: &[f32],
    bias: &[f32],
    dy: &[f32],
    d: MemoryDims,
) -> cases::MemoryOutputs {
    block(cases::memory(be, x, tables, bias, dy, d))
}

/// Compares every output of a case, relative to the largest magnitude of the CPU output.
fn assert_close(name: &str, gpu: &[Vec<f32>], cpu: &[Vec<f32>], tol: f32) {
    assert_eq!(gpu.len(), cpu.len());
    for (i, (g, c)) in gpu.iter().zip(cpu).enumerate() {
        assert_eq!(g.len(), c.len(), "{name} output {i}: lengths differ");
        let scale = c.iter().fold(0f32, |m, x| m.max(x.abs())).max(1e-6);
        let worst = g.iter().zip(c).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
        eprintln!(
            "{name} output {i}: {} values, max |gpu - cpu| = {worst:.3e} (scale {scale:.3e})",
            c.len()
        );
        assert!(
            g.iter().all(|x| x.is_finite()),
            "{name} output {i}: non-finite values on the GPU"
        );
        assert!(
            worst <= tol * scale,
            "{name} output {i}: max difference {worst} exceeds {tol} × {scale}"
        );
    }
}

macro_rules! both {
    ($name:expr, $tol:expr, $f:ident ( $($arg:expr),* )) => {{
        let g = $f(&gpu(), $($arg),*);
        let c = $f(&CpuBackend::<f32>::new(), $($arg),*);
        assert_close($name, &g, &c, $tol);
        // Folding a launch moves no value from its thread: the same bits.
        assert_same_bits($name, &$f(&gpu_with(FOLDED), $($arg),*), &g);
    }};
}

/// The plain kernels, as browsers run them, on an adapter that may have subgroups.
const PLAIN: GpuOptions = GpuOptions {
    no_subgroups: true,
    ..GpuOptions::DEFAULT
};

/// Says which matmul paths a test compared, so that a log shows it.
fn matmul_paths(gpu: &GpuBackend) -> &'static str {
    match gpu.subgroups() {
        true => "the subgroup path against the plain path",
        false => "the plain path only: this adapter has no subgroups",
    }
}

/// One backend with `options` per matmul tile that fits it but its default, each forced to use
/// that tile: tuning may pick any of them, so each must give the default's bits.
fn other_tiles(options: GpuOptions) -> Vec<(String, GpuBackend)> {
    let probe = gpu_with(options);
    let fitting: Vec<usize> = (0..ops::matmul::TILES.len())
        .filter(|&i| ops::matmul::TILES[i].fits(&probe))
        .collect();
    assert!(fitting.len() >= 4, "every adapter fits the four tiles of its path");
    (fitting[1..].iter())
        .map(|&i| {
            let be = gpu_with(options);
            be.force_candidate("matmul", i);
            (ops::matmul::TILES[i].name(), be)
        })
        .collect()
}

/// Every transpose with and without accumulation, on shapes from one value to several tiles,
/// odd ones (scalar reads) and multiples of 4 (vec4 reads), single, batched and with either
/// operand broadcast over the batch: within a tolerance of the CPU, and the same bits on the
/// subgroup path, the plain path, a folded grid and every tile tuning may choose.
#[test]
fn matmul_every_layout() {
    let (sub, plain, folded, cpu) = (gpu(), gpu_with(PLAIN), gpu_with(FOLDED), CpuBackend::<f32>::new());
    assert!(!plain.subgroups());
    eprintln!("matmul_every_layout: {}", matmul_paths(&sub));
    let tiles: Vec<_> = other_tiles(GpuOptions::default())
        .into_iter()
        .chain(other_tiles(PLAIN))
        .collect();
    let mut rng = SmallRng::seed_from_u64(10);
    let mut cases = Vec::new();
    for (m, n, k) in [(1, 1, 1), (67, 45, 93), (257, 129, 65), (100, 68, 36)] {
        for (ta, tb, acc) in (0..8).map(|i| (i & 1 != 0, i & 2 != 0, i & 4 != 0)) {
            cases.push((MatmulDims::new(m, n, k), ta, tb, acc));
        }
    }
    for (batch, (m, n, k)) in [(3, (67, 45, 93)), (3, (100, 68, 36))] {
        for (ba, bb) in [(false, false), (true, false), (false, true)] {
            for (ta, tb) in [(false, false), (false, true), (true, false), (true, true)] {
                cases.push((MatmulDims::new(m, n, k).batched(batch, ba, bb), ta, tb, ta != tb));
            }
        }
    }
    for (mut d, ta, tb, acc) in cases {
        (d.trans_a, d.trans_b, d.accumulate) = (ta, tb, acc);
        let a = rand_vec(&mut rng, (d.batch - 1) * d.stride_a + d.m * d.k, 1.0);
        let b = rand_vec(&mut rng, (d.batch - 1) * d.stride_b + d.k * d.n, 1.0);
        let init = rand_vec(&mut rng, d.batch * d.m * d.n, 1.0);
        let name = format!(
            "matmul {}×{}×{} (batch {}, strides {} {}, ta={ta}, tb={tb}, acc={acc})",
            d.m, d.n, d.k, d.batch, d.stride_a, d.stride_b
        );
        let want = matmul_case(&sub, &a, &b, &init, d);
        assert_close(&name, &want, &matmul_case(&cpu, &a, &b, &init, d), 1e-5);
        assert_same_bits(&format!("plain {name}"), &matmul_case(&plain, &a, &b, &init, d), &want);
        assert_same_bits(
            &format!("folded {name}"),
            &matmul_case(&folded, &a, &b, &init, d),
            &want,
        );
        for (tile, be) in &tiles {
            assert_same_bits(
                &format!("tile {tile} {name}"),
                &matmul_case(be, &a, &b, &init, d),
                &want,
            );
        }
    }
}

/// With tuning on, the first launch of a shape measures every tile that fits and keeps one; later
/// launches of the shape, and shapes whose choice was loaded, measure nothing; the product's bits
/// are the untuned backend's.
#[test]
fn tuning_measures_each_shape_once_and_keeps_the_bits() {
    use std::{cell::RefCell, rc::Rc};
    let tuned = gpu_with(GpuOptions {
        tune: true,
        ..GpuOptions::DEFAULT
    });
    assert!(tuned.tuning());
    let heard: Rc<RefCell<Vec<Choice>>> = Rc::default();
    let sink = heard.clone();
    tuned.on_tuned(move |c| sink.borrow_mut().push(c.clone()));
    let mut rng = SmallRng::seed_from_u64(11);
    let d = MatmulDims::new(150, 70, 90);
    let (a, b, init) = (
        rand_vec(&mut rng, 150 * 90, 1.0),
        rand_vec(&mut rng, 90 * 70, 1.0),
        vec![0.0; 150 * 70],
    );
    let want = matmul_case(&gpu(), &a, &b, &init, d);
    assert_same_bits("tuned matmul", &matmul_case(&tuned, &a, &b, &init, d), &want);
    assert_same_bits("tuned matmul again", &matmul_case(&tuned, &a, &b, &init, d), &want);
    let fitting: Vec<String> = (ops::matmul::TILES.iter())
        .filter(|t| t.fits(&tuned))
        .map(|t| t.name())
        .collect();
    {
        let heard = heard.borrow();
        assert_eq!(heard.len(), 1, "one shape, measured once: {heard:?}");
        let choice = &heard[0];
        assert_eq!(choice.class, "matmul 150×70×90 batch 1 a·b");
        let measured: Vec<&String> = choice.timings.iter().map(|(n, _)| n).collect();
        assert_eq!(
            measured,
            fitting.iter().collect::<Vec<_>>(),
            "every fitting tile, the default first"
        );
        assert!(
            choice.timings.iter().all(|(_, s)| s.is_finite() && *s > 0.0),
            "{choice:?}"
        );
        assert!(fitting.contains(&choice.chosen));
        assert_eq!(tuned.choices(), vec![(choice.class.clone(), choice.chosen.clone())]);
    }
    // A choice from a cache is used as it is.
    let d2 = MatmulDims::new(33, 65, 17);
    tuned.load_choices([(
        "matmul 33×65×17 batch 1 a·b".to_string(),
        fitting[fitting.len() - 1].clone(),
    )]);
    let (a, b, init) = (
        rand_vec(&mut rng, 33 * 17, 1.0),
        rand_vec(&mut rng, 17 * 65, 1.0),
        vec![0.0; 33 * 65],
    );
    let want = matmul_case(&gpu(), &a, &b, &init, d2);
    assert_same_bits("loaded choice", &matmul_case(&tuned, &a, &b, &init, d2), &want);
    assert_eq!(heard.borrow().len(), 1, "a loaded choice is not measured again");
    // Off by default: nothing is measured.
    assert!(!gpu().tuning());
}

#[test]
fn elementwise_ops() {
    let mut rng = SmallRng::seed_from_u64(11);
    let (a, b) = (rand_vec(&mut rng, 1000, 4.0), rand_vec(&mut rng, 1000, 1.0));
    both!(
        "add, add_assign, gelu, gelu_backward, fill, replace",
        1e-5,
        elementwise_case(&a, &b)
    );
}

#[test]
fn embedding_forward_and_backward() {
    let mut rng = SmallRng::seed_from_u64(12);
    let d = EmbeddingDims {
        bt: 3 * 13,
        t: 13,
        c: 19,
        v: 29,
    };
    let tokens: Vec<u32> = (0..d.bt).map(|_| rng.random_range(0..7) * 4).collect();
    let (wte, wpe, dout) = (
        rand_vec(&mut rng, d.v * d.c, 1.0),
        rand_vec(&mut rng, d.t * d.c, 1.0),
        rand_vec(&mut rng, d.bt * d.c, 1.0),
    );
    both!("embedding", 1e-5, embedding_case(&tokens, &wte, &wpe, &dout, d));
}

#[test]
fn gather_forward_and_backward() {
    let mut rng = SmallRng::seed_from_u64(13);
    // Rows and widths that are not multiples of the workgroup size; every fourth table row
    // gathered, some many times, the rest never; one gather of a single row.
    for d in [
        GatherDims { rows: 41, c: 19, v: 29 },
        GatherDims { rows: 300, c: 3, v: 7 },
        GatherDims { rows: 1, c: 67, v: 2 },
    ] {
        let index: Vec<u32> = (0..d.rows)
            .map(|_| rng.random_range(0..d.v.div_ceil(4) as u32) * 4)
            .collect();
        let (table, dout) = (
            rand_vec(&mut rng, d.v * d.c, 1.0),
            rand_vec(&mut rng, d.rows * d.c, 1.0),
        );
        both!("gather", 1e-5, gather_case(&index, &table, &dout, d));
    }
}

/// The gather is the embedding without its position term: with a zero position table, the same
/// rows and the same token gradient, bit for bit, on both backends.
#[test]
fn gather_is_the_embedding_without_positions() {
    fn case<B: Backend>(be: &B) {
        let mut rng = SmallRng::seed_from_u64(14);
        let d = EmbeddingDims {
            bt: 3 * 13,
            t: 13,
            c: 19,
            v: 29,
        };
        let tokens: Vec<u32> = (0..d.bt).map(|_| rng.random_range(0..7) * 4).collect();
        let (wte, dout) = (rand_vec(&mut rng, d.v * d.c, 1.0), rand_vec(&mut rng, d.bt * d.c, 1.0));
        let zeros = vec![0.0; d.t * d.c];
        let embedding = embedding_case(be, &tokens, &wte, &zeros, &dout, d);
        let g = GatherDims {
            rows: d.bt,
            c: d.c,
            v: d.v,
        };
        let gather = gather_case(be, &tokens, &wte, &dout, g);
        assert_same_bits("gather against embedding", &gather, &embedding[..2]);
    }
    case(&gpu());
    case(&CpuBackend::<f32>::new());
}

#[test]
fn layernorm_and_rmsnorm() {
    let mut rng = SmallRng::seed_from_u64(13);
    // C = 300 spans more than one 256-thread workgroup pass; C = 7 leaves most threads idle;
    // 150 rows make the gain gradient's lanes take two passes of four rows and a ragged tail.
    for (rows, c) in [(37, 300), (5, 7), (150, 33)] {
        for kind in [NormKind::LayerNorm, NormKind::RmsNorm] {
            let d = NormDims {
                rows,
                c,
                kind,
                eps: 1e-5,
            };
            let [x, gain, dout, dx0] = cases::norm_inputs(&mut rng, rows, c);
            both!(
                &format!("{kind:?} rows={rows} c={c}"),
                2e-5,
                norm_case(&x, &gain, &dout, &dx0, d)
            );
        }
    }
}

/// Hyper-connections' gates on token counts that leave a workgroup part-empty and fold: Sinkhorn
/// at 1, 3, 4 and 8 streams (1 and 20 rounds: at 8 streams and 20 rounds a backward that
/// recomputed each step from Z came back zero on lavapipe), mHC-lite's permutations at 3 and 4,
/// HC's tanh gates at 3 and 8 (with logits large enough to saturate), the head's collapse at 4.
#[test]
fn hyper_connection_gates() {
    let mut rng = SmallRng::seed_from_u64(21);
    for (tokens, n, mixing) in [
        (37, 1, Mixing::Sinkhorn { iters: 20 }),
        (300, 3, Mixing::Sinkhorn { iters: 1 }),
        (5, 4, Mixing::Sinkhorn { iters: 20 }),
        (5, 8, Mixing::Sinkhorn { iters: 20 }),
        (37, 3, Mixing::Permutations),
        (300, 4, Mixing::Permutations),
        (37, 3, Mixing::Tanh),
        (300, 8, Mixing::Tanh),
        (37, 4, Mixing::Head),
    ] {
        let d = HyperDims { tokens, n, mixing };
        // Tanh's logits reach 60, where exp(2z) overflows f32 and tanh must still give ±1.
        let scale = if mixing == Mixing::Tanh { 60.0 } else { 1.5 };
        let logits = rand_vec(&mut rng, tokens * d.width(), scale);
        let alpha = &[0.7, 1.1, 0.9][..d.scales()];
        let bias = rand_vec(&mut rng, d.width(), 1.0);
        let dpre = rand_vec(&mut rng, tokens * n, 1.0);
        let dpost = rand_vec(&mut rng, tokens * n, 1.0);
        let dmix = rand_vec(&mut rng, tokens * n * n, 1.0);
        both!(
            &format!("hyper {tokens} tokens n {n} {mixing:?}"),
            2e-5,
            hyper_case(&logits, alpha, &bias, &dpre, &dpost, &dmix, d)
        );
    }
}

/// Attention over depth: one source (α = 1), a read of fewer sources than rows, widths below,
/// at and past a workgroup, token counts that leave the column pass part-empty, and logits large
/// enough that the softmax is nearly one-hot; raw keys (the Table 4 ablation) at two of them.
#[test]
fn depth_attention() {
    let mut rng = SmallRng::seed_from_u64(22);
    for (tokens, rows, sources, width, scale, normed_keys) in [
        (5, 1, 1, 7, 1.0, true),
        (37, 5, 4, 64, 0.3, true),
        (300, 9, 9, 133, 0.3, true),
        (13, 17, 6, 200, 3.0, true),
        (37, 5, 4, 64, 0.3, false),
        (13, 17, 6, 200, 0.3, false),
    ] {
        let d = DepthDims {
            tokens,
            rows,
            sources,
            width,
            eps: 1e-8,
            normed_keys,
        };
        let x = rand_vec(&mut rng, tokens * rows * width, 2.0);
        let mut query = rand_vec(&mut rng, width, scale);
        query.extend(rand_vec(&mut rng, width, 1.0));
        let (dh, dx0) = (
            rand_vec(&mut rng, tokens * width, 1.0),
            rand_vec(&mut rng, x.len(), 1.0),
        );
        both!(
            &format!("depth {tokens} tokens, {sources} of {rows} rows of {width}, normed keys {normed_keys}"),
            2e-5,
            depth_case(&x, &query, &dh, &dx0, d)
        );
    }
}

#[test]
fn causal_attention() {
    let mut rng = SmallRng::seed_from_u64(14);
    for alibi in [false, true] {
        let d = AttentionDims {
            b: 2,
            t: 19,
            h: 3,
            dh: 5,
            scale: 1.0 / 5f32.sqrt() / 2.0,
            alibi,
        };
        let qkv = rand_vec(&mut rng, d.b * d.t * 3 * d.h * d.dh, 2.0);
        let dout = rand_vec(&mut rng, d.b * d.t * d.h * d.dh, 1.0);
        // Plain causal, then documents starting at 0, 1, 7 and 18 (the last token alone) in the
        // first sequence and at 0 and 11 in the second.
        let plain = vec![0u32; d.b * d.t];
        let docs = [documents(d.t, &[0, 1, 7, 18]), documents(d.t, &[0, 11])].concat();
        for (mask, starts) in [("causal", &plain), ("documents", &docs)] {
            both!(
                &format!("attention (alibi {alibi}, {mask})"),
                2e-5,
                attention_case(&qkv, &dout, starts, d)
            );
        }
    }
}

/// One backend per attention kernel but the default, forced to use it in the forward and the
/// backward: tuning may pick any of them, so each must give the default's bits.
fn other_attention_kernels() -> Vec<(String, GpuBackend)> {
    let kernels = ops::attention::KERNELS;
    (1..kernels.len())
        .map(|i| {
            let be = gpu();
            assert!(kernels[i].fits(&be), "{} fits every WebGPU device", kernels[i].name());
            be.force_candidate("attention_forward", i);
            // A forward-only kernel runs with the default backward.
            if i < ops::attention::BACKWARD_KERNELS.len() {
                be.force_candidate("attention_backward", i);
            }
            (kernels[i].name(), be)
        })
        .collect()
}

/// The attention kernels on shapes that fit no tile: T of 1, below, at and past tiles of 32 rows;
/// head widths of 7, 64, 128 and 200 (one, two, four and seven chunks of 32, the last two
/// workgroups of columns); with and without ALiBi and the layer scaling; plain causal and with
/// documents. Every kernel tuning may choose gives the default's bits.
#[test]
fn every_attention_kernel_on_awkward_shapes() {
    let (default, kernels) = (gpu(), other_attention_kernels());
    let mut rng = SmallRng::seed_from_u64(15);
    // (b, t, h, dh, layer): the logits' scale is 1/sqrt(dh)/(layer + 1).
    for (b, t, h, dh, layer) in [
        (1, 1, 2, 7, 0),
        (2, 37, 3, 7, 2),
        (1, 16, 1, 7, 0),
        (1, 70, 1, 7, 1),
        (1, 33, 2, 64, 1),
        (1, 21, 1, 128, 0),
        (2, 5, 2, 128, 3),
        (1, 18, 2, 200, 0),
    ] {
        for alibi in [false, true] {
            let d = AttentionDims {
                b,
                t,
                h,
                dh,
                scale: 1.0 / (dh as f32).sqrt() / (layer + 1) as f32,
                alibi,
            };
            let qkv = rand_vec(&mut rng, d.b * d.t * 3 * d.h * d.dh, 2.0);
            let dout = rand_vec(&mut rng, d.b * d.t * d.h * d.dh, 1.0);
            let plain = vec![0u32; b * t];
            // Documents at 0, t/3, t/3 + 1 (a one-token document) and t − 1, in every sequence.
            let docs = documents(t, &[0, t as u32 / 3, t as u32 / 3 + 1, t as u32 - 1]).repeat(b);
            for (mask, starts) in [("causal", &plain), ("documents", &docs)] {
                both!(
                    &format!("attention {d:?} {mask}"),
                    2e-5,
                    attention_case(&qkv, &dout, starts, d)
                );
                let want = attention_case(&default, &qkv, &dout, starts, d);
                for (kernel, be) in &kernels {
                    let name = format!("attention {kernel} {d:?} {mask}");
                    assert_same_bits(&name, &attention_case(be, &qkv, &dout, starts, d), &want);
                }
            }
        }
    }
}

/// T = 1,024 with few heads, and 2,048 with one: every buffer the op takes is at most
/// (B, T, 3·H·Dh) or (B, H, T), none T × T, and the GPU matches the CPU twin there.
#[test]
fn long_attention_without_a_square_buffer() {
    let mut rng = SmallRng::seed_from_u64(16);
    for (t, h) in [(1024, 2), (2048, 1)] {
        let d = AttentionDims {
            b: 1,
            t,
            h,
            dh: 8,
            scale: 1.0 / 8f32.sqrt() / 2.0,
            alibi: true,
        };
        let qkv = rand_vec(&mut rng, d.b * d.t * 3 * d.h * d.dh, 2.0);
        let dout = rand_vec(&mut rng, d.b * d.t * d.h * d.dh, 1.0);
        let starts = documents(d.t, &[0, 300, 301, 777]);
        let cpu = CpuBackend::<f32>::new();
        let c = attention_case(&cpu, &qkv, &dout, &starts, d);
        // qkv, dout, the document starts, out, lse, delta and dqkv: what the op was given is all
        // it has, and together it is less than one (T, T) matrix of a single head.
        let values = 2 * qkv.len() + 2 * dout.len() + 2 * d.rows();
        assert_eq!(cpu.allocated_bytes(), 4 * (values + starts.len()) as u64);
        assert!(
            cpu.allocated_bytes() < 4 * (d.t * d.t) as u64,
            "{} bytes for attention at T = {t}",
            cpu.allocated_bytes(),
        );
        assert_eq!(c[1].len(), d.b * d.h * d.t, "lse is one value per (batch, head, row)");
        let g = attention_case(&gpu(), &qkv, &dout, &starts, d);
        assert_close(&format!("attention at T = {t}"), &g, &c, 2e-5);
    }
}

/// Two runs of the backward give bit-identical gradients: no atomics, fixed summation order.
#[test]
fn attention_backward_is_deterministic() {
    let mut rng = SmallRng::seed_from_u64(17);
    let gpu = gpu();
    for dh in [7, 64] {
        let d = AttentionDims {
            b: 2,
            t: 45,
            h: 2,
            dh,
            scale: 1.0 / (dh as f32).sqrt(),
            alibi: true,
        };
        let qkv = rand_vec(&mut rng, d.b * d.t * 3 * d.h * d.dh, 2.0);
        let dout = rand_vec(&mut rng, d.b * d.t * d.h * d.dh, 1.0);
        let starts = documents(d.t, &[0, 20]).repeat(d.b);
        let bits = |v: Vec<Vec<f32>>| v.concat().iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        let first = bits(attention_case(&gpu, &qkv, &dout, &starts, d));
        let second = bits(attention_case(&gpu, &qkv, &dout, &starts, d));
        assert!(first == second, "GPU attention (dh {dh}) differs between two runs");
        let cpu = CpuBackend::<f32>::new();
        let first = bits(attention_case(&cpu, &qkv, &dout, &starts, d));
        let second = bits(attention_case(&cpu, &qkv, &dout, &starts, d));
        assert!(first == second, "CPU attention (dh {dh}) differs between two runs");
    }
}

#[test]
fn cross_entropy_and_mean() {
    let mut rng = SmallRng::seed_from_u64(15);
    // V = 517 is more than two workgroup passes per row.
    let d = CrossEntropyDims {
        rows: 23,
        v: 517,
        z: 1e-4,
    };
    let (logits, targets) = cases::cross_entropy_inputs(&mut rng, d);
    both!("cross_entropy", 2e-5, cross_entropy_case(&logits, &targets, d));
}

#[test]
fn grad_norm_and_adamw() {
    let mut rng = SmallRng::seed_from_u64(16);
    let (p, g, m, v, hyper, d) = cases::adamw_inputs(&mut rng);
    both!("sum of squares + adamw", 1e-5, optim_case(&p, &g, &m, &v, hyper, d));
}

#[test]
fn recorded_plans_replay_the_same_work() {
    let be = gpu();
    let x = upload(&be, &[1.0, 2.0, 3.0]);
    let acc = be.zeros("acc", 3).unwrap();
    let mut plan = None;
    for _ in 0..3 {
        be.record_or_replay(&mut plan, || be.add_assign(&acc, &x));
        be.flush().unwrap();
    }
    assert_eq!(plan.as_ref().unwrap().len(), 1);
    assert_eq!(read(&be, &acc), vec![3.0, 6.0, 9.0]);
}

#[test]
fn too_big_a_buffer_is_a_clear_error() {
    let be = gpu();
    let err = be
        .zeros("the logits", be.max_buffer_values() + 1)
        .unwrap_err()
        .to_string();
    assert!(err.contains("the logits") && err.contains("smaller"), "{err}");
}

/// With `k_slices`, a long aᵀ·b with few tiles of out (a weight gradient) is summed in K slices,
/// then the slices in order: within tolerance of the CPU, written or added to out, the same bits
/// in every tile; and other bits than the single chain, so the slices did run. A product that is
/// not aᵀ·b, or whose K does not divide into whole K tiles, keeps the single chain.
#[test]
fn k_slices_give_the_same_bits_in_every_tile() {
    let sliced = GpuOptions {
        k_slices: true,
        ..GpuOptions::DEFAULT
    };
    let (chain, slices) = (gpu(), gpu_with(sliced));
    let slice_tiles = other_tiles(sliced);
    let cpu = CpuBackend::<f32>::new();
    let mut rng = SmallRng::seed_from_u64(23);
    // (m, n, k, trans_a, trans_b, accumulate, whether it is sliced)
    for (m, n, k, ta, tb, acc, in_slices) in [
        (70, 90, 2048, true, false, false, true),
        (70, 90, 2048, true, false, true, true),
        (33, 5, 4096, true, false, false, true),
        (70, 90, 2048, false, false, false, false),
        (70, 90, 2050, true, false, false, false),
    ] {
        let mut d = MatmulDims::new(m, n, k);
        (d.trans_a, d.trans_b, d.accumulate) = (ta, tb, acc);
        let a = rand_vec(&mut rng, m * k, 1.0);
        let b = rand_vec(&mut rng, k * n, 1.0);
        let init = rand_vec(&mut rng, m * n, 1.0);
        let name = format!("matmul {m}×{n}×{k} (ta={ta}, tb={tb}, acc={acc}) in K slices");
        let got = matmul_case(&slices, &a, &b, &init, d);
        assert_close(&name, &got, &matmul_case(&cpu, &a, &b, &init, d), 1e-5);
        for (tile, be) in &slice_tiles {
            assert_same_bits(&format!("tile {tile} {name}"), &matmul_case(be, &a, &b, &init, d), &got);
        }
        let one_chain = matmul_case(&chain, &a, &b, &init, d);
        let same = one_chain[0]
            .iter()
            .zip(&got[0])
            .all(|(x, y)| x.to_bits() == y.to_bits());
        assert_eq!(!same, in_slices, "{name}: sliced {} where expected {in_slices}", !same);
    }
}

/// The shaders compile without wgpu's loop guards unless `loop_guards` is on; a driver may
/// then unroll their loops, but each value is still the same chain, so the guards change no
/// bits: the matmul, attention, norm and residual-matrix kernels, whose loops run longest, with
/// and without them.
#[test]
fn loop_guards_change_no_bits() {
    let plain = gpu();
    let guarded = gpu_with(GpuOptions {
        loop_guards: true,
        ..GpuOptions::DEFAULT
    });
    let mut rng = SmallRng::seed_from_u64(29);
    for (m, n, k, ta) in [(70, 90, 130, false), (33, 129, 257, true)] {
        let mut d = MatmulDims::new(m, n, k);
        d.trans_a = ta;
        let (a, b, init) = (
            rand_vec(&mut rng, m * k, 1.0),
            rand_vec(&mut rng, k * n, 1.0),
            vec![0.0; m * n],
        );
        let name = format!("matmul {m}×{n}×{k} (ta={ta}) with loop guards");
        assert_same_bits(
            &name,
            &matmul_case(&guarded, &a, &b, &init, d),
            &matmul_case(&plain, &a, &b, &init, d),
        );
    }
    let d = AttentionDims {
        b: 2,
        t: 45,
        h: 3,
        dh: 37,
        scale: 1.0 / 37f32.sqrt(),
        alibi: true,
    };
    let qkv = rand_vec(&mut rng, d.b * d.t * 3 * d.h * d.dh, 2.0);
    let dout = rand_vec(&mut rng, d.b * d.t * d.h * d.dh, 1.0);
    let starts = [documents(d.t, &[0, 20]), documents(d.t, &[0])].concat();
    assert_same_bits(
        "attention with loop guards",
        &attention_case(&guarded, &qkv, &dout, &starts, d),
        &attention_case(&plain, &qkv, &dout, &starts, d),
    );
    let norm = NormDims {
        rows: 37,
        c: 300,
        kind: NormKind::LayerNorm,
        eps: 1e-5,
    };
    let [x, gain, dout, dx0] = cases::norm_inputs(&mut rng, norm.rows, norm.c);
    assert_same_bits(
        "layer norm with loop guards",
        &norm_case(&guarded, &x, &gain, &dout, &dx0, norm),
        &norm_case(&plain, &x, &gain, &dout, &dx0, norm),
    );
    let d = ResidualDims {
        tokens: 40,
        dk: 33,
        dv: 35,
        keys: 37,
    };
    let x = rand_vec(&mut rng, d.matrices(), 1.0);
    let k = rand_vec(&mut rng, d.key_values(), 1.0);
    let data = rand_vec(&mut rng, d.vectors(), 1.0);
    let base = rand_vec(&mut rng, d.matrices(), 1.0);
    assert_same_bits(
        "residual matrix with loop guards",
        &residual_matrix_case(&guarded, &x, &k, &data, &base, d),
        &residual_matrix_case(&plain, &x, &k, &data, &base, d),
    );
}

/// 64 KiB bindings: 16,384 values, under every operand below, so each op binds windows.
const SPLIT: GpuOptions = GpuOptions {
    max_binding_bytes: Some(64 << 10),
    max_groups_per_dim: None,
    ..GpuOptions::DEFAULT
};

/// Ops over buffers larger than one binding run as several launches over windows, and give the
/// same bits as one launch: matmul in every layout (split along M, N and K), the elementwise
/// ops, a Memory Layer's table terms and their sum (along tokens), the embedding and the gather (split along the table), cross-entropy (along rows), the sum of
/// squares (windows of whole blocks) and AdamW (with decay and boost ends inside windows).
#[test]
fn split_launches_give_the_same_bits() {
    let (whole, split) = (gpu(), gpu_with(SPLIT));
    let plain_split = gpu_with(GpuOptions {
        no_subgroups: true,
        ..SPLIT
    });
    assert_eq!(split.max_binding_values(), 16 << 10);
    eprintln!("split matmul: {}", matmul_paths(&whole));
    // The split depends on the tile: every tile of the plain path, split.
    let split_tiles = other_tiles(GpuOptions {
        no_subgroups: true,
        ..SPLIT
    });
    let mut rng = SmallRng::seed_from_u64(20);
    for (ta, tb, acc, k) in [
        (false, false, false, 150),
        (false, true, false, 150),
        (true, false, false, 150),
        (true, true, false, 150),
        (false, false, true, 40),
        (false, true, true, 40),
    ] {
        let (m, n) = (300, 200);
        let mut d = MatmulDims::new(m, n, k);
        (d.trans_a, d.trans_b, d.accumulate) = (ta, tb, acc);
        let a = rand_vec(&mut rng, m * k, 1.0);
        let b = rand_vec(&mut rng, k * n, 1.0);
        let init = rand_vec(&mut rng, m * n, 1.0);
        let name = format!("split matmul(ta={ta}, tb={tb}, acc={acc})");
        let want = matmul_case(&whole, &a, &b, &init, d);
        assert_same_bits(&name, &matmul_case(&split, &a, &b, &init, d), &want);
        assert_same_bits(
            &format!("plain {name}"),
            &matmul_case(&plain_split, &a, &b, &init, d),
            &want,
        );
        for (tile, be) in &split_tiles {
            assert_same_bits(
                &format!("tile {tile} {name}"),
                &matmul_case(be, &a, &b, &init, d),
                &want,
            );
        }
        let cpu = matmul_case(&CpuBackend::<f32>::new(), &a, &b, &init, d);
        assert_close(&name, &want, &cpu, 1e-5);
    }

    let (a, b) = (rand_vec(&mut rng, 70_001, 4.0), rand_vec(&mut rng, 70_001, 1.0));
    let want = elementwise_case(&whole, &a, &b);
    assert_same_bits("split elementwise", &elementwise_case(&split, &a, &b), &want);

    // A Memory Layer's table terms (22,800 values) in windows of 192 tokens.
    let d = MemoryDims {
        tokens: 300,
        d_in: 23,
        tau: 5,
        k: 4,
        d_out: 19,
        temperature: 1.0,
        l1: false,
    };
    let [x, tables, bias, dy] = cases::memory_inputs(&mut rng, d);
    let want = memory_case(&whole, &x, &tables, &bias, &dy, d).2;
    assert_same_bits(
        "split memory",
        &memory_case(&split, &x, &tables, &bias, &dy, d).2,
        &want,
    );

    let d = EmbeddingDims {
        bt: 3 * 13,
        t: 13,
        c: 19,
        v: 1000,
    };
    let tokens: Vec<u32> = (0..d.bt).map(|_| rng.random_range(0..d.v as u32)).collect();
    let (wte, wpe, dout) = (
        rand_vec(&mut rng, d.v * d.c, 1.0),
        rand_vec(&mut rng, d.t * d.c, 1.0),
        rand_vec(&mut rng, d.bt * d.c, 1.0),
    );
    let want = embedding_case(&whole, &tokens, &wte, &wpe, &dout, d);
    let got = embedding_case(&split, &tokens, &wte, &wpe, &dout, d);
    assert_same_bits("split embedding", &got, &want);
    let g = GatherDims {
        rows: d.bt,
        c: d.c,
        v: d.v,
    };
    let want = gather_case(&whole, &tokens, &wte, &dout, g);
    let got = gather_case(&split, &tokens, &wte, &dout, g);
    assert_same_bits("split gather", &got, &want);

    let d = CrossEntropyDims {
        rows: 200,
        v: 250,
        z: 1e-4,
    };
    let (logits, targets) = cases::cross_entropy_inputs(&mut rng, d);
    let want = cross_entropy_case(&whole, &logits, &targets, d);
    let got = cross_entropy_case(&split, &logits, &targets, d);
    assert_same_bits("split cross-entropy", &got, &want);

    let (p, g, m, v, hyper, d) = cases::adamw_inputs(&mut rng);
    let want = optim_case(&whole, &p, &g, &m, &v, hyper, d);
    assert_same_bits(
        "split sum + adamw",
        &optim_case(&split, &p, &g, &m, &v, hyper, d),
        &want,
    );
}

/// What still cannot be split is refused at the flush with a message naming the op, never a
/// panic or a wgpu validation error: a norm over rows larger than one binding, and an
/// accumulating product whose K must be split.
#[test]
fn what_cannot_be_split_is_a_clear_error() {
    let be = gpu_with(SPLIT);
    let d = NormDims {
        rows: 100,
        c: 200,
        kind: NormKind::LayerNorm,
        eps: 1e-5,
    };
    let x = be.zeros("x", d.rows * d.c).unwrap();
    let (out, stats, gain) = (
        be.zeros("out", d.rows * d.c).unwrap(),
        be.zeros("stats", 2 * d.rows).unwrap(),
        be.zeros("gain", d.c).unwrap(),
    );
    be.norm_forward(&out, &stats, &x, &gain, d);
    let err = be.flush().unwrap_err().to_string();
    assert!(err.contains("norm_forward") && err.contains("smaller"), "{err}");
    be.flush().unwrap();

    let d = MatmulDims::new(8, 8, 5000).trans_a().accumulate();
    let (out, a, b) = (
        be.zeros("out", 64).unwrap(),
        be.zeros("a", 8 * 5000).unwrap(),
        be.zeros("b", 8 * 5000).unwrap(),
    );
    be.matmul(&out, &a, &b, d);
    let err = be.flush().unwrap_err().to_string();
    assert!(err.contains("matmul") && err.contains("accumulating"), "{err}");

    // With tuning on, an error recorded before a tuned launch still reaches the flush: the
    // measurement sets it aside and puts it back; a candidate that is refused fails only the
    // measurement, and the product is recorded in its default tile (refused the same way).
    let tuned = gpu_with(GpuOptions { tune: true, ..SPLIT });
    let x = tuned.zeros("x", d.m * d.k).unwrap();
    let (nout, stats, gain) = (
        tuned.zeros("out", 100 * 200).unwrap(),
        tuned.zeros("stats", 200).unwrap(),
        tuned.zeros("gain", 200).unwrap(),
    );
    let big = tuned.zeros("big", 100 * 200).unwrap();
    let norm = NormDims {
        rows: 100,
        c: 200,
        kind: NormKind::LayerNorm,
        eps: 1e-5,
    };
    tuned.norm_forward(&nout, &stats, &big, &gain, norm);
    let (mout, mb) = (tuned.zeros("out", 8 * 300).unwrap(), tuned.zeros("b", 300 * 8).unwrap());
    tuned.matmul(&mout, &x, &mb, MatmulDims::new(8, 300, 8));
    let err = tuned.flush().unwrap_err().to_string();
    assert!(err.contains("norm_forward"), "the error before the tuned matmul: {err}");
    tuned.flush().unwrap();
    tuned.matmul(&out, &a, &b, d);
    let err = tuned.flush().unwrap_err().to_string();
    assert!(err.contains("matmul") && err.contains("accumulating"), "{err}");
}

/// Shapes that split the retrieval's 8-key groups, the 256-thread workgroups, the 32-token
/// chunks of the key gradient and the CPU's register blocks (4 rows, 16 columns) unevenly; the
/// last two have more than one chunk's worth of tokens, and the last spreads the key gradient
/// over two of its 32×32 tiles each way and two 32-wide steps of D_v. Every key gradient kernel
/// tuning may choose gives the default's bits.
#[test]
fn residual_matrix_store_retrieve_and_backwards() {
    let (default, kernels) = (gpu(), ops::residual_matrix::KEY_GRAD_KERNELS);
    let others: Vec<_> = (1..kernels.len())
        .map(|i| {
            let be = gpu();
            assert!(kernels[i].fits(&be), "{} fits every WebGPU device", kernels[i].name());
            be.force_candidate("key_grad", i);
            (kernels[i].name(), be)
        })
        .collect();
    let mut rng = SmallRng::seed_from_u64(15);
    for (tokens, dk, dv, keys) in [
        (1, 1, 1, 1),
        (7, 5, 13, 3),
        (19, 6, 64, 12),
        (71, 9, 17, 21),
        (40, 33, 35, 37),
    ] {
        let d = ResidualDims { tokens, dk, dv, keys };
        let x = rand_vec(&mut rng, d.matrices(), 1.0);
        let k = rand_vec(&mut rng, d.key_values(), 1.0);
        let data = rand_vec(&mut rng, d.vectors(), 1.0);
        let base = rand_vec(&mut rng, d.matrices(), 1.0);
        both!(
            &format!("residual matrix {d:?}"),
            1e-5,
            residual_matrix_case(&x, &k, &data, &base, d)
        );
        let want = residual_matrix_case(&default, &x, &k, &data, &base, d);
        for (kernel, be) in &others {
            let name = format!("residual matrix, key gradient {kernel}, {d:?}");
            assert_same_bits(&name, &residual_matrix_case(be, &x, &k, &data, &base, d), &want);
        }
    }
}

/// Codes and buckets must match exactly; the values within rounding. 300 tokens make two
/// chunks of the GPU's 256-row sort; τ = 5 leaves buckets empty; d_in 23 leaves 3 values
/// unhashed; the second shape has more tables than workgroup threads' worth of buckets.
#[test]
fn memory_layer_hash_bucket_forward_backward() {
    let mut rng = SmallRng::seed_from_u64(16);
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
        let (gc, gb, g) = memory_case(&gpu(), &x, &tables, &bias, &dy, d);
        let (cc, cb, c) = memory_case(&CpuBackend::<f32>::new(), &x, &tables, &bias, &dy, d);
        assert_eq!(gc, cc, "codes differ");
        assert_eq!(gb, cb, "bucket starts or rows differ");
        assert_close(&format!("memory {d:?}"), &g, &c, 1e-5);
        // Summed from its unedited parts, y is memory_forward's own, bit for bit on the CPU (a
        // GPU compiler may fuse the forward's multiply-add).
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(
            bits(&c[6]),
            bits(&c[1]),
            "the CPU's sum of parts differs from its forward"
        );
    }
}

fn bucket_case<B: Backend>(be: &B, codes: &[u32], d: MemoryDims) -> Vec<u32> {
    let codes = upload_index(be, codes);
    let rows = be.index("rows", d.k * d.tokens).unwrap();
    let starts = be.index("starts", d.starts_len()).unwrap();
    let cursor = be.index("cursor", d.sort_scratch()).unwrap();
    be.memory_bucket(&rows, &starts, &cursor, &codes, d);
    be.flush().unwrap();
    let mut out = pollster::block_on(be.read_index(&starts)).unwrap();
    out.extend(pollster::block_on(be.read_index(&rows)).unwrap());
    out
}

/// The sort runs a workgroup per tile of rows of each table; its buckets are the CPU twin's
/// exactly, folded or not: one row; rows that are no multiple of 256; thousands of rows in one
/// bucket across 20 tiles; 2^16 buckets (one tile); every bucket used.
#[test]
fn bucket_sort_across_workgroups_matches_the_cpu() {
    let mut rng = SmallRng::seed_from_u64(18);
    let (gpu, folded, cpu) = (gpu(), gpu_with(FOLDED), CpuBackend::<f32>::new());
    for (tokens, tau, k, spread) in [
        (1, 3, 2, 8),
        (300, 5, 3, 32),
        (1000, 2, 4, 4),
        (5000, 10, 2, 1),
        (777, 16, 1, 1 << 16),
        (4099, 8, 3, 256),
    ] {
        let d = MemoryDims {
            tokens,
            d_in: tau * k,
            tau,
            k,
            d_out: 1,
            temperature: 1.0,
            l1: false,
        };
        // spread 1 puts every row in one bucket (the last).
        let codes: Vec<u32> = (0..tokens * k)
            .map(|_| match spread {
                1 => (1 << tau) - 1,
                s => rng.random_range(0..s as u32),
            })
            .collect();
        let want = bucket_case(&cpu, &codes, d);
        eprintln!("{tokens} rows, τ {tau}, K {k}: {} tiles a table", d.sort_tiles());
        assert_eq!(
            bucket_case(&gpu, &codes, d),
            want,
            "{d:?}: buckets differ from the CPU's"
        );
        assert_eq!(bucket_case(&folded, &codes, d), want, "{d:?}: folded buckets differ");
    }
    assert_eq!(sort_tiles(5000, 1 << 10), 20);
}

/// The table gradient is a fixed-order sum: two runs give the same bits.
#[test]
fn memory_table_gradient_is_bit_identical_across_runs() {
    let mut rng = SmallRng::seed_from_u64(17);
    let d = MemoryDims {
        tokens: 517,
        d_in: 32,
        tau: 4,
        k: 8,
        d_out: 33,
        temperature: 1.0,
        l1: false,
    };
    let x = rand_vec(&mut rng, d.tokens * d.d_in, 1.0);
    let tables = rand_vec(&mut rng, d.table_values(), 0.5);
    let bias = rand_vec(&mut rng, d.d_out, 0.1);
    let dy = rand_vec(&mut rng, d.tokens * d.d_out, 1.0);
    let be = gpu();
    let first = memory_case(&be, &x, &tables, &bias, &dy, d).2;
    let second = memory_case(&be, &x, &tables, &bias, &dy, d).2;
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&first[3]), bits(&second[3]), "table gradients differ between runs");
    assert_eq!(bits(&first[2]), bits(&second[2]), "input gradients differ between runs");
}

/// Several indices of awkward lengths (one empty) come back whole in one readback, on both
/// backends, and a tensor read with an offset (a view) still reads its own values.
#[test]
fn many_indices_read_back_in_one_round_trip() {
    let parts: Vec<Vec<u32>> = vec![(0..17).collect(), vec![], (100..103).collect(), vec![7; 65]];
    let gpu = gpu();
    let cpu = CpuBackend::<f32>::new();
    let on_gpu: Vec<_> = parts.iter().map(|p| upload_index(&gpu, p)).collect();
    let on_cpu: Vec<_> = parts.iter().map(|p| upload_index(&cpu, p)).collect();
    gpu.flush().unwrap();
    let got = pollster::block_on(gpu.read_indices(&on_gpu.iter().collect::<Vec<_>>())).unwrap();
    assert_eq!(got, parts);
    let got = pollster::block_on(cpu.read_indices(&on_cpu.iter().collect::<Vec<_>>())).unwrap();
    assert_eq!(got, parts);
    let values: Vec<f32> = (0..200).map(|i| i as f32).collect();
    let t = upload(&gpu, &values);
    assert_eq!(read(&gpu, &gpu.view(&t, 64, 70)), values[64..134].to_vec());
}

/// Whether the adapter the tests get offers timestamp queries, asked of wgpu directly.
fn adapter_has_timestamps() -> bool {
    std::env::set_var("XDG_RUNTIME_DIR", std::env::temp_dir());
    let instance = wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle_from_env());
    let adapter = pollster::block_on(instance.request_adapter(&wgpu::RequestAdapterOptions {
        power_preference: wgpu::PowerPreference::HighPerformance,
        ..Default::default()
    }))
    .expect("these tests need a GPU adapter; on Debian install mesa-vulkan-drivers");
    adapter.features().contains(wgpu::Features::TIMESTAMP_QUERY)
}

/// A recorded plan of three families (matmul, elementwise, norm), and the families it holds.
fn profiled_plan(be: &profile::Profiled<GpuBackend>) -> profile::ProfiledPlan<gpu::GpuPlan> {
    let mut rng = SmallRng::seed_from_u64(30);
    let d = MatmulDims::new(67, 45, 93);
    let (a, b) = (
        upload(be, &rand_vec(&mut rng, 67 * 93, 1.0)),
        upload(be, &rand_vec(&mut rng, 93 * 45, 1.0)),
    );
    let (out, sum) = (be.zeros("out", 67 * 45).unwrap(), be.zeros("sum", 67 * 45).unwrap());
    let n = NormDims {
        rows: 67,
        c: 45,
        kind: NormKind::RmsNorm,
        eps: 1e-6,
    };
    let (normed, stats, gain) = (
        be.zeros("normed", 67 * 45).unwrap(),
        be.zeros("stats", 2 * 67).unwrap(),
        upload(be, &[1.0; 45]),
    );
    let mut plan = None;
    be.record_or_replay(&mut plan, || {
        be.matmul(&out, &a, &b, d);
        be.add(&sum, &out, &out);
        be.norm_forward(&normed, &stats, &sum, &gain, n);
    });
    be.flush().unwrap();
    plan.unwrap()
}

/// Where the adapter has timestamp queries, the device is created with them and one replay of
/// a plan times every family in it: finite, and more than 0 for each family that ran, 0 for the
/// others. With `no_timestamps` (or an adapter without them) there are none, and `resmem
/// bench` replays each family alone instead. No time is compared with anything.
#[test]
fn timestamp_queries_time_each_family_of_a_plan() {
    use profile::{Family, Profiled};
    let offered = adapter_has_timestamps();
    let be = Profiled::new(gpu());
    assert_eq!(be.inner.timestamps(), offered);
    let plan = profiled_plan(&be);
    let timed = pollster::block_on(be.time_families(&plan, 2)).unwrap();
    if offered {
        eprintln!("timestamps: this adapter has timestamp queries; each family timed from them");
        let timed = timed.expect("timestamp queries were on, yet the families were not timed");
        for (family, s) in Family::ALL.iter().zip(timed.families) {
            assert!(s.is_finite() && s >= 0.0, "{family:?}: {s} s");
            let ran = [Family::Matmul, Family::Elementwise, Family::Norm].contains(family);
            assert_eq!(ran, plan.families().contains(family), "{family:?}");
            assert_eq!(s > 0.0, ran, "{family:?}: {s} s");
        }
        // The kernels split the same launches, named by shader and entry point, slowest first.
        let launches: usize = timed.kernels.iter().map(|k| k.launches).sum();
        assert_eq!(launches, plan.families().len());
        let (by_kernel, by_family) = (
            timed.kernels.iter().map(|k| k.seconds).sum::<f64>(),
            timed.families.iter().sum::<f64>(),
        );
        assert!(
            (by_kernel - by_family).abs() <= 1e-9 * by_family,
            "{by_kernel} s against {by_family} s"
        );
        assert!(timed.kernels.windows(2).all(|w| w[0].seconds >= w[1].seconds));
        for k in &timed.kernels {
            let shader = k.kernel.split("::").next().unwrap_or_default();
            let expected = match k.family {
                Family::Matmul => "matmul",
                Family::Norm => "norm",
                _ => "elementwise",
            };
            assert_eq!(shader, expected, "{k:?}");
        }
    } else {
        eprintln!("timestamps: this adapter has no timestamp queries; only replay timing is possible");
        assert!(timed.is_none());
    }

    let off = Profiled::new(gpu_with(GpuOptions {
        no_timestamps: true,
        ..GpuOptions::DEFAULT
    }));
    assert!(!off.inner.timestamps());
    let plan = profiled_plan(&off);
    assert!(pollster::block_on(off.time_families(&plan, 2)).unwrap().is_none());
    let sync = off.zeros("sync", 1).unwrap();
    let wait = || pollster::block_on(off.read(&sync)).map(|_| ());
    let replayed = off.time_family(&plan, Family::Matmul, 1, &wait).unwrap();
    assert!(replayed.is_some_and(|s| s.is_finite() && s > 0.0));
}

/// The selftest passes on this adapter, and catches a kernel built wrong: with the GELU's
/// sqrt(2/π) off by 1%, the elementwise family fails and every other family still passes.
#[test]
fn selftest_passes_and_catches_a_broken_kernel() {
    let failed = |be: &GpuBackend| {
        let checks = block(selftest::run(be));
        assert!(checks.len() > 50, "{} checks", checks.len());
        let mut families: Vec<&str> = checks.iter().filter(|c| !c.passed()).map(|c| c.family).collect();
        families.dedup();
        families
    };
    assert_eq!(failed(&gpu()), Vec::<&str>::new());
    const BROKEN: &[shaders::Define] = &[shaders::Define::f32("GELU_K", 0.797_884_6 * 1.01)];
    let broken = gpu_with(GpuOptions {
        overrides: BROKEN,
        ..GpuOptions::DEFAULT
    });
    assert_eq!(failed(&broken), ["elementwise"]);
}

/// `resmem selftest` on the GPU also checks every kernel tuning may choose: each matmul tile,
/// attention kernel and key gradient kernel that fits but the defaults, through its family's
/// cases, all passing.
#[test]
fn selftest_checks_every_tuning_candidate() {
    let be = gpu();
    let checks = block(selftest::run_candidates(&be));
    let failed: Vec<&String> = checks.iter().filter(|c| !c.passed()).map(|c| &c.case).collect();
    assert!(failed.is_empty(), "{failed:?}");
    let tiles = ops::matmul::TILES
        .iter()
        .filter(|t| t.fits(&be))
        .skip(1)
        .map(|t| format!("tile {}: ", t.name()));
    let kernels = ops::attention::KERNELS
        .iter()
        .skip(1)
        .map(|k| format!("{}: ", k.name()));
    for label in tiles.chain(kernels) {
        let n = checks.iter().filter(|c| c.case.starts_with(&label)).count();
        assert!(n >= 8, "{label}: {n} checks");
    }
    for k in &ops::residual_matrix::KEY_GRAD_KERNELS[1..] {
        let label = format!("key gradient {}: ", k.name());
        let n = checks.iter().filter(|c| c.case.starts_with(&label)).count();
        assert!(n >= 3, "{label}: {n} checks");
    }
}

// ---- the fast class (crates/engine/src/precision.rs) ----
//
// lavapipe has f16 but no cooperative matrices, so these run the fast kernels with the three
// cooperative built-ins emulated (`GpuOptions::emulate_cooperative`): the staging (transposes,
// batch strides, windows, scaling, rounding, zeros past the edges), the scale pass, the modes
// and the stores, against the CPU twin; the same for attention's two sweeps, masks and passes.
// The built-ins' own layouts need a GPU that has them: `resmem selftest --precision fast` and
// these tests, run there by bench/device-call.sh, check those on the real tiles.

/// The fast class with emulated cooperative built-ins.
const FAST: GpuOptions = GpuOptions {
    precision: Precision::Fast,
    emulate_cooperative: true,
    ..GpuOptions::DEFAULT
};

/// Integers in [-8, 8]: exact in f16 at any scale the class picks, every partial sum an exact
/// f32, so any order of summation gives the twin's bits.
fn integers(rng: &mut SmallRng, n: usize) -> Vec<f32> {
    (0..n).map(|_| rng.random_range(-8i32..=8) as f32).collect()
}

/// Each element within `precision::fast_bound` of the twin, with P = the twin on |a| and |b|
/// (the same scales: amax ignores signs) plus |init| where the product adds to it.
fn assert_within_fast_bound(name: &str, got: &[f32], a: &[f32], b: &[f32], init: &[f32], d: MatmulDims) {
    let twin = CpuBackend::fast_twin();
    let want = matmul_case(&twin, a, b, init, d).remove(0);
    let abs = |x: &[f32]| x.iter().map(|v| v.abs()).collect::<Vec<_>>();
    let zeros = vec![0.0; init.len()];
    let p = matmul_case(&twin, &abs(a), &abs(b), &zeros, MatmulDims { accumulate: false, ..d }).remove(0);
    let mut worst = 0f64;
    for i in 0..got.len() {
        // The add to out rounds once more on each side.
        let carry = if d.accumulate {
            (init[i].abs() + p[i]) as f64 * 2f64.powi(-23)
        } else {
            0.0
        };
        let bound = precision::fast_bound(d.k, p[i] as f64) + carry;
        let err = (got[i] as f64 - want[i] as f64).abs();
        assert!(
            err <= bound,
            "{name}: value {i} is {} against the twin's {} (bound {bound:e})",
            got[i],
            want[i]
        );
        worst = worst.max(err / bound.max(f64::MIN_POSITIVE));
    }
    eprintln!("{name}: within the fast bound, at most {worst:.3} of it");
}

/// Every transpose, with and without accumulation, single, batched and broadcast, ragged
/// shapes and the smallest fast shape: integer data gives the twin's bits, on every fast
/// candidate and split into windows; real data at three magnitudes (1e-5, 1, 1e4: the scales
/// keep all of them in f16's range) stays within the class's bound.
#[test]
fn fast_matmul_every_layout_against_its_twin() {
    let fast = gpu_with(FAST);
    assert_eq!(fast.precision(), Precision::Fast);
    // On lavapipe the cooperative built-ins are emulated; on a GPU with them (an H200 in
    // bench/RESULTS.md) the same cases check the real tiles' layouts.
    eprintln!(
        "fast kernels on {}",
        if fast.fast_emulated() {
            "emulated cooperative built-ins"
        } else {
            "the adapter's cooperative matrices"
        }
    );
    let split = gpu_with(GpuOptions {
        max_binding_bytes: Some(16 << 10),
        ..FAST
    });
    let others: Vec<(String, GpuBackend)> = (1..ops::matmul::FAST_TILES.len())
        .map(|i| {
            let be = gpu_with(FAST);
            assert!(ops::matmul::FAST_TILES[i].fits(&be), "every fast tile fits the adapter");
            be.force_candidate("matmul_fast", i);
            (ops::matmul::FAST_TILES[i].name(), be)
        })
        .collect();
    let twin = CpuBackend::fast_twin();
    let mut rng = SmallRng::seed_from_u64(41);
    let mut cases = Vec::new();
    for (m, n, k) in [(16, 16, 16), (67, 45, 93), (130, 70, 40), (256, 128, 48)] {
        for (ta, tb, acc) in (0..8).map(|i| (i & 1 != 0, i & 2 != 0, i & 4 != 0)) {
            cases.push((MatmulDims::new(m, n, k), ta, tb, acc));
        }
    }
    for (ba, bb) in [(false, false), (true, false), (false, true)] {
        cases.push((MatmulDims::new(33, 20, 17).batched(3, ba, bb), ba, bb, bb));
    }
    for (mut d, ta, tb, acc) in cases {
        (d.trans_a, d.trans_b, d.accumulate) = (ta, tb, acc);
        let (na, nb) = d.spans();
        let name = format!("fast {} ta={ta} tb={tb} acc={acc}", d.describe());
        let (a, b, init) = (
            integers(&mut rng, na),
            integers(&mut rng, nb),
            integers(&mut rng, d.batch * d.m * d.n),
        );
        let want = matmul_case(&twin, &a, &b, &init, d);
        assert_same_bits(
            &format!("integers {name}"),
            &matmul_case(&fast, &a, &b, &init, d),
            &want,
        );
        for (tile, be) in &others {
            assert_same_bits(
                &format!("integers, {tile}, {name}"),
                &matmul_case(be, &a, &b, &init, d),
                &want,
            );
        }
        assert_same_bits(
            &format!("integers, split, {name}"),
            &matmul_case(&split, &a, &b, &init, d),
            &want,
        );
        for scale in [1e-5, 1.0, 1e4] {
            let (a, b) = (
                rand_vec(&mut rng, na, scale),
                rand_vec(&mut rng, nb, 1.0 / scale.sqrt()),
            );
            let init = rand_vec(&mut rng, d.batch * d.m * d.n, 1.0);
            let got = matmul_case(&fast, &a, &b, &init, d).remove(0);
            assert_within_fast_bound(&format!("{name} at {scale:e}"), &got, &a, &b, &init, d);
        }
    }
    // Below the class's minimum a product stays strict, bit for bit.
    let d = MatmulDims::new(4, 40, 40);
    let (a, b, init) = (
        rand_vec(&mut rng, 160, 1.0),
        rand_vec(&mut rng, 1600, 1.0),
        vec![0.0; 160],
    );
    let strict = matmul_case(&gpu(), &a, &b, &init, d);
    assert_same_bits("a 4-row product", &matmul_case(&fast, &a, &b, &init, d), &strict);
    let strict = matmul_case(&CpuBackend::<f32>::new(), &a, &b, &init, d);
    assert_same_bits(
        "a 4-row product on the twin",
        &matmul_case(&twin, &a, &b, &init, d),
        &strict,
    );
}

/// One product on `be`, and the fault it reports after.
fn fault_case<B: Backend>(be: &B, a: &[f32], b: &[f32], d: MatmulDims) -> (Vec<f32>, Option<String>) {
    let out = matmul_case(be, a, b, &vec![0.0; d.batch * d.m * d.n], d).remove(0);
    (out, block(be.fast_fault()))
}

/// A NaN or an infinity in an operand names its product, on the GPU and on the twin; finite
/// operands far from 1 stay finite and name nothing; and where the fast class cannot run it
/// says why, and runs strict.
#[test]
fn fast_class_names_the_product_that_met_a_non_finite_value() {
    let mut rng = SmallRng::seed_from_u64(42);
    let d = MatmulDims::new(20, 30, 40).trans_b();
    let (a, b) = (rand_vec(&mut rng, 800, 3e17), rand_vec(&mut rng, 1200, 1e-20));
    let (out, fault) = fault_case(&gpu_with(FAST), &a, &b, d);
    assert!(out.iter().all(|x| x.is_finite()) && fault.is_none(), "{fault:?}");
    let (twin, fault) = fault_case(&CpuBackend::fast_twin(), &a, &b, d);
    assert!(twin.iter().all(|x| x.is_finite()) && fault.is_none(), "{fault:?}");
    for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
        let mut b = b.clone();
        b[777] = bad;
        let named = Some("matmul 20×30×40 batch 1 a·bᵀ".to_string());
        assert_eq!(fault_case(&gpu_with(FAST), &a, &b, d).1, named, "gpu, {bad}");
        assert_eq!(fault_case(&CpuBackend::fast_twin(), &a, &b, d).1, named, "twin, {bad}");
    }
    let unemulated = gpu_with(GpuOptions {
        precision: Precision::Fast,
        ..GpuOptions::DEFAULT
    });
    // lavapipe has no cooperative matrices and runs strict, saying why; an adapter with them
    // runs fast and has nothing to say.
    let configurations = unemulated.cooperative_configurations();
    match unemulated.precision() {
        Precision::Strict => {
            let why = unemulated
                .fast_unavailable()
                .expect("an adapter that runs the fast class strict says why");
            assert!(!configurations.is_empty() || why.contains("cooperative"), "{why}");
        }
        Precision::Fast => {
            assert!(!configurations.is_empty());
            assert_eq!(unemulated.fast_unavailable(), None);
        }
    }
    assert_eq!(
        gpu().fast_unavailable(),
        None,
        "nothing to say when strict was asked for"
    );
}

/// The selftest in the fast class: the fast matmul's own family against the twin passes (with
/// every other family as in the strict class), each fast candidate too; and a fast kernel built
/// wrong (one that adds where it should write) fails that family alone.
#[test]
fn fast_selftest_passes_and_catches_a_broken_fast_kernel() {
    let failed = |be: &GpuBackend| {
        let checks = block(selftest::run(be));
        let fast = checks.iter().filter(|c| c.family == "matmul fast").count();
        assert!(fast >= 40, "{fast} fast checks");
        assert!(
            !checks.iter().any(|c| c.family == "matmul"),
            "no strict matmul checks on a fast backend"
        );
        for c in checks.iter().filter(|c| !c.passed()) {
            eprintln!(
                "failed: {} {}: {} (tolerance {})",
                c.family,
                c.case,
                c.relative(),
                c.tolerance
            );
        }
        let mut families: Vec<&str> = checks.iter().filter(|c| !c.passed()).map(|c| c.family).collect();
        families.dedup();
        families
    };
    let fast = gpu_with(FAST);
    assert_eq!(failed(&fast), Vec::<&str>::new());
    let attention = block(selftest::run(&fast));
    let attention = attention.iter().filter(|c| c.family == "attention fast");
    assert_eq!(
        attention.count(),
        4 * 2 * 3,
        "four heads in the fast class, two masks, three outputs"
    );
    let candidates = block(selftest::run_candidates(&fast));
    let label = format!("{}: ", ops::matmul::FAST_TILES[1].name());
    let checked = candidates.iter().filter(|c| c.case.starts_with(&label));
    assert!(checked.clone().count() >= 40 && checked.clone().all(|c| c.passed()));
    let rows = candidates
        .iter()
        .filter(|c| c.case.starts_with("fast 32 rows: ") && c.family == "attention fast");
    assert!(rows.clone().count() == 24 && rows.clone().all(|c| c.passed()));
    const BROKEN: &[shaders::Define] = &[shaders::Define::u32("MODE_WRITE", 1)];
    let broken = gpu_with(GpuOptions {
        overrides: BROKEN,
        ..FAST
    });
    assert_eq!(failed(&broken), ["matmul fast"]);
    // A fast attention whose tiles disagree with its launch: half of each tile's rows unwritten.
    const HALF_TILES: &[shaders::Define] = &[shaders::Define::u32("OWN", 16)];
    let broken = gpu_with(GpuOptions {
        overrides: HALF_TILES,
        ..FAST
    });
    assert_eq!(failed(&broken), ["attention fast"]);
}

/// The fast attention, its built-ins emulated, against its twin at awkward lengths, over
/// documents, with ALiBi, at every head width it takes: within the bounds the selftest holds it
/// to, its outputs differ from the strict kernels' (it does run in f16), a NaN or an infinity
/// names the pass that met it, and a head outside the class (8, 80) runs the strict kernels on a
/// fast backend, bit for bit.
#[test]
fn fast_attention_follows_its_twin_and_leaves_other_heads_strict() {
    let mut rng = SmallRng::seed_from_u64(41);
    let (fast, strict) = (gpu_with(FAST), gpu());
    let twin = CpuBackend::fast_twin();
    for (t, dh, alibi) in [
        (1, 16, false),
        (65, 16, true),
        (29, 32, true),
        (100, 48, false),
        (64, 64, true),
    ] {
        let d = AttentionDims {
            b: 2,
            t,
            h: 2,
            dh,
            scale: 1.0 / (dh as f32).sqrt(),
            alibi,
        };
        let qkv = rand_vec(&mut rng, d.b * d.t * 3 * d.h * d.dh, 2.0);
        let dout = rand_vec(&mut rng, d.b * d.t * d.h * d.dh, 1.0);
        let starts = documents(t, &[0, t as u32 / 2, t as u32 / 2 + 1]).repeat(d.b);
        let (out, lse) = ops::attention::fast::forward_bounds(&qkv, &starts, d);
        let got = attention_case(&fast, &qkv, &dout, &starts, d);
        let want = attention_case(&twin, &qkv, &dout, &starts, d);
        let within = |name: &str, got: &[f32], want: &[f32], bound: &[f64]| {
            let worst = (got.iter().zip(want).zip(bound))
                .map(|((g, w), b)| (f64::from(*g) - f64::from(*w)).abs() / b)
                .fold(0.0, f64::max);
            assert!(worst <= 1.0, "T {t}, Dh {dh}: {name} at {worst:.3} of its bound");
            eprintln!("T {t}, Dh {dh}: {name} within {worst:.3} of its bound");
        };
        within("out", &got[0], &want[0], &out);
        within("lse", &got[1], &want[1], &lse);
        let dqkv = ops::attention::fast::backward_bounds(&qkv, &dout, &want[0], &want[1], &starts, d);
        let back = |be: &dyn Fn() -> Vec<Vec<f32>>| be().remove(0);
        let got = back(&|| {
            block(cases::attention_backward(
                &fast, &qkv, &dout, &want[0], &want[1], &starts, d,
            ))
        });
        let twin_back = back(&|| {
            block(cases::attention_backward(
                &twin, &qkv, &dout, &want[0], &want[1], &starts, d,
            ))
        });
        within("dqkv", &got, &twin_back, &dqkv);
        let exact = attention_case(&strict, &qkv, &dout, &starts, d);
        assert!(exact[0] != want[0], "T {t}, Dh {dh}: the twin gave the strict bits");
        let rounded = attention_case(&fast, &qkv, &dout, &starts, d);
        assert!(
            exact[0] != rounded[0],
            "T {t}, Dh {dh}: the fast backend gave the strict bits"
        );
        // Workgroups of 32 rows sum every value as those of 64 do.
        let narrow = gpu_with(FAST);
        narrow.force_candidate("attention_forward_fast", 1);
        narrow.force_candidate("attention_backward_fast", 1);
        let name = format!("T {t}, Dh {dh}, 32 rows");
        assert_same_bits(&name, &attention_case(&narrow, &qkv, &dout, &starts, d), &rounded);
    }
    // A NaN in qkv names the forward, and one in dout alone the backward, on both.
    let d = AttentionDims {
        b: 1,
        t: 40,
        h: 2,
        dh: 16,
        scale: 0.25,
        alibi: false,
    };
    let starts = vec![0; d.t];
    for (what, at_qkv, at_dout) in [("forward", Some(77), None), ("backward", None, Some(5))] {
        let mut qkv = rand_vec(&mut rng, d.b * d.t * 3 * d.h * d.dh, 2.0);
        let mut dout = rand_vec(&mut rng, d.b * d.t * d.h * d.dh, 1.0);
        if let Some(i) = at_qkv {
            qkv[i] = f32::NAN;
        }
        if let Some(i) = at_dout {
            dout[i] = f32::INFINITY;
        }
        let named = Some(format!("attention {what} batch 1 T 40 heads 2×16"));
        let fast = gpu_with(FAST);
        attention_case(&fast, &qkv, &dout, &starts, d);
        assert_eq!(block(fast.fast_fault()), named, "gpu");
        let twin = CpuBackend::fast_twin();
        attention_case(&twin, &qkv, &dout, &starts, d);
        assert_eq!(block(twin.fast_fault()), named, "twin");
    }
    for dh in [8, 80] {
        let d = AttentionDims {
            b: 1,
            t: 40,
            h: 2,
            dh,
            scale: 0.2,
            alibi: true,
        };
        let qkv = rand_vec(&mut rng, d.b * d.t * 3 * d.h * d.dh, 2.0);
        let dout = rand_vec(&mut rng, d.b * d.t * d.h * d.dh, 1.0);
        let starts = vec![0; d.t];
        let name = format!("Dh {dh} on a fast backend");
        assert_same_bits(
            &name,
            &attention_case(&fast, &qkv, &dout, &starts, d),
            &attention_case(&strict, &qkv, &dout, &starts, d),
        );
    }
}
