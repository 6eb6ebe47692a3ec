//! Document-aware attention (SPEC §2a): with documents masked apart, what a token's logits are
//! depends only on its own document, for every architecture and on both backends.

mod common;

use common::gpu;
use engine::cpu::CpuBackend;
use engine::Backend;
use resmem_models::{BatchTensors, LanguageModel, Observe, Purpose, RunConfig};

const SEPARATOR: u32 = 7;
const T: usize = 12;

/// Two sequences; the first holds a document break at position 5, the second none.
fn batch(first_document: &[u32; 5]) -> data::Batch {
    let mut inputs: Vec<u32> = first_document.to_vec();
    inputs.extend([SEPARATOR, 40, 41, 42, 43, 44, 45]);
    inputs.extend((0..T as u32).map(|i| 60 + i));
    let targets = inputs.iter().map(|t| (t + 1) % 256).collect();
    data::Batch {
        b: 2,
        t: T,
        inputs,
        targets,
    }
}

/// The logits of `batch` under the preset's model (seed 3), with or without the mask.
fn logits<B: Backend + 'static>(be: &B, preset: &str, batch: &data::Batch, masked: bool) -> Vec<f32> {
    let mut cfg = RunConfig::preset(preset).unwrap();
    cfg.set_vocab(256);
    cfg.train.seed = 3;
    let model = cfg.build(be, 2, T, Purpose::Train).unwrap();
    // A nonzero unembedding, so that the logits show what reaches them.
    let mut values = pollster::block_on(be.read(&model.store().params)).unwrap();
    values
        .iter_mut()
        .filter(|v| **v == 0.0)
        .enumerate()
        .for_each(|(i, v)| *v = ((i % 13) as f32 - 6.0) * 0.05);
    be.write(&model.store().params, &values);
    let mut tensors = BatchTensors::new(be, 2, T, 256).unwrap();
    tensors.mask_documents(masked.then_some(SEPARATOR));
    tensors.write(be, batch).unwrap();
    model.forward(be, &tensors, Observe::Loss);
    be.flush().unwrap();
    pollster::block_on(be.read(&model.head().logits)).unwrap()
}

/// Positions 5.. of the first sequence: the second document.
fn second_document(logits: &[f32]) -> &[f32] {
    &logits[5 * 256..T * 256]
}

fn check<B: Backend + 'static>(be: &B) {
    let (a, b) = (batch(&[1, 2, 3, 4, 5]), batch(&[9, 19, 29, 39, 49]));
    for preset in [
        "tiny-rmt",
        "tiny-transformer",
        "tiny-memoryformer",
        "tiny-hybrid",
        "official",
    ] {
        let (ma, mb) = (logits(be, preset, &a, true), logits(be, preset, &b, true));
        assert!(
            second_document(&ma) == second_document(&mb),
            "{preset}: with documents masked, the second document's logits depend on the first"
        );
        assert!(
            ma[..5 * 256] != mb[..5 * 256],
            "{preset}: the first document's logits ignore its tokens"
        );
        // The second sequence has no separator: the mask changes nothing there.
        let plain = logits(be, preset, &a, false);
        assert!(
            ma[T * 256..] == plain[T * 256..],
            "{preset}: a sequence without a separator changed"
        );
        let (pa, pb) = (plain, logits(be, preset, &b, false));
        assert!(
            second_document(&pa) != second_document(&pb),
            "{preset}: without the mask, attention should read across the break"
        );
    }
}

#[test]
fn documents_are_masked_apart_on_the_cpu() {
    check(&CpuBackend::<f32>::new());
}

#[test]
fn documents_are_masked_apart_on_the_gpu() {
    check(&gpu());
}
