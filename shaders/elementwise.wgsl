// Elementwise ops: fill, add, add_assign, tanh-GELU forward and backward, and replace.
// Every tensor here is a flat array of n values (replace's masks: rows and columns of out).

struct Params { n: u32, value: f32, width: u32 }
@group(0) @binding(0) var<uniform> p: Params;

@group(0) @binding(1) var<storage, read_write> out: array<f32>;   // (n)
@group(0) @binding(2) var<storage, read> a: array<f32>;           // (n)
@group(0) @binding(3) var<storage, read> b: array<f32>;           // (n)
@group(0) @binding(4) var<storage, read> c: array<f32>;           // (n)

@compute @workgroup_size(WG)
fn fill(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_index(gid, nwg);
    if (i >= p.n) { return; }
    out[i] = p.value;
}

@compute @workgroup_size(WG)
fn add(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_index(gid, nwg);
    if (i >= p.n) { return; }
    out[i] = a[i] + b[i];
}

@compute @workgroup_size(WG)
fn add_assign(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_index(gid, nwg);
    if (i >= p.n) { return; }
    out[i] = out[i] + a[i];
}

// replace(out, rows=a, cols=b, value=c): an intervention's edit; out is (n / width, width).
@compute @workgroup_size(WG)
fn replace(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_index(gid, nwg);
    if (i >= p.n) { return; }
    if (a[i / p.width] != 0.0 && b[i % p.width] != 0.0) {
        out[i] = c[i];
    }
}

// GELU_K = sqrt(2/pi), GELU_C = 0.044715 and GELU_C3 = 3·GELU_C are defines, from
// ops/elementwise.rs.

// tanh of a clamped argument: some drivers overflow exp() inside tanh for large inputs, and
// tanh(±10) is ±1 to f32 precision anyway.
fn gelu_tanh_arg(x: f32) -> f32 {
    return tanh(clamp(GELU_K * (x + GELU_C * x * x * x), -10.0, 10.0));
}

// gelu_forward(out, x=a)
@compute @workgroup_size(WG)
fn gelu_forward(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_index(gid, nwg);
    if (i >= p.n) { return; }
    let x = a[i];
    out[i] = 0.5 * x * (1.0 + gelu_tanh_arg(x));
}

// gelu_backward(dx=out, dout=a, x=b)
@compute @workgroup_size(WG)
fn gelu_backward(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_index(gid, nwg);
    if (i >= p.n) { return; }
    let x = b[i];
    let t = gelu_tanh_arg(x);
    let dt = (1.0 - t * t) * GELU_K * (1.0 + GELU_C3 * x * x);
    out[i] = a[i] * (0.5 * (1.0 + t) + 0.5 * x * dt);
}
