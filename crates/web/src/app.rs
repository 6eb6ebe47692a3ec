//! The page: controls for every setting (restored from and written to the link), Start, Stop
//! and a one-click comparison of the RMT, the transformer of its dimensions and a MemoryFormer;
//! every run kept across reloads, overlaid, listed, exported and continued; checkpoints of
//! `resmem train` imported; and, for the run being looked at, its cost beside a transformer,
//! its variance grid and bars, its hash tables' buckets, its residual stream and its samples.
//!
//! The device (a GPU through WebGPU, or the CPU in WebAssembly where there is none) is lent to
//! one job at a time: training runs, continuing one, importing a checkpoint, or sampling.

use crate::browser::{self, store};
use crate::buckets::BucketView;
use crate::controls::Controls;
use crate::residual::{ResidualView, Residuals};
use crate::runs::{Kept, LossChart, Run, RunList, RunState, Saved};
use crate::sample::{self, Sample, SampleView};
use crate::session::{check_limits, costs, describe, Arch, Link, Session, Setup};
use crate::training::{self, Event, Wants};
use crate::variance::{Snapshot, VarianceView};
use engine::cpu::CpuBackend;
use engine::gpu::GpuBackend;
use engine::Backend;
use leptos::prelude::*;
use leptos::task::spawn_local;
use models::checkpoint;
use models::count::thousands;
use models::RunConfig;
use std::cell::RefCell;
use std::sync::Arc;

/// Whether this browser exposes WebGPU at all (`navigator.gpu`).
fn has_webgpu() -> bool {
    let navigator = web_sys::window().map(|w| w.navigator());
    navigator.is_some_and(|n| js_sys::Reflect::has(&n, &"gpu".into()).unwrap_or(false))
}

const NO_WEBGPU: &str = "This browser does not offer WebGPU. You can train on the CPU instead, in \
    WebAssembly: slower, but every view works. For the GPU, open the page in a recent Chrome or Edge, or \
    turn WebGPU on in your browser's settings.";

const NO_ADAPTER: &str = "This browser knows WebGPU but found no GPU it may use (WebGPU may be switched off, \
    or the GPU blocked). You can train on the CPU instead, in WebAssembly: slower, but every view works. \
    For the GPU, turn WebGPU on in the browser's settings or flags, or update the graphics driver.";

/// The largest single buffer the CPU fallback allocates: wasm32 addresses 4 GiB in all.
const CPU_LIMIT_BYTES: u64 = 1 << 30;

/// What trains: the GPU, or the CPU in WebAssembly.
enum Engine {
    Gpu(Box<GpuBackend>),
    Cpu(CpuBackend),
}

thread_local! {
    /// The device, lent to one job at a time (empty while a job holds it).
    static DEVICE: RefCell<Option<Engine>> = const { RefCell::new(None) };
}

fn lend() -> Option<Engine> {
    DEVICE.with(|d| d.borrow_mut().take())
}

fn give_back(engine: Option<Engine>) {
    DEVICE.with(|d| *d.borrow_mut() = engine);
}

/// What a job does with the device.
#[derive(Clone)]
enum Job {
    /// New runs of these setups, one after another.
    Train(Vec<Setup>),
    /// Run `id` trains on from its checkpoint.
    Continue(usize),
    /// A checkpoint file becomes a run to look at.
    Import { name: String, bytes: Arc<Vec<u8>> },
    /// Run `id`'s checkpoint continues the prompt.
    Sample(usize),
}

/// The page's state that jobs write: signals are handles, so this is Copy.
#[derive(Clone, Copy)]
struct Page {
    status: WriteSignal<String>,
    busy: RwSignal<bool>,
    training: RwSignal<bool>,
    runs: RwSignal<Vec<Run>>,
    focus: RwSignal<Option<usize>>,
    step: WriteSignal<usize>,
    loss: WriteSignal<Option<f32>>,
    speed: WriteSignal<Option<(f64, usize)>>,
    residuals: WriteSignal<Option<Residuals>>,
    residual_open: ReadSignal<bool>,
    residual_seq: ReadSignal<usize>,
    prompt: RwSignal<String>,
    /// The device was lost: the page makes a new one.
    lost: RwSignal<Option<String>>,
}

impl Page {
    fn update(self, id: usize, f: impl Fn(&mut Run)) {
        self.runs.update(|rs| rs.iter_mut().filter(|r| r.id == id).for_each(&f));
    }

    fn next_id(self) -> usize {
        self.runs.with_untracked(|r| r.iter().map(|r| r.id).max().unwrap_or(0)) + 1
    }

    fn run(self, id: usize) -> Option<Run> {
        self.runs.with_untracked(|rs| rs.iter().find(|r| r.id == id).cloned())
    }
}

#[component]
pub fn App() -> impl IntoView {
    let link = Link::parse(&browser::address_query());
    let (status, set_status) = signal(String::from("Checking for WebGPU…"));
    let (ready, set_ready) = signal(false);
    let (offer_cpu, set_offer_cpu) = signal(false);
    let (engine_kind, set_engine_kind) = signal(String::new());
    let setup = RwSignal::new(link.setup.clone());
    let hide_controls = link.hide_controls;
    let link_problems = link.problems.clone();
    let (step, set_step) = signal(0usize);
    let (loss, set_loss) = signal(None::<f32>);
    // Milliseconds per step, averaged over the recent steps, and tokens per step.
    let (speed, set_speed) = signal(None::<(f64, usize)>);
    // The residual viewer: what was read last, whether it is open, and which sequence.
    let (residuals, set_residuals) = signal(None::<Residuals>);
    let (residual_open, set_residual_open) = signal(false);
    let (residual_seq, set_residual_seq) = signal(0usize);
    let page = Page {
        status: set_status,
        busy: RwSignal::new(false),
        training: RwSignal::new(false),
        runs: RwSignal::new(vec![]),
        focus: RwSignal::new(None),
        step: set_step,
        loss: set_loss,
        speed: set_speed,
        residuals: set_residuals,
        residual_open,
        residual_seq,
        prompt: RwSignal::new(sample::default_prompt(link.setup.data).to_string()),
        lost: RwSignal::new(None),
    };

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
        match restore_runs().await {
            Ok(runs) if !runs.is_empty() => page.runs.update(|rs| {
                let mut kept = runs;
                kept.append(rs);
                *rs = kept;
            }),
            Ok(_) => {}
            Err(e) => web_sys::console::warn_1(&format!("the last session's runs could not be read: {e}").into()),
        }
    });

    {
        spawn_local(async move {
            if !has_webgpu() {
                set_status.set(NO_WEBGPU.into());
                set_offer_cpu.set(true);
                return;
            }
            match start_gpu().await {
                Ok(text) => {
                    set_status.set(text);
                    set_engine_kind.set("gpu".into());
                    set_ready.set(true);
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
    let use_cpu = {
        move |_| {
            let be = CpuBackend::new();
            set_status.set(format!(
                "Ready: {} in WebAssembly, slower than a GPU; every view works",
                be.describe()
            ));
            give_back(Some(Engine::Cpu(be)));
            set_offer_cpu.set(false);
            set_engine_kind.set("cpu".into());
            set_ready.set(true);
        }
    };

    let submit = move |job: Job| submit(page, job);
    let start = { move |_| submit(Job::Train(vec![setup.get_untracked()])) };
    let compare = {
        move |_| match setup.get_untracked().comparison() {
            Ok(trio) => submit(Job::Train(trio.to_vec())),
            Err(e) => set_status.set(format!("Cannot compare: {e}")),
        }
    };
    let on_continue = { UnsyncCallback::new(move |id: usize| submit(Job::Continue(id))) };
    let on_delete = UnsyncCallback::new(move |id: usize| {
        spawn_local(async move {
            let _ = store::delete(&Run::checkpoint_key(id)).await;
            save_runs(page).await;
        })
    });
    let clear = move |_| {
        spawn_local(async move {
            match store::clear().await {
                Ok(()) => {
                    page.runs.update(|rs| rs.retain(|r| r.state == RunState::Training));
                    set_status.set("Cleared the runs kept in this browser.".into());
                }
                Err(e) => set_status.set(format!("Cannot clear the stored runs: {e}")),
            }
        })
    };
    let import = {
        move |name: String, bytes: Vec<u8>| {
            submit(Job::Import {
                name,
                bytes: Arc::new(bytes),
            })
        }
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
            let id = page
                .focus
                .get_untracked()
                .or(page.runs.with_untracked(|r| r.last().map(|r| r.id)));
            match id {
                Some(id) => submit(Job::Sample(id)),
                None => set_status.set("Train or import a run first, then sample from it.".into()),
            }
        })
    };
    let recover = {
        move |_| {
            spawn_local(async move {
                set_status.set("Making a new GPU device…".into());
                match start_gpu().await {
                    Ok(text) => {
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
    let runs = page.runs;
    let focus = page.focus;
    let focused = Memo::new(move |_| {
        runs.with(|rs| {
            let id = focus.get();
            rs.iter().find(|r| Some(r.id) == id).or(rs.last()).cloned()
        })
    });
    let history = Signal::derive(move || focused.with(|r| r.as_ref().map(|r| r.history.clone()).unwrap_or_default()));
    let closed = Signal::derive(move || focused.with(|r| r.as_ref().map(|r| r.closed.clone()).unwrap_or_default()));
    let hits = Signal::derive(move || focused.with(|r| r.as_ref().map(|r| r.hits.clone()).unwrap_or_default()));
    let shown_sample = Signal::derive(move || focused.with(|r| r.as_ref().and_then(|r| r.sample.clone())));
    let focused_arch = move || focused.with(|r| r.as_ref().map(|r| r.setup.arch));
    let busy = page.busy;
    let idle = move || !busy.get() && ready.get();
    // New data, new default prompt, unless someone typed their own.
    Effect::new(move |prev: Option<crate::session::Dataset>| {
        let data = setup.with(|s| s.data);
        if let Some(prev) = prev.filter(|p| *p != data) {
            if page.prompt.get_untracked() == sample::default_prompt(prev) {
                page.prompt.set(sample::default_prompt(data).into());
            }
        }
        data
    });

    view! {
        <main class:embedded=hide_controls on:dragover=|ev: web_sys::DragEvent| ev.prevent_default() on:drop=import_dropped>
            <h1>"resmem playground"</h1>
            <p id="status" data-engine=engine_kind>{status}</p>
            <Show when=move || !link_problems.is_empty()>
                <ul id="link-problems" class="error">
                    {link.problems.iter().map(|p| view! { <li>{p.clone()}</li> }).collect_view()}
                </ul>
            </Show>
            <Show when=move || offer_cpu.get()>
                <button id="use-cpu" on:click=use_cpu>"Train on the CPU (slower)"</button>
            </Show>
            <Show when=move || page.lost.get().is_some()>
                <p id="device-lost" class="error">"The GPU device was lost: " {move || page.lost.get().unwrap_or_default()}
                    ". " <button id="recover" on:click=recover prop:disabled=move || busy.get()>"Make a new device"</button></p>
            </Show>
            <div class:hidden=hide_controls>
                <Controls setup running=busy.into() />
                <div class="controls">
                    <button id="start" on:click=start prop:disabled=move || !idle()>"Start"</button>
                    <button id="stop" on:click=move |_| page.training.set(false) prop:disabled=move || !page.training.get()>"Stop"</button>
                    <button id="compare" on:click=compare prop:disabled=move || !idle()
                        title="Trains the RMT of these settings, the transformer of its dimensions and a MemoryFormer of its width, in turn, on the same data and seed">
                        "Compare RMT, transformer, MemoryFormer"</button>
                    <button id="copy-link" on:click=copy_link title="A link that restores these settings: same seed, same curves">"Copy link"</button>
                    <label class="import">"Import a checkpoint "
                        <input id="import" type="file" accept=".safetensors" on:change=import_picked prop:disabled=move || !idle() /></label>
                </div>
                <p class="note">"Or drop a checkpoint written by resmem train anywhere on the page."</p>
                <Cost setup />
            </div>
            <p class="readout">
                "step " <span id="step">{step}</span>
                " · loss " <span id="loss">{move || loss.get().map_or("–".to_string(), |l| format!("{l:.4}"))}</span>
                " · " <span id="speed">{move || speed.get().map_or("–".to_string(), |(ms, tokens)| {
                    format!("{ms:.0} ms/step · {} tokens/s", thousands((tokens as f64 * 1000.0 / ms.max(1e-3)).round() as u64))
                })}</span>
            </p>
            <LossChart runs />
            <RunList runs focus busy=busy.into() on_continue on_delete />
            <p><button id="clear-runs" on:click=clear prop:disabled=move || busy.get()
                title="Forget the runs this browser keeps across reloads">"Clear stored runs"</button></p>
            <SampleView sample=shown_sample prompt=page.prompt busy=busy.into() on_sample=sample_now />
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

/// Makes the GPU device and puts it in the slot; the test hook `window.resmemLoseDevice`
/// destroys it, as a driver reset would.
async fn start_gpu() -> Result<String, engine::EngineError> {
    let be = GpuBackend::new().await?;
    let destroy = be.destroyer();
    let hook = wasm_bindgen::closure::Closure::<dyn Fn()>::new(destroy);
    if let Some(w) = web_sys::window() {
        let _ = js_sys::Reflect::set(&w, &"resmemLoseDevice".into(), hook.as_ref());
    }
    hook.forget();
    let mib = (be.max_binding_values() as u64 * 4) >> 20;
    let text = format!("Ready: {} (buffers up to {} MiB)", be.describe(), thousands(mib));
    give_back(Some(Engine::Gpu(Box::new(be))));
    Ok(text)
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

/// Runs `job` on the device, if it is free.
fn submit(page: Page, job: Job) {
    let Some(engine) = lend() else {
        page.status.set("The device is busy or not ready yet.".into());
        return;
    };
    page.busy.set(true);
    spawn_local(async move {
        match engine {
            Engine::Gpu(be) => {
                let limit = be.max_binding_values() as u64 * 4;
                let be = run_job(*be, limit, page, job).await;
                match page.lost.get_untracked().or(be.lost()) {
                    // A lost device is never lent again: the page offers to make a new one.
                    Some(reason) => page.lost.set(Some(reason)),
                    None => give_back(Some(Engine::Gpu(Box::new(be)))),
                }
            }
            Engine::Cpu(be) => give_back(Some(Engine::Cpu(run_job(be, CPU_LIMIT_BYTES, page, job).await))),
        }
        page.busy.set(false);
        save_runs(page).await;
    });
}

/// Does `job` on `be`, reporting on the page, and gives the backend back.
async fn run_job<B: Backend + 'static>(mut be: B, limit: u64, page: Page, job: Job) -> B {
    match job {
        Job::Train(setups) => {
            // Every config is checked, against the device's limits too, before anything is built.
            let mut planned = vec![];
            for s in setups {
                match s.config().and_then(|cfg| check_limits(&cfg, limit).map(|_| cfg)) {
                    Ok(cfg) => planned.push((s, cfg)),
                    Err(e) => {
                        page.status.set(format!(
                            "Refused before building anything: {e}. Change it and press Start again."
                        ));
                        return be;
                    }
                }
            }
            page.training.set(true);
            for (s, cfg) in planned {
                if !page.training.get_untracked() {
                    break;
                }
                let id = page.next_id();
                page.runs
                    .update(|r| r.push(Run::new(id, s.clone(), describe(&cfg.model))));
                let ok;
                (be, ok) = train_run(be, limit, page, id, cfg, s, None).await;
                if !ok {
                    break;
                }
            }
            page.training.set(false);
        }
        Job::Continue(id) => {
            let Some(run) = page.run(id) else { return be };
            let Some(kept) = run.checkpoint.clone() else { return be };
            match checkpoint_config(&kept.bytes) {
                Ok(cfg) => {
                    page.training.set(true);
                    (be, _) = train_run(be, limit, page, id, cfg, run.setup, Some(kept.bytes)).await;
                    page.training.set(false);
                }
                Err(e) => page.status.set(format!("Cannot continue run #{id}: {e}")),
            }
        }
        Job::Import { name, bytes } => be = import(be, limit, page, &name, bytes).await,
        Job::Sample(id) => {
            let Some(run) = page.run(id) else { return be };
            let Some(kept) = run.checkpoint.clone() else {
                page.status
                    .set(format!("Run #{id} has no checkpoint yet to sample from."));
                return be;
            };
            let cfg = match checkpoint_config(&kept.bytes) {
                Ok(cfg) => cfg,
                Err(e) => {
                    page.status.set(format!("Cannot sample from run #{id}: {e}"));
                    return be;
                }
            };
            let mut session = match Session::open(be, cfg, run.setup.data, limit, Some(&kept.bytes)).await {
                Ok(s) => s,
                Err((back, e)) => {
                    page.status.set(format!("Cannot sample from run #{id}: {e}"));
                    return back;
                }
            };
            let prompt = page.prompt.get_untracked();
            match sample::draw(&mut session, kept.step, &prompt).await {
                Ok(s) => {
                    page.update(id, |r| r.sample = Some(s.clone()));
                    page.status
                        .set(format!("Sampled from run #{id} at step {}.", kept.step));
                }
                Err(e) => page.status.set(format!("Cannot sample from run #{id}: {e}")),
            }
            be = session.be;
        }
    }
    be
}

/// The run config inside a checkpoint file, checked.
fn checkpoint_config(bytes: &[u8]) -> Result<RunConfig, String> {
    let text = checkpoint::config_of(bytes).map_err(|e| e.to_string())?;
    RunConfig::from_toml(&text).map_err(|e| format!("its config is not one this page reads: {e}"))
}

/// Trains run `id` (new, or from `from`, a checkpoint) until its schedule ends or Stop; false
/// when it failed and later runs should not start.
async fn train_run<B: Backend + 'static>(
    be: B,
    limit: u64,
    page: Page,
    id: usize,
    cfg: RunConfig,
    setup: Setup,
    from: Option<Arc<Vec<u8>>>,
) -> (B, bool) {
    page.focus.set(None);
    page.step.set(0);
    page.loss.set(None);
    page.speed.set(None);
    page.residuals.set(None);
    let mut session = match Session::open(be, cfg, setup.data, limit, from.as_deref().map(|b| &b[..])).await {
        Ok(session) => session,
        Err((back, e)) => {
            page.status.set(format!("Cannot build the model: {e}"));
            page.update(id, |r| r.state = RunState::Failed(e.clone()));
            return (back, false);
        }
    };
    page.status.set(format!(
        "Training a {}-parameter {} on {} ({}){}",
        thousands(session.params as u64),
        setup.arch.label(),
        setup.data.label(),
        session.be.describe(),
        if from.is_some() {
            format!(", from step {}", session.trainer.step)
        } else {
            String::new()
        }
    ));
    let (params, closed) = (session.params, session.closed_form.clone());
    // A run continued from step k forgets what it read after k, as `resmem train --resume`
    // does: it will read those steps again.
    let k = session.trainer.step;
    page.update(id, |r| {
        r.params = params;
        r.closed = closed.clone();
        r.state = RunState::Training;
        r.step = k;
        r.points.retain(|p| p.0 <= k);
        r.history.retain(|h| h.step <= k);
    });
    let tokens = session.tokens_per_step();
    let emit = move |e: Event| match e {
        Event::Step(n) => {
            page.step.set(n);
            page.update(id, |r| r.step = n);
        }
        Event::Loss { step, loss } => {
            page.loss.set(Some(loss));
            page.update(id, |r| r.points.push((step, loss)));
        }
        Event::Speed(ms) => page.speed.set(Some((ms, tokens))),
        Event::Measured { step, measured } => page.update(id, |r| {
            r.history.push(Snapshot {
                step,
                measured: measured.clone(),
            })
        }),
        Event::Buckets(hits) => page.update(id, |r| r.hits = hits.clone()),
        Event::Residuals(read) => page.residuals.set(Some(read)),
        Event::Checkpoint { step, bytes } => {
            page.update(id, |r| {
                r.checkpoint = Some(Kept {
                    step,
                    bytes: bytes.clone(),
                })
            });
            spawn_local(save_checkpoint(page, id));
        }
        Event::Sample(s) => page.update(id, |r| r.sample = Some(s.clone())),
    };
    let stop = move || !page.training.get_untracked();
    let look = move || {
        page.residual_open
            .get_untracked()
            .then(|| page.residual_seq.get_untracked())
    };
    let prompt = move || page.prompt.get_untracked();
    let wants = Wants {
        stop: &stop,
        residuals: &look,
        prompt: &prompt,
    };
    let outcome = training::train(&mut session, wants, &emit).await;
    let n = session.trainer.step;
    let be = session.be;
    match outcome {
        Ok(()) => {
            page.update(id, |r| r.state = RunState::Stopped);
            page.status.set(format!("Stopped after {n} steps."));
            (be, true)
        }
        Err(e) => {
            let kept = page.run(id).and_then(|r| r.checkpoint).map(|k| k.step);
            let lost = be_lost(&be).await;
            if let Some(reason) = &lost {
                page.lost.set(Some(reason.clone()));
            }
            let state = match (&lost, kept) {
                (Some(reason), Some(k)) => {
                    page.status.set(format!(
                        "The GPU device was lost at step {n} ({reason}). Run #{id} kept its checkpoint of step {k}: \
                         make a new device, then press \"continue\" to train on from there."
                    ));
                    RunState::Interrupted(format!("the device was lost at step {n}"))
                }
                (Some(reason), None) => {
                    page.status.set(format!(
                        "The GPU device was lost at step {n} ({reason}), before run #{id} kept a checkpoint: make a \
                         new device and start again."
                    ));
                    RunState::Failed(format!("the device was lost at step {n}"))
                }
                _ => {
                    page.status.set(format!("Training failed: {e}"));
                    RunState::Failed(e.clone())
                }
            };
            page.update(id, |r| r.state = state.clone());
            (be, false)
        }
    }
}

/// Why a GPU backend's device was lost, after a failure; None for the CPU, which cannot be.
/// The browser may report the loss after the failed read that revealed it (or not to wgpu at
/// all), so a one-value round trip decides: a live device reads back what was written.
async fn be_lost<B: Backend + 'static>(be: &B) -> Option<String> {
    let gpu = (be as &dyn std::any::Any).downcast_ref::<GpuBackend>()?;
    if let Some(reason) = gpu.lost() {
        return Some(reason);
    }
    let probe = gpu.zeros("device check", 1).ok()?;
    gpu.write(&probe, &[1.0]);
    match gpu.read(&probe).await {
        Ok(v) if v == [1.0] => None,
        Ok(v) => Some(format!("it read back {v:?} for [1.0]")),
        Err(e) => Some(gpu.lost().unwrap_or(e.to_string())),
    }
}

/// A checkpoint file becomes a run: its weights on the first held-out batch, so that the views
/// show what `resmem analyze` computes for it, and a sample.
async fn import<B: Backend + 'static>(be: B, limit: u64, page: Page, name: &str, bytes: Arc<Vec<u8>>) -> B {
    let refuse = |e: String| page.status.set(format!("Cannot import {name}: {e}"));
    let cfg = match checkpoint_config(&bytes) {
        Ok(cfg) => cfg,
        Err(e) => {
            refuse(e);
            return be;
        }
    };
    let Some(setup) = Setup::from_config(&cfg) else {
        refuse(format!(
            "it was trained on data this page does not have ({:?}); look at it with resmem analyze instead",
            cfg.data
        ));
        return be;
    };
    let mut session = match Session::open(be, cfg, setup.data, limit, Some(&bytes)).await {
        Ok(s) => s,
        Err((back, e)) => {
            refuse(e);
            return back;
        }
    };
    let id = page.next_id();
    let step = session.trainer.step;
    let mut run = Run::new(id, setup, describe(&session.cfg.model));
    run.params = session.params;
    run.closed = session.closed_form.clone();
    run.step = step;
    run.state = RunState::Imported(name.to_string());
    run.checkpoint = Some(Kept { step, bytes });
    page.runs.update(|r| r.push(run));
    page.focus.set(Some(id));
    let views = async {
        let loss = session.inspect().await?;
        page.update(id, |r| r.points.push((step, loss)));
        let (depths, inputs) = session.residuals(page.residual_seq.get_untracked()).await?;
        page.residuals.set(Some(Residuals {
            step,
            seq: page.residual_seq.get_untracked(),
            depths,
            inputs,
        }));
        let hits = session.bucket_counts().await?;
        if let Some(measured) = session.measure().await? {
            page.update(id, |r| {
                r.history = vec![Snapshot {
                    step,
                    measured: measured.clone(),
                }]
            });
        }
        page.update(id, |r| r.hits = hits.clone());
        let s: Sample = sample::draw(&mut session, step, &page.prompt.get_untracked()).await?;
        page.update(id, |r| r.sample = Some(s.clone()));
        Ok::<f32, String>(loss)
    };
    match views.await {
        Ok(loss) => page.status.set(format!(
            "Imported {name}: step {step}, held-out loss {loss:.4} ({})",
            session.be.describe()
        )),
        Err(e) => refuse(e),
    }
    save_checkpoint(page, id).await;
    session.be
}

/// The store's key for the list of runs.
const RUNS_KEY: &str = "runs";

/// Keeps the runs (not their checkpoints: `save_checkpoint`) for the next visit.
async fn save_runs(page: Page) {
    let saved: Vec<Saved> = page.runs.with_untracked(|rs| rs.iter().map(Run::saved).collect());
    let json = serde_json::to_string(&saved).unwrap_or_default();
    if let Err(e) = store::put_text(RUNS_KEY, &json).await {
        web_sys::console::warn_1(&format!("the runs could not be kept for the next visit: {e}").into());
    }
}

async fn save_checkpoint(page: Page, id: usize) {
    let Some(kept) = page.run(id).and_then(|r| r.checkpoint) else {
        return;
    };
    if let Err(e) = store::put_bytes(&Run::checkpoint_key(id), &kept.bytes).await {
        web_sys::console::warn_1(&format!("run #{id}'s checkpoint could not be kept: {e}").into());
    }
    save_runs(page).await;
}

/// The runs the last visit kept, with their checkpoints.
async fn restore_runs() -> Result<Vec<Run>, String> {
    let Some(json) = store::get_text(RUNS_KEY).await? else {
        return Ok(vec![]);
    };
    let saved: Vec<Saved> = serde_json::from_str(&json).map_err(|e| e.to_string())?;
    let mut runs = vec![];
    for s in saved {
        let id = s.id();
        let bytes = store::get_bytes(&Run::checkpoint_key(id)).await?;
        runs.push(Run::restored(s, bytes));
    }
    Ok(runs)
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
