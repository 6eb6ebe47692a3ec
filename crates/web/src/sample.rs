//! Text the model writes as it trains: a prompt box, and a continuation drawn every few hundred
//! steps and when the run stops, each token coloured by the probability the model gave it.

use crate::dataset::Dataset;
use crate::help::ViewTitle;
use crate::session::Session;
use data::{Task, Tokenizer, TokenizerKind};
use engine::Backend;
use leptos::prelude::*;
use models::generate::Sampling;
use serde::{Deserialize, Serialize};

/// A sample is drawn every this many steps, and when the run stops.
pub const EVERY: usize = 200;
/// How randomly: a little below 1, as samples of small models read better so.
const TEMPERATURE: f32 = 0.8;

/// A continuation: the prompt, then each token's text and the probability the model gave it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    pub step: usize,
    pub prompt: String,
    pub pieces: Vec<(String, f32)>,
}

/// What the prompt box holds before anyone types.
pub fn default_prompt(data: Dataset) -> &'static str {
    match data {
        Dataset::Task(Task::Copy | Task::Reverse) => "fabcpdoa|",
        Dataset::Task(Task::Mqar) => "a1b2c3d4|b",
        Dataset::Shakespeare(_) => "ROMEO:\n",
    }
}

/// Continues `prompt` with the session's current weights, as `resmem sample` would.
pub async fn draw<B: Backend + 'static>(session: &mut Session<B>, step: usize, prompt: &str) -> Result<Sample, String> {
    let kind = session.cfg.data.tokenizer();
    let tokenizer = Tokenizer::new(kind).map_err(|e| e.to_string())?;
    let tokens = tokenizer.encode(prompt);
    if tokens.is_empty() {
        return Err("the prompt is empty; type some text to continue".into());
    }
    // Each token is a forward: a line of text, or as much of a task's answer as its window holds.
    let count = match (kind, Dataset::of(&session.cfg.data)) {
        (_, Some(Dataset::Task(_))) => 16,
        (TokenizerKind::Bytes, _) => 64,
        (TokenizerKind::Gpt2, _) => 24,
    };
    let how = Sampling {
        temperature: TEMPERATURE,
        top_k: 0,
        seed: step as u64,
    };
    let drawn = session.sample(&tokens, count, how).await?;
    Ok(Sample {
        step,
        prompt: prompt.to_string(),
        pieces: drawn
            .iter()
            .map(|d| (tokenizer.decode(&[d.token]), d.probability))
            .collect(),
    })
}

/// Green where the model was sure of the token it drew, red where it was not.
fn shade(p: f32) -> String {
    format!("hsl({:.0}, 75%, 82%)", 120.0 * p.clamp(0.0, 1.0))
}

#[component]
pub fn SampleView(
    sample: Signal<Option<Sample>>,
    prompt: RwSignal<String>,
    busy: Signal<bool>,
    on_sample: UnsyncCallback<()>,
) -> impl IntoView {
    let text = move || {
        sample.get().map(|s| {
            let written: String = s.pieces.iter().map(|p| p.0.as_str()).collect();
            let pieces = s
                .pieces
                .iter()
                .map(|(t, p)| {
                    view! { <span class="sample-tok" data-p=format!("{p:.4}") title=format!("p = {p:.3}")
                    style=format!("background:{}", shade(*p))>{t.clone()}</span> }
                })
                .collect_view();
            view! {
                <p class="note">"After step " <span id="sample-step">{s.step}</span> ":"</p>
                <pre id="sample" data-text=written>
                    <span class="prompt">{s.prompt.clone()}</span>{pieces}</pre>
            }
        })
    };
    view! {
        // One click away, under the runs: folded until opened.
        <section id="sampling">
          <details id="sample-view" class="secondary">
            <summary>"Sample: the run you look at, continuing a prompt"</summary>
            <ViewTitle title="Sample" what="Each token shaded by the probability the model gave it."
                help="Early on the text is noise. After a few hundred steps on Shakespeare, words, names and line \
                    breaks appear; mostly dark tokens with a few pale ones is a model that has learnt the common \
                    patterns and is surprised by the rest." />
            <label>"Prompt " <textarea id="prompt" rows="2" cols="40" prop:value=move || prompt.get()
                on:input=move |ev| prompt.set(event_target_value(&ev))></textarea></label>
            " "
            <button id="sample-now" prop:disabled=busy on:click=move |_| on_sample.run(())
                title="Continue the prompt with the weights of the run you look at">"Sample now"</button>
            <p class="note">"Drawn every " {EVERY} " steps and when a run stops, at temperature " {TEMPERATURE}
                ". Each token is coloured by the probability the model gave it: "
                <span class="sample-tok" style=shade(1.0)>"sure"</span> " … " <span class="sample-tok" style=shade(0.0)>"surprised"</span> "."</p>
            {text}
          </details>
        </section>
    }
}
