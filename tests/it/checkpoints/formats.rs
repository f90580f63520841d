//! Runs in and out of other formats: a text corpus through GPT-2's BPE, and the
//! Hugging Face export of a t-only model.

use super::train;
use crate::common::*;
use candle_core::{Device, Tensor, Var};
use std::collections::HashMap;
use tp_harness::blocks::{BlockLayout, Fwd};
use tp_harness::model::Gpt;
use tp_harness::tp::StoredParams;
use tp_lab::data::{prepare_text, Dataset, TextTokenizer, Tokenizer};
use tp_lab::launch::threads::on_tp_threads;
use tp_lab::run_dir::{latest, read_config as read_run_config, Checkpoint};

#[test]
fn the_bpe_text_dataset_round_trips_a_text_file_and_trains() {
    let d = scratch("bpe");
    let text = "First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak. Ünïcödé — ok?\n".repeat(40);
    std::fs::write(d.join("corpus.txt"), &text).unwrap();
    let dir = prepare_text(
        &d.join("corpus.txt"),
        &d.join("datasets"),
        TextTokenizer::Gpt2,
    )
    .unwrap();
    let data = Dataset::load(&dir).unwrap();
    assert_eq!(data.tokenizer(), &Tokenizer::Gpt2Bpe);
    assert_eq!(data.vocab_size(), 50257);
    let ids: Vec<u32> = data
        .train
        .iter()
        .chain(data.val.iter())
        .map(|&t| t as u32)
        .collect();
    assert_eq!(data.tokenizer().decode_exact(&ids).unwrap(), text);
    let o = tiny_text_run(
        &d,
        &d.join("corpus.txt"),
        &[
            "text_tokenizer=gpt2",
            "block_size=32",
            "max_iters=3",
            "eval_interval=3",
            "sample_tokens=8",
        ],
    );
    assert_ok(&o);
    // A config stored before text_tokenizer existed resumes with GPT-2's BPE, the data it
    // trained on (a char-level corpus would be other data, and the resume refused).
    let config = d.join("run/config.yaml");
    let old: String = std::fs::read_to_string(&config)
        .unwrap()
        .lines()
        .filter(|l| !l.trim_start().starts_with("text_tokenizer:"))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(&config, old).unwrap();
    let o = bin(
        "tp-train",
        &d,
        &["--quiet", "--resume", "run", "--set", "max_iters=4"],
        &[],
    );
    assert_ok(&o);
}

/// A small custom corpus is tokenized by character unless told otherwise: its own
/// characters the vocabulary (not GPT-2's 50257 entries), written into the run's config,
/// and tp-sample decodes it.
#[test]
fn a_small_text_corpus_trains_char_level_by_default_and_says_so_in_its_config() {
    let d = scratch("text-char");
    let text = "To be, or not to be, that is the question:\n".repeat(200);
    std::fs::write(d.join("corpus.txt"), &text).unwrap();
    let keys = [
        "block_size=32",
        "max_iters=3",
        "eval_interval=3",
        "sample_tokens=0",
    ];
    assert_ok(&tiny_text_run(&d, &d.join("corpus.txt"), &keys));
    let cfg = read_run_config(&d.join("run")).unwrap();
    assert_eq!(cfg.model.text_tokenizer, Some(TextTokenizer::Char));
    let ck = Checkpoint::load(&latest(&d.join("run")).unwrap().unwrap()).unwrap();
    let distinct = {
        let mut c: Vec<char> = text.chars().collect();
        c.sort_unstable();
        c.dedup();
        c.len()
    };
    assert_eq!(ck.weights["wte"].dim(0).unwrap(), distinct);
    let o = bin(
        "tp-sample",
        &d,
        &["run", "--prompt", "To be", "--tokens", "20"],
        &[],
    );
    assert_ok(&o);
    assert!(String::from_utf8_lossy(&o.stdout).starts_with("To be"));
    // The key belongs to text corpora alone.
    let o = bin(
        "tp-train",
        &d,
        &["--set", "text_tokenizer=char", "--out", "other"],
        &[],
    );
    one_clear_error(
        &o,
        "text_tokenizer chooses how a `text` corpus is tokenized",
    );
}

#[test]
fn the_hf_export_has_gpt2_names_and_shapes_and_a_dense_model_from_it_gives_our_logits() {
    let d = scratch("export");
    assert_ok(&train(
        &d,
        &[
            "--pattern",
            "tttt",
            "--set",
            "bias=true",
            "--set",
            "activation=gelu_tanh",
            "--set",
            "max_iters=20",
            "--out",
            "run",
        ],
        &[],
    ));
    assert_ok(&bin("tp-export", &d, &["run", "--format", "hf"], &[]));
    let exported =
        candle_core::safetensors::load(d.join("run/export-hf/model.safetensors"), &Device::Cpu)
            .unwrap();
    let expected = hf_expected(4, 64, 65, 64);
    let mut names: Vec<_> = exported.keys().cloned().collect();
    names.sort();
    let mut want: Vec<_> = expected.keys().cloned().collect();
    want.sort();
    assert_eq!(names, want);
    for (n, s) in &expected {
        assert_eq!(exported[n].dims(), s.as_slice(), "{n}");
    }
    let config: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(d.join("run/export-hf/config.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(config["model_type"], "gpt2");
    assert_eq!(config["activation_function"], "gelu_new");
    assert_eq!(
        (config["n_layer"].as_u64(), config["n_embd"].as_u64()),
        (Some(4), Some(64))
    );

    // A dense GPT-2 (tests/common/dense.rs) fed the exported tensors by HF name.
    let hf_to_dense = |hf: &str| -> String {
        let s = hf
            .trim_start_matches("transformer.")
            .replace(".weight", ".w")
            .replace(".bias", ".b");
        s.replace("wte.w", "wte")
            .replace("wpe.w", "wpe")
            .replace("ln_f.", "lnf.")
            .replace("ln_1.", "ln1.")
            .replace("ln_2.", "ln2.")
            .replace("attn.c_attn.", "qkv.")
            .replace("attn.c_proj.", "o.")
            .replace("mlp.c_fc.", "fc.")
            .replace("mlp.c_proj.", "pr.")
    };
    let vars: HashMap<String, Var> = exported
        .iter()
        .map(|(k, t)| (hf_to_dense(k), Var::from_tensor(t).unwrap()))
        .collect();
    let cfg = read_run_config(&d.join("run")).unwrap();
    let mcfg = cfg.model_config(65).unwrap();
    let (idx, _) = batch(8, 2, 64, 65);
    let x = dense::embed(&vars, &idx);
    let dense_logits = dense_logits(&vars, &mcfg, &x);
    let ck = Checkpoint::load(&latest(&d.join("run")).unwrap().unwrap()).unwrap();
    let layout = BlockLayout::parse("tttt").unwrap();
    let ours = on_tp_threads(2, |comm| {
        let model = Gpt::build(
            &mcfg,
            &layout,
            &StoredParams {
                tensors: ck.weights.clone(),
            },
            &comm,
        )?;
        model.forward(&idx, &Fwd::eval())
    })
    .unwrap()
    .remove(0);
    let e = rel_err(
        &ours.flatten_all().unwrap(),
        &dense_logits.flatten_all().unwrap(),
    );
    assert!(e < 1e-5, "logits differ by {e:e}");

    // s/p models are not GPT-2: exported with their own modelling code instead
    // (tests/it/hf_export.rs checks what transformers makes of it).
    assert_ok(&train(&d, &["--set", "max_iters=5", "--out", "spd"], &[]));
    let o = bin("tp-export", &d, &["spd"], &[]);
    assert_ok(&o);
    assert!(String::from_utf8_lossy(&o.stdout).contains("trust_remote_code=True"));
}

fn dense_logits(
    vars: &HashMap<String, Var>,
    cfg: &tp_harness::model::ModelConfig,
    x: &Tensor,
) -> Tensor {
    // The dense reference's loss path without the loss: blocks, final norm, tied head.
    let mut h = x.clone();
    for i in 0..cfg.n_layer {
        h = dense::block_pub(vars, cfg, i, &h);
    }
    let h = tp_harness::ops::layer_norm_composed(
        &h,
        vars["lnf.w"].as_tensor(),
        Some(vars["lnf.b"].as_tensor()),
        cfg.norm_eps,
    )
    .unwrap();
    let (b, t, c) = h.dims3().unwrap();
    h.reshape((b * t, c))
        .unwrap()
        .matmul(&vars["wte"].as_tensor().t().unwrap())
        .unwrap()
}

/// A character vocabulary is its corpus's own: a resume on an edited corpus with other
/// characters is one line even with --accept-other-data (the model cannot read them),
/// not a shape error from the middle of a rank.
#[test]
fn a_char_level_resume_on_a_corpus_with_other_characters_is_one_line() {
    let d = scratch("text-char-changed");
    let corpus = d.join("corpus.txt");
    std::fs::write(&corpus, "line of the corpus says aaa.\n".repeat(300)).unwrap();
    let keys = [
        "text_tokenizer=char",
        "block_size=16",
        "max_iters=4",
        "eval_interval=4",
        "sample_tokens=0",
        "checkpoint_interval=2",
    ];
    assert_ok(&tiny_text_run(&d, &corpus, &keys));
    std::fs::write(&corpus, "line of the corpus says zzz!\n".repeat(300)).unwrap();
    let o = bin(
        "tp-train",
        &d,
        &[
            "--resume",
            "run",
            "--set",
            "max_iters=6",
            "--accept-other-data",
        ],
        &[],
    );
    one_clear_error(&o, "a character corpus whose characters changed");
}

/// `tp-train` on a tiny model of the text corpus at `corpus` into `run`, with `keys`
/// set besides (`--set KEY=VALUE` each).
fn tiny_text_run(
    d: &std::path::Path,
    corpus: &std::path::Path,
    keys: &[&str],
) -> std::process::Output {
    let path = format!("text_path={}", corpus.display());
    let mut args = vec!["--quiet", "--set", "dataset=text", "--set", &path];
    for k in ["n_embd=32", "eval_iters=1"].iter().chain(keys) {
        args.extend(["--set", k]);
    }
    args.extend(["--out", "run"]);
    bin("tp-train", d, &args, &[])
}
