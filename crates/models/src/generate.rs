//! Sampling: a prompt continued one token at a time by a model built for one sequence of its
//! context N. Each new token is one forward; only the last position's logits are read back.
//! `resmem sample` and the playground both sample through here.

use crate::{Evaluator, LanguageModel, Result};
use data::Batch;
use engine::{Backend, MatmulDims};
use rand::{Rng, SeedableRng};
// Xoshiro256++ by name, not rand's SmallRng, which is another generator on 32-bit targets: the
// page (wasm32) would draw other tokens than the CLI from the same seed.
use rand_xoshiro::Xoshiro256PlusPlus;

/// How to draw each token.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sampling {
    /// 0 takes the likeliest token.
    pub temperature: f32,
    /// Draw among the k likeliest (0: all).
    pub top_k: usize,
    pub seed: u64,
}

/// A token drawn, and the probability the model gave it (softmax of the logits, before the
/// temperature).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Drawn {
    pub token: u32,
    pub probability: f32,
}

/// Draws `count` tokens after `prompt` (which must not be empty) with `model`, whose batch shape
/// must be (1, N): the model sees the last N tokens.
pub async fn continue_prompt<B: Backend, M: LanguageModel<B>>(
    be: &B,
    model: &M,
    evaluator: &mut Evaluator<B>,
    prompt: &[u32],
    count: usize,
    how: Sampling,
) -> Result<Vec<Drawn>> {
    let (b, n) = model.batch_shape();
    let vocab = model.vocab();
    if b != 1 || prompt.is_empty() {
        return Err(crate::ModelError::Config(format!(
            "sampling needs a model built for one sequence and a prompt of at least one token, not {b} sequences and {} tokens",
            prompt.len()
        )));
    }
    // logits[pos] = one-hot(pos) · logits: one row of V values is read back, not N (a view
    // could not start at any row: views are aligned).
    let one_hot = be.zeros("position selector", n)?;
    let row = be.zeros("last logits", vocab)?;
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(how.seed);
    let mut tokens = prompt.to_vec();
    let mut drawn = Vec::with_capacity(count);
    for _ in 0..count {
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
        evaluator.forward(be, model, &batch)?;
        let mut select = vec![0.0; n];
        select[window.len() - 1] = 1.0;
        be.write(&one_hot, &select);
        be.matmul(&row, &one_hot, &model.head().logits, MatmulDims::new(1, vocab, n));
        be.flush()?;
        let logits = be.read(&row).await?;
        let token = draw(&logits, how.temperature, how.top_k, &mut rng);
        drawn.push(Drawn {
            token,
            probability: probability(&logits, token as usize),
        });
        tokens.push(token);
    }
    Ok(drawn)
}

/// softmax(logits)[i].
pub fn probability(logits: &[f32], i: usize) -> f32 {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let z: f64 = logits.iter().map(|&l| f64::from(l - max).exp()).sum();
    (f64::from(logits[i] - max).exp() / z) as f32
}

/// A token drawn from softmax(logits / temperature) over the `top_k` likeliest (all when 0);
/// temperature 0 takes the likeliest.
pub fn draw(logits: &[f32], temperature: f32, top_k: usize, rng: &mut Xoshiro256PlusPlus) -> u32 {
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

    #[test]
    fn probabilities_are_the_softmax() {
        let logits = [0.0f32, 1.0, 2.0];
        let z: f32 = logits.iter().map(|l| l.exp()).sum();
        for (i, l) in logits.iter().enumerate() {
            assert!((probability(&logits, i) - l.exp() / z).abs() < 1e-6);
        }
        // Large logits do not overflow.
        assert!((probability(&[1000.0, 1000.0], 0) - 0.5).abs() < 1e-6);
    }
}
