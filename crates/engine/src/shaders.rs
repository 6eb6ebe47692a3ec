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

/// The line that opens the last section of a family's file, compiled only on devices with
/// subgroups: entry points that use WGSL's subgroup built-ins.
pub const SUBGROUP_SECTION: &str = "// @subgroups";

/// Appended to a family's name, asks for the source with its subgroup section.
pub const WITH_SUBGROUPS: &str = "+subgroups";

/// The full source of one family: the common prelude, then the family's file up to its subgroup
/// section; for `family` + [`WITH_SUBGROUPS`], the prelude and all of the file. That source has
/// no `enable subgroups;`: naga 30 takes the built-ins without it and rejects the directive,
/// and wgpu 30 offers subgroups only natively, where naga compiles every shader.
pub fn source(family: &str) -> String {
    let (base, subgroups) = match family.strip_suffix(WITH_SUBGROUPS) {
        Some(base) => (base, true),
        None => (family, false),
    };
    let (_, body) = FAMILIES
        .iter()
        .find(|(name, _)| *name == base)
        .unwrap_or_else(|| panic!("no shader family named {base}"));
    let marker = format!("\n{SUBGROUP_SECTION}\n");
    match (subgroups, body.find(&marker)) {
        (true, Some(_)) => format!("{COMMON}\n{body}"),
        (true, None) => panic!("shaders/{base}.wgsl has no subgroup section"),
        (false, Some(end)) => format!("{COMMON}\n{}", &body[..end + 1]),
        (false, None) => format!("{COMMON}\n{body}"),
    }
}

/// Whether a family's file has a subgroup section.
pub fn has_subgroup_section(family: &str) -> bool {
    FAMILIES
        .iter()
        .any(|(name, body)| *name == family && body.contains(&format!("\n{SUBGROUP_SECTION}\n")))
}
