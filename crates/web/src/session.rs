//! What the page trains: an architecture, a task and every setting a control offers (`Setup`),
//! turned into the same `RunConfig` the command line builds, through the same TOML merge; and a
//! training session (the GPU backend, the model and its trainer), which lives outside the
//! reactive graph (wgpu objects are not Send on wasm), so the page sees plain numbers.

use data::{Batch, BatchSource, DataSource, Task, TokenizerKind};
use engine::Backend;
use models::buckets::{self, BucketCounts};
use models::checkpoint::{self, TrainState};
use models::count::{self, ModelCounts};
use models::generate::{self, Drawn, Sampling};
use models::memory::{self, Purpose};
use models::probes::Measured;
use models::variance::{self, ClosedForm, InitScheme};
use models::{DataConfig, Evaluator, LanguageModel, ModelConfig, RunConfig, Trainer, TransformerConfig};
use std::collections::BTreeMap;
use std::path::Path;

/// The architectures the page offers, each starting from its `tiny-ARCH` training preset.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Arch {
    Transformer,
    Rmt,
    MemoryFormer,
    Hybrid,
}

impl Arch {
    pub const ALL: [Arch; 4] = [Arch::Transformer, Arch::Rmt, Arch::MemoryFormer, Arch::Hybrid];

    /// The `arch` of its config.
    pub fn name(self) -> &'static str {
        match self {
            Arch::Transformer => "transformer",
            Arch::Rmt => "rmt",
            Arch::MemoryFormer => "memoryformer",
            Arch::Hybrid => "hybrid",
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Arch::Transformer => "Transformer",
            Arch::Rmt => "Residual Matrix Transformer",
            Arch::MemoryFormer => "MemoryFormer",
            Arch::Hybrid => "Hybrid: RMT with a memory block",
        }
    }

    pub fn parse(s: &str) -> Option<Arch> {
        Arch::ALL.into_iter().find(|a| a.name() == s)
    }

    /// Its storages and retrievals (the transformer's linear maps in their places) have
    /// variance probes and a closed form.
    pub fn has_variance(self) -> bool {
        matches!(self, Arch::Rmt | Arch::Hybrid | Arch::Transformer)
    }

    /// It has hash tables whose buckets the page can show.
    pub fn has_buckets(self) -> bool {
        matches!(self, Arch::MemoryFormer | Arch::Hybrid)
    }

    /// The `tiny-ARCH` preset: the model and the copy task at T = 16, batch 32, 300 steps.
    pub fn preset(self) -> RunConfig {
        RunConfig::preset(&format!("tiny-{}", self.name())).expect("every architecture has a tiny preset")
    }
}

/// What the page trains on: a synthetic task, or Shakespeare, which `cargo xtask serve` places
/// beside the page under the path the command line reads it from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dataset {
    Task(Task),
    Shakespeare(TokenizerKind),
}

impl Dataset {
    pub const ALL: [Dataset; 5] = [
        Dataset::Task(Task::Copy),
        Dataset::Task(Task::Reverse),
        Dataset::Task(Task::Mqar),
        Dataset::Shakespeare(TokenizerKind::Bytes),
        Dataset::Shakespeare(TokenizerKind::Gpt2),
    ];

    pub fn name(self) -> &'static str {
        match self {
            Dataset::Task(t) => t.name(),
            Dataset::Shakespeare(TokenizerKind::Bytes) => "shakespeare-bytes",
            Dataset::Shakespeare(TokenizerKind::Gpt2) => "shakespeare-gpt2",
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Dataset::Task(Task::Copy) => "copy",
            Dataset::Task(Task::Reverse) => "reverse",
            Dataset::Task(Task::Mqar) => "mqar (associative recall)",
            Dataset::Shakespeare(TokenizerKind::Bytes) => "Shakespeare, bytes",
            Dataset::Shakespeare(TokenizerKind::Gpt2) => "Shakespeare, GPT-2 BPE (V 50,257: slow)",
        }
    }

    pub fn parse(s: &str) -> Option<Dataset> {
        Dataset::ALL.into_iter().find(|d| d.name() == s)
    }

    pub fn tokenizer(self) -> TokenizerKind {
        match self {
            Dataset::Task(_) => TokenizerKind::Bytes,
            Dataset::Shakespeare(k) => k,
        }
    }

    /// Where a corpus lies, relative to the page and to the repository alike.
    pub fn corpus_dir(self) -> Option<&'static str> {
        match self {
            Dataset::Task(_) => None,
            Dataset::Shakespeare(TokenizerKind::Bytes) => Some(models::run::SHAKESPEARE_BYTES),
            Dataset::Shakespeare(TokenizerKind::Gpt2) => Some(models::run::SHAKESPEARE_GPT2),
        }
    }

    /// The dataset of a run config, if the page offers it.
    pub fn of(data: &DataConfig) -> Option<Dataset> {
        match data {
            DataConfig::Task { task, .. } => Some(Dataset::Task(*task)),
            DataConfig::Text { path, .. } => Dataset::ALL
                .into_iter()
                .find(|d| d.corpus_dir().map(Path::new) == Some(path)),
            DataConfig::Tokens { .. } => None,
        }
    }
}

impl std::fmt::Display for Dataset {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

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
    fn parse(&self, text: &str) -> Result<toml::Value, String> {
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
fn text_of(v: &toml::Value) -> String {
    match v {
        toml::Value::String(s) => s.clone(),
        toml::Value::Integer(i) => i.to_string(),
        // f32 settings, in their shortest form: 0.01, not 0.009999999776482582.
        toml::Value::Float(f) => (*f as f32).to_string(),
        other => other.to_string(),
    }
}

/// What the page trains: an architecture, a task, and the text of every control that applies.
#[derive(Clone, Debug, PartialEq)]
pub struct Setup {
    pub arch: Arch,
    pub data: Dataset,
    pub values: BTreeMap<&'static str, String>,
}

impl Setup {
    /// `arch`'s tiny preset, as its controls show it.
    pub fn new(arch: Arch, data: Dataset) -> Setup {
        Setup::of(&arch.preset(), arch, data)
    }

    /// `cfg` as the controls show it.
    fn of(cfg: &RunConfig, arch: Arch, data: Dataset) -> Setup {
        let table = toml::Table::try_from(cfg).expect("a config serialises");
        let values = CONTROLS
            .iter()
            .filter(|c| c.applies(arch))
            .filter_map(|c| Some((c.key, text_of(table.get(c.table)?.get(c.key)?))))
            .collect();
        Setup { arch, data, values }
    }

    /// The setup of a run config (an imported checkpoint's), if the page offers its
    /// architecture and data; `config()` gives back the same model.
    pub fn from_config(cfg: &RunConfig) -> Option<Setup> {
        let arch = Arch::parse(cfg.arch())?;
        Some(Setup::of(cfg, arch, Dataset::of(&cfg.data)?))
    }

    /// The same training settings under another architecture, with that architecture's own
    /// preset sizes (a norm or depth carried over would silently make another model).
    pub fn with_arch(&self, arch: Arch) -> Setup {
        let mut next = Setup::new(arch, self.data);
        for (k, v) in &self.values {
            let training = Control::find(k).is_some_and(|c| c.table != "model");
            if let Some(slot) = next.values.get_mut(k).filter(|_| training) {
                *slot = v.clone();
            }
        }
        next
    }

    pub fn value(&self, key: &str) -> Option<&str> {
        self.values.get(key).map(String::as_str)
    }

    pub fn set(&mut self, key: &'static str, text: String) {
        self.values.insert(key, text);
    }

    /// The run config: the preset with every control merged on top, checked like a user's
    /// config file. The model's context N follows T.
    pub fn config(&self) -> Result<RunConfig, String> {
        let mut tables: BTreeMap<&str, toml::Table> = BTreeMap::new();
        for (key, text) in &self.values {
            let control = Control::find(key).ok_or_else(|| format!("no setting named {key}"))?;
            tables
                .entry(control.table)
                .or_default()
                .insert(key.to_string(), control.parse(text)?);
        }
        let data = tables.entry("data").or_default();
        if let Dataset::Task(task) = self.data {
            data.insert("task".into(), toml::Value::String(task.name().into()));
        }
        let t = data.get("seq_len").cloned();
        let model = tables.entry("model").or_default();
        if let Some(t) = t {
            model.insert("seq_len".into(), t);
        }
        let vocab = self.data.tokenizer().vocab();
        model.insert("vocab".into(), toml::Value::Integer(vocab as i64));
        let overrides: toml::Table = tables
            .into_iter()
            .map(|(k, v)| (k.to_string(), toml::Value::Table(v)))
            .collect();
        let mut cfg = self.arch.preset().merged(&overrides).map_err(|e| e.to_string())?;
        if let (Some(dir), Dataset::Shakespeare(tokenizer)) = (self.data.corpus_dir(), self.data) {
            cfg.data = DataConfig::Text {
                path: dir.into(),
                tokenizer,
                seq_len: cfg.data.seq_len(),
                doc_mask: false,
            };
        }
        cfg.validate().map_err(|e| e.to_string())?;
        Ok(cfg)
    }

    /// The settings that differ from `other`'s, as `key=value`, in the controls' order.
    pub fn differences(&self, other: &Setup) -> Vec<String> {
        let mut out = vec![];
        if self.data != other.data {
            out.push(format!("data={}", self.data));
        }
        for c in CONTROLS {
            if let Some(v) = self.value(c.key) {
                if other.value(c.key) != Some(v) {
                    out.push(format!("{}={v}", c.label_for(self.arch)));
                }
            }
        }
        out
    }

    /// The RMT, the transformer of its dimensions (H = R, D_h = D_v, D = R·D_v, the same L and
    /// D_FF) and a MemoryFormer of that width, all with this setup's training settings.
    pub fn comparison(&self) -> Result<[Setup; 3], String> {
        let rmt = self.with_arch(Arch::Rmt);
        let Ok(ModelConfig::Rmt(r)) = rmt.config().map(|c| c.model) else {
            return Err(rmt.config().err().unwrap_or_default());
        };
        let mut transformer = self.with_arch(Arch::Transformer);
        let mut memoryformer = self.with_arch(Arch::MemoryFormer);
        for (key, v) in [
            ("d_model", r.rank * r.d_v),
            ("n_heads", r.rank),
            ("head_dim", r.d_v),
            ("d_ff", r.d_ff),
            ("n_layers", r.n_layers),
        ] {
            for s in [&mut transformer, &mut memoryformer] {
                if let Some(slot) = s.values.get_mut(key) {
                    *slot = v.to_string();
                }
            }
        }
        Ok([rmt, transformer, memoryformer])
    }
}

/// The version of the page's links. A link of another version is reported, not guessed at.
pub const LINK_VERSION: &str = "1";

/// What a link restores: a setup, whether the controls are hidden (for embedding in a talk or
/// a post), and what in it could not be used.
#[derive(Clone, Debug, PartialEq)]
pub struct Link {
    pub setup: Setup,
    pub hide_controls: bool,
    pub problems: Vec<String>,
}

/// A setup travels to and from the CPU engine's worker as its link's query.
impl serde::Serialize for Setup {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_query())
    }
}

impl<'de> serde::Deserialize<'de> for Setup {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Setup, D::Error> {
        let link = Link::parse(&String::deserialize(d)?);
        match link.problems.first() {
            None => Ok(link.setup),
            Some(p) => Err(serde::de::Error::custom(p)),
        }
    }
}

impl serde::Serialize for Dataset {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl<'de> serde::Deserialize<'de> for Dataset {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Dataset, D::Error> {
        let name = String::deserialize(d)?;
        Dataset::parse(&name).ok_or_else(|| serde::de::Error::custom(format!("no data called {name}")))
    }
}

/// The page's default: the tiny RMT on the copy task.
pub fn default_setup() -> Setup {
    Setup::new(Arch::Rmt, Dataset::Task(Task::Copy))
}

impl Setup {
    /// The link's query: the version, then every setting that differs from the default of its
    /// architecture, e.g. `v=1&arch=transformer&d_model=128&seed=3`.
    pub fn to_query(&self) -> String {
        let default = default_setup();
        let own = Setup::new(self.arch, self.data);
        let mut pairs = vec![("v", LINK_VERSION.to_string())];
        if self.arch != default.arch {
            pairs.push(("arch", self.arch.name().into()));
        }
        if self.data != default.data {
            pairs.push(("data", self.data.name().into()));
        }
        for c in CONTROLS {
            match self.value(c.key) {
                Some(v) if own.value(c.key) != Some(v) => pairs.push((c.key, v.to_string())),
                _ => {}
            }
        }
        pairs
            .iter()
            .map(|(k, v)| format!("{k}={}", escape(v)))
            .collect::<Vec<_>>()
            .join("&")
    }
}

impl Link {
    /// The link of `query` (without the `?`). A parameter that is unknown, malformed or not a
    /// setting of the chosen model is reported and its default stands; a link of another
    /// version, or one whose settings make no valid config, restores the defaults.
    pub fn parse(query: &str) -> Link {
        let mut link = Link {
            setup: default_setup(),
            hide_controls: false,
            problems: vec![],
        };
        let pairs: Vec<(String, String)> = query
            .trim_start_matches('?')
            .split('&')
            .filter(|p| !p.is_empty())
            .map(|p| match p.split_once('=') {
                Some((k, v)) => (unescape(k), unescape(v)),
                None => (unescape(p), String::new()),
            })
            .collect();
        if pairs.is_empty() {
            return link;
        }
        let get = |key: &str| pairs.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str());
        match get("v") {
            Some(LINK_VERSION) => {}
            Some(v) => {
                link.problems.push(format!(
                    "this link was made by another version of the page (v={v}; this page reads v={LINK_VERSION}), so its settings were not applied"
                ));
                return link;
            }
            None => link.problems.push(format!(
                "the link has no version (v={LINK_VERSION}); its settings were read as this version's"
            )),
        }
        let (mut arch, mut data) = (link.setup.arch, link.setup.data);
        if let Some(a) = get("arch") {
            match Arch::parse(a) {
                Some(a) => arch = a,
                None => link.problems.push(format!(
                    "arch={a} is not a model here (the models are {})",
                    Arch::ALL.map(Arch::name).join(", ")
                )),
            }
        }
        if let Some(d) = get("data") {
            match Dataset::parse(d) {
                Some(d) => data = d,
                None => link.problems.push(format!(
                    "data={d} is not a dataset here (they are {})",
                    Dataset::ALL.map(Dataset::name).join(", ")
                )),
            }
        }
        let mut setup = Setup::new(arch, data);
        for (key, value) in &pairs {
            match key.as_str() {
                "v" | "arch" | "data" => {}
                "hide" if value == "controls" => link.hide_controls = true,
                "hide" => link
                    .problems
                    .push(format!("hide={value} is not known; hide=controls hides the controls")),
                _ => match Control::find(key) {
                    None => link
                        .problems
                        .push(format!("`{key}` is not a setting of the page; it was ignored")),
                    Some(c) if !c.applies(arch) => link.problems.push(format!(
                        "`{key}` is not a setting of the {}; it was ignored",
                        arch.label()
                    )),
                    Some(c) => match c.parse(value) {
                        Ok(_) => setup.set(c.key, value.trim().to_string()),
                        Err(e) => link.problems.push(format!("{e}; its default stands")),
                    },
                },
            }
        }
        match setup.config() {
            Ok(_) => link.setup = setup,
            Err(e) => link.problems.push(format!(
                "the link's settings make no valid model ({e}); the defaults stand"
            )),
        }
        link
    }
}

/// Percent-encodes all but letters, digits and `-._~`.
fn escape(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Undoes `escape` (and `+` for a space); a malformed escape stays as it is.
fn unescape(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| u8::from_str_radix(std::str::from_utf8(h).ok()?, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b'+', _) => {
                out.push(b' ');
                i += 1;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Refuses a config whose largest buffer is over what one GPU binding may hold, before anything
/// is built, naming what to shrink.
pub fn check_limits(cfg: &RunConfig, max_binding_bytes: u64) -> Result<(), String> {
    let est =
        memory::estimate(&cfg.model, cfg.train.batch, cfg.data.seq_len(), Purpose::Train).map_err(|e| e.to_string())?;
    memory::check_binding_limit(&est, max_binding_bytes).map_err(|e| e.to_string())
}

/// One row of the cost table: a name, its parameters and forward FLOPs per token.
pub struct CostRow {
    pub name: String,
    pub counts: ModelCounts,
}

/// The chosen config's counts, and a transformer of matching dimensions, computed by the
/// counters `resmem count` prints.
pub fn costs(cfg: &RunConfig) -> Result<Vec<CostRow>, String> {
    let count = |m: &ModelConfig| count::try_model(m).map_err(|e| e.to_string());
    let mut rows = vec![CostRow {
        name: describe(&cfg.model),
        counts: count(&cfg.model)?,
    }];
    let (vocab, n) = (cfg.model.vocab(), cfg.model.context());
    let twin = |d: usize, l: usize, h: usize, dh: usize, ff: usize| TransformerConfig {
        d_model: d,
        n_layers: l,
        n_heads: h,
        head_dim: dh,
        d_ff: ff,
        ..TransformerConfig::tiny(vocab, n)
    };
    let matching = match &cfg.model {
        ModelConfig::Rmt(r) => Some(twin(r.rank * r.d_v, r.n_layers, r.rank, r.d_v, r.d_ff)),
        ModelConfig::Hybrid(h) => {
            let d = h.rank * h.d_v;
            Some(twin(d, h.n_layers, h.rank, h.d_v, 4 * d))
        }
        ModelConfig::MemoryFormer(m) => Some(twin(m.d_model, m.n_layers, m.n_heads, m.head_dim(), 4 * m.d_model)),
        ModelConfig::Transformer(_) => None,
    };
    if let Some(t) = matching {
        let t = ModelConfig::Transformer(t);
        rows.push(CostRow {
            name: format!("Transformer of matching dimensions: {}", describe(&t)),
            counts: count(&t)?,
        });
    }
    Ok(rows)
}

/// A model's sizes in the papers' letters.
pub fn describe(m: &ModelConfig) -> String {
    match m {
        ModelConfig::Transformer(c) => format!(
            "Transformer D={} H={} D_h={} D_FF={} L={}",
            c.d_model, c.n_heads, c.head_dim, c.d_ff, c.n_layers
        ),
        ModelConfig::Rmt(c) => format!(
            "RMT D_k={} D_v={} R={} D_FF={} L={} (residual {})",
            c.d_k,
            c.d_v,
            c.rank,
            c.d_ff,
            c.n_layers,
            c.residual()
        ),
        ModelConfig::Hybrid(c) => format!(
            "Hybrid D_k={} D_v={} R={} τ={} L={}",
            c.d_k, c.d_v, c.rank, c.tau, c.n_layers
        ),
        ModelConfig::MemoryFormer(c) => format!(
            "MemoryFormer d={} H={} τ={} L={}",
            c.d_model, c.n_heads, c.tau, c.n_layers
        ),
    }
}

/// The closed form of the paper's Table 1 for `cfg`'s dims and init (none for a model
/// without storages and retrievals).
pub fn closed_form(cfg: &RunConfig) -> Vec<ClosedForm> {
    variance::closed_form(&cfg.model, InitScheme::Default).unwrap_or_default()
}

type Model<B> = Box<dyn LanguageModel<B>>;

/// What a session holds besides its device and config.
type Parts<B> = (Trainer<B, Model<B>>, BatchSource, usize);

/// A model built for one sequence of its context, to sample from, with its forward's buffers.
struct Sampler<B: Backend + 'static> {
    model: Model<B>,
    evaluator: Evaluator<B>,
}

/// One run on one device: the model, its trainer and its batches. Generic over the backend:
/// the page trains on the GPU, or on the CPU where the browser has no WebGPU.
pub struct Session<B: Backend + 'static> {
    pub be: B,
    pub trainer: Trainer<B, Model<B>>,
    batches: BatchSource,
    source: DataSource,
    pub cfg: RunConfig,
    pub params: usize,
    last_batch: Option<Batch>,
    sampler: Option<Sampler<B>>,
}

impl<B: Backend + 'static> Session<B> {
    /// The model of `cfg`, built by the one constructor every command uses, once its largest
    /// buffer is known to fit `max_binding_bytes`. On failure the device comes back with the
    /// message, so that the page can start again.
    pub fn new(be: B, cfg: RunConfig, source: DataSource, max_binding_bytes: u64) -> Result<Self, (B, String)> {
        match Self::parts(&be, &cfg, &source, max_binding_bytes) {
            Ok((trainer, batches, params)) => Ok(Self {
                be,
                trainer,
                batches,
                source,
                cfg,
                params,
                last_batch: None,
                sampler: None,
            }),
            Err(e) => Err((be, e)),
        }
    }

    /// A session for `setup`'s config, its data fetched if need be, continuing from
    /// `checkpoint` (a file `resmem train` writes) when one is given.
    pub async fn open(
        be: B,
        cfg: RunConfig,
        data: Dataset,
        max_binding_bytes: u64,
        checkpoint: Option<&[u8]>,
    ) -> Result<Self, (B, String)> {
        let source = match crate::corpus::source(data).await {
            Ok(source) => source,
            Err(e) => return Err((be, e)),
        };
        let mut session = Self::new(be, cfg, source, max_binding_bytes)?;
        if let Some(bytes) = checkpoint {
            let state = checkpoint::state_from_bytes(&session.trainer.model.store().layout, bytes);
            if let Err(e) = state.map_err(|e| e.to_string()).and_then(|s| session.restore(&s)) {
                return Err((session.be, e));
            }
        }
        Ok(session)
    }

    fn parts(be: &B, cfg: &RunConfig, source: &DataSource, max_binding_bytes: u64) -> Result<Parts<B>, String> {
        check_limits(cfg, max_binding_bytes)?;
        let err = |e: models::ModelError| e.to_string();
        let (b, t, seed) = (cfg.train.batch, cfg.data.seq_len(), cfg.train.seed);
        let model = cfg.build(be, b, t, Purpose::Train).map_err(err)?;
        let params = model.store().layout.count();
        let mut trainer = Trainer::new(be, model, cfg.train.clone()).map_err(err)?;
        trainer.mask_documents(cfg.data.separator());
        // The batches `resmem train` draws for the same config and seed.
        let batches = source.train(b, t, seed).map_err(|e| e.to_string())?;
        Ok((trainer, batches, params))
    }

    /// Tokens a step.
    pub fn tokens_per_step(&self) -> usize {
        self.cfg.train.batch * self.cfg.data.seq_len()
    }

    /// One step, recorded and submitted; nothing is read back. Step k trains on batch k − 1,
    /// as `resmem train` does, so a run continued from a checkpoint sees the same batches.
    pub fn step(&mut self) -> Result<(), String> {
        let batch = self
            .batches
            .batch(self.trainer.step as u64)
            .map_err(|e| e.to_string())?;
        self.trainer.step(&self.be, &batch).map_err(|e| e.to_string())?;
        self.last_batch = Some(batch);
        Ok(())
    }

    /// Continues from a checkpoint's state: its weights, moments and step.
    pub fn restore(&mut self, state: &TrainState) -> Result<(), String> {
        self.trainer.restore(&self.be, state).map_err(|e| e.to_string())
    }

    /// The full training state, in the checkpoint format `resmem train` writes.
    pub async fn checkpoint(&self) -> Result<Vec<u8>, String> {
        let state = self.trainer.state(&self.be).await.map_err(|e| e.to_string())?;
        let config = self.cfg.to_toml().map_err(|e| e.to_string())?;
        checkpoint::state_to_bytes(&self.trainer.model.store().layout, &state, &config).map_err(|e| e.to_string())
    }

    /// A forward of the first held-out batch (the one `resmem analyze residual --run` reads),
    /// so that the views show the current weights without training.
    pub async fn inspect(&mut self) -> Result<f32, String> {
        let (b, t, seed) = (self.cfg.train.batch, self.cfg.data.seq_len(), self.cfg.train.seed);
        let batch = self
            .source
            .held_out(b, t, seed, 1)
            .map_err(|e| e.to_string())?
            .remove(0);
        let loss = self.trainer.eval(&self.be, &batch).await.map_err(|e| e.to_string())?;
        self.last_batch = Some(batch);
        Ok(loss)
    }

    /// The last step's loss; waits for the device to finish it.
    pub async fn loss(&self) -> Result<f32, String> {
        self.trainer.loss(&self.be).await.map_err(|e| e.to_string())
    }

    /// `count` tokens after `prompt` under the current weights, each with its probability,
    /// drawn as `resmem sample` draws them.
    pub async fn sample(&mut self, prompt: &[u32], count: usize, how: Sampling) -> Result<Vec<Drawn>, String> {
        let err = |e: models::ModelError| e.to_string();
        if self.sampler.is_none() {
            let model = self
                .cfg
                .build(&self.be, 1, self.cfg.context(), Purpose::Infer)
                .map_err(err)?;
            let mut evaluator = Evaluator::new(&self.be, &model).map_err(err)?;
            evaluator.mask_documents(self.cfg.data.separator());
            self.sampler = Some(Sampler { model, evaluator });
        }
        let values = self
            .be
            .read(&self.trainer.model.store().params)
            .await
            .map_err(|e| e.to_string())?;
        let Sampler { model, evaluator } = self.sampler.as_mut().expect("built above");
        self.be.write(&model.store().params, &values);
        generate::continue_prompt(&self.be, model, evaluator, prompt, count, how)
            .await
            .map_err(err)
    }
    /// The residual stream of sequence `seq` at every depth in the last step's forward, with
    /// that sequence's input tokens. Read it before anything else runs a forward.
    pub async fn residuals(&self, seq: usize) -> Result<(Vec<models::observe::Snapshot>, Vec<u32>), String> {
        let Some(batch) = &self.last_batch else {
            return Ok((vec![], vec![]));
        };
        let (b, t) = (batch.b, batch.t);
        let seq = seq.min(b.saturating_sub(1));
        let observables = self.trainer.model.observables();
        let snapshots = models::observe::read(&self.be, &observables, seq, t)
            .await
            .map_err(|e| e.to_string())?;
        Ok((snapshots, batch.inputs[seq * t..(seq + 1) * t].to_vec()))
    }

    /// Bucket hits of every hash table in the last step's forward, in one readback; empty for
    /// models without tables.
    pub async fn bucket_counts(&self) -> Result<Vec<BucketCounts>, String> {
        let layers = self.trainer.model.hashed_layers();
        if layers.is_empty() {
            return Ok(vec![]);
        }
        buckets::read(&self.be, &layers).await.map_err(|e| e.to_string())
    }

    /// Variance ratios of every storage and retrieval on the last step's batch; None for models
    /// without probes or before the first step.
    pub async fn measure(&mut self) -> Result<Option<Vec<Measured>>, String> {
        let Some(batch) = self.last_batch.take() else {
            return Ok(None);
        };
        let measured = self.trainer.measure(&self.be, &batch).await.map_err(|e| e.to_string());
        self.last_batch = Some(batch);
        measured
    }
}
