//! Where a tool may write: never inside a run's checkpoints. A checkpoint is sealed by its
//! `SHA256SUMS`; a file written over one of its own (`tp-export --out
//! RUN/checkpoints/step-000040` replaced its `model.safetensors`) makes every tool refuse
//! it afterwards. Every `--out` goes through [`check_out`] before anything is written.

use super::checkpoint::{CHECKPOINTS, SUMS_FILE};
use super::files::CONFIG_FILE;
use anyhow::Result;
use std::path::{Path, PathBuf};
use tp_harness::user_bail;

/// `path` made absolute with symbolic links followed as far as it exists (the rest, not
/// yet created, appended as written), so that `run/checkpoints/../checkpoints/x` and a
/// link into a run are seen for what they are.
fn resolved(path: &Path) -> PathBuf {
    let abs = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let mut existing = abs.as_path();
    let mut rest = Vec::new();
    loop {
        if let Ok(real) = existing.canonicalize() {
            return rest.iter().rev().fold(real, |p, c| p.join(c));
        }
        match (existing.parent(), existing.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_os_string());
                existing = parent;
            }
            _ => return abs,
        }
    }
}

/// The run whose checkpoints `path` lies in (or is), or the checkpoint it lies in (a
/// folder sealed by `SHA256SUMS`), if it does.
fn inside_checkpoints(path: &Path) -> Option<PathBuf> {
    let path = resolved(path);
    path.ancestors().find_map(|a| {
        let run = a.parent()?;
        let is_checkpoints = a.file_name()? == CHECKPOINTS && run.join(CONFIG_FILE).is_file();
        if is_checkpoints {
            Some(run.to_path_buf())
        } else if a.join(SUMS_FILE).is_file() {
            Some(a.to_path_buf())
        } else {
            None
        }
    })
}

/// Refuses an output folder inside a run's checkpoints (or inside any checkpoint) with one
/// line naming the run and a place that is safe; `flag` is how the user gave it.
pub fn check_out(out: &Path, flag: &str) -> Result<()> {
    if let Some(owner) = inside_checkpoints(out) {
        user_bail!(
            "{flag} {} lies inside the checkpoints of {}: a tool never writes there (a replaced file makes the checkpoint unusable); name a folder outside them, e.g. {}",
            out.display(),
            owner.display(),
            owner
                .ancestors()
                .find(|a| a.join(CONFIG_FILE).is_file())
                .unwrap_or(&owner)
                .join("export-hf")
                .display()
        );
    }
    let link = std::fs::symlink_metadata(out).is_ok_and(|m| m.file_type().is_symlink());
    if link && !out.exists() {
        user_bail!(
            "{flag} {} is a symbolic link to {}, which does not exist: name a real folder (nothing was written)",
            out.display(),
            std::fs::read_link(out).unwrap_or_default().display()
        );
    }
    if out.exists() && !out.is_dir() {
        user_bail!(
            "{flag} {} is a file, not a folder: name a new or existing folder",
            out.display()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checkpoints_and_anything_below_them_are_refused_and_a_run_root_is_not() {
        let d = std::env::temp_dir().join(format!("tp-out-guard-{}", std::process::id()));
        let ck = d.join("run/checkpoints/step-000040");
        std::fs::create_dir_all(&ck).unwrap();
        std::fs::write(d.join("run").join(CONFIG_FILE), "").unwrap();
        std::fs::write(ck.join(SUMS_FILE), "").unwrap();
        assert!(check_out(&ck, "--out").is_err());
        assert!(check_out(&ck.join("new/deeper"), "--out").is_err());
        assert!(check_out(&d.join("run/checkpoints"), "--out").is_err());
        assert!(check_out(&d.join("run/checkpoints/../checkpoints/x"), "--out").is_err());
        // A checkpoint copied out of its run is still sealed.
        std::fs::create_dir_all(d.join("copy")).unwrap();
        std::fs::write(d.join("copy").join(SUMS_FILE), "").unwrap();
        assert!(check_out(&d.join("copy"), "--out").is_err());
        assert!(check_out(&d.join("run/export-hf"), "--out").is_ok());
        assert!(check_out(&d.join("elsewhere"), "--out").is_ok());
        std::fs::write(d.join("a-file"), "x").unwrap();
        let e = check_out(&d.join("a-file"), "--out")
            .unwrap_err()
            .to_string();
        assert!(e.contains("is a file"), "{e}");
        let _ = std::fs::remove_dir_all(&d);
    }
}
