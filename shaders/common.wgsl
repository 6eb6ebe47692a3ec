// Shared by every op family; the loader prepends this file once (crates/engine/src/shaders.rs),
// after the defines generated from Rust: WG, SUM_COLS, SUM_LANES here, and each family's own.
//
// Conventions: binding 0 is the op's uniform `p`; storage bindings follow from 1 in the op's
// argument order (outputs, saved statistics, inputs, weights). 1-D launches use WG threads per
// workgroup on a grid folded into 2-D past 65 535 workgroups; `flat_index` unfolds it.

fn flat_index(gid: vec3<u32>, nwg: vec3<u32>) -> u32 {
    return gid.x + gid.y * nwg.x * WG;
}

fn flat_group(wid: vec3<u32>, nwg: vec3<u32>) -> u32 {
    return wid.x + wid.y * nwg.x;
}

// Column sums over many rows, deterministic and short: a workgroup of WG threads takes
// SUM_COLS columns; thread `lid` adds up column lid % SUM_COLS over every SUM_LANES-th row from
// row lid / SUM_COLS (the caller's loop), then `column_total` adds each column's SUM_LANES
// partial sums in a fixed tree. A chain of rows / SUM_LANES additions, not of rows: at
// GPT-2-small's 8,192 rows a serial column sum is what held a step up.
var<workgroup> column_partials: array<f32, WG>;

// Every thread passes its partial sum; the threads of lane 0 (lid < SUM_COLS) get their
// column's total. Call from uniform control flow: it holds barriers.
fn column_total(lid: u32, partial: f32) -> f32 {
    column_partials[lid] = partial;
    workgroupBarrier();
    for (var s = SUM_LANES / 2u; s > 0u; s = s >> 1u) {
        if (lid / SUM_COLS < s) { column_partials[lid] = column_partials[lid] + column_partials[lid + s * SUM_COLS]; }
        workgroupBarrier();
    }
    return column_partials[lid % SUM_COLS];
}

// The most negative f32, written exactly: Chrome's compiler rejects a decimal that rounds past it.
const F32_LOWEST: f32 = -0x1.fffffep+127f;
