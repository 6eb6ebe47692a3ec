// Batched matmul: out[b] (M×N) = op(a[b]) (M×K) · op(bm[b]) (K×N), optionally added to out.
// op() is a transpose when the flag is set: a is stored (K, M) when trans_a, bm is (N, K) when
// trans_b. A batch stride of 0 broadcasts an operand (a weight) over the batch.
//
// A product whose operands exceed one binding is launched in blocks (ops/matmul.rs): each binds
// windows of the operands, whose row strides lda, ldb, ldo stay those of the whole matrices and
// whose first values sit off_a, off_b, off_o into their bindings. mode 0 writes the sum,
// MODE_ADD adds it to out, MODE_CONTINUE (a later block along K) starts the sum from out: the
// same chain of fmas.
//
// Tiling: a workgroup of 16×16 threads computes a 128×128 tile of out, each thread an 8×8
// block of it (rows ty*4.. and 64+ty*4.., columns tx*4.. and 64+tx*4..: two vec4s each way),
// walking K in steps of TK = 16 (BM, BN and TK are defines, from ops/matmul.rs). Per k a thread reads 2 vec4s of a and 2 of bm and does 64
// fmas, where the old 64×64 tile with 4×4 blocks did 16 fmas for 8 scalar reads: the register
// block, not memory, now bounds the rate. The staged slices of a and bm fill 16 KiB of
// workgroup memory, WebGPU's default limit. Global reads are vec4s where the operand's offset
// and strides are multiples of 4 (vec_a, vec_b) and scalars otherwise (odd shapes, windows).
//
// Every out value is one fma chain over k = 0, 1, …, K-1 (then zeros up to the next multiple
// of TK), from 0 or from out: the tiling, the subgroup entry point below and any split into
// launches move operands around but never reorder a chain, so all give the same bits. Only the
// K slices (an option, `matmul_slices_total` below) sum otherwise: a chain per slice, then the
// slices in order, the same in every tile.
//
// The last section, `#if SUBGROUPS`, is compiled only on devices with subgroups (the switch
// SUBGROUPS, crates/engine/src/shaders.rs): there a's slice reaches the registers through
// subgroup shuffles instead of workgroup memory.
//
// Params, the bindings and the operands' reads (load_a4, load_b4) are in matmul_operands.wgsl,
// which the fast kernel shares.

// BM rows and BN columns of out a workgroup computes; the K tile TK, at whose multiples
// ops/matmul.rs splits K.
const TX: u32 = BN / 8u;  // threads along columns, each 8 wide
const TY: u32 = BM / 8u;  // threads along rows, each 8 high
var<workgroup> a_tile: array<vec4<f32>, TK * BM / 4u>;  // [TK][BM]: a_tile[(kk * BM + row) / 4]
var<workgroup> b_tile: array<vec4<f32>, TK * BN / 4u>;  // [TK][BN]: b_tile[(kk * BN + col) / 4]

// One element of a vec4 tile, by the index of the value.
fn set_a(i: u32, v: f32) { a_tile[i / 4u][i % 4u] = v; }
fn set_b(i: u32, v: f32) { b_tile[i / 4u][i % 4u] = v; }

// Stages op(a)'s rows row0.. and columns k0.. (BM × TK) into a_tile, 2 vec4s a thread, each
// read along the stored matrix's contiguous axis.
fn stage_a(tid: u32, batch: u32, row0: u32, k0: u32) {
    for (var l = 0u; l < TK * BM / 4u / (TX * TY); l = l + 1u) {
        let e = tid + l * TX * TY;
        if (p.trans_a != 0u) {
            // Stored (K, M): a run of 4 rows of op(a) is one vec4 of the tile.
            let kk = e / (BM / 4u);
            let r = e % (BM / 4u) * 4u;
            a_tile[(kk * BM + r) / 4u] = load_a4(batch, k0 + kk, row0 + r);
        } else {
            // Stored (M, K): a run of 4 k is a column of the tile.
            let r = e / (TK / 4u);
            let kk = e % (TK / 4u) * 4u;
            let v = load_a4(batch, row0 + r, k0 + kk);
            for (var j = 0u; j < 4u; j = j + 1u) { set_a((kk + j) * BM + r, v[j]); }
        }
    }
}

// Stages op(bm)'s rows k0.. and columns col0.. (TK × BN) into b_tile: LB vec4s a thread, the
// l-th read by fetch_b and placed by put_b.
const LB: u32 = TK * BN / 4u / (TX * TY);

fn fetch_b(tid: u32, l: u32, batch: u32, k0: u32, col0: u32) -> vec4<f32> {
    let e = tid + l * TX * TY;
    if (p.trans_b != 0u) {
        // Stored (N, K): a run of 4 k is a column of the tile.
        return load_b4(batch, col0 + e / (TK / 4u), k0 + e % (TK / 4u) * 4u);
    }
    // Stored (K, N): a run of 4 columns is one vec4 of the tile.
    return load_b4(batch, k0 + e / (BN / 4u), col0 + e % (BN / 4u) * 4u);
}

fn put_b(tid: u32, l: u32, v: vec4<f32>) {
    let e = tid + l * TX * TY;
    if (p.trans_b != 0u) {
        let c = e / (TK / 4u);
        let kk = e % (TK / 4u) * 4u;
        for (var j = 0u; j < 4u; j = j + 1u) { set_b((kk + j) * BN + c, v[j]); }
    } else {
        b_tile[(e / (BN / 4u) * BN + e % (BN / 4u) * 4u) / 4u] = v;
    }
}

fn stage_b(tid: u32, batch: u32, k0: u32, col0: u32) {
    for (var l = 0u; l < LB; l = l + 1u) { put_b(tid, l, fetch_b(tid, l, batch, k0, col0)); }
}

// The thread's 8×8 block as 16 vec4s: acc[r * 2 + h] holds row r (0-3: ty*4 + r, 4-7:
// BM/2 + ty*4 + r - 4), columns tx*4.. (h = 0) or BN/2 + tx*4.. (h = 1).
alias Block = array<vec4<f32>, 16>;

// One step k of every chain in the block: a0, a1 are op(a)'s 8 rows at k, b0, b1 op(bm)'s 8
// columns.
fn fma_step(acc: ptr<function, Block>, a0: vec4<f32>, a1: vec4<f32>, b0: vec4<f32>, b1: vec4<f32>) {
    (*acc)[0] = fma(vec4(a0.x), b0, (*acc)[0]);
    (*acc)[1] = fma(vec4(a0.x), b1, (*acc)[1]);
    (*acc)[2] = fma(vec4(a0.y), b0, (*acc)[2]);
    (*acc)[3] = fma(vec4(a0.y), b1, (*acc)[3]);
    (*acc)[4] = fma(vec4(a0.z), b0, (*acc)[4]);
    (*acc)[5] = fma(vec4(a0.z), b1, (*acc)[5]);
    (*acc)[6] = fma(vec4(a0.w), b0, (*acc)[6]);
    (*acc)[7] = fma(vec4(a0.w), b1, (*acc)[7]);
    (*acc)[8] = fma(vec4(a1.x), b0, (*acc)[8]);
    (*acc)[9] = fma(vec4(a1.x), b1, (*acc)[9]);
    (*acc)[10] = fma(vec4(a1.y), b0, (*acc)[10]);
    (*acc)[11] = fma(vec4(a1.y), b1, (*acc)[11]);
    (*acc)[12] = fma(vec4(a1.z), b0, (*acc)[12]);
    (*acc)[13] = fma(vec4(a1.z), b1, (*acc)[13]);
    (*acc)[14] = fma(vec4(a1.w), b0, (*acc)[14]);
    (*acc)[15] = fma(vec4(a1.w), b1, (*acc)[15]);
}

// The block's 16 vec4s are read and written with constant indices only. An index the driver
// cannot resolve at compile time (a loop variable: NVIDIA's compiler did not unroll naga's
// loops) puts the whole block in local memory instead of registers, which made every matmul
// 7x slower on an H200 (2.0 against 14.9 TFLOP/s, bench/RESULTS.md).
// Four values of out at (row, col..col+3) from `base`, zero past its edges.
fn out_load4(base: u32, row: u32, col: u32) -> vec4<f32> {
    var v = vec4<f32>(0.0);
    if (row >= p.m) { return v; }
    let i = base + row * p.ldo + col;
    if (col < p.n) { v.x = out[i]; }
    if (col + 1u < p.n) { v.y = out[i + 1u]; }
    if (col + 2u < p.n) { v.z = out[i + 2u]; }
    if (col + 3u < p.n) { v.w = out[i + 3u]; }
    return v;
}

// Writes four values of out at (row, col..col+3), added to out in MODE_ADD, skipping the edges.
fn out_store4(base: u32, row: u32, col: u32, v: vec4<f32>) {
    if (row >= p.m) { return; }
    let i = base + row * p.ldo + col;
    var w = v;
    if (p.mode == MODE_ADD) { w = w + out_load4(base, row, col); }
    if (col < p.n) { out[i] = w.x; }
    if (col + 1u < p.n) { out[i + 1u] = w.y; }
    if (col + 2u < p.n) { out[i + 2u] = w.z; }
    if (col + 3u < p.n) { out[i + 3u] = w.w; }
}

// The block's starting values: 0, or out in MODE_CONTINUE.
fn block_init(batch: u32, row0: u32, col0: u32, tx: u32, ty: u32) -> Block {
    var acc: Block;
    if (p.mode != MODE_CONTINUE) { return acc; }
    let base = batch * p.m * p.ldo + p.off_o;
    let ra = row0 + ty * 4u;
    let rb = row0 + BM / 2u + ty * 4u;
    let c0 = col0 + tx * 4u;
    let c1 = col0 + BN / 2u + tx * 4u;
    acc[0] = out_load4(base, ra, c0);
    acc[1] = out_load4(base, ra, c1);
    acc[2] = out_load4(base, ra + 1u, c0);
    acc[3] = out_load4(base, ra + 1u, c1);
    acc[4] = out_load4(base, ra + 2u, c0);
    acc[5] = out_load4(base, ra + 2u, c1);
    acc[6] = out_load4(base, ra + 3u, c0);
    acc[7] = out_load4(base, ra + 3u, c1);
    acc[8] = out_load4(base, rb, c0);
    acc[9] = out_load4(base, rb, c1);
    acc[10] = out_load4(base, rb + 1u, c0);
    acc[11] = out_load4(base, rb + 1u, c1);
    acc[12] = out_load4(base, rb + 2u, c0);
    acc[13] = out_load4(base, rb + 2u, c1);
    acc[14] = out_load4(base, rb + 3u, c0);
    acc[15] = out_load4(base, rb + 3u, c1);
    return acc;
}

// Writes the block, added to out in MODE_ADD.
fn block_store(acc: ptr<function, Block>, batch: u32, row0: u32, col0: u32, tx: u32, ty: u32) {
    let base = batch * p.m * p.ldo + p.off_o;
    let ra = row0 + ty * 4u;
    let rb = row0 + BM / 2u + ty * 4u;
    let c0 = col0 + tx * 4u;
    let c1 = col0 + BN / 2u + tx * 4u;
    out_store4(base, ra, c0, (*acc)[0]);
    out_store4(base, ra, c1, (*acc)[1]);
    out_store4(base, ra + 1u, c0, (*acc)[2]);
    out_store4(base, ra + 1u, c1, (*acc)[3]);
    out_store4(base, ra + 2u, c0, (*acc)[4]);
    out_store4(base, ra + 2u, c1, (*acc)[5]);
    out_store4(base, ra + 3u, c0, (*acc)[6]);
    out_store4(base, ra + 3u, c1, (*acc)[7]);
    out_store4(base, rb, c0, (*acc)[8]);
    out_store4(base, rb, c1, (*acc)[9]);
    out_store4(base, rb + 1u, c0, (*acc)[10]);
    out_store4(base, rb + 1u, c1, (*acc)[11]);
    out_store4(base, rb + 2u, c0, (*acc)[12]);
    out_store4(base, rb + 2u, c1, (*acc)[13]);
    out_store4(base, rb + 3u, c0, (*acc)[14]);
    out_store4(base, rb + 3u, c1, (*acc)[15]);
}

@compute @workgroup_size(TX * TY, 1, 1)
fn matmul(@builtin(local_invocation_index) tid: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    let batch = wid.z;
    let row0 = wid.y * BM;
    let col0 = wid.x * BN;
    let tx = tid % TX;
    let ty = tid / TX;
    var acc = block_init(batch, row0, col0, tx, ty);
    for (var k0 = 0u; k0 < p.k; k0 = k0 + TK) {
        stage_a(tid, batch, row0, k0);
        stage_b(tid, batch, k0, col0);
        workgroupBarrier();
        for (var kk = 0u; kk < TK; kk = kk + 1u) {
            let a0 = a_tile[(kk * BM) / 4u + ty];
            let a1 = a_tile[(kk * BM + BM / 2u) / 4u + ty];
            let b0 = b_tile[(kk * BN) / 4u + tx];
            let b1 = b_tile[(kk * BN + BN / 2u) / 4u + tx];
            fma_step(&acc, a0, a1, b0, b1);
        }
        workgroupBarrier();
    }
    block_store(&acc, batch, row0, col0, tx, ty);
}

// A product in K slices (ops/matmul.rs): the slices' partial outs, each (M, N), side by side,
// then out = their sum in slice order (p.batch slices), added to out in MODE_ADD.
@group(0) @binding(4) var<storage, read> slices: array<f32>;    // (slices, M, N)

@compute @workgroup_size(WG)
fn matmul_slices_total(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_index(gid, nwg);
    let mn = p.m * p.n;
    if (i >= mn) { return; }
    var total = slices[i];
    for (var s = 1u; s < p.batch; s = s + 1u) { total = total + slices[s * mn + i]; }
    if (p.mode == MODE_ADD) { total = out[i] + total; }
    out[i] = total;
}

#if SUBGROUPS
// The same tiles and chains; only bm is staged in workgroup memory. The lanes that share a
// thread row ty (g = min(subgroup size, TX) of them, side by side) share op(a)'s 8 rows: each
// reads those rows at one k of every g straight from global memory, and at each k the lanes
// take them from the lane that read them with a shuffle. That needs the usual layout (lane =
// local index mod subgroup size, subgroups full), which WGSL does not promise: a subgroup that
// finds another reads its own a values from global memory instead, slower and the same bits.

// An untransposed a at (row, k), zero past its edges.
fn load_a1(batch: u32, row: u32, k: u32) -> f32 {
    if (row >= p.m || k >= p.k) { return 0.0; }
    let i = batch * p.stride_a + p.off_a + row * p.lda + k;
    return a[i / 4u][i % 4u];
}

// op(a)'s rows r..r+3 (r a multiple of 4) at column k.
fn load_a_rows(batch: u32, r: u32, k: u32) -> vec4<f32> {
    if (p.trans_a != 0u) { return load_a4(batch, k, r); }
    return vec4(load_a1(batch, r, k), load_a1(batch, r + 1u, k), load_a1(batch, r + 2u, k), load_a1(batch, r + 3u, k));
}

// How this subgroup's lanes share op(a)'s rows: g lanes side by side from `lead`, and whether
// they all share one thread row ty (else each lane reads its own). Call from uniform control
// flow.
struct Lanes { g: u32, lead: u32, shared_rows: bool }

fn lanes_of(lane: u32, lanes: u32, ty: u32) -> Lanes {
    // At least 1, so that the steps' loop over K advances (shaders_valid.rs).
    let g = clamp(lanes, 1u, TX);
    let lead = lane - lane % g;
    let full = subgroupAdd(1u) == lanes && lead + g <= lanes && TK % g == 0u;
    return Lanes(g, lead, subgroupAll(full && subgroupShuffle(ty, lead) == ty));
}

// The TK steps of K tile k0 where the lanes share rows: each lane reads the rows at one k of
// every g (those of the first g given: `first_a`, `first_b`), and step kk takes them from lane
// kk with a shuffle.
fn shared_row_steps(acc: ptr<function, Block>, batch: u32, ra: u32, rb: u32, k0: u32, tx: u32, lane: u32, l: Lanes, first_a: vec4<f32>, first_b: vec4<f32>) {
    for (var c = 0u; c < TK; c = c + l.g) {
        var ha = first_a;
        var hb = first_b;
        if (c > 0u) {
            ha = load_a_rows(batch, ra, k0 + c + lane % l.g);
            hb = load_a_rows(batch, rb, k0 + c + lane % l.g);
        }
        for (var j = 0u; j < l.g; j = j + 1u) {
            let kk = c + j;
            let b0 = b_tile[(kk * BN) / 4u + tx];
            let b1 = b_tile[(kk * BN + BN / 2u) / 4u + tx];
            fma_step(acc, subgroupShuffle(ha, l.lead + j), subgroupShuffle(hb, l.lead + j), b0, b1);
        }
    }
}

// The TK steps of K tile k0 where each lane reads its own rows of op(a).
fn own_row_steps(acc: ptr<function, Block>, batch: u32, ra: u32, rb: u32, k0: u32, tx: u32) {
    for (var kk = 0u; kk < TK; kk = kk + 1u) {
        let b0 = b_tile[(kk * BN) / 4u + tx];
        let b1 = b_tile[(kk * BN + BN / 2u) / 4u + tx];
        fma_step(acc, load_a_rows(batch, ra, k0 + kk), load_a_rows(batch, rb, k0 + kk), b0, b1);
    }
}

@compute @workgroup_size(TX * TY, 1, 1)
fn matmul_subgroup(
    @builtin(local_invocation_index) tid: u32,
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(subgroup_invocation_id) lane: u32,
    @builtin(subgroup_size) lanes: u32,
) {
    let batch = wid.z;
    let row0 = wid.y * BM;
    let col0 = wid.x * BN;
    let tx = tid % TX;
    let ty = tid / TX;
    let l = lanes_of(lane, lanes, ty);
    let ra = row0 + ty * 4u;
    let rb = row0 + BM / 2u + ty * 4u;
    var acc = block_init(batch, row0, col0, tx, ty);
    for (var k0 = 0u; k0 < p.k; k0 = k0 + TK) {
        stage_b(tid, batch, k0, col0);
        workgroupBarrier();
        if (l.shared_rows) {
            let k = k0 + lane % l.g;
            shared_row_steps(&acc, batch, ra, rb, k0, tx, lane, l, load_a_rows(batch, ra, k), load_a_rows(batch, rb, k));
        } else {
            own_row_steps(&acc, batch, ra, rb, k0, tx);
        }
        workgroupBarrier();
    }
    block_store(&acc, batch, row0, col0, tx, ty);
}

// The subgroup path with the next K tile read while this one's products are added: its slice
// of bm (LB vec4s a thread, 2 or 4: held in four named registers, as constant indices keep them
// out of local memory) and, where the lanes share rows, op(a)'s rows for its first step. They
// are put in place after the tile's last step, so the wait on global memory overlaps the fmas
// instead of following them. The same chains, so the same bits.
struct NextB { v0: vec4<f32>, v1: vec4<f32>, v2: vec4<f32>, v3: vec4<f32> }

fn fetch_next_b(tid: u32, batch: u32, k0: u32, col0: u32) -> NextB {
    var n = NextB(fetch_b(tid, 0u, batch, k0, col0), vec4<f32>(0.0), vec4<f32>(0.0), vec4<f32>(0.0));
    if (LB > 1u) { n.v1 = fetch_b(tid, 1u, batch, k0, col0); }
    if (LB > 2u) {
        n.v2 = fetch_b(tid, 2u, batch, k0, col0);
        n.v3 = fetch_b(tid, 3u, batch, k0, col0);
    }
    return n;
}

fn put_next_b(tid: u32, n: NextB) {
    put_b(tid, 0u, n.v0);
    if (LB > 1u) { put_b(tid, 1u, n.v1); }
    if (LB > 2u) {
        put_b(tid, 2u, n.v2);
        put_b(tid, 3u, n.v3);
    }
}

@compute @workgroup_size(TX * TY, 1, 1)
fn matmul_subgroup_prefetch(
    @builtin(local_invocation_index) tid: u32,
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(subgroup_invocation_id) lane: u32,
    @builtin(subgroup_size) lanes: u32,
) {
    let batch = wid.z;
    let row0 = wid.y * BM;
    let col0 = wid.x * BN;
    let tx = tid % TX;
    let ty = tid / TX;
    let l = lanes_of(lane, lanes, ty);
    let ra = row0 + ty * 4u;
    let rb = row0 + BM / 2u + ty * 4u;
    var acc = block_init(batch, row0, col0, tx, ty);
    // Op(a)'s rows for the first step of the tile about to run (shared rows only).
    var ha = vec4<f32>(0.0);
    var hb = vec4<f32>(0.0);
    if (l.shared_rows) {
        ha = load_a_rows(batch, ra, lane % l.g);
        hb = load_a_rows(batch, rb, lane % l.g);
    }
    var next = fetch_next_b(tid, batch, 0u, col0);
    for (var k0 = 0u; k0 < p.k; k0 = k0 + TK) {
        put_next_b(tid, next);
        workgroupBarrier();
        let more = k0 + TK < p.k;
        if (more) { next = fetch_next_b(tid, batch, k0 + TK, col0); }
        if (l.shared_rows) {
            let ca = ha;
            let cb = hb;
            if (more) {
                ha = load_a_rows(batch, ra, k0 + TK + lane % l.g);
                hb = load_a_rows(batch, rb, k0 + TK + lane % l.g);
            }
            shared_row_steps(&acc, batch, ra, rb, k0, tx, lane, l, ca, cb);
        } else {
            own_row_steps(&acc, batch, ra, rb, k0, tx);
        }
        workgroupBarrier();
    }
    block_store(&acc, batch, row0, col0, tx, ty);
}
#endif
