//! `tuning.json`: a tuned sweep's record beside its run directories — what it tunes, on
//! which seeds, and each layout's choice as the sweep last made it; written by the sweep
//! (`sweep/tuned.rs`) and read back through these types.

use super::tuning::{Choice, Edge, Tried, TuneDecl, TunedValues};
use crate::run_dir::versioned;
use anyhow::Result;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// A tuned sweep's record, beside its run directories.
pub const TUNING_FILE: &str = "tuning.json";

/// A tuned sweep's record (`tuning.json`): what it tunes, on which seeds, and each
/// layout's choice as the sweep last made it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TuningRecord {
    #[serde(flatten)]
    pub decl: TuneDecl,
    /// The seeds the layouts are compared on, at their chosen values.
    pub report_seeds: Vec<u64>,
    /// The sweep whose choices this one took, for a sweep that tuned nothing itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    pub choices: Vec<ChoiceRecord>,
}

/// One layout's choice in a [`TuningRecord`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChoiceRecord {
    /// The layout as typed (`3xsppp`, `12xt+int8`).
    pub pattern: String,
    /// The setting, as tables label it.
    pub setting: String,
    pub tried: Vec<Tried>,
    pub chosen: Option<TunedValues>,
    pub complete: bool,
    pub edges: Vec<(String, Edge)>,
    /// Where the values were chosen, where another sweep chose them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
}

impl ChoiceRecord {
    pub fn of(c: &Choice) -> Self {
        Self {
            pattern: c.variant.to_string(),
            setting: c.setting.label(),
            tried: c.tried.clone(),
            chosen: c.best.clone(),
            complete: c.complete,
            edges: c.edges.clone(),
            source: c.source.clone(),
        }
    }
}

impl TuningRecord {
    /// The record of the sweep in `sweep_dir`, if it is a tuned one.
    pub fn read(sweep_dir: &Path) -> Result<Option<Self>> {
        let path = sweep_dir.join(TUNING_FILE);
        match std::fs::read_to_string(&path) {
            Ok(text) => versioned::from_json(&text, &path).map(Some),
            Err(_) => Ok(None),
        }
    }

    /// The record of the tuned sweep a run directory belongs to (its parent's), if any.
    pub fn of_run(dir: &Path) -> Result<Option<(PathBuf, Self)>> {
        let Some(parent) = dir.parent() else {
            return Ok(None);
        };
        Ok(Self::read(parent)?.map(|r| (parent.to_path_buf(), r)))
    }
}
