//! Resolving a config from layers of overrides: a preset's defaults, then a YAML file,
//! then flags, then `--set key=value`, each override checked on its own so that an error
//! names the key and where it came from.

use super::RunConfig;
use anyhow::Result;
use serde_yaml_ng::{Mapping, Value};
use std::path::Path;
use tp_harness::error::user;
use tp_harness::user_bail;

/// Where an override came from, for error messages.
#[derive(Debug, Clone)]
pub enum Origin {
    File(String),
    Flag(String),
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Origin::File(p) => write!(f, "in {p}"),
            Origin::Flag(s) => write!(f, "in {s}"),
        }
    }
}

/// A config key, its value and where it was given.
pub type Override = (String, Value, Origin);

/// Parses `key=value` (value as a YAML scalar: `12`, `1e-3`, `true`, `sppp`).
pub fn parse_assignment(s: &str) -> Result<(String, Value)> {
    let Some((k, v)) = s.split_once('=') else {
        user_bail!("--set expects key=value, got `{s}`");
    };
    let value =
        serde_yaml_ng::from_str::<Value>(v).unwrap_or_else(|_| Value::String(v.to_string()));
    Ok((k.trim().to_string(), value))
}

/// Reads a YAML config file into key/value overrides.
pub fn read_config_file(path: &Path) -> Result<Vec<(String, Value, Origin)>> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| user(format!("cannot read config {}: {e}", path.display())))?;
    let value: Value = serde_yaml_ng::from_str(&text)
        .map_err(|e| user(format!("config {} is not valid YAML: {e}", path.display())))?;
    let mut map = match value {
        Value::Mapping(m) => m,
        Value::Null => Mapping::new(),
        _ => user_bail!(
            "config {} must be a mapping of keys to values",
            path.display()
        ),
    };
    super::run_config::take_format_version(&mut map, &path.display().to_string())?;
    map.into_iter()
        .map(|(k, v)| match k {
            Value::String(k) => Ok((k, v, Origin::File(path.display().to_string()))),
            other => user_bail!("config {}: key {other:?} is not a string", path.display()),
        })
        .collect()
}

/// Resolves the configuration: preset defaults, then `overrides` in order.
/// `n_layer` defaults to the pattern's length; if both are given they must agree.
pub fn resolve(overrides: &[(String, Value, Origin)]) -> Result<RunConfig> {
    check_known(overrides)?;
    let last = |key: &str| overrides.iter().rev().find(|(k, _, _)| k == key);
    let preset_name = match last("preset") {
        Some((_, Value::String(s), _)) => s.clone(),
        Some((_, v, origin)) => {
            user_bail!("config key `preset` {origin}: expected a preset name, got {v:?}")
        }
        None => "mini".to_string(),
    };
    let mut cfg = apply(&RunConfig::for_preset(&preset_name)?, overrides)?;
    if last("n_layer").is_none() {
        cfg.model.arch.n_layer = cfg.layout().n_layer();
    }
    cfg.validate()?;
    choose_text_tokenizer(&mut cfg);
    Ok(cfg)
}

/// A new run on a `text` corpus that does not say how to tokenize it: by character if
/// the corpus is under `CHAR_TEXT_MAX_BYTES`, else GPT-2's BPE — written into its
/// config, so that every later reader (a resume, tp-sample, tp-export) agrees.
fn choose_text_tokenizer(cfg: &mut RunConfig) {
    use crate::data::{TextTokenizer, CHAR_TEXT_MAX_BYTES, TEXT};
    let m = &mut cfg.model;
    if m.dataset != TEXT || m.text_tokenizer.is_some() {
        return;
    }
    let Some(path) = &m.text_path else { return };
    fn bytes(p: &Path, depth: usize) -> u64 {
        match std::fs::metadata(p) {
            Ok(md) if md.is_file() => md.len(),
            Ok(md) if md.is_dir() && depth > 0 => std::fs::read_dir(p)
                .into_iter()
                .flatten()
                .flatten()
                .map(|e| bytes(&e.path(), depth - 1))
                .sum(),
            _ => 0,
        }
    }
    m.text_tokenizer = Some(match bytes(Path::new(path), 8) < CHAR_TEXT_MAX_BYTES {
        true => TextTokenizer::Char,
        false => TextTokenizer::Gpt2,
    });
}

/// The configuration of a resumed run: the run's own, with `overrides` (e.g. a larger
/// `max_iters`, another tp) applied. Model keys cannot change.
pub fn resolve_resume(
    base: &RunConfig,
    overrides: &[(String, Value, Origin)],
) -> Result<RunConfig> {
    check_known(overrides)?;
    let model_keys = RunConfig::model_keys();
    if let Some((k, _, origin)) = overrides.iter().find(|(k, _, _)| model_keys.contains(k)) {
        user_bail!("`{k}` {origin} cannot change when resuming: the checkpoint holds the run's model; start a new run for another {k}");
    }
    let cfg = apply(base, overrides)?;
    // What the TP sums travel in is part of what the run computes (int8 sums round
    // every activation they carry): a run whose steps summed in two formats would have
    // one config.yaml and one comm.json claiming either for all of them.
    if cfg.parallel.comm_dtype != base.parallel.comm_dtype {
        user_bail!(
            "comm_dtype cannot change when resuming: this run's steps so far summed in {}; start a new run from its weights for {} sums (tp-train --init-from RUN --set comm_dtype={})",
            base.parallel.comm_dtype.label(),
            cfg.parallel.comm_dtype.label(),
            cfg.parallel.comm_dtype.label()
        );
    }
    cfg.validate()?;
    Ok(cfg)
}

fn check_known(overrides: &[(String, Value, Origin)]) -> Result<()> {
    let known = RunConfig::known_keys();
    for (k, _, origin) in overrides {
        if !known.iter().any(|x| x == k) {
            user_bail!(
                "unknown config key `{k}` {origin}; known keys: {}",
                known.join(", ")
            );
        }
    }
    Ok(())
}

fn apply(base: &RunConfig, overrides: &[(String, Value, Origin)]) -> Result<RunConfig> {
    let Value::Mapping(mut map) = serde_yaml_ng::to_value(base)? else {
        unreachable!("a struct serialises to a mapping")
    };
    for (k, v, origin) in overrides {
        // Check each value's type on its own so the error names the key and its origin.
        let mut probe = map.clone();
        probe.insert(Value::String(k.clone()), v.clone());
        if let Err(e) = serde_yaml_ng::from_value::<RunConfig>(Value::Mapping(probe)) {
            let msg = e.to_string();
            user_bail!(
                "config key `{k}` {origin}: {}",
                msg.trim_start_matches(&format!("{k}: "))
            );
        }
        map.insert(Value::String(k.clone()), v.clone());
    }
    serde_yaml_ng::from_value(Value::Mapping(map)).map_err(user)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flag(k: &str, v: &str) -> (String, Value, Origin) {
        let (k2, v2) = parse_assignment(&format!("{k}={v}")).unwrap();
        (k2, v2, Origin::Flag(format!("--set {k}={v}")))
    }

    #[test]
    fn defaults_are_the_seed_experiment() {
        let c = resolve(&[]).unwrap();
        assert_eq!(
            (
                c.model.preset.as_str(),
                c.model.pattern.as_str(),
                c.parallel.tp,
                c.model.arch.n_layer
            ),
            ("mini", "sppp", 2, 4)
        );
        assert_eq!(
            (
                c.optim.learning_rate,
                c.optim.min_lr,
                c.optim.warmup_iters,
                c.optim.beta2
            ),
            (1e-3, 1e-4, 100, 0.99)
        );
        assert_eq!(
            (
                c.optim.weight_decay,
                c.optim.grad_clip,
                c.optim.batch_size,
                c.optim.max_iters
            ),
            (0.1, 1.0, 12, 2000)
        );
        assert_eq!(
            (
                c.eval.eval_interval,
                c.eval.eval_iters,
                c.model.dataset.as_str()
            ),
            (250, 20, "shakespeare_char")
        );
    }

    #[test]
    fn n_layer_follows_the_pattern_unless_given_and_then_must_agree() {
        let c = resolve(&[flag("pattern", "3xsppp")]).unwrap();
        assert_eq!(c.model.arch.n_layer, 12);
        let e = resolve(&[flag("pattern", "3xsppp"), flag("n_layer", "4")])
            .unwrap_err()
            .to_string();
        assert!(e.contains("12 layers") && e.contains("n_layer is 4"), "{e}");
    }

    #[test]
    fn unknown_keys_and_wrong_types_name_the_key_and_origin() {
        let e = resolve(&[flag("learning_rat", "1")])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("unknown config key `learning_rat`") && e.contains("--set"),
            "{e}"
        );
        let e = resolve(&[flag("batch_size", "many")])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("`batch_size`") && e.contains("--set batch_size=many"),
            "{e}"
        );
        assert!(!e.contains('\n'), "{e}");
    }

    #[test]
    fn sizes_that_do_not_divide_by_tp_are_errors() {
        let e = resolve(&[flag("tp", "3")]).unwrap_err().to_string();
        assert!(e.contains("n_head 4 is not divisible by tp 3"), "{e}");
    }

    #[test]
    fn resolved_config_round_trips_through_yaml() {
        let c = resolve(&[flag("pattern", "tstt"), flag("dropout", "0.1")]).unwrap();
        let back = RunConfig::from_yaml(&c.to_yaml().unwrap(), "config.yaml").unwrap();
        assert_eq!(back, c);
    }
}
