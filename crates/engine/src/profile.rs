//! `resmem bench`'s instrument: [`Profiled`] wraps a backend, passes every op through, and
//! books it under its kernel [`Family`] with the FLOPs and bytes its shapes imply; on a backend
//! that runs ops eagerly (the CPU) it also times each op. A recorded plan (the GPU) is timed
//! afterwards: each launch of one replay by the device's timestamp queries where it has them
//! ([`Profiled::time_families`]), or else each family replayed alone ([`Profiled::time_family`]).
//!
//! FLOPs follow `models::count`'s conventions, so a forward pass's matmul, attention, retrieval,
//! storage and memory-layer FLOPs add up to the model counter's forward FLOPs: 2 per
//! multiply-add of a product, over the causal triangle only, 3 per attention probability; a
//! retrieval's normalisation on read, a storage's residual add and an accumulating matmul's add
//! are left out as the counter leaves norms and adds out. A backward counts the useful products,
//! twice its forward's, not what a kernel recomputes. Bytes are the least traffic the op needs:
//! each input read once, each output written once (read too when accumulated), 4 bytes a value.
//! The elementwise, norm, cross-entropy and AdamW counts are per-value conventions (e.g. 8 FLOPs
//! a GELU) good for a rate, not an exact count.

use crate::{
    AdamWDims, AttentionDims, Backend, CrossEntropyDims, EmbeddingDims, GatherDims, MatmulDims, MemoryDims, NormDims,
    ResidualDims, Result,
};
use std::cell::{Cell, RefCell};
use std::future::Future;
use std::time::Instant;

/// The kernel families `resmem bench` reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Family {
    Matmul,
    Attention,
    Retrieval,
    Storage,
    KeyGrad,
    Norm,
    Memory,
    Embedding,
    CrossEntropy,
    AdamW,
    Elementwise,
}

impl Family {
    pub const ALL: [Family; 11] = [
        Family::Matmul,
        Family::Attention,
        Family::Retrieval,
        Family::Storage,
        Family::KeyGrad,
        Family::Norm,
        Family::Memory,
        Family::Embedding,
        Family::CrossEntropy,
        Family::AdamW,
        Family::Elementwise,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Family::Matmul => "matmul",
            Family::Attention => "attention",
            Family::Retrieval => "retrieval",
            Family::Storage => "storage",
            Family::KeyGrad => "key_grad",
            Family::Norm => "norm",
            Family::Memory => "memory_layer",
            Family::Embedding => "embedding",
            Family::CrossEntropy => "cross_entropy",
            Family::AdamW => "adamw",
            Family::Elementwise => "elementwise",
        }
    }

    /// Whether `models::count` counts this family's FLOPs (it leaves out norms, the loss, the
    /// embedding's gathers, the optimiser and adds). The key gradient has no forward, but it is
    /// the backward's share of retrieval and storage.
    pub fn in_model_count(self) -> bool {
        matches!(
            self,
            Family::Matmul | Family::Attention | Family::Retrieval | Family::Storage | Family::KeyGrad | Family::Memory
        )
    }

    fn index(self) -> usize {
        Family::ALL.iter().position(|&f| f == self).unwrap_or(0)
    }
}

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

    /// Every family's seconds in one replay of `plan` (in the order of [`Family::ALL`]), from
    /// the device's timestamp queries around each launch: the mean of `reps` replays after an
    /// untimed one. None where the backend has no timestamps; [`Self::time_family`] then times
    /// each family by replaying it alone.
    pub async fn time_families(
        &self,
        plan: &ProfiledPlan<B::Plan>,
        reps: usize,
    ) -> Result<Option<[f64; Family::ALL.len()]>> {
        let Some(inner) = plan.inner.as_ref() else {
            return Ok(None);
        };
        let mut seconds = [0.0; Family::ALL.len()];
        for rep in 0..=reps.max(1) {
            let Some(timed) = self.inner.launch_seconds(inner) else {
                return Ok(None);
            };
            let launches = timed.await?;
            // The first replay may compile or page in, as in `time_family`.
            if rep > 0 {
                for (family, s) in plan.families.iter().zip(launches) {
                    seconds[family.index()] += s / reps.max(1) as f64;
                }
            }
        }
        Ok(Some(seconds))
    }

    /// Runs one op: books its cost, its time, and (while recording) its launches' family.
    fn op<R>(&self, family: Family, flops: f64, bytes: f64, run: impl FnOnce() -> R) -> R {
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
        s.flops += flops;
        s.bytes += bytes;
        s.seconds += seconds;
        r
    }
}

/// Values as f64, for cost formulas that must not overflow.
fn f(x: usize) -> f64 {
    x as f64
}

/// 4 bytes a value.
const W: f64 = 4.0;

/// The causal triangle of one (batch, head): T(T+1)/2 (query, key) pairs.
fn causal(d: &AttentionDims) -> f64 {
    f(d.b * d.h) * f(d.t) * (f(d.t) + 1.0) / 2.0
}

fn attention_forward_flops(d: &AttentionDims) -> f64 {
    causal(d) * (4.0 * f(d.dh) + 3.0)
}

fn residual_flops(d: &ResidualDims) -> f64 {
    2.0 * f(d.tokens) * f(d.keys) * f(d.dk) * f(d.dv)
}

fn residual_bytes(d: &ResidualDims, matrices_written: f64) -> f64 {
    W * (f(d.matrices()) * (1.0 + matrices_written) + f(d.vectors()) + f(d.key_values()))
}

impl<B: Replay> Backend for Profiled<B> {
    type Tensor = B::Tensor;
    type Index = B::Index;
    type Plan = ProfiledPlan<B::Plan>;

    fn describe(&self) -> String {
        self.inner.describe()
    }
    fn zeros(&self, what: &str, len: usize) -> Result<B::Tensor> {
        let t = self.inner.zeros(what, len)?;
        self.allocated.set(self.allocated.get().saturating_add(len as u64 * 4));
        Ok(t)
    }
    fn view(&self, t: &B::Tensor, offset: usize, len: usize) -> B::Tensor {
        self.inner.view(t, offset, len)
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

    fn fill(&self, out: &B::Tensor, value: f32) {
        let n = f(self.inner.len(out));
        self.op(Family::Elementwise, 0.0, W * n, || self.inner.fill(out, value))
    }
    fn add(&self, out: &B::Tensor, a: &B::Tensor, b: &B::Tensor) {
        let n = f(self.inner.len(out));
        self.op(Family::Elementwise, n, 3.0 * W * n, || self.inner.add(out, a, b))
    }
    fn add_assign(&self, out: &B::Tensor, a: &B::Tensor) {
        let n = f(self.inner.len(out));
        self.op(Family::Elementwise, n, 3.0 * W * n, || self.inner.add_assign(out, a))
    }
    fn gelu_forward(&self, out: &B::Tensor, x: &B::Tensor) {
        let n = f(self.inner.len(out));
        self.op(Family::Elementwise, 8.0 * n, 2.0 * W * n, || {
            self.inner.gelu_forward(out, x)
        })
    }
    fn gelu_backward(&self, dx: &B::Tensor, dout: &B::Tensor, x: &B::Tensor) {
        let n = f(self.inner.len(dx));
        self.op(Family::Elementwise, 14.0 * n, 3.0 * W * n, || {
            self.inner.gelu_backward(dx, dout, x)
        })
    }
    fn matmul(&self, out: &B::Tensor, a: &B::Tensor, b: &B::Tensor, d: MatmulDims) {
        let flops = 2.0 * f(d.batch) * f(d.m) * f(d.n) * f(d.k);
        let reads = |stride: usize, size: usize| if stride == 0 { f(size) } else { f(d.batch) * f(size) };
        let c = f(d.batch) * f(d.m) * f(d.n);
        let bytes = W
            * (reads(d.stride_a, d.m * d.k) + reads(d.stride_b, d.k * d.n) + c * if d.accumulate { 2.0 } else { 1.0 });
        self.op(Family::Matmul, flops, bytes, || self.inner.matmul(out, a, b, d))
    }
    fn embedding_forward(
        &self,
        out: &B::Tensor,
        tokens: &B::Index,
        wte: &B::Tensor,
        wpe: &B::Tensor,
        d: EmbeddingDims,
    ) {
        let rows = f(d.bt) * f(d.c);
        self.op(Family::Embedding, rows, W * (3.0 * rows + f(d.bt)), || {
            self.inner.embedding_forward(out, tokens, wte, wpe, d)
        })
    }
    fn embedding_backward(
        &self,
        dwte: &B::Tensor,
        dwpe: &B::Tensor,
        dout: &B::Tensor,
        bucket_rows: &B::Index,
        bucket_start: &B::Index,
        d: EmbeddingDims,
    ) {
        let rows = f(d.bt) * f(d.c);
        let bytes = W * (2.0 * rows + f(d.v) * f(d.c) + f(d.t) * f(d.c) + f(d.bt) + f(d.v));
        self.op(Family::Embedding, 2.0 * rows, bytes, || {
            self.inner
                .embedding_backward(dwte, dwpe, dout, bucket_rows, bucket_start, d)
        })
    }
    fn gather_forward(&self, out: &B::Tensor, index: &B::Index, table: &B::Tensor, d: GatherDims) {
        // A copy: no FLOPs; each row's index and values read, its values written.
        let rows = f(d.rows) * f(d.c);
        self.op(Family::Embedding, 0.0, W * (2.0 * rows + f(d.rows)), || {
            self.inner.gather_forward(out, index, table, d)
        })
    }
    fn gather_backward(
        &self,
        dtable: &B::Tensor,
        dout: &B::Tensor,
        bucket_rows: &B::Index,
        bucket_start: &B::Index,
        d: GatherDims,
    ) {
        // One add a gathered value; dout and the buckets read, the table's gradient written.
        let rows = f(d.rows) * f(d.c);
        let bytes = W * (rows + f(d.v) * f(d.c) + f(d.rows) + f(d.v) + 1.0);
        self.op(Family::Embedding, rows, bytes, || {
            self.inner.gather_backward(dtable, dout, bucket_rows, bucket_start, d)
        })
    }
    fn norm_forward(&self, out: &B::Tensor, stats: &B::Tensor, x: &B::Tensor, gain: &B::Tensor, d: NormDims) {
        let n = f(d.rows) * f(d.c);
        self.op(Family::Norm, 7.0 * n, W * (2.0 * n + f(d.c) + 2.0 * f(d.rows)), || {
            self.inner.norm_forward(out, stats, x, gain, d)
        })
    }
    fn norm_stats(&self, stats: &B::Tensor, x: &B::Tensor, d: NormDims) {
        let n = f(d.rows) * f(d.c);
        self.op(Family::Norm, 3.0 * n, W * (n + 2.0 * f(d.rows)), || {
            self.inner.norm_stats(stats, x, d)
        })
    }
    fn norm_backward(
        &self,
        dx: &B::Tensor,
        dgain: &B::Tensor,
        dout: &B::Tensor,
        x: &B::Tensor,
        gain: &B::Tensor,
        stats: &B::Tensor,
        d: NormDims,
    ) {
        let n = f(d.rows) * f(d.c);
        // dout and x read, dx read and written; the gain and its gradient; the stats.
        let bytes = W * (4.0 * n + 2.0 * f(d.c) + 2.0 * f(d.rows));
        self.op(Family::Norm, 12.0 * n, bytes, || {
            self.inner.norm_backward(dx, dgain, dout, x, gain, stats, d)
        })
    }
    fn attention_forward(&self, out: &B::Tensor, lse: &B::Tensor, qkv: &B::Tensor, doc: &B::Index, d: AttentionDims) {
        let v = f(d.b) * f(d.t) * f(d.h) * f(d.dh);
        let bytes = W * (4.0 * v + f(d.rows()) + f(d.b) * f(d.t));
        self.op(Family::Attention, attention_forward_flops(&d), bytes, || {
            self.inner.attention_forward(out, lse, qkv, doc, d)
        })
    }
    fn attention_backward(
        &self,
        dqkv: &B::Tensor,
        delta: &B::Tensor,
        dout: &B::Tensor,
        out: &B::Tensor,
        qkv: &B::Tensor,
        lse: &B::Tensor,
        doc: &B::Index,
        d: AttentionDims,
    ) {
        let v = f(d.b) * f(d.t) * f(d.h) * f(d.dh);
        // dout, out and qkv read, dqkv written; lse read, delta written and read.
        let bytes = W * (8.0 * v + 3.0 * f(d.rows()) + f(d.b) * f(d.t));
        self.op(Family::Attention, 2.0 * attention_forward_flops(&d), bytes, || {
            self.inner.attention_backward(dqkv, delta, dout, out, qkv, lse, doc, d)
        })
    }
    fn retrieve(&self, y: &B::Tensor, x: &B::Tensor, keys: &B::Tensor, d: ResidualDims) {
        self.op(Family::Retrieval, residual_flops(&d), residual_bytes(&d, 0.0), || {
            self.inner.retrieve(y, x, keys, d)
        })
    }
    fn retrieve_normed(
        &self,
        y: &B::Tensor,
        x: &B::Tensor,
        stats: &B::Tensor,
        gain: &B::Tensor,
        keys: &B::Tensor,
        d: ResidualDims,
    ) {
        let bytes = residual_bytes(&d, 0.0) + W * (2.0 * f(d.tokens) + f(d.dk * d.dv));
        self.op(Family::Retrieval, residual_flops(&d), bytes, || {
            self.inner.retrieve_normed(y, x, stats, gain, keys, d)
        })
    }
    fn store(&self, out: &B::Tensor, base: Option<&B::Tensor>, keys: &B::Tensor, data: &B::Tensor, d: ResidualDims) {
        // The output is written, and read first: from `base`, or itself when accumulating.
        self.op(Family::Storage, residual_flops(&d), residual_bytes(&d, 1.0), || {
            self.inner.store(out, base, keys, data, d)
        })
    }
    fn key_grad(&self, dkeys: &B::Tensor, partials: &B::Tensor, a: &B::Tensor, b: &B::Tensor, d: ResidualDims) {
        self.op(Family::KeyGrad, residual_flops(&d), residual_bytes(&d, 0.0), || {
            self.inner.key_grad(dkeys, partials, a, b, d)
        })
    }
    fn key_grad_normed(
        &self,
        dkeys: &B::Tensor,
        partials: &B::Tensor,
        a: &B::Tensor,
        x: &B::Tensor,
        stats: &B::Tensor,
        gain: &B::Tensor,
        d: ResidualDims,
    ) {
        let bytes = residual_bytes(&d, 0.0) + W * (2.0 * f(d.tokens) + f(d.dk * d.dv));
        self.op(Family::KeyGrad, residual_flops(&d), bytes, || {
            self.inner.key_grad_normed(dkeys, partials, a, x, stats, gain, d)
        })
    }
    fn memory_hash(&self, codes: &B::Index, p: &B::Tensor, x: &B::Tensor, d: MemoryDims) {
        let (rows, hashed) = (f(d.tokens), f(d.k) * f(d.tau));
        self.op(
            Family::Memory,
            2.0 * rows * hashed,
            W * rows * (hashed + 2.0 * f(d.k)),
            || self.inner.memory_hash(codes, p, x, d),
        )
    }
    fn memory_bucket(&self, rows: &B::Index, starts: &B::Index, cursor: &B::Index, codes: &B::Index, d: MemoryDims) {
        let bytes = W * (2.0 * f(d.tokens) * f(d.k) + f(d.starts_len()));
        self.op(Family::Memory, 0.0, bytes, || {
            self.inner.memory_bucket(rows, starts, cursor, codes, d)
        })
    }
    fn memory_forward(
        &self,
        y: &B::Tensor,
        codes: &B::Index,
        p: &B::Tensor,
        tables: &B::Tensor,
        bias: &B::Tensor,
        d: MemoryDims,
    ) {
        let (rows, k, out) = (f(d.tokens), f(d.k), f(d.d_out));
        let flops = rows * (2.0 * k * out + out);
        // Codes and p read, one table row gathered per (row, table), y written, the bias.
        let bytes = W * (rows * (2.0 * k + k * out + out) + out);
        self.op(Family::Memory, flops, bytes, || {
            self.inner.memory_forward(y, codes, p, tables, bias, d)
        })
    }
    fn memory_backward(
        &self,
        dx: &B::Tensor,
        dtables: &B::Tensor,
        dbias: &B::Tensor,
        dy: &B::Tensor,
        x: &B::Tensor,
        codes: &B::Index,
        p: &B::Tensor,
        rows: &B::Index,
        starts: &B::Index,
        tables: &B::Tensor,
        d: MemoryDims,
    ) {
        let (n, k, out) = (f(d.tokens), f(d.k), f(d.d_out));
        // Table gradient p·dy and input gradient ⟨dy, T[code]⟩: twice the forward's products.
        let flops = n * (4.0 * k * out + out + 4.0 * k * f(d.tau));
        let bytes = W * (n * (3.0 * out + 2.0 * k * out + 4.0 * k + f(d.d_in)) + f(d.table_values()) + out);
        self.op(Family::Memory, flops, bytes, || {
            self.inner
                .memory_backward(dx, dtables, dbias, dy, x, codes, p, rows, starts, tables, d)
        })
    }
    fn cross_entropy_forward(
        &self,
        losses: &B::Tensor,
        lse: &B::Tensor,
        logits: &B::Tensor,
        targets: &B::Index,
        scale: &B::Tensor,
        d: CrossEntropyDims,
    ) {
        let n = f(d.rows) * f(d.v);
        self.op(Family::CrossEntropy, 4.0 * n, W * (n + 3.0 * f(d.rows)), || {
            self.inner.cross_entropy_forward(losses, lse, logits, targets, scale, d)
        })
    }
    fn cross_entropy_backward(
        &self,
        dlogits: &B::Tensor,
        logits: &B::Tensor,
        lse: &B::Tensor,
        targets: &B::Index,
        scale: &B::Tensor,
        d: CrossEntropyDims,
    ) {
        let n = f(d.rows) * f(d.v);
        self.op(Family::CrossEntropy, 5.0 * n, W * (2.0 * n + 2.0 * f(d.rows)), || {
            self.inner
                .cross_entropy_backward(dlogits, logits, lse, targets, scale, d)
        })
    }
    fn sum(&self, out: &B::Tensor, x: &B::Tensor, squares: bool) {
        let n = f(self.inner.len(x));
        // Σx² is the global gradient norm AdamW clips by; Σx is the mean loss.
        let family = if squares { Family::AdamW } else { Family::CrossEntropy };
        let flops = if squares { 2.0 * n } else { n };
        self.op(family, flops, W * n, || self.inner.sum(out, x, squares))
    }
    fn adamw(
        &self,
        params: &B::Tensor,
        m: &B::Tensor,
        v: &B::Tensor,
        grads: &B::Tensor,
        hyper: &B::Tensor,
        grad_sumsq: &B::Tensor,
        d: AdamWDims,
    ) {
        let n = f(d.n);
        // Parameters and both moments read and written, the gradient read.
        self.op(Family::AdamW, 15.0 * n, 7.0 * W * n, || {
            self.inner.adamw(params, m, v, grads, hyper, grad_sumsq, d)
        })
    }
}
