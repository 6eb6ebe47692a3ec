"""`resmem export jax` then JAX, as the README's "When one machine is not enough" runs it.

resmem trains an RMT on the copy task with checkpoints; `resmem export jax` writes a run
directory with its newest checkpoint and prints the command to go on; JAX extends it
(`resmem_jax.train`, `--steps`) and `resmem eval` of the result gives JAX's own validation
loss; a second export into the same directory is refused. A missing tool fails, never skips.
The binary is $RESMEM, by default target/release/resmem of this checkout.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

from binary import ROOT
from binary import run as resmem
sys.path.insert(0, str(ROOT / "python"))

from resmem_jax.train import train  # noqa: E402  (a missing jax fails here, as it must)



def test_an_exported_run_continues_in_jax_and_comes_back():
    with tempfile.TemporaryDirectory() as tmp:
        run, out = Path(tmp) / "r", Path(tmp) / "j"
        resmem("train", "--arch", "rmt", "--task", "copy", "--steps", "10", "--checkpoint-every", "5",
               "--backend", "cpu", "--out", str(run))
        said = resmem("export", "jax", "--run", str(run), "--out", str(out)).stdout
        assert f"python -m resmem_jax.train --run {out}" in said and "--coordinator" in said, said
        assert (out / "checkpoints" / "step-000000010.safetensors").is_file()
        assert (out / "config.toml").read_bytes() == (run / "config.toml").read_bytes()
        result = train(out, steps=16, quiet=True)
        assert result["step"] == 16
        back = json.loads(resmem("eval", "--run", str(out), "--json", "--backend", "cpu").stdout)
        assert abs(back["val_loss"] - result["val_loss"]) <= 1e-5 * abs(result["val_loss"]), (back, result)
        refused = resmem("export", "jax", "--run", str(run), "--out", str(out), ok=False)
        assert "holds a run" in refused.stderr or "already" in refused.stderr, refused.stderr


if __name__ == "__main__":
    test_an_exported_run_continues_in_jax_and_comes_back()
    print("ok")
