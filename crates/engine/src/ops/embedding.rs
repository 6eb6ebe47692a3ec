//! Token + position embedding, with a deterministic scatter-add backward.

use crate::gpu::{AsArg, GpuBackend, GpuIndex, GpuTensor, VIEW_ALIGN};
use crate::shaders::WG;
use crate::Backend;
use std::ops::Range;

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct EmbeddingDims {
    /// Rows B·T.
    pub bt: usize,
    /// Sequence length T: row r has position r % T.
    pub t: usize,
    pub c: usize,
    pub v: usize,
}

/// The rows of a batch grouped by token, in row order within each token (a counting sort, as
/// CSR): rows[start[v]..start[v+1]] are the rows holding token v. Built on the host with the
/// batch so that the embedding backward sums in a fixed order without atomics.
#[derive(Clone, Debug, PartialEq)]
pub struct TokenBuckets {
    /// (BT)
    pub rows: Vec<u32>,
    /// (V + 1)
    pub start: Vec<u32>,
}

impl TokenBuckets {
    pub fn new(tokens: &[u32], vocab: usize) -> Self {
        let mut start = vec![0u32; vocab + 1];
        for &t in tokens {
            start[t as usize + 1] += 1;
        }
        for v in 0..vocab {
            start[v + 1] += start[v];
        }
        let mut next = start.clone();
        let mut rows = vec![0u32; tokens.len()];
        for (r, &t) in tokens.iter().enumerate() {
            rows[next[t as usize] as usize] = r as u32;
            next[t as usize] += 1;
        }
        Self { rows, start }
    }
}

fn check(d: &EmbeddingDims, out: usize, wte: usize, wpe: usize) {
    assert_eq!(out, d.bt * d.c, "embedding: out has {out} values for {d:?}");
    assert_eq!(wte, d.v * d.c, "embedding: wte has {wte} values for {d:?}");
    assert_eq!(wpe, d.t * d.c, "embedding: wpe has {wpe} values for {d:?}");
    assert_eq!(d.bt % d.t, 0, "embedding: rows {} not a multiple of T {}", d.bt, d.t);
}

#[cfg(feature = "cpu")]
mod cpu_twin {
    use super::*;
    use crate::ops::Scalar;
    use rayon::prelude::*;

    pub fn cpu_forward<T: Scalar>(out: &mut [T], tokens: &[u32], wte: &[T], wpe: &[T], d: EmbeddingDims) {
        check(&d, out.len(), wte.len(), wpe.len());
        out.par_chunks_mut(d.c).enumerate().for_each(|(r, o)| {
            let tok = tokens[r] as usize;
            let pos = r % d.t;
            for c in 0..d.c {
                o[c] = wte[tok * d.c + c] + wpe[pos * d.c + c];
            }
        });
    }

    /// dwte: the rows of each token summed in bucket order.
    pub fn cpu_backward_wte<T: Scalar>(
        dwte: &mut [T],
        dout: &[T],
        bucket_rows: &[u32],
        bucket_start: &[u32],
        d: EmbeddingDims,
    ) {
        check(&d, dout.len(), dwte.len(), d.t * d.c);
        dwte.par_chunks_mut(d.c).enumerate().for_each(|(v, g)| {
            g.fill(T::zero());
            for &r in &bucket_rows[bucket_start[v] as usize..bucket_start[v + 1] as usize] {
                for c in 0..d.c {
                    g[c] = g[c] + dout[r as usize * d.c + c];
                }
            }
        });
    }

    /// dwpe: each position summed over the batch.
    pub fn cpu_backward_wpe<T: Scalar>(dwpe: &mut [T], dout: &[T], d: EmbeddingDims) {
        check(&d, dout.len(), d.v * d.c, dwpe.len());
        dwpe.par_chunks_mut(d.c).enumerate().for_each(|(t, g)| {
            g.fill(T::zero());
            for b in 0..d.bt / d.t {
                for c in 0..d.c {
                    g[c] = g[c] + dout[(b * d.t + t) * d.c + c];
                }
            }
        });
    }
}
#[cfg(feature = "cpu")]
pub use cpu_twin::*;

fn params(d: &EmbeddingDims, rows: &Range<usize>) -> [u32; 6] {
    [d.bt, d.t, d.c, d.v, rows.start, rows.end].map(|x| x as u32)
}

/// The vocabulary in ranges of rows whose slice of wte fits one binding: see [`table_ranges`].
fn vocab_ranges(gpu: &GpuBackend, d: &EmbeddingDims) -> Option<Vec<Range<usize>>> {
    table_ranges(gpu, d.v, d.c)
}

/// The `v` rows of a table of `c` values a row in ranges whose slice fits one binding, each
/// starting at an aligned value; a table that fits is one range. None when even the smallest
/// aligned run of rows does not fit. The gather splits its table the same way.
pub(crate) fn table_ranges(gpu: &GpuBackend, v: usize, c: usize) -> Option<Vec<Range<usize>>> {
    let c = c.max(1);
    let unit = c / gcd(c, VIEW_ALIGN) * VIEW_ALIGN;
    let ranges = gpu.split(v * c, unit)?;
    Some(ranges.into_iter().map(|r| r.start / c..r.end / c).collect())
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

fn too_wide(gpu: &GpuBackend, d: &EmbeddingDims) {
    gpu.refuse(format!(
        "embedding: {} rows of {} values do not fit this device's binding of {} values",
        VIEW_ALIGN,
        d.c,
        gpu.max_binding_values()
    ))
}

/// The ops on the GPU, as `GpuBackend` runs them: each checks its shapes and records its
/// launches.
pub mod gpu {
    use super::*;

    /// One launch per vocabulary range: each binds its rows of wte and writes the rows of `out`
    /// whose token is in it, so every row is written once, as with one launch.
    pub fn embedding_forward(
        gpu: &GpuBackend,
        out: &GpuTensor,
        tokens: &GpuIndex,
        wte: &GpuTensor,
        wpe: &GpuTensor,
        d: EmbeddingDims,
    ) {
        check(&d, out.len, wte.len, wpe.len);
        let Some(ranges) = vocab_ranges(gpu, &d) else {
            return too_wide(gpu, &d);
        };
        for rows in ranges {
            let wte = gpu.view(wte, rows.start * d.c, rows.len() * d.c);
            let args = [out.arg(), tokens.arg(), wte.arg(), wpe.arg()];
            gpu.dispatch(
                "embedding",
                "embedding_forward",
                &params(&d, &rows),
                &args,
                gpu.grid_1d(d.bt * d.c, WG),
            );
        }
    }

    pub fn embedding_backward(
        gpu: &GpuBackend,
        dwte: &GpuTensor,
        dwpe: &GpuTensor,
        dout: &GpuTensor,
        bucket_rows: &GpuIndex,
        bucket_start: &GpuIndex,
        d: EmbeddingDims,
    ) {
        check(&d, dout.len, dwte.len, dwpe.len);
        let Some(ranges) = vocab_ranges(gpu, &d) else {
            return too_wide(gpu, &d);
        };
        for rows in ranges {
            let dwte = gpu.view(dwte, rows.start * d.c, rows.len() * d.c);
            let args = [dwte.arg(), dout.arg(), bucket_rows.arg(), bucket_start.arg()];
            gpu.dispatch(
                "embedding",
                "embedding_backward_wte",
                &params(&d, &rows),
                &args,
                gpu.grid_1d(rows.len() * d.c, WG),
            );
        }
        gpu.dispatch(
            "embedding",
            "embedding_backward_wpe",
            &params(&d, &(0..d.v)),
            &[dwpe.arg(), dout.arg()],
            gpu.grid_1d(d.t * d.c, WG),
        );
    }
}

/// The ops on the CPU, as `CpuBackend` runs them: each borrows its tensors for its twins above.
#[cfg(feature = "cpu")]
pub mod cpu {
    use super::*;
    use crate::cpu::{CpuBackend, CpuIndex, CpuTensor};
    use crate::ops::Scalar;

    pub fn embedding_forward<T: Scalar>(
        _: &CpuBackend<T>,
        out: &CpuTensor<T>,
        tokens: &CpuIndex,
        wte: &CpuTensor<T>,
        wpe: &CpuTensor<T>,
        d: EmbeddingDims,
    ) {
        cpu_forward(&mut out.get_mut(), &tokens.get(), &wte.get(), &wpe.get(), d)
    }
    pub fn embedding_backward<T: Scalar>(
        _: &CpuBackend<T>,
        dwte: &CpuTensor<T>,
        dwpe: &CpuTensor<T>,
        dout: &CpuTensor<T>,
        bucket_rows: &CpuIndex,
        bucket_start: &CpuIndex,
        d: EmbeddingDims,
    ) {
        // Two borrows in turn: dwte and dwpe are usually views of one gradient buffer.
        cpu_backward_wte(
            &mut dwte.get_mut(),
            &dout.get(),
            &bucket_rows.get(),
            &bucket_start.get(),
            d,
        );
        cpu_backward_wpe(&mut dwpe.get_mut(), &dout.get(), d);
    }
}

/// What each op costs (`crate::cost` has the conventions).
pub mod cost {
    use super::*;
    use crate::cost::{f, Cost, Family, W};

    pub fn embedding_forward(d: EmbeddingDims) -> Cost {
        let rows = f(d.bt) * f(d.c);
        Family::Embedding.cost(rows, W * (3.0 * rows + f(d.bt)))
    }
    pub fn embedding_backward(d: EmbeddingDims) -> Cost {
        let rows = f(d.bt) * f(d.c);
        let bytes = W * (2.0 * rows + f(d.v) * f(d.c) + f(d.t) * f(d.c) + f(d.bt) + f(d.v));
        Family::Embedding.cost(2.0 * rows, bytes)
    }
}
