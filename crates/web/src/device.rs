//! The page's device: the GPU through WebGPU, or the CPU engine in its Web Worker where there is
//! none (or the GPU is a CPU emulating one), lent to one job at a time; and the handle through
//! which the job reads what the page wants. One slot, held by the page (a stored value, so the
//! handle is Copy), in place of globals.

use crate::jobs::{Job, Report};
use crate::training::{Steer, Steering};
use crate::worker::CpuWorker;
use engine::gpu::GpuBackend;
use engine::Backend;
use leptos::prelude::*;
use models::count::thousands;

/// Whether this browser exposes WebGPU at all (`navigator.gpu`).
pub fn has_webgpu() -> bool {
    let navigator = web_sys::window().map(|w| w.navigator());
    navigator.is_some_and(|n| js_sys::Reflect::has(&n, &"gpu".into()).unwrap_or(false))
}

pub const NO_WEBGPU: &str = "This browser does not offer WebGPU. You can train on the CPU instead, in \
    WebAssembly: slower, but every view works. For the GPU, open the page in a recent Chrome or Edge, or \
    turn WebGPU on in your browser's settings.";

pub const NO_ADAPTER: &str = "This browser knows WebGPU but found no GPU it may use (WebGPU may be switched \
    off, or the GPU blocked). You can train on the CPU instead, in WebAssembly: slower, but every view works. \
    For the GPU, turn WebGPU on in the browser's settings or flags, or update the graphics driver.";

enum Device {
    /// Not made yet, or lost.
    None,
    /// The GPU; None while a job holds it.
    Gpu(Option<Box<GpuBackend>>),
    /// The CPU engine's worker, which keeps its engine and lends it itself.
    Cpu(CpuWorker),
}

struct Slot {
    device: Device,
    steer: Steer,
}

/// What the slot lends a job.
pub enum Lent {
    /// The GPU and the steering handle, with the job to run on them.
    Gpu(Box<GpuBackend>, Steer, Job),
    /// The job was posted to the CPU engine's worker.
    Cpu,
    /// No device is ready, or the GPU is lent already.
    Nothing,
}

#[derive(Clone, Copy)]
pub struct DeviceSlot(StoredValue<Slot, LocalStorage>);

impl DeviceSlot {
    pub fn new() -> DeviceSlot {
        DeviceSlot(StoredValue::new_local(Slot {
            device: Device::None,
            steer: Steer::default(),
        }))
    }

    /// Makes the GPU device and puts it in the slot; the test hook `window.resmemLoseDevice`
    /// destroys it, as a driver reset would. Returns what to say, and whether the adapter is a
    /// CPU emulating a GPU.
    pub async fn start_gpu(self) -> Result<(String, bool), engine::EngineError> {
        let be = GpuBackend::new().await?;
        let destroy = be.destroyer();
        let hook = wasm_bindgen::closure::Closure::<dyn Fn()>::new(destroy);
        if let Some(w) = web_sys::window() {
            let _ = js_sys::Reflect::set(&w, &"resmemLoseDevice".into(), hook.as_ref());
        }
        hook.forget();
        let mib = (be.max_binding_values() as u64 * 4) >> 20;
        let emulated = be.emulated();
        let mut text = format!("Ready: {} (buffers up to {} MiB)", be.describe(), thousands(mib));
        if emulated {
            text.push_str(
                ". This adapter is a CPU emulating a GPU (SwiftShader or llvmpipe): the page's own CPU engine \
                 trains many times faster here, so use it unless you are testing WebGPU.",
            );
        }
        self.0.update_value(|s| s.device = Device::Gpu(Some(Box::new(be))));
        Ok((text, emulated))
    }

    /// Starts the CPU engine's worker, which reports from `Report::Ready` on to `on_report`; from
    /// then on jobs go to it.
    pub fn start_cpu(self, on_report: impl Fn(Report) + 'static) -> Result<(), String> {
        let worker = CpuWorker::start(on_report)?;
        worker.steer(self.0.with_value(|s| s.steer.get()));
        self.0.update_value(|s| s.device = Device::Cpu(worker));
        Ok(())
    }

    /// What the page wants of the job that holds the device, now.
    pub fn steer(self, steering: Steering) {
        self.0.with_value(|s| {
            if let Device::Cpu(worker) = &s.device {
                worker.steer(steering.clone());
            }
            s.steer.set(steering);
        });
    }

    /// Lends the device to `job`: the GPU itself, or, for the CPU engine, the job is posted.
    pub fn lend(self, job: Job) -> Lent {
        let lend = |s: &mut Slot| match &mut s.device {
            Device::Cpu(worker) => {
                worker.submit(job);
                Lent::Cpu
            }
            Device::Gpu(gpu) => match gpu.take() {
                Some(be) => Lent::Gpu(be, s.steer.clone(), job),
                None => Lent::Nothing,
            },
            Device::None => Lent::Nothing,
        };
        self.0.try_update_value(lend).unwrap_or(Lent::Nothing)
    }

    /// The GPU comes back from a job to the slot it was lent from; a lost one is dropped, and
    /// the page offers to make a new one. If the page moved to the CPU engine meanwhile, the
    /// GPU is dropped and the worker stays.
    pub fn give_back(self, be: GpuBackend, lost: bool) {
        self.0.update_value(|s| {
            if let Device::Gpu(slot @ None) = &mut s.device {
                match lost {
                    true => s.device = Device::None,
                    false => *slot = Some(Box::new(be)),
                }
            }
        });
    }

    /// The CPU engine hit a bug: its worker is stopped and the slot emptied.
    pub fn stop_cpu(self) {
        self.0.update_value(|s| {
            if let Device::Cpu(worker) = std::mem::replace(&mut s.device, Device::None) {
                worker.stop();
            }
        });
    }
}
