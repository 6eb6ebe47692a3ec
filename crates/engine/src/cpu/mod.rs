//! The CPU backend: the readable reference every GPU kernel is tested against, and a usable
//! fallback (`--backend cpu`). Ops run eagerly; rows are split across threads with rayon, and
//! each output value is summed in a fixed order, so results are deterministic.

pub mod product;
pub mod simd;
use crate::ops::Scalar;
use crate::{Backend, EngineError, Result};
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
    /// The fast class's twin ([`CpuBackend::fast_twin`]) rather than the strict reference.
    fast: bool,
    /// The first fast product whose operands held a NaN or an infinity, by its shape.
    fault: std::sync::Mutex<Option<String>>,
    _values: PhantomData<T>,
}

impl<T: Scalar> CpuBackend<T> {
    pub fn new() -> Self {
        Self::default()
    }

    /// Records that the fast product named by `class` met a NaN or an infinity, unless one
    /// already had.
    pub(crate) fn fast_fault_at(&self, class: impl FnOnce() -> String) {
        let mut fault = self.fault.lock().unwrap_or_else(|e| e.into_inner());
        fault.get_or_insert_with(class);
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

impl CpuBackend<f32> {
    /// The CPU twin of the fast class (`crate::precision`): its matrix products round their
    /// operands to f16 after the same power-of-two scaling and sum in f32, as the GPU's
    /// cooperative matrices do up to their order of summation. The reference the GPU's fast
    /// class is checked against, and a way to see the class's numerics without a GPU; it is
    /// slower than the strict backend, not faster.
    pub fn fast_twin() -> Self {
        Self {
            fast: true,
            ..Self::default()
        }
    }

    /// The strict backend, or the fast class's twin.
    pub fn with_precision(precision: crate::Precision) -> Self {
        match precision {
            crate::Precision::Strict => Self::new(),
            crate::Precision::Fast => Self::fast_twin(),
        }
    }
}

impl<T: Scalar> Backend for CpuBackend<T> {
    type Tensor = CpuTensor<T>;
    type Index = CpuIndex;
    type Plan = ();

    fn describe(&self) -> String {
        let twin = if self.fast { ", fast-class twin" } else { "" };
        format!(
            "cpu ({}, {} threads, {} build{twin})",
            std::any::type_name::<T>(),
            rayon::current_num_threads(),
            simd::build_name()
        )
    }
    fn precision(&self) -> crate::Precision {
        match self.fast {
            true => crate::Precision::Fast,
            false => crate::Precision::Strict,
        }
    }
    fn fast_fault(&self) -> impl std::future::Future<Output = Result<Option<String>>> {
        std::future::ready(Ok(self.fault.lock().unwrap_or_else(|e| e.into_inner()).clone()))
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
        crate::check_view(offset, len, t.len);
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
        crate::check_write(data.len(), t.len);
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

    crate::backend::declare_ops!(cpu);
}
