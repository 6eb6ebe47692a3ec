//! naga parses and validates every WGSL family, with the common prelude the loader prepends,
//! and the subgroup variant of the families that have one.

use naga::valid::{Capabilities, ShaderStages, SubgroupOperationSet, ValidationFlags, Validator};
use resmem_engine::shaders::{has_subgroup_section, source, FAMILIES, WITH_SUBGROUPS};

fn validate(name: &str, caps: Capabilities) -> naga::Module {
    let src = source(name);
    let module =
        naga::front::wgsl::parse_str(&src).unwrap_or_else(|e| panic!("{name}.wgsl: {}", e.emit_to_string(&src)));
    Validator::new(ValidationFlags::all(), caps)
        .subgroup_stages(ShaderStages::COMPUTE)
        .subgroup_operations(SubgroupOperationSet::all())
        .validate(&module)
        .unwrap_or_else(|e| panic!("{name}.wgsl does not validate: {e:?}"));
    module
}

#[test]
fn every_shader_parses_and_validates() {
    let mut variants = 0;
    for (name, _) in FAMILIES {
        // The plain source needs no capability: it is what browsers compile.
        let plain = validate(name, Capabilities::empty());
        if has_subgroup_section(name) {
            let full = validate(&format!("{name}{WITH_SUBGROUPS}"), Capabilities::SUBGROUP);
            assert!(
                full.entry_points.len() > plain.entry_points.len(),
                "{name}.wgsl's subgroup section adds no entry point"
            );
            variants += 1;
        }
    }
    assert!(has_subgroup_section("matmul") && variants >= 1);
}

#[test]
fn every_wgsl_file_is_registered() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shaders");
    for entry in std::fs::read_dir(dir).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        let stem = name.trim_end_matches(".wgsl");
        assert!(
            stem == "common" || FAMILIES.iter().any(|(n, _)| *n == stem),
            "shaders/{name} is not in engine::shaders::FAMILIES, so nothing loads or validates it"
        );
    }
}
