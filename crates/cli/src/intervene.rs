//! `resmem analyze attribute`, `ablate` and `patch`: direct logit attribution, ablation and
//! activation patching on the forward the other views read (`residual::forward`), over the
//! sites of `models::interventions`.

use crate::args::{AblateArgs, AttributeArgs, HowArg, LogitArgs, PatchArgs};
use crate::residual::{check_token, forward, put_text, Sequence, Words};
use anyhow::{bail, Context, Result};
use engine::Backend;
use models::interventions::{self, drive, Ablation, Agreement, Edit, Pair, Patched, Patcher, Point, Points, Site};
use models::LanguageModel;
use serde::Serialize;
use std::collections::BTreeMap;

/// A token given as its text (one token of the run's tokenizer) or as `#id`.
fn token_of(text: &str, words: &Words, vocab: usize, flag: &str) -> Result<u32> {
    let id = match text.strip_prefix('#').map(str::parse::<u32>) {
        Some(id) => id.with_context(|| format!("--{flag} {text}: `#` takes a token id"))?,
        None => match words.0.encode(text).as_slice() {
            [one] => *one,
            many => bail!(
                "--{flag} {text:?} is {} tokens of the run's tokenizer; give one token's text, or its id as #id",
                many.len()
            ),
        },
    };
    if id as usize >= vocab {
        bail!("--{flag} {text}: token {id} is past the vocabulary of {vocab}");
    }
    Ok(id)
}

/// The largest logit's token.
fn top(logits: &[f32]) -> u32 {
    (0..logits.len())
        .max_by(|&a, &b| logits[a].total_cmp(&logits[b]).then(b.cmp(&a)))
        .unwrap_or(0) as u32
}

/// The logit an intervention reads: the token, the target and what it is read against.
struct Read {
    token: usize,
    target: u32,
    versus: Option<u32>,
}

impl Read {
    fn of(args: &LogitArgs, seq: &Sequence, words: &Words, default: &[f32]) -> Result<Self> {
        let token = args.token.unwrap_or(seq.valid - 1);
        check_token(token, seq.valid)?;
        let v = default.len();
        let target = match &args.target {
            Some(t) => token_of(t, words, v, "target")?,
            None => top(default),
        };
        let versus = args
            .versus
            .as_deref()
            .map(|t| token_of(t, words, v, "versus"))
            .transpose()?;
        Ok(Self { token, target, versus })
    }

    fn describe(&self, words: &Words) -> String {
        match self.versus {
            Some(b) => format!("logit {} − logit {}", words.word(self.target), words.word(b)),
            None => format!("logit {}", words.word(self.target)),
        }
    }
}

/// The model's logits of row `row` after its last forward.
async fn logits_of<B: Backend>(be: &B, model: &dyn LanguageModel<B>, row: usize) -> Result<Vec<f32>> {
    let v = model.vocab();
    Ok(be.read_range(&model.head().logits, row * v, v).await?)
}

fn sites_of<B: Backend>(model: &dyn LanguageModel<B>) -> Points {
    Points::of(&model.edit_points(), model.residual_groups())
}

pub fn attribute(args: AttributeArgs) -> Result<()> {
    let (cfg, what, a, read, seq) = crate::with_backend!(args.at.backend, be => {
        let (cfg, what, mut trainer, seq) = forward(be, &args.at)?;
        let t = cfg.data.seq_len();
        let words = Words::of(&cfg)?;
        let token = args.logit.token.unwrap_or(seq.valid - 1);
        check_token(token, seq.valid)?;
        let logits = pollster::block_on(logits_of(be, &*trainer.model, args.at.seq * t + token))?;
        let read = Read::of(&args.logit, &seq, &words, &logits)?;
        let a = pollster::block_on(interventions::attribute(be, &mut trainer.model, (&seq.batch, seq.separator), (args.at.seq, t, read.token), read.target, read.versus))?
            .context("this model's read-out is not linear once its norm is frozen (hyper-connections' gated `head` collapse): use `resmem analyze ablate` or `patch`")?;
        anyhow::Ok((cfg, what, a, read, seq))
    })?;
    if args.json {
        out!("{}", serde_json::to_string_pretty(&a)?);
        return Ok(());
    }
    let words = Words::of(&cfg)?;
    out!(
        "{} ({what}), sequence {}, token {} {}: {} = {:.4}, by part of the last residual (final norm's scale frozen)",
        cfg.arch(),
        args.at.seq,
        read.token,
        words.context(&seq, read.token, 12),
        read.describe(&words),
        a.logit
    );
    for (family, shares) in [
        ("writes", &a.writes),
        ("heads", &a.heads),
        ("slots or streams", &a.groups),
        ("ML2 tables and biases (a block's add up to its FF write)", &a.tables),
    ] {
        if shares.is_empty() {
            continue;
        }
        let sum: f64 = shares.iter().map(|s| s.logit).sum();
        out!("{family} (sum {sum:.4})");
        let most = shares.iter().map(|s| s.logit.abs()).fold(1e-12, f64::max);
        for s in shares {
            let bar = "#".repeat((20.0 * s.logit.abs() / most).round() as usize);
            let sign = if s.logit < 0.0 { '-' } else { '+' };
            out!("  {:<22} {:>10.4}  {sign}{bar}", s.site, s.logit);
        }
    }
    Ok(())
}

/// One intervention's effect.
#[derive(Serialize)]
struct Effect {
    sites: String,
    loss: f64,
    loss_change: f64,
    logit: f64,
    logit_change: f64,
    top: u32,
}

pub fn ablate(args: AblateArgs) -> Result<()> {
    let how = match args.how {
        HowArg::Zero => Ablation::Zero,
        HowArg::Mean => Ablation::Mean,
        HowArg::Resample => Ablation::Resample,
    };
    let (cfg, what, clean, effects, read, seq) = crate::with_backend!(args.at.backend, be => {
        let (cfg, what, mut trainer, seq) = forward(be, &args.at)?;
        let words = Words::of(&cfg)?;
        let model = &mut trainer.model;
        let (b, t) = model.batch_shape();
        for &p in &args.positions {
            check_token(p, seq.valid).context("--positions")?;
        }
        let points = sites_of(&**model);
        let sites = drive::resolve(&points, &args.sites)?;
        let on = (&seq.batch, seq.separator);
        let token = args.logit.token.unwrap_or(seq.valid - 1);
        check_token(token, seq.valid)?;
        let row = [args.at.seq * t + token];
        let none = BTreeMap::new();
        let clean = pollster::block_on(drive::forward(be, model, on, &none, &row))?;
        let read = Read::of(&args.logit, &seq, &words, &clean.logits[0])?;
        let values = pollster::block_on(drive::read_points(be, model, on))?;
        let positions: Vec<usize> = match args.positions.is_empty() {
            true => (0..t).collect(),
            false => args.positions.clone(),
        };
        let rows: Vec<usize> = (0..b).flat_map(|s| positions.iter().map(move |p| s * t + p)).collect();
        let mut runs: Vec<(String, Vec<_>)> = sites.iter().map(|(s, targets)| (s.to_string(), targets.clone())).collect();
        if sites.len() > 1 {
            runs.push(("all of them".into(), sites.iter().flat_map(|(_, t)| t.clone()).collect()));
        }
        let mut effects = Vec::new();
        for (name, targets) in runs {
            crate::train::check_stop("the ablations")?;
            let edits = drive::ablation(&values, &targets, how, &rows, (b, t))?;
            let o = pollster::block_on(drive::forward(be, model, on, &edits, &row))?;
            let logit = o.difference(0, read.target, read.versus);
            effects.push(Effect {
                sites: name,
                loss: o.loss,
                loss_change: o.loss - clean.loss,
                logit,
                logit_change: logit - clean.difference(0, read.target, read.versus),
                top: top(&o.logits[0]),
            });
        }
        anyhow::Ok((cfg, what, clean, effects, read, seq))
    })?;
    let base = clean.difference(0, read.target, read.versus);
    if args.json {
        let json = serde_json::json!({ "loss": clean.loss, "logit": base, "token": read.token, "target": read.target,
            "versus": read.versus, "how": how, "ablations": effects });
        out!("{}", serde_json::to_string_pretty(&json)?);
        return Ok(());
    }
    let words = Words::of(&cfg)?;
    out!(
        "{} ({what}): {}-ablation over the batch's {} sequences; sequence {}, token {} {}",
        cfg.arch(),
        format!("{how:?}").to_lowercase(),
        seq.batch.b,
        args.at.seq,
        read.token,
        words.context(&seq, read.token, 12)
    );
    out!(
        "unablated: loss {:.4}, {} {:.4}, top {}",
        clean.loss,
        read.describe(&words),
        base,
        words.word(top(&clean.logits[0]))
    );
    out!(
        "{:<28} {:>10} {:>10} {:>10} {:>10}  top",
        "ablated",
        "loss",
        "change",
        "logit",
        "change"
    );
    for e in &effects {
        out!(
            "{:<28} {:>10.4} {:>+10.4} {:>10.4} {:>+10.4}  {}",
            e.sites,
            e.loss,
            e.loss_change,
            e.logit,
            e.logit_change,
            words.word(e.top)
        );
    }
    Ok(())
}

pub fn patch(args: PatchArgs) -> Result<()> {
    if args.at.text.is_none() {
        bail!("patching needs the clean prompt as --prompt TEXT and the corrupted one as --corrupt TEXT, with --run");
    }
    let (cfg, what, rows, (clean_ld, corrupt_ld), read, seq) = crate::with_backend!(args.at.backend, be => {
        let (cfg, what, mut trainer, mut seq) = forward(be, &args.at)?;
        let words = Words::of(&cfg)?;
        let model = &mut trainer.model;
        let (b, t) = model.batch_shape();
        if b < 2 {
            bail!("patching puts the two prompts in two sequences of the batch; this run's batch is 1");
        }
        let (from, to) = (args.at.seq, (args.at.seq + 1) % b);
        let corrupt = words.0.encode(&args.corrupt);
        if corrupt.len() != seq.valid {
            bail!(
                "--corrupt is {} tokens and the clean prompt {}: patching needs prompts of the same length",
                corrupt.len(),
                seq.valid
            );
        }
        put_text(&mut seq.batch, to, &args.corrupt, &words.0)?;
        let points = sites_of(&**model);
        let names: Vec<String> = match args.sites.is_empty() {
            true => points.sites().iter().map(Site::to_string).collect(),
            false => args.sites.clone(),
        };
        let sites = drive::resolve(&points, &names)?;
        let on = (&seq.batch, seq.separator);
        let token = args.logit.token.unwrap_or(seq.valid - 1);
        check_token(token, seq.valid)?;
        let at = [from * t + token, to * t + token];
        let none: BTreeMap<Point, Edit> = BTreeMap::new();
        let base = pollster::block_on(drive::forward(be, model, on, &none, &at))?;
        let mut logit = args.logit.clone();
        if logit.versus.is_none() && logit.target.is_none() && top(&base.logits[1]) != top(&base.logits[0]) {
            logit.versus = Some(format!("#{}", top(&base.logits[1])));
        }
        let read = Read::of(&logit, &seq, &words, &base.logits[0])?;
        let (clean_ld, corrupt_ld) = (base.difference(0, read.target, read.versus), base.difference(1, read.target, read.versus));
        if clean_ld == corrupt_ld {
            bail!("the clean and corrupted prompts give the same {} ({clean_ld:.4}): nothing for a patch to recover; choose --target and --versus", read.describe(&words));
        }
        let pair = Pair { from, to, valid: seq.valid, token: read.token, target: read.target, versus: read.versus };
        let patcher = pollster::block_on(Patcher::new(be, model, on, pair, &base))?;
        let mut rows = Vec::new();
        for (site, targets) in &sites {
            crate::train::check_stop("the patches")?;
            rows.push(pollster::block_on(patcher.site(be, model, on, *site, targets))?);
        }
        anyhow::Ok((cfg, what, rows, (clean_ld, corrupt_ld), read, seq))
    })?;
    let Agreement {
        correlation,
        largest_difference: worst,
    } = Agreement::of(&rows);
    if args.json {
        let json = serde_json::json!({ "token": read.token, "target": read.target, "versus": read.versus,
            "clean": clean_ld, "corrupt": corrupt_ld, "patches": rows,
            "agreement": Agreement::of(&rows) });
        out!("{}", serde_json::to_string_pretty(&json)?);
        return Ok(());
    }
    let words = Words::of(&cfg)?;
    out!(
        "{} ({what}): {} at token {}, clean {clean_ld:.4}, corrupted {corrupt_ld:.4}; the fraction of the \
         difference each site recovers when patched from the clean forward at one position, and at all",
        cfg.arch(),
        read.describe(&words),
        read.token
    );
    let header: Vec<String> = seq.tokens[..seq.valid].iter().map(|&t| words.word(t)).collect();
    let table = |all: fn(&Patched) -> f64, positions: fn(&Patched) -> &[f64]| {
        let heads: Vec<String> = header.iter().map(|h| format!("{h:>7.7}")).collect();
        out!("{:<24} {:>7}  {}", "site", "all", heads.join(" "));
        for r in &rows {
            let cells: Vec<String> = positions(r).iter().map(|f| format!("{f:>7.3}")).collect();
            out!("{:<24} {:>7.3}  {}", r.site, all(r), cells.join(" "));
        }
    };
    table(|r| r.all, |r| &r.positions);
    out!(
        "attribution patching: the first-order estimate of the same, Σ (clean − corrupted) · gradient, from one \
         backward at the corrupted prompt"
    );
    table(|r| r.estimated_all, |r| &r.estimated_positions);
    out!(
        "agreement over the {} cells: correlation {correlation:.3}, largest difference {worst:.3} (the estimate is \
         linear: it is off where a patch moves the logit through a norm, softmax or GELU far from where it was)",
        rows.len() * (seq.valid + 1)
    );
    Ok(())
}
