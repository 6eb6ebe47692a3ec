//! Edits: values that replace part of a point's tensor during a forward, which is how an
//! ablation or a patch reaches inside a model.

use super::sites::Point;
use crate::Result;
use engine::Backend;
use std::collections::BTreeMap;

/// What replaces part of one point's tensor: the rows (tokens) and columns where `rows[r]`
/// and `cols[c]` are both 1 take `value`'s; every other value is left as the forward computed
/// it, bit for bit.
#[derive(Clone, Debug, PartialEq)]
pub struct Edit {
    pub rows: Vec<f32>,
    pub cols: Vec<f32>,
    /// (rows, cols), row-major.
    pub value: Vec<f32>,
}

impl Edit {
    /// No value replaced, for a tensor of `rows` × `cols`.
    pub fn none(rows: usize, cols: usize) -> Self {
        Self {
            rows: vec![0.0; rows],
            cols: vec![0.0; cols],
            value: vec![0.0; rows * cols],
        }
    }

    /// Marks rows `rows` and columns `cols` as replaced; the two masks are one product, so
    /// every edit at a point shares its rows.
    pub fn select(&mut self, rows: impl IntoIterator<Item = usize>, cols: std::ops::Range<usize>) {
        rows.into_iter().for_each(|r| self.rows[r] = 1.0);
        self.cols[cols].iter_mut().for_each(|c| *c = 1.0);
    }
}

/// The edits one forward applies, on the device, a point at a time as the forward reaches it
/// (`apply`); and, where asked, a copy of every point's values as the forward left them
/// (`captured`), for points whose buffers a later layer reuses.
pub struct Edits<B: Backend> {
    at: BTreeMap<Point, [B::Tensor; 3]>,
    /// Buffers for the points a forward computes only when asked (a Memory Layer's tables).
    scratch: BTreeMap<Point, B::Tensor>,
    /// Each point's copy, and the all-ones masks that copy it whole.
    captures: BTreeMap<Point, [B::Tensor; 3]>,
    /// Each point's gradient in the backward, copied the same way.
    grads: BTreeMap<Point, [B::Tensor; 3]>,
    /// What the backward starts from in place of the loss's logit gradient.
    seed: Option<B::Tensor>,
}

impl<B: Backend> Edits<B> {
    /// Copies `edits` onto the device.
    pub fn new(be: &B, edits: &BTreeMap<Point, Edit>) -> Result<Self> {
        let (mut at, mut scratch) = (BTreeMap::new(), BTreeMap::new());
        for (&point, e) in edits {
            if asked_only(point) {
                scratch.insert(point, be.zeros("a Memory Layer's table terms", e.value.len())?);
            }
            at.insert(
                point,
                [
                    filled(be, "rows", &e.rows)?,
                    filled(be, "columns", &e.cols)?,
                    filled(be, "values", &e.value)?,
                ],
            );
        }
        Ok(Self {
            at,
            scratch,
            captures: BTreeMap::new(),
            grads: BTreeMap::new(),
            seed: None,
        })
    }

    /// No edit, and a copy of each of `points` (point, rows, width) after the forward.
    pub fn capture(be: &B, points: &[(Point, usize, usize)]) -> Result<Self> {
        let mut scratch = BTreeMap::new();
        for &(point, rows, width) in points.iter().filter(|(p, ..)| asked_only(*p)) {
            scratch.insert(point, be.zeros("a Memory Layer's table terms", rows * width)?);
        }
        Ok(Self {
            at: BTreeMap::new(),
            scratch,
            captures: copies(be, points)?,
            grads: BTreeMap::new(),
            seed: None,
        })
    }

    /// No edit; a backward that starts from the logit gradient `seed` (rows × vocab) in place
    /// of the loss's, and a copy of each of `points`' gradients (point, rows, the gradient's
    /// width: a Memory Layer's tables share the layer output's).
    pub fn gradients(be: &B, points: &[(Point, usize, usize)], seed: &[f32]) -> Result<Self> {
        Ok(Self {
            at: BTreeMap::new(),
            scratch: BTreeMap::new(),
            captures: BTreeMap::new(),
            grads: copies(be, points)?,
            seed: Some(filled(be, "logit gradient", seed)?),
        })
    }

    /// Copies `dtensor`, the gradient of `point`'s tensor, where asked.
    pub fn apply_grad(&self, be: &B, point: Point, dtensor: &B::Tensor) {
        if let Some([copy, rows, cols]) = self.grads.get(&point) {
            be.replace(copy, rows, cols, dtensor);
        }
    }

    /// The copy of `point`'s gradient, if one was asked for.
    pub fn captured_grad(&self, point: Point) -> Option<&B::Tensor> {
        self.grads.get(&point).map(|[copy, ..]| copy)
    }

    /// The logit gradient a backward starts from, if not the loss's.
    pub fn seed(&self) -> Option<&B::Tensor> {
        self.seed.as_ref()
    }

    /// Replaces what the edit at `point` selects of `tensor`, if there is one, then copies it
    /// where asked.
    pub fn apply(&self, be: &B, point: Point, tensor: &B::Tensor) {
        if let Some([rows, cols, value]) = self.at.get(&point) {
            be.replace(tensor, rows, cols, value);
        }
        if let Some([copy, rows, cols]) = self.captures.get(&point) {
            be.replace(copy, rows, cols, tensor);
        }
    }

    /// The copy of `point`'s values, if one was asked for.
    pub fn captured(&self, point: Point) -> Option<&B::Tensor> {
        self.captures.get(&point).map(|[copy, ..]| copy)
    }
}

/// Whether the forward computes `point` only when an edit or a copy asks for it.
fn asked_only(point: Point) -> bool {
    match point {
        Point::Tables(..) => true,
        Point::Embedding | Point::Heads(_) | Point::Write(..) | Point::Residual(_) => false,
    }
}

/// What a unit (a Memory Layer) reaches inside its forward and backward with: the edits its
/// model holds, and the block it is in. In training there are no edits, and nothing changes.
pub struct Tap<'a, B: Backend> {
    edits: Option<&'a Edits<B>>,
    pub block: usize,
}

impl<B: Backend> Clone for Tap<'_, B> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<B: Backend> Copy for Tap<'_, B> {}

impl<'a, B: Backend> Tap<'a, B> {
    pub fn new(edits: &'a Option<Edits<B>>, block: usize) -> Self {
        Self {
            edits: edits.as_ref(),
            block,
        }
    }

    /// A tap that reaches nothing.
    pub fn none() -> Self {
        Self { edits: None, block: 0 }
    }

    /// The buffer a forward writes `point`'s values into when an edit or a copy asks for them;
    /// None (compute it the usual way) otherwise.
    pub fn scratch(&self, point: Point) -> Option<&'a B::Tensor> {
        self.edits.and_then(|e| e.scratch.get(&point))
    }

    pub fn apply(&self, be: &B, point: Point, tensor: &B::Tensor) {
        if let Some(e) = self.edits {
            e.apply(be, point, tensor);
        }
    }

    pub fn grad(&self, be: &B, point: Point, dtensor: &B::Tensor) {
        if let Some(e) = self.edits {
            e.apply_grad(be, point, dtensor);
        }
    }
}

/// A copy buffer of each point (point, rows, width), with the all-ones masks that copy it whole.
fn copies<B: Backend>(be: &B, points: &[(Point, usize, usize)]) -> Result<BTreeMap<Point, [B::Tensor; 3]>> {
    let mut all = BTreeMap::new();
    for &(point, rows, width) in points {
        let copy = be.zeros("an intervention's copy of a layer", rows * width)?;
        let ones = |n: usize| filled(be, "mask", &vec![1.0; n]);
        all.insert(point, [copy, ones(rows)?, ones(width)?]);
    }
    Ok(all)
}

fn filled<B: Backend>(be: &B, what: &str, values: &[f32]) -> Result<B::Tensor> {
    let t = be.zeros(&format!("an intervention's {what}"), values.len())?;
    be.write(&t, values);
    Ok(t)
}

/// `edits.apply(point, tensor)` where a model holds edits: what each forward calls at each of
/// its points.
pub fn apply<B: Backend>(be: &B, edits: &Option<Edits<B>>, point: Point, tensor: &B::Tensor) {
    if let Some(e) = edits {
        e.apply(be, point, tensor);
    }
}

/// `edits.apply_grad(point, dtensor)` where a model holds edits: what each backward calls at
/// each of its points.
pub fn grad<B: Backend>(be: &B, edits: &Option<Edits<B>>, point: Point, dtensor: &B::Tensor) {
    if let Some(e) = edits {
        e.apply_grad(be, point, dtensor);
    }
}

/// The logit gradient the held edits start a backward from, if any.
pub fn seed<B: Backend>(edits: &Option<Edits<B>>) -> Option<&B::Tensor> {
    edits.as_ref().and_then(Edits::seed)
}
