"""resmem's architectures in JAX, each an Equinox module holding the parameters under resmem's
own names and shapes (the keys of `model.safetensors`), so that reading and writing a run is
the identity. `model(tokens)` gives the logits (B, T, V) resmem's CPU backend computes.

The equations are those of docs/models.md; each class names the resmem file it follows.
"""

from __future__ import annotations

import itertools

import equinox as eqx
import numpy as np
import jax
import jax.numpy as jnp

from .layers import attention, document_starts, gelu, memory_layer, norm

HC_EPS = 1e-6  # engine/src/ops/hyper.rs EPS: Sinkhorn's ε, mHC's ε on pre, x̂'s norm eps


class Config:
    """A run's [model] table, hashable so that it can be a static field of a module."""

    def __init__(self, model: dict):
        self._items = tuple(sorted(model.items()))
        self.__dict__.update(model)

    def __hash__(self):
        return hash(self._items)

    def __eq__(self, other):
        return isinstance(other, Config) and self._items == other._items

    def as_dict(self) -> dict:
        return dict(self._items)


class Model(eqx.Module):
    """Parameters by resmem's names (a dict of f32 arrays: a pytree, so jax.grad, optax and
    sharding apply to it as is) and the config."""

    params: dict
    cfg: Config = eqx.field(static=True)

    def __call__(self, tokens, separator: int | None = None):
        """Logits (B, T, V) of tokens (B, T); `separator` masks attention across documents."""
        raise NotImplementedError

    def p(self, name: str):
        return self.params[name]


def _qkv_scale(head_dim: int, layer: int, layer_scale: bool) -> float:
    """1/sqrt(D_h), divided by (layer + 1) with attn_layer_scale (models/src/attention.rs)."""
    scale = np.float32(1.0) / np.sqrt(np.float32(head_dim))
    return float(scale / np.float32(layer + 1)) if layer_scale else float(scale)


def _dense_ff(p, prefix, x):
    """W2 · GELU(W1 · x) (models/src/ff.rs `Dense`): w1 (F, width), w2 (width, F)."""
    return gelu(x @ p[f"{prefix}.w1"].T) @ p[f"{prefix}.w2"].T


def _memory_block(p, prefix, x, c):
    """ML2(Norm(ML1(x))), or ML2(GELU(Norm(ML1(x)))) with block_gelu (models/src/memory_layer.rs):
    ML1 hashes K chunks of τ, ML2 K chunks of τ + e; the inner norm is the residual's kind."""
    h = memory_layer(x, p[f"{prefix}.ml1.tables"], p[f"{prefix}.ml1.bias"], c.tau, c.temperature, c.l1_weight)
    h = norm(h, p[f"{prefix}.ln3"], c.norm, c.norm_eps)
    if c.block_gelu:
        h = gelu(h)
    bits = c.tau + c.expansion_bits
    return memory_layer(h, p[f"{prefix}.ml2.tables"], p[f"{prefix}.ml2.bias"], bits, c.temperature, c.l1_weight)


class VectorModel(Model):
    """The transformer and MemoryFormer (models/src/residual_vector.rs):

        X⁰ = W_E[token] + W_PE[position]
        X ← X + out(attention(in(Norm(X))))     W_QKV and W_O (transformer), ML_QKV and none (MemoryFormer)
        X ← X + core(Norm(X))                    W2·GELU(W1·x), or the memory block
        logits = W_U · Norm(X)
    """

    def __call__(self, tokens, separator=None):
        c, p = self.cfg, self.params
        b, t = tokens.shape
        hashed = c.arch == "memoryformer"
        heads = c.n_heads
        head_dim = c.d_model // heads if hashed else c.head_dim
        doc = document_starts(tokens, separator)
        x = p["wte"][tokens] + p["wpe"][:t][None]
        for l in range(c.n_layers):
            blk = f"blocks.{l}"
            h = norm(x, p[f"{blk}.ln1"], c.norm, c.norm_eps)
            if hashed:
                qkv = memory_layer(h, p[f"{blk}.qkv.tables"], p[f"{blk}.qkv.bias"], c.tau, c.temperature, c.l1_weight)
            else:
                qkv = h @ p[f"{blk}.w_qkv"].T
            y = attention(qkv, heads, head_dim, _qkv_scale(head_dim, l, c.attn_layer_scale), doc_start=doc)
            x = x + (y if hashed else y @ p[f"{blk}.w_o"].T)
            h = norm(x, p[f"{blk}.ln2"], c.norm, c.norm_eps)
            x = x + (_memory_block(p, blk, h, c) if hashed else _dense_ff(p, blk, h))
        return norm(x, p["lnf"], c.norm, c.norm_eps) @ p["w_u"].T


class MatrixModel(Model):
    """The RMT and the hybrid (models/src/residual_matrix.rs): each token's residual is a
    D_k×D_v matrix X, read by retrieval r ·₁ Norm(X) and written by storage w ⊗ x; the norm
    is over the whole matrix, with a D_k×D_v gain.

        X⁰ = Σ_h w_E^(h) ⊗ W_E^(h)[token] (+ Σ_h w_PE^(h) ⊗ W_PE^(h)[position], or ALiBi)
        Q, K, V = r_QKV ·₁ Norm(X)                       3R retrievals, heads of D_v
        X ← X + Σ_h w_O^(h) ⊗ SHA^(h)(Q, K, V)
        X ← X + Σ_h w_FF^(h) ⊗ f_h,  f = core(concat_h r_FF^(h) ·₁ Norm(X))
        logits = W_U · concat_h(r_U^(h) ·₁ Norm(X))
    """

    def __call__(self, tokens, separator=None):
        c, p = self.cfg, self.params
        b, t = tokens.shape
        r, dk, dv = c.rank, c.d_k, c.d_v

        def normed(x, gain):  # (B, T, D_k, D_v), normalised over the whole matrix
            flat = norm(x.reshape(b, t, dk * dv), gain.reshape(dk * dv), c.norm, c.norm_eps)
            return flat.reshape(b, t, dk, dv)

        def retrieve(keys, x):  # keys (R', D_k) · X → (B, T, R', D_v)
            return jnp.einsum("rk,btkv->btrv", keys, x)

        def store(keys, data):  # Σ_h keys[h] ⊗ data[h]: (B, T, R', D_v) → (B, T, D_k, D_v)
            return jnp.einsum("rk,btrv->btkv", keys, data)

        doc = document_starts(tokens, separator)
        x = store(p["w_e"], p["wte"][tokens])
        if c.position == "learned":
            x = x + store(p["w_pe"], jnp.broadcast_to(p["wpe"][:t][None], (b, t, r, dv)))
        for l in range(c.n_layers):
            blk = f"blocks.{l}"
            qkv = retrieve(p[f"{blk}.r_qkv"], normed(x, p[f"{blk}.ln1"])).reshape(b, t, 3 * r * dv)
            scale = _qkv_scale(dv, l, c.attn_layer_scale)
            y = attention(qkv, r, dv, scale, alibi=c.position == "alibi", doc_start=doc)
            x = x + store(p[f"{blk}.w_o"], y.reshape(b, t, r, dv))
            xff = retrieve(p[f"{blk}.r_ff"], normed(x, p[f"{blk}.ln2"])).reshape(b, t, r * dv)
            f = _memory_block(p, blk, xff, c) if c.arch == "hybrid" else _dense_ff(p, blk, xff)
            x = x + store(p[f"{blk}.w_ff"], f.reshape(b, t, r, dv))
        yu = retrieve(p["r_u"], normed(x, p["lnf"])).reshape(b, t, r * dv)
        return yu @ p["w_u"].reshape(c.vocab, r * dv).T


def _permutations(n: int):
    """The n! permutations of 0..n in itertools order (engine/src/ops/hyper.rs `permutation`),
    as (n!, n, n) matrices with Π[κ, j, perm_κ[j]] = 1."""
    perms = list(itertools.permutations(range(n)))
    mats = [[[1.0 if perm[j] == k else 0.0 for k in range(n)] for j in range(n)] for perm in perms]
    return jnp.asarray(mats, dtype=jnp.float32)


def _sinkhorn(z, iters: int):
    """DeepSeek-V4's recipe (engine/src/ops/hyper.rs `sinkhorn`): softmax over k plus ε, then
    2·iters − 1 normalisations, odd ones of the columns (over j), even ones of the rows, each
    dividing by its sum plus ε. z (..., n, n) → P (..., n, n)."""
    x = jax.nn.softmax(z, axis=-1) + HC_EPS
    for s in range(1, 2 * iters):
        axis = -1 if s % 2 == 0 else -2
        x = x / (jnp.sum(x, axis=axis, keepdims=True) + HC_EPS)
    return x


class HyperConnections(Model):
    """HC, mHC and mHC-lite (models/src/hyper_connections.rs): n streams of D, X ∈ R^{n×D} a
    token, mixed at every site (each block's attention, then its FF):

        X⁰ = (e, …, e),  e = W_E[token] + W_PE[position]
        x̂ = vec(X)/rms(vec(X)), m = Φ x̂             mHC, mHC-lite (one statistic over n·D, ε 1e-6)
        x̂_j = g ⊙ x_j/rms(x_j), m_j = Φ x̂_j         HC (each stream its n + 2 logits)
        pre, post, P = gates(m; α, b)
        u = Σ_j pre_j x_j,  f = F(Norm(u))            F: MHA (no logit scaling by depth) or FF
        x'_k = Σ_j P[j,k] x_j + post_k f
        logits = W_U · collapse(X)                    sum, head (gated sum) or norm-then-sum
    """

    def _gates(self, prefix, x, mixing):
        """One site's pre (…, n), post (…, n) and P (…, n, n) from the streams x (…, n, D)."""
        c, p = self.cfg, self.params
        n, d = c.streams, c.d_model
        phi, bias, alpha = p[f"{prefix}.hc_phi"], p[f"{prefix}.hc_bias"], p[f"{prefix}.hc_alpha"]
        lead = x.shape[:-2]
        if mixing == "hc":
            xhat = norm(x, p[f"{prefix}.hc_norm"], "rmsnorm", c.norm_eps)
            m = xhat @ phi.T  # (…, n, n + 2): stream j's [pre_j, post_j, P[j, 0..n)]
            scales = alpha[jnp.asarray([0, 1] + [2] * n)]  # α_pre, α_post, then α_res for P's n
            g = scales * jnp.tanh(m) + bias.reshape(n, n + 2)
            return g[..., 0], g[..., 1], g[..., 2:]
        xhat = norm(x.reshape(*lead, n * d), jnp.ones((n * d,), jnp.float32), "rmsnorm", HC_EPS)
        m = xhat @ phi.T  # [pre 0..n | post n..2n | res 2n..]
        if mixing == "head":
            return jax.nn.sigmoid(alpha[0] * m + bias) + HC_EPS, None, None
        eps = HC_EPS if mixing == "mhc" else 0.0
        pre = jax.nn.sigmoid(alpha[0] * m[..., :n] + bias[:n]) + eps
        post = 2.0 * jax.nn.sigmoid(alpha[1] * m[..., n : 2 * n] + bias[n : 2 * n])
        z = alpha[2] * m[..., 2 * n :] + bias[2 * n :]
        if mixing == "mhc":
            mix = _sinkhorn(z.reshape(*lead, n, n), c.sinkhorn_iters)
        else:
            a = jax.nn.softmax(z, axis=-1)
            mix = jnp.einsum("...q,qjk->...jk", a, _permutations(n))
        return pre, post, mix

    def collapse(self) -> str:
        auto = {"hc": "sum", "mhc": "head", "mhc-lite": "norm-then-sum"}
        return auto[self.cfg.mixing] if self.cfg.collapse == "auto" else self.cfg.collapse

    def __call__(self, tokens, separator=None):
        c, p = self.cfg, self.params
        b, t = tokens.shape
        n = c.streams
        doc = document_starts(tokens, separator)
        e = p["wte"][tokens] + p["wpe"][:t][None]
        x = jnp.broadcast_to(e[:, :, None, :], (b, t, n, c.d_model))
        for l in range(c.n_layers):
            blk = f"blocks.{l}"
            for site in ("attn", "ff"):
                pre, post, mix = self._gates(f"{blk}.{site}", x, c.mixing)
                u = jnp.einsum("btj,btjd->btd", pre, x)
                if site == "attn":
                    h = norm(u, p[f"{blk}.ln1"], c.norm, c.norm_eps)
                    y = attention(h @ p[f"{blk}.w_qkv"].T, c.n_heads, c.head_dim, _qkv_scale(c.head_dim, l, False), doc_start=doc)
                    f = y @ p[f"{blk}.w_o"].T
                else:
                    f = _dense_ff(p, blk, norm(u, p[f"{blk}.ln2"], c.norm, c.norm_eps))
                x = jnp.einsum("btjk,btjd->btkd", mix, x) + post[..., None] * f[:, :, None, :]
        collapse = self.collapse()
        if collapse == "norm-then-sum":
            h = jnp.sum(norm(x, p["lnf"], c.norm, c.norm_eps), axis=2)
        elif collapse == "head":
            q, _, _ = self._gates("head", x, "head")
            h = norm(jnp.einsum("btj,btjd->btd", q, x), p["lnf"], c.norm, c.norm_eps)
        else:
            h = norm(jnp.sum(x, axis=2), p["lnf"], c.norm, c.norm_eps)
        return h @ p["w_u"].T


ARCHS = {
    "transformer": VectorModel,
    "memoryformer": VectorModel,
    "rmt": MatrixModel,
    "hybrid": MatrixModel,
    "hc": HyperConnections,
}


def from_run(run) -> Model:
    """The model of a `run.Run` (or any object with `.model` and `.params`)."""
    cfg = Config(run.model)
    params = {k: jnp.asarray(v, dtype=jnp.float32) for k, v in run.params.items()}
    return ARCHS[cfg.arch](params=params, cfg=cfg)


def to_tensors(model: Model) -> dict:
    """The model's parameters as numpy arrays under resmem's names, for `run.write_tensors`."""
    import numpy as np

    return {k: np.asarray(v, dtype=np.float32) for k, v in model.params.items()}
