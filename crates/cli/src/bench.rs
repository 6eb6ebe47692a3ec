//! `resmem bench`: times training steps of the model `resmem train`'s flags describe, and splits
//! a step into kernel families (`engine::profile`) with their FLOPs, bytes and rates, against
//! the device's physical peaks where `physical_peaks` knows its adapter (NVIDIA's datasheets),
//! and always against its own matmul and stream peaks measured by the same command, each
//! percentage saying which.
//!
//! Timing: on the CPU each op is timed as it runs. On the GPU the step is one recorded plan:
//! where the adapter has timestamp queries, the plan is replayed with a timestamp before and
//! after each launch and each family's launches are summed; elsewhere (or with
//! `--no-timestamps`) each family is timed by replaying its launches alone, submitted and waited
//! for, which needs nothing from the adapter.

use crate::args::{BackendKind, BenchArgs};
use crate::console::say;
use crate::physical_peaks::{self, Physical};
use crate::source;
use anyhow::{bail, Context, Result};
use engine::gpu::GpuOptions;
use engine::profile::{Family, Profiled, Replay, Stat, Table};
use engine::{Backend, MatmulDims};
use models::count;
use models::{Purpose, RunConfig, Trainer};
use serde::Serialize;
use std::time::Instant;

/// Timed steps when `--steps` is not given.
const DEFAULT_STEPS: usize = 10;

#[derive(Serialize)]
pub struct Report {
    pub arch: String,
    pub backend: String,
    /// "per-op" (CPU: each op timed as it runs), "timestamps" (GPU: one replay of the step with
    /// timestamp queries around each launch) or "replay" (GPU without them: each family
    /// replayed alone).
    pub family_timing: &'static str,
    /// The GPU matmul's path: "subgroup" where the adapter has subgroups (and `--no-subgroups`
    /// is off), else "plain", then ", K slices" and ", loop guards" where those options are
    /// on (they change how every shader compiles); "cpu" on the CPU.
    pub matmul_path: String,
    /// The numeric class the step ran in: "strict", or "fast" (engine::precision), which is
    /// strict where the adapter has no cooperative matrices.
    pub precision: String,
    pub batch: usize,
    pub seq_len: usize,
    pub params: usize,
    pub warmup_steps: usize,
    pub timed_steps: usize,
    pub tokens_per_s: f64,
    pub ms_per_step: Spread,
    /// Bytes of every buffer the model, optimiser and batch allocated on the device.
    pub peak_device_bytes: u64,
    /// The process's peak resident memory (Linux VmHWM) before the peak measurements, 0 where
    /// unknown.
    pub peak_rss_bytes: u64,
    /// `resmem count`'s forward FLOPs per token at this T.
    pub model_flops_per_token: f64,
    /// The forward's FLOPs per token as the families count them from the shapes, summed over
    /// the families the model counter counts: equal to `model_flops_per_token`.
    pub forward_flops_per_token: f64,
    /// Every family's FLOPs of a training step, per token.
    pub step_flops_per_token: f64,
    pub achieved_gflops: f64,
    /// Measured on this device by this command.
    pub peaks: Peaks,
    /// The device's datasheet peaks where `physical_peaks` knows its adapter; null elsewhere
    /// (the CPU, lavapipe, GPUs not in its table).
    pub physical_peaks: Option<Physical>,
    /// What the families' `of_flops_peak` and `of_memory_peak` are of: "physical: NVIDIA H100
    /// SXM datasheet" where the device is known, else "measured on this device: matmul N³,
    /// stream (a+b) V values". `of_matmul_peak` and `of_stream_peak` are always the measured.
    pub peak_reference: String,
    pub families: Vec<FamilyRow>,
    /// Each kernel's launches and time, slowest first, where the device timed each launch
    /// (`family_timing` "timestamps"); empty otherwise.
    pub kernels: Vec<KernelRow>,
    /// The GPU's tuned choices as (shape class, candidate), measured or from the cache; empty
    /// on the CPU and with `--no-tune`.
    pub tuned: Vec<(String, String)>,
}

#[derive(Serialize)]
pub struct Spread {
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

/// The peaks this command measures on the device, with resmem's own default kernels: what
/// resmem reaches, not what the hardware can.
#[derive(Serialize)]
pub struct Peaks {
    /// A square f32 matmul of this size.
    pub matmul_n: usize,
    pub matmul_gflops: f64,
    /// The STREAM "add" kernel (out = a + b: 12 bytes a value) over this many values: the
    /// backend has no copy op, and add is its simplest streaming one.
    pub stream_values: usize,
    pub stream_gbps: f64,
}

#[derive(Serialize)]
pub struct FamilyRow {
    pub family: &'static str,
    pub calls: u64,
    pub ms_per_step: f64,
    pub share: f64,
    pub flops: f64,
    pub bytes: f64,
    pub gflops: f64,
    pub gbps: f64,
    /// Achieved GFLOP/s over the device's physical peak named by `flops_reference` where it is
    /// known, else over the measured matmul peak.
    pub of_flops_peak: f64,
    /// "physical f32", "physical f16 tensor" (the fast class's products, on tensor cores) or
    /// "measured matmul".
    pub flops_reference: &'static str,
    /// Achieved GB/s over the device's physical memory bandwidth where it is known, else over
    /// the measured stream peak.
    pub of_memory_peak: f64,
    /// "physical memory" or "measured stream".
    pub memory_reference: &'static str,
    /// Achieved GFLOP/s over the *measured* matmul peak (`peaks`), on every device.
    pub of_matmul_peak: f64,
    /// Achieved GB/s over the *measured* stream peak (`peaks`), on every device.
    pub of_stream_peak: f64,
    pub in_model_count: bool,
}

#[derive(Serialize)]
pub struct KernelRow {
    /// `shader::entry` in `shaders/`.
    pub kernel: String,
    pub family: &'static str,
    pub launches: usize,
    pub ms_per_step: f64,
    /// Of the step's timed launches.
    pub share: f64,
}

pub fn run(args: BenchArgs) -> Result<()> {
    let t = &args.train;
    if t.out.is_some() || t.resume.is_some() || t.list_presets {
        bail!("resmem bench writes no run directory: drop --out, --resume and --list-presets");
    }
    // --steps is the timed steps here, not the schedule's.
    let steps = match t.settings.get("train", "steps") {
        Some(text) => text
            .parse::<usize>()
            .map_err(|_| anyhow::anyhow!("--steps must be a whole number, not \"{text}\""))?,
        None => DEFAULT_STEPS,
    };
    if steps == 0 {
        bail!("--steps must be at least 1: the number of timed steps");
    }
    let mut cfg = crate::resolve::resolve(t)?;
    // The schedule runs over every step taken, so no step has a zero learning rate.
    cfg.train.steps = args.warmup.checked_add(steps).ok_or_else(|| {
        anyhow::anyhow!(
            "--warmup {} and --steps {steps} overflow together; ask for fewer",
            args.warmup
        )
    })?;
    let report = match crate::choose_backend(t.backend, None) {
        BackendKind::Cpu | BackendKind::Auto => {
            let be = Profiled::new(engine::cpu::CpuBackend::<f32>::with_precision(cfg.train.precision));
            measure(&be, cfg, &args, steps, "cpu".into())?
        }
        BackendKind::Gpu => {
            let gpu = crate::gpu_backend_with(GpuOptions {
                no_subgroups: args.no_subgroups,
                no_timestamps: args.no_timestamps,
                k_slices: args.k_slices,
                loop_guards: args.loop_guards,
                tune: crate::tuning::enabled(),
                precision: cfg.train.precision,
                ..GpuOptions::DEFAULT
            })?;
            let mut path = String::from(if gpu.subgroups() { "subgroup" } else { "plain" });
            if gpu.precision() == engine::Precision::Fast {
                path.push_str(if gpu.fast_emulated() {
                    ", fast (emulated)"
                } else {
                    ", fast (cooperative matrices)"
                });
            }
            for (on, what) in [(args.k_slices, ", K slices"), (args.loop_guards, ", loop guards")] {
                if on {
                    path.push_str(what);
                }
            }
            let be = Profiled::new(gpu);
            let report = measure(&be, cfg, &args, steps, path)?;
            Report {
                tuned: be.inner.choices(),
                ..report
            }
        }
    };
    if args.json {
        say(&serde_json::to_string_pretty(&report)?);
    } else {
        print(&report);
    }
    Ok(())
}

fn measure<B: Replay + 'static>(
    be: &Profiled<B>,
    mut cfg: RunConfig,
    args: &BenchArgs,
    steps: usize,
    matmul_path: String,
) -> Result<Report> {
    let kind = args.train.backend;
    let data = source::open(&cfg.data)?;
    cfg.set_vocab(data.vocab);
    cfg.validate()?;
    let (b, t) = (cfg.train.batch, cfg.data.seq_len());
    let host = crate::Host::batches(1, b, t, "--batch or --seq-len");
    crate::check_memory(&cfg.model, b, t, Purpose::Train, kind, host)?;
    let batches = data.train(b, t, cfg.train.seed)?;
    // The counter counts at sequence length N = the context; the step runs at T.
    let mut at_t = cfg.model.clone();
    at_t.set_context(t);
    let model_flops_per_token = count::try_model(&at_t)?.flops_per_token(t);

    let model = cfg.build(be, b, t, Purpose::Train)?;
    let params = model.store().layout.count();
    let mut trainer = Trainer::new(be, model, cfg.train.clone())?;
    trainer.mask_documents(cfg.data.separator());
    let one = be.inner.zeros("bench sync", 1)?;
    let wait = || pollster::block_on(be.inner.read(&one)).map(|_| ());
    let tokens = (b * t) as f64;

    // One forward alone, for the FLOPs the model counter counts.
    be.take();
    pollster::block_on(trainer.eval(be, &batches.batch(0)?))?;
    let forward = be.take();
    let forward_flops: f64 = counted(&forward);

    // Warm-up; the first step records the plan, so its costs are the step's.
    let mut step_costs: Option<Table> = None;
    let mut k = 0u64;
    for _ in 0..args.warmup.max(1) {
        crate::train::check_stop("the --warmup steps")?;
        trainer.step(be, &batches.batch(k)?)?;
        wait()?;
        k += 1;
        let table = be.take();
        step_costs.get_or_insert(table);
    }
    let costs = step_costs.unwrap_or_default();

    let mut times = Vec::with_capacity(steps);
    let mut seconds = [0.0f64; Family::ALL.len()];
    for _ in 0..steps {
        crate::train::check_stop("the timed --steps")?;
        let batch = batches.batch(k)?;
        k += 1;
        let start = Instant::now();
        trainer.step(be, &batch)?;
        pollster::block_on(trainer.loss(be))?;
        times.push(start.elapsed().as_secs_f64());
        for (s, stat) in seconds.iter_mut().zip(be.take()) {
            *s += stat.seconds / steps as f64;
        }
    }
    let loss = pollster::block_on(trainer.loss(be))?;
    if !loss.is_finite() {
        bail!("the loss became {loss} during the benchmark; its timings would mean nothing");
    }

    let mut kernel_times = Vec::new();
    let family_timing = match trainer.plan().map(|p| p.families().is_empty()) {
        Some(false) => {
            let plan = trainer.plan().context("the step was not recorded")?;
            match pollster::block_on(be.time_families(plan, steps))? {
                Some(timed) => {
                    seconds = timed.families;
                    kernel_times = timed.kernels;
                    "timestamps"
                }
                None => {
                    for (i, family) in Family::ALL.iter().enumerate() {
                        seconds[i] = be.time_family(plan, *family, steps, &wait)?.unwrap_or(0.0);
                    }
                    "replay"
                }
            }
        }
        _ => "per-op",
    };

    // Before the peaks' own large buffers.
    let peak_rss_bytes = peak_rss().unwrap_or(0);
    // At the defaults: the peaks' sizes grow until a run is long enough, so they depend on the
    // machine's load, and tuning them would leave a cache that the next run misses.
    let peaks = be.inner.with_default_kernels(|| device_peaks(&be.inner, kind, &wait))?;
    let backend = be.describe();
    let physical = physical_peaks::for_backend(&backend).copied();
    let peak_reference = match &physical {
        Some(p) => format!("physical: {} datasheet", p.device),
        None => format!(
            "measured on this device: matmul {}³, stream (a+b) {} values",
            peaks.matmul_n, peaks.stream_values
        ),
    };
    // In the fast class the products are set against the tensor-core peak.
    let fast_class = be.precision() == engine::Precision::Fast;
    times.sort_by(f64::total_cmp);
    let step_s = times[times.len() / 2];
    let total: f64 = seconds.iter().sum();
    let families = Family::ALL
        .iter()
        .zip(costs.iter().zip(seconds))
        .filter(|(_, (c, _))| c.calls > 0)
        .map(|(family, (c, s))| family_row(*family, c, s, total, physical.as_ref(), fast_class, &peaks))
        .collect();
    let kernels = (kernel_times.into_iter())
        .map(|k| KernelRow {
            kernel: k.kernel,
            family: k.family.name(),
            launches: k.launches,
            ms_per_step: k.seconds * 1e3,
            share: if total > 0.0 { k.seconds / total } else { 0.0 },
        })
        .collect();
    let step_flops: f64 = costs.iter().map(|c| c.flops).sum();
    Ok(Report {
        arch: cfg.arch().to_string(),
        backend,
        family_timing,
        matmul_path,
        precision: be.precision().name().into(),
        batch: b,
        seq_len: t,
        params,
        warmup_steps: args.warmup.max(1),
        timed_steps: steps,
        tokens_per_s: tokens / step_s,
        ms_per_step: Spread {
            median: step_s * 1e3,
            min: times[0] * 1e3,
            max: times[times.len() - 1] * 1e3,
        },
        peak_device_bytes: be.allocated_bytes(),
        peak_rss_bytes,
        model_flops_per_token,
        forward_flops_per_token: forward_flops / tokens,
        step_flops_per_token: step_flops / tokens,
        achieved_gflops: step_flops / step_s / 1e9,
        peaks,
        physical_peaks: physical,
        peak_reference,
        families,
        kernels,
        tuned: Vec::new(),
    })
}

/// Whether `family`'s products run on tensor cores, so that its FLOP/s are set against the
/// device's f16 tensor peak rather than its f32 one: the fast class's matmul and attention
/// (f16 multiplicands, f32 accumulators). Everything else stays f32 in either class.
fn on_tensor_cores(family: Family, fast_class: bool) -> bool {
    fast_class && matches!(family, Family::Matmul | Family::Attention)
}

/// The FLOPs of the families the model counter counts.
fn counted(table: &Table) -> f64 {
    Family::ALL
        .iter()
        .zip(table)
        .filter(|(f, _)| f.in_model_count())
        .map(|(_, s)| s.flops)
        .sum()
}

/// (GFLOP/s, GB/s) of `cost` done in `seconds`; 0 for an untimed family.
/// One family's row: its costs `c` over `seconds` a step, of the step's `total` timed seconds,
/// against the device's physical peaks where known (the f16 tensor peak for the fast class's
/// products) and against the measured `peaks`.
fn family_row(
    family: Family,
    c: &Stat,
    seconds: f64,
    total: f64,
    physical: Option<&Physical>,
    fast_class: bool,
    peaks: &Peaks,
) -> FamilyRow {
    let (gflops, gbps) = rates(c, seconds);
    let against = physical_peaks::against(
        gflops,
        gbps,
        physical,
        on_tensor_cores(family, fast_class),
        peaks.matmul_gflops,
        peaks.stream_gbps,
    );
    FamilyRow {
        family: family.name(),
        calls: c.calls,
        ms_per_step: seconds * 1e3,
        share: if total > 0.0 { seconds / total } else { 0.0 },
        flops: c.flops,
        bytes: c.bytes,
        gflops,
        gbps,
        of_flops_peak: against.of_flops_peak,
        flops_reference: against.flops_reference,
        of_memory_peak: against.of_memory_peak,
        memory_reference: against.memory_reference,
        of_matmul_peak: physical_peaks::share(gflops, peaks.matmul_gflops),
        of_stream_peak: physical_peaks::share(gbps, peaks.stream_gbps),
        in_model_count: family.in_model_count(),
    }
}

fn rates(cost: &Stat, seconds: f64) -> (f64, f64) {
    if seconds <= 0.0 {
        return (0.0, 0.0);
    }
    (cost.flops / seconds / 1e9, cost.bytes / seconds / 1e9)
}

/// The device's matmul and stream rates, with the default kernels, each the best of a few runs after one to warm up, at
/// the first size whose run takes long enough that launching it does not dominate: the matmul's
/// n doubles, the stream's length grows to 2^24 values (64 MiB, within any device's binding)
/// and then repeats in one submission. Lavapipe needs a second at n 384, an H200 a millisecond
/// at n 4096.
fn device_peaks<B: Backend>(be: &B, kind: BackendKind, wait: &dyn Fn() -> engine::Result<()>) -> Result<Peaks> {
    const LONG_ENOUGH_S: f64 = 0.02;
    let (mut n, max_n, mut values) = match kind {
        BackendKind::Cpu | BackendKind::Auto => (1024, 1024, 1 << 24),
        BackendKind::Gpu => (384, 4096, 1 << 22),
    };
    let best = |run: &dyn Fn()| -> Result<f64> {
        let mut best = f64::INFINITY;
        for rep in 0..4 {
            let start = Instant::now();
            run();
            be.flush()?;
            wait()?;
            if rep > 0 {
                best = best.min(start.elapsed().as_secs_f64());
            }
        }
        Ok(best)
    };
    let mm = loop {
        let (a, x, out) = (
            be.zeros("peak a", n * n)?,
            be.zeros("peak b", n * n)?,
            be.zeros("peak out", n * n)?,
        );
        let seconds = best(&|| be.matmul(&out, &a, &x, MatmulDims::new(n, n, n)))?;
        if seconds >= LONG_ENOUGH_S || n * 2 > max_n {
            break seconds;
        }
        n *= 2;
    };
    let mut repeats = 1;
    let stream = loop {
        let (a, x, out) = (
            be.zeros("stream a", values)?,
            be.zeros("stream b", values)?,
            be.zeros("stream out", values)?,
        );
        let seconds = best(&|| (0..repeats).for_each(|_| be.add(&out, &a, &x)))? / repeats as f64;
        if seconds * repeats as f64 >= LONG_ENOUGH_S || repeats >= 64 {
            break seconds;
        }
        if values < 1 << 24 {
            values *= 4;
        } else {
            repeats *= 2;
        }
    };
    Ok(Peaks {
        matmul_n: n,
        matmul_gflops: 2.0 * (n as f64).powi(3) / mm / 1e9,
        stream_values: values,
        stream_gbps: 12.0 * values as f64 / stream / 1e9,
    })
}

/// Peak resident memory from /proc/self/status (Linux); None elsewhere.
fn peak_rss() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

fn print(r: &Report) {
    say(&format!(
        "{} ({} parameters) on {}, {} class, batch {}×{} tokens, {} timed steps after {} warm-up",
        r.arch, r.params, r.backend, r.precision, r.batch, r.seq_len, r.timed_steps, r.warmup_steps
    ));
    say(&format!(
        "{:.0} tokens/s; {:.1} ms/step (median; {:.1}-{:.1}); peak memory {:.1} MiB on the device, {:.1} MiB \
         resident",
        r.tokens_per_s,
        r.ms_per_step.median,
        r.ms_per_step.min,
        r.ms_per_step.max,
        r.peak_device_bytes as f64 / 1048576.0,
        r.peak_rss_bytes as f64 / 1048576.0
    ));
    say(&format!(
        "FLOPs per token: {:.0} forward (resmem count), {:.0} forward (families), {:.0} a training step; \
         {:.2} GFLOP/s achieved",
        r.model_flops_per_token, r.forward_flops_per_token, r.step_flops_per_token, r.achieved_gflops
    ));
    say(&format!(
        "measured peaks on this device: matmul {}³ {:.2} GFLOP/s, stream (a+b) {:.2} GB/s; families timed {}; \
         matmul path {}",
        r.peaks.matmul_n, r.peaks.matmul_gflops, r.peaks.stream_gbps, r.family_timing, r.matmul_path
    ));
    match &r.physical_peaks {
        Some(p) => say(&format!(
            "physical peaks of the {} ({}): f32 {:.1} TFLOP/s, TF32 tensor {:.1}, f16/bf16 tensor {:.1} (dense); \
             {} {:.2} TB/s",
            p.device,
            p.source,
            p.f32_gflops / 1e3,
            p.tf32_tensor_gflops / 1e3,
            p.f16_tensor_gflops / 1e3,
            p.memory,
            p.memory_gbps / 1e3
        )),
        None => say("physical peaks: not known for this device; the families' percentages are of the measured peaks"),
    }
    if !r.tuned.is_empty() {
        let tiles: Vec<String> = r
            .tuned
            .iter()
            .map(|(class, chosen)| format!("{class}: {chosen}"))
            .collect();
        say(&format!("tuned kernels: {}", tiles.join("; ")));
    }
    say("");
    for line in family_table(r) {
        say(&line);
    }
    if !r.kernels.is_empty() {
        say("");
        say(&format!("the slowest kernels (of {}):", r.kernels.len()));
        say("| kernel | family | launches | ms/step | share |");
        say("|---|---|---:|---:|---:|");
        for k in r.kernels.iter().take(SLOWEST_KERNELS) {
            say(&format!(
                "| {} | {} | {} | {:.3} | {:.1}% |",
                k.kernel,
                k.family,
                k.launches,
                k.ms_per_step,
                100.0 * k.share
            ));
        }
    }
}

/// The families' table: with the physical peaks' columns first where the device is known (each
/// FLOP/s cell naming its peak, f32 or f16 tensor), and the measured peaks' columns always.
fn family_table(r: &Report) -> Vec<String> {
    let physical = r.physical_peaks.is_some();
    let mut lines = vec![
        format!(
            "| family | calls | ms/step | share | GFLOP/step | MB/step | GFLOP/s | GB/s | {}% measured matmul peak \
             | % measured stream peak |",
            if physical {
                "% physical FLOP/s peak | % physical memory peak | "
            } else {
                ""
            }
        ),
        format!(
            "|---|---:|---:|---:|---:|---:|---:|---:|{}---:|---:|",
            if physical { "---:|---:|" } else { "" }
        ),
    ];
    for f in &r.families {
        let of_physical = if physical {
            format!(
                "{:.1}% ({}) | {:.1}% | ",
                100.0 * f.of_flops_peak,
                f.flops_reference.trim_start_matches("physical "),
                100.0 * f.of_memory_peak
            )
        } else {
            String::new()
        };
        lines.push(format!(
            "| {} | {} | {:.2} | {:.1}% | {:.3} | {:.1} | {:.2} | {:.2} | {of_physical}{:.1}% | {:.1}% |",
            f.family,
            f.calls,
            f.ms_per_step,
            100.0 * f.share,
            f.flops / 1e9,
            f.bytes / 1e6,
            f.gflops,
            f.gbps,
            100.0 * f.of_matmul_peak,
            100.0 * f.of_stream_peak
        ));
    }
    lines
}

/// Kernels the table lists; `--json` has them all.
const SLOWEST_KERNELS: usize = 12;

#[cfg(test)]
mod tests {
    use super::*;

    fn report(backend: &str) -> Report {
        let physical = physical_peaks::for_backend(backend).copied();
        let peaks = Peaks {
            matmul_n: 3072,
            matmul_gflops: 15_075.0,
            stream_values: 1 << 24,
            stream_gbps: 1_488.0,
        };
        // One call a family, 1 ms of a 2 ms step, at `gflops` and `gbps`.
        let row = |family: Family, gflops: f64, gbps: f64| {
            let cost = Stat {
                calls: 1,
                flops: gflops * 1e6,
                bytes: gbps * 1e6,
                seconds: 0.0,
            };
            family_row(family, &cost, 1e-3, 2e-3, physical.as_ref(), false, &peaks)
        };
        Report {
            arch: "transformer".into(),
            backend: backend.into(),
            family_timing: "timestamps",
            matmul_path: "subgroup".into(),
            precision: "strict".into(),
            batch: 8,
            seq_len: 512,
            params: 1,
            warmup_steps: 1,
            timed_steps: 1,
            tokens_per_s: 1.0,
            ms_per_step: Spread {
                median: 1.0,
                min: 1.0,
                max: 1.0,
            },
            peak_device_bytes: 1,
            peak_rss_bytes: 1,
            model_flops_per_token: 1.0,
            forward_flops_per_token: 1.0,
            step_flops_per_token: 1.0,
            achieved_gflops: 1.0,
            families: vec![
                row(Family::Matmul, 16_000.0, 100.0),
                row(Family::Elementwise, 10.0, 1_000.0),
            ],
            peaks,
            physical_peaks: physical,
            peak_reference: String::new(),
            kernels: Vec::new(),
            tuned: Vec::new(),
        }
    }

    #[test]
    fn the_family_table_says_which_peak_each_percentage_is_of() {
        let h100 = family_table(&report("gpu (NVIDIA H100 80GB HBM3, Vulkan)"));
        assert!(h100[0].contains("| % physical FLOP/s peak | % physical memory peak | % measured matmul peak |"));
        assert_eq!(h100[0].matches('|').count(), h100[1].matches('|').count());
        // 16,000 GFLOP/s: 23.9% of the H100 SXM's f32 peak, 106.1% of the measured 15,075.
        assert!(
            h100[2].ends_with("| 23.9% (f32) | 3.0% | 106.1% | 6.7% |"),
            "{}",
            h100[2]
        );
        assert_eq!(h100[2].matches('|').count(), h100[0].matches('|').count());

        let lavapipe = family_table(&report("gpu (llvmpipe (LLVM 17.0.6, 256 bits), Vulkan)"));
        assert!(!lavapipe[0].contains("physical"), "{}", lavapipe[0]);
        assert!(lavapipe[0].ends_with("| % measured matmul peak | % measured stream peak |"));
        assert!(lavapipe[2].ends_with("| 106.1% | 6.7% |"), "{}", lavapipe[2]);
        assert_eq!(lavapipe[2].matches('|').count(), lavapipe[0].matches('|').count());
    }

    #[test]
    fn only_the_fast_class_products_are_set_against_tensor_cores() {
        for family in Family::ALL {
            assert!(!on_tensor_cores(family, false), "{family:?}");
            assert_eq!(
                on_tensor_cores(family, true),
                matches!(family, Family::Matmul | Family::Attention),
                "{family:?}"
            );
        }
    }
}
