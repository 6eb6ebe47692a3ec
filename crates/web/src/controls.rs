//! The controls: a named preset, the architecture and task, every size of the chosen
//! architecture and the training settings. What they say is one `Setup`; a setting the config
//! refuses is named under the controls as it is typed.

use crate::arch::Arch;
use crate::dataset::Dataset;
use crate::settings::{control, controls, Control, Kind};
use crate::setup::Setup;
use leptos::prelude::*;

/// A named starting point: a name, an architecture and the settings it changes from that
/// architecture's tiny preset.
type PagePreset = (&'static str, Arch, &'static [(&'static str, &'static str)]);

const PRESETS: &[PagePreset] = &[
    ("tiny RMT", Arch::Rmt, &[]),
    ("tiny transformer", Arch::Transformer, &[]),
    (
        "transformer with the value residual",
        Arch::Transformer,
        &[("value_residual", "half")],
    ),
    ("tiny MemoryFormer", Arch::MemoryFormer, &[]),
    ("tiny hybrid", Arch::Hybrid, &[]),
    ("tiny hyper-connections (mHC, 4 streams)", Arch::Hc, &[]),
    ("mHC-lite, 4 streams", Arch::Hc, &[("mixing", "mhc-lite")]),
    ("HC (unconstrained), 4 streams", Arch::Hc, &[("mixing", "hc")]),
    ("tiny AltUp (4 sub-blocks)", Arch::Altup, &[]),
    ("AltUp, 2 sub-blocks", Arch::Altup, &[("sub_blocks", "2")]),
    ("tiny Attention Residuals (a depth block a layer)", Arch::AttnRes, &[]),
    (
        "Full Attention Residuals (a depth block a site)",
        Arch::AttnRes,
        &[("depth_blocks", "4")],
    ),
    ("RMT, 4× the residual (D_k 32)", Arch::Rmt, &[("d_k", "32")]),
    ("RMT with ALiBi", Arch::Rmt, &[("position", "alibi")]),
    ("deeper RMT (L 4)", Arch::Rmt, &[("n_layers", "4")]),
    (
        "MemoryFormer with 256-row tables (τ 8)",
        Arch::MemoryFormer,
        &[("tau", "8")],
    ),
    (
        "longer sequences (T 64, batch 8)",
        Arch::Rmt,
        &[("seq_len", "64"), ("batch", "8")],
    ),
];

fn preset_setup(i: usize, data: Dataset) -> Option<Setup> {
    let (_, arch, values) = PRESETS.get(i)?;
    let mut setup = Setup::new(*arch, data);
    for (k, v) in values.iter() {
        let control = control(k)?;
        setup.set(control.key, v.to_string());
    }
    Some(setup)
}

/// One control as an input (numbers) or a select (choices).
fn field(c: &'static Control, setup: RwSignal<Setup>, running: Signal<bool>) -> impl IntoView {
    let id = format!("ctl-{}", c.key);
    let value = move || setup.with(|s| s.value(c.key).unwrap_or_default().to_string());
    let set = move |text: String| setup.update(|s| s.set(c.key, text));
    let options: &'static [&'static str] = match c.kind {
        Kind::Choice(options) => options,
        Kind::Switch => &["false", "true"],
        Kind::Whole | Kind::Number => &[],
    };
    let input = match c.kind {
        Kind::Choice(_) | Kind::Switch => view! {
            <select id=id on:change=move |ev| set(event_target_value(&ev)) prop:disabled=running prop:value=value>
                {options.iter().map(|o| view! { <option value=*o selected=move || value() == *o>{*o}</option> }).collect_view()}
            </select>
        }
        .into_any(),
        Kind::Whole | Kind::Number => view! {
            <input id=id type="text" inputmode="decimal" size="6" prop:value=value prop:disabled=running
                on:change=move |ev| set(event_target_value(&ev)) />
        }
        .into_any(),
    };
    let arch = move || setup.with(|s| s.arch);
    view! {
        <label title=c.help class="field">
            <span class="field-label">{move || c.label_for(arch())}</span>
            {input}
        </label>
    }
}

#[component]
pub fn Controls(setup: RwSignal<Setup>, running: Signal<bool>) -> impl IntoView {
    let (preset, set_preset) = signal(0usize);
    let arch = move || setup.with(|s| s.arch);
    let fields = move |table: &'static str| {
        let a = arch();
        controls()
            .filter(move |c| (c.table == "model") == (table == "model") && c.applies(a))
            .map(|c| field(c, setup, running))
            .collect_view()
    };
    let error = move || setup.with(|s| s.config().err());
    view! {
        <section id="controls">
            <div class="controls">
                <label>"Preset "
                    <select id="preset" prop:disabled=running prop:value=move || preset.get().to_string()
                        on:change=move |ev| {
                            let i: usize = event_target_value(&ev).parse().unwrap_or(0);
                            set_preset.set(i);
                            if let Some(s) = preset_setup(i, setup.with_untracked(|s| s.data)) {
                                setup.set(s);
                            }
                        }>
                        {PRESETS.iter().enumerate().map(|(i, p)| view! { <option value=i.to_string()>{p.0}</option> }).collect_view()}
                    </select>
                </label>
                <label>"Model "
                    <select id="arch" prop:disabled=running prop:value=move || arch().name().to_string()
                        on:change=move |ev| {
                            if let Some(a) = Arch::parse(&event_target_value(&ev)) {
                                setup.update(|s| *s = s.with_arch(a));
                            }
                        }>
                        {Arch::ALL.iter().map(|a| view! { <option value=a.name()>{a.label()}</option> }).collect_view()}
                    </select>
                </label>
                <label>"Data "
                    <select id="task" prop:disabled=running prop:value=move || setup.with(|s| s.data.name().to_string())
                        on:change=move |ev| {
                            if let Some(d) = Dataset::parse(&event_target_value(&ev)) {
                                setup.update(|s| s.data = d);
                            }
                        }>
                        {Dataset::ALL.iter().map(|d| view! { <option value=d.name()>{d.label()}</option> }).collect_view()}
                    </select>
                </label>
            </div>
            <details class="group" open>
                <summary>"Model sizes"</summary>
                <div class="fields">{move || fields("model")}</div>
            </details>
            <details class="group" open>
                <summary>"Training"</summary>
                <div class="fields">{move || fields("train")}</div>
            </details>
            <p id="config-error" class="error">{move || error().unwrap_or_default()}</p>
        </section>
    }
}
