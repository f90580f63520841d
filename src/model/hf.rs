//! Export to Hugging Face's GPT-2 layout (`transformers.GPT2LMHeadModel`).
//!
//! Our names map one to one: `wte` -> `transformer.wte.weight`, `h.i.qkv.w` ->
//! `transformer.h.i.attn.c_attn.weight`, and so on. Both store linear weights (in, out)
//! (GPT-2's Conv1D), and `c_attn` is [Q | K | V] with heads in order, as ours. The LM head
//! is tied to `wte` and, as `save_pretrained` does, not stored. GPT-2 always has biases:
//! a model trained without them gets zero biases, which compute the same function. Only
//! `t`-only models with LayerNorm export: `s` and `p` blocks are not GPT-2 blocks.

use super::config::ModelConfig;
use crate::blocks::params::layer_prefix;
use crate::blocks::{BlockKind, Layout};
use crate::ops::{Activation, NormKind};
use crate::user_bail;
use anyhow::{Context, Result};
use candle_core::{DType, Tensor};
use std::collections::HashMap;

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

/// The Hugging Face tensors and `config.json` of a model given by its logical weights.
pub fn to_hf(
    weights: &HashMap<String, Tensor>,
    cfg: &ModelConfig,
    layout: &Layout,
) -> Result<(HashMap<String, Tensor>, serde_json::Value)> {
    if let Some(i) = layout.kinds.iter().position(|k| *k != BlockKind::T) {
        user_bail!(
            "pattern {} has a `{}` block at layer {i}: only t-only models are GPT-2 and can be exported",
            layout.pattern,
            layout.kinds[i].letter()
        );
    }
    if cfg.norm != NormKind::Layernorm {
        user_bail!("this model uses RMSNorm; Hugging Face's GPT-2 has LayerNorm only");
    }
    let c = cfg.n_embd;
    let mut out = HashMap::new();
    // Missing biases are made where the weights are.
    let device = weights
        .get("wte")
        .context("the checkpoint lacks `wte`")?
        .device()
        .clone();
    for (ours, hf) in name_map(cfg.n_layer) {
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
    let activation = match cfg.activation {
        Activation::GeluTanh => "gelu_new",
        Activation::Gelu => "gelu",
        Activation::Relu => "relu",
    };
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
        "bos_token_id": 50256,
        "eos_token_id": 50256,
        "torch_dtype": "float32"
    });
    Ok((out, config))
}

/// Writes `model.safetensors` and `config.json` into `dir`.
pub fn write_hf(
    dir: &std::path::Path,
    tensors: &HashMap<String, Tensor>,
    config: &serde_json::Value,
) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let tmp = dir.join(".model.safetensors.tmp");
    candle_core::safetensors::save(tensors, &tmp)?;
    std::fs::rename(&tmp, dir.join("model.safetensors"))?;
    std::fs::write(
        dir.join("config.json"),
        serde_json::to_string_pretty(config)?,
    )?;
    Ok(())
}
