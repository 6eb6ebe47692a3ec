// The RMT's retrieval and storage over per-token D_k×D_v residual matrices (SPEC §2).
// keys (R', D_k); vectors (tokens, R', D_v); matrices (tokens, D_k, D_v).
// The retrieval and storage are memory-bound: each thread walks one column v of one token's
// matrix, so a workgroup reads whole rows of X, and the key vectors (a few KB) stay in cache.

struct Params { tokens: u32, dk: u32, dv: u32, keys: u32 }
@group(0) @binding(0) var<uniform> p: Params;

// Defines from ops/residual_matrix.rs: KEYS_PER_THREAD, the keys per retrieval thread (one read
// of X[t][i][v] feeds this many outputs); STORE_ROWS, the rows per storage thread; KEY_GRAD_CHUNK, the tokens per partial sum of the key
// gradient; KEY_GRAD_TILE, the side of its workgroups' tiles of (key, row).

// retrieve(y, x, keys): y[t][h][v] = Σ_i keys[h][i] · x[t][i][v]. With the switch NORMED,
// retrieve(y, x, stats, gain, keys) retrieves from Norm(X) = (x − mean)·rstd·gain instead, read
// as it goes from X and the norm's statistics (rows, 2), so Norm(X) is never written. Its
// bindings follow that order with stats and gain at 4 and 5, where the key gradient has them
// too: binding 3 is unused, and the keys come last, at 6, in both variants.
@group(0) @binding(1) var<storage, read_write> y: array<f32>;     // (tokens, R', D_v)
@group(0) @binding(2) var<storage, read> x: array<f32>;           // (tokens, D_k, D_v)
@group(0) @binding(6) var<storage, read> keys: array<f32>;        // (R', D_k)

// What a retrieval and a key gradient read through: Norm(X) with NORMED, X itself without.
#if NORMED
@group(0) @binding(4) var<storage, read> stats: array<f32>;   // (tokens, 2)
@group(0) @binding(5) var<storage, read> gain: array<f32>;    // (D_k·D_v)

// (mean, rstd) of token t's matrix.
fn norm_of(t: u32) -> vec2<f32> {
    return vec2<f32>(stats[2u * t], stats[2u * t + 1u]);
}

// Norm(X) at place e = i·D_v + v of a matrix whose X holds xv there.
fn normed(xv: f32, e: u32, st: vec2<f32>) -> f32 {
    return (xv - st.x) * st.y * gain[e];
}
#else
fn norm_of(t: u32) -> vec2<f32> {
    return vec2<f32>(0.0, 1.0);
}

fn normed(xv: f32, e: u32, st: vec2<f32>) -> f32 {
    return xv;
}
#endif

// Eight keys' values at row i, zero past the last key: the retrieval's eight sums are two
// vec4s with constant components, so they stay in registers (an array indexed by a loop
// variable went to local memory on NVIDIA, as the matmul's block had).
struct EightKeys { lo: vec4<f32>, hi: vec4<f32> }

fn key_or_zero(h: u32, i: u32) -> f32 {
    if (h < p.keys) { return keys[h * p.dk + i]; }
    return 0.0;
}

fn eight_keys(h0: u32, i: u32) -> EightKeys {
    return EightKeys(
        vec4<f32>(key_or_zero(h0, i), key_or_zero(h0 + 1u, i), key_or_zero(h0 + 2u, i), key_or_zero(h0 + 3u, i)),
        vec4<f32>(key_or_zero(h0 + 4u, i), key_or_zero(h0 + 5u, i), key_or_zero(h0 + 6u, i), key_or_zero(h0 + 7u, i)),
    );
}

@compute @workgroup_size(WG)
fn retrieve(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let n = flat_index(gid, nwg);
    let groups = (p.keys + KEYS_PER_THREAD - 1u) / KEYS_PER_THREAD;
    if (n >= p.tokens * groups * p.dv) { return; }
    let v = n % p.dv;
    let h0 = ((n / p.dv) % groups) * KEYS_PER_THREAD;
    let t = n / (p.dv * groups);
    let st = norm_of(t);
    let row = t * p.dk * p.dv + v;
    var lo = vec4<f32>(0.0);
    var hi = vec4<f32>(0.0);
    // Two rows a pass, so that two reads of X are in flight at once.
    var i = 0u;
    for (; i + 2u <= p.dk; i = i + 2u) {
        let x0 = normed(x[row + i * p.dv], i * p.dv + v, st);
        let x1 = normed(x[row + (i + 1u) * p.dv], (i + 1u) * p.dv + v, st);
        let k0 = eight_keys(h0, i);
        lo = lo + k0.lo * x0;
        hi = hi + k0.hi * x0;
        let k1 = eight_keys(h0, i + 1u);
        lo = lo + k1.lo * x1;
        hi = hi + k1.hi * x1;
    }
    if (i < p.dk) {
        let x0 = normed(x[row + i * p.dv], i * p.dv + v, st);
        let k0 = eight_keys(h0, i);
        lo = lo + k0.lo * x0;
        hi = hi + k0.hi * x0;
    }
    let at = (t * p.keys + h0) * p.dv + v;
    let last = p.keys - h0;
    y[at] = lo.x;
    if (last > 1u) { y[at + p.dv] = lo.y; }
    if (last > 2u) { y[at + 2u * p.dv] = lo.z; }
    if (last > 3u) { y[at + 3u * p.dv] = lo.w; }
    if (last > 4u) { y[at + 4u * p.dv] = hi.x; }
    if (last > 5u) { y[at + 5u * p.dv] = hi.y; }
    if (last > 6u) { y[at + 6u * p.dv] = hi.z; }
    if (last > 7u) { y[at + 7u * p.dv] = hi.w; }
}

// store(out, base, keys, data): out[t][i][v] = base[t][i][v] + Σ_h keys[h][i] · data[t][h][v].
// A thread takes STORE_ROWS (4: a vec4) rows i of one column v, so each read of data feeds four
// sums.
@group(0) @binding(1) var<storage, read_write> out: array<f32>;
@group(0) @binding(2) var<storage, read> base: array<f32>;
@group(0) @binding(3) var<storage, read> s_keys: array<f32>;
@group(0) @binding(4) var<storage, read> data: array<f32>;

fn s_key_or_zero(h: u32, i: u32) -> f32 {
    if (i < p.dk) { return s_keys[h * p.dk + i]; }
    return 0.0;
}

// The thread's place: the first of its four outputs, and how many of them are in the matrix.
struct StoreRows { t: u32, i0: u32, v: u32, rows: u32 }

fn store_rows(n: u32) -> StoreRows {
    let groups = (p.dk + STORE_ROWS - 1u) / STORE_ROWS;
    let v = n % p.dv;
    let i0 = ((n / p.dv) % groups) * STORE_ROWS;
    let t = n / (p.dv * groups);
    return StoreRows(t, i0, v, min(STORE_ROWS, p.dk - i0));
}

fn store_threads() -> u32 {
    return p.tokens * ((p.dk + STORE_ROWS - 1u) / STORE_ROWS) * p.dv;
}

fn stored(r: StoreRows) -> vec4<f32> {
    var acc = vec4<f32>(0.0);
    for (var h = 0u; h < p.keys; h = h + 1u) {
        let d = data[(r.t * p.keys + h) * p.dv + r.v];
        let k = vec4<f32>(s_key_or_zero(h, r.i0), s_key_or_zero(h, r.i0 + 1u), s_key_or_zero(h, r.i0 + 2u), s_key_or_zero(h, r.i0 + 3u));
        acc = acc + k * d;
    }
    return acc;
}

// Writes the thread's rows: `add` + the stored values, where `add` holds base (store), out
// itself (store_accumulate) or zeros (store_into).
fn write_rows(r: StoreRows, add: vec4<f32>, acc: vec4<f32>) {
    let at = (r.t * p.dk + r.i0) * p.dv + r.v;
    out[at] = add.x + acc.x;
    if (r.rows > 1u) { out[at + p.dv] = add.y + acc.y; }
    if (r.rows > 2u) { out[at + 2u * p.dv] = add.z + acc.z; }
    if (r.rows > 3u) { out[at + 3u * p.dv] = add.w + acc.w; }
}

// The thread's rows of `base` (or of `out`, for store_accumulate), zero past the last row.
fn base_rows(r: StoreRows) -> vec4<f32> {
    let at = (r.t * p.dk + r.i0) * p.dv + r.v;
    var b = vec4<f32>(base[at], 0.0, 0.0, 0.0);
    if (r.rows > 1u) { b.y = base[at + p.dv]; }
    if (r.rows > 2u) { b.z = base[at + 2u * p.dv]; }
    if (r.rows > 3u) { b.w = base[at + 3u * p.dv]; }
    return b;
}

fn out_rows(r: StoreRows) -> vec4<f32> {
    let at = (r.t * p.dk + r.i0) * p.dv + r.v;
    var b = vec4<f32>(out[at], 0.0, 0.0, 0.0);
    if (r.rows > 1u) { b.y = out[at + p.dv]; }
    if (r.rows > 2u) { b.z = out[at + 2u * p.dv]; }
    if (r.rows > 3u) { b.w = out[at + 3u * p.dv]; }
    return b;
}

@compute @workgroup_size(WG)
fn store(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let n = flat_index(gid, nwg);
    if (n >= store_threads()) { return; }
    let r = store_rows(n);
    write_rows(r, base_rows(r), stored(r));
}

// store_accumulate(out, keys, data): out[t][i][v] += Σ_h keys[h][i] · data[t][h][v]
// It binds out, keys and data at 1, 3 and 4, and leaves `base` (2) unbound.

@compute @workgroup_size(WG)
fn store_accumulate(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let n = flat_index(gid, nwg);
    if (n >= store_threads()) { return; }
    let r = store_rows(n);
    write_rows(r, out_rows(r), stored(r));
}

// store_into(out, keys, data): out[t][i][v] = Σ_h keys[h][i] · data[t][h][v], bound as
// store_accumulate: a normed retrieval's backward writes ∂L/∂Norm(X) so, with no zero fill first.

@compute @workgroup_size(WG)
fn store_into(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let n = flat_index(gid, nwg);
    if (n >= store_threads()) { return; }
    let r = store_rows(n);
    write_rows(r, vec4<f32>(0.0), stored(r));
}

// key_grad_partial(partials, a, b): partials[c][h][i] = Σ_{t in chunk c} Σ_v a[t][h][v] · b[t][i][v].
// With NORMED, key_grad_partial(partials, a, x, stats, gain): the same with b = Norm(X), read from
// X (bound as b) and the statistics as it goes.
//
// A small matrix product a_tᵀ·b_t summed over a chunk's tokens. A workgroup takes one chunk
// and one KEY_GRAD_TILE × KEY_GRAD_TILE tile of (h, i); each of its (TILE/2)² threads owns a 2×2
// block, h = h0 + th + SIDE·{0,1}, i = i0 + ti + SIDE·{0,1}. Step by step (a token and TILE
// values of v), the tile's rows of a and b go to workgroup memory in coalesced reads, b normed
// once there rather than once per key; the next step's values are read into registers while
// this one's products are added. Each output adds its products in (t, v) order, so the result
// does not depend on scheduling. (One thread per output walking rows strided across threads
// ran the toy RMT's key gradients at 300 GFLOP/s on an H100.)
@group(0) @binding(1) var<storage, read_write> partials: array<f32>;
@group(0) @binding(2) var<storage, read> ga: array<f32>;
@group(0) @binding(3) var<storage, read> gb: array<f32>;

const KG_SIDE: u32 = KEY_GRAD_TILE / 2u;            // threads a side
const KG_THREADS: u32 = KG_SIDE * KG_SIDE;          // each loads 4 of a step's TILE² values of a, and of b
const KG_ROWS: u32 = KG_THREADS / KEY_GRAD_TILE;    // rows a load covers
const KG_STRIDE: u32 = KEY_GRAD_TILE + 1u;          // a row in workgroup memory, padded off its neighbours' banks
var<workgroup> kg_a: array<f32, KEY_GRAD_TILE * (KEY_GRAD_TILE + 1u)>;
var<workgroup> kg_b: array<f32, KEY_GRAD_TILE * (KEY_GRAD_TILE + 1u)>;

// Four values of a step for the thread that loads column `col` of the tile: a's rows h0 + r and
// b's rows i0 + r for r = row + k·step (k < 4), at v = v0 + col; zero past the ends.
struct KeyGradStep { a: vec4<f32>, b: vec4<f32> }

fn key_grad_read(row: u32, col: u32, step: u32, t: u32, v0: u32, h0: u32, i0: u32) -> KeyGradStep {
    let v = v0 + col;
    let r = row;
    let st = norm_of(t);
    var s = KeyGradStep(vec4<f32>(0.0), vec4<f32>(0.0));
    if (v < p.dv) {
        let h = h0 + r;
        let i = i0 + r;
        if (h < p.keys) { s.a.x = ga[(t * p.keys + h) * p.dv + v]; }
        if (h + step < p.keys) { s.a.y = ga[(t * p.keys + h + step) * p.dv + v]; }
        if (h + 2u * step < p.keys) { s.a.z = ga[(t * p.keys + h + 2u * step) * p.dv + v]; }
        if (h + 3u * step < p.keys) { s.a.w = ga[(t * p.keys + h + 3u * step) * p.dv + v]; }
        if (i < p.dk) { s.b.x = normed(gb[(t * p.dk + i) * p.dv + v], i * p.dv + v, st); }
        let i1 = i + step;
        if (i1 < p.dk) { s.b.y = normed(gb[(t * p.dk + i1) * p.dv + v], i1 * p.dv + v, st); }
        let i2 = i + 2u * step;
        if (i2 < p.dk) { s.b.z = normed(gb[(t * p.dk + i2) * p.dv + v], i2 * p.dv + v, st); }
        let i3 = i + 3u * step;
        if (i3 < p.dk) { s.b.w = normed(gb[(t * p.dk + i3) * p.dv + v], i3 * p.dv + v, st); }
    }
    return s;
}

// Puts a step's four values read by `key_grad_read` at `at` (its row and column in workgroup
// memory) and `gap` rows apart.
fn key_grad_place(s: KeyGradStep, at: u32, gap: u32) {
    kg_a[at] = s.a.x;
    kg_a[at + gap] = s.a.y;
    kg_a[at + 2u * gap] = s.a.z;
    kg_a[at + 3u * gap] = s.a.w;
    kg_b[at] = s.b.x;
    kg_b[at + gap] = s.b.y;
    kg_b[at + 2u * gap] = s.b.z;
    kg_b[at + 3u * gap] = s.b.w;
}

// The tile (h0, i0) and chunk of tokens of workgroup `g`, or none past the last: (chunk, h0, i0).
fn key_grad_tile(g: u32) -> vec3<u32> {
    let tiles_i = (p.dk + KEY_GRAD_TILE - 1u) / KEY_GRAD_TILE;
    let tiles = (p.keys + KEY_GRAD_TILE - 1u) / KEY_GRAD_TILE * tiles_i;
    let chunks = (p.tokens + KEY_GRAD_CHUNK - 1u) / KEY_GRAD_CHUNK;
    if (g >= chunks * tiles) { return vec3<u32>(NO_TILE); }
    return vec3<u32>(g / tiles, (g % tiles) / tiles_i * KEY_GRAD_TILE, (g % tiles) % tiles_i * KEY_GRAD_TILE);
}
const NO_TILE: u32 = 0xffffffffu;

@compute @workgroup_size(KG_THREADS)
fn key_grad_partial(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let tile = key_grad_tile(flat_group(wid, nwg));
    if (tile.x == NO_TILE) { return; }
    let c = tile.x;
    let h0 = tile.y;
    let i0 = tile.z;
    let th = lid / KG_SIDE;
    let ti = lid % KG_SIDE;
    let t0 = c * KEY_GRAD_CHUNK;
    let spans = (p.dv + KEY_GRAD_TILE - 1u) / KEY_GRAD_TILE;
    let steps = (min(p.tokens, t0 + KEY_GRAD_CHUNK) - t0) * spans;
    // Where this thread's loads land: row lid / TILE (+ k·ROWS), column lid % TILE.
    let row = lid / KEY_GRAD_TILE;
    let col = lid % KEY_GRAD_TILE;
    let at = row * KG_STRIDE + col;
    var acc = vec4<f32>(0.0); // (h, i), (h, i + SIDE), (h + SIDE, i), (h + SIDE, i + SIDE)
    var next = key_grad_read(row, col, KG_ROWS, t0, 0u, h0, i0);
    for (var s = 0u; s < steps; s = s + 1u) {
        key_grad_place(next, at, KG_ROWS * KG_STRIDE);
        workgroupBarrier();
        if (s + 1u < steps) {
            next = key_grad_read(row, col, KG_ROWS, t0 + (s + 1u) / spans, ((s + 1u) % spans) * KEY_GRAD_TILE, h0, i0);
        }
        let width = min(KEY_GRAD_TILE, p.dv - (s % spans) * KEY_GRAD_TILE);
        for (var v = 0u; v < width; v = v + 1u) {
            let a0 = kg_a[th * KG_STRIDE + v];
            let a1 = kg_a[(th + KG_SIDE) * KG_STRIDE + v];
            let b0 = kg_b[ti * KG_STRIDE + v];
            let b1 = kg_b[(ti + KG_SIDE) * KG_STRIDE + v];
            acc = acc + vec4<f32>(a0 * b0, a0 * b1, a1 * b0, a1 * b1);
        }
        workgroupBarrier();
    }
    let out = c * p.keys * p.dk;
    let h = h0 + th;
    let i = i0 + ti;
    if (h < p.keys && i < p.dk) { partials[out + h * p.dk + i] = acc.x; }
    if (h < p.keys && i + KG_SIDE < p.dk) { partials[out + h * p.dk + i + KG_SIDE] = acc.y; }
    if (h + KG_SIDE < p.keys && i < p.dk) { partials[out + (h + KG_SIDE) * p.dk + i] = acc.z; }
    if (h + KG_SIDE < p.keys && i + KG_SIDE < p.dk) { partials[out + (h + KG_SIDE) * p.dk + i + KG_SIDE] = acc.w; }
}

// key_grad_partial_wide: the same partial sums, each of the tile's (TILE/WIDE)² threads owning a
// WIDE × WIDE block, h = h0 + th + SIDE·j, i = i0 + ti + SIDE·k (j, k < 4): a value read from
// workgroup memory feeds 4 multiply-adds instead of 2, on fewer threads (a tuning candidate).
// Each output adds the same products in the same (t, v) order, so the bits are the same. Its
// sums and loads are named vectors, never arrays indexed by a loop variable (which NVIDIA keeps
// in local memory).
const KGW_SIDE: u32 = KEY_GRAD_TILE / KEY_GRAD_WIDE;  // threads a side
const KGW_THREADS: u32 = KGW_SIDE * KGW_SIDE;
const KGW_ROWS: u32 = KGW_THREADS / KEY_GRAD_TILE;    // rows one load of the workgroup covers
const KGW_QUARTER: u32 = 4u * KGW_ROWS;               // rows between a thread's four reads

// Row r (0-3) of the block: a thread's sums for (h0 + th + SIDE·r, i0 + ti + SIDE·k), k < 4.
fn key_grad_write_row(out: u32, h: u32, i: u32, sums: vec4<f32>) {
    if (h >= p.keys) { return; }
    if (i < p.dk) { partials[out + h * p.dk + i] = sums.x; }
    if (i + KGW_SIDE < p.dk) { partials[out + h * p.dk + i + KGW_SIDE] = sums.y; }
    if (i + 2u * KGW_SIDE < p.dk) { partials[out + h * p.dk + i + 2u * KGW_SIDE] = sums.z; }
    if (i + 3u * KGW_SIDE < p.dk) { partials[out + h * p.dk + i + 3u * KGW_SIDE] = sums.w; }
}

// Four values of workgroup memory `SIDE` rows apart from row r, column v.
fn kgw_a(r: u32, v: u32) -> vec4<f32> {
    return vec4<f32>(kg_a[r * KG_STRIDE + v], kg_a[(r + KGW_SIDE) * KG_STRIDE + v],
        kg_a[(r + 2u * KGW_SIDE) * KG_STRIDE + v], kg_a[(r + 3u * KGW_SIDE) * KG_STRIDE + v]);
}
fn kgw_b(r: u32, v: u32) -> vec4<f32> {
    return vec4<f32>(kg_b[r * KG_STRIDE + v], kg_b[(r + KGW_SIDE) * KG_STRIDE + v],
        kg_b[(r + 2u * KGW_SIDE) * KG_STRIDE + v], kg_b[(r + 3u * KGW_SIDE) * KG_STRIDE + v]);
}

@compute @workgroup_size(KGW_THREADS)
fn key_grad_partial_wide(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let tile = key_grad_tile(flat_group(wid, nwg));
    if (tile.x == NO_TILE) { return; }
    let h0 = tile.y;
    let i0 = tile.z;
    let th = lid / KGW_SIDE;
    let ti = lid % KGW_SIDE;
    let t0 = tile.x * KEY_GRAD_CHUNK;
    let spans = (p.dv + KEY_GRAD_TILE - 1u) / KEY_GRAD_TILE;
    let steps = (min(p.tokens, t0 + KEY_GRAD_CHUNK) - t0) * spans;
    // This thread loads column lid % TILE of rows lid / TILE + k·ROWS, k < 16, in four reads of
    // four rows each, QUARTER rows apart.
    let row = lid / KEY_GRAD_TILE;
    let col = lid % KEY_GRAD_TILE;
    let at = row * KG_STRIDE + col;
    let gap = KGW_ROWS * KG_STRIDE;
    let quarter = KGW_QUARTER * KG_STRIDE;
    // acc_j: the sums of (h0 + th + SIDE·j, i0 + ti + SIDE·k) for k = 0..3.
    var acc0 = vec4<f32>(0.0);
    var acc1 = vec4<f32>(0.0);
    var acc2 = vec4<f32>(0.0);
    var acc3 = vec4<f32>(0.0);
    var n0 = key_grad_read(row, col, KGW_ROWS, t0, 0u, h0, i0);
    var n1 = key_grad_read(row + KGW_QUARTER, col, KGW_ROWS, t0, 0u, h0, i0);
    var n2 = key_grad_read(row + 2u * KGW_QUARTER, col, KGW_ROWS, t0, 0u, h0, i0);
    var n3 = key_grad_read(row + 3u * KGW_QUARTER, col, KGW_ROWS, t0, 0u, h0, i0);
    for (var s = 0u; s < steps; s = s + 1u) {
        key_grad_place(n0, at, gap);
        key_grad_place(n1, at + quarter, gap);
        key_grad_place(n2, at + 2u * quarter, gap);
        key_grad_place(n3, at + 3u * quarter, gap);
        workgroupBarrier();
        if (s + 1u < steps) {
            let t = t0 + (s + 1u) / spans;
            let v0 = ((s + 1u) % spans) * KEY_GRAD_TILE;
            n0 = key_grad_read(row, col, KGW_ROWS, t, v0, h0, i0);
            n1 = key_grad_read(row + KGW_QUARTER, col, KGW_ROWS, t, v0, h0, i0);
            n2 = key_grad_read(row + 2u * KGW_QUARTER, col, KGW_ROWS, t, v0, h0, i0);
            n3 = key_grad_read(row + 3u * KGW_QUARTER, col, KGW_ROWS, t, v0, h0, i0);
        }
        let width = min(KEY_GRAD_TILE, p.dv - (s % spans) * KEY_GRAD_TILE);
        for (var v = 0u; v < width; v = v + 1u) {
            let a = kgw_a(th, v);
            let b = kgw_b(ti, v);
            acc0 = acc0 + vec4<f32>(a.x * b.x, a.x * b.y, a.x * b.z, a.x * b.w);
            acc1 = acc1 + vec4<f32>(a.y * b.x, a.y * b.y, a.y * b.z, a.y * b.w);
            acc2 = acc2 + vec4<f32>(a.z * b.x, a.z * b.y, a.z * b.z, a.z * b.w);
            acc3 = acc3 + vec4<f32>(a.w * b.x, a.w * b.y, a.w * b.z, a.w * b.w);
        }
        workgroupBarrier();
    }
    let out = tile.x * p.keys * p.dk;
    let h = h0 + th;
    let i = i0 + ti;
    key_grad_write_row(out, h, i, acc0);
    key_grad_write_row(out, h + KGW_SIDE, i, acc1);
    key_grad_write_row(out, h + 2u * KGW_SIDE, i, acc2);
    key_grad_write_row(out, h + 3u * KGW_SIDE, i, acc3);
}

// key_grad_reduce(dkeys, partials): dkeys[h][i] = Σ_c partials[c][h][i], the column sums of
// the (chunks, R'·D_k) partials in the fixed tree of `column_total`.
@group(0) @binding(1) var<storage, read_write> dkeys: array<f32>;
@group(0) @binding(2) var<storage, read> r_partials: array<f32>;

@compute @workgroup_size(WG)
fn key_grad_reduce(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let per = p.keys * p.dk;
    let chunks = (p.tokens + KEY_GRAD_CHUNK - 1u) / KEY_GRAD_CHUNK;
    let col = flat_group(wid, nwg) * SUM_COLS + lid % SUM_COLS;
    var acc = 0.0;
    if (col < per) {
        for (var c = lid / SUM_COLS; c < chunks; c = c + SUM_LANES) { acc = acc + r_partials[c * per + col]; }
    }
    let total = column_total(lid, acc);
    if (lid < SUM_COLS && col < per) { dkeys[col] = total; }
}
