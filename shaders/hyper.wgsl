// Hyper-connections' gates (crates/engine/src/ops/hyper.rs says what they are): one thread a
// token, each step the CPU twin's, in its order. Sinkhorn's backward runs it again from Z,
// keeping each step's divisors, and walks back, restoring each step's input from its output.

struct Params { tokens: u32, n: u32, kind: u32, iters: u32 }
@group(0) @binding(0) var<uniform> p: Params;

// SINKHORN, PERMUTATIONS, TANH and HEAD (the mixing, `kind`) come from ops/hyper.rs.

fn sigmoid(z: f32) -> f32 { return 1.0 / (1.0 + exp(-z)); }

// tanh that saturates to ±1 instead of overflowing where a driver computes it from exp.
fn tanh_stable(z: f32) -> f32 { return 1.0 - 2.0 / (exp(2.0 * z) + 1.0); }

fn width() -> u32 {
    if (p.kind == HEAD) { return p.n; }
    if (p.kind == SINKHORN || p.kind == TANH) { return 2u * p.n + p.n * p.n; }
    var f = 1u;
    for (var i = 2u; i <= p.n; i = i + 1u) { f = f * i; }
    return 2u * p.n + f;
}

// The destination of source stream j in the κ-th permutation of `itertools.permutations` order.
fn permuted(kappa: u32, j: u32) -> u32 {
    var left = array<u32, 8>(0u, 1u, 2u, 3u, 4u, 5u, 6u, 7u);
    var rest = kappa;
    var pick = 0u;
    for (var i = 0u; i <= j; i = i + 1u) {
        var f = 1u;
        for (var q = 2u; q < p.n - i; q = q + 1u) { f = f * q; }
        let d = rest / f;
        rest = rest % f;
        pick = left[d];
        for (var r = d; r + 1u < p.n - i; r = r + 1u) { left[r] = left[r + 1u]; }
    }
    return pick;
}

// The n×n Sinkhorn state, in a thread's registers (or its local memory).
var<private> x: array<f32, MAX_MIX>;
var<private> z: array<f32, MAX_MIX>;


// x = softmax over each row of Z (no ε).
fn softmax_rows() {
    let n = p.n;
    for (var j = 0u; j < n; j = j + 1u) {
        var mx = z[j * n];
        for (var k = 1u; k < n; k = k + 1u) { mx = max(mx, z[j * n + k]); }
        var sum = 0.0;
        for (var k = 0u; k < n; k = k + 1u) { x[j * n + k] = exp(z[j * n + k] - mx); sum = sum + x[j * n + k]; }
        for (var k = 0u; k < n; k = k + 1u) { x[j * n + k] = x[j * n + k] / sum; }
    }
}

fn at(rows: bool, a: u32, b: u32) -> u32 { return select(b * p.n + a, a * p.n + b, rows); }

// Each step's divisors (a row's or column's sum + ε), n a step, for the backward.
var<private> divisors: array<f32, MAX_DIVISORS>;

// Divides each row (over k) or column (over j) of x by its sum + ε, keeping the divisors as
// step `s`'s.
fn normalise(rows: bool, s: u32) {
    let n = p.n;
    for (var a = 0u; a < n; a = a + 1u) {
        var sum = 0.0;
        for (var b = 0u; b < n; b = b + 1u) { sum = sum + x[at(rows, a, b)]; }
        sum = sum + HC_EPS;
        for (var b = 0u; b < n; b = b + 1u) { x[at(rows, a, b)] = x[at(rows, a, b)] / sum; }
        divisors[s * n + a] = sum;
    }
}

// x = Sinkhorn's result after `steps` normalisations of softmax(Z) + ε (odd steps: columns).
fn sinkhorn(steps: u32) {
    softmax_rows();
    for (var i = 0u; i < p.n * p.n; i = i + 1u) { x[i] = x[i] + HC_EPS; }
    for (var s = 1u; s <= steps; s = s + 1u) { normalise(s % 2u == 0u, s - 1u); }
}

// hyper_gates(pre, post, mix, logits, alpha, bias)
@group(0) @binding(1) var<storage, read_write> pre: array<f32>;    // (tokens, n)
@group(0) @binding(2) var<storage, read_write> post: array<f32>;   // (tokens, n)
@group(0) @binding(3) var<storage, read_write> mix: array<f32>;    // (tokens, n, n): [j, k] from j to k
@group(0) @binding(4) var<storage, read> logits: array<f32>;       // (tokens, width)
@group(0) @binding(5) var<storage, read> alpha: array<f32>;        // (3)
@group(0) @binding(6) var<storage, read> bias: array<f32>;         // (width)

@compute @workgroup_size(WG)
fn hyper_gates(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let t = flat_index(gid, nwg);
    if (t >= p.tokens) { return; }
    let n = p.n;
    let w = width();
    let base = t * w;
    if (p.kind == TANH) {
        // HC: each stream's n + 2 logits [pre_j, post_j, P[j,0..n)], gate = α·tanh(m) + b.
        for (var j = 0u; j < n; j = j + 1u) {
            let at = j * (n + 2u);
            pre[t * n + j] = alpha[0] * tanh_stable(logits[base + at]) + bias[at];
            post[t * n + j] = alpha[1] * tanh_stable(logits[base + at + 1u]) + bias[at + 1u];
            for (var k = 0u; k < n; k = k + 1u) {
                mix[t * n * n + j * n + k] = alpha[2] * tanh_stable(logits[base + at + 2u + k]) + bias[at + 2u + k];
            }
        }
        return;
    }
    let pre_eps = select(0.0, HC_EPS, p.kind == SINKHORN || p.kind == HEAD);
    if (p.kind == HEAD) {
        // The collapse before the head: pre only.
        for (var j = 0u; j < n; j = j + 1u) { pre[t * n + j] = sigmoid(alpha[0] * logits[base + j] + bias[j]) + pre_eps; }
        return;
    }
    for (var j = 0u; j < n; j = j + 1u) {
        pre[t * n + j] = sigmoid(alpha[0] * logits[base + j] + bias[j]) + pre_eps;
        post[t * n + j] = 2.0 * sigmoid(alpha[1] * logits[base + n + j] + bias[n + j]);
    }
    if (p.kind == SINKHORN) {
        for (var i = 0u; i < n * n; i = i + 1u) { z[i] = alpha[2] * logits[base + 2u * n + i] + bias[2u * n + i]; }
        sinkhorn(2u * p.iters - 1u);
        for (var i = 0u; i < n * n; i = i + 1u) { mix[t * n * n + i] = x[i]; }
    } else {
        let r = w - 2u * n;
        var mx = alpha[2] * logits[base + 2u * n] + bias[2u * n];
        for (var q = 1u; q < r; q = q + 1u) { mx = max(mx, alpha[2] * logits[base + 2u * n + q] + bias[2u * n + q]); }
        var sum = 0.0;
        for (var q = 0u; q < r; q = q + 1u) { sum = sum + exp(alpha[2] * logits[base + 2u * n + q] + bias[2u * n + q] - mx); }
        for (var i = 0u; i < n * n; i = i + 1u) { mix[t * n * n + i] = 0.0; }
        for (var q = 0u; q < r; q = q + 1u) {
            let a = exp(alpha[2] * logits[base + 2u * n + q] + bias[2u * n + q] - mx) / sum;
            for (var j = 0u; j < n; j = j + 1u) {
                let i = t * n * n + j * n + permuted(q, j);
                mix[i] = mix[i] + a;
            }
        }
    }
}

// hyper_gates_backward(dm, dz, dalpha, dpre, dpost, dmix, logits, alpha, bias)
@group(0) @binding(1) var<storage, read_write> dm: array<f32>;      // (tokens, width)
@group(0) @binding(2) var<storage, read_write> dz: array<f32>;      // (tokens, width)
@group(0) @binding(3) var<storage, read_write> dalpha: array<f32>;  // (tokens, 3), the head's (tokens, 1)
@group(0) @binding(4) var<storage, read> dpre: array<f32>;          // (tokens, n)
@group(0) @binding(5) var<storage, read> dpost: array<f32>;         // (tokens, n)
@group(0) @binding(6) var<storage, read> dmix: array<f32>;          // (tokens, n, n)
@group(0) @binding(7) var<storage, read> b_logits: array<f32>;      // (tokens, width)
@group(0) @binding(8) var<storage, read> b_alpha: array<f32>;       // (3)
@group(0) @binding(9) var<storage, read> b_bias: array<f32>;        // (width)

var<private> g: array<f32, MAX_MIX>;

@compute @workgroup_size(WG)
fn hyper_gates_backward(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let t = flat_index(gid, nwg);
    if (t >= p.tokens) { return; }
    let n = p.n;
    let w = width();
    let base = t * w;
    if (p.kind == HEAD) {
        var da = 0.0;
        for (var j = 0u; j < n; j = j + 1u) {
            let s = sigmoid(b_alpha[0] * b_logits[base + j] + b_bias[j]);
            dz[base + j] = dpre[t * n + j] * s * (1.0 - s);
            dm[base + j] = b_alpha[0] * dz[base + j];
            da = da + dz[base + j] * b_logits[base + j];
        }
        dalpha[t] = da;
        return;
    }
    if (p.kind == TANH) {
        // db = dgate, dm = α·(1 − tanh²)·dgate, dα = Σ tanh·dgate, each stream's logits in turn.
        var da = array<f32, 3>(0.0, 0.0, 0.0);
        for (var j = 0u; j < n; j = j + 1u) {
            for (var q = 0u; q < n + 2u; q = q + 1u) {
                let i = base + j * (n + 2u) + q;
                let seg = min(q, 2u);
                var gate: f32;
                if (q == 0u) { gate = dpre[t * n + j]; }
                else if (q == 1u) { gate = dpost[t * n + j]; }
                else { gate = dmix[t * n * n + j * n + q - 2u]; }
                let th = tanh_stable(b_logits[i]);
                dz[i] = gate;
                dm[i] = b_alpha[seg] * (1.0 - th * th) * gate;
                da[seg] = da[seg] + th * gate;
            }
        }
        for (var seg = 0u; seg < 3u; seg = seg + 1u) { dalpha[t * 3u + seg] = da[seg]; }
        return;
    }
    for (var j = 0u; j < n; j = j + 1u) {
        var s = sigmoid(b_alpha[0] * b_logits[base + j] + b_bias[j]);
        dz[base + j] = dpre[t * n + j] * s * (1.0 - s);
        s = sigmoid(b_alpha[1] * b_logits[base + n + j] + b_bias[n + j]);
        dz[base + n + j] = dpost[t * n + j] * 2.0 * s * (1.0 - s);
    }
    if (p.kind == SINKHORN) {
        for (var i = 0u; i < n * n; i = i + 1u) {
            z[i] = b_alpha[2] * b_logits[base + 2u * n + i] + b_bias[2u * n + i];
            g[i] = dmix[t * n * n + i];
        }
        // Back through each normalisation y = x / d: dx = (dy − Σ dy ⊙ y) / d along the
        // normalised axis, then x = y ⊙ d, the step's input, for the step before.
        sinkhorn(2u * p.iters - 1u);
        for (var s = 2u * p.iters - 1u; s >= 1u; s = s - 1u) {
            let rows = s % 2u == 0u;
            for (var a = 0u; a < n; a = a + 1u) {
                let d = divisors[(s - 1u) * n + a];
                var gy = 0.0;
                for (var b = 0u; b < n; b = b + 1u) { gy = gy + g[at(rows, a, b)] * x[at(rows, a, b)]; }
                for (var b = 0u; b < n; b = b + 1u) {
                    g[at(rows, a, b)] = (g[at(rows, a, b)] - gy) / d;
                    x[at(rows, a, b)] = x[at(rows, a, b)] * d;
                }
            }
        }
        // The ε after the softmax passes g unchanged; then the softmax's backward.
        softmax_rows();
        for (var j = 0u; j < n; j = j + 1u) {
            var gp = 0.0;
            for (var k = 0u; k < n; k = k + 1u) { gp = gp + g[j * n + k] * x[j * n + k]; }
            for (var k = 0u; k < n; k = k + 1u) { dz[base + 2u * n + j * n + k] = x[j * n + k] * (g[j * n + k] - gp); }
        }
    } else {
        let r = w - 2u * n;
        var mx = b_alpha[2] * b_logits[base + 2u * n] + b_bias[2u * n];
        for (var q = 1u; q < r; q = q + 1u) { mx = max(mx, b_alpha[2] * b_logits[base + 2u * n + q] + b_bias[2u * n + q]); }
        var sum = 0.0;
        for (var q = 0u; q < r; q = q + 1u) { sum = sum + exp(b_alpha[2] * b_logits[base + 2u * n + q] + b_bias[2u * n + q] - mx); }
        // Σ_μ a_μ ⟨dP, Π_μ⟩, then each a_κ (⟨dP, Π_κ⟩ − that).
        var mean = 0.0;
        for (var q = 0u; q < r; q = q + 1u) {
            let a = exp(b_alpha[2] * b_logits[base + 2u * n + q] + b_bias[2u * n + q] - mx) / sum;
            var da = 0.0;
            for (var j = 0u; j < n; j = j + 1u) { da = da + dmix[t * n * n + j * n + permuted(q, j)]; }
            mean = mean + a * da;
        }
        for (var q = 0u; q < r; q = q + 1u) {
            let a = exp(b_alpha[2] * b_logits[base + 2u * n + q] + b_bias[2u * n + q] - mx) / sum;
            var da = 0.0;
            for (var j = 0u; j < n; j = j + 1u) { da = da + dmix[t * n * n + j * n + permuted(q, j)]; }
            dz[base + 2u * n + q] = a * (da - mean);
        }
    }
    for (var seg = 0u; seg < 3u; seg = seg + 1u) {
        let lo = select(select(2u * n, n, seg == 1u), 0u, seg == 0u);
        let hi = select(select(w, 2u * n, seg == 1u), n, seg == 0u);
        var acc = 0.0;
        for (var i = lo; i < hi; i = i + 1u) {
            acc = acc + dz[base + i] * b_logits[base + i];
            dm[base + i] = b_alpha[seg] * dz[base + i];
        }
        dalpha[t * 3u + seg] = acc;
    }
}
