"""`python -m resmem_jax.evaluate --run DIR [--checkpoint FILE] [--batches M]`: a run's
held-out loss computed in JAX, on the batches `resmem eval` reads, printed as its `--json` is."""

from __future__ import annotations

import argparse
import json

import jax

jax.config.update("jax_default_matmul_precision", "highest")

import jax.numpy as jnp  # noqa: E402

from . import data, run  # noqa: E402
from .layers import mean_loss, targets_i32  # noqa: E402
from .models import from_run  # noqa: E402


def held_out_loss(r: run.Run, run_dir=None, batches: int | None = None) -> dict:
    """Mean CE (and CE + z-loss) over the held-out batches, summed in f64 as resmem's eval does."""
    model = from_run(r)
    sep = data.separator(r.config)
    z = r.model.get("z_loss", 0.0)
    fwd = jax.jit(lambda m, x: m(x, sep))
    ce_sum, total_sum, tokens = 0.0, 0.0, 0
    held = data.held_out(r.config, batches, run_dir)
    for inputs, targets in held:
        logits = fwd(model, jnp.asarray(inputs, jnp.int32))
        ce, total = mean_loss(logits, jnp.asarray(targets_i32(targets)), z)
        ce_sum += float(ce)
        total_sum += float(total)
        tokens += int((targets != 0xFFFFFFFF).sum())
    m = max(len(held), 1)
    return {"val_loss": ce_sum / m, "val_total": total_sum / m, "tokens": tokens}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--run", required=True)
    ap.add_argument("--checkpoint")
    ap.add_argument("--batches", type=int)
    args = ap.parse_args(argv)
    r = run.load_run(args.run, args.checkpoint)
    print(json.dumps(held_out_loss(r, args.run, args.batches)))


if __name__ == "__main__":
    main()
