// The RMT's retrieval and storage over per-token D_k×D_v residual matrices (SPEC §2).
// keys (R', D_k); vectors (tokens, R', D_v); matrices (tokens, D_k, D_v).
// These kernels are memory-bound: each thread walks one column v of one token's matrix, so a
// workgroup reads whole rows of X, and the key vectors (a few KB) stay in cache.

struct Params { tokens: u32, dk: u32, dv: u32, keys: u32 }
@group(0) @binding(0) var<uniform> p: Params;

// Defines from ops/residual_matrix.rs: KEYS_PER_THREAD, the keys per retrieval thread (one read
// of X[t][i][v] feeds this many outputs); KEY_GRAD_CHUNK, the tokens per partial sum of the key
// gradient.

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

// a times Norm(X) at place e, where X holds b: the key gradient's term.
fn times_normed(a: f32, b: f32, e: u32, st: vec2<f32>) -> f32 {
    return a * (b - st.x) * st.y * gain[e];
}
#else
fn norm_of(t: u32) -> vec2<f32> {
    return vec2<f32>(0.0, 1.0);
}

fn normed(xv: f32, e: u32, st: vec2<f32>) -> f32 {
    return xv;
}

fn times_normed(a: f32, b: f32, e: u32, st: vec2<f32>) -> f32 {
    return a * b;
}
#endif

@compute @workgroup_size(WG)
fn retrieve(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let n = flat_index(gid, nwg);
    let groups = (p.keys + KEYS_PER_THREAD - 1u) / KEYS_PER_THREAD;
    if (n >= p.tokens * groups * p.dv) { return; }
    let v = n % p.dv;
    let h0 = ((n / p.dv) % groups) * KEYS_PER_THREAD;
    let t = n / (p.dv * groups);
    let st = norm_of(t);
    var acc = array<f32, KEYS_PER_THREAD>();
    let last = min(KEYS_PER_THREAD, p.keys - h0);
    for (var i = 0u; i < p.dk; i = i + 1u) {
        let xv = normed(x[(t * p.dk + i) * p.dv + v], i * p.dv + v, st);
        for (var j = 0u; j < last; j = j + 1u) {
            acc[j] = acc[j] + keys[(h0 + j) * p.dk + i] * xv;
        }
    }
    for (var j = 0u; j < last; j = j + 1u) {
        y[(t * p.keys + h0 + j) * p.dv + v] = acc[j];
    }
}

// store(out, base, keys, data): out[t][i][v] = base[t][i][v] + Σ_h keys[h][i] · data[t][h][v]
@group(0) @binding(1) var<storage, read_write> out: array<f32>;
@group(0) @binding(2) var<storage, read> base: array<f32>;
@group(0) @binding(3) var<storage, read> s_keys: array<f32>;
@group(0) @binding(4) var<storage, read> data: array<f32>;

fn stored(n: u32) -> f32 {
    let v = n % p.dv;
    let i = (n / p.dv) % p.dk;
    let t = n / (p.dv * p.dk);
    var acc = 0.0;
    for (var h = 0u; h < p.keys; h = h + 1u) {
        acc = acc + s_keys[h * p.dk + i] * data[(t * p.keys + h) * p.dv + v];
    }
    return acc;
}

@compute @workgroup_size(WG)
fn store(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let n = flat_index(gid, nwg);
    if (n >= p.tokens * p.dk * p.dv) { return; }
    out[n] = base[n] + stored(n);
}

// store_accumulate(out, keys, data): out[t][i][v] += Σ_h keys[h][i] · data[t][h][v]
// It binds out, keys and data at 1, 3 and 4, and leaves `base` (2) unbound.

@compute @workgroup_size(WG)
fn store_accumulate(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let n = flat_index(gid, nwg);
    if (n >= p.tokens * p.dk * p.dv) { return; }
    out[n] = out[n] + stored(n);
}

// key_grad_partial(partials, a, b): partials[c][h][i] = Σ_{t in chunk c} Σ_v a[t][h][v] · b[t][i][v].
// With NORMED, key_grad_partial(partials, a, x, stats, gain): the same with b = Norm(X), read from
// X (bound as b) and the statistics as it goes.
@group(0) @binding(1) var<storage, read_write> partials: array<f32>;
@group(0) @binding(2) var<storage, read> ga: array<f32>;
@group(0) @binding(3) var<storage, read> gb: array<f32>;

@compute @workgroup_size(WG)
fn key_grad_partial(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let n = flat_index(gid, nwg);
    let per = p.keys * p.dk;
    let chunks = (p.tokens + KEY_GRAD_CHUNK - 1u) / KEY_GRAD_CHUNK;
    if (n >= chunks * per) { return; }
    let c = n / per;
    let h = (n % per) / p.dk;
    let i = n % p.dk;
    var acc = 0.0;
    for (var t = c * KEY_GRAD_CHUNK; t < min(p.tokens, (c + 1u) * KEY_GRAD_CHUNK); t = t + 1u) {
        let ra = (t * p.keys + h) * p.dv;
        let rb = (t * p.dk + i) * p.dv;
        let st = norm_of(t);
        for (var v = 0u; v < p.dv; v = v + 1u) { acc = acc + times_normed(ga[ra + v], gb[rb + v], i * p.dv + v, st); }
    }
    partials[n] = acc;
}

// key_grad_reduce(dkeys, partials): dkeys[h][i] = Σ_c partials[c][h][i], in chunk order
@group(0) @binding(1) var<storage, read_write> dkeys: array<f32>;
@group(0) @binding(2) var<storage, read> r_partials: array<f32>;

@compute @workgroup_size(WG)
fn key_grad_reduce(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let n = flat_index(gid, nwg);
    let per = p.keys * p.dk;
    if (n >= per) { return; }
    let chunks = (p.tokens + KEY_GRAD_CHUNK - 1u) / KEY_GRAD_CHUNK;
    var acc = 0.0;
    for (var c = 0u; c < chunks; c = c + 1u) { acc = acc + r_partials[c * per + n]; }
    dkeys[n] = acc;
}
