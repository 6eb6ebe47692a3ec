//! Kernels with more than one good configuration (the matmul's tile shape and subgroup path,
//! attention's rows per workgroup) run the one this adapter runs fastest.
//!
//! An op offers its candidates (the first is its default) and a shape class (its exact
//! dimensions). The first launch of a class measures every candidate that fits the device, with
//! timestamp queries where the device has them and the wall clock otherwise, on scratch outputs
//! and in a submission of its own, so that the launches already recorded (a plan being recorded
//! included) are neither run nor reordered. The fastest is kept for the class. Every candidate
//! of an op computes the same chains in the same order, so the choice changes no bit: it changes
//! only the time (tests/gpu_vs_cpu.rs runs the bitwise tests over every candidate).
//!
//! Off unless [`super::GpuOptions::tune`] is set, and never in the browser, where waiting for the
//! device would block the page. The choices outlive the process through whoever made the backend
//! (`resmem`'s cache file): [`GpuBackend::tuning_key`] names the adapter and driver they hold for,
//! [`GpuBackend::load_choices`] takes them back, [`GpuBackend::on_tuned`] hears each new one.

use super::{Dispatch, GpuBackend};
use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;

/// One configuration of a tunable op.
pub trait Candidate: Copy {
    /// What it is called in the cache and in messages, unique among its op's candidates.
    fn name(&self) -> String;
    /// Whether this device can run it (workgroup memory and invocations, subgroups).
    fn fits(&self, gpu: &GpuBackend) -> bool;
}

/// A configuration chosen by measurement.
#[derive(Clone, Debug, PartialEq)]
pub struct Choice {
    /// The op's shape class, e.g. `matmul 4096×1024×256 batch 1 a·bᵀ`.
    pub class: String,
    /// The chosen candidate's [`Candidate::name`].
    pub chosen: String,
    /// Each candidate measured, with its best time in seconds, the default first.
    pub timings: Vec<(String, f64)>,
}

/// Warm-up rounds and timed rounds per measurement; a candidate's time is its best round.
#[cfg(not(target_arch = "wasm32"))]
const WARMUP_ROUNDS: usize = 1;
#[cfg(not(target_arch = "wasm32"))]
const ROUNDS: usize = 3;
/// A candidate replaces the default only when at least this much faster: noise never flips it.
const MARGIN: f64 = 0.97;
/// A measurement whose default takes less than this is taken again on a part of the shape 4×
/// larger (up to the whole shape, [`MAX_GROWTH`] times): on a fast GPU a small part is bound by
/// the launch, not the kernel, and would not tell the tiles apart.
const LONG_ENOUGH_S: f64 = 1e-3;
const MAX_GROWTH: u32 = 4;

/// Who hears each choice measured ([`GpuBackend::on_tuned`]).
type Listener = Rc<dyn Fn(&Choice)>;

#[derive(Default)]
pub(crate) struct Tuner {
    /// Measure candidates ([`super::GpuOptions::tune`]).
    pub(crate) on: bool,
    /// A candidate index per op, set by tests: every launch of the op uses it.
    forced: HashMap<&'static str, usize>,
    /// The chosen candidate's name by class, measured or loaded.
    chosen: HashMap<String, String>,
    /// The classes launched so far with the candidate each used.
    used: BTreeMap<String, String>,
    /// Told of each choice measured.
    listener: Option<Listener>,
    /// Set while candidates are being recorded: their own launches are never tuned.
    measuring: bool,
}

impl Tuner {
    /// A tuner that measures (`on`) or keeps every op's default.
    pub(crate) fn new(on: bool) -> Self {
        Self {
            on,
            ..Default::default()
        }
    }
}

impl GpuBackend {
    /// The candidate the launches of `class` use: the forced one, the one chosen for the class,
    /// or, when tuning is on and this is the class's first launch, the fastest of a measurement
    /// that calls `record` once per candidate. `record(candidate, growth)` records the
    /// candidate's launches on scratch outputs, over a part of the shape that grows 4× with each
    /// `growth`, and says whether that part is the whole shape; its launches never join the
    /// pending work.
    pub(crate) fn tuned<C: Candidate>(
        &self,
        op: &'static str,
        class: impl FnOnce() -> String,
        candidates: &[C],
        record: impl Fn(C, u32) -> bool,
    ) -> C {
        let mut tuner = self.tuner.borrow_mut();
        if let Some(&i) = tuner.forced.get(op) {
            return candidates[i];
        }
        // Untuned (every launch while tuning is off): the first that fits, without allocating.
        let default = candidates
            .iter()
            .copied()
            .find(|c| c.fits(self))
            .unwrap_or(candidates[0]);
        if tuner.measuring || !tuner.on {
            return default;
        }
        let fitting: Vec<C> = candidates.iter().copied().filter(|c| c.fits(self)).collect();
        if fitting.len() < 2 {
            return default;
        }
        let class = class();
        let known = (tuner.chosen.get(&class)).and_then(|name| fitting.iter().position(|c| &c.name() == name));
        if let Some(i) = known {
            tuner.used.insert(class, fitting[i].name());
            return fitting[i];
        }
        drop(tuner);
        // A measurement that fails keeps the default for the class, unheard and so uncached.
        let (best, choice) = match self.measure(&fitting, record) {
            None => (0, None),
            Some(times) => {
                let fastest = (0..times.len()).fold(0, |b, i| if times[i] < times[b] { i } else { b });
                let best = if times[fastest] < times[0] * MARGIN { fastest } else { 0 };
                let timings = fitting.iter().map(Candidate::name).zip(times).collect();
                let choice = Choice {
                    class: class.clone(),
                    chosen: fitting[best].name(),
                    timings,
                };
                (best, Some(choice))
            }
        };
        let listener = {
            let mut tuner = self.tuner.borrow_mut();
            tuner.chosen.insert(class.clone(), fitting[best].name());
            tuner.used.insert(class, fitting[best].name());
            tuner.listener.clone()
        };
        if let (Some(listener), Some(choice)) = (listener, choice) {
            listener(&choice);
        }
        fitting[best]
    }

    /// Each candidate's best time over [`ROUNDS`], on the first part of the shape on which the
    /// default takes [`LONG_ENOUGH_S`] (or the whole shape), or None where it cannot be measured
    /// (the browser, a device error).
    fn measure<C: Candidate>(&self, candidates: &[C], record: impl Fn(C, u32) -> bool) -> Option<Vec<f64>> {
        let mut growth = 0;
        loop {
            let (times, whole) = self.measure_part(candidates, &record, growth);
            let short = times.as_ref().is_some_and(|t| t[0] < LONG_ENOUGH_S);
            if !short || whole || growth == MAX_GROWTH {
                return times;
            }
            growth += 1;
        }
    }

    /// [`Self::measure`] on the part `growth` of the shape, and whether that part is all of it.
    fn measure_part<C: Candidate>(
        &self,
        candidates: &[C],
        record: &impl Fn(C, u32) -> bool,
        growth: u32,
    ) -> (Option<Vec<f64>>, bool) {
        // Record each candidate's launches apart from the pending work, which is put back as it
        // was, and apart from any error already waiting for the next flush, which is put back too:
        // a candidate that fails (a refused launch, a device error) fails the measurement only.
        let saved = std::mem::take(&mut *self.pending.borrow_mut());
        let earlier = self.error.lock().unwrap().take();
        self.tuner.borrow_mut().measuring = true;
        let mut whole = true;
        let launches: Vec<Vec<Dispatch>> = (candidates.iter())
            .map(|&c| {
                whole = record(c, growth);
                std::mem::take(&mut *self.pending.borrow_mut())
            })
            .collect();
        self.tuner.borrow_mut().measuring = false;
        *self.pending.borrow_mut() = saved;
        // A candidate that recorded nothing (its scratch could not be allocated) cannot be timed.
        let refused = self.error.lock().unwrap().is_some() || launches.iter().any(Vec::is_empty);
        let times = if refused { None } else { self.time_candidates(&launches) };
        let failed = self.error.lock().unwrap().take().is_some() || self.lost_reason().is_some();
        *self.error.lock().unwrap() = earlier;
        (times.filter(|_| !failed), whole)
    }

    #[cfg(target_arch = "wasm32")]
    fn time_candidates(&self, _: &[Vec<Dispatch>]) -> Option<Vec<f64>> {
        None
    }

    #[cfg(not(target_arch = "wasm32"))]
    fn time_candidates(&self, launches: &[Vec<Dispatch>]) -> Option<Vec<f64>> {
        let mut best = vec![f64::INFINITY; launches.len()];
        // Rounds interleave the candidates, so that a slow spell of the machine costs each alike.
        let rounds = || (0..WARMUP_ROUNDS + ROUNDS).flat_map(|r| (0..launches.len()).map(move |c| (r, c)));
        if self.timestamps {
            let all: Vec<Dispatch> = rounds().flat_map(|(_, c)| launches[c].iter().cloned()).collect();
            let times = pollster::block_on(self.time_dispatches(&all)).ok()?;
            let mut at = 0;
            for (r, c) in rounds() {
                let t: f64 = times[at..at + launches[c].len()].iter().sum();
                at += launches[c].len();
                if r >= WARMUP_ROUNDS {
                    best[c] = best[c].min(t);
                }
            }
        } else {
            for (r, c) in rounds() {
                let start = std::time::Instant::now();
                self.submit(&launches[c]);
                self.device.poll(wgpu::PollType::wait_indefinitely()).ok()?;
                if r >= WARMUP_ROUNDS {
                    best[c] = best[c].min(start.elapsed().as_secs_f64());
                }
            }
        }
        Some(best)
    }

    /// Makes every launch of `op` use its candidate `index`, whatever tuning would choose: tests
    /// run each candidate this way.
    pub fn force_candidate(&self, op: &'static str, index: usize) {
        self.tuner.borrow_mut().forced.insert(op, index);
    }

    /// Undoes [`Self::force_candidate`] for `op`.
    pub fn unforce(&self, op: &'static str) {
        self.tuner.borrow_mut().forced.remove(op);
    }

    /// What tuned choices hold for: this adapter, its driver and backend, and this build of the
    /// kernels. A cache keeps each key's choices apart.
    pub fn tuning_key(&self) -> String {
        self.tuning_key.clone()
    }

    /// Choices made before (from a cache under [`Self::tuning_key`]), as (class, candidate name):
    /// classes loaded are not measured again. A name no candidate has any more is measured again.
    pub fn load_choices(&self, choices: impl IntoIterator<Item = (String, String)>) {
        self.tuner.borrow_mut().chosen.extend(choices);
    }

    /// The classes launched so far while tuning, with the candidate each used (measured or
    /// loaded), as (class, candidate name), sorted.
    pub fn choices(&self) -> Vec<(String, String)> {
        self.tuner.borrow().used.clone().into_iter().collect()
    }

    /// Calls `listener` with each choice measured from now on.
    pub fn on_tuned(&self, listener: impl Fn(&Choice) + 'static) {
        self.tuner.borrow_mut().listener = Some(Rc::new(listener));
    }

    /// Whether this backend measures candidates ([`super::GpuOptions::tune`], natively).
    pub fn tuning(&self) -> bool {
        self.tuner.borrow().on
    }
}
