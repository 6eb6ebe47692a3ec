"""`python -m resmem_jax.train --run DIR [--steps N]`: trains a resmem run on in JAX, resmem's way,
data parallel over every visible device (and every process of a `jax.distributed` job).

It continues from the newest checkpoint in DIR/checkpoints (parameters, AdamW's moments, the
step), or from step 0 with DIR/model.safetensors as the initial weights when there is none, and
writes what `resmem train` writes: checkpoints (`checkpoints/step-*.safetensors`, the newest
`cadence.keep` kept), metrics.jsonl rows (same keys; rows past the step it resumes from are cut
off first, as resmem does) and model.safetensors at the end. `--steps N` past the run's steps
extends it as `resmem train --resume DIR --steps N` does: a new cycle of the schedule, recorded
as `train.restarts` in config.toml.

What is resmem's, exactly:
- the batches: step k (0-based) draws what resmem's sampler draws for (seed, k): the copy and
  reverse tasks, fixed token rows, or windows of a prepared corpus (`data.TrainBatches`);
- the loss and its gradient: mean cross-entropy over the counted targets plus z·mean (log Z)²;
- the schedule (models/src/optim.rs `Schedule`), computed in f32 as resmem does;
- global-norm clipping and AdamW as the engine's kernel (engine/src/ops/optim.rs `adamw_chunk`),
  written out below in its own order of operations (see `adamw`).

Launch on several processes (one per host, or several on one machine) with `--coordinator
HOST:PORT --num-processes P --process-id I`, or the environment variables
JAX_COORDINATOR_ADDRESS, JAX_NUM_PROCESSES, JAX_PROCESS_ID. Every process computes the same
global batch and places its own devices' rows; process 0 writes the files.

Sharding (FSDP / ZeRO-3 style, with jax.sharding only): every device of every process is on one
Mesh axis, "data". Each batch's rows are split over it; so is every parameter holding at least
`--shard-min` values (SHARD_MIN by default; 0 shards every parameter that can be, -1 or `none`
replicates them all), along its largest axis whose length the device count divides, together
with its AdamW moments. The rest (and parameters with no such axis) are replicated. XLA's SPMD
partitioner inserts the gathers and reduce-scatters; checkpoints and model.safetensors are
gathered whole (`multihost_utils.process_allgather`) and written by process 0.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import math
import os
import sys
import time
import tomllib
from pathlib import Path

import numpy as np

import jax

jax.config.update("jax_default_matmul_precision", "highest")

import jax.numpy as jnp  # noqa: E402
from jax.experimental import multihost_utils  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P  # noqa: E402

from . import data, run  # noqa: E402
from .layers import mean_loss, targets_i32  # noqa: E402
from .models import ARCHS, Config  # noqa: E402

METRICS_FILE = "metrics.jsonl"
CHECKPOINT_DIR = "checkpoints"
LOCK_FILE = ".resmem.lock"  # cli/src/run_dir.rs: a run trains in one process at a time
SHARD_MIN = 1 << 16  # a parameter with at least this many values is sharded over the devices

# Parameters AdamW decays (params.rs: declared with decay = true), by the last part of their
# names: every matrix and key vector. The Memory Layer's tables are also boosted (lr × table_lr_mult).
DECAYED = {"w_qkv", "w_o", "w_e", "w_pe", "w1", "w2", "hc_phi", "r_qkv", "r_ff", "w_ff", "r_u", "tables"}
BOOSTED = {"tables"}


def decays(name: str) -> bool:
    return name.rsplit(".", 1)[-1] in DECAYED


def boosted(name: str) -> bool:
    return name.rsplit(".", 1)[-1] in BOOSTED


# --- the schedule and AdamW's per-step values, in f32 as resmem computes them ------------------

f32 = np.float32


def cycles(train: dict) -> list[int]:
    """TrainConfig::cycles: 0, each restart, then the last step."""
    return [0, *train.get("restarts", []), train["steps"]]


def warmup(train: dict, length: int) -> int:
    """Schedule::warmup: (len · warmup_frac).round() (half away from zero), at least 1."""
    x = f32(length) * f32(train["warmup_frac"])
    return max(int(math.floor(float(x) + 0.5)), 1)


def lr_at(train: dict, step: int) -> np.float32:
    """Schedule::lr of 1-based `step`: warmup then cosine to min_lr_frac of the peak, per cycle."""
    peak, floor = f32(train["lr"]), f32(train["min_lr_frac"])
    cyc = cycles(train)
    last = cyc[-1]
    start, end = 0, last
    for a, b in zip(cyc, cyc[1:]):
        if min(step, last) <= b:
            start, end = a, b
            break
    s, total = max(step - start, 0), end - start
    w = warmup(train, total)
    if s <= w:
        return f32(peak * f32(s)) / f32(w)
    span = f32(max(total - w, 0) or 1)
    progress = min(f32(s - w) / span, f32(1.0))
    cosine = f32(0.5) * (f32(1.0) + f32(math.cos(float(f32(np.pi) * f32(progress)))))  # cosf, correctly rounded
    return peak * (floor + (f32(1.0) - floor) * cosine)


def powi(a: np.float32, n: int) -> np.float32:
    """f32::powi as compiler-rt's __powisf2 computes it: square and multiply, in f32."""
    r = f32(1.0)
    while True:
        if n & 1:
            r = f32(r * a)
        n //= 2
        if n == 0:
            return r
        a = f32(a * a)


def hyper(train: dict, step: int) -> dict:
    """engine Hyper::to_array: the step's values, the bias corrections 1 − βᵗ in f32."""
    b1, b2 = f32(train["beta1"]), f32(train["beta2"])
    return {
        "lr": lr_at(train, step),
        "bias1": f32(1.0) - powi(b1, step),
        "bias2": f32(1.0) - powi(b2, step),
    }


def adamw(params, m, v, grads, h, cfg_train: dict, lr_boost: float):
    """Global-norm clipping and AdamW, value by value as engine/src/ops/optim.rs `adamw_chunk`:

        g ← g · clip,  clip = max_norm / ‖g‖ when ‖g‖ > max_norm, else 1
        m ← β₁ m + (1 − β₁) g
        v ← β₂ v + (1 − β₂) g g                      ((1 − β₂)·g)·g, in that order
        p ← p − lr_p ((m / (1 − β₁ᵗ)) / (sqrt(v / (1 − β₂ᵗ)) + ε) + wd_p p)

    wd_p is the weight decay for the decayed parameters (params.rs: matrices and key vectors,
    [0, decay_end)) and 0 for the rest; lr_p is lr · lr_boost for the boosted ones (the
    Memory Layer's tables, [0, boost_end)), else lr. The decay is multiplied by the (boosted)
    learning rate, as PyTorch's AdamW does.

    Written out rather than as optax.chain(clip_by_global_norm, adamw): optax scales by
    (g / ‖g‖)·max_norm, not g·(max_norm / ‖g‖); computes (1 − β₂)·g² where resmem computes
    ((1 − β₂)·g)·g; takes 1 − βᵗ from a device power where resmem takes it from f32::powi on
    the host; and has no per-parameter learning-rate multiplier but through multi_transform.
    Each is an ulp a step, which Adam's normalisation can grow; these lines are resmem's.
    Returns the new (params, m, v) and ‖g‖ before clipping."""
    sumsq = sum(jnp.sum(jnp.square(g)) for g in jax.tree_util.tree_leaves(grads))
    norm = jnp.sqrt(sumsq)
    max_norm = jnp.float32(cfg_train["max_grad_norm"])
    clip = jnp.where(norm > max_norm, max_norm / norm, jnp.float32(1.0))
    b1, b2 = jnp.float32(cfg_train["beta1"]), jnp.float32(cfg_train["beta2"])
    one = jnp.float32(1.0)
    eps, wd = jnp.float32(cfg_train["eps"]), jnp.float32(cfg_train["weight_decay"])
    new_p, new_m, new_v = {}, {}, {}
    for name in params:
        g = grads[name] * clip
        mm = b1 * m[name] + (one - b1) * g
        vv = b2 * v[name] + ((one - b2) * g) * g
        decay = wd if decays(name) else jnp.float32(0.0)
        lr = h["lr"] * jnp.float32(lr_boost) if boosted(name) else h["lr"]
        update = (mm / h["bias1"]) / (jnp.sqrt(vv / h["bias2"]) + eps) + decay * params[name]
        new_p[name] = params[name] - lr * update
        new_m[name], new_v[name] = mm, vv
    return new_p, new_m, new_v, norm


# --- the run directory --------------------------------------------------------------------------


def checkpoints_in(run_dir: Path) -> list[tuple[int, Path]]:
    """run_dir.rs `checkpoints_in`: checkpoints/step-NNNNNNNNN.safetensors, oldest first."""
    d = run_dir / CHECKPOINT_DIR
    found = []
    if d.is_dir():
        for f in d.iterdir():
            name = f.name
            if name.startswith("step-") and name.endswith(".safetensors"):
                try:
                    found.append((int(name[5:-12]), f))
                except ValueError:
                    pass
    return sorted(found)


def _same_but_train(a: dict, b: dict) -> bool:
    return {k: v for k, v in a.items() if k != "train"} == {k: v for k, v in b.items() if k != "train"}


def _continues(train: dict, earlier: dict) -> bool:
    """TrainConfig::continues: the same schedule, or the same before one or more extensions."""
    r, er = train.get("restarts", []), earlier.get("restarts", [])
    ended_at = r[len(er)] if len(r) > len(er) else train["steps"]
    same = {k: v for k, v in train.items() if k not in ("steps", "restarts")} == {
        k: v for k, v in earlier.items() if k not in ("steps", "restarts")
    }
    return r[: len(er)] == er and earlier["steps"] == ended_at and same


def newest_state(run_dir: Path, config: dict):
    """The newest checkpoint written with this config (or before its extensions) that loads:
    (step, params, m, v, path); None when there is none."""
    for step, path in reversed(checkpoints_in(run_dir)):
        try:
            tensors, meta = run.read_tensors(path)
            written = tomllib.loads(meta["config"])
            if not (_same_but_train(written, config) and _continues(config["train"], written["train"])):
                raise ValueError("it was written with another config than config.toml")
        except Exception as e:  # reported and skipped, as resmem does
            print(f"skipping the checkpoint {path}: {e}", file=sys.stderr)
            continue
        params = {k: v for k, v in tensors.items() if not k.startswith("adamw.")}
        m = {k: tensors[f"adamw.m/{k}"] for k in params}
        v = {k: tensors[f"adamw.v/{k}"] for k in params}
        return int(meta["step"]), params, m, v, path
    return None


def write_checkpoint(run_dir: Path, step: int, params, m, v, config_text: str, keep: int) -> Path:
    """checkpoint.rs `write_state` through run_dir.rs `write_checkpoint`: atomically, then the
    newest `keep` kept."""
    d = run_dir / CHECKPOINT_DIR
    d.mkdir(parents=True, exist_ok=True)
    path = d / f"step-{step:09d}.safetensors"
    tensors = dict(params)
    tensors.update({f"adamw.m/{k}": x for k, x in m.items()})
    tensors.update({f"adamw.v/{k}": x for k, x in v.items()})
    tmp = path.with_name(path.name + ".tmp")
    run.write_tensors(tmp, tensors, {"step": str(step), "config": config_text})
    os.replace(tmp, path)
    every = checkpoints_in(run_dir)
    for _, old in every[: max(len(every) - keep, 0)]:
        old.unlink(missing_ok=True)
    return path


def keep_metrics(path: Path, upto: int) -> None:
    """run_dir.rs `kept_metrics`: whole rows with step ≤ upto, the rest cut off."""
    if not path.exists():
        return
    kept = []
    for line in path.read_bytes().split(b"\n")[:-1]:
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict) and isinstance(row.get("step"), int) and row["step"] <= upto:
            kept.append(line + b"\n")
    text = b"".join(kept)
    if text != path.read_bytes():
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_bytes(text)
        os.replace(tmp, path)


def metrics_line(row: dict) -> str:
    """A MetricsRow: keys in alphabetical order, absent values left out."""
    return json.dumps({k: row[k] for k in sorted(row) if row[k] is not None}, separators=(",", ":"))


# --- devices ------------------------------------------------------------------------------------


def init_distributed(coordinator=None, num_processes=None, process_id=None) -> None:
    coordinator = coordinator or os.environ.get("JAX_COORDINATOR_ADDRESS")
    if not coordinator:
        return
    num_processes = int(num_processes if num_processes is not None else os.environ["JAX_NUM_PROCESSES"])
    process_id = int(process_id if process_id is not None else os.environ["JAX_PROCESS_ID"])
    if jax.config.jax_platforms in (None, "", "cpu") or os.environ.get("JAX_PLATFORMS") == "cpu":
        # CPU collectives across processes (a no-op for GPU and TPU runs).
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(coordinator_address=coordinator, num_processes=num_processes, process_id=process_id)


def replicated_value(x) -> np.ndarray:
    """A replicated array's value, from this process's first device."""
    return np.asarray(x.addressable_shards[0].data)


def gathered(tree):
    """Host values of a tree of global arrays, sharded or not, whole on every process (a
    collective: every process calls it)."""
    return multihost_utils.process_allgather(tree, tiled=True)


def shard_spec(shape, n: int, shard_min: int | None) -> P:
    """Where a parameter of `shape` goes on a "data" axis of n devices: split along its largest
    axis that n divides (the first of equal ones) when it holds at least `shard_min` values,
    else (or with shard_min None, one device, or no such axis) replicated."""
    if shard_min is None or n <= 1 or math.prod(shape) < max(shard_min, 1):
        return P()
    fits = [i for i, d in enumerate(shape) if d % n == 0 and d >= n]
    if not fits:
        return P()
    axis = max(fits, key=lambda i: (shape[i], -i))
    return P(*(["data" if i == axis else None for i in range(len(shape))]))


def shard_min_arg(text: str) -> int | None:
    """--shard-min: a count of values; negative or `none` replicates every parameter."""
    if text.strip().lower() in ("none", "off"):
        return None
    n = int(text)
    return None if n < 0 else n


class Trainer:
    """A run's model, optimiser state and step, placed on a Mesh of every device ("data" axis):
    each batch's rows split over the devices, and so are the parameters holding at least
    `shard_min` values (with their AdamW moments, see `shard_spec`); the rest replicated."""

    def __init__(self, config: dict, params, m, v, step: int, devices=None, shard_min: int | None = SHARD_MIN):
        self.config, self.step = config, step
        self.cfg = Config(config["model"])
        self.cls = ARCHS[self.cfg.arch]
        self.train_cfg = dict(config["train"])
        self.lr_boost = float(config["model"].get("table_lr_mult", 1.0)) if any(map(boosted, params)) else 1.0
        self.z = float(config["model"].get("z_loss", 0.0))
        self.separator = data.separator(config)
        devices = devices if devices is not None else jax.devices()
        self.mesh = Mesh(np.asarray(devices), ("data",))
        self.repl = NamedSharding(self.mesh, P())
        self.rows = NamedSharding(self.mesh, P("data"))
        b = config["train"]["batch"]
        if b % len(devices):
            raise SystemExit(f"train.batch = {b} does not split over {len(devices)} devices; use a multiple of it")
        self.specs = {k: shard_spec(np.shape(x), len(devices), shard_min) for k, x in params.items()}
        self.shardings = {k: NamedSharding(self.mesh, s) for k, s in self.specs.items()}
        self.params, self.m, self.v = (self.place_params(t) for t in (params, m, v))
        self._step = jax.jit(self._train_step, donate_argnums=(0, 1, 2),
                             out_shardings=(self.shardings, self.shardings, self.shardings, self.repl))
        self._eval = jax.jit(self._eval_losses, out_shardings=self.repl)

    def place(self, tree, sharding):
        """Global arrays from host values every process holds alike."""
        def put(x):
            x = np.asarray(x)
            return jax.make_array_from_callback(x.shape, sharding, lambda idx: x[idx])

        return jax.tree_util.tree_map(put, tree)

    def place_params(self, tree):
        """Parameters (or moments) by name, each with its own sharding."""
        return {k: self.place(x, self.shardings[k]) for k, x in tree.items()}

    def sharding_summary(self) -> str:
        """Which parameters are sharded: counts and bytes (moments are sharded alike)."""
        nbytes = {k: x.size * x.dtype.itemsize for k, x in self.params.items()}
        sharded = sorted((k for k, s in self.specs.items() if s != P()), key=lambda k: (-nbytes[k], k))
        sb, tb = sum(nbytes[k] for k in sharded), sum(nbytes.values())
        n = len(self.mesh.devices.flat)
        head = (f"parameters sharded over {n} device(s): {len(sharded)} of {len(self.specs)} "
                f"({sb / 2**20:.2f} of {tb / 2**20:.2f} MiB, AdamW moments alike); the rest replicated")
        if not sharded:
            return head
        names = ", ".join(f"{k} {tuple(self.params[k].shape)} axis {list(self.specs[k]).index('data')}"
                          for k in sharded[:8])
        more = f", and {len(sharded) - 8} more" if len(sharded) > 8 else ""
        return f"{head}\n  sharded: {names}{more}"

    def _losses(self, params, inputs, targets):
        """The batch's CE + z-loss (what the gradient is of), and its two terms."""
        logits = self.cls(params=params, cfg=self.cfg)(inputs, self.separator)
        ce, total = mean_loss(logits, targets, self.z)
        return total, (ce, total - ce)

    def _train_step(self, params, m, v, inputs, targets, h):
        (_, (ce, zterm)), grads = jax.value_and_grad(self._losses, has_aux=True)(params, inputs, targets)
        params, m, v, norm = adamw(params, m, v, grads, h, self.train_cfg, self.lr_boost)
        return params, m, v, jnp.stack([ce, zterm, norm])

    def _eval_losses(self, params, inputs, targets):
        _, (ce, zterm) = self._losses(params, inputs, targets)
        return jnp.stack([ce, zterm])

    def batch(self, inputs, targets):
        """A batch (B, T), its rows split over the devices."""
        return (self.place(np.asarray(inputs, np.int32), self.rows),
                self.place(targets_i32(targets), self.rows))

    def train_step(self, inputs, targets) -> dict:
        """One step on (inputs, targets): the loss (CE), the z-loss term, ‖g‖ and the lr used."""
        self.step += 1
        h = {k: jnp.asarray(x) for k, x in hyper(self.train_cfg, self.step).items()}
        h = self.place(h, self.repl)
        x, y = self.batch(inputs, targets)
        self.params, self.m, self.v, out = self._step(self.params, self.m, self.v, x, y, h)
        ce, zterm, norm = replicated_value(out)
        return {"loss": float(ce), "z_term": float(zterm), "grad_norm": float(norm),
                "lr": float(hyper(self.train_cfg, self.step)["lr"])}

    def evaluate(self, batches) -> tuple[float, float]:
        """resmem's evaluation: the held-out batches' CE and z-loss terms summed in f64; returns
        (val_loss as the f32 resmem records, val_total)."""
        ce, zt = 0.0, 0.0
        for inputs, targets in batches:
            c, z = replicated_value(self._eval(self.params, *self.batch(inputs, targets)))
            ce, zt = ce + float(c), zt + float(z)
        n = max(len(batches), 1)
        return float(f32(ce / n)), (ce + zt) / n

    def host_state(self):
        """(params, m, v) as host arrays, gathered whole on every process (a collective)."""
        return tuple(gathered(t) for t in (self.params, self.m, self.v))


# --- the loop -----------------------------------------------------------------------------------


def extend(config: dict, steps: int) -> dict:
    """TrainConfig::extended: a new cycle from the current end."""
    train = dict(config["train"])
    train["restarts"] = [*train.get("restarts", []), train["steps"]]
    train["steps"] = steps
    return dict(config, train=train)


def train(run_dir, steps: int | None = None, quiet: bool = False, devices=None, until: int | None = None,
          shard_min: int | None = SHARD_MIN) -> dict:
    """Trains the run in `run_dir` to its last step (or `steps`, extending it), or stops after
    step `until` with a checkpoint; parameters of at least `shard_min` values are sharded over
    the devices (None: none). Returns {"rows": [...], "step": ..., "val_loss": ...}."""
    run_dir = Path(run_dir)
    lead = jax.process_index() == 0
    say = (lambda s: None) if quiet or not lead else (lambda s: print(s, flush=True))
    lock = None
    if lead:
        lock = open(run_dir / LOCK_FILE, "a")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise SystemExit(f"another process is training in {run_dir}; wait for it to finish")
    config_text = (run_dir / run.CONFIG_FILE).read_text()
    config = tomllib.loads(config_text)
    if steps is not None and steps != config["train"]["steps"]:
        if steps < config["train"]["steps"]:
            raise SystemExit(f"--steps {steps} is below the run's {config['train']['steps']}: extend it, never shorten it")
        warm = warmup(config["train"], steps - config["train"]["steps"])
        config = extend(config, steps)
        config_text = run.dump_toml(config)
        if lead:
            tmp = run_dir / (run.CONFIG_FILE + ".tmp")
            tmp.write_text(config_text)
            os.replace(tmp, run_dir / run.CONFIG_FILE)
        say(f"extending {run_dir} to {steps} steps: a new cycle of the schedule (warmup over {warm} steps), "
            f"recorded as train.restarts in its {run.CONFIG_FILE}")
    state = newest_state(run_dir, config)
    if state is None:
        if any(checkpoints_in(run_dir)):
            raise SystemExit(f"none of the checkpoints in {run_dir / CHECKPOINT_DIR} loads with its config.toml")
        r = run.load_run(run_dir)
        params = r.params
        m = {k: np.zeros_like(x) for k, x in params.items()}
        v = {k: np.zeros_like(x) for k, x in params.items()}
        step = 0
        say(f"{run_dir} has no checkpoint: starting at step 0 from its {run.MODEL_FILE}")
    else:
        step, params, m, v, path = state
        say(f"resuming {run_dir} from {path} (step {step})")
    total_steps = config["train"]["steps"]
    last = total_steps if until is None else min(until, total_steps)
    cad = config["cadence"]
    trainer = Trainer(config, params, m, v, step, devices, shard_min)
    batches = data.TrainBatches(config, run_dir)
    held = data.held_out(config, None, run_dir)
    totals = trainer.z > 0
    metrics_path = run_dir / METRICS_FILE
    if lead:
        keep_metrics(metrics_path, step)
    out = open(metrics_path, "a") if lead else None
    say(f"{config['model']['arch']} on {len(trainer.mesh.devices.flat)} device(s) "
        f"({jax.process_count()} process(es), {jax.devices()[0].platform}), steps {step + 1}..{last} of {total_steps}, "
        f"{config['train']['batch']}×{config['data']['seq_len']} tokens a step into {run_dir}")
    say(trainer.sharding_summary())
    rows, start = [], time.perf_counter()
    since, tokens = start, 0
    val = final = None
    while trainer.step < last:
        inputs, targets = batches(trainer.step)
        got = trainer.train_step(inputs, targets)
        s = trainer.step
        tokens += inputs.size
        is_last = s == total_steps
        log = s == 1 or s % cad["log_every"] == 0 or is_last
        ev = bool(held) and (is_last or (cad["eval_every"] > 0 and s % cad["eval_every"] == 0))
        save = is_last or s == last or (cad["checkpoint_every"] > 0 and s % cad["checkpoint_every"] == 0)
        if log or ev or save:
            now = time.perf_counter()
            row = {"elapsed_s": now - start, "grad_norm": got["grad_norm"], "loss": got["loss"], "lr": got["lr"],
                   "step": s, "tokens_per_s": tokens / max(now - since, 1e-9)}
            since, tokens = now, 0
            if totals:
                row["total"] = float(f32(got["loss"] + float(f32(got["z_term"]))))
            if ev:
                val, val_total = trainer.evaluate(held)
                row["val_loss"] = val
                if totals:
                    row["val_total"] = val_total
            rows.append(row)
            if lead:
                out.write(metrics_line(row) + "\n")
                out.flush()
            if log or ev or is_last:
                vs = f"  val {row['val_loss']:.4f}" if "val_loss" in row else ""
                say(f"step {s:>6}  loss {got['loss']:.4f}{vs}  lr {got['lr']:.2e}  {row['tokens_per_s']:>8.0f} tok/s")
            if save:
                p, mm, vv = trainer.host_state()
                final = p
                if lead:
                    path = write_checkpoint(run_dir, s, p, mm, vv, config_text, cad["keep"])
                    if not is_last:
                        say(f"checkpoint {path}")
    if lead:
        out.close()
    if trainer.step == total_steps and final is None:
        final = gathered(trainer.params)  # a collective: every process takes part
    if trainer.step == total_steps and lead:
        p = final  # gathered whole (for the last checkpoint), on every process
        tmp = run_dir / (run.MODEL_FILE + ".tmp")
        run.write_tensors(tmp, p)
        os.replace(tmp, run_dir / run.MODEL_FILE)
        say(f"done: {trainer.step} steps in {time.perf_counter() - start:.1f} s; wrote {metrics_path}, "
            f"{run_dir / run.MODEL_FILE} and its checkpoint")
    if lock is not None:
        lock.close()
    return {"rows": rows, "step": trainer.step, "val_loss": val}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", required=True, help="a resmem run directory")
    ap.add_argument("--steps", type=int, help="train to this step, extending the run past its steps")
    ap.add_argument("--until", type=int, help="stop after this step (with a checkpoint), before the run's end")
    ap.add_argument("--coordinator", help="HOST:PORT of process 0, for a job of several processes")
    ap.add_argument("--num-processes", type=int)
    ap.add_argument("--process-id", type=int)
    ap.add_argument("--shard-min", type=shard_min_arg, default=SHARD_MIN, metavar="VALUES",
                    help=f"shard parameters (and their AdamW moments) of at least VALUES values over the devices "
                         f"(default {SHARD_MIN}; 0: every one that splits; -1 or none: replicate all)")
    ap.add_argument("--json", action="store_true", help="print the rows written, as JSON, at the end")
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)
    init_distributed(args.coordinator, args.num_processes, args.process_id)
    result = train(args.run, args.steps, quiet=args.quiet, until=args.until, shard_min=args.shard_min)
    if args.json and jax.process_index() == 0:
        print(json.dumps(result))


if __name__ == "__main__":
    main()
