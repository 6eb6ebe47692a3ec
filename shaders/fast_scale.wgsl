// The fast class's operand scales (crates/engine/src/precision.rs): before a product, each
// operand's largest magnitude, and from the two the powers of two that stage them into f16.
//
// `amax_partial` reduces a window of an operand to one maximum a workgroup, over the bits of
// |x| as u32s: for non-negative floats the integer order is the float order, a NaN or an
// infinity is at least 0x7f800000, and the maximum is exact, so neither the launch's split nor
// a driver's float rules (WGSL may assume no NaN) change it. `fast_scales` reduces a's and b's
// partials and writes [2^sA, 2^sB, 2^-sA, 2^-sB] for shaders/matmul_fast.wgsl; an operand that
// holds a NaN or an infinity gets s = 0, so that the product carries it to the loss, and marks
// the fault word with the product's number (the smallest wins: integer atomics, no float one).

struct Params {
    // amax_partial: values in the window, the first partial slot, workgroups, rounds per thread.
    n: u32, slot: u32, groups: u32, rounds: u32,
    // fast_scales: the product's number, and how many partials a and b wrote.
    product: u32, groups_a: u32, groups_b: u32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> partials: array<u32>;  // a's from 0, b's from PARTIALS_B
@group(0) @binding(3) var<storage, read_write> scales: array<f32>;    // 4 values
@group(0) @binding(4) var<storage, read_write> fault: array<atomic<u32>>;

var<workgroup> top: array<u32, WG>;

// The maximum of every thread's `v`; every thread gets it. Call from uniform control flow.
fn workgroup_umax(lid: u32, v: u32) -> u32 {
    top[lid] = v;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s = s >> 1u) {
        if (lid < s) { top[lid] = max(top[lid], top[lid + s]); }
        workgroupBarrier();
    }
    let r = top[0];
    workgroupBarrier();
    return r;
}

@compute @workgroup_size(WG)
fn amax_partial(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    var m = 0u;
    for (var j = 0u; j < p.rounds; j = j + 1u) {
        let i = (j * p.groups + wid.x) * WG + lid;
        if (i < p.n) { m = max(m, bitcast<u32>(x[i]) & 0x7fffffffu); }
    }
    let r = workgroup_umax(lid, m);
    if (lid == 0u) { partials[p.slot + wid.x] = r; }
}

// s = 14 - ceil(log2 amax), clamped to ±MAX_SCALE_EXPONENT; 0 for zeros and for non-finite
// values: precision.rs's `scale_exponent`, on the same bits.
fn fast_exponent(bits: u32) -> i32 {
    if (bits >= 0x7f800000u || bits == 0u) { return 0; }
    let e = i32(bits >> 23u);
    if (e == 0) { return MAX_SCALE_EXPONENT; }
    let ceil_log2 = e - 127 + select(0, 1, (bits & 0x7fffffu) != 0u);
    return clamp(SCALED_LOG2 - ceil_log2, -MAX_SCALE_EXPONENT, MAX_SCALE_EXPONENT);
}

// 2^s, exactly, for |s| <= 126.
fn pow2(s: i32) -> f32 {
    return bitcast<f32>(u32(s + 127) << 23u);
}

@compute @workgroup_size(WG)
fn fast_scales(@builtin(local_invocation_index) lid: u32) {
    var ma = 0u;
    var mb = 0u;
    for (var j = 0u; j < PARTIALS_B / WG; j = j + 1u) {
        let s = j * WG + lid;
        if (s < p.groups_a) { ma = max(ma, partials[s]); }
        if (s < p.groups_b) { mb = max(mb, partials[PARTIALS_B + s]); }
    }
    let ra = workgroup_umax(lid, ma);
    let rb = workgroup_umax(lid, mb);
    if (lid == 0u) {
        let ea = fast_exponent(ra);
        let eb = fast_exponent(rb);
        scales[0] = pow2(ea);
        scales[1] = pow2(eb);
        scales[2] = pow2(-ea);
        scales[3] = pow2(-eb);
        if (ra >= 0x7f800000u || rb >= 0x7f800000u) { atomicMin(&fault[0], p.product); }
    }
}
