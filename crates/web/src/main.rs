//! The resmem playground: train a model on your own GPU through WebGPU and watch it learn.
//! `main` only mounts; the page is composed in `app.rs`, the training loop is `training.rs`.

#[cfg(target_arch = "wasm32")]
mod app;
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
fn main() {
    // A bug shows on the page, not only in the console: a page frozen without a word is worse.
    std::panic::set_hook(Box::new(|info| {
        console_error_panic_hook::hook(info);
        let status = web_sys::window()
            .and_then(|w| w.document())
            .and_then(|d| d.get_element_by_id("status"));
        if let Some(status) = status {
            status.set_text_content(Some(&format!(
                "The page hit a bug and stopped: {info}. Reload the page to start again, and please report it."
            )));
        }
    }));
    leptos::mount::mount_to_body(app::App);
}

#[cfg(not(target_arch = "wasm32"))]
fn main() {
    eprintln!("the playground runs in a browser: start it with `cargo xtask serve`");
}
