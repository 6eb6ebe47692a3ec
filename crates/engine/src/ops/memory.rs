//! MemoryFormer's Memory Layer (SPEC §3; MemoryFormer paper §3): a fully-connected layer
//! replaced by hash-table lookups.
//!
//! - **hash**: split each row x (d_in) into K chunks z_k of τ values (values past K·τ are not
//!   hashed), `code_k = Σ_j [z_kj ≥ 0]·2^j`, and the weight
//!   `p_k = Π_j 1/(1 + exp(−2|z_kj|/t))`, times ‖z_k‖₁ with the `l1` option;
//! - **bucket**: per table, the rows grouped by code in row order (a stable counting sort); its
//!   bucket sizes are the usage statistics, and its order makes the table gradient a
//!   fixed-order sum;
//! - **forward**: `y = Σ_k p_k · T_k[code_k] + b`, tables T (K, 2^τ, d_out);
//! - **backward**: `dT_k[c] = Σ_{rows with code c} p_k · dy` (rows no token hit get 0),
//!   `dz_kj = ⟨dy, T_k[code_k]⟩ · ∂p_k/∂z_kj`, `db = Σ dy`.

use crate::gpu::{AsArg, GpuBackend, GpuIndex, GpuTensor};
use crate::shaders::{SUM_COLS, WG};
use crate::VIEW_ALIGN;

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MemoryDims {
    /// Rows: B·T.
    pub tokens: usize,
    /// Width of each input row; the first K·τ values are hashed.
    pub d_in: usize,
    /// τ: bits per chunk, so each table has 2^τ rows.
    pub tau: usize,
    /// K: chunks and tables.
    pub k: usize,
    pub d_out: usize,
    /// t in p(z); 1 in the paper.
    pub temperature: f32,
    /// Multiply p by ‖z_k‖₁, as the community code does.
    pub l1: bool,
}

impl MemoryDims {
    pub fn buckets(&self) -> usize {
        1 << self.tau
    }
    pub fn table_values(&self) -> usize {
        self.k * self.buckets() * self.d_out
    }
    /// Values of `memory_parts`' output: a row of d_out per token and table.
    pub fn parts_len(&self) -> usize {
        self.tokens * self.k * self.d_out
    }
    /// Values of `starts`: per table, 2^τ + 1 bucket boundaries.
    pub fn starts_len(&self) -> usize {
        self.k * (self.buckets() + 1)
    }
    /// Tiles of rows the bucket sort gives a workgroup each, per table ([`sort_tiles`]).
    pub fn sort_tiles(&self) -> usize {
        sort_tiles(self.tokens, self.buckets())
    }
    /// Values of the bucket sort's scratch (`cursor`): a counter per table, code and tile.
    pub fn sort_scratch(&self) -> usize {
        self.k * self.buckets() * self.sort_tiles()
    }
    fn check(&self, x: usize, codes: usize, p: usize) {
        assert!(
            self.tau >= 1 && self.tau <= 16,
            "memory: τ = {} is outside 1..=16",
            self.tau
        );
        assert!(self.k * self.tau <= self.d_in, "memory: K·τ exceeds d_in in {self:?}");
        assert_eq!(x, self.tokens * self.d_in, "memory: x has {x} values for {self:?}");
        assert_eq!(
            codes,
            self.tokens * self.k,
            "memory: codes have {codes} values for {self:?}"
        );
        assert_eq!(p, self.tokens * self.k, "memory: p has {p} values for {self:?}");
    }
}

/// Rows of a chunk of the bucket sort: the shader's workgroup size.
const SORT_CHUNK: usize = WG;
/// The sort keeps a counter per (code, tile): at most this many a table, unless 2^τ alone is more.
const SORT_COUNTERS: usize = 1 << 15;

/// Tiles of rows the GPU's bucket sort gives a workgroup each, per table: one per 256-row chunk,
/// up to `SORT_COUNTERS / buckets` (at least 1). A function of the sizes alone, so the sort's
/// order of work, like its result, is fixed.
pub fn sort_tiles(tokens: usize, buckets: usize) -> usize {
    tokens
        .div_ceil(SORT_CHUNK)
        .clamp(1, (SORT_COUNTERS / buckets.max(1)).max(1))
}

#[cfg(feature = "cpu")]
mod cpu_twin {
    use super::*;
    use crate::ops::Scalar;
    use rayon::prelude::*;

    /// σ_j = 1/(1 + exp(−2|z|/t)) of one value.
    fn sigma<T: Scalar>(z: T, t: T) -> T {
        T::one() / (T::one() + (-T::of(2.0) * z.abs() / t).exp())
    }

    pub fn cpu_hash<T: Scalar>(codes: &mut [u32], p: &mut [T], x: &[T], d: MemoryDims) {
        d.check(x.len(), codes.len(), p.len());
        let t = T::of(d.temperature as f64);
        codes
            .par_chunks_mut(d.k)
            .zip(p.par_chunks_mut(d.k))
            .zip(x.par_chunks(d.d_in))
            .for_each(|((codes, p), x)| {
                for k in 0..d.k {
                    let z = &x[k * d.tau..(k + 1) * d.tau];
                    codes[k] = z.iter().enumerate().map(|(j, &v)| ((v >= T::zero()) as u32) << j).sum();
                    let weight = z.iter().fold(T::one(), |acc, &v| acc * sigma(v, t));
                    let l1 = if d.l1 {
                        z.iter().map(|v| v.abs()).sum()
                    } else {
                        T::one()
                    };
                    p[k] = weight * l1;
                }
            });
    }

    /// rows (K, tokens): per table, the rows sorted by code, stably; starts (K, 2^τ + 1). The
    /// twin of the GPU's three sort kernels, whose result depends on nothing but the codes.
    pub fn cpu_bucket(rows: &mut [u32], starts: &mut [u32], codes: &[u32], d: MemoryDims) {
        let nb = d.buckets();
        assert_eq!(rows.len(), d.k * d.tokens, "memory bucket: rows");
        assert_eq!(starts.len(), d.starts_len(), "memory bucket: starts");
        for k in 0..d.k {
            let start = &mut starts[k * (nb + 1)..(k + 1) * (nb + 1)];
            start.fill(0);
            for t in 0..d.tokens {
                start[codes[t * d.k + k] as usize + 1] += 1;
            }
            for c in 0..nb {
                start[c + 1] += start[c];
            }
            let mut next = start[..nb].to_vec();
            for t in 0..d.tokens {
                let c = codes[t * d.k + k] as usize;
                rows[k * d.tokens + next[c] as usize] = t as u32;
                next[c] += 1;
            }
        }
    }

    pub fn cpu_forward<T: Scalar>(y: &mut [T], codes: &[u32], p: &[T], tables: &[T], bias: &[T], d: MemoryDims) {
        assert_eq!(y.len(), d.tokens * d.d_out, "memory forward: y");
        assert_eq!(tables.len(), d.table_values(), "memory forward: tables");
        let nb = d.buckets();
        y.par_chunks_mut(d.d_out).enumerate().for_each(|(t, y)| {
            for (o, y) in y.iter_mut().enumerate() {
                *y = bias[o]
                    + (0..d.k)
                        .map(|k| p[t * d.k + k] * tables[(k * nb + codes[t * d.k + k] as usize) * d.d_out + o])
                        .sum::<T>();
            }
        });
    }

    /// parts (tokens, K, d_out): each table's term of `cpu_forward`'s sum, the same product.
    pub fn cpu_parts<T: Scalar>(parts: &mut [T], codes: &[u32], p: &[T], tables: &[T], d: MemoryDims) {
        assert_eq!(parts.len(), d.parts_len(), "memory parts: parts");
        assert_eq!(tables.len(), d.table_values(), "memory parts: tables");
        let nb = d.buckets();
        parts.par_chunks_mut(d.d_out).enumerate().for_each(|(i, part)| {
            let (t, k) = (i / d.k, i % d.k);
            let row = (k * nb + codes[t * d.k + k] as usize) * d.d_out;
            for (o, v) in part.iter_mut().enumerate() {
                *v = p[t * d.k + k] * tables[row + o];
            }
        });
    }

    /// y = bias + Σ_k parts[k], summed as `cpu_forward` sums its terms.
    pub fn cpu_sum<T: Scalar>(y: &mut [T], parts: &[T], bias: &[T], d: MemoryDims) {
        assert_eq!(y.len(), d.tokens * d.d_out, "memory sum: y");
        assert_eq!(parts.len(), d.parts_len(), "memory sum: parts");
        y.par_chunks_mut(d.d_out).enumerate().for_each(|(t, y)| {
            for (o, y) in y.iter_mut().enumerate() {
                *y = bias[o] + (0..d.k).map(|k| parts[(t * d.k + k) * d.d_out + o]).sum::<T>();
            }
        });
    }

    /// dtables from the buckets, in row order; dx of the hashed values (0 past K·τ); dbias.
    #[allow(clippy::too_many_arguments)]
    pub fn cpu_backward<T: Scalar>(
        dx: &mut [T],
        dtables: &mut [T],
        dbias: &mut [T],
        dy: &[T],
        x: &[T],
        codes: &[u32],
        p: &[T],
        rows: &[u32],
        starts: &[u32],
        tables: &[T],
        d: MemoryDims,
    ) {
        cpu_table_grad(dtables, dy, p, rows, starts, d);
        cpu_input_grad(dx, dy, x, codes, tables, d);
        cpu_bias_grad(dbias, dy, d);
    }

    /// dT_k[c] = Σ p_k · dy over bucket c's rows, in row order; 0 for buckets no row hit.
    pub fn cpu_table_grad<T: Scalar>(
        dtables: &mut [T],
        dy: &[T],
        p: &[T],
        rows: &[u32],
        starts: &[u32],
        d: MemoryDims,
    ) {
        assert_eq!(dtables.len(), d.table_values(), "memory backward: dtables");
        let nb = d.buckets();
        dtables.par_chunks_mut(d.d_out).enumerate().for_each(|(kc, g)| {
            let (k, c) = (kc / nb, kc % nb);
            g.fill(T::zero());
            let (a, b) = (starts[k * (nb + 1) + c] as usize, starts[k * (nb + 1) + c + 1] as usize);
            for &t in &rows[k * d.tokens + a..k * d.tokens + b] {
                let t = t as usize;
                for o in 0..d.d_out {
                    g[o] = g[o] + p[t * d.k + k] * dy[t * d.d_out + o];
                }
            }
        });
    }

    /// dz_kj = ⟨dy, T_k[code_k]⟩ · ∂p_k/∂z_kj; 0 for the values past K·τ.
    pub fn cpu_input_grad<T: Scalar>(dx: &mut [T], dy: &[T], x: &[T], codes: &[u32], tables: &[T], d: MemoryDims) {
        assert_eq!(dx.len(), x.len(), "memory backward: dx");
        let nb = d.buckets();
        let temp = T::of(d.temperature as f64);
        dx.par_chunks_mut(d.d_in).enumerate().for_each(|(t, dx)| {
            dx.fill(T::zero());
            let dy = &dy[t * d.d_out..(t + 1) * d.d_out];
            for k in 0..d.k {
                let row = &tables[(k * nb + codes[t * d.k + k] as usize) * d.d_out..][..d.d_out];
                let dp: T = dy.iter().zip(row).map(|(&a, &b)| a * b).sum();
                let z = &x[t * d.d_in + k * d.tau..][..d.tau];
                let raw = z.iter().fold(T::one(), |acc, &v| acc * sigma(v, temp));
                let l1: T = if d.l1 {
                    z.iter().map(|v| v.abs()).sum()
                } else {
                    T::one()
                };
                for (j, &v) in z.iter().enumerate() {
                    let s = if v >= T::zero() { T::one() } else { -T::one() };
                    // ∂σ_j/∂z_j = σ_j (1 − σ_j) · 2/t · sign(z_j), and σ_j divides out of p.
                    let dsigma = raw * (T::one() - sigma(v, temp)) * T::of(2.0) / temp * s;
                    let dl1 = if d.l1 { raw * s } else { T::zero() };
                    dx[k * d.tau + j] = dp * (dsigma * l1 + dl1);
                }
            }
        });
    }

    /// db = Σ_rows dy, in row order.
    pub fn cpu_bias_grad<T: Scalar>(dbias: &mut [T], dy: &[T], d: MemoryDims) {
        dbias.par_iter_mut().enumerate().for_each(|(o, g)| {
            *g = (0..d.tokens).map(|t| dy[t * d.d_out + o]).sum();
        });
    }
}
#[cfg(feature = "cpu")]
pub use cpu_twin::*;

fn params(d: &MemoryDims) -> [u32; 9] {
    let tiles = d.sort_tiles();
    let span = d.tokens.div_ceil(tiles).next_multiple_of(SORT_CHUNK);
    [
        d.tokens as u32,
        d.d_in as u32,
        d.tau as u32,
        d.k as u32,
        d.d_out as u32,
        d.temperature.to_bits(),
        d.l1 as u32,
        tiles as u32,
        span as u32,
    ]
}

/// The ops on the GPU, as `GpuBackend` runs them: each checks its shapes and records its
/// launches.
pub mod gpu {
    use super::*;
    use crate::Backend;

    pub fn memory_hash(gpu: &GpuBackend, codes: &GpuIndex, p: &GpuTensor, x: &GpuTensor, d: MemoryDims) {
        d.check(x.len, codes.len, p.len);
        let args = [codes.arg(), p.arg(), x.arg()];
        gpu.dispatch(
            "memory",
            "memory_hash",
            &params(&d),
            &args,
            gpu.grid_1d(d.tokens * d.k, WG),
        );
    }

    pub fn memory_bucket(
        gpu: &GpuBackend,
        rows: &GpuIndex,
        starts: &GpuIndex,
        cursor: &GpuIndex,
        codes: &GpuIndex,
        d: MemoryDims,
    ) {
        assert_eq!(rows.len, d.k * d.tokens, "memory bucket: rows");
        assert_eq!(starts.len, d.starts_len(), "memory bucket: starts");
        assert!(cursor.len >= d.sort_scratch(), "memory bucket: cursor too short");
        // Count per tile, place the tiles within each code, scatter per tile (shaders/memory.wgsl).
        let (pr, tiles) = (params(&d), gpu.grid_1d(d.k * d.sort_tiles(), 1));
        let args = [rows.arg(), starts.arg(), cursor.arg(), codes.arg()];
        gpu.dispatch("memory", "memory_bucket_count", &pr, &args, tiles);
        let scan = [(2, starts.arg()), (3, cursor.arg())];
        gpu.dispatch_at("memory", "memory_bucket_scan", &pr, &scan, gpu.grid_1d(d.k, 1));
        gpu.dispatch("memory", "memory_bucket_scatter", &pr, &args, tiles);
    }

    pub fn memory_forward(
        gpu: &GpuBackend,
        y: &GpuTensor,
        codes: &GpuIndex,
        p: &GpuTensor,
        tables: &GpuTensor,
        bias: &GpuTensor,
        d: MemoryDims,
    ) {
        assert_eq!(y.len, d.tokens * d.d_out, "memory forward: y");
        assert_eq!(tables.len, d.table_values(), "memory forward: tables");
        let args = [y.arg(), codes.arg(), p.arg(), tables.arg(), bias.arg()];
        gpu.dispatch(
            "memory",
            "memory_forward",
            &params(&d),
            &args,
            gpu.grid_1d(d.tokens * d.d_out, WG),
        );
    }

    /// Token windows whose parts fit one binding, each starting at a multiple of 64 tokens so
    /// that every view is aligned: (first token, tokens), or None where 64 tokens do not fit.
    fn windows(gpu: &GpuBackend, d: &MemoryDims) -> Option<Vec<(usize, usize)>> {
        let per = gpu.max_binding_values() / (d.k * d.d_out).max(1) / VIEW_ALIGN * VIEW_ALIGN;
        (per > 0).then(|| {
            (0..d.tokens)
                .step_by(per)
                .map(|start| (start, (start + per).min(d.tokens) - start))
                .collect()
        })
    }

    fn too_wide(gpu: &GpuBackend, op: &str, d: &MemoryDims) {
        gpu.refuse(format!(
            "`{op}`: 64 tokens of {} tables × {} values are more than this device binds at once; \
             intervene on a smaller model or on the CPU",
            d.k, d.d_out
        ))
    }

    pub fn memory_parts(
        gpu: &GpuBackend,
        parts: &GpuTensor,
        codes: &GpuIndex,
        p: &GpuTensor,
        tables: &GpuTensor,
        d: MemoryDims,
    ) {
        assert_eq!(parts.len, d.parts_len(), "memory parts: parts");
        assert_eq!(tables.len, d.table_values(), "memory parts: tables");
        let Some(windows) = windows(gpu, &d) else {
            return too_wide(gpu, "memory_parts", &d);
        };
        for (start, n) in windows {
            let w = MemoryDims { tokens: n, ..d };
            let (out, c, pw) = (
                gpu.view(parts, start * d.k * d.d_out, w.parts_len()),
                codes.window(start * d.k, n * d.k),
                gpu.view(p, start * d.k, n * d.k),
            );
            let args = [out.arg(), c.arg(), pw.arg(), tables.arg()];
            gpu.dispatch(
                "memory",
                "memory_parts",
                &params(&w),
                &args,
                gpu.grid_1d(w.parts_len(), WG),
            );
        }
    }

    pub fn memory_sum(gpu: &GpuBackend, y: &GpuTensor, parts: &GpuTensor, bias: &GpuTensor, d: MemoryDims) {
        assert_eq!(y.len, d.tokens * d.d_out, "memory sum: y");
        assert_eq!(parts.len, d.parts_len(), "memory sum: parts");
        let Some(windows) = windows(gpu, &d) else {
            return too_wide(gpu, "memory_sum", &d);
        };
        for (start, n) in windows {
            let w = MemoryDims { tokens: n, ..d };
            let (out, pv) = (
                gpu.view(y, start * d.d_out, n * d.d_out),
                gpu.view(parts, start * d.k * d.d_out, w.parts_len()),
            );
            let args = [out.arg(), pv.arg(), bias.arg()];
            gpu.dispatch("memory", "memory_sum", &params(&w), &args, gpu.grid_1d(n * d.d_out, WG));
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub fn memory_backward(
        gpu: &GpuBackend,
        dx: &GpuTensor,
        dtables: &GpuTensor,
        dbias: &GpuTensor,
        dy: &GpuTensor,
        x: &GpuTensor,
        codes: &GpuIndex,
        p: &GpuTensor,
        rows: &GpuIndex,
        starts: &GpuIndex,
        tables: &GpuTensor,
        d: MemoryDims,
    ) {
        d.check(x.len, codes.len, p.len);
        assert_eq!(dtables.len, d.table_values(), "memory backward: dtables");
        let pr = params(&d);
        let args = [dtables.arg(), dy.arg(), p.arg(), rows.arg(), starts.arg()];
        gpu.dispatch(
            "memory",
            "memory_table_grad",
            &pr,
            &args,
            gpu.grid_1d(d.table_values(), WG),
        );
        let args = [dx.arg(), dy.arg(), x.arg(), codes.arg(), tables.arg()];
        gpu.dispatch(
            "memory",
            "memory_input_grad",
            &pr,
            &args,
            gpu.grid_1d(d.tokens * d.k, WG),
        );
        let args = [dbias.arg(), dy.arg()];
        gpu.dispatch("memory", "memory_bias_grad", &pr, &args, gpu.grid_1d(d.d_out, SUM_COLS));
    }
}

/// The ops on the CPU, as `CpuBackend` runs them: each borrows its tensors for its twins above.
/// The CPU's sort needs no scratch: it leaves `cursor` alone.
#[cfg(feature = "cpu")]
pub mod cpu {
    use super::*;
    use crate::cpu::{CpuBackend, CpuIndex, CpuTensor};
    use crate::ops::Scalar;

    pub fn memory_hash<T: Scalar>(
        _: &CpuBackend<T>,
        codes: &CpuIndex,
        p: &CpuTensor<T>,
        x: &CpuTensor<T>,
        d: MemoryDims,
    ) {
        cpu_hash(&mut codes.get_mut(), &mut p.get_mut(), &x.get(), d)
    }
    pub fn memory_bucket<T: Scalar>(
        _: &CpuBackend<T>,
        rows: &CpuIndex,
        starts: &CpuIndex,
        _cursor: &CpuIndex,
        codes: &CpuIndex,
        d: MemoryDims,
    ) {
        cpu_bucket(&mut rows.get_mut(), &mut starts.get_mut(), &codes.get(), d)
    }
    pub fn memory_forward<T: Scalar>(
        _: &CpuBackend<T>,
        y: &CpuTensor<T>,
        codes: &CpuIndex,
        p: &CpuTensor<T>,
        tables: &CpuTensor<T>,
        bias: &CpuTensor<T>,
        d: MemoryDims,
    ) {
        cpu_forward(&mut y.get_mut(), &codes.get(), &p.get(), &tables.get(), &bias.get(), d)
    }
    pub fn memory_parts<T: Scalar>(
        _: &CpuBackend<T>,
        parts: &CpuTensor<T>,
        codes: &CpuIndex,
        p: &CpuTensor<T>,
        tables: &CpuTensor<T>,
        d: MemoryDims,
    ) {
        cpu_parts(&mut parts.get_mut(), &codes.get(), &p.get(), &tables.get(), d)
    }
    pub fn memory_sum<T: Scalar>(
        _: &CpuBackend<T>,
        y: &CpuTensor<T>,
        parts: &CpuTensor<T>,
        bias: &CpuTensor<T>,
        d: MemoryDims,
    ) {
        cpu_sum(&mut y.get_mut(), &parts.get(), &bias.get(), d)
    }
    #[allow(clippy::too_many_arguments)]
    pub fn memory_backward<T: Scalar>(
        _: &CpuBackend<T>,
        dx: &CpuTensor<T>,
        dtables: &CpuTensor<T>,
        dbias: &CpuTensor<T>,
        dy: &CpuTensor<T>,
        x: &CpuTensor<T>,
        codes: &CpuIndex,
        p: &CpuTensor<T>,
        rows: &CpuIndex,
        starts: &CpuIndex,
        tables: &CpuTensor<T>,
        d: MemoryDims,
    ) {
        // One gradient at a time: dtables and dbias are views of one gradient buffer.
        cpu_table_grad(
            &mut dtables.get_mut(),
            &dy.get(),
            &p.get(),
            &rows.get(),
            &starts.get(),
            d,
        );
        cpu_input_grad(&mut dx.get_mut(), &dy.get(), &x.get(), &codes.get(), &tables.get(), d);
        cpu_bias_grad(&mut dbias.get_mut(), &dy.get(), d);
    }
}

/// What each op costs (`crate::cost` has the conventions).
pub mod cost {
    use super::*;
    use crate::cost::{f, Cost, Family, W};

    pub fn memory_hash(d: MemoryDims) -> Cost {
        let (rows, hashed) = (f(d.tokens), f(d.k) * f(d.tau));
        Family::Memory.cost(2.0 * rows * hashed, W * rows * (hashed + 2.0 * f(d.k)))
    }
    pub fn memory_bucket(d: MemoryDims) -> Cost {
        let bytes = W * (2.0 * f(d.tokens) * f(d.k) + f(d.starts_len()));
        Family::Memory.cost(0.0, bytes)
    }
    pub fn memory_forward(d: MemoryDims) -> Cost {
        let (rows, k, out) = (f(d.tokens), f(d.k), f(d.d_out));
        let flops = rows * (2.0 * k * out + out);
        // Codes and p read, one table row gathered per (row, table), y written, the bias.
        let bytes = W * (rows * (2.0 * k + k * out + out) + out);
        Family::Memory.cost(flops, bytes)
    }
    pub fn memory_parts(d: MemoryDims) -> Cost {
        let (rows, k, out) = (f(d.tokens), f(d.k), f(d.d_out));
        // Codes and p read, one table row gathered and one part written per (row, table).
        Family::Memory.cost(rows * k * out, W * rows * k * (2.0 + 2.0 * out))
    }
    pub fn memory_sum(d: MemoryDims) -> Cost {
        let (rows, k, out) = (f(d.tokens), f(d.k), f(d.d_out));
        Family::Memory.cost(rows * k * out, W * (rows * (k * out + out) + out))
    }
    pub fn memory_backward(d: MemoryDims) -> Cost {
        let (n, k, out) = (f(d.tokens), f(d.k), f(d.d_out));
        // Table gradient p·dy and input gradient ⟨dy, T[code]⟩: twice the forward's products.
        let flops = n * (4.0 * k * out + out + 4.0 * k * f(d.tau));
        let bytes = W * (n * (3.0 * out + 2.0 * k * out + 4.0 * k + f(d.d_in)) + f(d.table_values()) + out);
        Family::Memory.cost(flops, bytes)
    }
}
