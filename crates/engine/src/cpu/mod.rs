//! The CPU backend: the readable reference every GPU kernel is tested against, and a usable
//! fallback (`--backend cpu`). Ops run eagerly; rows are split across threads with rayon, and
//! each output value is summed in a fixed order, so results are deterministic.

use crate::ops::{self, Scalar};
use crate::{
    AdamWDims, AttentionDims, Backend, CrossEntropyDims, EmbeddingDims, EngineError, GatherDims, MatmulDims,
    MemoryDims, NormDims, ResidualDims, Result,
};
use std::cell::{Ref, RefCell, RefMut};
use std::marker::PhantomData;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};

/// A view of values in a shared host vector.
#[derive(Clone, Debug)]
pub struct CpuTensor<T> {
    data: Rc<RefCell<Vec<T>>>,
    offset: usize,
    len: usize,
}

impl<T> CpuTensor<T> {
    /// Borrows the values. Panics if the same storage is being written: an op read and wrote one
    /// buffer, which the GPU backend also forbids.
    pub fn get(&self) -> Ref<'_, [T]> {
        Ref::map(self.data.borrow(), |v| &v[self.offset..self.offset + self.len])
    }
    pub fn get_mut(&self) -> RefMut<'_, [T]> {
        RefMut::map(self.data.borrow_mut(), |v| &mut v[self.offset..self.offset + self.len])
    }
}

/// u32 values on the host.
#[derive(Clone, Debug)]
pub struct CpuIndex(Rc<RefCell<Vec<u32>>>);

impl CpuIndex {
    pub fn get(&self) -> Ref<'_, [u32]> {
        Ref::map(self.0.borrow(), |v| v.as_slice())
    }
    pub fn get_mut(&self) -> RefMut<'_, [u32]> {
        RefMut::map(self.0.borrow_mut(), |v| v.as_mut_slice())
    }
}

/// The CPU backend over `T` (f32, or f64 for gradient checks).
#[derive(Default)]
pub struct CpuBackend<T = f32> {
    /// Bytes allocated by `zeros` and `index` so far (never decreased): lets tests compare a
    /// model's memory estimate with what it really allocates.
    allocated: AtomicU64,
    /// The largest single allocation so far, in bytes.
    largest: AtomicU64,
    _values: PhantomData<T>,
}

impl<T: Scalar> CpuBackend<T> {
    pub fn new() -> Self {
        Self {
            allocated: AtomicU64::new(0),
            largest: AtomicU64::new(0),
            _values: PhantomData,
        }
    }

    /// Bytes of every tensor (`size_of::<T>()` a value) and index (4 a value) allocated so far.
    pub fn allocated_bytes(&self) -> u64 {
        self.allocated.load(Ordering::Relaxed)
    }

    /// The largest tensor or index allocated so far, in bytes.
    pub fn largest_allocation_bytes(&self) -> u64 {
        self.largest.load(Ordering::Relaxed)
    }

    fn count(&self, len: usize, value_bytes: usize) {
        let bytes = (len as u64).saturating_mul(value_bytes as u64);
        self.allocated.fetch_add(bytes, Ordering::Relaxed);
        self.largest.fetch_max(bytes, Ordering::Relaxed);
    }
}

/// A zeroed vector, or an error instead of an abort when the allocator refuses it.
fn try_zeroed<V: Clone>(what: &str, len: usize, zero: V) -> Result<Vec<V>> {
    let mut data = Vec::new();
    data.try_reserve_exact(len).map_err(|_| EngineError::OutOfMemory {
        what: what.into(),
        needed_mib: len as f64 * std::mem::size_of::<V>() as f64 / (1024.0 * 1024.0),
    })?;
    data.resize(len, zero);
    Ok(data)
}

impl<T: Scalar> Backend for CpuBackend<T> {
    type Tensor = CpuTensor<T>;
    type Index = CpuIndex;
    type Plan = ();

    fn describe(&self) -> String {
        format!(
            "cpu ({}, {} threads)",
            std::any::type_name::<T>(),
            rayon::current_num_threads()
        )
    }
    fn zeros(&self, what: &str, len: usize) -> Result<CpuTensor<T>> {
        // A config far beyond this machine's memory fails here, with a message, not an abort.
        let data = try_zeroed(what, len, T::zero())?;
        self.count(len, std::mem::size_of::<T>());
        Ok(CpuTensor {
            data: Rc::new(RefCell::new(data)),
            offset: 0,
            len,
        })
    }
    fn view(&self, t: &CpuTensor<T>, offset: usize, len: usize) -> CpuTensor<T> {
        assert!(
            offset + len <= t.len,
            "view {offset}+{len} past the end of a tensor of {}",
            t.len
        );
        CpuTensor {
            data: t.data.clone(),
            offset: t.offset + offset,
            len,
        }
    }
    fn len(&self, t: &CpuTensor<T>) -> usize {
        t.len
    }
    fn write(&self, t: &CpuTensor<T>, data: &[f32]) {
        assert_eq!(
            data.len(),
            t.len,
            "write of {} values into a tensor of {}",
            data.len(),
            t.len
        );
        for (o, &x) in t.get_mut().iter_mut().zip(data) {
            *o = T::of(x as f64);
        }
    }
    fn index(&self, what: &str, len: usize) -> Result<CpuIndex> {
        let data = try_zeroed(what, len, 0u32)?;
        self.count(len, std::mem::size_of::<u32>());
        Ok(CpuIndex(Rc::new(RefCell::new(data))))
    }
    fn write_index(&self, t: &CpuIndex, data: &[u32]) {
        let mut v = t.0.borrow_mut();
        assert_eq!(
            data.len(),
            v.len(),
            "write of {} indices into an index of {}",
            data.len(),
            v.len()
        );
        v.copy_from_slice(data);
    }
    fn read(&self, t: &CpuTensor<T>) -> impl std::future::Future<Output = Result<Vec<f32>>> {
        let values: Vec<f32> = t.get().iter().map(|x| x.f64() as f32).collect();
        std::future::ready(Ok(values))
    }
    fn read_index(&self, t: &CpuIndex) -> impl std::future::Future<Output = Result<Vec<u32>>> {
        std::future::ready(Ok(t.get().to_vec()))
    }
    fn read_indices(&self, ts: &[&CpuIndex]) -> impl std::future::Future<Output = Result<Vec<Vec<u32>>>> {
        std::future::ready(Ok(ts.iter().map(|t| t.get().to_vec()).collect()))
    }
    fn flush(&self) -> Result<()> {
        Ok(())
    }
    fn record_or_replay(&self, _plan: &mut Option<()>, record: impl FnOnce()) {
        record()
    }

    fn fill(&self, out: &CpuTensor<T>, value: f32) {
        out.get_mut().fill(T::of(value as f64))
    }
    fn add(&self, out: &CpuTensor<T>, a: &CpuTensor<T>, b: &CpuTensor<T>) {
        ops::elementwise::cpu_add(&mut out.get_mut(), &a.get(), &b.get())
    }
    fn add_assign(&self, out: &CpuTensor<T>, a: &CpuTensor<T>) {
        ops::elementwise::cpu_add_assign(&mut out.get_mut(), &a.get())
    }
    fn gelu_forward(&self, out: &CpuTensor<T>, x: &CpuTensor<T>) {
        ops::elementwise::cpu_gelu_forward(&mut out.get_mut(), &x.get())
    }
    fn gelu_backward(&self, dx: &CpuTensor<T>, dout: &CpuTensor<T>, x: &CpuTensor<T>) {
        ops::elementwise::cpu_gelu_backward(&mut dx.get_mut(), &dout.get(), &x.get())
    }
    fn matmul(&self, out: &CpuTensor<T>, a: &CpuTensor<T>, b: &CpuTensor<T>, dims: MatmulDims) {
        ops::matmul::cpu(&mut out.get_mut(), &a.get(), &b.get(), dims)
    }
    fn embedding_forward(
        &self,
        out: &CpuTensor<T>,
        tokens: &CpuIndex,
        wte: &CpuTensor<T>,
        wpe: &CpuTensor<T>,
        dims: EmbeddingDims,
    ) {
        ops::embedding::cpu_forward(&mut out.get_mut(), &tokens.get(), &wte.get(), &wpe.get(), dims)
    }
    fn embedding_backward(
        &self,
        dwte: &CpuTensor<T>,
        dwpe: &CpuTensor<T>,
        dout: &CpuTensor<T>,
        bucket_rows: &CpuIndex,
        bucket_start: &CpuIndex,
        dims: EmbeddingDims,
    ) {
        // Two borrows in turn: dwte and dwpe are usually views of one gradient buffer.
        ops::embedding::cpu_backward_wte(
            &mut dwte.get_mut(),
            &dout.get(),
            &bucket_rows.get(),
            &bucket_start.get(),
            dims,
        );
        ops::embedding::cpu_backward_wpe(&mut dwpe.get_mut(), &dout.get(), dims);
    }
    fn gather_forward(&self, out: &CpuTensor<T>, index: &CpuIndex, table: &CpuTensor<T>, dims: GatherDims) {
        ops::gather::cpu_forward(&mut out.get_mut(), &index.get(), &table.get(), dims)
    }
    fn gather_backward(
        &self,
        dtable: &CpuTensor<T>,
        dout: &CpuTensor<T>,
        bucket_rows: &CpuIndex,
        bucket_start: &CpuIndex,
        dims: GatherDims,
    ) {
        ops::gather::cpu_backward(
            &mut dtable.get_mut(),
            &dout.get(),
            &bucket_rows.get(),
            &bucket_start.get(),
            dims,
        )
    }
    fn norm_forward(
        &self,
        out: &CpuTensor<T>,
        stats: &CpuTensor<T>,
        x: &CpuTensor<T>,
        gain: &CpuTensor<T>,
        dims: NormDims,
    ) {
        ops::norm::cpu_forward(&mut out.get_mut(), &mut stats.get_mut(), &x.get(), &gain.get(), dims)
    }
    fn norm_backward(
        &self,
        dx: &CpuTensor<T>,
        dgain: &CpuTensor<T>,
        dout: &CpuTensor<T>,
        x: &CpuTensor<T>,
        gain: &CpuTensor<T>,
        stats: &CpuTensor<T>,
        dims: NormDims,
    ) {
        ops::norm::cpu_backward(
            &mut dx.get_mut(),
            &mut dgain.get_mut(),
            &dout.get(),
            &x.get(),
            &gain.get(),
            &stats.get(),
            dims,
        )
    }
    fn attention_forward(
        &self,
        out: &CpuTensor<T>,
        lse: &CpuTensor<T>,
        qkv: &CpuTensor<T>,
        doc_start: &CpuIndex,
        dims: AttentionDims,
    ) {
        ops::attention::cpu_forward(
            &mut out.get_mut(),
            &mut lse.get_mut(),
            &qkv.get(),
            &doc_start.get(),
            dims,
        )
    }
    fn attention_backward(
        &self,
        dqkv: &CpuTensor<T>,
        delta: &CpuTensor<T>,
        dout: &CpuTensor<T>,
        out: &CpuTensor<T>,
        qkv: &CpuTensor<T>,
        lse: &CpuTensor<T>,
        doc_start: &CpuIndex,
        dims: AttentionDims,
    ) {
        ops::attention::cpu_backward(
            &mut dqkv.get_mut(),
            &mut delta.get_mut(),
            &dout.get(),
            &out.get(),
            &qkv.get(),
            &lse.get(),
            &doc_start.get(),
            dims,
        )
    }
    fn norm_stats(&self, stats: &CpuTensor<T>, x: &CpuTensor<T>, dims: NormDims) {
        ops::norm::cpu_stats(&mut stats.get_mut(), &x.get(), dims)
    }
    fn retrieve_normed(
        &self,
        y: &CpuTensor<T>,
        x: &CpuTensor<T>,
        stats: &CpuTensor<T>,
        gain: &CpuTensor<T>,
        keys: &CpuTensor<T>,
        dims: ResidualDims,
    ) {
        let (x, stats, gain, keys) = (x.get(), stats.get(), gain.get(), keys.get());
        ops::residual_matrix::cpu_retrieve_normed(&mut y.get_mut(), &x, &stats, &gain, &keys, dims)
    }
    fn key_grad_normed(
        &self,
        dkeys: &CpuTensor<T>,
        _partials: &CpuTensor<T>,
        a: &CpuTensor<T>,
        x: &CpuTensor<T>,
        stats: &CpuTensor<T>,
        gain: &CpuTensor<T>,
        dims: ResidualDims,
    ) {
        let (a, x, stats, gain) = (a.get(), x.get(), stats.get(), gain.get());
        ops::residual_matrix::cpu_key_grad_normed(&mut dkeys.get_mut(), &a, &x, &stats, &gain, dims)
    }
    fn retrieve(&self, y: &CpuTensor<T>, x: &CpuTensor<T>, keys: &CpuTensor<T>, dims: ResidualDims) {
        ops::residual_matrix::cpu_retrieve(&mut y.get_mut(), &x.get(), &keys.get(), dims)
    }
    fn store(
        &self,
        out: &CpuTensor<T>,
        base: Option<&CpuTensor<T>>,
        keys: &CpuTensor<T>,
        data: &CpuTensor<T>,
        dims: ResidualDims,
    ) {
        let base = base.map(|b| b.get());
        ops::residual_matrix::cpu_store(&mut out.get_mut(), base.as_deref(), &keys.get(), &data.get(), dims)
    }
    fn key_grad(
        &self,
        dkeys: &CpuTensor<T>,
        _partials: &CpuTensor<T>,
        a: &CpuTensor<T>,
        b: &CpuTensor<T>,
        dims: ResidualDims,
    ) {
        ops::residual_matrix::cpu_key_grad(&mut dkeys.get_mut(), &a.get(), &b.get(), dims)
    }
    fn memory_hash(&self, codes: &CpuIndex, p: &CpuTensor<T>, x: &CpuTensor<T>, dims: MemoryDims) {
        ops::memory::cpu_hash(&mut codes.get_mut(), &mut p.get_mut(), &x.get(), dims)
    }
    fn memory_bucket(
        &self,
        rows: &CpuIndex,
        starts: &CpuIndex,
        _cursor: &CpuIndex,
        codes: &CpuIndex,
        dims: MemoryDims,
    ) {
        ops::memory::cpu_bucket(&mut rows.get_mut(), &mut starts.get_mut(), &codes.get(), dims)
    }
    fn memory_forward(
        &self,
        y: &CpuTensor<T>,
        codes: &CpuIndex,
        p: &CpuTensor<T>,
        tables: &CpuTensor<T>,
        bias: &CpuTensor<T>,
        dims: MemoryDims,
    ) {
        ops::memory::cpu_forward(
            &mut y.get_mut(),
            &codes.get(),
            &p.get(),
            &tables.get(),
            &bias.get(),
            dims,
        )
    }
    fn memory_backward(
        &self,
        dx: &CpuTensor<T>,
        dtables: &CpuTensor<T>,
        dbias: &CpuTensor<T>,
        dy: &CpuTensor<T>,
        x: &CpuTensor<T>,
        codes: &CpuIndex,
        p: &CpuTensor<T>,
        rows: &CpuIndex,
        starts: &CpuIndex,
        tables: &CpuTensor<T>,
        dims: MemoryDims,
    ) {
        // One gradient at a time: dtables and dbias are views of one gradient buffer.
        use ops::memory::{cpu_bias_grad, cpu_input_grad, cpu_table_grad};
        cpu_table_grad(
            &mut dtables.get_mut(),
            &dy.get(),
            &p.get(),
            &rows.get(),
            &starts.get(),
            dims,
        );
        cpu_input_grad(
            &mut dx.get_mut(),
            &dy.get(),
            &x.get(),
            &codes.get(),
            &tables.get(),
            dims,
        );
        cpu_bias_grad(&mut dbias.get_mut(), &dy.get(), dims);
    }
    fn cross_entropy_forward(
        &self,
        losses: &CpuTensor<T>,
        lse: &CpuTensor<T>,
        logits: &CpuTensor<T>,
        targets: &CpuIndex,
        scale: &CpuTensor<T>,
        dims: CrossEntropyDims,
    ) {
        let scale = scale.get()[0];
        ops::cross_entropy::cpu_forward(
            &mut losses.get_mut(),
            &mut lse.get_mut(),
            &logits.get(),
            &targets.get(),
            scale,
            dims,
        )
    }
    fn cross_entropy_backward(
        &self,
        dlogits: &CpuTensor<T>,
        logits: &CpuTensor<T>,
        lse: &CpuTensor<T>,
        targets: &CpuIndex,
        scale: &CpuTensor<T>,
        dims: CrossEntropyDims,
    ) {
        let scale = scale.get()[0];
        ops::cross_entropy::cpu_backward(
            &mut dlogits.get_mut(),
            &logits.get(),
            &lse.get(),
            &targets.get(),
            scale,
            dims,
        )
    }
    fn sum(&self, out: &CpuTensor<T>, x: &CpuTensor<T>, squares: bool) {
        out.get_mut()[0] = ops::optim::cpu_sum(&x.get(), squares)
    }
    fn adamw(
        &self,
        params: &CpuTensor<T>,
        m: &CpuTensor<T>,
        v: &CpuTensor<T>,
        grads: &CpuTensor<T>,
        hyper: &CpuTensor<T>,
        grad_sumsq: &CpuTensor<T>,
        dims: AdamWDims,
    ) {
        ops::optim::cpu_adamw(
            &mut params.get_mut(),
            &mut m.get_mut(),
            &mut v.get_mut(),
            &grads.get(),
            &hyper.get(),
            grad_sumsq.get()[0],
            dims,
        )
    }
}
