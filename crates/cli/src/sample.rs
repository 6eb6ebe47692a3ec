//! `resmem sample`: continue a prompt with a trained run, decoding with the run's tokenizer,
//! through `models::generate`.

use crate::args::SampleArgs;
use crate::console::say;
use crate::{load, source};
use anyhow::{bail, Result};
use engine::Backend;
use models::generate::{self, Sampling};
use models::{Evaluator, Purpose};

pub fn run(args: SampleArgs) -> Result<()> {
    if !(args.temperature >= 0.0 && args.temperature.is_finite()) {
        bail!("--temperature must be a finite number of at least 0 (0 picks the likeliest token)");
    }
    crate::with_backend!(args.backend, be => sample(be, &args))
}

fn sample<B: Backend + 'static>(be: &B, args: &SampleArgs) -> Result<()> {
    let cfg = load::config(&args.run)?;
    let tokenizer = source::tokenizer(&cfg.data)?;
    let n = cfg.context();
    // Each drawn token: its draw (8 bytes), two copies of the token list, its decoded text and
    // JSON: 64 bytes is ample.
    let host = crate::Host {
        bytes: (args.tokens as u64).checked_mul(64),
        what: format!("{} tokens to generate", args.tokens),
        lower: "--tokens",
    };
    crate::check_memory(&cfg.model, 1, n, Purpose::Infer, args.backend, host)?;
    let model = cfg.build(be, 1, n, Purpose::Infer)?;
    let (values, _) = load::params(&args.run, args.checkpoint.as_deref(), &model.store().layout)?;
    be.write(&model.store().params, &values);
    let mut tokens = tokenizer.encode(&args.prompt);
    if tokens.is_empty() {
        bail!("the prompt is empty; give some text with --prompt");
    }
    let prompt_len = tokens.len();
    if prompt_len > n {
        crate::console::warn(&format!(
            "note: the prompt is {prompt_len} tokens and the model's context is {n}; it sees only the last {n}"
        ));
    }
    let mut evaluator = Evaluator::new(be, &model)?;
    evaluator.mask_documents(cfg.data.separator());
    let how = Sampling {
        temperature: args.temperature,
        top_k: args.top_k,
        seed: args.seed,
    };
    let drawn = pollster::block_on(generate::continue_prompt(
        be,
        &model,
        &mut evaluator,
        &tokens,
        args.tokens,
        how,
    ))?;
    tokens.extend(drawn.iter().map(|d| d.token));
    let text = tokenizer.decode(&tokens);
    if args.json {
        say(&serde_json::json!({
            "prompt": args.prompt,
            "text": text,
            "tokens": tokens[prompt_len..],
        })
        .to_string());
    } else {
        say(&text);
    }
    Ok(())
}
