//! Runs that survive and travel: exact resume, re-sharding, crash-safe writes, sampling
//! from a checkpoint; damage (`damage`), live readers (`live`) and other formats
//! (`formats`) in their own files.

mod damage;
mod formats;
mod live;

use crate::common::*;
use candle_core::Tensor;
use std::path::Path;
use std::time::{Duration, Instant};
use tp_harness::blocks::Fwd;
use tp_harness::model::Gpt;
use tp_harness::tp::StoredParams;
use tp_lab::launch::threads::on_tp_threads;
use tp_lab::run_dir::{latest, read_config as read_run_config, Checkpoint};

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
    let layout = cfg.layout().clone();
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
