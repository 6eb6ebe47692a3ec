"""The units every resmem model shares, as resmem's CPU backend computes them (f32):
norms, tanh-GELU, causal attention (with ALiBi and document masking), the Memory Layer and
the loss. Each function names the resmem source it follows."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

IGNORE = 0xFFFFFFFF  # data::IGNORE, u32::MAX: a target the loss does not count


def targets_i32(targets):
    """resmem's u32 targets as int32 for JAX, IGNORE as −1."""
    import numpy as np

    t = np.asarray(targets)
    return np.where(t == IGNORE, -1, t).astype(np.int32)


def norm(x, gain, kind: str, eps: float):
    """LayerNorm or RMSNorm over the last axis, with a gain and no bias
    (engine/src/ops/norm.rs: y = (x − mean)·rstd·g, rstd = 1/sqrt(var + eps), mean 0 for RMS)."""
    if kind == "layernorm":
        mean = jnp.mean(x, axis=-1, keepdims=True)
    else:
        mean = jnp.zeros_like(x[..., :1])
    var = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)
    rstd = 1.0 / jnp.sqrt(var + jnp.float32(eps))
    return (x - mean) * rstd * gain


def gelu(x):
    """tanh-GELU (engine/src/ops/elementwise.rs): ½x(1 + tanh(sqrt(2/π)(x + 0.044715x³)))."""
    k = jnp.float32(math.sqrt(2.0 / math.pi))
    return 0.5 * x * (1.0 + jnp.tanh(k * (x + 0.044715 * x * x * x)))


def alibi_slopes(heads: int):
    """ALiBi's slope of head h: 2^(−8(h+1)/H) (engine/src/ops/attention.rs `slope`)."""
    return jnp.asarray([2.0 ** (-8.0 * (h + 1) / heads) for h in range(heads)], dtype=jnp.float32)


def attention(qkv, heads: int, head_dim: int, scale: float, alibi: bool = False, doc_start=None):
    """Causal multi-head attention from packed rows [Q | K | V], each H·D_h, head h at h·D_h
    (engine/src/ops/attention.rs): softmax(scale·q·kᵀ − slope_h·(i − j)) v over the keys j with
    doc_start[i] ≤ j ≤ i. qkv (B, T, 3·H·D_h) → (B, T, H·D_h)."""
    b, t, _ = qkv.shape
    q, k, v = jnp.moveaxis(qkv.reshape(b, t, 3, heads, head_dim), 2, 0)  # each (B, T, H, Dh)
    logits = jnp.einsum("bihd,bjhd->bhij", q, k) * jnp.float32(scale)
    i = jnp.arange(t)[:, None]
    j = jnp.arange(t)[None, :]
    if alibi:
        logits = logits - alibi_slopes(heads)[:, None, None] * (i - j).astype(jnp.float32)
    seen = (j <= i)[None, None]
    if doc_start is not None:
        seen = seen & (j[None, None] >= doc_start[:, None, :, None])
    logits = jnp.where(seen, logits, -jnp.inf)
    p = jax.nn.softmax(logits, axis=-1)
    return jnp.einsum("bhij,bjhd->bihd", p, v).reshape(b, t, heads * head_dim)


def document_starts(tokens, separator: int | None):
    """For every token, the position in its sequence of the last `separator` at or before it,
    else 0 (models/src/batch.rs `document_starts`). tokens (B, T) → (B, T)."""
    b, t = tokens.shape
    if separator is None:
        return jnp.zeros((b, t), jnp.int32)
    pos = jnp.where(tokens == separator, jnp.arange(t)[None, :], 0)
    return jax.lax.cummax(pos, axis=1)


def memory_layer(x, tables, bias, tau: int, temperature: float = 1.0, l1: bool = False):
    """MemoryFormer's Memory Layer (engine/src/ops/memory.rs): split x's first K·τ values into
    K chunks z_k of τ, code_k = Σ_j [z_kj ≥ 0]·2^j, p_k = Π_j 1/(1 + exp(−2|z_kj|/t)) (times
    ‖z_k‖₁ with `l1`), y = b + Σ_k p_k · T_k[code_k]. tables (K, 2^τ, d_out)."""
    k = tables.shape[0]
    z = x[..., : k * tau].reshape(*x.shape[:-1], k, tau)
    bits = (z >= 0).astype(jnp.int32) << jnp.arange(tau, dtype=jnp.int32)
    code = jnp.sum(bits, axis=-1)  # (..., K)
    sig = 1.0 / (1.0 + jnp.exp(-2.0 * jnp.abs(z) / jnp.float32(temperature)))
    p = jnp.prod(sig, axis=-1)
    if l1:
        p = p * jnp.sum(jnp.abs(z), axis=-1)
    rows = tables[jnp.arange(k), code]  # (..., K, d_out)
    return bias + jnp.sum(p[..., None] * rows, axis=-2)


def cross_entropy(logits, targets):
    """Per-row cross-entropy and log Z; rows whose target is ignored (−1, see `targets_i32`)
    count 0 (engine/src/ops/cross_entropy.rs). logits (..., V), targets (...) int32."""
    lse = jax.nn.logsumexp(logits, axis=-1)
    counted = targets >= 0
    safe = jnp.where(counted, targets, 0).astype(jnp.int32)
    picked = jnp.take_along_axis(logits, safe[..., None], axis=-1)[..., 0]
    return jnp.where(counted, lse - picked, 0.0), lse, counted


def mean_loss(logits, targets, z_loss: float = 0.0):
    """resmem's loss of one batch: the mean CE over the counted targets, and with the z-loss
    z·mean (log Z)² added (what the official code reports; `val_total`)."""
    ce, lse, counted = cross_entropy(logits, targets)
    n = jnp.sum(counted)
    mean_ce = jnp.sum(ce) / n
    z = jnp.float32(z_loss) * jnp.sum(jnp.where(counted, lse * lse, 0.0)) / n
    return mean_ce, mean_ce + z
