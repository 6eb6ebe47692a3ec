//! Every run of the session: kept, overlaid on one loss chart with a legend of what differs from
//! the first run, and shown, hidden, looked into or deleted from a list.

use crate::chart::{loss_svg, Curve, PALETTE};
use crate::session::Setup;
use crate::variance::{distances, Snapshot};
use leptos::prelude::*;
use models::buckets::BucketCounts;
use models::count::thousands;
use models::variance::ClosedForm;

#[derive(Clone, Debug, PartialEq)]
pub enum RunState {
    Training,
    Stopped,
    Failed(String),
}

/// One run: what it trained and what it read.
#[derive(Clone, Debug, PartialEq)]
pub struct Run {
    /// 1, 2, …: the order the runs were made, which also picks the colour.
    pub id: usize,
    pub setup: Setup,
    /// The model's sizes in the papers' letters.
    pub model: String,
    pub params: usize,
    pub state: RunState,
    pub visible: bool,
    pub step: usize,
    pub points: Vec<(usize, f32)>,
    pub history: Vec<Snapshot>,
    pub closed: Vec<ClosedForm>,
    /// Bucket hits over the last steps, per hashed layer.
    pub hits: Vec<BucketCounts>,
}

impl Run {
    pub fn new(id: usize, setup: Setup, model: String) -> Run {
        Run {
            id,
            setup,
            model,
            params: 0,
            state: RunState::Training,
            visible: true,
            step: 0,
            points: vec![],
            history: vec![],
            closed: vec![],
            hits: vec![],
        }
    }

    pub fn color(&self) -> plotters::style::RGBColor {
        PALETTE[(self.id - 1) % PALETTE.len()]
    }

    /// "#2 d_k=16": the run's number and what differs from the first run kept; the first run
    /// names its architecture. A run of another architecture names it and its own sizes.
    pub fn label(&self, first: &Run) -> String {
        let name = self.setup.arch.name();
        if self.id == first.id {
            return format!("#{} {name}", self.id);
        }
        let diff = self.setup.differences(&first.setup);
        match (self.setup.arch == first.setup.arch, diff.is_empty()) {
            (true, true) => format!("#{} same settings", self.id),
            (true, false) => format!("#{} {}", self.id, diff.join(", ")),
            (false, true) => format!("#{} {name}", self.id),
            (false, false) => format!("#{} {name}: {}", self.id, diff.join(", ")),
        }
    }
}

fn hex(c: plotters::style::RGBColor) -> String {
    format!("#{:02x}{:02x}{:02x}", c.0, c.1, c.2)
}

/// The visible runs' curves, labelled against the first run kept.
pub fn curves(runs: &[Run]) -> Vec<Curve> {
    let Some(first) = runs.first() else { return vec![] };
    runs.iter()
        .filter(|r| r.visible)
        .map(|r| Curve {
            label: r.label(first),
            color: r.color(),
            points: r.points.clone(),
        })
        .collect()
}

/// The overlaid loss curves.
#[component]
pub fn LossChart(runs: RwSignal<Vec<Run>>) -> impl IntoView {
    view! { <div id="chart" inner_html=move || runs.with(|r| loss_svg(&curves(r)))></div> }
}

/// The list of runs: colour, label, model, parameters, steps, last loss, how far its variance
/// ratios sit from 1, and buttons to show or hide it, look into it, or delete it.
#[component]
pub fn RunList(runs: RwSignal<Vec<Run>>, focus: RwSignal<Option<usize>>) -> impl IntoView {
    let row = move |r: Run, first: Run, focused: bool| {
        let id = r.id;
        let last = r.points.last().map_or("–".to_string(), |p| format!("{:.4}", p.1));
        let variance = r.history.last().map_or("–".to_string(), |s| {
            let (f, b) = distances(&s.measured);
            let x = |d: Option<f64>| d.map_or("–".to_string(), |d| format!("{d:.2}×"));
            format!("{} / {}", x(f), x(b))
        });
        let state = match &r.state {
            RunState::Training => "training".to_string(),
            RunState::Stopped => "done".to_string(),
            RunState::Failed(e) => format!("failed: {e}"),
        };
        let training = r.state == RunState::Training;
        // The curve's points, for anyone who wants the numbers behind it.
        let losses = serde_json::to_string(&r.points).unwrap_or_default();
        view! {
            <tr class:focused=focused data-run=id data-losses=losses>
                <td><span class="swatch" style=format!("background:{}", hex(r.color()))></span></td>
                <td class="run-label">{r.label(&first)}</td>
                <td class="run-model">{r.model.clone()}</td>
                <td class="num">{thousands(r.params as u64)}</td>
                <td class="num">{r.step}</td>
                <td class="num run-loss">{last}</td>
                <td class="num run-variance">{variance}</td>
                <td class="run-state">{state}</td>
                <td>
                    <label><input type="checkbox" class="run-visible" prop:checked=r.visible
                        on:change=move |ev| {
                            let on = event_target_checked(&ev);
                            runs.update(|rs| rs.iter_mut().filter(|r| r.id == id).for_each(|r| r.visible = on));
                        } />" show"</label>
                    " "
                    <button class="run-focus" on:click=move |_| focus.set(Some(id)) prop:disabled=focused>"look"</button>
                    " "
                    <button class="run-delete" prop:disabled=training
                        on:click=move |_| {
                            runs.update(|rs| rs.retain(|r| r.id != id));
                            if focus.get_untracked() == Some(id) {
                                focus.set(None);
                            }
                        }>"delete"</button>
                </td>
            </tr>
        }
    };
    let rows = move || {
        let rs = runs.get();
        let Some(first) = rs.first().cloned() else {
            return vec![];
        };
        let focused = focus.get().or(rs.last().map(|r| r.id));
        rs.into_iter()
            .map(|r| {
                let f = Some(r.id) == focused;
                row(r, first.clone(), f)
            })
            .collect::<Vec<_>>()
    };
    view! {
        <section id="runs">
            <h2>"Runs"</h2>
            <p class="note">"Every run of this session, labelled by what differs from the first. The views below \
                show the run marked \"look\" (the newest unless you pick one). Variance: how far, on average, its last \
                measured ratios sit from 1 (forward / backward); nearer 1× keeps the signal's scale through the depth."</p>
            <table id="run-list">
                <tr><th></th><th>"run"</th><th>"model"</th><th>"parameters"</th><th>"steps"</th><th>"loss"</th>
                    <th>"variance"</th><th></th><th></th></tr>
                {rows}
            </table>
        </section>
    }
}
