//! Forwards with edits: what an ablation and a patch compute, over one batch of B sequences of
//! T tokens (a row r = s·T + t a token).

use super::edits::{Edit, Edits};
use super::sites::{Point, Site, Target};
use crate::{Evaluator, LanguageModel, ModelError, Result};
use data::Batch;
use engine::Backend;
use std::collections::BTreeMap;

/// One forward's mean loss over the batch and the logits of the rows asked for.
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    pub loss: f64,
    pub logits: Vec<Vec<f32>>,
}

impl Outcome {
    /// logit[target] − logit[versus] (or logit[target]) of asked row `i`.
    pub fn difference(&self, i: usize, target: u32, versus: Option<u32>) -> f64 {
        let row = &self.logits[i];
        f64::from(row[target as usize]) - versus.map_or(0.0, |v| f64::from(row[v as usize]))
    }
}

/// The forward of `batch` through `model` with `edits` (none: the model's own forward, bit for
/// bit), then the model as it was.
pub async fn forward<B: Backend, M: LanguageModel<B>>(
    be: &B,
    model: &mut M,
    (batch, separator): (&Batch, Option<u32>),
    edits: &BTreeMap<Point, Edit>,
    rows: &[usize],
) -> Result<Outcome> {
    let installed = match edits.is_empty() {
        true => None,
        false => Some(Edits::new(be, edits)?),
    };
    *model.edits() = installed;
    // A plan of its own: a GPU plan holds the edit launches it was recorded with.
    let mut evaluator = Evaluator::new(be, &*model)?;
    evaluator.mask_documents(separator);
    let loss = evaluator.loss(be, &*model, batch).await;
    model.edits().take();
    let v = model.vocab();
    let mut logits = Vec::with_capacity(rows.len());
    for &r in rows {
        logits.push(be.read_range(&model.head().logits, r * v, v).await?);
    }
    Ok(Outcome {
        loss: f64::from(loss?),
        logits,
    })
}

/// Every point's values in the forward of `batch`, unedited: (values, width).
pub async fn read_points<B: Backend, M: LanguageModel<B>>(
    be: &B,
    model: &mut M,
    on: (&Batch, Option<u32>),
) -> Result<BTreeMap<Point, (Vec<f32>, usize)>> {
    read_some(be, model, on, |_| true).await
}

/// The values of the points `which` picks in the forward of `batch`, unedited: (values, width),
/// in the points' order.
pub async fn read_some<B: Backend, M: LanguageModel<B>>(
    be: &B,
    model: &mut M,
    on: (&Batch, Option<u32>),
    which: impl Fn(Point) -> bool,
) -> Result<BTreeMap<Point, (Vec<f32>, usize)>> {
    let points: Vec<_> = shapes(model).into_iter().filter(|(p, ..)| which(*p)).collect();
    copied(be, model, on, Edits::capture(be, &points)?, &points, false).await
}

/// Each point of `model`: (point, rows, width).
fn shapes<B: Backend, M: LanguageModel<B>>(model: &M) -> Vec<(Point, usize, usize)> {
    let (b, t) = model.batch_shape();
    model.edit_points().iter().map(|p| (p.point, b * t, p.width)).collect()
}

/// Each point's gradient: (point, rows, width), where a Memory Layer's tables have one group's
/// width, the layer output's gradient, which each table's term shares.
fn gradient_shapes<B: Backend, M: LanguageModel<B>>(model: &M) -> Vec<(Point, usize, usize)> {
    let (b, t) = model.batch_shape();
    let width = |p: &super::EditPoint<'_, B>| match p.point {
        Point::Tables(..) => p.width / p.groups,
        Point::Embedding | Point::Heads(_) | Point::Write(..) | Point::Residual(_) => p.width,
    };
    model.edit_points().iter().map(|p| (p.point, b * t, width(p))).collect()
}

/// The forward of `batch` with `edits` held (and its backward, with `backward`), then what they
/// copied of `points`: each one's values, or its gradients.
async fn copied<B: Backend, M: LanguageModel<B>>(
    be: &B,
    model: &mut M,
    (batch, separator): (&Batch, Option<u32>),
    edits: Edits<B>,
    points: &[(Point, usize, usize)],
    backward: bool,
) -> Result<BTreeMap<Point, (Vec<f32>, usize)>> {
    *model.edits() = Some(edits);
    let mut evaluator = Evaluator::new(be, &*model)?;
    evaluator.mask_documents(separator);
    let run = match evaluator.forward(be, &*model, batch) {
        Ok(()) if backward => evaluator.backward(be, &*model),
        done => done,
    };
    let edits = model.edits().take();
    run?;
    let mut all = BTreeMap::new();
    if let Some(edits) = edits {
        for &(point, _, width) in points {
            let copy = match backward {
                true => edits.captured_grad(point),
                false => edits.captured(point),
            };
            if let Some(copy) = copy {
                all.insert(point, (be.read(copy).await?, width));
            }
        }
    }
    Ok(all)
}

/// Every point's gradient of logit[target] − logit[versus] (or logit[target]) at row `row`, in
/// the forward of `batch` unedited: (gradient, width). A model built for inference has none.
pub async fn gradients<B: Backend, M: LanguageModel<B>>(
    be: &B,
    model: &mut M,
    on: (&Batch, Option<u32>),
    row: usize,
    (target, versus): (u32, Option<u32>),
) -> Result<BTreeMap<Point, (Vec<f32>, usize)>> {
    if !model.trainable() {
        return Err(ModelError::Config(
            "attribution patching needs a model built with its gradients".into(),
        ));
    }
    let (b, t) = model.batch_shape();
    let v = model.vocab();
    let mut seed = vec![0.0; b * t * v];
    seed[row * v + target as usize] += 1.0;
    if let Some(versus) = versus {
        seed[row * v + versus as usize] -= 1.0;
    }
    let points = gradient_shapes(model);
    let edits = Edits::gradients(be, &points, &seed)?;
    copied(be, model, on, edits, &points, true).await
}

/// Attribution patching: the first-order estimate of what patching `targets` at `positions` of
/// sequence `to` from sequence `from` changes the logit difference by, Σ (clean − corrupted) ·
/// gradient over the patched values, from one forward (`values`) and one backward (`grads`,
/// taken at the corrupted sequence's row). A gradient narrower than its point's values (a Memory
/// Layer's, which every table shares) is read at the column within its group.
pub fn estimate(
    values: &BTreeMap<Point, (Vec<f32>, usize)>,
    grads: &BTreeMap<Point, (Vec<f32>, usize)>,
    targets: &[Target],
    (from, to): (usize, usize),
    positions: &[usize],
    t: usize,
) -> Result<f64> {
    let mut sum = 0.0;
    for (point, cols) in targets {
        let missing = || ModelError::Config(format!("the forward has no point {point:?}"));
        let ((x, width), (g, g_width)) = (
            values.get(point).ok_or_else(missing)?,
            grads.get(point).ok_or_else(missing)?,
        );
        for &p in positions {
            for c in cols.clone() {
                let (clean, corrupted) = ((from * t + p) * width + c, (to * t + p) * width + c);
                let dx = g[(to * t + p) * g_width + c % g_width];
                sum += f64::from(x[clean] - x[corrupted]) * f64::from(dx);
            }
        }
    }
    Ok(sum)
}

/// What an ablation puts in place of a site.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Ablation {
    /// Zeros.
    #[default]
    Zero,
    /// The site's mean over every token of the batch.
    Mean,
    /// The same token of the next sequence of the batch (the last takes the first's).
    Resample,
}

/// The edits that ablate `targets` at rows `rows`, from `clean`, the points of the unedited
/// forward of a batch of `b` sequences of `t` tokens.
pub fn ablation(
    clean: &BTreeMap<Point, (Vec<f32>, usize)>,
    targets: &[Target],
    how: Ablation,
    rows: &[usize],
    (b, t): (usize, usize),
) -> Result<BTreeMap<Point, Edit>> {
    edits(clean, targets, rows, |values, width, r, c| match how {
        Ablation::Zero => 0.0,
        Ablation::Mean => (0..b * t).map(|r| f64::from(values[r * width + c])).sum::<f64>() as f32 / (b * t) as f32,
        Ablation::Resample => values[((r / t + 1) % b * t + r % t) * width + c],
    })
}

/// The edits that patch `targets` at positions `positions` of sequence `to` with their values
/// in sequence `from` of the same forward `clean`.
pub fn patch(
    clean: &BTreeMap<Point, (Vec<f32>, usize)>,
    targets: &[Target],
    (from, to): (usize, usize),
    positions: &[usize],
    t: usize,
) -> Result<BTreeMap<Point, Edit>> {
    let rows: Vec<usize> = positions.iter().map(|p| to * t + p).collect();
    edits(clean, targets, &rows, |values, width, r, c| {
        values[(from * t + r % t) * width + c]
    })
}

/// The edits of `targets` at `rows`, each value `value(point's values, width, row, column)`.
fn edits(
    clean: &BTreeMap<Point, (Vec<f32>, usize)>,
    targets: &[Target],
    rows: &[usize],
    value: impl Fn(&[f32], usize, usize, usize) -> f32,
) -> Result<BTreeMap<Point, Edit>> {
    let mut edits: BTreeMap<Point, Edit> = BTreeMap::new();
    for (point, cols) in targets {
        let (values, width) = clean
            .get(point)
            .ok_or_else(|| ModelError::Config(format!("the forward has no point {point:?}")))?;
        let n_rows = values.len() / width;
        let e = edits.entry(*point).or_insert_with(|| Edit::none(n_rows, *width));
        e.select(rows.iter().copied(), cols.clone());
        for &r in rows {
            for c in cols.clone() {
                e.value[r * width + c] = value(values, *width, r, c);
            }
        }
    }
    Ok(edits)
}

/// Sites by name, each with the points it lives at.
pub fn resolve(points: &super::sites::Points, names: &[String]) -> Result<Vec<(Site, Vec<Target>)>> {
    names
        .iter()
        .map(|n| {
            let site: Site = n.parse()?;
            Ok((site, points.targets(site)?))
        })
        .collect()
}
