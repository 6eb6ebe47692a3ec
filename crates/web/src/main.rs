//! The resmem playground: train a model on your own GPU through WebGPU and watch it learn.
//! `main` only mounts; the page is in `app.rs`, the training loop in `session.rs`.

#[cfg(target_arch = "wasm32")]
mod app;
#[cfg(target_arch = "wasm32")]
mod chart;
#[cfg(target_arch = "wasm32")]
mod session;

#[cfg(target_arch = "wasm32")]
fn main() {
    console_error_panic_hook::set_once();
    leptos::mount::mount_to_body(app::App);
}

#[cfg(not(target_arch = "wasm32"))]
fn main() {
    eprintln!("the playground runs in a browser: start it with `cargo xtask serve`");
}
