// Attention, one thread a query row (or key): the default kernel, which a CPU-like adapter
// (lavapipe) keeps. Its prelude is attention_common.wgsl.
//
// The forward runs one workgroup of ROWS threads per (batch, head, tile of ROWS query rows),
// one thread per row: for each tile of ROWS keys it computes its row's logits, then updates its
// output with an online softmax (running max m and sum l), and finally saves
// lse (B, H, T) = m + log l for the backward. q, k and v tiles sit in workgroup memory CHUNK head
// dimensions at a time (12.4 KiB in all); reads of the tile being swept are the same address in
// every thread. A thread accumulates up to COLUMNS = CHUNKS·CHUNK = 128 output columns, so a
// wider head takes one workgroup per 128 columns, each computing the whole logits. ROWS, CHUNK
// and COLUMNS are defines, from ops/attention.rs.
//
// The backward recomputes P(i, j) = exp(logit(i, j) − lse_i) tile by tile, without atomics, in
// three launches: delta_i = dout_i·out_i per row; per query tile (a thread per query),
// dq = scale·Σ_j dS·k_j with dS = P ⊙ (dout_i·v_j − delta_i); per key tile (a thread per key),
// dk = scale·Σ_i dS·q_i and dv = Σ_i P·dout_i. Every value is written by one thread, its sum
// taken in a fixed order.

@compute @workgroup_size(ROWS)
fn attention_forward(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let tile = tile_of(wid, nwg);
    if (tile.x == NONE) { return; }
    let b = tile.x;
    let h = tile.y;
    let i0 = tile.z;
    let c0 = tile.w;
    let i = i0 + lid;
    let live = i < p.t;
    var first = 0u;
    if (live) { first = min(doc_start[b * p.t + i], i); }
    let end = min(i0 + ROWS, p.t);
    let slope = slope_of(h);
    let chunks = (p.dh + CHUNK - 1u) / CHUNK;
    // With a single chunk, q is loaded once; the first barrier below publishes it.
    let once = chunks == 1u;
    if (once) {
        for (var e = lid; e < ROWS * CHUNK; e = e + ROWS) { ta[slot(e)] = qkv_value(b, h, 0u, i0, 0u, e); }
    }
    var m = F32_LOWEST;
    var l = 0.0;
    var o: array<f32, COLUMNS>;
    var s: array<f32, ROWS>;  // this row's logits, then probabilities, over the key tile
    for (var j0 = tile_first_key(b, i0, end); j0 < end; j0 = j0 + ROWS) {
        let n = min(ROWS, end - j0);  // keys in this tile
        for (var c = 0u; c < n; c = c + 1u) { s[c] = 0.0; }
        for (var ch = 0u; ch < chunks; ch = ch + 1u) {
            for (var e = lid; e < ROWS * CHUNK; e = e + ROWS) {
                if (!once) { ta[slot(e)] = qkv_value(b, h, 0u, i0, ch, e); }
                tb[slot(e)] = qkv_value(b, h, 1u, j0, ch, e);
            }
            workgroupBarrier();
            let w = chunk_width(ch);
            if (live) {
                for (var c = 0u; c < n; c = c + 1u) {
                    var dot = s[c];
                    for (var x = 0u; x < w; x = x + 1u) { dot = fma(ta[lid * STRIDE + x], tb[c * STRIDE + x], dot); }
                    s[c] = dot;
                }
            }
            workgroupBarrier();
        }
        var mx = m;
        for (var c = 0u; c < n; c = c + 1u) {
            let j = j0 + c;
            if (live && first <= j && j <= i) {
                s[c] = logit(s[c], slope, i, j);
                mx = max(mx, s[c]);
            }
        }
        var sum = 0.0;
        for (var c = 0u; c < n; c = c + 1u) {
            let j = j0 + c;
            var e = 0.0;
            if (live && first <= j && j <= i) { e = exp(s[c] - mx); }
            s[c] = e;
            sum = sum + e;
        }
        // Both are F32_LOWEST until the row sees a key: alpha is then 1 on l = 0 and o = 0.
        let alpha = exp(m - mx);
        l = fma(l, alpha, sum);
        m = mx;
        for (var ch = 0u; ch < CHUNKS; ch = ch + 1u) {
            let cc = c0 + ch;
            if (cc < chunks) {
                for (var e = lid; e < ROWS * CHUNK; e = e + ROWS) { tb[slot(e)] = qkv_value(b, h, 2u, j0, cc, e); }
                workgroupBarrier();
                let w = chunk_width(cc);
                if (live) {
                    for (var x = 0u; x < w; x = x + 1u) {
                        var acc = o[ch * CHUNK + x] * alpha;
                        for (var c = 0u; c < n; c = c + 1u) { acc = fma(s[c], tb[c * STRIDE + x], acc); }
                        o[ch * CHUNK + x] = acc;
                    }
                }
                workgroupBarrier();
            }
        }
    }
    if (live) {
        if (c0 == 0u) { lse[(b * p.h + h) * p.t + i] = m + log(l); }
        let inv = 1.0 / l;
        let at = (b * p.t + i) * p.h * p.dh + h * p.dh;
        for (var ch = 0u; ch < CHUNKS; ch = ch + 1u) {
            for (var x = 0u; x < CHUNK; x = x + 1u) {
                let d = (c0 + ch) * CHUNK + x;
                if (d < p.dh) { out[at + d] = o[ch * CHUNK + x] * inv; }
            }
        }
    }
}

// delta (B, H, T): dout_i · out_i per row, one thread per (batch, head, row).
@compute @workgroup_size(WG)
fn attention_backward_delta(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_index(gid, nwg);
    if (i >= p.b * p.h * p.t) { return; }
    let b = i / (p.t * p.h);
    let h = (i / p.t) % p.h;
    let t = i % p.t;
    let at = (b * p.t + t) * p.h * p.dh + h * p.dh;
    var acc = 0.0;
    for (var d = 0u; d < p.dh; d = d + 1u) { acc = acc + dout[at + d] * out_in[at + d]; }
    delta[i] = acc;
}

// dq of one query tile, a thread per query row: for each key tile it recomputes its row's
// P and dS, then adds dS·k into dq.
@compute @workgroup_size(ROWS)
fn attention_backward_query(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let tile = tile_of(wid, nwg);
    if (tile.x == NONE) { return; }
    let b = tile.x;
    let h = tile.y;
    let i0 = tile.z;
    let c0 = tile.w;
    let i = i0 + lid;
    let live = i < p.t;
    var first = 0u;
    var lse_i = 0.0;
    var delta_i = 0.0;
    if (live) {
        first = min(doc_start_in[b * p.t + i], i);
        lse_i = lse_in[(b * p.h + h) * p.t + i];
        delta_i = delta_in[(b * p.h + h) * p.t + i];
    }
    let end = min(i0 + ROWS, p.t);
    let slope = slope_of(h);
    let chunks = (p.dh + CHUNK - 1u) / CHUNK;
    // With a single chunk, q and dout are loaded once, and k stays in tb for dq.
    let once = chunks == 1u;
    if (once) {
        for (var e = lid; e < ROWS * CHUNK; e = e + ROWS) {
            ta[slot(e)] = qkv_in_value(b, h, 0u, i0, 0u, e);
            tc[slot(e)] = dout_value(b, h, i0, 0u, e);
        }
    }
    var dq: array<f32, COLUMNS>;
    var s: array<f32, ROWS>;   // logits, then dS
    var dp: array<f32, ROWS>;  // dout_i · v_j
    for (var j0 = tile_first_key_in(b, i0, end); j0 < end; j0 = j0 + ROWS) {
        let n = min(ROWS, end - j0);  // keys in this tile
        for (var c = 0u; c < n; c = c + 1u) {
            s[c] = 0.0;
            dp[c] = 0.0;
        }
        for (var ch = 0u; ch < chunks; ch = ch + 1u) {
            for (var e = lid; e < ROWS * CHUNK; e = e + ROWS) {
                if (!once) { tc[slot(e)] = dout_value(b, h, i0, ch, e); }
                tb[slot(e)] = qkv_in_value(b, h, 2u, j0, ch, e);
            }
            workgroupBarrier();
            let w = chunk_width(ch);
            if (live) {
                for (var c = 0u; c < n; c = c + 1u) {
                    var dot = dp[c];
                    for (var x = 0u; x < w; x = x + 1u) { dot = fma(tc[lid * STRIDE + x], tb[c * STRIDE + x], dot); }
                    dp[c] = dot;
                }
            }
            workgroupBarrier();
        }
        for (var ch = 0u; ch < chunks; ch = ch + 1u) {
            for (var e = lid; e < ROWS * CHUNK; e = e + ROWS) {
                if (!once) { ta[slot(e)] = qkv_in_value(b, h, 0u, i0, ch, e); }
                tb[slot(e)] = qkv_in_value(b, h, 1u, j0, ch, e);
            }
            workgroupBarrier();
            let w = chunk_width(ch);
            if (live) {
                for (var c = 0u; c < n; c = c + 1u) {
                    var dot = s[c];
                    for (var x = 0u; x < w; x = x + 1u) { dot = fma(ta[lid * STRIDE + x], tb[c * STRIDE + x], dot); }
                    s[c] = dot;
                }
            }
            workgroupBarrier();
        }
        for (var c = 0u; c < n; c = c + 1u) {
            let j = j0 + c;
            var ds = 0.0;
            if (live && first <= j && j <= i) {
                let pr = exp(logit(s[c], slope, i, j) - lse_i);
                ds = pr * (dp[c] - delta_i);
            }
            s[c] = ds;
        }
        for (var ch = 0u; ch < CHUNKS; ch = ch + 1u) {
            let cc = c0 + ch;
            if (cc < chunks) {
                if (!once) {
                    for (var e = lid; e < ROWS * CHUNK; e = e + ROWS) { tb[slot(e)] = qkv_in_value(b, h, 1u, j0, cc, e); }
                }
                workgroupBarrier();
                let w = chunk_width(cc);
                if (live) {
                    for (var x = 0u; x < w; x = x + 1u) {
                        var acc = dq[ch * CHUNK + x];
                        for (var c = 0u; c < n; c = c + 1u) { acc = fma(s[c], tb[c * STRIDE + x], acc); }
                        dq[ch * CHUNK + x] = acc;
                    }
                }
                workgroupBarrier();
            }
        }
    }
    if (live) {
        let at = qkv_at(b, i, h, 0u);
        for (var ch = 0u; ch < CHUNKS; ch = ch + 1u) {
            for (var x = 0u; x < CHUNK; x = x + 1u) {
                let d = (c0 + ch) * CHUNK + x;
                if (d < p.dh) { dqkv[at + d] = dq[ch * CHUNK + x] * p.scale; }
            }
        }
    }
}

// dk and dv of one key tile, a thread per key: for each query tile from the key tile's first
// key on it recomputes P and dS of its key with each query, then adds dS·q into dk and P·dout
// into dv.
@compute @workgroup_size(ROWS)
fn attention_backward_key(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let tile = tile_of(wid, nwg);
    if (tile.x == NONE) { return; }
    let b = tile.x;
    let h = tile.y;
    let j0 = tile.z;
    let c0 = tile.w;
    let j = j0 + lid;
    let key_live = j < p.t;
    let slope = slope_of(h);
    let chunks = (p.dh + CHUNK - 1u) / CHUNK;
    // With a single chunk, q and dout stay in ta and tc for dk and dv.
    let once = chunks == 1u;
    var dk: array<f32, COLUMNS>;
    var dv: array<f32, COLUMNS>;
    var s: array<f32, ROWS>;   // logits, then P
    var dp: array<f32, ROWS>;  // dout_i · v_j, then dS
    for (var i0 = j0; i0 < p.t; i0 = i0 + ROWS) {
        let n = min(ROWS, p.t - i0);  // queries in this tile
        for (var c = 0u; c < n; c = c + 1u) {
            s[c] = 0.0;
            dp[c] = 0.0;
        }
        for (var ch = 0u; ch < chunks; ch = ch + 1u) {
            for (var e = lid; e < ROWS * CHUNK; e = e + ROWS) {
                ta[slot(e)] = qkv_in_value(b, h, 0u, i0, ch, e);
                tb[slot(e)] = qkv_in_value(b, h, 1u, j0, ch, e);
            }
            workgroupBarrier();
            let w = chunk_width(ch);
            if (key_live) {
                for (var c = 0u; c < n; c = c + 1u) {
                    var dot = s[c];
                    for (var x = 0u; x < w; x = x + 1u) { dot = fma(ta[c * STRIDE + x], tb[lid * STRIDE + x], dot); }
                    s[c] = dot;
                }
            }
            workgroupBarrier();
        }
        for (var ch = 0u; ch < chunks; ch = ch + 1u) {
            for (var e = lid; e < ROWS * CHUNK; e = e + ROWS) {
                tc[slot(e)] = dout_value(b, h, i0, ch, e);
                tb[slot(e)] = qkv_in_value(b, h, 2u, j0, ch, e);
            }
            workgroupBarrier();
            let w = chunk_width(ch);
            if (key_live) {
                for (var c = 0u; c < n; c = c + 1u) {
                    var dot = dp[c];
                    for (var x = 0u; x < w; x = x + 1u) { dot = fma(tc[c * STRIDE + x], tb[lid * STRIDE + x], dot); }
                    dp[c] = dot;
                }
            }
            workgroupBarrier();
        }
        for (var c = 0u; c < n; c = c + 1u) {
            let i = i0 + c;
            var pr = 0.0;
            var ds = 0.0;
            if (key_live && i < p.t && j <= i && min(doc_start_in[b * p.t + i], i) <= j) {
                let row = (b * p.h + h) * p.t + i;
                pr = exp(logit(s[c], slope, i, j) - lse_in[row]);
                ds = pr * (dp[c] - delta_in[row]);
            }
            s[c] = pr;
            dp[c] = ds;
        }
        for (var ch = 0u; ch < CHUNKS; ch = ch + 1u) {
            let cc = c0 + ch;
            if (cc < chunks) {
                if (!once) {
                    for (var e = lid; e < ROWS * CHUNK; e = e + ROWS) {
                        ta[slot(e)] = qkv_in_value(b, h, 0u, i0, cc, e);
                        tc[slot(e)] = dout_value(b, h, i0, cc, e);
                    }
                }
                workgroupBarrier();
                let w = chunk_width(cc);
                if (key_live) {
                    for (var x = 0u; x < w; x = x + 1u) {
                        var acc_k = dk[ch * CHUNK + x];
                        var acc_v = dv[ch * CHUNK + x];
                        for (var c = 0u; c < n; c = c + 1u) {
                            acc_k = fma(dp[c], ta[c * STRIDE + x], acc_k);
                            acc_v = fma(s[c], tc[c * STRIDE + x], acc_v);
                        }
                        dk[ch * CHUNK + x] = acc_k;
                        dv[ch * CHUNK + x] = acc_v;
                    }
                }
                workgroupBarrier();
            }
        }
    }
    if (key_live) {
        let k_at = qkv_at(b, j, h, 1u);
        let v_at = qkv_at(b, j, h, 2u);
        for (var ch = 0u; ch < CHUNKS; ch = ch + 1u) {
            for (var x = 0u; x < CHUNK; x = x + 1u) {
                let d = (c0 + ch) * CHUNK + x;
                if (d < p.dh) {
                    dqkv[k_at + d] = dk[ch * CHUNK + x] * p.scale;
                    dqkv[v_at + d] = dv[ch * CHUNK + x];
                }
            }
        }
    }
}
