use thiserror::Error;

/// Everything that can go wrong in the engine, worded for the person who has to act on it.
#[derive(Debug, Error)]
pub enum EngineError {
    #[error(
        "no WebGPU adapter was found ({0}). Natively, install a Vulkan driver \
         (on Debian: `apt-get install mesa-vulkan-drivers`) or use `--backend cpu`; \
         in a browser, use one with WebGPU enabled (Chrome/Edge 113+, or Firefox/Safari with WebGPU on)"
    )]
    NoAdapter(String),
    #[error("the GPU refused to create a device: {0}")]
    NoDevice(String),
    #[error(
        "this config needs a buffer of {needed_mib:.1} MiB for `{what}`, but the device allows at most \
         {limit_mib:.1} MiB per {kind}. Make the model or the batch smaller (fewer layers, a smaller width, \
         a shorter sequence or a smaller batch)"
    )]
    TooBig {
        what: String,
        needed_mib: f64,
        limit_mib: f64,
        kind: &'static str,
    },
    #[error(
        "this config needs {needed_mib:.1} MiB for `{what}`, more than this machine can allocate. Make the \
         model or the batch smaller (fewer layers, a smaller width, a shorter sequence or a smaller batch)"
    )]
    OutOfMemory { what: String, needed_mib: f64 },
    #[error("the GPU reported an error: {0}")]
    Gpu(String),
    #[error("the GPU device was lost ({0}); reload the page or restart the run to create a new one")]
    DeviceLost(String),
    #[error("reading results back from the GPU failed: {0}")]
    Readback(String),
    #[error("{0}")]
    Invalid(String),
}

pub type Result<T, E = EngineError> = std::result::Result<T, E>;
