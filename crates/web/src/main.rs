//! The page: it only mounts; the page is composed in `app.rs`.

#[cfg(target_arch = "wasm32")]
fn main() {
    resmem_web::report_panics(|info| {
        let status = web_sys::window()
            .and_then(|w| w.document())
            .and_then(|d| d.get_element_by_id("status"));
        if let Some(status) = status {
            status.set_text_content(Some(&format!(
                "The page hit a bug and stopped: {info}. Reload the page to start again, and please report it."
            )));
        }
    });
    leptos::mount::mount_to_body(resmem_web::app::App);
}

#[cfg(not(target_arch = "wasm32"))]
fn main() {
    eprintln!("the playground runs in a browser: start it with `cargo xtask serve`");
}
