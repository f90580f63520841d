//! Runs that survive and travel: exact resume, re-sharding, crash-safe writes, the NaN
//! guard, clear errors for damaged checkpoints, GPT-2 BPE text and the Hugging Face export.

use crate::common::*;
use candle_core::{Device, Tensor, Var};
use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};
use tp_harness::blocks::{Fwd, Layout};
use tp_harness::data::{prepare_text, Dataset, Tokenizer};
use tp_harness::launch::threads::on_tp_threads;
use tp_harness::model::Gpt;
use tp_harness::run_dir::{latest, read_config as read_run_config, Checkpoint};
use tp_harness::tp::StoredParams;

const SMALL: [&str; 12] = [
    "--quiet",
    "--set",
    "n_embd=64",
    "--set",
    "eval_interval=50",
    "--set",
    "eval_iters=4",
    "--set",
    "checkpoint_interval=50",
    "--set",
    "sample_tokens=20",
    "--set",
];

fn train(dir: &Path, extra: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    let mut args: Vec<&str> = SMALL.to_vec();
    args.push("lr_decay_iters=200");
    args.extend_from_slice(extra);
    bin("tp-train", dir, &args, env)
}

/// Log lines without wall-clock fields.
fn log(run: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(run.join("log.jsonl"))
        .unwrap()
        .lines()
        .map(|l| {
            let mut v: serde_json::Value = serde_json::from_str(l).unwrap();
            v.as_object_mut()
                .unwrap()
                .retain(|k, _| k != "ms" && k != "tokens_per_s");
            v
        })
        .collect()
}

#[test]
fn train_100_checkpoint_resume_to_200_equals_an_uninterrupted_200_step_run_bitwise() {
    let d = scratch("resume");
    assert_ok(&train(
        &d,
        &["--set", "max_iters=100", "--out", "split"],
        &[],
    ));
    let o = bin(
        "tp-train",
        &d,
        &["--quiet", "--resume", "split", "--set", "max_iters=200"],
        &[],
    );
    assert_ok(&o);
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("resuming from split/checkpoints/step-000100")
    );
    assert_ok(&train(
        &d,
        &["--set", "max_iters=200", "--out", "whole"],
        &[],
    ));
    let (a, b) = (log(&d.join("split")), log(&d.join("whole")));
    assert_eq!(a.len(), b.len());
    assert_eq!(a, b, "resumed log differs from the uninterrupted one");
    let w = |run: &str| {
        std::fs::read(
            d.join(run)
                .join("checkpoints/step-000200/model.safetensors"),
        )
        .unwrap()
    };
    assert!(w("split") == w("whole"), "final weights differ");
    assert_eq!(
        read_run_config(&d.join("split")).unwrap().optim.max_iters,
        200
    );
}

fn loss_at_tp(ck: &Checkpoint, run: &Path, tp: usize, idx: &Tensor, tgt: &Tensor) -> f32 {
    let cfg = read_run_config(run).unwrap();
    let mcfg = cfg.model_config(ck.weights["wte"].dim(0).unwrap()).unwrap();
    let layout = Layout::parse(&cfg.model.pattern).unwrap();
    on_tp_threads(tp, |comm| {
        let model = Gpt::build(
            &mcfg,
            &layout,
            &StoredParams {
                tensors: ck.weights.clone(),
            },
            &comm,
        )?;
        Ok(model.loss(idx, tgt, &Fwd::eval())?.to_scalar::<f32>()?)
    })
    .unwrap()[0]
}

#[test]
fn a_checkpoint_written_at_tp2_loads_at_tp1_and_tp4_with_the_same_loss() {
    let d = scratch("reshard");
    assert_ok(&train(
        &d,
        &[
            "--pattern",
            "tttt",
            "--tp",
            "2",
            "--set",
            "bias=true",
            "--set",
            "max_iters=30",
            "--out",
            "run",
        ],
        &[],
    ));
    let run = d.join("run");
    let ck = Checkpoint::load(&latest(&run).unwrap().unwrap()).unwrap();
    assert_eq!(ck.meta.step, 30);
    let (idx, tgt) = batch(4, 3, 64, 65);
    let l2 = loss_at_tp(&ck, &run, 2, &idx, &tgt);
    for tp in [1, 4] {
        let l = loss_at_tp(&ck, &run, tp, &idx, &tgt);
        assert!(((l - l2) / l2).abs() < 1e-5, "tp {tp}: {l} vs tp 2: {l2}");
    }
    // And training resumes at another tp.
    assert_ok(&bin(
        "tp-train",
        &d,
        &[
            "--quiet",
            "--resume",
            "run",
            "--tp",
            "4",
            "--set",
            "max_iters=35",
        ],
        &[],
    ));
    assert_eq!(
        Checkpoint::load(&latest(&run).unwrap().unwrap())
            .unwrap()
            .meta
            .step,
        35
    );
}

#[test]
fn sigkill_while_a_checkpoint_is_being_written_leaves_the_previous_one_loadable() {
    let d = scratch("kill");
    let mut child = command("tp-train", &d)
        .args([
            "--quiet",
            "--set",
            "n_embd=32",
            "--set",
            "checkpoint_interval=5",
            "--set",
            "eval_interval=0",
        ])
        .args(["--set", "max_iters=1000", "--out", "run"])
        .env("TP_CHECKPOINT_PAUSE_MS", "1500")
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let base = d.join("run/checkpoints");
    let start = Instant::now();
    // Wait until the first checkpoint is complete and the second is half-written.
    loop {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "no checkpoint appeared"
        );
        let done = base.join("latest").exists();
        let writing = std::fs::read_dir(&base)
            .map(|r| {
                r.filter_map(|e| e.ok()).any(|e| {
                    e.file_name()
                        .to_string_lossy()
                        .starts_with(".tmp-step-000010")
                })
            })
            .unwrap_or(false);
        if done && writing {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let dir = latest(&d.join("run")).unwrap().unwrap();
    let ck = Checkpoint::load(&dir).unwrap();
    assert_eq!(ck.meta.step, 5);
    // The interrupted run resumes from it.
    assert_ok(&bin(
        "tp-train",
        &d,
        &["--quiet", "--resume", "run", "--set", "max_iters=12"],
        &[],
    ));
    assert_eq!(
        Checkpoint::load(&latest(&d.join("run")).unwrap().unwrap())
            .unwrap()
            .meta
            .step,
        12
    );
}

#[test]
fn a_planted_nan_stops_the_run_naming_the_step_and_the_previous_checkpoint_loads() {
    let d = scratch("nan");
    let o = train(
        &d,
        &[
            "--set",
            "max_iters=40",
            "--set",
            "checkpoint_interval=10",
            "--out",
            "run",
        ],
        &[("TP_INJECT_NAN", "17")],
    );
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(
        err.contains("NaN at step 17") && err.contains("step-000010"),
        "{err}"
    );
    let ck = Checkpoint::load(&latest(&d.join("run")).unwrap().unwrap()).unwrap();
    assert_eq!(ck.meta.step, 10);
    assert!(ck.weights.values().all(|t| t
        .flatten_all()
        .unwrap()
        .to_vec1::<f32>()
        .unwrap()
        .iter()
        .all(|x| x.is_finite())));
}

/// Rewrites a checkpoint's SHA256SUMS to match its files as they now are (a checkpoint
/// assembled by hand), so that what lies behind the checksum check is reached.
fn reseal(ck_dir: &std::path::Path) {
    let sums = std::fs::read_to_string(ck_dir.join("SHA256SUMS")).unwrap();
    let resealed: String = sums
        .lines()
        .map(|l| {
            let file = l.split_once("  ").unwrap().1;
            let bytes = std::fs::read(ck_dir.join(file)).unwrap();
            format!("{}  {file}\n", tp_harness::util::sha256_hex(&bytes))
        })
        .collect();
    std::fs::write(ck_dir.join("SHA256SUMS"), resealed).unwrap();
}

#[test]
fn truncated_mismatched_and_wrong_pattern_checkpoints_are_one_clear_error_and_nothing_is_overwritten(
) {
    let d = scratch("corrupt");
    assert_ok(&train(
        &d,
        &[
            "--set",
            "max_iters=10",
            "--set",
            "checkpoint_interval=5",
            "--out",
            "run",
        ],
        &[],
    ));
    let run = d.join("run");
    let ck_dir = latest(&run).unwrap().unwrap();
    let log_before = std::fs::read(run.join("log.jsonl")).unwrap();

    // Truncated weights.
    let model = ck_dir.join("model.safetensors");
    let bytes = std::fs::read(&model).unwrap();
    std::fs::write(&model, &bytes[..bytes.len() / 2]).unwrap();
    let o = bin(
        "tp-train",
        &d,
        &["--quiet", "--resume", "run", "--set", "max_iters=20"],
        &[],
    );
    one_clear_error(
        &o,
        "model.safetensors does not match its SHA-256 in SHA256SUMS",
    );
    one_clear_error(
        &o,
        "the earlier checkpoint run/checkpoints/step-000005 is kept",
    );
    assert_eq!(std::fs::read(run.join("log.jsonl")).unwrap(), log_before);
    // Truncated with matching checksums (a damaged write that was sealed anyway): the
    // safetensors reader still refuses it.
    reseal(&ck_dir);
    let o = bin(
        "tp-train",
        &d,
        &["--quiet", "--resume", "run", "--set", "max_iters=20"],
        &[],
    );
    one_clear_error(&o, "truncated");
    assert_eq!(std::fs::read(run.join("log.jsonl")).unwrap(), log_before);

    // Weights of another shape (a narrower model's file in its place).
    assert_ok(&train(
        &d,
        &[
            "--set",
            "max_iters=5",
            "--set",
            "n_embd=32",
            "--out",
            "narrow",
        ],
        &[],
    ));
    let narrow = latest(&d.join("narrow"))
        .unwrap()
        .unwrap()
        .join("model.safetensors");
    std::fs::copy(narrow, &model).unwrap();
    reseal(&ck_dir);
    let o = bin(
        "tp-train",
        &d,
        &["--quiet", "--resume", "run", "--set", "max_iters=20"],
        &[],
    );
    one_clear_error(
        &o,
        "`h.0.fc.w` in the weights has shape [32, 128], meta.json says [64, 256]",
    );

    // A pattern that is not the checkpoint's.
    std::fs::write(&model, &bytes).unwrap();
    reseal(&ck_dir);
    let o = bin(
        "tp-train",
        &d,
        &["--quiet", "--resume", "run", "--pattern", "tttt"],
        &[],
    );
    one_clear_error(
        &o,
        "`pattern` in --pattern tttt cannot change when resuming",
    );
    let cfg_path = run.join("config.yaml");
    let cfg = std::fs::read_to_string(&cfg_path).unwrap();
    std::fs::write(&cfg_path, cfg.replace("pattern: sppp", "pattern: tttt")).unwrap();
    let o = bin("tp-sample", &d, &["run", "--tokens", "5"], &[]);
    one_clear_error(
        &o,
        "does not match this run: pattern \"sppp\" (checkpoint) vs \"tttt\"",
    );
    assert_eq!(std::fs::read(run.join("log.jsonl")).unwrap(), log_before);
}

#[test]
fn tp_sample_generates_from_a_checkpoint_at_tp1_and_tp2() {
    let d = scratch("sample");
    assert_ok(&train(
        &d,
        &["--pattern", "tttt", "--set", "max_iters=20", "--out", "run"],
        &[],
    ));
    let mut texts = Vec::new();
    for tp in ["1", "2"] {
        let o = bin(
            "tp-sample",
            &d,
            &["run", "--prompt", "ROMEO:", "--tokens", "40", "--tp", tp],
            &[],
        );
        assert_ok(&o);
        let text = String::from_utf8_lossy(&o.stdout).to_string();
        assert!(
            text.starts_with("ROMEO:") && text.chars().count() >= 46,
            "{text}"
        );
        texts.push(text);
    }
    // A t-only model is the same function at every tp: same text.
    assert_eq!(texts[0], texts[1]);
}

#[test]
fn the_bpe_text_dataset_round_trips_a_text_file_and_trains() {
    let d = scratch("bpe");
    let text = "First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak. Ünïcödé — ok?\n".repeat(40);
    std::fs::write(d.join("corpus.txt"), &text).unwrap();
    let dir = prepare_text(&d.join("corpus.txt"), &d.join("datasets")).unwrap();
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
    let corpus = d.join("corpus.txt").to_string_lossy().to_string();
    let o = bin(
        "tp-train",
        &d,
        &[
            "--quiet",
            "--set",
            "dataset=text",
            "--set",
            &format!("text_path={corpus}"),
            "--set",
            "n_embd=32",
            "--set",
            "block_size=32",
            "--set",
            "max_iters=3",
            "--set",
            "eval_interval=3",
            "--set",
            "eval_iters=1",
            "--set",
            "sample_tokens=8",
            "--out",
            "run",
        ],
        &[],
    );
    assert_ok(&o);
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
    let layout = Layout::parse("tttt").unwrap();
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

    // s/p models are not GPT-2: a clear refusal.
    assert_ok(&train(&d, &["--set", "max_iters=5", "--out", "spd"], &[]));
    let o = bin("tp-export", &d, &["spd"], &[]);
    one_clear_error(&o, "only t-only models are GPT-2");
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

/// The bytes of every file of a run directory that a tool may write, by name.
fn written_files(run: &Path) -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(run)
        .unwrap()
        .flatten()
        .filter(|e| e.path().is_file())
        .map(|e| {
            (
                e.file_name().to_string_lossy().to_string(),
                std::fs::read(e.path()).unwrap(),
            )
        })
        .collect();
    files.sort();
    files
}

#[test]
fn a_flipped_byte_a_nan_weight_or_a_missing_optimizer_file_is_one_line_for_every_tool_and_nothing_is_written(
) {
    let d = scratch("integrity");
    assert_ok(&train(
        &d,
        &[
            "--pattern",
            "tttt",
            "--set",
            "max_iters=10",
            "--set",
            "checkpoint_interval=5",
            "--out",
            "run",
        ],
        &[],
    ));
    let run = d.join("run");
    let ck_dir = latest(&run).unwrap().unwrap();
    let model = ck_dir.join("model.safetensors");
    let good = std::fs::read(&model).unwrap();
    let before = written_files(&run);
    let tools: [(&str, &[&str]); 4] = [
        (
            "tp-train",
            &["--quiet", "--resume", "run", "--set", "max_iters=20"],
        ),
        ("tp-eval", &["run"]),
        ("tp-sample", &["run", "--tokens", "10"]),
        ("tp-export", &["run", "--out", "exported"]),
    ];
    let all_refuse = |needle: &str| {
        for (tool, args) in tools {
            let o = bin(tool, &d, args, &[]);
            one_clear_error(&o, needle);
            one_clear_error(
                &o,
                "the earlier checkpoint run/checkpoints/step-000005 is kept",
            );
            assert_eq!(written_files(&run), before, "{tool} changed the run");
            assert!(!d.join("exported").exists());
        }
    };

    // One flipped bit in the middle of the weights: the file parses, the values are wrong.
    let mut flipped = good.clone();
    let at = flipped.len() * 3 / 4;
    flipped[at] ^= 0x10;
    std::fs::write(&model, &flipped).unwrap();
    all_refuse("model.safetensors does not match its SHA-256 in SHA256SUMS");

    // A NaN weight in a checkpoint whose checksums match (written that way).
    std::fs::write(&model, &good).unwrap();
    let mut w = candle_core::safetensors::load(&model, &Device::Cpu).unwrap();
    let mut v = w["h.2.fc.w"]
        .flatten_all()
        .unwrap()
        .to_vec1::<f32>()
        .unwrap();
    v[7] = f32::NAN;
    let nan = Tensor::from_vec(v, w["h.2.fc.w"].dims(), &Device::Cpu).unwrap();
    w.insert("h.2.fc.w".into(), nan);
    candle_core::safetensors::save(&w, &model).unwrap();
    reseal(&ck_dir);
    all_refuse("`h.2.fc.w` in model.safetensors holds a non-finite value (NaN)");

    // The optimiser's state missing: only a resume needs it.
    std::fs::write(&model, &good).unwrap();
    reseal(&ck_dir);
    std::fs::remove_file(ck_dir.join("optimizer.m.safetensors")).unwrap();
    let o = bin("tp-train", &d, tools[0].1, &[]);
    one_clear_error(&o, "optimizer.m.safetensors is missing");
    for (tool, args) in &tools[1..] {
        assert_ok(&bin(tool, &d, args, &[]));
    }
    assert!(d.join("exported/model.safetensors").exists());
}

#[test]
fn a_resume_keeps_the_log_lines_before_the_checkpoint_when_the_log_ends_in_a_torn_line() {
    let d = scratch("torn-log");
    let args = |max: &'static str| -> Vec<&'static str> {
        vec![
            "--set",
            max,
            "--set",
            "checkpoint_interval=10",
            "--set",
            "log_interval=1",
            "--set",
            "eval_interval=5",
        ]
    };
    let mut whole = args("max_iters=20");
    whole.extend(["--out", "whole"]);
    assert_ok(&train(&d, &whole, &[]));
    let mut cut = args("max_iters=20");
    cut.extend(["--out", "cut"]);
    assert_ok(&train(&d, &cut, &[]));
    // As if the run had died at step 15 with a full disk: checkpoint 10 is the latest,
    // and the log ends in half a line.
    let run = d.join("cut");
    std::fs::remove_dir_all(run.join("checkpoints/step-000020")).unwrap();
    std::fs::write(run.join("checkpoints/latest"), "step-000010").unwrap();
    for f in ["summary.json", "comm.json", "eval.json", "sample.txt"] {
        std::fs::remove_file(run.join(f)).unwrap();
    }
    let text = std::fs::read_to_string(run.join("log.jsonl")).unwrap();
    let upto15: String = text.lines().take(16).map(|l| format!("{l}\n")).collect();
    std::fs::write(
        run.join("log.jsonl"),
        format!("{upto15}{{\"step\":16,\"train_lo"),
    )
    .unwrap();
    let o = bin("tp-train", &d, &["--quiet", "--resume", "cut"], &[]);
    assert_ok(&o);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("torn line") && out.contains("kept the 10 complete lines"),
        "{out}"
    );
    assert_eq!(log(&run), log(&d.join("whole")));
    assert_eq!(log(&run).len(), 21);
}

#[test]
fn a_reader_racing_a_live_run_that_keeps_one_checkpoint_always_loads_a_healthy_one() {
    use tp_harness::run_dir::{load_checkpoint, Need};
    let d = scratch("race");
    let mut writer = command("tp-train", &d)
        .args([
            "--preset",
            "micro",
            "--set",
            "max_iters=400",
            "--set",
            "checkpoint_interval=1",
            "--set",
            "keep_checkpoints=1",
            "--set",
            "eval_interval=0",
            "--set",
            "final_eval=sampled",
            "--out",
            "run",
            "--quiet",
        ])
        .env("TP_STEP_PAUSE_MS", "2")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let run = d.join("run");
    let t0 = Instant::now();
    while latest(&run).ok().flatten().is_none() {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "no checkpoint appeared"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let (mut loads, mut steps) = (0, std::collections::BTreeSet::new());
    while writer.try_wait().unwrap().is_none() {
        let (_, ck) = load_checkpoint(&run, None, "sample from", Need::Weights)
            .unwrap_or_else(|e| panic!("load {loads} failed while the run was healthy: {e:#}"));
        steps.insert(ck.meta.step);
        loads += 1;
    }
    assert!(writer.wait().unwrap().success());
    // The reader saw the run move on under it many times.
    assert!(
        loads >= 50 && steps.len() >= 20,
        "{loads} loads over {} checkpoints",
        steps.len()
    );
}

#[test]
fn tp_eval_and_tp_scan_refuse_a_live_run_before_computing_anything() {
    let d = scratch("live-eval");
    let mut writer = command("tp-train", &d)
        .args([
            "--pattern",
            "tttt",
            "--set",
            "max_iters=300",
            "--set",
            "checkpoint_interval=1",
            "--out",
            "run",
            "--quiet",
        ])
        .env("TP_STEP_PAUSE_MS", "50")
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let run = d.join("run");
    let t0 = Instant::now();
    while latest(&run).ok().flatten().is_none() {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "no checkpoint appeared"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    // Without its data an evaluation could not even start: the refusal must come first.
    let no_data = [
        ("TP_DATA_DIR", "/nonexistent/data"),
        ("TP_SHARED_DATASETS", "/nonexistent/shared"),
    ];
    for (tool, args) in [
        ("tp-eval", vec!["run"]),
        ("tp-scan", vec!["run", "--tp", "2"]),
    ] {
        let o = bin(tool, &d, &args, &no_data);
        one_clear_error(
            &o,
            &format!("is being written by another tp-train (pid {})", writer.id()),
        );
    }
    writer.kill().unwrap();
    writer.wait().unwrap();
    assert!(!run.join("eval.json").exists() && !run.join("scan.json").exists());
}
