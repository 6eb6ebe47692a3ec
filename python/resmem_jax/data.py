"""The batches resmem draws, bit for bit: the synthetic tasks' (crates/data/src/tasks.rs) and
fixed token rows (the `tokens` data source). Step k's batch of a task is drawn by
Xoshiro256++ seeded from `step_seed(seed, k)`; the held-out batches use the seed
`train.seed ^ HELD_OUT_SALT` and steps 0..m (crates/data/src/sampler.rs `held_out`)."""

from __future__ import annotations

import numpy as np

from .layers import IGNORE

MASK = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15
HELD_OUT_SALT = 0x5EED0FE7A1D00075

SEP, PAD = ord("|"), ord(".")
SYMBOLS = b"abcdefghijklmnop"


def _splitmix64(x: int) -> int:
    z = (x + GOLDEN) & MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


def step_seed(seed: int, step: int) -> int:
    """sampler.rs `step_seed`: splitmix64(splitmix64(seed) ^ step·GOLDEN)."""
    return _splitmix64(_splitmix64(seed) ^ ((step * GOLDEN) & MASK))


class Xoshiro256PlusPlus:
    """rand_xoshiro's Xoshiro256++, seeded as its `seed_from_u64` does (four SplitMix64 draws)."""

    def __init__(self, seed: int):
        s, self.s = seed & MASK, []
        for _ in range(4):
            s = (s + GOLDEN) & MASK
            z = s
            z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
            z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
            self.s.append(z ^ (z >> 31))

    @staticmethod
    def _rotl(x: int, k: int) -> int:
        return ((x << k) | (x >> (64 - k))) & MASK

    def next_u64(self) -> int:
        s0, s1, s2, s3 = self.s
        result = (self._rotl((s0 + s3) & MASK, 23) + s0) & MASK
        t = (s1 << 17) & MASK
        s2 ^= s0
        s3 ^= s1
        s1 ^= s2
        s0 ^= s3
        s2 ^= t
        s3 = self._rotl(s3, 45)
        self.s = [s0, s1, s2, s3]
        return result

    def below_16(self) -> int:
        """rand 0.9's `random_range(0..16)`: the widening multiply of the upper 32 bits by 16,
        which never rejects for a power of two: the top 4 bits."""
        return self.next_u64() >> 60


def task_batch(task: str, b: int, t: int, seed: int, step: int) -> tuple[np.ndarray, np.ndarray]:
    """Step `step`'s batch (inputs, targets), each (B, T) uint32, of the copy or reverse task."""
    if task not in ("copy", "reverse"):
        raise NotImplementedError(f"the {task} task's sampler is not ported yet (copy, reverse are)")
    rng = Xoshiro256PlusPlus(step_seed(seed, step))
    inputs = np.zeros((b, t), np.uint32)
    targets = np.zeros((b, t), np.uint32)
    for row in range(b):
        n = t // 2
        xs = [SYMBOLS[rng.below_16()] for _ in range(n)]
        answer = xs if task == "copy" else xs[::-1]
        seq = xs + [SEP] + answer
        counted = [False] * (n + 1) + [True] * n
        while len(seq) < t + 1:
            seq.append(PAD)
            counted.append(False)
        inputs[row] = seq[:t]
        targets[row] = [c if k else IGNORE for c, k in zip(seq[1:], counted[1:])]
    return inputs, targets


def rows_batches(rows: np.ndarray, b: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Fixed token rows (R, T + 1) as resmem's `tokens` source reads them: whole batches of B
    rows in order, inputs the first T of a row and targets the last T."""
    rows = np.asarray(rows, dtype=np.uint32)
    out = []
    for i in range(rows.shape[0] // b):
        chunk = rows[i * b : (i + 1) * b]
        out.append((chunk[:, :-1], chunk[:, 1:]))
    return out


def held_out(config: dict, m: int | None = None, run_dir=None) -> list[tuple[np.ndarray, np.ndarray]]:
    """The held-out batches `resmem eval` (and training's evaluation) reads for a run config."""
    data, train = config["data"], config["train"]
    m = m if m is not None else config["cadence"]["eval_batches"]
    b, t = train["batch"], data["seq_len"]
    if data["source"] == "task":
        seed = train["seed"] ^ HELD_OUT_SALT
        return [task_batch(data["task"], b, t, seed, k) for k in range(m)]
    if data["source"] == "tokens":
        from pathlib import Path

        from safetensors.numpy import load_file

        path = Path(data["path"])
        if not path.is_absolute() and run_dir is not None and not path.exists():
            path = Path(run_dir) / path
        return rows_batches(load_file(str(path))["tokens"], b)[:m]
    raise NotImplementedError(f"the {data['source']} source's held-out windows are not ported yet")


def separator(config: dict) -> int | None:
    """The token that starts a document when documents are masked apart (gpt2's <|endoftext|>)."""
    data = config["data"]
    if data.get("doc_mask") and data.get("tokenizer") == "gpt2":
        return 50256
    return None
