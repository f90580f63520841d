//! The run configuration: nanoGPT's key names plus `pattern`, `tp`, `dp`, resolved from a
//! preset, an optional YAML file and command-line overrides (in that order). Unknown keys
//! and wrong types are errors that name the key and where it came from.

use crate::blocks::Layout;
use crate::error::user;
use crate::model::{preset, ModelConfig};
use crate::ops::{Activation, NormKind};
use crate::user_bail;
use anyhow::Result;
use serde::{Deserialize, Serialize};
use serde_yaml_ng::{Mapping, Value};
use std::path::Path;

/// Missing keys take the `mini` defaults, so run directories written before a key
/// existed still load.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RunConfig {
    // What to run.
    pub preset: String,
    pub pattern: String,
    pub tp: usize,
    pub dp: usize,
    pub dataset: String,
    // Model.
    pub n_layer: usize,
    pub n_head: usize,
    pub n_embd: usize,
    pub block_size: usize,
    /// `null`: the dataset's vocabulary size.
    pub vocab_size: Option<usize>,
    pub bias: bool,
    pub dropout: f64,
    pub norm: NormKind,
    pub activation: Activation,
    // Optimisation.
    pub batch_size: usize,
    pub gradient_accumulation_steps: usize,
    pub max_iters: usize,
    pub learning_rate: f64,
    pub min_lr: f64,
    pub warmup_iters: usize,
    /// `null`: max_iters.
    pub lr_decay_iters: Option<usize>,
    pub decay_lr: bool,
    pub weight_decay: f64,
    pub beta1: f64,
    pub beta2: f64,
    pub adam_eps: f64,
    pub grad_clip: f64,
    // Evaluation, logging, sampling.
    pub eval_interval: usize,
    pub eval_iters: usize,
    pub log_interval: usize,
    pub sample_tokens: usize,
    pub seed: u64,
    // Checkpoints: every `checkpoint_interval` steps (0: only at the end) and at the end;
    // the newest `keep_checkpoints` are kept (0: all).
    pub checkpoint_interval: usize,
    pub keep_checkpoints: usize,
    /// For `dataset: text`: a UTF-8 file or a folder of them, tokenized with GPT-2's BPE.
    pub text_path: Option<String>,
    // Emulated interconnect: every collective takes at least the ring all-reduce time on
    // this link (0 and 0: no emulation).
    pub link_gbps: f64,
    pub link_latency_us: f64,
}

impl Default for RunConfig {
    fn default() -> Self {
        Self::for_preset("mini").expect("the mini preset exists")
    }
}

impl RunConfig {
    /// Defaults of a preset: its model, and the seed experiment's optimiser settings.
    pub fn for_preset(name: &str) -> Result<Self> {
        let p = preset(name).map_err(user)?;
        let mut c = Self {
            preset: p.name.into(),
            pattern: p.pattern.into(),
            tp: 2,
            dp: 1,
            dataset: p.dataset.into(),
            n_layer: p.n_layer,
            n_head: p.n_head,
            n_embd: p.n_embd,
            block_size: p.block_size,
            vocab_size: p.vocab_size,
            bias: p.bias,
            dropout: 0.0,
            norm: p.norm,
            activation: p.activation,
            batch_size: 12,
            gradient_accumulation_steps: 1,
            max_iters: 2000,
            learning_rate: 1e-3,
            min_lr: 1e-4,
            warmup_iters: 100,
            lr_decay_iters: None,
            decay_lr: true,
            weight_decay: 0.1,
            beta1: 0.9,
            beta2: 0.99,
            adam_eps: 1e-8,
            grad_clip: 1.0,
            eval_interval: 250,
            eval_iters: 20,
            log_interval: 10,
            sample_tokens: 300,
            seed: 1337,
            checkpoint_interval: 500,
            keep_checkpoints: 3,
            text_path: None,
            link_gbps: 0.0,
            link_latency_us: 0.0,
        };
        if p.name == "baby" {
            // nanoGPT's shakespeare_char "baby GPT" batch.
            c.batch_size = 64;
        }
        if p.name == "micro" {
            // microgpt's optimiser: a higher rate for a tiny model.
            c.learning_rate = 1e-2;
            c.min_lr = 1e-3;
            c.beta1 = 0.85;
            c.batch_size = 32;
            c.max_iters = 1000;
            c.warmup_iters = 20;
            c.weight_decay = 0.0;
        }
        Ok(c)
    }

    pub fn known_keys() -> Vec<String> {
        match serde_yaml_ng::to_value(Self::for_preset("mini").expect("mini preset")) {
            Ok(Value::Mapping(m)) => m
                .keys()
                .filter_map(|k| k.as_str().map(String::from))
                .collect(),
            _ => Vec::new(),
        }
    }

    pub fn layout(&self) -> Result<Layout> {
        Layout::parse(&self.pattern).map_err(user)
    }

    pub fn link(&self) -> Option<crate::tp::LinkModel> {
        crate::tp::LinkModel::from_config(self.link_gbps, self.link_latency_us)
    }

    pub fn lr_decay_iters(&self) -> usize {
        self.lr_decay_iters.unwrap_or(self.max_iters)
    }

    /// Tokens consumed by one optimiser step over all data-parallel ranks.
    pub fn tokens_per_step(&self) -> usize {
        self.batch_size * self.block_size * self.gradient_accumulation_steps * self.dp
    }

    pub fn model_config(&self, dataset_vocab: usize) -> Result<ModelConfig> {
        let vocab_size = match self.vocab_size {
            Some(v) if v < dataset_vocab => {
                user_bail!("vocab_size {v} is smaller than the dataset's {dataset_vocab} tokens: raise it or leave it unset")
            }
            Some(v) => v,
            None => dataset_vocab,
        };
        Ok(ModelConfig {
            vocab_size,
            block_size: self.block_size,
            n_layer: self.n_layer,
            n_head: self.n_head,
            n_embd: self.n_embd,
            bias: self.bias,
            norm: self.norm,
            activation: self.activation,
            norm_eps: 1e-5,
            dropout: self.dropout,
        })
    }

    /// Everything that can be checked before data is loaded or a rank starts.
    pub fn validate(&self) -> Result<()> {
        let layout = self.layout()?;
        if layout.n_layer() != self.n_layer {
            user_bail!(
                "pattern \"{}\" has {} layers but n_layer is {}: make them agree (or leave n_layer unset)",
                self.pattern,
                layout.n_layer(),
                self.n_layer
            );
        }
        for (k, v) in [
            ("tp", self.tp),
            ("dp", self.dp),
            ("batch_size", self.batch_size),
            (
                "gradient_accumulation_steps",
                self.gradient_accumulation_steps,
            ),
            ("block_size", self.block_size),
            ("log_interval", self.log_interval),
        ] {
            if v == 0 {
                user_bail!("{k} must be at least 1");
            }
        }
        if self.link_gbps < 0.0 || self.link_latency_us < 0.0 {
            user_bail!("link_gbps and link_latency_us must not be negative");
        }
        if self.eval_interval > 0 && self.eval_iters == 0 {
            user_bail!("eval_iters must be at least 1 when eval_interval is set (or set eval_interval to 0)");
        }
        self.model_config(1)
            .and_then(|m| m.check(self.tp))
            .map_err(user)?;
        Ok(())
    }

    pub fn to_yaml(&self) -> Result<String> {
        Ok(serde_yaml_ng::to_string(self)?)
    }
}

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
    let map = match value {
        Value::Mapping(m) => m,
        Value::Null => Mapping::new(),
        _ => user_bail!(
            "config {} must be a mapping of keys to values",
            path.display()
        ),
    };
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
        cfg.n_layer = cfg.layout()?.n_layer();
    }
    cfg.validate()?;
    Ok(cfg)
}

/// Keys that fix the model or its data: a checkpoint only fits the run that wrote it.
pub const MODEL_KEYS: [&str; 12] = [
    "preset",
    "pattern",
    "n_layer",
    "n_head",
    "n_embd",
    "block_size",
    "vocab_size",
    "bias",
    "norm",
    "activation",
    "dataset",
    "text_path",
];

/// The configuration of a resumed run: the run's own, with `overrides` (e.g. a larger
/// `max_iters`, another tp) applied. Model keys cannot change.
pub fn resolve_resume(
    base: &RunConfig,
    overrides: &[(String, Value, Origin)],
) -> Result<RunConfig> {
    check_known(overrides)?;
    if let Some((k, _, origin)) = overrides
        .iter()
        .find(|(k, _, _)| MODEL_KEYS.contains(&k.as_str()))
    {
        user_bail!("`{k}` {origin} cannot change when resuming: the checkpoint holds the run's model; start a new run for another {k}");
    }
    let cfg = apply(base, overrides)?;
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

/// Reads a run directory's resolved `config.yaml`.
pub fn read_run_config(run_dir: &Path) -> Result<RunConfig> {
    let path = run_dir.join("config.yaml");
    let text = std::fs::read_to_string(&path).map_err(|_| {
        user(format!(
            "{} has no config.yaml: not a tp-harness run directory",
            run_dir.display()
        ))
    })?;
    serde_yaml_ng::from_str(&text)
        .map_err(|e| user(format!("{} is not a valid run config: {e}", path.display())))
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
            (c.preset.as_str(), c.pattern.as_str(), c.tp, c.n_layer),
            ("mini", "sppp", 2, 4)
        );
        assert_eq!(
            (c.learning_rate, c.min_lr, c.warmup_iters, c.beta2),
            (1e-3, 1e-4, 100, 0.99)
        );
        assert_eq!(
            (c.weight_decay, c.grad_clip, c.batch_size, c.max_iters),
            (0.1, 1.0, 12, 2000)
        );
        assert_eq!(
            (c.eval_interval, c.eval_iters, c.dataset.as_str()),
            (250, 20, "shakespeare_char")
        );
    }

    #[test]
    fn n_layer_follows_the_pattern_unless_given_and_then_must_agree() {
        let c = resolve(&[flag("pattern", "3xsppp")]).unwrap();
        assert_eq!(c.n_layer, 12);
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
        let back: RunConfig = serde_yaml_ng::from_str(&c.to_yaml().unwrap()).unwrap();
        assert_eq!(back, c);
    }
}
