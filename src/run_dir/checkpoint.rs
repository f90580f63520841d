//! Checkpoints: the logical (unsharded) weights and AdamW moments as safetensors, and a
//! JSON sidecar with the resolved config, the step, the optimiser step count and the best
//! validation loss. Because weights are logical, a checkpoint loads at any tp and dp.
//!
//! Layout: `RUN/checkpoints/step-000500/{model.safetensors, optimizer.m.safetensors,
//! optimizer.v.safetensors, meta.json, SHA256SUMS}` and `RUN/checkpoints/latest` (the
//! newest directory's name). A checkpoint is written into a temporary directory, every
//! file fsynced, then renamed into place; `latest` is replaced atomically afterwards. A
//! kill at any moment leaves the previous checkpoint and `latest` intact.
//!
//! Integrity: `SHA256SUMS` holds the SHA-256 of every other file (in `sha256sum`'s format,
//! so `sha256sum -c SHA256SUMS` checks a checkpoint by hand). Every load verifies the
//! files it reads against it and refuses non-finite values, naming the file and an
//! earlier checkpoint to fall back to. Tools that need only the weights (evaluation,
//! sampling, export, scans, `init_from`) read only `model.safetensors` and `meta.json`.
//!
//! History: `meta.json` also carries the run's communication tally up to the checkpoint
//! ([`RunHistory`]), so a resumed run reports the whole run's communication, not only
//! the steps after the resume.
//!
//! A temporary directory left by a write that failed (a full disk, a kill) is removed by
//! the next write or resume of the run ([`remove_partial`]).
//!
//! Random state: batches and dropout masks are drawn from streams keyed by (seed, step),
//! so the data position and RNG state of a checkpoint are its `step` and the config's
//! `seed`; nothing else needs saving.

use crate::comm::TallySnapshot;
use crate::config::RunConfig;
use crate::util::{fsync_dir, sha256_hex, write_atomic};
use anyhow::{Context, Result};
use candle_core::{Device, Tensor};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

pub const CHECKPOINTS: &str = "checkpoints";
/// 2: SHA256SUMS and the run history. Format 1 (neither) still loads, unverified.
const FORMAT: u32 = 2;
const MODEL_FILE: &str = "model.safetensors";
const M_FILE: &str = "optimizer.m.safetensors";
const V_FILE: &str = "optimizer.v.safetensors";
const META_FILE: &str = "meta.json";
pub const SUMS_FILE: &str = "SHA256SUMS";

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ParamInfo {
    pub name: String,
    pub shape: Vec<usize>,
    /// sharded / replicated / replicated-partial-grad (informational: the layout of the
    /// model that wrote it; any tp can load it).
    pub kind: String,
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
}

impl CommShape {
    pub fn of(cfg: &RunConfig) -> Self {
        Self {
            tp: cfg.parallel.tp,
            dp: cfg.parallel.dp,
            vocab_parallel: cfg.parallel.vocab_parallel,
            gradient_accumulation_steps: cfg.optim.gradient_accumulation_steps,
        }
    }
}

impl std::fmt::Display for CommShape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "tp {} x dp {}, vocab_parallel {}, gradient_accumulation_steps {}",
            self.tp, self.dp, self.vocab_parallel, self.gradient_accumulation_steps
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
}

/// AdamW's first and second moments, logical shapes, by parameter name.
pub struct Moments {
    pub m: HashMap<String, Tensor>,
    pub v: HashMap<String, Tensor>,
}

pub struct Checkpoint {
    pub dir: PathBuf,
    pub meta: CheckpointMeta,
    pub weights: HashMap<String, Tensor>,
    /// Loaded for resuming ([`Checkpoint::load`]); `None` from [`Checkpoint::load_weights`].
    pub moments: Option<Moments>,
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
fn corrupt(dir: &Path, what: impl std::fmt::Display) -> anyhow::Error {
    let instead = match earlier_checkpoint(dir) {
        Some(e) => format!(
            "the earlier checkpoint {} is kept: resume from it by writing `{}` into {}, or pass it to tp-eval/tp-sample/tp-scan with --checkpoint",
            e.display(),
            e.file_name().unwrap_or_default().to_string_lossy(),
            dir.parent().unwrap_or(dir).join("latest").display()
        ),
        None => "no earlier checkpoint of this run is kept: start a new run (or restore the file from a backup)".to_string(),
    };
    crate::error::user(format!(
        "checkpoint {} is unusable: {what}; {instead}",
        dir.display()
    ))
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
    pub history: Option<RunHistory>,
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

/// The checkpoint a run continues from: the one `checkpoints/latest` names (a user may
/// point it at an earlier one), or, where a kill came between a checkpoint's rename into
/// place and the update of `latest`, the newest checkpoint directory (a `step-N`
/// directory is only ever renamed into place complete). None if the run has none.
pub fn latest(run_dir: &Path) -> Result<Option<PathBuf>> {
    let base = run_dir.join(CHECKPOINTS);
    let Ok(name) = std::fs::read_to_string(base.join("latest")) else {
        let Ok(entries) = std::fs::read_dir(&base) else {
            return Ok(None);
        };
        let newest = entries
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| n.starts_with("step-") && base.join(n).join(META_FILE).is_file())
            .max();
        return Ok(newest.map(|n| base.join(n)));
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

/// `SHA256SUMS`: file name -> hex digest.
fn read_sums(dir: &Path) -> Result<Option<BTreeMap<String, String>>> {
    let path = dir.join(SUMS_FILE);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(corrupt(dir, format!("{SUMS_FILE} cannot be read ({e})"))),
    };
    let mut sums = BTreeMap::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let Some((hash, file)) = line.split_once("  ") else {
            return Err(corrupt(
                dir,
                format!("{SUMS_FILE} is damaged (line `{line}`)"),
            ));
        };
        if hash.len() != 64 || !hash.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(corrupt(
                dir,
                format!("{SUMS_FILE} is damaged (line `{line}`)"),
            ));
        }
        sums.insert(file.to_string(), hash.to_string());
    }
    Ok(Some(sums))
}

/// The bytes of `file`, verified against `sums` when the checkpoint has them.
fn read_verified(
    dir: &Path,
    file: &str,
    sums: Option<&BTreeMap<String, String>>,
) -> Result<Vec<u8>> {
    let path = dir.join(file);
    if !path.is_file() {
        return Err(corrupt(dir, format!("{file} is missing")));
    }
    let bytes =
        std::fs::read(&path).map_err(|e| corrupt(dir, format!("{file} cannot be read ({e})")))?;
    if let Some(sums) = sums {
        match sums.get(file) {
            None => return Err(corrupt(dir, format!("{SUMS_FILE} has no checksum for {file}"))),
            Some(want) if *want != sha256_hex(&bytes) => {
                return Err(corrupt(
                    dir,
                    format!("{file} does not match its SHA-256 in {SUMS_FILE} (it changed on disk after it was written)"),
                ))
            }
            Some(_) => {}
        }
    }
    Ok(bytes)
}

/// The tensors of a verified safetensors file, refusing NaN and infinite values.
fn tensors_of(dir: &Path, file: &str, bytes: &[u8]) -> Result<HashMap<String, Tensor>> {
    let unreadable = |e: &dyn std::fmt::Display| {
        corrupt(
            dir,
            format!("{file} cannot be read ({e}); the file is truncated or damaged"),
        )
    };
    let st = safetensors::SafeTensors::deserialize(bytes).map_err(|e| unreadable(&e))?;
    let mut names = st.names();
    names.sort();
    for name in names {
        let view = st.tensor(name).map_err(|e| unreadable(&e))?;
        if view.dtype() != safetensors::Dtype::F32 {
            continue;
        }
        let bad = view
            .data()
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .find(|x| !x.is_finite());
        if let Some(x) = bad {
            return Err(corrupt(
                dir,
                format!("`{name}` in {file} holds a non-finite value ({x})"),
            ));
        }
    }
    // Loaded to host memory; each rank moves its part to its own device.
    candle_core::safetensors::load_buffer(bytes, &Device::Cpu).map_err(|e| unreadable(&e))
}

impl Checkpoint {
    /// Everything a resume needs: weights, moments and meta, each file verified.
    pub fn load(dir: &Path) -> Result<Self> {
        Self::load_parts(dir, true)
    }

    /// The weights and meta alone (evaluation, sampling, export, scans, `init_from`): a
    /// missing or damaged optimiser file does not stop them.
    pub fn load_weights(dir: &Path) -> Result<Self> {
        Self::load_parts(dir, false)
    }

    fn load_parts(dir: &Path, with_moments: bool) -> Result<Self> {
        let sums = read_sums(dir)?;
        let meta_bytes = read_verified(dir, META_FILE, sums.as_ref())?;
        let meta: CheckpointMeta = serde_json::from_slice(&meta_bytes)
            .map_err(|e| corrupt(dir, format!("{META_FILE}: {e}")))?;
        if meta.format > FORMAT || meta.format == 0 {
            return Err(corrupt(
                dir,
                format!(
                    "format {} (this tp-harness reads 1 to {FORMAT})",
                    meta.format
                ),
            ));
        }
        if meta.format >= 2 && sums.is_none() {
            return Err(corrupt(dir, format!("{SUMS_FILE} is missing")));
        }
        let load = |file: &str| -> Result<HashMap<String, Tensor>> {
            tensors_of(dir, file, &read_verified(dir, file, sums.as_ref())?)
        };
        let weights = load(MODEL_FILE)?;
        let moments = if with_moments {
            Some(Moments {
                m: load(M_FILE)?,
                v: load(V_FILE)?,
            })
        } else {
            None
        };
        let ck = Self {
            weights,
            moments,
            dir: dir.to_path_buf(),
            meta,
        };
        for p in &ck.meta.params {
            let mut sets = vec![("weights", &ck.weights)];
            if let Some(mo) = &ck.moments {
                sets.push(("first moments", &mo.m));
                sets.push(("second moments", &mo.v));
            }
            for (what, set) in sets {
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
