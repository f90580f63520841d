//! `log.jsonl`: one [`LogLine`] per logged step, appended as training goes, read back
//! through the same type.

use crate::error::user;
use anyhow::Result;
use serde::{Deserialize, Serialize};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;

pub const LOG_FILE: &str = "log.jsonl";

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
}

/// Every line of a run's log; a line that does not parse is an error naming it.
pub fn read_log(dir: &Path) -> Result<Vec<LogLine>> {
    let path = dir.join(LOG_FILE);
    let text = std::fs::read_to_string(&path).map_err(|_| {
        user(format!(
            "{} has no {LOG_FILE}: not a run directory, or the run has not started",
            dir.display()
        ))
    })?;
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            serde_json::from_str(l)
                .map_err(|e| user(format!("{} line {}: {e}", path.display(), i + 1)))
        })
        .collect()
}

/// Appends lines to a run's log, each flushed as it is written.
pub struct LogWriter {
    out: BufWriter<File>,
}

impl LogWriter {
    pub(super) fn append(dir: &Path) -> Result<Self> {
        let f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join(LOG_FILE))?;
        Ok(Self {
            out: BufWriter::new(f),
        })
    }

    pub fn write(&mut self, line: &LogLine) -> Result<()> {
        serde_json::to_writer(&mut self.out, line)?;
        self.out.write_all(b"\n")?;
        self.out.flush()?;
        Ok(())
    }
}
