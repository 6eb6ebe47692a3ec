//! The resmem playground: train a model on your own GPU through WebGPU and watch it learn.
//!
//! Two programs share these modules: the page (`main.rs`), composed in `app.rs`, and the CPU
//! engine's Web Worker (`bin/worker.rs`), which trains where the browser has no WebGPU without
//! stalling the page. What a device does for the page is `jobs.rs`, the same on either;
//! `worker.rs` carries its messages between the two. Everything here is for the browser.
#![cfg(target_arch = "wasm32")]

mod altup;
pub mod app;
mod arch;
mod browser;
mod buckets;
mod chart;
mod controls;
mod corpus;
mod costs;
mod dataset;
mod depth;
mod device;
mod help;
mod interventions;
pub mod jobs;
mod link;
mod mixing;
mod observed;
mod residual;
mod run_store;
mod runs;
mod sample;
mod save;
mod scrubber;
mod session;
mod settings;
mod setup;
mod training;
mod variance;
pub mod worker;

/// Shows a bug where the user looks (`show`), not only in the console: a page frozen without
/// a word is worse.
pub fn report_panics(show: fn(String)) {
    std::panic::set_hook(Box::new(move |info| {
        console_error_panic_hook::hook(info);
        show(info.to_string());
    }));
}
