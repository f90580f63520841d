//! Reading a checkpoint back: the one `latest` names, each file verified against
//! `SHA256SUMS` and refused if it holds NaN or infinite values; the weights alone for the
//! tools that need nothing else.

use super::meta::{
    corrupt, CheckpointMeta, CHECKPOINTS, FORMAT, META_FILE, MODEL_FILE, M_FILE, SUMS_FILE, V_FILE,
};
use crate::config::RunConfig;
use anyhow::Result;
use candle_core::{Device, Tensor};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use tp_harness::util::sha256_hex;

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

/// The checkpoint a run continues from: the one `checkpoints/latest` names (a user may
/// point it at an earlier one), or, where `latest` is missing, empty or unreadable (a
/// kill between a checkpoint's rename into place and the update of `latest`, a damaged
/// file), the newest checkpoint directory (a `step-N` directory is only ever renamed into
/// place complete). None if the run has none. A `latest` that names anything but one of
/// this run's own `step-N` directories (`../../other/checkpoints/step-000040`) is refused
/// by name: another run's weights must never pass for this run's.
pub fn latest(run_dir: &Path) -> Result<Option<PathBuf>> {
    let base = run_dir.join(CHECKPOINTS);
    let named = std::fs::read_to_string(base.join("latest"))
        .ok()
        .map(|n| n.trim().to_string())
        .filter(|n| !n.is_empty());
    let Some(name) = named else {
        return Ok(kept_checkpoints(&base).pop().map(|n| base.join(n)));
    };
    let dir = base.join(&name);
    if !is_step_name(&name) || !is_inside(&base, &dir) {
        return Err(tp_harness::error::user(format!(
            "{} names `{name}`, which is not a checkpoint of this run (only a step-N directory inside {} is); write one of this run's into it ({})",
            base.join("latest").display(),
            base.display(),
            kept_list(&base)
        )));
    }
    if !dir.is_dir() {
        return Err(corrupt(
            &dir,
            "`latest` names a checkpoint that does not exist",
        ));
    }
    Ok(Some(dir))
}

/// `step-` and digits: the only names a checkpoint directory has.
fn is_step_name(name: &str) -> bool {
    name.strip_prefix("step-")
        .is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
}

/// Whether `dir` is, after symbolic links are followed, a directory directly inside
/// `base` (a link pointing out of the run does not count).
pub fn is_inside(base: &Path, dir: &Path) -> bool {
    match (base.canonicalize(), dir.canonicalize()) {
        (Ok(b), Ok(d)) => d.parent() == Some(b.as_path()),
        // Not there (yet): judged by its name alone.
        _ => dir.parent() == Some(base),
    }
}

/// The names of the complete checkpoints in `base` (those with their meta), oldest first.
fn kept_checkpoints(base: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(base) else {
        return Vec::new();
    };
    let mut names: Vec<String> = entries
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| is_step_name(n) && base.join(n).join(META_FILE).is_file())
        .collect();
    names.sort();
    names
}

/// `kept: step-000010, step-000020`, or that none is.
fn kept_list(base: &Path) -> String {
    let kept = kept_checkpoints(base);
    if kept.is_empty() {
        "none is kept".into()
    } else {
        format!("kept: {}", kept.join(", "))
    }
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

/// A checkpoint's `meta.json` of any format this build reads: formats 1 and 2 kept each
/// parameter's kind as free text, dropped here (it is informational).
fn read_meta(bytes: &[u8]) -> serde_json::Result<CheckpointMeta> {
    let mut value: serde_json::Value = serde_json::from_slice(bytes)?;
    if value["format"].as_u64().is_some_and(|f| f < 3) {
        if let Some(params) = value["params"].as_array_mut() {
            for p in params.iter_mut().filter_map(|p| p.as_object_mut()) {
                p.remove("kind");
            }
        }
    }
    let mut meta: CheckpointMeta = serde_json::from_value(value)?;
    meta.config = meta.config.as_stored();
    Ok(meta)
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
        let meta = read_meta(&meta_bytes).map_err(|e| corrupt(dir, format!("{META_FILE}: {e}")))?;
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

    /// The checkpoint must be of the run `cfg` describes: exactly its model and data
    /// (every model key equal) and its seed (which keys its batches and dropout masks: a
    /// checkpoint of the same model with another seed is another run's). Says what
    /// differs.
    pub fn check_matches(&self, cfg: &RunConfig) -> Result<()> {
        let as_map = |c: &RunConfig| {
            let mut m = match serde_json::to_value(&c.model) {
                Ok(serde_json::Value::Object(m)) => m,
                _ => serde_json::Map::new(),
            };
            m.insert("seed".into(), c.optim.seed.into());
            m
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
            tp_harness::user_bail!(
                "checkpoint {} does not match this run: {}",
                self.dir.display(),
                diffs.join(", ")
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tp_harness::tp::{ParamKind, Shard};

    fn meta_json(format: u32, kinds: &[serde_json::Value]) -> Vec<u8> {
        let params: Vec<_> = kinds
            .iter()
            .map(|k| serde_json::json!({"name": "w", "shape": [2, 3], "kind": k}))
            .collect();
        let meta = serde_json::json!({
            "format": format, "step": 5, "config": RunConfig::default(), "adam_steps": 5,
            "best_val_loss": null, "data_step": 5, "rng": "seed", "params": params,
        });
        serde_json::to_vec(&meta).unwrap()
    }

    #[test]
    fn parameter_kinds_are_typed_in_format_3_and_dropped_from_older_free_text() {
        let typed = [
            serde_json::json!({"sharded": {"columns": {"groups": 3}}}),
            serde_json::json!({"sharded": "padded_rows"}),
            serde_json::json!("replicated-partial-grad"),
        ];
        let kinds: Vec<_> = read_meta(&meta_json(3, &typed))
            .unwrap()
            .params
            .into_iter()
            .map(|p| p.kind)
            .collect();
        assert_eq!(
            kinds,
            [
                Some(ParamKind::Sharded(Shard::Columns { groups: 3 })),
                Some(ParamKind::Sharded(Shard::PaddedRows)),
                Some(ParamKind::ReplicatedPartial)
            ]
        );
        assert_eq!(
            serde_json::to_value(ParamKind::Sharded(Shard::Rows)).unwrap(),
            serde_json::json!({"sharded": "rows"})
        );
        let old = read_meta(&meta_json(2, &[serde_json::json!("sharded")])).unwrap();
        assert_eq!(old.params[0].kind, None);
        assert!(read_meta(&meta_json(3, &[serde_json::json!("sharded")])).is_err());
    }
}
