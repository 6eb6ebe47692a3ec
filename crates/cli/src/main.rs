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
        args::Command::Train(a) => train::run(*a),
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

/// Refuses, before anything is allocated, a config whose sizes overflow or, on the CPU, whose
/// buffers need more memory than the machine has available.
pub fn check_memory(
    cfg: &models::RunConfig,
    b: usize,
    t: usize,
    purpose: models::Purpose,
    backend: args::BackendKind,
) -> Result<()> {
    let estimate = models::memory::estimate(&cfg.model, b, t, purpose)?;
    // The host's free memory says nothing of a GPU's; wgpu refuses what the device cannot hold.
    if backend == args::BackendKind::Cpu {
        models::memory::check_fits(&estimate, models::memory::available_bytes())?;
    }
    Ok(())
}
