//! The architectures the page offers, each from its `tiny-ARCH` training preset, and what each
//! has for the page to show (variance probes, hash tables).

use models::RunConfig;

/// The architectures the page offers, each starting from its `tiny-ARCH` training preset.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Arch {
    Transformer,
    Rmt,
    MemoryFormer,
    Hybrid,
}

impl Arch {
    pub const ALL: [Arch; 4] = [Arch::Transformer, Arch::Rmt, Arch::MemoryFormer, Arch::Hybrid];

    /// The `arch` of its config.
    pub fn name(self) -> &'static str {
        match self {
            Arch::Transformer => "transformer",
            Arch::Rmt => "rmt",
            Arch::MemoryFormer => "memoryformer",
            Arch::Hybrid => "hybrid",
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Arch::Transformer => "Transformer",
            Arch::Rmt => "Residual Matrix Transformer",
            Arch::MemoryFormer => "MemoryFormer",
            Arch::Hybrid => "Hybrid: RMT with a memory block",
        }
    }

    pub fn parse(s: &str) -> Option<Arch> {
        Arch::ALL.into_iter().find(|a| a.name() == s)
    }

    /// Its storages and retrievals (the transformer's linear maps in their places) have
    /// variance probes and a closed form.
    pub fn has_variance(self) -> bool {
        matches!(self, Arch::Rmt | Arch::Hybrid | Arch::Transformer)
    }

    /// It has hash tables whose buckets the page can show.
    pub fn has_buckets(self) -> bool {
        matches!(self, Arch::MemoryFormer | Arch::Hybrid)
    }

    /// The `tiny-ARCH` preset: the model and the copy task at T = 16, batch 32, 300 steps.
    pub fn preset(self) -> RunConfig {
        RunConfig::preset(&format!("tiny-{}", self.name())).expect("every architecture has a tiny preset")
    }
}
