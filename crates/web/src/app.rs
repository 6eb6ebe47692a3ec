//! The page: controls for every setting (restored from and written to the link), Start, Stop
//! and a one-click comparison of the RMT, the transformer of its dimensions and a MemoryFormer;
//! every run kept across reloads, overlaid, listed, exported and continued; checkpoints of
//! `resmem train` imported; and, for the run being looked at, its cost beside a transformer,
//! its variance grid and bars, its hash tables' buckets, its residual stream and its samples.
//!
//! The device (a GPU through WebGPU, or the CPU in WebAssembly where there is none) is lent to
//! one job at a time: training runs, continuing one, importing a checkpoint, or sampling.
//!
//! One file over 600 lines, because it is the composition: every view is its own component
//! file, and what stays here is the state they share and the one lending of the device.

use crate::altup::AltupView;
use crate::browser::{self, store};
use crate::buckets::BucketView;
use crate::controls::Controls;
use crate::costs::costs;
use crate::depth::DepthView;
use crate::device::{has_webgpu, DeviceSlot, Lent, NO_ADAPTER, NO_WEBGPU};
use crate::jobs::{self, Job, Report};
use crate::link::Link;
use crate::mixing::MixingView;
use crate::observed::Kind;
use crate::residual::{Look, ResidualView, Residuals, Viewer};
use crate::run_store::RunStore;
use crate::runs::{Kept, LossChart, Run, RunList, RunState};
use crate::sample::{self, SampleView};
use crate::setup::Setup;
use crate::training::{Event, Steering};
use crate::variance::VarianceView;
use engine::Backend;
use leptos::prelude::*;
use leptos::task::spawn_local;
use models::count::thousands;
use std::sync::Arc;

/// The page's state that jobs write: signals are handles, so this is Copy.
#[derive(Clone, Copy)]
struct Page {
    status: WriteSignal<String>,
    busy: RwSignal<bool>,
    training: RwSignal<bool>,
    runs: RunStore,
    device: DeviceSlot,
    readout: RwSignal<Readout>,
    residuals: WriteSignal<Option<Residuals>>,
    prompt: RwSignal<String>,
    /// The device was lost: the page makes a new one.
    lost: RwSignal<Option<String>>,
    ready: WriteSignal<bool>,
    /// "gpu" or "cpu", once one is ready.
    engine: WriteSignal<String>,
    /// The last "Check this GPU": the device, and each kernel family's row or why it failed.
    selftest: RwSignal<Option<SelftestResult>>,
}

/// The header's line: the step, the last loss read, and the speed (milliseconds a step,
/// averaged over the recent steps, and tokens a step).
#[derive(Clone, Copy, Default)]
struct Readout {
    step: usize,
    loss: Option<f32>,
    speed: Option<(f64, usize)>,
}

type SelftestResult = (String, Result<Vec<engine::selftest::Family>, String>);

#[component]
pub fn App() -> impl IntoView {
    let link = Link::parse(&browser::address_query());
    let (status, set_status) = signal(String::from("Checking for WebGPU…"));
    let (ready, set_ready) = signal(false);
    let (offer_cpu, set_offer_cpu) = signal(false);
    let (cpu_faster, set_cpu_faster) = signal(false);
    let (engine_kind, set_engine_kind) = signal(String::new());
    let setup = RwSignal::new(link.setup.clone());
    let hide_controls = link.hide_controls;
    let link_problems = link.problems.clone();
    let readout = RwSignal::new(Readout::default());
    // The residual viewer: what was read last, whether it is open, and which sequence.
    let (residuals, set_residuals) = signal(None::<Residuals>);
    // On a first visit (no link) the residual view is on: the residual matrix is what the page
    // is for. A link opens it with the checkbox.
    let first_visit = browser::address_query().trim_start_matches('?').is_empty();
    let viewer = Viewer::new(first_visit);
    let page = Page {
        status: set_status,
        busy: RwSignal::new(false),
        training: RwSignal::new(false),
        runs: RunStore::new(),
        device: DeviceSlot::new(),
        readout,
        residuals: set_residuals,
        prompt: RwSignal::new(sample::default_prompt(link.setup.data).to_string()),
        lost: RwSignal::new(None),
        ready: set_ready,
        engine: set_engine_kind,
        selftest: RwSignal::new(None),
    };

    let look = move || viewer.look();
    let look_untracked = move || untrack(look);
    // The running job reads what the page wants: whether to stop, which residuals, the prompt.
    // Tracked on the engine too, so that the CPU worker is told again once it can listen.
    Effect::new(move |_| {
        engine_kind.track();
        page.device.steer(Steering {
            stop: !page.training.get(),
            residuals: look(),
            prompt: page.prompt.get(),
        })
    });

    // The interventions that the shown residuals answer (sites to ablate, how, prompts to
    // patch). A training job answers new ones at its next read, an import those asked when it
    // started; ones the device is free to answer and nobody has read the focused run's
    // checkpoint again. Another token or sequence is read from the residuals already shown.
    let asks = |l: &Look| (l.ablate.clone(), l.how, l.patch.clone());
    let answered = StoredValue::new(None::<Look>);
    Effect::new(move |_| {
        let now = look();
        if page.busy.get() {
            if page.training.get() {
                answered.set_value(now);
            }
            return;
        }
        let new = |now: &Look| answered.with_value(|a| a.as_ref().map(asks) != Some(asks(now)));
        let Some(asked) = now.filter(new) else {
            return;
        };
        let run = page.runs.shown_now();
        let Some((run, kept)) = run.and_then(|r| r.checkpoint.clone().map(|k| (r, k))) else {
            return;
        };
        let patched = residuals.with_untracked(|r| match r.as_ref()?.interventions.patching.clone()? {
            Ok(p) if p.ask == asked.patch && p.step == kept.step => Some(p),
            Ok(_) | Err(_) => None,
        });
        answered.set_value(Some(asked));
        submit(
            page,
            Job::Look {
                id: run.id,
                data: run.setup.data,
                step: kept.step,
                checkpoint: kept.bytes,
                patched,
            },
        );
    });

    // The link always says what the controls say.
    Effect::new(move |_| {
        let mut q = setup.with(Setup::to_query);
        if hide_controls {
            q.push_str("&hide=controls");
        }
        browser::show_query(&q);
    });

    // The last session's runs, with their checkpoints.
    spawn_local(async move {
        if let Err(e) = page.runs.restore().await {
            web_sys::console::warn_1(&format!("the last session's runs could not be read: {e}").into());
        }
    });

    {
        spawn_local(async move {
            if !has_webgpu() {
                set_status.set(NO_WEBGPU.into());
                set_offer_cpu.set(true);
                return;
            }
            match page.device.start_gpu().await {
                Ok((text, emulated)) => {
                    set_status.set(text);
                    set_engine_kind.set("gpu".into());
                    set_ready.set(true);
                    // SwiftShader and llvmpipe run WebGPU on the CPU, far slower than the CPU
                    // engine's own kernels: offer it, and say why.
                    set_cpu_faster.set(emulated);
                    set_offer_cpu.set(emulated);
                }
                Err(engine::EngineError::NoAdapter(_)) => {
                    set_status.set(NO_ADAPTER.into());
                    set_offer_cpu.set(true);
                }
                Err(e) => {
                    set_status.set(format!(
                        "WebGPU could not start: {e}. You can train on the CPU instead."
                    ));
                    set_offer_cpu.set(true);
                }
            }
        });
    }
    let use_cpu = move |_| {
        set_offer_cpu.set(false);
        set_status.set("Starting the CPU engine…".into());
        if let Err(e) = page.device.start_cpu(move |r| apply(page, r)) {
            set_status.set(format!(
                "The CPU engine could not start: {e}. Reload the page, or open it in a browser with WebGPU."
            ));
        }
    };

    let submit = move |job: Job| submit(page, job);
    let train = move |setups: Vec<Setup>| {
        submit(Job::Train {
            first_id: page.runs.next_id(),
            setups,
        })
    };
    let start = move |_| train(vec![setup.get_untracked()]);
    let compare = move |_| match setup.get_untracked().comparison() {
        Ok(trio) => train(trio.to_vec()),
        Err(e) => set_status.set(format!("Cannot compare: {e}")),
    };
    let on_continue = UnsyncCallback::new(move |id: usize| {
        if let Some(run) = page.runs.run(id) {
            match run.checkpoint {
                Some(kept) => submit(Job::Continue {
                    id,
                    data: run.setup.data,
                    checkpoint: kept.bytes,
                }),
                None => set_status.set(format!("Run #{id} has no checkpoint to continue from.")),
            }
        }
    });
    let on_delete = UnsyncCallback::new(move |id: usize| spawn_local(page.runs.delete(id)));
    let clear = move |_| {
        spawn_local(async move {
            match store::clear().await {
                Ok(()) => {
                    page.runs.runs.update(|rs| rs.retain(|r| r.state == RunState::Training));
                    set_status.set("Cleared the runs kept in this browser.".into());
                }
                Err(e) => set_status.set(format!("Cannot clear the stored runs: {e}")),
            }
        })
    };
    let import = move |name: String, bytes: Vec<u8>| {
        answered.set_value(look_untracked());
        submit(Job::Import {
            id: page.runs.next_id(),
            name,
            bytes: Arc::new(bytes),
        })
    };
    let import_picked = {
        move |ev: web_sys::Event| {
            use wasm_bindgen::JsCast;
            let Some(input) = ev.target().map(|t| t.unchecked_into::<web_sys::HtmlInputElement>()) else {
                return;
            };
            if let Some(file) = input.files().and_then(|f| f.get(0)) {
                read_file(file, import);
            }
            input.set_value("");
        }
    };
    let import_dropped = {
        move |ev: web_sys::DragEvent| {
            ev.prevent_default();
            if let Some(file) = ev.data_transfer().and_then(|d| d.files()).and_then(|f| f.get(0)) {
                read_file(file, import);
            }
        }
    };
    let sample_now = {
        UnsyncCallback::new(move |()| {
            let Some(run) = page.runs.shown_now() else {
                return set_status.set("Train or import a run first, then sample from it.".into());
            };
            match run.checkpoint {
                Some(kept) => submit(Job::Sample {
                    id: run.id,
                    data: run.setup.data,
                    step: kept.step,
                    checkpoint: kept.bytes,
                }),
                None => set_status.set(format!("Run #{} has no checkpoint yet to sample from.", run.id)),
            }
        })
    };
    let recover = {
        move |_| {
            spawn_local(async move {
                set_status.set("Making a new GPU device…".into());
                match page.device.start_gpu().await {
                    Ok((text, _)) => {
                        page.lost.set(None);
                        set_status.set(format!(
                            "{text}. The runs kept their checkpoints: press \"continue\" on one to train on from it."
                        ));
                    }
                    Err(e) => set_status.set(format!("The GPU could not be made again: {e}. Reload the page.")),
                }
            })
        }
    };
    let copy_link = move |_| {
        let mut q = setup.with_untracked(Setup::to_query);
        if hide_controls {
            q.push_str("&hide=controls");
        }
        let address = browser::address_with(&q);
        spawn_local(async move {
            match browser::copy(&address).await {
                Ok(()) => set_status.set(format!("Copied the link: {address}")),
                Err(e) => set_status.set(format!("Copy the link by hand ({e}): {address}")),
            }
        })
    };

    // The run the views show.
    let (runs, focus) = (page.runs.runs, page.runs.focus);
    let focused = page.runs.shown();
    let readings = move |kind| RunStore::readings(focused, kind);
    let closed = Signal::derive(move || focused.with(|r| r.as_ref().map(|r| r.closed.clone()).unwrap_or_default()));
    let shown_sample = Signal::derive(move || focused.with(|r| r.as_ref().and_then(|r| r.sample.clone())));
    let focused_arch = move || focused.with(|r| r.as_ref().map(|r| r.setup.arch));
    let shows = move |kind: Kind| move || focused_arch().is_some_and(|a| kind.shown_for(a));
    let busy = page.busy;
    let idle = move || !busy.get() && ready.get();
    // New data, new default prompt, unless someone typed their own.
    Effect::new(move |prev: Option<crate::dataset::Dataset>| {
        let data = setup.with(|s| s.data);
        if let Some(prev) = prev.filter(|p| *p != data) {
            if page.prompt.get_untracked() == sample::default_prompt(prev) {
                page.prompt.set(sample::default_prompt(data).into());
            }
        }
        data
    });

    // One screen: the settings in a side panel, and the views in a grid beside it, so that the
    // loss, the residual matrix and the variance grid (or the buckets) are in sight together.
    view! {
        <main class="playground" class:embedded=hide_controls on:dragover=|ev: web_sys::DragEvent| ev.prevent_default() on:drop=import_dropped>
            <header class="top">
                <h1>"resmem playground"</h1>
                <p class="readout">
                    "step " <span id="step">{move || readout.get().step}</span>
                    " · loss " <span id="loss">{move || readout.get().loss.map_or("–".to_string(), |l| format!("{l:.4}"))}</span>
                    " · " <span id="speed">{move || readout.get().speed.map_or("–".to_string(), |(ms, tokens)| {
                        format!("{ms:.0} ms/step · {} tokens/s", thousands((tokens as f64 * 1000.0 / ms.max(1e-3)).round() as u64))
                    })}</span>
                </p>
                <p id="status" data-engine=engine_kind>{status}</p>
            </header>
            <Show when=move || !link_problems.is_empty()>
                <ul id="link-problems" class="error">
                    {link.problems.iter().map(|p| view! { <li>{p.clone()}</li> }).collect_view()}
                </ul>
            </Show>
            <Show when=move || offer_cpu.get()>
                <button id="use-cpu" on:click=use_cpu>
                    {move || match cpu_faster.get() {
                        true => "Train on the CPU (faster here)",
                        false => "Train on the CPU (slower)",
                    }}
                </button>
            </Show>
            <Show when=move || page.lost.get().is_some()>
                <p id="device-lost" class="error">"The GPU device was lost: " {move || page.lost.get().unwrap_or_default()}
                    ". " <button id="recover" on:click=recover prop:disabled=move || busy.get()>"Make a new device"</button></p>
            </Show>
            <div class="layout">
                <aside class="panel" class:hidden=hide_controls aria-label="Settings">
                    <div class="actions">
                        <button id="start" class="primary" on:click=start prop:disabled=move || !idle()>"Start"</button>
                        <button id="stop" on:click=move |_| page.training.set(false) prop:disabled=move || !page.training.get()>"Stop"</button>
                        <button id="compare" on:click=compare prop:disabled=move || !idle()
                            title="Trains the RMT of these settings, the transformer of its dimensions and a MemoryFormer of its width, in turn, on the same data and seed">
                            "Compare RMT, transformer, MemoryFormer"</button>
                    </div>
                    <Controls setup running=busy.into() />
                    <details class="group" id="cost-group">
                        <summary>"Cost of these settings"</summary>
                        <Cost setup />
                    </details>
                    <details class="group" id="more-actions">
                        <summary>"Share, import, check"</summary>
                        <div class="actions">
                            <button id="copy-link" on:click=copy_link title="A link that restores these settings: same seed, same curves">"Copy link"</button>
                            <Show when=move || engine_kind.with(|e| e == "gpu")>
                                <button id="check-gpu" on:click=move |_| submit(Job::Selftest) prop:disabled=move || !idle()
                                    title="Runs every kernel on this GPU against the CPU on awkward shapes: are its results right?">
                                    "Check this GPU"</button>
                            </Show>
                        </div>
                        <label class="import">"Import a checkpoint "
                            <input id="import" type="file" accept=".safetensors" on:change=import_picked prop:disabled=move || !idle() /></label>
                        <p class="note">"Or drop a checkpoint written by resmem train anywhere on the page."</p>
                    </details>
                    <SelftestView result=page.selftest />
                </aside>
                <div class="views">
                    <section class="pane pane-loss">
                        <LossChart runs />
                        <RunList runs focus busy=busy.into() on_continue on_delete />
                        <p><button id="clear-runs" on:click=clear prop:disabled=move || busy.get()
                            title="Forget the runs this browser keeps across reloads">"Clear stored runs"</button></p>
                        <SampleView sample=shown_sample prompt=page.prompt busy=busy.into() on_sample=sample_now />
                    </section>
                    <section class="pane pane-residual">
                        <ResidualView residuals viewer />
                    </section>
                    <section class="pane pane-inside">
                        <Show when=shows(Kind::Variance)>
                            <VarianceView readings=readings(Kind::Variance) closed />
                        </Show>
                        <Show when=shows(Kind::Buckets)>
                            <BucketView readings=readings(Kind::Buckets) />
                        </Show>
                        <Show when=shows(Kind::Mixing)>
                            <MixingView readings=readings(Kind::Mixing) />
                        </Show>
                        <Show when=shows(Kind::Depth)>
                            <DepthView readings=readings(Kind::Depth) />
                        </Show>
                        <Show when=shows(Kind::Altup)>
                            <AltupView readings=readings(Kind::Altup) />
                        </Show>
                        <Show when=move || focused_arch().is_none()>
                            <p class="note">"Start a run: what it reads inside (its variance grid, bucket use, mixing of \
                                streams, attention over depth or AltUp's sub-blocks) shows here."</p>
                        </Show>
                        <Show when=move || focused_arch().is_some_and(|a| Kind::ALL.iter().all(|k| !k.shown_for(a)))>
                            <p class="note">"This run's model has no view of its own here yet: its residual stream, attention \
                                and logit lens are in the residual view."</p>
                        </Show>
                    </section>
                </div>
            </div>
        </main>
    }
}

/// Reads a picked or dropped file, then hands its bytes on.
fn read_file(file: web_sys::File, then: impl Fn(String, Vec<u8>) + 'static) {
    spawn_local(async move {
        let name = file.name();
        match wasm_bindgen_futures::JsFuture::from(file.array_buffer()).await {
            Ok(buffer) => then(name, js_sys::Uint8Array::new(&buffer).to_vec()),
            Err(e) => web_sys::console::error_1(&e),
        }
    })
}

/// Runs `job` on the device, if it is free: the GPU here, or the CPU engine in its worker.
/// Either way the job reports through `apply`, and its last report, `Done`, frees the device.
fn submit(page: Page, job: Job) {
    if page.busy.get_untracked() {
        return page
            .status
            .set("The device is busy; wait for it, or press Stop.".into());
    }
    let (be, steer, job) = match page.device.lend(job) {
        Lent::Cpu => return page.busy.set(true),
        Lent::Nothing => return page.status.set("The device is not ready yet.".into()),
        Lent::Gpu(be, steer, job) => (*be, steer, job),
    };
    page.busy.set(true);
    spawn_local(async move {
        let limit = be.max_binding_values() as u64 * 4;
        let tell = move |r| apply(page, r);
        let be = jobs::run(
            be,
            limit,
            job,
            jobs::Page {
                steer: &steer,
                tell: &tell,
            },
        )
        .await;
        // A lost device is never lent again: the page offers to make a new one.
        let lost = page.lost.get_untracked().or(be.lost());
        page.device.give_back(be, lost.is_some());
        if let Some(reason) = lost {
            page.lost.set(Some(reason));
        }
    });
}

/// What the device reported, shown.
fn apply(page: Page, report: Report) {
    match report {
        Report::Ready(what) => {
            page.status.set(format!(
                "Ready: {what} in WebAssembly, in a worker beside the page: slower than a GPU; every view works"
            ));
            page.engine.set("cpu".into());
            page.ready.set(true);
        }
        Report::Status(text) => page.status.set(text),
        Report::Training(on) => page.training.set(on),
        Report::Begin { id, new } => {
            page.runs.focus.set(None);
            page.readout.set(Readout::default());
            page.residuals.set(None);
            if let Some((setup, model)) = new {
                page.runs.add(Run::new(id, setup, model));
            }
        }
        // A run continued from step k forgets what it read after k, as `resmem train
        // --resume` does: it will read those steps again.
        Report::Built { id, params, step } => page.runs.update(id, |r| {
            r.params = params;
            r.state = RunState::Training;
            r.step = step;
            r.forget_after(step);
        }),
        Report::Imported {
            id,
            name,
            setup,
            model,
            params,
            step,
        } => {
            let mut run = Run::new(id, setup, model);
            run.params = params;
            run.step = step;
            run.state = RunState::Imported(name);
            page.runs.add(run);
            page.runs.focus.set(Some(id));
        }
        Report::Event { id, event } => show(page, id, event),
        Report::State { id, state } => page.runs.update(id, |r| r.state = state.clone()),
        Report::Selftest { device, families } => {
            page.status.set(match &families {
                Ok(fs) => match fs.iter().map(|f| f.failed).sum::<usize>() {
                    0 => format!("Every kernel on {device} matches the CPU within its tolerance."),
                    n => format!("{n} kernel checks failed on {device}: its results cannot be trusted. Update its driver, or train on the CPU."),
                },
                Err(e) => format!("The check could not run on {device}: {e}"),
            });
            page.selftest.set(Some((device, families)));
        }
        Report::Lost(reason) => page.lost.set(Some(reason)),
        Report::Done => {
            page.busy.set(false);
            spawn_local(page.runs.save());
        }
        Report::Crashed(what) => {
            page.status.set(format!(
                "The CPU engine hit a bug and stopped: {what}. Reload the page to start again, and please report it."
            ));
            page.device.stop_cpu();
            page.training.set(false);
            page.ready.set(false);
            page.busy.set(false);
        }
    }
}

/// What run `id` read, shown.
fn show(page: Page, id: usize, event: Event) {
    let runs = page.runs;
    match event {
        Event::Step(n) => {
            page.readout.update(|r| r.step = n);
            runs.update(id, |r| r.step = n);
        }
        Event::Loss { step, loss } => {
            page.readout.update(|r| r.loss = Some(loss));
            runs.update(id, |r| r.points.push((step, loss)));
        }
        Event::Speed { ms, tokens } => page.readout.update(|r| r.speed = Some((ms, tokens))),
        Event::Observed(o) => runs.update(id, |r| r.observe(o.clone())),
        Event::Residuals(read) => page.residuals.set(Some(read)),
        Event::Checkpoint { step, bytes } => {
            runs.update(id, |r| {
                r.checkpoint = Some(Kept {
                    step,
                    bytes: bytes.clone(),
                })
            });
            spawn_local(async move {
                if let Err(e) = runs.save_checkpoint(id).await {
                    page.status.set(format!(
                        "Run #{id}'s checkpoint could not be kept for your next visit ({e}); its \"checkpoint\" \
                         button downloads it."
                    ));
                }
            });
        }
        Event::Sample(s) => runs.update(id, |r| r.sample = Some(s.clone())),
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

/// The last "Check this GPU": a row per kernel family, its worst error against its tolerance.
#[component]
fn SelftestView(result: RwSignal<Option<SelftestResult>>) -> impl IntoView {
    move || {
        result.get().map(|(device, families)| match families {
            Ok(families) => view! {
                <table id="selftest" data-device=device>
                    <thead><tr><th>"kernel family"</th><th>"checks"</th><th>"worst error"</th><th>"tolerance"</th><th>"result"</th></tr></thead>
                    <tbody>
                        {families.into_iter().map(|f| {
                            let passed = f.failed == 0;
                            let family = f.family.clone();
                            let result = match passed {
                                true => "pass".to_string(),
                                false => format!("FAIL: {}", f.failures.join("; ")),
                            };
                            view! {
                                <tr data-family=family data-result=if passed { "pass" } else { "fail" }>
                                    <td>{f.family}</td><td>{f.checks}</td><td>{format!("{:.1e}", f.worst)}</td>
                                    <td>{format!("{:.0e}", f.tolerance)}</td><td class:error=!passed>{result}</td>
                                </tr>
                            }
                        }).collect_view()}
                    </tbody>
                </table>
            }
            .into_any(),
            Err(e) => view! { <p id="selftest" class="error">{format!("The check could not run on {device}: {e}")}</p> }.into_any(),
        })
    }
}
