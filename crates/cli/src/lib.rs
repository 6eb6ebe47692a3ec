//! `resmem`: train and study Transformer, RMT, MemoryFormer and hybrid models from the command line.
//!
//! The library holds the whole command; `src/main.rs` only reports its error. [`run`] takes the
//! arguments as a process would get them, so that a test can run any command line in-process.

// Every line goes through `console` (`out!`, `say`, `warn`), which never panics on a closed or
// full stdout or stderr.
#![deny(clippy::print_stdout, clippy::print_stderr)]

#[macro_use]
pub mod console;
mod analyze;
mod args;
mod bench;
mod buckets;
mod corpus_identity;
mod count;
mod drive;
mod eval;
mod interop;
mod intervene;
mod jax;
mod load;
mod physical_peaks;
mod plot;
mod prepare;
mod provenance;
mod residual;
mod resolve;
mod run_dir;
mod sample;
mod samples;
mod selftest;
mod setting_flags;
mod source;
mod stats;
mod sweep;
mod tensorboard;
mod train;
mod tuning;

pub use train::{request_stop, stop_requested, StoppedOnRequest};

use anyhow::{Context, Result};
use clap::{CommandFactory, FromArgMatches};

/// Runs the command line `args` (the program's name first, as `std::env::args_os` gives it).
/// A clap error (a bad flag, and also `--help` and `--version`, whose text it holds) is returned
/// like any other; see [`clap_error`].
pub fn run(args: impl IntoIterator<Item = std::ffi::OsString>) -> Result<()> {
    let matches = args::Cli::command().try_get_matches_from(args)?;
    let cli = args::Cli::from_arg_matches(&matches)?;
    tuning::set_no_tune(cli.no_tune);
    match cli.command {
        args::Command::Train(mut a) => {
            a.backend_given = matches
                .subcommand_matches("train")
                .and_then(|m| m.value_source("backend"))
                == Some(clap::parser::ValueSource::CommandLine);
            train::run(*a)
        }
        // Each point chooses its backend as `resmem train` does: an experiment's [flags] may name one.
        args::Command::Sweep(a) => sweep::run(*a, &matches.subcommand_matches("sweep").cloned().unwrap_or_default()),
        args::Command::Eval(mut a) => {
            a.backend = choose_backend(a.backend, Some(&a.run));
            eval::run(a)
        }
        args::Command::Sample(mut a) => {
            a.backend = choose_backend(a.backend, Some(&a.run));
            sample::run(a)
        }
        args::Command::Count(a) => count::run(a),
        args::Command::Analyze(args::Analyze::Variance(mut a)) => {
            a.backend = choose_backend(a.backend, a.run.as_deref());
            analyze::variance(*a)
        }
        args::Command::Analyze(args::Analyze::Buckets(mut a)) => {
            a.backend = choose_backend(a.backend, Some(&a.run));
            buckets::run(a)
        }
        args::Command::Analyze(args::Analyze::Collapse(a)) => sweep::collapse_of(&a),
        args::Command::Analyze(args::Analyze::Residual(mut a)) => {
            a.at.backend = choose_backend(a.at.backend, a.at.run.as_deref());
            residual::run(a)
        }
        args::Command::Analyze(args::Analyze::Lens(mut a)) => {
            a.at.backend = choose_backend(a.at.backend, a.at.run.as_deref());
            residual::lens(a)
        }
        args::Command::Analyze(args::Analyze::Attention(mut a)) => {
            a.at.backend = choose_backend(a.at.backend, a.at.run.as_deref());
            residual::attention(a)
        }
        args::Command::Analyze(args::Analyze::Keys(mut a)) => {
            a.at.backend = choose_backend(a.at.backend, a.at.run.as_deref());
            residual::keys(a)
        }
        args::Command::Analyze(args::Analyze::Mixing(mut a)) => {
            a.at.backend = choose_backend(a.at.backend, a.at.run.as_deref());
            residual::mixing(a)
        }
        args::Command::Analyze(args::Analyze::Depth(mut a)) => {
            a.at.backend = choose_backend(a.at.backend, a.at.run.as_deref());
            residual::depth(a)
        }
        args::Command::Analyze(args::Analyze::Altup(mut a)) => {
            a.at.backend = choose_backend(a.at.backend, a.at.run.as_deref());
            residual::altup(a)
        }
        args::Command::Analyze(args::Analyze::Attribute(mut a)) => {
            a.at.backend = choose_backend(a.at.backend, a.at.run.as_deref());
            intervene::attribute(a)
        }
        args::Command::Analyze(args::Analyze::Ablate(mut a)) => {
            a.at.backend = choose_backend(a.at.backend, a.at.run.as_deref());
            intervene::ablate(a)
        }
        args::Command::Analyze(args::Analyze::Patch(mut a)) => {
            a.at.backend = choose_backend(a.at.backend, a.at.run.as_deref());
            intervene::patch(a)
        }
        args::Command::Data(c) => prepare::run(c),
        args::Command::Import(c) => interop::import(c),
        args::Command::Export(c) => interop::export(c),
        args::Command::Plot(a) => plot::run(a),
        args::Command::Bench(mut a) => {
            a.train.backend = choose_backend(a.train.backend, None);
            bench::run(*a)
        }
        args::Command::Selftest(a) => selftest::run(a),
    }
}

/// The whole command line's definition: every subcommand and flag (the fuzz test draws from it).
pub fn command() -> clap::Command {
    args::Cli::command()
}

/// The clap error in `e`, if [`run`] failed to parse its arguments (or was asked for `--help`
/// or `--version`, which clap reports as errors that print to stdout and exit 0).
pub fn clap_error(e: &anyhow::Error) -> Option<&clap::Error> {
    e.downcast_ref::<clap::Error>()
}

/// The backend a command runs on (`--backend`, default auto): the one given; where none was and
/// the command reads a run (`run`: its directory), the one it trained on (`backend.json`); else
/// the GPU where it is a real one, and the CPU where there is no adapter or it is a CPU
/// emulating a GPU, far slower than the CPU backend. Says which and why in one line when it
/// chooses.
pub fn choose_backend(given: args::BackendKind, run: Option<&std::path::Path>) -> args::BackendKind {
    use args::BackendKind::{Auto, Cpu, Gpu};
    if given != Auto {
        return given;
    }
    if let Some(kind) = run.and_then(train::recorded_backend) {
        return kind;
    }
    private_runtime_dir();
    let (kind, why) = match pollster::block_on(engine::gpu::probe_adapter()) {
        Some((name, false)) => (Gpu, format!("the GPU, {name}")),
        Some((name, true)) => (
            Cpu,
            format!("the CPU: this machine's GPU adapter, {name}, is a CPU emulating a GPU, far slower than the CPU backend"),
        ),
        None => (Cpu, "the CPU: this machine has no GPU adapter".to_string()),
    };
    let other = if kind == Gpu { "cpu" } else { "gpu" };
    console::warn(&format!(
        "note: running on {why} (--backend {other} to choose otherwise)"
    ));
    kind
}

/// The wgpu backend, its kernels tuned unless `--no-tune` was given, or an error that says how
/// to get one.
pub fn gpu_backend() -> Result<engine::gpu::GpuBackend> {
    gpu_backend_in(engine::Precision::Strict)
}

/// [`gpu_backend`] in the numeric class `precision`: the fast class where the adapter has
/// cooperative matrices, and otherwise the strict kernels with a line saying why.
pub fn gpu_backend_in(precision: engine::Precision) -> Result<engine::gpu::GpuBackend> {
    gpu_backend_with(engine::gpu::GpuOptions {
        tune: tuning::enabled(),
        precision,
        ..Default::default()
    })
}

/// The one line that names a backend's numeric class, for the commands' reports:
/// `strict (f32)`, `fast (f16 multiplicands, f32 sums, cooperative matrices)`.
pub fn class_line(be: &impl engine::Backend) -> String {
    let described = be.describe();
    match be.precision() {
        engine::Precision::Strict => "strict class (f32)".into(),
        engine::Precision::Fast if described.starts_with("cpu") => {
            "fast class, CPU twin (f16-rounded multiplicands, f32 sums: the fast numerics at no gain in speed)".into()
        }
        engine::Precision::Fast => "fast class (f16 multiplicands, f32 sums, on cooperative matrices)".into(),
    }
}

/// [`gpu_backend`] with `options` (`resmem bench` compares kernels with and without subgroups;
/// `resmem selftest` checks every candidate itself and tunes nothing). Tuned choices are
/// cached ([`tuning`]).
pub fn gpu_backend_with(options: engine::gpu::GpuOptions) -> Result<engine::gpu::GpuBackend> {
    private_runtime_dir();
    let be = pollster::block_on(engine::gpu::GpuBackend::with_options(options)).context("cannot use --backend gpu")?;
    tuning::attach(&be);
    if let Some(why) = be.fast_unavailable() {
        console::warn(&format!(
            "note: the fast class is not available on {}: {why}; running the strict kernels (f32)",
            engine::Backend::describe(&be)
        ));
    }
    if be.emulated() {
        console::warn(&format!(
            "note: --backend gpu runs on {}, a CPU emulating a GPU; --backend cpu is faster here",
            engine::Backend::describe(&be)
        ));
    }
    Ok(be)
}

/// Without XDG_RUNTIME_DIR, wgpu's Vulkan loader and Mesa print `error: XDG_RUNTIME_DIR …` on
/// a run that works: it is set, before wgpu starts, to a directory of this user's alone.
fn private_runtime_dir() {
    if std::env::var_os("XDG_RUNTIME_DIR").is_some() {
        return;
    }
    #[cfg(unix)]
    let ok = {
        use std::os::unix::fs::{DirBuilderExt, MetadataExt};
        // One per user (Linux's /proc/self is owned by this process's user), else per process.
        let uid = std::fs::metadata("/proc/self").map(|m| m.uid()).ok();
        let name = uid.map_or(format!("p{}", std::process::id()), |u| u.to_string());
        let dir = std::env::temp_dir().join(format!("resmem-runtime-{name}"));
        let _ = std::fs::DirBuilder::new().mode(0o700).create(&dir);
        // Used only if it is this user's, and private.
        let private = std::fs::symlink_metadata(&dir)
            .is_ok_and(|m| m.is_dir() && m.mode() & 0o077 == 0 && uid.is_none_or(|u| m.uid() == u));
        private.then_some(dir)
    };
    #[cfg(not(unix))]
    let ok: Option<std::path::PathBuf> = None;
    if let Some(dir) = ok {
        // Before any thread of wgpu's exists: no other thread reads the environment.
        std::env::set_var("XDG_RUNTIME_DIR", &dir);
    }
}

/// Runs `$body` with `$be` bound to the backend `$kind` names.
#[macro_export]
macro_rules! with_backend {
    ($kind:expr, $be:ident => $body:expr) => {
        $crate::with_backend!($kind, engine::Precision::Strict, $be => $body)
    };
    ($kind:expr, $precision:expr, $be:ident => $body:expr) => {
        match $crate::choose_backend($kind, None) {
            $crate::args::BackendKind::Cpu | $crate::args::BackendKind::Auto => {
                let $be = &engine::cpu::CpuBackend::<f32>::with_precision($precision);
                $body
            }
            $crate::args::BackendKind::Gpu => {
                let $be = &$crate::gpu_backend_in($precision)?;
                $body
            }
        }
    };
}

/// Host memory a command holds besides the model, grown by a user's numbers (None: it
/// overflows): `what` names the buffers and `lower` the flags that set them.
pub struct Host {
    pub bytes: Option<u64>,
    pub what: String,
    pub lower: &'static str,
}

impl Host {
    /// `n` batches of `b` windows of `t` tokens held at once: inputs and targets (u32 each) and
    /// a window start (8 bytes) per sequence.
    pub fn batches(n: usize, b: usize, t: usize, lower: &'static str) -> Self {
        let bytes = (n as u64)
            .checked_mul(b as u64)
            .and_then(|x| x.checked_mul((t as u64).checked_add(1)?))
            .and_then(|x| x.checked_mul(8));
        Self {
            bytes,
            what: format!("{n} batches of {b}×{t} tokens"),
            lower,
        }
    }
}

static MEMORY_LIMIT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(u64::MAX);

/// Caps the memory any command of this process plans to use at `bytes`, below what the machine
/// has available, as `ulimit -v` caps a process: for a program that runs commands in-process,
/// such as a test whose commands must stay small.
pub fn limit_memory(bytes: u64) {
    MEMORY_LIMIT.store(bytes, std::sync::atomic::Ordering::SeqCst);
}

/// The memory a command may use: the machine's available memory, within [`limit_memory`].
fn available_bytes() -> Option<u64> {
    let cap = MEMORY_LIMIT.load(std::sync::atomic::Ordering::SeqCst);
    match models::memory::available_bytes() {
        Some(a) => Some(a.min(cap)),
        None => (cap != u64::MAX).then_some(cap),
    }
}

/// Refuses, before anything is allocated, a config whose sizes overflow, whose host buffers
/// (`host`) need more memory than the machine has available, or, on the CPU, whose model and
/// host buffers together do. Every command calls it before it allocates anything sized by a
/// user's number.
pub fn check_memory(
    model: &models::ModelConfig,
    b: usize,
    t: usize,
    purpose: models::Purpose,
    backend: args::BackendKind,
    host: Host,
) -> Result<()> {
    let mut estimate = models::memory::estimate(model, b, t, purpose)?;
    let Some(host_bytes) = host.bytes else {
        anyhow::bail!(
            "the {} do not fit this machine's address space; lower {}",
            host.what,
            host.lower
        );
    };
    let available = available_bytes();
    if let Some(available) = available.filter(|&a| host_bytes > a) {
        const GIB: f64 = (1u64 << 30) as f64;
        anyhow::bail!(
            "the {} need {:.2} GiB, but only {:.2} GiB is available; lower {}",
            host.what,
            host_bytes as f64 / GIB,
            available as f64 / GIB,
            host.lower
        );
    }
    // The host's free memory says nothing of a GPU's; wgpu refuses what the device cannot hold.
    if backend == args::BackendKind::Cpu {
        estimate.bytes = estimate.bytes.saturating_add(host_bytes);
        models::memory::check_fits(&estimate, available)?;
    }
    Ok(())
}
