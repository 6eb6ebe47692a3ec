//! The two numeric classes of a backend, and the arithmetic of the fast one that both backends
//! share (ARCHITECTURE.md, "Numeric classes").
//!
//! - **strict**: every op in f32, every candidate kernel giving the same bits, the CPU a bitwise
//!   twin of the GPU where the op promises it. The default, and what the tests and the page use.
//! - **fast**: matrix products of at least [`FAST_MIN`] in every dimension, and attention's
//!   products for heads of 16 to 64 dimensions (`ops::attention::fast`), take f16 multiplicands
//!   into f32 sums, on the GPU's cooperative matrices (tensor cores). Everything else (weights,
//!   optimizer state, norms, softmax statistics, residuals, losses, the products below the
//!   minimum) stays f32. Each operand is first scaled by a power of two chosen from its largest
//!   magnitude ([`scale_exponent`]), so that nothing overflows f16 and small gradients do not
//!   flush; the sum is scaled back exactly. The CPU twin ([`round_operand`] and an f32 GEMM)
//!   rounds the operands the same way; the tensor cores' order of summation is their own, so
//!   the GPU is held to a bound against the twin, not to its bits.

use std::fmt;
use std::str::FromStr;

/// A backend's numeric class for matrix products.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Precision {
    /// f32 everywhere, bit for bit.
    #[default]
    Strict,
    /// f16 multiplicands, f32 sums, on cooperative matrices.
    Fast,
}

impl Precision {
    pub const ALL: [Precision; 2] = [Precision::Strict, Precision::Fast];

    /// Its name on the command line and in config files.
    pub fn name(self) -> &'static str {
        match self {
            Precision::Strict => "strict",
            Precision::Fast => "fast",
        }
    }

    pub fn is_strict(&self) -> bool {
        *self == Precision::Strict
    }
}

impl fmt::Display for Precision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Precision {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Precision::ALL
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| format!("no precision class named `{s}`; choose strict or fast"))
    }
}

/// Products with M, N or K below this stay f32 in the fast class: the smallest cooperative
/// tile is 16 wide, and the products that small (hyper-connections' n×n mixing, 1×n gates) cost
/// nothing and keep their precision.
pub const FAST_MIN: usize = 16;

/// log2 of the largest scaled magnitude: an operand's amax is scaled into (2^13, 2^14], a
/// quarter of f16's 65504, so that staging never rounds up to infinity.
pub const SCALED_LOG2: i32 = 14;

/// Scale exponents are kept where 2^s and 2^−s are normal f32s, so that both the scale and the
/// unscale are exact multiplications.
pub const MAX_SCALE_EXPONENT: i32 = 126;

/// The exponent s with which an operand whose largest magnitude is `amax` is staged as
/// f16(2^s · x): s = 14 − ⌈log2 amax⌉, clamped to ±[`MAX_SCALE_EXPONENT`]; 0 for an operand of
/// zeros. None when `amax` is not finite: the product has met a NaN or an infinity.
///
/// Computed from amax's bits, as the shader computes it (`fast_exponent` in
/// shaders/matmul_fast.wgsl), so that both backends choose the same s.
pub fn scale_exponent(amax: f32) -> Option<i32> {
    let bits = amax.abs().to_bits();
    if bits >= 0x7f80_0000 {
        return None;
    }
    if bits == 0 {
        return Some(0);
    }
    let (e, m) = ((bits >> 23) as i32, bits & 0x7f_ffff);
    // A subnormal amax is below 2^−126: the largest scale.
    if e == 0 {
        return Some(MAX_SCALE_EXPONENT);
    }
    let ceil_log2 = e - 127 + (m != 0) as i32;
    Some((SCALED_LOG2 - ceil_log2).clamp(-MAX_SCALE_EXPONENT, MAX_SCALE_EXPONENT))
}

/// The exponent with which the fast attention stages its gradient of the logits,
/// dS = P·(dP − delta): |dS| ≤ 2·Dh·amax(dout)·amax(v) ≤ 2·Dh·2^(28 − sQ − sD), each amax being
/// at most 2^(14 − s) once scaled, so sS = sQ + sD − 15 − ⌈log2 Dh⌉ keeps it within 2^14.
/// `ds_exponent` in shaders/attention_fast.wgsl computes the same.
pub fn gradient_exponent(sq: i32, sd: i32, dh: usize) -> i32 {
    let ceil_log2 = dh.max(1).next_power_of_two().trailing_zeros() as i32;
    (sq + sd - SCALED_LOG2 - 1 - ceil_log2).clamp(-MAX_SCALE_EXPONENT, MAX_SCALE_EXPONENT)
}

/// 2^s as an f32, exactly, for |s| ≤ [`MAX_SCALE_EXPONENT`].
pub fn pow2(s: i32) -> f32 {
    debug_assert!(s.abs() <= MAX_SCALE_EXPONENT);
    f32::from_bits(((s + 127) as u32) << 23)
}

/// x · 2^s rounded to the nearest f16 (ties to even), as an f32: what the fast class multiplies.
pub fn round_operand(x: f32, s: i32) -> f32 {
    half::f16::from_f32(x * pow2(s)).to_f32()
}

/// The largest magnitude of `values`, from their bits: any NaN or infinity makes it
/// non-finite. Max is exact, so any order or split of the values gives the same.
pub fn amax(values: impl IntoIterator<Item = f32>) -> f32 {
    f32::from_bits(values.into_iter().map(|x| x.to_bits() & 0x7fff_ffff).max().unwrap_or(0))
}

/// The bound the fast class's products keep against their CPU twin, per element: with
/// `p` = Σ|â|·|b̂| (the twin's sum of magnitudes, unscaled), |gpu − twin| ≤ `fast_bound(k, p)`.
///
/// The twin's and the GPU's operands are the same f16 values only if both round to nearest;
/// WGSL leaves the f32→f16 conversion's rounding to the implementation (one f16 ulp either way,
/// WebGPU CTS `correctlyRoundedF16`), which the 2·2^−11 term allows. The rest is f32
/// accumulation in any order with truncation at each add, (K + 32)·2^−22 (first-order block-FMA
/// analysis, Blanchard et al., with a 2× margin): the tensor cores sum in their own order and
/// round toward zero inside.
pub fn fast_bound(k: usize, p: f64) -> f64 {
    ((k as f64 + 32.0) * 2f64.powi(-22) + 2.0 * 2f64.powi(-11)) * p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for p in Precision::ALL {
            assert_eq!(p.name().parse::<Precision>(), Ok(p));
        }
        assert!("f16".parse::<Precision>().unwrap_err().contains("strict or fast"));
    }

    /// The scaled amax lands in (2^13, 2^14] wherever the clamp allows, exactly at powers of
    /// two and just past them.
    #[test]
    fn the_scale_puts_amax_just_below_2_to_the_14() {
        for amax in [1.0f32, 1.5, 2.0, 2.000_001, 0.02, 3e-7, 65504.0, 1e6, 3e30, f32::MAX] {
            let s = scale_exponent(amax).unwrap();
            let scaled = amax as f64 * 2f64.powi(s);
            assert!(scaled > 8192.0 && scaled <= 16384.0, "{amax}: s {s}, scaled {scaled}");
            assert!(half::f16::from_f32(amax * pow2(s)).is_finite(), "{amax}");
        }
        assert_eq!(scale_exponent(1.0), Some(14));
        assert_eq!(scale_exponent(1.000_000_1), Some(13));
        assert_eq!(scale_exponent(0.0), Some(0));
        assert_eq!(scale_exponent(-0.0), Some(0));
        // Below 2^−112 the clamp holds s at 126.
        assert_eq!(scale_exponent(1e-36), Some(MAX_SCALE_EXPONENT));
        assert_eq!(scale_exponent(f32::from_bits(1)), Some(MAX_SCALE_EXPONENT));
        for bad in [f32::INFINITY, f32::NEG_INFINITY, f32::NAN] {
            assert_eq!(scale_exponent(bad), None, "{bad}");
        }
    }

    /// dS's staged bound is 2^14: at Dh 64 and scales 14 (amax 1), 2·64·1·1 = 2^7 goes to 2^14.
    #[test]
    fn the_gradient_exponent_stages_the_bound_at_2_to_the_14() {
        assert_eq!(gradient_exponent(14, 14, 64), 7);
        assert_eq!(gradient_exponent(14, 14, 48), 7);
        assert_eq!(gradient_exponent(14, 14, 16), 9);
        assert_eq!(gradient_exponent(126, 126, 16), MAX_SCALE_EXPONENT);
        assert_eq!(gradient_exponent(-126, -126, 64), -MAX_SCALE_EXPONENT);
    }

    #[test]
    fn amax_sees_every_non_finite_value() {
        assert_eq!(amax([1.0, -3.0, 2.0]), 3.0);
        assert_eq!(amax([]), 0.0);
        assert!(!amax([1.0, f32::NAN, 2.0]).is_finite());
        assert!(!amax([f32::NEG_INFINITY, 2.0]).is_finite());
    }

    /// Scaling by a power of two changes no significand bit: in f16's normal range the operand
    /// comes back as f16's rounding of the unscaled value.
    #[test]
    fn rounding_is_f16_at_the_scaled_exponent() {
        for (x, s) in [(0.1f32, 14), (-0.333_333_34, 15), (1e-6, 34), (1234.567, 0)] {
            let back = round_operand(x, s) * pow2(-s);
            let rel = ((back - x) / x).abs();
            assert!(rel <= 2f32.powi(-11), "{x} at {s}: {back} (rel {rel})");
        }
        // Integers of magnitude up to 2^11 are exact at any scale that keeps them normal.
        for x in -2048..=2048 {
            assert_eq!(round_operand(x as f32, 3) * pow2(-3), x as f32);
        }
    }
}
