//! A dataset's tokenizer in the files transformers' `AutoTokenizer.from_pretrained` reads,
//! so that an exported model's output decodes where the harness is not installed.
//!
//! - A character vocabulary: a `tokenizer.json` (the `tokenizers` library's format) with a
//!   BPE model whose vocabulary is the characters and which has no merges — so every
//!   character is one token, the harness's ids — and a `Fuse` decoder (no spaces added).
//! - GPT-2's BPE: GPT-2's own `vocab.json` and `merges.txt`, rebuilt from the ranks that
//!   tiktoken-rs ships (its `r50k_base`): a token of rank r is the merge of the two parts
//!   that byte-pair encoding with the ranks below r leaves of it, as transformers' own
//!   tiktoken converter recovers them.

use super::tokenizer::{Tokenizer, GPT2_EOT};
use super::vocab::CharVocab;
use anyhow::{bail, Result};
use std::collections::HashMap;

/// `(file name, contents)` of the tokenizer files for `tok`.
pub fn tokenizer_files(tok: &Tokenizer, max_length: usize) -> Result<Vec<(String, String)>> {
    Ok(match tok {
        Tokenizer::Char(v) => vec![
            ("tokenizer.json".into(), char_tokenizer_json(v)?),
            (
                "tokenizer_config.json".into(),
                config("PreTrainedTokenizerFast", max_length, None)?,
            ),
        ],
        Tokenizer::Gpt2Bpe => {
            let (vocab, merges) = gpt2_vocab_and_merges()?;
            vec![
                ("vocab.json".into(), vocab),
                ("merges.txt".into(), merges),
                (
                    "tokenizer_config.json".into(),
                    config("GPT2Tokenizer", max_length, Some("<|endoftext|>"))?,
                ),
            ]
        }
    })
}

fn config(class: &str, max_length: usize, special: Option<&str>) -> Result<String> {
    Ok(serde_json::to_string_pretty(&serde_json::json!({
        "tokenizer_class": class,
        "model_max_length": max_length,
        "bos_token": special,
        "eos_token": special,
        "unk_token": special,
        "add_prefix_space": false,
        "clean_up_tokenization_spaces": false,
    }))?)
}

fn char_tokenizer_json(v: &CharVocab) -> Result<String> {
    let vocab: serde_json::Map<String, serde_json::Value> = v
        .chars
        .iter()
        .enumerate()
        .map(|(i, c)| (c.to_string(), i.into()))
        .collect();
    Ok(serde_json::to_string_pretty(&serde_json::json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": [],
        "normalizer": null,
        "pre_tokenizer": null,
        "post_processor": null,
        "decoder": {"type": "Fuse"},
        "model": {
            "type": "BPE",
            "dropout": null,
            "unk_token": null,
            "continuing_subword_prefix": null,
            "end_of_word_suffix": null,
            "fuse_unk": false,
            "byte_fallback": false,
            "ignore_merges": false,
            "vocab": vocab,
            "merges": []
        }
    }))?)
}

/// GPT-2's printable stand-in for each byte (its `bytes_to_unicode`): printable Latin-1
/// bytes stand for themselves, the others for code points from 256 on, in byte order.
pub fn byte_to_unicode() -> [char; 256] {
    let printable = |b: u32| (33..=126).contains(&b) || (161..=172).contains(&b) || b >= 174;
    let mut map = ['\0'; 256];
    let mut next = 256;
    for b in 0..256u32 {
        map[b as usize] = if printable(b) {
            char::from_u32(b).unwrap_or('\0')
        } else {
            next += 1;
            char::from_u32(next - 1).unwrap_or('\0')
        };
    }
    map
}

/// GPT-2's tokens as bytes, by id (the document separator apart).
fn gpt2_token_bytes() -> Result<Vec<Vec<u8>>> {
    let bpe = tiktoken_rs::r50k_base_singleton();
    (0..GPT2_EOT)
        .map(|id| {
            bpe.decode_bytes(&[id])
                .map_err(|e| anyhow::anyhow!("GPT-2 token {id}: {e}"))
        })
        .collect()
}

/// The two parts byte-pair encoding with the ranks below `rank` leaves of `token`.
fn split_by_lower_ranks(token: &[u8], rank: u32, ranks: &HashMap<&[u8], u32>) -> Vec<Vec<u8>> {
    let mut parts: Vec<Vec<u8>> = token.iter().map(|&b| vec![b]).collect();
    loop {
        let best = (0..parts.len().saturating_sub(1))
            .filter_map(|i| {
                let joined = [parts[i].as_slice(), parts[i + 1].as_slice()].concat();
                ranks
                    .get(joined.as_slice())
                    .filter(|&&r| r < rank)
                    .map(|&r| (r, i))
            })
            .min();
        let Some((_, i)) = best else { return parts };
        let right = parts.remove(i + 1);
        parts[i].extend(right);
    }
}

/// `vocab.json` and `merges.txt` of GPT-2's BPE.
pub fn gpt2_vocab_and_merges() -> Result<(String, String)> {
    let tokens = gpt2_token_bytes()?;
    let ranks: HashMap<&[u8], u32> = tokens
        .iter()
        .enumerate()
        .map(|(i, t)| (t.as_slice(), i as u32))
        .collect();
    let map = byte_to_unicode();
    let spell = |b: &[u8]| b.iter().map(|&x| map[x as usize]).collect::<String>();
    let mut vocab = serde_json::Map::new();
    let mut merges = String::from("#version: 0.2\n");
    for (rank, t) in tokens.iter().enumerate() {
        vocab.insert(spell(t), rank.into());
        if t.len() > 1 {
            let parts = split_by_lower_ranks(t, rank as u32, &ranks);
            if parts.len() != 2 {
                bail!(
                    "GPT-2 token {rank} ({:?}) does not split into two lower-ranked parts",
                    String::from_utf8_lossy(t)
                );
            }
            merges.push_str(&format!("{} {}\n", spell(&parts[0]), spell(&parts[1])));
        }
    }
    vocab.insert("<|endoftext|>".into(), GPT2_EOT.into());
    Ok((serde_json::to_string(&vocab)?, merges))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Byte-pair encoding of one pre-token with the merges as GPT-2's `bpe()` applies
    /// them (the lowest-ranked adjacent pair first): it must give tiktoken's ids.
    fn encode_with_merges(
        word: &str,
        merges: &HashMap<(String, String), usize>,
        vocab: &serde_json::Map<String, serde_json::Value>,
    ) -> Vec<u32> {
        let map = byte_to_unicode();
        let mut parts: Vec<String> = word.bytes().map(|b| map[b as usize].to_string()).collect();
        while let Some((_, i)) = (0..parts.len().saturating_sub(1))
            .filter_map(|i| {
                merges
                    .get(&(parts[i].clone(), parts[i + 1].clone()))
                    .map(|&r| (r, i))
            })
            .min()
        {
            let right = parts.remove(i + 1);
            parts[i].push_str(&right);
        }
        parts
            .iter()
            .map(|p| vocab[p].as_u64().unwrap() as u32)
            .collect()
    }

    #[test]
    fn gpt2_merges_rebuilt_from_ranks_encode_as_tiktoken_does() {
        let (vocab, merges) = gpt2_vocab_and_merges().unwrap();
        let vocab: serde_json::Map<String, serde_json::Value> =
            serde_json::from_str(&vocab).unwrap();
        assert_eq!(vocab.len(), 50257);
        let lines: Vec<&str> = merges.lines().skip(1).collect();
        // GPT-2's merges.txt has 50000 merges; its first is "Ġ t".
        assert_eq!(lines.len(), 50000);
        assert_eq!(lines[0], "\u{120} t");
        let merges: HashMap<(String, String), usize> = lines
            .iter()
            .enumerate()
            .map(|(i, l)| {
                let (a, b) = l.split_once(' ').unwrap();
                ((a.to_string(), b.to_string()), i)
            })
            .collect();
        let bpe = tiktoken_rs::r50k_base_singleton();
        for word in [
            "Hello",
            " world",
            " tokenization",
            " ROMEO",
            " thee",
            "\n\n",
            " Ångström",
            " 1234567",
            " supercalifragilistic",
        ] {
            assert_eq!(
                encode_with_merges(word, &merges, &vocab),
                bpe.encode_ordinary(word),
                "{word:?}"
            );
        }
    }

    #[test]
    fn a_char_tokenizer_maps_each_character_to_its_harness_id() {
        let v = CharVocab::from_text("ab\n c");
        let json: serde_json::Value =
            serde_json::from_str(&char_tokenizer_json(&v).unwrap()).unwrap();
        assert_eq!(json["model"]["vocab"]["\n"], 0);
        assert_eq!(json["model"]["vocab"]["c"], 4);
        assert_eq!(json["decoder"]["type"], "Fuse");
    }
}
