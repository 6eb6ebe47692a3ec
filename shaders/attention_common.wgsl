// Causal multi-head attention in f32, FlashAttention-style: no (T, T) matrix is ever kept.
// qkv (B, T, 3·H·Dh) holds [q heads | k heads | v heads] per token; out is (B, T, H·Dh).
// Query i of a sequence sees keys j with start(i) ≤ j ≤ i, start(i) = min(doc_start[i], i):
// causal within its document (doc_start all 0: plain causal).
// logit(i, j) = scale · q_i·k_j − slope_h · (i − j), where scale = 1/sqrt(Dh), divided by
// (layer + 1) when that option is on, and slope_h is ALiBi's when `alibi` is 1, else 0 (SPEC §2a).
//
// This file is the prelude both attention families share (`attention.wgsl`, one thread a row,
// and `attention_blocked.wgsl`, 2×4 blocks a thread): the parameters, every binding, the
// workgroup tiles and their loaders, the logit. The kernels are candidates tuning chooses
// between per shape (ops/attention.rs); they compute every value as the same chain in the same
// order, so they give the same bits.

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
