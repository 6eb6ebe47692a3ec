//! `resmem bench`'s instrument: [`Profiled`] wraps a backend, passes every op through, and
//! books it under its kernel [`Family`] with the FLOPs and bytes its shapes imply; on a backend
//! that runs ops eagerly (the CPU) it also times each op. A recorded plan (the GPU) is timed
//! afterwards: each launch of one replay by the device's timestamp queries where it has them
//! ([`Profiled::time_families`]), or else each family replayed alone ([`Profiled::time_family`]).
//!
//! The FLOPs and bytes of each op come from its file (`ops::<family>::cost`); `crate::cost`
//! states their conventions.

pub use crate::cost::{Cost, Family};
use crate::{Backend, Result};
use std::cell::{Cell, RefCell};
use std::future::Future;
use std::time::Instant;

/// One family's totals since the last [`Profiled::take`].
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Stat {
    pub calls: u64,
    pub flops: f64,
    pub bytes: f64,
    /// Seconds spent in the op calls: the kernels' own time on an eager backend, only the
    /// recording on one that records (the GPU), where [`Profiled::time_family`] times them.
    pub seconds: f64,
}

/// Per family, in the order of [`Family::ALL`].
pub type Table = [Stat; Family::ALL.len()];

/// What the profiler needs from a backend beyond [`Backend`]: how many launches it has
/// recorded, each launch's time from the device's timestamps where it has them, and otherwise
/// a plan cut down to some of its launches, to time one family by replaying it alone. Eager
/// backends record nothing.
pub trait Replay: Backend {
    /// Launches recorded and not yet submitted.
    fn pending_launches(&self) -> usize;
    /// The launches of `plan` at the indices `keep` accepts, as a plan of their own.
    fn subplan(&self, plan: &Self::Plan, keep: &dyn Fn(usize) -> bool) -> Self::Plan;
    /// One replay of `plan` with each launch's seconds, in order, from timestamp queries; None
    /// where the backend has none.
    fn launch_seconds(&self, plan: &Self::Plan) -> Option<impl Future<Output = Result<Vec<f64>>>>;
    /// Each launch's kernel (`shader::entry`), in order; empty on an eager backend.
    fn launch_kernels(&self, plan: &Self::Plan) -> Vec<String>;
}

#[cfg(feature = "cpu")]
impl<T: crate::ops::Scalar> Replay for crate::cpu::CpuBackend<T> {
    fn pending_launches(&self) -> usize {
        0
    }
    fn subplan(&self, _plan: &(), _keep: &dyn Fn(usize) -> bool) {}
    fn launch_seconds(&self, _plan: &()) -> Option<impl Future<Output = Result<Vec<f64>>>> {
        None::<std::future::Ready<Result<Vec<f64>>>>
    }
    fn launch_kernels(&self, _plan: &()) -> Vec<String> {
        Vec::new()
    }
}

impl Replay for crate::gpu::GpuBackend {
    fn pending_launches(&self) -> usize {
        self.pending_launch_count()
    }
    fn subplan(&self, plan: &crate::gpu::GpuPlan, keep: &dyn Fn(usize) -> bool) -> crate::gpu::GpuPlan {
        plan.filtered(keep)
    }
    fn launch_seconds(&self, plan: &crate::gpu::GpuPlan) -> Option<impl Future<Output = Result<Vec<f64>>>> {
        self.timestamps().then(|| self.time_launches(plan))
    }
    fn launch_kernels(&self, plan: &crate::gpu::GpuPlan) -> Vec<String> {
        plan.kernels()
    }
}

/// A replay's seconds from timestamp queries: per family (in the order of [`Family::ALL`]),
/// and per kernel, slowest first.
#[derive(Clone, Debug, PartialEq)]
pub struct LaunchTimes {
    pub families: [f64; Family::ALL.len()],
    pub kernels: Vec<KernelTime>,
}

/// One kernel's launches in a replay, together: what a family's time is made of.
#[derive(Clone, Debug, PartialEq)]
pub struct KernelTime {
    /// `shader::entry`, as `shaders/*.wgsl` names it.
    pub kernel: String,
    pub family: Family,
    pub launches: usize,
    pub seconds: f64,
}

/// A recorded plan with the family of each of its launches.
pub struct ProfiledPlan<P> {
    inner: Option<P>,
    families: Vec<Family>,
}

impl<P> ProfiledPlan<P> {
    /// The families of the plan's launches, in launch order (empty on an eager backend).
    pub fn families(&self) -> &[Family] {
        &self.families
    }
}

/// A backend that books every op under its family; see the module docs.
pub struct Profiled<B: Replay> {
    pub inner: B,
    table: RefCell<Table>,
    /// Bytes of every tensor and index allocated through this wrapper, never decreased.
    allocated: Cell<u64>,
    /// The families of the launches recorded so far into the plan being recorded, if any.
    recording: RefCell<Option<Vec<Family>>>,
}

impl<B: Replay> Profiled<B> {
    pub fn new(inner: B) -> Self {
        Self {
            inner,
            table: RefCell::new([Stat::default(); Family::ALL.len()]),
            allocated: Cell::new(0),
            recording: RefCell::new(None),
        }
    }

    /// The totals since the last call, and a fresh start.
    pub fn take(&self) -> Table {
        std::mem::replace(&mut *self.table.borrow_mut(), [Stat::default(); Family::ALL.len()])
    }

    /// Bytes allocated through this backend so far (tensors at 4 bytes a value, indices too).
    pub fn allocated_bytes(&self) -> u64 {
        self.allocated.get()
    }

    /// Replays the launches of `family` in `plan` alone, `reps` times, each submitted and
    /// waited for (`wait` blocks until the device is idle); the mean seconds per replay. None
    /// when the plan has no launch of the family.
    pub fn time_family(
        &self,
        plan: &ProfiledPlan<B::Plan>,
        family: Family,
        reps: usize,
        wait: &dyn Fn() -> Result<()>,
    ) -> Result<Option<f64>> {
        let Some(inner) = plan.inner.as_ref() else {
            return Ok(None);
        };
        if !plan.families.contains(&family) {
            return Ok(None);
        }
        let mut sub = Some(self.inner.subplan(inner, &|i| plan.families.get(i) == Some(&family)));
        // One untimed replay: the first submission of a plan may compile or page in.
        self.inner.record_or_replay(&mut sub, || {});
        self.inner.flush()?;
        wait()?;
        let start = Instant::now();
        for _ in 0..reps {
            self.inner.record_or_replay(&mut sub, || {});
            self.inner.flush()?;
            wait()?;
        }
        Ok(Some(start.elapsed().as_secs_f64() / reps.max(1) as f64))
    }

    /// Every family's and every kernel's seconds in one replay of `plan`, from the device's
    /// timestamp queries around each launch: the mean of `reps` replays after an untimed one.
    /// None where the backend has no timestamps; [`Self::time_family`] then times each family
    /// by replaying it alone.
    pub async fn time_families(&self, plan: &ProfiledPlan<B::Plan>, reps: usize) -> Result<Option<LaunchTimes>> {
        let Some(inner) = plan.inner.as_ref() else {
            return Ok(None);
        };
        let mut per_launch = vec![0.0; plan.families.len()];
        for rep in 0..=reps.max(1) {
            let Some(timed) = self.inner.launch_seconds(inner) else {
                return Ok(None);
            };
            let launches = timed.await?;
            // The first replay may compile or page in, as in `time_family`.
            if rep > 0 {
                for (total, s) in per_launch.iter_mut().zip(launches) {
                    *total += s / reps.max(1) as f64;
                }
            }
        }
        let mut families = [0.0; Family::ALL.len()];
        let mut kernels: Vec<KernelTime> = Vec::new();
        let names = self.inner.launch_kernels(inner);
        for ((family, s), kernel) in plan.families.iter().zip(per_launch).zip(names) {
            families[family.index()] += s;
            match kernels.iter_mut().find(|k| k.kernel == kernel && k.family == *family) {
                Some(k) => {
                    k.launches += 1;
                    k.seconds += s;
                }
                None => kernels.push(KernelTime {
                    kernel,
                    family: *family,
                    launches: 1,
                    seconds: s,
                }),
            }
        }
        kernels.sort_by(|a, b| b.seconds.total_cmp(&a.seconds));
        Ok(Some(LaunchTimes { families, kernels }))
    }

    /// Runs one op: books its cost, its time, and (while recording) its launches' family.
    fn op<R>(&self, cost: Cost, run: impl FnOnce() -> R) -> R {
        let family = cost.family;
        let before = self.inner.pending_launches();
        let start = Instant::now();
        let r = run();
        let seconds = start.elapsed().as_secs_f64();
        let after = self.inner.pending_launches();
        if let Some(list) = self.recording.borrow_mut().as_mut() {
            list.extend(std::iter::repeat_n(family, after.saturating_sub(before)));
        }
        let s = &mut self.table.borrow_mut()[family.index()];
        s.calls += 1;
        s.flops += cost.flops;
        s.bytes += cost.bytes;
        s.seconds += seconds;
        r
    }
}

impl<B: Replay> Backend for Profiled<B> {
    type Tensor = B::Tensor;
    type Index = B::Index;
    type Plan = ProfiledPlan<B::Plan>;

    fn describe(&self) -> String {
        self.inner.describe()
    }
    fn precision(&self) -> crate::Precision {
        self.inner.precision()
    }
    fn fast_fault(&self) -> impl std::future::Future<Output = Result<Option<String>>> {
        self.inner.fast_fault()
    }
    fn zeros(&self, what: &str, len: usize) -> Result<B::Tensor> {
        let t = self.inner.zeros(what, len)?;
        self.allocated.set(self.allocated.get().saturating_add(len as u64 * 4));
        Ok(t)
    }
    fn view(&self, t: &B::Tensor, offset: usize, len: usize) -> B::Tensor {
        self.inner.view(t, offset, len)
    }
    fn lost(&self) -> Option<String> {
        self.inner.lost()
    }
    fn len(&self, t: &B::Tensor) -> usize {
        self.inner.len(t)
    }
    fn write(&self, t: &B::Tensor, data: &[f32]) {
        self.inner.write(t, data)
    }
    fn index(&self, what: &str, len: usize) -> Result<B::Index> {
        let t = self.inner.index(what, len)?;
        self.allocated.set(self.allocated.get().saturating_add(len as u64 * 4));
        Ok(t)
    }
    fn write_index(&self, t: &B::Index, data: &[u32]) {
        self.inner.write_index(t, data)
    }
    fn read(&self, t: &B::Tensor) -> impl Future<Output = Result<Vec<f32>>> {
        self.inner.read(t)
    }
    fn read_index(&self, t: &B::Index) -> impl Future<Output = Result<Vec<u32>>> {
        self.inner.read_index(t)
    }
    fn read_indices(&self, ts: &[&B::Index]) -> impl Future<Output = Result<Vec<Vec<u32>>>> {
        self.inner.read_indices(ts)
    }
    fn flush(&self) -> Result<()> {
        self.inner.flush()
    }
    fn record_or_replay(&self, plan: &mut Option<Self::Plan>, record: impl FnOnce()) {
        match plan {
            // An eager backend runs `record` again; a recording one replays its plan.
            Some(p) => self.inner.record_or_replay(&mut p.inner, record),
            None => {
                *self.recording.borrow_mut() = Some(Vec::new());
                let mut inner = None;
                self.inner.record_or_replay(&mut inner, record);
                let families = self.recording.borrow_mut().take().unwrap_or_default();
                *plan = Some(ProfiledPlan { inner, families });
            }
        }
    }

    crate::backend::declare_ops!(profiled);
}
