//! Every case in the golden folder (`../shared/golden`, or `TP_GOLDEN_DIR`): weights, a
//! batch, the loss and every gradient from an independent implementation of blocks.md.
//! Each is loaded into our model at the case's tp; loss must agree to 1e-5 relative and
//! every logical gradient to 1e-4.

mod common;
use candle_core::{DType, Device};
use common::*;
use std::collections::HashMap;
use std::path::PathBuf;
use tp_harness::blocks::Layout;
use tp_harness::device::Kernels;
use tp_harness::model::ModelConfig;
use tp_harness::ops::{Activation, NormKind};
use tp_harness::tp::StoredParams;

fn golden_dir() -> PathBuf {
    match std::env::var("TP_GOLDEN_DIR") {
        Ok(d) => PathBuf::from(d),
        Err(_) => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/golden"),
    }
}

#[derive(serde::Deserialize)]
struct Case {
    pattern: String,
    layout: String,
    tp: usize,
    bias: bool,
    vocab_size: usize,
    block_size: usize,
    n_embd: usize,
    n_head: usize,
    n_layer: usize,
    activation: Activation,
    layernorm_eps: f64,
    loss: f64,
    forward_allreduces: usize,
}

#[test]
fn every_golden_case_matches_loss_and_all_gradients() {
    let dir = golden_dir();
    let mut cases: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("golden folder {} unreadable: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    cases.sort();
    assert!(
        !cases.is_empty(),
        "no golden cases (*.json) in {}",
        dir.display()
    );
    for json in &cases {
        let case: Case = serde_json::from_str(&std::fs::read_to_string(json).unwrap()).unwrap();
        let tensors =
            candle_core::safetensors::load(json.with_extension("safetensors"), &Device::Cpu)
                .unwrap();
        let layout = Layout::parse(&case.pattern).unwrap();
        assert_eq!(
            layout.expanded(),
            case.layout,
            "{}: our expansion of the pattern",
            json.display()
        );
        assert_eq!(
            layout.forward_allreduces(),
            case.forward_allreduces,
            "{}: all-reduce count",
            json.display()
        );
        let cfg = ModelConfig {
            vocab_size: case.vocab_size,
            block_size: case.block_size,
            n_layer: case.n_layer,
            n_head: case.n_head,
            n_embd: case.n_embd,
            bias: case.bias,
            norm: NormKind::Layernorm,
            activation: case.activation,
            norm_eps: case.layernorm_eps,
            kernels: Kernels::Fused,
        };
        let mut params = HashMap::new();
        let mut ref_grads = HashMap::new();
        for (k, v) in &tensors {
            if let Some(n) = k.strip_prefix("param.") {
                params.insert(n.to_string(), v.to_dtype(DType::F32).unwrap());
            } else if let Some(n) = k.strip_prefix("grad.") {
                ref_grads.insert(n.to_string(), v.to_dtype(DType::F32).unwrap());
            }
        }
        let idx = tensors["tokens"].to_dtype(DType::U32).unwrap();
        let tgt = tensors["targets"].to_dtype(DType::U32).unwrap();
        let source = StoredParams { tensors: params };
        for kernels in [Kernels::Fused, Kernels::Portable] {
            let cfg = ModelConfig {
                kernels,
                ..cfg.clone()
            };
            let ours = tp_logical(&cfg, &case.pattern, case.tp, &source, &idx, &tgt);
            let what = format!(
                "golden {} ({} kernels)",
                json.file_stem().unwrap().to_string_lossy(),
                kernels.label()
            );
            let rel = ((ours.loss as f64 - case.loss) / case.loss).abs();
            assert!(
                rel <= 1e-5,
                "{what}: loss {} vs golden {} (rel {rel:e})",
                ours.loss,
                case.loss
            );
            assert_grads_match(&ours.grads, &ref_grads, 1e-4, &what);
            eprintln!(
                "{what}: loss {} (golden {}), {} gradients match",
                ours.loss,
                case.loss,
                ref_grads.len()
            );
        }
    }
}
