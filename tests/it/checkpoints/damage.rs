//! Damage a run must survive or refuse by name: a NaN during training, truncated,
//! mismatched, flipped or missing checkpoint files, a log that ends in a torn line.

use super::{log, train};
use crate::common::*;
use candle_core::{Device, Tensor};
use std::path::Path;
use tp_lab::run_dir::{latest, Checkpoint};

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

/// `tp-train --resume run --set max_iters=20` in `dir`.
fn resume_to_20(dir: &Path) -> std::process::Output {
    bin(
        "tp-train",
        dir,
        &["--quiet", "--resume", "run", "--set", "max_iters=20"],
        &[],
    )
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
    let o = resume_to_20(&d);
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
    let o = resume_to_20(&d);
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
    let o = resume_to_20(&d);
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
