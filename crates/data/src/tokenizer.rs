//! Tokenizers. `ByteTokenizer` (one token per byte, vocabulary 256) serves the synthetic tasks,
//! which use printable bytes so that samples read as text. `Tokenizer` picks bytes or GPT-2's
//! BPE for text corpora.

use crate::DataError;
use serde::{Deserialize, Serialize};
use std::fmt;

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

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TokenizerKind {
    /// One token per UTF-8 byte, V = 256.
    #[default]
    Bytes,
    /// GPT-2's byte-level BPE (tiktoken's r50k_base), V = 50,257.
    Gpt2,
}

impl TokenizerKind {
    pub const ALL: [TokenizerKind; 2] = [TokenizerKind::Bytes, TokenizerKind::Gpt2];

    pub fn name(self) -> &'static str {
        match self {
            TokenizerKind::Bytes => "bytes",
            TokenizerKind::Gpt2 => "gpt2",
        }
    }

    /// The token that separates documents in a packed stream: `<|endoftext|>` for GPT-2,
    /// none for bytes.
    pub fn end_of_text(self) -> Option<u32> {
        match self {
            TokenizerKind::Bytes => None,
            TokenizerKind::Gpt2 => Some(GPT2_END_OF_TEXT),
        }
    }

    /// V, known without building the tokenizer.
    pub fn vocab(self) -> usize {
        match self {
            TokenizerKind::Bytes => ByteTokenizer::VOCAB,
            TokenizerKind::Gpt2 => GPT2_VOCAB,
        }
    }
}

impl fmt::Display for TokenizerKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for TokenizerKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        TokenizerKind::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| format!("unknown tokenizer `{s}`; the tokenizers are bytes and gpt2"))
    }
}

const GPT2_VOCAB: usize = 50_257;
const GPT2_END_OF_TEXT: u32 = 50_256;
/// U+FFFD, what lossy decoding shows for a token that is not in the vocabulary.
const REPLACEMENT: &[u8] = "\u{FFFD}".as_bytes();

/// A tokenizer for text corpora: bytes, or GPT-2 BPE.
#[derive(Clone)]
pub struct Tokenizer {
    kind: TokenizerKind,
    #[cfg(feature = "text")]
    bpe: Option<&'static tiktoken_rs::CoreBPE>,
}

impl fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tokenizer").field("kind", &self.kind).finish()
    }
}

impl Tokenizer {
    /// GPT-2's tables are embedded in tiktoken-rs and parsed once per process (about 0.1 s).
    pub fn new(kind: TokenizerKind) -> Result<Tokenizer, DataError> {
        match kind {
            TokenizerKind::Bytes => Ok(Tokenizer {
                kind,
                #[cfg(feature = "text")]
                bpe: None,
            }),
            #[cfg(feature = "text")]
            TokenizerKind::Gpt2 => Ok(Tokenizer {
                kind,
                bpe: Some(gpt2()?),
            }),
            #[cfg(not(feature = "text"))]
            TokenizerKind::Gpt2 => Err(DataError::Tokenizer {
                kind: "gpt2",
                reason: "resmem-data was built without its `text` feature; enable it".into(),
            }),
        }
    }

    pub fn kind(&self) -> TokenizerKind {
        self.kind
    }

    pub fn vocab(&self) -> usize {
        self.kind.vocab()
    }

    /// GPT-2 encodes `<|endoftext|>` in the text as ordinary characters, never as the special token.
    pub fn encode(&self, text: &str) -> Vec<u32> {
        #[cfg(feature = "text")]
        if let Some(bpe) = self.bpe {
            return bpe.encode_ordinary(text);
        }
        ByteTokenizer.encode(text)
    }

    /// Decodes lossily into UTF-8: a token outside the vocabulary, or bytes that are not UTF-8
    /// (a multi-byte character cut by a window), show as U+FFFD.
    pub fn decode(&self, tokens: &[u32]) -> String {
        String::from_utf8_lossy(&self.decode_bytes(tokens)).into_owned()
    }

    /// The raw bytes of the tokens; unknown ids become U+FFFD's bytes.
    pub fn decode_bytes(&self, tokens: &[u32]) -> Vec<u8> {
        let mut out = Vec::with_capacity(tokens.len().saturating_mul(2));
        #[cfg(feature = "text")]
        if let Some(bpe) = self.bpe {
            for &t in tokens {
                // One token at a time so that one unknown id does not spoil the rest.
                match bpe.decode_bytes(&[t]) {
                    Ok(bytes) if (t as usize) < GPT2_VOCAB => out.extend_from_slice(&bytes),
                    _ => out.extend_from_slice(REPLACEMENT),
                }
            }
            return out;
        }
        for &t in tokens {
            match u8::try_from(t) {
                Ok(b) => out.push(b),
                Err(_) => out.extend_from_slice(REPLACEMENT),
            }
        }
        out
    }

    /// One token as a view shows it: its text with spaces, newlines and tabs made visible
    /// (`␣`, `↵`, `⇥`), or `#id` where it has no printable text of its own (a control byte, a
    /// piece of a multi-byte character, an id past the vocabulary).
    pub fn shown(&self, token: u32) -> String {
        let text: String = (self.decode(&[token]).chars())
            .map(|c| match c {
                ' ' => '␣',
                '\n' => '↵',
                '\t' => '⇥',
                c => c,
            })
            .collect();
        match text.is_empty() || text.chars().any(|c| c.is_control() || c == '\u{FFFD}') {
            true => format!("#{token}"),
            false => text,
        }
    }

    /// The token that separates documents in a packed stream: `<|endoftext|>` for GPT-2.
    pub fn end_of_text(&self) -> Option<u32> {
        self.kind.end_of_text()
    }
}

#[cfg(feature = "text")]
fn gpt2() -> Result<&'static tiktoken_rs::CoreBPE, DataError> {
    use std::sync::OnceLock;
    static BPE: OnceLock<Result<tiktoken_rs::CoreBPE, String>> = OnceLock::new();
    BPE.get_or_init(|| tiktoken_rs::r50k_base().map_err(|e| e.to_string()))
        .as_ref()
        .map_err(|e| DataError::Tokenizer {
            kind: "gpt2",
            reason: format!("tiktoken-rs could not load r50k_base ({e}); reinstall the crate"),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLES: &[&str] = &[
        "",
        "To be, or not to be, that is the question:",
        "  leading spaces\n\n\nand blank lines\r\n\ttabs",
        "Grüße, naïve café — «ça va?» 日本語のテキスト 🎭🗡️",
        "<|endoftext|> is plain text here",
    ];

    #[test]
    fn bytes_round_trip() {
        let tok = Tokenizer::new(TokenizerKind::Bytes).unwrap();
        assert_eq!(tok.vocab(), 256);
        assert_eq!(tok.end_of_text(), None);
        for s in SAMPLES {
            let ids = tok.encode(s);
            assert_eq!(ids.len(), s.len());
            assert_eq!(tok.decode(&ids), *s);
        }
    }

    #[cfg(feature = "text")]
    #[test]
    fn a_token_shows_as_its_text_with_visible_whitespace() {
        let bytes = Tokenizer::new(TokenizerKind::Bytes).unwrap();
        assert_eq!(bytes.shown(u32::from(b'a')), "a");
        assert_eq!(bytes.shown(u32::from(b' ')), "␣");
        assert_eq!(bytes.shown(10), "↵");
        assert_eq!(bytes.shown(7), "#7");
        assert_eq!(bytes.shown(200), "#200");
        assert_eq!(bytes.shown(300), "#300");
        let gpt2 = Tokenizer::new(TokenizerKind::Gpt2).unwrap();
        // 464 is "The", 383 " The", 198 a newline; 0 is "!", not byte 0.
        assert_eq!(gpt2.shown(464), "The");
        assert_eq!(gpt2.shown(383), "␣The");
        assert_eq!(gpt2.shown(198), "↵");
        assert_eq!(gpt2.shown(0), "!");
        assert_eq!(gpt2.shown(60_000), "#60000");
    }

    #[test]
    fn gpt2_round_trip() {
        let tok = Tokenizer::new(TokenizerKind::Gpt2).unwrap();
        assert_eq!(tok.vocab(), 50_257);
        assert_eq!(tok.end_of_text(), Some(50_256));
        for s in SAMPLES {
            let ids = tok.encode(s);
            assert!(ids.iter().all(|&t| (t as usize) < tok.vocab()));
            assert_eq!(tok.decode(&ids), *s);
        }
        // Known GPT-2 ids, so that a wrong table (cl100k, say) fails.
        assert_eq!(tok.encode("Hello world"), vec![15496, 995]);
        assert!(!tok.encode("<|endoftext|>").contains(&50_256));
        // BPE merges: fewer tokens than bytes on English.
        assert!(tok.encode(SAMPLES[1]).len() < SAMPLES[1].len() / 2);
    }

    #[test]
    fn decode_never_panics_on_bad_ids() {
        for kind in TokenizerKind::ALL {
            let Ok(tok) = Tokenizer::new(kind) else { continue };
            let mut ids = tok.encode("Hi");
            ids.extend([u32::MAX, 50_257, 1 << 20]);
            ids.extend(tok.encode("!"));
            assert_eq!(tok.decode(&ids), "Hi\u{FFFD}\u{FFFD}\u{FFFD}!", "{kind}");
        }
        // Half of a two-byte character (a window can cut one) is replaced too.
        let bytes = Tokenizer::new(TokenizerKind::Bytes).unwrap();
        assert_eq!(bytes.decode(&[0xC3, b'a'.into()]), "\u{FFFD}a");
    }

    #[test]
    fn kinds_parse_and_print() {
        for k in TokenizerKind::ALL {
            assert_eq!(k.to_string().parse::<TokenizerKind>(), Ok(k));
        }
        let err = "bpe".parse::<TokenizerKind>().unwrap_err();
        assert!(err.contains("bytes") && err.contains("gpt2"), "{err}");
    }
}
