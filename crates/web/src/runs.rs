//! Every run of the session: kept, overlaid on one loss chart with a legend of what differs from
//! the first run, and shown, hidden, looked into or deleted from a list.

use crate::browser;
use crate::chart::{loss_svg, Curve, PALETTE};
use crate::help::ViewTitle;
use crate::link::Link;
use crate::observed::{Kind, Observed, Rows};
use crate::sample::Sample;
use crate::save::ChartExport;
use crate::setup::Setup;
use crate::variance::{closed_form, distances};
use leptos::prelude::*;
use models::count::thousands;
use models::observe::MixingRow;
use models::probes::Measured;
use models::run::MetricsRow;
use models::variance::ClosedForm;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Arc;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum RunState {
    Training,
    Stopped,
    Failed(String),
    /// Cut short by a lost device; it can continue from its checkpoint.
    Interrupted(String),
    /// Loaded from a checkpoint file, to look at and sample from.
    Imported(String),
}

/// A run's newest checkpoint, in the format `resmem train` writes, kept in memory (and in the
/// browser's store).
#[derive(Clone, Debug)]
pub struct Kept {
    pub step: usize,
    pub bytes: Arc<Vec<u8>>,
}

impl PartialEq for Kept {
    fn eq(&self, other: &Kept) -> bool {
        self.step == other.step && Arc::ptr_eq(&self.bytes, &other.bytes)
    }
}

impl Saved {
    pub fn id(&self) -> usize {
        self.id
    }
}

/// A run as the browser's store keeps it: the setup as its link, and what was read. Its
/// checkpoint is stored beside it under `checkpoint_key`.
#[derive(Serialize, Deserialize)]
pub struct Saved {
    id: usize,
    query: String,
    model: String,
    params: usize,
    state: RunState,
    visible: bool,
    step: usize,
    points: Vec<(usize, f32)>,
    /// The readings of every kind the store keeps (`Kind::saved`); absent in runs stored
    /// before one relay carried them.
    #[serde(default)]
    observed: Vec<Observed>,
    /// How runs stored before that kept their variance ratios and gates: read, never written.
    #[serde(default, skip_serializing)]
    history: Vec<(usize, Vec<Measured>)>,
    #[serde(default, skip_serializing)]
    mixing: Vec<(usize, Vec<MixingRow>)>,
    checkpoint_step: Option<usize>,
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
    /// What it read besides its loss, by kind, oldest first (`observed.rs`).
    pub observed: BTreeMap<Kind, Vec<Observed>>,
    pub closed: Vec<ClosedForm>,
    pub checkpoint: Option<Kept>,
    pub sample: Option<Sample>,
}

impl Run {
    pub fn new(id: usize, setup: Setup, model: String) -> Run {
        Run {
            closed: Run::closed_form(&setup),
            id,
            setup,
            model,
            params: 0,
            state: RunState::Training,
            visible: true,
            step: 0,
            points: vec![],
            observed: BTreeMap::new(),
            checkpoint: None,
            sample: None,
        }
    }

    /// The closed form of the paper's Table 1 for the run's model.
    fn closed_form(setup: &Setup) -> Vec<ClosedForm> {
        setup.config().map(|c| closed_form(&c)).unwrap_or_default()
    }

    /// The store's key for this run's checkpoint.
    pub fn checkpoint_key(id: usize) -> String {
        format!("checkpoint/{id}")
    }

    pub fn saved(&self) -> Saved {
        Saved {
            id: self.id,
            query: self.setup.to_query(),
            model: self.model.clone(),
            params: self.params,
            // A run cut short by the reload can continue from its checkpoint.
            state: match &self.state {
                RunState::Training => RunState::Interrupted("the page was reloaded while it trained".into()),
                s => s.clone(),
            },
            visible: self.visible,
            step: self.step,
            points: self.points.clone(),
            observed: (self.observed.iter())
                .filter(|(kind, _)| kind.saved())
                .flat_map(|(_, readings)| readings.iter().cloned())
                .collect(),
            history: vec![],
            mixing: vec![],
            checkpoint_step: self.checkpoint.as_ref().map(|k| k.step),
        }
    }

    /// A stored run, with its checkpoint's bytes if they were found.
    pub fn restored(saved: Saved, checkpoint: Option<Vec<u8>>) -> Run {
        let setup = Link::parse(&saved.query).setup;
        let closed = Run::closed_form(&setup);
        let older = (saved.history.into_iter())
            .map(|(step, measured)| (step, Rows::Variance(measured)))
            .chain(saved.mixing.into_iter().map(|(step, rows)| (step, Rows::Mixing(rows))))
            .map(|(step, rows)| Observed { step, rows });
        let mut observed = BTreeMap::new();
        for o in older.chain(saved.observed) {
            keep(&mut observed, o);
        }
        Run {
            id: saved.id,
            setup,
            model: saved.model,
            params: saved.params,
            state: saved.state,
            visible: saved.visible,
            step: saved.step,
            points: saved.points,
            observed,
            closed,
            checkpoint: saved.checkpoint_step.zip(checkpoint).map(|(step, bytes)| Kept {
                step,
                bytes: Arc::new(bytes),
            }),
            sample: None,
        }
    }

    /// Keeps a reading, and as many of its kind before it as the kind keeps.
    pub fn observe(&mut self, o: Observed) {
        keep(&mut self.observed, o);
    }

    /// Its readings of `kind`, oldest first.
    pub fn readings(&self, kind: Kind) -> &[Observed] {
        self.observed.get(&kind).map_or(&[], Vec::as_slice)
    }

    /// Forgets what it read after `step`, as a run continued from there will read it again,
    /// and the readings that do not outlive a job (`Kind::saved`).
    pub fn forget_after(&mut self, step: usize) {
        self.points.retain(|p| p.0 <= step);
        self.observed.retain(|kind, _| kind.saved());
        self.observed.values_mut().for_each(|r| r.retain(|o| o.step <= step));
    }

    /// Whether it can train on from its checkpoint.
    pub fn can_continue(&self) -> bool {
        let unfinished = self.setup.config().is_ok_and(|c| self.step < c.train.steps);
        let paused = matches!(
            self.state,
            RunState::Stopped | RunState::Interrupted(_) | RunState::Imported(_)
        );
        self.checkpoint.is_some() && unfinished && paused
    }

    /// The curve as `resmem train`'s metrics.jsonl rows: the same typed row, each loss the
    /// f32 read from the device widened to f64, as the command line writes it.
    pub fn metrics_jsonl(&self) -> String {
        self.points
            .iter()
            .map(|&(step, loss)| {
                let row = MetricsRow {
                    step: step as u64,
                    loss: Some(f64::from(loss)),
                    ..MetricsRow::default()
                };
                row.to_line() + "\n"
            })
            .collect()
    }

    pub fn metrics_csv(&self) -> String {
        let rows: String = self
            .points
            .iter()
            .map(|(step, loss)| format!("{step},{loss}\n"))
            .collect();
        format!("step,loss\n{rows}")
    }

    /// A file name for this run's `what`: run-3-rmt-step-120.safetensors.
    pub fn file_name(&self, what: &str, ext: &str) -> String {
        format!("run-{}-{}-{what}.{ext}", self.id, self.setup.arch.name())
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

/// Adds `o` to its kind's readings, keeping the newest `Kind::keep`.
fn keep(observed: &mut BTreeMap<Kind, Vec<Observed>>, o: Observed) {
    let kind = o.rows.kind();
    let readings = observed.entry(kind).or_default();
    readings.push(o);
    let over = readings.len().saturating_sub(kind.keep());
    readings.drain(..over);
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
    view! {
        <ViewTitle title="Loss" what="Training loss by step of every visible run, one colour each."
            help="Cross-entropy in nats per token on the training batch. An untrained model guesses uniformly: \
                ln V, 5.55 for bytes and 10.8 for GPT-2 tokens. A healthy curve falls fast, then slowly, with some \
                noise from batch to batch. One that climbs, or stops at NaN, had too high a learning rate. Curves \
                compare fairly only on the same data, batch and sequence length: each run's label says what differs." />
        <div id="chart" inner_html=move || runs.with(|r| loss_svg(&curves(r)))></div>
        <ChartExport target="chart" name="loss" />
    }
}

/// The list of runs: colour, label, model, parameters, steps, last loss, how far its variance
/// ratios sit from 1, and buttons to show or hide it, look into it, or delete it.
#[component]
pub fn RunList(
    runs: RwSignal<Vec<Run>>,
    focus: RwSignal<Option<usize>>,
    busy: Signal<bool>,
    on_continue: UnsyncCallback<usize>,
    on_delete: UnsyncCallback<usize>,
) -> impl IntoView {
    let row = move |r: Run, first: Run, focused: bool| {
        let id = r.id;
        let last = r.points.last().map_or("–".to_string(), |p| format!("{:.4}", p.1));
        let variance = r.readings(Kind::Variance).last().map_or("–".to_string(), |o| {
            let Rows::Variance(measured) = &o.rows else {
                return "–".to_string();
            };
            let (f, b) = distances(measured);
            let x = |d: Option<f64>| d.map_or("–".to_string(), |d| format!("{d:.2}×"));
            format!("{} / {}", x(f), x(b))
        });
        let state = match &r.state {
            RunState::Training => "training".to_string(),
            RunState::Stopped => "done".to_string(),
            RunState::Failed(e) => format!("failed: {e}"),
            RunState::Interrupted(e) => format!("interrupted: {e}"),
            RunState::Imported(file) => format!("imported from {file}"),
        };
        let training = r.state == RunState::Training;
        let can_continue = r.can_continue();
        let kept = r.checkpoint.clone();
        let (jsonl, csv) = (r.metrics_jsonl(), r.metrics_csv());
        let (n1, n2, n3) = (
            r.file_name(&format!("step-{}", kept.as_ref().map_or(0, |k| k.step)), "safetensors"),
            r.file_name("metrics", "jsonl"),
            r.file_name("metrics", "csv"),
        );
        let report = move |result: Result<(), String>| {
            if let Err(e) = result {
                web_sys::console::error_1(&format!("export failed: {e}").into());
            }
        };
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
                    <button class="run-continue" prop:disabled=move || !can_continue || busy.get()
                        title="Train on from its checkpoint" on:click=move |_| on_continue.run(id)>"continue"</button>
                    " "
                    <button class="run-checkpoint" prop:disabled=kept.is_none()
                        title="Its checkpoint, as resmem train writes it: resmem eval --run FILE reads it"
                        on:click=move |_| if let Some(k) = &kept { report(browser::offer(&k.bytes, &n1, "application/octet-stream")) }>
                        "checkpoint"</button>
                    " "
                    <button class="run-jsonl" on:click=move |_| report(browser::offer(jsonl.as_bytes(), &n2, "application/jsonl"))>"jsonl"</button>
                    " "
                    <button class="run-csv" on:click=move |_| report(browser::offer(csv.as_bytes(), &n3, "text/csv"))>"csv"</button>
                    " "
                    <button class="run-delete" prop:disabled=training
                        on:click=move |_| {
                            runs.update(|rs| rs.retain(|r| r.id != id));
                            if focus.get_untracked() == Some(id) {
                                focus.set(None);
                            }
                            on_delete.run(id);
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
            <ViewTitle title="Runs" what="Every run of this session, labelled by what differs from the first; \"look\" picks the run the views show."
                help="The views show the run marked \"look\" (the newest unless you pick one). Variance: how far, on \
                    average, its last measured ratios sit from 1 (forward / backward); nearer 1× keeps the signal's scale \
                    through the depth. A run continues from its last checkpoint, and its curve, checkpoint, metrics and \
                    CSV can be downloaded." />
            <table id="run-list">
                <tr><th></th><th>"run"</th><th>"model"</th><th>"parameters"</th><th>"steps"</th><th>"loss"</th>
                    <th>"variance"</th><th></th><th></th></tr>
                {rows}
            </table>
        </section>
    }
}
