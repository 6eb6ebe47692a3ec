//! naga parses and validates every WGSL family as the loader builds it (the defines generated
//! from Rust, the common prelude, the family's file), in its default variant and with each of
//! its switches set; and every define reaches WGSL with its exact value.

use naga::valid::{Capabilities, ShaderStages, SubgroupOperationSet, ValidationFlags, Validator};
use resmem_engine::ops;
use resmem_engine::shaders::{shader, Define, Shader, Value, COMMON, SHADERS, SUBGROUPS};

fn validate(s: &Shader, defines: &[Define], caps: Capabilities) -> naga::Module {
    let name = format!("{}.wgsl {defines:?}", s.name);
    let src = s.source(defines);
    let module = naga::front::wgsl::parse_str(&src).unwrap_or_else(|e| panic!("{name}: {}", e.emit_to_string(&src)));
    Validator::new(ValidationFlags::all(), caps)
        .subgroup_stages(ShaderStages::COMPUTE)
        .subgroup_operations(SubgroupOperationSet::all())
        .validate(&module)
        .unwrap_or_else(|e| panic!("{name} does not validate: {e:?}"));
    module
}

/// Each bool switch of a shader set the other way from its default.
fn flipped(s: &Shader) -> impl Iterator<Item = Define> + '_ {
    s.switches.iter().filter_map(|d| match d.value {
        Value::Bool(on) => Some(Define::bool(d.name, !on)),
        _ => None,
    })
}

/// The variants the ops launch beside the default and the flipped switches: every tuning
/// candidate's.
fn candidates(s: &Shader) -> Vec<Vec<Define>> {
    match s.name {
        "matmul" => ops::matmul::TILES.iter().map(|t| t.defines().to_vec()).collect(),
        "attention" | "attention_blocked" => (ops::attention::KERNELS.iter())
            .filter(|k| k.shader() == s.name)
            .map(|k| k.switches())
            .collect(),
        "matmul_fast" => (ops::matmul::FAST_TILES.iter())
            .flat_map(|t| [t.defines(true).to_vec(), t.defines(false).to_vec()])
            .collect(),
        "attention_fast" => [true, false].into_iter().flat_map(fast_attention_variants).collect(),
        _ => {
            let numbers: Vec<_> = s
                .switches
                .iter()
                .filter(|d| !matches!(d.value, Value::Bool(_)))
                .collect();
            assert!(
                numbers.is_empty(),
                "{}.wgsl: list the values its switches {numbers:?} take here",
                s.name
            );
            vec![]
        }
    }
}

/// The fast attention's variants: every head dimension it takes, with the cooperative built-ins
/// or their emulation.
fn fast_attention_variants(coop: bool) -> Vec<Vec<Define>> {
    use ops::attention::fast::{fast_variant, FAST_MAX_DH, FAST_OWNS};
    let dhs = (16..=FAST_MAX_DH).step_by(16);
    dhs.flat_map(|dh| FAST_OWNS.map(|own| fast_variant(dh, own, coop).to_vec()))
        .collect()
}

/// The fast families' variants on cooperative matrices, as a GPU that has them compiles them.
fn cooperative_variants(s: &Shader) -> Vec<Vec<Define>> {
    match s.name {
        "matmul_fast" => ops::matmul::FAST_TILES
            .iter()
            .map(|t| t.defines(true).to_vec())
            .collect(),
        "attention_fast" => fast_attention_variants(true),
        _ => vec![],
    }
}

/// The families with a cooperative-matrix path.
const FAST_FAMILIES: [&str; 2] = ["matmul_fast", "attention_fast"];

fn caps(defines: &[Define]) -> Capabilities {
    match defines.contains(&Define::bool(SUBGROUPS, true)) {
        true => Capabilities::SUBGROUP,
        false => Capabilities::empty(),
    }
}

/// What a family needs beside the switches' capabilities: the fast families are native only,
/// f16 always, cooperative matrices unless they are emulated. Every other family compiles in a
/// browser with none.
fn family_caps(s: &Shader, defines: &[Define]) -> Capabilities {
    let fast = Capabilities::SHADER_FLOAT16;
    if !FAST_FAMILIES.contains(&s.name) {
        return Capabilities::empty();
    }
    match s.variant(defines).contains(&Define::bool(ops::matmul::COOP, true)) {
        true => fast | Capabilities::COOPERATIVE_MATRIX,
        false => fast,
    }
}

#[test]
fn every_shader_parses_and_validates() {
    let mut variants = 0;
    for s in SHADERS {
        // The plain source needs no capability but the native-only families': it is what
        // browsers compile.
        let plain = validate(s, &[], family_caps(s, &[]));
        for on in flipped(s) {
            if on.name == SUBGROUPS {
                let full = validate(s, &[on], Capabilities::SUBGROUP);
                assert!(
                    full.entry_points.len() > plain.entry_points.len(),
                    "{}.wgsl's subgroup section adds no entry point",
                    s.name
                );
            } else {
                validate(s, &[on], family_caps(s, &[on]));
            }
            variants += 1;
        }
        for defines in candidates(s) {
            validate(s, &defines, caps(&defines) | family_caps(s, &defines));
            variants += 1;
        }
    }
    assert!(shader("matmul").switches.iter().any(|d| d.name == SUBGROUPS) && variants >= 1);
}

/// The value naga reads for the module constant `name`.
fn constant(module: &naga::Module, name: &str) -> Option<naga::Literal> {
    let (_, c) = module.constants.iter().find(|(_, c)| c.name.as_deref() == Some(name))?;
    match module.global_expressions[c.init] {
        naga::Expression::Literal(l) => Some(l),
        ref e => panic!("{name} is {e:?}"),
    }
}

#[test]
fn every_define_reaches_wgsl_with_its_value() {
    for s in SHADERS {
        let defaults = s.switches.to_vec();
        let mut cases = vec![defaults];
        cases.extend(flipped(s).map(|on| vec![on]));
        cases.extend(candidates(s));
        for defines in cases {
            let module = validate(s, &defines, caps(&defines) | family_caps(s, &defines));
            for d in COMMON.iter().chain(s.constants).chain(&s.variant(&defines)) {
                let want = match d.value {
                    Value::U32(v) => naga::Literal::U32(v),
                    Value::I32(v) => naga::Literal::I32(v),
                    Value::F32(bits) => naga::Literal::F32(f32::from_bits(bits)),
                    Value::Bool(v) => naga::Literal::Bool(v),
                };
                let got = constant(&module, d.name);
                let same = match (got, want) {
                    (Some(naga::Literal::F32(a)), naga::Literal::F32(b)) => a.to_bits() == b.to_bits(),
                    (got, want) => got == Some(want),
                };
                assert!(same, "{}.wgsl: {} is {got:?} in WGSL, {want:?} in Rust", s.name, d.name);
            }
        }
    }
}

#[test]
fn every_wgsl_file_is_registered() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shaders");
    for entry in std::fs::read_dir(dir).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        let stem = name.trim_end_matches(".wgsl");
        let prelude = SHADERS.iter().any(|s| s.prelude.is_some_and(|(name, _)| name == stem));
        assert!(
            stem == "common" || prelude || SHADERS.iter().any(|s| s.name == stem),
            "shaders/{name} is not in engine::shaders::SHADERS, so nothing loads or validates it"
        );
    }
}

/// Loops whose step is not a constant, each with why it advances.
const STEPS_THAT_ADVANCE: &[(&str, &str)] = &[
    // g = clamp(subgroup size, 1, TX) in lanes_of.
    ("matmul", "c = c + l.g"),
];

/// The GPU backend compiles the shaders without wgpu's loop guards (`GpuOptions::loop_guards`),
/// so every loop must end by its own bounds: each is a `for` that counts up by a positive
/// constant while below a bound, halves to 0 or counts down to 1. u32 values here never come
/// near 2^32, so a count up does not wrap past its bound.
#[test]
fn every_loop_ends_by_its_bounds() {
    use resmem_engine::shaders::COMMON_WGSL;
    let mut files: Vec<(&str, &str)> = SHADERS.iter().map(|s| (s.name, s.body)).collect();
    files.push(("common", COMMON_WGSL));
    files.extend(SHADERS.iter().filter_map(|s| s.prelude));
    files.dedup();
    let mut loops = 0;
    for (name, body) in files {
        let code: String = body
            .lines()
            .map(|l| l.split("//").next().unwrap_or(""))
            .collect::<Vec<_>>()
            .join("\n");
        let words: Vec<&str> = code.split(|c: char| !(c.is_alphanumeric() || c == '_')).collect();
        assert!(
            !words.contains(&"loop") && !words.contains(&"while"),
            "{name}.wgsl: a `loop` or `while`; write loops as `for` with a bound"
        );
        let family = shader_or_common(name);
        let module = validate(family, &[], family_caps(family, &[]));
        for (at, _) in code.match_indices("for (") {
            let rest = &code[at + 5..];
            let mut depth = 0;
            let end = rest
                .find(|c| {
                    depth += (c == '(') as i32 - (c == ')') as i32;
                    depth < 0
                })
                .expect("a for header ends");
            let header = &rest[..end];
            let parts: Vec<&str> = header.split(';').map(str::trim).collect();
            assert_eq!(parts.len(), 3, "{name}.wgsl: `for ({header})`");
            let (cond, step) = (parts[1], parts[2]);
            loops += 1;
            if STEPS_THAT_ADVANCE.contains(&(name, step)) {
                continue;
            }
            let ends = match step.split_whitespace().collect::<Vec<_>>()[..] {
                [v, "=", w, "+", ref by @ ..] if v == w => {
                    let below = cond.contains(" < ") || cond.contains(" <= ");
                    positive(&module, &by.join(" ")) && cond.split_whitespace().next() == Some(v) && below
                }
                [v, "=", w, ">>", "1u"] if v == w => cond == format!("{v} > 0u"),
                [v, "=", w, "-", "1u"] if v == w => cond == format!("{v} >= 1u") || cond == format!("{v} > 0u"),
                _ => false,
            };
            assert!(
                ends,
                "{name}.wgsl: `for ({header})` is not a loop that ends by its bounds"
            );
        }
    }
    // 199 when the tiled attention kernels were retired: far more than a scan that missed files.
    assert!(
        loops > 150,
        "only {loops} loops found: is the scan reading the shaders?"
    );
}

fn shader_or_common(name: &str) -> &'static Shader {
    // common.wgsl is in every family's source, and a prelude in its families': matmul's stands
    // for both.
    match SHADERS.iter().find(|s| s.name == name) {
        Some(s) => s,
        None => shader("matmul"),
    }
}

/// Whether `expr` (factors of u32 literals and module constants, joined by `*`) is above 0.
fn positive(module: &naga::Module, expr: &str) -> bool {
    expr.split('*')
        .map(str::trim)
        .all(|f| match f.strip_suffix('u').and_then(|n| n.parse::<u32>().ok()) {
            Some(n) => n > 0,
            None => matches!(constant(module, f), Some(naga::Literal::U32(n)) if n > 0),
        })
}

/// The fast families' cooperative variants as the GPU backend would compile them: validated with
/// the capabilities wgpu grants on Vulkan, written to SPIR-V (naga 30.0.1 panics there, not in
/// validation, on a `coopStore` whose pointer index or stride is an inline expression), and
/// holding only the cooperative types NVIDIA and AMD list: 16×16 f16 A and B, 16×16 f32 C
/// (naga checks neither the element types nor the shapes, and an f32 pointer silently makes an
/// f32 tile).
#[test]
fn the_fast_kernels_compile_to_spirv_with_the_tiles_devices_list() {
    use naga::{CooperativeRole, CooperativeSize, Scalar, TypeInner};
    let variants = FAST_FAMILIES.map(|name| (shader(name), cooperative_variants(shader(name))));
    for (s, defines) in variants.iter().flat_map(|(s, v)| v.iter().map(move |d| (*s, d))) {
        assert!(!defines.is_empty());
        let caps = family_caps(s, defines);
        let module = validate(s, defines, caps);
        let info = Validator::new(ValidationFlags::all(), caps)
            .validate(&module)
            .expect("validated above");
        let options = naga::back::spv::Options {
            lang_version: (1, 3),
            ..Default::default()
        };
        let words = naga::back::spv::write_vec(&module, &info, &options, None)
            .unwrap_or_else(|e| panic!("{} {defines:?} does not write SPIR-V: {e}", s.name));
        // OpCapability CooperativeMatrixKHR (6022) is declared.
        let declared = words.windows(2).any(|w| w[0] == (2 << 16 | 17) && w[1] == 6022);
        assert!(
            declared,
            "{defines:?}: no CooperativeMatrixKHR capability in the SPIR-V"
        );
        let mut seen = vec![];
        for (_, ty) in module.types.iter() {
            if let TypeInner::CooperativeMatrix {
                columns,
                rows,
                scalar,
                role,
            } = ty.inner
            {
                let ok = columns == CooperativeSize::Sixteen
                    && rows == CooperativeSize::Sixteen
                    && match role {
                        CooperativeRole::A | CooperativeRole::B => scalar == Scalar::F16,
                        CooperativeRole::C => scalar == Scalar::F32,
                    };
                assert!(ok, "{defines:?}: a cooperative type no device lists: {:?}", ty.inner);
                seen.push(role);
            }
        }
        for role in [CooperativeRole::A, CooperativeRole::B, CooperativeRole::C] {
            assert!(seen.contains(&role), "{defines:?}: no {role:?} tile");
        }
    }
}

/// The emulated variants, which lavapipe runs in tests/gpu_vs_cpu.rs, use no cooperative
/// matrix at all, and the cooperative ones no emulation: the switch selects the whole path.
#[test]
fn the_emulated_fast_kernels_have_no_cooperative_types() {
    for name in FAST_FAMILIES {
        let s = shader(name);
        let off = [Define::bool(ops::matmul::COOP, false)];
        let emulated = validate(s, &off, Capabilities::SHADER_FLOAT16);
        let coop =
            (emulated.types.iter()).filter(|(_, t)| matches!(t.inner, naga::TypeInner::CooperativeMatrix { .. }));
        assert_eq!(coop.count(), 0, "{name}");
        assert!(!s.source(&off).contains("wgpu_cooperative_matrix"), "{name}");
        assert!(
            s.source(&[])
                .starts_with("enable f16;\nenable wgpu_cooperative_matrix;\n"),
            "{name}"
        );
    }
}
