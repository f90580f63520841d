//! What is written into a run directory besides its writer's records: the evaluations
//! and scans tools add to a finished run (refused while another process owns it), and
//! `diverged.json`, written by the run's own rank 0 where training stopped.

use super::files::{DIVERGED_FILE, SCAN_FILE};
use super::lock::DirLock;
use super::out_guard::check_out;
use super::read::{read_config, read_json};
use super::records::{DivergedReport, EvalReport, ScanReport};
use super::versioned;
use crate::data::Split;
use anyhow::Result;
use std::path::{Path, PathBuf};
use tp_harness::user_bail;
use tp_harness::util::write_atomic;

/// `eval.json` for the validation split, `eval-<split>.json` for another.
pub fn eval_file(split: Split) -> String {
    match split {
        Split::Val => "eval.json".into(),
        other => format!("eval-{}.json", other.label()),
    }
}

/// Writes `report` into a finished run's directory from outside its writer (tp-eval):
/// refused while another process owns the run. A report made at another tp than the
/// run's goes beside the run's own, named by its tp (`eval-tp4.json`): the run's
/// `eval.json` stays the number its `summary.json` gives. Returns the file written.
pub fn write_eval_into(dir: &Path, report: &EvalReport) -> Result<PathBuf> {
    DirLock::check_free(dir)?;
    let path = eval_path(dir, report.split, Some(report.tp))?;
    write_atomic(&path, versioned::to_json(report)?.as_bytes())?;
    Ok(path)
}

/// Writes `report` to `file` outside any run (`tp-eval --out FILE`), never into a run's
/// checkpoints.
pub fn write_eval_to(file: &Path, report: &EvalReport) -> Result<()> {
    if let Some(parent) = file.parent().filter(|p| !p.as_os_str().is_empty()) {
        check_out(parent, "--out")?;
    }
    if file.is_dir() {
        user_bail!(
            "--out {} is a folder: name the file to write, e.g. {}",
            file.display(),
            file.join("eval.json").display()
        );
    }
    write_atomic(file, versioned::to_json(report)?.as_bytes())
}

/// Writes a scan into a finished run's directory (`scan.json`), refused while another
/// process owns the run.
pub fn write_scan_into(dir: &Path, report: &ScanReport) -> Result<()> {
    DirLock::check_free(dir)?;
    write_atomic(&dir.join(SCAN_FILE), versioned::to_json(report)?.as_bytes())
}

/// A run's `scan.json`, if it was scanned.
pub fn read_scan(dir: &Path) -> Result<Option<ScanReport>> {
    read_json(&dir.join(SCAN_FILE))
}

/// Where a run's evaluation of `split` at `tp` lies: `eval.json` (or `eval-<split>.json`)
/// at the run's own tp or when `tp` is `None`, `eval-tp4.json` beside it at another.
fn eval_path(dir: &Path, split: Split, tp: Option<usize>) -> Result<PathBuf> {
    let name = eval_file(split);
    Ok(match tp {
        Some(tp) if tp != read_config(dir)?.parallel.tp => {
            dir.join(name.replace(".json", &format!("-tp{tp}.json")))
        }
        _ => dir.join(name),
    })
}

/// A run's evaluation of `split` at `tp` (`None`: its own tp), if it has one.
pub fn read_eval(dir: &Path, split: Split, tp: Option<usize>) -> Result<Option<EvalReport>> {
    read_json(&eval_path(dir, split, tp)?)
}

/// Where training stopped on a non-finite value (the run's outcome until resumed),
/// written by the process that owns the run `dir` (its rank 0).
pub fn write_diverged(dir: &Path, report: &DivergedReport) -> Result<()> {
    write_atomic(
        &dir.join(DIVERGED_FILE),
        versioned::to_json(report)?.as_bytes(),
    )
}
