//! The op-level interface that every model is written against, once, for both backends.
//!
//! Argument order everywhere (CPU twin, WGSL bindings, this trait): outputs, saved statistics,
//! inputs, weights, then a dims struct. Backward ops take gradients of outputs first (`d` prefix).
//! No op may read and write the same buffer: wgpu forbids it, and the CPU backend panics on it.

use crate::{
    AdamWDims, AttentionDims, CrossEntropyDims, EmbeddingDims, GatherDims, MatmulDims, MemoryDims, NormDims,
    ResidualDims, Result,
};
use std::future::Future;

pub trait Backend {
    /// A view of f32 storage (f64 on the CPU backend in gradient checks).
    type Tensor: Clone;
    /// A view of u32 storage: tokens, targets, bucket indices.
    type Index: Clone;
    /// A recorded step: the same launches over the same buffers, replayed every step.
    type Plan;

    /// A short human-readable description: "cpu (f32, 2 threads)" or the adapter's name.
    fn describe(&self) -> String;

    /// A zero-filled tensor of `len` values. Fails with a clear message when it does not fit.
    fn zeros(&self, what: &str, len: usize) -> Result<Self::Tensor>;
    /// `len` values of `t` from `offset`. On the GPU, `offset` must be a multiple of 64 values.
    fn view(&self, t: &Self::Tensor, offset: usize, len: usize) -> Self::Tensor;
    fn len(&self, t: &Self::Tensor) -> usize;
    /// Overwrites `t` with `data` (same length). Ordered after all earlier ops.
    fn write(&self, t: &Self::Tensor, data: &[f32]);
    fn index(&self, what: &str, len: usize) -> Result<Self::Index>;
    fn write_index(&self, t: &Self::Index, data: &[u32]);
    /// Reads `t` back. On the GPU this waits for earlier work; in the browser it never blocks.
    fn read(&self, t: &Self::Tensor) -> impl Future<Output = Result<Vec<f32>>>;
    /// Reads an index back, like `read`.
    fn read_index(&self, t: &Self::Index) -> impl Future<Output = Result<Vec<u32>>>;
    /// Reads several indices back in one round trip to the device.
    fn read_indices(&self, ts: &[&Self::Index]) -> impl Future<Output = Result<Vec<Vec<u32>>>>;
    /// Submits the work recorded so far and reports any error the device raised.
    fn flush(&self) -> Result<()>;
    /// Runs `record` once and keeps its launches in `plan`; later calls replay the plan without
    /// calling `record`. The CPU backend has nothing to replay and calls `record` every time.
    fn record_or_replay(&self, plan: &mut Option<Self::Plan>, record: impl FnOnce());

    // ---- elementwise (ops/elementwise.rs) ----
    fn fill(&self, out: &Self::Tensor, value: f32);
    /// out = a + b
    fn add(&self, out: &Self::Tensor, a: &Self::Tensor, b: &Self::Tensor);
    /// out += a
    fn add_assign(&self, out: &Self::Tensor, a: &Self::Tensor);
    /// out = GELU_tanh(x)
    fn gelu_forward(&self, out: &Self::Tensor, x: &Self::Tensor);
    /// dx = dout · GELU'(x)
    fn gelu_backward(&self, dx: &Self::Tensor, dout: &Self::Tensor, x: &Self::Tensor);

    // ---- matmul (ops/matmul.rs) ----
    /// out[b] (M×N) = op(a[b]) (M×K) · op(b[b]) (K×N), optionally added to out.
    fn matmul(&self, out: &Self::Tensor, a: &Self::Tensor, b: &Self::Tensor, dims: MatmulDims);

    // ---- embedding (ops/embedding.rs) ----
    /// out (BT, C) = wte[tokens] + wpe[position]
    fn embedding_forward(
        &self,
        out: &Self::Tensor,
        tokens: &Self::Index,
        wte: &Self::Tensor,
        wpe: &Self::Tensor,
        dims: EmbeddingDims,
    );
    /// dwte (V, C) and dwpe (T, C) from dout (BT, C); a deterministic per-token reduction that
    /// walks the rows of each token in the fixed order of `buckets`.
    fn embedding_backward(
        &self,
        dwte: &Self::Tensor,
        dwpe: &Self::Tensor,
        dout: &Self::Tensor,
        bucket_rows: &Self::Index,
        bucket_start: &Self::Index,
        dims: EmbeddingDims,
    );

    // ---- gather (ops/gather.rs) ----
    /// out (rows, C) = table[index]: row r of out is row index[r] of table (V, C).
    fn gather_forward(&self, out: &Self::Tensor, index: &Self::Index, table: &Self::Tensor, dims: GatherDims);
    /// dtable (V, C) from dout (rows, C): each table row sums the rows that gathered it, in the
    /// fixed order of `bucket_rows` and `bucket_start` (`TokenBuckets::new(index, V)`); rows
    /// nobody gathered get 0.
    fn gather_backward(
        &self,
        dtable: &Self::Tensor,
        dout: &Self::Tensor,
        bucket_rows: &Self::Index,
        bucket_start: &Self::Index,
        dims: GatherDims,
    );

    // ---- norms (ops/norm.rs) ----
    /// out (rows, C) = Norm(x) · gain; stats (rows, 2) = (mean, rstd)
    fn norm_forward(
        &self,
        out: &Self::Tensor,
        stats: &Self::Tensor,
        x: &Self::Tensor,
        gain: &Self::Tensor,
        dims: NormDims,
    );
    /// stats (rows, 2) = (mean, rstd) alone, for ops that normalise as they read.
    fn norm_stats(&self, stats: &Self::Tensor, x: &Self::Tensor, dims: NormDims);
    /// dx += ∂L/∂x, dgain = ∂L/∂gain
    fn norm_backward(
        &self,
        dx: &Self::Tensor,
        dgain: &Self::Tensor,
        dout: &Self::Tensor,
        x: &Self::Tensor,
        gain: &Self::Tensor,
        stats: &Self::Tensor,
        dims: NormDims,
    );

    // ---- attention (ops/attention.rs) ----
    /// out (B, T, H·Dh) and lse (B, H, T), each row's log-sum-exp of its logits, from qkv
    /// (B, T, 3·H·Dh), causal within documents: query i of a sequence sees keys j with
    /// doc_start[i] ≤ j ≤ i, where doc_start (B·T) holds the position of the first token of each
    /// token's document (all 0: plain causal). No (T, T) buffer: the backward recomputes the
    /// probabilities from qkv and lse.
    fn attention_forward(
        &self,
        out: &Self::Tensor,
        lse: &Self::Tensor,
        qkv: &Self::Tensor,
        doc_start: &Self::Index,
        dims: AttentionDims,
    );
    /// dqkv (B, T, 3·H·Dh) from dout, the forward's out and lse; delta (B, H, T) is scratch for
    /// dout·out per row.
    #[allow(clippy::too_many_arguments)]
    fn attention_backward(
        &self,
        dqkv: &Self::Tensor,
        delta: &Self::Tensor,
        dout: &Self::Tensor,
        out: &Self::Tensor,
        qkv: &Self::Tensor,
        lse: &Self::Tensor,
        doc_start: &Self::Index,
        dims: AttentionDims,
    );

    // ---- residual matrices of the RMT (ops/residual_matrix.rs) ----
    /// y (tokens, R', D_v) = keys (R', D_k) · X (tokens, D_k, D_v), per token.
    fn retrieve(&self, y: &Self::Tensor, x: &Self::Tensor, keys: &Self::Tensor, dims: ResidualDims);
    /// `retrieve` from Norm(X) = (X − mean)·rstd·gain, normalised as it reads: Norm(X) is never
    /// written. `stats` (tokens, 2) come from `norm_stats`; `gain` is (D_k·D_v).
    fn retrieve_normed(
        &self,
        y: &Self::Tensor,
        x: &Self::Tensor,
        stats: &Self::Tensor,
        gain: &Self::Tensor,
        keys: &Self::Tensor,
        dims: ResidualDims,
    );
    /// out = base + Σ_h keys[h] ⊗ data[h] per token, or out += Σ … when `base` is None.
    fn store(
        &self,
        out: &Self::Tensor,
        base: Option<&Self::Tensor>,
        keys: &Self::Tensor,
        data: &Self::Tensor,
        dims: ResidualDims,
    );
    /// dkeys (R', D_k) = Σ_t a[t] (R', D_v) · b[t]ᵀ (D_v, D_k): the key gradient of a retrieval
    /// (a = dy, b = X) and of a storage (a = data, b = dX_out). `partials` is scratch of
    /// `dims.key_grad_scratch()` values for the fixed-order reduction.
    fn key_grad(
        &self,
        dkeys: &Self::Tensor,
        partials: &Self::Tensor,
        a: &Self::Tensor,
        b: &Self::Tensor,
        dims: ResidualDims,
    );
    /// `key_grad` with b = Norm(X), normalised as it reads, like `retrieve_normed`.
    #[allow(clippy::too_many_arguments)]
    fn key_grad_normed(
        &self,
        dkeys: &Self::Tensor,
        partials: &Self::Tensor,
        a: &Self::Tensor,
        x: &Self::Tensor,
        stats: &Self::Tensor,
        gain: &Self::Tensor,
        dims: ResidualDims,
    );

    // ---- MemoryFormer's memory layer (ops/memory.rs) ----
    /// codes, p (tokens, K): each chunk's bucket and weight p(z).
    fn memory_hash(&self, codes: &Self::Index, p: &Self::Tensor, x: &Self::Tensor, dims: MemoryDims);
    /// rows (K, tokens) and starts (K, 2^τ + 1): per table, the rows grouped by code in row order.
    /// `cursor` is scratch of at least `dims.sort_scratch()` values.
    fn memory_bucket(
        &self,
        rows: &Self::Index,
        starts: &Self::Index,
        cursor: &Self::Index,
        codes: &Self::Index,
        dims: MemoryDims,
    );
    /// y (tokens, d_out) = Σ_k p_k · tables[k][code_k] + bias
    fn memory_forward(
        &self,
        y: &Self::Tensor,
        codes: &Self::Index,
        p: &Self::Tensor,
        tables: &Self::Tensor,
        bias: &Self::Tensor,
        dims: MemoryDims,
    );
    /// dx (tokens, d_in), dtables (written, 0 where no row hit), dbias, from dy (tokens, d_out).
    #[allow(clippy::too_many_arguments)]
    fn memory_backward(
        &self,
        dx: &Self::Tensor,
        dtables: &Self::Tensor,
        dbias: &Self::Tensor,
        dy: &Self::Tensor,
        x: &Self::Tensor,
        codes: &Self::Index,
        p: &Self::Tensor,
        rows: &Self::Index,
        starts: &Self::Index,
        tables: &Self::Tensor,
        dims: MemoryDims,
    );

    // ---- loss (ops/cross_entropy.rs) ----
    /// losses (rows) = scale · CE per row (0 where the target is ignored); lse (rows) = log Z.
    fn cross_entropy_forward(
        &self,
        losses: &Self::Tensor,
        lse: &Self::Tensor,
        logits: &Self::Tensor,
        targets: &Self::Index,
        scale: &Self::Tensor,
        dims: CrossEntropyDims,
    );
    /// dlogits of scale · Σ (CE + z · lse²) over the rows whose target is not ignored.
    fn cross_entropy_backward(
        &self,
        dlogits: &Self::Tensor,
        logits: &Self::Tensor,
        lse: &Self::Tensor,
        targets: &Self::Index,
        scale: &Self::Tensor,
        dims: CrossEntropyDims,
    );

    // ---- reductions and the optimiser (ops/optim.rs) ----
    /// out[0] = Σ x, or Σ x² with `squares`; a fixed-order, deterministic reduction.
    fn sum(&self, out: &Self::Tensor, x: &Self::Tensor, squares: bool);
    /// One AdamW step over flat parameters, clipping by the global norm √grad_sumsq[0].
    fn adamw(
        &self,
        params: &Self::Tensor,
        m: &Self::Tensor,
        v: &Self::Tensor,
        grads: &Self::Tensor,
        hyper: &Self::Tensor,
        grad_sumsq: &Self::Tensor,
        dims: AdamWDims,
    );
}
