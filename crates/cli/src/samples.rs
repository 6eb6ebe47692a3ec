//! `resmem train --sample-every N`: what the model writes as it learns. At every Nth step (a
//! logged one) the trainer's current weights go into a second copy of the model built for one
//! sequence, which continues a prompt of held-out text; the text is printed and appended to the
//! run's samples.jsonl. The training model, its batches and its losses are not touched.

use crate::drive::Model;
use anyhow::{Context, Result};
use data::{Batch, Tokenizer};
use engine::Backend;
use models::generate::{self, Sampling};
use models::{Evaluator, Purpose, RunConfig, Trainer};
use std::path::PathBuf;

/// The file a run's samples go to, one JSON object a sample.
pub const SAMPLES_FILE: &str = "samples.jsonl";

/// Held-out tokens the prompt takes, and tokens drawn after it (each at most what fits N).
const PROMPT_TOKENS: usize = 16;
const DRAWN_TOKENS: usize = 64;

pub struct Sampler<B: Backend> {
    every: usize,
    model: Model<B>,
    evaluator: Evaluator<B>,
    tokenizer: Tokenizer,
    prompt: Vec<u32>,
    drawn: usize,
    seed: u64,
    file: PathBuf,
}

impl<B: Backend + 'static> Sampler<B> {
    /// None when the config asks for no samples. The prompt is the start of the first held-out
    /// window, so that it is text the model is not trained on.
    pub fn new(be: &B, cfg: &RunConfig, held_out: &Batch, file: PathBuf) -> Result<Option<Self>> {
        let every = cfg.cadence.sample_every;
        if every == 0 {
            return Ok(None);
        }
        let n = cfg.context();
        let model = cfg.build(be, 1, n, Purpose::Infer)?;
        let mut evaluator = Evaluator::new(be, &model)?;
        evaluator.mask_documents(cfg.data.separator());
        let prompt: Vec<u32> = held_out
            .inputs
            .iter()
            .take(PROMPT_TOKENS.min(held_out.t).min(n))
            .copied()
            .collect();
        Ok(Some(Self {
            every,
            model,
            evaluator,
            tokenizer: crate::source::tokenizer(&cfg.data)?,
            prompt,
            drawn: DRAWN_TOKENS.min(n),
            seed: cfg.train.seed,
            file,
        }))
    }

    /// Whether `step` takes a sample: every Nth, and the last.
    pub fn due(&self, step: u64, last: bool) -> bool {
        step.is_multiple_of(self.every as u64) || last
    }

    /// The prompt and what the trainer's current weights write after it, decoded; appended to
    /// samples.jsonl. The same seed at every step, so that samples differ by the weights alone.
    pub async fn sample(&mut self, be: &B, trainer: &Trainer<B, Model<B>>, step: u64) -> Result<(String, String)> {
        let weights = be.read(&trainer.model.store().params).await?;
        be.write(&self.model.store().params, &weights);
        let how = Sampling {
            temperature: 1.0,
            top_k: 0,
            seed: self.seed,
        };
        let drawn =
            generate::continue_prompt(be, &self.model, &mut self.evaluator, &self.prompt, self.drawn, how).await?;
        let tokens: Vec<u32> = drawn.iter().map(|d| d.token).collect();
        let (prompt, text) = (self.tokenizer.decode(&self.prompt), self.tokenizer.decode(&tokens));
        let row = serde_json::json!({ "step": step, "prompt": prompt, "text": text, "tokens": tokens });
        // One line in one write, so that the file stays whole lines.
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.file)
            .with_context(|| format!("cannot open {}", self.file.display()))?;
        std::io::Write::write_all(&mut file, format!("{row}\n").as_bytes())
            .with_context(|| format!("cannot append to {}", self.file.display()))?;
        Ok((prompt, text))
    }
}
