//! Each view's header: its title, one line on what it shows, and a "?" that opens a short
//! explanation with what a healthy value looks like.

use leptos::prelude::*;

#[component]
pub fn ViewTitle(title: &'static str, what: &'static str, help: &'static str) -> impl IntoView {
    view! {
        <div class="view-title">
            <h2>{title}</h2>
            <details class="help">
                <summary aria-label=format!("What {title} shows") title="What this shows, and what a healthy value looks like">"?"</summary>
                <p>{help}</p>
            </details>
        </div>
        <p class="what">{what}</p>
    }
}
