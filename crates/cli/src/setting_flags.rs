//! The flags of `models::settings::SETTINGS`. clap learns them from that table, and what was
//! given becomes the partial config that `RunConfig::merged` applies, as a user's TOML file is:
//! one path for the command line, `--config`, a sweep's points and the page.

use anyhow::{bail, Result};
use clap::builder::PossibleValuesParser;
use clap::{Arg, ArgAction, ArgMatches, Args, Command, FromArgMatches};
use models::settings::{Kind, Setting, SETTINGS};
use models::Arch;
use std::marker::PhantomData;

/// Which settings a command takes as flags.
pub trait Scope: 'static {
    fn has(s: &Setting) -> bool;
}

/// The model's dimensions: every setting of its table but the context (the counters and the
/// closed form take N as their own `--seq-len`).
#[derive(Debug)]
pub struct ModelSettings;

impl Scope for ModelSettings {
    fn has(s: &Setting) -> bool {
        s.table == "model" && s.flag != "context"
    }
}

/// Everything `resmem train` sets by name: the model's, the optimiser's, the schedule's, the
/// data's and the cadence's settings.
#[derive(Debug)]
pub struct AllSettings;

impl Scope for AllSettings {
    fn has(_: &Setting) -> bool {
        true
    }
}

/// The settings given, as their flags' text, in the table's order.
#[derive(Debug)]
pub struct SettingFlags<S> {
    given: Vec<(&'static Setting, String)>,
    scope: PhantomData<S>,
}

impl<S> Default for SettingFlags<S> {
    fn default() -> Self {
        Self {
            given: vec![],
            scope: PhantomData,
        }
    }
}

impl<S: Scope> SettingFlags<S> {
    /// Sets `s` to `text`, as its flag would; a later value replaces an earlier one.
    pub fn set(&mut self, s: &'static Setting, text: String) {
        match self.given.iter_mut().find(|(g, _)| std::ptr::eq(*g, s)) {
            Some(slot) => slot.1 = text,
            None => self.given.push((s, text)),
        }
    }

    /// The settings given, with their text.
    pub fn given(&self) -> impl Iterator<Item = (&'static Setting, &str)> {
        self.given.iter().map(|(s, t)| (*s, t.as_str()))
    }

    /// The text given for `key` of `table`, if it was given.
    pub fn get(&self, table: &str, key: &str) -> Option<&str> {
        self.given()
            .find(|(s, _)| s.table == table && s.key == key)
            .map(|(_, t)| t)
    }

    /// Fails on the first setting that `arch` has no use for, rather than ignoring it, and
    /// lists the dimension flags it has.
    pub fn check_applies(&self, arch: Arch) -> Result<()> {
        let Some((s, _)) = self.given().find(|(s, _)| !s.applies(arch)) else {
            return Ok(());
        };
        let applies: Vec<String> = SETTINGS
            .iter()
            .filter(|s| ModelSettings::has(s) && s.applies(arch))
            .map(|s| format!("--{}", s.flag))
            .collect();
        let others: Vec<String> = s.archs.iter().map(|a| format!("--arch {a}")).collect();
        bail!(
            "--{} does not apply to --arch {arch} (it is for {}); the dimension flags of --arch {arch} are {}",
            s.flag,
            others.join(" and "),
            applies.join(", ")
        )
    }

    /// The settings given, parsed, as the overrides `RunConfig::merged` takes for `arch`.
    pub fn overrides(&self, arch: Arch) -> Result<toml::Table> {
        self.check_applies(arch)?;
        let mut values = vec![];
        for (s, text) in self.given() {
            let value = s
                .parse_named(text, &format!("--{}", s.flag))
                .map_err(anyhow::Error::msg)?;
            values.push((s, value));
        }
        Ok(models::settings::overrides(arch, values))
    }
}

/// The help of a setting's flag; a model setting's names the architectures that have it.
fn help(s: &Setting) -> String {
    if s.table != "model" || s.archs.len() == Arch::ALL.len() {
        return s.help.to_string();
    }
    let archs: Vec<&str> = s.archs.iter().map(|a| a.name()).collect();
    format!("{} ({})", s.help, archs.join(", "))
}

impl<S: Scope> Args for SettingFlags<S> {
    fn augment_args(cmd: Command) -> Command {
        SETTINGS.iter().filter(|s| S::has(s)).fold(cmd, |cmd, s| {
            let arg = Arg::new(s.flag)
                .long(s.flag)
                .help(help(s))
                .action(ArgAction::Set)
                // A negative rate is the config's to refuse, by name, not clap's to misread.
                .allow_negative_numbers(s.kind == Kind::Number);
            cmd.arg(match s.kind {
                // `--block-gelu` alone turns it on.
                Kind::Switch => arg.num_args(0..=1).default_missing_value("true"),
                Kind::Choice(options) => arg.value_parser(PossibleValuesParser::new(options)),
                _ => arg,
            })
        })
    }

    fn augment_args_for_update(cmd: Command) -> Command {
        Self::augment_args(cmd)
    }
}

impl<S: Scope> FromArgMatches for SettingFlags<S> {
    fn from_arg_matches(m: &ArgMatches) -> Result<Self, clap::Error> {
        let given = SETTINGS
            .iter()
            .filter(|s| S::has(s))
            .filter_map(|s| m.get_one::<String>(s.flag).map(|t| (s, t.clone())))
            .collect();
        Ok(Self {
            given,
            scope: PhantomData,
        })
    }

    fn update_from_arg_matches(&mut self, m: &ArgMatches) -> Result<(), clap::Error> {
        for s in SETTINGS.iter().filter(|s| S::has(s)) {
            if let Some(t) = m.get_one::<String>(s.flag) {
                self.set(s, t.clone());
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::args::{Cli, Command};
    use crate::resolve::resolve;
    use clap::Parser;
    use models::settings::{text_of, SETTINGS};
    use models::{Arch, RunConfig};

    fn resolved(flags: &[&str]) -> anyhow::Result<RunConfig> {
        let argv = ["resmem", "train"].iter().chain(flags);
        let Command::Train(args) = Cli::try_parse_from(argv)?.command else {
            unreachable!()
        };
        resolve(&args)
    }

    /// Each setting's flag, given the value its architecture's tiny preset has, is accepted and
    /// leaves that config as it was: its flag reaches an existing key of its own table.
    #[test]
    fn each_flag_reaches_its_key() {
        for arch in Arch::ALL {
            let base = RunConfig::preset(&arch.tiny_preset()).unwrap();
            let table = toml::Table::try_from(&base).unwrap();
            for s in SETTINGS.iter().filter(|s| s.applies(arch)) {
                // A whole config leaves a setting out while it is unset (sample_every's 0).
                let value = table[s.table].get(s.key_in(arch)).map_or("0".into(), text_of);
                let flag = format!("--{}", s.flag);
                let cfg = resolved(&["--arch", arch.name(), &flag, &value]).unwrap();
                assert_eq!(cfg, base, "{arch} {flag} {value}");
            }
        }
    }

    #[test]
    fn a_flag_changes_its_setting_and_only_it() {
        let cfg = resolved(&[
            "--arch",
            "rmt",
            "--d-k",
            "8",
            "--lr",
            "0.5",
            "--seq-len",
            "12",
            "--grad-clip",
            "2",
        ])
        .unwrap();
        let models::ModelConfig::Rmt(m) = &cfg.model else {
            unreachable!()
        };
        assert_eq!(
            (m.d_k, cfg.train.lr, cfg.data.seq_len(), cfg.train.max_grad_norm),
            (8, 0.5, 12, 2.0)
        );
        let mut back = cfg.clone();
        let base = RunConfig::preset("tiny-rmt").unwrap();
        let models::ModelConfig::Rmt(b) = &base.model else {
            unreachable!()
        };
        if let models::ModelConfig::Rmt(m) = &mut back.model {
            m.d_k = b.d_k;
        }
        (back.train.lr, back.train.max_grad_norm) = (base.train.lr, base.train.max_grad_norm);
        back.data = base.data.clone();
        assert_eq!(back, base);
        let err = resolved(&["--block-gelu"]).unwrap_err().to_string();
        assert!(
            err.contains("--block-gelu does not apply to --arch transformer"),
            "{err}"
        );
        let cfg = resolved(&["--arch", "memoryformer", "--block-gelu", "--init-std", "0.5"]).unwrap();
        let models::ModelConfig::MemoryFormer(m) = &cfg.model else {
            unreachable!()
        };
        assert!(m.block_gelu && m.embed_std == 0.5);
    }
}
