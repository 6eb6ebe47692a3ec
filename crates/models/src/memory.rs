//! How much memory a model will allocate, computed before anything is allocated and with checked
//! arithmetic only: a config whose sizes overflow is an error here, never a wrapped product later.
//!
//! Every buffer a constructor allocates is listed here in the same terms, so the estimate is the
//! exact byte count of the backend's allocations (tested against the CPU backend's counter). On
//! the GPU a zero-length buffer still takes 4 bytes; host-side vectors (init values, position
//! buckets) are temporary and not counted.

use crate::{
    Hashing, HybridConfig, MemoryFormerConfig, ModelConfig, ModelError, Position, Result, RmtConfig, TransformerConfig,
    Trunk,
};
use engine::gpu::VIEW_ALIGN;
use engine::ops::memory::sort_tiles;
use engine::ops::residual_matrix::KEY_GRAD_CHUNK;
use engine::Hyper;
use serde::Serialize;

/// Bytes of one value: tensors are f32 and indices u32 on every backend the CLI and page use.
pub const VALUE_BYTES: u64 = 4;

/// What the model is built for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Purpose {
    /// `new`: gradients, backward scratch, variance probes and AdamW's moments.
    Train,
    /// `inference`: parameters and forward activations only.
    Infer,
}

/// The bytes a model built for `Purpose` allocates, by kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct MemoryEstimate {
    /// Parameters, padding excluded.
    pub params: u64,
    /// The flat parameter buffer, padding included.
    pub param_bytes: u64,
    /// The flat gradient buffer; 0 for inference.
    pub grad_bytes: u64,
    /// Forward activations, the loss head, hash codes and buckets, position indices.
    pub activation_bytes: u64,
    /// Backward scratch and variance probes; 0 for inference.
    pub backward_bytes: u64,
    /// AdamW's two moments and its step values; 0 for inference.
    pub optimizer_bytes: u64,
    /// One batch on the device (`BatchTensors`).
    pub batch_bytes: u64,
    /// All of the above: the model, its batch buffers and, for training, AdamW.
    pub bytes: u64,
    /// The largest single buffer, which must fit one buffer on a GPU.
    pub largest_buffer_bytes: u64,
    /// What that buffer holds, with the settings it grows with.
    pub largest_buffer: &'static str,
    /// The largest buffer or parameter view some op binds whole, which must fit one storage
    /// binding on a GPU. The flat parameters, gradients and moments, the vocabulary-sized
    /// tables and the logits are not among them: their ops bind them in windows.
    pub largest_binding_bytes: u64,
    /// What that buffer holds, with the settings it grows with.
    pub largest_binding: &'static str,
}

/// A config's parameters, in values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ParamSizes {
    /// Real parameters, as `ParamLayout::count`.
    pub count: u64,
    /// The flat buffer with every view padded to 64 values, as `ParamLayout::total`.
    pub total: u64,
    /// The largest view some op binds whole.
    bound: Largest,
}

fn overflow(what: &str, dims: &[u64]) -> ModelError {
    let dims: Vec<String> = dims.iter().map(u64::to_string).collect();
    ModelError::Config(format!(
        "the size of {what} ({}) overflows 64-bit arithmetic; make that setting smaller",
        dims.join(" × ")
    ))
}

/// dims[0]·dims[1]·…, or an error naming `what`.
fn product(what: &str, dims: &[u64]) -> Result<u64> {
    dims.iter()
        .try_fold(1u64, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| overflow(what, dims))
}

fn sum(what: &str, parts: &[u64]) -> Result<u64> {
    parts
        .iter()
        .try_fold(0u64, |acc, &p| acc.checked_add(p))
        .ok_or_else(|| ModelError::Config(format!("the total size of {what} overflows 64-bit arithmetic")))
}

/// A running total of buffer sizes in values, the largest single buffer, and the largest one
/// some op binds whole.
#[derive(Default)]
struct Tally {
    values: u64,
    largest: Largest,
    bound: Largest,
}

/// The largest single buffer, in values, and what it holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Largest {
    values: u64,
    what: &'static str,
}

impl Largest {
    fn consider(&mut self, what: &'static str, values: u64) {
        if values > self.values {
            *self = Largest { values, what };
        }
    }
}

impl Tally {
    /// One buffer of `dims` values, which some op binds whole.
    fn buf(&mut self, what: &'static str, dims: &[u64]) -> Result<()> {
        self.windowed(what, dims)?;
        self.bound.consider(what, product(what, dims)?);
        Ok(())
    }

    /// One buffer of `dims` values that every op using it binds in windows (the logits).
    fn windowed(&mut self, what: &'static str, dims: &[u64]) -> Result<()> {
        let n = product(what, dims)?;
        self.values = sum(what, &[self.values, n])?;
        self.largest.consider(what, n);
        Ok(())
    }

    /// Every buffer of `inner`, `times` over.
    fn include(&mut self, what: &str, inner: &Tally, times: u64) -> Result<()> {
        let n = product(what, &[inner.values, times])?;
        self.values = sum(what, &[self.values, n])?;
        if times > 0 {
            self.largest.consider(inner.largest.what, inner.largest.values);
            self.bound.consider(inner.bound.what, inner.bound.values);
        }
        Ok(())
    }
}

/// A parameter view declared `repeat` times: (repeat, what, shape).
type Spec<'a> = (u64, &'a str, Vec<u64>);

/// Parameter views no op binds whole: the vocabulary-sized tables, which the embedding and the
/// unembedding's matmul bind in windows of rows.
fn windowed_view(what: &str) -> bool {
    what.starts_with("wte ") || what.starts_with("w_u ")
}

/// Sums a model's parameter views, each padded to 64 values.
fn param_sizes(specs: &[Spec<'static>]) -> Result<ParamSizes> {
    let (mut count, mut total, mut bound) = (0u64, 0u64, Largest::default());
    // A view declared 0 times (ALiBi's position table) has no size to overflow.
    for (repeat, what, shape) in specs.iter().filter(|s| s.0 > 0) {
        let (repeat, what, shape) = (*repeat, *what, &shape[..]);
        let len = product(what, shape)?;
        let padded = len
            .checked_next_multiple_of(VIEW_ALIGN as u64)
            .ok_or_else(|| overflow(what, shape))?;
        count = sum("the parameters", &[count, product(what, &[repeat, len])?])?;
        total = sum("the parameters", &[total, product(what, &[repeat, padded])?])?;
        if !windowed_view(what) {
            bound.consider(what, len);
        }
    }
    Ok(ParamSizes { count, total, bound })
}

impl ParamSizes {
    /// Fails when the parameter buffer cannot be addressed in bytes on this machine; every
    /// parameter view is at most this buffer, so building the layout cannot overflow after it.
    pub fn addressable(self) -> Result<Self> {
        let fits = self
            .total
            .checked_mul(VALUE_BYTES)
            .is_some_and(|b| usize::try_from(b).is_ok());
        match fits {
            true => Ok(self),
            false => Err(ModelError::Config(format!(
                "{} parameter values are too many to address in bytes; make the model smaller",
                self.total
            ))),
        }
    }
}

/// The transformer's parameters, as `transformer::layout` declares them.
pub fn transformer_params(c: &TransformerConfig) -> Result<ParamSizes> {
    let [v, n, d, l, h, dh, f] =
        [c.vocab, c.seq_len, c.d_model, c.n_layers, c.n_heads, c.head_dim, c.d_ff].map(|x| x as u64);
    let hd = product("n_heads × head_dim", &[h, dh])?;
    let qkv = product("3 × n_heads × head_dim", &[3, hd])?;
    param_sizes(&[
        (1, "wte (vocab × d_model)", vec![v, d]),
        (1, "wpe (seq_len × d_model)", vec![n, d]),
        (l, "the norm gains (d_model)", vec![d]),
        (l, "w_qkv (3·n_heads·head_dim × d_model)", vec![qkv, d]),
        (l, "w_o (d_model × n_heads·head_dim)", vec![d, hd]),
        (l, "the norm gains (d_model)", vec![d]),
        (l, "w1 (d_ff × d_model)", vec![f, d]),
        (l, "w2 (d_model × d_ff)", vec![d, f]),
        (1, "lnf (d_model)", vec![d]),
        (1, "w_u (vocab × d_model)", vec![v, d]),
    ])
}

/// R·D_v, checked: the width of the trunk's vectors and of its feed-forward core.
fn trunk_width(t: &Trunk) -> Result<u64> {
    product("rank × d_v", &[t.rank as u64, t.d_v as u64])
}

/// The parameters of a residual-matrix model, as `rmt::layout` declares them: the trunk's,
/// and `core`, the feed-forward core's views.
fn residual_matrix_params(t: &Trunk, core: Vec<Spec<'static>>) -> Result<ParamSizes> {
    let [v, n, dk, dv, r, l] = [t.vocab, t.seq_len, t.d_k, t.d_v, t.rank, t.n_layers].map(|x| x as u64);
    let rv = trunk_width(t)?;
    let r3 = product("3 × rank", &[3, r])?;
    let learned = u64::from(t.position == Position::Learned);
    let mut specs = vec![
        (1, "wte (vocab × rank × d_v)", vec![v, rv]),
        (1, "w_e (rank × d_k)", vec![r, dk]),
        (learned, "wpe (seq_len × rank × d_v)", vec![n, rv]),
        (learned, "w_pe (rank × d_k)", vec![r, dk]),
        (l, "the norm gains (d_k × d_v)", vec![dk, dv]),
        (l, "r_qkv (3·rank × d_k)", vec![r3, dk]),
        (l, "w_o (rank × d_k)", vec![r, dk]),
        (l, "the norm gains (d_k × d_v)", vec![dk, dv]),
        (l, "r_ff (rank × d_k)", vec![r, dk]),
        (l, "w_ff (rank × d_k)", vec![r, dk]),
        (1, "lnf (d_k × d_v)", vec![dk, dv]),
        (1, "r_u (rank × d_k)", vec![r, dk]),
        (1, "w_u (vocab × rank × d_v)", vec![v, rv]),
    ];
    specs.extend(core);
    param_sizes(&specs)
}

/// The RMT's parameters: the trunk's and the dense core's W1 and W2 in every layer.
pub fn rmt_params(c: &RmtConfig) -> Result<ParamSizes> {
    let t = c.trunk();
    let (l, f, rv) = (t.n_layers as u64, c.d_ff as u64, trunk_width(&t)?);
    let core = vec![
        (l, "w1 (d_ff × rank·d_v)", vec![f, rv]),
        (l, "w2 (rank·d_v × d_ff)", vec![rv, f]),
    ];
    residual_matrix_params(&t, core)
}

/// The hybrid's parameters: the trunk's and a memory block over R·D_v in every layer.
pub fn hybrid_params(c: &HybridConfig) -> Result<ParamSizes> {
    let t = c.trunk();
    let core = memory_block_params(t.n_layers as u64, trunk_width(&t)?, &c.hashing())?;
    residual_matrix_params(&t, core)
}

/// Memory Layers' widths over an input of width `d`: (K, (τ + e)·K), checked; τ + e must
/// already be at most `MAX_HASH_BITS`.
fn hashed_widths(d: u64, h: &Hashing) -> Result<(u64, u64)> {
    let k = d.checked_div(h.tau as u64).unwrap_or(0);
    Ok((k, product("(tau + expansion_bits) × K", &[h.ml2_bits() as u64, k])?))
}

/// Rows of a table hashed with `bits` bits.
fn table_rows(bits: u64) -> u64 {
    1u64.checked_shl(bits as u32).filter(|_| bits < 64).unwrap_or(0)
}

/// The views of `l` memory blocks over width `d`, as `MemoryBlock::declare` declares them.
fn memory_block_params(l: u64, d: u64, h: &Hashing) -> Result<Vec<Spec<'static>>> {
    let (k, dh) = hashed_widths(d, h)?;
    let (tau, ml2_bits) = (h.tau as u64, h.ml2_bits() as u64);
    Ok(vec![
        (l, "the ml1 tables (K × 2^tau × d_hidden)", vec![k, table_rows(tau), dh]),
        (l, "the ml1 bias (d_hidden)", vec![dh]),
        (l, "the norm gains (d_hidden)", vec![dh]),
        (
            l,
            "the ml2 tables (K × 2^(tau+e) × d)",
            vec![k, table_rows(ml2_bits), d],
        ),
        (l, "the ml2 bias (d)", vec![d]),
    ])
}

/// MemoryFormer's parameters, as `memoryformer::layout` declares them.
pub fn memoryformer_params(c: &MemoryFormerConfig) -> Result<ParamSizes> {
    let [v, n, d, l, tau] = [c.vocab, c.seq_len, c.d_model, c.n_layers, c.tau].map(|x| x as u64);
    let (k, _) = hashed_widths(d, &c.hashing())?;
    let d3 = product("3 × d_model", &[3, d])?;
    let mut specs = vec![
        (1, "wte (vocab × d_model)", vec![v, d]),
        (1, "wpe (seq_len × d_model)", vec![n, d]),
        (l, "the norm gains (d_model)", vec![d]),
        (
            l,
            "the qkv tables (K × 2^tau × 3·d_model)",
            vec![k, table_rows(tau), d3],
        ),
        (l, "the qkv bias (3·d_model)", vec![d3]),
        (l, "the norm gains (d_model)", vec![d]),
        (1, "lnf (d_model)", vec![d]),
        (1, "w_u (vocab × d_model)", vec![v, d]),
    ];
    specs.extend(memory_block_params(l, d, &c.hashing())?);
    param_sizes(&specs)
}

/// The parameters of any architecture.
pub fn params(cfg: &ModelConfig) -> Result<ParamSizes> {
    match cfg {
        ModelConfig::Transformer(c) => transformer_params(c),
        ModelConfig::Rmt(c) => rmt_params(c),
        ModelConfig::MemoryFormer(c) => memoryformer_params(c),
        ModelConfig::Hybrid(c) => hybrid_params(c),
    }
}

/// Activation values (forward, backward-only) of a model for (b, t), bt = b·t already checked.
struct Acts {
    forward: Tally,
    backward: Tally,
}

/// `per`'s buffers in each of `l` blocks.
fn blocks(fwd: &mut Tally, l: usize, per: &Tally) -> Result<()> {
    fwd.include("the activations of every block (n_layers × one block's)", per, l as u64)
}

/// The loss head: logits (BT, V), per-row losses and log Z, and the mean loss.
fn head(fwd: &mut Tally, bt: u64, v: u64) -> Result<()> {
    // The unembedding's matmul and cross-entropy bind the logits in windows of rows.
    fwd.windowed("the logits (batch × seq_len × vocab)", &[bt, v])?;
    fwd.buf("the per-row losses", &[bt, 2])?;
    fwd.buf("the loss", &[1])
}

fn transformer_acts(c: &TransformerConfig, b: u64, t: u64, bt: u64) -> Result<Acts> {
    let [d, v, h, dh, f] = [c.d_model, c.vocab, c.n_heads, c.head_dim, c.d_ff].map(|x| x as u64);
    let hd = product("n_heads × head_dim", &[h, dh])?;
    let lse = "the attention log-sum-exps (batch × n_heads × seq_len)";
    let mut per = Tally::default();
    per.buf("ln1 (batch × seq_len × d_model)", &[bt, d])?;
    per.buf("the norm statistics", &[bt, 2])?;
    per.buf("qkv (batch × seq_len × 3·n_heads·head_dim)", &[bt, 3, hd])?;
    per.buf("the attention output", &[bt, hd])?;
    per.buf(lse, &[b, h, t])?;
    per.buf("the residual", &[bt, d])?;
    per.buf("ln2", &[bt, d])?;
    per.buf("the norm statistics", &[bt, 2])?;
    per.buf("the FF hidden (batch × seq_len × d_ff)", &[bt, f])?;
    per.buf("the FF hidden", &[bt, f])?;
    per.buf("the residual", &[bt, d])?;
    let mut fwd = Tally::default();
    blocks(&mut fwd, c.n_layers, &per)?;
    fwd.buf("the projection", &[bt, d])?;
    fwd.buf("the embeddings", &[bt, d])?;
    fwd.buf("the final norm", &[bt, d])?;
    fwd.buf("the final norm statistics", &[bt, 2])?;
    head(&mut fwd, bt, v)?;
    let mut bwd = Tally::default();
    bwd.windowed("the logit gradients", &[bt, v])?;
    bwd.buf("the residual gradient", &[bt, d])?;
    bwd.buf("the norm gradient", &[bt, d])?;
    bwd.buf("the attention gradient", &[bt, hd])?;
    bwd.buf("the qkv gradient", &[bt, 3, hd])?;
    bwd.buf("attention's dout·out per row (batch × n_heads × seq_len)", &[b, h, t])?;
    bwd.buf("the FF gradient", &[bt, f])?;
    bwd.buf("the FF gradient", &[bt, f])?;
    // W_QKV, W_O, W1 and W2 of every block, as the RMT's probed sites.
    bwd.buf(
        "the variance probes",
        &[c.n_layers as u64, 4 * 4 * 2, VIEW_ALIGN as u64],
    )?;
    Ok(Acts {
        forward: fwd,
        backward: bwd,
    })
}

/// What a feed-forward core adds to a model's activations, in values.
#[derive(Default)]
struct CoreActs {
    /// In each block.
    per_block: Tally,
    /// Once, shared by every block's forward.
    shared: Tally,
    /// Backward scratch, once.
    scratch: Tally,
    /// Variance-probed sites of its own in each block (W1 and W2 of a dense core).
    probed_sites: u64,
}

/// The RMT's dense core: the hidden layer before and after GELU, and their gradients.
fn dense_core_acts(bt: u64, f: u64) -> Result<CoreActs> {
    let mut core = CoreActs {
        probed_sites: 2,
        ..CoreActs::default()
    };
    core.per_block.buf("the FF hidden (batch × seq_len × d_ff)", &[bt, f])?;
    core.per_block.buf("the FF hidden", &[bt, f])?;
    core.scratch.buf("the FF gradient", &[bt, f])?;
    core.scratch.buf("the FF gradient", &[bt, f])?;
    Ok(core)
}

/// What one Memory Layer keeps (`memory_layer::Hashed`): codes, weights, rows and bucket starts.
fn hashed(per: &mut Tally, bt: u64, k: u64, bits: u64) -> Result<()> {
    per.buf("the hash codes (batch × seq_len × K)", &[bt, k])?;
    per.buf("the hash weights", &[bt, k])?;
    per.buf("the bucket rows", &[k, bt])?;
    per.buf("the bucket starts", &[k, table_rows(bits) + 1])
}

/// A memory block over width `d` (`memory_layer::MemoryBlock`): its two Memory Layers, ML1's
/// output, its norm and its GELU if any; the sort's cursor, sized for ML2's 2^(τ+e) buckets, the
/// widest; and the gradients of ML1's output, of its norm and of its GELU.
fn memory_block_acts(bt: u64, d: u64, h: &Hashing) -> Result<CoreActs> {
    let (k, dh) = hashed_widths(d, h)?;
    let (tau, ml2_bits) = (h.tau as u64, h.ml2_bits() as u64);
    let mut core = CoreActs::default();
    hashed(&mut core.per_block, bt, k, tau)?;
    core.per_block.buf("the ml1 output", &[bt, dh])?;
    core.per_block.buf("ln3", &[bt, dh])?;
    core.per_block.buf("the norm statistics", &[bt, 2])?;
    if h.block_gelu {
        core.per_block.buf("the gelu of ln3", &[bt, dh])?;
    }
    hashed(&mut core.per_block, bt, k, ml2_bits)?;
    // A counter per table, code and tile of the GPU's sort (engine::ops::memory::sort_tiles).
    let buckets = table_rows(ml2_bits);
    let tiles = sort_tiles(usize::try_from(bt).unwrap_or(usize::MAX), buckets as usize) as u64;
    core.shared.buf("the bucket cursor", &[k, buckets, tiles])?;
    core.scratch.buf("the ml1 gradient", &[bt, dh])?;
    core.scratch.buf("the ln3 gradient", &[bt, dh])?;
    if h.block_gelu {
        core.scratch.buf("the gelu gradient", &[bt, dh])?;
    }
    Ok(core)
}

/// A residual-matrix model's activations: the trunk's and its feed-forward `core`'s.
fn residual_matrix_acts(c: &Trunk, b: u64, t: u64, bt: u64, core: CoreActs) -> Result<Acts> {
    let [dk, dv, r, v, n] = [c.d_k, c.d_v, c.rank, c.vocab, c.seq_len].map(|x| x as u64);
    let probed_sites = core.probed_sites;
    let m = product("d_k × d_v", &[dk, dv])?;
    let rv = trunk_width(c)?;
    let lse = "the attention log-sum-exps (batch × rank × seq_len)";
    let res = "the residual matrices (batch × seq_len × d_k × d_v)";
    let mut per = Tally::default();
    per.buf("the norm statistics", &[bt, 2])?;
    per.buf("qkv (batch × seq_len × 3·rank·d_v)", &[bt, 3, rv])?;
    per.buf("the attention output", &[bt, rv])?;
    per.buf(lse, &[b, r, t])?;
    per.buf(res, &[bt, m])?;
    per.buf("the norm statistics", &[bt, 2])?;
    per.buf("the FF adapters", &[bt, rv])?;
    per.include("the feed-forward core", &core.per_block, 1)?;
    per.buf("the FF output", &[bt, rv])?;
    per.buf(res, &[bt, m])?;
    let learned = c.position == Position::Learned;
    let mut fwd = Tally::default();
    blocks(&mut fwd, c.n_layers, &per)?;
    fwd.include("the feed-forward core's scratch", &core.shared, 1)?;
    if learned {
        // Each row's position and the rows grouped by position (BT each), and the N + 1 starts.
        fwd.buf("the positions and their buckets", &[bt, 2])?;
        fwd.buf("the position bucket starts (seq_len + 1)", &[n, 1])?;
        fwd.buf("the last position bucket start", &[1])?;
    }
    fwd.buf("the token embeddings", &[bt, rv])?;
    if learned {
        fwd.buf("the position embeddings", &[bt, rv])?;
    }
    fwd.buf(res, &[bt, m])?;
    fwd.buf("the final norm statistics", &[bt, 2])?;
    fwd.buf("the unembedding retrievals", &[bt, rv])?;
    head(&mut fwd, bt, v)?;
    let mut bwd = Tally::default();
    bwd.windowed("the logit gradients", &[bt, v])?;
    bwd.buf("the residual gradient", &[bt, m])?;
    bwd.buf("the norm gradient", &[bt, m])?;
    bwd.buf("the vector gradient", &[bt, rv])?;
    bwd.buf("the qkv gradient", &[bt, 3, rv])?;
    bwd.buf("attention's dout·out per row (batch × rank × seq_len)", &[b, r, t])?;
    bwd.include("the feed-forward core's gradients", &core.scratch, 1)?;
    let chunks = bt.div_ceil(KEY_GRAD_CHUNK as u64);
    bwd.buf(
        "the key-gradient partial sums (batch × seq_len × rank × d_k)",
        &[chunks, 3, r, dk],
    )?;
    bwd.buf("the probe scratch", &[bt, m])?;
    bwd.buf("the probe scratch", &[bt, 2])?;
    // 4 probed sites a block and the core's, 4 quantities, 2 sums, each in its own 64-value slot.
    bwd.buf(
        "the variance probes",
        &[c.n_layers as u64, (4 + probed_sites) * 4 * 2, VIEW_ALIGN as u64],
    )?;
    Ok(Acts {
        forward: fwd,
        backward: bwd,
    })
}

fn memoryformer_acts(c: &MemoryFormerConfig, b: u64, t: u64, bt: u64) -> Result<Acts> {
    let [d, v, h, tau] = [c.d_model, c.vocab, c.n_heads, c.tau].map(|x| x as u64);
    let (k, _) = hashed_widths(d, &c.hashing())?;
    let ff = memory_block_acts(bt, d, &c.hashing())?;
    let lse = "the attention log-sum-exps (batch × n_heads × seq_len)";
    let mut per = Tally::default();
    per.buf("ln1 (batch × seq_len × d_model)", &[bt, d])?;
    per.buf("the norm statistics", &[bt, 2])?;
    hashed(&mut per, bt, k, tau)?;
    per.buf("qkv", &[bt, 3, d])?;
    per.buf("the attention output", &[bt, d])?;
    per.buf(lse, &[b, h, t])?;
    per.buf("the residual", &[bt, d])?;
    per.buf("ln2", &[bt, d])?;
    per.buf("the norm statistics", &[bt, 2])?;
    per.include("the memory block", &ff.per_block, 1)?;
    per.buf("the ml2 output", &[bt, d])?;
    per.buf("the residual", &[bt, d])?;
    let mut fwd = Tally::default();
    blocks(&mut fwd, c.n_layers, &per)?;
    fwd.include("the bucket cursor", &ff.shared, 1)?;
    fwd.buf("the embeddings", &[bt, d])?;
    fwd.buf("the final norm", &[bt, d])?;
    fwd.buf("the final norm statistics", &[bt, 2])?;
    head(&mut fwd, bt, v)?;
    let mut bwd = Tally::default();
    bwd.windowed("the logit gradients", &[bt, v])?;
    bwd.buf("the residual gradient", &[bt, d])?;
    bwd.buf("the norm gradient", &[bt, d])?;
    bwd.buf("the qkv gradient", &[bt, 3, d])?;
    bwd.buf("attention's dout·out per row (batch × n_heads × seq_len)", &[b, h, t])?;
    bwd.include("the memory block's gradients", &ff.scratch, 1)?;
    Ok(Acts {
        forward: fwd,
        backward: bwd,
    })
}

/// The bytes a `cfg` model for batches of `b` sequences of `t` tokens allocates when built for
/// `purpose`, with one batch's buffers and, for training, AdamW. Fails, naming the setting, when
/// the config is invalid, the shape does not fit the model, or any size overflows.
pub fn estimate(cfg: &ModelConfig, b: usize, t: usize, purpose: Purpose) -> Result<MemoryEstimate> {
    let (vocab, seq_len) = (cfg.vocab(), cfg.context());
    cfg.validate()?;
    if b == 0 || t == 0 {
        return Err(ModelError::Config(format!(
            "a batch of {b} sequences of {t} tokens is empty; use a batch and a sequence length of at least 1"
        )));
    }
    if t > seq_len {
        return Err(ModelError::Config(format!(
            "sequences of {t} tokens exceed the context length {seq_len}"
        )));
    }
    let (b64, t64) = (b as u64, t as u64);
    let bt = b64.checked_mul(t64).ok_or_else(|| {
        ModelError::Config(format!(
            "the batch × sequence length overflows ({b} × {t}); use a smaller batch or sequence length"
        ))
    })?;
    let p = params(cfg)?.addressable()?;
    let acts = match cfg {
        ModelConfig::Transformer(c) => transformer_acts(c, b64, t64, bt)?,
        ModelConfig::Rmt(c) => {
            let core = dense_core_acts(bt, c.d_ff as u64)?;
            residual_matrix_acts(&c.trunk(), b64, t64, bt, core)?
        }
        ModelConfig::Hybrid(c) => {
            let core = memory_block_acts(bt, trunk_width(&c.trunk())?, &c.hashing())?;
            residual_matrix_acts(&c.trunk(), b64, t64, bt, core)?
        }
        ModelConfig::MemoryFormer(c) => memoryformer_acts(c, b64, t64, bt)?,
    };
    let mut batch = Tally::default();
    batch.buf("the batch's tokens, targets, buckets and document starts", &[bt, 4])?;
    batch.buf("the token bucket starts (vocab + 1)", &[vocab as u64, 1])?;
    batch.buf("the token bucket starts", &[1])?;
    batch.buf("the loss scale", &[1])?;
    let train = purpose == Purpose::Train;
    let optimizer = match train {
        true => sum(
            "AdamW's moments",
            &[product("AdamW's moments", &[p.total, 2])?, Hyper::LEN as u64, 1],
        )?,
        false => 0,
    };
    let values = [
        p.total,
        if train { p.total } else { 0 },
        acts.forward.values,
        if train { acts.backward.values } else { 0 },
        optimizer,
        batch.values,
    ];
    // The parameters, gradients and each AdamW moment are one flat buffer each.
    let mut largest = acts.forward.largest;
    let mut bound = acts.forward.bound;
    if train {
        largest.consider(acts.backward.largest.what, acts.backward.largest.values);
        bound.consider(acts.backward.bound.what, acts.backward.bound.values);
    }
    largest.consider("the parameters", p.total);
    // The flat buffers are bound in windows (AdamW, the norm's sum); their views whole.
    bound.consider(p.bound.what, p.bound.values);
    // The batch is four index buffers of B·T values each and V + 1 bucket starts.
    bound.consider("the batch's tokens (batch × seq_len)", bt);
    bound.consider("the token bucket starts (vocab + 1)", (vocab as u64).saturating_add(1));
    let total = sum("the model, its batch and its optimizer", &values)?;
    // Each buffer is at most the total, so every later usize product fits when this does.
    if total
        .checked_mul(VALUE_BYTES)
        .is_none_or(|b| usize::try_from(b).is_err())
    {
        return Err(ModelError::Config(format!(
            "{total} values do not fit this machine's address space; make the model or the batch smaller"
        )));
    }
    let bytes = |values: u64| product("the model in bytes", &[values, VALUE_BYTES]);
    Ok(MemoryEstimate {
        params: p.count,
        param_bytes: bytes(values[0])?,
        grad_bytes: bytes(values[1])?,
        activation_bytes: bytes(values[2])?,
        backward_bytes: bytes(values[3])?,
        optimizer_bytes: bytes(values[4])?,
        batch_bytes: bytes(values[5])?,
        bytes: bytes(total)?,
        largest_buffer_bytes: bytes(largest.values)?,
        largest_buffer: largest.what,
        largest_binding_bytes: bytes(bound.values)?,
        largest_binding: bound.what,
    })
}

/// Bytes the OS says can be allocated without swapping: Linux's MemAvailable; None elsewhere or
/// when /proc/meminfo cannot be read.
pub fn available_bytes() -> Option<u64> {
    if !cfg!(target_os = "linux") {
        return None;
    }
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    parse_meminfo(&info)
}

/// MemAvailable from the text of /proc/meminfo, in bytes.
fn parse_meminfo(info: &str) -> Option<u64> {
    let line = info.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

const GIB: f64 = 1024.0 * 1024.0 * 1024.0;

/// Fails when `est` needs more than `available` bytes (None: unknown, so anything fits), saying
/// how much each needs and what to shrink.
pub fn check_fits(est: &MemoryEstimate, available: Option<u64>) -> Result<()> {
    let Some(available) = available else {
        return Ok(());
    };
    if est.bytes <= available {
        return Ok(());
    }
    let activations = est.activation_bytes.saturating_add(est.backward_bytes);
    let largest = if activations > est.param_bytes {
        "the batch or the sequence length (activations grow with both)"
    } else {
        "the model (fewer layers, a smaller width or vocabulary)"
    };
    Err(ModelError::Config(format!(
        "this config needs {:.2} GiB ({:.2} GiB of parameters, gradients and optimizer state, {:.2} GiB of \
         activations), but only {:.2} GiB is available; make {largest} smaller",
        est.bytes as f64 / GIB,
        (est.param_bytes
            .saturating_add(est.grad_bytes)
            .saturating_add(est.optimizer_bytes)) as f64
            / GIB,
        activations as f64 / GIB,
        available as f64 / GIB,
    )))
}

/// Fails when the largest buffer some op of `est` binds whole is over a GPU's limit for one
/// storage binding (in bytes), naming the buffer and the settings it grows with, before
/// anything is allocated. Buffers the ops bind in windows (the flat parameters, gradients and
/// moments, the vocabulary-sized tables, the logits) may be larger.
pub fn check_binding_limit(est: &MemoryEstimate, max_binding_bytes: u64) -> Result<()> {
    if est.largest_binding_bytes <= max_binding_bytes {
        return Ok(());
    }
    // "the FF hidden (batch × seq_len × d_ff)": the settings in the brackets are what to shrink.
    let shrink = match est.largest_binding.split_once('(') {
        Some((_, dims)) => format!("lower {}", dims.trim_end_matches(')').replace(" × ", ", ")),
        None => "make the model smaller (fewer layers or a smaller width)".to_string(),
    };
    let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
    Err(ModelError::Config(format!(
        "this config needs {:.1} MiB for {} in one buffer, but this GPU binds at most {:.1} MiB; {shrink}",
        mib(est.largest_binding_bytes),
        est.largest_binding,
        mib(max_binding_bytes),
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meminfo_is_parsed_in_kib() {
        let info = "MemTotal:       16384 kB\nMemFree:  100 kB\nMemAvailable:    2048 kB\n";
        assert_eq!(parse_meminfo(info), Some(2048 * 1024));
        assert_eq!(parse_meminfo("MemTotal: 1 kB\n"), None);
        assert_eq!(parse_meminfo("MemAvailable: lots kB\n"), None);
    }

    #[test]
    fn check_fits_says_what_is_needed_and_available() {
        let est = MemoryEstimate {
            bytes: 3 << 30,
            activation_bytes: 2 << 30,
            param_bytes: 1 << 30,
            ..Default::default()
        };
        assert!(check_fits(&est, None).is_ok());
        assert!(check_fits(&est, Some(3 << 30)).is_ok());
        let err = check_fits(&est, Some(1 << 30)).unwrap_err().to_string();
        assert!(
            err.contains("3.00 GiB") && err.contains("1.00 GiB is available"),
            "{err}"
        );
        assert!(err.contains("batch"), "{err}");
    }

    #[test]
    fn an_empty_or_too_long_shape_is_refused() {
        let cfg = ModelConfig::Transformer(TransformerConfig::tiny(16, 8));
        for (b, t) in [(0, 4), (4, 0), (1, 9)] {
            assert!(estimate(&cfg, b, t, Purpose::Train).is_err(), "{b}×{t}");
        }
        assert!(estimate(&cfg, 1, 8, Purpose::Infer).is_ok());
    }

    #[test]
    fn overflowing_batches_are_config_errors() {
        // ALiBi has no position table, so a context of usize::MAX is a valid config.
        let cfg = ModelConfig::Rmt(RmtConfig {
            position: Position::Alibi,
            ..RmtConfig::tiny(16, usize::MAX)
        });
        let err = estimate(&cfg, usize::MAX, usize::MAX, Purpose::Train)
            .unwrap_err()
            .to_string();
        assert!(err.contains("batch × sequence length overflows"), "{err}");
        // Activations grow linearly in T (attention keeps no T×T buffer): 2^60 tokens overflow.
        let err = estimate(&cfg, 1, 1 << 60, Purpose::Infer).unwrap_err().to_string();
        assert!(err.contains("overflows"), "{err}");
    }
}
