//! The WGSL sources in `shaders/`, one file per op family, and what reaches the device of each.
//!
//! A shader's source is built here, in three parts:
//!
//! 1. **Defines**, generated from Rust: one `const NAME: TYPE = VALUE;` line for every value a
//!    kernel shares with its host code (tile sizes, the workgroup size, the ignore index, AdamW's
//!    slots…). Each is declared once, in Rust, next to the code that uses it ([`COMMON`] here for
//!    what every family reads, the family's `ops/<family>.rs` for the rest), and listed in
//!    [`SHADERS`]; no WGSL file may write the value again.
//! 2. `common.wgsl`, the helpers every family shares, once instead of in each file.
//! 3. The family's file, after its prelude where it has one (a file two families share: the
//!    strict and fast matmuls' operands, `matmul_operands.wgsl`), with its `#if NAME` … `#else`
//!    … `#endif` sections resolved by the variant's **switches**: bool defines a launch may set
//!    ([`Shader::switches`], off unless set). A switch selects code that differs in bindings,
//!    built-ins or entry points, which a plain `if` on a `const` cannot: the subgroup matmul
//!    ([`SUBGROUPS`]), the RMT's fused norm (`NORMED`), the fast matmul's cooperative built-ins
//!    (`COOP`). Its value is emitted as a `const` too. `enable` directives, which WGSL wants
//!    before any declaration, move to the top.
//!
//! The GPU context compiles one module per (shader, defines) and keys its pipelines by
//! (shader, entry point, defines), the defines being the variant's switches in the canonical form
//! [`Shader::variant`] gives; the constants every variant shares are part of the shader.

use crate::ops;

/// Threads of every 1-D workgroup (`WG` in WGSL): `grid_1d(n, WG)` launches n threads; the
/// workgroup reductions of `common.wgsl` reduce this many values.
pub const WG: usize = 256;

/// Columns a workgroup sums in `column_total` (`SUM_COLS` in WGSL): column sums over rows
/// launch one workgroup per this many columns, each column summed by `WG / SUM_COLS` lanes.
pub const SUM_COLS: usize = 16;

// The workgroup reductions halve their lanes down to one.
const _: () = assert!(WG.is_power_of_two() && SUM_COLS.is_power_of_two() && SUM_COLS <= WG);

/// The switch of families with subgroup entry points (matmul): set where the device was created
/// with subgroups. Its sections use WGSL's subgroup built-ins, which naga 30 takes without
/// `enable subgroups;` (it rejects the directive), and wgpu 30 offers subgroups only natively,
/// where naga compiles every shader.
pub const SUBGROUPS: &str = "SUBGROUPS";

/// A value declared in Rust that a shader reads as a WGSL `const` of the same name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Define {
    pub name: &'static str,
    pub value: Value,
}

/// A define's value. An f32 is kept as its bits, so that defines can be compared and hashed
/// (the pipeline cache's key).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Value {
    U32(u32),
    I32(i32),
    F32(u32),
    Bool(bool),
}

impl Define {
    pub const fn u32(name: &'static str, value: u32) -> Self {
        Self {
            name,
            value: Value::U32(value),
        }
    }
    pub const fn i32(name: &'static str, value: i32) -> Self {
        Self {
            name,
            value: Value::I32(value),
        }
    }
    pub const fn f32(name: &'static str, value: f32) -> Self {
        Self {
            name,
            value: Value::F32(value.to_bits()),
        }
    }
    pub const fn bool(name: &'static str, value: bool) -> Self {
        Self {
            name,
            value: Value::Bool(value),
        }
    }

    /// The WGSL line: `const NAME: TYPE = VALUE;`. An f32 is written in its shortest decimal
    /// form with the `f` suffix, which parses back to the same bits.
    pub fn wgsl(&self) -> String {
        let name = self.name;
        match self.value {
            Value::U32(v) => format!("const {name}: u32 = {v}u;"),
            Value::I32(v) => format!("const {name}: i32 = {v}i;"),
            Value::F32(bits) => {
                let v = f32::from_bits(bits);
                assert!(v.is_finite(), "define {name}: WGSL has no literal for {v}");
                format!("const {name}: f32 = {v:?}f;")
            }
            Value::Bool(v) => format!("const {name}: bool = {v};"),
        }
    }

    fn same_kind(&self, other: &Define) -> bool {
        std::mem::discriminant(&self.value) == std::mem::discriminant(&other.value)
    }
}

/// One op family's shader.
#[derive(Debug)]
pub struct Shader {
    /// The family, `shaders/NAME.wgsl`.
    pub name: &'static str,
    /// The file as written, without the prelude.
    pub body: &'static str,
    /// What the family reads from Rust beside [`COMMON`]: the same in every variant.
    pub constants: &'static [Define],
    /// What a launch may set, with the defaults it has otherwise. Bool switches select the
    /// file's `#if NAME` sections.
    pub switches: &'static [Define],
    /// A file the family shares with another, put before its own: (name, text). The two matmul
    /// families share their operands' bindings and reads (`matmul_operands.wgsl`).
    pub prelude: Option<(&'static str, &'static str)>,
}

/// What every family reads from Rust.
pub const COMMON: &[Define] = &[
    Define::u32("WG", WG as u32),
    Define::u32("SUM_COLS", SUM_COLS as u32),
    Define::u32("SUM_LANES", (WG / SUM_COLS) as u32),
];

/// `common.wgsl`: shared helpers, prepended to every family once.
pub const COMMON_WGSL: &str = include_str!("../../../shaders/common.wgsl");

/// A family's [`Shader`], its body read from `shaders/NAME.wgsl`.
macro_rules! family {
    ($name:literal, $constants:expr, $switches:expr) => {
        Shader {
            name: $name,
            body: include_str!(concat!("../../../shaders/", $name, ".wgsl")),
            constants: $constants,
            switches: $switches,
            prelude: None,
        }
    };
    ($name:literal, $constants:expr, $switches:expr, prelude $prelude:literal) => {
        Shader {
            prelude: Some(($prelude, include_str!(concat!("../../../shaders/", $prelude, ".wgsl")))),
            ..family!($name, $constants, $switches)
        }
    };
}

/// Every op family's shader.
pub const SHADERS: &[Shader] = &[
    family!("elementwise", ops::elementwise::DEFINES, &[]),
    family!("matmul", ops::matmul::DEFINES, ops::matmul::SWITCHES, prelude "matmul_operands"),
    family!("embedding", &[], &[]),
    family!("gather", &[], &[]),
    family!("norm", ops::norm::DEFINES, &[]),
    family!("attention", ops::attention::DEFINES, &[], prelude "attention_common"),
    family!(
        "attention_blocked",
        ops::attention::BLOCKED_DEFINES,
        ops::attention::SWITCHES,
        prelude "attention_common"
    ),
    family!("cross_entropy", ops::cross_entropy::DEFINES, &[]),
    family!("optim", ops::optim::DEFINES, &[]),
    family!(
        "residual_matrix",
        ops::residual_matrix::DEFINES,
        &[Define::bool(ops::residual_matrix::NORMED, false)]
    ),
    family!("memory", &[], &[]),
    family!("hyper", ops::hyper::DEFINES, &[]),
    family!("depth", ops::depth::DEFINES, &[]),
    family!("matmul_fast", ops::matmul::FAST_DEFINES, ops::matmul::FAST_SWITCHES, prelude "matmul_operands"),
    family!("fast_scale", ops::matmul::SCALE_DEFINES, &[]),
    family!(
        "attention_fast",
        ops::attention::fast::FAST_DEFINES,
        ops::attention::fast::FAST_SWITCHES
    ),
];

/// A digest of every kernel's source as built (defines, common helpers, each family's file): what
/// the tuned choices of an adapter hold for, so that a changed kernel is measured again.
pub fn digest() -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(COMMON_WGSL.as_bytes());
    for s in SHADERS {
        h.update(s.name.as_bytes());
        h.update(s.prelude.map_or("", |(_, text)| text).as_bytes());
        h.update(s.body.as_bytes());
        for d in s.constants.iter().chain(s.switches) {
            h.update(d.wgsl().as_bytes());
        }
    }
    h.finalize()
}

/// The shader of family `name`.
pub fn shader(name: &str) -> &'static Shader {
    SHADERS
        .iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("no shader family named {name}"))
}

/// The full source of one variant of family `name`: see [`Shader::source`].
pub fn source(name: &str, defines: &[Define]) -> String {
    shader(name).source(defines)
}

impl Shader {
    /// Every switch with its value in the variant `defines` asks for (its default where it asks
    /// nothing), in the order of [`Self::switches`]: one variant has one form, whatever order or
    /// defaults a launch names, so it is compiled once. Panics on a define that is not one of the
    /// shader's switches, or of another type.
    pub fn variant(&self, defines: &[Define]) -> Vec<Define> {
        for d in defines {
            assert!(
                self.switches.iter().any(|s| s.name == d.name && s.same_kind(d)),
                "shaders/{}.wgsl has no switch {d:?}",
                self.name
            );
        }
        (self.switches.iter())
            .map(|s| *defines.iter().rev().find(|d| d.name == s.name).unwrap_or(s))
            .collect()
    }

    /// The WGSL of one variant: the family's `enable` directives (which WGSL wants before any
    /// declaration), the defines (common, the family's, the switches) as `const` lines,
    /// `common.wgsl`, the prelude, then the rest of the family's file, each with its `#if`
    /// sections resolved.
    pub fn source(&self, defines: &[Define]) -> String {
        self.source_with(defines, &[])
    }

    /// [`Self::source`] with each constant that `overrides` names replaced by its value there.
    pub fn source_with(&self, defines: &[Define], overrides: &[Define]) -> String {
        let switches = self.variant(defines);
        let mut body = String::new();
        if let Some((name, text)) = self.prelude {
            preprocess(name, text, &switches, &mut body);
            body.push('\n');
        }
        preprocess(self.name, self.body, &switches, &mut body);
        let (enables, body): (Vec<&str>, Vec<&str>) = body.lines().partition(|l| l.starts_with("enable "));
        let mut out = String::new();
        for line in enables {
            out.push_str(line);
            out.push('\n');
        }
        out.push_str("// Defines, generated from Rust (crates/engine/src/shaders.rs).\n");
        for d in COMMON.iter().chain(self.constants).chain(&switches) {
            let d = overrides
                .iter()
                .find(|o| o.name == d.name && o.same_kind(d))
                .unwrap_or(d);
            out.push_str(&d.wgsl());
            out.push('\n');
        }
        out.push('\n');
        preprocess("common", COMMON_WGSL, &switches, &mut out);
        out.push('\n');
        for line in body {
            out.push_str(line);
            out.push('\n');
        }
        out
    }
}

/// Copies `text` into `out`, keeping the lines of the `#if NAME` (bool switch NAME set),
/// `#else` and `#endif` sections that apply and dropping the directives. Sections nest.
fn preprocess(file: &str, text: &str, switches: &[Define], out: &mut String) {
    // Per open section: (whether its current branch applies, whether `#else` was seen).
    let mut open: Vec<(bool, bool)> = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let at = || format!("shaders/{file}.wgsl:{}", i + 1);
        let directive = line.trim();
        if let Some(name) = directive.strip_prefix("#if ") {
            let name = name.trim();
            let on = match switches.iter().find(|d| d.name == name).map(|d| d.value) {
                Some(Value::Bool(on)) => on,
                _ => panic!("{}: `#if {name}` names no bool switch of this shader", at()),
            };
            open.push((on, false));
        } else if directive == "#else" {
            match open.last_mut() {
                Some((on, seen @ false)) => {
                    *on = !*on;
                    *seen = true;
                }
                _ => panic!("{}: `#else` outside an `#if`, or a second one", at()),
            }
        } else if directive == "#endif" {
            open.pop()
                .unwrap_or_else(|| panic!("{}: `#endif` outside an `#if`", at()));
        } else if directive.starts_with('#') {
            panic!("{}: unknown directive `{directive}`", at());
        } else if open.iter().all(|&(on, _)| on) {
            out.push_str(line);
            out.push('\n');
        }
    }
    assert!(open.is_empty(), "shaders/{file}.wgsl: an `#if` is never closed");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sections_follow_the_switches() {
        let on = [Define::bool("A", true), Define::bool("B", false)];
        let mut out = String::new();
        preprocess(
            "t",
            "x\n#if A\na\n#if B\nb\n#else\nnot b\n#endif\n#else\nnot a\n#endif\ny\n",
            &on,
            &mut out,
        );
        assert_eq!(out, "x\na\nnot b\ny\n");
    }

    #[test]
    fn a_variant_has_one_form() {
        let matmul = shader("matmul");
        let (on, off) = (Define::bool(SUBGROUPS, true), Define::bool(SUBGROUPS, false));
        let (bm, bn) = (Define::u32("BM", 128), Define::u32("BN", 128));
        assert_eq!(matmul.variant(&[]), [bm, bn, off]);
        assert_eq!(matmul.variant(&[off, bm]), matmul.variant(&[]));
        assert_eq!(matmul.variant(&[on]), [bm, bn, on]);
        let narrow = Define::u32("BN", 64);
        assert_eq!(
            matmul.variant(&[on, narrow]),
            [bm, narrow, on],
            "in the switches' order"
        );
    }

    #[test]
    #[should_panic(expected = "has no switch")]
    fn an_unknown_switch_is_refused() {
        shader("norm").variant(&[Define::bool(SUBGROUPS, true)]);
    }

    #[test]
    fn f32_defines_keep_their_bits() {
        for v in [0.797_884_6_f32, 1e-8, -3.5, f32::MIN_POSITIVE, f32::MAX] {
            let line = Define::f32("X", v).wgsl();
            let text = line.trim_start_matches("const X: f32 = ").trim_end_matches("f;");
            assert_eq!(text.parse::<f32>().unwrap().to_bits(), v.to_bits(), "{line}");
        }
    }
}
