//! A point's `resmem train` flags: their names, checked against `resmem train`'s own; the
//! flags every point shares; and a point's flags resolved, as `resmem train` would, into its
//! arguments and config, without a command line: its settings become TOML overrides.

use super::experiment::Experiment;
use super::points::Point;
use crate::args::TrainArgs;
use crate::resolve::resolve;
use anyhow::{bail, Result};
use clap::parser::ValueSource;
use clap::{ArgMatches, CommandFactory, Parser};
use models::RunConfig;
use std::path::Path;

/// `resmem train`'s flags alone, to read a point's flags exactly as `resmem train` would.
#[derive(Parser)]
#[command(name = "resmem train")]
struct TrainCli {
    #[command(flatten)]
    args: TrainArgs,
}

/// `resmem train` flags by long name, with their values, in order.
pub(super) type Flags = Vec<(String, String)>;

/// `d_k` and `--d-k` both name the flag `d-k`.
pub(super) fn flag_name(name: &str) -> String {
    name.trim_start_matches("--").replace('_', "-")
}

/// A setting's name as the summary shows it: `d_k`.
pub(super) fn setting_name(name: &str) -> String {
    flag_name(name).replace('-', "_")
}

/// The long names of `resmem train`'s flags.
fn train_flags() -> Vec<String> {
    TrainCli::command()
        .get_arguments()
        .filter_map(|a| a.get_long().map(str::to_string))
        .collect()
}

/// Checks that `name` is a flag a point may set; `what` says where it was given.
pub(super) fn check_flag(name: &str, what: &str) -> Result<String> {
    let flag = flag_name(name);
    match flag.as_str() {
        "out" | "resume" | "list-presets" | "help" => bail!("{what} cannot set --{flag}: the sweep sets it"),
        "seed" => bail!("{what} cannot set the seed; give the seeds with --seeds 0,1,2 (or `seeds` in the file)"),
        _ => {}
    }
    let flags = train_flags();
    if !flags.contains(&flag) {
        let usable: Vec<&str> = flags
            .iter()
            .map(String::as_str)
            .filter(|f| !["out", "resume", "list-presets", "seed"].contains(f))
            .collect();
        bail!(
            "{what}: `{name}` is not a `resmem train` flag; use one of {}",
            usable.join(", ")
        );
    }
    Ok(flag)
}

/// A TOML value as a flag's text.
pub(super) fn flag_value(v: &toml::Value) -> Result<String> {
    Ok(match v {
        toml::Value::String(s) => s.clone(),
        toml::Value::Integer(i) => i.to_string(),
        toml::Value::Float(f) => f.to_string(),
        toml::Value::Boolean(b) => b.to_string(),
        other => bail!("a flag's value must be a string, number or boolean, not {other}"),
    })
}

pub(super) fn set(flags: &mut Vec<(String, String)>, flag: String, value: String) {
    match flags.iter_mut().find(|(f, _)| *f == flag) {
        Some(slot) => slot.1 = value,
        None => flags.push((flag, value)),
    }
}

/// The flags every point shares: the file's, then the command line's `resmem train` flags;
/// and the names of the latter.
pub(super) fn base_flags(experiment: &Experiment, matches: &ArgMatches) -> Result<(Flags, Vec<String>)> {
    let (mut flags, mut given) = (vec![], vec![]);
    for (name, value) in &experiment.flags {
        set(
            &mut flags,
            check_flag(name, "the experiment's [flags]")?,
            flag_value(value)?,
        );
    }
    for arg in TrainCli::command().get_arguments() {
        let id = arg.get_id().as_str();
        let Some(long) = arg.get_long() else { continue };
        if long == "out" || matches.value_source(id) != Some(ValueSource::CommandLine) {
            continue;
        }
        let raw: Vec<String> = matches
            .get_raw(id)
            .into_iter()
            .flatten()
            .map(|v| v.to_string_lossy().into_owned())
            .collect();
        match raw.as_slice() {
            [value] => {
                given.push(check_flag(long, "the command line")?);
                set(&mut flags, long.to_string(), value.clone());
            }
            _ => bail!("--{long} takes no part in a sweep"),
        }
    }
    Ok((flags, given))
}

/// The point's `resmem train` arguments and its config, resolved as `resmem train` resolves
/// its own: each flag read as that command reads it, the settings as TOML overrides.
pub(super) fn resolved(p: &Point, out: &Path) -> Result<(TrainArgs, RunConfig)> {
    let mut args = TrainArgs {
        out: Some(out.join(p.dir_name())),
        ..TrainArgs::default()
    };
    for (flag, text) in &p.flags {
        args.set(flag, text)?;
    }
    let cfg = resolve(&args)?;
    Ok((args, cfg))
}

/// `args` turned into the resumption of the run in `dir` (only the backend carries over).
pub(super) fn resume_args(args: &TrainArgs, dir: &Path) -> TrainArgs {
    TrainArgs {
        resume: Some(dir.to_path_buf()),
        backend: args.backend,
        ..TrainArgs::default()
    }
}
