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
    if data["source"] == "text":
        return Corpus(_corpus_path(data, run_dir)).fixed_batches(b, t, m)
    raise NotImplementedError(f"the {data['source']} source's held-out windows are not ported yet")


def separator(config: dict) -> int | None:
    """The token that starts a document when documents are masked apart (gpt2's <|endoftext|>)."""
    data = config["data"]
    if data.get("doc_mask") and data.get("tokenizer") == "gpt2":
        return 50256
    return None


# --- training batches, and prepared text corpora (crates/data/src/corpus.rs, sampler.rs) -------


def _wmul32(a: int, b: int) -> tuple[int, int]:
    x = a * b
    return x >> 32, x & 0xFFFFFFFF


def random_range_inclusive(rng: Xoshiro256PlusPlus, low: int, high: int) -> int:
    """rand 0.9's `random_range(low..=high)` for a usize (default features: not "unbiased"):
    below 2^32 it samples as a u32 (UniformUsize, so that 32- and 64-bit targets agree) with
    one widening multiply of the upper 32 bits of a draw and, when the low half is biased,
    a second draw whose carry is added."""
    if high > 0xFFFFFFFF:
        rng_range = (high - low + 1) & MASK
        if rng_range == 0:
            return rng.next_u64()
        x = rng.next_u64() * rng_range
        result, lo = x >> 64, x & MASK
        if lo > ((-rng_range) & MASK):
            hi2 = (rng.next_u64() * rng_range) >> 64
            result += int(lo + hi2 > MASK)
        return low + result
    rng_range = (high - low + 1) & 0xFFFFFFFF
    if rng_range == 0:
        return rng.next_u64() >> 32
    result, lo = _wmul32(rng.next_u64() >> 32, rng_range)
    if lo > ((-rng_range) & 0xFFFFFFFF):
        hi2, _ = _wmul32(rng.next_u64() >> 32, rng_range)
        result += int(lo + hi2 > 0xFFFFFFFF)
    return low + result


class Corpus:
    """A corpus `resmem data prepare` wrote: meta.json, train.bin and val.bin (little-endian
    u16 or u32 tokens, `token_bytes` each), memory-mapped."""

    def __init__(self, path):
        import json
        from pathlib import Path

        self.dir = Path(path)
        self.meta = json.loads((self.dir / "meta.json").read_text())
        dtype = {2: "<u2", 4: "<u4"}[self.meta["token_bytes"]]
        self.splits = {s: np.memmap(self.dir / f"{s}.bin", dtype=dtype, mode="r") for s in ("train", "val")}

    def windows(self, split: str, starts, t: int) -> tuple[np.ndarray, np.ndarray]:
        tokens = self.splits[split]
        rows = np.stack([np.asarray(tokens[s : s + t + 1], dtype=np.uint32) for s in starts])
        return rows[:, :-1], rows[:, 1:]

    def batch(self, b: int, t: int, seed: int, step: int):
        """TextSampler::batch: B windows at uniform offsets in 0..=len − T − 1, drawn in order
        from Xoshiro256++ seeded with step_seed(seed, step)."""
        rng = Xoshiro256PlusPlus(step_seed(seed, step))
        last = max(len(self.splits["train"]) - (t + 1), 0)
        return self.windows("train", [random_range_inclusive(rng, 0, last) for _ in range(b)], t)

    def fixed_batches(self, b: int, t: int, m: int):
        """TextSampler::fixed_batches on the val split: M·B windows spread evenly over it."""
        span = max(len(self.splits["val"]) - (t + 1), 0)
        count = m * b
        starts = [0 if count == 1 else i * span // (count - 1) for i in range(count)]
        return [self.windows("val", starts[k * b : (k + 1) * b], t) for k in range(m)]


def _corpus_path(data: dict, run_dir):
    from pathlib import Path

    path = Path(data["path"])
    if not path.is_absolute() and run_dir is not None and not path.exists():
        path = Path(run_dir) / path
    return path


class TrainBatches:
    """The batch resmem trains step `done + 1` on, as a pure function of (seed, done): the
    copy/reverse tasks (sampler.rs TaskSampler), fixed token rows (FixedRows: batch k mod n),
    or a prepared text corpus (TextSampler)."""

    def __init__(self, config: dict, run_dir=None):
        d, tr = config["data"], config["train"]
        self.source, self.b, self.t, self.seed = d["source"], tr["batch"], d["seq_len"], tr["seed"]
        if self.source == "task":
            self.task = d["task"]
            task_batch(self.task, 1, self.t, self.seed, 0)  # refuses a task not ported
        elif self.source == "tokens":
            from safetensors.numpy import load_file

            self.rows = rows_batches(load_file(str(_corpus_path(d, run_dir)))["tokens"], self.b)
        elif self.source == "text":
            self.corpus = Corpus(_corpus_path(d, run_dir))
        else:
            raise NotImplementedError(f"the {self.source} source is not ported yet")

    def __call__(self, done: int) -> tuple[np.ndarray, np.ndarray]:
        if self.source == "task":
            return task_batch(self.task, self.b, self.t, self.seed, done)
        if self.source == "tokens":
            return self.rows[done % len(self.rows)]
        return self.corpus.batch(self.b, self.t, self.seed, done)
