//! The statistics of seed-paired comparisons: Student's t interval on the paired differences,
//! a distribution-free interval for a median of ratios (which may be infinite: "never"), and
//! the number of seeds an observed effect needs to be resolved at 80% power.
//!
//! Why not a percentile bootstrap for the median: with 4 seeds it reports [min, max] as a 95%
//! interval, whose true coverage is 1 − 2·0.5⁴ = 87.5%. The order-statistic interval below has
//! at least its stated coverage for any distribution, and says "unbounded" below 6 seeds.

pub mod sequential;

use statrs::distribution::{ContinuousCDF, StudentsT};

/// Two-sided confidence of every interval.
pub const LEVEL: f64 = 0.95;
/// The power at which `seeds_for_power` resolves an effect.
pub const POWER: f64 = 0.80;
/// Past this many seeds, an effect is reported as needing "more".
pub const MAX_SEEDS: usize = 10_000;

/// The quantile `p` of Student's t with `df` degrees of freedom.
pub fn t_quantile(p: f64, df: f64) -> Option<f64> {
    let t = StudentsT::new(0.0, 1.0, df).ok()?;
    Some(t.inverse_cdf(p))
}

/// A mean and its two-sided `LEVEL` interval.
#[derive(Clone, Debug, PartialEq)]
pub struct MeanInterval {
    pub n: usize,
    pub mean: f64,
    /// The sample standard deviation (n − 1).
    pub sd: f64,
    pub low: f64,
    pub high: f64,
    /// The seeds a paired t-test needs to resolve an effect of this mean and sd at `POWER`;
    /// None when the mean is zero or it needs more than `MAX_SEEDS`.
    pub seeds_for_power: Option<usize>,
}

/// Student's t interval of the mean of `values` (the paired differences); None below 2 values
/// or with a non-finite one.
pub fn t_interval(values: &[f64]) -> Option<MeanInterval> {
    let n = values.len();
    if n < 2 || values.iter().any(|v| !v.is_finite()) {
        return None;
    }
    let mean = values.iter().sum::<f64>() / n as f64;
    let var = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
    let sd = var.sqrt();
    let half = t_quantile(0.5 + LEVEL / 2.0, (n - 1) as f64)? * sd / (n as f64).sqrt();
    Some(MeanInterval {
        n,
        mean,
        sd,
        low: mean - half,
        high: mean + half,
        seeds_for_power: seeds_for_power(mean, sd),
    })
}

/// Welch's interval of mean(a) − mean(b) for two independent samples.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Welch {
    pub difference: f64,
    pub low: f64,
    pub high: f64,
    /// Welch–Satterthwaite degrees of freedom.
    pub df: f64,
}

/// Welch's `LEVEL` interval of mean(a) − mean(b); None below 2 values in either sample, with a
/// non-finite one, or where both samples are constant.
pub fn welch_interval(a: &[f64], b: &[f64]) -> Option<Welch> {
    let moments = |x: &[f64]| {
        let n = x.len() as f64;
        let mean = x.iter().sum::<f64>() / n;
        (mean, x.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0) / n)
    };
    if a.len() < 2 || b.len() < 2 || a.iter().chain(b).any(|v| !v.is_finite()) {
        return None;
    }
    let ((ma, qa), (mb, qb)) = (moments(a), moments(b));
    let se2 = qa + qb;
    if se2 <= 0.0 {
        return None;
    }
    let df = se2 * se2 / (qa * qa / (a.len() - 1) as f64 + qb * qb / (b.len() - 1) as f64);
    let half = t_quantile(0.5 + LEVEL / 2.0, df)? * se2.sqrt();
    let difference = ma - mb;
    Some(Welch {
        difference,
        low: difference - half,
        high: difference + half,
        df,
    })
}

/// A least-squares line y = intercept + slope·x, each coefficient with its `LEVEL` t interval
/// (n − 2 degrees of freedom).
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Line {
    pub n: usize,
    pub slope: f64,
    pub slope_low: f64,
    pub slope_high: f64,
    pub intercept: f64,
    pub intercept_low: f64,
    pub intercept_high: f64,
}

/// The least-squares line through (x, y); None below 3 points, with a non-finite value, or
/// where x does not vary.
pub fn line(x: &[f64], y: &[f64]) -> Option<Line> {
    let n = x.len();
    if n < 3 || n != y.len() || x.iter().chain(y).any(|v| !v.is_finite()) {
        return None;
    }
    let mean = |v: &[f64]| v.iter().sum::<f64>() / n as f64;
    let (mx, my) = (mean(x), mean(y));
    let sxx: f64 = x.iter().map(|a| (a - mx).powi(2)).sum();
    if sxx <= 0.0 {
        return None;
    }
    let sxy: f64 = x.iter().zip(y).map(|(a, b)| (a - mx) * (b - my)).sum();
    let slope = sxy / sxx;
    let intercept = my - slope * mx;
    let residual: f64 = x.iter().zip(y).map(|(a, b)| (b - intercept - slope * a).powi(2)).sum();
    let s = (residual / (n - 2) as f64).sqrt();
    let t = t_quantile(0.5 + LEVEL / 2.0, (n - 2) as f64)?;
    let (se_slope, se_intercept) = (s / sxx.sqrt(), s * (1.0 / n as f64 + mx * mx / sxx).sqrt());
    Some(Line {
        n,
        slope,
        slope_low: slope - t * se_slope,
        slope_high: slope + t * se_slope,
        intercept,
        intercept_low: intercept - t * se_intercept,
        intercept_high: intercept + t * se_intercept,
    })
}

/// The smallest n at which a two-sided paired t-test at 1 − `LEVEL` detects the effect `mean`
/// with spread `sd` with probability `POWER`: the usual approximation
/// n ≥ ((t_{1−α/2, n−1} + t_{power, n−1}) · sd / |mean|)², solved by counting up.
pub fn seeds_for_power(mean: f64, sd: f64) -> Option<usize> {
    if mean == 0.0 || !mean.is_finite() || !sd.is_finite() {
        return None;
    }
    if sd == 0.0 {
        return Some(2);
    }
    let effect = mean.abs() / sd;
    (2..=MAX_SEEDS).find(|&n| {
        let df = (n - 1) as f64;
        match (t_quantile(0.5 + LEVEL / 2.0, df), t_quantile(POWER, df)) {
            (Some(a), Some(b)) => n as f64 >= ((a + b) / effect).powi(2),
            _ => false,
        }
    })
}

/// The median, where +∞ (an arm that never reached the target) sorts last.
pub fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    match n {
        0 => f64::NAN,
        _ if n % 2 == 1 => v[n / 2],
        _ if v[n / 2 - 1] == v[n / 2] => v[n / 2],
        _ => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// ln P(X ≤ j) for X ~ Binomial(n, 1/2), for j = 0, 1, …, n in turn. In log space: C(n, j)/2^n
/// underflows f64 past n = 1,074 seeds, where the sum in f64 was 0 for every j and the interval
/// below collapsed to the median.
fn log_binomial_half_cdfs(n: usize) -> impl Iterator<Item = f64> {
    let mut log_term = -(n as f64) * std::f64::consts::LN_2;
    let mut log_cdf = f64::NEG_INFINITY;
    (0..=n).map(move |j| {
        if j > 0 {
            log_term += ((n - j + 1) as f64 / j as f64).ln();
        }
        // ln(e^a + e^b), the larger first.
        let (hi, lo) = if log_cdf > log_term {
            (log_cdf, log_term)
        } else {
            (log_term, log_cdf)
        };
        log_cdf = hi + (lo - hi).exp().ln_1p();
        log_cdf
    })
}

/// P(X ≤ k) for X ~ Binomial(n, 1/2).
#[cfg(test)]
fn binomial_half_cdf(n: usize, k: usize) -> f64 {
    log_binomial_half_cdfs(n).nth(k).map_or(1.0, f64::exp)
}

/// The distribution-free `LEVEL` interval of the median: order statistics x₍ₖ₎ and x₍ₙ₊₁₋ₖ₎
/// with the largest k for which 2·P(Binomial(n, ½) ≤ k − 1) ≤ 1 − `LEVEL` (the sign test's
/// interval). Below 6 values no k qualifies, and the interval is (−∞, +∞). +∞ values sort last.
pub fn median_interval(values: &[f64]) -> (f64, f64) {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    let limit = ((1.0 - LEVEL) / 2.0).ln();
    // k qualifies when ln P(B ≤ k − 1) ≤ ln((1 − LEVEL)/2); the cdfs rise with k.
    let k = log_binomial_half_cdfs(n)
        .take(n / 2)
        .take_while(|&log_cdf| log_cdf <= limit)
        .count();
    match k {
        0 => (f64::NEG_INFINITY, f64::INFINITY),
        k => (v[k - 1], v[n - k]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol
    }

    /// Student's t quantiles from printed tables (e.g. NIST/SEMATECH's, 0.975 column).
    #[test]
    fn t_quantiles_match_the_tables() {
        for (df, want) in [(1.0, 12.706), (2.0, 4.303), (4.0, 2.776), (7.0, 2.365), (30.0, 2.042)] {
            let got = t_quantile(0.975, df).unwrap();
            assert!(close(got, want, 5e-4), "df {df}: {got} against {want}");
        }
        assert!(close(t_quantile(0.80, 7.0).unwrap(), 0.896, 5e-4));
    }

    /// By hand: a = 1, 2, 3 (mean 2, variance 1), b = 4, 6 (mean 5, variance 2); squared
    /// standard errors 1/3 and 1, df = (4/3)² / ((1/3)²/2 + 1²/1) = 1.777…/1.0555… = 1.68421;
    /// half-width t(0.975, 1.68421) · √(4/3).
    #[test]
    fn welch_interval_by_hand() {
        let w = welch_interval(&[1.0, 2.0, 3.0], &[4.0, 6.0]).unwrap();
        assert!(close(w.difference, -3.0, 1e-12));
        assert!(close(w.df, 1.684_210_526, 1e-8), "{}", w.df);
        let half = t_quantile(0.975, w.df).unwrap() * (4.0f64 / 3.0).sqrt();
        assert!(close(w.high - w.difference, half, 1e-12) && close(w.difference - w.low, half, 1e-12));
        // Between the tables' t for df 1 (12.706) and 2 (4.303).
        assert!(half > 4.303 * 1.1547 && half < 12.706 * 1.1547, "{half}");
        assert_eq!(welch_interval(&[1.0], &[2.0, 3.0]), None);
        assert_eq!(welch_interval(&[1.0, 1.0], &[2.0, 2.0]), None);
    }

    /// By hand: (0, 1), (1, 3), (2, 2), (3, 5): x̄ 1.5, ȳ 2.75, Sxx 5, Sxy 5.5, so slope 1.1 and
    /// intercept 1.1; residuals −0.1, +0.8, −1.3, +0.6 sum to 2.7 squared, s = √(2.7/2) =
    /// 1.161895; se(slope) = s/√5 = 0.519615, se(intercept) = s·√(1/4 + 2.25/5) = 0.972111;
    /// t(0.975, 2) = 4.302653.
    #[test]
    fn a_line_by_hand() {
        let l = line(&[0.0, 1.0, 2.0, 3.0], &[1.0, 3.0, 2.0, 5.0]).unwrap();
        assert!(close(l.slope, 1.1, 1e-12) && close(l.intercept, 1.1, 1e-12), "{l:?}");
        assert!(close(l.slope_high - l.slope, 4.302653 * 0.519615, 1e-5), "{l:?}");
        assert!(close(l.intercept - l.intercept_low, 4.302653 * 0.972111, 1e-5), "{l:?}");
        assert_eq!(line(&[1.0, 1.0, 1.0], &[1.0, 2.0, 3.0]), None);
        assert_eq!(line(&[1.0, 2.0], &[1.0, 2.0]), None);
    }

    /// The issue's own example, by hand: differences −0.074, −0.009, +0.008.
    /// mean = −0.025; sd = sqrt(((−0.049)² + 0.016² + 0.033²)/2) = sqrt(0.001873) = 0.0432782;
    /// half-width = 4.302653 · 0.0432782 / √3 = 0.107509; t = −0.025 / (0.0432782/√3) = −1.0005.
    #[test]
    fn paired_interval_by_hand() {
        let m = t_interval(&[-0.074, -0.009, 0.008]).unwrap();
        assert!(close(m.mean, -0.025, 1e-12));
        assert!(close(m.sd, 0.0432782, 1e-6), "{}", m.sd);
        assert!(close(m.low, -0.025 - 0.107509, 1e-5), "{}", m.low);
        assert!(close(m.high, -0.025 + 0.107509, 1e-5), "{}", m.high);
        assert!(m.low < 0.0 && m.high > 0.0, "not resolved");
        assert!(t_interval(&[1.0]).is_none());
        assert!(t_interval(&[1.0, f64::INFINITY]).is_none());
    }

    /// n for d = |mean|/sd = 1: ((t_.975 + t_.80)/1)² at df 9 is (2.262 + 0.883)² = 9.89 ≤ 10,
    /// and at df 8 (2.306 + 0.889)² = 10.21 > 9: so 10 seeds.
    #[test]
    fn seeds_for_power_by_hand() {
        assert_eq!(seeds_for_power(1.0, 1.0), Some(10));
        assert_eq!(seeds_for_power(-1.0, 1.0), Some(10));
        assert_eq!(seeds_for_power(0.0, 1.0), None);
        assert_eq!(seeds_for_power(1.0, 0.0), Some(2));
        // A tiny effect needs more than MAX_SEEDS.
        assert_eq!(seeds_for_power(1e-3, 1.0), None);
        // Large effects need few: d = 3 → (t + t)² with df 3: (3.182 + 0.978)² / 9 = 1.92 ≤ 4.
        assert!(seeds_for_power(3.0, 1.0).unwrap() <= 4);
    }

    #[test]
    fn medians_keep_never() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(median(&[1.0, f64::INFINITY, f64::INFINITY]), f64::INFINITY);
        assert_eq!(median(&[1.0, 2.0, f64::INFINITY, f64::INFINITY]), f64::INFINITY);
    }

    /// By hand: n = 8, P(B ≤ 0) = 1/256 and P(B ≤ 1) = 9/256, so k = 1 (2/256 ≤ 0.05 < 18/256):
    /// [min, max]. n = 10: P(B ≤ 1) = 11/1024, P(B ≤ 2) = 56/1024, so k = 2: [x₂, x₉].
    /// n = 5: 2/32 > 0.05, so unbounded.
    #[test]
    fn median_intervals_by_hand() {
        assert!(close(binomial_half_cdf(8, 1), 9.0 / 256.0, 1e-15));
        assert!(close(binomial_half_cdf(10, 2), 56.0 / 1024.0, 1e-15));
        let eight = [0.9, 0.7, 0.8, 1.2, 0.6, 0.75, 0.85, 0.95];
        assert_eq!(median_interval(&eight), (0.6, 1.2));
        let ten = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0];
        assert_eq!(median_interval(&ten), (2.0, 9.0));
        assert_eq!(
            median_interval(&[0.5, 0.6, 0.7, 0.8, 0.9]),
            (f64::NEG_INFINITY, f64::INFINITY)
        );
        // Never (+∞) on one of 8 seeds: the upper bound is unbounded.
        let mut never = eight;
        never[3] = f64::INFINITY;
        assert_eq!(median_interval(&never), (0.6, f64::INFINITY));
        // 30 values: k = 10 (2·P(B ≤ 9) = 0.0428 ≤ 0.05 < 2·P(B ≤ 10) = 0.0987).
        let thirty: Vec<f64> = (1..=30).map(f64::from).collect();
        assert_eq!(median_interval(&thirty), (10.0, 21.0));
    }

    /// Past 1,074 values 2^−n underflows f64, and the interval had collapsed to the median. At
    /// n = 2,000 the sign test's k is 956: 2·P(B ≤ 955) = 0.04655 ≤ 0.05 < 2·P(B ≤ 956) =
    /// 0.05170 (exact, from Python's integer `math.comb` sums over 2^2000), so the interval is
    /// [x₉₅₆, x₁₀₄₅]; and one that holds +∞ past the median stays unbounded above.
    #[test]
    fn median_intervals_past_a_thousand_values() {
        let many: Vec<f64> = (1..=2000).map(f64::from).collect();
        assert_eq!(median_interval(&many), (956.0, 1045.0));
        assert!(close(binomial_half_cdf(2000, 955), 0.04655282049178381 / 2.0, 1e-12));
        assert!(close(binomial_half_cdf(2000, 956), 0.025851105410910725, 1e-12));
        let mut never: Vec<f64> = (0..1100).map(|i| 0.9 + i as f64 * 1e-4).collect();
        for v in &mut never[560..] {
            *v = f64::INFINITY;
        }
        let (lo, hi) = median_interval(&never);
        assert!(lo < 0.96 && hi == f64::INFINITY, "[{lo}, {hi}]");
    }
}
