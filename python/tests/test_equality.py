"""resmem_jax against resmem's CPU backend, architecture by architecture.

For each case the resmem binary trains a tiny run on the copy task (5 steps, CPU), then:
- `resmem eval --json` gives the held-out loss on the batches its training evaluated; resmem_jax
  draws the same batches (the same Xoshiro256++ stream) and computes the loss in JAX: the two
  must agree to 1e-5 relative (cross-entropy alone, and with the z-loss);
- `resmem analyze lens --json --top V` gives the model's full output distribution for a few
  tokens of the first held-out sequence: JAX's log-probabilities must agree to 1e-5 absolute;
- the run read and written back by resmem_jax is the same bytes, and a model file resmem_jax
  writes after a change (new CRC) is read back by `resmem eval`.
The RMT under the official code's conventions (`--preset official`: ALiBi, documents masked apart
at <|endoftext|>) is checked on fixed token rows holding separators (the `tokens` data source).

Runs under pytest (`python -m pytest python/tests`) or alone (`python python/tests/test_equality.py`).
A missing tool (jax, the resmem binary, the corpus) is a failure, never a skip. The binary is
$RESMEM, by default target/release/resmem of this checkout.
"""

from __future__ import annotations

import json
import math
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from binary import ROOT, resmem  # noqa: E402
sys.path.insert(0, str(ROOT / "python"))  # the package, installed or not

import jax  # noqa: E402  (a missing jax fails here, as it must)

jax.config.update("jax_default_matmul_precision", "highest")
import jax.numpy as jnp  # noqa: E402
from safetensors.numpy import save_file  # noqa: E402

from resmem_jax import data, run  # noqa: E402
from resmem_jax.evaluate import held_out_loss  # noqa: E402
from resmem_jax.models import from_run, to_tensors  # noqa: E402

LOSS_RTOL = 1e-5
LOGPROB_ATOL = 1e-5

# name: `resmem train` flags (all on the copy task, 5 steps, CPU)
CASES = {
    "transformer": ["--arch", "transformer"],
    "transformer-rmsnorm": ["--arch", "transformer", "--norm", "rmsnorm"],
    "rmt": ["--arch", "rmt"],
    "rmt-alibi": ["--arch", "rmt", "--position", "alibi"],
    "memoryformer": ["--arch", "memoryformer"],
    "memoryformer-gelu": ["--arch", "memoryformer", "--block-gelu", "true"],
    "hybrid": ["--arch", "hybrid"],
    "hc": ["--arch", "hc", "--mixing", "hc"],
    "mhc": ["--arch", "hc", "--mixing", "mhc"],
    "mhc-zero-bias": ["--arch", "hc", "--mixing", "mhc", "--stream-init", "zero-bias"],
    "mhc-lite": ["--arch", "hc", "--mixing", "mhc-lite"],
    "hc-norm-then-sum": ["--arch", "hc", "--mixing", "hc", "--collapse", "norm-then-sum"],
}
LENS_TOKENS = (0, 8, 15)


def train(out: Path, flags: list[str], steps: int = 5) -> Path:
    resmem("train", *flags, "--task", "copy", "--steps", str(steps), "--backend", "cpu", "--out", str(out))
    return out


def resmem_eval(run_dir: Path, checkpoint: Path | None = None, batches: int | None = None) -> dict:
    args = ["eval", "--run", str(run_dir), "--checkpoint", str(checkpoint or run_dir / run.MODEL_FILE)]
    args += ["--json", "--backend", "cpu"]
    if batches is not None:
        args += ["--batches", str(batches)]
    return json.loads(resmem(*args).strip().splitlines()[-1])


def rel(a: float, b: float) -> float:
    return abs(a - b) / max(abs(b), 1e-30)


def check_loss(name: str, run_dir: Path, batches: int | None = None) -> float:
    """resmem's and JAX's held-out losses; returns the larger relative difference."""
    want = resmem_eval(run_dir, batches=batches)
    got = held_out_loss(run.load_run(run_dir), run_dir, batches)
    d_ce = rel(got["val_loss"], want["val_loss"])
    d_total = rel(got["val_total"], want["val_total"])
    print(
        f"{name:22s} loss resmem {want['val_loss']:.9f} jax {got['val_loss']:.9f} rel {d_ce:.2e}"
        f" | with z-loss rel {d_total:.2e} | tokens {got['tokens']}"
    )
    assert got["tokens"] == want["tokens"], (got, want)
    assert d_ce < LOSS_RTOL and d_total < LOSS_RTOL, (name, got, want)
    return max(d_ce, d_total)


def check_lens(name: str, run_dir: Path) -> float:
    """The full output distribution of a few tokens of the first held-out sequence, from
    `resmem analyze lens` (its last depth is the model's output), against JAX's log-softmax."""
    r = run.load_run(run_dir)
    vocab = r.model["vocab"]
    inputs, _ = data.held_out(r.config, 1, run_dir)[0]
    logp = np.asarray(jax.nn.log_softmax(from_run(r)(jnp.asarray(inputs, jnp.int32)), axis=-1))
    worst = 0.0
    for tok in LENS_TOKENS:
        out = resmem(
            "analyze", "lens", "--run", str(run_dir), "--checkpoint", str(run_dir / run.MODEL_FILE),
            "--json", "--backend", "cpu", "--seq", "0", "--token", str(tok), "--top", str(vocab),
        )
        final = json.loads(out)[-1]
        assert final["kl_to_final"] == 0.0, final["depth"]
        theirs = np.full(vocab, -np.inf)
        for token, prob in final["top"]:
            theirs[token] = math.log(prob) if prob > 0 else -np.inf
        seen = np.isfinite(theirs) & (theirs > -30)  # probabilities that underflow say little
        worst = max(worst, float(np.max(np.abs(theirs[seen] - logp[0, tok][seen]))))
    print(f"{name:22s} log-probs max |diff| {worst:.2e} over {len(LENS_TOKENS)} tokens × {vocab}")
    assert worst < LOGPROB_ATOL, (name, worst)
    return worst


def check_round_trip(name: str, run_dir: Path, tmp: Path) -> None:
    """Read and write back: the same bytes; a changed model: a file resmem reads."""
    r = run.load_run(run_dir)
    again = tmp / f"{name}-again"
    run.save_run(r, again)
    for f in (run.CONFIG_FILE, run.MODEL_FILE):
        assert (again / f).read_bytes() == (run_dir / f).read_bytes(), f"{name}: {f} differs after a round trip"
    # Through the JAX model and back, unchanged: the same bytes again.
    model = from_run(r)
    r2 = run.Run(config=r.config, params=to_tensors(model), config_text=r.config_text, meta=r.meta)
    run.save_run(r2, again)
    assert (again / run.MODEL_FILE).read_bytes() == (run_dir / run.MODEL_FILE).read_bytes()
    # Changed (W_U halved): resmem accepts the new CRC and its loss is JAX's.
    r2.params = dict(r2.params, w_u=r2.params["w_u"] * np.float32(0.5))
    run.save_run(r2, again)
    want = resmem_eval(again)
    got = held_out_loss(run.load_run(again), again)
    assert rel(got["val_loss"], want["val_loss"]) < LOSS_RTOL, (name, got, want)
    print(f"{name:22s} round trip: same bytes; changed W_U read by resmem, rel {rel(got['val_loss'], want['val_loss']):.2e}")


def check_official(tmp: Path) -> float:
    """`--preset official` (ALiBi, RMSNorm eps 1e-6 over the whole matrix, logits / (layer + 1),
    z-loss, documents masked apart at <|endoftext|>) on fixed GPT-2 token rows with separators."""
    corpus = ROOT / "data" / "shakespeare-gpt2"
    assert (corpus / "meta.json").is_file(), f"no corpus at {corpus}"
    src = tmp / "official"
    resmem("train", "--preset", "official", "--data", str(corpus), "--steps", "5", "--batch", "4",
           "--backend", "cpu", "--out", str(src))
    # The same model on fixed rows: the `tokens` source, documents still masked apart.
    rng = np.random.default_rng(0)
    rows = rng.integers(0, 50000, size=(8, 65)).astype(np.uint32)
    rows[:, [5, 20, 21, 40]] = 50256  # <|endoftext|>: new documents mid-window
    save_file({"tokens": rows}, str(tmp / "rows.safetensors"))
    dst = tmp / "official-rows"
    dst.mkdir()
    # After 5 steps from W_U = 0 the output is still near uniform (loss ≈ ln V), which would
    # hide the blocks: a random W_U makes every attention weight (ALiBi, the document mask)
    # show in the loss. Written by resmem_jax, with its CRC, and read by resmem.
    r = run.load_run(src)
    params = dict(r.params, w_u=rng.normal(0.0, 0.5, r.params["w_u"].shape).astype(np.float32))
    run.write_tensors(dst / run.MODEL_FILE, params)
    cfg = dict(r.config)
    cfg["data"] = {"source": "tokens", "path": str(tmp / "rows.safetensors"), "tokenizer": "gpt2",
                   "seq_len": 64, "doc_mask": True}
    (dst / run.CONFIG_FILE).write_text(run.dump_toml(cfg))
    assert data.separator(cfg) == 50256
    worst = check_loss("rmt --preset official", dst, batches=2)
    # The check sees the mask: without it JAX's loss is another number.
    unmasked = run.load_run(dst)
    unmasked.config["data"]["doc_mask"] = False
    d = rel(held_out_loss(unmasked, dst, 2)["val_loss"], resmem_eval(dst, batches=2)["val_loss"])
    print(f"{'  (documents not masked)':22s} rel {d:.2e}, as it must be above 1e-4")
    assert d > 1e-4
    return worst


def main() -> None:
    t0 = time.time()
    worst = {}
    with tempfile.TemporaryDirectory(prefix="resmem-jax-") as d:
        tmp = Path(d)
        for name, flags in CASES.items():
            run_dir = train(tmp / name, flags)
            worst[name] = (check_loss(name, run_dir), check_lens(name, run_dir))
            check_round_trip(name, run_dir, tmp)
        worst["official"] = (check_official(tmp), float("nan"))
    print(f"all {len(worst)} cases agree; worst loss rel {max(w[0] for w in worst.values()):.2e}, "
          f"worst log-prob diff {max(w[1] for w in worst.values() if not math.isnan(w[1])):.2e} "
          f"({time.time() - t0:.1f} s)")


# pytest: one test per case.
def _case(name, flags):
    def test(tmp_path):
        run_dir = train(tmp_path / name, flags)
        check_loss(name, run_dir)
        check_lens(name, run_dir)
        check_round_trip(name, run_dir, tmp_path)

    test.__name__ = f"test_{name.replace('-', '_')}"
    return test


for _name, _flags in CASES.items():
    globals()[f"test_{_name.replace('-', '_')}"] = _case(_name, _flags)


def test_official_conventions(tmp_path):
    check_official(tmp_path)


if __name__ == "__main__":
    main()
