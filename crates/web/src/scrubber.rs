//! A step scrubber over a run's readings of one kind, with a play button, and the readings it
//! walks (`Scrubbed`): the variance grid's, the mixing matrices', the depth weights' and
//! AltUp's.

use crate::observed::{series, Observed, Reading, Rows, MEASURE_EVERY};
use leptos::prelude::*;

/// Which measurement of `count` is shown: `chosen`, or the latest while none is.
fn shown_index(chosen: Option<usize>, count: usize) -> usize {
    chosen.unwrap_or(count.saturating_sub(1))
}

/// A range over a view's readings that sets the one chosen, the step of the one shown, and Play,
/// which walks from the shown one (or the first, at the end) to the last. Its elements' ids
/// start with `id`: `{id}play`, `{id}step` and `{id}step-value`.
#[component]
pub fn Scrubber<T: Clone + PartialEq + Send + Sync + 'static>(id: &'static str, over: Scrubbed<T>) -> impl IntoView {
    let Scrubbed {
        chosen, count, step, ..
    } = over;
    let (playing, set_playing) = signal(false);
    let index = move || shown_index(chosen.get(), count.get());
    let play = move |_| {
        if playing.get_untracked() {
            set_playing.set(false);
            return;
        }
        if shown_index(chosen.get_untracked(), count.get_untracked()) + 1 >= count.get_untracked() {
            chosen.set(Some(0));
        }
        set_playing.set(true);
        leptos::task::spawn_local(async move {
            loop {
                gloo_timers::future::TimeoutFuture::new(700).await;
                if !playing.get_untracked() {
                    break;
                }
                let next = chosen.get_untracked().unwrap_or(0) + 1;
                if next >= count.get_untracked() {
                    set_playing.set(false);
                    break;
                }
                chosen.set(Some(next));
            }
        });
    };
    view! {
        <div class="controls">
            <button id=format!("{id}play") on:click=play>{move || if playing.get() { "Pause" } else { "Play" }}</button>
            <label>"Measurement "
                <input id=format!("{id}step") type="range" min="0"
                    prop:max=move || count.get().saturating_sub(1)
                    prop:value=index
                    on:input=move |ev| chosen.set(event_target_value(&ev).parse().ok()) />
                " step " <span id=format!("{id}step-value")>{move || step.get().map_or("–".to_string(), |s| s.to_string())}</span>
                " (" {move || index() + 1} " of " {count} ")"
            </label>
        </div>
    }
}

/// A view's readings of its kind on a step scrubber: all of them (oldest first), the one chosen
/// (None: the latest), how many there are, and the step of the one shown.
pub struct Scrubbed<T: Send + Sync + 'static> {
    pub history: Memo<Vec<Reading<T>>>,
    pub chosen: RwSignal<Option<usize>>,
    pub count: Signal<usize>,
    pub step: Signal<Option<usize>>,
}

impl<T: Send + Sync + 'static> Clone for Scrubbed<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T: Send + Sync + 'static> Copy for Scrubbed<T> {}

impl<T: Clone + PartialEq + Send + Sync + 'static> Scrubbed<T> {
    /// The readings whose rows `pick` takes, typed (`observed::series`).
    pub fn new(readings: Signal<Vec<Observed>>, pick: fn(&Rows) -> Option<&T>) -> Self {
        let history = Memo::new(move |_| readings.with(|r| series(r, pick)));
        let chosen = RwSignal::new(None::<usize>);
        let count = Signal::derive(move || history.with(|h| h.len()));
        let step = Signal::derive(move || history.with(|h| h.get(shown_index(chosen.get(), h.len())).map(|r| r.step)));
        Scrubbed {
            history,
            chosen,
            count,
            step,
        }
    }

    /// The reading shown.
    pub fn shown(self) -> Option<Reading<T>> {
        self.history
            .with(|h| h.get(shown_index(self.chosen.get(), h.len())).cloned())
    }

    /// The reading shown drawn by `draw`, or a word on when there will be one.
    pub fn drawn(self, draw: impl Fn(&T) -> String) -> String {
        let unread = || format!("<p>Read after step 1, then every {MEASURE_EVERY} steps.</p>");
        (self.shown()).map_or_else(unread, |r| draw(&r.rows))
    }

    /// Every reading drawn by `draw`, for a chart over training.
    pub fn over_training(self, draw: impl Fn(&[Reading<T>]) -> String) -> String {
        self.history.with(|h| draw(h))
    }
}

impl<R: Clone + PartialEq + Send + Sync + 'static> Scrubbed<Vec<R>> {
    /// The step of the reading shown and its last row (the last layer's, or the head's): what a
    /// view's one-line summary speaks of.
    pub fn last_row(self) -> Option<(usize, R)> {
        let r = self.shown()?;
        Some((r.step, r.rows.last()?.clone()))
    }
}
