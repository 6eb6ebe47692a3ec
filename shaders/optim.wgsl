// Deterministic reductions and AdamW over flat parameter buffers.

// sum_partial also reads `first`, its first block, and `base`, the index in x of its binding's
// first value: x may be bound in windows of whole blocks, one launch each.
struct Params { n: u32, flag: u32, boost_end: u32, first: u32, base: u32 }
@group(0) @binding(0) var<uniform> p: Params;

// Σ x (flag 0) or Σ x² (flag 1) in two launches, bit-identical across runs: sum_partial gives
// each of G workgroups one contiguous block of x (G depends only on n), each thread a fixed
// stride of it, and `workgroup_sum`'s fixed tree the WG thread sums; sum_final adds the G partials the same way.
@group(0) @binding(1) var<storage, read_write> total: array<f32>;  // (G) partials, or (1)
@group(0) @binding(2) var<storage, read> x: array<f32>;            // (n), or the (G) partials

// sum_partial(partials, x): p.boost_end carries G, the number of blocks; this launch adds blocks
// first, first + 1, … of x bound from value base.
@compute @workgroup_size(WG)
fn sum_partial(@builtin(local_invocation_id) lid3: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
    let lid = lid3.x;
    let block = (p.n + p.boost_end - 1u) / p.boost_end;
    let g = p.first + wid.x;
    let start = g * block;
    let end = min(p.n, start + block);
    var s = 0.0;
    for (var i = start + lid; i < end; i = i + WG) {
        let v = x[i - p.base];
        if (p.flag != 0u) { s = s + v * v; } else { s = s + v; }
    }
    let t = workgroup_sum(lid, s);
    if (lid == 0u) { total[g] = t; }
}

// sum_final(out, partials): n = G.
@compute @workgroup_size(WG)
fn sum_final(@builtin(local_invocation_id) lid3: vec3<u32>) {
    let lid = lid3.x;
    var s = 0.0;
    for (var i = lid; i < p.n; i = i + WG) { s = s + x[i]; }
    let t = workgroup_sum(lid, s);
    if (lid == 0u) { total[0] = t; }
}

// adamw(params, m, v, grads, hyper, grad_sumsq), flag = decay_end: values before it get weight
// decay (matrices), values after it do not (norm gains, embeddings); values before boost_end
// (MemoryFormer's tables) learn at lr_boost times the rate.
// hyper (HYPER_LEN) holds lr, beta1, beta2, eps, weight_decay, 1 - beta1^t (BIAS1), 1 - beta2^t
// (BIAS2), max_grad_norm and lr_boost at the slots of those names, defines from ops/optim.rs
// (`Hyper`); written by the host each step, so a recorded step replays with the current schedule.
@group(0) @binding(1) var<storage, read_write> params: array<f32>;  // (n)
@group(0) @binding(2) var<storage, read_write> m: array<f32>;       // (n)
@group(0) @binding(3) var<storage, read_write> v: array<f32>;       // (n)
@group(0) @binding(4) var<storage, read> grads: array<f32>;         // (n)
@group(0) @binding(5) var<storage, read> hyper: array<f32>;         // (HYPER_LEN)
@group(0) @binding(6) var<storage, read> grad_sumsq: array<f32>;    // (1)

@compute @workgroup_size(WG)
fn adamw(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_index(gid, nwg);
    if (i >= p.n) { return; }
    let norm = sqrt(grad_sumsq[0]);
    var clip = 1.0;
    if (norm > hyper[MAX_GRAD_NORM]) { clip = hyper[MAX_GRAD_NORM] / norm; }
    let g = grads[i] * clip;
    let mi = hyper[BETA1] * m[i] + (1.0 - hyper[BETA1]) * g;
    let vi = hyper[BETA2] * v[i] + (1.0 - hyper[BETA2]) * g * g;
    m[i] = mi;
    v[i] = vi;
    var wd = 0.0;
    if (i < p.flag) { wd = hyper[WEIGHT_DECAY]; }
    var lr = hyper[LR];
    if (i < p.boost_end) { lr = lr * hyper[LR_BOOST]; }
    let update = (mi / hyper[BIAS1]) / (sqrt(vi / hyper[BIAS2]) + hyper[EPS]) + wd * params[i];
    params[i] = params[i] - lr * update;
}
