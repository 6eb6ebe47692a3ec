//! A backend that allocates nothing and only adds up what would be allocated: building a model
//! on it gives the model's memory before anything is allocated, from the model's own
//! constructor, so the figure cannot drift from what the model allocates.
//!
//! Its tensors are lengths, `zeros` and `index` add 4 bytes a value (f32 and u32, as the GPU and
//! the f32 CPU backend store them) and remember the largest buffer of each label, writes are
//! ignored, and every op does nothing. It holds no values ([`Backend::holds_values`] is false),
//! so a constructor skips computing what it would write, such as the initial parameters.

use crate::{Backend, EngineError, Result};
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::future::Future;

/// Bytes of one value of a tensor or an index.
pub const VALUE_BYTES: u64 = 4;

/// A tensor of `len` values that are never stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Counted {
    len: usize,
}

/// The largest buffer allocated under one label.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Buffer {
    pub what: String,
    pub bytes: u64,
}

/// The backend that counts; see the module docs.
#[derive(Default)]
pub struct CountingBackend {
    /// Bytes of every allocation so far, saturating: a count past u64 is past any machine.
    allocated: Cell<u64>,
    /// The largest buffer of each label, in the order the labels first appeared.
    largest: RefCell<Vec<Buffer>>,
    /// Where each label is in `largest`.
    labels: RefCell<HashMap<String, usize>>,
}

impl CountingBackend {
    pub fn new() -> Self {
        Self::default()
    }

    /// Bytes of every tensor and index allocated so far.
    pub fn allocated_bytes(&self) -> u64 {
        self.allocated.get()
    }

    /// The largest buffer allocated under each label, labels in the order they first appeared.
    pub fn buffers(&self) -> Vec<Buffer> {
        self.largest.borrow().clone()
    }

    fn count(&self, what: &str, len: usize) -> Counted {
        let bytes = (len as u64).saturating_mul(VALUE_BYTES);
        self.allocated.set(self.allocated.get().saturating_add(bytes));
        let mut labels = self.labels.borrow_mut();
        let mut largest = self.largest.borrow_mut();
        match labels.get(what) {
            Some(&i) => largest[i].bytes = largest[i].bytes.max(bytes),
            None => {
                labels.insert(what.to_string(), largest.len());
                largest.push(Buffer {
                    what: what.to_string(),
                    bytes,
                });
            }
        }
        Counted { len }
    }
}

/// A read from a backend that holds no values: a caller's mistake, said as an error.
fn no_values<T>() -> std::future::Ready<Result<T>> {
    std::future::ready(Err(EngineError::Invalid(
        "the counting backend holds no values to read".into(),
    )))
}

impl Backend for CountingBackend {
    type Tensor = Counted;
    type Index = Counted;
    type Plan = ();

    fn describe(&self) -> String {
        "counting (allocates nothing)".into()
    }
    fn zeros(&self, what: &str, len: usize) -> Result<Counted> {
        Ok(self.count(what, len))
    }
    fn view(&self, t: &Counted, offset: usize, len: usize) -> Counted {
        crate::check_view(offset, len, t.len);
        Counted { len }
    }
    fn len(&self, t: &Counted) -> usize {
        t.len
    }
    fn holds_values(&self) -> bool {
        false
    }
    fn write(&self, _t: &Counted, _data: &[f32]) {}
    fn index(&self, what: &str, len: usize) -> Result<Counted> {
        Ok(self.count(what, len))
    }
    fn write_index(&self, _t: &Counted, _data: &[u32]) {}
    fn read(&self, _t: &Counted) -> impl Future<Output = Result<Vec<f32>>> {
        no_values()
    }
    fn read_index(&self, _t: &Counted) -> impl Future<Output = Result<Vec<u32>>> {
        no_values()
    }
    fn read_indices(&self, _ts: &[&Counted]) -> impl Future<Output = Result<Vec<Vec<u32>>>> {
        no_values()
    }
    fn flush(&self) -> Result<()> {
        Ok(())
    }
    fn record_or_replay(&self, _plan: &mut Option<()>, record: impl FnOnce()) {
        record()
    }

    crate::backend::declare_ops!(counting);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{MatmulDims, NormDims, NormKind};

    #[test]
    fn allocations_add_up_and_the_largest_of_each_label_is_kept() {
        let be = CountingBackend::new();
        let a = be.zeros("a", 10).unwrap();
        be.zeros("b", 3).unwrap();
        be.index("a", 12).unwrap();
        be.zeros("a", 5).unwrap();
        assert_eq!(be.allocated_bytes(), 4 * (10 + 3 + 12 + 5));
        let want = [("a", 48), ("b", 12)].map(|(what, bytes)| Buffer {
            what: what.into(),
            bytes,
        });
        assert_eq!(be.buffers(), want);
        // Views and ops allocate nothing.
        let v = be.view(&a, 0, 6);
        assert_eq!(be.len(&v), 6);
        be.matmul(&a, &v, &v, MatmulDims::new(1, 1, 1));
        be.norm_forward(
            &a,
            &v,
            &v,
            &v,
            NormDims {
                rows: 1,
                c: 1,
                kind: NormKind::LayerNorm,
                eps: 1e-5,
            },
        );
        assert_eq!(be.allocated_bytes(), 4 * 30);
        assert!(!be.holds_values());
        assert!(pollster::block_on(be.read(&a)).is_err());
    }

    #[test]
    #[cfg(target_pointer_width = "64")]
    fn a_count_past_u64_saturates() {
        let be = CountingBackend::new();
        be.zeros("huge", usize::MAX).unwrap();
        be.zeros("more", usize::MAX).unwrap();
        assert_eq!(be.allocated_bytes(), u64::MAX);
    }
}
