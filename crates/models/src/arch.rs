//! The architectures, known in one place: their names, labels and what each has (a residual
//! matrix, hash tables, variance probes). The CLI's `--arch`, the page's picker, the settings
//! table and the tests' list of architectures all read [`Arch::ALL`].

use serde::Serialize;
use std::fmt;

/// Which architecture: the `arch` tag of a [`crate::ModelConfig`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Arch {
    Transformer,
    Rmt,
    MemoryFormer,
    Hybrid,
    Hc,
    Altup,
    AttnRes,
}

impl Arch {
    pub const ALL: [Arch; 7] = [
        Arch::Transformer,
        Arch::Rmt,
        Arch::MemoryFormer,
        Arch::Hybrid,
        Arch::Hc,
        Arch::Altup,
        Arch::AttnRes,
    ];

    /// The `arch` of its config and the value of `--arch`.
    pub fn name(self) -> &'static str {
        match self {
            Arch::Transformer => "transformer",
            Arch::Rmt => "rmt",
            Arch::MemoryFormer => "memoryformer",
            Arch::Hybrid => "hybrid",
            Arch::Hc => "hc",
            Arch::Altup => "altup",
            Arch::AttnRes => "attnres",
        }
    }

    /// A title for people: the page's picker and the CLI's help.
    pub fn label(self) -> &'static str {
        match self {
            Arch::Transformer => "Transformer",
            Arch::Rmt => "Residual Matrix Transformer",
            Arch::MemoryFormer => "MemoryFormer",
            Arch::Hybrid => "Hybrid: RMT with a memory block",
            Arch::Hc => "Hyper-connections (HC, mHC, mHC-lite): n mixed streams",
            Arch::Altup => "AltUp: K sub-blocks, one computed a layer, the others predicted and corrected",
            Arch::AttnRes => "Block Attention Residuals: each site attends over the depth blocks before it",
        }
    }

    pub fn parse(s: &str) -> Option<Arch> {
        Arch::ALL.into_iter().find(|a| a.name() == s)
    }

    /// Each token's residual is a D_k×D_v matrix, read by retrievals and written by storages.
    pub fn has_residual_matrix(self) -> bool {
        // Every arm named, so that a new architecture must say.
        match self {
            Arch::Rmt | Arch::Hybrid => true,
            Arch::Transformer | Arch::MemoryFormer | Arch::Hc | Arch::Altup | Arch::AttnRes => false,
        }
    }

    /// It has the variance view: probes at its storages and retrievals (the transformer's
    /// linear maps in their places) and their closed form to draw them against. Hyper-connections
    /// have probes (`resmem analyze variance` reads them) but no closed form.
    pub fn has_variance(self) -> bool {
        match self {
            Arch::Transformer | Arch::Rmt | Arch::Hybrid => true,
            Arch::MemoryFormer | Arch::Hc | Arch::Altup | Arch::AttnRes => false,
        }
    }

    /// It has hyper-connections' mixing matrices to read (`observe::mixing`).
    pub fn has_mixing(self) -> bool {
        match self {
            Arch::Hc => true,
            Arch::Transformer | Arch::Rmt | Arch::MemoryFormer | Arch::Hybrid | Arch::Altup | Arch::AttnRes => false,
        }
    }

    /// It reads its residual over depth with learned queries (`observe::depth`).
    pub fn has_depth_reads(self) -> bool {
        match self {
            Arch::AttnRes => true,
            Arch::Transformer | Arch::Rmt | Arch::MemoryFormer | Arch::Hybrid | Arch::Hc | Arch::Altup => false,
        }
    }

    /// Its residual is K sub-blocks, predicted and corrected by learned coefficients
    /// (`observe::altup`).
    pub fn has_sub_blocks(self) -> bool {
        match self {
            Arch::Altup => true,
            Arch::Transformer | Arch::Rmt | Arch::MemoryFormer | Arch::Hybrid | Arch::Hc | Arch::AttnRes => false,
        }
    }

    /// It has hash tables whose bucket use can be read.
    pub fn has_hash_tables(self) -> bool {
        match self {
            Arch::MemoryFormer | Arch::Hybrid => true,
            Arch::Transformer | Arch::Rmt | Arch::Hc | Arch::Altup | Arch::AttnRes => false,
        }
    }

    /// The training preset `--arch` alone starts from: the copy task.
    pub fn tiny_preset(self) -> String {
        format!("tiny-{}", self.name())
    }
}

impl fmt::Display for Arch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
