//! `resmem`: train and study Transformer, RMT, MemoryFormer and hybrid models from the command line.

// Every line goes through `console` (`out!`, `say`, `warn`), which never panics on a closed or
// full stdout or stderr.
#![deny(clippy::print_stdout, clippy::print_stderr)]

#[macro_use]
mod console;
mod analyze;
mod args;
mod bench;
mod buckets;
mod count;
mod eval;
mod interop;
mod load;
mod plot;
mod prepare;
mod residual;
mod run_dir;
mod sample;
mod source;
mod stats;
mod sweep;
mod train;

use anyhow::{Context, Result};
use clap::{CommandFactory, FromArgMatches};

fn main() {
    let matches = args::Cli::command().get_matches();
    let cli = args::Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    let result = match cli.command {
        args::Command::Train(mut a) => {
            a.backend_given = matches
                .subcommand_matches("train")
                .and_then(|m| m.value_source("backend"))
                == Some(clap::parser::ValueSource::CommandLine);
            train::run(*a)
        }
        args::Command::Sweep(a) => sweep::run(*a, &matches.subcommand_matches("sweep").cloned().unwrap_or_default()),
        args::Command::Eval(a) => eval::run(a),
        args::Command::Sample(a) => sample::run(a),
        args::Command::Count(a) => count::run(a),
        args::Command::Analyze(args::Analyze::Variance(a)) => analyze::variance(*a),
        args::Command::Analyze(args::Analyze::Buckets(a)) => buckets::run(a),
        args::Command::Analyze(args::Analyze::Residual(a)) => residual::run(a),
        args::Command::Data(c) => prepare::run(c),
        args::Command::Import(c) => interop::import(c),
        args::Command::Export(c) => interop::export(c),
        args::Command::Plot(a) => plot::run(a),
        args::Command::Bench(a) => bench::run(*a),
    };
    if let Err(e) = result {
        console::warn(&format!("error: {e:#}"));
        std::process::exit(1);
    }
}

/// The wgpu backend, or an error that says how to get one.
pub fn gpu_backend() -> Result<engine::gpu::GpuBackend> {
    gpu_backend_with(engine::gpu::GpuOptions::default())
}

/// [`gpu_backend`] with `options` (`resmem bench` compares kernels with and without subgroups).
pub fn gpu_backend_with(options: engine::gpu::GpuOptions) -> Result<engine::gpu::GpuBackend> {
    pollster::block_on(engine::gpu::GpuBackend::with_options(options)).context("cannot use --backend gpu")
}

/// Runs `$body` with `$be` bound to the backend `$kind` names.
#[macro_export]
macro_rules! with_backend {
    ($kind:expr, $be:ident => $body:expr) => {
        match $kind {
            $crate::args::BackendKind::Cpu => {
                let $be = &engine::cpu::CpuBackend::<f32>::new();
                $body
            }
            $crate::args::BackendKind::Gpu => {
                let $be = &$crate::gpu_backend()?;
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
    let available = models::memory::available_bytes();
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
