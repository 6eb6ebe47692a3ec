//! The byte tokenizer: one token per byte, vocabulary 256. Synthetic tasks use printable bytes so
//! that samples read as text.

#[derive(Clone, Copy, Debug, Default)]
pub struct ByteTokenizer;

impl ByteTokenizer {
    pub const VOCAB: usize = 256;

    pub fn encode(&self, text: &str) -> Vec<u32> {
        text.bytes().map(u32::from).collect()
    }

    /// Decodes lossily: ignored targets and any token ≥ 256 show as '·'.
    pub fn decode(&self, tokens: &[u32]) -> String {
        tokens
            .iter()
            .map(|&t| if t < 256 { char::from(t as u8) } else { '·' })
            .collect()
    }
}
