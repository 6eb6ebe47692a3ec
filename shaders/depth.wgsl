// Attention over depth, Attention Residuals' read (ops/depth.rs has the equations): a token's
// sources are the first `sources` rows of its (rows, D) block of x, mixed by a softmax over
// (w ⊙ γ)·RMSNorm(v_i). One workgroup a token for the read and its sources' gradients; the
// parameters' gradients sum the tokens up in a column pass.

struct Params { tokens: u32, rows: u32, sources: u32, width: u32, eps: f32, normed_keys: u32 }
@group(0) @binding(0) var<uniform> p: Params;

// depth_read(h, alpha, x, query): query (2, D) holds w, then γ.
@group(0) @binding(1) var<storage, read_write> h: array<f32>;      // (tokens, D)
@group(0) @binding(2) var<storage, read_write> alpha: array<f32>;  // (tokens, sources)
@group(0) @binding(3) var<storage, read> x: array<f32>;            // (tokens, rows, D)
@group(0) @binding(4) var<storage, read> query: array<f32>;        // (2, D)

fn q(c: u32) -> f32 { return query[c] * query[p.width + c]; }

// One source's (rstd, z), which starts at `base` in x; every thread of the workgroup gets them.
fn source_logit(lid: u32, base: u32) -> vec2<f32> {
    var s2 = 0.0;
    var qv = 0.0;
    for (var i = lid; i < p.width; i = i + WG) {
        let v = x[base + i];
        s2 = s2 + v * v;
        qv = qv + q(i) * v;
    }
    // Raw keys (the paper's Table 4 ablation) have rstd 1.
    let rstd = select(1.0, inverseSqrt(workgroup_sum(lid, s2) / f32(p.width) + p.eps), p.normed_keys != 0u);
    return vec2<f32>(rstd, workgroup_sum(lid, qv) * rstd);
}

@compute @workgroup_size(WG)
fn depth_read(@builtin(local_invocation_id) lid3: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let t = flat_group(wid, nwg);
    if (t >= p.tokens) { return; }
    let lid = lid3.x;
    let base = t * p.rows * p.width;
    var a: array<f32, MAX_SOURCES>;
    var top = F32_LOWEST;
    for (var i = 0u; i < p.sources; i = i + 1u) {
        a[i] = source_logit(lid, base + i * p.width).y;
        top = max(top, a[i]);
    }
    var total = 0.0;
    for (var i = 0u; i < p.sources; i = i + 1u) {
        a[i] = exp(a[i] - top);
        total = total + a[i];
    }
    for (var i = 0u; i < p.sources; i = i + 1u) {
        a[i] = a[i] / total;
        if (lid == 0u) { alpha[t * p.sources + i] = a[i]; }
    }
    for (var c = lid; c < p.width; c = c + WG) {
        var acc = 0.0;
        for (var i = 0u; i < p.sources; i = i + 1u) { acc = acc + a[i] * x[base + i * p.width + c]; }
        h[t * p.width + c] = acc;
    }
}

// depth_backward_sources(dx, scratch, x, query, -, dh, alpha): dx += ∂L/∂x over the sources;
// scratch (tokens, sources) = dz_i·rstd_i.
@group(0) @binding(1) var<storage, read_write> dx: array<f32>;       // (tokens, rows, D)
@group(0) @binding(2) var<storage, read_write> scratch: array<f32>;  // (tokens, sources)
@group(0) @binding(6) var<storage, read> dh: array<f32>;             // (tokens, D)
@group(0) @binding(7) var<storage, read> saved: array<f32>;          // (tokens, sources) α

@compute @workgroup_size(WG)
fn depth_backward_sources(@builtin(local_invocation_id) lid3: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let t = flat_group(wid, nwg);
    if (t >= p.tokens) { return; }
    let lid = lid3.x;
    let base = t * p.rows * p.width;
    var rstd: array<f32, MAX_SOURCES>;
    var z: array<f32, MAX_SOURCES>;
    var dz: array<f32, MAX_SOURCES>;
    var mean = 0.0;
    for (var i = 0u; i < p.sources; i = i + 1u) {
        let src = base + i * p.width;
        let lz = source_logit(lid, src);
        rstd[i] = lz.x;
        z[i] = lz.y;
        var s = 0.0;
        for (var c = lid; c < p.width; c = c + WG) { s = s + x[src + c] * dh[t * p.width + c]; }
        dz[i] = workgroup_sum(lid, s);
        mean = mean + saved[t * p.sources + i] * dz[i];
    }
    for (var i = 0u; i < p.sources; i = i + 1u) {
        dz[i] = saved[t * p.sources + i] * (dz[i] - mean) * rstd[i];
        if (lid == 0u) { scratch[t * p.sources + i] = dz[i]; }
    }
    let n = f32(p.width);
    for (var c = lid; c < p.width; c = c + WG) {
        let g = dh[t * p.width + c];
        let qc = q(c);
        for (var i = 0u; i < p.sources; i = i + 1u) {
            let at = base + i * p.width + c;
            let through_norm = select(0.0, x[at] * rstd[i] * z[i] / n, p.normed_keys != 0u);
            dx[at] = dx[at] + saved[t * p.sources + i] * g + dz[i] * (qc - through_norm);
        }
    }
}

// depth_backward_query(dquery, -, x, query, -, -, -, scratch): s = Σ_t Σ_i scratch[t,i]·x[t,i,:],
// a workgroup per SUM_COLS columns (`column_total` in common.wgsl); dw = γ ⊙ s, dγ = w ⊙ s.
@group(0) @binding(1) var<storage, read_write> dquery: array<f32>;  // (2, D)
@group(0) @binding(8) var<storage, read> dzr: array<f32>;           // (tokens, sources)

fn query_term(t: u32, col: u32) -> f32 {
    var acc = 0.0;
    for (var i = 0u; i < p.sources; i = i + 1u) {
        acc = acc + dzr[t * p.sources + i] * x[(t * p.rows + i) * p.width + col];
    }
    return acc;
}

@compute @workgroup_size(WG)
fn depth_backward_query(@builtin(local_invocation_id) lid3: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let lid = lid3.x;
    let col = flat_group(wid, nwg) * SUM_COLS + lid % SUM_COLS;
    var acc = 0.0;
    if (col < p.width) {
        for (var t = lid / SUM_COLS; t < p.tokens; t = t + SUM_LANES) { acc = acc + query_term(t, col); }
    }
    let total = column_total(lid, acc);
    if (lid < SUM_COLS && col < p.width) {
        dquery[col] = query[p.width + col] * total;
        dquery[p.width + col] = query[col] * total;
    }
}
