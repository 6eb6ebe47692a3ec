// MemoryFormer's Memory Layer (SPEC §3): sign-hash K chunks of τ values, read one row of each
// table T (K, 2^τ, d_out), weight it by p(z), add the bias. The table gradient is a fixed-order
// sum over each bucket's rows, found by a stable counting sort: no atomics, bit-identical runs.

// tiles and span: the bucket sort's tiles of rows (below).
struct Params { tokens: u32, d_in: u32, tau: u32, k: u32, d_out: u32, temperature: f32, l1: u32, tiles: u32, span: u32 }
@group(0) @binding(0) var<uniform> p: Params;

fn sigma(z: f32) -> f32 {
    return 1.0 / (1.0 + exp(-2.0 * abs(z) / p.temperature));
}

// memory_hash(codes, weights, x): one thread per (row, chunk).
@group(0) @binding(1) var<storage, read_write> codes_out: array<u32>;  // (tokens, K)
@group(0) @binding(2) var<storage, read_write> weights: array<f32>;    // (tokens, K)
@group(0) @binding(3) var<storage, read> x: array<f32>;                // (tokens, d_in)

@compute @workgroup_size(WG)
fn memory_hash(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_index(gid, nwg);
    if (i >= p.tokens * p.k) { return; }
    let t = i / p.k;
    let k = i % p.k;
    var code = 0u;
    var w = 1.0;
    var l1 = 0.0;
    for (var j = 0u; j < p.tau; j = j + 1u) {
        let z = x[t * p.d_in + k * p.tau + j];
        if (z >= 0.0) { code = code | (1u << j); }
        w = w * sigma(z);
        l1 = l1 + abs(z);
    }
    if (p.l1 == 1u) { w = w * l1; }
    codes_out[i] = code;
    weights[i] = w;
}

// The bucket sort: per table, the rows grouped by code, in row order within each code (stable),
// in three launches without atomics. Each table's rows are cut into p.tiles tiles of p.span rows
// (a multiple of WG), both functions of the dims alone, so the order is fixed:
// - memory_bucket_count: a workgroup per (table, tile) counts each code's rows in its tile into
//   cursor[(k·2^τ + code)·tiles + tile];
// - memory_bucket_scan: a workgroup per table turns those counts into each tile's first place
//   within its code, and the codes' totals into starts;
// - memory_bucket_scatter: a workgroup per (table, tile) writes each row at its code's start +
//   its tile's place + the rows of its code before it in the tile.
// Within a tile, rows go through in chunks of WG: a thread's rank is the number of earlier
// threads with its code, and only the last thread of each code updates that code's counter, so
// no two threads write one value. Counts are integers, so any order of adding them is exact.
@group(0) @binding(1) var<storage, read_write> rows: array<u32>;    // (K, tokens)
@group(0) @binding(2) var<storage, read_write> starts: array<u32>;  // (K, 2^τ + 1)
@group(0) @binding(3) var<storage, read_write> cursor: array<u32>;  // (K, 2^τ, tiles)
@group(0) @binding(4) var<storage, read> codes: array<u32>;         // (tokens, K)

var<workgroup> chunk: array<u32, WG>;
var<workgroup> part: array<u32, WG>;

const NO_CODE: u32 = 0xffffffffu;

// The code of row `t` in table `k`, or NO_CODE at or past `end`.
fn code_of(t: u32, end: u32, k: u32) -> u32 {
    if (t < end) { return codes[t * p.k + k]; }
    return NO_CODE;
}

// (rank among earlier threads with the same code, whether no later thread has it)
fn rank_in_chunk(lid: u32, code: u32) -> vec2<u32> {
    var rank = 0u;
    var last = 1u;
    for (var j = 0u; j < WG; j = j + 1u) {
        if (chunk[j] == code) {
            if (j < lid) { rank = rank + 1u; }
            if (j > lid) { last = 0u; }
        }
    }
    return vec2<u32>(rank, last);
}

// The counter of (table k, code, tile) in cursor.
fn counter(k: u32, code: u32, tile: u32) -> u32 {
    return (k * (1u << p.tau) + code) * p.tiles + tile;
}

// Walks tile `tile` of table `k` in chunks of WG rows, moving each code's counter past the
// chunk's rows of that code; with `place` (the scatter), first writes each row at its place.
fn walk_tile(lid: u32, k: u32, tile: u32, place: bool) {
    let s0 = k * ((1u << p.tau) + 1u);
    let end = min(p.tokens, (tile + 1u) * p.span);
    for (var base = tile * p.span; base < end; base = base + WG) {
        let t = base + lid;
        let code = code_of(t, end, k);
        chunk[lid] = code;
        workgroupBarrier();
        let r = rank_in_chunk(lid, code);
        if (place) {
            if (code != NO_CODE) { rows[k * p.tokens + starts[s0 + code] + cursor[counter(k, code, tile)] + r.x] = t; }
            storageBarrier();
            workgroupBarrier();
        }
        if (code != NO_CODE && r.y == 1u) {
            let i = counter(k, code, tile);
            cursor[i] = cursor[i] + r.x + 1u;
        }
        storageBarrier();
        workgroupBarrier();
    }
}

@compute @workgroup_size(WG)
fn memory_bucket_count(@builtin(local_invocation_id) lid3: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let g = flat_group(wid, nwg);
    if (g >= p.k * p.tiles) { return; }
    let k = g / p.tiles;
    let tile = g % p.tiles;
    for (var c = lid3.x; c < (1u << p.tau); c = c + WG) { cursor[counter(k, c, tile)] = 0u; }
    storageBarrier();
    workgroupBarrier();
    walk_tile(lid3.x, k, tile, false);
}

@compute @workgroup_size(WG)
fn memory_bucket_scan(@builtin(local_invocation_id) lid3: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let k = flat_group(wid, nwg);
    if (k >= p.k) { return; }
    let lid = lid3.x;
    let nb = 1u << p.tau;
    let s0 = k * (nb + 1u);
    // Each thread owns a run of codes: each tile's place within its code, and the codes' totals
    // (kept in starts for now).
    let per = (nb + WG - 1u) / WG;
    let lo = min(nb, lid * per);
    let hi = min(nb, lo + per);
    var run = 0u;
    for (var c = lo; c < hi; c = c + 1u) {
        var n = 0u;
        for (var t = 0u; t < p.tiles; t = t + 1u) {
            let i = counter(k, c, t);
            let x = cursor[i];
            cursor[i] = n;
            n = n + x;
        }
        starts[s0 + c] = n;
        run = run + n;
    }
    part[lid] = run;
    workgroupBarrier();
    if (lid == 0u) {
        var acc = 0u;
        for (var j = 0u; j < WG; j = j + 1u) {
            let x = part[j];
            part[j] = acc;
            acc = acc + x;
        }
        starts[s0 + nb] = acc;
    }
    workgroupBarrier();
    var acc = part[lid];
    for (var c = lo; c < hi; c = c + 1u) {
        let n = starts[s0 + c];
        starts[s0 + c] = acc;
        acc = acc + n;
    }
}

@compute @workgroup_size(WG)
fn memory_bucket_scatter(@builtin(local_invocation_id) lid3: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let g = flat_group(wid, nwg);
    if (g >= p.k * p.tiles) { return; }
    walk_tile(lid3.x, g / p.tiles, g % p.tiles, true);
}

// memory_forward(y, codes, weights, tables, bias): y[t][o] = b[o] + Σ_k p[t][k] · T[k][code][o]
@group(0) @binding(1) var<storage, read_write> y: array<f32>;     // (tokens, d_out)
@group(0) @binding(2) var<storage, read> f_codes: array<u32>;     // (tokens, K)
@group(0) @binding(3) var<storage, read> f_weights: array<f32>;   // (tokens, K)
@group(0) @binding(4) var<storage, read> tables: array<f32>;      // (K, 2^τ, d_out)
@group(0) @binding(5) var<storage, read> bias: array<f32>;        // (d_out)

@compute @workgroup_size(WG)
fn memory_forward(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_index(gid, nwg);
    if (i >= p.tokens * p.d_out) { return; }
    let t = i / p.d_out;
    let o = i % p.d_out;
    let nb = 1u << p.tau;
    var acc = 0.0;
    for (var k = 0u; k < p.k; k = k + 1u) {
        let row = k * nb + f_codes[t * p.k + k];
        acc = acc + f_weights[t * p.k + k] * tables[row * p.d_out + o];
    }
    y[i] = bias[o] + acc;
}

// memory_parts(parts, codes, weights, tables): parts[t][k][o] = p[t][k] · T[k][code][o], each
// term of memory_forward's sum on its own (an intervention on one table edits it).
@group(0) @binding(1) var<storage, read_write> parts_out: array<f32>;  // (tokens, K, d_out)
@group(0) @binding(2) var<storage, read> pt_codes: array<u32>;         // (tokens, K)
@group(0) @binding(3) var<storage, read> pt_weights: array<f32>;       // (tokens, K)
@group(0) @binding(4) var<storage, read> pt_tables: array<f32>;        // (K, 2^τ, d_out)

@compute @workgroup_size(WG)
fn memory_parts(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_index(gid, nwg);
    if (i >= p.tokens * p.k * p.d_out) { return; }
    let tk = i / p.d_out;
    let o = i % p.d_out;
    let k = tk % p.k;
    let row = k * (1u << p.tau) + pt_codes[tk];
    parts_out[i] = pt_weights[tk] * pt_tables[row * p.d_out + o];
}

// memory_sum(y, parts, bias): y[t][o] = b[o] + Σ_k parts[t][k][o], in memory_forward's order, so
// unedited parts give its bits.
@group(0) @binding(1) var<storage, read_write> s_y: array<f32>;     // (tokens, d_out)
@group(0) @binding(2) var<storage, read> s_parts: array<f32>;       // (tokens, K, d_out)
@group(0) @binding(3) var<storage, read> s_bias: array<f32>;        // (d_out)

@compute @workgroup_size(WG)
fn memory_sum(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_index(gid, nwg);
    if (i >= p.tokens * p.d_out) { return; }
    let t = i / p.d_out;
    let o = i % p.d_out;
    var acc = 0.0;
    for (var k = 0u; k < p.k; k = k + 1u) {
        acc = acc + s_parts[(t * p.k + k) * p.d_out + o];
    }
    s_y[i] = s_bias[o] + acc;
}

// memory_table_grad(dtables, dy, weights, rows, starts): one thread per table value, summing the
// bucket's rows in row order; buckets no row hit get 0.
@group(0) @binding(1) var<storage, read_write> dtables: array<f32>;  // (K, 2^τ, d_out)
@group(0) @binding(2) var<storage, read> dy: array<f32>;             // (tokens, d_out)
@group(0) @binding(3) var<storage, read> g_weights: array<f32>;      // (tokens, K)
@group(0) @binding(4) var<storage, read> g_rows: array<u32>;         // (K, tokens)
@group(0) @binding(5) var<storage, read> g_starts: array<u32>;       // (K, 2^τ + 1)

@compute @workgroup_size(WG)
fn memory_table_grad(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_index(gid, nwg);
    let nb = 1u << p.tau;
    if (i >= p.k * nb * p.d_out) { return; }
    let o = i % p.d_out;
    let c = (i / p.d_out) % nb;
    let k = i / (p.d_out * nb);
    var acc = 0.0;
    let s = k * (nb + 1u) + c;
    for (var j = g_starts[s]; j < g_starts[s + 1u]; j = j + 1u) {
        let t = g_rows[k * p.tokens + j];
        acc = acc + g_weights[t * p.k + k] * dy[t * p.d_out + o];
    }
    dtables[i] = acc;
}

// memory_input_grad(dx, dy, x, codes, tables): one thread per (row, chunk):
// dz_j = ⟨dy, T[k][code]⟩ · ∂p/∂z_j; the last chunk's thread also zeroes dx past K·τ.
@group(0) @binding(1) var<storage, read_write> dx: array<f32>;    // (tokens, d_in)
@group(0) @binding(3) var<storage, read> i_x: array<f32>;         // (tokens, d_in)
@group(0) @binding(4) var<storage, read> i_codes: array<u32>;     // (tokens, K)
@group(0) @binding(5) var<storage, read> i_tables: array<f32>;    // (K, 2^τ, d_out)

@compute @workgroup_size(WG)
fn memory_input_grad(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_index(gid, nwg);
    if (i >= p.tokens * p.k) { return; }
    let t = i / p.k;
    let k = i % p.k;
    let nb = 1u << p.tau;
    let row = (k * nb + i_codes[i]) * p.d_out;
    var dp = 0.0;
    for (var o = 0u; o < p.d_out; o = o + 1u) { dp = dp + dy[t * p.d_out + o] * i_tables[row + o]; }
    let base = t * p.d_in + k * p.tau;
    var raw = 1.0;
    var l1 = 0.0;
    for (var j = 0u; j < p.tau; j = j + 1u) {
        raw = raw * sigma(i_x[base + j]);
        l1 = l1 + abs(i_x[base + j]);
    }
    if (p.l1 == 0u) { l1 = 1.0; }
    for (var j = 0u; j < p.tau; j = j + 1u) {
        let z = i_x[base + j];
        var s = 1.0;
        if (z < 0.0) { s = -1.0; }
        // ∂σ_j/∂z_j = σ_j (1 − σ_j) · 2/t · sign(z_j), and σ_j divides out of p.
        let dsigma = raw * (1.0 - sigma(z)) * 2.0 / p.temperature * s;
        var dl1 = 0.0;
        if (p.l1 == 1u) { dl1 = raw * s; }
        dx[base + j] = dp * (dsigma * l1 + dl1);
    }
    if (k == p.k - 1u) {
        for (var c = p.k * p.tau; c < p.d_in; c = c + 1u) { dx[t * p.d_in + c] = 0.0; }
    }
}

// memory_bias_grad(dbias, dy): db[o] = Σ_t dy[t][o], a workgroup summing SUM_COLS outputs over
// all tokens (`column_total` in common.wgsl).
@group(0) @binding(1) var<storage, read_write> dbias: array<f32>;  // (d_out)

@compute @workgroup_size(WG)
fn memory_bias_grad(@builtin(local_invocation_id) lid3: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let lid = lid3.x;
    let o = flat_group(wid, nwg) * SUM_COLS + lid % SUM_COLS;
    var acc = 0.0;
    if (o < p.d_out) {
        for (var t = lid / SUM_COLS; t < p.tokens; t = t + SUM_LANES) { acc = acc + dy[t * p.d_out + o]; }
    }
    let total = column_total(lid, acc);
    if (lid < SUM_COLS && o < p.d_out) { dbias[o] = total; }
}
