//! Every setting a user sets by name, in one table: its key in the run config's TOML table, its
//! CLI flag, its label, what its text parses as, the architectures that have it, and its help.
//! The CLI's "does not apply to --arch" errors and help texts and the page's controls and labels
//! come from [`SETTINGS`].

use crate::Arch;

/// What a setting's text must parse as.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Kind {
    Whole,
    Number,
    Choice(&'static [&'static str]),
    /// true or false
    Switch,
}

/// One setting, by its key in the run config.
#[derive(Clone, Copy, Debug)]
pub struct Setting {
    /// Its key in its TOML table.
    pub key: &'static str,
    /// `model`, `train` or `data`.
    pub table: &'static str,
    /// The CLI flag that sets it, without `--`.
    pub flag: &'static str,
    pub label: &'static str,
    pub kind: Kind,
    pub archs: &'static [Arch],
    /// Whether the page offers it as a control.
    pub on_page: bool,
    pub help: &'static str,
}

const ALL: &[Arch] = &Arch::ALL;
const RESIDUAL_MATRIX: &[Arch] = &[Arch::Rmt, Arch::Hybrid];
const VECTOR_WIDTH: &[Arch] = &[
    Arch::Transformer,
    Arch::MemoryFormer,
    Arch::Hc,
    Arch::Altup,
    Arch::AttnRes,
];
const STREAMS: &[Arch] = &[Arch::Hc];
const SUB_BLOCKS: &[Arch] = &[Arch::Altup];
const DEPTH_BLOCKS: &[Arch] = &[Arch::AttnRes];
const HASHED: &[Arch] = &[Arch::MemoryFormer, Arch::Hybrid];

/// A setting of the model's table, on the page unless `on_page` says otherwise.
const fn model(
    key: &'static str,
    flag: &'static str,
    label: &'static str,
    kind: Kind,
    archs: &'static [Arch],
    help: &'static str,
) -> Setting {
    Setting {
        key,
        table: "model",
        flag,
        label,
        kind,
        archs,
        on_page: true,
        help,
    }
}

const fn off_page(s: Setting) -> Setting {
    Setting { on_page: false, ..s }
}

/// A setting of the run's `train`, `data` or `cadence` table; its flag is its key with dashes.
const fn run(
    table: &'static str,
    key: &'static str,
    flag: &'static str,
    label: &'static str,
    kind: Kind,
    help: &'static str,
) -> Setting {
    Setting {
        key,
        table,
        flag,
        label,
        kind,
        archs: ALL,
        on_page: true,
        help,
    }
}

/// Every setting, model sizes first (the page's order). The keys are the config's own, so a
/// set of them is a partial config that `RunConfig::merged` checks like a user's TOML file.
pub const SETTINGS: &[Setting] = &[
    model(
        "d_k",
        "d-k",
        "D_k",
        Kind::Whole,
        RESIDUAL_MATRIX,
        "rows of each token's residual matrix: the residual grows with it, the parameters barely",
    ),
    model(
        "d_v",
        "d-v",
        "D_v",
        Kind::Whole,
        RESIDUAL_MATRIX,
        "columns of each token's residual matrix: the width of what a key retrieves (and each head's)",
    ),
    model(
        "rank",
        "rank",
        "R",
        Kind::Whole,
        RESIDUAL_MATRIX,
        "keys per read and write: the attention heads",
    ),
    model(
        "d_model",
        "d-model",
        "D",
        Kind::Whole,
        VECTOR_WIDTH,
        "the residual vector's width (the MemoryFormer's d; each of the hyper-connections' streams, of AltUp's sub-blocks and of AttnRes's depth blocks)",
    ),
    model("n_heads", "heads", "H", Kind::Whole, VECTOR_WIDTH, "attention heads"),
    model(
        "head_dim",
        "head-dim",
        "D_h",
        Kind::Whole,
        &[Arch::Transformer, Arch::Hc, Arch::Altup, Arch::AttnRes],
        "width of each head",
    ),
    model(
        "d_ff",
        "d-ff",
        "D_FF",
        Kind::Whole,
        &[Arch::Transformer, Arch::Rmt, Arch::Hc, Arch::Altup, Arch::AttnRes],
        "the feed-forward hidden width",
    ),
    model(
        "tau",
        "tau",
        "τ",
        Kind::Whole,
        HASHED,
        "bits hashed per chunk: each table has 2^τ rows (K = d/τ tables a layer, d = d_model or R·D_v)",
    ),
    model(
        "streams",
        "streams",
        "n",
        Kind::Whole,
        STREAMS,
        "residual streams of D each, mixed at every attention and FF by an n×n matrix (doubly stochastic in mHC)",
    ),
    model(
        "mixing",
        "mixing",
        "mixing",
        Kind::Choice(&["hc", "mhc", "mhc-lite"]),
        STREAMS,
        "HC's unconstrained tanh gates, mHC's Sinkhorn projection, or mHC-lite's mixture of the n! permutations (n ≤ 4)",
    ),
    off_page(model(
        "stream_init",
        "stream-init",
        "streams' init",
        Kind::Choice(&["identity", "zero-bias"]),
        STREAMS,
        "the gates start near the identity mixing with Φ = 0 (HC's, and mHC's published code), or, for mHC and mHC-lite, Φ ~ N(0, 0.02²) and P near J/n",
    )),
    off_page(model(
        "collapse",
        "collapse",
        "collapse",
        Kind::Choice(&["auto", "sum", "head", "norm-then-sum"]),
        STREAMS,
        "how the streams meet before the head: their sum, a learned gated sum (DeepSeek-V4's; mHC and mHC-lite), or each stream normed, then summed; auto: sum (HC), head (mHC), norm-then-sum (mHC-lite)",
    )),
    off_page(model(
        "sinkhorn_iters",
        "sinkhorn-iters",
        "Sinkhorn rounds",
        Kind::Whole,
        STREAMS,
        "rounds of mHC's row and column normalisations (DeepSeek-V4: 20)",
    )),
    model(
        "value_residual",
        "value-residual",
        "value residual",
        Kind::Choice(&["off", "half", "learnable"]),
        &[Arch::Transformer],
        "every layer after the first attends with its values mixed with layer 0's (ResFormer's value residual): half and half, or (1 − λ) and λ with a learned λ a layer from ½",
    ),
    model(
        "sub_blocks",
        "sub-blocks",
        "K",
        Kind::Whole,
        SUB_BLOCKS,
        "AltUp's sub-blocks of D each: a layer computes on one and predicts and corrects the others",
    ),
    off_page(model(
        "active",
        "active",
        "active sub-block",
        Kind::Choice(&["alternating", "fixed"]),
        SUB_BLOCKS,
        "the sub-block a layer computes on: layer ℓ mod K (the paper's), or always the first (its sub-blocks then stay alike: effectively K = 2)",
    )),
    off_page(model(
        "compute_on",
        "compute-on",
        "AltUp's input",
        Kind::Choice(&["old", "predicted"]),
        SUB_BLOCKS,
        "what a layer computes on: its sub-block before the prediction (the paper's) or the prediction (Gemma 3n's)",
    )),
    model(
        "depth_blocks",
        "depth-blocks",
        "N",
        Kind::Whole,
        DEPTH_BLOCKS,
        "Attention Residuals' depth blocks: each sums 2L/N sites' outputs, and every site reads a softmax over the blocks before it (N = 2L: Full AttnRes); N divides 2L",
    ),
    off_page(model(
        "depth_keys",
        "depth-keys",
        "AttnRes keys",
        Kind::Choice(&["normed", "raw"]),
        DEPTH_BLOCKS,
        "what each read over depth scores its sources by: their RMS-normalised values (the paper's) or the raw values (its Table 4 ablation, \"no key norm\")",
    )),
    model("n_layers", "layers", "L", Kind::Whole, ALL, "blocks"),
    model(
        "norm",
        "norm",
        "norm",
        Kind::Choice(&["layernorm", "rmsnorm"]),
        ALL,
        "the norm every block uses",
    ),
    model(
        "position",
        "position",
        "position",
        Kind::Choice(&["learned", "alibi"]),
        RESIDUAL_MATRIX,
        "a learned position table (the paper), or ALiBi's bias on the attention logits (the official code)",
    ),
    off_page(model(
        "init_std",
        "init-std",
        "init std",
        Kind::Number,
        ALL,
        "weights start N(0, init_std²/fan_in) (the MemoryFormer's embeddings N(0, init_std²))",
    )),
    off_page(model(
        "expansion_bits",
        "expansion-bits",
        "expansion bits",
        Kind::Whole,
        HASHED,
        "ML1 expands to (τ + e)·K and ML2 hashes τ + e bits (MemoryFormer paper Table 5; 2)",
    )),
    off_page(model(
        "block_gelu",
        "block-gelu",
        "GELU in the block",
        Kind::Switch,
        HASHED,
        "a GELU between ML1 and ML2 (MemoryFormer paper Table 6)",
    )),
    off_page(model(
        "table_lr_mult",
        "table-lr-mult",
        "table lr ×",
        Kind::Number,
        HASHED,
        "the hash tables learn at this multiple of the learning rate (MemoryFormer paper Table 4; 3)",
    )),
    off_page(model(
        "context",
        "context",
        "N",
        Kind::Whole,
        ALL,
        "the model's context length: its position table, and the longest sample prompt",
    )),
    run(
        "train",
        "lr",
        "lr",
        "learning rate",
        Kind::Number,
        "AdamW's peak learning rate",
    ),
    run("train", "batch", "batch", "batch", Kind::Whole, "sequences a step"),
    run(
        "data",
        "seq_len",
        "seq-len",
        "T",
        Kind::Whole,
        "tokens a training window (on the page the model's context follows it)",
    ),
    run("train", "steps", "steps", "steps", Kind::Whole, "steps of the schedule"),
    run(
        "train",
        "seed",
        "seed",
        "seed",
        Kind::Whole,
        "the weights' and the batches' seed",
    ),
    off_page(run(
        "train",
        "warmup_frac",
        "warmup-frac",
        "warmup",
        Kind::Number,
        "linear warmup over this fraction of the steps",
    )),
    off_page(run(
        "train",
        "min_lr_frac",
        "min-lr-frac",
        "final lr ×",
        Kind::Number,
        "the cosine decay ends at this fraction of the peak learning rate",
    )),
    off_page(run(
        "train",
        "weight_decay",
        "weight-decay",
        "weight decay",
        Kind::Number,
        "AdamW's decoupled weight decay",
    )),
    off_page(run(
        "train",
        "max_grad_norm",
        "grad-clip",
        "gradient clip",
        Kind::Number,
        "clip the global gradient norm to this",
    )),
    off_page(run(
        "train",
        "precision",
        "precision",
        "precision",
        Kind::Choice(&["strict", "fast"]),
        "the matrix products' numeric class: strict (f32, bit for bit, the default) or fast (f16 \
         multiplicands into f32 sums on a GPU's cooperative matrices; where the GPU has none, \
         strict runs and says so; on --backend cpu, the fast class's CPU twin)",
    )),
    off_page(run(
        "cadence",
        "log_every",
        "log-every",
        "log every",
        Kind::Whole,
        "log the training loss every this many steps",
    )),
    off_page(run(
        "cadence",
        "eval_every",
        "eval-every",
        "evaluate every",
        Kind::Whole,
        "evaluate on held-out windows every this many steps (and at the end)",
    )),
    off_page(run(
        "cadence",
        "eval_batches",
        "eval-batches",
        "held-out batches",
        Kind::Whole,
        "batches of held-out windows per evaluation",
    )),
    off_page(run(
        "cadence",
        "checkpoint_every",
        "checkpoint-every",
        "checkpoint every",
        Kind::Whole,
        "write a checkpoint every this many steps (and always at the end and on Ctrl-C)",
    )),
    off_page(run(
        "cadence",
        "sample_every",
        "sample-every",
        "sample every",
        Kind::Whole,
        "print a sample of the model's text every this many steps (a multiple of --log-every; 0: never)",
    )),
    off_page(run(
        "cadence",
        "keep",
        "keep",
        "checkpoints kept",
        Kind::Whole,
        "keep the newest this many checkpoints",
    )),
];

impl Setting {
    /// The setting of `table` under `key`.
    pub fn find(table: &str, key: &str) -> Option<&'static Setting> {
        SETTINGS.iter().find(|s| s.table == table && s.key == key)
    }

    /// The setting that `flag` (with or without `--`, with `_` or `-`) sets.
    pub fn of_flag(flag: &str) -> Option<&'static Setting> {
        let flag = flag.trim_start_matches("--").replace('_', "-");
        SETTINGS.iter().find(|s| s.flag == flag)
    }

    /// Its key in `arch`'s config: the MemoryFormer's `init_std` is its `embed_std`.
    pub fn key_in(&self, arch: Arch) -> &'static str {
        match (self.table, self.key, arch) {
            ("model", "init_std", Arch::MemoryFormer) => "embed_std",
            _ => self.key,
        }
    }

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

    /// The text as a TOML value, or a message that names the setting by its label.
    pub fn parse(&self, text: &str) -> Result<toml::Value, String> {
        self.parse_named(text, self.label)
    }

    /// The text as a TOML value, or a message that names the setting as `name` (its label on
    /// the page, its flag on the command line). Ranges, finiteness included, are the config's
    /// to check: its validation names the key and the range.
    pub fn parse_named(&self, text: &str, name: &str) -> Result<toml::Value, String> {
        let text = text.trim();
        let bad = |what: &str| format!("{name} must be {what}, not \"{text}\"");
        match self.kind {
            // Sizes are i64 in TOML; one past that cannot be a real size.
            Kind::Whole => match text.parse::<u64>() {
                Ok(v) => match i64::try_from(v) {
                    Ok(v) if v < i64::MAX => Ok(toml::Value::Integer(v)),
                    _ => Err(format!("{name} is too large: it must be at most {}", i64::MAX - 1)),
                },
                Err(_) => Err(bad("a whole number")),
            },
            Kind::Number => text.parse::<f64>().map(toml::Value::Float).map_err(|_| bad("a number")),
            Kind::Choice(options) => match options.contains(&text) {
                true => Ok(toml::Value::String(text.into())),
                false => Err(bad(&format!("one of {}", options.join(", ")))),
            },
            Kind::Switch => text
                .parse::<bool>()
                .map(toml::Value::Boolean)
                .map_err(|_| bad("true or false")),
        }
    }
}

/// Settings given by name, as the partial config that `RunConfig::merged` checks like a user's
/// TOML file: `{ model: { d_k: 8 }, train: { lr: 0.01 } }`, each under its key in `arch`'s config.
pub fn overrides<'a>(arch: Arch, given: impl IntoIterator<Item = (&'a Setting, toml::Value)>) -> toml::Table {
    let mut over = toml::Table::new();
    for (s, value) in given {
        if let toml::Value::Table(t) = over.entry(s.table).or_insert_with(|| toml::Table::new().into()) {
            t.insert(s.key_in(arch).into(), value);
        }
    }
    over
}

/// A config value as a setting shows it.
pub fn text_of(v: &toml::Value) -> String {
    match v {
        toml::Value::String(s) => s.clone(),
        toml::Value::Integer(i) => i.to_string(),
        // f32 settings, in their shortest form: 0.01, not 0.009999999776482582.
        toml::Value::Float(f) => (*f as f32).to_string(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::RunConfig;

    /// Each model setting is a key of the config of exactly the architectures it lists (the
    /// MemoryFormer's `init_std` is its `embed_std`), so the table cannot drift from the configs.
    #[test]
    fn each_model_setting_is_a_key_of_exactly_its_architectures() {
        for arch in Arch::ALL {
            let cfg = RunConfig::preset(&arch.tiny_preset()).unwrap();
            let value = toml::Value::try_from(&cfg.model).unwrap();
            let keys = value.as_table().unwrap();
            for s in SETTINGS.iter().filter(|s| s.table == "model") {
                let key = s.key_in(arch);
                assert_eq!(
                    keys.contains_key(key),
                    s.applies(arch),
                    "{arch}: `{}` is {}a config key but the table says it {}",
                    s.key,
                    if keys.contains_key(key) { "" } else { "not " },
                    if s.applies(arch) { "applies" } else { "does not apply" }
                );
            }
        }
    }

    #[test]
    fn flags_and_keys_are_unique_and_tiny_presets_exist() {
        for (i, s) in SETTINGS.iter().enumerate() {
            // The page finds its controls by key: one of them per key.
            let on_page_twice = |o: &Setting| o.on_page && s.on_page && o.key == s.key;
            assert!(
                SETTINGS[..i]
                    .iter()
                    .all(|o| (o.table, o.key) != (s.table, s.key) && o.flag != s.flag && !on_page_twice(o)),
                "{}",
                s.key
            );
            assert!(!s.archs.is_empty() && !s.help.is_empty(), "{}", s.key);
        }
        for arch in Arch::ALL {
            assert_eq!(RunConfig::preset(&arch.tiny_preset()).unwrap().arch(), arch);
            assert_eq!(Arch::parse(arch.name()), Some(arch));
        }
    }
}
