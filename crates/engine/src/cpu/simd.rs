//! Wide vectors for the CPU's own loops, where the CPU has them.
//!
//! A release build targets the baseline x86-64 (SSE2, 4 floats a register), so a loop the
//! compiler vectorises uses 4 lanes even where the CPU has AVX2's 8 or AVX-512's 16. [`wide!`]
//! compiles a function more than once and picks at run time (the check is a cached load):
//!
//! - `fn f<T: Scalar>`: for the baseline, AVX2 and AVX-512. All compile the same source, and
//!   Rust never reassociates or contracts float arithmetic, so all give the same bits.
//! - `fn f<T: Scalar, M: Madd>`: its multiply-adds are `M::madd`. Separate (a·b, then + c) in
//!   the baseline build and wherever the CPU has no FMA, fused (one rounding) with AVX2 and FMA,
//!   or AVX-512 and FMA. The products of the residual matrix are multiply-adds end to end, and
//!   fused they run twice as many a cycle. A CPU with FMA and one without round them
//!   differently, as the GEMM crate's matmuls already do; on one CPU the same build always
//!   runs, so a seed's losses are the same bits run after run, whatever the thread count.
//!
//! The loops are written for the vectoriser: fixed-size blocks of [`LANES`] values with their
//! partial sums in arrays, summed in a fixed order at the end.

/// Values a loop keeps side by side: one AVX-512 register of f32, or two AVX2 ones.
pub const LANES: usize = 16;

/// `fn name<T: Scalar>(args) -> ret { body }` or `fn name<T: Scalar, M: Madd>(…)`, compiled for
/// the baseline and for the wider CPUs (see the module's documentation), the widest the CPU has
/// chosen at run time. Call it on a row or a chunk of rows, not a value: it is not inlined into
/// its caller.
macro_rules! wide {
    // Without multiply-adds: the same builds, whose `M` the body never names.
    ($(#[$attr:meta])* $vis:vis fn $name:ident<$t:ident: Scalar>($($arg:ident: $ty:ty),* $(,)?) $(-> $ret:ty)? $body:block) => {
        $crate::cpu::simd::wide! {
            $(#[$attr])* $vis fn $name<$t: Scalar, UnusedMadd: Madd>($($arg: $ty),*) $(-> $ret)? $body
        }
    };
    ($(#[$attr:meta])* $vis:vis fn $name:ident<$t:ident: Scalar, $m:ident: Madd>($($arg:ident: $ty:ty),* $(,)?) $(-> $ret:ty)? $body:block) => {
        $(#[$attr])*
        #[allow(clippy::too_many_arguments)]
        $vis fn $name<$t: $crate::ops::Scalar>($($arg: $ty),*) $(-> $ret)? {
            #[inline(always)]
            // A body without multiply-adds (the form without `M`) never names it.
            #[allow(clippy::too_many_arguments, clippy::extra_unused_type_parameters)]
            fn body<$t: $crate::ops::Scalar, $m: $crate::cpu::simd::Madd>($($arg: $ty),*) $(-> $ret)? $body
            #[cfg(target_arch = "x86_64")]
            {
                use $crate::cpu::simd::{Fused, FMA_WIDTH};
                #[target_feature(enable = "avx512f,avx2,fma")]
                #[allow(clippy::too_many_arguments)]
                unsafe fn avx512<$t: $crate::ops::Scalar>($($arg: $ty),*) $(-> $ret)? {
                    body::<$t, Fused<16>>($($arg),*)
                }
                #[target_feature(enable = "avx2,fma")]
                #[allow(clippy::too_many_arguments)]
                unsafe fn avx2<$t: $crate::ops::Scalar>($($arg: $ty),*) $(-> $ret)? {
                    body::<$t, Fused<8>>($($arg),*)
                }
                match FMA_WIDTH.get() {
                    // SAFETY: the CPU has these features, detected by `FMA_WIDTH`.
                    Some(16) => return unsafe { avx512($($arg),*) },
                    // SAFETY: as above.
                    Some(_) => return unsafe { avx2($($arg),*) },
                    None => {}
                }
            }
            body::<$t, $crate::cpu::simd::Separate>($($arg),*)
        }
    };
}
pub(crate) use wide;

/// How a `wide!` function's multiply-adds `a·b + c` round, and how wide the build's registers
/// are, so that a register block can keep enough independent sums in flight.
pub trait Madd {
    /// Floats in one vector register of this build.
    const REGISTER: usize;
    /// Whether it rounds a·b + c once (a build with FMA).
    const FUSED: bool;
    fn madd<T: crate::ops::Scalar>(a: T, b: T, c: T) -> T;
}

/// a·b rounded, then + c rounded: the baseline's (SSE2), and any CPU's without FMA.
pub struct Separate;

impl Madd for Separate {
    const REGISTER: usize = 4;
    const FUSED: bool = false;
    #[inline(always)]
    fn madd<T: crate::ops::Scalar>(a: T, b: T, c: T) -> T {
        a * b + c
    }
}

/// a·b + c rounded once, a single instruction: the AVX2 build (`Fused<8>`) and the AVX-512
/// one (`Fused<16>`), which differ in their blocks, not in their bits.
pub struct Fused<const REGISTER: usize>;

impl<const R: usize> Madd for Fused<R> {
    const REGISTER: usize = R;
    const FUSED: bool = true;
    #[inline(always)]
    fn madd<T: crate::ops::Scalar>(a: T, b: T, c: T) -> T {
        a.mul_add(b, c)
    }
}

/// acc[l] = M::madd(a[l], b[l], acc[l]) for each of the [`LANES`] lanes, as whole registers: the
/// FMA builds' f32 by their own instructions, which the vectoriser does not always find in a
/// block of them; the same bits as the loop.
#[inline(always)]
pub fn madd_lanes<T: crate::ops::Scalar, M: Madd>(acc: &mut [T; LANES], a: &[T; LANES], b: &[T; LANES]) {
    #[cfg(target_arch = "x86_64")]
    if M::FUSED && std::any::TypeId::of::<T>() == std::any::TypeId::of::<f32>() {
        let (acc, a, b) = (acc.as_mut_ptr().cast(), a.as_ptr().cast(), b.as_ptr().cast());
        // SAFETY: T is f32, so each is 16 f32; M is fused only in the builds that run where
        // the CPU has FMA with AVX2 (REGISTER 8) or AVX-512 (16), checked before they run.
        unsafe {
            if M::REGISTER == 16 {
                x86::fma16(acc, a, b)
            } else {
                x86::fma8x2(acc, a, b)
            }
        }
        return;
    }
    for l in 0..LANES {
        acc[l] = M::madd(a[l], b[l], acc[l]);
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    /// Sixteen f32 multiply-adds as one AVX-512 instruction.
    #[inline]
    #[target_feature(enable = "avx512f")]
    pub unsafe fn fma16(acc: *mut f32, a: *const f32, b: *const f32) {
        let r = _mm512_fmadd_ps(_mm512_loadu_ps(a), _mm512_loadu_ps(b), _mm512_loadu_ps(acc));
        _mm512_storeu_ps(acc, r);
    }

    /// Sixteen f32 multiply-adds as two AVX2 instructions.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn fma8x2(acc: *mut f32, a: *const f32, b: *const f32) {
        for h in [0, 8] {
            let r = _mm256_fmadd_ps(
                _mm256_loadu_ps(a.add(h)),
                _mm256_loadu_ps(b.add(h)),
                _mm256_loadu_ps(acc.add(h)),
            );
            _mm256_storeu_ps(acc.add(h), r);
        }
    }
}

/// The floats an FMA instruction of the chosen build takes: 16 (AVX-512 and FMA), 8 (AVX2 and
/// FMA) or None (the baseline), the widest this CPU has unless `RESMEM_CPU_BUILD` (`baseline`,
/// `avx2` or `avx512`) asks for a narrower one, to compare the builds on one machine (tests/
/// cpu_builds.rs). Chosen once a process.
#[cfg(target_arch = "x86_64")]
pub static FMA_WIDTH: FmaWidth = FmaWidth(std::sync::OnceLock::new());

#[cfg(target_arch = "x86_64")]
pub struct FmaWidth(std::sync::OnceLock<Option<u8>>);

#[cfg(target_arch = "x86_64")]
impl FmaWidth {
    #[inline]
    pub fn get(&self) -> Option<u8> {
        *self.0.get_or_init(|| {
            let fma = std::is_x86_feature_detected!("fma") && std::is_x86_feature_detected!("avx2");
            let widest = match (fma, std::is_x86_feature_detected!("avx512f")) {
                (false, _) => None,
                (true, false) => Some(8),
                (true, true) => Some(16),
            };
            let asked = match std::env::var("RESMEM_CPU_BUILD").as_deref() {
                Ok("baseline") => None,
                Ok("avx2") => Some(8),
                _ => Some(16),
            };
            widest.min(asked)
        })
    }
}

/// The build the `wide!` functions run on this CPU, for a run's description: a run's numerics
/// follow it, since the FMA builds round the residual matrix's products once.
pub fn build_name() -> &'static str {
    #[cfg(target_arch = "x86_64")]
    return match FMA_WIDTH.get() {
        Some(16) => "AVX-512",
        Some(_) => "AVX2",
        None => "baseline",
    };
    #[cfg(not(target_arch = "x86_64"))]
    "baseline"
}

/// Σ f(x_i), in [`LANES`] partial sums (value i into lane i mod LANES) added in halves: the
/// order is the source's, so every build and CPU gives the same bits.
#[inline(always)]
pub fn lane_sum<T: crate::ops::Scalar>(x: &[T], f: impl Fn(T) -> T) -> T {
    let mut acc = [T::zero(); LANES];
    let mut chunks = x.chunks_exact(LANES);
    for c in &mut chunks {
        for l in 0..LANES {
            acc[l] = acc[l] + f(c[l]);
        }
    }
    for (l, &v) in chunks.remainder().iter().enumerate() {
        acc[l] = acc[l] + f(v);
    }
    halves(acc, |a, b| a + b)
}

/// The lanes folded by `op` in halves: lane l with lane l + w for w = LANES/2, …, 1. A chain
/// log2(LANES) deep instead of LANES, in the same order in every build.
#[inline(always)]
pub fn halves<T: Copy>(mut acc: [T; LANES], op: impl Fn(T, T) -> T) -> T {
    let mut w = LANES / 2;
    while w > 0 {
        for l in 0..w {
            acc[l] = op(acc[l], acc[l + w]);
        }
        w /= 2;
    }
    acc[0]
}

/// The largest value, in [`LANES`] partial maxima: exact in any order, and a chain a lane
/// long instead of a value long.
#[inline(always)]
pub fn lane_max<T: crate::ops::Scalar>(x: &[T]) -> T {
    let mut acc = [T::neg_infinity(); LANES];
    let mut chunks = x.chunks_exact(LANES);
    for c in &mut chunks {
        for l in 0..LANES {
            acc[l] = acc[l].max(c[l]);
        }
    }
    for (l, &v) in chunks.remainder().iter().enumerate() {
        acc[l] = acc[l].max(v);
    }
    halves(acc, |a, b| a.max(b))
}

/// out = Σ parts, added in the order given: per-chunk partial sums (a key or gain gradient)
/// reduced so that the result does not depend on how threads ran the chunks.
pub fn add_in_order<T: crate::ops::Scalar>(out: &mut [T], parts: impl IntoIterator<Item = Vec<T>>) {
    out.fill(T::zero());
    for part in parts {
        out.iter_mut().zip(&part).for_each(|(o, &p)| *o = *o + p);
    }
}
