//! `resmem sample`: continue a prompt with a trained run, decoding with the run's tokenizer.
//! The model is built for one sequence of its full context N; each new token is one forward,
//! and only the logits of the last position are read back.

use crate::args::SampleArgs;
use crate::console::say;
use crate::{load, source};
use anyhow::{bail, Result};
use data::Batch;
use engine::{Backend, MatmulDims};
use models::{Evaluator, Purpose};
use rand::{Rng, SeedableRng};
// Xoshiro256++ by name, not rand's SmallRng, which is another generator on 32-bit targets: the
// page (wasm32) would draw other weights and batches than the CLI from the same seed.
use rand_xoshiro::Xoshiro256PlusPlus;

pub fn run(args: SampleArgs) -> Result<()> {
    if !(args.temperature >= 0.0 && args.temperature.is_finite()) {
        bail!("--temperature must be a finite number of at least 0 (0 picks the likeliest token)");
    }
    crate::with_backend!(args.backend, be => sample(be, &args))
}

fn sample<B: Backend + 'static>(be: &B, args: &SampleArgs) -> Result<()> {
    let cfg = load::config(&args.run)?;
    let tokenizer = source::tokenizer(&cfg.data)?;
    let (n, vocab) = (cfg.context(), cfg.vocab());
    crate::check_memory(&cfg, 1, n, Purpose::Infer, args.backend)?;
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
    // logits[pos] = one-hot(pos) · logits, so that one row of V values is read back, not N.
    let one_hot = be.zeros("position selector", n)?;
    let row = be.zeros("last logits", vocab)?;
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(args.seed);
    for _ in 0..args.tokens {
        let window = &tokens[tokens.len().saturating_sub(n)..];
        let mut inputs = window.to_vec();
        inputs.resize(n, 0);
        // Causal attention: the padding after the window cannot change its logits.
        let batch = Batch {
            b: 1,
            t: n,
            targets: inputs.clone(),
            inputs,
        };
        evaluator.forward(be, &model, &batch)?;
        let mut select = vec![0.0; n];
        select[window.len() - 1] = 1.0;
        be.write(&one_hot, &select);
        be.matmul(&row, &one_hot, &model.head().logits, MatmulDims::new(1, vocab, n));
        be.flush()?;
        let logits = pollster::block_on(be.read(&row))?;
        tokens.push(draw(&logits, args.temperature, args.top_k, &mut rng));
    }
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

/// A token drawn from softmax(logits / temperature) over the `top_k` likeliest (all when 0);
/// temperature 0 takes the likeliest.
fn draw(logits: &[f32], temperature: f32, top_k: usize, rng: &mut Xoshiro256PlusPlus) -> u32 {
    let mut order: Vec<usize> = (0..logits.len()).collect();
    order.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]));
    if temperature == 0.0 {
        return order[0] as u32;
    }
    let k = if top_k == 0 {
        order.len()
    } else {
        top_k.min(order.len())
    };
    let top = &order[..k];
    let max = logits[top[0]];
    let weights: Vec<f64> = top
        .iter()
        .map(|&i| (f64::from(logits[i] - max) / f64::from(temperature)).exp())
        .collect();
    let mut u = rng.random::<f64>() * weights.iter().sum::<f64>();
    for (&i, w) in top.iter().zip(&weights) {
        if u < *w {
            return i as u32;
        }
        u -= w;
    }
    top[k - 1] as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greedy_top_k_and_temperature() {
        let logits = [0.0, 3.0, 1.0, 2.9];
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(0);
        assert_eq!(draw(&logits, 0.0, 0, &mut rng), 1);
        // With k = 2 only tokens 1 and 3 can come out, and both do.
        let drawn: Vec<u32> = (0..200).map(|_| draw(&logits, 1.0, 2, &mut rng)).collect();
        assert!(drawn.iter().all(|&t| t == 1 || t == 3));
        assert!(drawn.contains(&1) && drawn.contains(&3));
        // A very low temperature is nearly greedy.
        assert!((0..50).all(|_| draw(&logits, 0.01, 0, &mut rng) == 1));
    }
}
