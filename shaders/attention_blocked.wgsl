// The blocked kernels: attention.wgsl's tiles, chains and order again (so the same bits;
// tests/gpu_vs_cpu.rs checks it), with each thread's dot products and outputs a 2×4 block
// of a tile: rows r0 = lid / 8 and r0 + 16, columns lid % 8 + 8·b. Each value read from
// workgroup memory then feeds two or four multiply-adds, and the row state (rescale factor,
// lse, delta, first key) sits in workgroup memory. BLOCK_THREADS (128, a define) threads; ROWS
// and CHUNK are 32 (ops/attention.rs asserts both). Its prelude is attention_common.wgsl, and
// the backward's delta pass is attention.wgsl's.

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
