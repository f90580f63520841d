//! Where raw dataset files come from: already in `datasets/<name>/`, copied from a shared
//! folder (`TP_SHARED_DATASETS`, else `../shared/datasets`), or downloaded from the public
//! source. Offline with none of these is one clear error.

use anyhow::{Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;

pub struct RawSource {
    /// File name inside `datasets/<name>/` and inside the shared folder's `<subdir>/`.
    pub file: &'static str,
    pub shared_subdir: &'static str,
    pub url: &'static str,
}

fn shared_roots() -> Vec<PathBuf> {
    if let Ok(d) = std::env::var("TP_SHARED_DATASETS") {
        return vec![PathBuf::from(d)];
    }
    let mut roots = vec![PathBuf::from("../shared/datasets")];
    roots.push(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/datasets"));
    roots
}

/// Makes sure `dir/<file>` exists, copying or downloading it; returns its path.
pub fn fetch(src: &RawSource, dir: &Path) -> Result<PathBuf> {
    let dest = dir.join(src.file);
    if dest.is_file() {
        return Ok(dest);
    }
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let tmp = dir.join(format!(".{}.{}.part", src.file, std::process::id()));
    for root in shared_roots() {
        let candidate = root.join(src.shared_subdir).join(src.file);
        if candidate.is_file() {
            std::fs::copy(&candidate, &tmp)
                .with_context(|| format!("cannot copy {}", candidate.display()))?;
            std::fs::rename(&tmp, &dest)?;
            return Ok(dest);
        }
    }
    let url = match std::env::var("TP_DATA_URL_BASE") {
        Ok(base) => format!("{}/{}", base.trim_end_matches('/'), src.file),
        Err(_) => src.url.to_string(),
    };
    let ok = Command::new("curl")
        .args(["-fsL", "--retry", "2", "--connect-timeout", "10", "-o"])
        .arg(&tmp)
        .arg(&url)
        .stderr(std::process::Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if ok && tmp.is_file() {
        std::fs::rename(&tmp, &dest)?;
        return Ok(dest);
    }
    let _ = std::fs::remove_file(&tmp);
    Err(tp_harness::error::user(format!(
        "dataset file {} is missing: no copy in ../shared/datasets/{} (or TP_SHARED_DATASETS) and the download from {url} failed; put the file at {} or run where that URL is reachable",
        src.file,
        src.shared_subdir,
        dest.display()
    )))
}
