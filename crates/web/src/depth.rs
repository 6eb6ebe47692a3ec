//! Attention Residuals while training: each read over depth (every attention and FF, then the
//! head) as a row of weights over the blocks before it, for one token, on a step scrubber; and
//! the head's weight on each block over training. Added by docs/adding-a-view.md's steps.

use crate::chart::{lines_svg, Curve, PALETTE};
use crate::help::ViewTitle;
use crate::mixing::weight_color;
use crate::observed::{Observed, Reading, Rows};
use crate::save::ChartExport;
use crate::scrubber::{Scrubbed, Scrubber};
use leptos::prelude::*;
use models::observe::DepthRow;

/// Every read's weights for one token, read after one step.
type Read = Reading<Vec<DepthRow>>;

/// The reads as SVG: a row per read, a cell per source (b0, the embedding, first) coloured by
/// its weight, the weight written in it, and the source's RMS in its title. Each read's group
/// carries its weights and sources in data attributes.
pub fn grid_svg(rows: &[DepthRow]) -> String {
    let sources = rows.iter().map(|r| r.weights.len()).max().unwrap_or(1);
    let (cell, left, top, row_h) = (34, 92, 22, 20);
    let (w, h) = (left + sources * cell + 8, top + rows.len() * row_h + 8);
    let mut svg = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="11">"#
    );
    for k in 0..sources {
        svg += &format!(
            r#"<text x="{}" y="14" text-anchor="middle">b{k}</text>"#,
            left + k * cell + cell / 2
        );
    }
    for (i, r) in rows.iter().enumerate() {
        let y = top + i * row_h;
        svg += &format!(
            r#"<g class="read" data-read="{}" data-sources="{}" data-weights="{:?}"><text x="4" y="{}">{}</text>"#,
            r.read,
            r.sources.join(","),
            r.weights,
            y + 14,
            r.read
        );
        for (k, (&a, name)) in r.weights.iter().zip(&r.sources).enumerate() {
            let x = left + k * cell;
            let rms = r.rms.get(k).copied().unwrap_or(f64::NAN);
            let ink = if a > 0.6 { "#fff" } else { "#222" };
            svg += &format!(
                r##"<rect class="dcell" x="{x}" y="{y}" width="{}" height="{}" fill="{}" stroke="#fff"><title>{}: {a:.4} on {name} (RMS {rms:.3})</title></rect><text x="{}" y="{}" text-anchor="middle" fill="{ink}">{}</text>"##,
                cell - 1,
                row_h - 1,
                weight_color(a),
                r.read,
                x + cell / 2,
                y + 14,
                format!("{a:.2}").trim_start_matches('0')
            );
        }
        svg += "</g>";
    }
    svg + "</svg>"
}

/// The head's weight on each block at every step read.
fn head_svg(history: &[Read]) -> String {
    let sources = history
        .last()
        .and_then(|r| r.rows.last())
        .map_or(0, |h| h.weights.len());
    let curves: Vec<Curve> = (0..sources)
        .map(|k| Curve {
            label: format!("head on b{k}"),
            color: PALETTE[k % PALETTE.len()],
            points: (history.iter())
                .filter_map(|r| r.rows.last()?.weights.get(k).map(|&a| (r.step, a as f32)))
                .collect(),
        })
        .collect();
    lines_svg(&curves, "weight", 160)
}

/// The rows of this view's kind.
fn weights(rows: &Rows) -> Option<&Vec<DepthRow>> {
    let Rows::Depth(rows) = rows else { return None };
    Some(rows)
}

/// The depth view of one run: its reads over depth.
#[component]
pub fn DepthView(readings: Signal<Vec<Observed>>) -> impl IntoView {
    let scrubbed = Scrubbed::new(readings, weights);
    let grid = move || scrubbed.drawn(|rows| grid_svg(rows));
    let head = move || scrubbed.over_training(head_svg);
    let summary = move || {
        let Some((step, last)) = scrubbed.last_row() else {
            return String::new();
        };
        let (k, a) = (last.weights.iter().enumerate()).fold((0, f64::NEG_INFINITY), |m, (k, &a)| match a > m.1 {
            true => (k, a),
            false => m,
        });
        format!(
            "step {step}: the head gives {} its largest weight, {a:.3}; uniform would be {:.3}",
            last.sources.get(k).map_or("–", String::as_str),
            1.0 / last.weights.len().max(1) as f64
        )
    };
    view! {
        <section id="depth">
            <ViewTitle title="Attention over depth"
                what="Each attention's and FF's weights over the blocks before it, and the head's, for one token."
                help="Block Attention Residuals replace the running sum of the residual by a softmax over the blocks \
                    so far: b0 is the embedding, b1… each block's summed outputs, and a block still being filled is \
                    marked partial. Each read's query starts at zero, so every row starts uniform; a row that \
                    concentrates on one block is a layer that chose its input. A head that keeps the weight spread \
                    uses the depth; one that puts nearly all of it on the last block is close to the plain transformer. \
                    The token is the residual viewer's, or the first." />
            <Scrubber id="d" over=scrubbed />
            <p id="depth-summary" class="readout">{summary}</p>
            <div id="depth-grid" inner_html=grid></div>
            <ChartExport target="depth-grid" name="depth" />
            <div id="depth-head" inner_html=head></div>
            <ChartExport target="depth-head" name="depth-head" />
        </section>
    }
}
