//! What the page trains (`Setup`): an architecture, a dataset and the text of every setting,
//! turned into the same `RunConfig` the command line builds, through the same TOML merge onto
//! the `tiny-ARCH` preset; and the setups the Compare button trains side by side.

use crate::arch::{tiny_preset, Arch};
use crate::dataset::Dataset;
use crate::settings::{control, controls, text_of};
use data::Task;
use models::{DataConfig, RunConfig};
use std::collections::BTreeMap;

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
        Setup::of(&tiny_preset(arch), arch, data)
    }

    /// `cfg` as the controls show it.
    fn of(cfg: &RunConfig, arch: Arch, data: Dataset) -> Setup {
        let table = toml::Table::try_from(cfg).expect("a config serialises");
        let values = controls()
            .filter(|c| c.applies(arch))
            .filter_map(|c| Some((c.key, text_of(table.get(c.table)?.get(c.key)?))))
            .collect();
        Setup { arch, data, values }
    }

    /// The setup of a run config (an imported checkpoint's), if the page offers its
    /// architecture and data; `config()` gives back the same model.
    pub fn from_config(cfg: &RunConfig) -> Option<Setup> {
        let arch = cfg.arch();
        Some(Setup::of(cfg, arch, Dataset::of(&cfg.data)?))
    }

    /// The same training settings under another architecture, with that architecture's own
    /// preset sizes (a norm or depth carried over would silently make another model).
    pub fn with_arch(&self, arch: Arch) -> Setup {
        let mut next = Setup::new(arch, self.data);
        for (k, v) in &self.values {
            let training = control(k).is_some_and(|c| c.table != "model");
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
        let mut given = vec![];
        for (key, text) in &self.values {
            let control = control(key).ok_or_else(|| format!("no setting named {key}"))?;
            given.push((control, control.parse(text)?));
        }
        let mut overrides = models::settings::overrides(self.arch, given);
        let mut table = |name: &str| match overrides.remove(name) {
            Some(toml::Value::Table(t)) => t,
            _ => toml::Table::new(),
        };
        let (mut data, mut model) = (table("data"), table("model"));
        if let Dataset::Task(task) = self.data {
            data.insert("task".into(), toml::Value::String(task.name().into()));
        }
        if let Some(t) = data.get("seq_len") {
            model.insert("context".into(), t.clone());
        }
        let vocab = self.data.tokenizer().vocab();
        model.insert("vocab".into(), toml::Value::Integer(vocab as i64));
        overrides.insert("data".into(), data.into());
        overrides.insert("model".into(), model.into());
        let mut cfg = tiny_preset(self.arch).merged(&overrides).map_err(|e| e.to_string())?;
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
        for c in controls() {
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
        let t = match rmt.config() {
            Ok(cfg) => cfg.model.matching_transformer(),
            Err(e) => return Err(e),
        };
        let Some(t) = t else {
            return Err("the RMT has no matching transformer".into());
        };
        let mut transformer = self.with_arch(Arch::Transformer);
        let mut memoryformer = self.with_arch(Arch::MemoryFormer);
        for (key, v) in [
            ("d_model", t.d_model),
            ("n_heads", t.n_heads),
            ("head_dim", t.head_dim),
            ("d_ff", t.d_ff),
            ("n_layers", t.n_layers),
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

/// The page's default: the tiny RMT on the copy task.
pub fn default_setup() -> Setup {
    Setup::new(Arch::Rmt, Dataset::Task(Task::Copy))
}
