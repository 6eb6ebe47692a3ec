//! `resmem count`: parameters and forward FLOPs per sequence, from the paper's Table 7 formulas
//! and from the model as built.

use crate::args::CountArgs;
use anyhow::Result;
use models::count::{self, thousands, Counts};
use models::Arch;
use models::{MemoryFormerConfig, ModelConfig};

pub fn run(args: CountArgs) -> Result<()> {
    args.model.check_applies()?;
    if args.model.arch == Arch::MemoryFormer {
        if let Some(table) = args.paper_table {
            return paper_table(table);
        }
    }
    anyhow::ensure!(
        args.paper_table.is_none(),
        "--paper-table reproduces the MemoryFormer paper's tables; pass --arch memoryformer"
    );
    let cfg = args.model.config()?;
    if let Some(name) = &args.match_preset {
        return matched(&args, cfg, name);
    }
    // Counted first: a config whose counts overflow gets that error, naming the setting.
    match &cfg {
        ModelConfig::Transformer(c) => {
            let counts = count::try_transformer(c)?;
            c.validate()?;
            let values = match c.value_residual {
                models::ValueResidual::Off => "",
                models::ValueResidual::Half => " (value residual: half)",
                models::ValueResidual::Learnable => " (value residual: learnable)",
            };
            let describe = format!(
                "transformer: L={} D={} H={} D_h={} D_FF={} V={} N={}{values}",
                c.n_layers, c.d_model, c.n_heads, c.head_dim, c.d_ff, c.vocab, c.context
            );
            show(args.json, &counts, || {
                print(&describe, "paper (Table 7)", &counts, c.context)
            })
        }
        ModelConfig::Rmt(c) => {
            let counts = count::try_rmt(c)?;
            c.validate()?;
            let describe = format!(
                "rmt: L={} D_k={} D_v={} R={} D_FF={} V={} N={} (residual {})",
                c.n_layers,
                c.d_k,
                c.d_v,
                c.rank,
                c.d_ff,
                c.vocab,
                c.context,
                c.residual()
            );
            show(args.json, &counts, || {
                print(&describe, "paper (Table 7)", &counts, c.context)
            })
        }
        ModelConfig::Hybrid(c) => {
            let h = count::try_hybrid(c)?;
            c.validate()?;
            let describe = format!(
                "hybrid: L={} D_k={} D_v={} R={} τ={} (K={}, ML1 to {}) V={} N={} (residual {})",
                c.n_layers,
                c.d_k,
                c.d_v,
                c.rank,
                c.tau,
                c.chunks(),
                c.d_hidden(),
                c.vocab,
                c.context,
                c.residual()
            );
            show(args.json, &h, || {
                print(&describe, "paper (docs/models.md)", &h.counts, c.context);
                out!(
                    "hash tables          {:>18} ({:.1}% of the parameters, {:.1} MB in f32)",
                    thousands(h.table_params),
                    100.0 * h.table_params as f64 / h.counts.params.max(1) as f64,
                    h.table_mb_f32
                );
            })
        }
        ModelConfig::MemoryFormer(c) => {
            c.validate()?;
            memoryformer(args.json, c)
        }
        ModelConfig::Hc(c) => {
            let h = models::count::try_hc(c)?;
            c.validate()?;
            let describe = format!(
                "hc ({}, {} init, {} collapse): L={} n={} D={} H={} D_h={} D_FF={} V={} N={} (residual {})",
                c.mixing.name(),
                c.init().name(),
                c.collapse().name(),
                c.n_layers,
                c.streams,
                c.d_model,
                c.n_heads,
                c.head_dim,
                c.d_ff,
                c.vocab,
                c.context,
                c.streams * c.d_model
            );
            let paper = match c.mixing {
                models::HcMixing::Hc => "HC paper (Eq. 25, one s_α)",
                _ => "mHC paper (Eq. 7, gain apart)",
            };
            show(args.json, &h, || {
                print(&describe, paper, &h.model, c.context);
                out!(
                    "each of {} sites    {:>18} parameters ({} in the paper's convention), {} multiply-adds a token",
                    2 * c.n_layers,
                    thousands(h.site_params),
                    thousands(h.site_params_paper),
                    thousands(h.site_macs)
                );
            })
        }
        ModelConfig::Altup(c) => {
            let counts = models::count::try_altup(c)?;
            c.validate()?;
            let describe = format!(
                "altup ({} active, on the {}): L={} K={} D={} H={} D_h={} D_FF={} V={} N={} (residual {})",
                match c.active {
                    models::AltupActive::Alternating => "alternating",
                    models::AltupActive::Fixed => "fixed",
                },
                match c.compute_on {
                    models::AltupInput::Old => "old sub-block",
                    models::AltupInput::Predicted => "prediction",
                },
                c.n_layers,
                c.sub_blocks,
                c.d_model,
                c.n_heads,
                c.head_dim,
                c.d_ff,
                c.vocab,
                c.context,
                c.sub_blocks * c.d_model
            );
            show(args.json, &counts, || {
                print(&describe, "paper (Table 7 + AltUp's)", &counts, c.context);
                out!(
                    "each of {} layers    {:>18} parameters (P and g), {} multiply-adds a token in the paper's convention",
                    c.n_layers,
                    c.sub_blocks * (c.sub_blocks + 1),
                    thousands(((c.sub_blocks * c.sub_blocks + c.sub_blocks + 1) * c.d_model) as u64)
                );
            })
        }
        ModelConfig::AttnRes(c) => {
            let counts = models::count::try_attnres(c)?;
            c.validate()?;
            let sources = models::count::attnres_sources(c);
            let describe = format!(
                "attnres (Block, {} depth blocks of {} sites{}{}): L={} D={} H={} D_h={} D_FF={} V={} N={} (state {})",
                c.depth_blocks,
                c.block_sites(),
                if c.depth_blocks == 2 * c.n_layers { ": Full" } else { "" },
                c.depth_keys.described(),
                c.n_layers,
                c.d_model,
                c.n_heads,
                c.head_dim,
                c.d_ff,
                c.vocab,
                c.context,
                (c.depth_blocks + 1) * c.d_model
            );
            show(args.json, &counts, || {
                print(&describe, "paper (Table 7 + AttnRes's)", &counts, c.context);
                out!(
                    "each of {} reads     {:>18} parameters (w and γ); {} sources in all, {} multiply-adds a token in the paper's convention",
                    2 * c.n_layers + 1,
                    2 * c.d_model,
                    sources,
                    thousands((2 * sources * c.d_model) as u64)
                );
            })
        }
    }
}

/// `--match`: solves the sizes, then prints them with both models' costs.
fn matched(args: &CountArgs, model: ModelConfig, name: &str) -> Result<()> {
    anyhow::ensure!(
        args.tolerance.is_finite() && args.tolerance > 0.0,
        "--tolerance must be a positive fraction, e.g. 0.02 for 2%"
    );
    let mut target = models::RunConfig::preset(name)?.model;
    target.set_vocab(model.vocab());
    target.set_context(model.context());
    let t = model.context();
    let keys = args
        .solve
        .iter()
        .map(|n| crate::args::size_names(n).map(|(_, key)| key.to_string()))
        .collect::<Result<Vec<_>>>()?;
    let (solved, s) = models::matching::solve(&model, &target, t, &args.hold, &keys, args.tolerance)?;
    solved.validate()?;
    show(args.json, &s, || {
        let values: Vec<String> = s.values.iter().map(|(k, v)| format!("{k} = {v}")).collect();
        out!(
            "{} matched to {name} ({}) at V={} N={t}: {}",
            model.arch(),
            target.arch(),
            model.vocab(),
            values.join(", ")
        );
        out!("                     {:>18} {:>18} {:>9}", "solved", name, "ratio");
        out!(
            "parameters           {:>18} {:>18} {:>9.4}",
            thousands(s.costs.params as u64),
            thousands(s.target.params as u64),
            s.params_ratio
        );
        out!(
            "FLOPs per token      {:>18} {:>18} {:>9.4}",
            thousands(s.costs.flops_per_token.round() as u64),
            thousands(s.target.flops_per_token.round() as u64),
            s.flops_ratio
        );
    })
}

/// Prints `counts` as JSON, or the table `table` prints.
fn show<T: serde::Serialize>(json: bool, counts: &T, table: impl FnOnce()) -> Result<()> {
    match json {
        true => out!("{}", serde_json::to_string(counts)?),
        false => table(),
    }
    Ok(())
}

fn print(describe: &str, paper: &str, c: &Counts, n: usize) {
    out!("{describe}");
    out!("                     {:>18} {:>18}", "as built", paper);
    out!(
        "parameters           {:>18} {:>18}",
        thousands(c.params),
        thousands(c.params_paper)
    );
    out!(
        "forward FLOPs/seq    {:>18} {:>18}",
        thousands(c.flops_fwd),
        thousands(c.flops_fwd_paper)
    );
    out!(
        "forward FLOPs/token  {:>18} {:>18}",
        thousands(c.flops_fwd / n as u64),
        thousands(c.flops_fwd_paper / n as u64)
    );
}

fn paper_table(n: u8) -> Result<()> {
    match n {
        1 => table1(),
        3 => table3(),
        n => anyhow::bail!("the MemoryFormer paper's tables with counts are 1 and 3, not {n}"),
    }
}

/// Per-block FLOPs beside a dense block of the same width, and the table memory.
fn memoryformer(json: bool, c: &MemoryFormerConfig) -> Result<()> {
    let b = count::try_memoryformer_block(c)?;
    if json {
        out!("{}", serde_json::to_string(&b)?);
        return Ok(());
    }
    out!(
        "memoryformer block: d={} H={} τ={} K={} (ML1 to {}), s={}",
        c.d_model,
        c.n_heads,
        c.tau,
        c.chunks(),
        c.d_hidden(),
        c.context
    );
    out!("FLOPs per block, one per multiply-accumulate (the paper's convention):");
    out!(
        "                      {:>16} {:>16} {:>16}",
        "as built",
        "paper",
        "dense block"
    );
    // Paper sizes read in G; toy sizes would all print 0.00 G, so they are written out.
    let g = |x: u64| match x >= 10_000_000 {
        true => format!("{:.2} G", x as f64 / 1e9),
        false => thousands(x),
    };
    out!(
        "without attention     {:>16} {:>16} {:>16}",
        g(b.block_flops_no_attn),
        g(b.block_flops_no_attn_paper),
        g(b.dense_block_flops_no_attn_paper)
    );
    out!(
        "total                 {:>16} {:>16} {:>16}",
        g(b.block_flops),
        g(b.block_flops_paper),
        g(b.dense_block_flops_paper)
    );
    let t = b.table_mb_f16;
    out!(
        "table memory (MB, f16): q {:.1}, k {:.1}, v {:.1}, ml1 {:.1}, ml2 {:.1}",
        t.q,
        t.k,
        t.v,
        t.ml1,
        t.ml2
    );
    Ok(())
}

/// MemoryFormer paper Table 1: per-block FLOPs at s = 2048 of each Pythia model and the
/// MemoryFormer (τ = 8) built on it.
fn table1() -> Result<()> {
    out!(
        "{:<14} {:>7} {:>7} {:>16} {:>12}",
        "model",
        "layers",
        "hidden",
        "FLOPs w/o attn",
        "total FLOPs"
    );
    let g = |x: u64| format!("{:.1} G", x as f64 / 1e9);
    let names = ["tiny", "small", "base"];
    for (&(name, ..), mf) in models::presets::PYTHIA.iter().zip(names) {
        let c = models::presets::memoryformer(name)?;
        let b = count::try_memoryformer_block(&c)?;
        let row = |label: String, no_attn: u64, total: u64| {
            out!(
                "{label:<14} {:>7} {:>7} {:>16} {:>12}",
                c.n_layers,
                c.d_model,
                g(no_attn),
                g(total)
            )
        };
        row(
            name.to_string(),
            b.dense_block_flops_no_attn_paper,
            b.dense_block_flops_paper,
        );
        row(format!("MF-{mf}"), b.block_flops_no_attn_paper, b.block_flops_paper);
    }
    out!("(the paper's formulas, one FLOP per multiply-accumulate; `--preset NAME` shows the model as built)");
    Ok(())
}

/// MemoryFormer paper Table 3: at d = 512, the trade between τ and K, with the memory of ML_Q.
fn table3() -> Result<()> {
    out!(
        "{:>5} {:>4} {:>5} {:>18} {:>16}",
        "d",
        "τ",
        "K",
        "ML_Q FLOPs (s·K·(τ+d))",
        "ML_Q memory"
    );
    for tau in [4, 8, 10] {
        let c = models::MemoryFormerConfig {
            tau,
            ..models::presets::memoryformer("pythia-70m")?
        };
        let (k, d, s) = (c.chunks() as u64, c.d_model as u64, c.context as u64);
        let b = count::try_memoryformer_block(&c)?;
        out!(
            "{:>5} {:>4} {:>5} {:>18} {:>13.1} MB",
            k * tau as u64,
            tau,
            k,
            format!("{:.2} G", s as f64 * k as f64 * (tau as f64 + d as f64) / 1e9),
            b.table_mb_f16.q
        );
    }
    out!("(d is the hashed width K·τ; ML_Q's output stays 512 wide)");
    Ok(())
}
