//! `resmem selftest`: every kernel family on this machine's adapter against its CPU twin
//! (`engine::selftest`), printed as one row per family with its worst error against its
//! tolerance. Any failure exits 1, naming the checks that failed. On the GPU every matmul tile and
//! attention kernel that tuning may choose is checked as well.

use crate::args::{BackendKind, SelftestArgs};
use crate::console::say;
use anyhow::{bail, Result};
use engine::selftest::{self, Check};
use engine::Backend;
use std::time::Instant;

pub fn run(a: SelftestArgs) -> Result<()> {
    let started = Instant::now();
    let options = engine::gpu::GpuOptions {
        no_subgroups: a.no_subgroups,
        precision: a.precision,
        ..Default::default()
    };
    let (device, checks) = match a.backend {
        BackendKind::Cpu => {
            if a.precision == engine::Precision::Fast {
                say(
                    "fast class: on the CPU it is the twin the GPU's fast class is checked against, so there is \
                     nothing to check it with; checking the strict class",
                );
            }
            check(&engine::cpu::CpuBackend::<f32>::new())?
        }
        // The selftest checks a GPU unless told otherwise.
        BackendKind::Gpu | BackendKind::Auto => {
            let gpu = crate::gpu_backend_with(options)?;
            let configurations = gpu.cooperative_configurations();
            say(&format!(
                "cooperative matrices on this adapter: {}",
                if configurations.is_empty() {
                    "none".into()
                } else {
                    configurations.join(", ")
                }
            ));
            match (a.precision, gpu.precision()) {
                (engine::Precision::Fast, engine::Precision::Strict) => say(&format!(
                    "fast class: not available here ({}); checking the strict class",
                    gpu.fast_unavailable().unwrap_or("no reason given")
                )),
                (engine::Precision::Strict, engine::Precision::Strict) => {}
                (_, engine::Precision::Fast) => say(
                    "fast class: the matrix products against their f16 CPU twin, bit for bit on integers and within \
                     the f16 bound on real values (`matmul fast`'s error is a fraction of that bound); attention's \
                     heads of 16 to 64 within each value's own f16 bound (`attention fast`, likewise); every other \
                     family as in the strict class",
                ),
            }
            let (device, mut checks) = check(&gpu)?;
            // Tuning may run any kernel that fits this adapter: each is checked too.
            checks.extend(pollster::block_on(selftest::run_candidates(&gpu))?);
            (device, checks)
        }
    };
    say(&format!(
        "selftest on {device}: every kernel family against the CPU twin, {}",
        if checks.iter().any(|c| c.family == "matmul fast") {
            "fast class"
        } else {
            "strict class"
        }
    ));
    say(&format!(
        "{:<16} {:>7} {:>12} {:>10}  result",
        "family", "checks", "worst error", "tolerance"
    ));
    let families = selftest::by_family(&checks);
    for f in &families {
        let result = match f.failed {
            0 => "pass".to_string(),
            n => format!("FAIL ({n} of {})", f.checks),
        };
        say(&format!(
            "{:<16} {:>7} {:>12.2e} {:>10.0e}  {result}",
            f.family, f.checks, f.worst, f.tolerance
        ));
        if a.verbose {
            for c in checks.iter().filter(|c| c.family == f.family) {
                let mark = if c.passed() { "ok" } else { "FAIL" };
                say(&format!("    {mark:<4} {:.2e}  {}", c.relative(), c.case));
            }
        }
    }
    say(&format!(
        "{} checks in {:.1} s; errors are relative to each output's largest magnitude on the CPU",
        checks.len(),
        started.elapsed().as_secs_f64()
    ));
    let failures: Vec<String> = families
        .iter()
        .flat_map(|f| f.failures.iter().map(move |c| format!("{} {c}", f.family)))
        .collect();
    if !failures.is_empty() {
        bail!(
            "{} of {} checks failed on {device}: {}{}. Results on this adapter cannot be trusted: update its driver, \
             or train with --backend cpu",
            failures.len(),
            checks.len(),
            failures[..failures.len().min(5)].join("; "),
            if failures.len() > 5 { "; …" } else { "" }
        );
    }
    Ok(())
}

/// The adapter's description and every check on it.
fn check<B: Backend>(be: &B) -> Result<(String, Vec<Check>)> {
    Ok((be.describe(), pollster::block_on(selftest::run(be))?))
}
