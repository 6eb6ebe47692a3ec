"""Training in JAX against resmem's CPU backend, and across devices and processes.

- 20 steps from the same state: resmem trains a run on the copy task for 30 steps with a
  checkpoint every 10 (weight decay 0.1, so that a wrong decay mask shows); a copy cut back to
  its step-10 checkpoint trains on in JAX (`resmem_jax.train`). Steps 11..30's losses must
  agree with resmem's metrics.jsonl within LOSS_ATOL, the final validation loss within 1e-5
  relative, and the final parameters within PARAM_ATOL (Adam's normalisation grows the ulps of
  parameters whose gradients are near 0; a parameter decayed or boosted wrongly is off by 1e-3
  or more).
- 1 device, 2 devices (XLA_FLAGS=--xla_force_host_platform_device_count=2) and 2 processes
  (jax.distributed over localhost, gloo CPU collectives) give the same losses within 1e-6, with
  the parameters replicated (the toy model is below train.SHARD_MIN) and again with every
  parameter and its AdamW moments sharded (`--shard-min 0`): the same losses, final parameters
  within PARAM_ATOL, and a model.safetensors, gathered whole, that `resmem eval` reads.
- A round trip: resmem trains 10 steps; JAX extends the run to 20 (a restart of the schedule,
  as `resmem train --resume --steps 20` would); `resmem eval` of the result gives JAX's own
  validation loss; resmem resumes from JAX's checkpoint and extends it again; `resmem plot`
  reads the metrics.

A missing tool (jax, the resmem binary) is a failure, never a skip. The binary is $RESMEM, by
default target/release/resmem of this checkout. Run: python -m pytest python/tests/test_training.py
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np

from binary import ROOT, resmem  # noqa: E402
sys.path.insert(0, str(ROOT / "python"))

import jax  # noqa: E402,F401  (a missing jax fails here, as it must)

from resmem_jax import run  # noqa: E402
from resmem_jax.train import train  # noqa: E402

LOSS_ATOL = 5e-6  # per-step training loss, 20 steps (observed ≤ 1.2e-6: 5 ulps at 2.8)
VAL_RTOL = 1e-5
PARAM_ATOL = 1e-3
DEVICE_ATOL = 1e-6

CASES = {
    "transformer": ["--arch", "transformer"],
    "rmt": ["--arch", "rmt"],
    "memoryformer": ["--arch", "memoryformer"],
    "hybrid": ["--arch", "hybrid"],
    "hc": ["--arch", "hc", "--mixing", "hc"],
    "mhc": ["--arch", "hc", "--mixing", "mhc"],
    "mhc-lite": ["--arch", "hc", "--mixing", "mhc-lite"],
}


def resmem_train(out: Path, flags: list[str], steps: int = 30) -> Path:
    resmem("train", *flags, "--task", "copy", "--steps", str(steps), "--checkpoint-every", "10", "--keep", "10",
           "--log-every", "1", "--weight-decay", "0.1", "--backend", "cpu", "--out", str(out))
    return out


def cut_back(src: Path, dst: Path, step: int) -> Path:
    """A copy of a run as it was after `step`: later checkpoints and the model file removed
    (the JAX side cuts metrics.jsonl back itself, as resmem does on resume)."""
    shutil.copytree(src, dst)
    for s, path in run_checkpoints(dst):
        if s > step:
            path.unlink()
    (dst / run.MODEL_FILE).unlink()
    return dst


def run_checkpoints(d: Path):
    return [(int(p.name[5:14]), p) for p in sorted((d / "checkpoints").glob("step-*.safetensors"))]


def rows(d: Path) -> dict[int, dict]:
    return {r["step"]: r for r in map(json.loads, (d / "metrics.jsonl").read_text().splitlines())}


def compare(name: str, want: Path, got: Path, first: int = 11) -> tuple[float, float]:
    a, b = rows(want), rows(got)
    steps = [s for s in sorted(a) if s >= first]
    assert steps and all(s in b for s in steps), (name, sorted(a), sorted(b))
    d_loss = max(abs(a[s]["loss"] - b[s]["loss"]) for s in steps)
    last = steps[-1]
    d_val = abs(a[last]["val_loss"] - b[last]["val_loss"]) / a[last]["val_loss"]
    pa, _ = run.read_tensors(want / run.MODEL_FILE)
    pb, _ = run.read_tensors(got / run.MODEL_FILE)
    d_param = max(float(np.max(np.abs(pa[k] - pb[k]))) for k in pa)
    print(f"{name:14s} {len(steps)} steps: max |Δloss| {d_loss:.2e}, val rel {d_val:.2e}, max |Δparam| {d_param:.2e}")
    assert d_loss < LOSS_ATOL, (name, d_loss)
    assert d_val < VAL_RTOL, (name, d_val)
    assert d_param < PARAM_ATOL, (name, d_param)
    return d_loss, d_val


def _case(name, flags):
    def test(tmp_path):
        a = resmem_train(tmp_path / "resmem", flags)
        b = cut_back(a, tmp_path / "jax", 10)
        train(b, quiet=True)
        compare(name, a, b)
        # The JAX side writes checkpoints resmem's way: resmem's eval reads its last one.
        last = run_checkpoints(b)[-1][1]
        ev = json.loads(resmem("eval", "--run", str(b), "--checkpoint", str(last), "--json", "--backend", "cpu")
                        .strip().splitlines()[-1])
        assert abs(ev["val_loss"] - rows(b)[30]["val_loss"]) / ev["val_loss"] < VAL_RTOL, ev

    test.__name__ = f"test_20_steps_{name.replace('-', '_')}"
    return test


for _name, _flags in CASES.items():
    globals()[f"test_20_steps_{_name.replace('-', '_')}"] = _case(_name, _flags)


# --- devices and processes ----------------------------------------------------------------------


def jax_cli(run_dir: Path, *extra: str, env: dict | None = None, wait: bool = True, quiet: bool = True):
    cmd = [sys.executable, "-m", "resmem_jax.train", "--run", str(run_dir), *(["--quiet"] if quiet else []), *extra]
    full_env = dict(os.environ, PYTHONPATH=str(ROOT / "python"), JAX_PLATFORMS="cpu", **(env or {}))
    if not wait:
        return subprocess.Popen(cmd, env=full_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    done = subprocess.run(cmd, env=full_env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{' '.join(cmd)} failed:\n{done.stdout}\n{done.stderr}"
    return done


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def max_loss_diff(a: Path, b: Path) -> float:
    ra, rb = rows(a), rows(b)
    assert sorted(ra) == sorted(rb), (sorted(ra), sorted(rb))
    return max(abs(ra[s]["loss"] - rb[s]["loss"]) for s in ra)


def two_processes(run_dir: Path, *extra: str) -> str:
    """The JAX CLI on `run_dir` as 2 processes of 1 device each over localhost; process 0's output."""
    port = free_port()
    flags = ["--coordinator", f"localhost:{port}", "--num-processes", "2", *extra]
    env = {"XLA_FLAGS": "--xla_force_host_platform_device_count=1"}
    p1 = jax_cli(run_dir, *flags, "--process-id", "1", env=env, wait=False)
    try:
        done = jax_cli(run_dir, *flags, "--process-id", "0", env=env, quiet=False)
        out, _ = p1.communicate(timeout=120)
        assert p1.returncode == 0, out
    finally:
        if p1.poll() is None:
            p1.kill()
    return done.stdout


def max_param_diff(a: Path, b: Path) -> float:
    pa, _ = run.read_tensors(a / run.MODEL_FILE)
    pb, _ = run.read_tensors(b / run.MODEL_FILE)
    assert sorted(pa) == sorted(pb) and all(pa[k].shape == pb[k].shape for k in pa)
    return max(float(np.max(np.abs(pa[k] - pb[k]))) for k in pa)


def sharded_count(output: str) -> tuple[int, int]:
    """(sharded, all) from the line `parameters sharded over N device(s): S of A (...)`."""
    line = next(l for l in output.splitlines() if l.startswith("parameters sharded over"))
    s, _, a = line.split(": ", 1)[1].split()[:3]
    return int(s), int(a)


def test_devices_and_processes(tmp_path):
    src = resmem_train(tmp_path / "resmem", CASES["rmt"])
    one = cut_back(src, tmp_path / "one", 10)
    two = cut_back(src, tmp_path / "two", 10)
    procs = cut_back(src, tmp_path / "procs", 10)
    jax_cli(one, env={"XLA_FLAGS": "--xla_force_host_platform_device_count=1"})
    jax_cli(two, env={"XLA_FLAGS": "--xla_force_host_platform_device_count=2"})
    d_dev = max_loss_diff(one, two)
    print(f"1 device vs 2 devices: max |Δloss| {d_dev:.2e} over 20 steps")
    two_processes(procs)
    d_proc = max_loss_diff(one, procs)
    print(f"1 process vs 2 processes: max |Δloss| {d_proc:.2e} over 20 steps")
    assert d_dev <= DEVICE_ATOL and d_proc <= DEVICE_ATOL, (d_dev, d_proc)
    compare("rmt (2 procs)", src, procs)

    # Every parameter and its moments sharded over the 2 devices, then over the 2 processes.
    sharded = cut_back(src, tmp_path / "sharded", 10)
    done = jax_cli(sharded, "--shard-min", "0", env={"XLA_FLAGS": "--xla_force_host_platform_device_count=2"},
                   quiet=False)
    s, a = sharded_count(done.stdout)
    assert s == a > 0, done.stdout  # every parameter of the RMT has an even axis
    d_sh, p_sh = max_loss_diff(one, sharded), max_param_diff(one, sharded)
    print(f"1 device vs 2 devices, {s} of {a} parameters sharded: max |Δloss| {d_sh:.2e}, max |Δparam| {p_sh:.2e}")
    assert d_sh <= DEVICE_ATOL and p_sh < PARAM_ATOL, (d_sh, p_sh)
    # The model file, gathered whole, is what resmem evaluates: JAX's own validation loss.
    ev = json.loads(resmem("eval", "--run", str(sharded), "--checkpoint", str(sharded / run.MODEL_FILE),
                           "--json", "--backend", "cpu").strip().splitlines()[-1])
    assert abs(ev["val_loss"] - rows(sharded)[30]["val_loss"]) / ev["val_loss"] < VAL_RTOL, ev
    sharded_procs = cut_back(src, tmp_path / "sharded-procs", 10)
    out = two_processes(sharded_procs, "--shard-min", "0")
    assert sharded_count(out)[0] == a, out
    d_shp, p_shp = max_loss_diff(one, sharded_procs), max_param_diff(one, sharded_procs)
    print(f"1 process vs 2 processes, all sharded: max |Δloss| {d_shp:.2e}, max |Δparam| {p_shp:.2e}")
    assert d_shp <= DEVICE_ATOL and p_shp < PARAM_ATOL, (d_shp, p_shp)
    compare("rmt (2 procs, sharded)", src, sharded_procs)


# --- the round trip -----------------------------------------------------------------------------


def test_round_trip(tmp_path):
    a = resmem_train(tmp_path / "resmem", CASES["rmt"], steps=20)
    # resmem trained 10 steps; JAX trains on to the end; resmem evaluates what JAX wrote.
    b = cut_back(a, tmp_path / "jax", 10)
    result = train(b, quiet=True)
    ev = json.loads(resmem("eval", "--run", str(b), "--json", "--backend", "cpu").strip().splitlines()[-1])
    rel = abs(ev["val_loss"] - result["val_loss"]) / ev["val_loss"]
    print(f"round trip: resmem eval {ev['val_loss']:.7f}, JAX {result['val_loss']:.7f}, rel {rel:.2e}")
    assert rel < VAL_RTOL, (ev, result["val_loss"])
    resmem("plot", str(a), str(b), "--x", "step", "--y", "loss", "--out", str(tmp_path / "plot.svg"))
    assert (tmp_path / "plot.svg").stat().st_size > 0
    # JAX stops at step 15 with a checkpoint; resmem resumes from it (config, moments, step).
    c = cut_back(a, tmp_path / "back", 10)
    train(c, quiet=True, until=15)
    resmem("train", "--resume", str(c), "--backend", "cpu")
    assert sorted(rows(c)) == list(range(1, 21)), sorted(rows(c))
    compare("rmt (JAX→resmem)", a, c)
    # An extension (train.restarts, a new cycle of the schedule) on the JAX side.
    train(b, steps=25, quiet=True)
    cfg = run.load_run(b).config["train"]
    assert cfg["restarts"] == [20] and cfg["steps"] == 25
    r = rows(b)
    assert sorted(r) == list(range(1, 26))
    assert abs(r[21]["lr"] - cfg["lr"]) < 1e-9, r[21]  # warmup of max(round(5 × 0.05), 1) = 1 step


def test_text_corpus(tmp_path):
    """Windows of a prepared corpus (data/shakespeare-bytes, `cargo xtask corpus`): training
    batches drawn as resmem's TextSampler draws them, and its fixed held-out windows."""
    corpus = ROOT / "data" / "shakespeare-bytes"
    assert (corpus / "meta.json").is_file(), f"no corpus at {corpus}"
    a = tmp_path / "resmem"
    resmem("train", "--arch", "transformer", "--data", str(corpus), "--steps", "20", "--batch", "8",
           "--checkpoint-every", "10", "--log-every", "1", "--backend", "cpu", "--out", str(a))
    b = cut_back(a, tmp_path / "jax", 10)
    train(b, quiet=True)
    compare("transformer (text)", a, b)
