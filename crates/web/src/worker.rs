//! The CPU engine's Web Worker, and the page's handle on it. Where the browser has no WebGPU
//! the page trains on the CPU in WebAssembly; in the worker, a step never holds up the page.
//!
//! A message is a JavaScript value (serde-wasm-bindgen: a NaN loss stays NaN, where JSON would
//! lose it); a checkpoint's bytes travel beside it as a transferred buffer, never as numbers.

use crate::jobs::{self, Job, Report};
use crate::training::Event;
use crate::training::{Steer, Steering};
use engine::cpu::CpuBackend;
use engine::Backend;
use js_sys::{Array, Uint8Array};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use web_sys::{DedicatedWorkerGlobalScope, MessageEvent, Worker, WorkerOptions, WorkerType};

/// The largest single buffer the CPU engine allocates: wasm32 addresses 4 GiB in all.
pub const CPU_LIMIT_BYTES: u64 = 1 << 30;

/// The worker's script, beside the page: Trunk's loader for the `resmem-worker` program.
const SCRIPT: &str = "./resmem-worker_loader.js";

/// What the page sends the worker.
#[derive(Serialize, Deserialize)]
enum ToWorker {
    Job(Job),
    Steering(Steering),
}

/// A message whose checkpoint bytes, if any, travel beside its JSON.
trait Carries {
    fn bytes(&mut self) -> Option<&mut Arc<Vec<u8>>>;
}

impl Carries for ToWorker {
    fn bytes(&mut self) -> Option<&mut Arc<Vec<u8>>> {
        match self {
            ToWorker::Job(
                Job::Continue { checkpoint, .. } | Job::Sample { checkpoint, .. } | Job::Look { checkpoint, .. },
            ) => Some(checkpoint),
            ToWorker::Job(Job::Import { bytes, .. }) => Some(bytes),
            _ => None,
        }
    }
}

impl Carries for Report {
    fn bytes(&mut self) -> Option<&mut Arc<Vec<u8>>> {
        match self {
            Report::Event {
                event: Event::Checkpoint { bytes, .. },
                ..
            } => Some(bytes),
            _ => None,
        }
    }
}

/// The message, and the buffers to transfer with it.
fn encode(mut msg: impl Serialize + Carries) -> (Array, Array) {
    let bytes = msg.bytes().map(std::mem::take);
    let value = serde_wasm_bindgen::to_value(&msg).unwrap_or_else(|e| format!("unsendable: {e}").into());
    let (parts, transfer) = (Array::of1(&value), Array::new());
    if let Some(bytes) = bytes {
        let copy = Uint8Array::from(&bytes[..]);
        transfer.push(&copy.buffer());
        parts.push(&copy);
    }
    (parts, transfer)
}

fn decode<T: DeserializeOwned + Carries>(data: JsValue) -> Result<T, String> {
    let parts: Array = data.dyn_into().map_err(|_| "not a message of this page".to_string())?;
    let mut msg: T = serde_wasm_bindgen::from_value(parts.get(0)).map_err(|e| e.to_string())?;
    if let (Some(slot), true) = (msg.bytes(), parts.length() > 1) {
        *slot = Arc::new(Uint8Array::new(&parts.get(1)).to_vec());
    }
    Ok(msg)
}

fn message(e: &JsValue) -> String {
    e.dyn_ref::<js_sys::Error>()
        .map(|e| String::from(e.message()))
        .or_else(|| e.as_string())
        .unwrap_or_else(|| format!("{e:?}"))
}

/// The page's handle on the worker.
pub struct CpuWorker {
    worker: Worker,
}

impl CpuWorker {
    /// Starts the worker; what it reports, from [`Report::Ready`] on, goes to `on_report`.
    pub fn start(on_report: impl Fn(Report) + 'static) -> Result<CpuWorker, String> {
        let options = WorkerOptions::new();
        options.set_type(WorkerType::Module);
        let worker = Worker::new_with_options(SCRIPT, &options).map_err(|e| message(&e))?;
        let on_report = Rc::new(on_report);
        let tell = on_report.clone();
        let on_message = Closure::<dyn Fn(MessageEvent)>::new(move |ev: MessageEvent| match decode(ev.data()) {
            Ok(report) => tell(report),
            Err(e) => tell(Report::Crashed(format!("it sent a message the page cannot read ({e})"))),
        });
        // A script that fails to load or to start reports here, not as a message.
        let on_error = Closure::<dyn Fn(web_sys::Event)>::new(move |ev: web_sys::Event| {
            let what = ev
                .dyn_ref::<web_sys::ErrorEvent>()
                .map(|e| e.message())
                .filter(|m| !m.is_empty())
                .unwrap_or_else(|| format!("its script {SCRIPT} could not be loaded"));
            on_report(Report::Crashed(what));
        });
        worker.set_onmessage(Some(on_message.as_ref().unchecked_ref()));
        worker.set_onerror(Some(on_error.as_ref().unchecked_ref()));
        // The worker lives as long as the page.
        on_message.forget();
        on_error.forget();
        Ok(CpuWorker { worker })
    }

    pub fn submit(&self, job: Job) {
        self.post(ToWorker::Job(job));
    }

    pub fn steer(&self, s: Steering) {
        self.post(ToWorker::Steering(s));
    }

    fn post(&self, msg: ToWorker) {
        let (parts, transfer) = encode(msg);
        if let Err(e) = self.worker.post_message_with_transfer(&parts, &transfer) {
            web_sys::console::error_1(&e);
        }
    }

    pub fn stop(&self) {
        self.worker.terminate();
    }
}

fn scope() -> DedicatedWorkerGlobalScope {
    js_sys::global().unchecked_into()
}

/// Sends `report` to the page.
fn tell(report: Report) {
    let (parts, transfer) = encode(report);
    if let Err(e) = scope().post_message_with_transfer(&parts, &transfer) {
        web_sys::console::error_1(&e);
    }
}

/// Tells the page that the engine hit a bug (the worker's panic hook).
pub fn crashed(info: String) {
    tell(Report::Crashed(info));
}

/// The worker's side: makes the CPU engine, says it is ready, and does the page's jobs, one at
/// a time, each handed what the page wants through one steering handle.
pub fn serve() {
    let be = CpuBackend::new();
    let what = be.describe();
    // The engine, lent to one job at a time (empty while a job holds it).
    let engine: Rc<RefCell<Option<CpuBackend>>> = Rc::new(RefCell::new(Some(be)));
    let steer = Steer::default();
    let on_message = Closure::<dyn Fn(MessageEvent)>::new(move |ev: MessageEvent| match decode(ev.data()) {
        Ok(ToWorker::Steering(s)) => steer.set(s),
        Ok(ToWorker::Job(job)) => {
            let Some(be) = engine.borrow_mut().take() else {
                return tell(Report::Status("The CPU engine is busy with another job.".into()));
            };
            let (engine, steer) = (engine.clone(), steer.clone());
            wasm_bindgen_futures::spawn_local(async move {
                let page = jobs::Page {
                    steer: &steer,
                    tell: &tell,
                };
                let be = jobs::run(be, CPU_LIMIT_BYTES, job, page).await;
                *engine.borrow_mut() = Some(be);
            })
        }
        Err(e) => tell(Report::Crashed(format!(
            "the page sent a message the engine cannot read ({e})"
        ))),
    });
    scope().set_onmessage(Some(on_message.as_ref().unchecked_ref()));
    on_message.forget();
    tell(Report::Ready(what));
}
