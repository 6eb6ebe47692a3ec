//! AltUp while training: each layer's P (which predicts every sub-block from all of them), its
//! g (how much of the computed block's correction each sub-block takes) and, for one token, how
//! alike its K sub-blocks are after it, on a step scrubber; and the sub-blocks' likeness over
//! training. Added by docs/adding-a-view.md's steps.

use crate::chart::{lines_svg, Curve, PALETTE};
use crate::help::ViewTitle;
use crate::mixing::weight_color;
use crate::observed::{Observed, Reading, Rows};
use crate::save::ChartExport;
use crate::scrubber::{Scrubbed, Scrubber};
use leptos::prelude::*;
use models::observe::AltupRow;

/// Every layer's coefficients and its sub-blocks' cosines, read after one step.
type Read = Reading<Vec<AltupRow>>;

/// A value in two decimals without its leading zero: .97, -.03, 1.03.
fn short(v: f64) -> String {
    let text = format!("{v:.2}");
    match (text.strip_prefix("0."), text.strip_prefix("-0.")) {
        (Some(rest), _) => format!(".{rest}"),
        (None, Some(rest)) => format!("-.{rest}"),
        (None, None) => text,
    }
}

/// A K×K matrix as cells at (x, y), each coloured by its value and, up to 4 sub-blocks, with
/// it written in.
fn cells(m: &[f64], k: usize, (x, y): (usize, usize), cell: usize, class: &str, what: &str) -> String {
    let mut svg = String::new();
    for (ij, &v) in m.iter().enumerate() {
        let (i, j) = (ij / k, ij % k);
        let (cx, cy) = (x + j * cell, y + i * cell);
        svg += &format!(
            r##"<rect class="{class}" x="{cx}" y="{cy}" width="{}" height="{}" fill="{}" stroke="#fff"><title>{what}[{i},{j}] = {v:.4}</title></rect>"##,
            cell - 1,
            cell - 1,
            weight_color(v)
        );
        if k <= 4 {
            let ink = if v.abs() > 0.6 { "#fff" } else { "#222" };
            svg += &format!(
                r#"<text x="{}" y="{}" text-anchor="middle" fill="{ink}">{}</text>"#,
                cx + cell / 2,
                cy + cell / 2 + 4,
                short(v)
            );
        }
    }
    svg
}

/// The layers as SVG: a row per layer, its P and its sub-blocks' cosines side by side, g and the
/// sub-blocks' norms under them. Each layer's group carries its values in data attributes.
pub fn grid_svg(rows: &[AltupRow]) -> String {
    let k = rows.first().map_or(1, |r| r.correct.len().max(1));
    let cell = if k <= 4 { 28 } else { 112 / k };
    let (half, left, top) = (212, 8, 8);
    let layer_h = 18 + k * cell + 36;
    let (w, h) = (left + 2 * half, top + rows.len() * layer_h);
    let mut svg = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="11">"#
    );
    let list = |v: &[f64]| v.iter().map(|x| format!("{x:.2}")).collect::<Vec<_>>().join(" ");
    for (l, r) in rows.iter().enumerate() {
        let y = top + l * layer_h;
        svg += &format!(
            r#"<g class="layer" data-layer="{}" data-active="{}" data-predict="{:?}" data-correct="{:?}" data-cosine="{:?}">"#,
            r.layer, r.active, r.predict, r.correct, r.cosine
        );
        svg += &format!(
            r#"<text x="{left}" y="{}">{}: computes on x{} · P</text><text x="{}" y="{}">cosines after it</text>"#,
            y + 11,
            r.layer,
            r.active,
            left + half,
            y + 11
        );
        svg += &cells(&r.predict, k, (left, y + 18), cell, "pcell", "P");
        svg += &cells(&r.cosine, k, (left + half, y + 18), cell, "ccell", "cos");
        let below = y + 18 + k * cell;
        svg += &format!(r#"<text x="{left}" y="{}">g {}</text>"#, below + 13, list(&r.correct));
        svg += &format!(
            r#"<text x="{}" y="{}">‖x‖ {}</text>"#,
            left + half,
            below + 13,
            list(&r.norms)
        );
        svg += "</g>";
    }
    svg + "</svg>"
}

/// The mean cosine between distinct sub-blocks after each layer, at every step read: 1 while
/// they are copies, lower as they part.
fn likeness_svg(history: &[Read]) -> String {
    let layers = history.last().map_or(0, |r| r.rows.len());
    let curves: Vec<Curve> = (0..layers)
        .map(|l| Curve {
            label: format!("block{l}"),
            color: PALETTE[l % PALETTE.len()],
            points: (history.iter())
                .filter_map(|r| r.rows.get(l)?.mean_cosine_apart().map(|c| (r.step, c as f32)))
                .collect(),
        })
        .collect();
    lines_svg(&curves, "mean cosine between sub-blocks", 160)
}

/// The rows of this view's kind.
fn layers(rows: &Rows) -> Option<&Vec<AltupRow>> {
    let Rows::Altup(rows) = rows else { return None };
    Some(rows)
}

/// The AltUp view of one run: its coefficients and sub-blocks.
#[component]
pub fn AltupView(readings: Signal<Vec<Observed>>) -> impl IntoView {
    let scrubbed = Scrubbed::new(readings, layers);
    let grid = move || scrubbed.drawn(|rows| grid_svg(rows));
    let likeness = move || scrubbed.over_training(likeness_svg);
    let summary = move || {
        let Some((step, last)) = scrubbed.last_row() else {
            return String::new();
        };
        let k = last.correct.len();
        let Some(least) = last.least_cosine_apart() else {
            return format!("step {step}: one sub-block");
        };
        format!(
            "step {step}: after the last layer the {k} sub-blocks' least cosine is {least:.5} (1 − cos = {:.1e}; 0 \
             while they are copies)",
            1.0 - least
        )
    };
    view! {
        <section id="altup">
            <ViewTitle title="AltUp's sub-blocks"
                what="Each layer's P and g, and how alike its K sub-blocks are after it, for one token."
                help="AltUp keeps K sub-blocks of width D and runs each layer on one of them (x_j, j = ℓ mod K): it \
                    predicts every sub-block from all of them with P (row i predicts x_i; from the identity) and \
                    corrects each with g_i times the computed block's change (from 1). At init the sub-blocks are \
                    copies of the embedding and every cosine is 1, so the model is the transformer of width D. Cosines \
                    that fall below 1 mean the sub-blocks carry different things: the wide state is in use. P far \
                    from I, or a g near 0, says which sub-blocks a layer reads and which it leaves alone. P and g are \
                    the weights after the step shown; the cosines are of its forward, at the residual viewer's token \
                    (or the first)." />
            <Scrubber id="a" over=scrubbed />
            <p id="altup-summary" class="readout">{summary}</p>
            <div id="altup-grid" inner_html=grid></div>
            <ChartExport target="altup-grid" name="altup" />
            <div id="altup-likeness" inner_html=likeness></div>
            <ChartExport target="altup-likeness" name="altup-likeness" />
        </section>
    }
}
