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
//! Random state: batches and dropout masks are drawn from streams keyed by (seed, step),
//! so the data position and RNG state of a checkpoint are its `step` and the config's
//! `seed`; nothing else needs saving.

use super::config::RunConfig;
use super::optimizer::AdamW;
use super::run_dir::write_atomic;
use crate::error::UserError;
use crate::model::Gpt;
use crate::tp::{gather_logical, CountedComm, Phase, Tally};
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

fn fsync_dir(dir: &Path) -> Result<()> {
    File::open(dir)?.sync_all()?;
    Ok(())
}

/// Saves the state after `step` completed steps. Every rank of the TP group calls this
/// (sharded tensors are assembled collectively); only the rank given `root` writes.
/// Returns the checkpoint directory on the writing rank.
#[allow(clippy::too_many_arguments)]
pub fn save(
    root: Option<&Path>,
    step: usize,
    cfg: &RunConfig,
    model: &Gpt,
    opt: &AdamW,
    best_val_loss: Option<f32>,
    tp: &CountedComm,
    tally: &Tally,
) -> Result<Option<PathBuf>> {
    tally.set_phase(Phase::Eval);
    let mut weights = HashMap::new();
    let mut m = HashMap::new();
    let mut v = HashMap::new();
    let mut params = Vec::new();
    for (i, p) in model.params().iter().enumerate() {
        let shape = p.var.shape().clone();
        let logical = |t: Tensor| gather_logical(&t, p.kind, &p.full_shape, tp);
        weights.insert(p.name.clone(), logical(p.var.as_tensor().clone())?);
        m.insert(
            p.name.clone(),
            logical(Tensor::from_slice(&opt.m[i], &shape, &Device::Cpu)?)?,
        );
        v.insert(
            p.name.clone(),
            logical(Tensor::from_slice(&opt.v[i], &shape, &Device::Cpu)?)?,
        );
        params.push(ParamInfo {
            name: p.name.clone(),
            shape: p.full_shape.clone(),
            kind: p.kind.label().to_string(),
        });
    }
    tally.set_phase(Phase::Train);
    let Some(root) = root else {
        return Ok(None);
    };
    let meta = CheckpointMeta {
        format: FORMAT,
        step,
        config: cfg.clone(),
        adam_steps: opt.t,
        best_val_loss,
        data_step: step,
        rng: format!(
            "stateless: batches and dropout masks are keyed by (seed {}, step)",
            cfg.seed
        ),
        params,
    };
    let base = root.join(CHECKPOINTS);
    std::fs::create_dir_all(&base)?;
    let name = format!("step-{step:06}");
    let tmp = base.join(format!(".tmp-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
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
    pause_for_tests();
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
    prune(&base, &name, cfg.keep_checkpoints)?;
    Ok(Some(dest))
}

/// `TP_CHECKPOINT_PAUSE_MS` holds a checkpoint half-written for that long, so tests can
/// kill a run in the middle of a write.
fn pause_for_tests() {
    if let Some(ms) = std::env::var("TP_CHECKPOINT_PAUSE_MS")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        std::thread::sleep(std::time::Duration::from_millis(ms));
    }
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

    /// The checkpoint must hold exactly the model `cfg` describes; says what differs.
    pub fn check_matches(&self, cfg: &RunConfig) -> Result<()> {
        let a = &self.meta.config;
        let mut diffs = Vec::new();
        macro_rules! cmp {
            ($($f:ident),*) => {$(
                if format!("{:?}", a.$f) != format!("{:?}", cfg.$f) {
                    diffs.push(format!("{} {:?} (checkpoint) vs {:?}", stringify!($f), a.$f, cfg.$f));
                }
            )*};
        }
        cmp!(pattern, n_layer, n_head, n_embd, block_size, bias, norm, activation, dataset);
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
