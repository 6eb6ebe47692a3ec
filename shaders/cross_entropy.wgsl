// Cross-entropy with z-loss over logits (rows, V). Rows whose target is IGNORE (a define, from
// ops/cross_entropy.rs) contribute nothing. scale (1) is 1/(number of counted rows), so Σ losses is the mean CE.
//   forward:  lse = log Σ exp(logits); losses[r] = scale·(lse - logits[target])
//   backward: dlogits = scale·(softmax·(1 + 2·z·lse) - onehot(target)), the gradient of
//             scale·Σ (CE + z·lse²)
// One workgroup per row for the forward, so V can be GPT-2's 50 257.

struct Params { rows: u32, v: u32, z: f32 }
@group(0) @binding(0) var<uniform> p: Params;


// cross_entropy_forward(losses, lse, logits, targets, scale)
@group(0) @binding(1) var<storage, read_write> losses: array<f32>;  // (rows)
@group(0) @binding(2) var<storage, read_write> lse: array<f32>;     // (rows)
@group(0) @binding(3) var<storage, read> logits: array<f32>;        // (rows, V)
@group(0) @binding(4) var<storage, read> targets: array<u32>;       // (rows)
@group(0) @binding(5) var<storage, read> scale: array<f32>;         // (1)

@compute @workgroup_size(WG)
fn cross_entropy_forward(@builtin(local_invocation_id) lid3: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let row = flat_group(wid, nwg);
    if (row >= p.rows) { return; }
    let lid = lid3.x;
    let base = row * p.v;
    var mx = F32_LOWEST;
    for (var i = lid; i < p.v; i = i + WG) { mx = max(mx, logits[base + i]); }
    mx = workgroup_max(lid, mx);
    var s = 0.0;
    for (var i = lid; i < p.v; i = i + WG) { s = s + exp(logits[base + i] - mx); }
    let l = mx + log(workgroup_sum(lid, s));
    if (lid == 0u) {
        lse[row] = l;
        let tgt = targets[row];
        if (tgt == IGNORE) { losses[row] = 0.0; } else { losses[row] = scale[0] * (l - logits[base + tgt]); }
    }
}

// cross_entropy_backward(dlogits, logits, lse, targets, scale)
@group(0) @binding(1) var<storage, read_write> dlogits: array<f32>;  // (rows, V)
@group(0) @binding(2) var<storage, read> logits_in: array<f32>;      // (rows, V)
@group(0) @binding(3) var<storage, read> lse_in: array<f32>;         // (rows)

@compute @workgroup_size(WG)
fn cross_entropy_backward(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_index(gid, nwg);
    if (i >= p.rows * p.v) { return; }
    let row = i / p.v;
    let col = i % p.v;
    let tgt = targets[row];
    if (tgt == IGNORE) { dlogits[i] = 0.0; return; }
    let l = lse_in[row];
    var g = exp(logits_in[i] - l) * (1.0 + 2.0 * p.z * l);
    if (col == tgt) { g = g - 1.0; }
    dlogits[i] = scale[0] * g;
}
