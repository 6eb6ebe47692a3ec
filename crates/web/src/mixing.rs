//! Hyper-connections while training: every site's mixing matrix P as a small heatmap by depth,
//! with its pre and post gates, on a step scrubber like the variance grid's; and the composite
//! gain of all the sites' P (the mHC paper's Amax) plotted over training.

use crate::chart::{lines_svg, Curve, PALETTE};
use crate::help::ViewTitle;
use crate::observed::{Observed, Reading, Rows};
use crate::save::ChartExport;
use crate::scrubber::{Scrubbed, Scrubber};
use leptos::prelude::*;
use models::observe::MixingRow;

/// Every site's gates for one token of the batch, read after one step.
pub type Mixed = Reading<Vec<MixingRow>>;

/// 0 white, positive blue and negative red, full at |v| = 1 (a doubly stochastic P's entries
/// lie in [0, 1]; HC's may leave it).
pub fn weight_color(v: f64) -> String {
    if !v.is_finite() {
        return "#dddddd".into();
    }
    let a = v.abs().min(1.0);
    let (cr, cg, cb) = if v >= 0.0 {
        (31.0, 119.0, 180.0)
    } else {
        (214.0, 39.0, 40.0)
    };
    let mix = |c: f64| (255.0 + (c - 255.0) * a).round() as u8;
    format!("#{:02x}{:02x}{:02x}", mix(cr), mix(cg), mix(cb))
}

fn list(values: &[f64]) -> String {
    let shown: Vec<String> = values.iter().map(|v| format!("{v:.2}")).collect();
    shown.join(" ")
}

/// The sites as SVG: a row per block, attention then FF, each P[j,k] (from stream j, a row, to
/// stream k, a column) a cell coloured by its weight, its pre and post and the streams' norms
/// after it under it, and the composite gain so far beside its name. Each site's group carries its values in data
/// attributes.
pub fn grid_svg(rows: &[MixingRow]) -> String {
    let n = rows.first().map_or(1, |r| r.post.len().max(1));
    let blocks = rows.len().div_ceil(2);
    // Two sites side by side in 440 pixels; the values written in the cells up to 4 streams.
    let cell = if n <= 4 { 28 } else { 112 / n };
    let (site_w, left, top) = (212, 8, 8);
    let site_h = 18 + n * cell + 50;
    let (w, h) = (left + 2 * site_w, top + blocks * site_h + 30);
    let mut svg = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="11">"#
    );
    for (i, r) in rows.iter().enumerate() {
        let (x, y) = (left + (i % 2) * site_w, top + (i / 2) * site_h);
        let [fwd, bwd] = r.composite_gain;
        svg += &format!(
            r#"<g class="site" data-site="{}" data-mix="{:?}" data-pre="{:?}" data-post="{:?}" data-gain="{fwd},{bwd}">"#,
            r.site, r.mix, r.pre, r.post
        );
        svg += &format!(
            r#"<text x="{x}" y="{}">{} · gain ×{fwd:.2} / ×{bwd:.2}</text>"#,
            y + 11,
            r.site
        );
        for j in 0..n {
            for k in 0..n {
                let v = r.mix.get(j * n + k).copied().unwrap_or(f64::NAN);
                let (cx, cy) = (x + k * cell, y + 18 + j * cell);
                svg += &format!(
                    r##"<rect class="pcell" x="{cx}" y="{cy}" width="{}" height="{}" fill="{}" stroke="#fff"><title>{}: P[{j},{k}] = {v:.4}, from stream {j} to stream {k}</title></rect>"##,
                    cell - 1,
                    cell - 1,
                    weight_color(v),
                    r.site
                );
                if n <= 4 {
                    let ink = if v.abs() > 0.6 { "#fff" } else { "#222" };
                    svg += &format!(
                        r#"<text x="{}" y="{}" text-anchor="middle" fill="{ink}">{}</text>"#,
                        cx + cell / 2,
                        cy + cell / 2 + 4,
                        format!("{v:.2}").trim_start_matches('0')
                    );
                }
            }
        }
        let below = y + 18 + n * cell;
        svg += &format!(r#"<text x="{x}" y="{}">pre {}</text>"#, below + 13, list(&r.pre));
        svg += &format!(r#"<text x="{x}" y="{}">post {}</text>"#, below + 27, list(&r.post));
        svg += &format!(
            r#"<text x="{x}" y="{}">‖x‖ {}</text>"#,
            below + 41,
            list(&r.stream_norms)
        );
        svg += "</g>";
    }
    // The legend: weights from −1 to 1.
    let ly = top + blocks * site_h + 4;
    for k in 0..41 {
        svg += &format!(
            r#"<rect class="legend" x="{}" y="{ly}" width="5" height="12" fill="{}"/>"#,
            left + k * 5,
            weight_color(k as f64 / 20.0 - 1.0)
        );
    }
    svg += &format!(
        r#"<text x="{}" y="{}">P[j,k]: −1 · 0 · 1 (rows: from stream j)</text>"#,
        left + 41 * 5 + 8,
        ly + 10
    );
    svg + "</svg>"
}

/// The composite gain through every site, forward (largest row sum) and backward (largest
/// column sum), at each step read.
pub fn gain_svg(history: &[Mixed]) -> String {
    let curve = |label: &str, color, at: usize| Curve {
        label: label.into(),
        color,
        points: (history.iter())
            .filter_map(|m| m.rows.last().map(|r| (m.step, r.composite_gain[at] as f32)))
            .collect(),
    };
    lines_svg(
        &[
            curve("forward: largest row sum of P₁⋯P_2L", PALETTE[0], 0),
            curve("backward: largest column sum", PALETTE[1], 1),
        ],
        "composite gain",
        160,
    )
}

/// The rows of this view's kind.
fn gates(rows: &Rows) -> Option<&Vec<MixingRow>> {
    let Rows::Mixing(rows) = rows else { return None };
    Some(rows)
}

/// The mixing view of one run: its reads of the gates.
#[component]
pub fn MixingView(readings: Signal<Vec<Observed>>) -> impl IntoView {
    let scrubbed = Scrubbed::new(readings, gates);
    let grid = move || scrubbed.drawn(|rows| grid_svg(rows));
    let gain = move || scrubbed.over_training(gain_svg);
    let summary = move || {
        let Some(m) = scrubbed.shown() else {
            return String::new();
        };
        let Some(last) = m.rows.last() else {
            return String::new();
        };
        let [fwd, bwd] = last.composite_gain;
        format!(
            "step {}: through all {} sites the streams' mixing multiplies a signal by at most ×{fwd:.3} forward \
             and ×{bwd:.3} backward",
            m.step,
            m.rows.len()
        )
    };
    view! {
        <section id="mixing">
            <ViewTitle title="Mixing of the streams"
                what="Each site's n×n mixing matrix P, with its pre and post gates, for one token, and the gain of their product."
                help="At every attention and FF, the n residual streams are mixed by P: stream k receives P[j,k] of \
                    stream j (rows are sources). pre weighs the streams into the branch's input, post spreads its output \
                    back. mHC and mHC-lite keep P doubly stochastic, so each row and column sums to 1 and the composite \
                    gain (the largest row or column sum of the product of every P so far, the mHC paper's Amax) stays \
                    near 1: healthy. HC's P is unconstrained, and a gain that grows with depth and training is what \
                    the mHC paper saw before HC's loss spiked. The token is the residual viewer's, or the first." />
            <Scrubber id="m" over=scrubbed />
            <p id="mixing-summary" class="readout">{summary}</p>
            <div id="mixing-grid" inner_html=grid></div>
            <ChartExport target="mixing-grid" name="mixing" />
            <div id="mixing-gain" inner_html=gain></div>
            <ChartExport target="mixing-gain" name="mixing-gain" />
        </section>
    }
}
