//! Every run of the session, the one the views show, and their keeping across reloads in the
//! browser's store: one handle the page's parts share (signals are handles, so it is Copy).

use crate::browser::store;
use crate::observed::{Kind, Observed};
use crate::runs::{Run, Saved};
use leptos::prelude::*;

/// The store's key for the list of runs.
const RUNS_KEY: &str = "runs";

#[derive(Clone, Copy)]
pub struct RunStore {
    pub runs: RwSignal<Vec<Run>>,
    /// The run the views show, when one was picked; else the newest.
    pub focus: RwSignal<Option<usize>>,
}

impl RunStore {
    pub fn new() -> RunStore {
        RunStore {
            runs: RwSignal::new(vec![]),
            focus: RwSignal::new(None),
        }
    }

    pub fn update(self, id: usize, f: impl Fn(&mut Run)) {
        self.runs.update(|rs| rs.iter_mut().filter(|r| r.id == id).for_each(&f));
    }

    pub fn add(self, run: Run) {
        self.runs.update(|r| r.push(run));
    }

    pub fn next_id(self) -> usize {
        self.runs.with_untracked(|r| r.iter().map(|r| r.id).max().unwrap_or(0)) + 1
    }

    pub fn run(self, id: usize) -> Option<Run> {
        self.runs.with_untracked(|rs| rs.iter().find(|r| r.id == id).cloned())
    }

    /// The run the views show, read without tracking: the one picked, or the newest.
    pub fn shown_now(self) -> Option<Run> {
        let id = self.focus.get_untracked();
        self.runs
            .with_untracked(|rs| rs.iter().find(|r| Some(r.id) == id).or(rs.last()).cloned())
    }

    /// The run the views show, tracked.
    pub fn shown(self) -> Memo<Option<Run>> {
        Memo::new(move |_| {
            let id = self.focus.get();
            self.runs
                .with(|rs| rs.iter().find(|r| Some(r.id) == id).or(rs.last()).cloned())
        })
    }

    /// The shown run's readings of `kind`, oldest first: what its view takes.
    pub fn readings(shown: Memo<Option<Run>>, kind: Kind) -> Signal<Vec<Observed>> {
        Signal::derive(move || shown.with(|r| r.as_ref().map(|r| r.readings(kind).to_vec()).unwrap_or_default()))
    }

    /// Keeps the runs (not their checkpoints: `save_checkpoint`) for the next visit.
    pub async fn save(self) {
        let saved: Vec<Saved> = self.runs.with_untracked(|rs| rs.iter().map(Run::saved).collect());
        if let Err(e) = store::put_value(RUNS_KEY, &saved).await {
            web_sys::console::warn_1(&format!("the runs could not be kept for the next visit: {e}").into());
        }
    }

    /// Keeps run `id`'s checkpoint, then the runs.
    pub async fn save_checkpoint(self, id: usize) -> Result<(), String> {
        let Some(kept) = self.run(id).and_then(|r| r.checkpoint) else {
            return Ok(());
        };
        let put = store::put_bytes(&Run::checkpoint_key(id), &kept.bytes).await;
        self.save().await;
        put
    }

    /// Forgets run `id` and its checkpoint.
    pub async fn delete(self, id: usize) {
        let _ = store::delete(&Run::checkpoint_key(id)).await;
        self.save().await;
    }

    /// Puts the runs the last visit kept, with their checkpoints, before this visit's.
    pub async fn restore(self) -> Result<(), String> {
        let Some(saved) = store::get_value::<Vec<Saved>>(RUNS_KEY).await? else {
            return Ok(());
        };
        let mut runs = vec![];
        for s in saved {
            let bytes = store::get_bytes(&Run::checkpoint_key(s.id())).await?;
            runs.push(Run::restored(s, bytes));
        }
        self.runs.update(|rs| {
            runs.append(rs);
            *rs = runs;
        });
        Ok(())
    }
}
