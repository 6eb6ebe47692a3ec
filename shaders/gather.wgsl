// Gather: out[row, c] = table[index[row], c].
// Backward without atomics: the host groups the rows that gathered each table row
// (TokenBuckets of the index); dtable[v, c] sums those rows in that fixed order. Bit-identical
// across runs, and to the embedding's token gradient.

// A table larger than one binding is launched once per range [v_lo, v_hi) of its rows, with
// table (or dtable) bound from row v_lo.
struct Params { rows: u32, c: u32, v_lo: u32, v_hi: u32 }
@group(0) @binding(0) var<uniform> p: Params;

// gather_forward(out, indices, table)
@group(0) @binding(1) var<storage, read_write> out: array<f32>;   // (rows, C)
@group(0) @binding(2) var<storage, read> indices: array<u32>;     // (rows)
@group(0) @binding(3) var<storage, read> table: array<f32>;       // (V, C)

@compute @workgroup_size(WG)
fn gather_forward(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_index(gid, nwg);
    if (i >= p.rows * p.c) { return; }
    let row = i / p.c;
    let col = i % p.c;
    let v = indices[row];
    // Another launch's range.
    if (v < p.v_lo || v >= p.v_hi) { return; }
    out[i] = table[(v - p.v_lo) * p.c + col];
}

// gather_backward(dtable, dout, bucket_rows, bucket_start)
@group(0) @binding(1) var<storage, read_write> dtable: array<f32>;     // (V, C)
@group(0) @binding(2) var<storage, read> dout: array<f32>;             // (rows, C)
@group(0) @binding(3) var<storage, read> bucket_rows: array<u32>;      // (rows) grouped by index
@group(0) @binding(4) var<storage, read> bucket_start: array<u32>;     // (V + 1)

@compute @workgroup_size(WG)
fn gather_backward(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_index(gid, nwg);
    if (i >= (p.v_hi - p.v_lo) * p.c) { return; }
    let v = p.v_lo + i / p.c;
    let col = i % p.c;
    var acc = 0.0;
    for (var j = bucket_start[v]; j < bucket_start[v + 1u]; j = j + 1u) {
        acc = acc + dout[bucket_rows[j] * p.c + col];
    }
    dtable[i] = acc;
}
