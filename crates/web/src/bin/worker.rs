//! The CPU engine's Web Worker: where the browser has no WebGPU, the page trains here, in
//! WebAssembly, so that a step never stalls the page. It serves `jobs` for the page.

#[cfg(target_arch = "wasm32")]
fn main() {
    resmem_web::report_panics(resmem_web::worker::crashed);
    resmem_web::worker::serve();
}

#[cfg(not(target_arch = "wasm32"))]
fn main() {
    eprintln!("the playground's worker runs in a browser: start the page with `cargo xtask serve`");
}
