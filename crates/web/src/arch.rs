//! The page's architectures are `models::Arch` (names, labels, capabilities); each starts from
//! its `tiny-ARCH` training preset.

pub use models::Arch;
use models::RunConfig;

/// The `tiny-ARCH` preset: the model and the copy task at T = 16, batch 32, 300 steps.
pub fn tiny_preset(arch: Arch) -> RunConfig {
    RunConfig::preset(&arch.tiny_preset()).expect("every architecture has a tiny preset")
}
