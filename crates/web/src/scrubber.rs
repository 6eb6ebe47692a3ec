//! A step scrubber over a run's measurements, with a play button: the variance grid's and the
//! mixing matrices'.

use leptos::prelude::*;

/// Which measurement of `count` is shown: `chosen`, or the latest while none is.
pub fn shown_index(chosen: Option<usize>, count: usize) -> usize {
    chosen.unwrap_or(count.saturating_sub(1))
}

/// A range over `count` measurements that sets `chosen`, the step of the one shown, and Play,
/// which walks from the shown one (or the first, at the end) to the last. Its elements' ids
/// start with `id`: `{id}play`, `{id}step` and `{id}step-value`.
#[component]
pub fn Scrubber(
    id: &'static str,
    count: Signal<usize>,
    chosen: RwSignal<Option<usize>>,
    step: Signal<Option<usize>>,
) -> impl IntoView {
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
