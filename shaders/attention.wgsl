// Causal multi-head attention in f32, FlashAttention-style: no (T, T) matrix is ever kept.
// qkv (B, T, 3·H·Dh) holds [q heads | k heads | v heads] per token; out is (B, T, H·Dh).
// Query i of a sequence sees keys j with start(i) ≤ j ≤ i, start(i) = min(doc_start[i], i):
// causal within its document (doc_start all 0: plain causal).
// logit(i, j) = scale · q_i·k_j − slope_h · (i − j), where scale = 1/sqrt(Dh), divided by
// (layer + 1) when that option is on, and slope_h is ALiBi's when `alibi` is 1, else 0 (SPEC §2a).
//
// The forward runs one workgroup of ROWS threads per (batch, head, tile of ROWS query rows),
// one thread per row: for each tile of ROWS keys it computes its row's logits, then updates its
// output with an online softmax (running max m and sum l), and finally saves
// lse (B, H, T) = m + log l for the backward. q, k and v tiles sit in workgroup memory CHUNK head
// dimensions at a time (12.4 KiB in all); reads of the tile being swept are the same address in
// every thread. A thread accumulates up to COLUMNS = CHUNKS·CHUNK = 128 output columns, so a
// wider head takes one workgroup per 128 columns, each computing the whole logits. ROWS, CHUNK
// and COLUMNS are defines, from ops/attention.rs.
//
// The backward recomputes P(i, j) = exp(logit(i, j) − lse_i) tile by tile, without atomics, in
// three launches: delta_i = dout_i·out_i per row; per query tile (a thread per query),
// dq = scale·Σ_j dS·k_j with dS = P ⊙ (dout_i·v_j − delta_i); per key tile (a thread per key),
// dk = scale·Σ_i dS·q_i and dv = Σ_i P·dout_i. Every value is written by one thread, its sum
// taken in a fixed order.

struct Params { b: u32, t: u32, h: u32, dh: u32, scale: f32, alibi: u32 }
@group(0) @binding(0) var<uniform> p: Params;

// ROWS: threads per workgroup, query rows (or keys) per tile; CHUNK: head dimensions per chunk
// in workgroup memory.
const STRIDE: u32 = CHUNK + 1u;  // a tile's row stride in workgroup memory, padded against bank conflicts
const CHUNKS: u32 = COLUMNS / CHUNK;  // the COLUMNS output columns one workgroup accumulates, in chunks
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

// Tiles of ROWS rows × CHUNK head dimensions at row stride STRIDE.
var<workgroup> ta: array<f32, ROWS * STRIDE>;  // q
var<workgroup> tb: array<f32, ROWS * STRIDE>;  // k or v
var<workgroup> tc: array<f32, ROWS * STRIDE>;  // dout

// Where element e (row e / CHUNK, column e % CHUNK) of a chunk sits in a tile.
fn slot(e: u32) -> u32 {
    return (e / CHUNK) * STRIDE + e % CHUNK;
}

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

// The logit of query i and key j from their dot product: scale·q·k − slope·(i − j). Every kernel
// computes it here, as one fma, so that a compiler's contraction of a·b − c cannot make two
// kernels differ.
fn logit(dot: f32, slope: f32, i: u32, j: u32) -> f32 {
    return fma(dot, p.scale, -(slope * f32(i - j)));
}

// The head dimensions chunk ch holds.
fn chunk_width(ch: u32) -> u32 {
    return min(CHUNK, p.dh - ch * CHUNK);
}

// (batch, head, first row, first chunk of its columns) of a tile workgroup, or x = NONE past
// the last tile.
fn tile_of(wid: vec3<u32>, nwg: vec3<u32>) -> vec4<u32> {
    let tiles = (p.t + ROWS - 1u) / ROWS;
    let chunks = (p.dh + CHUNK - 1u) / CHUNK;
    let columns = (chunks + CHUNKS - 1u) / CHUNKS;
    let flat = flat_group(wid, nwg);
    if (flat >= p.b * p.h * tiles * columns) { return vec4<u32>(NONE, 0u, 0u, 0u); }
    let g = flat / columns;
    return vec4<u32>(g / (p.h * tiles), (g / tiles) % p.h, (g % tiles) * ROWS, (flat % columns) * CHUNKS);
}

// The first key any row of the tile from i0 sees: the same in every thread.
fn tile_first_key(b: u32, i0: u32, end: u32) -> u32 {
    var first = end;
    for (var x = i0; x < end; x = x + 1u) { first = min(first, min(doc_start[b * p.t + x], x)); }
    return first;
}

fn tile_first_key_in(b: u32, i0: u32, end: u32) -> u32 {
    var first = end;
    for (var x = i0; x < end; x = x + 1u) { first = min(first, min(doc_start_in[b * p.t + x], x)); }
    return first;
}

@compute @workgroup_size(ROWS)
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
    let i = i0 + lid;
    let live = i < p.t;
    var first = 0u;
    if (live) { first = min(doc_start[b * p.t + i], i); }
    let end = min(i0 + ROWS, p.t);
    let slope = slope_of(h);
    let chunks = (p.dh + CHUNK - 1u) / CHUNK;
    // With a single chunk, q is loaded once; the first barrier below publishes it.
    let once = chunks == 1u;
    if (once) {
        for (var e = lid; e < ROWS * CHUNK; e = e + ROWS) { ta[slot(e)] = qkv_value(b, h, 0u, i0, 0u, e); }
    }
    var m = F32_LOWEST;
    var l = 0.0;
    var o: array<f32, COLUMNS>;
    var s: array<f32, ROWS>;  // this row's logits, then probabilities, over the key tile
    for (var j0 = tile_first_key(b, i0, end); j0 < end; j0 = j0 + ROWS) {
        let n = min(ROWS, end - j0);  // keys in this tile
        for (var c = 0u; c < n; c = c + 1u) { s[c] = 0.0; }
        for (var ch = 0u; ch < chunks; ch = ch + 1u) {
            for (var e = lid; e < ROWS * CHUNK; e = e + ROWS) {
                if (!once) { ta[slot(e)] = qkv_value(b, h, 0u, i0, ch, e); }
                tb[slot(e)] = qkv_value(b, h, 1u, j0, ch, e);
            }
            workgroupBarrier();
            let w = chunk_width(ch);
            if (live) {
                for (var c = 0u; c < n; c = c + 1u) {
                    var dot = s[c];
                    for (var x = 0u; x < w; x = x + 1u) { dot = fma(ta[lid * STRIDE + x], tb[c * STRIDE + x], dot); }
                    s[c] = dot;
                }
            }
            workgroupBarrier();
        }
        var mx = m;
        for (var c = 0u; c < n; c = c + 1u) {
            let j = j0 + c;
            if (live && first <= j && j <= i) {
                s[c] = logit(s[c], slope, i, j);
                mx = max(mx, s[c]);
            }
        }
        var sum = 0.0;
        for (var c = 0u; c < n; c = c + 1u) {
            let j = j0 + c;
            var e = 0.0;
            if (live && first <= j && j <= i) { e = exp(s[c] - mx); }
            s[c] = e;
            sum = sum + e;
        }
        // Both are F32_LOWEST until the row sees a key: alpha is then 1 on l = 0 and o = 0.
        let alpha = exp(m - mx);
        l = fma(l, alpha, sum);
        m = mx;
        for (var ch = 0u; ch < CHUNKS; ch = ch + 1u) {
            let cc = c0 + ch;
            if (cc < chunks) {
                for (var e = lid; e < ROWS * CHUNK; e = e + ROWS) { tb[slot(e)] = qkv_value(b, h, 2u, j0, cc, e); }
                workgroupBarrier();
                let w = chunk_width(cc);
                if (live) {
                    for (var x = 0u; x < w; x = x + 1u) {
                        var acc = o[ch * CHUNK + x] * alpha;
                        for (var c = 0u; c < n; c = c + 1u) { acc = fma(s[c], tb[c * STRIDE + x], acc); }
                        o[ch * CHUNK + x] = acc;
                    }
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
            for (var x = 0u; x < CHUNK; x = x + 1u) {
                let d = (c0 + ch) * CHUNK + x;
                if (d < p.dh) { out[at + d] = o[ch * CHUNK + x] * inv; }
            }
        }
    }
}

// delta (B, H, T): dout_i · out_i per row, one thread per (batch, head, row).
@compute @workgroup_size(WG)
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

// dq of one query tile, a thread per query row: for each key tile it recomputes its row's
// P and dS, then adds dS·k into dq.
@compute @workgroup_size(ROWS)
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
    let i = i0 + lid;
    let live = i < p.t;
    var first = 0u;
    var lse_i = 0.0;
    var delta_i = 0.0;
    if (live) {
        first = min(doc_start_in[b * p.t + i], i);
        lse_i = lse_in[(b * p.h + h) * p.t + i];
        delta_i = delta_in[(b * p.h + h) * p.t + i];
    }
    let end = min(i0 + ROWS, p.t);
    let slope = slope_of(h);
    let chunks = (p.dh + CHUNK - 1u) / CHUNK;
    // With a single chunk, q and dout are loaded once, and k stays in tb for dq.
    let once = chunks == 1u;
    if (once) {
        for (var e = lid; e < ROWS * CHUNK; e = e + ROWS) {
            ta[slot(e)] = qkv_in_value(b, h, 0u, i0, 0u, e);
            tc[slot(e)] = dout_value(b, h, i0, 0u, e);
        }
    }
    var dq: array<f32, COLUMNS>;
    var s: array<f32, ROWS>;   // logits, then dS
    var dp: array<f32, ROWS>;  // dout_i · v_j
    for (var j0 = tile_first_key_in(b, i0, end); j0 < end; j0 = j0 + ROWS) {
        let n = min(ROWS, end - j0);  // keys in this tile
        for (var c = 0u; c < n; c = c + 1u) {
            s[c] = 0.0;
            dp[c] = 0.0;
        }
        for (var ch = 0u; ch < chunks; ch = ch + 1u) {
            for (var e = lid; e < ROWS * CHUNK; e = e + ROWS) {
                if (!once) { tc[slot(e)] = dout_value(b, h, i0, ch, e); }
                tb[slot(e)] = qkv_in_value(b, h, 2u, j0, ch, e);
            }
            workgroupBarrier();
            let w = chunk_width(ch);
            if (live) {
                for (var c = 0u; c < n; c = c + 1u) {
                    var dot = dp[c];
                    for (var x = 0u; x < w; x = x + 1u) { dot = fma(tc[lid * STRIDE + x], tb[c * STRIDE + x], dot); }
                    dp[c] = dot;
                }
            }
            workgroupBarrier();
        }
        for (var ch = 0u; ch < chunks; ch = ch + 1u) {
            for (var e = lid; e < ROWS * CHUNK; e = e + ROWS) {
                if (!once) { ta[slot(e)] = qkv_in_value(b, h, 0u, i0, ch, e); }
                tb[slot(e)] = qkv_in_value(b, h, 1u, j0, ch, e);
            }
            workgroupBarrier();
            let w = chunk_width(ch);
            if (live) {
                for (var c = 0u; c < n; c = c + 1u) {
                    var dot = s[c];
                    for (var x = 0u; x < w; x = x + 1u) { dot = fma(ta[lid * STRIDE + x], tb[c * STRIDE + x], dot); }
                    s[c] = dot;
                }
            }
            workgroupBarrier();
        }
        for (var c = 0u; c < n; c = c + 1u) {
            let j = j0 + c;
            var ds = 0.0;
            if (live && first <= j && j <= i) {
                let pr = exp(logit(s[c], slope, i, j) - lse_i);
                ds = pr * (dp[c] - delta_i);
            }
            s[c] = ds;
        }
        for (var ch = 0u; ch < CHUNKS; ch = ch + 1u) {
            let cc = c0 + ch;
            if (cc < chunks) {
                if (!once) {
                    for (var e = lid; e < ROWS * CHUNK; e = e + ROWS) { tb[slot(e)] = qkv_in_value(b, h, 1u, j0, cc, e); }
                }
                workgroupBarrier();
                let w = chunk_width(cc);
                if (live) {
                    for (var x = 0u; x < w; x = x + 1u) {
                        var acc = dq[ch * CHUNK + x];
                        for (var c = 0u; c < n; c = c + 1u) { acc = fma(s[c], tb[c * STRIDE + x], acc); }
                        dq[ch * CHUNK + x] = acc;
                    }
                }
                workgroupBarrier();
            }
        }
    }
    if (live) {
        let at = qkv_at(b, i, h, 0u);
        for (var ch = 0u; ch < CHUNKS; ch = ch + 1u) {
            for (var x = 0u; x < CHUNK; x = x + 1u) {
                let d = (c0 + ch) * CHUNK + x;
                if (d < p.dh) { dqkv[at + d] = dq[ch * CHUNK + x] * p.scale; }
            }
        }
    }
}

// dk and dv of one key tile, a thread per key: for each query tile from the key tile's first
// key on it recomputes P and dS of its key with each query, then adds dS·q into dk and P·dout
// into dv.
@compute @workgroup_size(ROWS)
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
    let j = j0 + lid;
    let key_live = j < p.t;
    let slope = slope_of(h);
    let chunks = (p.dh + CHUNK - 1u) / CHUNK;
    // With a single chunk, q and dout stay in ta and tc for dk and dv.
    let once = chunks == 1u;
    var dk: array<f32, COLUMNS>;
    var dv: array<f32, COLUMNS>;
    var s: array<f32, ROWS>;   // logits, then P
    var dp: array<f32, ROWS>;  // dout_i · v_j, then dS
    for (var i0 = j0; i0 < p.t; i0 = i0 + ROWS) {
        let n = min(ROWS, p.t - i0);  // queries in this tile
        for (var c = 0u; c < n; c = c + 1u) {
            s[c] = 0.0;
            dp[c] = 0.0;
        }
        for (var ch = 0u; ch < chunks; ch = ch + 1u) {
            for (var e = lid; e < ROWS * CHUNK; e = e + ROWS) {
                ta[slot(e)] = qkv_in_value(b, h, 0u, i0, ch, e);
                tb[slot(e)] = qkv_in_value(b, h, 1u, j0, ch, e);
            }
            workgroupBarrier();
            let w = chunk_width(ch);
            if (key_live) {
                for (var c = 0u; c < n; c = c + 1u) {
                    var dot = s[c];
                    for (var x = 0u; x < w; x = x + 1u) { dot = fma(ta[c * STRIDE + x], tb[lid * STRIDE + x], dot); }
                    s[c] = dot;
                }
            }
            workgroupBarrier();
        }
        for (var ch = 0u; ch < chunks; ch = ch + 1u) {
            for (var e = lid; e < ROWS * CHUNK; e = e + ROWS) {
                tc[slot(e)] = dout_value(b, h, i0, ch, e);
                tb[slot(e)] = qkv_in_value(b, h, 2u, j0, ch, e);
            }
            workgroupBarrier();
            let w = chunk_width(ch);
            if (key_live) {
                for (var c = 0u; c < n; c = c + 1u) {
                    var dot = dp[c];
                    for (var x = 0u; x < w; x = x + 1u) { dot = fma(tc[c * STRIDE + x], tb[lid * STRIDE + x], dot); }
                    dp[c] = dot;
                }
            }
            workgroupBarrier();
        }
        for (var c = 0u; c < n; c = c + 1u) {
            let i = i0 + c;
            var pr = 0.0;
            var ds = 0.0;
            if (key_live && i < p.t && j <= i && min(doc_start_in[b * p.t + i], i) <= j) {
                let row = (b * p.h + h) * p.t + i;
                pr = exp(logit(s[c], slope, i, j) - lse_in[row]);
                ds = pr * (dp[c] - delta_in[row]);
            }
            s[c] = pr;
            dp[c] = ds;
        }
        for (var ch = 0u; ch < CHUNKS; ch = ch + 1u) {
            let cc = c0 + ch;
            if (cc < chunks) {
                if (!once) {
                    for (var e = lid; e < ROWS * CHUNK; e = e + ROWS) {
                        ta[slot(e)] = qkv_in_value(b, h, 0u, i0, cc, e);
                        tc[slot(e)] = dout_value(b, h, i0, cc, e);
                    }
                }
                workgroupBarrier();
                let w = chunk_width(cc);
                if (key_live) {
                    for (var x = 0u; x < w; x = x + 1u) {
                        var acc_k = dk[ch * CHUNK + x];
                        var acc_v = dv[ch * CHUNK + x];
                        for (var c = 0u; c < n; c = c + 1u) {
                            acc_k = fma(dp[c], ta[c * STRIDE + x], acc_k);
                            acc_v = fma(s[c], tc[c * STRIDE + x], acc_v);
                        }
                        dk[ch * CHUNK + x] = acc_k;
                        dv[ch * CHUNK + x] = acc_v;
                    }
                }
                workgroupBarrier();
            }
        }
    }
    if (key_live) {
        let k_at = qkv_at(b, j, h, 1u);
        let v_at = qkv_at(b, j, h, 2u);
        for (var ch = 0u; ch < CHUNKS; ch = ch + 1u) {
            for (var x = 0u; x < CHUNK; x = x + 1u) {
                let d = (c0 + ch) * CHUNK + x;
                if (d < p.dh) {
                    dqkv[k_at + d] = dk[ch * CHUNK + x] * p.scale;
                    dqkv[v_at + d] = dv[ch * CHUNK + x];
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The blocked kernels: the row-per-thread kernels' tiles, chains and order again (so the same
// bits; tests/gpu_vs_cpu.rs checks it), with each thread's dot products and outputs a 2×4 block
// of a tile: rows r0 = lid / 8 and r0 + 16, columns lid % 8 + 8·b. Each value read from
// workgroup memory then feeds two or four multiply-adds, and the row state (rescale factor,
// lse, delta, first key) sits in workgroup memory. BLOCK_THREADS (128, a define) threads; ROWS
// and CHUNK are 32 (ops/attention.rs asserts both).

// Per row of the tile: the forward's rescaling factor and final sum; the backward's lse, delta
// and first key.
var<workgroup> row_a: array<f32, ROWS>;
var<workgroup> row_b: array<f32, ROWS>;
var<workgroup> row_first: array<u32, ROWS>;

// Row lid's step of the online softmax over a tile's n keys from j0, its dot products in tc's
// row lid (the blocked forwards): they become the exps, row_a[lid] the factor for the row's
// earlier outputs, and the running max m and sum l move on. `live`: the row is query i
// of the sequence; `first`: its first key.
fn tile_softmax(lid: u32, i: u32, live: bool, first: u32, j0: u32, n: u32, slope: f32, m: ptr<function, f32>, l: ptr<function, f32>) {
    let s = lid * STRIDE;
    var mx = *m;
    for (var c = 0u; c < n; c = c + 1u) {
        let j = j0 + c;
        if (live && first <= j && j <= i) {
            tc[s + c] = logit(tc[s + c], slope, i, j);
            mx = max(mx, tc[s + c]);
        }
    }
    var sum = 0.0;
    for (var c = 0u; c < n; c = c + 1u) {
        let j = j0 + c;
        var e = 0.0;
        if (live && first <= j && j <= i) { e = exp(tc[s + c] - mx); }
        tc[s + c] = e;
        sum = sum + e;
    }
    let alpha = exp(*m - mx);
    *l = fma(*l, alpha, sum);
    *m = mx;
    row_a[lid] = alpha;
}

// A thread's 2×4 block: row r0's four columns, then row r0 + 16's.
struct Block { lo: vec4<f32>, hi: vec4<f32> }

const BLOCK_ZERO: Block = Block(vec4<f32>(0.0), vec4<f32>(0.0));

fn block_r0(lid: u32) -> u32 { return lid / 8u; }
fn block_c0(lid: u32) -> u32 { return lid % 8u; }

// Four values of a tile row at columns c0 + 8·b.
fn ta_four(row: u32, c0: u32) -> vec4<f32> {
    let at = row * STRIDE + c0;
    return vec4<f32>(ta[at], ta[at + 8u], ta[at + 16u], ta[at + 24u]);
}
fn tb_four(row: u32, c0: u32) -> vec4<f32> {
    let at = row * STRIDE + c0;
    return vec4<f32>(tb[at], tb[at + 8u], tb[at + 16u], tb[at + 24u]);
}
fn tc_four(row: u32, c0: u32) -> vec4<f32> {
    let at = row * STRIDE + c0;
    return vec4<f32>(tc[at], tc[at + 8u], tc[at + 16u], tc[at + 24u]);
}
// Column x of four tile rows c0 + 8·b: the pairs' second operands.
fn tb_rows(c0: u32, x: u32) -> vec4<f32> {
    return vec4<f32>(tb[c0 * STRIDE + x], tb[(c0 + 8u) * STRIDE + x], tb[(c0 + 16u) * STRIDE + x], tb[(c0 + 24u) * STRIDE + x]);
}
fn ta_rows(c0: u32, x: u32) -> vec4<f32> {
    return vec4<f32>(ta[c0 * STRIDE + x], ta[(c0 + 8u) * STRIDE + x], ta[(c0 + 16u) * STRIDE + x], ta[(c0 + 24u) * STRIDE + x]);
}
fn tc_rows(c0: u32, x: u32) -> vec4<f32> {
    return vec4<f32>(tc[c0 * STRIDE + x], tc[(c0 + 8u) * STRIDE + x], tc[(c0 + 16u) * STRIDE + x], tc[(c0 + 24u) * STRIDE + x]);
}

// Continues the block's dot products over the chunk's first w dimensions: rows of ta (or of tc,
// `from_tc`: dout) with rows of tb, a pair (query row, key).
fn block_dots(acc: Block, lid: u32, w: u32, from_tc: bool) -> Block {
    let r0 = block_r0(lid) * STRIDE;
    let r1 = r0 + 16u * STRIDE;
    let c0 = block_c0(lid);
    var lo = acc.lo;
    var hi = acc.hi;
    if (from_tc) {
        for (var x = 0u; x < w; x = x + 1u) {
            let k = tb_rows(c0, x);
            lo = fma(vec4<f32>(tc[r0 + x]), k, lo);
            hi = fma(vec4<f32>(tc[r1 + x]), k, hi);
        }
    } else {
        for (var x = 0u; x < w; x = x + 1u) {
            let k = tb_rows(c0, x);
            lo = fma(vec4<f32>(ta[r0 + x]), k, lo);
            hi = fma(vec4<f32>(ta[r1 + x]), k, hi);
        }
    }
    return Block(lo, hi);
}

// The key kernel's pairs (key row of tb, query column of ta, or of tc with `from_tc`).
fn block_dots_by_key(acc: Block, lid: u32, w: u32, from_tc: bool) -> Block {
    let r0 = block_r0(lid) * STRIDE;
    let r1 = r0 + 16u * STRIDE;
    let c0 = block_c0(lid);
    var lo = acc.lo;
    var hi = acc.hi;
    if (from_tc) {
        for (var x = 0u; x < w; x = x + 1u) {
            let q = tc_rows(c0, x);
            lo = fma(q, vec4<f32>(tb[r0 + x]), lo);
            hi = fma(q, vec4<f32>(tb[r1 + x]), hi);
        }
    } else {
        for (var x = 0u; x < w; x = x + 1u) {
            let q = ta_rows(c0, x);
            lo = fma(q, vec4<f32>(tb[r0 + x]), lo);
            hi = fma(q, vec4<f32>(tb[r1 + x]), hi);
        }
    }
    return Block(lo, hi);
}

// Continues the block's outputs (row, column x) over the tile's first n rows c of tb: tc[row][c]
// times tb[c][x] (the forward's P·v, the query kernel's dS·k).
fn block_outs(acc: Block, lid: u32, n: u32) -> Block {
    let r0 = block_r0(lid) * STRIDE;
    let r1 = r0 + 16u * STRIDE;
    let c0 = block_c0(lid);
    var lo = acc.lo;
    var hi = acc.hi;
    for (var c = 0u; c < n; c = c + 1u) {
        let v = tb_four(c, c0);
        lo = fma(vec4<f32>(tc[r0 + c]), v, lo);
        hi = fma(vec4<f32>(tc[r1 + c]), v, hi);
    }
    return Block(lo, hi);
}

// The key kernel's outputs (key row, column x) over the tile's first n queries q: tb[key][q]
// (dS or P) times ta[q][x] (q), or tc[q][x] (dout) with `from_tc`.
fn block_outs_by_key(acc: Block, lid: u32, n: u32, from_tc: bool) -> Block {
    let r0 = block_r0(lid) * STRIDE;
    let r1 = r0 + 16u * STRIDE;
    let c0 = block_c0(lid);
    var lo = acc.lo;
    var hi = acc.hi;
    if (from_tc) {
        for (var q = 0u; q < n; q = q + 1u) {
            let v = tc_four(q, c0);
            lo = fma(vec4<f32>(tb[r0 + q]), v, lo);
            hi = fma(vec4<f32>(tb[r1 + q]), v, hi);
        }
    } else {
        for (var q = 0u; q < n; q = q + 1u) {
            let v = ta_four(q, c0);
            lo = fma(vec4<f32>(tb[r0 + q]), v, lo);
            hi = fma(vec4<f32>(tb[r1 + q]), v, hi);
        }
    }
    return Block(lo, hi);
}

// Writes a block into a tile at its (row, column) places.
fn block_to_tc(lid: u32, v: Block) {
    let at = block_r0(lid) * STRIDE + block_c0(lid);
    let at1 = at + 16u * STRIDE;
    tc[at] = v.lo.x;
    tc[at + 8u] = v.lo.y;
    tc[at + 16u] = v.lo.z;
    tc[at + 24u] = v.lo.w;
    tc[at1] = v.hi.x;
    tc[at1 + 8u] = v.hi.y;
    tc[at1 + 16u] = v.hi.z;
    tc[at1 + 24u] = v.hi.w;
}
fn block_to_tb(lid: u32, v: Block) {
    let at = block_r0(lid) * STRIDE + block_c0(lid);
    let at1 = at + 16u * STRIDE;
    tb[at] = v.lo.x;
    tb[at + 8u] = v.lo.y;
    tb[at + 16u] = v.lo.z;
    tb[at + 24u] = v.lo.w;
    tb[at1] = v.hi.x;
    tb[at1 + 8u] = v.hi.y;
    tb[at1 + 16u] = v.hi.z;
    tb[at1 + 24u] = v.hi.w;
}

// Element k (0-3: columns c0 + 8k) of a block row.
fn lane(v: vec4<f32>, k: u32) -> f32 {
    switch k {
        case 0u: { return v.x; }
        case 1u: { return v.y; }
        case 2u: { return v.z; }
        default: { return v.w; }
    }
}

// Where a block's value (half 0: row r0, 1: row r0 + 16; column c0 + 8k) goes in a (B, T,
// stride) array whose head starts at `base` in a row, rows from t0 and columns from col0: an
// index, or NONE past T or Dh.
fn block_place(lid: u32, half: u32, k: u32, b: u32, t0: u32, col0: u32, stride: u32, base: u32) -> u32 {
    let t = t0 + block_r0(lid) + 16u * half;
    let d = col0 + block_c0(lid) + 8u * k;
    if (t >= p.t || d >= p.dh) { return NONE; }
    return (b * p.t + t) * stride + base + d;
}

// Writes a block times (row r0's, row r0 + 16's) scale into out (forward) or dqkv (backward).
fn block_to_out(lid: u32, v: Block, scale: vec2<f32>, b: u32, t0: u32, col0: u32, stride: u32, base: u32) {
    for (var k = 0u; k < 4u; k = k + 1u) {
        let at0 = block_place(lid, 0u, k, b, t0, col0, stride, base);
        if (at0 != NONE) { out[at0] = lane(v.lo, k) * scale.x; }
        let at1 = block_place(lid, 1u, k, b, t0, col0, stride, base);
        if (at1 != NONE) { out[at1] = lane(v.hi, k) * scale.y; }
    }
}
fn block_to_dqkv(lid: u32, v: Block, scale: vec2<f32>, b: u32, t0: u32, col0: u32, stride: u32, base: u32) {
    for (var k = 0u; k < 4u; k = k + 1u) {
        let at0 = block_place(lid, 0u, k, b, t0, col0, stride, base);
        if (at0 != NONE) { dqkv[at0] = lane(v.lo, k) * scale.x; }
        let at1 = block_place(lid, 1u, k, b, t0, col0, stride, base);
        if (at1 != NONE) { dqkv[at1] = lane(v.hi, k) * scale.y; }
    }
}

// With SPREAD (a tuning candidate), the blocked forward's online softmax step over a tile runs
// on all BLOCK_THREADS threads rather than one a row: each of a row's ROW_THREADS threads takes
// logits and their maximum over ROW_KEYS keys, the row's thread takes the largest, each
// thread its keys' exps, and the row's thread adds them in key order as `tile_softmax` does.
// A maximum is the same in any order, and each exp and the sum are the same chain, so the bits
// are the same.
const ROW_THREADS: u32 = BLOCK_THREADS / ROWS;  // threads a row
const ROW_KEYS: u32 = ROWS / ROW_THREADS;       // keys a thread
var<workgroup> row_part: array<f32, BLOCK_THREADS>;  // each thread's largest logit
var<workgroup> row_mx: array<f32, ROWS>;             // each row's running maximum after the tile

// Row lid / ROW_THREADS of the tile, query i0 + that row: whether it is a query of the sequence, and
// its first key.
fn spread_row(lid: u32, i0: u32, b: u32) -> vec2<u32> {
    let i = i0 + lid / ROW_THREADS;
    if (i >= p.t) { return vec2<u32>(i, NONE); }
    return vec2<u32>(i, min(doc_start[b * p.t + i], i));
}

// This thread's keys of its row (`row`: its query and first key, from `spread_row`): their
// logits in place in tc, and their largest in row_part.
fn spread_logits(lid: u32, row: vec2<u32>, j0: u32, n: u32, slope: f32) {
    let s = (lid / ROW_THREADS) * STRIDE;
    var mx = F32_LOWEST;
    for (var c = (lid % ROW_THREADS) * ROW_KEYS; c < min(n, (lid % ROW_THREADS + 1u) * ROW_KEYS); c = c + 1u) {
        let j = j0 + c;
        if (row.y != NONE && row.y <= j && j <= row.x) {
            tc[s + c] = logit(tc[s + c], slope, row.x, j);
            mx = max(mx, tc[s + c]);
        }
    }
    row_part[lid] = mx;
}

// Row lid's running maximum m with its ROW_THREADS threads' largest logits.
fn spread_max(lid: u32, m: f32) -> f32 {
    var mx = m;
    for (var k = 0u; k < ROW_THREADS; k = k + 1u) { mx = max(mx, row_part[lid * ROW_THREADS + k]); }
    return mx;
}

// This thread's keys' exps (0 where the key is masked), in place in tc.
fn spread_exps(lid: u32, row: vec2<u32>, j0: u32, n: u32) {
    let s = (lid / ROW_THREADS) * STRIDE;
    let mx = row_mx[lid / ROW_THREADS];
    for (var c = (lid % ROW_THREADS) * ROW_KEYS; c < min(n, (lid % ROW_THREADS + 1u) * ROW_KEYS); c = c + 1u) {
        let j = j0 + c;
        var e = 0.0;
        if (row.y != NONE && row.y <= j && j <= row.x) { e = exp(tc[s + c] - mx); }
        tc[s + c] = e;
    }
}

// Row lid's exps added in key order, then its running sum and maximum moved on, as at the end
// of `tile_softmax`.
fn spread_sum(lid: u32, n: u32, m: ptr<function, f32>, l: ptr<function, f32>) {
    let s = lid * STRIDE;
    var sum = 0.0;
    for (var c = 0u; c < n; c = c + 1u) { sum = sum + tc[s + c]; }
    let mx = row_mx[lid];
    let alpha = exp(*m - mx);
    *l = fma(*l, alpha, sum);
    *m = mx;
    row_a[lid] = alpha;
}

@compute @workgroup_size(BLOCK_THREADS)
fn attention_forward_blocked(
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
    // Thread r < ROWS keeps row r's softmax state.
    let i = i0 + lid;
    let live = lid < ROWS && i < p.t;
    var first = 0u;
    if (live) { first = min(doc_start[b * p.t + i], i); }
    let end = min(i0 + ROWS, p.t);
    let slope = slope_of(h);
    let chunks = (p.dh + CHUNK - 1u) / CHUNK;
    let once = chunks == 1u;
    if (once) {
        for (var e = lid; e < ROWS * CHUNK; e = e + BLOCK_THREADS) { ta[slot(e)] = qkv_value(b, h, 0u, i0, 0u, e); }
    }
    var m = F32_LOWEST;
    var l = 0.0;
    var o: array<Block, CHUNKS>;
    let r0 = block_r0(lid);
#if SPREAD
    // The row this thread shares in the softmax steps: the same for every tile.
    let spread = spread_row(lid, i0, b);
#endif
    for (var j0 = tile_first_key(b, i0, end); j0 < end; j0 = j0 + ROWS) {
        let n = min(ROWS, end - j0);
        var dots = BLOCK_ZERO;
        for (var ch = 0u; ch < chunks; ch = ch + 1u) {
            for (var e = lid; e < ROWS * CHUNK; e = e + BLOCK_THREADS) {
                if (!once) { ta[slot(e)] = qkv_value(b, h, 0u, i0, ch, e); }
                tb[slot(e)] = qkv_value(b, h, 1u, j0, ch, e);
            }
            workgroupBarrier();
            dots = block_dots(dots, lid, chunk_width(ch), false);
            workgroupBarrier();
        }
        block_to_tc(lid, dots);
        workgroupBarrier();
#if SPREAD
        spread_logits(lid, spread, j0, n, slope);
        workgroupBarrier();
        if (lid < ROWS) { row_mx[lid] = spread_max(lid, m); }
        workgroupBarrier();
        spread_exps(lid, spread, j0, n);
        workgroupBarrier();
        if (lid < ROWS) { spread_sum(lid, n, &m, &l); }
#else
        if (lid < ROWS) { tile_softmax(lid, i, live, first, j0, n, slope, &m, &l); }
#endif
        workgroupBarrier();
        for (var ch = 0u; ch < CHUNKS; ch = ch + 1u) {
            let cc = c0 + ch;
            if (cc < chunks) {
                for (var e = lid; e < ROWS * CHUNK; e = e + BLOCK_THREADS) { tb[slot(e)] = qkv_value(b, h, 2u, j0, cc, e); }
                workgroupBarrier();
                let was = o[ch];
                o[ch] = block_outs(Block(was.lo * row_a[r0], was.hi * row_a[r0 + 16u]), lid, n);
                workgroupBarrier();
            }
        }
    }
    if (lid < ROWS) {
        row_b[lid] = l;
        if (live && c0 == 0u) { lse[(b * p.h + h) * p.t + i] = m + log(l); }
    }
    workgroupBarrier();
    let inv = vec2<f32>(1.0 / row_b[r0], 1.0 / row_b[r0 + 16u]);
    for (var ch = 0u; ch < CHUNKS; ch = ch + 1u) {
        block_to_out(lid, o[ch], inv, b, i0, (c0 + ch) * CHUNK, p.h * p.dh, h * p.dh);
    }
}

// dS of pair (query row r, key column c) from its two dot products: P ⊙ (dp − delta).
fn query_ds(s: f32, dp: f32, r: u32, c: u32, n: u32, i0: u32, j0: u32, slope: f32) -> f32 {
    let i = i0 + r;
    let j = j0 + c;
    if (c < n && i < p.t && row_first[r] <= j && j <= i) {
        let pr = exp(logit(s, slope, i, j) - row_a[r]);
        return pr * (dp - row_b[r]);
    }
    return 0.0;
}

@compute @workgroup_size(BLOCK_THREADS)
fn attention_backward_query_blocked(
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
    if (lid < ROWS && i0 + lid < p.t) {
        let i = i0 + lid;
        row_first[lid] = min(doc_start_in[b * p.t + i], i);
        row_a[lid] = lse_in[(b * p.h + h) * p.t + i];
        row_b[lid] = delta_in[(b * p.h + h) * p.t + i];
    }
    let end = min(i0 + ROWS, p.t);
    let slope = slope_of(h);
    let chunks = (p.dh + CHUNK - 1u) / CHUNK;
    let r0 = block_r0(lid);
    let k0 = block_c0(lid);
    var dq: array<Block, CHUNKS>;
    for (var j0 = tile_first_key_in(b, i0, end); j0 < end; j0 = j0 + ROWS) {
        let n = min(ROWS, end - j0);
        var s = BLOCK_ZERO;
        var dp = BLOCK_ZERO;
        for (var ch = 0u; ch < chunks; ch = ch + 1u) {
            for (var e = lid; e < ROWS * CHUNK; e = e + BLOCK_THREADS) {
                ta[slot(e)] = qkv_in_value(b, h, 0u, i0, ch, e);
                tb[slot(e)] = qkv_in_value(b, h, 1u, j0, ch, e);
                tc[slot(e)] = dout_value(b, h, i0, ch, e);
            }
            workgroupBarrier();
            s = block_dots(s, lid, chunk_width(ch), false);
            workgroupBarrier();
            for (var e = lid; e < ROWS * CHUNK; e = e + BLOCK_THREADS) { tb[slot(e)] = qkv_in_value(b, h, 2u, j0, ch, e); }
            workgroupBarrier();
            dp = block_dots(dp, lid, chunk_width(ch), true);
            workgroupBarrier();
        }
        // dS into tc, where dout was.
        block_to_tc(lid, Block(
            vec4<f32>(
                query_ds(s.lo.x, dp.lo.x, r0, k0, n, i0, j0, slope),
                query_ds(s.lo.y, dp.lo.y, r0, k0 + 8u, n, i0, j0, slope),
                query_ds(s.lo.z, dp.lo.z, r0, k0 + 16u, n, i0, j0, slope),
                query_ds(s.lo.w, dp.lo.w, r0, k0 + 24u, n, i0, j0, slope),
            ),
            vec4<f32>(
                query_ds(s.hi.x, dp.hi.x, r0 + 16u, k0, n, i0, j0, slope),
                query_ds(s.hi.y, dp.hi.y, r0 + 16u, k0 + 8u, n, i0, j0, slope),
                query_ds(s.hi.z, dp.hi.z, r0 + 16u, k0 + 16u, n, i0, j0, slope),
                query_ds(s.hi.w, dp.hi.w, r0 + 16u, k0 + 24u, n, i0, j0, slope),
            ),
        ));
        for (var ch = 0u; ch < CHUNKS; ch = ch + 1u) {
            let cc = c0 + ch;
            if (cc < chunks) {
                for (var e = lid; e < ROWS * CHUNK; e = e + BLOCK_THREADS) { tb[slot(e)] = qkv_in_value(b, h, 1u, j0, cc, e); }
                workgroupBarrier();
                dq[ch] = block_outs(dq[ch], lid, n);
                workgroupBarrier();
            }
        }
        workgroupBarrier();
    }
    for (var ch = 0u; ch < CHUNKS; ch = ch + 1u) {
        block_to_dqkv(lid, dq[ch], vec2<f32>(p.scale), b, i0, (c0 + ch) * CHUNK, 3u * p.h * p.dh, h * p.dh);
    }
}

// P and dS of pair (key row k, query column q): (P, dS).
fn key_p_ds(s: f32, dp: f32, k: u32, q: u32, n: u32, i0: u32, j0: u32, slope: f32) -> vec2<f32> {
    let i = i0 + q;
    let j = j0 + k;
    if (q < n && j < p.t && j <= i && row_first[q] <= j) {
        let pr = exp(logit(s, slope, i, j) - row_a[q]);
        return vec2<f32>(pr, pr * (dp - row_b[q]));
    }
    return vec2<f32>(0.0);
}

@compute @workgroup_size(BLOCK_THREADS)
fn attention_backward_key_blocked(
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
    let slope = slope_of(h);
    let chunks = (p.dh + CHUNK - 1u) / CHUNK;
    let r0 = block_r0(lid);
    let q0 = block_c0(lid);
    var dk: array<Block, CHUNKS>;
    var dv: array<Block, CHUNKS>;
    for (var i0 = j0; i0 < p.t; i0 = i0 + ROWS) {
        let n = min(ROWS, p.t - i0);  // queries in this tile
        if (lid < n) {
            let i = i0 + lid;
            row_first[lid] = min(doc_start_in[b * p.t + i], i);
            row_a[lid] = lse_in[(b * p.h + h) * p.t + i];
            row_b[lid] = delta_in[(b * p.h + h) * p.t + i];
        }
        // Pairs as (key row, query column): s = q·k, dp = dout·v.
        var s = BLOCK_ZERO;
        var dp = BLOCK_ZERO;
        for (var ch = 0u; ch < chunks; ch = ch + 1u) {
            for (var e = lid; e < ROWS * CHUNK; e = e + BLOCK_THREADS) {
                ta[slot(e)] = qkv_in_value(b, h, 0u, i0, ch, e);
                tb[slot(e)] = qkv_in_value(b, h, 1u, j0, ch, e);
                tc[slot(e)] = dout_value(b, h, i0, ch, e);
            }
            workgroupBarrier();
            s = block_dots_by_key(s, lid, chunk_width(ch), false);
            workgroupBarrier();
            for (var e = lid; e < ROWS * CHUNK; e = e + BLOCK_THREADS) { tb[slot(e)] = qkv_in_value(b, h, 2u, j0, ch, e); }
            workgroupBarrier();
            dp = block_dots_by_key(dp, lid, chunk_width(ch), true);
            workgroupBarrier();
        }
        let a0 = key_p_ds(s.lo.x, dp.lo.x, r0, q0, n, i0, j0, slope);
        let a1 = key_p_ds(s.lo.y, dp.lo.y, r0, q0 + 8u, n, i0, j0, slope);
        let a2 = key_p_ds(s.lo.z, dp.lo.z, r0, q0 + 16u, n, i0, j0, slope);
        let a3 = key_p_ds(s.lo.w, dp.lo.w, r0, q0 + 24u, n, i0, j0, slope);
        let b0 = key_p_ds(s.hi.x, dp.hi.x, r0 + 16u, q0, n, i0, j0, slope);
        let b1 = key_p_ds(s.hi.y, dp.hi.y, r0 + 16u, q0 + 8u, n, i0, j0, slope);
        let b2 = key_p_ds(s.hi.z, dp.hi.z, r0 + 16u, q0 + 16u, n, i0, j0, slope);
        let b3 = key_p_ds(s.hi.w, dp.hi.w, r0 + 16u, q0 + 24u, n, i0, j0, slope);
        let pr = Block(vec4<f32>(a0.x, a1.x, a2.x, a3.x), vec4<f32>(b0.x, b1.x, b2.x, b3.x));
        let ds = Block(vec4<f32>(a0.y, a1.y, a2.y, a3.y), vec4<f32>(b0.y, b1.y, b2.y, b3.y));
        // dk: dS in tb, q in ta; then dv: P in tb, dout in tc.
        for (var part = 0u; part < 2u; part = part + 1u) {
            if (part == 0u) { block_to_tb(lid, ds); } else { block_to_tb(lid, pr); }
            for (var ch = 0u; ch < CHUNKS; ch = ch + 1u) {
                let cc = c0 + ch;
                if (cc < chunks) {
                    if (chunks > 1u) {
                        for (var e = lid; e < ROWS * CHUNK; e = e + BLOCK_THREADS) {
                            if (part == 0u) { ta[slot(e)] = qkv_in_value(b, h, 0u, i0, cc, e); } else { tc[slot(e)] = dout_value(b, h, i0, cc, e); }
                        }
                    }
                    workgroupBarrier();
                    if (part == 0u) { dk[ch] = block_outs_by_key(dk[ch], lid, n, false); } else { dv[ch] = block_outs_by_key(dv[ch], lid, n, true); }
                    workgroupBarrier();
                }
            }
            workgroupBarrier();
        }
    }
    for (var ch = 0u; ch < CHUNKS; ch = ch + 1u) {
        block_to_dqkv(lid, dk[ch], vec2<f32>(p.scale), b, j0, (c0 + ch) * CHUNK, 3u * p.h * p.dh, (p.h + h) * p.dh);
        block_to_dqkv(lid, dv[ch], vec2<f32>(1.0), b, j0, (c0 + ch) * CHUNK, 3u * p.h * p.dh, (2u * p.h + h) * p.dh);
    }
}
