// Shared by every op family; the loader prepends this file once (crates/engine/src/shaders.rs).
//
// Conventions: binding 0 is the op's uniform `p`; storage bindings follow from 1 in the op's
// argument order (outputs, saved statistics, inputs, weights). 1-D launches use 256 threads per
// workgroup on a grid folded into 2-D past 65 535 workgroups; `flat_index` unfolds it.

const WG: u32 = 256u;

fn flat_index(gid: vec3<u32>, nwg: vec3<u32>) -> u32 {
    return gid.x + gid.y * nwg.x * WG;
}

fn flat_group(wid: vec3<u32>, nwg: vec3<u32>) -> u32 {
    return wid.x + wid.y * nwg.x;
}

// The most negative f32, written exactly: Chrome's compiler rejects a decimal that rounds past it.
const F32_LOWEST: f32 = -0x1.fffffep+127f;
