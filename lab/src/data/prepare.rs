//! Preparing char-level datasets into `datasets/<name>/`: `train.bin` and `val.bin`
//! (little-endian u16 token ids) and `meta.json` (the vocabulary).

use super::source::{fetch, RawSource};
use super::tokenizer::{TextTokenizer, Tokenizer};
use super::vocab::CharVocab;
use anyhow::{Context, Result};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use tp_harness::util::write_atomic;

pub const DATASETS: [&str; 2] = ["shakespeare_char", "names"];

/// The dataset name for any UTF-8 file or folder, tokenized with GPT-2's BPE.
pub const TEXT: &str = "text";

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Meta {
    pub dataset: String,
    pub tokenizer: Tokenizer,
    /// The source files with their SHA-256 (and for `text` their sizes), to notice when
    /// they change.
    #[serde(default)]
    pub source: Option<String>,
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
        other => Err(tp_harness::error::user(format!(
            "unknown dataset `{other}`: choose one of {}, or `text` with text_path",
            DATASETS.join(", ")
        ))),
    }
}

fn write_tokens(path: &Path, ids: &[u16]) -> Result<()> {
    let bytes: Vec<u8> = ids.iter().flat_map(|i| i.to_le_bytes()).collect();
    write_atomic(path, &bytes)
}

/// Complete and in the current format (an older `meta.json` is prepared again).
fn is_prepared(dir: &Path) -> bool {
    let meta_ok = std::fs::read_to_string(dir.join("meta.json"))
        .ok()
        .is_some_and(|t| serde_json::from_str::<Meta>(&t).is_ok());
    meta_ok && dir.join("train.bin").is_file() && dir.join("val.bin").is_file()
}

/// The signature of the source a prepared folder was made from (`Meta::source`).
fn prepared_from(dir: &Path) -> Option<String> {
    let text = std::fs::read_to_string(dir.join("meta.json")).ok()?;
    serde_json::from_str::<Meta>(&text).ok()?.source
}

/// Prepares `name` under `root` if needed and returns its folder.
pub fn prepare(name: &str, root: &Path) -> Result<PathBuf> {
    let src = raw_source(name)?;
    let dir = root.join(name);
    let raw = fetch(&src, &dir)?;
    // Keyed by the raw file's contents, as a text corpus is: an edited file is prepared
    // again, never trained on as its stale tokens.
    let sha = tp_harness::util::hash::file_sha256_hex(&raw)
        .with_context(|| format!("cannot read {}", raw.display()))?;
    let signature = format!("{}:{sha}", src.file);
    if is_prepared(&dir) && prepared_from(&dir).as_deref() == Some(signature.as_str()) {
        return Ok(dir);
    }
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
        tokenizer: Tokenizer::Char(vocab),
        source: Some(signature),
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

/// The UTF-8 files of `path` (itself, or every file below it, sorted) and a signature of
/// their names, sizes and contents.
fn text_files(path: &Path) -> Result<(Vec<PathBuf>, String)> {
    let mut files = Vec::new();
    let special = |p: &Path| {
        tp_harness::error::user(format!(
            "text_path {} is not a regular file or a folder (a device, pipe or socket cannot be read to its end): give a UTF-8 file or a folder of them",
            p.display()
        ))
    };
    if path.is_file() {
        files.push(path.to_path_buf());
    } else if path.exists() && !path.is_dir() {
        return Err(special(path));
    } else if path.is_dir() {
        let mut stack = vec![path.to_path_buf()];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d)? {
                let p = e?.path();
                let hidden = p
                    .file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with('.'));
                if hidden {
                    continue;
                }
                if p.is_dir() {
                    stack.push(p);
                } else if p.is_file() {
                    files.push(p);
                } else if p.exists() {
                    return Err(special(&p));
                }
            }
        }
        files.sort();
    } else {
        return Err(tp_harness::error::user(format!(
            "text_path {} does not exist: give a UTF-8 file or a folder of them",
            path.display()
        )));
    }
    if files.is_empty() {
        return Err(tp_harness::error::user(format!(
            "text_path {} holds no files",
            path.display()
        )));
    }
    let mut sig = String::new();
    let mut total = 0u64;
    for f in &files {
        let len = std::fs::metadata(f)
            .with_context(|| format!("cannot read {}", f.display()))?
            .len();
        total += len;
        check_text_shape(f)?;
        // By content: an edit that keeps a file's size must prepare it again.
        let sha = tp_harness::util::hash::file_sha256_hex(f)
            .with_context(|| format!("cannot read {}", f.display()))?;
        sig.push_str(&format!("{}:{len}:{sha};", f.display()));
    }
    // Tokenizing holds the text and its tokens in memory together: about 3 bytes per
    // byte of text at most.
    if let Some(mem) =
        tp_harness::util::host::physical_memory().filter(|m| total.saturating_mul(3) > *m)
    {
        return Err(tp_harness::error::user(format!(
            "text_path {} holds {:.1} GiB of text, more than this machine ({:.1} GiB) can tokenize at once: use a part of it",
            path.display(),
            total as f64 / (1u64 << 30) as f64,
            mem as f64 / (1u64 << 30) as f64
        )));
    }
    Ok((files, sig))
}

/// The longest stretch without whitespace GPT-2's BPE is given: its pre-tokenizer keeps
/// such a stretch in one piece and merges within it in time and memory that grow with
/// the square of its length (20 MB of one byte: still tokenizing after 100 s; 2 GB: 22 GB
/// of memory, then the OOM killer). No real text has a "word" of 64 KiB.
pub const MAX_UNBROKEN: usize = 64 * 1024;

/// Refuses, before anything is tokenized, a file whose shape would make the tokenizer
/// run away: one byte repeated (no text at all), or a stretch longer than
/// [`MAX_UNBROKEN`] bytes without whitespace. Read in blocks, never whole.
fn check_text_shape(f: &Path) -> Result<()> {
    use std::io::Read;
    let mut file =
        std::fs::File::open(f).with_context(|| format!("cannot read {}", f.display()))?;
    let mut buf = vec![0u8; 1 << 20];
    let (mut run, mut at, mut first): (usize, u64, Option<u8>) = (0, 0, None);
    let mut varied = false;
    loop {
        let n = file
            .read(&mut buf)
            .with_context(|| format!("cannot read {}", f.display()))?;
        if n == 0 {
            break;
        }
        for &b in &buf[..n] {
            let first = *first.get_or_insert(b);
            varied |= b != first;
            if b.is_ascii_whitespace() {
                run = 0;
            } else {
                run += 1;
                if run > MAX_UNBROKEN {
                    tp_harness::user_bail!(
                        "{} has {} bytes without whitespace before byte {at} (the tokenizer's time and memory grow with the square of such a stretch): not text to train on; remove or break it",
                        f.display(),
                        MAX_UNBROKEN,
                    );
                }
            }
            at += 1;
        }
    }
    if let (Some(b), false, true) = (first, varied, at > 1) {
        tp_harness::user_bail!(
            "{} is one byte (0x{b:02x}) repeated {at} times: not text to train on; give a text file",
            f.display()
        );
    }
    Ok(())
}

/// Prepares a `text` dataset: every file tokenized by character (the files' characters
/// the vocabulary, files joined by a line break) or with GPT-2's BPE (documents joined by
/// `<|endoftext|>`), the first 90% of tokens train and the rest val, in
/// `root/text-<hash of the path>/` (BPE) or `root/text-char-<hash>/`. Prepared again when
/// a file's contents change.
pub fn prepare_text(path: &Path, root: &Path, how: TextTokenizer) -> Result<PathBuf> {
    let canonical = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
    let (files, signature) = text_files(&canonical)?;
    let h = tp_harness::util::fnv1a(&canonical.to_string_lossy());
    let dir = match how {
        TextTokenizer::Gpt2 => root.join(format!("{TEXT}-{h:016x}")),
        TextTokenizer::Char => root.join(format!("{TEXT}-char-{h:016x}")),
    };
    if is_prepared(&dir) && prepared_from(&dir).as_deref() == Some(signature.as_str()) {
        return Ok(dir);
    }
    let mut texts = Vec::with_capacity(files.len());
    for f in &files {
        texts.push(std::fs::read_to_string(f).map_err(|e| {
            tp_harness::error::user(format!(
                "{} is not readable UTF-8 text ({e}); remove it from text_path",
                f.display()
            ))
        })?);
    }
    let (tok, ids) = tokenize_texts(&texts, how, path)?;
    if ids.len() < 20 {
        return Err(tp_harness::error::user(format!(
            "text_path {} holds only {} tokens: too little to train on",
            path.display(),
            ids.len()
        )));
    }
    let n = ids.len() * 9 / 10;
    // Only now, with the text read and found usable: a refused text_path leaves nothing.
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    write_tokens(&dir.join("train.bin"), &ids[..n])?;
    write_tokens(&dir.join("val.bin"), &ids[n..])?;
    let meta = Meta {
        dataset: TEXT.to_string(),
        tokenizer: tok,
        source: Some(signature),
        train_tokens: n,
        val_tokens: ids.len() - n,
    };
    write_atomic(
        &dir.join("meta.json"),
        serde_json::to_string_pretty(&meta)?.as_bytes(),
    )?;
    Ok(dir)
}

/// The ids of `texts` joined (see [`prepare_text`]) and the tokenizer that made them.
fn tokenize_texts(
    texts: &[String],
    how: TextTokenizer,
    path: &Path,
) -> Result<(Tokenizer, Vec<u16>)> {
    match how {
        TextTokenizer::Char => {
            let joined = texts.join("\n");
            let vocab = CharVocab::from_text(&joined);
            if vocab.len() > u16::MAX as usize {
                tp_harness::user_bail!(
                    "text_path {} holds {} distinct characters, more than a character vocabulary stores: --set text_tokenizer=gpt2",
                    path.display(),
                    vocab.len()
                );
            }
            let ids = vocab.encode(&joined)?;
            Ok((Tokenizer::Char(vocab), ids))
        }
        TextTokenizer::Gpt2 => {
            let tok = Tokenizer::Gpt2Bpe;
            let mut ids: Vec<u32> = Vec::new();
            for (i, text) in texts.iter().enumerate() {
                if i > 0 {
                    ids.push(super::tokenizer::GPT2_EOT);
                }
                ids.extend(tok.encode(text)?);
            }
            Ok((tok, ids.into_iter().map(|i| i as u16).collect()))
        }
    }
}
