//! The page: controls for every setting, Start, Stop and a one-click comparison of the RMT, the
//! transformer of its dimensions and a MemoryFormer; every run kept, overlaid and listed; and,
//! for the run being looked at, its cost beside a transformer, its variance grid and bars, its
//! hash tables' buckets, and the residual stream of the run being trained.

use crate::buckets::BucketView;
use crate::controls::Controls;
use crate::residual::{ResidualView, Residuals};
use crate::runs::{LossChart, Run, RunList, RunState};
use crate::session::{check_limits, costs, describe, Arch, Session, Setup};
use crate::training::{self, Event, Wants};
use crate::variance::{Snapshot, VarianceView};
use data::Task;
use engine::gpu::GpuBackend;
use leptos::prelude::*;
use leptos::task::spawn_local;
use models::count::thousands;
use std::cell::RefCell;
use std::rc::Rc;

/// Whether this browser exposes WebGPU at all (`navigator.gpu`).
fn has_webgpu() -> bool {
    let navigator = web_sys::window().map(|w| w.navigator());
    navigator.is_some_and(|n| js_sys::Reflect::has(&n, &"gpu".into()).unwrap_or(false))
}

const NO_WEBGPU: &str = "This browser does not offer WebGPU, so the playground cannot train here. \
    Open it in a recent Chrome or Edge, or turn WebGPU on in your browser's settings.";

const NO_ADAPTER: &str = "This browser knows WebGPU but found no GPU it may use (WebGPU may be switched off, \
    or the GPU blocked). Turn WebGPU on in the browser's settings or flags, update the graphics driver, \
    or try another browser.";

/// The GPU device, created once and lent to one run at a time.
type Device = Rc<RefCell<Option<GpuBackend>>>;

#[component]
pub fn App() -> impl IntoView {
    let (status, set_status) = signal(String::from("Checking for WebGPU…"));
    let (ready, set_ready) = signal(false);
    let running = RwSignal::new(false);
    let setup = RwSignal::new(Setup::new(Arch::Rmt, Task::Copy));
    let runs = RwSignal::new(Vec::<Run>::new());
    // The run the views show; None: the newest.
    let focus = RwSignal::new(None::<usize>);
    let (step, set_step) = signal(0usize);
    let (loss, set_loss) = signal(None::<f32>);
    // Milliseconds per step, averaged over the recent steps, and tokens per step.
    let (speed, set_speed) = signal(None::<(f64, usize)>);
    // The residual viewer: what was read last, whether it is open, and which sequence.
    let (residuals, set_residuals) = signal(None::<Residuals>);
    let (residual_open, set_residual_open) = signal(false);
    let (residual_seq, set_residual_seq) = signal(0usize);
    let device: Device = Rc::new(RefCell::new(None));

    {
        let device = device.clone();
        spawn_local(async move {
            if !has_webgpu() {
                set_status.set(NO_WEBGPU.into());
                return;
            }
            match GpuBackend::new().await {
                Ok(be) => {
                    let mib = (be.max_binding_values() as u64 * 4) >> 20;
                    set_status.set(format!(
                        "Ready: {} (buffers up to {} MiB)",
                        engine::Backend::describe(&be),
                        thousands(mib)
                    ));
                    *device.borrow_mut() = Some(be);
                    set_ready.set(true);
                }
                Err(engine::EngineError::NoAdapter(_)) => set_status.set(NO_ADAPTER.into()),
                Err(e) => set_status.set(format!("WebGPU could not start: {e}")),
            }
        });
    }

    // Trains `setups` one after another on the one device, each a new run. Every config is
    // checked, against the device's limits too, before anything is built.
    let launch = move |device: Device, setups: Vec<Setup>| {
        let limit = device.borrow().as_ref().map(|be| be.max_binding_values() as u64 * 4);
        let Some(limit) = limit else { return };
        let mut planned = vec![];
        for s in setups {
            match s.config().and_then(|cfg| check_limits(&cfg, limit).map(|_| cfg)) {
                Ok(cfg) => planned.push((s, cfg)),
                Err(e) => {
                    set_status.set(format!(
                        "Refused before building anything: {e}. Change it and press Start again."
                    ));
                    return;
                }
            }
        }
        let Some(mut be) = device.borrow_mut().take() else {
            return;
        };
        running.set(true);
        spawn_local(async move {
            for (s, cfg) in planned {
                if !running.get_untracked() {
                    break;
                }
                let id = runs.with_untracked(|r| r.iter().map(|r| r.id).max().unwrap_or(0)) + 1;
                runs.update(|r| r.push(Run::new(id, s.clone(), describe(&cfg.model))));
                focus.set(None);
                set_step.set(0);
                set_loss.set(None);
                set_speed.set(None);
                set_residuals.set(None);
                let update =
                    move |f: &dyn Fn(&mut Run)| runs.update(|rs| rs.iter_mut().filter(|r| r.id == id).for_each(f));
                let mut session = match Session::new(be, cfg, s.task) {
                    Ok(session) => session,
                    Err((back, e)) => {
                        // The device comes back, so Start works again.
                        be = back;
                        set_status.set(format!("Cannot build the model: {e}"));
                        update(&|r| r.state = RunState::Failed(e.clone()));
                        break;
                    }
                };
                set_status.set(format!(
                    "Training a {}-parameter {} on the {} task ({})",
                    thousands(session.params as u64),
                    s.arch.label(),
                    s.task,
                    engine::Backend::describe(&session.be)
                ));
                let (params, closed) = (session.params, session.closed_form.clone());
                update(&|r| {
                    r.params = params;
                    r.closed = closed.clone();
                });
                let tokens = session.tokens_per_step();
                let emit = move |e: Event| match e {
                    Event::Step(n) => {
                        set_step.set(n);
                        update(&|r| r.step = n);
                    }
                    Event::Loss { step, loss } => {
                        set_loss.set(Some(loss));
                        update(&|r| r.points.push((step, loss)));
                    }
                    Event::Speed(ms) => set_speed.set(Some((ms, tokens))),
                    Event::Measured { step, measured } => update(&|r| {
                        r.history.push(Snapshot {
                            step,
                            measured: measured.clone(),
                        })
                    }),
                    Event::Buckets(hits) => update(&|r| r.hits = hits.clone()),
                    Event::Residuals(read) => set_residuals.set(Some(read)),
                };
                let stop = move || !running.get_untracked();
                let look = move || residual_open.get_untracked().then(|| residual_seq.get_untracked());
                let wants = Wants {
                    stop: &stop,
                    residuals: &look,
                };
                let outcome = training::train(&mut session, wants, &emit).await;
                let n = session.trainer.step;
                be = session.be;
                match outcome {
                    Ok(()) => {
                        update(&|r| r.state = RunState::Stopped);
                        set_status.set(format!("Stopped after {n} steps."));
                    }
                    Err(e) => {
                        set_status.set(format!("Training failed: {e}"));
                        update(&|r| r.state = RunState::Failed(e.clone()));
                        break;
                    }
                }
            }
            running.set(false);
            *device.borrow_mut() = Some(be);
        });
    };
    let start = {
        let device = device.clone();
        move |_| launch(device.clone(), vec![setup.get_untracked()])
    };
    let compare = {
        let device = device.clone();
        move |_| match setup.get_untracked().comparison() {
            Ok(trio) => launch(device.clone(), trio.to_vec()),
            Err(e) => set_status.set(format!("Cannot compare: {e}")),
        }
    };

    // The run the views show.
    let focused = Memo::new(move |_| {
        runs.with(|rs| {
            let id = focus.get();
            rs.iter().find(|r| Some(r.id) == id).or(rs.last()).cloned()
        })
    });
    let history = Signal::derive(move || focused.with(|r| r.as_ref().map(|r| r.history.clone()).unwrap_or_default()));
    let closed = Signal::derive(move || focused.with(|r| r.as_ref().map(|r| r.closed.clone()).unwrap_or_default()));
    let hits = Signal::derive(move || focused.with(|r| r.as_ref().map(|r| r.hits.clone()).unwrap_or_default()));
    let focused_arch = move || focused.with(|r| r.as_ref().map(|r| r.setup.arch));

    view! {
        <main>
            <h1>"resmem playground"</h1>
            <p id="status">{status}</p>
            <Controls setup running=running.into() />
            <div class="controls">
                <button id="start" on:click=start prop:disabled=move || running.get() || !ready.get()>"Start"</button>
                <button id="stop" on:click=move |_| running.set(false) prop:disabled=move || !running.get()>"Stop"</button>
                <button id="compare" on:click=compare prop:disabled=move || running.get() || !ready.get()
                    title="Trains the RMT of these settings, the transformer of its dimensions and a MemoryFormer of its width, in turn, on the same task and seed">
                    "Compare RMT, transformer, MemoryFormer"</button>
            </div>
            <Cost setup />
            <p class="readout">
                "step " <span id="step">{step}</span>
                " · loss " <span id="loss">{move || loss.get().map_or("–".to_string(), |l| format!("{l:.4}"))}</span>
                " · " <span id="speed">{move || speed.get().map_or("–".to_string(), |(ms, tokens)| {
                    format!("{ms:.0} ms/step · {} tokens/s", thousands((tokens as f64 * 1000.0 / ms.max(1e-3)).round() as u64))
                })}</span>
            </p>
            <LossChart runs />
            <RunList runs focus />
            <Show when=move || focused_arch().is_some_and(Arch::has_variance)>
                <VarianceView history closed />
            </Show>
            <Show when=move || focused_arch().is_some_and(Arch::has_buckets)>
                <BucketView hits />
            </Show>
            <ResidualView residuals open=residual_open set_open=set_residual_open seq=residual_seq set_seq=set_residual_seq />
        </main>
    }
}

/// What the chosen config costs beside a transformer of matching dimensions, by the counters
/// `resmem count` prints.
#[component]
fn Cost(setup: RwSignal<Setup>) -> impl IntoView {
    let table = move || {
        let cfg = setup.with(|s| s.config());
        match cfg.and_then(|cfg| Ok((costs(&cfg)?, cfg))) {
            Ok((rows, cfg)) => {
                let n = cfg.model.context();
                let rows = rows
                    .into_iter()
                    .map(|r| {
                        view! {
                            <tr>
                                <td>{r.name}</td>
                                <td class="num">{thousands(r.counts.params)}</td>
                                <td class="num">{thousands(r.counts.flops_per_token(n).round() as u64)}</td>
                            </tr>
                        }
                    })
                    .collect_view();
                view! {
                    <table id="counts">
                        <tr><th>"model"</th><th>"parameters"</th><th>"forward FLOPs / token"</th></tr>
                        {rows}
                    </table>
                    <p class="note">"V=" {cfg.model.vocab()} ", N=T=" {n} ". The RMT's residual can grow (D_k) without adding \
                        parameters or FLOPs beyond the key vectors; the hybrid trades the FF matrix products for hash-table \
                        reads. Counted as resmem count counts them."</p>
                }
                .into_any()
            }
            Err(e) => view! { <p class="error">{e}</p> }.into_any(),
        }
    };
    view! {
        <section id="cost">
            <h2>"Cost"</h2>
            {table}
        </section>
    }
}
