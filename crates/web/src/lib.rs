//! The resmem playground: train a model on your own GPU through WebGPU and watch it learn.
//!
//! Two programs share these modules: the page (`main.rs`), composed in `app.rs`, and the CPU
//! engine's Web Worker (`bin/worker.rs`), which trains where the browser has no WebGPU without
//! stalling the page. What a device does for the page is `jobs.rs`, the same on either;
//! `worker.rs` carries its messages between the two.

#[cfg(target_arch = "wasm32")]
pub mod app;
#[cfg(target_arch = "wasm32")]
mod browser;
#[cfg(target_arch = "wasm32")]
mod buckets;
#[cfg(target_arch = "wasm32")]
mod chart;
#[cfg(target_arch = "wasm32")]
mod controls;
#[cfg(target_arch = "wasm32")]
mod corpus;
#[cfg(target_arch = "wasm32")]
pub mod jobs;
#[cfg(target_arch = "wasm32")]
mod residual;
#[cfg(target_arch = "wasm32")]
mod runs;
#[cfg(target_arch = "wasm32")]
mod sample;
#[cfg(target_arch = "wasm32")]
mod save;
#[cfg(target_arch = "wasm32")]
mod session;
#[cfg(target_arch = "wasm32")]
mod training;
#[cfg(target_arch = "wasm32")]
mod variance;
#[cfg(target_arch = "wasm32")]
pub mod worker;

/// Shows a bug where the user looks (`show`), not only in the console: a page frozen without
/// a word is worse.
#[cfg(target_arch = "wasm32")]
pub fn report_panics(show: fn(String)) {
    std::panic::set_hook(Box::new(move |info| {
        console_error_panic_hook::hook(info);
        show(info.to_string());
    }));
}
