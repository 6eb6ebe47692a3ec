//! Group-sequential testing helpers for experiment sweeps.
//!
//! A sweep that looks at its results after 16, 32 and 64 seeds and stops as soon as
//! something "looks significant" inflates its false-positive rate unless each look uses a
//! stricter critical value. This module computes those critical values (Pocock and
//! O'Brien–Fleming shapes), repeated p-values, t↔z conversions so small-seed t statistics
//! can be compared against z-scale boundaries, and Holm's correction across many sweeps.
//!
//! Information fractions `t_1 < … < t_K = 1` are sample sizes divided by the final sample
//! size. No function panics: invalid input gives `None` or `NaN`.

use statrs::function::beta::checked_beta_reg;
use statrs::function::erf::{erf_inv, erfc, erfc_inv};
use std::f64::consts::{PI, SQRT_2};

/// Grid intervals per standard deviation of the narrowest Gaussian kernel involved:
/// keeps the error below 2e-6 (1e-7 near usual boundaries) while K = 10 takes < 1 ms.
const GRID_PER_SD: f64 = 8.0;
/// Beyond this many SDs of B(t_k) the (sub-)density is below 1e-17 and is dropped.
const SUPPORT_SD: f64 = 9.0;
/// Caps the work for pathological fractions (e.g. two looks 1e-9 apart).
const MAX_INTERVALS: usize = 4000;

/// Shape of the group-sequential boundary: how the critical value varies across looks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Boundary {
    /// z_k = c·sqrt(t_K / t_k): very strict early, close to the fixed test at the end.
    OBrienFleming,
    /// z_k = c: the same critical value at every look, so early stopping is easier.
    Pocock,
}

impl Boundary {
    /// Human-readable name for reports.
    pub fn name(self) -> &'static str {
        match self {
            Boundary::OBrienFleming => "O'Brien–Fleming",
            Boundary::Pocock => "Pocock",
        }
    }

    /// w(t): the look-k critical value is c·w(t_k); always ≥ 1 and equal to 1 at the last look.
    fn shape(self, t: f64, t_last: f64) -> f64 {
        match self {
            Boundary::OBrienFleming => (t_last / t).sqrt(),
            Boundary::Pocock => 1.0,
        }
    }
}

/// Fractions must be finite, in (0, 1], strictly increasing and end at 1, so that the
/// Brownian-motion model and the boundary shapes are well defined.
fn valid_fractions(fractions: &[f64]) -> bool {
    let Some(&last) = fractions.last() else {
        return false;
    };
    fractions.first().is_some_and(|&t| t > 0.0)
        && fractions.windows(2).all(|w| w[0] < w[1])
        && (last - 1.0).abs() <= 1e-12
}

fn norm_pdf(x: f64) -> f64 {
    (-0.5 * x * x).exp() / (2.0 * PI).sqrt()
}

/// Upper tail P(Z ≥ x), via erfc so it keeps relative precision far out in the tail.
fn norm_sf(x: f64) -> f64 {
    0.5 * erfc(x / SQRT_2)
}

/// Two-sided normal critical value: P(|Z| ≥ z) = p.
fn norm_two_sided_z(p: f64) -> f64 {
    SQRT_2 * erfc_inv(p)
}

/// Simpson grid on [-a, a]: nodes and weights, with spacing at most `h`.
fn simpson_grid(a: f64, h: f64) -> Vec<(f64, f64)> {
    let raw = (2.0 * a / h).ceil();
    let n = if raw.is_finite() {
        (raw as usize).clamp(2, MAX_INTERVALS)
    } else {
        MAX_INTERVALS
    };
    let n = n + n % 2;
    let step = 2.0 * a / n as f64;
    (0..=n)
        .map(|i| {
            let coef = if i == 0 || i == n {
                1.0
            } else if i % 2 == 1 {
                4.0
            } else {
                2.0
            };
            (-a + step * i as f64, coef * step / 3.0)
        })
        .collect()
}

/// Probability under H0 that a two-sided group-sequential test with critical values
/// c·w(t_k) rejects at some look. This is the type I error of the design, and, viewed as a
/// function of c, the quantity that both `boundaries` and `repeated_p_value` invert.
///
/// Uses the Armitage–McPherson–Rowe recursion: the sub-density of S_k = B(t_k) on the
/// continuation region is propagated look by look with Simpson's rule (absolute error
/// < 2e-6, ~1e-7 for c ≥ 2). Returns NaN for invalid fractions or NaN `c`; 1 for c ≤ 0.
pub fn crossing_probability(kind: Boundary, fractions: &[f64], c: f64) -> f64 {
    if !valid_fractions(fractions) || c.is_nan() {
        return f64::NAN;
    }
    if c <= 0.0 {
        return 1.0;
    }
    if c.is_infinite() {
        return 0.0;
    }
    let t_last = fractions[fractions.len() - 1];
    // Work on the S = B(t) scale, where increments are independent N(0, Δt).
    let bound: Vec<f64> = fractions
        .iter()
        .map(|&t| c * kind.shape(t, t_last) * t.sqrt())
        .collect();
    let sd: Vec<f64> = fractions
        .iter()
        .scan(0.0, |prev, &t| {
            let d = (t - *prev).sqrt();
            *prev = t;
            Some(d)
        })
        .collect();

    let mut crossed = 2.0 * norm_sf(bound[0] / sd[0]);
    // (node, Simpson weight × sub-density of S_{k-1} at node) for the previous look.
    let mut prev: Vec<(f64, f64)> = Vec::new();
    for k in 1..fractions.len() {
        // The grid must resolve both the kernel that built this density and the next one.
        let h = sd[k - 1].min(sd[k]) / GRID_PER_SD;
        let half_width = bound[k - 1].min(SUPPORT_SD * fractions[k - 1].sqrt());
        let grid = simpson_grid(half_width, h);
        let cur: Vec<(f64, f64)> = grid
            .iter()
            .map(|&(x, w)| {
                let density = if k == 1 {
                    norm_pdf(x / sd[0]) / sd[0]
                } else {
                    prev.iter()
                        .map(|&(u, wf)| wf * norm_pdf((x - u) / sd[k - 1]))
                        .sum::<f64>()
                        / sd[k - 1]
                };
                (x, w * density)
            })
            .collect();
        crossed += cur
            .iter()
            .map(|&(x, wf)| wf * (norm_sf((bound[k] - x) / sd[k]) + norm_sf((bound[k] + x) / sd[k])))
            .sum::<f64>();
        prev = cur;
    }
    crossed.clamp(0.0, 1.0)
}

/// z-scale critical values b_1..b_K whose overall two-sided type I error is `alpha`, so a
/// sweep may stop at look k once |Z_k| ≥ b_k without inflating false positives.
/// `None` for invalid fractions or `alpha` outside (0, 1).
pub fn boundaries(kind: Boundary, fractions: &[f64], alpha: f64) -> Option<Vec<f64>> {
    if !(valid_fractions(fractions) && alpha > 0.0 && alpha < 1.0) {
        return None;
    }
    // Since w_k ≥ 1 and w_K = 1, c lies between the single-look and Bonferroni values.
    let mut lo = norm_two_sided_z(alpha);
    let mut hi = norm_two_sided_z(alpha / fractions.len() as f64);
    while hi - lo > 1e-7 {
        let mid = 0.5 * (lo + hi);
        if crossing_probability(kind, fractions, mid) > alpha {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    let c = 0.5 * (lo + hi);
    let t_last = fractions[fractions.len() - 1];
    Some(fractions.iter().map(|&t| c * kind.shape(t, t_last)).collect())
}

/// Smallest design alpha at which the test would have rejected at or before the last
/// observed look, given |z| at looks 1..m (m ≤ K). Reporting this instead of the nominal
/// p keeps a sweep that stopped early honest about its multiple looks.
///
/// Because it maximises |z_j|/w_j over j ≤ m, it equals the minimum over j ≤ m of Jennison
/// & Turnbull's per-look repeated p-value; it is ≥ the nominal p of the look attaining that
/// maximum (usually the stopping look) and ≤ 1. `None` for invalid fractions, no
/// statistics, more statistics than looks, or a NaN statistic.
pub fn repeated_p_value(kind: Boundary, fractions: &[f64], z_seen: &[f64]) -> Option<f64> {
    if !valid_fractions(fractions)
        || z_seen.is_empty()
        || z_seen.len() > fractions.len()
        || z_seen.iter().any(|z| z.is_nan())
    {
        return None;
    }
    let t_last = fractions[fractions.len() - 1];
    let c = z_seen
        .iter()
        .zip(fractions)
        .map(|(z, &t)| z.abs() / kind.shape(t, t_last))
        .fold(0.0, f64::max);
    Some(crossing_probability(kind, fractions, c))
}

/// (P(|T| ≥ t), P(|T| < t)) for Student's t, each from its own incomplete beta so that
/// neither loses precision by subtraction (needed for both tiny and huge t).
fn t_two_sided_parts(t_abs: f64, df: f64) -> (f64, f64) {
    let t2 = t_abs * t_abs;
    let x = df / (df + t2);
    let y = 1.0 / (1.0 + df / t2);
    let tail = checked_beta_reg(0.5 * df, 0.5, x).unwrap_or(f64::NAN);
    let central = checked_beta_reg(0.5, 0.5 * df, y).unwrap_or(f64::NAN);
    (tail.clamp(0.0, 1.0), central.clamp(0.0, 1.0))
}

/// Above this df statrs' incomplete beta loses accuracy, while the normal is within ~3e-7.
const NORMAL_DF: f64 = 1e7;

fn df_invalid(df: f64) -> bool {
    df.is_nan() || df <= 0.0
}

/// Two-sided p-value of a Student's t statistic, e.g. a mean difference over few seeds.
/// NaN for NaN input or df ≤ 0; very large df (incl. ∞) gives the normal p.
pub fn two_sided_p_t(t: f64, df: f64) -> f64 {
    if t.is_nan() || df_invalid(df) {
        return f64::NAN;
    }
    if df > NORMAL_DF {
        return erfc(t.abs() / SQRT_2);
    }
    t_two_sided_parts(t.abs(), df).0
}

/// The z with the same two-sided tail probability as Student's t with `df` degrees of
/// freedom (sign kept), so t statistics from a few seeds can be compared against z-scale
/// boundaries. NaN for NaN input or df ≤ 0; |t| beyond ~1e154 (t² overflows) gives ±∞.
pub fn t_to_z(t: f64, df: f64) -> f64 {
    if t.is_nan() || df_invalid(df) {
        return f64::NAN;
    }
    if df > NORMAL_DF || t == 0.0 {
        return t;
    }
    let (tail, central) = t_two_sided_parts(t.abs(), df);
    let z = if tail < 0.5 {
        norm_two_sided_z(tail)
    } else {
        SQRT_2 * erf_inv(central)
    };
    z.copysign(t)
}

/// Inverse of `t_to_z`: the t critical value matching a z boundary, for repeated
/// confidence intervals (mean ± z_to_t(z_k, n − 1)·sd/√n). NaN for NaN input or df ≤ 0.
pub fn z_to_t(z: f64, df: f64) -> f64 {
    if z.is_nan() || df_invalid(df) {
        return f64::NAN;
    }
    if df > NORMAL_DF || z == 0.0 || z.is_infinite() {
        return z;
    }
    // |t| ≥ |z| always (heavier tails); double until bracketed, then bisect geometrically
    // because the answer can be astronomically large for df = 1.
    let target = z.abs();
    let mut lo = target;
    let mut hi = 2.0 * target;
    while t_to_z(hi, df) < target && hi.is_finite() {
        lo = hi;
        hi *= 2.0;
    }
    if !hi.is_finite() {
        return f64::INFINITY.copysign(z);
    }
    for _ in 0..200 {
        let mid = (lo * hi).sqrt();
        if mid <= lo || mid >= hi {
            break;
        }
        if t_to_z(mid, df) < target {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    (0.5 * (lo + hi)).copysign(z)
}

/// Holm's step-down adjusted p-values, in input order: controls the family-wise error
/// across several sweeps while being uniformly more powerful than Bonferroni.
///
/// A NaN p-value (e.g. a failed run) is ordered as if it were 1, still counts toward m
/// (conservative: the hypothesis was tested), and is returned as NaN. Other values are
/// clamped to [0, 1].
pub fn holm(p: &[f64]) -> Vec<f64> {
    let key = |x: f64| if x.is_nan() { 1.0 } else { x.clamp(0.0, 1.0) };
    let m = p.len();
    let mut order: Vec<usize> = (0..m).collect();
    order.sort_by(|&a, &b| key(p[a]).total_cmp(&key(p[b])));
    let mut adjusted = vec![f64::NAN; m];
    let mut running_max = 0.0_f64;
    for (rank, &i) in order.iter().enumerate() {
        running_max = running_max.max(((m - rank) as f64 * key(p[i])).min(1.0));
        if !p[i].is_nan() {
            adjusted[i] = running_max;
        }
    }
    adjusted
}

#[cfg(test)]
mod tests {
    use super::*;

    fn equal(k: usize) -> Vec<f64> {
        (1..=k).map(|i| i as f64 / k as f64).collect()
    }
    const SEEDS: [f64; 3] = [0.25, 0.5, 1.0]; // looks at 16, 32, 64 seeds

    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol
    }

    #[test]
    fn pocock_matches_jennison_turnbull_table_2_1() {
        for (k, want) in [(2, 2.178), (3, 2.289), (4, 2.361), (5, 2.413), (10, 2.555)] {
            let z = boundaries(Boundary::Pocock, &equal(k), 0.05).unwrap();
            assert!(z.iter().all(|&zk| close(zk, want, 0.002)), "K={k}: {z:?}");
        }
    }

    #[test]
    fn obrien_fleming_matches_jennison_turnbull_table_2_3() {
        for (k, want) in [(2, 1.977), (3, 2.004), (4, 2.024), (5, 2.040), (10, 2.087)] {
            let z = boundaries(Boundary::OBrienFleming, &equal(k), 0.05).unwrap();
            for (j, zj) in z.iter().enumerate() {
                let expect = want * (k as f64 / (j + 1) as f64).sqrt();
                assert!(close(*zj, expect, 0.002 * expect / want), "K={k}: {z:?}");
            }
        }
        let z = boundaries(Boundary::OBrienFleming, &equal(3), 0.05).unwrap();
        for (got, want) in z.iter().zip([3.471, 2.454, 2.004]) {
            assert!(close(*got, want, 0.002), "{z:?}");
        }
    }

    #[test]
    fn single_look_is_the_fixed_test() {
        for kind in [Boundary::Pocock, Boundary::OBrienFleming] {
            let z = boundaries(kind, &[1.0], 0.05).unwrap();
            assert!(close(z[0], 1.959964, 1e-5), "{z:?}");
            assert!(close(crossing_probability(kind, &[1.0], 1.96), 0.049996, 1e-5));
        }
    }

    #[test]
    fn unequal_looks_hit_alpha() {
        for kind in [Boundary::Pocock, Boundary::OBrienFleming] {
            for alpha in [0.01, 0.05, 0.2] {
                let z = boundaries(kind, &SEEDS, alpha).unwrap();
                let p = crossing_probability(kind, &SEEDS, z[2]);
                assert!(close(p, alpha, 1e-4), "{kind:?} {alpha}: {p}");
            }
        }
    }

    /// splitmix64 + Box–Muller: a reproducible normal stream without a rand dependency.
    struct Normals(u64);
    impl Normals {
        fn uniform(&mut self) -> f64 {
            self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^= z >> 31;
            ((z >> 11) as f64 + 0.5) / (1u64 << 53) as f64
        }
        fn normal(&mut self) -> f64 {
            let (u, v) = (self.uniform(), self.uniform());
            (-2.0 * u.ln()).sqrt() * (2.0 * PI * v).cos()
        }
    }

    #[test]
    fn crossing_probability_matches_monte_carlo() {
        const PATHS: usize = 200_000;
        let mut rng = Normals(20240601);
        // Per path, the largest c that would have been crossed: max_k |Z_k| / w_k.
        let mut max_ratio = [Vec::with_capacity(PATHS), Vec::with_capacity(PATHS)];
        let kinds = [Boundary::OBrienFleming, Boundary::Pocock];
        for _ in 0..PATHS {
            let (mut s, mut t_prev) = (0.0, 0.0);
            let mut best = [0.0_f64; 2];
            for &t in &SEEDS {
                s += (t - t_prev).sqrt() * rng.normal();
                t_prev = t;
                for (b, kind) in best.iter_mut().zip(kinds) {
                    *b = b.max((s / t.sqrt()).abs() / kind.shape(t, 1.0));
                }
            }
            max_ratio[0].push(best[0]);
            max_ratio[1].push(best[1]);
        }
        for (kind, ratios) in kinds.iter().zip(&max_ratio) {
            let mut cs = vec![1.5, 2.5];
            cs.extend(boundaries(*kind, &SEEDS, 0.05).unwrap().last());
            for c in cs {
                let exact = crossing_probability(*kind, &SEEDS, c);
                let mc = ratios.iter().filter(|&&r| r >= c).count() as f64 / PATHS as f64;
                let se = (exact * (1.0 - exact) / PATHS as f64).sqrt();
                assert!(close(mc, exact, 3.0 * se), "{kind:?} c={c}: {exact} vs MC {mc}");
            }
        }
    }

    #[test]
    fn repeated_p_value_properties() {
        // K = 1: the ordinary two-sided normal p.
        for z in [0.5, 1.96, 3.0] {
            let p = repeated_p_value(Boundary::Pocock, &[1.0], &[z]).unwrap();
            assert!(close(p, erfc(z / SQRT_2), 1e-6), "{z}: {p}");
        }
        for kind in [Boundary::Pocock, Boundary::OBrienFleming] {
            // Monotone decreasing in |z|, and never below the nominal p of the stopping look.
            let mut last = 1.0;
            for i in 0..40 {
                let z = 0.1 * i as f64;
                let p = repeated_p_value(kind, &SEEDS, &[0.0, -z]).unwrap();
                assert!(p <= last + 1e-12 && p <= 1.0, "{kind:?} z={z}");
                assert!(p >= erfc(z / SQRT_2) - 1e-9, "{kind:?} z={z}");
                last = p;
            }
            // Sitting exactly on a boundary gives back the design alpha.
            let b = boundaries(kind, &SEEDS, 0.05).unwrap();
            for m in 1..=3 {
                let p = repeated_p_value(kind, &SEEDS, &b[..m]).unwrap();
                assert!(close(p, 0.05, 1e-6), "{kind:?} m={m}: {p}");
            }
        }
    }

    #[test]
    fn holm_hand_computed() {
        let adj = holm(&[0.01, 0.04, 0.03, 0.005]);
        for (a, want) in adj.iter().zip([0.03, 0.06, 0.06, 0.02]) {
            assert!(close(*a, want, 1e-12), "{adj:?}");
        }
        // m = 3: 0.02·3 = 0.06; the 1 stays 1; NaN stays NaN but counts toward m.
        let adj = holm(&[1.0, f64::NAN, 0.02]);
        assert_eq!(adj[0], 1.0);
        assert!(adj[1].is_nan());
        assert!(close(adj[2], 0.06, 1e-12));
        assert!(holm(&[]).is_empty());
    }

    #[test]
    fn t_and_z_conversions() {
        // t_{0.975, 7} = 2.364624
        assert!(close(t_to_z(2.364624, 7.0), 1.959964, 1e-5));
        assert!(close(t_to_z(-2.364624, 7.0), -1.959964, 1e-5));
        assert!(close(z_to_t(1.959964, 7.0), 2.364624, 1e-5));
        assert!(close(two_sided_p_t(2.364624, 7.0), 0.05, 1e-7));
        // t_{0.975, 1} = 12.7062 (Cauchy: tan(0.475π)).
        assert!(close(two_sided_p_t(12.706205, 1.0), 0.05, 1e-7));
        for df in [1.0, 3.0, 15.0, 63.0, 1e4] {
            for z in [-6.0, -1.96, -0.3, 1e-6, 0.7, 2.5, 8.0] {
                let t = z_to_t(z, df);
                assert!(t.abs() >= z.abs(), "df={df} z={z}");
                assert!(close(t_to_z(t, df), z, 1e-9 * z.abs().max(1.0)), "df={df} z={z} t={t}");
            }
        }
        assert_eq!(t_to_z(1.5, f64::INFINITY), 1.5);
        assert_eq!(z_to_t(1.5, 1e300), 1.5);
        assert!(close(two_sided_p_t(1.959964, 1e12), 0.05, 1e-7));
    }

    #[test]
    fn invalid_inputs_do_not_panic() {
        let bad: [&[f64]; 6] = [
            &[],
            &[0.5],
            &[0.5, 0.5, 1.0],
            &[0.0, 1.0],
            &[0.5, 1.5],
            &[f64::NAN, 1.0],
        ];
        for f in bad {
            assert!(boundaries(Boundary::Pocock, f, 0.05).is_none());
            assert!(crossing_probability(Boundary::Pocock, f, 2.0).is_nan());
            assert!(repeated_p_value(Boundary::Pocock, f, &[2.0]).is_none());
        }
        for alpha in [0.0, 1.0, -1.0, f64::NAN] {
            assert!(boundaries(Boundary::OBrienFleming, &SEEDS, alpha).is_none());
        }
        assert!(repeated_p_value(Boundary::Pocock, &SEEDS, &[]).is_none());
        assert!(repeated_p_value(Boundary::Pocock, &SEEDS, &[1.0; 4]).is_none());
        assert!(repeated_p_value(Boundary::Pocock, &SEEDS, &[f64::NAN]).is_none());
        assert_eq!(repeated_p_value(Boundary::Pocock, &SEEDS, &[f64::INFINITY]), Some(0.0));
        assert_eq!(crossing_probability(Boundary::Pocock, &SEEDS, -1.0), 1.0);
        // Looks almost on top of each other stay finite (grid is capped).
        let p = crossing_probability(Boundary::OBrienFleming, &[1e-9, 0.5, 1.0 - 1e-12, 1.0], 2.0);
        assert!((0.0..=1.0).contains(&p));
        for df in [0.0, -1.0, f64::NAN] {
            assert!(t_to_z(1.0, df).is_nan() && z_to_t(1.0, df).is_nan());
            assert!(two_sided_p_t(1.0, df).is_nan());
        }
        assert!(t_to_z(f64::NAN, 3.0).is_nan() && z_to_t(f64::NAN, 3.0).is_nan());
        assert_eq!(t_to_z(f64::INFINITY, 3.0), f64::INFINITY);
        assert_eq!(z_to_t(f64::NEG_INFINITY, 3.0), f64::NEG_INFINITY);
        assert_eq!(two_sided_p_t(f64::INFINITY, 3.0), 0.0);
        assert!(z_to_t(20.0, 1.0) > 1e80);
        assert_eq!(Boundary::OBrienFleming.name(), "O'Brien–Fleming");
        assert_eq!(Boundary::Pocock.name(), "Pocock");
    }
}
