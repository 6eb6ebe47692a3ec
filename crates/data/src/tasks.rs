//! Synthetic tasks, so that a model trains with no files. Each sequence has T + 1 tokens; the
//! inputs are its first T and the targets its last T. Targets that no model could predict
//! (random prompt symbols) are IGNORE, so the loss measures the skill alone and falls to 0.
//!
//! - copy:    `abcd|abcd`: the symbols again after the separator.
//! - reverse: `abcd|dcba`.
//! - mqar:    multi-query associative recall, `A3K7Q1|K7A3`: key-value pairs, then the keys
//!   again in a random order; each value must be recalled (Arora et al., Zoology).

use crate::{sampler::step_seed, DataError, IGNORE};
use rand::{seq::SliceRandom, Rng, SeedableRng};
// Xoshiro256++ by name, not rand's SmallRng, which is another generator on 32-bit targets: the
// page (wasm32) would draw other weights and batches than the CLI from the same seed.
use rand_xoshiro::Xoshiro256PlusPlus;
use serde::{Deserialize, Serialize};
use std::fmt;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Task {
    Copy,
    Reverse,
    Mqar,
}

impl Task {
    pub const ALL: [Task; 3] = [Task::Copy, Task::Reverse, Task::Mqar];

    pub fn name(self) -> &'static str {
        match self {
            Task::Copy => "copy",
            Task::Reverse => "reverse",
            Task::Mqar => "mqar",
        }
    }
}

impl fmt::Display for Task {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Task {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Task::ALL
            .into_iter()
            .find(|t| t.name() == s)
            .ok_or_else(|| format!("unknown task `{s}`; the tasks are copy, reverse and mqar"))
    }
}

const SEP: u8 = b'|';
const PAD: u8 = b'.';
/// Copy and reverse draw from 16 lowercase letters.
const SYMBOLS: &[u8] = b"abcdefghijklmnop";
const KEYS: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ";
const VALUES: &[u8] = b"0123456789";

/// B sequences of T inputs and T targets, row-major (B, T).
#[derive(Clone, Debug, PartialEq)]
pub struct Batch {
    pub b: usize,
    pub t: usize,
    pub inputs: Vec<u32>,
    pub targets: Vec<u32>,
}

impl Batch {
    /// The number of targets the loss counts.
    pub fn counted(&self) -> usize {
        self.targets.iter().filter(|&&t| t != IGNORE).count()
    }

    /// Sequence `seq` reads `tokens` from its start (its first T where they are longer), each
    /// predicting the next; the rest of its inputs stay and are not counted. The tokens written.
    pub fn put(&mut self, seq: usize, tokens: &[u32]) -> usize {
        let (t, n) = (self.t, tokens.len().min(self.t));
        let row = seq * t..(seq + 1) * t;
        self.inputs[row.start..row.start + n].copy_from_slice(&tokens[..n]);
        for (i, target) in self.targets[row].iter_mut().enumerate() {
            *target = if i + 1 < n { tokens[i + 1] } else { IGNORE };
        }
        n
    }
}

/// Draws batches of one task. Step k's batch depends on (seed, k) alone, so a resumed run sees
/// the batches an uninterrupted one would have.
#[derive(Clone, Debug)]
pub struct TaskSampler {
    task: Task,
    b: usize,
    t: usize,
    seed: u64,
    /// The step `next_batch` draws next.
    step: u64,
}

impl TaskSampler {
    /// Fails when T is too short for the task to mean anything.
    pub fn new(task: Task, b: usize, t: usize, seed: u64) -> Result<Self, DataError> {
        let min = match task {
            Task::Copy | Task::Reverse => 4,
            Task::Mqar => 8,
        };
        if t < min {
            return Err(DataError::Invalid(format!(
                "the {task} task needs a sequence length (seq_len) of at least {min}, not {t}"
            )));
        }
        if b == 0 {
            return Err(DataError::Invalid("the batch size must be at least 1".into()));
        }
        if b.checked_mul(t).and_then(|n| n.checked_add(b)).is_none() {
            return Err(DataError::Invalid(format!("a batch of {b} × {t} tokens is too large")));
        }
        Ok(Self {
            task,
            b,
            t,
            seed,
            step: 0,
        })
    }

    pub fn task(&self) -> Task {
        self.task
    }

    pub fn b(&self) -> usize {
        self.b
    }

    pub fn t(&self) -> usize {
        self.t
    }

    /// Step `step`'s batch.
    pub fn batch(&self, step: u64) -> Batch {
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(step_seed(self.seed, step));
        let (mut inputs, mut targets) = (Vec::with_capacity(self.b * self.t), Vec::with_capacity(self.b * self.t));
        for _ in 0..self.b {
            let (seq, counted) = self.sequence(&mut rng);
            debug_assert_eq!(seq.len(), self.t + 1);
            inputs.extend(seq.iter().take(self.t).map(|&c| u32::from(c)));
            let next = seq.iter().zip(&counted).skip(1);
            targets.extend(next.map(|(&c, &counts)| if counts { u32::from(c) } else { IGNORE }));
        }
        Batch {
            b: self.b,
            t: self.t,
            inputs,
            targets,
        }
    }

    /// The batch of the next step, counting from 0.
    pub fn next_batch(&mut self) -> Batch {
        let batch = self.batch(self.step);
        self.step = self.step.wrapping_add(1);
        batch
    }

    /// One sequence of T + 1 bytes, and for each byte whether predicting it counts.
    fn sequence(&self, rng: &mut Xoshiro256PlusPlus) -> (Vec<u8>, Vec<bool>) {
        let len = self.t + 1;
        let mut seq = Vec::with_capacity(len);
        let mut counted = Vec::with_capacity(len);
        let mut push = |seq: &mut Vec<u8>, c: u8, counts: bool| {
            seq.push(c);
            counted.push(counts);
        };
        match self.task {
            Task::Copy | Task::Reverse => {
                let n = self.t / 2;
                let xs: Vec<u8> = (0..n).map(|_| SYMBOLS[rng.random_range(0..SYMBOLS.len())]).collect();
                xs.iter().for_each(|&c| push(&mut seq, c, false));
                push(&mut seq, SEP, false);
                let answer: Vec<u8> = if self.task == Task::Copy {
                    xs.clone()
                } else {
                    xs.iter().rev().copied().collect()
                };
                answer.iter().for_each(|&c| push(&mut seq, c, true));
            }
            Task::Mqar => {
                let pairs = (self.t / 4).min(KEYS.len());
                let mut keys = KEYS.to_vec();
                keys.shuffle(rng);
                keys.truncate(pairs);
                let values: Vec<u8> = (0..pairs).map(|_| VALUES[rng.random_range(0..VALUES.len())]).collect();
                for (&k, &v) in keys.iter().zip(&values) {
                    push(&mut seq, k, false);
                    push(&mut seq, v, false);
                }
                push(&mut seq, SEP, false);
                let mut order: Vec<usize> = (0..pairs).collect();
                order.shuffle(rng);
                for i in order {
                    push(&mut seq, keys[i], false);
                    push(&mut seq, values[i], true);
                }
            }
        }
        while seq.len() < len {
            push(&mut seq, PAD, false);
        }
        (seq, counted)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ByteTokenizer;

    #[test]
    fn a_put_sequence_predicts_only_within_its_tokens() {
        let mut batch = Batch {
            b: 2,
            t: 4,
            inputs: vec![9; 8],
            targets: vec![9; 8],
        };
        assert_eq!(batch.put(1, &[1, 2, 3]), 3);
        assert_eq!(batch.inputs, [9, 9, 9, 9, 1, 2, 3, 9]);
        assert_eq!(batch.targets, [9, 9, 9, 9, 2, 3, IGNORE, IGNORE]);
        // Longer than T: its first T, the last of them predicting nothing.
        assert_eq!(batch.put(0, &[5, 6, 7, 8, 4]), 4);
        assert_eq!(batch.inputs[..4], [5, 6, 7, 8]);
        assert_eq!(batch.targets[..4], [6, 7, 8, IGNORE]);
    }

    fn text(task: Task, t: usize) -> (String, String) {
        let batch = TaskSampler::new(task, 1, t, 7).unwrap().next_batch();
        let tok = ByteTokenizer;
        (tok.decode(&batch.inputs), tok.decode(&batch.targets))
    }

    #[test]
    fn copy_counts_only_the_answer() {
        let (inputs, targets) = text(Task::Copy, 10);
        let (prompt, _) = inputs.split_once('|').unwrap();
        assert_eq!(prompt.len(), 5);
        // The answer is the prompt again; everything before it is ignored.
        assert_eq!(targets, format!("·····{prompt}"));
    }

    #[test]
    fn reverse_reverses() {
        // T = 9 is odd: 4 symbols, the separator, 4 answers, and one ignored pad target.
        let batch = TaskSampler::new(Task::Reverse, 1, 9, 7).unwrap().next_batch();
        let rev: Vec<u32> = batch.inputs[..4].iter().rev().copied().collect();
        assert_eq!(batch.inputs[4], u32::from(b'|'));
        assert_eq!(&batch.targets[4..8], &rev[..]);
        assert!(batch.targets[..4]
            .iter()
            .chain(&batch.targets[8..])
            .all(|&t| t == IGNORE));
    }

    #[test]
    fn mqar_recalls_each_value() {
        let batch = TaskSampler::new(Task::Mqar, 3, 32, 1).unwrap().next_batch();
        for r in 0..3 {
            let row = &batch.inputs[r * 32..(r + 1) * 32];
            let tg = &batch.targets[r * 32..(r + 1) * 32];
            for i in 0..32 {
                if tg[i] == IGNORE {
                    continue;
                }
                // The target follows a key; the value stored with that key earlier is the target.
                let key = row[i];
                let pos = row.iter().position(|&c| c == key).unwrap();
                assert_eq!(row[pos + 1], tg[i]);
            }
        }
        assert_eq!(batch.counted(), 3 * 8);
    }

    #[test]
    fn same_seed_same_batches() {
        let mut a = TaskSampler::new(Task::Copy, 4, 16, 3).unwrap();
        let mut b = TaskSampler::new(Task::Copy, 4, 16, 3).unwrap();
        assert_eq!(a.next_batch(), b.next_batch());
    }

    #[test]
    fn batches_are_a_function_of_seed_and_step() {
        let mut a = TaskSampler::new(Task::Mqar, 4, 16, 3).unwrap();
        let b = TaskSampler::new(Task::Mqar, 4, 16, 3).unwrap();
        let drawn: Vec<Batch> = (0..5).map(|_| a.next_batch()).collect();
        // A sampler that starts at step 3 (a resumed run) draws what the first drew there.
        assert_eq!(b.batch(3), drawn[3]);
        assert_ne!(drawn[3], drawn[4]);
        assert_ne!(TaskSampler::new(Task::Mqar, 4, 16, 4).unwrap().batch(3), drawn[3]);
    }

    #[test]
    fn too_short_is_an_error() {
        assert!(TaskSampler::new(Task::Mqar, 1, 5, 0).is_err());
    }
}
