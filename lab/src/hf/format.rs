//! Hugging Face's GPT-2 layout (`transformers.GPT2LMHeadModel`), out and in.
//!
//! Our names map one to one: `wte` -> `transformer.wte.weight`, `h.i.qkv.w` ->
//! `transformer.h.i.attn.c_attn.weight`, and so on. Both store linear weights (in, out)
//! (GPT-2's Conv1D), and `c_attn` is [Q | K | V] with heads in order, as ours. The LM head
//! is tied to `wte` and, as `save_pretrained` does, not stored. GPT-2 always has biases:
//! a model trained without them gets zero biases, which compute the same function. Only
//! `t`-only models with LayerNorm are GPT-2; every other model is exported under the same
//! names with its own modelling code (`hf::remote`).
//!
//! Import reads `config.json` and `model.safetensors` (or the shards a
//! `model.safetensors.index.json` lists) as `save_pretrained` writes them, and also the
//! hub's original GPT-2 files, whose names lack the `transformer.` prefix and which carry
//! the attention-mask buffers `attn.bias`/`attn.masked_bias` (not parameters: skipped).

use crate::data::tokenizer::GPT2_EOT;
use anyhow::{Context, Result};
use candle_core::{DType, Tensor};
use std::collections::HashMap;
use tp_harness::blocks::params::layer_prefix;
use tp_harness::blocks::{BlockKind, BlockLayout};
use tp_harness::model::ModelConfig;
use tp_harness::ops::{Activation, NormKind};
use tp_harness::user_bail;

/// (our name, Hugging Face name) for every tensor of an `n_layer` GPT-2.
pub fn name_map(n_layer: usize) -> Vec<(String, String)> {
    let mut v = vec![
        ("wte".to_string(), "transformer.wte.weight".to_string()),
        ("wpe".to_string(), "transformer.wpe.weight".to_string()),
    ];
    for i in 0..n_layer {
        for (ours, hf) in [
            ("ln1.w", "ln_1.weight"),
            ("ln1.b", "ln_1.bias"),
            ("qkv.w", "attn.c_attn.weight"),
            ("qkv.b", "attn.c_attn.bias"),
            ("o.w", "attn.c_proj.weight"),
            ("o.b", "attn.c_proj.bias"),
            ("ln2.w", "ln_2.weight"),
            ("ln2.b", "ln_2.bias"),
            ("fc.w", "mlp.c_fc.weight"),
            ("fc.b", "mlp.c_fc.bias"),
            ("pr.w", "mlp.c_proj.weight"),
            ("pr.b", "mlp.c_proj.bias"),
        ] {
            v.push((
                format!("{}.{ours}", layer_prefix(i)),
                format!("transformer.h.{i}.{hf}"),
            ));
        }
    }
    v.push(("lnf.w".to_string(), "transformer.ln_f.weight".to_string()));
    v.push(("lnf.b".to_string(), "transformer.ln_f.bias".to_string()));
    v
}

/// Whether a model is GPT-2 itself: t-only with LayerNorm and biases (any other is
/// exported with its own modelling code, `hf::remote`).
pub fn is_gpt2(cfg: &ModelConfig, layout: &BlockLayout) -> bool {
    has_gpt2_shape(cfg, layout) && cfg.bias
}

/// Whether GPT-2 can compute a model: t-only with LayerNorm, biases or not. GPT-2 always
/// has biases: a model without them is the same function with zero biases, but those
/// zeros are parameters a fine-tune moves, so it is GPT-2 only when asked
/// (`tp-export --as-gpt2`).
pub fn has_gpt2_shape(cfg: &ModelConfig, layout: &BlockLayout) -> bool {
    layout.kinds.iter().all(|k| *k == BlockKind::T) && cfg.norm == NormKind::Layernorm
}

/// The tensors under GPT-2's names that `keep` keeps, as f32; biases the model was
/// trained without are zeros (the same function).
pub fn hf_tensors(
    weights: &HashMap<String, Tensor>,
    cfg: &ModelConfig,
    keep: impl Fn(&str) -> bool,
) -> Result<HashMap<String, Tensor>> {
    let c = cfg.n_embd;
    let mut out = HashMap::new();
    // Missing biases are made where the weights are.
    let device = weights
        .get("wte")
        .context("the checkpoint lacks `wte`")?
        .device()
        .clone();
    for (ours, hf) in name_map(cfg.n_layer).into_iter().filter(|(o, _)| keep(o)) {
        let t = match weights.get(&ours) {
            Some(t) => t.to_dtype(DType::F32)?.contiguous()?,
            None if ours.ends_with(".b") => {
                let len = if ours.ends_with("qkv.b") {
                    3 * c
                } else if ours.ends_with("fc.b") {
                    4 * c
                } else {
                    c
                };
                Tensor::zeros(len, DType::F32, &device)?
            }
            None => return Err(anyhow::anyhow!("the checkpoint lacks `{ours}`")),
        };
        out.insert(hf, t);
    }
    Ok(out)
}

/// The Hugging Face tensors and `config.json` of a model of GPT-2's shape
/// ([`has_gpt2_shape`]) given by its logical weights; biases it lacks are zeros.
pub fn to_hf(
    weights: &HashMap<String, Tensor>,
    cfg: &ModelConfig,
    layout: &BlockLayout,
) -> Result<(HashMap<String, Tensor>, serde_json::Value)> {
    if !has_gpt2_shape(cfg, layout) {
        user_bail!(
            "pattern {} with {:?} is not GPT-2: export it with its modelling code (hf::remote)",
            layout.pattern,
            cfg.norm
        );
    }
    let out = hf_tensors(weights, cfg, |_| true)?;
    let activation = match cfg.activation {
        Activation::GeluTanh => "gelu_new",
        Activation::Gelu => "gelu",
        Activation::Relu => "relu",
    };
    let eot = (cfg.vocab_size > GPT2_EOT as usize).then_some(GPT2_EOT);
    let config = serde_json::json!({
        "architectures": ["GPT2LMHeadModel"],
        "model_type": "gpt2",
        "vocab_size": cfg.vocab_size,
        "n_positions": cfg.block_size,
        "n_ctx": cfg.block_size,
        "n_embd": cfg.n_embd,
        "n_layer": cfg.n_layer,
        "n_head": cfg.n_head,
        "n_inner": null,
        "activation_function": activation,
        "resid_pdrop": 0.0,
        "embd_pdrop": 0.0,
        "attn_pdrop": 0.0,
        "layer_norm_epsilon": cfg.norm_eps,
        "initializer_range": 0.02,
        "scale_attn_weights": true,
        "tie_word_embeddings": true,
        // GPT-2's <|endoftext|> only exists in a vocabulary that has it: a char-level model
        // has no such token, and an id past its vocabulary makes transformers complain.
        "bos_token_id": eot,
        "eos_token_id": eot,
        "torch_dtype": "float32"
    });
    Ok((out, config))
}

/// The keys of a transformers `GPT2Config` that fix the model (the rest, dropout rates
/// and the like, do not change the function).
#[derive(Debug, Clone, serde::Deserialize)]
struct HfConfig {
    model_type: Option<String>,
    vocab_size: usize,
    n_positions: usize,
    n_embd: usize,
    n_layer: usize,
    n_head: usize,
    n_inner: Option<usize>,
    #[serde(default = "gelu_new")]
    activation_function: String,
    #[serde(default = "default_eps")]
    layer_norm_epsilon: f64,
    #[serde(default = "yes")]
    tie_word_embeddings: bool,
    #[serde(default)]
    scale_attn_by_inverse_layer_idx: bool,
    #[serde(default = "yes")]
    scale_attn_weights: bool,
}

fn gelu_new() -> String {
    "gelu_new".into()
}
fn default_eps() -> f64 {
    1e-5
}
fn yes() -> bool {
    true
}

/// The model a transformers GPT-2 `config.json` describes, or one line saying which of
/// its settings this harness does not compute.
fn model_of(c: &HfConfig) -> Result<ModelConfig> {
    if let Some(t) = c.model_type.as_deref().filter(|t| *t != "gpt2") {
        user_bail!("config.json has model_type `{t}`: only GPT-2 (`gpt2`) imports");
    }
    if c.n_inner.is_some_and(|n| n != 4 * c.n_embd) {
        user_bail!(
            "config.json has n_inner {} but this harness's MLP is 4 x n_embd = {}",
            c.n_inner.unwrap_or(0),
            4 * c.n_embd
        );
    }
    if !c.tie_word_embeddings {
        user_bail!("config.json unties the LM head from wte; the harness's head is tied");
    }
    if c.scale_attn_by_inverse_layer_idx || !c.scale_attn_weights {
        user_bail!("config.json changes the attention scaling (scale_attn_by_inverse_layer_idx / scale_attn_weights); only GPT-2's 1/sqrt(head size) imports");
    }
    let activation = match c.activation_function.as_str() {
        "gelu_new" | "gelu_pytorch_tanh" => Activation::GeluTanh,
        "gelu" => Activation::Gelu,
        "relu" => Activation::Relu,
        other => user_bail!(
            "config.json has activation_function `{other}`: the harness has gelu_new, gelu and relu"
        ),
    };
    Ok(ModelConfig {
        vocab_size: c.vocab_size,
        block_size: c.n_positions,
        n_layer: c.n_layer,
        n_head: c.n_head,
        n_embd: c.n_embd,
        bias: true,
        norm: NormKind::Layernorm,
        activation,
        norm_eps: c.layer_norm_epsilon,
        ..ModelConfig::default()
    })
}

/// The logical shape of each of our parameters in a GPT-2 of `cfg`'s size.
fn expected_shape(ours: &str, cfg: &ModelConfig) -> Vec<usize> {
    let c = cfg.n_embd;
    let leaf = ours.rsplit_once('.').map_or(ours, |(_, l)| l);
    let module = ours
        .strip_suffix(&format!(".{leaf}"))
        .and_then(|m| m.rsplit('.').next())
        .unwrap_or("");
    match (ours, module, leaf) {
        ("wte", _, _) => vec![cfg.vocab_size, c],
        ("wpe", _, _) => vec![cfg.block_size, c],
        (_, "qkv", "w") => vec![c, 3 * c],
        (_, "qkv", "b") => vec![3 * c],
        (_, "fc", "w") => vec![c, 4 * c],
        (_, "fc", "b") => vec![4 * c],
        (_, "pr", "w") => vec![4 * c, c],
        (_, "o", "w") => vec![c, c],
        _ => vec![c],
    }
}

/// The file `name` of the folder `dir` an import may read: a plain name (no `/`, no
/// `..`), and a regular file (not a FIFO or a device, which would block or never end). A
/// symbolic link is followed only to a file inside `dir` or, for a Hugging Face cache's
/// `snapshots/REV/` folder, inside that model's cache (`../../blobs/`): a downloaded
/// folder cannot make the import read files elsewhere. `Ok(None)`: there is no such file.
fn plain_file(dir: &std::path::Path, name: &str) -> Result<Option<std::path::PathBuf>> {
    let plain = !name.is_empty()
        && !name.contains('/')
        && name != ".."
        && name != "."
        && !name.contains('\0');
    if !plain {
        user_bail!(
            "{} names `{name}`, which is not a file name in that folder: an import reads only the folder's own files",
            dir.display()
        );
    }
    let path = dir.join(name);
    let Ok(meta) = std::fs::symlink_metadata(&path) else {
        return Ok(None);
    };
    if meta.file_type().is_symlink() {
        let (target, root) = (std::fs::canonicalize(&path), std::fs::canonicalize(dir));
        let inside = match (&target, &root) {
            (Ok(t), Ok(r)) => {
                let cache = r
                    .parent()
                    .filter(|p| p.file_name().is_some_and(|n| n == "snapshots"))
                    .and_then(|p| p.parent());
                t.starts_with(r) || cache.is_some_and(|c| t.starts_with(c))
            }
            _ => false,
        };
        if !inside {
            user_bail!(
                "{} is a symbolic link to a file outside the folder: an import reads only the folder's own files",
                path.display()
            );
        }
    }
    if !std::fs::metadata(&path).is_ok_and(|m| m.is_file()) {
        user_bail!(
            "{} is not a regular file (a FIFO, a device or a folder): give the folder transformers wrote",
            path.display()
        );
    }
    Ok(Some(path))
}

/// Reads the safetensors of a transformers folder: `model.safetensors`, or every shard
/// `model.safetensors.index.json` names.
fn read_hf_tensors(dir: &std::path::Path) -> Result<HashMap<String, Tensor>> {
    let dev = candle_core::Device::Cpu;
    if let Some(single) = plain_file(dir, "model.safetensors")? {
        return candle_core::safetensors::load(&single, &dev).map_err(|e| {
            tp_harness::error::user(format!(
                "{} is not a readable safetensors file: {e}",
                single.display()
            ))
        });
    }
    if let Some(index) = plain_file(dir, "model.safetensors.index.json")? {
        let text = std::fs::read_to_string(&index)?;
        let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| {
            tp_harness::error::user(format!("{} is not JSON: {e}", index.display()))
        })?;
        let mut files: Vec<String> = v["weight_map"]
            .as_object()
            .map(|m| {
                m.values()
                    .filter_map(|f| f.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default();
        files.sort();
        files.dedup();
        let mut out = HashMap::new();
        for f in files {
            let path = plain_file(dir, &f)?.ok_or_else(|| {
                tp_harness::error::user(format!(
                    "{} names the shard {f}, which the folder does not have",
                    index.display()
                ))
            })?;
            let part = candle_core::safetensors::load(&path, &dev).map_err(|e| {
                tp_harness::error::user(format!(
                    "{} is not a readable safetensors file: {e}",
                    path.display()
                ))
            })?;
            out.extend(part);
        }
        return Ok(out);
    }
    user_bail!(
        "{} has no model.safetensors: save the model with transformers' save_pretrained(DIR) (safetensors is its default) or download the hub's model.safetensors",
        dir.display()
    )
}

/// How many layers `transformer.h.N.` the tensors hold: the distinct N, which must be
/// 0, 1, .. without a gap (a stray `h.999999999` is a gap, not a billion layers: nothing
/// per layer is ever sized by a number read from a file).
fn layers_present(stored: &HashMap<String, Tensor>) -> Result<usize> {
    let layers: std::collections::BTreeSet<usize> = stored
        .keys()
        .filter_map(|k| {
            let rest = k.strip_prefix("transformer.h.")?;
            rest.split('.').next()?.parse::<usize>().ok()
        })
        .collect();
    match layers.last() {
        Some(&last) if last + 1 != layers.len() => user_bail!(
            "the safetensors hold {} layers but number one of them transformer.h.{last}: layer {} and others are missing (a stray tensor name?)",
            layers.len(),
            (0..=last).find(|i| !layers.contains(i)).unwrap_or(0)
        ),
        _ => Ok(layers.len()),
    }
}

/// A transformers GPT-2 folder (`config.json` + safetensors) as our model and its logical
/// weights in f32, every name and shape checked against the config.
pub fn from_hf(dir: &std::path::Path) -> Result<(ModelConfig, HashMap<String, Tensor>)> {
    let cfg_path = plain_file(dir, "config.json")?.unwrap_or_else(|| dir.join("config.json"));
    let text = std::fs::read_to_string(&cfg_path).map_err(|_| {
        tp_harness::error::user(format!(
            "{} has no config.json: give the folder transformers' save_pretrained wrote",
            dir.display()
        ))
    })?;
    let hf: HfConfig = serde_json::from_str(&text).map_err(|e| {
        tp_harness::error::user(format!("{} is not a GPT-2 config: {e}", cfg_path.display()))
    })?;
    let cfg = model_of(&hf)?;
    let mut stored = read_hf_tensors(dir)?;
    // The hub's original files name tensors without the `transformer.` prefix.
    if !stored.contains_key("transformer.wte.weight") && stored.contains_key("wte.weight") {
        stored = stored
            .into_iter()
            .map(|(k, v)| {
                if k.starts_with("lm_head.") {
                    (k, v)
                } else {
                    (format!("transformer.{k}"), v)
                }
            })
            .collect();
    }
    // The layers config.json claims must be the layers the files hold, checked before
    // anything per layer is made (a claimed n_layer of 10^9 would otherwise ask for
    // gigabytes of names before the first missing tensor is found).
    let present = layers_present(&stored)?;
    if cfg.n_layer != present {
        user_bail!(
            "{} says n_layer {} but its safetensors hold {present} layers (transformer.h.0 ..): the config and the weights disagree",
            cfg_path.display(),
            cfg.n_layer
        );
    }
    let mut weights = HashMap::new();
    for (ours, theirs) in name_map(cfg.n_layer) {
        let t = stored.remove(&theirs).ok_or_else(|| {
            tp_harness::error::user(format!(
                "{} lacks `{theirs}`, which a {}-layer GPT-2 has",
                dir.display(),
                cfg.n_layer
            ))
        })?;
        let want = expected_shape(&ours, &cfg);
        if t.dims() != want.as_slice() {
            user_bail!(
                "`{theirs}` has shape {:?} but config.json's sizes give {:?}",
                t.dims(),
                want
            );
        }
        let t = t.to_dtype(DType::F32)?;
        if let Some(x) = t
            .flatten_all()?
            .to_vec1::<f32>()?
            .into_iter()
            .find(|x| !x.is_finite())
        {
            user_bail!(
                "`{theirs}` in {} holds a non-finite value ({x}): a model with NaN or infinite weights cannot be imported",
                dir.display()
            );
        }
        weights.insert(ours, t);
    }
    if let Some(head) = stored.remove("lm_head.weight") {
        let same = head.dims() == weights["wte"].dims()
            && (head.to_dtype(DType::F32)? - &weights["wte"])?
                .abs()?
                .max_all()?
                .to_scalar::<f32>()?
                == 0.0;
        if !same {
            user_bail!(
                "lm_head.weight differs from wte: the harness's head is tied to the embedding"
            );
        }
    }
    let mut left: Vec<String> = stored
        .into_keys()
        .filter(|k| !(k.ends_with(".attn.bias") || k.ends_with(".attn.masked_bias")))
        .collect();
    if !left.is_empty() {
        left.sort();
        user_bail!(
            "{} has tensors a GPT-2 of config.json's size does not: {}",
            dir.display(),
            left.join(", ")
        );
    }
    Ok((cfg, weights))
}
