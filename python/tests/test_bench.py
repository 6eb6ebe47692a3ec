"""`python -m resmem_jax.bench` on a tiny run: 2 timed steps, and the JSON carries the keys
`resmem bench --json` uses for its speed (tokens_per_s, ms_per_step.median/min/max) and what says
what was timed. No timing is asserted. A missing tool (jax, the resmem binary) is a failure,
never a skip. The binary is $RESMEM, by default target/release/resmem of this checkout.
Run: python -m pytest python/tests/test_bench.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from binary import ROOT
from binary import run as resmem

import jax  # noqa: E402,F401  (a missing jax fails here, as it must)


def test_bench_prints_resmem_bench_keys():
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "r"
        resmem("train", "--arch", "rmt", "--task", "copy", "--batch", "4", "--seq-len", "16",
               "--steps", "1", "--backend", "cpu", "--out", str(run))
        done = subprocess.run(
            [sys.executable, "-m", "resmem_jax.bench", "--run", str(run), "--steps", "2", "--warmup", "1", "--json"],
            capture_output=True, text=True, cwd=ROOT / "python",
            env=dict(os.environ, JAX_PLATFORMS=os.environ.get("JAX_PLATFORMS", "cpu")),
        )
        assert done.returncode == 0, f"resmem_jax.bench failed:\n{done.stderr}"
        r = json.loads(done.stdout)
        for key in ("arch", "backend", "batch", "seq_len", "params", "warmup_steps", "timed_steps",
                    "tokens_per_s", "ms_per_step", "jax_version"):
            assert key in r, f"no {key!r} in {sorted(r)}"
        for key in ("median", "min", "max"):
            assert key in r["ms_per_step"], f"no ms_per_step.{key} in {r['ms_per_step']}"
            assert isinstance(r["ms_per_step"][key], float) and r["ms_per_step"][key] > 0
        assert r["ms_per_step"]["min"] <= r["ms_per_step"]["median"] <= r["ms_per_step"]["max"]
        assert (r["arch"], r["batch"], r["seq_len"], r["timed_steps"], r["warmup_steps"]) == ("rmt", 4, 16, 2, 1)
        assert r["tokens_per_s"] > 0
        assert r["params"] > 0
        # tokens/s is batch · seq_len over the median step, as resmem bench computes it
        want = r["batch"] * r["seq_len"] / (r["ms_per_step"]["median"] / 1e3)
        assert abs(r["tokens_per_s"] - want) <= 1e-6 * want
        # the run directory is only read: its schedule and files are as resmem wrote them
        assert "steps = 1\n" in (run / "config.toml").read_text()
        assert not (run / "checkpoints" / "step-000000004.safetensors").exists()
