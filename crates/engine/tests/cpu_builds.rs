//! The CPU's builds of its register-blocked products (`cpu::simd`'s `wide!`, `cpu::product`):
//! the baseline (no FMA), AVX2 with FMA and AVX-512 with FMA, whichever this CPU has. A process
//! runs one build, chosen once by `RESMEM_CPU_BUILD`, so the test runs each in a child process
//! of its own binary: every residual-matrix op and attention, forward and backward, on awkward
//! shapes against its f64 twin, and the two FMA builds, which differ only in their register
//! blocks, to the bit.

use rand::{rngs::SmallRng, Rng, SeedableRng};
use resmem_engine::ops::attention::{cpu_backward, cpu_forward, AttentionDims};
use resmem_engine::ops::residual_matrix::{
    cpu_retrieve_normed, cpu_retrieve_normed_backward, cpu_store, cpu_store_backward,
};
use resmem_engine::{NormDims, NormKind, ResidualDims};
use std::process::Command;

/// The build a child runs, as `cpu::simd` reads it.
const BUILD: &str = "RESMEM_CPU_BUILD";

/// Shapes off every block size: tokens past whole chunks of 32 and pairs, D_v past the 16
/// lanes, keys off the 8, 4 and 2 rows of a block; then the toy RMT's own.
const SHAPES: [ResidualDims; 3] = [
    ResidualDims {
        tokens: 37,
        dk: 5,
        dv: 19,
        keys: 7,
    },
    ResidualDims {
        tokens: 33,
        dk: 16,
        dv: 40,
        keys: 9,
    },
    ResidualDims {
        tokens: 66,
        dk: 32,
        dv: 32,
        keys: 24,
    },
];

/// Attention off its blocks: T past a block of 64 queries and off the 16 lanes, a head
/// dimension off the lanes and one of two whole blocks, documents that start mid-block, ALiBi.
fn attention_shapes() -> [(AttentionDims, Vec<u32>); 2] {
    let documents = |t: usize, starts: &[u32]| -> Vec<u32> {
        (0..t as u32)
            .map(|i| starts.iter().copied().filter(|&s| s <= i).max().unwrap_or(0))
            .collect()
    };
    let d = |b, t, h, dh, alibi| AttentionDims {
        b,
        t,
        h,
        dh,
        scale: 1.0 / (dh as f32).sqrt(),
        alibi,
    };
    [
        (d(2, 37, 3, 19, true), documents(37, &[0, 5, 30]).repeat(2)),
        (d(1, 70, 2, 32, false), documents(70, &[0, 40])),
    ]
}

fn builds() -> Vec<&'static str> {
    let mut builds = vec!["baseline"];
    #[cfg(target_arch = "x86_64")]
    {
        if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
            builds.push("avx2");
            if std::is_x86_feature_detected!("avx512f") {
                builds.push("avx512");
            }
        }
    }
    builds
}

/// Set in a child: the build it runs (read by `cpu::simd`) and its part of the test.
const CHILD: &str = "RESMEM_CPU_BUILD_CHILD";

#[test]
fn every_cpu_build_matches_the_f64_twin_and_the_fma_builds_agree() {
    if std::env::var_os(CHILD).is_some() {
        return one_build_against_f64();
    }
    let exe = std::env::current_exe().unwrap();
    let name = "every_cpu_build_matches_the_f64_twin_and_the_fma_builds_agree";
    let mut digests = Vec::new();
    for build in builds() {
        let out = Command::new(&exe)
            .args(["--exact", name, "--nocapture", "--test-threads", "1"])
            .env(BUILD, build)
            .env(CHILD, "1")
            .output()
            .unwrap();
        let log = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "the {build} build failed:\n{log}");
        let digest = log
            .lines()
            .find_map(|l| l.split_once("digest ").map(|(_, d)| d.trim()))
            .unwrap_or_else(|| panic!("the {build} build printed no digest:\n{log}"))
            .to_string();
        eprintln!("{build}: digest {digest}");
        digests.push((build, digest));
    }
    let fused: Vec<_> = digests.iter().filter(|(b, _)| *b != "baseline").collect();
    if let [(_, a), (_, b)] = fused.as_slice() {
        assert_eq!(a, b, "the AVX2 and AVX-512 builds round differently");
    }
}

/// The child: every op in f32 on this process's build against f64, and a digest of the f32 bits.
fn one_build_against_f64() {
    let mut digest = 0xcbf2_9ce4_8422_2325u64;
    let residual = SHAPES.map(|d| (format!("{d:?}"), run::<f32>(d), run::<f64>(d)));
    let attention = attention_shapes().map(|(d, starts)| {
        let (f32s, f64s) = (run_attention::<f32>(d, &starts), run_attention::<f64>(d, &starts));
        (format!("{d:?}"), f32s, f64s)
    });
    for (d, f32s, f64s) in residual.iter().chain(&attention) {
        for ((name, a), (_, b)) in f32s.iter().zip(f64s) {
            let scale = b.iter().fold(1e-3f64, |m, v| m.max(v.abs()));
            let worst = a
                .iter()
                .zip(b)
                .fold(0f64, |w, (&x, &y)| w.max((x as f64 - y).abs() / scale));
            assert!(
                worst < 2e-5,
                "{name} at {d}: worst error {worst:.2e} of its largest value"
            );
            for v in a {
                digest = (digest ^ v.to_bits() as u64).wrapping_mul(0x100_0000_01b3);
            }
        }
    }
    println!("digest {digest:016x}");
}

/// Every output of every op at one shape, from the same random inputs in any precision.
fn run<T: resmem_engine::ops::Scalar>(d: ResidualDims) -> Vec<(&'static str, Vec<T>)> {
    let mut rng = SmallRng::seed_from_u64(7);
    let mut random = |n: usize| -> Vec<T> { (0..n).map(|_| T::of(rng.random_range(-1.0..1.0))).collect() };
    let norm = NormDims {
        rows: d.tokens,
        c: d.dk * d.dv,
        kind: NormKind::LayerNorm,
        eps: 1e-5,
    };
    let (x, keys, data, gain) = (
        random(d.matrices()),
        random(d.key_values()),
        random(d.vectors()),
        random(d.dk * d.dv),
    );
    let (dy, dout) = (random(d.vectors()), random(d.matrices()));

    let mut stored = vec![T::zero(); d.matrices()];
    cpu_store(&mut stored, Some(&x), &keys, &data, d);
    let mut accumulated = x.clone();
    cpu_store(&mut accumulated, None, &keys, &data, d);
    let (mut y, mut stats) = (vec![T::zero(); d.vectors()], vec![T::zero(); 2 * d.tokens]);
    cpu_retrieve_normed(&mut y, &mut stats, &x, &gain, &keys, d, norm);
    let (mut ddata, mut dkeys) = (vec![T::zero(); d.vectors()], vec![T::zero(); d.key_values()]);
    cpu_store_backward(&mut ddata, &mut dkeys, &dout, &keys, &data, d);
    let (mut dx, mut dgain, mut dkeys_r) = (
        dout.clone(),
        vec![T::zero(); gain.len()],
        vec![T::zero(); d.key_values()],
    );
    cpu_retrieve_normed_backward(
        &mut dx,
        &mut dgain,
        &mut dkeys_r,
        &dy,
        &x,
        &stats,
        &gain,
        &keys,
        d,
        norm,
    );
    vec![
        ("store", stored),
        ("store onto out", accumulated),
        ("retrieve_normed", y),
        ("store_backward: ddata", ddata),
        ("store_backward: dkeys", dkeys),
        ("retrieve_normed_backward: dx", dx),
        ("retrieve_normed_backward: dgain", dgain),
        ("retrieve_normed_backward: dkeys", dkeys_r),
    ]
}

/// Attention's outputs, forward and backward, at one shape from the same random inputs in any
/// precision.
fn run_attention<T: resmem_engine::ops::Scalar>(d: AttentionDims, starts: &[u32]) -> Vec<(&'static str, Vec<T>)> {
    let mut rng = SmallRng::seed_from_u64(8);
    let mut random = |n: usize| -> Vec<T> { (0..n).map(|_| T::of(rng.random_range(-1.0..1.0))).collect() };
    let c = d.h * d.dh;
    let (qkv, dout) = (random(d.b * d.t * 3 * c), random(d.b * d.t * c));
    let (mut out, mut lse) = (vec![T::zero(); d.b * d.t * c], vec![T::zero(); d.rows()]);
    cpu_forward(&mut out, &mut lse, &qkv, starts, d);
    let (mut dqkv, mut delta) = (vec![T::zero(); qkv.len()], vec![T::zero(); d.rows()]);
    cpu_backward(&mut dqkv, &mut delta, &dout, &out, &qkv, &lse, starts, d);
    vec![
        ("attention: out", out),
        ("attention: lse", lse),
        ("attention: dqkv", dqkv),
    ]
}
