// Batched matmul: out[b] (M×N) = op(a[b]) (M×K) · op(bm[b]) (K×N), optionally added to out.
// op() is a transpose when the flag is set: a is stored (K, M) when trans_a, bm is (N, K) when
// trans_b. A batch stride of 0 broadcasts an operand (a weight) over the batch.
//
// A product whose operands exceed one binding is launched in blocks (ops/matmul.rs): each binds
// windows of the operands, whose row strides lda, ldb, ldo stay those of the whole matrices and
// whose first values sit off_a, off_b, off_o into their bindings. mode 0 writes the sum, 1 adds
// it to out, 2 (a later block along K) starts the sum from out: the same chain of fmas.
//
// Each workgroup computes a 64×64 tile of out; each of its 16×16 threads a 4×4 block, from
// 64×16 slices of a and 16×64 slices of bm staged in workgroup memory.

struct Params {
    batch: u32, m: u32, n: u32, k: u32,
    trans_a: u32, trans_b: u32, mode: u32, stride_a: u32,
    stride_b: u32, lda: u32, ldb: u32, ldo: u32,
    off_a: u32, off_b: u32, off_o: u32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> out: array<f32>;  // (batch, M, N)
@group(0) @binding(2) var<storage, read> a: array<f32>;          // (batch, M, K) or (batch, K, M)
@group(0) @binding(3) var<storage, read> bm: array<f32>;         // (batch, K, N) or (batch, N, K)

const TILE: u32 = 64u;
const TK: u32 = 16u;
var<workgroup> a_tile: array<f32, 1024>; // [TK][TILE]: a_tile[kk * 64 + row]
var<workgroup> b_tile: array<f32, 1024>; // [TK][TILE]: b_tile[kk * 64 + col]

fn load_a(batch: u32, row: u32, kk: u32) -> f32 {
    if (row >= p.m || kk >= p.k) { return 0.0; }
    let base = batch * p.stride_a + p.off_a;
    if (p.trans_a != 0u) { return a[base + kk * p.lda + row]; }
    return a[base + row * p.lda + kk];
}

fn load_b(batch: u32, kk: u32, col: u32) -> f32 {
    if (kk >= p.k || col >= p.n) { return 0.0; }
    let base = batch * p.stride_b + p.off_b;
    if (p.trans_b != 0u) { return bm[base + col * p.ldb + kk]; }
    return bm[base + kk * p.ldb + col];
}

@compute @workgroup_size(16, 16, 1)
fn matmul(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
    let batch = wid.z;
    let row0 = wid.y * TILE;
    let col0 = wid.x * TILE;
    let tid = lid.y * 16u + lid.x;
    let base = batch * p.m * p.ldo + p.off_o;
    var acc: array<f32, 16>;
    if (p.mode == 2u) {
        for (var r = 0u; r < 4u; r = r + 1u) {
            let row = row0 + lid.y + 16u * r;
            for (var c = 0u; c < 4u; c = c + 1u) {
                let col = col0 + lid.x + 16u * c;
                if (row < p.m && col < p.n) { acc[r * 4u + c] = out[base + row * p.ldo + col]; }
            }
        }
    }
    for (var k0 = 0u; k0 < p.k; k0 = k0 + TK) {
        for (var l = 0u; l < 4u; l = l + 1u) {
            let e = tid + l * 256u;
            // a: consecutive threads walk k, the contiguous axis of an untransposed a.
            let ar = e / TK;
            let ak = e % TK;
            a_tile[ak * TILE + ar] = load_a(batch, row0 + ar, k0 + ak);
            // bm: consecutive threads walk columns, the contiguous axis of an untransposed bm.
            let bk = e / TILE;
            let bc = e % TILE;
            b_tile[bk * TILE + bc] = load_b(batch, k0 + bk, col0 + bc);
        }
        workgroupBarrier();
        for (var kk = 0u; kk < TK; kk = kk + 1u) {
            var av: array<f32, 4>;
            var bv: array<f32, 4>;
            for (var r = 0u; r < 4u; r = r + 1u) { av[r] = a_tile[kk * TILE + lid.y + 16u * r]; }
            for (var c = 0u; c < 4u; c = c + 1u) { bv[c] = b_tile[kk * TILE + lid.x + 16u * c]; }
            for (var r = 0u; r < 4u; r = r + 1u) {
                for (var c = 0u; c < 4u; c = c + 1u) {
                    acc[r * 4u + c] = fma(av[r], bv[c], acc[r * 4u + c]);
                }
            }
        }
        workgroupBarrier();
    }
    for (var r = 0u; r < 4u; r = r + 1u) {
        let row = row0 + lid.y + 16u * r;
        if (row >= p.m) { continue; }
        for (var c = 0u; c < 4u; c = c + 1u) {
            let col = col0 + lid.x + 16u * c;
            if (col >= p.n) { continue; }
            let i = base + row * p.ldo + col;
            var v = acc[r * 4u + c];
            if (p.mode == 1u) { v = v + out[i]; }
            out[i] = v;
        }
    }
}
