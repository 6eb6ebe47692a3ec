//! How much memory a model will allocate, known before anything is allocated: the model, one
//! batch and, for training, AdamW are built on the engine's counting backend, which allocates
//! nothing and adds up what each constructor asks for. The estimate is the constructors' own
//! sizes, so it cannot drift from what they allocate (tested against the CPU backend's count).
//!
//! Constructors compute each buffer's size with [`values`], which saturates: a config whose sizes
//! overflow gets a buffer of usize::MAX values on the counting backend, and the estimate refuses
//! it, naming the largest buffer. Nothing that would be written (the initial parameters, the
//! position indices) is computed on the counting backend, so measuring a model takes host memory
//! that grows with its number of layers, never with its widths or its batch. On the GPU a
//! zero-length buffer still takes 4 bytes, buffers are rounded up to 16, and the backend keeps a
//! little scratch of its own (the sum's partials, uniforms, readback staging): none is counted.

use crate::param_sizes;
use crate::{AdamW, BatchTensors, ModelConfig, ModelError, Result, TrainConfig};
use engine::counting::{Buffer, CountingBackend};
use serde::Serialize;

/// Bytes of one value: tensors are f32 and indices u32 on every backend the CLI and page use.
pub use engine::counting::VALUE_BYTES;

/// What the model is built for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Purpose {
    /// `new`: gradients, backward scratch, variance probes and AdamW's moments.
    Train,
    /// `inference`: parameters and forward activations only.
    Infer,
}

/// The bytes a model built for `Purpose` allocates, by kind.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct MemoryEstimate {
    /// Parameters, padding excluded.
    pub params: u64,
    /// The flat parameter buffer, padding included.
    pub param_bytes: u64,
    /// The flat gradient buffer; 0 for inference.
    pub grad_bytes: u64,
    /// Forward activations, the loss head, hash codes and buckets, position indices: what the
    /// model built for inference allocates besides its parameters.
    pub activation_bytes: u64,
    /// Backward scratch and variance probes: what training adds besides gradients; 0 for
    /// inference.
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
    pub largest_buffer: String,
    /// The largest buffer or parameter view some op binds whole, which must fit one storage
    /// binding on a GPU. The flat parameters, gradients and moments, the vocabulary-sized
    /// tables and the logits are not among them: their ops bind them in windows.
    pub largest_binding_bytes: u64,
    /// What that buffer holds, with the settings it grows with.
    pub largest_binding: String,
}

/// The values of a buffer of `dims`: their product, saturating at usize::MAX, which the
/// estimate refuses, so that a size too large for this machine is never wrapped into a small one.
pub fn values(dims: &[usize]) -> usize {
    dims.iter().fold(1, |n, &d| n.saturating_mul(d))
}

/// The flat parameters.
pub(crate) const PARAMETERS: &str = "the parameters";
/// The flat gradients.
pub(crate) const GRADIENTS: &str = "the gradients";
pub(crate) const FIRST_MOMENTS: &str = "AdamW's first moments";
pub(crate) const SECOND_MOMENTS: &str = "AdamW's second moments";
pub(crate) const LOGITS: &str = "the logits (batch × seq_len × vocab)";
pub(crate) const LOGIT_GRADIENTS: &str = "the logit gradients (batch × seq_len × vocab)";

/// The buffers every op using them binds in windows (AdamW, the norm's sum, the unembedding's
/// matmul and cross-entropy split them), so they may be larger than one binding.
const WINDOWED: [&str; 6] = [
    PARAMETERS,
    GRADIENTS,
    FIRST_MOMENTS,
    SECOND_MOMENTS,
    LOGITS,
    LOGIT_GRADIENTS,
];

/// The largest of `buffers`, the first of equals.
fn largest<'a>(buffers: impl Iterator<Item = &'a Buffer>) -> Option<&'a Buffer> {
    buffers.fold(None, |best, b| match best {
        Some(best) if best.bytes >= b.bytes => Some(best),
        _ => Some(b),
    })
}

/// The bytes a `cfg` model for batches of `b` sequences of `t` tokens allocates when built for
/// `purpose`, with one batch's buffers and, for training, AdamW. Fails, naming the setting, when
/// the config is invalid, the shape does not fit the model, or the sizes overflow this machine's
/// address space.
pub fn estimate(cfg: &ModelConfig, b: usize, t: usize, purpose: Purpose) -> Result<MemoryEstimate> {
    let be = CountingBackend::new();
    let model = cfg.build(&be, b, t, purpose, 0)?;
    let model_bytes = be.allocated_bytes();
    BatchTensors::new(&be, b, t, cfg.vocab())?;
    let batch_end = be.allocated_bytes();
    let layout = &model.store().layout;
    if purpose == Purpose::Train {
        AdamW::new(&be, &TrainConfig::default(), layout)?;
    }
    let bytes = be.allocated_bytes();
    let buffers = be.buffers();
    // u64::MAX is a count that saturated: some size overflowed.
    if bytes == u64::MAX || usize::try_from(bytes).is_err() {
        let what = largest(buffers.iter()).map_or("", |b| b.what.as_str());
        return Err(ModelError::Config(format!(
            "the size of this config's buffers overflows this machine's address space (the largest is {what}); \
             make the model or the batch smaller"
        )));
    }
    // No count saturated, so every difference below is exact.
    let param_bytes = layout.total as u64 * VALUE_BYTES;
    let (grad_bytes, forward_bytes) = match purpose {
        Purpose::Infer => (0, model_bytes),
        // The forward's buffers are what the same model built for inference allocates.
        Purpose::Train => {
            let infer = CountingBackend::new();
            cfg.build(&infer, b, t, Purpose::Infer, 0)?;
            (param_bytes, infer.allocated_bytes())
        }
    };
    let largest_buffer = largest(buffers.iter()).cloned().unwrap_or_default();
    let mut bound = largest(buffers.iter().filter(|b| !WINDOWED.contains(&b.what.as_str())))
        .cloned()
        .unwrap_or_default();
    // Parameter views other than the vocabulary-sized tables are bound whole.
    let (view_values, view) = param_sizes::params(cfg)?.bound;
    let view_bytes = view_values.saturating_mul(VALUE_BYTES);
    if view_bytes > bound.bytes {
        bound = Buffer {
            what: view.to_string(),
            bytes: view_bytes,
        };
    }
    Ok(MemoryEstimate {
        params: layout.count() as u64,
        param_bytes,
        grad_bytes,
        activation_bytes: forward_bytes.saturating_sub(param_bytes),
        backward_bytes: model_bytes.saturating_sub(forward_bytes + grad_bytes),
        optimizer_bytes: bytes - batch_end,
        batch_bytes: batch_end - model_bytes,
        bytes,
        largest_buffer_bytes: largest_buffer.bytes,
        largest_buffer: largest_buffer.what,
        largest_binding_bytes: bound.bytes,
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
        Some((_, dims)) => format!("lower {}", dims.strip_suffix(')').unwrap_or(dims).replace(" × ", ", ")),
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
    use crate::{Position, RmtConfig, TransformerConfig};

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
    fn a_binding_over_the_limit_names_the_settings_to_lower() {
        let est = MemoryEstimate {
            largest_binding_bytes: 2 << 20,
            largest_binding: "the bucket sort's cursor (K × 2^(tau+e))".into(),
            ..Default::default()
        };
        assert!(check_binding_limit(&est, 2 << 20).is_ok());
        let err = check_binding_limit(&est, 1 << 20).unwrap_err().to_string();
        assert!(err.contains("2.0 MiB for the bucket sort's cursor"), "{err}");
        assert!(err.contains("lower K, 2^(tau+e)"), "{err}");
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
