//! What a result was made with: the commit the binary was built from and the machine it ran
//! on, as a sweep's summary records them.

use serde::{Deserialize, Serialize};

/// The commit of the binary's sources (`build.rs`): a short hash, "-dirty" where tracked files
/// differed from it, or "unknown".
pub const COMMIT: &str = env!("RESMEM_COMMIT");

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Machine {
    /// The CPU's model name where the OS says it.
    pub cpu: Option<String>,
    /// Threads the CPU backend may use.
    pub threads: usize,
    pub os: String,
    pub arch: String,
}

pub fn machine() -> Machine {
    let cpu = std::fs::read_to_string("/proc/cpuinfo").ok().and_then(|text| {
        text.lines()
            .find(|l| l.starts_with("model name"))
            .and_then(|l| l.split_once(':'))
            .map(|(_, v)| v.trim().to_string())
    });
    Machine {
        cpu,
        threads: std::thread::available_parallelism().map_or(1, usize::from),
        os: std::env::consts::OS.to_string(),
        arch: std::env::consts::ARCH.to_string(),
    }
}
