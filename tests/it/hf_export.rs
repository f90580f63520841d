//! `tp-export --format hf` of any layout: a t-only LayerNorm model is GPT-2 itself; an
//! s/p/l model is written under GPT-2's names with a config naming its layer kinds and tp
//! and the modelling file transformers loads with `trust_remote_code=True`; the dataset's
//! tokenizer goes beside either. transformers itself, where a Python with torch is named
//! (`TP_HF_PYTHON`), gives tp-eval's loss and tp-sample's greedy text.

use crate::common::*;
use std::path::Path;
use tp_harness::data::tokenizer::Tokenizer;

fn train(d: &Path, pattern: &str, tp: &str, iters: &str, out: &str) {
    let o = tp_train(
        d,
        &[
            "--pattern",
            pattern,
            "--tp",
            tp,
            "--set",
            &format!("max_iters={iters}"),
            "--set",
            "eval_interval=0",
            "--set",
            "sample_tokens=0",
            "--out",
            out,
        ],
    );
    assert_ok(&o);
}

fn json(p: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

#[test]
fn an_sppp_model_exports_with_its_kinds_tp_modelling_code_and_character_tokenizer() {
    let d = scratch("hf-export-any-layout");
    train(&d, "sppp", "2", "3", "run");
    assert_ok(&bin("tp-export", &d, &["run", "--out", "hf"], &[]));
    let c = json(&d.join("hf/config.json"));
    assert_eq!(c["model_type"], "tp_harness_gpt");
    assert_eq!(
        (c["kinds"].as_str(), c["tp"].as_u64()),
        (Some("sppp"), Some(2))
    );
    assert_eq!(
        c["auto_map"]["AutoModelForCausalLM"],
        "modeling_tp_harness.TpHarnessForCausalLM"
    );
    let code = std::fs::read_to_string(d.join("hf/modeling_tp_harness.py")).unwrap();
    assert!(code.contains("def run_p(") && code.contains("def run_l("));
    let t =
        candle_core::safetensors::load(d.join("hf/model.safetensors"), &candle_core::Device::Cpu)
            .unwrap();
    assert!(t.contains_key("transformer.h.0.attn.c_proj.bias"));
    assert!(
        !t.contains_key("transformer.h.2.attn.c_proj.bias"),
        "p blocks have no b_o"
    );
    // The character vocabulary, each character its harness id.
    let tok = json(&d.join("hf/tokenizer.json"));
    let vocab = tok["model"]["vocab"].as_object().unwrap();
    assert_eq!(vocab.len(), 65);
    assert_eq!(
        (vocab["\n"].as_u64(), vocab["a"].as_u64()),
        (Some(0), Some(39))
    );
    // Exported again as a t-only model into the same folder: plain GPT-2, and no stale
    // modelling file left to describe another model.
    train(&d, "tttt", "1", "2", "dense");
    assert_ok(&bin("tp-export", &d, &["dense", "--out", "hf"], &[]));
    assert_eq!(json(&d.join("hf/config.json"))["model_type"], "gpt2");
    assert!(!d.join("hf/modeling_tp_harness.py").exists());
    assert!(d.join("hf/tokenizer.json").exists());
}

/// transformers' reading of the export equals the harness's own: the whole val split's
/// loss (tp-eval) and the greedy continuation of a prompt (tp-sample --top-k 1), for an
/// s-then-p model at its tp and a ladder.
#[test]
#[ignore = "needs torch + transformers: TP_HF_PYTHON=python cargo test --release --test it -- hf_export --ignored"]
fn transformers_gives_tp_eval_loss_and_tp_sample_text_for_3xsppp_and_llll() {
    let python = std::env::var("TP_HF_PYTHON")
        .expect("set TP_HF_PYTHON to a python with torch and transformers");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/oracle/hf-export-check.py");
    let d = scratch("hf-export-transformers");
    let val = test_data_dir().join("shakespeare_char/val.bin");
    for (pattern, tp) in [("3xsppp", "2"), ("llll", "2"), ("2xsp", "4")] {
        let run = format!("run-{pattern}");
        train(&d, pattern, tp, "150", &run);
        assert_ok(&bin("tp-eval", &d, &[&run, "--split", "val"], &[]));
        let ours = json(&d.join(&run).join("eval.json"))["loss"]
            .as_f64()
            .unwrap();
        let prompt = "ROMEO:";
        let sample = bin(
            "tp-sample",
            &d,
            &[&run, "--prompt", prompt, "--tokens", "60", "--top-k", "1"],
            &[],
        );
        assert_ok(&sample);
        let our_text = String::from_utf8_lossy(&sample.stdout)
            .trim_end()
            .to_string();
        let out = d.join(format!("hf-{pattern}"));
        assert_ok(&bin(
            "tp-export",
            &d,
            &[&run, "--out", out.to_str().unwrap()],
            &[],
        ));
        let o = std::process::Command::new(&python)
            .arg(&script)
            .args([
                out.to_str().unwrap(),
                val.to_str().unwrap(),
                "64",
                prompt,
                "60",
            ])
            .output()
            .unwrap();
        assert_ok(&o);
        let theirs: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let loss = theirs["loss"].as_f64().unwrap();
        eprintln!("{pattern} at tp {tp}: tp-eval {ours:.6}, transformers {loss:.6}");
        assert!(
            ((loss - ours) / ours).abs() < 1e-5,
            "{pattern}: transformers' val loss {loss} against tp-eval's {ours}"
        );
        assert_eq!(theirs["round_trip"], true, "{pattern}: the tokenizer");
        assert_eq!(
            theirs["text"].as_str().unwrap().trim_end(),
            our_text,
            "{pattern}"
        );
    }
}

/// GPT-2's tokenizer files, rebuilt from tiktoken's ranks, encode a text as the harness
/// does when transformers reads them.
#[test]
#[ignore = "needs torch + transformers: TP_HF_PYTHON=python cargo test --release --test it -- hf_export --ignored"]
fn transformers_reads_the_exported_gpt2_tokenizer_as_the_harness_encodes() {
    let python = std::env::var("TP_HF_PYTHON")
        .expect("set TP_HF_PYTHON to a python with torch and transformers");
    let d = scratch("hf-export-gpt2-tokenizer");
    for (name, text) in
        tp_harness::data::hf_tokenizer::tokenizer_files(&Tokenizer::Gpt2Bpe, 1024).unwrap()
    {
        std::fs::write(d.join(name), text).unwrap();
    }
    let text = "First Citizen:\nBefore we proceed any further, hear me speak.\n\n  Ångström's 1234 cafés — naïve?!";
    let ours = Tokenizer::Gpt2Bpe.encode(text).unwrap();
    let o = std::process::Command::new(&python)
        .args([
            "-c",
            "import sys, json; from transformers import AutoTokenizer; t = AutoTokenizer.from_pretrained(sys.argv[1]); print(json.dumps(t.encode(sys.argv[2])))",
            d.to_str().unwrap(),
            text,
        ])
        .output()
        .unwrap();
    assert_ok(&o);
    let theirs: Vec<u32> = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(theirs, ours);
}
