//! `tp-export --format hf`'s folder: a t-only LayerNorm model as GPT-2 itself
//! (`GPT2LMHeadModel`), any other layout under the same names with its modelling code
//! (`hf_remote`), and the dataset's tokenizer beside either, so that text decodes.

use super::config::ModelConfig;
use super::hf::{has_gpt2_shape, is_gpt2, to_hf};
use super::hf_remote::{to_remote, MODELING_CODE, MODELING_FILE};
use crate::blocks::BlockLayout;
use crate::data::hf_tokenizer::tokenizer_files;
use crate::data::Tokenizer;
use anyhow::{Context, Result};
use candle_core::Tensor;
use std::collections::HashMap;
use std::path::Path;

/// Marks a folder as an export's, so that exporting into it again may replace its files.
pub const EXPORT_MARK: &str = ".tp-export";

/// Every file an export may write besides the weights: a later export into the same
/// folder removes those it does not write, so that no stale tokenizer or modelling file
/// describes another model.
const EXPORT_FILES: [&str; 6] = [
    "config.json",
    MODELING_FILE,
    "tokenizer.json",
    "tokenizer_config.json",
    "vocab.json",
    "merges.txt",
];

/// What an export writes.
pub struct HfExport {
    pub tensors: HashMap<String, Tensor>,
    /// `(file name, contents)`: `config.json`, the modelling file, the tokenizer's files.
    pub files: Vec<(String, String)>,
    /// Whether the model is GPT-2 itself (loads without remote code).
    pub gpt2: bool,
}

/// The export of a model trained at `tp`, with `tok`'s files when it is known. `as_gpt2`
/// writes a bias-free t-only LayerNorm model as GPT-2 itself, its biases zeros.
pub fn hf_export(
    weights: &HashMap<String, Tensor>,
    cfg: &ModelConfig,
    layout: &BlockLayout,
    tp: usize,
    tok: Option<&Tokenizer>,
    as_gpt2: bool,
) -> Result<HfExport> {
    if as_gpt2 && !has_gpt2_shape(cfg, layout) {
        crate::user_bail!(
            "--as-gpt2: pattern {} with {:?} is not GPT-2 (that needs t blocks only and LayerNorm): drop --as-gpt2 to export it with its modelling code",
            layout.pattern,
            cfg.norm
        );
    }
    let gpt2 = is_gpt2(cfg, layout) || as_gpt2;
    let (tensors, config) = if gpt2 {
        to_hf(weights, cfg, layout)?
    } else {
        to_remote(weights, cfg, layout, tp)?
    };
    let mut files = vec![(
        "config.json".to_string(),
        serde_json::to_string_pretty(&config)?,
    )];
    if !gpt2 {
        files.push((MODELING_FILE.to_string(), MODELING_CODE.to_string()));
    }
    if let Some(tok) = tok {
        files.extend(tokenizer_files(tok, cfg.block_size)?);
    }
    Ok(HfExport {
        tensors,
        files,
        gpt2,
    })
}

/// Writes `export` into `dir`: refused whole, before anything is written, when `dir`
/// holds a model file that tp-export did not write.
pub fn write_export(dir: &Path, export: &HfExport) -> Result<()> {
    let marked = dir.join(EXPORT_MARK).is_file();
    let theirs = std::iter::once("model.safetensors")
        .chain(EXPORT_FILES)
        .find(|f| dir.join(f).exists() && !marked);
    if let Some(f) = theirs {
        crate::user_bail!(
            "{} already holds a {f} that tp-export did not write: name a new or empty --out (nothing was changed)",
            dir.display()
        );
    }
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    std::fs::write(
        dir.join(EXPORT_MARK),
        "written by tp-export: a later export may replace the model's files here\n",
    )
    .with_context(|| format!("cannot write into {}", dir.display()))?;
    let tmp = dir.join(".model.safetensors.tmp");
    candle_core::safetensors::save(&export.tensors, &tmp)?;
    std::fs::rename(&tmp, dir.join("model.safetensors"))?;
    for stale in EXPORT_FILES {
        if !export.files.iter().any(|(n, _)| n == stale) && dir.join(stale).exists() {
            std::fs::remove_file(dir.join(stale))?;
        }
    }
    for (name, text) in &export.files {
        std::fs::write(dir.join(name), text)
            .with_context(|| format!("cannot write {}", dir.join(name).display()))?;
    }
    // The weights readable as the config is (the safetensors writer makes its file
    // private to its owner; an export is for others to load).
    let readable = std::fs::metadata(dir.join("config.json"))?.permissions();
    std::fs::set_permissions(dir.join("model.safetensors"), readable)?;
    Ok(())
}
