//! The advisory lock that makes one process the owner of a run directory (or a sweep's
//! directory) while it writes: `DIR/.lock`, held with the OS's file lock (flock on Linux), so it is released
//! when the owner exits or dies, whatever way. The file names the owner's pid for the
//! error message; its presence alone means nothing.

use anyhow::{Context, Result};
use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, Write};
use std::path::Path;
use tp_harness::error::user;

pub const LOCK_FILE: &str = ".lock";

/// Held while alive; dropping it (or the process ending) releases the directory.
#[derive(Debug)]
pub struct DirLock {
    _file: File,
}

/// Opens the lock file, never through a symbolic link (O_NOFOLLOW): a `.lock` that
/// points elsewhere would have the owner's pid written into whatever it names.
fn open(dir: &Path) -> Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    let path = dir.join(LOCK_FILE);
    let opened = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&path);
    match opened {
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => Err(user(format!(
            "{} is a symbolic link, which the lock is never written through: remove it (rm {}) and run again (nothing was changed)",
            path.display(),
            path.display()
        ))),
        other => other.with_context(|| format!("cannot open {}", path.display())),
    }
}

fn owner(file: &mut File) -> String {
    let mut s = String::new();
    let _ = file.read_to_string(&mut s);
    match s.trim() {
        "" => String::new(),
        pid => format!(" (pid {pid})"),
    }
}

fn busy(dir: &Path, file: &mut File, tool: &str) -> anyhow::Error {
    user(format!(
        "{} is being written by another {tool}{}: wait for it to finish or stop it first (nothing was changed)",
        dir.display(),
        owner(file)
    ))
}

impl DirLock {
    /// Takes the lock of a run directory or fails at once with one line naming the owner.
    pub fn acquire(dir: &Path) -> Result<Self> {
        Self::acquire_for(dir, "tp-train")
    }

    /// Takes the lock of `dir` for `tool` (the kind of process that owns such a
    /// directory, named in the error a second one gets), or fails at once.
    pub fn acquire_for(dir: &Path, tool: &str) -> Result<Self> {
        let mut file = open(dir)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => return Err(busy(dir, &mut file, tool)),
            Err(TryLockError::Error(e)) => {
                return Err(e).with_context(|| format!("cannot lock {}", dir.display()))
            }
        }
        file.set_len(0)?;
        file.rewind()?;
        write!(file, "{}", std::process::id())?;
        file.flush()?;
        Ok(Self { _file: file })
    }

    /// Fails with the same line as [`DirLock::acquire`] if another process holds `dir`
    /// now (checked before anything else about a run that is to be resumed).
    pub fn check_free(dir: &Path) -> Result<()> {
        if !dir.join(LOCK_FILE).exists() {
            return Ok(());
        }
        // A reader of a run on a read-only medium (an archive) asks with a read-only
        // handle: the OS locks those too.
        let path = dir.join(LOCK_FILE);
        let mut file = match open(dir) {
            Ok(f) => f,
            Err(_) => {
                File::open(&path).with_context(|| format!("cannot open {}", path.display()))?
            }
        };
        match file.try_lock() {
            Err(TryLockError::WouldBlock) => Err(busy(dir, &mut file, "tp-train")),
            _ => Ok(()),
        }
    }

    /// Whether another process holds the lock of `dir` now (a directory without a lock
    /// file is free).
    pub fn held_elsewhere(dir: &Path) -> bool {
        if !dir.join(LOCK_FILE).exists() {
            return false;
        }
        let Ok(file) = open(dir) else {
            return false;
        };
        matches!(file.try_lock(), Err(TryLockError::WouldBlock))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_on_a_held_directory_fails_with_one_line_and_frees_on_drop() {
        let dir = std::env::temp_dir().join(format!("tp-lock-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let held = DirLock::acquire(&dir).unwrap();
        let e = DirLock::acquire(&dir).unwrap_err().to_string();
        assert!(e.contains("being written by another tp-train"), "{e}");
        assert!(e.contains(&format!("pid {}", std::process::id())), "{e}");
        assert!(!e.contains('\n'), "{e}");
        drop(held);
        let again = DirLock::acquire(&dir);
        assert!(again.is_ok(), "the lock was not released on drop");
        drop(again);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A `.lock` that is a symbolic link is refused in one line, and what it points to is
    /// left as it was (the hostile probe's resume truncated the outside file).
    #[test]
    fn a_lock_that_is_a_symbolic_link_is_refused_and_its_target_untouched() {
        let dir = std::env::temp_dir().join(format!("tp-lock-link-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let outside = dir.join("precious.txt");
        std::fs::write(&outside, "keep me").unwrap();
        std::os::unix::fs::symlink(&outside, dir.join(LOCK_FILE)).unwrap();
        let e = DirLock::acquire(&dir).unwrap_err().to_string();
        assert!(e.contains("is a symbolic link") && e.contains("rm "), "{e}");
        assert_eq!(std::fs::read_to_string(&outside).unwrap(), "keep me");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
