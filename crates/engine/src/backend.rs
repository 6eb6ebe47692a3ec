//! The op-level interface that every model is written against, once, for both backends.
//!
//! Every op is declared once, in [`declare_ops!`] below: its doc, its name, its arguments in
//! their one order, the `ops/` file that implements it and what its cost is computed from. From
//! that list [`op_methods!`] writes the trait's methods here and the op methods of `CpuBackend`
//! (`cpu/mod.rs`), `GpuBackend` (`gpu/mod.rs`), `Profiled` (`profile.rs`) and
//! `CountingBackend` (`counting.rs`); the first three call the op's own file:
//! `ops::<file>::cpu::<op>`, `ops::<file>::gpu::<op>` and `ops::<file>::cost::<op>`; the counting
//! backend's ops do nothing.
//!
//! Argument order everywhere (the declaration, the op file, the WGSL bindings): outputs, then
//! what a forward saves for its backward (the norm's stats, attention's lse), inputs, weights,
//! then a dims struct. A backward takes the gradients it writes, then the gradients of outputs
//! (`d` prefix), then what its forward read and saved. An op that reads Norm(X) through the norm
//! takes it as (x, stats, gain) where the plain op takes x. No op may read and write the same
//! buffer: wgpu forbids it, and the CPU backend panics on it.

use crate::Result;
use std::future::Future;

/// Every op of [`Backend`], declared once. Each entry is
///
/// ```text
/// /// doc
/// file::op(arg: Kind, …) cost(what the cost is computed from);
/// ```
///
/// where `file` is the op's file in `ops/`, and a `Kind` is `Tensor`, `Index`,
/// `Option<Tensor>`, `f32`, `bool` or a dims struct exported from the crate's root. `cost(…)`
/// lists the arguments `ops::<file>::cost::<op>` takes, in order: an argument by name, or
/// `len(t)`, the number of values of tensor `t`. `declare_ops!(signatures)` writes the trait's
/// methods; `declare_ops!(cpu)`, `(gpu)`, `(profiled)` and `(counting)` the methods of those
/// impls.
macro_rules! declare_ops {
    ($target:ident) => {
        $crate::backend::op_methods! { $target;

        // ---- elementwise (ops/elementwise.rs) ----
        /// out = value
        elementwise::fill(out: Tensor, value: f32) cost(len(out));
        /// out = a + b
        elementwise::add(out: Tensor, a: Tensor, b: Tensor) cost(len(out));
        /// out += a
        elementwise::add_assign(out: Tensor, a: Tensor) cost(len(out));
        /// out[r, c] = value[r, c] where rows[r] and cols[c] are both nonzero, else out[r, c] as
        /// it was, bit for bit: an intervention's edit (out is (len(rows), len(cols))).
        elementwise::replace(out: Tensor, rows: Tensor, cols: Tensor, value: Tensor) cost(len(out));
        /// out = GELU_tanh(x)
        elementwise::gelu_forward(out: Tensor, x: Tensor) cost(len(out));
        /// dx = dout · GELU'(x)
        elementwise::gelu_backward(dx: Tensor, dout: Tensor, x: Tensor) cost(len(dx));

        // ---- matmul (ops/matmul.rs) ----
        /// out[b] (M×N) = op(a[b]) (M×K) · op(b[b]) (K×N), optionally added to out.
        matmul::matmul(out: Tensor, a: Tensor, b: Tensor, dims: MatmulDims) cost(dims);

        // ---- embedding (ops/embedding.rs) ----
        /// out (BT, C) = wte[tokens] + wpe[position]
        embedding::embedding_forward(out: Tensor, tokens: Index, wte: Tensor, wpe: Tensor, dims: EmbeddingDims)
            cost(dims);
        /// dwte (V, C) and dwpe (T, C) from dout (BT, C); a deterministic per-token reduction that
        /// walks the rows of each token in the fixed order of `buckets`.
        embedding::embedding_backward(
            dwte: Tensor, dwpe: Tensor, dout: Tensor, bucket_rows: Index, bucket_start: Index, dims: EmbeddingDims,
        ) cost(dims);

        // ---- gather (ops/gather.rs) ----
        /// out (rows, C) = table[index]: row r of out is row index[r] of table (V, C).
        gather::gather_forward(out: Tensor, index: Index, table: Tensor, dims: GatherDims) cost(dims);
        /// dtable (V, C) from dout (rows, C): each table row sums the rows that gathered it, in the
        /// fixed order of `bucket_rows` and `bucket_start` (`TokenBuckets::new(index, V)`); rows
        /// nobody gathered get 0.
        gather::gather_backward(dtable: Tensor, dout: Tensor, bucket_rows: Index, bucket_start: Index, dims: GatherDims)
            cost(dims);

        // ---- norms (ops/norm.rs) ----
        /// out (rows, C) = Norm(x) · gain; stats (rows, 2) = (mean, rstd)
        norm::norm_forward(out: Tensor, stats: Tensor, x: Tensor, gain: Tensor, dims: NormDims) cost(dims);
        /// dx += ∂L/∂x, dgain = ∂L/∂gain
        norm::norm_backward(
            dx: Tensor, dgain: Tensor, dout: Tensor, x: Tensor, gain: Tensor, stats: Tensor, dims: NormDims,
        ) cost(dims);

        // ---- attention (ops/attention.rs) ----
        /// out (B, T, H·Dh) and lse (B, H, T), each row's log-sum-exp of its logits, from qkv
        /// (B, T, 3·H·Dh), causal within documents: query i of a sequence sees keys j with
        /// doc_start[i] ≤ j ≤ i, where doc_start (B·T) holds the position of the first token of each
        /// token's document (all 0: plain causal). No (T, T) buffer: the backward recomputes the
        /// probabilities from qkv and lse.
        attention::attention_forward(out: Tensor, lse: Tensor, qkv: Tensor, doc_start: Index, dims: AttentionDims)
            cost(dims);
        /// dqkv (B, T, 3·H·Dh) from dout, the forward's out and lse; delta (B, H, T) is scratch for
        /// dout·out per row.
        attention::attention_backward(
            dqkv: Tensor, delta: Tensor, dout: Tensor, out: Tensor, qkv: Tensor, lse: Tensor, doc_start: Index,
            dims: AttentionDims,
        ) cost(dims);

        // ---- residual matrices of the RMT (ops/residual_matrix/) ----
        /// out = base + Σ_h keys[h] ⊗ data[h] per token, or out += Σ … when `base` is None.
        residual_matrix::store(out: Tensor, base: Option<Tensor>, keys: Tensor, data: Tensor, dims: ResidualDims)
            cost(dims);
        /// y (tokens, R', D_v) = keys (R', D_k) · Norm(X) per token, X (tokens, D_k, D_v) normalised
        /// as it is read (Norm(X) is never written); stats (tokens, 2) = each token's (mean, rstd),
        /// as `norm_forward` computes them, for the backward. `gain` is (D_k·D_v).
        residual_matrix::retrieve_normed(
            y: Tensor, stats: Tensor, x: Tensor, gain: Tensor, keys: Tensor, dims: ResidualDims, norm: NormDims,
        ) cost(dims, norm);
        /// The backward of `store`: ddata = keys · dout per token, dkeys (R', D_k) = Σ_t data[t] ·
        /// dout[t]ᵀ; the base's gradient is dout itself. `partials` is scratch of
        /// `dims.key_grad_scratch()` values for the key gradient's fixed-order sum.
        residual_matrix::store_backward(
            ddata: Tensor, dkeys: Tensor, partials: Tensor, dout: Tensor, keys: Tensor, data: Tensor, dims: ResidualDims,
        ) cost(dims);
        /// The backward of `retrieve_normed`: dx += ∂L/∂X, dgain = ∂L/∂gain, dkeys = ∂L/∂keys from
        /// dy. `dnorm` (a matrix a token) and `partials` are scratch; what they hold after is
        /// unspecified.
        residual_matrix::retrieve_normed_backward(
            dx: Tensor, dgain: Tensor, dkeys: Tensor, dnorm: Tensor, partials: Tensor, dy: Tensor, x: Tensor,
            stats: Tensor, gain: Tensor, keys: Tensor, dims: ResidualDims, norm: NormDims,
        ) cost(dims, norm);

        // ---- hyper-connections (ops/hyper.rs) ----
        /// pre, post (tokens, n) and mix (tokens, n, n), P[j,k] from stream j to k, from one site's
        /// logits (tokens, 2n + n² or n!), its three scales alpha and its bias (SPEC §6.4, §6.5).
        hyper::hyper_gates(pre: Tensor, post: Tensor, mix: Tensor, logits: Tensor, alpha: Tensor, bias: Tensor, dims: HyperDims)
            cost(dims);
        /// dm = ∂L/∂logits, dz (tokens, width) = ∂L/∂(α·logits + bias) and dalpha (tokens, 3) each
        /// token's share of ∂L/∂alpha, from dpre, dpost and dmix; Sinkhorn unrolled and recomputed.
        hyper::hyper_gates_backward(
            dm: Tensor, dz: Tensor, dalpha: Tensor, dpre: Tensor, dpost: Tensor, dmix: Tensor, logits: Tensor,
            alpha: Tensor, bias: Tensor, dims: HyperDims,
        ) cost(dims);

        // ---- attention over depth, Attention Residuals' read (ops/depth.rs) ----
        /// h (tokens, D) = Σ_i α_i v_i over each token's first `sources` rows v_i of x (tokens,
        /// rows, D), α = softmax_i((w ⊙ γ)·v_i / RMS(v_i)), query (2, D) = (w, γ); alpha (tokens,
        /// sources) saved.
        depth::depth_read(h: Tensor, alpha: Tensor, x: Tensor, query: Tensor, dims: DepthDims) cost(dims);
        /// dx += ∂L/∂x over the sources; dquery (2, D) written, summed over the tokens in order.
        /// `scratch` (`dims.scratch()` values) holds each token's dz_i·rstd_i after.
        depth::depth_read_backward(
            dx: Tensor, dquery: Tensor, scratch: Tensor, dh: Tensor, x: Tensor, alpha: Tensor, query: Tensor,
            dims: DepthDims,
        ) cost(dims);

        // ---- MemoryFormer's memory layer (ops/memory.rs) ----
        /// codes, p (tokens, K): each chunk's bucket and weight p(z).
        memory::memory_hash(codes: Index, p: Tensor, x: Tensor, dims: MemoryDims) cost(dims);
        /// rows (K, tokens) and starts (K, 2^τ + 1): per table, the rows grouped by code in row order.
        /// `cursor` is scratch of at least `dims.sort_scratch()` values.
        memory::memory_bucket(rows: Index, starts: Index, cursor: Index, codes: Index, dims: MemoryDims) cost(dims);
        /// y (tokens, d_out) = Σ_k p_k · tables[k][code_k] + bias
        memory::memory_forward(y: Tensor, codes: Index, p: Tensor, tables: Tensor, bias: Tensor, dims: MemoryDims)
            cost(dims);
        /// parts (tokens, K, d_out) = p_k · tables[k][code_k]: each table's share of y, for an
        /// intervention on one table.
        memory::memory_parts(parts: Tensor, codes: Index, p: Tensor, tables: Tensor, dims: MemoryDims) cost(dims);
        /// y (tokens, d_out) = Σ_k parts[k] + bias, in `memory_forward`'s order: the same bits
        /// from unedited parts.
        memory::memory_sum(y: Tensor, parts: Tensor, bias: Tensor, dims: MemoryDims) cost(dims);
        /// dx (tokens, d_in), dtables (written, 0 where no row hit), dbias, from dy (tokens, d_out).
        memory::memory_backward(
            dx: Tensor, dtables: Tensor, dbias: Tensor, dy: Tensor, x: Tensor, codes: Index, p: Tensor, rows: Index,
            starts: Index, tables: Tensor, dims: MemoryDims,
        ) cost(dims);

        // ---- loss (ops/cross_entropy.rs) ----
        /// losses (rows) = scale · CE per row (0 where the target is ignored); lse (rows) = log Z.
        cross_entropy::cross_entropy_forward(
            losses: Tensor, lse: Tensor, logits: Tensor, targets: Index, scale: Tensor, dims: CrossEntropyDims,
        ) cost(dims);
        /// dlogits of scale · Σ (CE + z · lse²) over the rows whose target is not ignored.
        cross_entropy::cross_entropy_backward(
            dlogits: Tensor, logits: Tensor, lse: Tensor, targets: Index, scale: Tensor, dims: CrossEntropyDims,
        ) cost(dims);

        // ---- reductions and the optimiser (ops/optim.rs) ----
        /// out[0] = Σ x, or Σ x² with `squares`; a fixed-order, deterministic reduction.
        optim::sum(out: Tensor, x: Tensor, squares: bool) cost(len(x), squares);
        /// One AdamW step over flat parameters, clipping by the global norm √grad_sumsq[0].
        optim::adamw(
            params: Tensor, m: Tensor, v: Tensor, grads: Tensor, hyper: Tensor, grad_sumsq: Tensor, dims: AdamWDims,
        ) cost(dims);

        }
    };
}
pub(crate) use declare_ops;

/// Writes one method per op of [`declare_ops!`] for `$target`: `signatures` (the trait), `cpu`,
/// `gpu` (each calls `ops::<file>::<target>::<op>(self, args…)`), `profiled` (books
/// `ops::<file>::cost::<op>(…)`, then calls the same op of `self.inner`) or `counting` (nothing).
macro_rules! op_methods {
    ($target:ident; $(
        $(#[$attr:meta])*
        $file:ident::$op:ident($($arg:ident: $kind:tt $(<$inner:tt>)?),* $(,)?) cost($($cost:tt)*);
    )*) => {
        $($crate::backend::op_methods! {
            @$target $(#[$attr])* $file::$op($($arg: $kind $(<$inner>)?),*) cost($($cost)*)
        })*
    };
    (@signatures $(#[$attr:meta])* $file:ident::$op:ident($($arg:ident: $kind:tt $(<$inner:tt>)?),*)
        cost($($cost:tt)*)) => {
        $(#[$attr])*
        #[allow(clippy::too_many_arguments)]
        fn $op(&self, $($arg: $crate::backend::op_arg!($kind $(<$inner>)?)),*);
    };
    (@cpu $(#[$attr:meta])* $file:ident::$op:ident($($arg:ident: $kind:tt $(<$inner:tt>)?),*)
        cost($($cost:tt)*)) => {
        fn $op(&self, $($arg: $crate::backend::op_arg!($kind $(<$inner>)?)),*) {
            $crate::ops::$file::cpu::$op(self, $($arg),*)
        }
    };
    (@gpu $(#[$attr:meta])* $file:ident::$op:ident($($arg:ident: $kind:tt $(<$inner:tt>)?),*)
        cost($($cost:tt)*)) => {
        fn $op(&self, $($arg: $crate::backend::op_arg!($kind $(<$inner>)?)),*) {
            $crate::ops::$file::gpu::$op(self, $($arg),*)
        }
    };
    (@counting $(#[$attr:meta])* $file:ident::$op:ident($($arg:ident: $kind:tt $(<$inner:tt>)?),*)
        cost($($cost:tt)*)) => {
        fn $op(&self, $($arg: $crate::backend::op_arg!($kind $(<$inner>)?)),*) {
            let _ = ($($arg),*);
        }
    };
    (@profiled $(#[$attr:meta])* $file:ident::$op:ident($($arg:ident: $kind:tt $(<$inner:tt>)?),*)
        cost($($cost:tt)*)) => {
        fn $op(&self, $($arg: $crate::backend::op_arg!($kind $(<$inner>)?)),*) {
            let cost = $crate::backend::op_cost!(self.inner; $file::$op; []; $($cost)*);
            self.op(cost, || self.inner.$op($($arg),*))
        }
    };
}
pub(crate) use op_methods;

/// The type of an argument of kind `$kind` in a `Backend` method.
macro_rules! op_arg {
    (Tensor) => { &Self::Tensor };
    (Index) => { &Self::Index };
    (Option<Tensor>) => { Option<&Self::Tensor> };
    (f32) => { f32 };
    (bool) => { bool };
    ($dims:ident) => { $crate::$dims };
}
pub(crate) use op_arg;

/// `ops::<file>::cost::<op>(…)` with the arguments a declaration's `cost(…)` lists: `len(t)`
/// becomes `$be.len(t)`, a name stays itself. For the profiler alone, which the browser build
/// leaves out.
#[cfg(not(target_arch = "wasm32"))]
macro_rules! op_cost {
    ($be:expr; $file:ident::$op:ident; [$($done:expr),*];) => {
        $crate::ops::$file::cost::$op($($done),*)
    };
    ($be:expr; $file:ident::$op:ident; [$($done:expr),*]; len($t:ident) $(, $($rest:tt)*)?) => {
        $crate::backend::op_cost!($be; $file::$op; [$($done,)* $be.len($t)]; $($($rest)*)?)
    };
    ($be:expr; $file:ident::$op:ident; [$($done:expr),*]; $x:ident $(, $($rest:tt)*)?) => {
        $crate::backend::op_cost!($be; $file::$op; [$($done,)* $x]; $($($rest)*)?)
    };
}
#[cfg(not(target_arch = "wasm32"))]
pub(crate) use op_cost;

pub trait Backend {
    /// A view of f32 storage (f64 on the CPU backend in gradient checks).
    type Tensor: Clone;
    /// A view of u32 storage: tokens, targets, bucket indices.
    type Index: Clone;
    /// A recorded step: the same launches over the same buffers, replayed every step.
    type Plan;

    /// A short human-readable description: "cpu (f32, 2 threads, AVX-512 build)" or the
    /// adapter's name.
    fn describe(&self) -> String;

    /// A zero-filled tensor of `len` values. Fails with a clear message when it does not fit.
    fn zeros(&self, what: &str, len: usize) -> Result<Self::Tensor>;
    /// `len` values of `t` from `offset`, a multiple of [`crate::VIEW_ALIGN`] values.
    fn view(&self, t: &Self::Tensor, offset: usize, len: usize) -> Self::Tensor;
    fn len(&self, t: &Self::Tensor) -> usize;
    /// Whether tensors hold values: false for [`crate::counting::CountingBackend`], which only
    /// adds up allocations, so that a constructor measured on it skips computing what it would
    /// write (the initial parameters), whose host memory grows with the model.
    fn holds_values(&self) -> bool {
        true
    }
    /// Why the device was lost, where it was and said so; None for a backend that cannot be.
    fn lost(&self) -> Option<String> {
        None
    }
    /// Runs `f` with every tunable op at its default configuration, measuring nothing: for
    /// launches at sizes chosen by time, whose tuned choices would tie the cache to the load.
    fn with_default_kernels<R>(&self, f: impl FnOnce() -> R) -> R {
        f()
    }
    /// Overwrites `t` with `data` (same length). Ordered after all earlier ops.
    fn write(&self, t: &Self::Tensor, data: &[f32]);
    fn index(&self, what: &str, len: usize) -> Result<Self::Index>;
    fn write_index(&self, t: &Self::Index, data: &[u32]);
    /// Reads `t` back. On the GPU this waits for earlier work; in the browser it never blocks.
    fn read(&self, t: &Self::Tensor) -> impl Future<Output = Result<Vec<f32>>>;
    /// Reads `len` values of `t` from `offset`, where `offset` need not be aligned: the view
    /// starts at the multiple of [`crate::VIEW_ALIGN`] at or before it, and the values
    /// before `offset` are dropped once read. For one row of a large tensor (a token's logits).
    fn read_range(&self, t: &Self::Tensor, offset: usize, len: usize) -> impl Future<Output = Result<Vec<f32>>> {
        let start = offset / crate::VIEW_ALIGN * crate::VIEW_ALIGN;
        let view = self.view(t, start, offset - start + len);
        async move {
            let mut values = self.read(&view).await?;
            Ok(values.split_off(offset - start))
        }
    }
    /// Reads an index back, like `read`.
    fn read_index(&self, t: &Self::Index) -> impl Future<Output = Result<Vec<u32>>>;
    /// Reads several indices back in one round trip to the device.
    fn read_indices(&self, ts: &[&Self::Index]) -> impl Future<Output = Result<Vec<Vec<u32>>>>;
    /// Submits the work recorded so far and reports any error the device raised.
    fn flush(&self) -> Result<()>;
    /// Runs `record` once and keeps its launches in `plan`; later calls replay the plan without
    /// calling `record`. The CPU backend has nothing to replay and calls `record` every time.
    fn record_or_replay(&self, plan: &mut Option<Self::Plan>, record: impl FnOnce());
    /// The numeric class of the matrix products (`precision.rs`): what the backend runs, which
    /// may be strict where fast was asked for and the device has no cooperative matrices.
    fn precision(&self) -> crate::Precision {
        crate::Precision::Strict
    }
    /// In the fast class, once a product has met a NaN or an infinity in an operand: that
    /// product, by its shape. None in the strict class, and until then.
    fn fast_fault(&self) -> impl Future<Output = Result<Option<String>>> {
        std::future::ready(Ok(None))
    }

    declare_ops!(signatures);
}
