//! Writing a checkpoint: every file into a temporary directory, fsynced, with its
//! SHA-256 in `SHA256SUMS`; then renamed into place, `latest` pointed at it, old ones
//! pruned. A kill at any moment leaves the previous checkpoint and `latest` intact.

use super::meta::{
    CheckpointMeta, ParamInfo, RunHistory, CHECKPOINTS, FORMAT, META_FILE, MODEL_FILE, M_FILE,
    SUMS_FILE, V_FILE,
};
use crate::config::RunConfig;
use anyhow::{Context, Result};
use candle_core::Tensor;
use std::collections::HashMap;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use tp_harness::util::{fsync_dir, sha256_hex, write_atomic};

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
    pub history: Option<RunHistory>,
    /// The run's wall-clock seconds so far, over all its processes.
    pub wall_seconds: Option<f64>,
    /// The fingerprint of the data it trains on.
    pub data_sha256: Option<String>,
    /// Hold the write half-done for this long (tests kill a run mid-write).
    pub pause_mid_write: Option<std::time::Duration>,
}

/// Writes `bytes` to a new file at `path` and makes them durable; errors name the file.
fn write_durable(path: &Path, bytes: &[u8]) -> Result<()> {
    let mut f = File::create(path).with_context(|| format!("cannot write {}", path.display()))?;
    f.write_all(bytes)
        .and_then(|_| f.sync_all())
        .with_context(|| format!("cannot write {}", path.display()))
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
        history: state.history,
        wall_seconds: state.wall_seconds,
        data_sha256: state.data_sha256,
    };
    let base = root.join(CHECKPOINTS);
    std::fs::create_dir_all(&base).with_context(|| format!("cannot create {}", base.display()))?;
    remove_partial(root)?;
    let name = format!("step-{step:06}");
    let tmp = base.join(format!("{TMP_PREFIX}{name}-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).with_context(|| format!("cannot create {}", tmp.display()))?;
    let filled = (|| -> Result<()> {
        let mut sums = String::new();
        for (file, tensors) in [(MODEL_FILE, &weights), (M_FILE, &m), (V_FILE, &v)] {
            let bytes = safetensors::serialize(tensors, None)
                .with_context(|| format!("cannot serialise {file}"))?;
            sums.push_str(&format!("{}  {file}\n", sha256_hex(&bytes)));
            write_durable(&tmp.join(file), &bytes)?;
        }
        if let Some(d) = state.pause_mid_write {
            std::thread::sleep(d);
        }
        let meta_bytes = serde_json::to_vec_pretty(&meta)?;
        sums.push_str(&format!("{}  {META_FILE}\n", sha256_hex(&meta_bytes)));
        write_durable(&tmp.join(META_FILE), &meta_bytes)?;
        write_durable(&tmp.join(SUMS_FILE), sums.as_bytes())?;
        fsync_dir(&tmp)
    })();
    if let Err(e) = filled {
        // A full disk: give back what the half-written checkpoint took.
        let _ = std::fs::remove_dir_all(&tmp);
        return Err(e);
    }
    let dest = base.join(&name);
    if dest.exists() {
        std::fs::remove_dir_all(&dest)
            .with_context(|| format!("cannot replace {}", dest.display()))?;
    }
    std::fs::rename(&tmp, &dest).with_context(|| format!("cannot write {}", dest.display()))?;
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
