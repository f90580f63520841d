//! `log.jsonl`: one [`LogLine`] per logged step, appended as training goes, read back
//! through the same type; each line carries its `format_version` (a run resumed by a
//! newer build appends lines of its format to the older ones).

use super::versioned;
use anyhow::Context;
use anyhow::Result;
use serde::{Deserialize, Serialize};
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use tp_harness::error::user;

pub const LOG_FILE: &str = "log.jsonl";
/// The log as a study keeps it (`scripts/study.sh`, `gzip -n`): the same lines, an
/// eighth of the bytes, so the committed records of hundreds of runs stay small enough
/// to travel (with the GPU package) to a lent machine. Only read, never appended to.
pub const KEPT_LOG_FILE: &str = "log.jsonl.gz";

/// One line of `log.jsonl`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct LogLine {
    pub step: usize,
    /// Loss of this step's batch, averaged over accumulation and data-parallel ranks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub train_loss: Option<f32>,
    /// Evaluation: mean loss over `eval_iters` batches of each split.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eval_train_loss: Option<f32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub val_loss: Option<f32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lr: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens_per_s: Option<f64>,
    /// Something a reader of the curve must know from this step on (a resume that
    /// continued on other data); such a line carries nothing else.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl LogLine {
    /// A line that carries only `note`, at `step`.
    pub fn note(step: usize, note: String) -> Self {
        Self {
            step,
            note: Some(note),
            ..Self::default()
        }
    }
}

/// Every line of a run's log; a line that does not parse is an error naming it.
/// A kept record's `log.jsonl.gz` is read where there is no `log.jsonl`.
pub fn read_log(dir: &Path) -> Result<Vec<LogLine>> {
    let (path, text) = read_log_text(dir)?;
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            let what = format!("{} line {}", path.display(), i + 1);
            let value = serde_json::from_str(l).map_err(|e| user(format!("{what}: {e}")))?;
            versioned::from_value(value, &what)
        })
        .collect()
}

/// The text of a run's log, plain or as a study keeps it, and the file it came from.
fn read_log_text(dir: &Path) -> Result<(PathBuf, String)> {
    let path = dir.join(LOG_FILE);
    if let Ok(text) = std::fs::read_to_string(&path) {
        return Ok((path, text));
    }
    let kept = dir.join(KEPT_LOG_FILE);
    let Ok(file) = File::open(&kept) else {
        tp_harness::user_bail!(
            "{} has no {LOG_FILE}: not a run directory, or the run has not started",
            dir.display()
        );
    };
    let mut text = String::new();
    std::io::Read::read_to_string(&mut flate2::read::MultiGzDecoder::new(file), &mut text)
        .map_err(|e| {
            user(format!(
                "{}: {e}: a damaged kept log; check it out again from git (git checkout -- {})",
                kept.display(),
                kept.display()
            ))
        })?;
    Ok((kept, text))
}

/// A run's log as a resume finds it: every complete line (its text as written, and
/// parsed), and the torn tail a crash or a full disk left after them, if any.
#[derive(Debug, Default)]
pub struct ResumableLog {
    pub lines: Vec<(String, LogLine)>,
    pub torn: Option<TornTail>,
}

/// The end of a log that does not parse: where it starts (1-based line) and its size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TornTail {
    pub line: usize,
    pub bytes: usize,
}

/// Reads a log to resume from. A write cut short (kill, crash, full disk) can only damage
/// the end of the file, so lines that do not parse at the end are a torn tail, reported
/// and dropped; a damaged line with complete lines after it is not something a cut
/// write makes, and is an error naming it (the file is left as it is). No log at all
/// reads as empty.
pub fn read_log_for_resume(dir: &Path) -> Result<ResumableLog> {
    let path = dir.join(LOG_FILE);
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(ResumableLog::default()),
        Err(e) => {
            return Err(user(format!(
                "cannot read {}: {e}: fix its permissions, then resume again (nothing was changed)",
                path.display()
            )))
        }
    };
    // Split after each newline, keeping the pieces' byte sizes exact.
    let mut pieces: Vec<&[u8]> = bytes.split_inclusive(|&b| b == b'\n').collect();
    if pieces.last().is_some_and(|p| p.is_empty()) {
        pieces.pop();
    }
    // A line that does not read as a LogLine is torn; one of a format newer than this
    // build's is an error, never a torn tail to drop.
    let parse = |p: &[u8]| -> Option<(String, LogLine)> {
        let text = std::str::from_utf8(p).ok()?.trim_end_matches('\n');
        let value = serde_json::from_str(text).ok()?;
        let line = versioned::from_value(value, "").ok()?;
        Some((text.to_string(), line))
    };
    let blank = |p: &[u8]| p.iter().all(|b| b.is_ascii_whitespace());
    let mut out = ResumableLog::default();
    for (i, piece) in pieces.iter().enumerate() {
        if blank(piece) {
            continue;
        }
        let what = || format!("{} line {}", path.display(), i + 1);
        let newer = std::str::from_utf8(piece)
            .ok()
            .and_then(versioned::newer_format);
        if let Some(v) = newer {
            tp_harness::user_bail!("{}", versioned::newer_message(&what(), v));
        }
        match parse(piece) {
            Some(l) => out.lines.push(l),
            None => {
                let rest = &pieces[i..];
                if rest.iter().skip(1).any(|p| !blank(p) && parse(p).is_some()) {
                    tp_harness::user_bail!(
                        "{} line {} is damaged but complete lines follow it (not a write cut short): repair or delete that line, then resume again (nothing was changed)",
                        path.display(),
                        i + 1
                    );
                }
                out.torn = Some(TornTail {
                    line: i + 1,
                    bytes: rest.iter().map(|p| p.len()).sum(),
                });
                break;
            }
        }
    }
    Ok(out)
}

/// Appends lines to a run's log, each written whole (one write of the line and its
/// newline) as it comes.
pub struct LogWriter {
    out: File,
    path: PathBuf,
}

impl LogWriter {
    pub(super) fn append(dir: &Path) -> Result<Self> {
        let path = dir.join(LOG_FILE);
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .with_context(|| format!("cannot write {}", path.display()))?;
        Ok(Self { out, path })
    }

    pub fn write(&mut self, line: &LogLine) -> Result<()> {
        let mut text = versioned::to_json_line(line)?.into_bytes();
        text.push(b'\n');
        self.out
            .write_all(&text)
            .with_context(|| format!("cannot write {}", self.path.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str, contents: &[u8]) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("tp-log-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join(LOG_FILE), contents).unwrap();
        d
    }

    const GOOD: &str = "{\"step\":0,\"train_loss\":4.5}\n{\"step\":10,\"train_loss\":3.25}\n";

    #[test]
    fn a_torn_last_line_is_dropped_and_every_complete_line_is_kept_as_written() {
        let d = scratch("torn", format!("{GOOD}{{\"step\":20,\"tra").as_bytes());
        let log = read_log_for_resume(&d).unwrap();
        assert_eq!(log.lines.len(), 2);
        assert_eq!(log.lines[0].0, "{\"step\":0,\"train_loss\":4.5}");
        assert_eq!(log.lines[1].1.step, 10);
        assert_eq!(log.torn, Some(TornTail { line: 3, bytes: 15 }));
        // Zero-filled blocks after a crash are a torn tail too.
        let d2 = scratch(
            "zeros",
            [GOOD.as_bytes(), &[0u8; 64], b"\n"].concat().as_slice(),
        );
        let log = read_log_for_resume(&d2).unwrap();
        assert_eq!((log.lines.len(), log.torn.map(|t| t.bytes)), (2, Some(65)));
        for d in [d, d2] {
            std::fs::remove_dir_all(d).unwrap();
        }
    }

    #[test]
    fn a_log_kept_by_gzip_reads_as_the_plain_one_and_a_cut_one_names_the_fix() {
        let d = scratch("kept", GOOD.as_bytes());
        let plain = read_log(&d).unwrap();
        // As scripts/study.sh keeps it: gzip -n, the plain log gone.
        let gz = std::process::Command::new("gzip")
            .args(["-9n", "-c"])
            .arg(d.join(LOG_FILE))
            .output()
            .unwrap();
        assert!(gz.status.success());
        std::fs::write(d.join(KEPT_LOG_FILE), &gz.stdout).unwrap();
        std::fs::remove_file(d.join(LOG_FILE)).unwrap();
        let kept = read_log(&d).unwrap();
        assert_eq!((kept.len(), kept[1].train_loss), (2, Some(3.25)));
        assert_eq!(kept, plain);
        std::fs::write(d.join(KEPT_LOG_FILE), &gz.stdout[..gz.stdout.len() / 2]).unwrap();
        let e = read_log(&d).unwrap_err().to_string();
        assert!(
            e.contains("damaged kept log") && e.contains("git checkout --"),
            "{e}"
        );
        std::fs::remove_dir_all(d).unwrap();
    }

    #[test]
    fn a_complete_log_has_no_torn_tail_and_a_missing_one_reads_as_empty() {
        let d = scratch("whole", GOOD.as_bytes());
        let log = read_log_for_resume(&d).unwrap();
        assert_eq!((log.lines.len(), log.torn), (2, None));
        std::fs::remove_file(d.join(LOG_FILE)).unwrap();
        let log = read_log_for_resume(&d).unwrap();
        assert_eq!((log.lines.len(), log.torn), (0, None));
        std::fs::remove_dir_all(d).unwrap();
    }

    #[test]
    fn a_damaged_line_with_complete_lines_after_it_is_an_error_naming_it() {
        let d = scratch("middle", b"{\"step\":0}\ngarbage\n{\"step\":5}\n");
        let e = read_log_for_resume(&d).unwrap_err().to_string();
        assert!(e.contains("line 2 is damaged"), "{e}");
        assert!(!e.contains('\n'), "{e}");
        std::fs::remove_dir_all(d).unwrap();
    }

    #[test]
    fn each_written_line_carries_its_format_and_a_newer_line_stops_a_resume_unchanged() {
        let d = scratch("format", GOOD.as_bytes());
        let mut w = LogWriter::append(&d).unwrap();
        w.write(&LogLine::note(20, "resumed".into())).unwrap();
        let text = std::fs::read_to_string(d.join(LOG_FILE)).unwrap();
        let last = text.lines().last().unwrap();
        assert!(
            last.starts_with("{\"format_version\":2,\"step\":20"),
            "{last}"
        );
        let lines = read_log(&d).unwrap();
        assert_eq!(
            (lines.len(), lines[2].note.as_deref()),
            (3, Some("resumed"))
        );
        let newer = format!("{text}{{\"format_version\":9,\"step\":30}}\n");
        std::fs::write(d.join(LOG_FILE), &newer).unwrap();
        let e = read_log_for_resume(&d).unwrap_err().to_string();
        assert!(e.contains("line 4 is of record format 9"), "{e}");
        assert_eq!(std::fs::read_to_string(d.join(LOG_FILE)).unwrap(), newer);
        assert!(read_log(&d).is_err());
        std::fs::remove_dir_all(d).unwrap();
    }
}
