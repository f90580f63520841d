//! `tp-import --format hf`: a transformers GPT-2 folder becomes a run whose checkpoint
//! loads at any tp. A run exported with tp-export and imported back computes the same
//! logits; the published GPT-2 124M's shape (the hub's file layout: no `transformer.`
//! prefix, attention-mask buffers) imports from random weights and samples with GPT-2's
//! BPE; what the harness cannot compute is one clear line.

use crate::common::*;
use candle_core::{DType, Device, Tensor};
use std::collections::HashMap;
use std::path::Path;
use tp_harness::model::Gpt;
use tp_harness::tp::StoredParams;
use tp_lab::launch::threads::on_tp_threads;
use tp_lab::run_dir::{latest, read_config, Checkpoint};

/// The last position's logits of `run`'s latest checkpoint at `tp`.
fn logits_of(run: &Path, tp: usize, vocab_parallel: bool, idx: &Tensor) -> Tensor {
    let cfg = read_config(run).unwrap();
    let ck = Checkpoint::load(&latest(run).unwrap().unwrap()).unwrap();
    let mut mcfg = cfg.model_config(ck.weights["wte"].dim(0).unwrap()).unwrap();
    mcfg.vocab_parallel = vocab_parallel;
    let layout = cfg.layout().clone();
    on_tp_threads(tp, |comm| {
        let source = StoredParams {
            tensors: ck.weights.clone(),
        };
        Gpt::build(&mcfg, &layout, &source, &comm)?.next_token_logits(idx)
    })
    .unwrap()
    .remove(0)
}

#[test]
fn a_run_exported_to_hf_and_imported_back_gives_its_logits_at_tp_1_2_and_4() {
    let d = scratch("import-round-trip");
    let train = |args: &[&str]| {
        let mut all = vec![
            "--quiet",
            "--set",
            "eval_interval=0",
            "--set",
            "sample_tokens=0",
        ];
        all.extend_from_slice(args);
        assert_ok(&bin("tp-train", &d, &all, &[]));
    };
    // No biases (the mini preset's): exported as GPT-2 when asked (--as-gpt2), the export
    // writes zeros and the import keeps them.
    train(&[
        "--pattern",
        "tttt",
        "--tp",
        "2",
        "--set",
        "max_iters=15",
        "--out",
        "run",
    ]);
    assert_ok(&bin(
        "tp-export",
        &d,
        &["run", "--out", "hf", "--as-gpt2"],
        &[],
    ));
    let config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(d.join("hf/config.json")).unwrap()).unwrap();
    // A 65-token model has no <|endoftext|> (50256): no bos/eos ids past its vocabulary.
    assert!(config["bos_token_id"].is_null() && config["eos_token_id"].is_null());
    // GPT-2's BPE cannot be this model's tokenizer: the import says to name the data.
    let o = bin("tp-import", &d, &["hf", "--out", "bpe"], &[]);
    one_clear_error(&o, "give --dataset");
    assert!(!d.join("bpe").exists(), "a refused import writes nothing");
    let o = bin(
        "tp-import",
        &d,
        &["hf", "--out", "imported", "--dataset", "shakespeare_char"],
        &[],
    );
    assert_ok(&o);
    let cfg = read_config(&d.join("imported")).unwrap();
    assert_eq!(cfg.model.pattern.as_str(), "4xt");
    assert!(cfg.model.arch.bias);
    let (idx, _) = batch(17, 3, 40, 65);
    let original = logits_of(&d.join("run"), 1, false, &idx);
    for (tp, vp) in [(1, false), (2, false), (2, true), (4, true)] {
        let back = logits_of(&d.join("imported"), tp, vp, &idx);
        let e = rel_err(&back, &original);
        assert!(
            e < 1e-5,
            "tp {tp} vocab_parallel {vp}: logits differ by {e:e}"
        );
    }
    // The imported run fine-tunes under another pattern, taking its model from the run.
    train(&[
        "--init-from",
        "imported",
        "--pattern",
        "tstt",
        "--set",
        "max_iters=3",
        "--out",
        "tuned",
    ]);
    let tuned = read_config(&d.join("tuned")).unwrap();
    assert_eq!(tuned.model.arch, cfg.model.arch);
    assert_eq!(tuned.model.pattern.as_str(), "tstt");
}

/// Random weights in the published GPT-2 124M's file layout.
fn write_gpt2_124m_like(dir: &Path) {
    let (v, t, c, l) = (50257, 1024, 768, 12);
    let dev = Device::Cpu;
    let mut tensors: HashMap<String, Tensor> = HashMap::new();
    // The hub's file names its tensors without save_pretrained's `transformer.`.
    for (name, shape) in hf_expected(l, c, v, t) {
        let name = name.trim_start_matches("transformer.").to_string();
        tensors.insert(name, Tensor::randn(0f32, 0.02, shape, &dev).unwrap());
    }
    for i in 0..l {
        // The causal-mask buffer the hub's file carries per layer (not a parameter).
        tensors.insert(
            format!("h.{i}.attn.bias"),
            Tensor::ones((1, 1, 8, 8), DType::F32, &dev).unwrap(),
        );
    }
    std::fs::create_dir_all(dir).unwrap();
    candle_core::safetensors::save(&tensors, dir.join("model.safetensors")).unwrap();
    // The hub's config.json for gpt2, keys the import does not need included.
    let config = serde_json::json!({
        "activation_function": "gelu_new",
        "architectures": ["GPT2LMHeadModel"],
        "attn_pdrop": 0.1, "bos_token_id": 50256, "embd_pdrop": 0.1, "eos_token_id": 50256,
        "initializer_range": 0.02, "layer_norm_epsilon": 1e-05, "model_type": "gpt2",
        "n_ctx": 1024, "n_embd": 768, "n_head": 12, "n_layer": 12, "n_positions": 1024,
        "resid_pdrop": 0.1, "summary_activation": null, "summary_first_dropout": 0.1,
        "task_specific_params": {"text-generation": {"do_sample": true, "max_length": 50}},
        "vocab_size": 50257
    });
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
}

#[test]
fn the_gpt2_124m_shape_imports_from_random_weights_and_samples_at_tp_2_vocab_parallel() {
    let d = scratch("import-124m");
    write_gpt2_124m_like(&d.join("gpt2"));
    assert_ok(&bin("tp-import", &d, &["gpt2", "--out", "run"], &[]));
    let cfg = read_config(&d.join("run")).unwrap();
    let a = &cfg.model.arch;
    assert_eq!(
        (a.n_layer, a.n_head, a.n_embd, a.block_size, a.vocab_size),
        (12, 12, 768, 1024, 50257)
    );
    assert_eq!(
        (cfg.model.dataset.as_str(), cfg.model.pattern.as_str()),
        ("text", "12xt")
    );
    let ck = Checkpoint::load(&latest(&d.join("run")).unwrap().unwrap()).unwrap();
    let file =
        candle_core::safetensors::load(d.join("gpt2/model.safetensors"), &Device::Cpu).unwrap();
    for (ours, theirs) in [
        ("wte", "wte.weight"),
        ("h.3.qkv.w", "h.3.attn.c_attn.weight"),
    ] {
        let diff = (&ck.weights[ours] - &file[theirs])
            .unwrap()
            .abs()
            .unwrap()
            .max_all()
            .unwrap()
            .to_scalar::<f32>()
            .unwrap();
        assert_eq!(diff, 0.0, "{ours}");
    }
    // 50257 rows split 25129 + 25128 over two ranks: the same logits as one rank's.
    let idx = Tensor::new(&[[15496u32, 11, 995, 0, 50256]], &Device::Cpu).unwrap();
    let one = logits_of(&d.join("run"), 1, false, &idx);
    let split = logits_of(&d.join("run"), 2, true, &idx);
    assert_eq!(split.dims(), &[1, 50257]);
    let e = rel_err(&split, &one);
    assert!(e < 1e-5, "logits differ by {e:e}");
    // GPT-2's BPE needs no corpus to sample with.
    let o = bin(
        "tp-sample",
        &d,
        &["run", "--tp", "2", "--tokens", "3", "--prompt", "Hello"],
        &[],
    );
    assert_ok(&o);
}

#[test]
fn what_the_harness_cannot_compute_is_one_clear_line_and_writes_nothing() {
    let d = scratch("import-errors");
    let o = bin("tp-import", &d, &["nowhere", "--out", "run"], &[]);
    one_clear_error(&o, "has no config.json");
    std::fs::create_dir_all(d.join("swish")).unwrap();
    let cfg = |act: &str| {
        serde_json::json!({"model_type": "gpt2", "vocab_size": 11, "n_positions": 8,
            "n_embd": 8, "n_layer": 1, "n_head": 2, "activation_function": act})
        .to_string()
    };
    std::fs::write(d.join("swish/config.json"), cfg("swish")).unwrap();
    let o = bin("tp-import", &d, &["swish", "--out", "run"], &[]);
    one_clear_error(&o, "activation_function `swish`");
    std::fs::create_dir_all(d.join("noweights")).unwrap();
    std::fs::write(d.join("noweights/config.json"), cfg("gelu_new")).unwrap();
    let o = bin("tp-import", &d, &["noweights", "--out", "run"], &[]);
    one_clear_error(&o, "has no model.safetensors");
    let o = bin(
        "tp-import",
        &d,
        &["noweights", "--format", "onnx", "--out", "run"],
        &[],
    );
    one_clear_error(&o, "the only one is hf");
    assert!(!d.join("run").exists());
}

/// The last-position logits `tests/oracle/hf-crosscheck.py` wrote next to a model.
fn hf_reference(dir: &Path) -> (Tensor, Tensor) {
    let r =
        candle_core::safetensors::load(dir.join("reference.safetensors"), &Device::Cpu).unwrap();
    (r["ids"].to_dtype(DType::U32).unwrap(), r["logits"].clone())
}

/// transformers itself as the reference, both ways: its random GPT-2 imported gives its
/// logits, and our export loaded by `from_pretrained` gives ours. Needs a Python with
/// torch and transformers (`TP_HF_PYTHON`), so it is not part of the suite.
#[test]
#[ignore = "needs torch + transformers: TP_HF_PYTHON=python cargo test --release --test it -- import:: --ignored"]
fn transformers_computes_the_logits_of_imported_and_exported_models() {
    let python = std::env::var("TP_HF_PYTHON")
        .expect("set TP_HF_PYTHON to a python with torch and transformers");
    let script = Path::new(crate::common::REPO).join("tests/oracle/hf-crosscheck.py");
    let d = scratch("import-transformers");
    let py = |mode: &str, dir: &str| {
        let o = std::process::Command::new(&python)
            .arg(&script)
            .args([mode, &d.join(dir).display().to_string()])
            .output()
            .unwrap();
        assert_ok(&o);
    };
    py("make", "hf");
    assert_ok(&bin("tp-import", &d, &["hf", "--out", "run"], &[]));
    let (ids, want) = hf_reference(&d.join("hf"));
    for (tp, vp) in [(1, false), (2, true)] {
        let ours = logits_of(&d.join("run"), tp, vp, &ids);
        let e = rel_err(&ours, &want);
        assert!(
            e < 1e-5,
            "import, tp {tp}: logits differ from transformers' by {e:e}"
        );
    }
    // And back: our export of the imported run, read by transformers.
    assert_ok(&bin("tp-export", &d, &["run", "--out", "exported"], &[]));
    py("logits", "exported");
    let (_, theirs) = hf_reference(&d.join("exported"));
    let e = rel_err(&logits_of(&d.join("run"), 1, false, &ids), &theirs);
    assert!(
        e < 1e-5,
        "export: transformers' logits differ from ours by {e:e}"
    );
}
