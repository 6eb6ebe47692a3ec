//! The WGSL sources in `shaders/`, one file per op family. `common.wgsl` holds the helpers every
//! family shares; it is prepended here, once, instead of being copied into each file.

/// `common.wgsl`: shared constants and helpers.
pub const COMMON: &str = include_str!("../../../shaders/common.wgsl");

/// Every op family's shader: (name, source without the common prelude).
pub const FAMILIES: &[(&str, &str)] = &[
    ("elementwise", include_str!("../../../shaders/elementwise.wgsl")),
    ("matmul", include_str!("../../../shaders/matmul.wgsl")),
    ("embedding", include_str!("../../../shaders/embedding.wgsl")),
    ("norm", include_str!("../../../shaders/norm.wgsl")),
    ("attention", include_str!("../../../shaders/attention.wgsl")),
    ("cross_entropy", include_str!("../../../shaders/cross_entropy.wgsl")),
    ("optim", include_str!("../../../shaders/optim.wgsl")),
    ("residual_matrix", include_str!("../../../shaders/residual_matrix.wgsl")),
    ("memory", include_str!("../../../shaders/memory.wgsl")),
];

/// The full source of one family: the common prelude, then the family's file.
pub fn source(family: &str) -> String {
    let (_, body) = FAMILIES
        .iter()
        .find(|(name, _)| *name == family)
        .unwrap_or_else(|| panic!("no shader family named {family}"));
    format!("{COMMON}\n{body}")
}
