//! naga parses and validates every WGSL family, with the common prelude the loader prepends.

#[test]
fn every_shader_parses_and_validates() {
    for (name, _) in resmem_engine::shaders::FAMILIES {
        let src = resmem_engine::shaders::source(name);
        let module =
            naga::front::wgsl::parse_str(&src).unwrap_or_else(|e| panic!("{name}.wgsl: {}", e.emit_to_string(&src)));
        naga::valid::Validator::new(naga::valid::ValidationFlags::all(), naga::valid::Capabilities::empty())
            .validate(&module)
            .unwrap_or_else(|e| panic!("{name}.wgsl does not validate: {e:?}"));
    }
}

#[test]
fn every_wgsl_file_is_registered() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shaders");
    for entry in std::fs::read_dir(dir).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        let stem = name.trim_end_matches(".wgsl");
        assert!(
            stem == "common" || resmem_engine::shaders::FAMILIES.iter().any(|(n, _)| *n == stem),
            "shaders/{name} is not in engine::shaders::FAMILIES, so nothing loads or validates it"
        );
    }
}
