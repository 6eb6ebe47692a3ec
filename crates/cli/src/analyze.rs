//! `resmem analyze variance`: how variance propagates through storage and retrieval, in closed
//! form (RMT paper Table 1) or measured by hooks on a real batch.

use crate::args::{BackendKind, InitArg, VarianceArgs};
use crate::{load, source};
use anyhow::Result;
use clap::ValueEnum;
use data::{ByteTokenizer, TaskSampler};
use engine::Backend;
use models::probes::Measured;
use models::variance::{self, InitScheme};
use models::{ModelConfig, Purpose, TrainConfig, Trainer, WeightInit};
use std::path::Path;

pub fn variance(args: VarianceArgs) -> Result<()> {
    if let Some(run) = &args.run {
        return of_run(run, &args);
    }
    args.model.check_applies()?;
    if args.measured {
        return crate::with_backend!(args.backend, be => measured(be, &args));
    }
    let init = scheme(args.init);
    let cfg = args.model.config()?;
    let Some(rows) = variance::closed_form(&cfg, init) else {
        anyhow::bail!(
            "variance propagation covers storage and retrieval (--arch rmt or hybrid) and the linear layers \
             they replace (--arch transformer); for MemoryFormer see `resmem analyze buckets`"
        );
    };
    cfg.validate()?;
    if args.json {
        out!("{}", serde_json::to_string_pretty(&rows)?);
    } else {
        out!(
            "{:<12} {:<5} {:<10} {:>12} {:>12}",
            "model",
            "layer",
            "op",
            "σ²out/σ²in",
            "σ²gin/σ²gout"
        );
        for r in rows {
            let (layer, op) = (json_name(&r.layer)?, json_name(&r.op)?);
            out!(
                "{:<12} {:<5} {:<10} {:>12} {:>12}",
                r.model,
                layer,
                op,
                ratio(r.forward_ratio),
                ratio(r.backward_ratio)
            );
        }
    }
    Ok(())
}

fn scheme(init: InitArg) -> InitScheme {
    match init {
        InitArg::Xavier => InitScheme::Xavier,
        InitArg::Lecun => InitScheme::Lecun,
        InitArg::Default => InitScheme::Default,
    }
}

/// The weight init, fan-in scale and output scaling that make a model start as `init` says.
fn start_as(init: InitArg, weight_init: &mut WeightInit, init_std: &mut f32, scaled_output_init: &mut bool) {
    match init {
        InitArg::Xavier => *weight_init = WeightInit::Xavier,
        InitArg::Lecun => (*weight_init, *init_std, *scaled_output_init) = (WeightInit::FanIn, 1.0, false),
        InitArg::Default => {}
    }
}

/// Measured ratios of the storages and retrievals of an RMT or a hybrid, or of the transformer's
/// linear layers, per block, on a batch of the task, with the closed form of `--init` beside:
/// the model starts as `--init` says.
fn measured<B: Backend + 'static>(be: &B, args: &VarianceArgs) -> Result<()> {
    let mut cfg = args.model.config()?;
    // (W_U starts at zero, weight init, init std, output scaling) of the models with probes.
    let (zero_unembedding, weight_init, init_std, scaled_output_init) = match &mut cfg {
        ModelConfig::Rmt(c) => (
            &mut c.zero_unembedding,
            &mut c.weight_init,
            &mut c.init_std,
            &mut c.scaled_output_init,
        ),
        ModelConfig::Hybrid(c) => (
            &mut c.zero_unembedding,
            &mut c.weight_init,
            &mut c.init_std,
            &mut c.scaled_output_init,
        ),
        ModelConfig::Transformer(c) => (
            &mut c.zero_unembedding,
            &mut c.weight_init,
            &mut c.init_std,
            &mut c.scaled_output_init,
        ),
        _ => anyhow::bail!("--measured probes storage and retrieval; pass --arch rmt, hybrid or transformer"),
    };
    *zero_unembedding = !args.random_unembedding;
    start_as(args.init, weight_init, init_std, scaled_output_init);
    let closed = variance::closed_form(&cfg, scheme(args.init)).unwrap_or_default();
    cfg.set_vocab(ByteTokenizer::VOCAB);
    cfg.set_context(args.tokens);
    let host = crate::Host::batches(1, args.batch, args.tokens, "--batch or --tokens");
    crate::check_memory(&cfg, args.batch, args.tokens, Purpose::Train, args.backend, host)?;
    let model = cfg.build(be, args.batch, args.tokens, Purpose::Train, args.seed)?;
    let train = TrainConfig {
        batch: args.batch,
        steps: args.steps.max(1),
        seed: args.seed,
        ..Default::default()
    };
    let mut trainer = Trainer::new(be, model, train)?;
    let mut sampler =
        TaskSampler::new(args.task, args.batch, args.tokens, args.seed.wrapping_add(1)).map_err(anyhow::Error::msg)?;
    for _ in 0..args.steps {
        crate::train::check_stop("--steps")?;
        trainer.step(be, &sampler.next_batch())?;
    }
    let rows = pollster::block_on(trainer.measure(be, &sampler.next_batch()))?
        .ok_or_else(|| anyhow::anyhow!("this model has no variance probes"))?;
    let heading = format!(
        "{} after {} steps, measured on a batch of {}; it started as --init {} says, and the closed form is that init's",
        cfg.arch(),
        args.steps,
        args.task,
        args.init.to_possible_value().map_or(String::new(), |v| v.get_name().to_string())
    );
    let report = Report {
        model: cfg.arch().name(),
        tag: ("step", args.steps.into()),
        heading,
        no_gradient: "W_U starts at zero. Pass --random-unembedding or --steps.",
    };
    report.print(&rows, &closed, args.json)
}

/// How to print one measurement beside its closed form.
struct Report<'a> {
    model: &'a str,
    /// A field every JSON row carries: the steps trained, or the checkpoint measured.
    tag: (&'static str, serde_json::Value),
    heading: String,
    /// Why a backward ratio is n/a, and what to do.
    no_gradient: &'static str,
}

impl Report<'_> {
    /// JSON rows, or a table of every site and then of each kind of site over the blocks.
    fn print(&self, rows: &[Measured], closed: &[variance::ClosedForm], json: bool) -> Result<()> {
        let closed_of = |m: &Measured| {
            closed
                .iter()
                .find(|c| (c.layer, c.op) == (m.site.layer, m.site.op))
                .copied()
        };
        if json {
            let rows: Vec<_> = rows
                .iter()
                .map(|m| {
                    let c = closed_of(m);
                    let mut row = serde_json::json!({ "model": self.model, "block": m.site.block,
                    "layer": m.site.layer, "op": m.site.op,
                    "forward_ratio": m.forward_ratio, "backward_ratio": m.backward_ratio,
                    "closed_forward_ratio": c.map(|c| c.forward_ratio),
                    "closed_backward_ratio": c.map(|c| c.backward_ratio) });
                    row[self.tag.0] = self.tag.1.clone();
                    row
                })
                .collect();
            out!("{}", serde_json::to_string_pretty(&rows)?);
            return Ok(());
        }
        out!("{}", self.heading);
        let [f, cf, b, cb] = RATIO_HEADS;
        out!(
            "{:<6} {:<5} {:<10} {f:>12} {cf:>12} {b:>12} {cb:>12}",
            "block",
            "layer",
            "op"
        );
        let show = |r: Option<f64>| r.map_or("n/a".to_string(), ratio);
        for m in rows {
            let c = closed_of(m);
            out!(
                "{:<6} {:<5} {:<10} {:>12} {:>12} {:>12} {:>12}",
                m.site.block,
                json_name(&m.site.layer)?,
                json_name(&m.site.op)?,
                show(m.forward_ratio),
                show(c.map(|c| c.forward_ratio)),
                show(m.backward_ratio),
                show(c.map(|c| c.backward_ratio)),
            );
        }
        if rows.iter().any(|m| m.backward_ratio.is_none()) {
            out!("n/a: no gradient reached that layer; {}", self.no_gradient);
        }
        over_blocks(rows, closed_of)
    }
}

/// The variance tables' four columns of ratios: measured and closed form, forward and backward.
const RATIO_HEADS: [&str; 4] = ["σ²out/σ²in", "closed", "σ²gin/σ²gout", "closed"];

/// Each site kind's ratios over the blocks: geometric mean, lowest and highest, beside the
/// closed form, which is the same in every block.
fn over_blocks(rows: &[Measured], closed_of: impl Fn(&Measured) -> Option<variance::ClosedForm>) -> Result<()> {
    let mut kinds: Vec<(models::probes::Layer, models::probes::Op)> = vec![];
    for m in rows {
        if !kinds.contains(&(m.site.layer, m.site.op)) {
            kinds.push((m.site.layer, m.site.op));
        }
    }
    out!("over the blocks: geometric mean [lowest, highest]");
    let [f, cf, b, cb] = RATIO_HEADS;
    out!("{:<5} {:<10} {f:>30} {cf:>10} {b:>30} {cb:>10}", "layer", "op");
    for (layer, op) in kinds {
        let of_kind: Vec<&Measured> = rows
            .iter()
            .filter(|m| (m.site.layer, m.site.op) == (layer, op))
            .collect();
        let spread = |get: &dyn Fn(&Measured) -> Option<f64>| {
            let v: Vec<f64> = of_kind.iter().filter_map(|m| get(m)).filter(|r| *r > 0.0).collect();
            if v.len() < of_kind.len() || v.is_empty() {
                return "n/a".to_string();
            }
            let geo = (v.iter().map(|r| r.ln()).sum::<f64>() / v.len() as f64).exp();
            let (lo, hi) = v
                .iter()
                .fold((f64::INFINITY, 0f64), |(lo, hi), r| (lo.min(*r), hi.max(*r)));
            format!("{} [{}, {}]", ratio(geo), ratio(lo), ratio(hi))
        };
        let c = of_kind.first().and_then(|m| closed_of(m));
        let show = |r: Option<f64>| r.map_or("n/a".to_string(), ratio);
        out!(
            "{:<5} {:<10} {:>30} {:>10} {:>30} {:>10}",
            json_name(&layer)?,
            json_name(&op)?,
            spread(&|m| m.forward_ratio),
            show(c.map(|c| c.forward_ratio)),
            spread(&|m| m.backward_ratio),
            show(c.map(|c| c.backward_ratio)),
        );
    }
    Ok(())
}

/// A run's measured ratios against its closed form.
fn of_run(run: &Path, args: &VarianceArgs) -> Result<()> {
    let (cfg, from, rows) = measure_run(run, args.backend, args.checkpoint.as_deref(), args.at_init)?;
    let closed = variance::closed_form(&cfg.model, InitScheme::Default).unwrap_or_default();
    let report = Report {
        model: cfg.arch().name(),
        tag: ("from", from.clone().into()),
        heading: format!("{} ({from}), measured on its first held-out batch", cfg.arch()),
        no_gradient: "W_U starts at zero, so at init none does.",
    };
    report.print(&rows, &closed, args.json)
}

/// Measures the variance ratios of the run in `run` on its first held-out batch: its model at
/// init (`at_init`, as its seed made it), or the parameters of `checkpoint` (default: the newest
/// checkpoint, else model.safetensors). Returns the run's config, what was measured, and the
/// ratios.
pub fn measure_run(
    run: &Path,
    backend: BackendKind,
    checkpoint: Option<&Path>,
    at_init: bool,
) -> Result<(models::RunConfig, String, Vec<Measured>)> {
    let cfg = load::config(run)?;
    if variance::closed_form(&cfg.model, InitScheme::Default).is_none() {
        anyhow::bail!(
            "{} is a {} run; variance probes cover the RMT, the hybrid and the transformer (for a MemoryFormer, \
             see `resmem analyze buckets`)",
            run.display(),
            cfg.arch()
        );
    }
    crate::with_backend!(backend, be => {
        let data = source::open(&cfg.data)?;
        let (b, t) = (cfg.train.batch, cfg.data.seq_len());
        let host = crate::Host::batches(1, b, t, "the run's batch or seq_len");
        crate::check_memory(&cfg.model, b, t, Purpose::Train, backend, host)?;
        let batch = data.held_out(b, t, cfg.train.seed, 1)?.remove(0);
        let model = cfg.build(be, b, t, Purpose::Train)?;
        let from = match at_init {
            true => "at init".to_string(),
            false => {
                let (values, path) = load::params(run, checkpoint, &model.store().layout)?;
                be.write(&model.store().params, &values);
                path.display().to_string()
            }
        };
        let mut trainer = Trainer::new(be, model, cfg.train.clone())?;
        trainer.mask_documents(cfg.data.separator());
        let rows = pollster::block_on(trainer.measure(be, &batch))?
            .ok_or_else(|| anyhow::anyhow!("this model has no variance probes"))?;
        Ok((cfg.clone(), from, rows))
    })
}

/// 0.5 → "0.5000"; ratios below 0.01 in scientific notation, so that they do not print as 0.
fn ratio(r: f64) -> String {
    if r == 0.0 || r.abs() >= 0.01 {
        format!("{r:.4}")
    } else {
        format!("{r:.4e}")
    }
}

/// The lower-case name serde gives a unit enum variant.
fn json_name<T: serde::Serialize>(x: &T) -> Result<String> {
    Ok(serde_json::to_value(x)?.as_str().unwrap_or_default().to_string())
}
