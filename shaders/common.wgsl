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

// The workgroup reduction, the one fixed tree every family uses: each of the WG threads passes
// a value, and the values `width` apart (threads c, c + width, c + 2·width, … for each column
// c < width) are combined pairwise, the upper half of the lanes into the lower at each step, so
// each column's result is one fixed order of additions (or maxima). Every thread gets its
// column's result, lid % width; width is a power of two at most WG, 1 for the whole workgroup.
// Call from uniform control flow: it holds barriers.
var<workgroup> tree: array<f32, WG>;

fn workgroup_tree(lid: u32, v: f32, width: u32, take_max: bool) -> f32 {
    tree[lid] = v;
    workgroupBarrier();
    for (var s = WG / width / 2u; s > 0u; s = s >> 1u) {
        if (lid / width < s) {
            let other = tree[lid + s * width];
            if (take_max) { tree[lid] = max(tree[lid], other); } else { tree[lid] = tree[lid] + other; }
        }
        workgroupBarrier();
    }
    let r = tree[lid % width];
    workgroupBarrier();
    return r;
}

// The sum of one value per thread over the workgroup; every thread gets it.
fn workgroup_sum(lid: u32, v: f32) -> f32 {
    return workgroup_tree(lid, v, 1u, false);
}

fn workgroup_max(lid: u32, v: f32) -> f32 {
    return workgroup_tree(lid, v, 1u, true);
}

// Column sums over many rows, deterministic and short: a workgroup of WG threads takes
// SUM_COLS columns; thread `lid` adds up column lid % SUM_COLS over every SUM_LANES-th row from
// row lid / SUM_COLS (the caller's loop), then passes its partial sum here, which adds each
// column's SUM_LANES partial sums in the tree (SUM_LANES = WG / SUM_COLS). A chain of
// rows / SUM_LANES additions, not of rows: at GPT-2-small's 8,192 rows a serial column sum is
// what held a step up. The threads of lane 0 (lid < SUM_COLS) get their column's total.
fn column_total(lid: u32, partial: f32) -> f32 {
    return workgroup_tree(lid, partial, SUM_COLS, false);
}

// The most negative f32, written exactly: Chrome's compiler rejects a decimal that rounds past it.
const F32_LOWEST: f32 = -0x1.fffffep+127f;
