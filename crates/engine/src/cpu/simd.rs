//! Wide vectors for the CPU's own loops, where the CPU has them.
//!
//! A release build targets the baseline x86-64 (SSE2, 4 floats a register), so a loop the
//! compiler vectorises uses 4 lanes even where the CPU has AVX2's 8. [`wide!`] compiles a
//! function twice, for the baseline and for AVX2, and picks at run time. Both compile the same
//! source, and Rust never reassociates or contracts float arithmetic (no FMA unless asked), so
//! both give the same bits: a loss is the same on any x86-64 CPU, whichever version ran.
//!
//! The loops are written for the vectoriser: fixed-size blocks of [`LANES`] values with their
//! partial sums in arrays, summed in a fixed order at the end.

/// Values a loop keeps side by side: two AVX2 registers of f32.
pub const LANES: usize = 16;

/// `fn name<T: Scalar>(args) -> ret { body }`, compiled for the baseline and for AVX2, the
/// AVX2 version chosen where the CPU has it (the check is a cached load). Call it on a row or a
/// chunk of rows, not a value: it is not inlined into its caller.
macro_rules! wide {
    ($(#[$attr:meta])* $vis:vis fn $name:ident<$t:ident: Scalar>($($arg:ident: $ty:ty),* $(,)?) $(-> $ret:ty)? $body:block) => {
        $(#[$attr])*
        #[allow(clippy::too_many_arguments)]
        $vis fn $name<$t: $crate::ops::Scalar>($($arg: $ty),*) $(-> $ret)? {
            #[inline(always)]
            #[allow(clippy::too_many_arguments)]
            fn body<$t: $crate::ops::Scalar>($($arg: $ty),*) $(-> $ret)? $body
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx2")]
                #[allow(clippy::too_many_arguments)]
                unsafe fn avx2<$t: $crate::ops::Scalar>($($arg: $ty),*) $(-> $ret)? {
                    body($($arg),*)
                }
                if std::is_x86_feature_detected!("avx2") {
                    // SAFETY: the CPU has AVX2, checked just above.
                    return unsafe { avx2($($arg),*) };
                }
            }
            body($($arg),*)
        }
    };
}
pub(crate) use wide;

/// Σ f(x_i), in [`LANES`] partial sums (value i into lane i mod LANES) added in lane order:
/// the order is the source's, so every build and CPU gives the same bits.
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
    acc.iter().fold(T::zero(), |s, &a| s + a)
}

/// out = Σ parts, added in the order given: per-chunk partial sums (a key or gain gradient)
/// reduced so that the result does not depend on how threads ran the chunks.
pub fn add_in_order<T: crate::ops::Scalar>(out: &mut [T], parts: impl IntoIterator<Item = Vec<T>>) {
    out.fill(T::zero());
    for part in parts {
        out.iter_mut().zip(&part).for_each(|(o, &p)| *o = *o + p);
    }
}
