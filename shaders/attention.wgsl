// Causal multi-head attention in f32, FlashAttention-style: no (T, T) matrix is ever kept.
// qkv (B, T, 3·H·Dh) holds [q heads | k heads | v heads] per token; out is (B, T, H·Dh).
// Query i of a sequence sees keys j with start(i) ≤ j ≤ i, start(i) = min(doc_start[i], i):
// causal within its document (doc_start all 0: plain causal).
// logit(i, j) = scale · q_i·k_j − slope_h · (i − j), where scale = 1/sqrt(Dh), divided by
// (layer + 1) when that option is on, and slope_h is ALiBi's when `alibi` is 1, else 0 (SPEC §2a).
//
// The forward runs one workgroup of TILE × TILE threads per (batch, head, tile of TILE query
// rows): thread (r, c) computes the logit of row r with key c of each key tile, and accumulates
// out's columns c, c + TILE, … of row r with an online softmax (running max m and sum l).
// It saves lse (B, H, T) = m + log l for the backward. q, k and v tiles sit in workgroup memory
// CHUNK head dimensions at a time (10 KiB in all). A thread accumulates up to 128 columns, so a
// wider head takes one workgroup per 128 columns, each computing the whole logits.
//
// The backward recomputes P(i, j) = exp(logit(i, j) − lse_i) tile by tile, without atomics, in
// three launches: delta_i = dout_i·out_i per row; per query tile, dq = scale·Σ_j dS·k_j with
// dS = P ⊙ (dout_i·v_j − delta_i); per key tile, dk = scale·Σ_i dS·q_i and dv = Σ_i P·dout_i.
// Every value is written by one thread, its sum taken in a fixed order.

struct Params { b: u32, t: u32, h: u32, dh: u32, scale: f32, alibi: u32 }
@group(0) @binding(0) var<uniform> p: Params;

const TILE: u32 = 16u;   // query rows and keys per tile; a workgroup is TILE × TILE threads
const CHUNK: u32 = 32u;  // head dimensions per chunk in workgroup memory
const CHUNKS: u32 = 4u;  // the 128 columns one workgroup accumulates, in chunks
const PER: u32 = 2u;     // CHUNK / TILE: accumulators per thread and chunk
const NONE: u32 = 0xffffffffu;

// attention_forward(out, lse, qkv, doc_start)
@group(0) @binding(1) var<storage, read_write> out: array<f32>;  // (B, T, H·Dh)
@group(0) @binding(2) var<storage, read_write> lse: array<f32>;  // (B, H, T)
@group(0) @binding(3) var<storage, read> qkv: array<f32>;        // (B, T, 3·H·Dh)
@group(0) @binding(4) var<storage, read> doc_start: array<u32>;  // (B, T)

// attention_backward_{delta,query,key}(dqkv, delta, dout, out, qkv, lse, doc_start); the delta
// pass binds 2, 3 and 4 only, the others all but 4.
@group(0) @binding(1) var<storage, read_write> dqkv: array<f32>;    // (B, T, 3·H·Dh)
@group(0) @binding(2) var<storage, read_write> delta: array<f32>;   // (B, H, T), the delta pass
@group(0) @binding(2) var<storage, read> delta_in: array<f32>;      // (B, H, T), read after it
@group(0) @binding(3) var<storage, read> dout: array<f32>;          // (B, T, H·Dh)
@group(0) @binding(4) var<storage, read> out_in: array<f32>;        // (B, T, H·Dh)
@group(0) @binding(5) var<storage, read> qkv_in: array<f32>;        // (B, T, 3·H·Dh)
@group(0) @binding(6) var<storage, read> lse_in: array<f32>;        // (B, H, T)
@group(0) @binding(7) var<storage, read> doc_start_in: array<u32>;  // (B, T)

// Tiles of TILE rows × CHUNK head dimensions, row-major; ts and tp are TILE × TILE.
var<workgroup> ta: array<f32, 512>;  // q
var<workgroup> tb: array<f32, 512>;  // k (the forward's v too)
var<workgroup> tc: array<f32, 512>;  // dout
var<workgroup> td: array<f32, 512>;  // v
var<workgroup> ts: array<f32, 256>;  // logits, or their gradients dS
var<workgroup> tp: array<f32, 256>;  // probabilities

// Where element `e` of chunk `ch` of a tile of rows from token t0 sits in a (B, T, stride) array
// whose head h starts at `base` in a row: an index, or NONE past the sequence or the head.
fn tile_at(b: u32, t0: u32, ch: u32, e: u32, stride: u32, base: u32) -> u32 {
    let t = t0 + e / CHUNK;
    let d = ch * CHUNK + e % CHUNK;
    if (t >= p.t || d >= p.dh) { return NONE; }
    return (b * p.t + t) * stride + base + d;
}

// Element e of chunk ch of part `part` (0 q, 1 k, 2 v) of head h, rows from t0: the forward's
// binding, then the backward's.
fn qkv_value(b: u32, h: u32, part: u32, t0: u32, ch: u32, e: u32) -> f32 {
    let at = tile_at(b, t0, ch, e, 3u * p.h * p.dh, (part * p.h + h) * p.dh);
    if (at == NONE) { return 0.0; }
    return qkv[at];
}

fn qkv_in_value(b: u32, h: u32, part: u32, t0: u32, ch: u32, e: u32) -> f32 {
    let at = tile_at(b, t0, ch, e, 3u * p.h * p.dh, (part * p.h + h) * p.dh);
    if (at == NONE) { return 0.0; }
    return qkv_in[at];
}

fn dout_value(b: u32, h: u32, t0: u32, ch: u32, e: u32) -> f32 {
    let at = tile_at(b, t0, ch, e, p.h * p.dh, h * p.dh);
    if (at == NONE) { return 0.0; }
    return dout[at];
}

// Offset of head `h`'s slot `part` (0 q, 1 k, 2 v) of token (b, t) in qkv.
fn qkv_at(b: u32, t: u32, h: u32, part: u32) -> u32 {
    let c = p.h * p.dh;
    return (b * p.t + t) * 3u * c + part * c + h * p.dh;
}

fn slope_of(h: u32) -> f32 {
    if (p.alibi == 1u) { return exp2(-8.0 * f32(h + 1u) / f32(p.h)); }
    return 0.0;
}

// The head dimensions chunk ch holds.
fn chunk_width(ch: u32) -> u32 {
    return min(CHUNK, p.dh - ch * CHUNK);
}

// (batch, head, first row, first chunk of its columns) of a tile workgroup, or x = NONE past
// the last tile.
fn tile_of(wid: vec3<u32>, nwg: vec3<u32>) -> vec4<u32> {
    let tiles = (p.t + TILE - 1u) / TILE;
    let chunks = (p.dh + CHUNK - 1u) / CHUNK;
    let columns = (chunks + CHUNKS - 1u) / CHUNKS;
    let flat = flat_group(wid, nwg);
    if (flat >= p.b * p.h * tiles * columns) { return vec4<u32>(NONE, 0u, 0u, 0u); }
    let g = flat / columns;
    return vec4<u32>(g / (p.h * tiles), (g / tiles) % p.h, (g % tiles) * TILE, (flat % columns) * CHUNKS);
}

@compute @workgroup_size(256)
fn attention_forward(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let tile = tile_of(wid, nwg);
    if (tile.x == NONE) { return; }
    let b = tile.x;
    let h = tile.y;
    let i0 = tile.z;
    let c0 = tile.w;
    let r = lid / TILE;
    let c = lid % TILE;
    let i = i0 + r;
    let live = i < p.t;
    var first = 0u;
    if (live) { first = min(doc_start[b * p.t + i], i); }
    // Key tiles from the first key any row sees to the last row: the same for every thread.
    let end = min(i0 + TILE, p.t);
    var k_first = end;
    for (var x = i0; x < end; x = x + 1u) { k_first = min(k_first, min(doc_start[b * p.t + x], x)); }
    let slope = slope_of(h);
    let chunks = (p.dh + CHUNK - 1u) / CHUNK;
    // With a single chunk, q is loaded once; the first barrier below publishes it.
    let q_once = chunks == 1u;
    if (q_once) {
        for (var e = lid; e < TILE * CHUNK; e = e + WG) { ta[e] = qkv_value(b, h, 0u, i0, 0u, e); }
    }
    var m = F32_LOWEST;
    var l = 0.0;
    var o: array<f32, 8>;  // CHUNKS · PER
    for (var j0 = k_first; j0 < end; j0 = j0 + TILE) {
        var dot = 0.0;
        for (var ch = 0u; ch < chunks; ch = ch + 1u) {
            for (var e = lid; e < TILE * CHUNK; e = e + WG) {
                if (!q_once) { ta[e] = qkv_value(b, h, 0u, i0, ch, e); }
                tb[e] = qkv_value(b, h, 1u, j0, ch, e);
            }
            workgroupBarrier();
            let w = chunk_width(ch);
            for (var x = 0u; x < w; x = x + 1u) { dot = dot + ta[r * CHUNK + x] * tb[c * CHUNK + x]; }
            workgroupBarrier();
        }
        let j = j0 + c;
        let seen = live && first <= j && j <= i;
        var s = F32_LOWEST;
        if (seen) { s = dot * p.scale - slope * f32(i - j); }
        ts[lid] = s;
        workgroupBarrier();
        var mx = m;
        for (var x = 0u; x < TILE; x = x + 1u) { mx = max(mx, ts[r * TILE + x]); }
        var e_s = 0.0;
        if (seen) { e_s = exp(s - mx); }
        tp[lid] = e_s;
        workgroupBarrier();
        var sum = 0.0;
        for (var x = 0u; x < TILE; x = x + 1u) { sum = sum + tp[r * TILE + x]; }
        // Both are F32_LOWEST until the row sees a key: alpha is then 1 on l = 0 and o = 0.
        let alpha = exp(m - mx);
        l = l * alpha + sum;
        m = mx;
        for (var ch = 0u; ch < CHUNKS; ch = ch + 1u) {
            let cc = c0 + ch;
            if (cc < chunks) {
                for (var e = lid; e < TILE * CHUNK; e = e + WG) { tb[e] = qkv_value(b, h, 2u, j0, cc, e); }
                workgroupBarrier();
                for (var u = 0u; u < PER; u = u + 1u) {
                    var acc = o[ch * PER + u] * alpha;
                    for (var y = 0u; y < TILE; y = y + 1u) { acc = acc + tp[r * TILE + y] * tb[y * CHUNK + u * TILE + c]; }
                    o[ch * PER + u] = acc;
                }
                workgroupBarrier();
            }
        }
    }
    if (live) {
        if (c0 == 0u) { lse[(b * p.h + h) * p.t + i] = m + log(l); }
        let inv = 1.0 / l;
        let at = (b * p.t + i) * p.h * p.dh + h * p.dh;
        for (var ch = 0u; ch < CHUNKS; ch = ch + 1u) {
            for (var u = 0u; u < PER; u = u + 1u) {
                let d = (c0 + ch) * CHUNK + u * TILE + c;
                if (d < p.dh) { out[at + d] = o[ch * PER + u] * inv; }
            }
        }
    }
}

// delta (B, H, T): dout_i · out_i per row, one thread per (batch, head, row).
@compute @workgroup_size(256)
fn attention_backward_delta(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_index(gid, nwg);
    if (i >= p.b * p.h * p.t) { return; }
    let b = i / (p.t * p.h);
    let h = (i / p.t) % p.h;
    let t = i % p.t;
    let at = (b * p.t + t) * p.h * p.dh + h * p.dh;
    var acc = 0.0;
    for (var d = 0u; d < p.dh; d = d + 1u) { acc = acc + dout[at + d] * out_in[at + d]; }
    delta[i] = acc;
}

// dq of one query tile: thread (r, c) recomputes P and dS of row r with key c of each key tile,
// then accumulates dq's columns c, c + TILE, … of row r.
@compute @workgroup_size(256)
fn attention_backward_query(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let tile = tile_of(wid, nwg);
    if (tile.x == NONE) { return; }
    let b = tile.x;
    let h = tile.y;
    let i0 = tile.z;
    let c0 = tile.w;
    let r = lid / TILE;
    let c = lid % TILE;
    let i = i0 + r;
    let live = i < p.t;
    var first = 0u;
    var lse_i = 0.0;
    var delta_i = 0.0;
    if (live) {
        first = min(doc_start_in[b * p.t + i], i);
        lse_i = lse_in[(b * p.h + h) * p.t + i];
        delta_i = delta_in[(b * p.h + h) * p.t + i];
    }
    let end = min(i0 + TILE, p.t);
    var k_first = end;
    for (var x = i0; x < end; x = x + 1u) { k_first = min(k_first, min(doc_start_in[b * p.t + x], x)); }
    let slope = slope_of(h);
    let chunks = (p.dh + CHUNK - 1u) / CHUNK;
    // With a single chunk, q and dout are loaded once and k stays in tb for dq.
    let once = chunks == 1u;
    if (once) {
        for (var e = lid; e < TILE * CHUNK; e = e + WG) {
            ta[e] = qkv_in_value(b, h, 0u, i0, 0u, e);
            tc[e] = dout_value(b, h, i0, 0u, e);
        }
    }
    var dq: array<f32, 8>;  // CHUNKS · PER
    for (var j0 = k_first; j0 < end; j0 = j0 + TILE) {
        var dot = 0.0;
        var dp = 0.0;
        for (var ch = 0u; ch < chunks; ch = ch + 1u) {
            for (var e = lid; e < TILE * CHUNK; e = e + WG) {
                if (!once) {
                    ta[e] = qkv_in_value(b, h, 0u, i0, ch, e);
                    tc[e] = dout_value(b, h, i0, ch, e);
                }
                tb[e] = qkv_in_value(b, h, 1u, j0, ch, e);
                td[e] = qkv_in_value(b, h, 2u, j0, ch, e);
            }
            workgroupBarrier();
            let w = chunk_width(ch);
            for (var x = 0u; x < w; x = x + 1u) {
                dot = dot + ta[r * CHUNK + x] * tb[c * CHUNK + x];
                dp = dp + tc[r * CHUNK + x] * td[c * CHUNK + x];
            }
            workgroupBarrier();
        }
        let j = j0 + c;
        var ds = 0.0;
        if (live && first <= j && j <= i) {
            let pr = exp(dot * p.scale - slope * f32(i - j) - lse_i);
            ds = pr * (dp - delta_i);
        }
        ts[lid] = ds;
        for (var ch = 0u; ch < CHUNKS; ch = ch + 1u) {
            let cc = c0 + ch;
            if (cc < chunks) {
                if (!once) {
                    for (var e = lid; e < TILE * CHUNK; e = e + WG) { tb[e] = qkv_in_value(b, h, 1u, j0, cc, e); }
                }
                workgroupBarrier();
                for (var u = 0u; u < PER; u = u + 1u) {
                    var acc = dq[ch * PER + u];
                    for (var y = 0u; y < TILE; y = y + 1u) { acc = acc + ts[r * TILE + y] * tb[y * CHUNK + u * TILE + c]; }
                    dq[ch * PER + u] = acc;
                }
                workgroupBarrier();
            }
        }
    }
    if (live) {
        let at = qkv_at(b, i, h, 0u);
        for (var ch = 0u; ch < CHUNKS; ch = ch + 1u) {
            for (var u = 0u; u < PER; u = u + 1u) {
                let d = (c0 + ch) * CHUNK + u * TILE + c;
                if (d < p.dh) { dqkv[at + d] = dq[ch * PER + u] * p.scale; }
            }
        }
    }
}

// dk and dv of one key tile: thread (a, e) recomputes P and dS of key a with query e of each
// query tile from the key tile's first key on, then accumulates dk's and dv's columns
// e, e + TILE, … of key a.
@compute @workgroup_size(256)
fn attention_backward_key(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let tile = tile_of(wid, nwg);
    if (tile.x == NONE) { return; }
    let b = tile.x;
    let h = tile.y;
    let j0 = tile.z;
    let c0 = tile.w;
    let a = lid / TILE;
    let e = lid % TILE;
    let j = j0 + a;
    let key_live = j < p.t;
    let slope = slope_of(h);
    let chunks = (p.dh + CHUNK - 1u) / CHUNK;
    // With a single chunk, k and v are loaded once and q and dout stay in ta and tc.
    let once = chunks == 1u;
    if (once) {
        for (var x = lid; x < TILE * CHUNK; x = x + WG) {
            tb[x] = qkv_in_value(b, h, 1u, j0, 0u, x);
            td[x] = qkv_in_value(b, h, 2u, j0, 0u, x);
        }
    }
    var dk: array<f32, 8>;  // CHUNKS · PER
    var dv: array<f32, 8>;
    for (var i0 = j0; i0 < p.t; i0 = i0 + TILE) {
        let i = i0 + e;
        var dot = 0.0;
        var dp = 0.0;
        for (var ch = 0u; ch < chunks; ch = ch + 1u) {
            for (var x = lid; x < TILE * CHUNK; x = x + WG) {
                ta[x] = qkv_in_value(b, h, 0u, i0, ch, x);
                tc[x] = dout_value(b, h, i0, ch, x);
                if (!once) {
                    tb[x] = qkv_in_value(b, h, 1u, j0, ch, x);
                    td[x] = qkv_in_value(b, h, 2u, j0, ch, x);
                }
            }
            workgroupBarrier();
            let w = chunk_width(ch);
            for (var x = 0u; x < w; x = x + 1u) {
                dot = dot + ta[e * CHUNK + x] * tb[a * CHUNK + x];
                dp = dp + tc[e * CHUNK + x] * td[a * CHUNK + x];
            }
            workgroupBarrier();
        }
        var pr = 0.0;
        var ds = 0.0;
        if (key_live && i < p.t && j <= i && min(doc_start_in[b * p.t + i], i) <= j) {
            let row = (b * p.h + h) * p.t + i;
            pr = exp(dot * p.scale - slope * f32(i - j) - lse_in[row]);
            ds = pr * (dp - delta_in[row]);
        }
        // Key-major: key a's row holds its probability and dS with each query of the tile.
        tp[lid] = pr;
        ts[lid] = ds;
        for (var ch = 0u; ch < CHUNKS; ch = ch + 1u) {
            let cc = c0 + ch;
            if (cc < chunks) {
                if (!once) {
                    for (var x = lid; x < TILE * CHUNK; x = x + WG) {
                        ta[x] = qkv_in_value(b, h, 0u, i0, cc, x);
                        tc[x] = dout_value(b, h, i0, cc, x);
                    }
                }
                workgroupBarrier();
                for (var u = 0u; u < PER; u = u + 1u) {
                    var acc_k = dk[ch * PER + u];
                    var acc_v = dv[ch * PER + u];
                    for (var y = 0u; y < TILE; y = y + 1u) {
                        acc_k = acc_k + ts[a * TILE + y] * ta[y * CHUNK + u * TILE + e];
                        acc_v = acc_v + tp[a * TILE + y] * tc[y * CHUNK + u * TILE + e];
                    }
                    dk[ch * PER + u] = acc_k;
                    dv[ch * PER + u] = acc_v;
                }
                workgroupBarrier();
            }
        }
    }
    if (key_live) {
        let k_at = qkv_at(b, j, h, 1u);
        let v_at = qkv_at(b, j, h, 2u);
        for (var ch = 0u; ch < CHUNKS; ch = ch + 1u) {
            for (var u = 0u; u < PER; u = u + 1u) {
                let d = (c0 + ch) * CHUNK + u * TILE + e;
                if (d < p.dh) {
                    dqkv[k_at + d] = dk[ch * PER + u] * p.scale;
                    dqkv[v_at + d] = dv[ch * PER + u];
                }
            }
        }
    }
}
