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
/// `tool` may carry the mode that changes the advice (`tp-train --resume`: a resume
/// writes into its run directory and takes no `--out`); its first word names the binary.
pub fn exit_on_error(tool: &str, result: anyhow::Result<()>) {
    let Err(e) = result else {
        return;
    };
    let (binary, tool) = (tool.split(' ').next().unwrap_or(tool), tool);
    if let Some(s) = e.downcast_ref::<Stopped>() {
        if !s.message.is_empty() {
            crate::util::say::error_line(&format!("{binary}: {}", s.message));
        }
        std::process::exit(s.code);
    }
    if e.downcast_ref::<AlreadyReported>().is_none() {
        crate::util::say::error_line(&format!("{binary}: error: {}", one_line_for(tool, &e)));
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

/// How each tool is told to write elsewhere, where it can.
fn out_flag(tool: &str) -> Option<&'static str> {
    Some(match tool {
        "tp-train" | "tp-sweep" | "tp-export" | "tp-plot" => "--out DIR",
        "tp-import" => "--out RUN_DIR",
        "tp-eval" => "--out FILE",
        _ => return None,
    })
}

/// What to do after a full disk, for `tool`: each tool's own way to go on.
fn after_full_disk(tool: &str) -> String {
    let elsewhere = out_flag(tool)
        .map(|f| format!(" (or write elsewhere with {f})"))
        .unwrap_or_default();
    let then = match tool {
        "tp-train" => "; a run that had started continues from its last checkpoint with tp-train --resume RUN_DIR",
        "tp-sweep" => ": finished runs are kept and a half-done one continues from its last checkpoint",
        "tp-eval" | "tp-scan" | "tp-export" | "tp-sample" => ": the run itself was not changed",
        _ => "",
    };
    let again = match tool {
        "" => "run again".to_string(),
        t => format!("run {t} again"),
    };
    format!("free space there{elsewhere} and {again}{then}")
}

/// An I/O failure the user resolves outside the program (a full disk, a read-only or
/// forbidden place): what it means, and the fix for `tool` (the binary that failed; ""
/// for advice that names no tool).
fn environment(e: &anyhow::Error, tool: &str) -> Option<(&'static str, String)> {
    use std::io::ErrorKind::*;
    let io = e.chain().find_map(|c| c.downcast_ref::<std::io::Error>())?;
    let elsewhere = match out_flag(tool) {
        Some(f) => format!("write elsewhere ({f})"),
        None if tool == "tp-train --resume" => "copy the run directory to a writable folder and resume the copy (tp-train --resume COPY)".to_string(),
        None => "copy the run to a writable folder and run there".to_string(),
    };
    Some(match io.kind() {
        StorageFull => ("the disk is full", after_full_disk(tool)),
        QuotaExceeded => ("the disk quota is exceeded", after_full_disk(tool)),
        ReadOnlyFilesystem => ("the file system is read-only", elsewhere),
        PermissionDenied => (
            "permission denied",
            format!("{elsewhere} or fix the folder's permissions"),
        ),
        NotADirectory => (
            "a part of the path is a file, not a folder",
            match out_flag(tool) {
                Some(f) => format!("choose another path ({f})"),
                None => "choose another path".to_string(),
            },
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
    if is_user_error(e) || environment(e, "").is_some() {
        2
    } else {
        1
    }
}

/// The one line a binary prints for `e`. An I/O failure the user resolves is said as the
/// file it concerns (the context right around the OS error), what happened and the fix,
/// instead of the OS's words.
pub fn one_line(e: &anyhow::Error) -> String {
    one_line_for("tp-train", e)
}

/// [`one_line`] with the fix `tool` offers (its own flags, its own way to go on).
pub fn one_line_for(tool: &str, e: &anyhow::Error) -> String {
    if let Some((what, fix)) = environment(e, tool) {
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
        // Each tool's own way on: no tool is told of flags it lacks, nor to resume.
        let full = io(std::io::ErrorKind::StorageFull);
        for tool in ["tp-sweep", "tp-eval", "tp-scan", "tp-export", "tp-sample"] {
            let line = one_line_for(tool, &full);
            assert!(!line.contains("--resume"), "{tool}: {line}");
            assert!(
                line.contains(&format!("run {tool} again")),
                "{tool}: {line}"
            );
        }
        assert!(one_line_for("tp-sweep", &full).contains("finished runs are kept"));
        assert!(!one_line_for("tp-scan", &full).contains("--out"));
        assert!(one_line_for("tp-eval", &full).contains("--out FILE"));
        let ro = io(std::io::ErrorKind::ReadOnlyFilesystem);
        assert!(one_line_for("tp-eval", &ro).contains("--out FILE"));
        assert!(!one_line_for("tp-scan", &ro).contains("--out"));
        let e = io(std::io::ErrorKind::ConnectionReset);
        assert_eq!(exit_code(&e), 1);
        assert!(one_line(&e).starts_with("rank 0 failed: cannot write runs/x/log.jsonl"));
    }
}
