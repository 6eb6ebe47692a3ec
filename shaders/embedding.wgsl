// Token + position embedding: out[bt, c] = wte[tokens[bt], c] + wpe[bt % T, c].
// Backward without atomics: the host groups the rows of each token (TokenBuckets); dwte[v, c]
// sums those rows in that fixed order, and dwpe[t, c] sums over the batch. Bit-identical
// across runs.

// A table larger than one binding is launched once per range [v_lo, v_hi) of the vocabulary,
// with wte (or dwte) bound from row v_lo.
struct Params { bt: u32, t: u32, c: u32, v: u32, v_lo: u32, v_hi: u32 }
@group(0) @binding(0) var<uniform> p: Params;

// embedding_forward(out, tokens, wte, wpe)
@group(0) @binding(1) var<storage, read_write> out: array<f32>;   // (BT, C)
@group(0) @binding(2) var<storage, read> tokens: array<u32>;      // (BT)
@group(0) @binding(3) var<storage, read> wte: array<f32>;         // (V, C)
@group(0) @binding(4) var<storage, read> wpe: array<f32>;         // (T, C)

@compute @workgroup_size(WG)
fn embedding_forward(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_index(gid, nwg);
    if (i >= p.bt * p.c) { return; }
    let row = i / p.c;
    let col = i % p.c;
    let tok = tokens[row];
    // Another launch's range.
    if (tok < p.v_lo || tok >= p.v_hi) { return; }
    out[i] = wte[(tok - p.v_lo) * p.c + col] + wpe[(row % p.t) * p.c + col];
}

// embedding_backward_wte(dwte, dout, bucket_rows, bucket_start)
@group(0) @binding(1) var<storage, read_write> dwte: array<f32>;       // (V, C)
@group(0) @binding(2) var<storage, read> dout: array<f32>;             // (BT, C)
@group(0) @binding(3) var<storage, read> bucket_rows: array<u32>;      // (BT) rows grouped by token
@group(0) @binding(4) var<storage, read> bucket_start: array<u32>;     // (V + 1)

@compute @workgroup_size(WG)
fn embedding_backward_wte(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_index(gid, nwg);
    if (i >= (p.v_hi - p.v_lo) * p.c) { return; }
    let tok = p.v_lo + i / p.c;
    let col = i % p.c;
    var acc = 0.0;
    for (var j = bucket_start[tok]; j < bucket_start[tok + 1u]; j = j + 1u) {
        acc = acc + dout[bucket_rows[j] * p.c + col];
    }
    dwte[i] = acc;
}

// embedding_backward_wpe(dwpe, dout)
@group(0) @binding(1) var<storage, read_write> dwpe: array<f32>;  // (T, C)

@compute @workgroup_size(WG)
fn embedding_backward_wpe(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_index(gid, nwg);
    if (i >= p.t * p.c) { return; }
    var acc = 0.0;
    for (var b = 0u; b < p.bt / p.t; b = b + 1u) {
        acc = acc + dout[b * p.t * p.c + i];
    }
    dwpe[i] = acc;
}
