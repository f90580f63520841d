//! Any layout for transformers: the weights under GPT-2's names, a `config.json` naming
//! the layer kinds and the tp, and a self-contained PyTorch modelling file
//! (`remote/modeling_tp_harness.py`) that computes docs/blocks.md's forward pass in one
//! process, loaded with `trust_remote_code=True`. `s` and `p` compute another function at
//! another tp, so the tp the model was trained at is part of its config.

use super::format::hf_tensors;
use anyhow::Result;
use candle_core::Tensor;
use std::collections::HashMap;
use tp_harness::blocks::{BlockKind, BlockLayout};
use tp_harness::model::ModelConfig;
use tp_harness::ops::NormKind;

/// The modelling file's name in an export, and its text.
pub const MODELING_FILE: &str = "modeling_tp_harness.py";
pub const MODELING_CODE: &str = include_str!("remote/modeling_tp_harness.py");

/// Our tensors a model of `layout` has under GPT-2's names: a model trained without
/// biases has none, `p` blocks have no output biases and RMSNorm has no bias.
fn stored(ours: &str, cfg: &ModelConfig, layout: &BlockLayout) -> bool {
    if ours.ends_with(".b") && !cfg.bias {
        return false;
    }
    let layer = ours
        .strip_prefix("h.")
        .and_then(|r| r.split('.').next())
        .and_then(|i| i.parse::<usize>().ok());
    let is_norm_bias = ours.ends_with("ln1.b") || ours.ends_with("ln2.b") || ours == "lnf.b";
    if is_norm_bias && cfg.norm == NormKind::Rmsnorm {
        return false;
    }
    let out_bias = ours.ends_with(".o.b") || ours.ends_with(".pr.b");
    !(out_bias && layer.is_some_and(|i| layout.kinds[i].tags().out_biases() == 0))
}

/// The first kind of `layout` that the modelling file `code` cannot run: one whose spec
/// says it is not exported, or whose `run_<letter>` is not in the file.
fn without_forward(code: &str, layout: &BlockLayout) -> Option<BlockKind> {
    let runs =
        |k: &BlockKind| k.spec().exported && code.contains(&format!("def run_{}(", k.letter()));
    layout.kinds.iter().copied().find(|k| !runs(k))
}

/// The tensors and `config.json` of a model of any layout trained at `tp`.
pub fn to_remote(
    weights: &HashMap<String, Tensor>,
    cfg: &ModelConfig,
    layout: &BlockLayout,
    tp: usize,
) -> Result<(HashMap<String, Tensor>, serde_json::Value)> {
    // A kind the modelling file has no run for would load and fail at its first forward.
    if let Some(k) = without_forward(MODELING_CODE, layout) {
        tp_harness::user_bail!(
            "{MODELING_FILE} has no forward for block kind {k}: add its `run_{k}` and say so in the kind's spec (`exported`; docs/architecture.md, \"Adding a block kind\") before exporting pattern {}",
            layout.pattern
        );
    }
    let tensors = hf_tensors(weights, cfg, |ours| stored(ours, cfg, layout))?;
    let kinds = layout.expanded();
    // s and p depend on the tp; a model with neither is the same function at any tp.
    let depends_on_tp = layout.depends_on_tp();
    let module = MODELING_FILE.trim_end_matches(".py");
    let config = serde_json::json!({
        "architectures": ["TpHarnessForCausalLM"],
        "model_type": "tp_harness_gpt",
        "auto_map": {
            "AutoConfig": format!("{module}.TpHarnessConfig"),
            "AutoModelForCausalLM": format!("{module}.TpHarnessForCausalLM"),
        },
        "vocab_size": cfg.vocab_size,
        "n_positions": cfg.block_size,
        "n_embd": cfg.n_embd,
        "n_layer": cfg.n_layer,
        "n_head": cfg.n_head,
        "pattern": layout.pattern,
        "kinds": kinds,
        "tp": if depends_on_tp { tp } else { 1 },
        "trained_at_tp": tp,
        "bias": cfg.bias,
        "norm": cfg.norm,
        "activation": cfg.activation,
        "norm_eps": cfg.norm_eps,
        // The LM head is `wte` itself: no second matrix is stored.
        "tie_word_embeddings": true,
        "torch_dtype": "float32"
    });
    Ok((tensors, config))
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{DType, Device};

    fn tiny(n_layer: usize) -> ModelConfig {
        ModelConfig {
            vocab_size: 10,
            block_size: 8,
            n_layer,
            n_head: 2,
            n_embd: 4,
            ..ModelConfig::default()
        }
    }

    fn weights(cfg: &ModelConfig) -> HashMap<String, Tensor> {
        let mut w = HashMap::new();
        let c = cfg.n_embd;
        let z = |shape: &[usize]| Tensor::zeros(shape, DType::F32, &Device::Cpu).unwrap();
        w.insert("wte".to_string(), z(&[cfg.vocab_size, c]));
        w.insert("wpe".to_string(), z(&[cfg.block_size, c]));
        for i in 0..cfg.n_layer {
            for (n, s) in [("qkv.w", vec![c, 3 * c]), ("o.w", vec![c, c])] {
                w.insert(format!("h.{i}.{n}"), z(&s));
            }
            for (n, s) in [("fc.w", vec![c, 4 * c]), ("pr.w", vec![4 * c, c])] {
                w.insert(format!("h.{i}.{n}"), z(&s));
            }
            for n in ["ln1.w", "ln2.w"] {
                w.insert(format!("h.{i}.{n}"), z(&[c]));
            }
        }
        w.insert("lnf.w".to_string(), z(&[c]));
        w
    }

    #[test]
    fn p_blocks_lose_their_output_biases_and_the_config_names_kinds_and_tp() {
        let cfg = tiny(4);
        let layout = BlockLayout::parse("sppp").unwrap();
        let (t, c) = to_remote(&weights(&cfg), &cfg, &layout, 2).unwrap();
        assert!(t.contains_key("transformer.h.0.attn.c_proj.bias"));
        assert!(!t.contains_key("transformer.h.1.attn.c_proj.bias"));
        assert!(!t.contains_key("transformer.h.3.mlp.c_proj.bias"));
        assert!(t.contains_key("transformer.h.3.mlp.c_fc.bias"));
        assert_eq!(t.len(), 2 + 12 * 4 - 2 * 3 + 2);
        assert_eq!(c["kinds"], "sppp");
        assert_eq!(c["tp"], 2);
        // A ladder is the same function at every tp: it loads at tp 1.
        let layout = BlockLayout::parse("llll").unwrap();
        let (_, c) = to_remote(&weights(&cfg), &cfg, &layout, 2).unwrap();
        assert_eq!(
            (c["tp"].as_u64(), c["trained_at_tp"].as_u64()),
            (Some(1), Some(2))
        );
    }

    #[test]
    fn a_model_trained_without_biases_exports_none_and_declares_its_head_tied() {
        let cfg = ModelConfig {
            bias: false,
            ..tiny(2)
        };
        let layout = BlockLayout::parse("sp").unwrap();
        let (t, c) = to_remote(&weights(&cfg), &cfg, &layout, 2).unwrap();
        let biases: Vec<&String> = t.keys().filter(|k| k.ends_with(".bias")).collect();
        assert!(biases.is_empty(), "{biases:?}");
        // wte, wpe, ln_f and per layer ln_1, c_attn, c_proj, ln_2, c_fc, c_proj weights.
        assert_eq!(t.len(), 3 + 2 * 6);
        assert_eq!(c["bias"], false);
        assert_eq!(c["tie_word_embeddings"], true);
        // A bias-free t-only model is not GPT-2 (which always has biases): it takes the
        // same modelling file.
        let dense = BlockLayout::parse("tt").unwrap();
        assert!(!crate::hf::format::is_gpt2(&cfg, &dense));
    }

    #[test]
    fn a_kind_the_modelling_file_cannot_run_is_found_by_name() {
        let layout = BlockLayout::parse("tsl").unwrap();
        assert_eq!(without_forward(MODELING_CODE, &layout), None);
        // The same file without the ladder's forward.
        let without_l = MODELING_CODE.replace("def run_l(", "def run_ladder_gone(");
        assert_eq!(without_forward(&without_l, &layout), Some(BlockKind::L));
    }
}
