//! The physical peaks of the devices resmem has been (or may well be) measured on, from NVIDIA's
//! datasheets, so that `resmem bench` can say how much of the hardware a kernel family uses
//! rather than how it compares with resmem's own matmul (issue 41, "Honest figures").
//!
//! A device is found by its adapter's name as NVIDIA's Vulkan driver reports it (the name
//! `nvidia-smi` and CUDA give too): "NVIDIA H100 80GB HBM3" is the SXM5 card, "NVIDIA H100
//! PCIe" the PCIe one. The match is exact (up to case and runs of spaces): a name not listed —
//! the CPU, lavapipe, a browser, the NVL cards, any GPU not in [`TABLE`] — has no physical
//! peaks, and the bench reports against its measured ones.
//!
//! Tensor-core figures are dense: the datasheets' headline figures are with 2:4 structured
//! sparsity, twice these. Where the datasheet rounds (67 TFLOP/s), the figure is the
//! architecture whitepaper's (66.9).

use serde::Serialize;

/// One device's peaks, in the bench report's units (GFLOP/s, GB/s).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Physical {
    /// The device as its datasheet names it, e.g. "NVIDIA H100 SXM".
    pub device: &'static str,
    /// Where the figures come from.
    pub source: &'static str,
    /// f32 FMA on the CUDA cores: every f32 kernel's ceiling, the strict class's products too.
    pub f32_gflops: f64,
    /// TF32 multiplicands on the tensor cores, dense (PyTorch's `allow_tf32`).
    pub tf32_tensor_gflops: f64,
    /// f16 or bf16 multiplicands into f32 accumulators on the tensor cores, dense: the fast
    /// class's products.
    pub f16_tensor_gflops: f64,
    /// The memory's kind, e.g. "HBM3".
    pub memory: &'static str,
    pub memory_gbps: f64,
}

impl Physical {
    /// The FLOP/s ceiling of a family's products: the dense f16/bf16 tensor-core peak where they
    /// run on tensor cores (`tensor`: the fast class's matmul and attention), else the f32 peak.
    pub fn flops_gflops(&self, tensor: bool) -> f64 {
        if tensor {
            self.f16_tensor_gflops
        } else {
            self.f32_gflops
        }
    }

    /// What [`Self::flops_gflops`] is, in a report's words.
    pub fn flops_reference(tensor: bool) -> &'static str {
        if tensor {
            "physical f16 tensor"
        } else {
            "physical f32"
        }
    }
}

const H100_DATASHEET: &str = "NVIDIA H100 Tensor Core GPU datasheet (2023) and H100 architecture whitepaper";

/// An A100: every form factor has the datasheet's compute; memory and its bandwidth differ.
const fn a100(device: &'static str, memory: &'static str, memory_gbps: f64) -> Physical {
    Physical {
        device,
        source: "NVIDIA A100 Tensor Core GPU datasheet (2021)",
        f32_gflops: 19_500.0,
        tf32_tensor_gflops: 156_000.0,
        f16_tensor_gflops: 312_000.0,
        memory,
        memory_gbps,
    }
}

/// The devices with known peaks, each under the adapter names it goes by.
pub const TABLE: &[(&[&str], Physical)] = &[
    // NVIDIA H100 Tensor Core GPU datasheet, "H100 SXM" column: FP32 67 TFLOP/s, TF32 tensor
    // 989 and BF16/FP16 tensor 1,979 with sparsity, 3.35 TB/s; the whitepaper's table of H100
    // SXM5 against A100 gives 66.9, 494.7 and 989.4 dense.
    (
        &["NVIDIA H100 80GB HBM3"],
        Physical {
            device: "NVIDIA H100 SXM",
            source: H100_DATASHEET,
            f32_gflops: 66_900.0,
            tf32_tensor_gflops: 494_700.0,
            f16_tensor_gflops: 989_400.0,
            memory: "HBM3",
            memory_gbps: 3_350.0,
        },
    ),
    // The same datasheet, "H100 PCIe" column: FP32 51 TFLOP/s, TF32 756 and FP16 1,513 with
    // sparsity, 2 TB/s; the whitepaper's H100 PCIe: 51.2, 378 and 756 dense.
    (
        &["NVIDIA H100 PCIe"],
        Physical {
            device: "NVIDIA H100 PCIe",
            source: H100_DATASHEET,
            f32_gflops: 51_200.0,
            tf32_tensor_gflops: 378_000.0,
            f16_tensor_gflops: 756_000.0,
            memory: "HBM2e",
            memory_gbps: 2_000.0,
        },
    ),
    // NVIDIA H200 Tensor Core GPU datasheet, "H200 SXM" column: the H100 SXM's compute (FP32 67
    // TFLOP/s, TF32 989 and FP16 1,979 with sparsity) with 141 GB of HBM3e at 4.8 TB/s. Not the
    // H200 NVL ("NVIDIA H200 NVL"), whose compute is lower.
    (
        &["NVIDIA H200"],
        Physical {
            device: "NVIDIA H200 SXM",
            source: "NVIDIA H200 Tensor Core GPU datasheet (2024)",
            f32_gflops: 66_900.0,
            tf32_tensor_gflops: 494_700.0,
            f16_tensor_gflops: 989_400.0,
            memory: "HBM3e",
            memory_gbps: 4_800.0,
        },
    ),
    // NVIDIA A100 Tensor Core GPU datasheet: FP32 19.5 TFLOP/s, TF32 tensor 156 and BF16/FP16
    // tensor 312 dense (312 and 624 with sparsity), for every form factor; memory bandwidth
    // 2,039 GB/s (80GB SXM), 1,555 GB/s (40GB SXM and PCIe), 1,935 GB/s (80GB PCIe).
    (
        &["NVIDIA A100-SXM4-80GB"],
        a100("NVIDIA A100 SXM 80GB", "HBM2e", 2_039.0),
    ),
    (
        &["NVIDIA A100-SXM4-40GB"],
        a100("NVIDIA A100 SXM 40GB", "HBM2", 1_555.0),
    ),
    (
        &["NVIDIA A100 80GB PCIe"],
        a100("NVIDIA A100 PCIe 80GB", "HBM2e", 1_935.0),
    ),
    (
        &["NVIDIA A100-PCIE-40GB"],
        a100("NVIDIA A100 PCIe 40GB", "HBM2", 1_555.0),
    ),
];

/// The peaks of the adapter named `name` (wgpu's `AdapterInfo::name`), None where the table
/// does not list it.
pub fn for_adapter(name: &str) -> Option<&'static Physical> {
    let name = normal(name);
    TABLE
        .iter()
        .find(|(names, _)| names.iter().any(|n| normal(n) == name))
        .map(|(_, peaks)| peaks)
}

/// The peaks of the device a backend describes itself as (`Backend::describe`: "gpu (NVIDIA
/// H100 80GB HBM3, Vulkan)"); None on the CPU and for unlisted adapters.
pub fn for_backend(description: &str) -> Option<&'static Physical> {
    adapter_name(description).and_then(for_adapter)
}

/// The adapter's name in a GPU backend's description "gpu (NAME, BACKEND)"; the name may hold
/// parentheses and commas of its own (lavapipe's "llvmpipe (LLVM 17.0.6, 256 bits)").
pub fn adapter_name(description: &str) -> Option<&str> {
    let inner = description.strip_prefix("gpu (")?.strip_suffix(')')?;
    inner.rsplit_once(", ").map(|(name, _backend)| name)
}

/// A name compared up to case and runs of spaces.
fn normal(name: &str) -> String {
    name.split_whitespace().collect::<Vec<_>>().join(" ").to_lowercase()
}

/// `achieved` over `peak`; 0 where the peak is unknown or not positive, so that a share is
/// always finite.
pub fn share(achieved: f64, peak: f64) -> f64 {
    if peak > 0.0 && peak.is_finite() && achieved.is_finite() {
        achieved / peak
    } else {
        0.0
    }
}

/// A family's rates set against a peak: the device's physical one where it is known, its
/// measured one otherwise.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Against {
    pub of_flops_peak: f64,
    /// "physical f32", "physical f16 tensor" or "measured matmul".
    pub flops_reference: &'static str,
    pub of_memory_peak: f64,
    /// "physical memory" or "measured stream".
    pub memory_reference: &'static str,
}

/// `gflops` and `gbps` against `physical`'s peaks where given (the f16 tensor peak for FLOP/s
/// where `tensor`, else the f32 one), else against the measured `matmul_gflops` and
/// `stream_gbps`.
pub fn against(
    gflops: f64,
    gbps: f64,
    physical: Option<&Physical>,
    tensor: bool,
    matmul_gflops: f64,
    stream_gbps: f64,
) -> Against {
    match physical {
        Some(p) => Against {
            of_flops_peak: share(gflops, p.flops_gflops(tensor)),
            flops_reference: Physical::flops_reference(tensor),
            of_memory_peak: share(gbps, p.memory_gbps),
            memory_reference: "physical memory",
        },
        None => Against {
            of_flops_peak: share(gflops, matmul_gflops),
            flops_reference: "measured matmul",
            of_memory_peak: share(gbps, stream_gbps),
            memory_reference: "measured stream",
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_adapter_names_find_their_datasheets() {
        let device = |name: &str| for_adapter(name).map(|p| p.device);
        assert_eq!(device("NVIDIA H100 80GB HBM3"), Some("NVIDIA H100 SXM"));
        assert_eq!(device("NVIDIA H100 PCIe"), Some("NVIDIA H100 PCIe"));
        assert_eq!(device("NVIDIA H200"), Some("NVIDIA H200 SXM"));
        assert_eq!(device("NVIDIA A100-SXM4-80GB"), Some("NVIDIA A100 SXM 80GB"));
        // Up to case and spaces.
        assert_eq!(device("  nvidia h100  80GB hbm3 "), Some("NVIDIA H100 SXM"));

        // f32, TF32 tensor, f16 tensor (GFLOP/s, dense) and memory (GB/s), as the datasheets give.
        for (name, want) in [
            ("NVIDIA H100 80GB HBM3", (66_900.0, 494_700.0, 989_400.0, 3_350.0)),
            ("NVIDIA H100 PCIe", (51_200.0, 378_000.0, 756_000.0, 2_000.0)),
            ("NVIDIA H200", (66_900.0, 494_700.0, 989_400.0, 4_800.0)),
            ("NVIDIA A100-SXM4-80GB", (19_500.0, 156_000.0, 312_000.0, 2_039.0)),
        ] {
            let p = for_adapter(name).unwrap();
            let got = (p.f32_gflops, p.tf32_tensor_gflops, p.f16_tensor_gflops, p.memory_gbps);
            assert_eq!(got, want, "{name}");
        }
        // Every entry is sane: dense tensor peaks above f32, f16 twice TF32.
        for (names, p) in TABLE {
            assert!(!names.is_empty() && !p.source.is_empty(), "{}", p.device);
            assert!(p.f32_gflops > 0.0 && p.memory_gbps > 0.0, "{}", p.device);
            assert!(p.tf32_tensor_gflops > p.f32_gflops, "{}", p.device);
            assert!(
                (p.f16_tensor_gflops / p.tf32_tensor_gflops - 2.0).abs() < 0.01,
                "{}",
                p.device
            );
        }
    }

    #[test]
    fn unknown_adapter_names_have_no_physical_peaks() {
        for name in [
            "",
            "NVIDIA H100",
            "NVIDIA H100 NVL",
            "NVIDIA H200 NVL",
            "NVIDIA GH200 480GB",
            "NVIDIA H100 80GB HBM3 (extra)",
            "NVIDIA GeForce RTX 4090",
            "llvmpipe (LLVM 17.0.6, 256 bits)",
            "SwiftShader Device (Subzero)",
            "WebGPU adapter",
            "H100",
        ] {
            assert_eq!(for_adapter(name), None, "{name:?}");
        }
    }

    #[test]
    fn a_backends_description_names_its_adapter() {
        assert_eq!(
            adapter_name("gpu (NVIDIA H100 80GB HBM3, Vulkan)"),
            Some("NVIDIA H100 80GB HBM3")
        );
        assert_eq!(
            adapter_name("gpu (llvmpipe (LLVM 17.0.6, 256 bits), Vulkan)"),
            Some("llvmpipe (LLVM 17.0.6, 256 bits)")
        );
        assert_eq!(adapter_name("cpu (f32, 2 threads, avx2 build)"), None);
        assert_eq!(
            for_backend("gpu (NVIDIA H200, Vulkan)").map(|p| p.device),
            Some("NVIDIA H200 SXM")
        );
        assert_eq!(for_backend("gpu (llvmpipe (LLVM 17.0.6, 256 bits), Vulkan)"), None);
        assert_eq!(for_backend("cpu (f32, 2 threads, avx2 build)"), None);
    }

    #[test]
    fn shares_are_of_the_physical_peak_where_known_else_of_the_measured() {
        // A family at 16,000 GFLOP/s and 1,488 GB/s on an H100 whose measured matmul peak is
        // 15,075 GFLOP/s (bench/RESULTS.md, 2026-11-26): 106% of that, but 23.9% of the H100
        // SXM's f32 peak.
        let h100 = for_adapter("NVIDIA H100 80GB HBM3");
        let physical = against(16_000.0, 1_488.0, h100, false, 15_075.0, 1_500.0);
        assert!((physical.of_flops_peak - 16_000.0 / 66_900.0).abs() < 1e-12);
        assert!((physical.of_flops_peak - 0.2392).abs() < 1e-4);
        assert_eq!(physical.flops_reference, "physical f32");
        assert!((physical.of_memory_peak - 1_488.0 / 3_350.0).abs() < 1e-12);
        assert_eq!(physical.memory_reference, "physical memory");

        // The fast class's products against the f16 tensor peak.
        let tensor = against(150_000.0, 1_488.0, h100, true, 15_075.0, 1_500.0);
        assert!((tensor.of_flops_peak - 150_000.0 / 989_400.0).abs() < 1e-12);
        assert_eq!(tensor.flops_reference, "physical f16 tensor");
        assert_eq!(tensor.of_memory_peak, physical.of_memory_peak);

        // An unknown device: the measured peaks, whatever `tensor` says.
        for tensor in [false, true] {
            let measured = against(16_000.0, 1_488.0, None, tensor, 15_075.0, 1_500.0);
            assert!((measured.of_flops_peak - 16_000.0 / 15_075.0).abs() < 1e-12);
            assert_eq!(measured.flops_reference, "measured matmul");
            assert!((measured.of_memory_peak - 1_488.0 / 1_500.0).abs() < 1e-12);
            assert_eq!(measured.memory_reference, "measured stream");
        }

        // A share is finite even against a missing peak.
        assert_eq!(share(1.0, 0.0), 0.0);
        assert_eq!(share(1.0, f64::NAN), 0.0);
        assert_eq!(share(0.0, 10.0), 0.0);
        assert_eq!(share(5.0, 10.0), 0.5);
    }
}
