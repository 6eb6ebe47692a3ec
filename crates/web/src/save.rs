//! Saving a chart as the page shows it, as SVG or PNG.

use leptos::prelude::*;

/// Buttons that save the chart drawn inside the element `target` as SVG or PNG.
#[component]
pub fn ChartExport(target: &'static str, name: &'static str) -> impl IntoView {
    let failed = |e: String| web_sys::console::error_1(&format!("cannot save the chart: {e}").into());
    let svg = move |_| {
        if let Err(e) = crate::browser::chart_svg(target, &format!("{name}.svg")) {
            failed(e)
        }
    };
    let png = move |_| {
        leptos::task::spawn_local(async move {
            if let Err(e) = crate::browser::chart_png(target, &format!("{name}.png")).await {
                failed(e)
            }
        })
    };
    view! {
        <p class="chart-export">"Save as "
            <button class="save-svg" data-target=target on:click=svg>"SVG"</button> " "
            <button class="save-png" data-target=target on:click=png>"PNG"</button></p>
    }
}
