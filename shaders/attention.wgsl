// Causal multi-head attention in f32, one thread per (batch, head, row).
// qkv (B, T, 3·H·Dh) holds [q heads | k heads | v heads] per token; out is (B, T, H·Dh);
// att (B, H, T, T) keeps the softmax probabilities (0 above the diagonal) for the backward.
// Query t of a sequence sees keys s with doc_start[t] ≤ s ≤ t: causal within its document
// (doc_start all 0: plain causal). Masked probabilities are stored as 0.
// logits = scale · q·k + bias, where scale = 1/sqrt(Dh), divided by (layer + 1) when that option
// is on, and bias is ALiBi's −slope_h·(t − s) when `alibi` is 1 (SPEC §2a). The bias is constant,
// so the backward is the same with or without it.
//
// The backward runs without atomics in two launches: per query row, the gradient of the
// logits (dpre) and dq; then per key row, dk and dv summed over the query rows that saw it.

struct Params { b: u32, t: u32, h: u32, dh: u32, scale: f32, alibi: u32 }
@group(0) @binding(0) var<uniform> p: Params;

// attention_forward(out, att, qkv)
@group(0) @binding(1) var<storage, read_write> out: array<f32>;   // (B, T, H·Dh)
@group(0) @binding(2) var<storage, read_write> att: array<f32>;   // (B, H, T, T)
@group(0) @binding(3) var<storage, read> qkv: array<f32>;         // (B, T, 3·H·Dh)
@group(0) @binding(4) var<storage, read> doc_start: array<u32>;   // (B, T)

// Offset of head `h`'s slot `part` (0 q, 1 k, 2 v) of token (b, t) in qkv.
fn qkv_at(b: u32, t: u32, h: u32, part: u32) -> u32 {
    let c = p.h * p.dh;
    return (b * p.t + t) * 3u * c + part * c + h * p.dh;
}

// (batch, head, row) of thread i, which handles row `i` of the (B, H, T) rows of att.
fn row_coords(i: u32) -> vec3<u32> {
    return vec3<u32>(i / (p.t * p.h), (i / p.t) % p.h, i % p.t);
}

@compute @workgroup_size(256)
fn attention_forward(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_index(gid, nwg);
    if (i >= p.b * p.h * p.t) { return; }
    let c = row_coords(i);
    let b = c.x;
    let h = c.y;
    let t = c.z;
    let arow = i * p.t;
    let q = qkv_at(b, t, h, 0u);
    let first = min(doc_start[b * p.t + t], t);
    var slope = 0.0;
    if (p.alibi == 1u) { slope = exp2(-8.0 * f32(h + 1u) / f32(p.h)); }
    var mx = F32_LOWEST;
    for (var s = first; s <= t; s = s + 1u) {
        let k = qkv_at(b, s, h, 1u);
        var dot = 0.0;
        for (var d = 0u; d < p.dh; d = d + 1u) { dot = dot + qkv[q + d] * qkv[k + d]; }
        dot = dot * p.scale - slope * f32(t - s);
        att[arow + s] = dot;
        mx = max(mx, dot);
    }
    var sum = 0.0;
    for (var s = first; s <= t; s = s + 1u) {
        let e = exp(att[arow + s] - mx);
        att[arow + s] = e;
        sum = sum + e;
    }
    let inv = 1.0 / sum;
    for (var s = first; s <= t; s = s + 1u) { att[arow + s] = att[arow + s] * inv; }
    for (var s = 0u; s < first; s = s + 1u) { att[arow + s] = 0.0; }
    for (var s = t + 1u; s < p.t; s = s + 1u) { att[arow + s] = 0.0; }
    let o = (b * p.t + t) * p.h * p.dh + h * p.dh;
    for (var d = 0u; d < p.dh; d = d + 1u) {
        var acc = 0.0;
        for (var s = first; s <= t; s = s + 1u) { acc = acc + att[arow + s] * qkv[qkv_at(b, s, h, 2u) + d]; }
        out[o + d] = acc;
    }
}

// attention_backward_{query,key}(dqkv, dpre, dout, qkv, att, doc_start)
@group(0) @binding(1) var<storage, read_write> dqkv: array<f32>;  // (B, T, 3·H·Dh)
@group(0) @binding(2) var<storage, read_write> dpre: array<f32>;  // (B, H, T, T)
@group(0) @binding(3) var<storage, read> dout: array<f32>;        // (B, T, H·Dh)
@group(0) @binding(4) var<storage, read> qkv_in: array<f32>;      // (B, T, 3·H·Dh)
@group(0) @binding(5) var<storage, read> att_in: array<f32>;      // (B, H, T, T)
@group(0) @binding(6) var<storage, read> doc_start_in: array<u32>; // (B, T)

@compute @workgroup_size(256)
fn attention_backward_query(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_index(gid, nwg);
    if (i >= p.b * p.h * p.t) { return; }
    let c = row_coords(i);
    let b = c.x;
    let h = c.y;
    let t = c.z;
    let arow = i * p.t;
    let o = (b * p.t + t) * p.h * p.dh + h * p.dh;
    let first = min(doc_start_in[b * p.t + t], t);
    // dpre = att ⊙ (datt - Σ att·datt), with datt[s] = dout_t · v_s
    var tmp = 0.0;
    for (var s = first; s <= t; s = s + 1u) {
        let v = qkv_at(b, s, h, 2u);
        var datt = 0.0;
        for (var d = 0u; d < p.dh; d = d + 1u) { datt = datt + dout[o + d] * qkv_in[v + d]; }
        dpre[arow + s] = datt;
        tmp = tmp + att_in[arow + s] * datt;
    }
    for (var s = first; s <= t; s = s + 1u) { dpre[arow + s] = att_in[arow + s] * (dpre[arow + s] - tmp); }
    for (var s = 0u; s < first; s = s + 1u) { dpre[arow + s] = 0.0; }
    for (var s = t + 1u; s < p.t; s = s + 1u) { dpre[arow + s] = 0.0; }
    let q = qkv_at(b, t, h, 0u);
    for (var d = 0u; d < p.dh; d = d + 1u) {
        var acc = 0.0;
        for (var s = first; s <= t; s = s + 1u) { acc = acc + dpre[arow + s] * qkv_in[qkv_at(b, s, h, 1u) + d]; }
        dqkv[q + d] = acc * p.scale;
    }
}

@compute @workgroup_size(256)
fn attention_backward_key(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_index(gid, nwg);
    if (i >= p.b * p.h * p.t) { return; }
    let c = row_coords(i);
    let b = c.x;
    let h = c.y;
    let s = c.z;
    let head = (b * p.h + h) * p.t;
    let k = qkv_at(b, s, h, 1u);
    let v = qkv_at(b, s, h, 2u);
    for (var d = 0u; d < p.dh; d = d + 1u) {
        var dk = 0.0;
        var dv = 0.0;
        for (var t = s; t < p.t; t = t + 1u) {
            // Queries of later documents never saw key s.
            if (min(doc_start_in[b * p.t + t], t) > s) { continue; }
            let a = (head + t) * p.t + s;
            dk = dk + dpre[a] * qkv_in[qkv_at(b, t, h, 0u) + d];
            dv = dv + att_in[a] * dout[(b * p.t + t) * p.h * p.dh + h * p.dh + d];
        }
        dqkv[k + d] = dk * p.scale;
        dqkv[v + d] = dv;
    }
}
