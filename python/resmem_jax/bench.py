"""`python -m resmem_jax.bench --run DIR [--steps N] [--warmup W] [--json]`: times training steps of
a resmem run's model in JAX, as `resmem bench` times them on resmem's backends.

The step is `resmem_jax.train`'s own (`Trainer.train_step`: the host's schedule values, the batch
placed on the devices, the jitted value_and_grad + clipping + AdamW, the losses read back), not a
copy of it. As `resmem bench` does:
- the schedule runs over warmup + steps steps (the run's own length is set aside in memory; the
  run directory is only read), so no step has a zero learning rate;
- each step's batch is drawn (resmem's sampler, `data.TrainBatches`) before its clock starts;
- the first warm-up step compiles; the warm-up steps are untimed (at least 1);
- each timed step ends when its losses are on the host and the new parameters are ready
  (`block_until_ready`);
- cores_busy is the process's CPU time over the timed steps' wall time (XLA's threads at work);
- ms_per_step.median is the sorted times' element n // 2 (the upper median for an even n), and
  tokens_per_s = batch · seq_len / that median.

Prints one JSON object with --json (the keys `resmem bench --json` uses for these numbers:
tokens_per_s, ms_per_step {median, min, max}, batch, seq_len, params, warmup_steps,
timed_steps, plus jax's version and the devices), else a line.
"""

from __future__ import annotations

import argparse
import json
import os
import time
import tomllib
from pathlib import Path

import numpy as np

import jax

from . import data, run
from .train import Trainer


def _threads() -> int | None:
    """This process's threads now (XLA's CPU thread pools among them), from /proc."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Threads:"):
                return int(line.split()[1])
    except OSError:
        pass
    return None


def bench(run_dir, steps: int = 10, warmup: int = 3, devices=None) -> dict:
    """Times `steps` training steps of the run in `run_dir` after `warmup` untimed ones (≥ 1)."""
    if steps < 1:
        raise SystemExit("--steps must be at least 1: the number of timed steps")
    warmup = max(warmup, 1)
    run_dir = Path(run_dir)
    config = tomllib.loads((run_dir / run.CONFIG_FILE).read_text())
    config = dict(config, train=dict(config["train"], steps=warmup + steps, restarts=[]))
    params = run.load_run(run_dir).params
    m = {k: np.zeros_like(x) for k, x in params.items()}
    v = {k: np.zeros_like(x) for k, x in params.items()}
    trainer = Trainer(config, params, m, v, 0, devices)
    batches = data.TrainBatches(config, run_dir)
    b, t = config["train"]["batch"], config["data"]["seq_len"]

    def step(k):
        inputs, targets = batches(k)
        start = time.perf_counter()
        got = trainer.train_step(inputs, targets)
        jax.block_until_ready(trainer.params)
        return time.perf_counter() - start, got

    k = 0
    compile_s = None
    for _ in range(warmup):
        s, got = step(k)
        compile_s = s if compile_s is None else compile_s
        k += 1
    times = []
    cpu0 = time.process_time()
    for _ in range(steps):
        s, got = step(k)
        times.append(s)
        k += 1
    cpu_s = time.process_time() - cpu0
    if not np.isfinite(got["loss"]):
        raise SystemExit(f"the loss became {got['loss']} during the benchmark; its timings would mean nothing")
    times.sort()
    step_s = times[len(times) // 2]
    devs = trainer.mesh.devices.flat
    return {
        "arch": config["model"]["arch"],
        "backend": f"jax {jax.__version__} ({jax.default_backend()}, {len(devs)} device(s))",
        "jax_version": jax.__version__,
        "jaxlib_version": _jaxlib_version(),
        "platform": jax.default_backend(),
        "devices": [str(d) for d in devs],
        "batch": b,
        "seq_len": t,
        "params": int(sum(np.asarray(x).size for x in params.values())),
        "warmup_steps": warmup,
        "timed_steps": steps,
        "first_step_s": compile_s,
        "tokens_per_s": b * t / step_s,
        "ms_per_step": {"median": step_s * 1e3, "min": times[0] * 1e3, "max": times[-1] * 1e3},
        "final_loss": got["loss"],
        "process_threads": _threads(),
        "cpu_s_per_timed_step": cpu_s / steps,
        "cores_busy": cpu_s / sum(times),
        "cpu_count": os.cpu_count(),
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
    }


def _jaxlib_version():
    try:
        import jaxlib

        return jaxlib.__version__
    except Exception:
        return None


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", required=True, help="a resmem run directory (its config.toml and model.safetensors)")
    ap.add_argument("--steps", type=int, default=10, help="timed steps (default 10)")
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps before them, at least 1 (default 3)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args(argv)
    r = bench(args.run, args.steps, args.warmup)
    if args.json:
        print(json.dumps(r, indent=2))
    else:
        ms = r["ms_per_step"]
        print(f"{r['arch']}, {r['params']} parameters, {r['backend']}, batch {r['batch']} × {r['seq_len']}, "
              f"{r['timed_steps']} timed steps after {r['warmup_steps']} warm-up: {r['tokens_per_s']:.0f} tokens/s; "
              f"{ms['median']:.1f} ms/step (median; {ms['min']:.1f}-{ms['max']:.1f}); first step {r['first_step_s']:.1f} s")


if __name__ == "__main__":
    main()
