// The fast class's matmul (crates/engine/src/precision.rs): out[b] (M×N) = op(a[b]) · op(bm[b]),
// optionally added to out, as shaders/matmul.wgsl computes it, but with f16 multiplicands and
// f32 sums on cooperative matrices (tensor cores). Same Params, same transposes, batch strides,
// windows and modes as the strict kernel (ops/matmul.rs launches both); MODE_CONTINUE adds to
// out as MODE_ADD does, since the sum is scaled: a later K block's partial sum is added, not
// continued.
//
// Scaling: binding 4 holds [2^sA, 2^sB, 2^-sA, 2^-sB] (shaders/fast_scale.wgsl, launched just
// before): each staged value is f16(x · 2^s), at most 2^14 in magnitude, so nothing overflows;
// f16×f16 products are exact in f32, and the tile's sum is scaled back by two exact
// multiplications before it lands in out.
//
// Tiling: a workgroup of 128 invocations (four subgroups of 32) computes a BM×BN tile of out
// (64×64, or 128×128 with the switch WIDE), each subgroup a quarter of it as 2×2 (4×4 when WIDE)
// accumulators of 16×16, named, never indexed (an indexed array of them would live in local
// memory, as the strict kernel's lesson in matmul.wgsl says). The workgroup stages BK-deep
// slices of op(a) as [row][k] and of op(bm) as [col][k] in f16, rows padded by 8 halves; a is
// read row-major (coopLoadT), b column-major (coopLoad), as llama.cpp's mul_mm does. The staging
// reads each operand four values at a time along its contiguous axis (one vec4 where aligned),
// into registers first; with PREFETCH the next slice's reads are issued before this slice's
// multiply-adds, so that their latency hides behind them (the H200 timed every tile without it
// at 32-37 TFLOP/s, bench/RESULTS.md); with BUFFERS 2 the slice is staged into a second buffer
// after them instead, while the others read the first, so a slice costs one barrier, not two.
// Every tile runs the same 16-deep multiply-adds in the same K order, so the choice among them
// changes no bit.
//
// Storing: a whole, aligned tile goes straight to out (coopStoreT); a tile at an edge, one that
// adds to out, or one whose rows do not start at multiples of 4 values (Vulkan wants 16-byte
// aligned pointers and strides) goes through a 16×16 scratch per subgroup and a checked copy.
// naga 30.0.1's SPIR-V writer panics on a coopStore whose pointer index or stride is an inline
// expression: both are bound with `let` first (tests/shaders_valid.rs writes SPIR-V to catch it).
//
// The switch COOP off gives the same kernel with the three cooperative built-ins emulated by
// scalar loops over the same staged tiles (each invocation a row of its subgroup's quarter), for
// adapters without cooperative matrices: tests/gpu_vs_cpu.rs runs it on lavapipe, so staging,
// scaling, edges, modes and windows are checked there against the CPU twin; only the built-ins'
// layouts need a GPU that has them (`resmem selftest --precision fast`: integers, bit for bit).

#if COOP
enable f16;
enable wgpu_cooperative_matrix;
alias MatA = coop_mat16x16<f16, A>;
alias MatB = coop_mat16x16<f16, B>;
alias Acc = coop_mat16x16<f32, C>;
#else
enable f16;
#endif

// Params, bindings 0-3 (out, a, bm) and load_a4, load_b4 are in matmul_operands.wgsl, shared
// with the strict kernel.
@group(0) @binding(4) var<storage, read> scales: array<f32>;     // 2^sA, 2^sB, 2^-sA, 2^-sB

const THREADS: u32 = 128u;
// The staged rows' stride in halves: BK + 8, a multiple of 8 halves (16 bytes).
const SA: u32 = BK + 8u;
// BUFFERS (1 or 2): the staged slices; with 2 the next slice is staged into one while the
// multiply-adds read the other, one barrier a slice instead of two.
const DOUBLE: bool = BUFFERS == 2u;
var<workgroup> ta: array<f16, BM * SA * BUFFERS>;  // [row][k]: f16(op(a) · 2^sA), zeros past the edges
var<workgroup> tb: array<f16, BN * SA * BUFFERS>;  // [col][k]: f16(op(bm) · 2^sB)
#if COOP
var<workgroup> cs: array<f32, 1024>;     // a 16×16 scratch per subgroup, for the checked stores
#endif

// Four staged values at `at`, `at + step`, … of ta or tb: f16(v · scale).
fn put_a(at: u32, step: u32, v: vec4<f32>) {
    ta[at] = f16(v.x);
    ta[at + step] = f16(v.y);
    ta[at + 2u * step] = f16(v.z);
    ta[at + 3u * step] = f16(v.w);
}

fn put_b(at: u32, step: u32, v: vec4<f32>) {
    tb[at] = f16(v.x);
    tb[at + step] = f16(v.y);
    tb[at + 2u * step] = f16(v.z);
    tb[at + 3u * step] = f16(v.w);
}

// The invocation's share of a BK-deep slice: NA vec4s of op(a)'s rows row0.. and NB of
// op(bm)'s columns col0.., read four values at a time along the stored matrix's contiguous
// axis, consecutive invocations reading consecutive vec4s. Named, never indexed, so that they
// stay in registers (the lesson of matmul.wgsl's accumulators): at most 8 of each.
const NA: u32 = BM * BK / 4u / THREADS;
const NB: u32 = BN * BK / 4u / THREADS;
struct Held {
    a0: vec4<f32>, a1: vec4<f32>, a2: vec4<f32>, a3: vec4<f32>,
    a4: vec4<f32>, a5: vec4<f32>, a6: vec4<f32>, a7: vec4<f32>,
    b0: vec4<f32>, b1: vec4<f32>, b2: vec4<f32>, b3: vec4<f32>,
    b4: vec4<f32>, b5: vec4<f32>, b6: vec4<f32>, b7: vec4<f32>,
}

// The l-th vec4 of op(a) an invocation stages, and where it goes in ta: four rows of op(a) at
// one k when a is stored (K, M), four k of one row when (M, K).
fn fetch_a(tid: u32, l: u32, batch: u32, row0: u32, k0: u32) -> vec4<f32> {
    let e = tid + l * THREADS;
    if (p.trans_a != 0u) { return load_a4(batch, k0 + e / (BM / 4u), row0 + e % (BM / 4u) * 4u); }
    return load_a4(batch, row0 + e / (BK / 4u), k0 + e % (BK / 4u) * 4u);
}

fn place_a(tid: u32, l: u32, v: vec4<f32>, off: u32) {
    let e = tid + l * THREADS;
    if (p.trans_a != 0u) {
        put_a(off + e % (BM / 4u) * 4u * SA + e / (BM / 4u), SA, v);
    } else {
        put_a(off + e / (BK / 4u) * SA + e % (BK / 4u) * 4u, 1u, v);
    }
}

// The same for op(bm): four k of one column when bm is stored (N, K), four columns at one k
// when (K, N).
fn fetch_b(tid: u32, l: u32, batch: u32, col0: u32, k0: u32) -> vec4<f32> {
    let e = tid + l * THREADS;
    if (p.trans_b != 0u) { return load_b4(batch, col0 + e / (BK / 4u), k0 + e % (BK / 4u) * 4u); }
    return load_b4(batch, k0 + e / (BN / 4u), col0 + e % (BN / 4u) * 4u);
}

fn place_b(tid: u32, l: u32, v: vec4<f32>, off: u32) {
    let e = tid + l * THREADS;
    if (p.trans_b != 0u) {
        put_b(off + e / (BK / 4u) * SA + e % (BK / 4u) * 4u, 1u, v);
    } else {
        put_b(off + e % (BN / 4u) * 4u * SA + e / (BN / 4u), SA, v);
    }
}

// Reads the invocation's share of the slice from k0 into registers.
fn hold(tid: u32, batch: u32, row0: u32, col0: u32, k0: u32) -> Held {
    var h: Held;
    h.a0 = fetch_a(tid, 0u, batch, row0, k0);
    if (NA > 1u) { h.a1 = fetch_a(tid, 1u, batch, row0, k0); }
    if (NA > 2u) {
        h.a2 = fetch_a(tid, 2u, batch, row0, k0);
        h.a3 = fetch_a(tid, 3u, batch, row0, k0);
    }
    if (NA > 4u) {
        h.a4 = fetch_a(tid, 4u, batch, row0, k0);
        h.a5 = fetch_a(tid, 5u, batch, row0, k0);
        h.a6 = fetch_a(tid, 6u, batch, row0, k0);
        h.a7 = fetch_a(tid, 7u, batch, row0, k0);
    }
    h.b0 = fetch_b(tid, 0u, batch, col0, k0);
    if (NB > 1u) { h.b1 = fetch_b(tid, 1u, batch, col0, k0); }
    if (NB > 2u) {
        h.b2 = fetch_b(tid, 2u, batch, col0, k0);
        h.b3 = fetch_b(tid, 3u, batch, col0, k0);
    }
    if (NB > 4u) {
        h.b4 = fetch_b(tid, 4u, batch, col0, k0);
        h.b5 = fetch_b(tid, 5u, batch, col0, k0);
        h.b6 = fetch_b(tid, 6u, batch, col0, k0);
        h.b7 = fetch_b(tid, 7u, batch, col0, k0);
    }
    return h;
}

// Stages what `hold` read, scaled and rounded to f16, into buffer `buf` of ta and tb.
fn stage(tid: u32, h: Held, sa: f32, sb: f32, buf: u32) {
    let oa = buf * BM * SA;
    let ob = buf * BN * SA;
    place_a(tid, 0u, h.a0 * sa, oa);
    if (NA > 1u) { place_a(tid, 1u, h.a1 * sa, oa); }
    if (NA > 2u) {
        place_a(tid, 2u, h.a2 * sa, oa);
        place_a(tid, 3u, h.a3 * sa, oa);
    }
    if (NA > 4u) {
        place_a(tid, 4u, h.a4 * sa, oa);
        place_a(tid, 5u, h.a5 * sa, oa);
        place_a(tid, 6u, h.a6 * sa, oa);
        place_a(tid, 7u, h.a7 * sa, oa);
    }
    place_b(tid, 0u, h.b0 * sb, ob);
    if (NB > 1u) { place_b(tid, 1u, h.b1 * sb, ob); }
    if (NB > 2u) {
        place_b(tid, 2u, h.b2 * sb, ob);
        place_b(tid, 3u, h.b3 * sb, ob);
    }
    if (NB > 4u) {
        place_b(tid, 4u, h.b4 * sb, ob);
        place_b(tid, 5u, h.b5 * sb, ob);
        place_b(tid, 6u, h.b6 * sb, ob);
        place_b(tid, 7u, h.b7 * sb, ob);
    }
}

// Before a slice's multiply-adds: staged and behind a barrier (one buffer), or its successor's
// reads issued (PREFETCH, DOUBLE) so that they are in flight during them. Returns the buffer the
// multiply-adds read. Call from uniform control flow: it holds barriers.
fn slice_begin(tid: u32, h: ptr<function, Held>, batch: u32, row0: u32, col0: u32, k0: u32, sa: f32, sb: f32) -> u32 {
    let more = k0 + BK < p.k;
    if (DOUBLE) {
        if (more) { *h = hold(tid, batch, row0, col0, k0 + BK); }
        return (k0 / BK) % 2u;
    }
    stage(tid, *h, sa, sb, 0u);
    workgroupBarrier();
    if (PREFETCH && more) { *h = hold(tid, batch, row0, col0, k0 + BK); }
    return 0u;
}

// After them: with DOUBLE the next slice staged into the other buffer, which every subgroup
// finished reading before the last barrier; else the barrier, then the next slice's reads when
// they were not prefetched.
fn slice_end(tid: u32, h: ptr<function, Held>, batch: u32, row0: u32, col0: u32, k0: u32, sa: f32, sb: f32, cur: u32) {
    let more = k0 + BK < p.k;
    if (DOUBLE) {
        if (more) { stage(tid, *h, sa, sb, 1u - cur); }
        workgroupBarrier();
        return;
    }
    workgroupBarrier();
    if (!PREFETCH && more) { *h = hold(tid, batch, row0, col0, k0 + BK); }
}

// out at (row, col) of the tile whose first value is `base`, `v` written or added by the mode,
// nothing past the edges.
fn put(base: u32, row: u32, col: u32, v: f32) {
    if (row >= p.m || col >= p.n) { return; }
    let o = base + row * p.ldo + col;
    if (p.mode == MODE_WRITE) { out[o] = v; } else { out[o] = out[o] + v; }
}

#if COOP
// The subgroup's scratch tile (rows r0.., columns c0.. of out), copied out with checks: each
// of the 32 invocations of the subgroup 8 values.
fn copy_out(lane: u32, so: u32, base: u32, r0: u32, c0: u32) {
    for (var i = 0u; i < 8u; i = i + 1u) {
        let e = lane + i * 32u;
        put(base, r0 + e / 16u, c0 + e % 16u, cs[so + e]);
    }
}

// A result tile stored straight into out: whole, and 16-byte aligned.
fn land_whole(r: Acc, o: u32, ld: u32) {
    coopStoreT(r, &out[o], ld);
}

// A result tile through the subgroup's scratch and the checked copy. Call from uniform control
// flow: it holds barriers.
fn land_checked(r: Acc, lane: u32, so: u32, base: u32, r0: u32, c0: u32) {
    let st = 16u;
    coopStoreT(r, &cs[so], st);
    workgroupBarrier();
    copy_out(lane, so, base, r0, c0);
    workgroupBarrier();
}

@compute @workgroup_size(128)
fn matmul_fast(@builtin(local_invocation_index) tid: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    let batch = wid.z;
    let row0 = wid.y * BM;
    let col0 = wid.x * BN;
    // The subgroup's quarter: offsets from the invocation's index, never a branch on it.
    let sg = tid / 32u;
    let sr = (sg / 2u) * (BM / 2u);
    let sc = (sg % 2u) * (BN / 2u);
    let sa = scales[0];
    let sb = scales[1];
    var c00 = Acc();
    var c01 = Acc();
    var c10 = Acc();
    var c11 = Acc();
#if WIDE
    var c02 = Acc();
    var c03 = Acc();
    var c12 = Acc();
    var c13 = Acc();
    var c20 = Acc();
    var c21 = Acc();
    var c22 = Acc();
    var c23 = Acc();
    var c30 = Acc();
    var c31 = Acc();
    var c32 = Acc();
    var c33 = Acc();
#endif
    var h = hold(tid, batch, row0, col0, 0u);
    if (DOUBLE) {
        stage(tid, h, sa, sb, 0u);
        workgroupBarrier();
    }
    for (var k0 = 0u; k0 < p.k; k0 = k0 + BK) {
        let cur = slice_begin(tid, &h, batch, row0, col0, k0, sa, sb);
        let oa = cur * BM * SA;
        let ob = cur * BN * SA;
        for (var kk = 0u; kk < BK; kk = kk + 16u) {
            let a0: MatA = coopLoadT<MatA>(&ta[oa + sr * SA + kk], SA);
            let a1: MatA = coopLoadT<MatA>(&ta[oa + (sr + 16u) * SA + kk], SA);
            let b0: MatB = coopLoad<MatB>(&tb[ob + sc * SA + kk], SA);
            let b1: MatB = coopLoad<MatB>(&tb[ob + (sc + 16u) * SA + kk], SA);
            c00 = coopMultiplyAdd(a0, b0, c00);
            c01 = coopMultiplyAdd(a0, b1, c01);
            c10 = coopMultiplyAdd(a1, b0, c10);
            c11 = coopMultiplyAdd(a1, b1, c11);
#if WIDE
            let a2: MatA = coopLoadT<MatA>(&ta[oa + (sr + 32u) * SA + kk], SA);
            let a3: MatA = coopLoadT<MatA>(&ta[oa + (sr + 48u) * SA + kk], SA);
            let b2: MatB = coopLoad<MatB>(&tb[ob + (sc + 32u) * SA + kk], SA);
            let b3: MatB = coopLoad<MatB>(&tb[ob + (sc + 48u) * SA + kk], SA);
            c02 = coopMultiplyAdd(a0, b2, c02);
            c03 = coopMultiplyAdd(a0, b3, c03);
            c12 = coopMultiplyAdd(a1, b2, c12);
            c13 = coopMultiplyAdd(a1, b3, c13);
            c20 = coopMultiplyAdd(a2, b0, c20);
            c21 = coopMultiplyAdd(a2, b1, c21);
            c22 = coopMultiplyAdd(a2, b2, c22);
            c23 = coopMultiplyAdd(a2, b3, c23);
            c30 = coopMultiplyAdd(a3, b0, c30);
            c31 = coopMultiplyAdd(a3, b1, c31);
            c32 = coopMultiplyAdd(a3, b2, c32);
            c33 = coopMultiplyAdd(a3, b3, c33);
#endif
        }
        slice_end(tid, &h, batch, row0, col0, k0, sa, sb, cur);
    }
    let ua = scales[2];
    let ub = scales[3];
    let base = batch * p.m * p.ldo + p.off_o;
    let ld = p.ldo;
    let r0 = row0 + sr;
    let c0 = col0 + sc;
    // Workgroup-uniform: the tile, the mode and the alignment.
    let whole = row0 + BM <= p.m && col0 + BN <= p.n && p.mode == MODE_WRITE && base % 4u == 0u && ld % 4u == 0u;
    if (whole) {
        let o = base + r0 * ld + c0;
        land_whole((c00 * ua) * ub, o, ld);
        land_whole((c01 * ua) * ub, o + 16u, ld);
        land_whole((c10 * ua) * ub, o + 16u * ld, ld);
        land_whole((c11 * ua) * ub, o + 16u * ld + 16u, ld);
#if WIDE
        land_whole((c02 * ua) * ub, o + 32u, ld);
        land_whole((c03 * ua) * ub, o + 48u, ld);
        land_whole((c12 * ua) * ub, o + 16u * ld + 32u, ld);
        land_whole((c13 * ua) * ub, o + 16u * ld + 48u, ld);
        land_whole((c20 * ua) * ub, o + 32u * ld, ld);
        land_whole((c21 * ua) * ub, o + 32u * ld + 16u, ld);
        land_whole((c22 * ua) * ub, o + 32u * ld + 32u, ld);
        land_whole((c23 * ua) * ub, o + 32u * ld + 48u, ld);
        land_whole((c30 * ua) * ub, o + 48u * ld, ld);
        land_whole((c31 * ua) * ub, o + 48u * ld + 16u, ld);
        land_whole((c32 * ua) * ub, o + 48u * ld + 32u, ld);
        land_whole((c33 * ua) * ub, o + 48u * ld + 48u, ld);
#endif
    } else {
        let lane = tid % 32u;
        let so = sg * 256u;
        land_checked((c00 * ua) * ub, lane, so, base, r0, c0);
        land_checked((c01 * ua) * ub, lane, so, base, r0, c0 + 16u);
        land_checked((c10 * ua) * ub, lane, so, base, r0 + 16u, c0);
        land_checked((c11 * ua) * ub, lane, so, base, r0 + 16u, c0 + 16u);
#if WIDE
        land_checked((c02 * ua) * ub, lane, so, base, r0, c0 + 32u);
        land_checked((c03 * ua) * ub, lane, so, base, r0, c0 + 48u);
        land_checked((c12 * ua) * ub, lane, so, base, r0 + 16u, c0 + 32u);
        land_checked((c13 * ua) * ub, lane, so, base, r0 + 16u, c0 + 48u);
        land_checked((c20 * ua) * ub, lane, so, base, r0 + 32u, c0);
        land_checked((c21 * ua) * ub, lane, so, base, r0 + 32u, c0 + 16u);
        land_checked((c22 * ua) * ub, lane, so, base, r0 + 32u, c0 + 32u);
        land_checked((c23 * ua) * ub, lane, so, base, r0 + 32u, c0 + 48u);
        land_checked((c30 * ua) * ub, lane, so, base, r0 + 48u, c0);
        land_checked((c31 * ua) * ub, lane, so, base, r0 + 48u, c0 + 16u);
        land_checked((c32 * ua) * ub, lane, so, base, r0 + 48u, c0 + 32u);
        land_checked((c33 * ua) * ub, lane, so, base, r0 + 48u, c0 + 48u);
#endif
    }
}
#else
// Rows of its subgroup's quarter each invocation holds, and the quarter's columns.
const LANE_ROWS: u32 = BM / 64u;
const COLS: u32 = BN / 2u;

@compute @workgroup_size(128)
fn matmul_fast(@builtin(local_invocation_index) tid: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    let batch = wid.z;
    let row0 = wid.y * BM;
    let col0 = wid.x * BN;
    let sg = tid / 32u;
    let sr = (sg / 2u) * (BM / 2u);
    let sc = (sg % 2u) * (BN / 2u);
    let lane = tid % 32u;
    let sa = scales[0];
    let sb = scales[1];
    // The invocation's rows sr + lane + 32·r of its subgroup's quarter, every column of it: what
    // the subgroup's accumulators hold between them.
    var acc: array<f32, LANE_ROWS * COLS>;
    var h = hold(tid, batch, row0, col0, 0u);
    if (DOUBLE) {
        stage(tid, h, sa, sb, 0u);
        workgroupBarrier();
    }
    for (var k0 = 0u; k0 < p.k; k0 = k0 + BK) {
        let cur = slice_begin(tid, &h, batch, row0, col0, k0, sa, sb);
        let oa = cur * BM * SA;
        let ob = cur * BN * SA;
        for (var kk = 0u; kk < BK; kk = kk + 1u) {
            for (var r = 0u; r < LANE_ROWS; r = r + 1u) {
                let av = f32(ta[oa + (sr + lane + 32u * r) * SA + kk]);
                for (var j = 0u; j < COLS; j = j + 1u) {
                    acc[r * COLS + j] = acc[r * COLS + j] + av * f32(tb[ob + (sc + j) * SA + kk]);
                }
            }
        }
        slice_end(tid, &h, batch, row0, col0, k0, sa, sb, cur);
    }
    let ua = scales[2];
    let ub = scales[3];
    let base = batch * p.m * p.ldo + p.off_o;
    for (var r = 0u; r < LANE_ROWS; r = r + 1u) {
        for (var j = 0u; j < COLS; j = j + 1u) {
            put(base, row0 + sr + lane + 32u * r, col0 + sc + j, (acc[r * COLS + j] * ua) * ub);
        }
    }
}
#endif
