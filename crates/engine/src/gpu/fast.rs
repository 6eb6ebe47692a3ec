//! The fast class on a device (`crate::precision`): whether the adapter can run it, and the
//! small buffers its products share.

use super::{GpuBackend, GpuIndex, GpuTensor};
use crate::{Precision, Result};
use std::cell::RefCell;

/// How a device runs the fast class.
pub(crate) enum FastKernels {
    /// On cooperative matrices: the adapter lists a subgroup-scope 16×16×16 f16·f16→f32
    /// configuration and its subgroups are all 32 wide.
    Cooperative,
    /// The same kernels with the cooperative built-ins emulated by scalar loops
    /// ([`super::GpuOptions::emulate_cooperative`]): for tests on adapters without them.
    Emulated,
}

/// What the adapter offers for the fast class: the features to request, how its kernels run,
/// or why the class is not available here (the strict kernels run instead).
pub(crate) struct FastSupport {
    pub(crate) features: wgpu::Features,
    pub(crate) kernels: Option<FastKernels>,
    pub(crate) unavailable: Option<String>,
    /// The adapter's cooperative-matrix configurations, as `16×16×16 f16·f16→f32`.
    pub(crate) configurations: Vec<String>,
}

/// The features the cooperative kernels need: f16 in shaders, and the experimental cooperative
/// matrices (which also need wgpu's experimental-features token).
pub(crate) const COOPERATIVE: wgpu::Features =
    wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX.union(wgpu::Features::SHADER_F16);

pub(crate) fn support(adapter: &wgpu::Adapter, precision: Precision, emulate: bool) -> FastSupport {
    let info = adapter.get_info();
    let features = adapter.features();
    let properties = if features.contains(wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX) {
        adapter.cooperative_matrix_properties()
    } else {
        vec![]
    };
    let configurations: Vec<String> = properties
        .iter()
        .map(|p| {
            format!(
                "{}×{}×{} {:?}·{:?}→{:?}{}",
                p.m_size,
                p.n_size,
                p.k_size,
                p.ab_type,
                p.ab_type,
                p.cr_type,
                if p.saturating_accumulation { " saturating" } else { "" }
            )
            .to_lowercase()
        })
        .collect();
    let tile16 = properties.iter().any(|p| {
        (p.m_size, p.n_size, p.k_size) == (16, 16, 16)
            && p.ab_type == wgpu::CooperativeScalarType::F16
            && p.cr_type == wgpu::CooperativeScalarType::F32
    });
    let warp32 = info.subgroup_min_size == 32 && info.subgroup_max_size == 32;
    let none = |why: String| FastSupport {
        features: wgpu::Features::empty(),
        kernels: None,
        unavailable: Some(why),
        configurations: configurations.clone(),
    };
    if precision == Precision::Strict {
        return FastSupport {
            unavailable: None,
            ..none(String::new())
        };
    }
    if features.contains(COOPERATIVE) && tile16 && warp32 {
        return FastSupport {
            features: COOPERATIVE,
            kernels: Some(FastKernels::Cooperative),
            unavailable: None,
            configurations,
        };
    }
    let why = if !features.contains(wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX) {
        "it has no cooperative matrices".to_string()
    } else if !tile16 {
        format!(
            "it lists no 16×16×16 f16·f16→f32 cooperative-matrix configuration (it lists: {})",
            if configurations.is_empty() {
                "none".into()
            } else {
                configurations.join(", ")
            }
        )
    } else if !features.contains(wgpu::Features::SHADER_F16) {
        "it has no f16 in shaders".to_string()
    } else {
        format!(
            "its subgroups are {}–{} wide and the fast kernels need 32",
            info.subgroup_min_size, info.subgroup_max_size
        )
    };
    if emulate && features.contains(wgpu::Features::SHADER_F16) {
        return FastSupport {
            features: wgpu::Features::SHADER_F16,
            kernels: Some(FastKernels::Emulated),
            unavailable: None,
            configurations,
        };
    }
    none(why)
}

/// The buffers every fast product shares in turn (launches run in order): the partial maxima
/// of its operands, its scales, and the fault word, which keeps the smallest number of a product
/// that met a NaN or an infinity.
pub(crate) struct FastState {
    /// Cooperative built-ins (true) or their emulation.
    pub(crate) coop: bool,
    pub(crate) partials: GpuIndex,
    pub(crate) scales: GpuTensor,
    pub(crate) fault: GpuIndex,
    /// Each product shape's number, in the order first launched: what the fault word names.
    products: RefCell<Vec<String>>,
}

/// The fault word when no product has faulted.
const NO_FAULT: u32 = u32::MAX;

impl FastState {
    pub(crate) fn new(gpu: &GpuBackend, kernels: &FastKernels) -> Result<Self> {
        let partials = crate::Backend::index(gpu, "fast-class partial maxima", 2 * crate::ops::matmul::PARTIALS_B)?;
        let scales = crate::Backend::zeros(gpu, "fast-class scales", 4)?;
        let fault = crate::Backend::index(gpu, "fast-class fault", 1)?;
        crate::Backend::write_index(gpu, &fault, &[NO_FAULT]);
        Ok(Self {
            coop: matches!(kernels, FastKernels::Cooperative),
            partials,
            scales,
            fault,
            products: RefCell::default(),
        })
    }

    /// The number of the product shape `class` (the same for every launch of that shape).
    fn product_number(&self, class: String) -> u32 {
        let mut products = self.products.borrow_mut();
        let i = match products.iter().position(|p| *p == class) {
            Some(i) => i,
            None => {
                products.push(class);
                products.len() - 1
            }
        };
        i as u32
    }

    /// The product that faulted, once one has.
    pub(crate) async fn fault(&self, gpu: &GpuBackend) -> Result<Option<String>> {
        let word = crate::Backend::read_index(gpu, &self.fault).await?[0];
        Ok((word != NO_FAULT).then(|| {
            (self.products.borrow().get(word as usize).cloned()).unwrap_or_else(|| format!("product #{word}"))
        }))
    }
}

impl GpuBackend {
    /// The scales of a fast product's two operands, the first `na` values of `a` and `nb` of `b`
    /// (`shaders/fast_scale.wgsl`): each reduced to partial maxima, a window of one binding at a
    /// time, then both into the backend's scales, [2^sA, 2^sB, 2^-sA, 2^-sB], which the product's
    /// launches read next. Launches run in order, so every product shares the one scales buffer.
    /// An operand with a NaN or an infinity marks the fault word with the product `class`.
    pub(crate) fn fast_scales(&self, a: (&GpuTensor, usize), b: (&GpuTensor, usize), class: impl FnOnce() -> String) {
        use crate::gpu::AsArg;
        use crate::ops::matmul::PARTIALS_B;
        use crate::shaders::WG;
        let Some(state) = self.fast.as_ref() else { return };
        let class = class();
        let mut used = [0usize; 2];
        for (side, (x, n)) in [a, b].into_iter().enumerate() {
            let Some(windows) = self.split(n, super::VIEW_ALIGN) else {
                return self.refuse(format!("{class}: an operand cannot be bound"));
            };
            // Each window its share of the side's slots, at least one.
            let share = (PARTIALS_B / windows.len()).max(1);
            for w in windows {
                let len = w.end - w.start;
                let groups = len.div_ceil(WG).clamp(1, share);
                let rounds = len.div_ceil(groups * WG);
                let slot = side * PARTIALS_B + used[side];
                if used[side] + groups > PARTIALS_B {
                    return self.refuse(format!("{class}: an operand is too large to scale"));
                }
                let params = [len, slot, groups, rounds].map(|v| v as u32);
                let x = crate::Backend::view(self, x, w.start, len);
                let args = [(1, x.arg()), (2, state.partials.arg())];
                self.dispatch_with_at("fast_scale", "amax_partial", &[], &params, &args, [groups as u32, 1, 1]);
                used[side] += groups;
            }
        }
        let product = state.product_number(class);
        let params = [0, 0, 0, 0, product, used[0] as u32, used[1] as u32];
        let args = [
            (2, state.partials.arg()),
            (3, state.scales.arg()),
            (4, state.fault.arg()),
        ];
        self.dispatch_with_at("fast_scale", "fast_scales", &[], &params, &args, [1, 1, 1]);
    }
}
