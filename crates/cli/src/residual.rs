//! `resmem analyze residual`: each token's residual stream at every depth, as the playground's
//! residual viewer shows it: for an RMT the D_k×D_v matrix with its singular values, effective
//! rank and norm; for the others the residual vector and its norm. And `resmem analyze lens`,
//! the logit lens of one token at every depth, `resmem analyze attention`, every head's
//! weights, and `resmem analyze keys`, an RMT's key slots, on the same forward.

use crate::args::{AttentionArgs, ForwardArgs, KeysArgs, LensArgs, MixingArgs, ResidualArgs};
use crate::{load, source};
use anyhow::{bail, Context, Result};
use data::DataSource;
use engine::Backend;
use models::observe::{self, Shape, Snapshot};
use models::{LanguageModel, Purpose, RunConfig, Trainer};

pub fn run(args: ResidualArgs) -> Result<()> {
    let (cfg, what, snapshots) = crate::with_backend!(args.at.backend, be => {
        let (cfg, what, trainer, _) = forward(be, &args.at)?;
        let observables = trainer.model.inside().residuals;
        let t = cfg.data.seq_len();
        let snapshots = pollster::block_on(observe::read(be, &observables, args.at.seq, t))?;
        anyhow::Ok((cfg, what, snapshots))
    })?;
    let t = cfg.data.seq_len();
    if let Some(depth) = &args.depth {
        let Some(s) = snapshots.iter().find(|s| &s.name == depth) else {
            let names: Vec<&str> = snapshots.iter().map(|s| s.name.as_str()).collect();
            bail!("no depth `{depth}`; this model's depths are {}", names.join(", "));
        };
        check_token(args.token, t)?;
        let values = s.token(args.token);
        let spectrum = match s.shape {
            Shape::Matrix { rows, cols } => Some(observe::spectrum(values, rows, cols)),
            Shape::Vector { .. } => None,
        };
        let row = serde_json::json!({ "model": cfg.arch(), "from": what, "depth": s.name, "token": args.token,
            "shape": s.shape, "values": values, "spectrum": spectrum });
        out!(
            "{}",
            if args.json {
                row.to_string()
            } else {
                serde_json::to_string_pretty(&row)?
            }
        );
        return Ok(());
    }
    let writes = observe::writes(&snapshots, t);
    let rows: Vec<serde_json::Value> = snapshots
        .iter()
        .enumerate()
        .map(|(d, s)| {
            let mut row = depth_summary(s, t);
            // The write that made this depth's residual: none for the embedding.
            let w = d.checked_sub(1).map(|i| &writes[i]);
            row["write_norm"] = serde_json::json!(w.map(|w| w.norm));
            row["write_relative"] = serde_json::json!(w.map(|w| w.relative));
            row
        })
        .collect();
    if args.json {
        out!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(());
    }
    out!(
        "{} ({what}), sequence {} of {t} tokens; means over its tokens",
        cfg.arch(),
        args.at.seq
    );
    out!(
        "{:<12} {:>12} {:>16} {:>12} {:>16}",
        "depth",
        "norm",
        "effective rank",
        "write norm",
        "write / residual"
    );
    for r in &rows {
        let or_dash = |key: &str, f: fn(f64) -> String| r[key].as_f64().map_or("-".into(), f);
        out!(
            "{:<12} {:>12.4} {:>16} {:>12} {:>16}",
            r["depth"].as_str().unwrap_or_default(),
            r["norm"].as_f64().unwrap_or(f64::NAN),
            or_dash("effective_rank", |x| format!("{x:.3}")),
            or_dash("write_norm", |x| format!("{x:.4}")),
            or_dash("write_relative", |x| format!("{x:.3}")),
        );
    }
    Ok(())
}

/// The mean norm (and, for matrices, effective rank) over a sequence's tokens.
fn depth_summary(s: &Snapshot, t: usize) -> serde_json::Value {
    let (mut norm, mut rank) = (0.0, 0.0);
    for i in 0..t {
        let v = s.token(i);
        match s.shape {
            Shape::Matrix { rows, cols } => {
                let sp = observe::spectrum(v, rows, cols);
                norm += sp.norm;
                rank += sp.effective_rank;
            }
            Shape::Vector { .. } => norm += v.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt(),
        }
    }
    let matrix = matches!(s.shape, Shape::Matrix { .. });
    serde_json::json!({ "depth": s.name, "norm": norm / t as f64,
        "effective_rank": matrix.then_some(rank / t as f64) })
}

/// `resmem analyze lens`: at each depth the head's top tokens and the KL from the output.
pub fn lens(args: LensArgs) -> Result<()> {
    let (cfg, what, rows, seq) = crate::with_backend!(args.at.backend, be => {
        let (cfg, what, trainer, seq) = forward(be, &args.at)?;
        let t = cfg.data.seq_len();
        check_token(args.token, seq.valid)?;
        let rows = pollster::block_on(observe::lens(be, &trainer.model, (args.at.seq, t, args.token), args.top))?;
        anyhow::Ok((cfg, what, rows, seq))
    })?;
    if args.json {
        out!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(());
    }
    let words = Words::of(&cfg)?;
    out!(
        "{} ({what}), sequence {}, token {} {}: the head read from the residual at each depth",
        cfg.arch(),
        args.at.seq,
        args.token,
        words.context(&seq, args.token, 12)
    );
    out!(
        "{:<12} {:>12}  top predictions (token: probability)",
        "depth",
        "KL to final"
    );
    for r in &rows {
        let top: Vec<String> = r
            .top
            .iter()
            .map(|(t, p)| format!("{}: {p:.3}", words.word(*t)))
            .collect();
        out!("{:<12} {:>12.4}  {}", r.depth, r.kl_to_final, top.join("  "));
    }
    Ok(())
}

/// `resmem analyze attention`: every block's and head's attention weights over one sequence, as
/// the query `--token` sees the keys (its strongest keys, and the head's mean look-back), or
/// all of them with `--json`.
pub fn attention(args: AttentionArgs) -> Result<()> {
    let (cfg, what, patterns, seq) = crate::with_backend!(args.at.backend, be => {
        let (cfg, what, trainer, seq) = forward(be, &args.at)?;
        let t = cfg.data.seq_len();
        let patterns = pollster::block_on(observe::attention_patterns(be, &trainer.model, (args.at.seq, t), &seq.starts))?;
        anyhow::Ok((cfg, what, patterns, seq))
    })?;
    if args.json {
        out!("{}", serde_json::to_string_pretty(&patterns)?);
        return Ok(());
    }
    let t = cfg.data.seq_len();
    let token = args.token.unwrap_or(seq.valid - 1);
    check_token(token, seq.valid)?;
    let words = Words::of(&cfg)?;
    out!(
        "{} ({what}), sequence {}: each head's attention from token {token} {} (the keys it weighs most), \
         and its mean look-back over all queries",
        cfg.arch(),
        args.at.seq,
        words.context(&seq, token, 12)
    );
    out!(
        "{:<8} {:>4} {:>10}  strongest keys (key: weight)",
        "block",
        "head",
        "look-back"
    );
    for p in &patterns {
        let row = p.row(token, t);
        let mut keys: Vec<usize> = (0..=token).collect();
        keys.sort_by(|&a, &b| row[b].total_cmp(&row[a]).then(b.cmp(&a)));
        let top: Vec<String> = keys
            .iter()
            .take(args.top)
            .map(|&j| format!("{j} {}: {:.3}", words.word(seq.tokens[j]), row[j]))
            .collect();
        out!(
            "{:<8} {:>4} {:>10.2}  {}",
            p.block,
            p.head,
            p.mean_distance(t),
            top.join("  ")
        );
    }
    Ok(())
}

/// `resmem analyze keys`: an RMT's key slots, block by block: the norms of the keys that read
/// and write through each, and the share of attention's stored mass each carries.
pub fn keys(args: KeysArgs) -> Result<()> {
    let (cfg, what, slots) = crate::with_backend!(args.at.backend, be => {
        let (cfg, what, trainer, _) = forward(be, &args.at)?;
        let t = cfg.data.seq_len();
        let slots = pollster::block_on(observe::key_slots(be, &trainer.model, (args.at.seq, t)))?;
        anyhow::Ok((cfg, what, slots))
    })?;
    let Some(slots) = slots else {
        bail!(
            "analyze keys reads the key slots of a residual matrix; {} has none (use --arch rmt or hybrid)",
            cfg.arch()
        );
    };
    if args.json {
        out!("{}", serde_json::to_string_pretty(&slots)?);
        return Ok(());
    }
    out!(
        "{} ({what}), sequence {}: each key slot's key norms, and its share of what attention stores",
        cfg.arch(),
        args.at.seq
    );
    out!(
        "{:<8} {:>4} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>13}",
        "block",
        "slot",
        "|r_Q|",
        "|r_K|",
        "|r_V|",
        "|r_FF|",
        "|w_O|",
        "|w_FF|",
        "stored share"
    );
    for k in &slots {
        let [q, kk, v, ff] = k.retrieval;
        let [o, wff] = k.storage;
        out!(
            "{:<8} {:>4} {q:>8.3} {kk:>8.3} {v:>8.3} {ff:>8.3} {o:>8.3} {wff:>8.3} {:>12.1}%",
            k.block,
            k.slot,
            100.0 * k.stored_share
        );
    }
    Ok(())
}

pub(crate) fn check_token(token: usize, t: usize) -> Result<()> {
    if token >= t {
        bail!(
            "--token {token} is past the {t} tokens of the sequence (the run's window T, or --text's tokens); \
             use 0 to {}",
            t - 1
        );
    }
    Ok(())
}

/// The config, what was run, the trainer whose model holds the forward, and sequence `--seq`.
pub(crate) type Looked<B> = (RunConfig, String, Trainer<B, Box<dyn LanguageModel<B>>>, Sequence);

/// The sequence the views read: its input tokens, how many of them are the user's (all T, or
/// the tokens of `--text`), and its document starts (what its attention was masked by).
pub struct Sequence {
    pub tokens: Vec<u32>,
    pub valid: usize,
    pub starts: Vec<u32>,
    /// The whole batch the forward ran, and the token that starts its documents.
    pub batch: data::Batch,
    pub separator: Option<u32>,
}

/// Token ids as text, for the views: each decoded on its own and quoted (so that spaces and
/// newlines show).
pub(crate) struct Words(pub(crate) data::Tokenizer);

impl Words {
    pub(crate) fn of(cfg: &RunConfig) -> Result<Self> {
        Ok(Self(source::tokenizer(&cfg.data)?))
    }
    pub(crate) fn word(&self, id: u32) -> String {
        format!("{:?}", self.0.decode(&[id]))
    }
    /// The `before` tokens up to `at` and the token at `at`, for a header line.
    pub(crate) fn context(&self, seq: &Sequence, at: usize, before: usize) -> String {
        let from = at.saturating_sub(before);
        format!(
            "{} (after {:?})",
            self.word(seq.tokens[at]),
            self.0.decode(&seq.tokens[from..at])
        )
    }
}

/// The trainer after the forward of a run's held-out batch (`--run`), or of training step
/// `--step` of a fresh preset on its task, as the playground trains it.
pub(crate) fn forward<B: Backend + 'static>(be: &B, args: &ForwardArgs) -> Result<Looked<B>> {
    let (cfg, what, batch, trainer, separator) = match &args.run {
        Some(run) => {
            let cfg = load::config(run)?;
            let data = source::open(&cfg.data)?;
            let (b, t) = (cfg.train.batch, cfg.data.seq_len());
            let host = crate::Host::batches(1, b, t, "the run's batch or seq_len");
            crate::check_memory(&cfg.model, b, t, Purpose::Train, args.backend, host)?;
            let mut batch = data.held_out(b, t, cfg.train.seed, 1)?.remove(0);
            if let Some(text) = &args.text {
                put_text(&mut batch, args.seq.min(b - 1), text, &source::tokenizer(&cfg.data)?)?;
            }
            let model = cfg.build(be, b, t, Purpose::Train)?;
            let (values, path) = load::params(run, args.checkpoint.as_deref(), &model.store().layout)?;
            be.write(&model.store().params, &values);
            let mut trainer = Trainer::new(be, model, cfg.train.clone())?;
            let separator = cfg.data.separator();
            trainer.mask_documents(separator);
            (cfg, path.display().to_string(), batch, trainer, separator)
        }
        None => {
            let name = args.preset.as_deref().unwrap_or("tiny-rmt");
            let mut cfg = RunConfig::preset(name)?;
            let models::DataConfig::Task { task, .. } = cfg.data else {
                bail!("the preset `{name}` trains on a text corpus; give its run with --run DIR");
            };
            let task = args.task.unwrap_or(task);
            cfg.train.batch = args.batch.unwrap_or(cfg.train.batch);
            cfg.train.seed = args.seed;
            let t = args.seq_len.unwrap_or(cfg.data.seq_len());
            cfg.data = models::DataConfig::Task { task, seq_len: t };
            cfg.validate()
                .with_context(|| format!("--preset {name} with --task, --batch and --seq-len"))?;
            anyhow::ensure!(
                args.step >= 1,
                "--step counts from 1: the forward of the first training step"
            );
            let b = cfg.train.batch;
            let host = crate::Host::batches(1, b, t, "--batch or --seq-len");
            crate::check_memory(&cfg.model, b, t, Purpose::Train, args.backend, host)?;
            let model = cfg.build(be, b, t, Purpose::Train)?;
            let mut trainer = Trainer::new(be, model, cfg.train.clone())?;
            // The batches `resmem train` and the playground draw: step k trains on batch k − 1.
            let batches = DataSource::Task(task).train(b, t, args.seed)?;
            for k in 1..args.step {
                crate::train::check_stop("the training before --step")?;
                trainer.step(be, &batches.batch(k as u64 - 1)?)?;
            }
            (
                cfg,
                format!("the forward of step {}", args.step),
                batches.batch(args.step as u64 - 1)?,
                trainer,
                None,
            )
        }
    };
    let b = cfg.train.batch;
    if args.seq >= b {
        bail!(
            "--seq {} is past the batch of {b} sequences; use 0 to {}",
            args.seq,
            b - 1
        );
    }
    let mut trainer = trainer;
    pollster::block_on(trainer.eval(be, &batch)).context("the forward failed")?;
    let t = batch.t;
    let tokens = batch.inputs[args.seq * t..(args.seq + 1) * t].to_vec();
    let starts = models::batch::document_starts(&tokens, t, separator);
    let valid = match &args.text {
        Some(_) => batch.targets[args.seq * t..(args.seq + 1) * t]
            .iter()
            .position(|&x| x == data::IGNORE)
            .map_or(t, |i| i + 1),
        None => t,
    };
    Ok((
        cfg,
        what,
        trainer,
        Sequence {
            tokens,
            valid,
            starts,
            batch,
            separator,
        },
    ))
}

/// Puts `text`'s tokens at the start of sequence `seq` of `batch` (at most T of them; the rest
/// of the row, after them, cannot reach them through causal attention), with targets only
/// within the text.
pub(crate) fn put_text(batch: &mut data::Batch, seq: usize, text: &str, tokenizer: &data::Tokenizer) -> Result<()> {
    let t = batch.t;
    let tokens = tokenizer.encode(text);
    if tokens.is_empty() {
        bail!("--text is empty; give some text to probe");
    }
    if tokens.len() > t {
        crate::console::warn(&format!(
            "note: --text is {} tokens and the run's window is T = {t}; the views read its first {t}",
            tokens.len()
        ));
    }
    batch.put(seq, &tokens);
    Ok(())
}

/// `resmem analyze depth`: every read over depth of an Attention Residuals model for one token,
/// its weights over its sources and their RMS. Routing mass is not a causal share (SPEC §7.9
/// pitfall 14): `analyze ablate --sites depth-blockN` says what a source does.
pub fn depth(args: MixingArgs) -> Result<()> {
    let (cfg, what, rows) = crate::with_backend!(args.at.backend, be => {
        let (cfg, what, trainer, seq) = forward(be, &args.at)?;
        let t = cfg.data.seq_len();
        check_token(args.token, seq.valid)?;
        let rows = pollster::block_on(observe::depth(be, &trainer.model, (args.at.seq, t, args.token)))?;
        anyhow::Ok((cfg, what, rows))
    })?;
    let Some(rows) = rows else {
        bail!(
            "analyze depth reads Attention Residuals' weights over depth; {} has none (use --arch attnres)",
            cfg.arch()
        );
    };
    if args.json {
        out!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(());
    }
    out!(
        "{} ({what}), sequence {}, token {}: each read's weights over its sources (their RMS in brackets)",
        cfg.arch(),
        args.at.seq,
        args.token
    );
    for r in &rows {
        let parts: Vec<String> = (r.sources.iter().zip(&r.weights).zip(&r.rms))
            .map(|((s, w), rms)| format!("{s} {w:.3} [{rms:.3}]"))
            .collect();
        out!("{:<12} {}", r.read, parts.join("  "));
    }
    Ok(())
}

/// `resmem analyze altup`: every AltUp layer's P and g, the sub-block it computes on, and how
/// alike its sub-blocks are after it for one token.
pub fn altup(args: MixingArgs) -> Result<()> {
    let (cfg, what, rows) = crate::with_backend!(args.at.backend, be => {
        let (cfg, what, trainer, seq) = forward(be, &args.at)?;
        let t = cfg.data.seq_len();
        check_token(args.token, seq.valid)?;
        let rows = pollster::block_on(observe::altup(be, &trainer.model, (args.at.seq, t, args.token)))?;
        anyhow::Ok((cfg, what, rows))
    })?;
    let Some(rows) = rows else {
        bail!(
            "analyze altup reads AltUp's coefficients; {} has none (use --arch altup)",
            cfg.arch()
        );
    };
    if args.json {
        out!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(());
    }
    out!(
        "{} ({what}), sequence {}, token {}: each layer's P (rows: the sub-block predicted), g, and the sub-blocks' \
         cosines after it",
        cfg.arch(),
        args.at.seq,
        args.token
    );
    let list = |v: &[f64]| v.iter().map(|x| format!("{x:6.3}")).collect::<Vec<_>>().join(" ");
    for r in &rows {
        let k = r.correct.len();
        out!(
            "{} (computes on sub-block {}): g = [{}]",
            r.layer,
            r.active,
            list(&r.correct)
        );
        for i in 0..k {
            out!(
                "  P[{i}] [{}]   cos[{i}] [{}]   |x_{i}| {:.3}",
                list(&r.predict[i * k..(i + 1) * k]),
                list(&r.cosine[i * k..(i + 1) * k]),
                r.norms[i]
            );
        }
    }
    Ok(())
}

/// `resmem analyze mixing`: every hyper-connection site's pre, post and P for one token, and the
/// composite gain of the mixing so far.
pub fn mixing(args: MixingArgs) -> Result<()> {
    let (cfg, what, rows) = crate::with_backend!(args.at.backend, be => {
        let (cfg, what, trainer, seq) = forward(be, &args.at)?;
        let t = cfg.data.seq_len();
        check_token(args.token, seq.valid)?;
        let rows = pollster::block_on(observe::mixing(be, &trainer.model, (args.at.seq, t, args.token)))?;
        anyhow::Ok((cfg, what, rows))
    })?;
    let Some(rows) = rows else {
        bail!(
            "analyze mixing reads hyper-connections' gates; {} has none (use --arch hc)",
            cfg.arch()
        );
    };
    if args.json {
        out!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(());
    }
    out!(
        "{} ({what}), sequence {}, token {}: each site's gates, P[j,k] from stream j to k, and the composite gain",
        cfg.arch(),
        args.at.seq,
        args.token
    );
    let list = |v: &[f64]| v.iter().map(|x| format!("{x:.3}")).collect::<Vec<_>>().join(" ");
    for r in &rows {
        let n = r.pre.len();
        out!(
            "{:<12} pre [{}]  post [{}]  composite gain {:.4} forward (columns) {:.4} backward (rows)  ‖x‖ [{}]",
            r.site,
            list(&r.pre),
            list(&r.post),
            r.composite_gain[0],
            r.composite_gain[1],
            list(&r.stream_norms)
        );
        for j in 0..n {
            out!("{:<12}   P[{j}] {}", "", list(&r.mix[j * n..(j + 1) * n]));
        }
    }
    Ok(())
}
