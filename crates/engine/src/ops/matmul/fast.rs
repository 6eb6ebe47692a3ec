//! The fast class's matmul (`crate::precision`): f16 multiplicands into f32 sums, each operand
//! scaled by a power of two from its largest magnitude. Its CPU twin here, and on the GPU the
//! scale pass (`shaders/fast_scale.wgsl`) and the cooperative-matrix kernel
//! (`shaders/matmul_fast.wgsl`), launched through `super::gpu`'s block splitting.

use super::MatmulDims;
use crate::gpu::Candidate;
use crate::precision::{amax, pow2, round_operand, scale_exponent, MAX_SCALE_EXPONENT};
use crate::shaders::Define;

/// A fast kernel's shape: 64×64 or, `wide`, 128×128 of out a workgroup (2×2 or 4×4
/// accumulators of 16×16 a subgroup), staging `bk` of K at a time, with the next slice's reads
/// issued before this one's multiply-adds when `prefetch`, and, `double`, staged after them into
/// a second buffer while the others read the first (one barrier a slice instead of two, for
/// twice the workgroup memory). Every candidate runs the same 16-deep multiply-adds in the same
/// K order, so the choice changes no bit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FastTile {
    pub wide: bool,
    pub bk: u32,
    pub prefetch: bool,
    pub double: bool,
}

/// The switch that selects the cooperative built-ins (on) or their scalar emulation (off).
pub const COOP: &str = "COOP";

/// The invocations of a workgroup: four subgroups of 32.
const FAST_THREADS: u32 = 128;

/// Every fast candidate, the default first: 64×64 fits WebGPU's default 16 KiB of workgroup
/// memory; 128×128 reuses each staged value twice as often, for the large products; the
/// prefetching ones hide the reads' latency at the cost of registers (up to 8 vec4s of each
/// operand an invocation, which bounds `bk` for each size); the double-buffered ones also halve
/// the barriers, within 32 KiB (lavapipe's limit, where the tests run every candidate).
pub const FAST_TILES: &[FastTile] = &[
    FastTile {
        wide: false,
        bk: 32,
        prefetch: false,
        double: false,
    },
    FastTile {
        wide: true,
        bk: 32,
        prefetch: false,
        double: false,
    },
    FastTile {
        wide: false,
        bk: 16,
        prefetch: false,
        double: false,
    },
    FastTile {
        wide: true,
        bk: 16,
        prefetch: false,
        double: false,
    },
    FastTile {
        wide: false,
        bk: 32,
        prefetch: true,
        double: false,
    },
    FastTile {
        wide: true,
        bk: 32,
        prefetch: true,
        double: false,
    },
    FastTile {
        wide: true,
        bk: 16,
        prefetch: true,
        double: false,
    },
    FastTile {
        wide: false,
        bk: 64,
        prefetch: true,
        double: false,
    },
    FastTile {
        wide: false,
        bk: 32,
        prefetch: true,
        double: true,
    },
    FastTile {
        wide: true,
        bk: 16,
        prefetch: true,
        double: true,
    },
];

impl FastTile {
    /// Rows and columns of out a workgroup computes.
    pub const fn size(&self) -> usize {
        if self.wide {
            128
        } else {
            64
        }
    }
    /// The vec4s of each operand an invocation reads a slice (the shader's NA and NB): 1, 2,
    /// 4 or 8, the registers its `Held` names.
    pub const fn held(&self) -> u32 {
        self.size() as u32 * self.bk / 4 / FAST_THREADS
    }
    /// The variant's switches: `coop` where the device has cooperative matrices, the emulation
    /// otherwise (tests on lavapipe).
    pub const fn defines(&self, coop: bool) -> [Define; 7] {
        let size = self.size() as u32;
        [
            Define::u32("BUFFERS", if self.double { 2 } else { 1 }),
            Define::u32("BM", size),
            Define::u32("BN", size),
            Define::u32("BK", self.bk),
            Define::bool("WIDE", self.wide),
            Define::bool("PREFETCH", self.prefetch),
            Define::bool(COOP, coop),
        ]
    }
    /// Workgroup memory: the two staged slices in f16 (twice when double-buffered), and the
    /// store scratch.
    fn shared_bytes(&self) -> u32 {
        let buffers = if self.double { 2 } else { 1 };
        2 * buffers * self.size() as u32 * (self.bk + 8) * 2 + 4 * 256 * 4
    }
}

impl Candidate for FastTile {
    fn name(&self) -> String {
        let prefetch = if self.prefetch { " prefetch" } else { "" };
        let double = if self.double { " double" } else { "" };
        format!("fast {0}x{0} k{1}{prefetch}{double}", self.size(), self.bk)
    }
    fn fits(&self, gpu: &crate::gpu::GpuBackend) -> bool {
        let limits = &gpu.limits;
        FAST_THREADS <= limits.max_compute_invocations_per_workgroup
            && self.shared_bytes() <= limits.max_compute_workgroup_storage_size
    }
}

/// The shader's switches with their defaults.
pub(crate) const FAST_SWITCHES: &[Define] = &FAST_TILES[0].defines(true);

/// What `shaders/matmul_fast.wgsl` reads from here beside its switches.
pub(crate) const FAST_DEFINES: &[Define] = &[Define::u32("MODE_WRITE", super::WRITE)];

/// Partial maxima slots: a's from 0, b's from this many on.
pub(crate) const PARTIALS_B: usize = 512;

/// What `shaders/fast_scale.wgsl` reads from here.
pub(crate) const SCALE_DEFINES: &[Define] = &[
    Define::u32("PARTIALS_B", PARTIALS_B as u32),
    Define::i32("MAX_SCALE_EXPONENT", MAX_SCALE_EXPONENT),
    Define::i32("SCALED_LOG2", crate::precision::SCALED_LOG2),
];

impl MatmulDims {
    /// Whether this product runs in the fast class on a fast backend: every dimension at least
    /// [`crate::precision::FAST_MIN`].
    pub fn in_fast_class(&self) -> bool {
        let min = crate::precision::FAST_MIN;
        self.m >= min && self.n >= min && self.k >= min
    }
}

/// The scale exponents of a product's operands: of the values from the first to the last one
/// it reads (`MatmulDims::spans`), 0 for an operand with a NaN or an infinity, which is then
/// reported (`Err` with both exponents).
pub fn exponents(a: impl IntoIterator<Item = f32>, b: impl IntoIterator<Item = f32>) -> Result<(i32, i32), (i32, i32)> {
    match (scale_exponent(amax(a)), scale_exponent(amax(b))) {
        (Some(sa), Some(sb)) => Ok((sa, sb)),
        (sa, sb) => Err((sa.unwrap_or(0), sb.unwrap_or(0))),
    }
}

/// The CPU twin: out = [out +] (Σ â·b̂) · 2^−sA · 2^−sB, with â = f16(a·2^sA) and b̂ =
/// f16(b·2^sB) rounded to nearest, their products exact in f32 and summed in f32 by the strict
/// GEMM. False when an operand held a NaN or an infinity (the result carries it).
#[cfg(feature = "cpu")]
pub fn cpu<T: crate::ops::Scalar>(out: &mut [T], a: &[T], b: &[T], d: MatmulDims) -> bool {
    d.check(out.len(), a.len(), b.len());
    let (na, nb) = d.spans();
    let f32s = |x: &[T]| x.iter().map(|v| v.f64() as f32).collect::<Vec<f32>>();
    let (a, b) = (f32s(&a[..na]), f32s(&b[..nb]));
    let scaled = exponents(a.iter().copied(), b.iter().copied());
    let (sa, sb) = scaled.unwrap_or_else(|e| e);
    let round = |x: &[f32], s: i32| x.iter().map(|&v| round_operand(v, s)).collect::<Vec<f32>>();
    let (ah, bh) = (round(&a, sa), round(&b, sb));
    let mut sum = vec![0f32; out.len()];
    super::cpu(&mut sum, &ah, &bh, MatmulDims { accumulate: false, ..d });
    let (ua, ub) = (pow2(-sa), pow2(-sb));
    for (o, s) in out.iter_mut().zip(sum) {
        let v = (s * ua) * ub;
        *o = T::of(if d.accumulate {
            (o.f64() as f32 + v) as f64
        } else {
            v as f64
        });
    }
    scaled.is_ok()
}

#[cfg(test)]
mod tests {
    use super::FAST_TILES;

    /// The shader names 1, 2, 4 or 8 held vec4s of each operand; a tile that read more or
    /// another count would stage part of its slice.
    #[test]
    fn every_fast_tile_holds_what_the_shader_names() {
        for tile in FAST_TILES {
            assert!([1, 2, 4, 8].contains(&tile.held()), "{tile:?} holds {}", tile.held());
        }
    }
}
