//! What the residual view does to a model, not only reads: direct logit attribution of the
//! chosen token's top prediction, ablation of sites clicked or typed, and activation patching
//! of two typed prompts, with the numbers `resmem analyze attribute`, `ablate` and `patch` give.

use crate::help::ViewTitle;
use crate::residual::{diverging, glyph, tokenizer_of, Residuals};
use leptos::prelude::*;
use models::interventions::{Ablation, Agreement, Attribution, Patched, Share, Site};
use serde::{Deserialize, Serialize};

/// Two prompts typed in the page to patch between, and the sites to patch (none: the
/// embedding, every layer's write and the whole residual after every depth).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PatchAsk {
    pub clean: String,
    pub corrupt: String,
    pub sites: Vec<String>,
}

impl PatchAsk {
    pub fn is_set(&self) -> bool {
        !self.clean.is_empty() && !self.corrupt.is_empty()
    }
}

/// Activation patching of the two prompts, as `resmem analyze patch` computes it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Patching {
    /// What was asked, and the step of the weights it was computed with.
    pub ask: PatchAsk,
    pub step: usize,
    /// The clean prompt's tokens: the table's columns.
    pub words: Vec<String>,
    /// The last token, whose logit of `target` (minus `versus`'s) is read.
    pub token: usize,
    pub target: String,
    pub versus: Option<String>,
    /// That logit difference in the clean and in the corrupted prompt.
    pub clean: f64,
    pub corrupt: f64,
    pub rows: Vec<Patched>,
    pub agreement: Agreement,
}

/// Direct logit attribution of a token's top prediction, and the ablation asked for, as
/// `resmem analyze attribute` and `ablate` compute them.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Interventions {
    pub token: usize,
    /// The token whose logit is attributed: the model's top prediction.
    pub target: u32,
    /// The batch's mean loss, unablated.
    pub loss: f64,
    /// None where the read-out is not linear once its norm is frozen (mHC's gated head).
    pub attribution: Option<Attribution>,
    /// The ablation asked for, or why it could not run.
    pub ablation: Option<Result<Ablated, String>>,
    /// The patching asked for, or why it could not run.
    #[serde(default)]
    pub patching: Option<Result<Box<Patching>, String>>,
}

/// An ablation's effect on the batch's loss and on the token's logit of the target.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Ablated {
    pub sites: Vec<String>,
    pub how: Ablation,
    pub loss: f64,
    pub loss_change: f64,
    pub logit: f64,
    pub logit_change: f64,
    pub top: u32,
}

/// One row of attribution bars: a site, its share of the logit as a bar (red up, blue down),
/// and a click that adds it to the ablation or takes it out (a share that is no site, ML2's
/// bias, has none).
fn share_rows(shares: Vec<Share>, most: f64, ablate: RwSignal<Vec<String>>) -> impl IntoView {
    shares
        .into_iter()
        .map(|s| {
            let width = (120.0 * s.logit.abs() / most).round();
            let colour = if s.logit < 0.0 { "#1f77b4" } else { "#d62728" };
            let site = s.site.clone();
            let chosen = {
                let site = site.clone();
                move || ablate.with(|a| a.contains(&site))
            };
            let is_site = site.parse::<Site>().is_ok();
            let toggle = move |_| {
                if !is_site {
                    return;
                }
                ablate.update(|a| match a.iter().position(|x| *x == site) {
                    Some(i) => {
                        a.remove(i);
                    }
                    None => a.push(site.clone()),
                })
            };
            view! {
                <tr class="dla-row" class:chosen=chosen data-site=s.site.clone() on:click=toggle
                    title=if is_site { "Click to ablate this site (or to stop ablating it)" } else { "A bias: not a site" }>
                    <td>{s.site.clone()}</td>
                    <td class="num">{format!("{:+.4}", s.logit)}</td>
                    <td><span class="bar" style=format!("display:inline-block;height:10px;width:{width}px;background:{colour}")></span></td>
                </tr>
            }
        })
        .collect_view()
}

/// Direct logit attribution of the chosen token's top prediction, and the ablation of the
/// sites clicked or typed: what `resmem analyze attribute` and `ablate` print for the same
/// checkpoint.
#[component]
pub(crate) fn InterventionsView(
    residuals: ReadSignal<Option<Residuals>>,
    ablate: RwSignal<Vec<String>>,
    how: RwSignal<Ablation>,
    patch: RwSignal<PatchAsk>,
) -> impl IntoView {
    let interventions = move || residuals.with(|r| r.as_ref().map(|r| r.interventions.clone()).unwrap_or_default());
    let families = move || {
        let i = interventions();
        let Some(a) = i.attribution else {
            return vec![];
        };
        let most = [&a.writes, &a.heads, &a.groups, &a.tables]
            .iter()
            .flat_map(|f| f.iter().map(|s| s.logit.abs()))
            .fold(1e-12, f64::max);
        [
            ("what each layer writes", a.writes),
            ("each head", a.heads),
            ("each key slot, stream or sub-block", a.groups),
            (
                "each table of ML2, and its bias (a block's add up to its FF write)",
                a.tables,
            ),
        ]
        .into_iter()
        .filter(|(_, shares)| !shares.is_empty())
        .map(|(name, shares)| {
            let sum: f64 = shares.iter().map(|s| s.logit).sum();
            view! {
                <tr><th colspan="3">{format!("{name} (sum {sum:+.4})")}</th></tr>
                {share_rows(shares, most, ablate)}
            }
        })
        .collect::<Vec<_>>()
    };
    let headline = move || {
        let i = interventions();
        match &i.attribution {
            Some(a) => format!(
                "token {}: the logit of its top prediction {} is {:.4}",
                i.token,
                glyph(i.target, tokenizer_of(residuals)),
                a.logit
            ),
            None if residuals.with(|r| r.is_some()) => {
                "This model's read-out is not linear once its norm is frozen (mHC's gated head): ablate instead.".into()
            }
            None => String::new(),
        }
    };
    let ablation_text = move || match interventions().ablation {
        None => "Click a bar above, or type sites, to ablate them.".to_string(),
        Some(Err(e)) => e,
        Some(Ok(a)) => format!(
            "{}-ablating {}: loss {:.4} ({:+.4}), logit of {} {:.4} ({:+.4}), top prediction {}",
            format!("{:?}", a.how).to_lowercase(),
            a.sites.join(", "),
            a.loss,
            a.loss_change,
            glyph(interventions().target, tokenizer_of(residuals)),
            a.logit,
            a.logit_change,
            glyph(a.top, tokenizer_of(residuals))
        ),
    };
    view! {
        <ViewTitle title="Direct logit attribution"
            what="How much of the chosen token's top logit each part of its last residual makes."
            help="The final norm's scale is frozen at its value on the whole residual, as TransformerLens's \
                apply_ln_to_stack does, so the read-out is linear and the parts add up to the logit: what each \
                layer writes (the embedding and every block), each head's part of its attention's write, and each \
                RMT key slot (a row of the D_k×D_v matrix), hyper-connection stream or AltUp sub-block (Attention Residuals' and \
                mHC's heads read their residual non-linearly: no attribution). A large bar is a large \
                direct effect, not a cause: a part can matter through later layers, which attribution does not \
                see. Ablate it to find out. The same numbers as resmem analyze attribute." />
        <p class="readout">{headline}</p>
        <table id="residual-dla"
            data-token=move || interventions().token.to_string()
            data-target=move || interventions().target.to_string()
            data-attribution=move || serde_json::to_string(&interventions().attribution).unwrap_or_default()>
            {families}
        </table>
        <ViewTitle title="Ablation"
            what="The change in loss and in that logit when sites are removed from the forward."
            help="Zero replaces a site's values with zeros, mean with their mean over the batch's tokens, resample \
                with the same token's values in the next sequence of the batch (mean and resample keep the site's \
                typical size, so the effect is of its information, not of its scale). Sites: embedding, block0.attn, \
                block1.ff, block0.attn.head2, slot3, stream1, sub-block1 or depth-block1 (at every depth), block0.ff.slot3 (after one depth), \
                block1.attn.resid (the whole residual after a depth). An ablation's effect is causal; an attribution \
                or an attention weight is not. Ablations apply at a training run's next read, and at once to a \
                finished or imported run, whose checkpoint is read again on its first held-out batch. The same numbers as resmem analyze ablate." />
        <div class="controls">
            <label>"Ablate "
                <input id="residual-ablate" type="text" placeholder="block0.attn, slot3"
                    prop:value=move || ablate.get().join(", ")
                    on:change=move |ev| ablate.set(event_target_value(&ev).split(',').map(|s| s.trim().to_string())
                        .filter(|s| !s.is_empty()).collect()) />
            </label>
            <label>" with "
                <select id="residual-how" on:change=move |ev| how.set(match event_target_value(&ev).as_str() {
                    "mean" => Ablation::Mean,
                    "resample" => Ablation::Resample,
                    _ => Ablation::Zero,
                })>
                    <option value="zero" selected=move || how.get() == Ablation::Zero>"zeros"</option>
                    <option value="mean" selected=move || how.get() == Ablation::Mean>"the batch mean"</option>
                    <option value="resample" selected=move || how.get() == Ablation::Resample>"another sequence's"</option>
                </select>
            </label>
        </div>
        <p id="residual-ablation" class="readout"
            data-ablation=move || serde_json::to_string(&interventions().ablation).unwrap_or_default()>{ablation_text}</p>
        <PatchingView interventions=Signal::derive(interventions) patch />
    }
}

/// Two prompts typed in the page, and the fraction of their logit difference each site
/// recovers when patched from the clean prompt into the corrupted one: sites × positions.
#[component]
fn PatchingView(interventions: Signal<Interventions>, patch: RwSignal<PatchAsk>) -> impl IntoView {
    let patching = move || interventions.with(|i| i.patching.clone());
    let text = move |set: fn(&mut PatchAsk, String)| {
        move |ev| {
            let value = event_target_value(&ev);
            patch.update(|p| set(p, value));
        }
    };
    let readout = move || {
        match patching() {
        None => "Type a clean prompt and a corrupted one of the same length in tokens.".to_string(),
        Some(Err(e)) => e,
        Some(Ok(p)) => format!(
            "step {}: token {} ({:?}), logit {:?}{}: clean {:.4}, corrupted {:.4}; attribution patching agrees with              correlation {:.3}, largest difference {:.3}",
            p.step,
            p.token,
            p.words.get(p.token).cloned().unwrap_or_default(),
            p.target,
            p.versus.as_ref().map(|v| format!(" − logit {v:?}")).unwrap_or_default(),
            p.clean,
            p.corrupt,
            p.agreement.correlation,
            p.agreement.largest_difference
        ),
    }
    };
    let table = move || {
        let Some(Ok(p)) = patching() else {
            return None;
        };
        let cell = |value: f64, estimate: f64| {
            view! {
                <td class="num" style=format!("background:{}", diverging(value as f32, 1.0))
                    title=format!("patched {value:.4}; attribution patching's estimate {estimate:.4}")>{format!("{value:.2}")}</td>
            }
        };
        let rows = (p.rows.iter())
            .map(|r| {
                let cells = (r.positions.iter().zip(&r.estimated_positions)).map(|(&v, &e)| cell(v, e)).collect_view();
                view! { <tr data-site=r.site.clone()><th>{r.site.clone()}</th>{cell(r.all, r.estimated_all)}{cells}</tr> }
            })
            .collect_view();
        let heads = p
            .words
            .iter()
            .map(|w| view! { <th>{format!("{w:?}")}</th> })
            .collect_view();
        Some(view! {
            <thead><tr><th>"site"</th><th>"all"</th>{heads}</tr></thead>
            <tbody>{rows}</tbody>
        })
    };
    view! {
        <ViewTitle title="Activation patching"
            what="How much of the clean prompt's answer each site carries, position by position."
            help="The two prompts sit in two sequences of the batch. Each site's values are copied from the clean \
                prompt's forward into the corrupted prompt's, at one position (a column) or at all of them, and the cell \
                is the fraction of the logit difference recovered at the last token: 1 is the clean prompt's difference, \
                0 the corrupted one's. The difference is the clean prompt's top prediction against the corrupted one's \
                (or its logit alone where both predict the same). Patching is causal: a site that recovers much carries \
                what the prompts differ in, at that position. Hover a cell for attribution patching's first-order \
                estimate, from one backward. Sites: empty for the embedding, every layer's write and the whole residual \
                after each depth, or names as for ablation (slot3, block0.attn.head1). It takes sites × (positions + 1) \
                forwards, again every 50 steps while training. The same numbers as resmem analyze patch." />
        <div class="controls">
            <label>"Clean "<input id="patch-clean" type="text" placeholder="When Mary and John"
                prop:value=move || patch.with(|p| p.clean.clone()) on:change=text(|p, v| p.clean = v) /></label>
            <label>" corrupted "<input id="patch-corrupt" type="text" placeholder="When Mary and Anne"
                prop:value=move || patch.with(|p| p.corrupt.clone()) on:change=text(|p, v| p.corrupt = v) /></label>
            <label>" sites "<input id="patch-sites" type="text" placeholder="every write and residual"
                prop:value=move || patch.with(|p| p.sites.join(", "))
                on:change=text(|p, v| p.sites = v.split(',').map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect()) /></label>
        </div>
        <p id="residual-patching-readout" class="readout">{readout}</p>
        <table id="residual-patching" class="patching"
            data-patching=move || serde_json::to_string(&patching()).unwrap_or_default()>
            {table}
        </table>
    }
}
