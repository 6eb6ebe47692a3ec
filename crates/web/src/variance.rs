//! Variance propagation while training: a grid of blocks × storages and retrievals coloured by
//! the log of each measured ratio, forward and backward side by side, with the closed form marked
//! in each cell; a step scrubber over every measurement with a play button; and one block's bars.
//! Also the closed form a run's measurements are drawn against.

use crate::chart::variance_svg;
use crate::help::ViewTitle;
use crate::observed::{Observed, Rows};
use crate::save::ChartExport;
use crate::scrubber::{Scrubbed, Scrubber};
use leptos::prelude::*;
use models::probes::{Layer, Measured, Op};
use models::variance::{self, distance_from_one, shared_site, ClosedForm, InitScheme};
use models::RunConfig;

/// The closed form of the paper's Table 1 for `cfg`'s dims and init (none for a model
/// without storages and retrievals).
pub fn closed_form(cfg: &RunConfig) -> Vec<ClosedForm> {
    variance::closed_form(&cfg.model, InitScheme::Default).unwrap_or_default()
}

/// The grid's columns: every block's four probed sites, in the order a block runs them.
const SITES: [(Layer, Op, &str); 4] = [
    (Layer::Attn, Op::Retrieval, "attn retrieval"),
    (Layer::Attn, Op::Storage, "attn storage"),
    (Layer::Ff, Op::Retrieval, "ff retrieval"),
    (Layer::Ff, Op::Storage, "ff storage"),
];

/// Ratios beyond this factor from 1 get the full colour.
const SATURATE: f64 = 10.0;

/// 1 white, above 1 red, below 1 blue, by |log ratio| up to `SATURATE`; grey when unmeasured.
pub fn ratio_color(ratio: Option<f64>) -> String {
    let Some(r) = ratio.filter(|r| *r > 0.0 && r.is_finite()) else {
        return "#dddddd".into();
    };
    let a = (r.ln() / SATURATE.ln()).clamp(-1.0, 1.0);
    let (cr, cg, cb) = if a >= 0.0 {
        (214.0, 39.0, 40.0)
    } else {
        (31.0, 119.0, 180.0)
    };
    let mix = |c: f64| (255.0 + (c - 255.0) * a.abs()).round() as u8;
    format!("#{:02x}{:02x}{:02x}", mix(cr), mix(cg), mix(cb))
}

/// The forward and backward distances from 1 of one measurement, over the shared sites.
pub fn distances(measured: &[Measured]) -> (Option<f64>, Option<f64>) {
    let shared = || measured.iter().filter(|m| shared_site(m.site.op));
    (
        distance_from_one(shared().map(|m| m.forward_ratio)),
        distance_from_one(shared().map(|m| m.backward_ratio)),
    )
}

/// The grid as SVG: a row per block, a pair of cells (forward, backward) per site. Each cell
/// carries its values in data attributes; a strip on its left is coloured by the closed form,
/// whose value is written under the measured one.
pub fn grid_svg(measured: &[Measured], closed: &[ClosedForm]) -> String {
    let blocks = measured.iter().map(|m| m.site.block + 1).max().unwrap_or(0);
    // 440 pixels wide: a pane of the one-screen layout at 1280×800.
    let (cw, ch, left, top) = (46, 34, 62, 40);
    let (w, h) = (left + 8 * cw + 10, top + blocks * ch + 50);
    let mut svg = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="11">"#
    );
    for (i, (_, _, name)) in SITES.iter().enumerate() {
        let x = left + i * 2 * cw;
        svg += &format!(
            r#"<text class="site" x="{}" y="14" text-anchor="middle">{name}</text>"#,
            x + cw
        );
        for (j, dir) in ["fwd", "bwd"].iter().enumerate() {
            svg += &format!(
                r##"<text x="{}" y="32" text-anchor="middle" fill="#555">{dir}</text>"##,
                x + j * cw + cw / 2
            );
        }
    }
    for block in 0..blocks {
        let y = top + block * ch;
        svg += &format!(r#"<text x="4" y="{}">block {block}</text>"#, y + ch / 2 + 4);
        for (i, (layer, op, name)) in SITES.iter().enumerate() {
            let m = measured
                .iter()
                .find(|m| m.site.block == block && m.site.layer == *layer && m.site.op == *op);
            let c = closed.iter().find(|c| c.layer == *layer && c.op == *op);
            let pairs = [
                ("forward", m.and_then(|m| m.forward_ratio), c.map(|c| c.forward_ratio)),
                (
                    "backward",
                    m.and_then(|m| m.backward_ratio),
                    c.map(|c| c.backward_ratio),
                ),
            ];
            for (j, (dir, ratio, closed)) in pairs.into_iter().enumerate() {
                let x = left + (2 * i + j) * cw;
                let value = ratio.map_or("–".to_string(), |r| format!("{r:.3}"));
                svg += &format!(
                    r##"<rect class="vcell" x="{x}" y="{y}" width="{}" height="{}" fill="{}" stroke="#fff" data-block="{block}" data-site="{name}" data-dir="{dir}" data-ratio="{}" data-closed="{}"><title>block {block} {name} {dir}: {value} (closed form {})</title></rect>"##,
                    cw - 1,
                    ch - 1,
                    ratio_color(ratio),
                    ratio.map_or(String::new(), |r| r.to_string()),
                    closed.map_or(String::new(), |c| c.to_string()),
                    closed.map_or("–".to_string(), |c| format!("{c:.3}")),
                );
                svg += &format!(
                    r#"<rect class="closed" x="{x}" y="{y}" width="5" height="{}" fill="{}"/>"#,
                    ch - 1,
                    ratio_color(closed)
                );
                // White text on the darkest cells, beyond 4× from 1.
                let dark = ratio.is_some_and(|r| r.ln().abs() > 4f64.ln());
                let (ink, faint) = if dark { ("#fff", "#eee") } else { ("#222", "#444") };
                svg += &format!(
                    r#"<text x="{}" y="{}" text-anchor="middle" fill="{ink}">{value}</text>"#,
                    x + cw / 2 + 2,
                    y + 15
                );
                if let Some(c) = closed {
                    svg += &format!(
                        r#"<text x="{}" y="{}" text-anchor="middle" font-size="11" fill="{faint}">cf {c:.2}</text>"#,
                        x + cw / 2 + 2,
                        y + 28
                    );
                }
            }
        }
    }
    // The legend: the colour of ratios from 1/SATURATE to SATURATE.
    let ly = top + blocks * ch + 14;
    for k in 0..40 {
        let r = SATURATE.powf(k as f64 / 19.5 - 1.0);
        svg += &format!(
            r#"<rect class="legend" x="{}" y="{ly}" width="6" height="12" fill="{}"/>"#,
            left + k * 6,
            ratio_color(Some(r))
        );
    }
    for (k, text) in [(0, "0.1"), (20, "1"), (40, "10")] {
        svg += &format!(
            r#"<text class="legend" x="{}" y="{}" text-anchor="middle">{text}</text>"#,
            left + k * 6,
            ly + 26
        );
    }
    svg += &format!(
        r#"<text x="{}" y="{}">ratio (left strip, cf: closed form at init)</text>"#,
        left + 40 * 6 + 10,
        ly + 10
    );
    svg + "</svg>"
}

/// The rows of this view's kind.
fn ratios(rows: &Rows) -> Option<&Vec<Measured>> {
    let Rows::Variance(rows) = rows else { return None };
    Some(rows)
}

/// The variance view of one run: its measurements and closed form.
#[component]
pub fn VarianceView(readings: Signal<Vec<Observed>>, closed: Signal<Vec<ClosedForm>>) -> impl IntoView {
    let scrubbed = Scrubbed::new(readings, ratios);
    let shown = move || scrubbed.shown();
    let (block, set_block) = signal(0usize);
    let blocks = move || shown().map_or(0, |s| s.rows.iter().map(|m| m.site.block + 1).max().unwrap_or(0));
    let grid = move || scrubbed.drawn(|rows| grid_svg(rows, &closed.get()));
    let bars = move || {
        shown().map_or(String::new(), |s| {
            let b = block.get();
            let of_block: Vec<Measured> = s.rows.iter().filter(|m| m.site.block == b).copied().collect();
            variance_svg(&of_block, &closed.get())
        })
    };
    let summary = move || {
        let Some(s) = shown() else { return String::new() };
        let (f, b) = distances(&s.rows);
        let cf = distance_from_one(
            closed
                .get()
                .iter()
                .filter(|c| shared_site(c.op))
                .flat_map(|c| [Some(c.forward_ratio), Some(c.backward_ratio)]),
        );
        let x = |d: Option<f64>| d.map_or("–".to_string(), |d| format!("{d:.2}×"));
        format!(
            "step {}: on average the ratios sit {} (forward) and {} (backward) from 1; the closed form at init {}",
            s.step,
            x(f),
            x(b),
            x(cf)
        )
    };
    view! {
        <section id="variance">
            <ViewTitle title="Variance propagation"
                what="σ² out over σ² in of every storage and retrieval, forward and backward, block by block."
                help="σ²(out)/σ²(in) (forward) and σ²(grad in)/σ²(grad out) (backward), measured on the training batch \
                    (for the transformer, W_QKV and W1 retrieve, W_O and W2 store). White is 1: the signal keeps its \
                    scale; red grows it, blue shrinks it. Healthy is near white; a deep colour that compounds block after \
                    block is what makes a deep model's signal or gradient explode or vanish. The strip on each cell's \
                    left and its \"cf\" are the closed form at init (RMT paper, Tables 1 and 2)." />
            <Scrubber id="v" over=scrubbed />
            <p id="variance-summary" class="readout">{summary}</p>
            <div id="variance-grid" inner_html=grid></div>
            <ChartExport target="variance-grid" name="variance-grid" />
            <details id="one-block" class="secondary">
            <summary>"One block: its sites' ratios as bars"</summary>
            <div class="controls">
                <label>"Block "
                    <input id="block" type="range" min="0"
                        prop:max=move || blocks().saturating_sub(1)
                        prop:value=move || block.get()
                        on:input=move |ev| set_block.set(event_target_value(&ev).parse().unwrap_or(0)) />
                    <span id="block-value">{move || block.get()}</span>
                </label>
            </div>
            <div id="variance-chart" inner_html=bars></div>
            <ChartExport target="variance-chart" name="variance-block" />
            </details>
        </section>
    }
}
