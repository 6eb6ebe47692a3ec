//! Batches as a pure function of (seed, step): a run resumed at step k draws exactly the batches
//! the uninterrupted run would have drawn, with no sampler state to save.

use crate::tasks::{Batch, TaskSampler};
use serde::{Deserialize, Serialize};
use std::fmt;

#[cfg(feature = "text")]
use crate::{corpus::Corpus, DataError};
#[cfg(feature = "text")]
use rand::{Rng, SeedableRng};
// Xoshiro256++ by name, not rand's SmallRng, which is another generator on 32-bit targets: the
// page (wasm32) would draw other weights and batches than the CLI from the same seed.
#[cfg(feature = "text")]
use rand_xoshiro::Xoshiro256PlusPlus;
#[cfg(feature = "text")]
use std::sync::Arc;

/// The seed of step `step`'s generator: splitmix64 mixing, so that neighbouring steps and seeds
/// give unrelated streams.
pub fn step_seed(seed: u64, step: u64) -> u64 {
    const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;
    fn splitmix64(x: u64) -> u64 {
        let mut z = x.wrapping_add(GOLDEN);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    splitmix64(splitmix64(seed) ^ step.wrapping_mul(GOLDEN))
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Split {
    Train,
    Val,
}

impl fmt::Display for Split {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Split::Train => "train",
            Split::Val => "val",
        })
    }
}

/// Random windows of a prepared corpus: B windows of T + 1 tokens per step, inputs the first T
/// and targets the last T.
#[cfg(feature = "text")]
#[derive(Clone, Debug)]
pub struct TextSampler {
    corpus: Arc<Corpus>,
    split: Split,
    b: usize,
    t: usize,
    seed: u64,
}

#[cfg(feature = "text")]
impl TextSampler {
    pub fn new(corpus: Arc<Corpus>, split: Split, b: usize, t: usize, seed: u64) -> Result<Self, DataError> {
        if b == 0 || t == 0 {
            return Err(DataError::Invalid(format!(
                "the batch size and sequence length must be at least 1, not {b} and {t}"
            )));
        }
        if b.checked_mul(t).and_then(|n| n.checked_add(b)).is_none() {
            return Err(DataError::Invalid(format!("a batch of {b} × {t} tokens is too large")));
        }
        let len = corpus.split(split).len();
        if len <= t {
            return Err(DataError::Invalid(format!(
                "the {split} split of `{}` has {len} tokens, fewer than one window of T + 1 = {}; \
                 use a shorter sequence length or prepare more text",
                corpus.dir().display(),
                t.saturating_add(1)
            )));
        }
        Ok(Self {
            corpus,
            split,
            b,
            t,
            seed,
        })
    }

    pub fn b(&self) -> usize {
        self.b
    }

    pub fn t(&self) -> usize {
        self.t
    }

    pub fn split(&self) -> Split {
        self.split
    }

    pub fn corpus(&self) -> &Arc<Corpus> {
        &self.corpus
    }

    /// Step `step`'s batch: B windows at uniformly random offsets; an error only where the
    /// corpus changed under the run.
    pub fn batch(&self, step: u64) -> Result<Batch, crate::DataError> {
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(step_seed(self.seed, step));
        let tokens = self.corpus.split(self.split);
        // `new` checked len ≥ T + 1.
        let last = tokens.len().saturating_sub(self.t + 1);
        let starts: Vec<usize> = (0..self.b).map(|_| rng.random_range(0..=last)).collect();
        self.windows(&starts)
    }

    /// M batches for evaluation, the same for a given corpus, split, B and T whatever the seed:
    /// M·B windows spread evenly from the first token of the split to the last. They do not
    /// overlap when the split holds M·B windows; on a smaller split they overlap, still evenly.
    pub fn fixed_batches(&self, m: usize) -> Result<Vec<Batch>, crate::DataError> {
        let n = self.t + 1;
        let span = self.corpus.split(self.split).len().saturating_sub(n) as u128;
        let count = m.saturating_mul(self.b);
        let starts: Vec<usize> = (0..count)
            .map(|i| match count {
                1 => 0,
                // Exact in u128: i < count and span < 2^64.
                _ => (i as u128 * span / (count as u128 - 1)) as usize,
            })
            .collect();
        starts.chunks(self.b).map(|s| self.windows(s)).collect()
    }

    /// Every window of `slice` of this sampler's split once: windows of T + 1 tokens at stride
    /// T, so that each target token of the slice is predicted exactly once, B to a batch. The
    /// windows that do not fill a last batch are left out (fewer than B·T tokens).
    pub fn slice_batches(&self, slice: EvalSlice) -> Result<Vec<Batch>, crate::DataError> {
        let len = self.corpus.split(self.split).len();
        let (lo, hi) = slice.range(len);
        let windows = hi.saturating_sub(lo + 1) / self.t;
        let starts: Vec<usize> = (0..windows - windows % self.b).map(|i| lo + i * self.t).collect();
        if starts.is_empty() {
            return Err(DataError::Invalid(format!(
                "the {slice} of the {} split of `{}` ({} tokens) holds fewer than one batch of {} windows of T + 1 = {} \
                 tokens; use a smaller batch or sequence length, or prepare more text",
                self.split,
                self.corpus.dir().display(),
                hi - lo,
                self.b,
                self.t + 1
            )));
        }
        starts.chunks(self.b).map(|s| self.windows(s)).collect()
    }

    fn windows(&self, starts: &[usize]) -> Result<Batch, crate::DataError> {
        let tokens = self.corpus.split(self.split);
        let mut inputs = Vec::with_capacity(starts.len() * self.t);
        let mut targets = Vec::with_capacity(starts.len() * self.t);
        for &s in starts {
            let w = tokens.window(s, self.t + 1)?;
            inputs.extend(w.iter().take(self.t));
            targets.extend(w.iter().skip(1));
        }
        Ok(Batch {
            b: starts.len(),
            t: self.t,
            inputs,
            targets,
        })
    }
}

/// The two disjoint parts of the held-out data a sweep evaluates its finished runs on: it
/// chooses settings on the tuning slice and decides its comparisons on the test slice, so that
/// nothing is chosen on the bytes it is judged on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EvalSlice {
    /// The first `TUNING_SHARE` of the validation split.
    Tuning,
    /// The rest of it.
    Test,
}

/// The tuning slice's share of the validation split: on Shakespeare's 252,859 validation bytes
/// it leaves 202,288 for the test slice, above the 200k tokens that keep the evaluation set's
/// own error under a few thousandths of a nat.
pub const TUNING_SHARE: f64 = 0.2;

/// Held-out batches a task (whose data is generated, with no split) evaluates on, per slice.
const TASK_SLICE_BATCHES: usize = 32;
const TUNING_SALT: u64 = 0x7E57_0F5E_ED5A_17ED;

impl EvalSlice {
    /// Its token range [lo, hi) within a split of `len` tokens.
    pub fn range(self, len: usize) -> (usize, usize) {
        let cut = (len as f64 * TUNING_SHARE).round() as usize;
        match self {
            EvalSlice::Tuning => (0, cut),
            EvalSlice::Test => (cut, len),
        }
    }
}

impl fmt::Display for EvalSlice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            EvalSlice::Tuning => "tuning slice",
            EvalSlice::Test => "test slice",
        })
    }
}

/// Where a training run's batches come from.
/// Fixed windows of T + 1 tokens, in order, b to a batch: batch k is the (k mod n)-th of the
/// n batches they make. The input of a window is its first T tokens, the target its last T
/// (the official RMT code's `tokens[:-1]`, `tokens[1:]`).
#[derive(Clone, Debug)]
pub struct FixedRows {
    batches: Vec<Batch>,
    pub b: usize,
    pub t: usize,
}

impl FixedRows {
    /// `tokens` holds rows of `width` = T + 1 tokens.
    pub fn new(tokens: &[u32], width: usize, b: usize) -> Result<Self, crate::DataError> {
        let bad = crate::DataError::Invalid;
        if width < 2 {
            return Err(bad(format!(
                "token rows of {width} tokens hold no (input, target) pair; they need at least 2"
            )));
        }
        if tokens.is_empty() || !tokens.len().is_multiple_of(width) {
            return Err(bad(format!("{} tokens are not whole rows of {width}", tokens.len())));
        }
        let rows = tokens.len() / width;
        if b == 0 || rows < b {
            return Err(bad(format!(
                "{rows} token rows cannot fill a batch of {b}; use a batch of at most {rows}"
            )));
        }
        let t = width - 1;
        let batches = tokens
            .chunks_exact(width * b)
            .map(|chunk| Batch {
                b,
                t,
                inputs: chunk.chunks_exact(width).flat_map(|r| r[..t].to_vec()).collect(),
                targets: chunk.chunks_exact(width).flat_map(|r| r[1..].to_vec()).collect(),
            })
            .collect();
        Ok(Self { batches, b, t })
    }

    pub fn batch(&self, step: u64) -> Batch {
        self.batches[(step % self.batches.len() as u64) as usize].clone()
    }

    /// The number of distinct batches.
    pub fn len(&self) -> usize {
        self.batches.len()
    }

    pub fn is_empty(&self) -> bool {
        self.batches.is_empty()
    }
}

pub enum BatchSource {
    Task(TaskSampler),
    Fixed(FixedRows),
    #[cfg(feature = "text")]
    Text(TextSampler),
}

impl BatchSource {
    /// Step `step`'s batch; an error only where a corpus changed under the run.
    pub fn batch(&self, step: u64) -> Result<Batch, crate::DataError> {
        match self {
            BatchSource::Task(s) => Ok(s.batch(step)),
            BatchSource::Fixed(s) => Ok(s.batch(step)),
            #[cfg(feature = "text")]
            BatchSource::Text(s) => s.batch(step),
        }
    }

    pub fn b(&self) -> usize {
        match self {
            BatchSource::Task(s) => s.b(),
            BatchSource::Fixed(s) => s.b,
            #[cfg(feature = "text")]
            BatchSource::Text(s) => s.b(),
        }
    }

    pub fn t(&self) -> usize {
        match self {
            BatchSource::Task(s) => s.t(),
            BatchSource::Fixed(s) => s.t,
            #[cfg(feature = "text")]
            BatchSource::Text(s) => s.t(),
        }
    }
}

#[cfg(all(test, feature = "text"))]
mod tests {
    use super::*;
    use crate::corpus::{prepare, tests::write_texts};
    use crate::TokenizerKind;

    fn corpus() -> (tempfile::TempDir, Arc<Corpus>) {
        let tmp = tempfile::tempdir().unwrap();
        let texts = write_texts(tmp.path());
        let out = tmp.path().join("bytes");
        prepare(&[texts], TokenizerKind::Bytes, 0.1, &out, &mut |_, _| {}).unwrap();
        let corpus = Arc::new(Corpus::open(&out).unwrap());
        (tmp, corpus)
    }

    #[test]
    fn batches_are_a_function_of_seed_and_step() {
        let (_tmp, c) = corpus();
        let a = TextSampler::new(c.clone(), Split::Train, 4, 32, 9).unwrap();
        let b = TextSampler::new(c.clone(), Split::Train, 4, 32, 9).unwrap();
        assert_eq!(a.batch(17).unwrap(), b.batch(17).unwrap());
        assert_ne!(a.batch(17).unwrap(), a.batch(18).unwrap());
        assert_ne!(
            a.batch(17).unwrap(),
            TextSampler::new(c.clone(), Split::Train, 4, 32, 10)
                .unwrap()
                .batch(17)
                .unwrap()
        );
        let batch = a.batch(5).unwrap();
        assert_eq!(
            (batch.b, batch.t, batch.inputs.len(), batch.targets.len()),
            (4, 32, 128, 128)
        );
        for r in 0..4 {
            let (x, y) = (
                &batch.inputs[r * 32..(r + 1) * 32],
                &batch.targets[r * 32..(r + 1) * 32],
            );
            assert_eq!(x[1..], y[..31], "targets are the inputs shifted by one");
            // The row is a real window of the train split.
            let found = (0..c.train.len()).any(|s| c.train.window(s, 33).unwrap() == [x, &y[31..]].concat());
            assert!(found, "row {r} is not a window of train.bin");
        }
        assert_eq!(BatchSource::Text(a.clone()).batch(5).unwrap(), batch);
    }

    #[test]
    fn fixed_batches_are_stable_and_spread() {
        let (_tmp, c) = corpus();
        let a = TextSampler::new(c.clone(), Split::Val, 2, 8, 1).unwrap();
        let b = TextSampler::new(c.clone(), Split::Val, 2, 8, 2).unwrap();
        let fixed = a.fixed_batches(3).unwrap();
        assert_eq!(fixed, b.fixed_batches(3).unwrap());
        assert_eq!(fixed.len(), 3);
        let rows: Vec<&[u32]> = fixed.iter().flat_map(|f| f.inputs.chunks(8)).collect();
        // The first window starts the split and the last ends it.
        assert_eq!(rows[0], &c.val.window(0, 8).unwrap()[..]);
        assert_eq!(fixed[2].targets[8..], c.val.window(c.val.len() - 8, 8).unwrap()[..]);
        let span = c.val.len() - 9;
        for (i, row) in rows.iter().enumerate() {
            assert_eq!(
                *row,
                &c.val.window(i * span / 5, 8).unwrap()[..],
                "window {i} is evenly spaced"
            );
        }
        // A split smaller than the windows asked for still gives full batches.
        let many = a.fixed_batches(c.val.len()).unwrap();
        assert!(many.iter().all(|f| f.inputs.len() == 16 && f.targets.len() == 16));
    }

    #[test]
    fn the_two_slices_predict_every_held_out_token_once_and_share_none() {
        let (_tmp, c) = corpus();
        let (b, t) = (2, 5);
        let sampler = TextSampler::new(c.clone(), Split::Val, b, t, 9).unwrap();
        let len = c.val.len();
        let mut predicted = vec![0u32; len];
        for slice in [EvalSlice::Tuning, EvalSlice::Test] {
            let (lo, hi) = slice.range(len);
            let batches = sampler.slice_batches(slice).unwrap();
            let windows = batches.len() * b;
            // Windows at stride T from the slice's start; the targets of window i are tokens
            // lo + i·T + 1 ..= lo + i·T + T.
            for (i, row) in batches.iter().flat_map(|x| x.targets.chunks(t)).enumerate() {
                let start = lo + i * t;
                assert_eq!(row, &c.val.window(start + 1, t).unwrap()[..]);
                assert!(start + t < hi, "a {slice} target outside it");
                for n in &mut predicted[start + 1..=start + t] {
                    *n += 1;
                }
            }
            // What is left out is less than a batch and a window.
            assert!(
                hi - lo - windows * t < b * t + t + 1,
                "{slice}: {} of {} predicted",
                windows * t,
                hi - lo
            );
        }
        assert!(predicted.iter().all(|&n| n <= 1), "a token predicted twice");
        assert_eq!(EvalSlice::Tuning.range(len).1, EvalSlice::Test.range(len).0);
        assert_eq!(EvalSlice::Test.range(len).1, len);
        // The same whatever the seed.
        let other = TextSampler::new(c.clone(), Split::Val, b, t, 10).unwrap();
        assert_eq!(
            other.slice_batches(EvalSlice::Test).unwrap(),
            sampler.slice_batches(EvalSlice::Test).unwrap()
        );
        // A slice too small for one batch says so.
        let wide = TextSampler::new(c.clone(), Split::Val, len / t, t, 9).unwrap();
        let err = wide.slice_batches(EvalSlice::Tuning).unwrap_err().to_string();
        assert!(err.contains("fewer than one batch"), "{err}");
    }

    #[test]
    fn impossible_shapes_are_errors() {
        let (_tmp, c) = corpus();
        let len = c.val.len();
        assert!(TextSampler::new(c.clone(), Split::Val, 1, len, 0).is_err());
        assert!(TextSampler::new(c.clone(), Split::Val, 1, len - 1, 0).is_ok());
        assert!(TextSampler::new(c.clone(), Split::Val, 0, 4, 0).is_err());
        assert!(TextSampler::new(c.clone(), Split::Val, 4, 0, 0).is_err());
        assert!(TextSampler::new(c, Split::Val, usize::MAX, 2, 0).is_err());
    }
}

/// Held-out task batches come from a seed no training run uses.
const HELD_OUT_SALT: u64 = 0x5EED_0FE7_A1D0_0075;

/// A run's data, opened: where its training batches and its fixed held-out batches come from.
/// The command line opens it from files, the page from what it fetched; both draw the same
/// batches from it.
#[derive(Clone, Debug)]
pub enum DataSource {
    Task(crate::Task),
    #[cfg(feature = "text")]
    Text(Arc<Corpus>),
    /// Rows of `width` = T + 1 tokens.
    Rows {
        tokens: Vec<u32>,
        width: usize,
    },
}

impl DataSource {
    /// The training batches: batch k is a function of (seed, k) alone.
    pub fn train(&self, b: usize, t: usize, seed: u64) -> Result<BatchSource, crate::DataError> {
        Ok(match self {
            DataSource::Task(task) => BatchSource::Task(TaskSampler::new(*task, b, t, seed)?),
            #[cfg(feature = "text")]
            DataSource::Text(corpus) => BatchSource::Text(TextSampler::new(corpus.clone(), Split::Train, b, t, seed)?),
            DataSource::Rows { tokens, width } => BatchSource::Fixed(Self::rows(tokens, *width, b, t)?),
        })
    }

    /// `m` held-out batches, the same at every evaluation of a run, in `resmem eval` and on the
    /// page.
    pub fn held_out(&self, b: usize, t: usize, seed: u64, m: usize) -> Result<Vec<Batch>, crate::DataError> {
        Ok(match self {
            DataSource::Task(task) => {
                let sampler = TaskSampler::new(*task, b, t, seed ^ HELD_OUT_SALT)?;
                (0..m as u64).map(|k| sampler.batch(k)).collect()
            }
            #[cfg(feature = "text")]
            DataSource::Text(corpus) => TextSampler::new(corpus.clone(), Split::Val, b, t, seed)?.fixed_batches(m)?,
            DataSource::Rows { tokens, width } => {
                let rows = Self::rows(tokens, *width, b, t)?;
                if m > rows.len() {
                    return Err(crate::DataError::Invalid(format!(
                        "the token file makes {} batches of {b}; evaluate at most that many (--batches)",
                        rows.len()
                    )));
                }
                (0..m as u64).map(|k| rows.batch(k)).collect()
            }
        })
    }

    /// Every held-out window of `slice` once (`TextSampler::slice_batches`). A token file's rows
    /// are cut as a split is; a task, whose data is generated, draws 32 batches per slice from
    /// streams that neither training nor the other slice uses.
    pub fn slice_batches(
        &self,
        b: usize,
        t: usize,
        seed: u64,
        slice: EvalSlice,
    ) -> Result<Vec<Batch>, crate::DataError> {
        Ok(match self {
            DataSource::Task(task) => {
                let salt = match slice {
                    EvalSlice::Tuning => TUNING_SALT,
                    EvalSlice::Test => HELD_OUT_SALT,
                };
                let sampler = TaskSampler::new(*task, b, t, seed ^ salt)?;
                (0..TASK_SLICE_BATCHES as u64).map(|k| sampler.batch(k)).collect()
            }
            #[cfg(feature = "text")]
            DataSource::Text(corpus) => {
                TextSampler::new(corpus.clone(), Split::Val, b, t, seed)?.slice_batches(slice)?
            }
            DataSource::Rows { tokens, width } => {
                let rows = Self::rows(tokens, *width, b, t)?;
                let (lo, hi) = slice.range(rows.len());
                if lo == hi {
                    return Err(crate::DataError::Invalid(format!(
                        "the token file makes {} batches of {b}, too few for a {slice}; give it more rows",
                        rows.len()
                    )));
                }
                (lo as u64..hi as u64).map(|k| rows.batch(k)).collect()
            }
        })
    }

    fn rows(tokens: &[u32], width: usize, b: usize, t: usize) -> Result<FixedRows, crate::DataError> {
        if t + 1 != width {
            return Err(crate::DataError::Invalid(format!(
                "the token file holds rows of {width} tokens, for windows of T = {}, not {t}",
                width - 1
            )));
        }
        FixedRows::new(tokens, width, b)
    }
}
