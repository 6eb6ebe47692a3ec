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
        "attention" => ops::attention::KERNELS.iter().map(|k| k.switches()).collect(),
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

fn caps(defines: &[Define]) -> Capabilities {
    match defines.contains(&Define::bool(SUBGROUPS, true)) {
        true => Capabilities::SUBGROUP,
        false => Capabilities::empty(),
    }
}

#[test]
fn every_shader_parses_and_validates() {
    let mut variants = 0;
    for s in SHADERS {
        // The plain source needs no capability: it is what browsers compile.
        let plain = validate(s, &[], Capabilities::empty());
        for on in flipped(s) {
            if on.name == SUBGROUPS {
                let full = validate(s, &[on], Capabilities::SUBGROUP);
                assert!(
                    full.entry_points.len() > plain.entry_points.len(),
                    "{}.wgsl's subgroup section adds no entry point",
                    s.name
                );
            } else {
                validate(s, &[on], Capabilities::empty());
            }
            variants += 1;
        }
        for defines in candidates(s) {
            validate(s, &defines, caps(&defines));
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
            let module = validate(s, &defines, caps(&defines));
            for d in COMMON.iter().chain(s.constants).chain(&s.variant(&defines)) {
                let want = match d.value {
                    Value::U32(v) => naga::Literal::U32(v),
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
        assert!(
            stem == "common" || SHADERS.iter().any(|s| s.name == stem),
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
    let files = SHADERS
        .iter()
        .map(|s| (s.name, s.body))
        .chain([("common", COMMON_WGSL)]);
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
        let module = validate(shader_or_common(name), &[], Capabilities::empty());
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
    assert!(
        loops > 200,
        "only {loops} loops found: is the scan reading the shaders?"
    );
}

fn shader_or_common(name: &str) -> &'static Shader {
    // common.wgsl is in every family's source: matmul's stands for it.
    shader(if name == "common" { "matmul" } else { name })
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
