// The fast class's attention (crates/engine/src/precision.rs, ops/attention/fast.rs): what
// attention.wgsl computes, with its four products (q·kᵀ, P·v, and in the backward dout·vᵀ, dS·k,
// dSᵀ·q, Pᵀ·dout) on cooperative matrices, f16 multiplicands into f32 sums. The softmax's
// statistics (lse, delta), the mask, ALiBi and every output stay f32.
//
// Scaling (ARCHITECTURE.md, "Numeric classes"): binding 5 holds [2^sQ, 2^sD, 2^-sQ, 2^-sD]
// (shaders/fast_scale.wgsl over qkv, and over dout in the backward; qkv again in the forward).
// q, k and v are staged as f16(x · 2^sQ), dout as f16(x · 2^sD); P, in [0, 1], as f16(P · 2^14);
// dS as f16(dS · 2^sS) with sS from the bound |dS| ≤ 2·Dh·amax(dout)·amax(v) ≤ 2·Dh·2^(28-sQ-sD),
// so that every staged value is at most 2^14 and nothing overflows f16. Sums are scaled back by
// exact multiplications by powers of two.
//
// Tiling: a workgroup of 2·OWN invocations (subgroups of 32) owns OWN rows (queries in the
// forward and the dq pass, keys in the dk/dv pass), 16 a subgroup, staged once; it sweeps
// tiles of SWEPT = 32 rows of the other side. A subgroup's 16×SWEPT block of scores goes through
// workgroup memory (`ss`, f32), where its invocations apply the mask and the softmax element by
// element (a cooperative matrix has no element access), and back as f16 (`ps`, `ds`) into the
// products that accumulate the outputs, DH/16 named accumulators of 16×16 a subgroup (never an
// indexed array, which would live in local memory).
//
// The forward sweeps the keys twice, so that no accumulator needs a per-row rescale (which a
// cooperative matrix cannot take): first each row's running max and sum, two invocations a row,
// combined into lse; then P = exp(logit - lse), exactly the normalised probabilities, into
// out += P·v. The backward recomputes P from lse as attention.wgsl does, with delta from its
// `attention_backward_delta` pass: per query tile dq = scale·dS·k; per key tile
// dk = scale·dSᵀ·q and dv = Pᵀ·dout. Every output is written by one invocation; no atomics.
//
// DH, the head dimension, is a switch (a multiple of 16, at most 64: with more, the key pass's
// tiles outgrow 48 KiB of workgroup memory); the host runs heads it does not fit in f32.
// With COOP off the three cooperative built-ins are emulated by scalar loops over the same
// staged tiles (each invocation DH/2 values of its subgroup's 16×DH block), for adapters without
// cooperative matrices: tests/gpu_vs_cpu.rs runs that on lavapipe against the CPU twin. As in
// matmul_fast.wgsl, coopStore's pointer index and stride are bound with `let` first (naga
// 30.0.1 panics otherwise), and every cooperative op is in workgroup-uniform control flow.

#if COOP
enable f16;
enable wgpu_cooperative_matrix;
alias MatA = coop_mat16x16<f16, A>;
alias MatB = coop_mat16x16<f16, B>;
alias Acc = coop_mat16x16<f32, C>;
#else
enable f16;
#endif

struct Params { b: u32, t: u32, h: u32, dh: u32, scale: f32, alibi: u32 }
@group(0) @binding(0) var<uniform> p: Params;

// attention_forward_fast(out, lse, qkv, doc_start, scales)
@group(0) @binding(1) var<storage, read_write> out: array<f32>;  // (B, T, H·Dh)
@group(0) @binding(2) var<storage, read_write> lse: array<f32>;  // (B, H, T)
@group(0) @binding(3) var<storage, read> qkv: array<f32>;        // (B, T, 3·H·Dh)
@group(0) @binding(4) var<storage, read> doc_start: array<u32>;  // (B, T)
@group(0) @binding(5) var<storage, read> scales: array<f32>;     // 2^sQ, 2^sD, 2^-sQ, 2^-sD
// attention_backward_{query,key}_fast(dqkv, lse, qkv, doc_start, scales, delta, dout)
@group(0) @binding(1) var<storage, read_write> dqkv: array<f32>;  // (B, T, 3·H·Dh)
@group(0) @binding(2) var<storage, read> lse_in: array<f32>;      // (B, H, T)
@group(0) @binding(6) var<storage, read> delta: array<f32>;       // (B, H, T)
@group(0) @binding(7) var<storage, read> dout: array<f32>;        // (B, T, H·Dh)

// OWN, a switch: rows a workgroup owns, 16 for each of its subgroups of 32 (64 or 32, the most
// whose tiles fit the device's workgroup memory: ops/attention/fast.rs).
const THREADS: u32 = OWN * 2u;
const SWEPT: u32 = 32u;        // rows of each tile it sweeps
const SD: u32 = DH + 8u;       // a staged row's stride in halves (a multiple of 8: 16 bytes)
const SP: u32 = SWEPT + 8u;    // the same for the f16 probabilities and dS
const HALF: u32 = DH / 2u;     // values of its subgroup's 16×DH block an invocation holds (emulation)
const P_SCALE: f32 = 16384.0;  // 2^14: P is staged as f16(P · 2^14)
const P_UNSCALE: f32 = 0.00006103515625;  // 2^-14
const NONE: u32 = 0xffffffffu;

var<workgroup> own_a: array<f16, OWN * SD>;      // q (forward, dq) or k (dk/dv): [row][d]
var<workgroup> own_b: array<f16, OWN * SD>;      // dout (dq) or v (dk/dv)
var<workgroup> swept_a: array<f16, SWEPT * SD>;  // k (forward, dq) or q (dk/dv)
var<workgroup> swept_b: array<f16, SWEPT * SD>;  // v (forward, dq) or dout (dk/dv)
var<workgroup> ss: array<f32, OWN * SWEPT>;      // scores, then dout·v: [own row][swept row]
var<workgroup> ps: array<f16, OWN * SP>;         // f16(P · 2^14) (dq: then f16(dS · 2^sS))
var<workgroup> ds: array<f16, OWN * SP>;         // f16(dS · 2^sS), dk/dv
var<workgroup> stats: array<f32, OWN * 4u>;      // the forward's two running (max, sum) a row

// Where element e (row e / DH, column e % DH) of a staged tile sits.
fn slot(e: u32) -> u32 {
    return (e / DH) * SD + e % DH;
}

// f16(x · s) of element e of the tile of part `part` (0 q, 1 k, 2 v) of head h from token t0;
// 0 past the sequence.
fn staged_qkv(b: u32, h: u32, part: u32, t0: u32, e: u32, s: f32) -> f16 {
    let t = t0 + e / DH;
    if (t >= p.t) { return f16(0.0); }
    let c = p.h * DH;
    return f16(qkv[(b * p.t + t) * 3u * c + part * c + h * DH + e % DH] * s);
}

fn staged_dout(b: u32, h: u32, t0: u32, e: u32, s: f32) -> f16 {
    let t = t0 + e / DH;
    if (t >= p.t) { return f16(0.0); }
    return f16(dout[(b * p.t + t) * p.h * DH + h * DH + e % DH] * s);
}

fn slope_of(h: u32) -> f32 {
    if (p.alibi == 1u) { return exp2(-8.0 * f32(h + 1u) / f32(p.h)); }
    return 0.0;
}

// The logit of query i and key j from their scaled dot product in ss: scale·q·k − slope·(i − j),
// the dot unscaled by u = 2^-sQ twice (exact), as attention_common.wgsl's `logit`.
fn logit_at(at: u32, u: f32, slope: f32, i: u32, j: u32) -> f32 {
    return fma((ss[at] * u) * u, p.scale, -(slope * f32(i - j)));
}

// Query i's probabilities over its half of the key tile from j0 (the invocation's row r of ss),
// P = exp(logit − lse), staged into ps as f16(P · 2^14), 0 where i does not see the key. The
// invocation walks its 16 columns from one of its own, so that the 16 rows of a subgroup's half
// read 16 banks of ss, not one.
fn stage_p(b: u32, r: u32, i: u32, j0: u32, lane: u32, uq: f32, slope: f32, row_lse: f32) {
    let c0 = (lane % 2u) * 16u;
    for (var x = 0u; x < 16u; x = x + 1u) {
        let c = c0 + (x + lane / 2u) % 16u;
        let j = j0 + c;
        var pr = 0.0;
        if (sees(b, i, j)) { pr = exp(logit_at(r * SWEPT + c, uq, slope, i, j) - row_lse); }
        ps[r * SP + c] = f16(pr * P_SCALE);
    }
}

// (batch, head, first owned row) of a workgroup, or x = NONE past the last.
fn owned_tile(wid: vec3<u32>, nwg: vec3<u32>) -> vec3<u32> {
    let tiles = (p.t + OWN - 1u) / OWN;
    let flat = flat_group(wid, nwg);
    if (flat >= p.b * p.h * tiles) { return vec3<u32>(NONE, 0u, 0u); }
    return vec3<u32>(flat / (p.h * tiles), (flat / tiles) % p.h, (flat % tiles) * OWN);
}

// The first key any query of rows i0..end sees: the same in every invocation.
fn first_key(b: u32, i0: u32, end: u32) -> u32 {
    var first = end;
    for (var x = i0; x < end; x = x + 1u) { first = min(first, min(doc_start[b * p.t + x], x)); }
    return first;
}

// Whether query i sees key j.
fn sees(b: u32, i: u32, j: u32) -> bool {
    return i < p.t && j <= i && min(doc_start[b * p.t + i], i) <= j;
}

// The exponent s of a scale 2^s.
fn exponent_of(scale: f32) -> i32 {
    return i32((bitcast<u32>(scale) >> 23u) & 0xffu) - 127;
}

// sS for dS: sQ + sD − 15 − ⌈log2 DH⌉, clamped as every scale (precision.rs's
// `gradient_exponent`).
fn ds_exponent() -> i32 {
    let ceil_log2_dh = i32(32u - countLeadingZeros(DH - 1u));
    return clamp(exponent_of(scales[0]) + exponent_of(scales[1]) - SCALED_LOG2 - 1 - ceil_log2_dh, -MAX_SCALE_EXPONENT, MAX_SCALE_EXPONENT);
}

// 2^s, exactly, for |s| <= 126.
fn pow2(s: i32) -> f32 {
    return bitcast<f32>(u32(s + 127) << 23u);
}

#if COOP
// ss's rows of subgroup sg = its 16 rows of own_a · swept_aᵀ (or own_b · swept_bᵀ): the raw sums of
// the staged products. (`lane` is the emulation's.)
fn scores_a(sg: u32, lane: u32) {
    var s0 = Acc();
    var s1 = Acc();
    for (var d = 0u; d < DH; d = d + 16u) {
        let a: MatA = coopLoadT<MatA>(&own_a[sg * 16u * SD + d], SD);
        let b0: MatB = coopLoad<MatB>(&swept_a[d], SD);
        let b1: MatB = coopLoad<MatB>(&swept_a[16u * SD + d], SD);
        s0 = coopMultiplyAdd(a, b0, s0);
        s1 = coopMultiplyAdd(a, b1, s1);
    }
    let o = sg * 16u * SWEPT;
    let o1 = o + 16u;
    let st = SWEPT;
    coopStoreT(s0, &ss[o], st);
    coopStoreT(s1, &ss[o1], st);
}

fn scores_b(sg: u32, lane: u32) {
    var s0 = Acc();
    var s1 = Acc();
    for (var d = 0u; d < DH; d = d + 16u) {
        let a: MatA = coopLoadT<MatA>(&own_b[sg * 16u * SD + d], SD);
        let b0: MatB = coopLoad<MatB>(&swept_b[d], SD);
        let b1: MatB = coopLoad<MatB>(&swept_b[16u * SD + d], SD);
        s0 = coopMultiplyAdd(a, b0, s0);
        s1 = coopMultiplyAdd(a, b1, s1);
    }
    let o = sg * 16u * SWEPT;
    let o1 = o + 16u;
    let st = SWEPT;
    coopStoreT(s0, &ss[o], st);
    coopStoreT(s1, &ss[o1], st);
}

// acc + (subgroup sg's 16 rows of ps or ds) · (columns 16c.. of swept_a or swept_b), over the
// SWEPT rows: P·v, dS·k, dSᵀ·q, Pᵀ·dout. One function per pair of arrays, here and in the
// emulation: naga 30 rejects workgroup pointers as parameters, so the arrays cannot be passed.
fn ps_b(acc: Acc, sg: u32, c: u32) -> Acc {
    var r = acc;
    for (var kk = 0u; kk < SWEPT; kk = kk + 16u) {
        let a: MatA = coopLoadT<MatA>(&ps[sg * 16u * SP + kk], SP);
        let b: MatB = coopLoadT<MatB>(&swept_b[kk * SD + 16u * c], SD);
        r = coopMultiplyAdd(a, b, r);
    }
    return r;
}

fn ps_a(acc: Acc, sg: u32, c: u32) -> Acc {
    var r = acc;
    for (var kk = 0u; kk < SWEPT; kk = kk + 16u) {
        let a: MatA = coopLoadT<MatA>(&ps[sg * 16u * SP + kk], SP);
        let b: MatB = coopLoadT<MatB>(&swept_a[kk * SD + 16u * c], SD);
        r = coopMultiplyAdd(a, b, r);
    }
    return r;
}

fn ds_a(acc: Acc, sg: u32, c: u32) -> Acc {
    var r = acc;
    for (var kk = 0u; kk < SWEPT; kk = kk + 16u) {
        let a: MatA = coopLoadT<MatA>(&ds[sg * 16u * SP + kk], SP);
        let b: MatB = coopLoadT<MatB>(&swept_a[kk * SD + 16u * c], SD);
        r = coopMultiplyAdd(a, b, r);
    }
    return r;
}

// A 16×16 result tile, already unscaled, through the subgroup's rows of ss to columns 16c.. of
// head h of rows t0.. (the subgroup's first token) of out, or of part `part` of dqkv: the
// invocations of the subgroup 8 values each, nothing past the sequence. Call from uniform
// control flow: it holds barriers.
fn land_out(r: Acc, sg: u32, lane: u32, b: u32, h: u32, t0: u32, c: u32) {
    let o = sg * 16u * SWEPT;
    let st = SWEPT;
    coopStoreT(r, &ss[o], st);
    workgroupBarrier();
    for (var u = 0u; u < 8u; u = u + 1u) {
        let e = lane + 32u * u;
        let t = t0 + e / 16u;
        if (t < p.t) { out[(b * p.t + t) * p.h * DH + h * DH + 16u * c + e % 16u] = ss[o + (e / 16u) * SWEPT + e % 16u]; }
    }
    workgroupBarrier();
}

fn land_dqkv(r: Acc, sg: u32, lane: u32, b: u32, h: u32, part: u32, t0: u32, c: u32) {
    let o = sg * 16u * SWEPT;
    let st = SWEPT;
    coopStoreT(r, &ss[o], st);
    workgroupBarrier();
    let cc = p.h * DH;
    for (var u = 0u; u < 8u; u = u + 1u) {
        let e = lane + 32u * u;
        let t = t0 + e / 16u;
        if (t < p.t) { dqkv[(b * p.t + t) * 3u * cc + part * cc + h * DH + 16u * c + e % 16u] = ss[o + (e / 16u) * SWEPT + e % 16u]; }
    }
    workgroupBarrier();
}
#else
// The same products with the built-ins emulated: each invocation sums its values in order.
fn scores_a(sg: u32, lane: u32) {
    for (var u = 0u; u < 16u; u = u + 1u) {
        let e = lane + 32u * u;
        let r = sg * 16u + e / SWEPT;
        let c = e % SWEPT;
        var acc = 0.0;
        for (var d = 0u; d < DH; d = d + 1u) { acc = acc + f32(own_a[r * SD + d]) * f32(swept_a[c * SD + d]); }
        ss[r * SWEPT + c] = acc;
    }
}

fn scores_b(sg: u32, lane: u32) {
    for (var u = 0u; u < 16u; u = u + 1u) {
        let e = lane + 32u * u;
        let r = sg * 16u + e / SWEPT;
        let c = e % SWEPT;
        var acc = 0.0;
        for (var d = 0u; d < DH; d = d + 1u) { acc = acc + f32(own_b[r * SD + d]) * f32(swept_b[c * SD + d]); }
        ss[r * SWEPT + c] = acc;
    }
}

// The invocation's values e = lane + 32u (row e / DH, column e % DH) of its subgroup's block.
fn ps_b(acc: ptr<function, array<f32, HALF>>, sg: u32, lane: u32) {
    for (var u = 0u; u < HALF; u = u + 1u) {
        let e = lane + 32u * u;
        let r = sg * 16u + e / DH;
        var v = (*acc)[u];
        for (var kk = 0u; kk < SWEPT; kk = kk + 1u) { v = v + f32(ps[r * SP + kk]) * f32(swept_b[kk * SD + e % DH]); }
        (*acc)[u] = v;
    }
}

fn ps_a(acc: ptr<function, array<f32, HALF>>, sg: u32, lane: u32) {
    for (var u = 0u; u < HALF; u = u + 1u) {
        let e = lane + 32u * u;
        let r = sg * 16u + e / DH;
        var v = (*acc)[u];
        for (var kk = 0u; kk < SWEPT; kk = kk + 1u) { v = v + f32(ps[r * SP + kk]) * f32(swept_a[kk * SD + e % DH]); }
        (*acc)[u] = v;
    }
}

fn ds_a(acc: ptr<function, array<f32, HALF>>, sg: u32, lane: u32) {
    for (var u = 0u; u < HALF; u = u + 1u) {
        let e = lane + 32u * u;
        let r = sg * 16u + e / DH;
        var v = (*acc)[u];
        for (var kk = 0u; kk < SWEPT; kk = kk + 1u) { v = v + f32(ds[r * SP + kk]) * f32(swept_a[kk * SD + e % DH]); }
        (*acc)[u] = v;
    }
}
#endif

@compute @workgroup_size(THREADS)
fn attention_forward_fast(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
) {
    let tile = owned_tile(wid, nwg);
    if (tile.x == NONE) { return; }
    let b = tile.x;
    let h = tile.y;
    let i0 = tile.z;
    let end = min(i0 + OWN, p.t);
    let first = first_key(b, i0, end);
    let sq = scales[0];
    let uq = scales[2];
    let slope = slope_of(h);
    let sg = tid / 32u;
    let lane = tid % 32u;
    // The invocation's row, and its half of each swept tile's columns, which it walks from a
    // column of its own (c below) so that the 16 rows of a subgroup's half read 16 banks of ss.
    let r = sg * 16u + lane / 2u;
    let i = i0 + r;
    let c0 = (lane % 2u) * 16u;
    for (var e = tid; e < OWN * DH; e = e + THREADS) { own_a[slot(e)] = staged_qkv(b, h, 0u, i0, e, sq); }
    // First sweep: the running max and sum of the row's half of each tile.
    var m = F32_LOWEST;
    var l = 0.0;
    for (var j0 = first; j0 < end; j0 = j0 + SWEPT) {
        for (var e = tid; e < SWEPT * DH; e = e + THREADS) { swept_a[slot(e)] = staged_qkv(b, h, 1u, j0, e, sq); }
        workgroupBarrier();
        scores_a(sg, lane);
        workgroupBarrier();
        var mx = m;
        for (var x = 0u; x < 16u; x = x + 1u) {
            let c = c0 + (x + lane / 2u) % 16u;
            let j = j0 + c;
            if (sees(b, i, j)) { mx = max(mx, logit_at(r * SWEPT + c, uq, slope, i, j)); }
        }
        var sum = 0.0;
        for (var x = 0u; x < 16u; x = x + 1u) {
            let c = c0 + (x + lane / 2u) % 16u;
            let j = j0 + c;
            if (sees(b, i, j)) { sum = sum + exp(logit_at(r * SWEPT + c, uq, slope, i, j) - mx); }
        }
        l = fma(l, exp(m - mx), sum);
        m = mx;
    }
    stats[r * 4u + (lane % 2u) * 2u] = m;
    stats[r * 4u + (lane % 2u) * 2u + 1u] = l;
    workgroupBarrier();
    let m0 = stats[r * 4u];
    let m1 = stats[r * 4u + 2u];
    let mm = max(m0, m1);
    let row_lse = mm + log(fma(stats[r * 4u + 1u], exp(m0 - mm), stats[r * 4u + 3u] * exp(m1 - mm)));
    if (i < p.t && lane % 2u == 0u) { lse[(b * p.h + h) * p.t + i] = row_lse; }
    // Second sweep: out += P·v with P = exp(logit − lse).
#if COOP
    var o0 = Acc();
    var o1 = Acc();
    var o2 = Acc();
    var o3 = Acc();
#else
    var o: array<f32, HALF>;
#endif
    for (var j0 = first; j0 < end; j0 = j0 + SWEPT) {
        for (var e = tid; e < SWEPT * DH; e = e + THREADS) {
            swept_a[slot(e)] = staged_qkv(b, h, 1u, j0, e, sq);
            swept_b[slot(e)] = staged_qkv(b, h, 2u, j0, e, sq);
        }
        workgroupBarrier();
        scores_a(sg, lane);
        workgroupBarrier();
        stage_p(b, r, i, j0, lane, uq, slope, row_lse);
        workgroupBarrier();
#if COOP
        o0 = ps_b(o0, sg, 0u);
        if (DH > 16u) { o1 = ps_b(o1, sg, 1u); }
        if (DH > 32u) { o2 = ps_b(o2, sg, 2u); }
        if (DH > 48u) { o3 = ps_b(o3, sg, 3u); }
#else
        ps_b(&o, sg, lane);
#endif
        workgroupBarrier();
    }
    let u = P_UNSCALE;
#if COOP
    let t0 = i0 + sg * 16u;
    land_out((o0 * u) * uq, sg, lane, b, h, t0, 0u);
    if (DH > 16u) { land_out((o1 * u) * uq, sg, lane, b, h, t0, 1u); }
    if (DH > 32u) { land_out((o2 * u) * uq, sg, lane, b, h, t0, 2u); }
    if (DH > 48u) { land_out((o3 * u) * uq, sg, lane, b, h, t0, 3u); }
#else
    for (var x = 0u; x < HALF; x = x + 1u) {
        let e = lane + 32u * x;
        let t = i0 + sg * 16u + e / DH;
        if (t < p.t) { out[(b * p.t + t) * p.h * DH + h * DH + e % DH] = (o[x] * u) * uq; }
    }
#endif
}

// dq of the OWN queries a workgroup owns: for each tile of keys, P from lse, dout·vᵀ, dS, then
// dq += dS·k.
@compute @workgroup_size(THREADS)
fn attention_backward_query_fast(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
) {
    let tile = owned_tile(wid, nwg);
    if (tile.x == NONE) { return; }
    let b = tile.x;
    let h = tile.y;
    let i0 = tile.z;
    let end = min(i0 + OWN, p.t);
    let first = first_key(b, i0, end);
    let sq = scales[0];
    let sd = scales[1];
    let uq = scales[2];
    let ud = scales[3];
    let s_ds = pow2(ds_exponent());
    let u_ds = pow2(-ds_exponent());
    let slope = slope_of(h);
    let sg = tid / 32u;
    let lane = tid % 32u;
    let r = sg * 16u + lane / 2u;
    let i = i0 + r;
    let c0 = (lane % 2u) * 16u;
    var lse_i = 0.0;
    var delta_i = 0.0;
    if (i < p.t) {
        lse_i = lse_in[(b * p.h + h) * p.t + i];
        delta_i = delta[(b * p.h + h) * p.t + i];
    }
    for (var e = tid; e < OWN * DH; e = e + THREADS) {
        own_a[slot(e)] = staged_qkv(b, h, 0u, i0, e, sq);
        own_b[slot(e)] = staged_dout(b, h, i0, e, sd);
    }
#if COOP
    var q0 = Acc();
    var q1 = Acc();
    var q2 = Acc();
    var q3 = Acc();
#else
    var dq: array<f32, HALF>;
#endif
    for (var j0 = first; j0 < end; j0 = j0 + SWEPT) {
        for (var e = tid; e < SWEPT * DH; e = e + THREADS) {
            swept_a[slot(e)] = staged_qkv(b, h, 1u, j0, e, sq);
            swept_b[slot(e)] = staged_qkv(b, h, 2u, j0, e, sq);
        }
        workgroupBarrier();
        scores_a(sg, lane);
        workgroupBarrier();
        stage_p(b, r, i, j0, lane, uq, slope, lse_i);
        workgroupBarrier();
        scores_b(sg, lane);
        workgroupBarrier();
        // dS = P · (dout·v − delta), P as staged; it replaces P in ps.
        for (var x = 0u; x < 16u; x = x + 1u) {
            let c = c0 + (x + lane / 2u) % 16u;
            let at = r * SP + c;
            let g = (f32(ps[at]) * P_UNSCALE) * (((ss[r * SWEPT + c] * ud) * uq) - delta_i);
            ps[at] = f16(g * s_ds);
        }
        workgroupBarrier();
#if COOP
        q0 = ps_a(q0, sg, 0u);
        if (DH > 16u) { q1 = ps_a(q1, sg, 1u); }
        if (DH > 32u) { q2 = ps_a(q2, sg, 2u); }
        if (DH > 48u) { q3 = ps_a(q3, sg, 3u); }
#else
        ps_a(&dq, sg, lane);
#endif
        workgroupBarrier();
    }
    // dq = scale · Σ dS·k, unscaled by 2^-sS and 2^-sQ.
    let u = u_ds;
#if COOP
    let t0 = i0 + sg * 16u;
    land_dqkv(((q0 * u) * uq) * p.scale, sg, lane, b, h, 0u, t0, 0u);
    if (DH > 16u) { land_dqkv(((q1 * u) * uq) * p.scale, sg, lane, b, h, 0u, t0, 1u); }
    if (DH > 32u) { land_dqkv(((q2 * u) * uq) * p.scale, sg, lane, b, h, 0u, t0, 2u); }
    if (DH > 48u) { land_dqkv(((q3 * u) * uq) * p.scale, sg, lane, b, h, 0u, t0, 3u); }
#else
    let cc = p.h * DH;
    for (var x = 0u; x < HALF; x = x + 1u) {
        let e = lane + 32u * x;
        let t = i0 + sg * 16u + e / DH;
        if (t < p.t) { dqkv[(b * p.t + t) * 3u * cc + h * DH + e % DH] = ((dq[x] * u) * uq) * p.scale; }
    }
#endif
}

// dk and dv of the OWN keys a workgroup owns: for each tile of queries from its first key on,
// Pᵀ and dSᵀ (the transposed scores K·Qᵀ and V·doutᵀ), then dk += dSᵀ·q and dv += Pᵀ·dout.
@compute @workgroup_size(THREADS)
fn attention_backward_key_fast(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
) {
    let tile = owned_tile(wid, nwg);
    if (tile.x == NONE) { return; }
    let b = tile.x;
    let h = tile.y;
    let j0 = tile.z;
    let sq = scales[0];
    let sd = scales[1];
    let uq = scales[2];
    let ud = scales[3];
    let s_ds = pow2(ds_exponent());
    let u_ds = pow2(-ds_exponent());
    let slope = slope_of(h);
    let sg = tid / 32u;
    let lane = tid % 32u;
    // The invocation's key, and its half of each swept tile's queries.
    let r = sg * 16u + lane / 2u;
    let j = j0 + r;
    let c0 = (lane % 2u) * 16u;
    for (var e = tid; e < OWN * DH; e = e + THREADS) {
        own_a[slot(e)] = staged_qkv(b, h, 1u, j0, e, sq);
        own_b[slot(e)] = staged_qkv(b, h, 2u, j0, e, sq);
    }
#if COOP
    var k0 = Acc();
    var k1 = Acc();
    var k2 = Acc();
    var k3 = Acc();
    var v0 = Acc();
    var v1 = Acc();
    var v2 = Acc();
    var v3 = Acc();
#else
    var dk: array<f32, HALF>;
    var dv: array<f32, HALF>;
#endif
    for (var i0 = j0; i0 < p.t; i0 = i0 + SWEPT) {
        for (var e = tid; e < SWEPT * DH; e = e + THREADS) {
            swept_a[slot(e)] = staged_qkv(b, h, 0u, i0, e, sq);
            swept_b[slot(e)] = staged_dout(b, h, i0, e, sd);
        }
        workgroupBarrier();
        scores_a(sg, lane);
        workgroupBarrier();
        for (var x = 0u; x < 16u; x = x + 1u) {
            let c = c0 + (x + lane / 2u) % 16u;
            let i = i0 + c;
            var pr = 0.0;
            if (j < p.t && sees(b, i, j)) { pr = exp(logit_at(r * SWEPT + c, uq, slope, i, j) - lse_in[(b * p.h + h) * p.t + i]); }
            ps[r * SP + c] = f16(pr * P_SCALE);
        }
        workgroupBarrier();
        scores_b(sg, lane);
        workgroupBarrier();
        for (var x = 0u; x < 16u; x = x + 1u) {
            let c = c0 + (x + lane / 2u) % 16u;
            let i = i0 + c;
            var delta_i = 0.0;
            if (i < p.t) { delta_i = delta[(b * p.h + h) * p.t + i]; }
            let at = r * SP + c;
            let g = (f32(ps[at]) * P_UNSCALE) * (((ss[r * SWEPT + c] * ud) * uq) - delta_i);
            ds[at] = f16(g * s_ds);
        }
        workgroupBarrier();
#if COOP
        k0 = ds_a(k0, sg, 0u);
        v0 = ps_b(v0, sg, 0u);
        if (DH > 16u) {
            k1 = ds_a(k1, sg, 1u);
            v1 = ps_b(v1, sg, 1u);
        }
        if (DH > 32u) {
            k2 = ds_a(k2, sg, 2u);
            v2 = ps_b(v2, sg, 2u);
        }
        if (DH > 48u) {
            k3 = ds_a(k3, sg, 3u);
            v3 = ps_b(v3, sg, 3u);
        }
#else
        ds_a(&dk, sg, lane);
        ps_b(&dv, sg, lane);
#endif
        workgroupBarrier();
    }
    // dk = scale · Σ dSᵀ·q, unscaled by 2^-sS and 2^-sQ; dv = Σ Pᵀ·dout, by 2^-14 and 2^-sD.
    let u = u_ds;
    let w = P_UNSCALE;
#if COOP
    let t0 = j0 + sg * 16u;
    land_dqkv(((k0 * u) * uq) * p.scale, sg, lane, b, h, 1u, t0, 0u);
    land_dqkv((v0 * w) * ud, sg, lane, b, h, 2u, t0, 0u);
    if (DH > 16u) {
        land_dqkv(((k1 * u) * uq) * p.scale, sg, lane, b, h, 1u, t0, 1u);
        land_dqkv((v1 * w) * ud, sg, lane, b, h, 2u, t0, 1u);
    }
    if (DH > 32u) {
        land_dqkv(((k2 * u) * uq) * p.scale, sg, lane, b, h, 1u, t0, 2u);
        land_dqkv((v2 * w) * ud, sg, lane, b, h, 2u, t0, 2u);
    }
    if (DH > 48u) {
        land_dqkv(((k3 * u) * uq) * p.scale, sg, lane, b, h, 1u, t0, 3u);
        land_dqkv((v3 * w) * ud, sg, lane, b, h, 2u, t0, 3u);
    }
#else
    let cc = p.h * DH;
    for (var x = 0u; x < HALF; x = x + 1u) {
        let e = lane + 32u * x;
        let t = j0 + sg * 16u + e / DH;
        if (t < p.t) {
            let at = (b * p.t + t) * 3u * cc + h * DH + e % DH;
            dqkv[at + cc] = ((dk[x] * u) * uq) * p.scale;
            dqkv[at + 2u * cc] = (dv[x] * w) * ud;
        }
    }
#endif
}
