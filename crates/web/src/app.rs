//! The page: pick a task, start and stop training, and watch the step, the loss and its curve.

use crate::chart::loss_svg;
use crate::session::{Session, Settings};
use data::Task;
use engine::gpu::GpuBackend;
use leptos::prelude::*;
use leptos::task::spawn_local;
use std::cell::RefCell;
use std::rc::Rc;

/// How often the loss is read back from the GPU, in steps.
const READ_EVERY: usize = 1;

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
    let (points, set_points) = signal(Vec::<(usize, f32)>::new());
    let (task, set_task) = signal(Task::Copy);
    let (ready, set_ready) = signal(false);
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
            task: task.get_untracked(),
            ..Settings::default()
        };
        set_points.set(vec![]);
        set_step.set(0);
        set_loss.set(None);
        set_running.set(true);
        spawn_local(async move {
            let mut session = match Session::new(be, settings, 0) {
                Ok(s) => s,
                Err(e) => {
                    set_status.set(format!("Cannot build the model: {e}"));
                    set_running.set(false);
                    return;
                }
            };
            set_status.set(format!(
                "Training a {}-parameter transformer on the {} task ({})",
                session.params,
                settings.task,
                engine::Backend::describe(&session.be)
            ));
            let on_loss = move |n: usize, l: f32| {
                set_step.set(n);
                set_loss.set(Some(l));
                set_points.update(|p| p.push((n, l)));
            };
            let outcome = train(&mut session, running, on_loss).await;
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
        ) -> Result<(), String> {
            while running.get_untracked() && session.trainer.step < session.settings.steps {
                session.step()?;
                let n = session.trainer.step;
                if n % READ_EVERY == 0 || n == 1 {
                    // Return to the event loop before awaiting the map, then read.
                    gloo_timers::future::TimeoutFuture::new(0).await;
                    on_loss(n, session.loss().await?);
                } else {
                    gloo_timers::future::TimeoutFuture::new(0).await;
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
            </p>
            <div id="chart" inner_html=move || loss_svg(&points.get())></div>
        </main>
    }
}
