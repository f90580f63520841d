//! Checkpoints: the logical (unsharded) weights and AdamW moments as safetensors, and a
//! JSON sidecar with the resolved config, the step, the optimiser step count and the best
//! validation loss. Because weights are logical, a checkpoint loads at any tp and dp.
//!
//! Layout: `RUN/checkpoints/step-000500/{model.safetensors, optimizer.safetensors,
//! meta.json}` and `RUN/checkpoints/latest` (the newest directory's name). A checkpoint
//! is written into a temporary directory, every file fsynced, then renamed into place;
//! `latest` is replaced atomically afterwards. A kill at any moment leaves the previous
//! checkpoint and `latest` intact.
//!
//! A temporary directory left by a write that failed (a full disk, a kill) is removed by
//! the next write or resume of the run ([`remove_partial`]).
//!
//! Random state: batches and dropout masks are drawn from streams keyed by (seed, step),
//! so the data position and RNG state of a checkpoint are its `step` and the config's
//! `seed`; nothing else needs saving.

use crate::config::RunConfig;
use crate::error::UserError;
use crate::util::{fsync_dir, write_atomic};
use anyhow::{Context, Result};
use candle_core::{Device, Tensor};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};

pub const CHECKPOINTS: &str = "checkpoints";
const FORMAT: u32 = 1;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ParamInfo {
    pub name: String,
    pub shape: Vec<usize>,
    /// sharded / replicated / replicated-partial-grad (informational: the layout of the
    /// model that wrote it; any tp can load it).
    pub kind: String,
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
}

pub struct Checkpoint {
    pub dir: PathBuf,
    pub meta: CheckpointMeta,
    pub weights: HashMap<String, Tensor>,
    /// AdamW first and second moments, logical shapes, by parameter name.
    pub m: HashMap<String, Tensor>,
    pub v: HashMap<String, Tensor>,
}

fn corrupt(dir: &Path, what: impl std::fmt::Display) -> anyhow::Error {
    anyhow::Error::new(UserError(format!(
        "checkpoint {} is unusable: {what}; resume from an earlier checkpoint (point {}/latest at it) or start a new run",
        dir.display(),
        dir.parent().map(|p| p.display().to_string()).unwrap_or_default()
    )))
}

/// The logical tensors of one checkpoint, by parameter name.
pub struct CheckpointTensors {
    pub weights: HashMap<String, Tensor>,
    /// AdamW first and second moments, logical shapes.
    pub m: HashMap<String, Tensor>,
    pub v: HashMap<String, Tensor>,
    pub params: Vec<ParamInfo>,
}

/// What a checkpoint records besides its tensors.
pub struct CheckpointState<'a> {
    pub step: usize,
    pub config: &'a RunConfig,
    pub adam_steps: u64,
    pub best_val_loss: Option<f32>,
    /// Hold the write half-done for this long (tests kill a run mid-write).
    pub pause_mid_write: Option<std::time::Duration>,
}

/// Writes the state after `step` completed steps into `RUN/checkpoints/step-N/`, points
/// `latest` at it and prunes old ones. Returns the checkpoint directory.
pub fn write(root: &Path, state: CheckpointState, tensors: CheckpointTensors) -> Result<PathBuf> {
    let (step, cfg) = (state.step, state.config);
    let CheckpointTensors {
        weights,
        m,
        v,
        params,
    } = tensors;
    let meta = CheckpointMeta {
        format: FORMAT,
        step,
        config: cfg.clone(),
        adam_steps: state.adam_steps,
        best_val_loss: state.best_val_loss,
        data_step: step,
        rng: format!(
            "stateless: batches and dropout masks are keyed by (seed {}, step)",
            cfg.optim.seed
        ),
        params,
    };
    let base = root.join(CHECKPOINTS);
    std::fs::create_dir_all(&base)?;
    remove_partial(root)?;
    let name = format!("step-{step:06}");
    let tmp = base.join(format!("{TMP_PREFIX}{name}-{}", std::process::id()));
    std::fs::create_dir_all(&tmp)?;
    for (file, tensors) in [
        ("model.safetensors", &weights),
        ("optimizer.m.safetensors", &m),
        ("optimizer.v.safetensors", &v),
    ] {
        let path = tmp.join(file);
        candle_core::safetensors::save(tensors, &path)
            .with_context(|| format!("cannot write {}", path.display()))?;
        File::open(&path)?.sync_all()?;
    }
    if let Some(d) = state.pause_mid_write {
        std::thread::sleep(d);
    }
    let meta_path = tmp.join("meta.json");
    std::fs::write(&meta_path, serde_json::to_string_pretty(&meta)?)?;
    File::open(&meta_path)?.sync_all()?;
    fsync_dir(&tmp)?;
    let dest = base.join(&name);
    if dest.exists() {
        std::fs::remove_dir_all(&dest)?;
    }
    std::fs::rename(&tmp, &dest)?;
    fsync_dir(&base)?;
    write_atomic(&base.join("latest"), name.as_bytes())?;
    prune(&base, &name, cfg.checkpoints.keep_checkpoints)?;
    Ok(dest)
}

/// Prefix of a checkpoint still being written.
const TMP_PREFIX: &str = ".tmp-";

/// Removes checkpoints whose write never finished (`checkpoints/.tmp-*`). Only the owner
/// of the run directory (the holder of its lock) calls this, so nobody is writing them.
pub fn remove_partial(run_dir: &Path) -> Result<()> {
    let base = run_dir.join(CHECKPOINTS);
    let Ok(entries) = std::fs::read_dir(&base) else {
        return Ok(());
    };
    for e in entries.flatten() {
        if e.file_name().to_string_lossy().starts_with(TMP_PREFIX) {
            std::fs::remove_dir_all(e.path())
                .with_context(|| format!("cannot remove {}", e.path().display()))?;
        }
    }
    Ok(())
}

/// Removes all but the newest `keep` checkpoints (never the latest one).
fn prune(base: &Path, latest: &str, keep: usize) -> Result<()> {
    if keep == 0 {
        return Ok(());
    }
    let mut steps: Vec<String> = std::fs::read_dir(base)?
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with("step-"))
        .collect();
    steps.sort();
    let excess = steps.len().saturating_sub(keep);
    for n in steps.into_iter().take(excess) {
        if n != latest {
            std::fs::remove_dir_all(base.join(n))?;
        }
    }
    Ok(())
}

/// The newest complete checkpoint of a run, if any.
pub fn latest(run_dir: &Path) -> Result<Option<PathBuf>> {
    let base = run_dir.join(CHECKPOINTS);
    let Ok(name) = std::fs::read_to_string(base.join("latest")) else {
        return Ok(None);
    };
    let dir = base.join(name.trim());
    if !dir.is_dir() {
        return Err(corrupt(
            &dir,
            "`latest` names a checkpoint that does not exist",
        ));
    }
    Ok(Some(dir))
}

fn load_tensors(dir: &Path, file: &str) -> Result<HashMap<String, Tensor>> {
    // Loaded to host memory; each rank moves its part to its own device.
    let path = dir.join(file);
    if !path.is_file() {
        return Err(corrupt(dir, format!("{file} is missing")));
    }
    candle_core::safetensors::load(&path, &Device::Cpu).map_err(|e| {
        corrupt(
            dir,
            format!("{file} cannot be read ({e}); the file is truncated or damaged"),
        )
    })
}

impl Checkpoint {
    pub fn load(dir: &Path) -> Result<Self> {
        let meta_text = std::fs::read_to_string(dir.join("meta.json"))
            .map_err(|e| corrupt(dir, format!("meta.json: {e}")))?;
        let meta: CheckpointMeta = serde_json::from_str(&meta_text)
            .map_err(|e| corrupt(dir, format!("meta.json: {e}")))?;
        if meta.format != FORMAT {
            return Err(corrupt(
                dir,
                format!("format {} (this tp-harness reads {FORMAT})", meta.format),
            ));
        }
        let ck = Self {
            weights: load_tensors(dir, "model.safetensors")?,
            m: load_tensors(dir, "optimizer.m.safetensors")?,
            v: load_tensors(dir, "optimizer.v.safetensors")?,
            dir: dir.to_path_buf(),
            meta,
        };
        for p in &ck.meta.params {
            for (what, set) in [
                ("weights", &ck.weights),
                ("first moments", &ck.m),
                ("second moments", &ck.v),
            ] {
                match set.get(&p.name) {
                    None => return Err(corrupt(dir, format!("the {what} lack `{}`", p.name))),
                    Some(t) if t.dims() != p.shape.as_slice() => {
                        return Err(corrupt(
                            dir,
                            format!(
                                "`{}` in the {what} has shape {:?}, meta.json says {:?}",
                                p.name,
                                t.dims(),
                                p.shape
                            ),
                        ))
                    }
                    _ => {}
                }
            }
        }
        Ok(ck)
    }

    /// The checkpoint must hold exactly the model `cfg` describes (every model key
    /// equal); says what differs.
    pub fn check_matches(&self, cfg: &RunConfig) -> Result<()> {
        let as_map = |c: &RunConfig| match serde_json::to_value(&c.model) {
            Ok(serde_json::Value::Object(m)) => m,
            _ => serde_json::Map::new(),
        };
        let (ours, theirs) = (as_map(&self.meta.config), as_map(cfg));
        let diffs: Vec<String> = ours
            .iter()
            .filter(|(k, v)| theirs.get(*k) != Some(*v))
            .map(|(k, v)| {
                let other = theirs.get(k).map_or("null".to_string(), |o| o.to_string());
                format!("{k} {v} (checkpoint) vs {other}")
            })
            .collect();
        if !diffs.is_empty() {
            crate::user_bail!(
                "checkpoint {} does not match this run: {}",
                self.dir.display(),
                diffs.join(", ")
            );
        }
        Ok(())
    }
}
