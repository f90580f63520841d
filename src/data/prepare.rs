//! Preparing char-level datasets into `datasets/<name>/`: `train.bin` and `val.bin`
//! (little-endian u16 token ids) and `meta.json` (the vocabulary).

use super::source::{fetch, RawSource};
use super::vocab::CharVocab;
use crate::error::UserError;
use crate::train::run_dir::write_atomic;
use anyhow::{Context, Result};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

pub const DATASETS: [&str; 2] = ["shakespeare_char", "names"];

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Meta {
    pub dataset: String,
    pub vocab: CharVocab,
    pub train_tokens: usize,
    pub val_tokens: usize,
}

/// The root folder of prepared data: `TP_DATA_DIR`, else `./datasets`.
pub fn data_root() -> PathBuf {
    std::env::var("TP_DATA_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| PathBuf::from("datasets"))
}

fn raw_source(name: &str) -> Result<RawSource> {
    match name {
        "shakespeare_char" => Ok(RawSource {
            file: "input.txt",
            shared_subdir: "tinyshakespeare",
            url: "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt",
        }),
        "names" => Ok(RawSource {
            file: "names.txt",
            shared_subdir: "names",
            url: "https://raw.githubusercontent.com/karpathy/makemore/master/names.txt",
        }),
        other => Err(anyhow::Error::new(UserError(format!(
            "unknown dataset `{other}`: choose one of {}",
            DATASETS.join(", ")
        )))),
    }
}

fn write_tokens(path: &Path, ids: &[u16]) -> Result<()> {
    let bytes: Vec<u8> = ids.iter().flat_map(|i| i.to_le_bytes()).collect();
    write_atomic(path, &bytes)
}

/// Prepares `name` under `root` if needed and returns its folder.
pub fn prepare(name: &str, root: &Path) -> Result<PathBuf> {
    let src = raw_source(name)?;
    let dir = root.join(name);
    if dir.join("meta.json").is_file()
        && dir.join("train.bin").is_file()
        && dir.join("val.bin").is_file()
    {
        return Ok(dir);
    }
    let raw = fetch(&src, &dir)?;
    let text = std::fs::read_to_string(&raw)
        .with_context(|| format!("{} is not UTF-8 text", raw.display()))?;
    let (vocab, train, val) = match name {
        // nanoGPT's shakespeare_char: first 90% of the characters train, the rest val.
        "shakespeare_char" => {
            let vocab = CharVocab::from_text(&text);
            let ids = vocab.encode(&text)?;
            let n = ids.len() * 9 / 10;
            (vocab, ids[..n].to_vec(), ids[n..].to_vec())
        }
        // microgpt's names: one name per document, shuffled once (fixed seed), each name
        // followed by the separator '\n'; 90% of names train, 10% val.
        _ => {
            let mut names: Vec<&str> = text
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .collect();
            names.shuffle(&mut rand_chacha::ChaCha8Rng::seed_from_u64(42));
            let n = names.len() * 9 / 10;
            let join = |ns: &[&str]| -> String {
                ns.iter().map(|s| format!("\n{s}")).collect::<String>() + "\n"
            };
            let (tr, va) = (join(&names[..n]), join(&names[n..]));
            let vocab = CharVocab::from_text(&(tr.clone() + &va));
            let (t, v) = (vocab.encode(&tr)?, vocab.encode(&va)?);
            (vocab, t, v)
        }
    };
    write_tokens(&dir.join("train.bin"), &train)?;
    write_tokens(&dir.join("val.bin"), &val)?;
    let meta = Meta {
        dataset: name.to_string(),
        vocab,
        train_tokens: train.len(),
        val_tokens: val.len(),
    };
    // Written last: its presence marks the folder as prepared.
    write_atomic(
        &dir.join("meta.json"),
        serde_json::to_string_pretty(&meta)?.as_bytes(),
    )?;
    Ok(dir)
}
