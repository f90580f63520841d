//! User-facing errors: bad input that the user can fix, made one way ([`user`], or
//! [`crate::user_bail!`] to return one). Binaries end through [`exit_on_error`]: one line
//! and exit code 2 for those (and for I/O failures the user resolves: a full disk, a
//! read-only place); anything else is an internal failure (exit code 1).

use std::fmt;

/// Made by [`user`] only.
#[derive(Debug, Clone)]
pub struct UserError(String);

impl fmt::Display for UserError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UserError {}

/// Returns a user error from the enclosing function, as `bail!` does (`user(format!(..))`).
#[macro_export]
macro_rules! user_bail {
    ($($arg:tt)*) => {
        return Err($crate::error::user(format!($($arg)*)))
    };
}

/// A user error with this message (the one way to make one).
pub fn user(e: impl fmt::Display) -> anyhow::Error {
    anyhow::Error::new(UserError(e.to_string()))
}

/// Whether an error chain carries a user error anywhere.
pub fn is_user_error(e: &anyhow::Error) -> bool {
    e.chain().any(|c| c.downcast_ref::<UserError>().is_some())
}

/// A stop that is not a failure of the program: a signal obeyed, or a sweep with failed
/// runs (each already reported). Printed as its message alone (nothing when it is empty),
/// with its own exit code.
#[derive(Debug, Clone)]
pub struct Stopped {
    pub code: i32,
    pub message: String,
}

impl fmt::Display for Stopped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Stopped {}

/// The end of every binary's `main`: on an error, one line on stderr (`TOOL: error: ...`;
/// a [`Stopped`]'s message as it is; nothing for what another rank already reported) and
/// the exit code the error calls for.
pub fn exit_on_error(tool: &str, result: anyhow::Result<()>) {
    let Err(e) = result else {
        return;
    };
    if let Some(s) = e.downcast_ref::<Stopped>() {
        if !s.message.is_empty() {
            eprintln!("{tool}: {}", s.message);
        }
        std::process::exit(s.code);
    }
    if e.downcast_ref::<AlreadyReported>().is_none() {
        eprintln!("{tool}: error: {}", one_line(&e));
    }
    std::process::exit(exit_code(&e));
}

/// An error another rank already reported: exit with `0` (the code) and print nothing,
/// so that a job of many ranks says one thing once.
#[derive(Debug, Clone, Copy)]
pub struct AlreadyReported(pub i32);

impl fmt::Display for AlreadyReported {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "reported by another rank (exit code {})", self.0)
    }
}

impl std::error::Error for AlreadyReported {}

/// An I/O failure the user resolves outside the program (a full disk, a read-only or
/// forbidden place): what it means, and the fix.
fn environment(e: &anyhow::Error) -> Option<(&'static str, &'static str)> {
    use std::io::ErrorKind::*;
    const FREE_SPACE: &str = "free space there (or write elsewhere with --out DIR) and run again; a run that had started continues from its last checkpoint with tp-train --resume RUN_DIR";
    let io = e.chain().find_map(|c| c.downcast_ref::<std::io::Error>())?;
    Some(match io.kind() {
        StorageFull => ("the disk is full", FREE_SPACE),
        QuotaExceeded => ("the disk quota is exceeded", FREE_SPACE),
        ReadOnlyFilesystem => (
            "the file system is read-only",
            "write elsewhere (--out DIR, or run from a writable folder)",
        ),
        PermissionDenied => (
            "permission denied",
            "write elsewhere (--out DIR) or fix the folder's permissions",
        ),
        NotADirectory => (
            "a part of the path is a file, not a folder",
            "choose another path (--out DIR)",
        ),
        _ => return None,
    })
}

/// The exit code for an error: 2 for user errors and for I/O failures the user resolves
/// (a full disk, a read-only or forbidden place), 1 otherwise, or what another rank chose.
pub fn exit_code(e: &anyhow::Error) -> i32 {
    if let Some(r) = e.chain().find_map(|c| c.downcast_ref::<AlreadyReported>()) {
        return r.0;
    }
    if is_user_error(e) || environment(e).is_some() {
        2
    } else {
        1
    }
}

/// The one line a binary prints for `e`. An I/O failure the user resolves is said as the
/// file it concerns (the context right around the OS error), what happened and the fix,
/// instead of the OS's words.
pub fn one_line(e: &anyhow::Error) -> String {
    if let Some((what, fix)) = environment(e) {
        let chain: Vec<&(dyn std::error::Error + 'static)> = e.chain().collect();
        let io_at = chain
            .iter()
            .position(|c| c.downcast_ref::<std::io::Error>().is_some())
            .unwrap_or(0);
        let doing = match io_at {
            0 => "an I/O operation failed".to_string(),
            i => chain[i - 1].to_string(),
        };
        return format!("{doing}: {what}: {fix}");
    }
    format!("{e:#}").replace('\n', " ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use anyhow::Context;

    fn io(kind: std::io::ErrorKind) -> anyhow::Error {
        Err::<(), _>(std::io::Error::from(kind))
            .context("cannot write runs/x/log.jsonl")
            .context("rank 0 failed")
            .unwrap_err()
    }

    #[test]
    fn a_full_disk_or_a_read_only_place_is_a_user_error_naming_the_file_and_the_fix() {
        let e = io(std::io::ErrorKind::StorageFull);
        assert_eq!(exit_code(&e), 2);
        let line = one_line(&e);
        assert!(
            line.starts_with("cannot write runs/x/log.jsonl: the disk is full: free space"),
            "{line}"
        );
        assert!(line.contains("--resume") && !line.contains('\n'), "{line}");
        let e = io(std::io::ErrorKind::ReadOnlyFilesystem);
        assert_eq!(exit_code(&e), 2);
        assert!(one_line(&e).contains("read-only: write elsewhere"));
        let e = io(std::io::ErrorKind::ConnectionReset);
        assert_eq!(exit_code(&e), 1);
        assert!(one_line(&e).starts_with("rank 0 failed: cannot write runs/x/log.jsonl"));
    }
}
