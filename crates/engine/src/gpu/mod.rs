//! The wgpu backend: the ops of [`Backend`] as WGSL compute shaders, natively and in the browser.
//!
//! One context is built once: device, queue, a pipeline cache keyed by (shader, entry point,
//! defines), and staging buffers for readback. Ops do not run when called: each appends a [`Dispatch`] to the
//! pending list, and [`Backend::flush`] encodes the list into one command buffer. A training step
//! is recorded once into a [`GpuPlan`] and replayed, so a step allocates nothing.

mod context;
mod fast;
mod readback;
mod timing;
mod tuning;

use crate::{Backend, EngineError, Result};
pub use context::{probe_adapter, GpuBackend, GpuOptions};
use std::future::Future;
pub use tuning::{Candidate, Choice};

pub use crate::VIEW_ALIGN;

/// A view of f32 values in a GPU buffer.
#[derive(Clone, Debug)]
pub struct GpuTensor {
    pub(crate) buffer: wgpu::Buffer,
    /// In values, a multiple of [`VIEW_ALIGN`].
    pub(crate) offset: usize,
    pub(crate) len: usize,
}

/// A view of u32 values in a GPU buffer.
#[derive(Clone, Debug)]
pub struct GpuIndex {
    pub(crate) buffer: wgpu::Buffer,
    /// In values, a multiple of [`VIEW_ALIGN`]: non-zero only in an op's own windows.
    pub(crate) offset: usize,
    pub(crate) len: usize,
}

impl GpuIndex {
    /// `len` indices from `offset` (a multiple of [`VIEW_ALIGN`]), for ops that bind a large
    /// index in windows.
    pub(crate) fn window(&self, offset: usize, len: usize) -> GpuIndex {
        crate::check_view(offset, len, self.len);
        GpuIndex {
            buffer: self.buffer.clone(),
            offset: self.offset + offset,
            len,
        }
    }
}

/// One recorded kernel launch: everything needed to encode it again.
#[derive(Clone)]
pub struct Dispatch {
    pipeline: wgpu::ComputePipeline,
    bind_group: wgpu::BindGroup,
    groups: [u32; 3],
    /// The shader and entry point: `resmem bench` names each launch's time by them.
    kernel: (&'static str, &'static str),
}

/// A recorded list of launches over fixed buffers, replayed every step.
pub struct GpuPlan {
    dispatches: Vec<Dispatch>,
}

impl GpuPlan {
    pub fn len(&self) -> usize {
        self.dispatches.len()
    }
    pub fn is_empty(&self) -> bool {
        self.dispatches.is_empty()
    }
    /// The launches at the indices `keep` accepts, as a plan of their own: `resmem bench` times
    /// one kernel family by replaying it alone.
    pub fn filtered(&self, keep: impl Fn(usize) -> bool) -> GpuPlan {
        let dispatches = (self.dispatches.iter().enumerate())
            .filter(|(i, _)| keep(*i))
            .map(|(_, d)| d.clone())
            .collect();
        GpuPlan { dispatches }
    }
    /// Each launch's kernel as `shader::entry`, in launch order.
    pub fn kernels(&self) -> Vec<String> {
        (self.dispatches.iter())
            .map(|d| format!("{}::{}", d.kernel.0, d.kernel.1))
            .collect()
    }
}

impl GpuBackend {
    /// Launches recorded since the last submission.
    pub fn pending_launch_count(&self) -> usize {
        self.pending.borrow().len()
    }
}

/// A storage binding: a buffer range handed to a shader, in the order of its `@binding`s.
#[derive(Clone, Copy)]
pub(crate) struct Arg<'a> {
    buffer: &'a wgpu::Buffer,
    offset_bytes: u64,
    size_bytes: u64,
}

pub(crate) trait AsArg {
    fn arg(&self) -> Arg<'_>;
}

impl AsArg for GpuTensor {
    fn arg(&self) -> Arg<'_> {
        Arg {
            buffer: &self.buffer,
            offset_bytes: (self.offset * 4) as u64,
            size_bytes: (self.len.max(1) * 4) as u64,
        }
    }
}

impl GpuTensor {
    /// The tensor's binding rounded up to whole vec4s, for a shader that reads it as
    /// `array<vec4<f32>>`: the values past its end belong to the same buffer, since views
    /// start at multiples of [`VIEW_ALIGN`] and buffers are allocated in multiples of 16 bytes.
    pub(crate) fn vec4_arg(&self) -> Arg<'_> {
        Arg {
            buffer: &self.buffer,
            offset_bytes: (self.offset * 4) as u64,
            size_bytes: (self.len.max(1).next_multiple_of(4) * 4) as u64,
        }
    }
}

impl AsArg for GpuIndex {
    fn arg(&self) -> Arg<'_> {
        Arg {
            buffer: &self.buffer,
            offset_bytes: (self.offset * 4) as u64,
            size_bytes: (self.len.max(1) * 4) as u64,
        }
    }
}

impl Backend for GpuBackend {
    type Tensor = GpuTensor;
    type Index = GpuIndex;
    type Plan = GpuPlan;

    fn describe(&self) -> String {
        self.description.clone()
    }

    fn with_default_kernels<R>(&self, f: impl FnOnce() -> R) -> R {
        let on = std::mem::replace(&mut self.tuner.borrow_mut().on, false);
        let r = f();
        self.tuner.borrow_mut().on = on;
        r
    }

    fn zeros(&self, what: &str, len: usize) -> Result<GpuTensor> {
        let buffer = self.storage_buffer(what, len)?;
        Ok(GpuTensor { buffer, offset: 0, len })
    }

    fn lost(&self) -> Option<String> {
        self.lost_reason()
    }

    fn view(&self, t: &GpuTensor, offset: usize, len: usize) -> GpuTensor {
        crate::check_view(offset, len, t.len);
        GpuTensor {
            buffer: t.buffer.clone(),
            offset: t.offset + offset,
            len,
        }
    }

    fn len(&self, t: &GpuTensor) -> usize {
        t.len
    }

    fn write(&self, t: &GpuTensor, data: &[f32]) {
        crate::check_write(data.len(), t.len);
        self.write_bytes(&t.buffer, (t.offset * 4) as u64, bytemuck::cast_slice(data));
    }

    fn index(&self, what: &str, len: usize) -> Result<GpuIndex> {
        let buffer = self.storage_buffer(what, len)?;
        Ok(GpuIndex { buffer, offset: 0, len })
    }

    fn write_index(&self, t: &GpuIndex, data: &[u32]) {
        assert_eq!(
            data.len(),
            t.len,
            "write of {} indices into an index of {}",
            data.len(),
            t.len
        );
        self.write_bytes(&t.buffer, (t.offset * 4) as u64, bytemuck::cast_slice(data));
    }

    fn read(&self, t: &GpuTensor) -> impl Future<Output = Result<Vec<f32>>> {
        self.read_tensor(t)
    }

    fn read_index(&self, t: &GpuIndex) -> impl Future<Output = Result<Vec<u32>>> {
        let words = self.read_index_list(&[t]);
        async move { Ok(words.await?.swap_remove(0)) }
    }

    fn read_indices(&self, ts: &[&GpuIndex]) -> impl Future<Output = Result<Vec<Vec<u32>>>> {
        self.read_index_list(ts)
    }

    fn flush(&self) -> Result<()> {
        self.submit_pending();
        self.take_error()
    }

    fn precision(&self) -> crate::Precision {
        match self.fast {
            Some(_) => crate::Precision::Fast,
            None => crate::Precision::Strict,
        }
    }

    async fn fast_fault(&self) -> Result<Option<String>> {
        match &self.fast {
            Some(state) => state.fault(self).await,
            None => Ok(None),
        }
    }

    fn record_or_replay(&self, plan: &mut Option<GpuPlan>, record: impl FnOnce()) {
        match plan {
            Some(plan) => self.pending.borrow_mut().extend(plan.dispatches.iter().cloned()),
            None => {
                let start = self.pending.borrow().len();
                record();
                let dispatches = self.pending.borrow()[start..].to_vec();
                *plan = Some(GpuPlan { dispatches });
            }
        }
    }

    crate::backend::declare_ops!(gpu);
}

impl From<wgpu::BufferAsyncError> for EngineError {
    fn from(e: wgpu::BufferAsyncError) -> Self {
        EngineError::Readback(e.to_string())
    }
}
