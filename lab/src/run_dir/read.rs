//! Reading a run directory's records back: its config and each JSON record through the
//! one versioned reader (a record that is not there is `None`, a damaged one an error
//! naming it).

use super::files::{COMM_FILE, CONFIG_FILE, DIVERGED_FILE, SUMMARY_FILE};
use super::records::{CommReport, DivergedReport};
use super::summary::RunSummary;
use super::versioned;
use crate::config::RunConfig;
use anyhow::Result;
use std::path::Path;
use tp_harness::error::user;
use tp_harness::user_bail;

/// A run's resolved `config.yaml`.
pub fn read_config(dir: &Path) -> Result<RunConfig> {
    if !dir.exists() {
        user_bail!(
            "{} does not exist: give a run directory (runs/<time>-<pattern>, a sweep's runs/<sweep>/<point>)",
            dir.display()
        );
    }
    let path = dir.join(CONFIG_FILE);
    let text = std::fs::read_to_string(&path).map_err(|_| {
        user(format!(
            "{} has no {CONFIG_FILE}: not a tp-harness run directory",
            dir.display()
        ))
    })?;
    RunConfig::from_yaml(&text, &path.display().to_string())
}

/// A run's `comm.json`, if it has one.
pub fn read_comm(dir: &Path) -> Result<Option<CommReport>> {
    read_json(&dir.join(COMM_FILE))
}

/// A run's `diverged.json`, if its last attempt stopped on a non-finite value.
pub fn read_diverged(dir: &Path) -> Result<Option<DivergedReport>> {
    read_json(&dir.join(DIVERGED_FILE))
}

/// A run's `summary.json`, if it finished; its figures checked as any input is, so that
/// a damaged record stops a table or figure with one line instead of flowing into it
/// (`-3e38 ± inf`).
pub fn read_summary(dir: &Path) -> Result<Option<RunSummary>> {
    let path = dir.join(SUMMARY_FILE);
    let summary: Option<RunSummary> = read_json(&path)?;
    if let Some(why) = summary.as_ref().and_then(RunSummary::implausible) {
        return Err(tp_harness::error::user(format!(
            "{}: {why}: the record is damaged; train the run again or move it out of the way",
            path.display()
        )));
    }
    Ok(summary)
}

pub(super) fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<Option<T>> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return Ok(None);
    };
    versioned::from_json(&text, path).map(Some)
}
