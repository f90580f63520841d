//! Crash-safe file writes: a reader sees the old contents or the new, never a mix.

use anyhow::{Context, Result};
use std::fs::File;
use std::io::Write;
use std::path::Path;

/// Writes `contents` to `path` atomically (temporary file, fsync, rename). The rename
/// replaces a symbolic link at `path` rather than writing through it, and the temporary
/// file is made new (never opened through a link someone left under its name).
pub fn write_atomic(path: &Path, contents: &[u8]) -> Result<()> {
    // Unique per process: concurrent writers never share a temporary file.
    let tmp = path.with_file_name(format!(
        ".{}.{}.tmp",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("file"),
        std::process::id()
    ));
    // A temporary of this process's number left by a killed earlier one (or a link put
    // there): removed, the link itself and not what it points to.
    let _ = std::fs::remove_file(&tmp);
    {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)
            .with_context(|| format!("cannot write {}", path.display()))?;
        f.write_all(contents)
            .and_then(|_| f.sync_all())
            .with_context(|| format!("cannot write {}", path.display()))
            .inspect_err(|_| {
                // A temporary a full disk left half-written is not left behind.
                let _ = std::fs::remove_file(&tmp);
            })?;
    }
    std::fs::rename(&tmp, path).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(())
}

/// Makes a directory's entries (a rename into it) durable.
pub fn fsync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .with_context(|| format!("cannot write {}", dir.display()))
}
