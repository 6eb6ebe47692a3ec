//! The page: pick an architecture and a task, start and stop training, and watch the step, the
//! loss and its curve; for the RMT and the hybrid, their cost beside a transformer; for these
//! and the transformer, the variance view; for the MemoryFormer and the hybrid, live histograms of their hash tables'
//! buckets.

use crate::chart::histogram_svg;
use crate::chart::{loss_svg, variance_svg};
use crate::residual::{self, ResidualView, Residuals};
use crate::session::{costs, Arch, Session, Settings};
use data::Task;
use engine::gpu::GpuBackend;
use leptos::prelude::*;
use leptos::task::spawn_local;
use models::buckets::{normalised_entropy, BucketCounts};
use models::count::thousands;
use models::probes::Measured;
use models::variance::ClosedForm;
use std::cell::RefCell;
use std::rc::Rc;

/// Steps the time per step is averaged over.
const SPEED_WINDOW: usize = 10;

/// How often the loss is read back from the GPU, in steps.
const READ_EVERY: usize = 1;
/// How often the variance probes (RMT, hybrid, transformer) run (after step 1, then every this many steps): each
/// measurement costs about one more forward and backward.
const MEASURE_EVERY: usize = 10;

/// Steps whose bucket hits the histograms sum.
const BUCKET_WINDOW: usize = 10;

/// What the training loop reads for the residual viewer, and where it puts it.
#[derive(Clone, Copy)]
struct Look {
    open: ReadSignal<bool>,
    seq: ReadSignal<usize>,
    show: WriteSignal<Option<Residuals>>,
}

/// Variance ratios measured after one step.
#[derive(Clone, Debug, PartialEq)]
struct Snapshot {
    step: usize,
    measured: Vec<Measured>,
}

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

#[component]
pub fn App() -> impl IntoView {
    let (status, set_status) = signal(String::from("Checking for WebGPU…"));
    let (running, set_running) = signal(false);
    let (step, set_step) = signal(0usize);
    let (loss, set_loss) = signal(None::<f32>);
    // Milliseconds per step, averaged over the last SPEED_WINDOW steps, and tokens per step.
    let (speed, set_speed) = signal(None::<(f64, usize)>);
    let (points, set_points) = signal(Vec::<(usize, f32)>::new());
    let (task, set_task) = signal(Task::Copy);
    let (arch, set_arch) = signal(Arch::Rmt);
    let (history, set_history) = signal(Vec::<Snapshot>::new());
    let (closed, set_closed) = signal(Vec::<ClosedForm>::new());
    // The scrubbers of the variance view: which block, and which measurement (None: the latest).
    let (block, set_block) = signal(0usize);
    let (snapshot, set_snapshot) = signal(None::<usize>);
    // Bucket hits summed over the last BUCKET_WINDOW steps, per hashed layer.
    let (hits, set_hits) = signal(Vec::<BucketCounts>::new());
    let (ready, set_ready) = signal(false);
    // The residual viewer: what was read last, whether it is open, and which sequence.
    let (residuals, set_residuals) = signal(None::<Residuals>);
    let (residual_open, set_residual_open) = signal(false);
    let (residual_seq, set_residual_seq) = signal(0usize);
    // The GPU device is created once and reused by every session.
    let device: Rc<RefCell<Option<GpuBackend>>> = Rc::new(RefCell::new(None));

    {
        let device = device.clone();
        spawn_local(async move {
            if !has_webgpu() {
                set_status.set(NO_WEBGPU.into());
                return;
            }
            match GpuBackend::new().await {
                Ok(be) => {
                    set_status.set(format!("Ready: {}", engine::Backend::describe(&be)));
                    *device.borrow_mut() = Some(be);
                    set_ready.set(true);
                }
                Err(engine::EngineError::NoAdapter(_)) => set_status.set(NO_ADAPTER.into()),
                Err(e) => set_status.set(format!("WebGPU could not start: {e}")),
            }
        });
    }

    let start = move |_| {
        let Some(be) = device.borrow_mut().take() else { return };
        let device = device.clone();
        let settings = Settings {
            arch: arch.get_untracked(),
            task: task.get_untracked(),
            ..Settings::default()
        };
        set_points.set(vec![]);
        set_history.set(vec![]);
        set_snapshot.set(None);
        set_hits.set(vec![]);
        set_residuals.set(None);
        set_step.set(0);
        set_loss.set(None);
        set_speed.set(None);
        set_running.set(true);
        spawn_local(async move {
            let mut session = match Session::new(be, settings, 0) {
                Ok(s) => s,
                Err((be, e)) => {
                    set_status.set(format!("Cannot build the model: {e}"));
                    set_running.set(false);
                    // The device comes back, so Start works again.
                    *device.borrow_mut() = Some(be);
                    return;
                }
            };
            set_status.set(format!(
                "Training a {}-parameter {} on the {} task ({})",
                session.params,
                settings.arch.label(),
                settings.task,
                engine::Backend::describe(&session.be)
            ));
            set_closed.set(session.closed_form.clone());
            let on_loss = move |n: usize, l: f32| {
                set_step.set(n);
                set_loss.set(Some(l));
                set_points.update(|p| p.push((n, l)));
            };
            let on_measured = move |step: usize, measured: Vec<Measured>| {
                set_history.update(|h| h.push(Snapshot { step, measured }));
            };
            let on_buckets = move |window: Vec<BucketCounts>| set_hits.set(window);
            let look = Look {
                open: residual_open,
                seq: residual_seq,
                show: set_residuals,
            };
            let tokens = settings.batch * settings.seq_len;
            let on_speed = move |ms: f64| set_speed.set(Some((ms, tokens)));
            let outcome = train(&mut session, running, on_loss, on_measured, on_buckets, on_speed, look).await;
            match outcome {
                Ok(()) => set_status.set(format!("Stopped after {} steps.", session.trainer.step)),
                Err(e) => set_status.set(format!("Training failed: {e}")),
            }
            set_running.set(false);
            *device.borrow_mut() = Some(session.be);
        });

        /// Steps until the schedule ends or Stop is pressed, yielding to the page between steps.
        async fn train(
            session: &mut Session,
            running: ReadSignal<bool>,
            on_loss: impl Fn(usize, f32),
            on_measured: impl Fn(usize, Vec<Measured>),
            on_buckets: impl Fn(Vec<BucketCounts>),
            on_speed: impl Fn(f64),
            look: Look,
        ) -> Result<(), String> {
            let mut window: std::collections::VecDeque<Vec<BucketCounts>> = Default::default();
            let mut step_ms: std::collections::VecDeque<f64> = Default::default();
            while running.get_untracked() && session.trainer.step < session.settings.steps {
                let t0 = js_sys::Date::now();
                session.step()?;
                let n = session.trainer.step;
                // Return to the event loop before awaiting a map, then read.
                gloo_timers::future::TimeoutFuture::new(0).await;
                if n % READ_EVERY == 0 || n == 1 {
                    on_loss(n, session.loss().await?);
                }
                // The loss read waits for the step to finish on the GPU: this is its time, without
                // the views' reads below.
                step_ms.push_back(js_sys::Date::now() - t0);
                if step_ms.len() > SPEED_WINDOW {
                    step_ms.pop_front();
                }
                on_speed(step_ms.iter().sum::<f64>() / step_ms.len() as f64);
                // Before the probes run a forward of their own: these are the step's residuals.
                if look.open.get_untracked() && (n == 1 || n % residual::READ_EVERY == 0) {
                    let seq = look.seq.get_untracked();
                    let (depths, inputs) = session.residuals(seq).await?;
                    look.show.set(Some(Residuals {
                        step: n,
                        seq,
                        depths,
                        inputs,
                    }));
                }
                if n == 1 || n % MEASURE_EVERY == 0 {
                    if let Some(measured) = session.measure().await? {
                        on_measured(n, measured);
                    }
                }
                let counts = session.bucket_counts().await?;
                if !counts.is_empty() {
                    window.push_back(counts);
                    if window.len() > BUCKET_WINDOW {
                        window.pop_front();
                    }
                    let mut sum = window[0].clone();
                    window
                        .iter()
                        .skip(1)
                        .for_each(|w| sum.iter_mut().zip(w).for_each(|(a, b)| a.accumulate(b)));
                    on_buckets(sum);
                }
            }
            Ok(())
        }
    };

    view! {
        <main>
            <h1>"resmem playground"</h1>
            <p id="status">{status}</p>
            <div class="controls">
                <label>"Model "
                    <select
                        id="arch"
                        on:change=move |ev| {
                            if let Some(a) = Arch::parse(&event_target_value(&ev)) {
                                set_arch.set(a)
                            }
                        }
                        prop:disabled=running
                    >
                        {Arch::ALL
                            .iter()
                            .map(|a| view! { <option value=a.name() selected=*a == Arch::Rmt>{a.label()}</option> })
                            .collect_view()}
                    </select>
                </label>
                <label>"Task "
                    <select
                        id="task"
                        on:change=move |ev| {
                            if let Ok(t) = event_target_value(&ev).parse() {
                                set_task.set(t)
                            }
                        }
                        prop:disabled=running
                    >
                        {Task::ALL.iter().map(|t| view! { <option value=t.name()>{t.name()}</option> }).collect_view()}
                    </select>
                </label>
                <button id="start" on:click=start prop:disabled=move || running.get() || !ready.get()>"Start"</button>
                <button id="stop" on:click=move |_| set_running.set(false) prop:disabled=move || !running.get()>"Stop"</button>
            </div>
            <p class="readout">
                "step " <span id="step">{step}</span>
                " · loss " <span id="loss">{move || loss.get().map_or("–".to_string(), |l| format!("{l:.4}"))}</span>
                " · " <span id="speed">{move || speed.get().map_or("–".to_string(), |(ms, tokens)| {
                    format!("{ms:.0} ms/step · {} tokens/s", thousands((tokens as f64 * 1000.0 / ms.max(1e-3)).round() as u64))
                })}</span>
            </p>
            <div id="chart" inner_html=move || loss_svg(&points.get())></div>
            <Show when=move || arch.get().has_variance()>
                <Cost />
                <VarianceView history closed block set_block snapshot set_snapshot />
            </Show>
            <Show when=move || arch.get().has_buckets()>
                <BucketView hits />
            </Show>
            <ResidualView residuals open=residual_open set_open=set_residual_open seq=residual_seq set_seq=set_residual_seq />
        </main>
    }
}

/// What the tiny RMT and hybrid cost beside a transformer of matching dimensions.
#[component]
fn Cost() -> impl IntoView {
    let c = costs();
    let (r, h, t, tt) = (&c.rmt, &c.hybrid, &c.transformer, &c.trained_transformer);
    let seq_len = r.seq_len;
    let row = |name: String, c: models::count::Counts| {
        view! {
            <tr>
                <td>{name}</td>
                <td class="num">{thousands(c.params)}</td>
                <td class="num">{thousands(c.flops_fwd / seq_len as u64)}</td>
            </tr>
        }
    };
    view! {
        <section>
            <h2>"Cost"</h2>
            <table id="counts">
                <tr><th>"model"</th><th>"parameters"</th><th>"forward FLOPs / token"</th></tr>
                {row(format!("RMT: D_k={} D_v={} R={} (residual {})", r.d_k, r.d_v, r.rank, r.residual()), c.rmt_counts)}
                {row(format!("Hybrid: the RMT with a memory block, τ={} (K={})", h.tau, h.chunks()), c.hybrid_counts.counts)}
                {row(format!("Transformer of the RMT's dimensions: D={} H={} D_h={}", t.d_model, t.n_heads, t.head_dim), c.transformer_counts)}
                {row(format!("Transformer trained here: D={} H={} D_h={}", tt.d_model, tt.n_heads, tt.head_dim), c.trained_transformer_counts)}
            </table>
            <p class="note">"All have L=" {r.n_layers} ", V=" {r.vocab} ", N=" {seq_len} "; the RMT and the transformers D_FF="
                {r.d_ff} ". The transformer the page trains is narrower (D=" {tt.d_model} ") than the RMT's twin (D=R·D_v=" {t.d_model} "). The RMT's residual can grow (D_k) without adding parameters or FLOPs beyond the key vectors; \
                the hybrid trades the FF matrix products for hash-table reads ("
                {thousands(c.hybrid_counts.table_params)} " table values)."</p>
        </section>
    }
}

/// Per-block bars of the measured variance ratios, with the closed form marked, and sliders
/// over the blocks and over the measurements taken while training.
#[component]
fn VarianceView(
    history: ReadSignal<Vec<Snapshot>>,
    closed: ReadSignal<Vec<ClosedForm>>,
    block: ReadSignal<usize>,
    set_block: WriteSignal<usize>,
    snapshot: ReadSignal<Option<usize>>,
    set_snapshot: WriteSignal<Option<usize>>,
) -> impl IntoView {
    let blocks = move || {
        history.with(|h| {
            h.last()
                .map_or(0, |s| s.measured.iter().map(|m| m.site.block + 1).max().unwrap_or(0))
        })
    };
    let shown = move || {
        history.with(|h| {
            let i = snapshot.get().unwrap_or(h.len().saturating_sub(1));
            h.get(i).cloned()
        })
    };
    let bars = move || {
        let Some(s) = shown() else {
            return "<p>Measured after step 1, then every 10 steps.</p>".to_string();
        };
        let b = block.get();
        let of_block: Vec<Measured> = s.measured.iter().filter(|m| m.site.block == b).copied().collect();
        variance_svg(&of_block, &closed.get())
    };
    view! {
        <section id="variance">
            <h2>"Variance propagation"</h2>
            <p class="note">"σ²(out)/σ²(in) (blue) and σ²(grad in)/σ²(grad out) (orange) of every storage and retrieval, \
                measured on the training batch (for the transformer, W_QKV and W1 retrieve, W_O and W2 store); \
                black ticks: the closed form at init (RMT paper, Tables 1 and 2)."</p>
            <div class="controls">
                <label>"Block "
                    <input id="block" type="range" min="0"
                        prop:max=move || blocks().saturating_sub(1)
                        prop:value=move || block.get()
                        on:input=move |ev| set_block.set(event_target_value(&ev).parse().unwrap_or(0)) />
                    <span id="block-value">{move || block.get()}</span>
                </label>
                <label>"Step "
                    <input id="vstep" type="range" min="0"
                        prop:max=move || history.with(|h| h.len().saturating_sub(1))
                        prop:value=move || snapshot.get().unwrap_or(history.with(|h| h.len().saturating_sub(1)))
                        on:input=move |ev| set_snapshot.set(event_target_value(&ev).parse().ok()) />
                    <span id="vstep-value">{move || shown().map_or("–".to_string(), |s| s.step.to_string())}</span>
                </label>
            </div>
            <div id="variance-chart" inner_html=bars></div>
        </section>
    }
}

/// Live histograms of the hash tables' bucket use over the last steps, for a chosen layer and
/// table (the MemoryFormer paper's Figure 4).
#[component]
fn BucketView(hits: ReadSignal<Vec<BucketCounts>>) -> impl IntoView {
    let (layer, set_layer) = signal(0usize);
    let (table, set_table) = signal(0usize);
    let selected = move || {
        hits.with(|h| {
            let l = h.get(layer.get().min(h.len().saturating_sub(1)))?;
            l.counts.get(table.get().min(l.counts.len().saturating_sub(1))).cloned()
        })
    };
    let tables = move || hits.with(|h| h.first().map_or(1, |l| l.counts.len()));
    let names = move || hits.with(|h| h.iter().map(|l| l.layer.clone()).collect::<Vec<_>>());
    let stats = move || {
        selected().map_or("Counted while training.".to_string(), |c| {
            let dead = c.iter().filter(|&&n| n == 0).count();
            format!(
                "entropy {:.3} · dead buckets {dead} of {}",
                normalised_entropy(&c),
                c.len()
            )
        })
    };
    view! {
        <section id="buckets">
            <h2>"Hash-table buckets"</h2>
            <p class="note">"How often each bucket of one table was read over the last " {BUCKET_WINDOW}
                " steps; the line is an even share. Entropy 1 means every bucket is used equally."</p>
            <div class="controls">
                <label>"Layer "
                    <select id="bucket-layer" on:change=move |ev| set_layer.set(event_target_value(&ev).parse().unwrap_or(0))>
                        {move || names().into_iter().enumerate().map(|(i, name)| {
                            view! { <option value=i.to_string() selected=i == layer.get_untracked()>{name}</option> }
                        }).collect_view()}
                    </select>
                </label>
                <label>"Table "
                    <input id="bucket-table" type="range" min="0"
                        prop:max=move || tables().saturating_sub(1)
                        prop:value=move || table.get()
                        on:input=move |ev| set_table.set(event_target_value(&ev).parse().unwrap_or(0)) />
                    <span id="bucket-table-value">{move || table.get()}</span>
                </label>
            </div>
            <p id="bucket-stats" class="readout">{stats}</p>
            <div id="histogram" inner_html=move || selected().map(|c| histogram_svg(&c)).unwrap_or_default()></div>
        </section>
    }
}
