#!/usr/bin/env python3
"""PyTorch eager peer of `resmem bench`, on the CPU or a CUDA GPU: the toy RMT and its
transformer twin of bench/RESULTS.md (or any size the flags give), trained in f32 or in one of
the fast class's counterparts (--precision), timed the way `resmem bench` times them.

The models follow /work/shared/SPEC.md §1-2 with resmem's tiny-preset conventions (the ones the
`resmem bench` commands in bench/peers/run.sh build):
- transformer: learned token and position embeddings, pre-norm LayerNorm (gain, no bias, eps
  1e-5), causal attention with logits · 1/sqrt(D_h)/(layer+1), FF W2·GELU_tanh(W1·x), final
  norm, W_U; no biases, no weight tying;
- RMT: residual matrices D_k×D_v per token; the embedding stores the token and position tables
  with keys; each block retrieves Q, K, V (3R keys) from RMSNorm(X) over the whole matrix with a
  D_k×D_v gain (eps 1e-6), attends per head (H = R, D_h = D_v) with the same logit scaling,
  stores the heads with w_O; the FF retrieves R vectors, W2·GELU(W1·x), stores R vectors; the
  unembedding retrieves R vectors from the final norm and applies W_U.
- loss: CE + 1e-4·(log Z)² over the counted targets, averaged over them; AdamW β (0.9, 0.95), eps
  1e-8, weight decay 1e-4 on matrices and keys, global-norm clipping at 1, warmup 5% then cosine
  to 10%.

Attention is `F.scaled_dot_product_attention` (PyTorch's own fused CPU kernel): what a PyTorch
user would write. Timing: steps 1-3 warm up, steps 4-13 are timed one by one; tokens/s is B·T
over the median step, as `resmem bench` reports it.

Data: the copy task where the vocabulary is 256 (bytes), else uniform random tokens, every
target counted (the time of a step does not depend on the tokens' values).

Precision (--precision, named in the output and the JSON's "precision"), so that each of
resmem's numeric classes (issue 41) is compared with its peer:
- strict (the default): f32 everywhere, TF32 off (`torch.backends.cuda.matmul.allow_tf32` and
  `torch.backends.cudnn.allow_tf32` False, float32 matmul precision "highest"): the peer of
  resmem's strict class, whose WGSL computes every product in full f32;
- tf32: the same f32 model with TF32 on (both flags True, matmul precision "high"): CUDA's
  products take TF32 multiplicands on the tensor cores (10-bit mantissas, f32 accumulators).
  It changes nothing on the CPU, which says so;
- bf16: `torch.autocast(device, dtype=torch.bfloat16)` around the forward and the loss (TF32
  off): the products take bf16 multiplicands into f32 accumulators; the weights (master
  weights), gradients, optimiser state and the loss's logsumexp stay f32, the logits being cast
  to f32 before the loss. No loss scaling: bf16 has f32's range. The peers of resmem's fast
  class (f16 multiplicands, f32 accumulators) are tf32 and bf16.
Each timed step ends with a device synchronisation on CUDA.

Usage: torch_peer.py --arch rmt|transformer [--device cpu|cuda] [--precision strict|tf32|bf16]
[--batch 32] [--seq-len 128] [--vocab 256] [--layers 4] [--d-ff 1024] [--d-k 32 --d-v 32
--rank 8] [--d-model 256 --heads 8 --head-dim 32] [--warmup 3] [--steps 10] [--threads N]
[--json]
"""

import argparse
import contextlib
import json
import math
import os
import platform
import random
import statistics
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn

Z_LOSS = 1e-4
IGNORE = -100


def copy_batch(rng: random.Random, b: int, t: int):
    """B copy-task sequences of T + 1 bytes (resmem's `data::tasks`): T/2 symbols of 16 letters,
    '|', the symbols again, '.' padding; only the copied symbols count as targets."""
    seqs, counted = [], []
    for _ in range(b):
        n = t // 2
        xs = [ord("a") + rng.randrange(16) for _ in range(n)]
        seq = xs + [ord("|")] + xs
        cnt = [False] * (n + 1) + [True] * n
        while len(seq) < t + 1:
            seq.append(ord("."))
            cnt.append(False)
        seqs.append(seq[: t + 1])
        counted.append(cnt[: t + 1])
    seq = torch.tensor(seqs, dtype=torch.long)
    cnt = torch.tensor(counted, dtype=torch.bool)
    inputs = seq[:, :-1]
    targets = torch.where(cnt[:, 1:], seq[:, 1:], torch.full_like(seq[:, 1:], IGNORE))
    return inputs, targets


def random_batch(gen: torch.Generator, b: int, t: int, vocab: int):
    """B sequences of T + 1 uniform random tokens, every target counted."""
    seq = torch.randint(0, vocab, (b, t + 1), generator=gen)
    return seq[:, :-1], seq[:, 1:]


def normal(*shape, std):
    return nn.Parameter(torch.randn(*shape) * std)


def attention(q, k, v, layer):
    """q, k, v: (B, H, T, D_h); causal, logits · 1/sqrt(D_h)/(layer+1)."""
    scale = 1.0 / math.sqrt(q.shape[-1]) / (layer + 1)
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)


class Transformer(nn.Module):
    def __init__(self, vocab, n_ctx, d=256, layers=4, heads=8, head_dim=32, d_ff=1024, init_std=0.5):
        super().__init__()
        self.heads, self.head_dim = heads, head_dim
        hd = heads * head_dim
        out_scale = 1.0 / math.sqrt(2 * layers)
        w = lambda fan_in, *shape, extra=1.0: normal(*shape, std=init_std / math.sqrt(fan_in) * extra)
        self.wte = normal(vocab, d, std=0.02)
        self.wpe = normal(n_ctx, d, std=0.02)
        self.blocks = nn.ModuleList()
        for _ in range(layers):
            blk = nn.Module()
            blk.ln1 = nn.LayerNorm(d, eps=1e-5, bias=False)
            blk.w_qkv = w(d, 3 * hd, d)
            blk.w_o = w(hd, d, hd, extra=out_scale)
            blk.ln2 = nn.LayerNorm(d, eps=1e-5, bias=False)
            blk.w1 = w(d, d_ff, d)
            blk.w2 = w(d_ff, d, d_ff, extra=out_scale)
            self.blocks.append(blk)
        self.ln_f = nn.LayerNorm(d, eps=1e-5, bias=False)
        self.w_u = w(d, vocab, d)

    def forward(self, tokens):
        b, t = tokens.shape
        x = self.wte[tokens] + self.wpe[:t]
        for i, blk in enumerate(self.blocks):
            qkv = F.linear(blk.ln1(x), blk.w_qkv).view(b, t, 3, self.heads, self.head_dim)
            q, k, v = qkv.permute(2, 0, 3, 1, 4)
            a = attention(q, k, v, i).transpose(1, 2).reshape(b, t, -1)
            x = x + F.linear(a, blk.w_o)
            x = x + F.linear(F.gelu(F.linear(blk.ln2(x), blk.w1), approximate="tanh"), blk.w2)
        return F.linear(self.ln_f(x), self.w_u)

    def decayed(self, name):
        return name.startswith("blocks.") and ".ln" not in name


class MatrixNorm(nn.Module):
    """RMSNorm over each token's whole D_k×D_v matrix, with a D_k×D_v gain."""

    def __init__(self, dk, dv, eps=1e-6):
        super().__init__()
        self.gain = nn.Parameter(torch.ones(dk, dv))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(dim=(-2, -1), keepdim=True) + self.eps) * self.gain


def retrieve(keys, x):
    """keys (R', D_k), x (B, T, D_k, D_v) -> (B, T, R', D_v): r ·₁ X per key."""
    return torch.matmul(keys, x)


def store(keys, data):
    """keys (R', D_k), data (B, T, R', D_v) -> Σ_h keys[h] ⊗ data[h]: (B, T, D_k, D_v)."""
    return torch.matmul(keys.t(), data)


class Rmt(nn.Module):
    def __init__(self, vocab, n_ctx, dk=32, dv=32, rank=8, layers=4, d_ff=1024, init_std=0.5):
        super().__init__()
        self.dk, self.dv, self.rank = dk, dv, rank
        out_scale = 1.0 / math.sqrt(2 * layers)
        w = lambda fan_in, *shape, extra=1.0: normal(*shape, std=init_std / math.sqrt(fan_in) * extra)
        self.wte = normal(vocab, rank, dv, std=0.02)
        self.wpe = normal(n_ctx, rank, dv, std=0.02)
        self.w_e = w(rank, rank, dk)
        self.w_pe = w(rank, rank, dk)
        self.blocks = nn.ModuleList()
        for _ in range(layers):
            blk = nn.Module()
            blk.n1 = MatrixNorm(dk, dv)
            blk.r_qkv = w(dk, 3 * rank, dk)
            blk.w_o = w(rank, rank, dk, extra=out_scale)
            blk.n2 = MatrixNorm(dk, dv)
            blk.r_ff = w(dk, rank, dk)
            blk.w1 = w(rank * dv, d_ff, rank * dv)
            blk.w2 = w(d_ff, rank * dv, d_ff)
            blk.w_ff = w(rank, rank, dk, extra=out_scale)
            self.blocks.append(blk)
        self.n_f = MatrixNorm(dk, dv)
        self.r_u = w(dk, rank, dk)
        # Zero-initialised, as resmem's RMT starts.
        self.w_u = nn.Parameter(torch.zeros(vocab, rank * dv))

    def forward(self, tokens):
        b, t = tokens.shape
        r = self.rank
        x = store(self.w_e, self.wte[tokens]) + store(self.w_pe, self.wpe[:t].expand(b, t, r, self.dv))
        for i, blk in enumerate(self.blocks):
            qkv = retrieve(blk.r_qkv, blk.n1(x))  # (B, T, 3R, D_v)
            q, k, v = qkv.view(b, t, 3, r, self.dv).permute(2, 0, 3, 1, 4)
            a = attention(q, k, v, i).transpose(1, 2)  # (B, T, R, D_v)
            x = x + store(blk.w_o, a)
            h = retrieve(blk.r_ff, blk.n2(x)).reshape(b, t, r * self.dv)
            f = F.linear(F.gelu(F.linear(h, blk.w1), approximate="tanh"), blk.w2)
            x = x + store(blk.w_ff, f.view(b, t, r, self.dv))
        u = retrieve(self.r_u, self.n_f(x)).reshape(b, t, r * self.dv)
        return F.linear(u, self.w_u)

    def decayed(self, name):
        return name.startswith("blocks.") and ".n" not in name or name in ("w_e", "w_pe", "r_u")


def loss_fn(logits, targets):
    """CE + z·(log Z)² averaged over the counted targets, in f32 whatever the logits' type
    (bf16 under --precision bf16; a no-op on f32 logits)."""
    logits = logits.float().reshape(-1, logits.shape[-1])
    targets = targets.reshape(-1)
    mask = targets != IGNORE
    lse = torch.logsumexp(logits, dim=-1)
    picked = logits.gather(1, targets.clamp(min=0).unsqueeze(1)).squeeze(1)
    per = (lse - picked + Z_LOSS * lse * lse) * mask
    return per.sum() / mask.sum().clamp(min=1)


def schedule(total, warmup_frac=0.05, min_frac=0.1):
    warm = max(1, int(round(warmup_frac * total)))

    def lr_at(step):  # step counts from 0
        s = step + 1
        if s <= warm:
            return s / warm
        p = (s - warm) / max(1, total - warm)
        return min_frac + (1 - min_frac) * 0.5 * (1 + math.cos(math.pi * p))

    return lr_at


PRECISIONS = ["strict", "tf32", "bf16"]


def set_precision(precision: str, device: str):
    """Sets torch's f32 matmul flags for `precision`; returns a maker of the context each step's
    forward and loss run in (bf16 autocast, or nothing): a fresh one a step."""
    tf32 = precision == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    torch.set_float32_matmul_precision("high" if tf32 else "highest")
    if precision == "bf16":
        return lambda: torch.autocast(device_type=device, dtype=torch.bfloat16)
    return contextlib.nullcontext


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--arch", choices=["rmt", "transformer"], required=True)
    ap.add_argument("--device", default="cpu", help="cpu or cuda")
    ap.add_argument(
        "--precision",
        choices=PRECISIONS,
        default="strict",
        help="strict: f32, TF32 off (default); tf32: TF32 tensor-core products; "
        "bf16: bf16 autocast, f32 master weights",
    )
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--vocab", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--d-ff", type=int, default=1024)
    ap.add_argument("--d-k", type=int, default=32)
    ap.add_argument("--d-v", type=int, default=32)
    ap.add_argument("--rank", type=int, default=8)
    ap.add_argument("--d-model", type=int, default=256)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--head-dim", type=int, default=32)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--steps", type=int, default=10, help="timed steps")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    if a.steps < 1 or a.batch < 1 or a.seq_len < 4:
        sys.exit("error: --steps and --batch must be at least 1, --seq-len at least 4")
    if a.vocab < 2:
        sys.exit("error: --vocab must be at least 2")
    cuda = a.device == "cuda"
    if cuda and not torch.cuda.is_available():
        sys.exit("error: --device cuda, but this torch sees no CUDA device")
    if a.device not in ("cpu", "cuda"):
        sys.exit(f"error: --device {a.device}: use cpu or cuda")
    if cuda and a.precision == "bf16" and not torch.cuda.is_bf16_supported():
        sys.exit("error: --precision bf16, but this CUDA device has no bf16")
    if not cuda and a.precision == "tf32":
        print("note: --precision tf32 on the CPU: the TF32 flags are CUDA's, the run is f32", file=sys.stderr)
    autocast = set_precision(a.precision, a.device)
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    rng = random.Random(a.seed)
    gen = torch.Generator().manual_seed(a.seed)
    if a.arch == "rmt":
        model = Rmt(a.vocab, a.seq_len, a.d_k, a.d_v, a.rank, a.layers, a.d_ff)
    else:
        model = Transformer(a.vocab, a.seq_len, a.d_model, a.layers, a.heads, a.head_dim, a.d_ff)
    model = model.to(a.device)
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    params = sum(p.numel() for p in model.parameters())
    named = list(model.named_parameters())
    groups = [
        {"params": [p for n, p in named if model.decayed(n)], "weight_decay": 1e-4},
        {"params": [p for n, p in named if not model.decayed(n)], "weight_decay": 0.0},
    ]
    opt = torch.optim.AdamW(groups, lr=1e-2, betas=(0.9, 0.95), eps=1e-8)
    total = a.warmup + a.steps
    sched = torch.optim.lr_scheduler.LambdaLR(opt, schedule(total))

    times, losses = [], []
    for step in range(total):
        if a.vocab == 256:
            inputs, targets = copy_batch(rng, a.batch, a.seq_len)
        else:
            inputs, targets = random_batch(gen, a.batch, a.seq_len, a.vocab)
        inputs, targets = inputs.to(a.device), targets.to(a.device)
        sync()
        start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with autocast():
            loss = loss_fn(model(inputs), targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        sync()
        elapsed = time.perf_counter() - start
        losses.append(loss.item())
        if step >= a.warmup:
            times.append(elapsed)
    if not all(math.isfinite(x) for x in losses):
        sys.exit(f"error: the loss became non-finite: {losses}")
    median = statistics.median(times)
    tokens = a.batch * a.seq_len
    report = {
        "peer": "pytorch-eager",
        "torch": torch.__version__,
        "python": platform.python_version(),
        "arch": a.arch,
        "device": torch.cuda.get_device_name() if cuda else "cpu",
        "precision": a.precision,
        "tf32": a.precision == "tf32",
        "autocast": "bfloat16" if a.precision == "bf16" else None,
        "vocab": a.vocab,
        "threads": torch.get_num_threads(),
        "batch": a.batch,
        "seq_len": a.seq_len,
        "params": params,
        "warmup_steps": a.warmup,
        "timed_steps": a.steps,
        "tokens_per_s": tokens / median,
        "tokens_per_s_mean": tokens * len(times) / sum(times),
        "ms_per_step": {"median": median * 1e3, "min": min(times) * 1e3, "max": max(times) * 1e3},
        "first_loss": losses[0],
        "last_loss": losses[-1],
    }
    if a.json:
        print(json.dumps(report, indent=2))
    else:
        print(
            f"{a.arch} ({params} parameters), torch {torch.__version__} eager, precision {a.precision}, "
            f"{report['device']}, {report['threads']} threads: "
            f"{report['tokens_per_s']:.0f} tokens/s, {median * 1e3:.1f} ms/step (median of steps "
            f"{a.warmup + 1}-{total}); loss {losses[0]:.3f} -> {losses[-1]:.3f}"
        )


if __name__ == "__main__":
    main()
