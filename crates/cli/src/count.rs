//! `resmem count`: parameters and forward FLOPs per sequence, from the paper's Table 7 formulas
//! and from the model as built.

use crate::args::{Arch, CountArgs};
use anyhow::Result;
use models::count::{self, thousands, Counts};

pub fn run(args: CountArgs) -> Result<()> {
    let d = args.model.preset()?;
    let dims = &args.model.dims;
    let (counts, n, describe) = match args.model.arch {
        Arch::Memoryformer => return memoryformer(&args),
        Arch::Transformer => {
            let c = dims.transformer(d.transformer());
            c.validate()?;
            let describe = format!(
                "transformer: L={} D={} H={} D_h={} D_FF={} V={} N={}",
                c.n_layers, c.d_model, c.n_heads, c.head_dim, c.d_ff, c.vocab, c.seq_len
            );
            (count::transformer(&c), c.seq_len, describe)
        }
        Arch::Rmt => {
            let c = dims.rmt(d.rmt());
            c.validate()?;
            let describe = format!(
                "rmt: L={} D_k={} D_v={} R={} D_FF={} V={} N={} (residual {})",
                c.n_layers,
                c.d_k,
                c.d_v,
                c.rank,
                c.d_ff,
                c.vocab,
                c.seq_len,
                c.residual()
            );
            (count::rmt(&c), c.seq_len, describe)
        }
    };
    if args.json {
        println!("{}", serde_json::to_string(&counts)?);
    } else {
        print(&describe, &counts, n);
    }
    Ok(())
}

fn print(describe: &str, c: &Counts, n: usize) {
    println!("{describe}");
    println!("                     {:>18} {:>18}", "as built", "paper (Table 7)");
    println!(
        "parameters           {:>18} {:>18}",
        thousands(c.params),
        thousands(c.params_paper)
    );
    println!(
        "forward FLOPs/seq    {:>18} {:>18}",
        thousands(c.flops_fwd),
        thousands(c.flops_fwd_paper)
    );
    println!(
        "forward FLOPs/token  {:>18} {:>18}",
        thousands(c.flops_fwd / n as u64),
        thousands(c.flops_fwd_paper / n as u64)
    );
}

fn memoryformer(_args: &CountArgs) -> Result<()> {
    anyhow::bail!("not yet")
}
