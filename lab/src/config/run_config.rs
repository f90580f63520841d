//! The run configuration's parts and the whole: each part one job, all read and written
//! flat. Defaults (per preset) are in `defaults`, checks in `validate`, resolution from
//! overrides in `overrides`.

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use serde_yaml_ng::{Mapping, Value};
use tp_harness::blocks::BlockLayout;
use tp_harness::comm::{CommDtype, LinkModel};
use tp_harness::device::{ComputeDtype, DeviceKind, Kernels};
use tp_harness::error::user;
use tp_harness::model::ModelConfig;
use tp_harness::ops::cpu::gemm::route::Matmul;
use tp_harness::train::bucket_cap::BucketCap;

/// What model on what data: the keys a checkpoint is tied to (they cannot change on
/// resume). The model's own keys are [`ModelConfig`]'s fields.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ModelPart {
    pub preset: String,
    /// The block layout (`sppp`, `3xsppp`), parsed when the config is read: its length
    /// is the layer count.
    pub pattern: BlockLayout,
    pub dataset: String,
    /// For `dataset: text`: a UTF-8 file or a folder of them.
    pub text_path: Option<String>,
    /// For `dataset: text`: `char` or `gpt2`. Unset in a new run, it is resolved when the
    /// run starts (char for a corpus under `CHAR_TEXT_MAX_BYTES`, else gpt2) and written
    /// into the run's config; unset in a stored config it is gpt2, what every text run
    /// used before the key existed.
    #[serde(default)]
    pub text_tokenizer: Option<crate::data::TextTokenizer>,
    #[serde(flatten)]
    pub arch: ModelConfig,
}

impl ModelPart {
    /// The model keys set away from the preset's, as `key value (preset: value)`, so a
    /// banner naming the preset does not pass for its model when a key was overridden.
    pub fn changed_from_preset(&self) -> Vec<String> {
        let Ok(p) = super::presets::preset(&self.preset) else {
            return Vec::new();
        };
        let mut base = p.model();
        if p.vocab_size.is_none() {
            base.vocab_size = self.arch.vocab_size; // the dataset's, not a choice
        }
        let (Ok(Value::Mapping(now)), Ok(Value::Mapping(was))) = (
            serde_yaml_ng::to_value(&self.arch),
            serde_yaml_ng::to_value(&base),
        ) else {
            return Vec::new();
        };
        let plain = |v: &Value| match v {
            Value::String(s) => s.clone(),
            v => serde_yaml_ng::to_string(v)
                .unwrap_or_default()
                .trim()
                .to_string(),
        };
        now.iter()
            .filter(|(k, v)| was.get(k) != Some(v))
            .map(|(k, v)| {
                let before = was.get(k).map_or("none".to_string(), plain);
                format!("{} {} ({}: {before})", plain(k), plain(v), self.preset)
            })
            .collect()
    }
}

/// The optimiser (AdamW with a cosine schedule and clipping) and the batches it sees.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct OptimConfig {
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
    /// Global gradient-norm clip (0: none).
    pub grad_clip: f64,
    pub dropout: f64,
    /// Seeds the initial weights, the batch streams and the dropout masks.
    pub seed: u64,
    /// Start a new run from the latest checkpoint of this run directory instead of a
    /// seeded init (same model shape and data; the pattern may differ: t -> s keeps every
    /// parameter, -> p leaves `o.b`/`pr.b` out). Fresh optimiser state and schedule.
    pub init_from: Option<String>,
}

/// How the work is split and on what it runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ParallelConfig {
    pub tp: usize,
    pub dp: usize,
    /// Emulated interconnect: every collective takes at least the ring all-reduce time on
    /// this link (0 and 0: no emulation).
    pub link_gbps: f64,
    pub link_latency_us: f64,
    /// `fused` CPU kernels or `portable` candle ops (other devices: always portable).
    pub kernels: Kernels,
    /// What computes the fused CPU kernels' products: `gemm` (the gemm crate: no system
    /// package, the same bits at any thread count) or `blas` (MKL, else OpenBLAS, found
    /// at run time; `TP_BLAS` names another). Absent in older configs: gemm.
    pub matmul: Matmul,
    /// `cpu` or `cuda` (the CUDA build).
    pub device: DeviceKind,
    /// `f32` or `bf16` passes (master weights, gradients, moments and loss stay f32).
    pub dtype: ComputeDtype,
    /// TF32 matmuls for f32 passes on GPUs (faster, less exact; off by default).
    pub tf32: bool,
    /// Shard the tied embedding/head by vocabulary over the TP group (Megatron's
    /// vocab-parallel embedding and cross-entropy). The same function and the same
    /// logical checkpoint either way: it can change on resume.
    pub vocab_parallel: bool,
    /// What the TP activation and activation-gradient all-reduces travel in: `f32`
    /// (exact), or compressed `bf16`, `fp8`, `int8` (blocks.md's two-step all-reduce).
    pub comm_dtype: CommDtype,
    /// Start the gradient sums (data-parallel means, TP sums of partial gradients) bucket
    /// by bucket during backprop, as PyTorch's DDP and Megatron's `overlap_grad_reduce`
    /// do, instead of in one bucket after it. The same sums, the same bits.
    pub overlap_grad_reduce: bool,
    /// The size of those buckets: `auto` (the default) sizes them for the model, a
    /// number is MiB (PyTorch's `bucket_cap_mb`, 25 there): smaller buckets start sooner
    /// and hide more on small models, at one collective each.
    pub ddp_bucket_mb: BucketCap,
}

/// Evaluation, logging and the closing sample.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct EvalConfig {
    /// Evaluate every this many steps and at the end (0: never).
    pub eval_interval: usize,
    pub eval_iters: usize,
    pub log_interval: usize,
    /// Tokens of the closing sample (0: none), drawn with this temperature and top-k
    /// (0: all tokens).
    pub sample_tokens: usize,
    pub sample_temperature: f64,
    pub sample_top_k: usize,
    /// How a run's final validation loss is measured: `full` (every token of the split,
    /// deterministic; written as eval.json) or `sampled` (the last `eval_iters` batches).
    pub final_eval: FinalEval,
    /// Write TensorBoard event files as the run trains (every `log_interval`): losses,
    /// learning rate, gradient norm, speed and communication per step by kind.
    pub tensorboard: bool,
    /// Where (default: `RUN/tb`); a folder named here gets one subfolder per run
    /// (named as the run directory), so the runs that share it overlay.
    pub tensorboard_dir: Option<String>,
    /// Write `trace.json`: every rank's timeline of `trace_steps` steps from
    /// `trace_start` (compute, waits, each collective with its hidden window), in Chrome's
    /// trace event format (Perfetto, chrome://tracing; `tp-plot --timeline RUN`).
    pub trace: bool,
    pub trace_start: usize,
    pub trace_steps: usize,
}

/// See [`EvalConfig::final_eval`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinalEval {
    #[default]
    Full,
    Sampled,
}

/// Every `checkpoint_interval` steps (0: only at the end) and at the end; the newest
/// `keep_checkpoints` are kept (0: all).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct CheckpointConfig {
    pub checkpoint_interval: usize,
    pub keep_checkpoints: usize,
}

/// A whole run's configuration. Missing keys take the `mini` defaults, so run
/// directories written before a key existed still load.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RunConfig {
    #[serde(flatten)]
    pub model: ModelPart,
    #[serde(flatten)]
    pub optim: OptimConfig,
    #[serde(flatten)]
    pub parallel: ParallelConfig,
    #[serde(flatten)]
    pub eval: EvalConfig,
    #[serde(flatten)]
    pub checkpoints: CheckpointConfig,
}

/// The format of a run directory's `config.yaml`, its first key (`format_version`): a
/// config of a newer format is refused in one line; 1 (no key) is from before it was kept
/// and reads as it is. A config file given by hand may carry it or not.
pub const CONFIG_FORMAT: u32 = 2;
const FORMAT_KEY: &str = "format_version";

/// Takes `format_version` out of a config's mapping, refusing a format newer than this
/// build reads.
pub fn take_format_version(map: &mut Mapping, what: &str) -> Result<()> {
    let Some(v) = map.remove(FORMAT_KEY) else {
        return Ok(());
    };
    let shown = serde_yaml_ng::to_string(&v).unwrap_or_default();
    // A whole number from 1 (not text, a fraction, a negative or null: those are damage,
    // never a format of their own).
    match v.as_u64().filter(|f| *f >= 1 && matches!(v, Value::Number(_))) {
        Some(f) if f <= u64::from(CONFIG_FORMAT) => Ok(()),
        Some(_) => tp_harness::user_bail!(
            "{what} is of config format {}, newer than this build reads (up to {CONFIG_FORMAT}): use the tp-harness that wrote it, or a newer one",
            shown.trim()
        ),
        None => tp_harness::user_bail!(
            "{what} has format_version {}, which is not a format number (a whole number from 1): the file is damaged or not a tp-harness config",
            shown.trim()
        ),
    }
}

/// The keys of a serialised part, in order.
fn keys_of(v: impl Serialize) -> Vec<String> {
    match serde_yaml_ng::to_value(v) {
        Ok(Value::Mapping(m)) => m
            .keys()
            .filter_map(|k| k.as_str().map(String::from))
            .collect(),
        _ => Vec::new(),
    }
}

/// Keys that change how a step's gradient sums are cut and scheduled but not one bit of
/// what it computes (tests/it/overlapped_grads.rs trains both ways to the same bits,
/// threads and mpirun). Runs apart only in them are replicates, and a sweep takes one
/// for the other: the default bucket size changed from 25 MiB to `auto`, and a study
/// resumed across that change keeps its runs and its groups.
pub const SAME_BITS_KEYS: &[&str] = &["ddp_bucket_mb", "overlap_grad_reduce"];

impl RunConfig {
    /// [`RunConfig::differences`] less the [`SAME_BITS_KEYS`]: what makes the two
    /// compute other numbers.
    pub fn computes_otherwise(&self, other: &RunConfig) -> Vec<(String, String, String)> {
        let mut d = self.differences(other);
        d.retain(|(k, _, _)| !SAME_BITS_KEYS.contains(&k.as_str()));
        d
    }

    /// The keys whose values differ between this config and `other`: (key, this one's
    /// value, the other's), each key once, as config.yaml writes them.
    pub fn differences(&self, other: &RunConfig) -> Vec<(String, String, String)> {
        let map = |c: &RunConfig| match serde_yaml_ng::to_value(c) {
            Ok(Value::Mapping(m)) => m,
            _ => Default::default(),
        };
        let text = |v: Option<&Value>| match v {
            Some(Value::String(s)) => s.clone(),
            Some(v) => serde_yaml_ng::to_string(v)
                .unwrap_or_default()
                .trim()
                .to_string(),
            None => "unset".into(),
        };
        let (a, b) = (map(self), map(other));
        let keys: Vec<&Value> = a.keys().chain(b.keys()).collect();
        let mut out: Vec<(String, String, String)> = Vec::new();
        for k in keys {
            let (x, y) = (a.get(k), b.get(k));
            let name = text(Some(k));
            if x != y && !out.iter().any(|(n, _, _)| *n == name) {
                out.push((name, text(x), text(y)));
            }
        }
        out
    }

    /// Every config key, in the order config.yaml lists them.
    pub fn known_keys() -> Vec<String> {
        keys_of(Self::default())
    }

    /// The keys that fix the model or its data: a checkpoint only fits a run with the
    /// same values (derived from [`ModelPart`], so a new model key is one automatically).
    pub fn model_keys() -> Vec<String> {
        keys_of(Self::default().model)
    }

    pub fn layout(&self) -> &BlockLayout {
        &self.model.pattern
    }

    /// The pattern, with `+int8` (`+fp8`, `+bf16`) when its TP all-reduces travel
    /// compressed: what tables and legends call a run, and how link-calibration.sh names
    /// what it measured.
    pub fn variant(&self) -> super::Variant {
        super::Variant::of_layout(self.layout(), self.parallel.comm_dtype)
    }

    pub fn link(&self) -> Option<LinkModel> {
        LinkModel::from_config(self.parallel.link_gbps, self.parallel.link_latency_us)
    }

    pub fn lr_decay_iters(&self) -> usize {
        self.optim.lr_decay_iters.unwrap_or(self.optim.max_iters)
    }

    /// Tokens consumed by one optimiser step over all data-parallel ranks.
    pub fn tokens_per_step(&self) -> usize {
        self.optim.batch_size
            * self.model.arch.block_size
            * self.optim.gradient_accumulation_steps
            * self.parallel.dp
    }

    /// Windows drawn for one optimiser step over all data-parallel ranks.
    pub fn global_batch(&self) -> usize {
        self.optim.batch_size * self.optim.gradient_accumulation_steps * self.parallel.dp
    }

    /// The model this run trains on data with `dataset_vocab` tokens.
    pub fn model_config(&self, dataset_vocab: usize) -> Result<ModelConfig> {
        let mut m = self.model.arch.clone();
        match m.vocab_size {
            0 => m.vocab_size = dataset_vocab,
            v if v < dataset_vocab => tp_harness::user_bail!(
                "vocab_size {v} is smaller than the dataset's {dataset_vocab} tokens: raise it or leave it unset"
            ),
            _ => {}
        }
        m.kernels = self.parallel.kernels;
        m.dtype = self.parallel.dtype;
        m.vocab_parallel = self.parallel.vocab_parallel;
        Ok(m)
    }

    /// The config as `config.yaml` holds it, its format first.
    pub fn to_yaml(&self) -> Result<String> {
        let Value::Mapping(keys) = serde_yaml_ng::to_value(self)? else {
            unreachable!("a struct serialises to a mapping")
        };
        let mut stamped = Mapping::new();
        stamped.insert(FORMAT_KEY.into(), CONFIG_FORMAT.into());
        stamped.extend(keys);
        Ok(serde_yaml_ng::to_string(&stamped)?)
    }

    /// Reads a config written by [`Self::to_yaml`] (or by hand): unknown keys are errors
    /// (`flatten` cannot deny them itself), missing keys take the defaults.
    pub fn from_yaml(text: &str, what: &str) -> Result<Self> {
        let mut value: Value = serde_yaml_ng::from_str(text)
            .with_context(|| format!("{what} is not valid YAML"))
            .map_err(|e| user(format!("{e:#}")))?;
        if let Value::Mapping(m) = &mut value {
            take_format_version(m, what)?;
            let known = Self::known_keys();
            if let Some(k) = m
                .keys()
                .filter_map(|k| k.as_str())
                .find(|k| !known.iter().any(|x| x == k))
            {
                tp_harness::user_bail!("{what} has an unknown key `{k}`");
            }
        }
        serde_yaml_ng::from_value(value)
            .map(Self::as_stored)
            .map_err(|e| user(format!("{what} is not a valid run config: {e}")))
    }

    /// A stored config read with the defaults of its time: a `text` run without
    /// `text_tokenizer` was tokenized with GPT-2's BPE (the only way before the key).
    pub fn as_stored(mut self) -> Self {
        if self.model.dataset == crate::data::TEXT && self.model.text_tokenizer.is_none() {
            self.model.text_tokenizer = Some(crate::data::TextTokenizer::Gpt2);
        }
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_model_key_set_away_from_the_preset_is_named_with_the_presets_value() {
        let mut cfg = RunConfig::default();
        cfg.model.arch.vocab_size = 65; // the dataset's: not a change
        assert!(cfg.model.changed_from_preset().is_empty());
        cfg.model.arch.n_embd = 64;
        assert_eq!(cfg.model.changed_from_preset(), ["n_embd 64 (mini: 128)"]);
    }

    #[test]
    fn config_yaml_starts_with_its_format_and_a_newer_format_is_one_line() {
        let cfg = RunConfig::default();
        let text = cfg.to_yaml().unwrap();
        assert!(text.starts_with("format_version: 2\n"), "{text}");
        assert_eq!(RunConfig::from_yaml(&text, "config.yaml").unwrap(), cfg);
        let unstamped = text.replace("format_version: 2\n", "");
        assert_eq!(
            RunConfig::from_yaml(&unstamped, "config.yaml").unwrap(),
            cfg
        );
        let newer = text.replace("format_version: 2", "format_version: 7");
        let e = RunConfig::from_yaml(&newer, "run/config.yaml").unwrap_err();
        let msg = format!("{e:#}");
        assert!(
            msg.contains("run/config.yaml is of config format 7"),
            "{msg}"
        );
        assert!(!msg.contains('\n'), "{msg}");
        // Damage is not a format: never "newer", never read as another format.
        for bad in ["-1", "~", "\"99\"", "99.5", "0"] {
            let damaged = text.replace("format_version: 2", &format!("format_version: {bad}"));
            let msg = format!(
                "{:#}",
                RunConfig::from_yaml(&damaged, "c.yaml").unwrap_err()
            );
            assert!(msg.contains("is not a format number"), "{bad}: {msg}");
        }
    }

    #[test]
    fn differing_keys_name_each_key_once_with_both_values() {
        let a = RunConfig::default();
        let mut b = a.clone();
        b.optim.max_iters = a.optim.max_iters + 100;
        b.model.pattern = tp_harness::blocks::BlockLayout::parse("tttt").unwrap();
        let d = a.differences(&b);
        let names: Vec<&str> = d.iter().map(|(k, _, _)| k.as_str()).collect();
        assert_eq!(names, ["pattern", "max_iters"], "{d:?}");
        assert_eq!(d[1].2, (a.optim.max_iters + 100).to_string());
    }

    /// Configs hold `ddp_bucket_mb: auto` or a number, and nothing else.
    #[test]
    fn a_config_holds_auto_or_a_number_of_mib() {
        let read = |y: &str| serde_yaml_ng::from_str::<BucketCap>(y);
        assert_eq!(read("auto").unwrap(), BucketCap::Auto);
        assert_eq!(read("0.5").unwrap(), BucketCap::Mib(0.5));
        assert_eq!(read("25").unwrap(), BucketCap::Mib(25.0));
        let e = read("big").unwrap_err().to_string();
        assert!(e.contains("`auto` or a number of MiB, got `big`"), "{e}");
        for cap in [BucketCap::Auto, BucketCap::Mib(1.5)] {
            let yaml = serde_yaml_ng::to_string(&cap).unwrap();
            assert_eq!(read(&yaml).unwrap(), cap, "{yaml}");
        }
    }
}
