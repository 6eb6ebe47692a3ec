//! The GPU context, built once: device, queue, pipeline cache and the list of pending launches.

use super::{Arg, Dispatch, GpuTensor, VIEW_ALIGN};
use crate::shaders::{self, Define};
use crate::{EngineError, Result};
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use wgpu::util::DeviceExt;

/// Limits lower than the device's own, so that tests reach the split and folded launches at
/// small shapes (`None` keeps the device's limit), and adapter features left unused, so that
/// tests compare the kernels that use them with those that do not on one adapter.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GpuOptions {
    /// Bytes one storage binding may hold.
    pub max_binding_bytes: Option<u64>,
    /// Workgroups per grid dimension before a 1-D launch folds into a second dimension.
    pub max_groups_per_dim: Option<u32>,
    /// Run the plain kernels even where the adapter has subgroups: what a browser runs.
    pub no_subgroups: bool,
    /// Leave timestamp queries off even where the adapter has them, so that a profile replays
    /// each kernel family alone instead (`profile::Profiled`).
    pub no_timestamps: bool,
    /// Values that replace a family's constant of the same name in every shader that has one:
    /// a kernel built another way, such as the deliberately wrong one the selftest's own test
    /// must catch.
    pub overrides: &'static [Define],
    /// Measure the candidates of tunable ops on their first launch of each shape and use the
    /// fastest (`tuning.rs`); off, each runs its default. Natively only: the browser never waits
    /// for the device.
    pub tune: bool,
    /// Sum the long, narrow products (the weight gradients aᵀ·b, K every token, few tiles of
    /// out) in K slices side by side, then the slices in order (`ops::matmul`): more workgroups
    /// for a large GPU, and other bits than one chain over K. Their partials take one 16 MiB
    /// buffer. Off until measured on a GPU.
    pub k_slices: bool,
    /// Keep the guard wgpu puts on every shader loop by default (a 64-bit counter that ends it
    /// after 2^64 turns, so that a driver may not assume an endless loop away). It keeps
    /// drivers from counting a loop's turns, so from unrolling it (gfx-rs/wgpu#7698): off,
    /// since resmem's shaders are its own and every loop of theirs ends by its bounds. On, an
    /// A/B of its cost (`resmem bench --loop-guards`). The browser applies its own rules.
    pub loop_guards: bool,
    /// The numeric class of the matrix products (`crate::precision`). Fast runs them on
    /// cooperative matrices where the adapter has them, and the strict kernels elsewhere
    /// ([`GpuBackend::fast_unavailable`] says why).
    pub precision: crate::Precision,
    /// With the fast class, where the adapter has f16 but no cooperative matrices, run the fast
    /// kernels with the cooperative built-ins emulated by scalar loops: tests of the kernels'
    /// staging, scaling and edges on lavapipe. Slower than strict; never for training.
    pub emulate_cooperative: bool,
}

impl GpuOptions {
    /// The device's own limits and every feature it offers ([`Default`], usable in a const).
    pub const DEFAULT: Self = Self {
        max_binding_bytes: None,
        max_groups_per_dim: None,
        no_subgroups: false,
        no_timestamps: false,
        overrides: &[],
        tune: false,
        k_slices: false,
        loop_guards: false,
        precision: crate::Precision::Strict,
        emulate_cooperative: false,
    };
}

pub struct GpuBackend {
    pub(crate) device: wgpu::Device,
    pub(crate) queue: wgpu::Queue,
    pub(crate) description: String,
    /// The adapter is a CPU emulating a GPU (llvmpipe, lavapipe, SwiftShader).
    pub(crate) emulated: bool,
    /// The adapter's own limits, which the device was created with.
    pub(crate) limits: wgpu::Limits,
    /// Values one storage binding may hold: the device's limit or a lower one from
    /// [`GpuOptions`], a multiple of [`VIEW_ALIGN`]. Ops split larger operands into launches.
    pub(crate) binding_values: usize,
    /// Workgroups per grid dimension, past which 1-D launches fold (`grid_1d`).
    pub(crate) max_groups: u32,
    /// Whether the device was created with subgroups, which kernels with a subgroup variant
    /// (matmul, the switch [`shaders::SUBGROUPS`]) then use.
    pub(crate) subgroups: bool,
    /// [`GpuOptions::overrides`].
    overrides: &'static [Define],
    /// wgpu's checks compiled into every shader: all of them, but the loop guards unless
    /// [`GpuOptions::loop_guards`].
    checks: wgpu::ShaderRuntimeChecks,
    /// Whether the device was created with timestamp queries (`timing.rs`).
    pub(crate) timestamps: bool,
    /// [`GpuOptions::k_slices`].
    pub(crate) k_slices: bool,
    /// The K slices' partial outs, one buffer every sliced product shares in turn, made on the
    /// first (`ops::matmul`).
    pub(crate) k_slice_partials: RefCell<Option<GpuTensor>>,
    /// The tunable ops' choices (`tuning.rs`).
    pub(crate) tuner: RefCell<super::tuning::Tuner>,
    /// The adapter, driver and build the choices hold for.
    pub(crate) tuning_key: String,
    /// Compiled pipelines by (shader, entry point, defines): each variant of a shader is compiled
    /// once per context, and each of its entry points made a pipeline once.
    pipelines: RefCell<HashMap<PipelineKey, wgpu::ComputePipeline>>,
    /// Compiled modules by (shader, defines).
    modules: RefCell<HashMap<ModuleKey, wgpu::ShaderModule>>,
    /// Launches recorded since the last flush, encoded into one command buffer by `flush`.
    pub(crate) pending: RefCell<Vec<Dispatch>>,
    /// Readback staging buffers by size, reused so that logging a loss allocates nothing.
    pub(crate) staging: RefCell<HashMap<u64, wgpu::Buffer>>,
    /// The first error the device raised outside an error scope, reported at the next flush.
    pub(crate) error: Arc<Mutex<Option<String>>>,
    lost: Arc<Mutex<Option<String>>>,
    /// The partial sums of `sum`'s first launch, shared by every sum: launches run in order.
    sum_partials: GpuTensor,
    /// The fast class's shared buffers, where the device runs it.
    pub(crate) fast: Option<super::fast::FastState>,
    /// Why the fast class was asked for and is not available here.
    fast_unavailable: Option<String>,
    /// The adapter's cooperative-matrix configurations.
    cooperative_configurations: Vec<String>,
}

/// A pipeline's key, as web-rwkv keys its own: the shader (an op family), the entry point, and
/// the variant's defines: every switch of the shader with its value ([`shaders::Shader::variant`],
/// one form per variant). The defines every variant shares (tile sizes…) are part of the shader.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct PipelineKey {
    shader: &'static str,
    entry: &'static str,
    defines: Box<[Define]>,
}

/// A module's key: the shader and the variant's defines, as in [`PipelineKey`].
type ModuleKey = (&'static str, Box<[Define]>);

/// The process's one wgpu instance. NVIDIA's Vulkan driver (580, on an H200) refuses the 31st
/// instance a process creates, even after the others are gone, so a sweep or a test binary that
/// makes many backends shares one.
#[cfg(not(target_arch = "wasm32"))]
fn instance() -> wgpu::Instance {
    static INSTANCE: std::sync::OnceLock<wgpu::Instance> = std::sync::OnceLock::new();
    INSTANCE
        .get_or_init(|| wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle_from_env()))
        .clone()
}

#[cfg(target_arch = "wasm32")]
fn instance() -> wgpu::Instance {
    wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle())
}

/// The adapter [`GpuBackend::new`] would take, without making a device: its name, and whether
/// it is a CPU emulating a GPU (llvmpipe, lavapipe, SwiftShader). None where there is none.
pub async fn probe_adapter() -> Option<(String, bool)> {
    let adapter = instance()
        .request_adapter(&wgpu::RequestAdapterOptions {
            power_preference: wgpu::PowerPreference::HighPerformance,
            ..Default::default()
        })
        .await
        .ok()?;
    let info = adapter.get_info();
    Some((info.name, info.device_type == wgpu::DeviceType::Cpu))
}

impl GpuBackend {
    /// Finds an adapter and creates a device with the adapter's own limits.
    pub async fn new() -> Result<Self> {
        Self::with_options(GpuOptions::default()).await
    }

    /// Like [`Self::new`], with the binding size and the folding threshold lowered to `options`
    /// (never raised past the device's): the same results through more, smaller launches.
    pub async fn with_options(options: GpuOptions) -> Result<Self> {
        let adapter = instance()
            .request_adapter(&wgpu::RequestAdapterOptions {
                power_preference: wgpu::PowerPreference::HighPerformance,
                ..Default::default()
            })
            .await
            .map_err(|e| EngineError::NoAdapter(e.to_string()))?;
        let info = adapter.get_info();
        let limits = adapter.limits();
        // Only what the adapter offers: browsers and SwiftShader have no subgroups, and not every
        // adapter has timestamp queries.
        let subgroups = adapter.features().contains(wgpu::Features::SUBGROUP) && !options.no_subgroups;
        let timestamps = adapter.features().contains(wgpu::Features::TIMESTAMP_QUERY) && !options.no_timestamps;
        let mut features = wgpu::Features::empty();
        features.set(wgpu::Features::SUBGROUP, subgroups);
        features.set(wgpu::Features::TIMESTAMP_QUERY, timestamps);
        let fast = super::fast::support(&adapter, options.precision, options.emulate_cooperative);
        features |= fast.features;
        let experimental_features = if fast.features.contains(wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX) {
            // SAFETY: wgpu asks whoever enables an experimental feature to accept that it may
            // still have bugs with undefined behaviour; the fast class is asked for by name, and
            // its kernels are checked against their CPU twin by `resmem selftest`.
            unsafe { wgpu::ExperimentalFeatures::enabled() }
        } else {
            wgpu::ExperimentalFeatures::disabled()
        };
        let (device, queue) = adapter
            .request_device(&wgpu::DeviceDescriptor {
                label: Some("resmem"),
                required_features: features,
                required_limits: limits.clone(),
                experimental_features,
                memory_hints: wgpu::MemoryHints::Performance,
                trace: wgpu::Trace::Off,
            })
            .await
            .map_err(|e| EngineError::NoDevice(e.to_string()))?;
        let error = Arc::new(Mutex::new(None));
        let sink = error.clone();
        device.on_uncaptured_error(Arc::new(move |e: wgpu::Error| {
            let mut slot = sink.lock().unwrap();
            if slot.is_none() {
                *slot = Some(e.to_string());
            }
        }));
        let lost = Arc::new(Mutex::new(None));
        let sink = lost.clone();
        device.set_device_lost_callback(move |reason, message| {
            *sink.lock().unwrap() = Some(format!("{reason:?}: {message}"));
        });
        let name = if info.name.is_empty() {
            "WebGPU adapter".to_string()
        } else {
            info.name.clone()
        };
        let sum_partials = GpuTensor {
            buffer: device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("sum partials"),
                size: (crate::ops::optim::SUM_BLOCKS * 4) as u64,
                usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            }),
            offset: 0,
            len: crate::ops::optim::SUM_BLOCKS,
        };
        // Natively and in the browser the device has the adapter's real limits; the binding size
        // is what one launch may see, the buffer size what may be allocated at all.
        let binding_bytes = limits
            .max_storage_buffer_binding_size
            .min(limits.max_buffer_size)
            .min(options.max_binding_bytes.unwrap_or(u64::MAX));
        let binding_values = (binding_bytes / 4) as usize / VIEW_ALIGN * VIEW_ALIGN;
        let max_groups = limits
            .max_compute_workgroups_per_dimension
            .min(options.max_groups_per_dim.unwrap_or(u32::MAX))
            .max(1);
        let tuning_key = format!(
            "{name} | {:?} | {} {} | kernels {:08x}",
            info.backend,
            info.driver,
            info.driver_info,
            crate::shaders::digest()
        );
        let tuner = super::tuning::Tuner::new(options.tune && cfg!(not(target_arch = "wasm32")));
        let mut backend = Self {
            tuner: RefCell::new(tuner),
            tuning_key,
            binding_values,
            max_groups,
            subgroups,
            overrides: options.overrides,
            checks: wgpu::ShaderRuntimeChecks {
                force_loop_bounding: options.loop_guards,
                ..wgpu::ShaderRuntimeChecks::checked()
            },
            timestamps,
            k_slices: options.k_slices,
            k_slice_partials: RefCell::default(),
            sum_partials,
            description: format!("gpu ({name}, {:?})", info.backend),
            emulated: info.device_type == wgpu::DeviceType::Cpu,
            device,
            queue,
            limits,
            pipelines: RefCell::default(),
            modules: RefCell::default(),
            pending: RefCell::default(),
            staging: RefCell::default(),
            error,
            lost,
            fast: None,
            fast_unavailable: fast.unavailable,
            cooperative_configurations: fast.configurations,
        };
        if let Some(kernels) = &fast.kernels {
            backend.fast = Some(super::fast::FastState::new(&backend, kernels)?);
        }
        Ok(backend)
    }

    /// Why the fast class, asked for, runs the strict kernels on this device; None when it runs
    /// or was not asked for.
    pub fn fast_unavailable(&self) -> Option<&str> {
        self.fast_unavailable.as_deref()
    }

    /// Whether the fast class runs on emulated cooperative built-ins
    /// ([`GpuOptions::emulate_cooperative`]).
    pub fn fast_emulated(&self) -> bool {
        self.fast.as_ref().is_some_and(|f| !f.coop)
    }

    /// The adapter's cooperative-matrix configurations, as `16×16×16 f16·f16→f32`: empty on
    /// adapters without them (and in the browser).
    pub fn cooperative_configurations(&self) -> &[String] {
        &self.cooperative_configurations
    }

    pub(crate) fn sum_partials(&self) -> GpuTensor {
        self.sum_partials.clone()
    }

    /// A zeroed storage buffer of `len` 4-byte values, checked against the device's buffer size.
    /// It may exceed one binding: ops bind such buffers in windows. Its size is rounded up to
    /// 16 bytes, so that a kernel may read any tensor in it as vec4s (matmul).
    pub(crate) fn storage_buffer(&self, what: &str, len: usize) -> Result<wgpu::Buffer> {
        // Saturating: a size past u64 (a model built without its estimate) is refused, not wrapped.
        let bytes = (len.max(1) as u64).saturating_mul(4).saturating_add(15) / 16 * 16;
        let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
        if bytes > self.limits.max_buffer_size {
            return Err(EngineError::TooBig {
                what: what.into(),
                needed_mib: mib(bytes),
                limit_mib: mib(self.limits.max_buffer_size),
                kind: "buffer",
            });
        }
        Ok(self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(what),
            size: bytes,
            usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: false,
        }))
    }

    /// Queue writes land before the next submission, so work already recorded is submitted
    /// first: a write then means what it says on both backends, "after everything before it".
    pub(crate) fn write_bytes(&self, buffer: &wgpu::Buffer, offset: u64, bytes: &[u8]) {
        if !self.pending.borrow().is_empty() {
            self.submit_pending();
        }
        self.queue.write_buffer(buffer, offset, bytes);
    }

    fn pipeline(&self, shader: &'static str, entry: &'static str, defines: &[Define]) -> wgpu::ComputePipeline {
        let family = shaders::shader(shader);
        let key = PipelineKey {
            shader,
            entry,
            defines: family.variant(defines).into(),
        };
        if let Some(p) = self.pipelines.borrow().get(&key) {
            return p.clone();
        }
        let module = self
            .modules
            .borrow_mut()
            .entry((shader, key.defines.clone()))
            .or_insert_with(|| {
                let desc = wgpu::ShaderModuleDescriptor {
                    label: Some(shader),
                    source: wgpu::ShaderSource::Wgsl(family.source_with(&key.defines, self.overrides).into()),
                };
                // SAFETY: the one check `self.checks` may leave out is the loop guard, which
                // only stands between a driver and an endless loop; every loop in shaders/ is a
                // `for` whose bound is a constant or a uniform and whose step is a nonzero
                // constant, a halving to 0 or a count down to 1 (tests/shaders_valid.rs checks
                // that shape).
                unsafe { self.device.create_shader_module_trusted(desc, self.checks) }
            })
            .clone();
        let pipeline = self.device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some(entry),
            layout: None,
            module: &module,
            entry_point: Some(entry),
            compilation_options: Default::default(),
            cache: None,
        });
        self.pipelines.borrow_mut().insert(key, pipeline.clone());
        pipeline
    }

    /// Records one launch of `shader::entry` in the shader's default variant. `params` become
    /// the uniform at binding 0; `args` are the storage buffers at bindings 1, 2, … in the op's
    /// argument order.
    pub(crate) fn dispatch(
        &self,
        shader: &'static str,
        entry: &'static str,
        params: &[u32],
        args: &[Arg<'_>],
        groups: [u32; 3],
    ) {
        self.dispatch_with(shader, entry, &[], params, args, groups)
    }

    /// Like [`Self::dispatch`], in the variant with the switches `defines` set.
    pub(crate) fn dispatch_with(
        &self,
        shader: &'static str,
        entry: &'static str,
        defines: &[Define],
        params: &[u32],
        args: &[Arg<'_>],
        groups: [u32; 3],
    ) {
        let numbered: Vec<(u32, Arg<'_>)> = args.iter().enumerate().map(|(i, a)| (i as u32 + 1, *a)).collect();
        self.dispatch_with_at(shader, entry, defines, params, &numbered, groups)
    }

    /// Like [`Self::dispatch`], with each storage binding's number given explicitly, for entry
    /// points that use only some of their family's bindings.
    pub(crate) fn dispatch_at(
        &self,
        shader: &'static str,
        entry: &'static str,
        params: &[u32],
        args: &[(u32, Arg<'_>)],
        groups: [u32; 3],
    ) {
        self.dispatch_with_at(shader, entry, &[], params, args, groups)
    }

    /// Like [`Self::dispatch_at`], in the variant with the switches `defines` set.
    pub(crate) fn dispatch_with_at(
        &self,
        shader: &'static str,
        entry: &'static str,
        defines: &[Define],
        params: &[u32],
        args: &[(u32, Arg<'_>)],
        groups: [u32; 3],
    ) {
        // A binding past the limit or a grid past the device's would be a validation error with
        // no word of which op or buffer; say which instead, at the next flush.
        let cap = self.binding_values as u64 * 4;
        if let Some((i, a)) = args.iter().find(|(_, a)| a.size_bytes > cap) {
            let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
            return self.refuse(format!(
                "`{entry}` would bind {:.1} MiB at binding {i}, over this device's {:.1} MiB for one storage \
                 binding; this op does not split that operand, so make the model or the batch smaller",
                mib(a.size_bytes),
                mib(cap)
            ));
        }
        let device_groups = self.limits.max_compute_workgroups_per_dimension;
        if groups.iter().any(|&g| g > device_groups) {
            return self.refuse(format!(
                "`{entry}` needs {groups:?} workgroups, over this device's {device_groups} per dimension; \
                 make the model or the batch smaller"
            ));
        }
        let pipeline = self.pipeline(shader, entry, defines);
        // Uniform structs are padded to 16 bytes; at least 16 words, so that entry points that
        // read fewer fields than their family's struct (sum_final, adamw) still bind all of it.
        let mut words = params.to_vec();
        words.resize(params.len().next_multiple_of(4).max(16), 0);
        let uniform = self.device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
            label: Some(entry),
            contents: bytemuck::cast_slice(&words),
            usage: wgpu::BufferUsages::UNIFORM,
        });
        let mut entries = vec![wgpu::BindGroupEntry {
            binding: 0,
            resource: uniform.as_entire_binding(),
        }];
        for &(binding, a) in args {
            entries.push(wgpu::BindGroupEntry {
                binding,
                resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                    buffer: a.buffer,
                    offset: a.offset_bytes,
                    size: std::num::NonZeroU64::new(a.size_bytes),
                }),
            });
        }
        let bind_group = self.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some(entry),
            layout: &pipeline.get_bind_group_layout(0),
            entries: &entries,
        });
        self.pending.borrow_mut().push(Dispatch {
            pipeline,
            bind_group,
            groups,
            kernel: (shader, entry),
        });
    }

    /// Encodes every pending launch into one compute pass and submits it.
    pub(crate) fn submit_pending(&self) {
        let pending = std::mem::take(&mut *self.pending.borrow_mut());
        if !pending.is_empty() {
            self.submit(&pending);
        }
    }

    /// Encodes `launches` into one compute pass and submits it.
    pub(crate) fn submit(&self, launches: &[Dispatch]) {
        let mut encoder = self
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("step") });
        {
            let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
                label: Some("step"),
                timestamp_writes: None,
            });
            for d in launches {
                pass.set_pipeline(&d.pipeline);
                pass.set_bind_group(0, &d.bind_group, &[]);
                pass.dispatch_workgroups(d.groups[0], d.groups[1], d.groups[2]);
            }
        }
        self.queue.submit([encoder.finish()]);
    }

    /// Records an op that cannot run as asked; the next flush reports it and nothing runs wrong.
    pub(crate) fn refuse(&self, message: String) {
        let mut slot = self.error.lock().unwrap();
        if slot.is_none() {
            *slot = Some(message);
        }
    }

    pub(crate) fn take_error(&self) -> Result<()> {
        if let Some(reason) = self.lost.lock().unwrap().clone() {
            return Err(EngineError::DeviceLost(reason));
        }
        match self.error.lock().unwrap().take() {
            Some(e) => Err(EngineError::Gpu(e)),
            None => Ok(()),
        }
    }

    /// Why the device was lost, once it has been: every later launch fails, and the page must
    /// make a new backend (`Backend::lost`).
    pub(crate) fn lost_reason(&self) -> Option<String> {
        self.lost.lock().unwrap().clone()
    }

    /// A function that destroys this device, as a driver reset would: lets a test (and the
    /// page's own check) exercise the recovery from a lost device.
    pub fn destroyer(&self) -> impl Fn() + 'static {
        let device = self.device.clone();
        move || device.destroy()
    }

    /// The largest number of f32 values one storage binding may hold on this device (or the
    /// lower limit of [`GpuOptions`]). Ops that split their operands go past it.
    pub fn max_binding_values(&self) -> usize {
        self.binding_values
    }

    /// Workgroups per grid dimension before a launch folds or splits.
    pub(crate) fn max_groups(&self) -> u32 {
        self.max_groups
    }

    /// The largest number of f32 values one buffer may hold on this device (in whole vec4s:
    /// buffers are allocated in multiples of 16 bytes).
    pub fn max_buffer_values(&self) -> usize {
        (self.limits.max_buffer_size / 16 * 4) as usize
    }

    /// Whether the adapter is a CPU emulating a GPU (wgpu's `DeviceType::Cpu`: llvmpipe,
    /// lavapipe, SwiftShader), which is slower than the CPU backend.
    pub fn emulated(&self) -> bool {
        self.emulated
    }

    /// Whether kernels with a subgroup variant use it: the adapter has subgroups and
    /// [`GpuOptions::no_subgroups`] is off.
    pub fn subgroups(&self) -> bool {
        self.subgroups
    }

    /// Workgroup counts for `n` items of `per_group` each, folded into 2-D past `max_groups` in
    /// one dimension: the one folding every 1-D launch uses. Shaders recover the flat index
    /// with `flat_index` ([`shaders::WG`] threads a group) or `flat_group` (one item a group).
    pub(crate) fn grid_1d(&self, n: usize, per_group: usize) -> [u32; 3] {
        let groups = n.div_ceil(per_group).max(1);
        let x = groups.min(self.max_groups as usize);
        [x as u32, groups.div_ceil(x) as u32, 1]
    }

    /// Splits `n` values into consecutive ranges of whole `unit`s (the last may be short) that
    /// each fit one binding: the launches of an op over a buffer larger than a binding. Every
    /// range starts at a multiple of `unit`; `unit` must be a multiple of [`VIEW_ALIGN`], so
    /// views at those starts are aligned. None when one unit alone is over the binding limit.
    pub(crate) fn split(&self, n: usize, unit: usize) -> Option<Vec<std::ops::Range<usize>>> {
        debug_assert!(unit.is_multiple_of(VIEW_ALIGN));
        let per = self.binding_values / unit * unit;
        if per == 0 {
            return None;
        }
        Some((0..n.max(1)).step_by(per).map(|s| s..(s + per).min(n)).collect())
    }
}
