//! A training session: one run on one device (the backend, the model, its trainer and its
//! batches), which lives outside the reactive graph (wgpu objects are not Send on wasm), so the
//! page sees plain numbers; and the limit check every config passes before it is built.

use crate::dataset::Dataset;
use crate::interventions::{Ablated, Interventions, PatchAsk, Patching};
use crate::residual::{Look, Residuals};
use data::{Batch, BatchSource, DataError, DataSource};
use engine::Backend;
use models::checkpoint::{self, TrainState};
use models::generate::{self, Drawn, Sampling};
use models::memory::{self, Purpose};
use models::probes::Measured;
use models::{Evaluator, LanguageModel, RunConfig, Trainer};

/// Tokens a depth of the page's logit lens lists.
const LENS_TOP: usize = 5;

/// Refuses a config whose largest buffer is over what one GPU binding may hold, before anything
/// is built, naming what to shrink.
pub fn check_limits(cfg: &RunConfig, max_binding_bytes: u64) -> Result<(), String> {
    let est =
        memory::estimate(&cfg.model, cfg.train.batch, cfg.data.seq_len(), Purpose::Train).map_err(|e| e.to_string())?;
    memory::check_binding_limit(&est, max_binding_bytes).map_err(|e| e.to_string())
}

pub type Model<B> = Box<dyn LanguageModel<B>>;

/// What a session holds besides its device and config.
type Parts<B> = (Trainer<B, Model<B>>, BatchSource, usize);

/// A model built for one sequence of its context, to sample from, with its forward's buffers.
struct Sampler<B: Backend + 'static> {
    model: Model<B>,
    evaluator: Evaluator<B>,
}

/// One run on one device: the model, its trainer and its batches. Generic over the backend:
/// the page trains on the GPU, or on the CPU where the browser has no WebGPU.
pub struct Session<B: Backend + 'static> {
    pub be: B,
    pub trainer: Trainer<B, Model<B>>,
    batches: BatchSource,
    source: DataSource,
    pub cfg: RunConfig,
    pub params: usize,
    last_batch: Option<Batch>,
    sampler: Option<Sampler<B>>,
    /// The last patching table (it holds what was asked and at which step); a refusal is cheap
    /// to give again.
    patched: Option<Box<Patching>>,
}

impl<B: Backend + 'static> Session<B> {
    /// The model of `cfg`, built by the one constructor every command uses, once its largest
    /// buffer is known to fit `max_binding_bytes`. On failure the device comes back with the
    /// message, so that the page can start again.
    pub fn new(be: B, cfg: RunConfig, source: DataSource, max_binding_bytes: u64) -> Result<Self, (B, String)> {
        match Self::parts(&be, &cfg, &source, max_binding_bytes) {
            Ok((trainer, batches, params)) => Ok(Self {
                be,
                trainer,
                batches,
                source,
                cfg,
                params,
                last_batch: None,
                sampler: None,
                patched: None,
            }),
            Err(e) => Err((be, e)),
        }
    }

    /// A session for `setup`'s config, its data fetched if need be, continuing from
    /// `checkpoint` (a file `resmem train` writes) when one is given.
    pub async fn open(
        be: B,
        cfg: RunConfig,
        data: Dataset,
        max_binding_bytes: u64,
        checkpoint: Option<&[u8]>,
    ) -> Result<Self, (B, String)> {
        let source = match crate::corpus::source(data).await {
            Ok(source) => source,
            Err(e) => return Err((be, e)),
        };
        let mut session = Self::new(be, cfg, source, max_binding_bytes)?;
        if let Some(bytes) = checkpoint {
            let state = checkpoint::state_from_bytes(&session.trainer.model.store().layout, bytes);
            if let Err(e) = state.map_err(|e| e.to_string()).and_then(|s| session.restore(&s)) {
                return Err((session.be, e));
            }
        }
        Ok(session)
    }

    fn parts(be: &B, cfg: &RunConfig, source: &DataSource, max_binding_bytes: u64) -> Result<Parts<B>, String> {
        check_limits(cfg, max_binding_bytes)?;
        let err = |e: models::ModelError| e.to_string();
        let (b, t, seed) = (cfg.train.batch, cfg.data.seq_len(), cfg.train.seed);
        let model = cfg.build(be, b, t, Purpose::Train).map_err(err)?;
        let params = model.store().layout.count();
        let mut trainer = Trainer::new(be, model, cfg.train.clone()).map_err(err)?;
        trainer.mask_documents(cfg.data.separator());
        // The batches `resmem train` draws for the same config and seed.
        let batches = source.train(b, t, seed).map_err(|e| e.to_string())?;
        Ok((trainer, batches, params))
    }

    /// Tokens a step.
    pub fn tokens_per_step(&self) -> usize {
        self.cfg.train.batch * self.cfg.data.seq_len()
    }

    /// The batch of the step after `done` steps: the one `resmem train` draws, so that a run
    /// continued from a checkpoint sees the same batches.
    pub fn batch(&self, done: u64) -> Result<Batch, DataError> {
        self.batches.batch(done)
    }

    /// The batch of the step just trained, which the views read the step's forward with.
    pub fn stepped(&mut self, batch: Batch) {
        self.last_batch = Some(batch);
    }

    /// Continues from a checkpoint's state: its weights, moments and step.
    pub fn restore(&mut self, state: &TrainState) -> Result<(), String> {
        self.trainer.restore(&self.be, state).map_err(|e| e.to_string())
    }

    /// The full training state, in the checkpoint format `resmem train` writes.
    pub async fn checkpoint(&self) -> Result<Vec<u8>, String> {
        let state = self.trainer.state(&self.be).await.map_err(|e| e.to_string())?;
        let config = self.cfg.to_toml().map_err(|e| e.to_string())?;
        checkpoint::state_to_bytes(&self.trainer.model.store().layout, &state, &config).map_err(|e| e.to_string())
    }

    /// A forward of the first held-out batch (the one `resmem analyze residual --run` reads),
    /// so that the views show the current weights without training.
    pub async fn inspect(&mut self) -> Result<f32, String> {
        let (b, t, seed) = (self.cfg.train.batch, self.cfg.data.seq_len(), self.cfg.train.seed);
        let batch = self
            .source
            .held_out(b, t, seed, 1)
            .map_err(|e| e.to_string())?
            .remove(0);
        let loss = self.trainer.eval(&self.be, &batch).await.map_err(|e| e.to_string())?;
        self.last_batch = Some(batch);
        Ok(loss)
    }

    /// `count` tokens after `prompt` under the current weights, each with its probability,
    /// drawn as `resmem sample` draws them.
    pub async fn sample(&mut self, prompt: &[u32], count: usize, how: Sampling) -> Result<Vec<Drawn>, String> {
        let err = |e: models::ModelError| e.to_string();
        if self.sampler.is_none() {
            let model = self
                .cfg
                .build(&self.be, 1, self.cfg.context(), Purpose::Infer)
                .map_err(err)?;
            let mut evaluator = Evaluator::new(&self.be, &model).map_err(err)?;
            evaluator.mask_documents(self.cfg.data.separator());
            self.sampler = Some(Sampler { model, evaluator });
        }
        let values = self
            .be
            .read(&self.trainer.model.store().params)
            .await
            .map_err(|e| e.to_string())?;
        let Sampler { model, evaluator } = self.sampler.as_mut().expect("built above");
        self.be.write(&model.store().params, &values);
        generate::continue_prompt(&self.be, model, evaluator, prompt, count, how)
            .await
            .map_err(err)
    }
    /// The residual stream of sequence `seq` at every depth in the last step's forward, with
    /// that sequence's input tokens and every head's attention weights over it (at the
    /// trainer's step). Read it before anything else runs a forward.
    pub async fn residuals(&self, seq: usize, token: usize) -> Result<Residuals, String> {
        let Some(batch) = &self.last_batch else {
            return Ok(Residuals::default());
        };
        let (b, t) = (batch.b, batch.t);
        let seq = seq.min(b.saturating_sub(1));
        let err = |e: models::ModelError| e.to_string();
        let inside = self.trainer.model.inside();
        let depths = models::observe::read(&self.be, &inside.residuals, seq, t)
            .await
            .map_err(err)?;
        let inputs = batch.inputs[seq * t..(seq + 1) * t].to_vec();
        // Masked as the model's attention was: within documents where the data has them.
        let starts = models::batch::document_starts(&inputs, t, self.cfg.data.separator());
        let attention = models::observe::attention_patterns(&self.be, &*self.trainer.model, (seq, t), &starts)
            .await
            .map_err(err)?;
        let keys = models::observe::key_slots(&self.be, &*self.trainer.model, (seq, t))
            .await
            .map_err(err)?;
        // Last: the lens overwrites the head's buffers, which nothing reads before the next step.
        let lens_token = token.min(t.saturating_sub(1));
        let lens = models::observe::lens(&self.be, &*self.trainer.model, (seq, t, lens_token), LENS_TOP)
            .await
            .map_err(err)?;
        Ok(Residuals {
            step: self.trainer.step,
            seq,
            depths,
            inputs,
            attention,
            keys,
            lens,
            lens_token,
            interventions: Default::default(),
            tokenizer: self.cfg.data.tokenizer(),
        })
    }

    /// What `look` asks of the model as it is now, on the last step's batch: direct logit
    /// attribution of its token's top prediction and, where sites are named, their ablation, as
    /// `resmem analyze attribute` and `ablate` compute them. Forwards of their own: run it after
    /// every other read of the step's forward.
    pub async fn intervene(&mut self, look: &Look) -> Result<Interventions, String> {
        use models::interventions::{self, drive, Points};
        let Some(batch) = self.last_batch.clone() else {
            return Ok(Interventions::default());
        };
        let (b, t) = (batch.b, batch.t);
        let (seq, token) = (look.seq.min(b.saturating_sub(1)), look.token.min(t.saturating_sub(1)));
        let err = |e: models::ModelError| e.to_string();
        let on = (&batch, self.cfg.data.separator());
        let (be, model) = (&self.be, &mut self.trainer.model);
        let row = [seq * t + token];
        let none = std::collections::BTreeMap::new();
        let clean = drive::forward(be, model, on, &none, &row).await.map_err(err)?;
        let target = top(&clean.logits[0]);
        let attribution = interventions::attribute(be, model, on, (seq, t, token), target, None)
            .await
            .map_err(err)?;
        let ablation = match look.ablate.is_empty() {
            true => None,
            false => Some(
                async {
                    let points = Points::of(&model.edit_points(), model.residual_groups());
                    let sites = drive::resolve(&points, &look.ablate).map_err(err)?;
                    let values = drive::read_points(be, model, on).await.map_err(err)?;
                    let targets: Vec<_> = sites.into_iter().flat_map(|(_, t)| t).collect();
                    let rows: Vec<usize> = (0..b * t).collect();
                    let edits = drive::ablation(&values, &targets, look.how, &rows, (b, t)).map_err(err)?;
                    let ablated = drive::forward(be, model, on, &edits, &row).await.map_err(err)?;
                    let logit = ablated.difference(0, target, None);
                    Ok(Ablated {
                        sites: look.ablate.clone(),
                        how: look.how,
                        loss: ablated.loss,
                        loss_change: ablated.loss - clean.loss,
                        logit,
                        logit_change: logit - clean.difference(0, target, None),
                        top: top(&ablated.logits[0]),
                    })
                }
                .await,
            ),
        };
        let patching = match look.patch.is_set() {
            false => None,
            true => Some(self.patching(&look.patch, seq).await),
        };
        Ok(Interventions {
            token,
            target,
            loss: clean.loss,
            attribution,
            ablation,
            patching,
        })
    }

    /// `ask`'s patching table, as `resmem analyze patch` computes it: the clean prompt in
    /// sequence `seq` of the last batch, the corrupted one in the next, their last token's
    /// logit of the clean prompt's top prediction against the corrupted one's. It takes sites ×
    /// (positions + 1) forwards, so it is computed again only when the ask changes or every
    /// `PATCH_EVERY` steps of training.
    async fn patching(&mut self, ask: &PatchAsk, seq: usize) -> Result<Box<Patching>, String> {
        let step = self.trainer.step;
        if let Some(kept) = self
            .patched
            .as_ref()
            .filter(|p| p.ask == *ask && step < p.step + PATCH_EVERY)
        {
            return Ok(kept.clone());
        }
        let patching = self.patch(ask, seq, step).await?;
        self.patched = Some(patching.clone());
        Ok(patching)
    }

    /// A patching table computed earlier for these weights, kept rather than computed again.
    pub fn reuse_patching(&mut self, patching: Box<Patching>) {
        self.patched = Some(patching);
    }

    async fn patch(&mut self, ask: &PatchAsk, seq: usize, step: usize) -> Result<Box<Patching>, String> {
        use models::interventions::{drive, Agreement, Pair, Patcher, Points, Site};
        let err = |e: models::ModelError| e.to_string();
        let Some(mut batch) = self.last_batch.clone() else {
            return Err("no batch has been read yet".into());
        };
        let (b, t) = (batch.b, batch.t);
        if b < 2 {
            return Err(
                "patching puts the two prompts in two sequences of the batch, and this run's batch is 1".into(),
            );
        }
        let tokenizer = data::Tokenizer::new(self.cfg.data.tokenizer()).map_err(|e| e.to_string())?;
        let (clean, corrupt) = (tokenizer.encode(&ask.clean), tokenizer.encode(&ask.corrupt));
        if clean.is_empty() {
            return Err("type a clean prompt and a corrupted one".into());
        }
        if clean.len() != corrupt.len() {
            return Err(format!(
                "the corrupted prompt is {} tokens and the clean one {}: patching needs prompts of the same length",
                corrupt.len(),
                clean.len()
            ));
        }
        let (from, to) = (seq.min(b - 1), (seq.min(b - 1) + 1) % b);
        let valid = batch.put(from, &clean);
        batch.put(to, &corrupt);
        let on = (&batch, self.cfg.data.separator());
        let (be, model) = (&self.be, &mut self.trainer.model);
        let token = valid - 1;
        let none = std::collections::BTreeMap::new();
        let base = drive::forward(be, model, on, &none, &[from * t + token, to * t + token])
            .await
            .map_err(err)?;
        let (target, corrupted) = (top(&base.logits[0]), top(&base.logits[1]));
        let versus = (corrupted != target).then_some(corrupted);
        let pair = Pair {
            from,
            to,
            valid,
            token,
            target,
            versus,
        };
        let patcher = Patcher::new(be, model, on, pair, &base).await.map_err(err)?;
        let points = Points::of(&model.edit_points(), model.residual_groups());
        let sites: Vec<Site> = match ask.sites.is_empty() {
            true => (points.sites().into_iter())
                .filter(|s| matches!(s, Site::Embedding | Site::Write(..) | Site::Residual(_)))
                .collect(),
            false => drive::resolve(&points, &ask.sites)
                .map_err(err)?
                .into_iter()
                .map(|(s, _)| s)
                .collect(),
        };
        let mut rows = Vec::new();
        for site in sites {
            let targets = points.targets(site).map_err(err)?;
            rows.push(patcher.site(be, model, on, site, &targets).await.map_err(err)?);
        }
        Ok(Box::new(Patching {
            ask: ask.clone(),
            step,
            words: clean[..valid].iter().map(|&t| tokenizer.decode(&[t])).collect(),
            token,
            target: tokenizer.decode(&[target]),
            versus: versus.map(|v| tokenizer.decode(&[v])),
            clean: patcher.clean,
            corrupt: patcher.corrupt,
            agreement: Agreement::of(&rows),
            rows,
        }))
    }

    /// The last forward's batch and window (B, T); None before the first step.
    pub fn last_shape(&self) -> Option<(usize, usize)> {
        self.last_batch.as_ref().map(|b| (b.b.max(1), b.t.max(1)))
    }

    /// Variance ratios of every storage and retrieval on the last step's batch; None for models
    /// without the variance view (`Arch::has_variance`) or before the first step.
    pub async fn measure(&mut self) -> Result<Option<Vec<Measured>>, String> {
        // Hyper-connections have probes but no closed form to draw them against: the page does
        // not spend a forward and a backward on a view it does not show.
        if !self.cfg.model.arch().has_variance() {
            return Ok(None);
        }
        let Some(batch) = self.last_batch.take() else {
            return Ok(None);
        };
        let measured = self.trainer.measure(&self.be, &batch).await.map_err(|e| e.to_string());
        self.last_batch = Some(batch);
        measured
    }
}

/// The largest logit's token.
/// How many steps of training a patching table stands for before it is computed again.
const PATCH_EVERY: usize = 50;

fn top(logits: &[f32]) -> u32 {
    (0..logits.len())
        .max_by(|&a, &b| logits[a].total_cmp(&logits[b]).then(b.cmp(&a)))
        .unwrap_or(0) as u32
}
