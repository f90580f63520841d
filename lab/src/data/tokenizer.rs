//! Tokenizers of prepared datasets: a character vocabulary, or GPT-2's byte-level BPE
//! (tiktoken-rs's `r50k_base`, which ships GPT-2's ranks).

use super::vocab::CharVocab;
use anyhow::{anyhow, Result};
use serde::{Deserialize, Serialize};

/// GPT-2's vocabulary size and its document separator `<|endoftext|>`.
pub const GPT2_VOCAB: usize = 50257;
pub const GPT2_EOT: u32 = 50256;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Tokenizer {
    Char(CharVocab),
    Gpt2Bpe,
}

/// How a `text` corpus is tokenized (`text_tokenizer`): each character a token (the
/// corpus's own characters its vocabulary), or GPT-2's BPE (50257 entries).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TextTokenizer {
    Char,
    Gpt2,
}

/// The largest text corpus a new run tokenizes by character unless told otherwise
/// (10 MB: tiny Shakespeare is 1 MB): over it, GPT-2's BPE. A small corpus has few
/// distinct characters, and a 50257-entry head makes a small model far slower a step.
pub const CHAR_TEXT_MAX_BYTES: u64 = 10_000_000;

fn bpe() -> &'static tiktoken_rs::CoreBPE {
    tiktoken_rs::r50k_base_singleton()
}

impl Tokenizer {
    pub fn vocab_size(&self) -> usize {
        match self {
            Tokenizer::Char(v) => v.len(),
            Tokenizer::Gpt2Bpe => GPT2_VOCAB,
        }
    }

    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        match self {
            Tokenizer::Char(v) => Ok(v.encode(text)?.into_iter().map(u32::from).collect()),
            Tokenizer::Gpt2Bpe => Ok(bpe().encode_ordinary(text)),
        }
    }

    /// Text of `ids`; byte sequences that are not valid UTF-8 become U+FFFD.
    pub fn decode(&self, ids: &[u32]) -> String {
        match self {
            Tokenizer::Char(v) => v.decode(ids),
            Tokenizer::Gpt2Bpe => match bpe().decode_bytes(ids) {
                Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
                Err(e) => format!("<undecodable tokens: {e}>"),
            },
        }
    }

    /// Exact decoding, for round-trip checks.
    pub fn decode_exact(&self, ids: &[u32]) -> Result<String> {
        match self {
            Tokenizer::Char(v) => Ok(v.decode(ids)),
            Tokenizer::Gpt2Bpe => bpe().decode(ids).map_err(|e| anyhow!("{e}")),
        }
    }

    /// What generation starts from when no prompt is given: a line break, or GPT-2's
    /// document separator.
    pub fn start_tokens(&self) -> Vec<u32> {
        match self {
            Tokenizer::Char(v) => vec![v.chars.binary_search(&'\n').map(|i| i as u32).unwrap_or(0)],
            Tokenizer::Gpt2Bpe => vec![GPT2_EOT],
        }
    }
}

/// Decodes tokens as they come, one piece of text at a time: what GPT-2's byte-level
/// tokens spell is held back while it ends inside a multi-byte character.
pub struct TextStream<'t> {
    tok: &'t Tokenizer,
    pending: Vec<u32>,
}

impl<'t> TextStream<'t> {
    pub fn new(tok: &'t Tokenizer) -> Self {
        Self {
            tok,
            pending: Vec::new(),
        }
    }

    /// The text `id` completes, if any.
    pub fn push(&mut self, id: u32) -> Option<String> {
        self.pending.push(id);
        let text = match self.tok {
            Tokenizer::Char(v) => v.decode(&self.pending),
            Tokenizer::Gpt2Bpe => {
                let bytes = bpe().decode_bytes(&self.pending).ok()?;
                match std::str::from_utf8(&bytes) {
                    Ok(t) => t.to_string(),
                    // A character cut at the end: wait for its next bytes (at most 3).
                    Err(e) if e.error_len().is_none() && self.pending.len() < 4 => return None,
                    Err(_) => String::from_utf8_lossy(&bytes).into_owned(),
                }
            }
        };
        self.pending.clear();
        Some(text)
    }

    /// Whatever is still held back, decoded as it stands.
    pub fn finish(&mut self) -> String {
        let text = self.tok.decode(&self.pending);
        self.pending.clear();
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpt2_bpe_round_trips_text_and_knows_gpt2_ids() {
        let t = Tokenizer::Gpt2Bpe;
        let text = "Hello world! Ünïcödé, tabs\tand\nnewlines — ok.";
        let ids = t.encode(text).unwrap();
        assert_eq!(t.decode_exact(&ids).unwrap(), text);
        // GPT-2: "Hello" = 15496, " world" = 995.
        assert_eq!(&t.encode("Hello world").unwrap(), &[15496, 995]);
        assert!(ids.iter().all(|&i| (i as usize) < GPT2_VOCAB));
    }

    #[test]
    fn a_text_stream_spells_what_decoding_the_whole_spells() {
        let t = Tokenizer::Gpt2Bpe;
        // Emoji and CJK: characters GPT-2 splits over several byte-level tokens.
        let text = "tokens 🙂 one at a time: 東京 — ünïcödé 🎉!";
        let ids = t.encode(text).unwrap();
        let mut s = TextStream::new(&t);
        let mut out: String = ids.iter().filter_map(|&i| s.push(i)).collect();
        out += &s.finish();
        assert_eq!(out, text);
        assert!(!out.contains('\u{FFFD}'));
    }
}
