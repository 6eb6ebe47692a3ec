// LayerNorm (kind LAYER_NORM) and RMSNorm (kind RMS_NORM, defines from ops/norm.rs) over the last axis of (rows, C), with a gain and no
// bias. One workgroup per row, so C can be a whole RMT residual matrix (D_k·D_v values).
//   LayerNorm: y = (x - mean)·rstd·g, rstd = 1/sqrt(var + eps)
//   RMSNorm:   y = x·rstd·g,          rstd = 1/sqrt(mean(x²) + eps)
// stats (rows, 2) keeps (mean, rstd) for the backward; mean is 0 for RMSNorm.

struct Params { rows: u32, c: u32, kind: u32, eps: f32 }
@group(0) @binding(0) var<uniform> p: Params;

// norm_forward(out, stats, x, gain)
@group(0) @binding(1) var<storage, read_write> out: array<f32>;    // (rows, C)
@group(0) @binding(2) var<storage, read_write> stats: array<f32>;  // (rows, 2)
@group(0) @binding(3) var<storage, read> x: array<f32>;            // (rows, C)
@group(0) @binding(4) var<storage, read> gain: array<f32>;         // (C)

// (mean, rstd) of one row, which starts at `base` in x; every thread of the workgroup gets them.
fn row_stats(lid: u32, base: u32) -> vec2<f32> {
    let n = f32(p.c);
    var mean = 0.0;
    if (p.kind == LAYER_NORM) {
        var s = 0.0;
        for (var i = lid; i < p.c; i = i + WG) { s = s + x[base + i]; }
        mean = workgroup_sum(lid, s) / n;
    }
    var s2 = 0.0;
    for (var i = lid; i < p.c; i = i + WG) { let d = x[base + i] - mean; s2 = s2 + d * d; }
    return vec2<f32>(mean, inverseSqrt(workgroup_sum(lid, s2) / n + p.eps));
}

@compute @workgroup_size(WG)
fn norm_forward(@builtin(local_invocation_id) lid3: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let row = flat_group(wid, nwg);
    if (row >= p.rows) { return; }
    let lid = lid3.x;
    let base = row * p.c;
    let st = row_stats(lid, base);
    for (var i = lid; i < p.c; i = i + WG) { out[base + i] = (x[base + i] - st.x) * st.y * gain[i]; }
    if (lid == 0u) {
        stats[2u * row] = st.x;
        stats[2u * row + 1u] = st.y;
    }
}

// norm_stats(-, stats, x): the statistics alone, for ops that normalise as they read (the RMT's
// fused retrieval), so the normalised rows are never written.
@compute @workgroup_size(WG)
fn norm_stats(@builtin(local_invocation_id) lid3: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let row = flat_group(wid, nwg);
    if (row >= p.rows) { return; }
    let st = row_stats(lid3.x, row * p.c);
    if (lid3.x == 0u) {
        stats[2u * row] = st.x;
        stats[2u * row + 1u] = st.y;
    }
}

// norm_backward_input(dx, dout, x, gain, stats): dx += ∂L/∂x
@group(0) @binding(1) var<storage, read_write> dx: array<f32>;      // (rows, C)
@group(0) @binding(2) var<storage, read> dout: array<f32>;          // (rows, C)
@group(0) @binding(5) var<storage, read> saved: array<f32>;         // (rows, 2)

@compute @workgroup_size(WG)
fn norm_backward_input(@builtin(local_invocation_id) lid3: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let row = flat_group(wid, nwg);
    if (row >= p.rows) { return; }
    let lid = lid3.x;
    let base = row * p.c;
    let n = f32(p.c);
    let mean = saved[2u * row];
    let rstd = saved[2u * row + 1u];
    var s1 = 0.0;
    var s2 = 0.0;
    for (var i = lid; i < p.c; i = i + WG) {
        let dn = dout[base + i] * gain[i];
        s1 = s1 + dn;
        s2 = s2 + dn * (x[base + i] - mean) * rstd;
    }
    var mean_dn = workgroup_sum(lid, s1) / n;
    let mean_dn_norm = workgroup_sum(lid, s2) / n;
    if (p.kind != LAYER_NORM) { mean_dn = 0.0; }
    for (var i = lid; i < p.c; i = i + WG) {
        let dn = dout[base + i] * gain[i];
        let nrm = (x[base + i] - mean) * rstd;
        dx[base + i] = dx[base + i] + rstd * (dn - mean_dn - nrm * mean_dn_norm);
    }
}

// norm_backward_gain(dgain, dout, x, -, stats): a workgroup sums SUM_COLS columns over all rows
// (`column_total` in common.wgsl).
@group(0) @binding(1) var<storage, read_write> dgain: array<f32>;   // (C)

// Row r's term of dgain[col]: dout · Norm(x) without the gain.
fn gain_term(r: u32, col: u32) -> f32 {
    return dout[r * p.c + col] * (x[r * p.c + col] - saved[2u * r]) * saved[2u * r + 1u];
}

@compute @workgroup_size(WG)
fn norm_backward_gain(@builtin(local_invocation_id) lid3: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let lid = lid3.x;
    let col = flat_group(wid, nwg) * SUM_COLS + lid % SUM_COLS;
    var acc = 0.0;
    if (col < p.c) {
        // Four rows a pass, their reads issued together, added in the same order as one at a
        // time: row by row, each lane waited on every read (the H100's toy RMT: 128 µs a call,
        // 64 workgroups walking 4,096 rows).
        var r = lid / SUM_COLS;
        for (; r + 3u * SUM_LANES < p.rows; r = r + 4u * SUM_LANES) {
            let g0 = gain_term(r, col);
            let g1 = gain_term(r + SUM_LANES, col);
            let g2 = gain_term(r + 2u * SUM_LANES, col);
            let g3 = gain_term(r + 3u * SUM_LANES, col);
            acc = acc + g0;
            acc = acc + g1;
            acc = acc + g2;
            acc = acc + g3;
        }
        for (; r < p.rows; r = r + SUM_LANES) { acc = acc + gain_term(r, col); }
    }
    let total = column_total(lid, acc);
    if (lid < SUM_COLS && col < p.c) { dgain[col] = total; }
}
