//! A config's parameters in closed form, with checked arithmetic only, as each model's layout
//! declares them: config validation uses it so that building a layout cannot overflow, and the
//! counters (`count.rs`) read parameters from it without building anything. Tested equal to the
//! layouts (`tests/memory.rs`).

use crate::{
    Hashing, HybridConfig, MemoryFormerConfig, ModelConfig, ModelError, Position, Result, RmtConfig, TransformerConfig,
    Trunk,
};
use engine::VIEW_ALIGN;

/// Bytes of one value: tensors are f32 and indices u32 on every backend the CLI and page use.
const VALUE_BYTES: u64 = engine::counting::VALUE_BYTES;

/// A config's parameters, in values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ParamSizes {
    /// Real parameters, as `ParamLayout::count`.
    pub count: u64,
    /// The flat buffer with every view padded to 64 values, as `ParamLayout::total`.
    pub total: u64,
    /// The largest view some op binds whole, in values, and what it holds with the settings it
    /// grows with.
    pub bound: (u64, &'static str),
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

/// A parameter view declared `repeat` times: (repeat, what, shape).
type Spec<'a> = (u64, &'a str, Vec<u64>);

/// Parameter views no op binds whole: the vocabulary-sized tables, which the embedding and the
/// unembedding's matmul bind in windows of rows.
fn windowed_view(what: &str) -> bool {
    what.starts_with("wte ") || what.starts_with("w_u ")
}

/// Sums a model's parameter views, each padded to 64 values.
fn param_sizes(specs: &[Spec<'static>]) -> Result<ParamSizes> {
    let (mut count, mut total, mut bound) = (0u64, 0u64, (0u64, ""));
    // A view declared 0 times (ALiBi's position table) has no size to overflow.
    for (repeat, what, shape) in specs.iter().filter(|s| s.0 > 0) {
        let (repeat, what, shape) = (*repeat, *what, &shape[..]);
        let len = product(what, shape)?;
        let padded = len
            .checked_next_multiple_of(VIEW_ALIGN as u64)
            .ok_or_else(|| overflow(what, shape))?;
        count = sum("the parameters", &[count, product(what, &[repeat, len])?])?;
        total = sum("the parameters", &[total, product(what, &[repeat, padded])?])?;
        if !windowed_view(what) && len > bound.0 {
            bound = (len, what);
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
    param_sizes(&transformer_specs(c)?)
}

fn transformer_specs(c: &TransformerConfig) -> Result<Vec<Spec<'static>>> {
    let [v, n, d, l, h, dh, f] =
        [c.vocab, c.context, c.d_model, c.n_layers, c.n_heads, c.head_dim, c.d_ff].map(|x| x as u64);
    let hd = product("n_heads × head_dim", &[h, dh])?;
    let qkv = product("3 × n_heads × head_dim", &[3, hd])?;
    Ok(vec![
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
        (learned_values(c), "the value residual's λ (1)", vec![1]),
    ])
}

/// The layers with a learnable value mix λ_n: every layer after the first.
fn learned_values(c: &TransformerConfig) -> u64 {
    match c.value_residual {
        crate::ValueResidual::Off | crate::ValueResidual::Half => 0,
        crate::ValueResidual::Learnable => c.n_layers.saturating_sub(1) as u64,
    }
}

/// A hyper-connected model's parameters, as `hyper_connections::layout` declares them: its
/// transformer's (`HcConfig::transformer`), and each site's Φ (W × streams·d_model), bias (W) and
/// three scales, W = 2n + n² or n!; HC's Φ is (n + 2 × d_model), and each site adds its norm's
/// gain (d_model); the `head` collapse's gates are one more Φ (n × n·D), bias (n) and scale.
pub fn hc_params(c: &crate::HcConfig) -> Result<ParamSizes> {
    let [d, l, s] = [c.d_model, c.n_layers, c.streams].map(|x| x as u64);
    let res = match c.mixing {
        crate::HcMixing::Hc | crate::HcMixing::Mhc => product("streams²", &[s, s])?,
        crate::HcMixing::MhcLite => product("streams!", &(1..=s).collect::<Vec<_>>())?,
    };
    let w = sum("the gates' logits (2·streams + the mixing's)", &[2 * s, res])?;
    let sd = product("streams × d_model", &[s, d])?;
    let (phi, gains) = match c.mixing {
        crate::HcMixing::Hc => (vec![sum("streams + 2", &[s, 2])?, d], 2 * l),
        _ => (vec![w, sd], 0),
    };
    let head = u64::from(c.collapse() == crate::HcCollapse::Head);
    let mut specs = transformer_specs(&c.transformer())?;
    specs.extend([
        (2 * l, "hc_phi (gates × streams·d_model, or streams + 2 × d_model)", phi),
        (2 * l, "hc_bias (gates)", vec![w]),
        (2 * l, "hc_alpha (3)", vec![3]),
        (gains, "hc_norm (d_model)", vec![d]),
        (head, "head.hc_phi (streams × streams·d_model)", vec![s, sd]),
        (head, "head.hc_bias (streams)", vec![s]),
        (head, "head.hc_alpha (1)", vec![1]),
    ]);
    param_sizes(&specs)
}

/// R·D_v, checked: the width of the trunk's vectors and of its feed-forward core.
fn trunk_width(t: &Trunk) -> Result<u64> {
    product("rank × d_v", &[t.rank as u64, t.d_v as u64])
}

/// The parameters of a residual-matrix model, as `rmt::layout` declares them: the trunk's,
/// and `core`, the feed-forward core's views.
fn residual_matrix_params(t: &Trunk, core: Vec<Spec<'static>>) -> Result<ParamSizes> {
    let [v, n, dk, dv, r, l] = [t.vocab, t.context, t.d_k, t.d_v, t.rank, t.n_layers].map(|x| x as u64);
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
    let [v, n, d, l, tau] = [c.vocab, c.context, c.d_model, c.n_layers, c.tau].map(|x| x as u64);
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

/// An AltUp model's parameters, as `altup::layout` declares them: its transformer's
/// (`AltupConfig::transformer`), and each layer's predict P (sub_blocks²) and correct g
/// (sub_blocks).
pub fn altup_params(c: &crate::AltupConfig) -> Result<ParamSizes> {
    let [l, k] = [c.n_layers, c.sub_blocks].map(|x| x as u64);
    let mut specs = transformer_specs(&c.transformer())?;
    specs.extend([
        (l, "altup.predict (sub_blocks × sub_blocks)", vec![k, k]),
        (l, "altup.correct (sub_blocks)", vec![k]),
    ]);
    param_sizes(&specs)
}

/// An AttnRes model's parameters, as `attnres::layout` declares them: its transformer's
/// (`AttnResConfig::transformer`), and a pseudo-query and a key gain at each site and the head.
pub fn attnres_params(c: &crate::AttnResConfig) -> Result<ParamSizes> {
    let [l, d] = [c.n_layers, c.d_model].map(|x| x as u64);
    let mut specs = transformer_specs(&c.transformer())?;
    specs.extend([(
        2 * l + 1,
        "attnres (2 × d_model: the pseudo-query and the keys' gain)",
        vec![2, d],
    )]);
    param_sizes(&specs)
}

/// The parameters of any architecture.
pub fn params(cfg: &ModelConfig) -> Result<ParamSizes> {
    match cfg {
        ModelConfig::Transformer(c) => transformer_params(c),
        ModelConfig::Rmt(c) => rmt_params(c),
        ModelConfig::MemoryFormer(c) => memoryformer_params(c),
        ModelConfig::Hybrid(c) => hybrid_params(c),
        ModelConfig::Hc(c) => hc_params(c),
        ModelConfig::Altup(c) => altup_params(c),
        ModelConfig::AttnRes(c) => attnres_params(c),
    }
}
