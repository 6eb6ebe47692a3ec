//! A gather of table rows by index, with a deterministic scatter-add backward: the embedding
//! without its position term, for tables indexed by anything (tokens, positions).

use crate::gpu::{AsArg, GpuBackend, GpuIndex, GpuTensor};
use crate::ops::embedding::table_ranges;
use crate::shaders::WG;
use crate::Backend;
use std::ops::Range;

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GatherDims {
    /// Rows gathered (the length of the index).
    pub rows: usize,
    /// Values a row.
    pub c: usize,
    /// Rows of the table; every index is below it.
    pub v: usize,
}

fn check(d: &GatherDims, out: usize, table: usize) {
    assert_eq!(out, d.rows * d.c, "gather: out has {out} values for {d:?}");
    assert_eq!(table, d.v * d.c, "gather: table has {table} values for {d:?}");
}

#[cfg(feature = "cpu")]
mod cpu_twin {
    use super::*;
    use crate::ops::Scalar;
    use rayon::prelude::*;

    /// out[r] = table[index[r]]
    pub fn cpu_forward<T: Scalar>(out: &mut [T], index: &[u32], table: &[T], d: GatherDims) {
        check(&d, out.len(), table.len());
        assert_eq!(
            index.len(),
            d.rows,
            "gather: index has {} values for {d:?}",
            index.len()
        );
        out.par_chunks_mut(d.c.max(1)).enumerate().for_each(|(r, o)| {
            let i = index[r] as usize;
            o.copy_from_slice(&table[i * d.c..(i + 1) * d.c]);
        });
    }

    /// dtable: the rows that gathered each table row, summed in bucket order
    /// (`TokenBuckets::new(index, v)`).
    pub fn cpu_backward<T: Scalar>(
        dtable: &mut [T],
        dout: &[T],
        bucket_rows: &[u32],
        bucket_start: &[u32],
        d: GatherDims,
    ) {
        check(&d, dout.len(), dtable.len());
        dtable.par_chunks_mut(d.c.max(1)).enumerate().for_each(|(v, g)| {
            g.fill(T::zero());
            for &r in &bucket_rows[bucket_start[v] as usize..bucket_start[v + 1] as usize] {
                for c in 0..d.c {
                    g[c] = g[c] + dout[r as usize * d.c + c];
                }
            }
        });
    }
}
#[cfg(feature = "cpu")]
pub use cpu_twin::*;

fn params(d: &GatherDims, rows: &Range<usize>) -> [u32; 4] {
    [d.rows, d.c, rows.start, rows.end].map(|x| x as u32)
}

fn too_wide(gpu: &GpuBackend, d: &GatherDims) {
    gpu.refuse(format!(
        "gather: {} rows of {} values do not fit this device's binding of {} values",
        crate::VIEW_ALIGN,
        d.c,
        gpu.max_binding_values()
    ))
}

/// The ops on the GPU, as `GpuBackend` runs them: each checks its shapes and records its
/// launches.
pub mod gpu {
    use super::*;

    /// One launch per range of table rows that fits one binding: each writes the rows of `out`
    /// whose index is in its range, so every row is written once, as with one launch.
    pub fn gather_forward(gpu: &GpuBackend, out: &GpuTensor, index: &GpuIndex, table: &GpuTensor, d: GatherDims) {
        check(&d, out.len, table.len);
        let Some(ranges) = table_ranges(gpu, d.v, d.c) else {
            return too_wide(gpu, &d);
        };
        for rows in ranges {
            let table = gpu.view(table, rows.start * d.c, rows.len() * d.c);
            let args = [out.arg(), index.arg(), table.arg()];
            gpu.dispatch(
                "gather",
                "gather_forward",
                &params(&d, &rows),
                &args,
                gpu.grid_1d(d.rows * d.c, WG),
            );
        }
    }

    pub fn gather_backward(
        gpu: &GpuBackend,
        dtable: &GpuTensor,
        dout: &GpuTensor,
        bucket_rows: &GpuIndex,
        bucket_start: &GpuIndex,
        d: GatherDims,
    ) {
        check(&d, dout.len, dtable.len);
        let Some(ranges) = table_ranges(gpu, d.v, d.c) else {
            return too_wide(gpu, &d);
        };
        for rows in ranges {
            let dtable = gpu.view(dtable, rows.start * d.c, rows.len() * d.c);
            let args = [dtable.arg(), dout.arg(), bucket_rows.arg(), bucket_start.arg()];
            gpu.dispatch(
                "gather",
                "gather_backward",
                &params(&d, &rows),
                &args,
                gpu.grid_1d(rows.len() * d.c, WG),
            );
        }
    }
}

/// The ops on the CPU, as `CpuBackend` runs them: each borrows its tensors for its twin above.
#[cfg(feature = "cpu")]
pub mod cpu {
    use super::*;
    use crate::cpu::{CpuBackend, CpuIndex, CpuTensor};
    use crate::ops::Scalar;

    pub fn gather_forward<T: Scalar>(
        _: &CpuBackend<T>,
        out: &CpuTensor<T>,
        index: &CpuIndex,
        table: &CpuTensor<T>,
        d: GatherDims,
    ) {
        cpu_forward(&mut out.get_mut(), &index.get(), &table.get(), d)
    }
    pub fn gather_backward<T: Scalar>(
        _: &CpuBackend<T>,
        dtable: &CpuTensor<T>,
        dout: &CpuTensor<T>,
        bucket_rows: &CpuIndex,
        bucket_start: &CpuIndex,
        d: GatherDims,
    ) {
        cpu_backward(
            &mut dtable.get_mut(),
            &dout.get(),
            &bucket_rows.get(),
            &bucket_start.get(),
            d,
        )
    }
}

/// What each op costs (`crate::cost` has the conventions).
pub mod cost {
    use super::*;
    use crate::cost::{f, Cost, Family, W};

    pub fn gather_forward(d: GatherDims) -> Cost {
        // A copy: no FLOPs; each row's index and values read, its values written.
        let rows = f(d.rows) * f(d.c);
        Family::Embedding.cost(0.0, W * (2.0 * rows + f(d.rows)))
    }
    pub fn gather_backward(d: GatherDims) -> Cost {
        // One add a gathered value; dout and the buckets read, the table's gradient written.
        let rows = f(d.rows) * f(d.c);
        let bytes = W * (rows + f(d.v) * f(d.c) + f(d.rows) + f(d.v) + 1.0);
        Family::Embedding.cost(rows, bytes)
    }
}
