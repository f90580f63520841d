//! What a checkpoint's `meta.json` says besides its tensors, the names of its files, and
//! the one line for a checkpoint that cannot be used.

use crate::config::RunConfig;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use tp_harness::comm::TallySnapshot;
use tp_harness::tp::ParamKind;
use tp_harness::train::bucket_cap::BucketCap;

pub const CHECKPOINTS: &str = "checkpoints";
/// 2: SHA256SUMS and the run history; 3: each parameter's kind typed. Format 1 (neither
/// sums nor history) still loads, unverified; formats 1 and 2 without their kinds.
pub const FORMAT: u32 = 3;
pub const MODEL_FILE: &str = "model.safetensors";
pub const M_FILE: &str = "optimizer.m.safetensors";
pub const V_FILE: &str = "optimizer.v.safetensors";
pub const META_FILE: &str = "meta.json";
pub const SUMS_FILE: &str = "SHA256SUMS";
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ParamInfo {
    pub name: String,
    pub shape: Vec<usize>,
    /// How the model that wrote it held the parameter over its TP group (informational:
    /// any tp can load it). `None` in formats 1 and 2, which kept it as free text.
    #[serde(default)]
    pub kind: Option<ParamKind>,
}

/// What the run had communicated by the checkpoint, as rank 0 tallied it: a resumed run
/// continues from it, so its comm.json covers the whole run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunHistory {
    /// Training steps and forward passes the tally covers.
    pub steps: usize,
    pub passes: usize,
    /// What the tally's counts depend on (a resume that changes it starts a new tally).
    pub shape: CommShape,
    pub tally: TallySnapshot,
}

/// The settings a run's communication per step depends on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommShape {
    pub tp: usize,
    pub dp: usize,
    pub vocab_parallel: bool,
    pub gradient_accumulation_steps: usize,
    /// The gradient buckets where backprop starts their sums (none: one bucket after
    /// backprop, as before overlapped sums, or nothing to sum). Under its first name,
    /// which held only a size in bytes.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "grad_bucket_bytes"
    )]
    pub grad_buckets: Option<BucketShape>,
}

/// How a run's gradient buckets were sized: fixed bytes, or `auto` (sized for the model,
/// which a resume cannot change).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum BucketShape {
    Bytes(u64),
    ForModel(Auto),
}

/// The word `auto`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Auto {
    Auto,
}

impl BucketShape {
    fn of(cap: BucketCap) -> Self {
        match cap {
            BucketCap::Auto => BucketShape::ForModel(Auto::Auto),
            // Any size: the bytes are what the run used.
            fixed => BucketShape::Bytes(fixed.bytes(0) as u64),
        }
    }
}

impl CommShape {
    pub fn of(cfg: &RunConfig) -> Self {
        let p = &cfg.parallel;
        Self {
            tp: p.tp,
            dp: p.dp,
            vocab_parallel: p.vocab_parallel,
            gradient_accumulation_steps: cfg.optim.gradient_accumulation_steps,
            grad_buckets: (p.overlap_grad_reduce && p.tp * p.dp > 1)
                .then(|| BucketShape::of(p.ddp_bucket_mb)),
        }
    }
}

impl std::fmt::Display for CommShape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "tp {} x dp {}, vocab_parallel {}, gradient_accumulation_steps {}, {}",
            self.tp,
            self.dp,
            self.vocab_parallel,
            self.gradient_accumulation_steps,
            match self.grad_buckets {
                Some(BucketShape::Bytes(b)) =>
                    format!("gradient sums started in buckets of {b} bytes"),
                Some(BucketShape::ForModel(_)) => {
                    "gradient sums started in buckets sized for the model (auto)".into()
                }
                None => "gradient sums in one bucket after backprop".into(),
            }
        )
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CheckpointMeta {
    pub format: u32,
    /// Optimiser steps completed; training resumes at this step.
    pub step: usize,
    pub config: RunConfig,
    /// AdamW's step count (bias correction).
    pub adam_steps: u64,
    pub best_val_loss: Option<f32>,
    /// Where the data stream stands: batches are keyed by (seed, step).
    pub data_step: usize,
    pub rng: String,
    pub params: Vec<ParamInfo>,
    /// The run's communication so far (format 2 on).
    #[serde(default)]
    pub history: Option<RunHistory>,
    /// Wall-clock seconds the run had taken up to this checkpoint, over every process
    /// that trained it (a resumed run's summary adds its own to this). Absent in
    /// checkpoints written before it was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wall_seconds: Option<f64>,
    /// The data the run trained on ([`crate::data::Dataset::fingerprint`]): a resume on
    /// other data is refused unless the user accepts it. Absent in older checkpoints.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_sha256: Option<String>,
}

/// The newest checkpoint of the same run older than `dir`, if one is kept.
fn earlier_checkpoint(dir: &Path) -> Option<PathBuf> {
    let base = dir.parent()?;
    let this = dir.file_name()?.to_str()?;
    let mut older: Vec<String> = std::fs::read_dir(base)
        .ok()?
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with("step-") && n.as_str() < this)
        .filter(|n| base.join(n).join(META_FILE).is_file())
        .collect();
    older.sort();
    older.pop().map(|n| base.join(n))
}

/// The one line for a checkpoint that cannot be used: what is wrong, and what to use
/// instead.
pub fn corrupt(dir: &Path, what: impl std::fmt::Display) -> anyhow::Error {
    let instead = match earlier_checkpoint(dir) {
        Some(e) => format!(
            "the earlier checkpoint {} is kept: resume from it by writing `{}` into {}, or pass it to tp-eval/tp-sample/tp-scan/tp-export with --checkpoint",
            e.display(),
            e.file_name().unwrap_or_default().to_string_lossy(),
            dir.parent().unwrap_or(dir).join("latest").display()
        ),
        None => "no earlier checkpoint of this run is kept: start a new run (or restore the file from a backup)".to_string(),
    };
    tp_harness::error::user(format!(
        "checkpoint {} is unusable: {what}; {instead}",
        dir.display()
    ))
}
