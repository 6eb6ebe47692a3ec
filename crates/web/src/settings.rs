//! Every setting the page offers (`CONTROLS`): its key in the config's TOML table, its label,
//! what its text must parse as, and the architectures that have it.

use crate::arch::Arch;

/// What a control's text must parse as.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Kind {
    Whole,
    Number,
    Choice(&'static [&'static str]),
}

/// One setting the page offers: the key of its TOML table (also the CLI flag, with `-` for `_`),
/// where it sits in the config, and the architectures that have it.
#[derive(Clone, Copy, Debug)]
pub struct Control {
    pub key: &'static str,
    pub table: &'static str,
    pub label: &'static str,
    pub kind: Kind,
    pub archs: &'static [Arch],
    pub help: &'static str,
}

const ALL: &[Arch] = &Arch::ALL;
const RESIDUAL_MATRIX: &[Arch] = &[Arch::Rmt, Arch::Hybrid];
const VECTOR_WIDTH: &[Arch] = &[Arch::Transformer, Arch::MemoryFormer];
const HASHED: &[Arch] = &[Arch::MemoryFormer, Arch::Hybrid];

/// Every control, model sizes first. The keys are the config's own, so a setup is a partial
/// config that `RunConfig::merged` checks like a user's TOML file.
pub const CONTROLS: &[Control] = &[
    Control {
        key: "d_k",
        table: "model",
        label: "D_k",
        kind: Kind::Whole,
        archs: RESIDUAL_MATRIX,
        help: "rows of each token's residual matrix: the residual grows with it, the parameters barely",
    },
    Control {
        key: "d_v",
        table: "model",
        label: "D_v",
        kind: Kind::Whole,
        archs: RESIDUAL_MATRIX,
        help: "columns of each token's residual matrix: the width of what a key retrieves",
    },
    Control {
        key: "rank",
        table: "model",
        label: "R",
        kind: Kind::Whole,
        archs: RESIDUAL_MATRIX,
        help: "keys per read and write: the attention heads",
    },
    Control {
        key: "d_model",
        table: "model",
        label: "D",
        kind: Kind::Whole,
        archs: VECTOR_WIDTH,
        help: "the residual vector's width (the MemoryFormer's d)",
    },
    Control {
        key: "n_heads",
        table: "model",
        label: "H",
        kind: Kind::Whole,
        archs: VECTOR_WIDTH,
        help: "attention heads",
    },
    Control {
        key: "head_dim",
        table: "model",
        label: "D_h",
        kind: Kind::Whole,
        archs: &[Arch::Transformer],
        help: "width of each head",
    },
    Control {
        key: "d_ff",
        table: "model",
        label: "D_FF",
        kind: Kind::Whole,
        archs: &[Arch::Transformer, Arch::Rmt],
        help: "the feed-forward hidden width",
    },
    Control {
        key: "tau",
        table: "model",
        label: "τ",
        kind: Kind::Whole,
        archs: HASHED,
        help: "bits hashed per chunk: each table has 2^τ rows",
    },
    Control {
        key: "n_layers",
        table: "model",
        label: "L",
        kind: Kind::Whole,
        archs: ALL,
        help: "blocks",
    },
    Control {
        key: "norm",
        table: "model",
        label: "norm",
        kind: Kind::Choice(&["layernorm", "rmsnorm"]),
        archs: ALL,
        help: "the norm every block uses",
    },
    Control {
        key: "position",
        table: "model",
        label: "position",
        kind: Kind::Choice(&["learned", "alibi"]),
        archs: RESIDUAL_MATRIX,
        help: "a learned position table, or ALiBi's bias on the attention logits",
    },
    Control {
        key: "lr",
        table: "train",
        label: "learning rate",
        kind: Kind::Number,
        archs: ALL,
        help: "AdamW's peak learning rate",
    },
    Control {
        key: "batch",
        table: "train",
        label: "batch",
        kind: Kind::Whole,
        archs: ALL,
        help: "sequences a step",
    },
    Control {
        key: "seq_len",
        table: "data",
        label: "T",
        kind: Kind::Whole,
        archs: ALL,
        help: "tokens a sequence (the model's context follows it)",
    },
    Control {
        key: "steps",
        table: "train",
        label: "steps",
        kind: Kind::Whole,
        archs: ALL,
        help: "steps of the schedule",
    },
    Control {
        key: "seed",
        table: "train",
        label: "seed",
        kind: Kind::Whole,
        archs: ALL,
        help: "the weights' and the batches' seed",
    },
];

impl Control {
    pub fn applies(&self, arch: Arch) -> bool {
        self.archs.contains(&arch)
    }

    /// The label under `arch`: the MemoryFormer's width is d.
    pub fn label_for(&self, arch: Arch) -> &'static str {
        match (self.key, arch) {
            ("d_model", Arch::MemoryFormer) => "d",
            _ => self.label,
        }
    }

    pub fn find(key: &str) -> Option<&'static Control> {
        CONTROLS.iter().find(|c| c.key == key)
    }

    /// The text as a TOML value, or a message that names the control.
    pub(crate) fn parse(&self, text: &str) -> Result<toml::Value, String> {
        let text = text.trim();
        let bad = |what: &str| format!("{} must be {what}, not \"{text}\"", self.label);
        match self.kind {
            Kind::Whole => text
                .parse::<u32>()
                .map(|v| toml::Value::Integer(v.into()))
                .map_err(|_| bad("a whole number")),
            Kind::Number => match text.parse::<f64>() {
                Ok(v) if v.is_finite() => Ok(toml::Value::Float(v)),
                _ => Err(bad("a number")),
            },
            Kind::Choice(options) => match options.contains(&text) {
                true => Ok(toml::Value::String(text.into())),
                false => Err(bad(&format!("one of {}", options.join(", ")))),
            },
        }
    }
}

/// A config value as a control shows it.
pub(crate) fn text_of(v: &toml::Value) -> String {
    match v {
        toml::Value::String(s) => s.clone(),
        toml::Value::Integer(i) => i.to_string(),
        // f32 settings, in their shortest form: 0.01, not 0.009999999776482582.
        toml::Value::Float(f) => (*f as f32).to_string(),
        other => other.to_string(),
    }
}
