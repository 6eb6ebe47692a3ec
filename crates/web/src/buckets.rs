//! Live histograms of the hash tables' bucket use over the last steps, for a chosen layer and
//! table (the MemoryFormer paper's Figure 4).

use crate::chart::histogram_svg;
use crate::help::ViewTitle;
use crate::observed::{Observed, Rows, BUCKET_WINDOW};
use crate::save::ChartExport;
use leptos::prelude::*;
use models::buckets::{normalised_entropy, BucketCounts};

/// Hits of every layer and table, summed over the readings kept (the last steps').
fn summed(readings: &[Observed]) -> Vec<BucketCounts> {
    let mut sum: Option<Vec<BucketCounts>> = None;
    for o in readings {
        let Rows::Buckets(hits) = &o.rows else { continue };
        match &mut sum {
            None => sum = Some(hits.clone()),
            Some(sum) => sum.iter_mut().zip(hits).for_each(|(a, b)| a.accumulate(b)),
        }
    }
    sum.unwrap_or_default()
}

#[component]
pub fn BucketView(readings: Signal<Vec<Observed>>) -> impl IntoView {
    let hits = Memo::new(move |_| readings.with(|r| summed(r)));
    let (layer, set_layer) = signal(0usize);
    let (table, set_table) = signal(0usize);
    let selected = move || {
        hits.with(|h| {
            let l = h.get(layer.get().min(h.len().saturating_sub(1)))?;
            l.counts.get(table.get().min(l.counts.len().saturating_sub(1))).cloned()
        })
    };
    let tables = move || hits.with(|h| h.first().map_or(1, |l| l.counts.len()));
    let names = move || hits.with(|h| h.iter().map(|l| l.layer.clone()).collect::<Vec<_>>());
    let stats = move || {
        selected().map_or("Counted while training.".to_string(), |c| {
            let dead = c.iter().filter(|&&n| n == 0).count();
            format!(
                "entropy {:.3} · dead buckets {dead} of {}",
                normalised_entropy(&c),
                c.len()
            )
        })
    };
    view! {
        <section id="buckets">
            <ViewTitle title="Hash-table buckets"
                what="How often each bucket of one table was read over the last steps; the line is an even share."
                help="A MemoryFormer layer hashes chunks of its input to rows of tables. Entropy 1 means every bucket \
                    is used equally, which is healthy: the table's capacity is in use. A few tall bars mean the hash \
                    sends most inputs to the same rows, and the layer acts like a much smaller one." />
            <p class="note">"Over the last " {BUCKET_WINDOW} " steps."</p>
            <div class="controls">
                <label>"Layer "
                    <select id="bucket-layer" on:change=move |ev| set_layer.set(event_target_value(&ev).parse().unwrap_or(0))>
                        {move || names().into_iter().enumerate().map(|(i, name)| {
                            view! { <option value=i.to_string() selected=i == layer.get_untracked()>{name}</option> }
                        }).collect_view()}
                    </select>
                </label>
                <label>"Table "
                    <input id="bucket-table" type="range" min="0"
                        prop:max=move || tables().saturating_sub(1)
                        prop:value=move || table.get()
                        on:input=move |ev| set_table.set(event_target_value(&ev).parse().unwrap_or(0)) />
                    <span id="bucket-table-value">{move || table.get()}</span>
                </label>
            </div>
            <p id="bucket-stats" class="readout">{stats}</p>
            <div id="histogram" inner_html=move || selected().map(|c| histogram_svg(&c)).unwrap_or_default()></div>
            <ChartExport target="histogram" name="buckets" />
        </section>
    }
}
