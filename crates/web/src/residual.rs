//! The residual viewer: one token's residual stream at one depth, read from the GPU every few
//! steps while the view is open. For an RMT the D_k×D_v matrix as a heatmap beside its singular
//! values, effective rank and norm; for the transformer and the MemoryFormer the vector as a
//! strip, so that the three can be compared. Below it, every head's attention weights over the
//! sequence, the chosen token's row outlined.

use crate::help::ViewTitle;
use crate::interventions::{Interventions, InterventionsView, PatchAsk};
use crate::save::ChartExport;
use data::TokenizerKind;
use leptos::prelude::*;
use models::interventions::Ablation;
use models::observe::{self, HeadPattern, KeySlot, LensRow, Shape, Snapshot};
use serde::{Deserialize, Serialize};

/// One read of the residual stream.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Residuals {
    pub step: usize,
    pub seq: usize,
    /// Every depth: embedding, block0.attn, block0.ff, …
    pub depths: Vec<Snapshot>,
    /// The sequence's input tokens (bytes of the task).
    pub inputs: Vec<u32>,
    /// Every block's and head's attention weights over the sequence, as `resmem analyze
    /// attention` computes them.
    pub attention: Vec<HeadPattern>,
    /// An RMT's key slots, as `resmem analyze keys` computes them; None for other models.
    pub keys: Option<Vec<KeySlot>>,
    /// The logit lens of token `lens_token`, as `resmem analyze lens` computes it.
    pub lens: Vec<LensRow>,
    pub lens_token: usize,
    /// Attribution and ablation, from forwards of their own after every other read.
    #[serde(default)]
    pub interventions: Interventions,
    /// What the token ids are: bytes, or GPT-2's BPE.
    #[serde(default)]
    pub tokenizer: TokenizerKind,
}

/// What the viewer asks of each read: the sequence, the token of its lens and attribution, and
/// the sites to ablate (none: no ablation).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Look {
    pub seq: usize,
    pub token: usize,
    pub ablate: Vec<String>,
    pub how: Ablation,
    pub patch: PatchAsk,
}

/// What the viewer asks, as the page's parts share it: whether it is open, and each part of the
/// [`Look`] it asks for.
#[derive(Clone, Copy)]
pub struct Viewer {
    pub open: RwSignal<bool>,
    pub seq: RwSignal<usize>,
    pub token: RwSignal<usize>,
    pub ablate: RwSignal<Vec<String>>,
    pub how: RwSignal<Ablation>,
    pub patch: RwSignal<PatchAsk>,
}

impl Viewer {
    pub fn new(open: bool) -> Viewer {
        Viewer {
            open: RwSignal::new(open),
            seq: RwSignal::new(0),
            token: RwSignal::new(0),
            ablate: RwSignal::new(vec![]),
            how: RwSignal::new(Ablation::Zero),
            patch: RwSignal::new(PatchAsk::default()),
        }
    }

    /// What a job reads for the viewer while it is open (tracked).
    pub fn look(self) -> Option<Look> {
        self.open.get().then(|| Look {
            seq: self.seq.get(),
            token: self.token.get(),
            ablate: self.ablate.get(),
            how: self.how.get(),
            patch: self.patch.get(),
        })
    }
}

/// What the viewer shows: the read's step and sequence, the depth's name and shape, the token
/// and its values.
type Shown = (usize, usize, String, Shape, usize, Vec<f32>);

/// How often the viewer reads, in steps (after step 1).
pub const READ_EVERY: usize = 5;

/// Negative values blue, positive red, white at zero: a diverging scale symmetric about 0.
pub(crate) fn diverging(x: f32, max: f32) -> String {
    let a = if max > 0.0 { (x / max).clamp(-1.0, 1.0) } else { 0.0 };
    let (r, g, b) = if a >= 0.0 {
        (214.0, 39.0, 40.0)
    } else {
        (31.0, 119.0, 180.0)
    };
    let mix = |c: f32| (255.0 + (c - 255.0) * a.abs()).round() as u8;
    format!("#{:02x}{:02x}{:02x}", mix(r), mix(g), mix(b))
}

/// The values as a grid of cells (rows × cols) with a colour legend from −max to +max. A vector
/// (one row) longer than [`VECTOR_WRAP`] wraps onto rows of that many, so that it fits a pane.
pub fn heatmap_svg(values: &[f32], rows: usize, cols: usize) -> String {
    let max = values.iter().fold(0f32, |m, v| m.max(v.abs()));
    let vector = rows == 1;
    let (rows, cols) = if vector {
        (cols.div_ceil(VECTOR_WRAP).max(1), cols.clamp(1, VECTOR_WRAP))
    } else {
        (rows, cols.max(1))
    };
    // The longer side about 340 pixels (at least 320), so that even a 4×4 matrix reads.
    let cell = (340 / cols.max(rows)).clamp(4, 85);
    // A short vector is one row: a strip tall enough to see; a few rows (the hyper-connections'
    // streams) are as tall.
    let cell_h = match rows {
        1 => 28,
        2..=8 => cell.max(16),
        _ => cell,
    };
    let (w, h) = (cols * cell, rows * cell_h);
    let mut svg = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{}" height="{}" font-family="sans-serif" font-size="11">"#,
        w + 90,
        h.max(120) + 10
    );
    for (i, v) in values.iter().enumerate() {
        let (r, c) = (i / cols, i % cols);
        let at = if vector { format!("[{i}]") } else { format!("[{r},{c}]") };
        svg += &format!(
            r#"<rect x="{}" y="{}" width="{cell}" height="{cell_h}" fill="{}"><title>{at} {v:.4}</title></rect>"#,
            c * cell,
            r * cell_h,
            diverging(*v, max)
        );
    }
    // The legend: a bar from +max (top) through 0 to −max (bottom).
    let (lx, lh) = (w + 12, 100);
    for k in 0..20 {
        let x = max * (1.0 - 2.0 * (k as f32 + 0.5) / 20.0);
        svg += &format!(
            r#"<rect class="legend" x="{lx}" y="{}" width="12" height="5" fill="{}"/>"#,
            k * 5,
            diverging(x, max)
        );
    }
    for (y, v) in [(8, max), (lh / 2 + 4, 0.0), (lh, -max)] {
        svg += &format!(r#"<text class="legend" x="{}" y="{y}">{v:+.3}</text>"#, lx + 16);
    }
    svg + "</svg>"
}

/// Cells a row of a vector's heatmap.
const VECTOR_WRAP: usize = 32;

/// Tokens a side of the attention heatmaps: a longer sequence shows the window that ends at the
/// chosen token, so that the picture stays readable and small.
const ATTENTION_WINDOW: usize = 32;

/// Every block's heads side by side, a row of blocks each: head h's weights, row i the query,
/// white at 0 to red at 1, with the chosen token's row outlined; at most [`ATTENTION_WINDOW`]
/// queries and keys, the window ending at the chosen token.
pub fn attention_svg(patterns: &[HeadPattern], t: usize, token: usize) -> String {
    let mut blocks: Vec<&str> = patterns.iter().map(|p| p.block.as_str()).collect();
    blocks.dedup();
    let heads = patterns.iter().map(|p| p.head + 1).max().unwrap_or(0);
    let span = t.min(ATTENTION_WINDOW);
    let token = token.min(t.saturating_sub(1));
    let lo = (token + 1).saturating_sub(span);
    let cell = (96 / span.max(1)).clamp(2, 8);
    let (side, gap, left, top) = (cell * span, 10, 56, 16);
    let (w, h) = (left + heads * (side + gap), top + blocks.len() * (side + gap + 4) + 14);
    let mut svg = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="11">"#
    );
    for hd in 0..heads {
        svg += &format!(r#"<text x="{}" y="11">head {hd}</text>"#, left + hd * (side + gap));
    }
    for (b, block) in blocks.iter().enumerate() {
        let y0 = top + b * (side + gap + 4);
        svg += &format!(r#"<text x="0" y="{}">{block}</text>"#, y0 + side / 2 + 4);
        for p in patterns.iter().filter(|p| p.block == *block) {
            let x0 = left + p.head * (side + gap);
            for i in lo..lo + span {
                for j in lo..lo + span {
                    let wgt = p.weights[i * t + j];
                    svg += &format!(
                        r#"<rect x="{}" y="{}" width="{cell}" height="{cell}" fill="{}"><title>{block} head {} query {i} key {j}: {wgt:.3}</title></rect>"#,
                        x0 + (j - lo) * cell,
                        y0 + (i - lo) * cell,
                        diverging(wgt as f32, 1.0),
                        p.head
                    );
                }
            }
            svg += &format!(
                r##"<rect class="chosen-row" x="{x0}" y="{}" width="{side}" height="{cell}" fill="none" stroke="#222" stroke-width="1"/>"##,
                y0 + (token - lo) * cell
            );
        }
    }
    if span < t {
        svg += &format!(r#"<text x="0" y="{}">tokens {lo} to {token} of {t}</text>"#, h - 2);
    }
    svg + "</svg>"
}

/// Each block's key slots as bars of their share of attention's stored mass, a group per block,
/// the slot's key norms in its tooltip.
pub fn key_slots_svg(slots: &[KeySlot]) -> String {
    let mut blocks: Vec<&str> = slots.iter().map(|k| k.block.as_str()).collect();
    blocks.dedup();
    let per_block = slots.iter().map(|k| k.slot + 1).max().unwrap_or(0);
    let top = slots.iter().map(|k| k.stored_share).fold(0.0, f64::max).max(1e-12);
    let (bar, gap, height, base) = (12, 24, 80, 96);
    let w = blocks.len() * (per_block * bar + gap) + 40;
    let mut svg = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{}" font-family="sans-serif" font-size="11">"#,
        base + 18
    );
    svg += &format!(r#"<text x="0" y="11">{:.0}%</text>"#, 100.0 * top);
    for (b, block) in blocks.iter().enumerate() {
        let x0 = 40 + b * (per_block * bar + gap);
        for k in slots.iter().filter(|k| k.block == *block) {
            let h = (k.stored_share / top * height as f64).round() as usize;
            let [q, kk, v, ff] = k.retrieval;
            let [o, wff] = k.storage;
            svg += &format!(
                r##"<rect x="{}" y="{}" width="{}" height="{h}" fill="#d62728"><title>{block} slot {}: {:.1}% of the stored mass; |r_Q| {q:.3} |r_K| {kk:.3} |r_V| {v:.3} |r_FF| {ff:.3} |w_O| {o:.3} |w_FF| {wff:.3}</title></rect>"##,
                x0 + k.slot * bar,
                base - h,
                bar - 2,
                k.slot,
                100.0 * k.stored_share
            );
        }
        svg += &format!(r#"<text x="{x0}" y="{}">{block}</text>"#, base + 14);
    }
    svg + "</svg>"
}

/// The singular values as bars, largest first.
pub fn spectrum_svg(sigma: &[f64]) -> String {
    let top = sigma.first().copied().unwrap_or(0.0).max(1e-12);
    let (w, h) = (200, 100);
    let bar = w as f64 / sigma.len().max(1) as f64;
    let mut svg = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{}" font-family="sans-serif" font-size="11">"#,
        h + 16
    );
    for (i, s) in sigma.iter().enumerate() {
        let bh = s / top * h as f64;
        svg += &format!(
            r##"<rect x="{:.1}" y="{:.1}" width="{:.1}" height="{bh:.1}" fill="#7f7f7f"><title>σ{i} {s:.4}</title></rect>"##,
            i as f64 * bar + 1.0,
            h as f64 - bh,
            (bar - 2.0).max(1.0)
        );
    }
    svg += &format!(r#"<text x="0" y="{}">σ₁ … σ{}</text>"#, h + 14, sigma.len());
    svg + "</svg>"
}

/// A byte as the character it stands for, or its number.
/// A token as the views show it: `data::Tokenizer::shown`, as the CLI shows it.
pub(crate) fn glyph(token: u32, kind: TokenizerKind) -> String {
    data::Tokenizer::new(kind).map_or_else(|_| format!("#{token}"), |t| t.shown(token))
}

/// The tokenizer of the residuals shown, bytes before any.
pub(crate) fn tokenizer_of(residuals: ReadSignal<Option<Residuals>>) -> TokenizerKind {
    residuals.with(|r| r.as_ref().map(|r| r.tokenizer).unwrap_or_default())
}

#[component]
pub fn ResidualView(residuals: ReadSignal<Option<Residuals>>, viewer: Viewer) -> impl IntoView {
    let Viewer {
        open,
        seq,
        token,
        ablate,
        how,
        patch,
    } = viewer;
    let (depth, set_depth) = signal(0usize);
    let depths = move || residuals.with(|r| r.as_ref().map_or(1, |r| r.depths.len()));
    let tokens = move || residuals.with(|r| r.as_ref().map_or(1, |r| r.inputs.len()));
    // The depth and token shown, clamped to what was read.
    let shown = move || {
        residuals.with(|r| {
            let r = r.as_ref()?;
            let d = r.depths.get(depth.get().min(r.depths.len().saturating_sub(1)))?;
            let t = token.get().min(r.inputs.len().saturating_sub(1));
            Some((r.step, r.seq, d.name.clone(), d.shape, t, d.token(t).to_vec()))
        })
    };
    let picture = move || {
        let Some((_, _, _, shape, _, values)) = shown() else {
            return "<p>Read after step 1, then every 5 steps, while this view is open.</p>".to_string();
        };
        match shape {
            Shape::Matrix { rows, cols } => heatmap_svg(&values, rows, cols),
            Shape::Vector { len } => heatmap_svg(&values, 1, len),
        }
    };
    let facts = move || {
        let Some((_, _, _, shape, _, values)) = shown() else {
            return (String::new(), String::new());
        };
        match shape {
            Shape::Matrix { rows, cols } => {
                let s = observe::spectrum(&values, rows, cols);
                (
                    format!(
                        "norm {:.4} · effective rank {:.2} of {}",
                        s.norm,
                        s.effective_rank,
                        rows.min(cols)
                    ),
                    spectrum_svg(&s.singular_values),
                )
            }
            Shape::Vector { .. } => {
                let norm = values.iter().map(|v| f64::from(*v).powi(2)).sum::<f64>().sqrt();
                (format!("norm {norm:.4} · a vector of {}", values.len()), String::new())
            }
        }
    };
    // How the chosen token's residual fills up: each depth's effective rank (matrices) or norm.
    let by_depth = move || {
        residuals.with(|r| {
            let Some(r) = r else { return String::new() };
            let t = token.get().min(r.inputs.len().saturating_sub(1));
            let parts: Vec<String> = r
                .depths
                .iter()
                .map(|d| match d.shape {
                    Shape::Matrix { rows, cols } => {
                        format!(
                            "{} {:.2}",
                            d.name,
                            observe::spectrum(d.token(t), rows, cols).effective_rank
                        )
                    }
                    Shape::Vector { .. } => {
                        let norm = d.token(t).iter().map(|v| f64::from(*v).powi(2)).sum::<f64>().sqrt();
                        format!("{} {norm:.2}", d.name)
                    }
                })
                .collect();
            let what = match r.depths.first().map(|d| d.shape) {
                Some(Shape::Matrix { .. }) => "effective rank",
                _ => "norm",
            };
            format!("{what} by depth: {}", parts.join(" → "))
        })
    };
    // What each block wrote into this sequence's residual, against the residual it landed in:
    // the same numbers as `resmem analyze residual` prints.
    let writes = move || {
        residuals.with(|r| {
            r.as_ref()
                .map(|r| observe::writes(&r.depths, r.inputs.len()))
                .unwrap_or_default()
        })
    };
    let writes_text = move || {
        let parts: Vec<String> = writes()
            .iter()
            .map(|w| format!("{} {:.3}×", w.depth, w.relative))
            .collect();
        match parts.is_empty() {
            true => String::new(),
            false => format!(
                "what each block writes, against the residual it lands in: {}",
                parts.join(" · ")
            ),
        }
    };
    let text = move || {
        residuals.with(|r| {
            let Some(r) = r else { return vec![] };
            let t = token.get();
            r.inputs
                .iter()
                .enumerate()
                .map(|(i, &b)| {
                    let class = if i == t { "tok chosen" } else { "tok" };
                    view! { <span class=class>{glyph(b, r.tokenizer)}</span> }
                })
                .collect::<Vec<_>>()
        })
    };
    let data = move |f: fn(&Shown) -> String| shown().map(|s| f(&s));
    let attention_picture = move || {
        residuals.with(|r| match r {
            Some(r) if !r.attention.is_empty() => attention_svg(&r.attention, r.inputs.len(), token.get()),
            _ => String::new(),
        })
    };
    view! {
        <section id="residual">
            <ViewTitle title="Residual stream"
                what="One token's residual at one depth, the attention it paid and, for the RMT, what each key slot stores."
                help="For the RMT, a token's residual is a D_k×D_v matrix (red positive, blue negative, white 0) with \
                    singular values beside it. An effective rank near D_k means the matrix is fully used; one dominant \
                    singular value means a single direction carries everything. For hyper-connections it is the n \
                    streams of D, one row a stream: rows that stay alike mean the streams never came apart. For AltUp it is the K \
                    sub-blocks of D, one row a sub-block: each layer computes on one row (layer ℓ on row ℓ mod K) and \
                    predicts and corrects the others, so a row moves most at the depths whose layer computes on it. For Attention \
                    Residuals it is the N + 1 depth blocks: row 0 the embedding, row n the sum of depth block n's outputs \
                    (rows past the block being filled are 0), and each site reads a softmax over the rows before it; a \
                    row that stays small is a block whose outputs cancel. Scrub the depth: a healthy residual \
                    grows gently with depth, neither exploding nor fading to white. The logit lens reads the residual \
                    at each depth as the final head would: the KL to the output should fall towards the last depth." />
            <label><input id="residual-open" type="checkbox" prop:checked=open
                on:change=move |ev| open.set(event_target_checked(&ev)) />
                " Look inside: read one sequence's residuals while training"</label>
            <Show when=move || open.get()>
                <div class="controls">
                    <label>"Sequence "
                        <input id="residual-seq" type="number" min="0" prop:value=move || seq.get()
                            on:change=move |ev| seq.set(event_target_value(&ev).parse().unwrap_or(0)) />
                    </label>
                    <label>"Depth "
                        <input id="residual-depth" type="range" min="0"
                            prop:max=move || depths().saturating_sub(1)
                            prop:value=move || depth.get()
                            on:input=move |ev| set_depth.set(event_target_value(&ev).parse().unwrap_or(0)) />
                        <span id="residual-depth-value">{move || shown().map(|s| s.2).unwrap_or_default()}</span>
                    </label>
                    <label>"Token "
                        <input id="residual-token" type="range" min="0"
                            prop:max=move || tokens().saturating_sub(1)
                            prop:value=move || token.get()
                            on:input=move |ev| token.set(event_target_value(&ev).parse().unwrap_or(0)) />
                        <span id="residual-token-value">{move || token.get()}</span>
                    </label>
                </div>
                <p id="residual-text" class="readout">{text}</p>
                <p id="residual-facts" class="readout">{move || facts().0}</p>
                <p id="residual-depths" class="readout">{by_depth}</p>
                <p id="residual-writes" class="readout"
                    data-writes=move || serde_json::to_string(&writes()).unwrap_or_default()>{writes_text}</p>
                <div class="residual-row">
                    <div id="residual-heatmap"
                        data-step=move || data(|s| s.0.to_string())
                        data-seq=move || data(|s| s.1.to_string())
                        data-depth=move || data(|s| s.2.clone())
                        data-token=move || data(|s| s.4.to_string())
                        data-values=move || data(|s| serde_json::to_string(&s.5).unwrap_or_default())
                        inner_html=picture></div>
                    <div id="residual-spectrum" inner_html=move || facts().1></div>
                </div>
                <ChartExport target="residual-heatmap" name="residual" />
                <h3>"Logit lens"</h3>
                <p class="note">"What the model would predict next if its head read the residual at each depth (the \
                    final norm, for the RMT its unembedding retrieval, then W_U): the top 5 tokens with their \
                    probabilities, and the KL divergence from the final output in nats, which falls to 0 at the last \
                    depth. For token " {move || residuals.with(|r| r.as_ref().map_or(0, |r| r.lens_token))}
                    " as read; another chosen token is read at the next step. The same numbers as resmem analyze lens."</p>
                <table id="residual-lens"
                    data-token=move || residuals.with(|r| r.as_ref().map_or(String::new(), |r| r.lens_token.to_string()))
                    data-lens=move || residuals.with(|r| r.as_ref().map(|r| serde_json::to_string(&r.lens).unwrap_or_default()))>
                    <tr><th>"depth"</th><th>"KL to final"</th><th>"top predictions"</th></tr>
                    {move || residuals.with(|r| r.as_ref().map(|r| r.lens.clone()).unwrap_or_default()).into_iter().map(|row| {
                        let kind = tokenizer_of(residuals);
                        let top = row.top.iter().map(|(tok, p)| format!("{} {:.3}", glyph(*tok, kind), p)).collect::<Vec<_>>().join("  ");
                        view! { <tr><td>{row.depth}</td><td class="num">{format!("{:.4}", row.kl_to_final)}</td><td class="tok">{top}</td></tr> }
                    }).collect_view()}
                </table>
                <h3>"Attention"</h3>
                <p class="note">"Each head's attention over this sequence: row i is how token i spreads its attention \
                    over the tokens up to it (white 0, red 1); the chosen token's row is outlined. The same weights as \
                    resmem analyze attention."</p>
                <div id="residual-attention"
                    data-token=move || token.get().to_string()
                    data-patterns=move || residuals.with(|r| r.as_ref().map(|r| serde_json::to_string(&r.attention).unwrap_or_default()))
                    inner_html=attention_picture></div>
                <InterventionsView residuals ablate how patch />
                <Show when=move || residuals.with(|r| r.as_ref().is_some_and(|r| r.keys.is_some()))>
                    <h3>"Key slots"</h3>
                    <p class="note">"The RMT's R key slots in each block: the share of what attention stores into the \
                        residual matrix that goes through each slot (Σ over tokens of ‖w_O[h] ⊗ y[h]‖); hover a bar for \
                        the norms of the slot's keys. Even bars use every slot; one tall bar means one slot carries the \
                        block's writes. The same numbers as resmem analyze keys."</p>
                    <div id="residual-keys"
                        data-keys=move || residuals.with(|r| r.as_ref().and_then(|r| r.keys.as_ref()).map(|k| serde_json::to_string(k).unwrap_or_default()))
                        inner_html=move || residuals.with(|r| r.as_ref().and_then(|r| r.keys.as_deref()).map(key_slots_svg).unwrap_or_default())></div>
                </Show>
            </Show>
        </section>
    }
}
