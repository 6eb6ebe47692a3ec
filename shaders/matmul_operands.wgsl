// The operands of both matmul families, strict (matmul.wgsl) and fast (matmul_fast.wgsl): one
// Params, one set of bindings, and the reads of four values of a or bm side by side. The loader
// puts this file before either family's own (crates/engine/src/shaders.rs, `prelude`), so that
// both kernels read their operands, windows and transposes one way.
//
// out[b] (M×N) = op(a[b]) (M×K) · op(bm[b]) (K×N): op() is a transpose when the flag is set (a is
// stored (K, M) when trans_a, bm is (N, K) when trans_b); a batch stride of 0 broadcasts an
// operand. A launch over windows of operands larger than one binding keeps the whole matrices'
// row strides lda, ldb, ldo and starts off_a, off_b, off_o into its bindings (ops/matmul/).

struct Params {
    batch: u32, m: u32, n: u32, k: u32,
    trans_a: u32, trans_b: u32, mode: u32, stride_a: u32,
    stride_b: u32, lda: u32, ldb: u32, ldo: u32,
    off_a: u32, off_b: u32, off_o: u32, vec_a: u32,
    vec_b: u32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> out: array<f32>;  // (batch, M, N)
// Read as vec4s; their bindings' sizes are multiples of 16 bytes (ops/matmul.rs).
@group(0) @binding(2) var<storage, read> a: array<vec4<f32>>;    // (batch, M, K) or (batch, K, M)
@group(0) @binding(3) var<storage, read> bm: array<vec4<f32>>;   // (batch, K, N) or (batch, N, K)

// Four values of a that lie side by side in storage: row `outer` of the stored matrix,
// columns inner..inner+3, zero past its edges; one vec4 read where its rows start at multiples
// of 4 values (`vec_a`). `inner` is a multiple of 4.
fn load_a4(batch: u32, outer: u32, inner: u32) -> vec4<f32> {
    let rows = select(p.m, p.k, p.trans_a != 0u);
    let cols = select(p.k, p.m, p.trans_a != 0u);
    var v = vec4<f32>(0.0);
    if (outer >= rows) { return v; }
    let i = batch * p.stride_a + p.off_a + outer * p.lda + inner;
    if (p.vec_a != 0u && inner + 3u < cols) { return a[i / 4u]; }
    for (var j = 0u; j < 4u; j = j + 1u) {
        if (inner + j < cols) { v[j] = a[(i + j) / 4u][(i + j) % 4u]; }
    }
    return v;
}

fn load_b4(batch: u32, outer: u32, inner: u32) -> vec4<f32> {
    let rows = select(p.k, p.n, p.trans_b != 0u);
    let cols = select(p.n, p.k, p.trans_b != 0u);
    var v = vec4<f32>(0.0);
    if (outer >= rows) { return v; }
    let i = batch * p.stride_b + p.off_b + outer * p.ldb + inner;
    if (p.vec_b != 0u && inner + 3u < cols) { return bm[i / 4u]; }
    for (var j = 0u; j < 4u; j = j + 1u) {
        if (inner + j < cols) { v[j] = bm[(i + j) / 4u][(i + j) % 4u]; }
    }
    return v;
}
