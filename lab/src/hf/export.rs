//! `tp-export --format hf`'s folder: a t-only LayerNorm model as GPT-2 itself
//! (`GPT2LMHeadModel`), any other layout under the same names with its modelling code
//! (`hf::remote`), and the dataset's tokenizer beside either, so that text decodes.

use super::format::{has_gpt2_shape, is_gpt2, to_hf};
use super::remote::{to_remote, MODELING_CODE, MODELING_FILE};
use crate::data::hf_tokenizer::tokenizer_files;
use crate::data::Tokenizer;
use anyhow::{Context, Result};
use candle_core::Tensor;
use std::collections::HashMap;
use std::path::Path;
use tp_harness::blocks::BlockLayout;
use tp_harness::model::ModelConfig;

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
        tp_harness::user_bail!(
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

/// Writes `export` as the folder `dir`, whole: into a fresh folder beside it, then
/// swapped in with one atomic exchange, so that a kill at any moment leaves `dir` the
/// previous export or the new one, never a mixture (a stale model's config beside new
/// weights loads and computes the wrong function). Refused, before anything is written,
/// when `dir` is a symbolic link, or holds anything tp-export did not write (a downloaded
/// model, a user's notes, a link planted among the export's files).
pub fn write_export(dir: &Path, export: &HfExport) -> Result<()> {
    check_destination(dir)?;
    let (parent, name) = parent_and_name(dir)?;
    clear_leftovers(&parent, &name);
    let tmp = parent.join(format!(".{name}.tp-export.{}", std::process::id()));
    if let Err(e) = fill(&tmp, export) {
        let _ = std::fs::remove_dir_all(&tmp);
        return Err(e);
    }
    if dir.exists() {
        swap_in(&tmp, dir)?;
        // `tmp` now holds the previous export.
        std::fs::remove_dir_all(&tmp)
            .with_context(|| format!("cannot remove the previous export {}", tmp.display()))?;
    } else {
        std::fs::rename(&tmp, dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    tp_harness::util::fs::fsync_dir(&parent)
}

/// `dir`, refused when writing the export there would follow a link or replace what
/// tp-export did not write.
fn check_destination(dir: &Path) -> Result<()> {
    let Ok(meta) = std::fs::symlink_metadata(dir) else {
        return Ok(());
    };
    if meta.file_type().is_symlink() {
        tp_harness::user_bail!(
            "{} is a symbolic link: tp-export writes only into a real folder; name one with --out (nothing was changed)",
            dir.display()
        );
    }
    if !meta.is_dir() {
        tp_harness::user_bail!(
            "{} is a file, not a folder: name a new or empty --out (nothing was changed)",
            dir.display()
        );
    }
    let mark = std::fs::symlink_metadata(dir.join(EXPORT_MARK));
    let marked = mark.is_ok_and(|m| m.is_file());
    let ours = |n: &str| n == EXPORT_MARK || n == "model.safetensors" || EXPORT_FILES.contains(&n);
    let entries =
        std::fs::read_dir(dir).with_context(|| format!("cannot read {}", dir.display()))?;
    for e in entries {
        let e = e?;
        let n = e.file_name().to_string_lossy().to_string();
        let link = e.file_type().is_ok_and(|t| t.is_symlink());
        let why = if link {
            format!("a symbolic link {n}")
        } else if !marked && ours(&n) {
            format!("a {n} that tp-export did not write")
        } else if !ours(&n) {
            format!("{n}, which tp-export did not write")
        } else {
            continue;
        };
        tp_harness::user_bail!(
            "{} already holds {why}: name a new or empty --out (nothing was changed)",
            dir.display()
        );
    }
    Ok(())
}

fn parent_and_name(dir: &Path) -> Result<(std::path::PathBuf, String)> {
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .ok_or_else(|| {
            tp_harness::error::user(format!("--out {}: name a folder", dir.display()))
        })?;
    let parent = match dir.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => std::path::PathBuf::from("."),
    };
    std::fs::create_dir_all(&parent)
        .with_context(|| format!("cannot create {}", parent.display()))?;
    Ok((parent, name))
}

/// Removes what a killed export of `name` left beside it: folders of ours (they hold the
/// export's mark, or nothing) named `.NAME.tp-export.PID`.
fn clear_leftovers(parent: &Path, name: &str) {
    let prefix = format!(".{name}.tp-export.");
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    for e in entries.flatten() {
        let n = e.file_name().to_string_lossy().to_string();
        let is_dir = e.file_type().is_ok_and(|t| t.is_dir());
        let ours = e.path().join(EXPORT_MARK).is_file()
            || std::fs::read_dir(e.path()).is_ok_and(|mut d| d.next().is_none());
        if n.starts_with(&prefix) && is_dir && ours {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

/// The export's files in the new folder `tmp`, each durable.
fn fill(tmp: &Path, export: &HfExport) -> Result<()> {
    std::fs::create_dir(tmp).with_context(|| format!("cannot create {}", tmp.display()))?;
    // The mark first and directly (the folder is new and ours): a folder a kill leaves
    // with anything in it holds the mark, so the next export knows it for its own.
    std::fs::write(
        tmp.join(EXPORT_MARK),
        "written by tp-export: a later export may replace the model's files here\n",
    )
    .with_context(|| format!("cannot write into {}", tmp.display()))?;
    let write = |name: &str, text: &[u8]| tp_harness::util::fs::write_atomic(&tmp.join(name), text);
    let weights = tmp.join("model.safetensors");
    candle_core::safetensors::save(&export.tensors, &weights)?;
    std::fs::File::open(&weights).and_then(|f| f.sync_all())?;
    for (name, text) in &export.files {
        write(name, text.as_bytes())?;
    }
    // The weights readable as the config is (the safetensors writer makes its file
    // private to its owner; an export is for others to load).
    let readable = std::fs::metadata(tmp.join("config.json"))?.permissions();
    std::fs::set_permissions(&weights, readable)?;
    tp_harness::util::fs::fsync_dir(tmp)
}

/// Exchanges the folders `tmp` and `dir` in one step (Linux's renameat2 RENAME_EXCHANGE);
/// where the file system cannot, `dir` is moved aside, `tmp` moved in, and the old one
/// left in `tmp`'s place for the caller to remove.
fn swap_in(tmp: &Path, dir: &Path) -> Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let c = |p: &Path| std::ffi::CString::new(p.as_os_str().as_bytes());
    let (from, to) = (c(tmp)?, c(dir)?);
    // SAFETY: two NUL-terminated paths, relative to the working directory.
    let rc = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            from.as_ptr(),
            libc::AT_FDCWD,
            to.as_ptr(),
            libc::RENAME_EXCHANGE,
        )
    };
    if rc == 0 {
        return Ok(());
    }
    let aside = tmp.with_extension("old");
    std::fs::rename(dir, &aside).with_context(|| format!("cannot replace {}", dir.display()))?;
    std::fs::rename(tmp, dir).with_context(|| format!("cannot replace {}", dir.display()))?;
    std::fs::rename(&aside, tmp).with_context(|| format!("cannot replace {}", dir.display()))?;
    Ok(())
}
