//! The f32 CPU's fast tanh (the GELU's) and fast exp (the softmaxes') against f64's exact ones
//! over the whole f32 range: every 97th bit pattern of the finite floats (tails, subnormals and
//! signs included), the neighbourhood of the clamps and cut-offs, and infinities and NaN.

use resmem_engine::ops::{fast_exp, fast_tanh};

/// The error in ulps of the exact result (subnormals count in ulps of the smallest normal).
fn check(x: f32) -> f64 {
    let exact = (x as f64).tanh();
    let got = fast_tanh(x) as f64;
    let ulp = (exact.abs() as f32).max(f32::MIN_POSITIVE);
    let ulp = (f32::from_bits(ulp.to_bits() + 1) - ulp) as f64;
    let err = (got - exact).abs() / ulp;
    assert!(err <= MAX_ULPS, "tanh({x:e}): {got:e}, exact {exact:e}, {err:.1} ulps");
    err
}

/// Measured worst: 7.9 ulps.
const MAX_ULPS: f64 = 10.0;

#[test]
fn fast_tanh_is_within_10_ulps_over_all_of_f32() {
    let mut worst = 0f64;
    for bits in (0..0x7f80_0000u32).step_by(97) {
        let x = f32::from_bits(bits);
        worst = worst.max(check(x)).max(check(-x));
    }
    for x in [
        7.9f32,
        7.905_311,
        7.91,
        8.0,
        9.0,
        4e-4,
        3.999e-4,
        4.001e-4,
        1.0,
        0.5,
        0.0,
        f32::MAX,
    ] {
        worst = worst.max(check(x)).max(check(-x));
    }
    eprintln!("fast tanh: worst error {worst:.2} ulps");
    assert_eq!(fast_tanh(f32::INFINITY), 1.0);
    assert_eq!(fast_tanh(f32::NEG_INFINITY), -1.0);
    assert!(fast_tanh(f32::NAN).is_nan());
}

/// The GELU built on it, against the f64 GELU, over the values activations take and their tails.
#[test]
fn the_f32_gelu_matches_the_exact_tanh_gelu() {
    use resmem_engine::ops::elementwise::{cpu_gelu_backward, cpu_gelu_forward};
    let xs: Vec<f32> = (-20_000..=20_000)
        .map(|i| i as f32 * 1e-3)
        .chain([1e6, -1e6, 1e-30])
        .collect();
    let x64: Vec<f64> = xs.iter().map(|&x| x as f64).collect();
    let (mut y, mut y64) = (vec![0f32; xs.len()], vec![0f64; xs.len()]);
    cpu_gelu_forward(&mut y, &xs);
    cpu_gelu_forward(&mut y64, &x64);
    let ones = vec![1f32; xs.len()];
    let (mut d, mut d64) = (vec![0f32; xs.len()], vec![0f64; xs.len()]);
    cpu_gelu_backward(&mut d, &ones, &xs);
    cpu_gelu_backward(&mut d64, &vec![1f64; xs.len()], &x64);
    for i in 0..xs.len() {
        // f32 arithmetic around the tanh costs a few ulps; in the negative tail (x < -4) the
        // gradient's 1 - tanh² is a few multiples of f32's step below 1 (6e-8), times x and the
        // cubic's slope (up to 60): absolute errors up to 4e-6, as with any f32 tanh.
        let tol = |v: f64| 1e-6 * v.abs() + 4e-6;
        assert!(
            (y[i] as f64 - y64[i]).abs() <= tol(y64[i]),
            "gelu({}) = {}, exact {}",
            xs[i],
            y[i],
            y64[i]
        );
        assert!(
            (d[i] as f64 - d64[i]).abs() <= tol(d64[i]),
            "gelu'({}) = {}, exact {}",
            xs[i],
            d[i],
            d64[i]
        );
    }
}

/// fast_exp within 2 ulps where e^x is a normal float above e^−87, 0 below e^−87 (an absolute
/// error under 1.7e−38), infinity past f32::MAX.
#[test]
fn fast_exp_is_within_2_ulps_over_all_of_f32() {
    let check = |x: f32| -> f64 {
        let exact = (x as f64).exp();
        let got = fast_exp(x) as f64;
        if x < -87.0 {
            assert!(got == 0.0 && exact < 1.7e-38, "exp({x:e}): {got:e}");
            return 0.0;
        }
        if exact > f32::MAX as f64 {
            assert!(got.is_infinite(), "exp({x:e}): {got:e}");
            return 0.0;
        }
        let e = exact as f32;
        let ulp = (f32::from_bits(e.to_bits() + 1) - e) as f64;
        let err = (got - exact).abs() / ulp;
        assert!(err <= 2.0, "exp({x:e}): {got:e}, exact {exact:e}, {err:.2} ulps");
        err
    };
    let mut worst = 0f64;
    for bits in (0..0x7f80_0000u32).step_by(97) {
        let x = f32::from_bits(bits);
        worst = worst.max(check(x)).max(check(-x));
    }
    for x in [
        -87.0f32,
        -86.999,
        -87.001,
        88.72,
        88.722_84,
        88.722_85,
        0.0,
        -0.0,
        1.0,
        -1.0,
        0.346_573_6,
        -0.346_573_6,
    ] {
        worst = worst.max(check(x));
    }
    eprintln!("fast exp: worst error {worst:.2} ulps");
    assert_eq!(fast_exp(f32::INFINITY), f32::INFINITY);
    assert_eq!(fast_exp(f32::NEG_INFINITY), 0.0);
    assert!(fast_exp(f32::NAN).is_nan());
    assert_eq!(fast_exp(0.0), 1.0);
}
