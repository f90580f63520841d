//! `tp-train` as a user runs it: bad input gives one line and exit code 2 and writes
//! nothing; a short run writes its outputs; the default experiment learns.

use crate::common::{command, scratch, tp_train};
use std::path::Path;

fn assert_user_error(dir: &Path, args: &[&str], needle: &str) {
    let out = tp_train(dir, &[args, &["--out", "run"]].concat());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(2),
        "{args:?}: exit code; stderr: {err}"
    );
    assert_eq!(
        err.trim_end().lines().count(),
        1,
        "{args:?}: not one line: {err}"
    );
    assert!(
        err.contains(needle),
        "{args:?}: expected `{needle}` in: {err}"
    );
    assert!(
        !dir.join("run").exists(),
        "{args:?}: a run directory was created"
    );
}

#[test]
fn bad_pattern_is_one_line_exit_2_naming_the_character() {
    let d = scratch("pattern");
    assert_user_error(&d, &["--pattern", "tsqt"], "'q'");
    assert_user_error(&d, &["--pattern", "3x"], "trailing 'x'");
}

/// The CPU build refuses `device: cuda` before touching data or the run directory, and
/// says how to get the build that can; an unknown device or dtype names the key.
#[test]
fn cuda_in_the_cpu_build_and_unknown_devices_are_one_line_errors() {
    if cfg!(feature = "cuda") {
        return;
    }
    let d = scratch("device");
    assert_user_error(&d, &["--device", "cuda"], "scripts/build-cuda.sh");
    assert_user_error(&d, &["--set", "device=tpu"], "`device`");
    assert_user_error(&d, &["--dtype", "f16"], "`dtype`");
}

/// `TP_SIMD` picks a lower SIMD level for the kernels; a value that is none is refused
/// before anything runs.
#[test]
fn unknown_tp_simd_level_is_a_one_line_error() {
    let d = scratch("simd");
    let out = command("tp-train", &d)
        .args(["--quiet", "--out", "run"])
        .current_dir(&d)
        .env("TP_SIMD", "neon")
        .output()
        .expect("tp-train runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(
        err.contains("TP_SIMD=neon") && err.contains("avx2"),
        "{err}"
    );
    assert!(!d.join("run").exists());
}

#[test]
fn pattern_and_n_layer_mismatch_names_both_numbers() {
    let d = scratch("nlayer");
    assert_user_error(
        &d,
        &["--pattern", "sppp", "--set", "n_layer=6"],
        "4 layers but n_layer is 6",
    );
}

#[test]
fn sizes_not_divisible_by_tp_are_errors() {
    let d = scratch("divide");
    assert_user_error(&d, &["--tp", "3"], "n_head 4 is not divisible by tp 3");
    assert_user_error(
        &d,
        &["--tp", "8", "--set", "n_head=8", "--set", "n_embd=9"],
        "4*n_embd = 36 is not divisible by tp 8",
    );
}

#[test]
fn unknown_config_key_and_wrong_type_are_errors() {
    let d = scratch("keys");
    assert_user_error(
        &d,
        &["--set", "learning_rat=0.1"],
        "unknown config key `learning_rat`",
    );
    std::fs::write(d.join("bad.yaml"), "pattern: tstt\nbatchsize: 4\n").unwrap();
    assert_user_error(
        &d,
        &["--config", "bad.yaml"],
        "unknown config key `batchsize` in bad.yaml",
    );
    assert_user_error(&d, &["--set", "max_iters=lots"], "`max_iters`");
}

#[test]
fn missing_dataset_offline_is_one_clear_line() {
    let d = scratch("offline");
    let out = command("tp-train", &d)
        .args(["--quiet", "--out", "run"])
        .current_dir(&d)
        .env("TP_SHARED_DATASETS", d.join("nowhere"))
        .env("TP_DATA_DIR", d.join("datasets"))
        .env("TP_DATA_URL_BASE", "http://127.0.0.1:9")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(
        err.contains("input.txt is missing") && err.contains("download"),
        "{err}"
    );
    assert!(!d.join("run").exists());
}

#[test]
fn existing_run_directory_is_refused_and_left_untouched() {
    let d = scratch("existing");
    std::fs::create_dir_all(d.join("run")).unwrap();
    std::fs::write(d.join("run/log.jsonl"), "keep me\n").unwrap();
    let out = tp_train(&d, &["--out", "run", "--set", "max_iters=1"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("already holds a run"));
    assert_eq!(
        std::fs::read_to_string(d.join("run/log.jsonl")).unwrap(),
        "keep me\n"
    );
}

#[test]
fn short_run_writes_config_log_and_comm_tally_matching_the_formula() {
    let d = scratch("short");
    let out = tp_train(
        &d,
        &[
            "--pattern",
            "3xsppp",
            "--tp",
            "2",
            "--out",
            "run",
            "--set",
            "max_iters=6",
            "--set",
            "eval_interval=3",
            "--set",
            "eval_iters=2",
            "--set",
            "n_embd=32",
            "--set",
            "log_interval=2",
            "--set",
            "sample_tokens=20",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("run directory: run"), "{stdout}");
    let run = d.join("run");
    let cfg = std::fs::read_to_string(run.join("config.yaml")).unwrap();
    assert!(
        cfg.contains("pattern: 3xsppp") && cfg.contains("n_layer: 12"),
        "{cfg}"
    );
    let log: Vec<serde_json::Value> = std::fs::read_to_string(run.join("log.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(log
        .iter()
        .any(|l| l["step"] == 0 && l["val_loss"].is_number() && l["train_loss"].is_number()));
    assert!(log
        .iter()
        .any(|l| l["step"] == 6 && l["val_loss"].is_number()));
    assert!(log
        .iter()
        .filter(|l| l["train_loss"].is_number())
        .all(|l| l["lr"].is_number() && l["ms"].is_number() && l["tokens_per_s"].is_number()));
    let comm: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("comm.json")).unwrap()).unwrap();
    assert_eq!(comm["tp_forward_allreduces"], 6.0);
    assert_eq!(comm["tp_backward_allreduces"], 6.0);
    assert_eq!(comm["formula_forward_allreduces"], 6);
    assert_eq!(comm["layers"].as_array().unwrap().len(), 12);
    assert_eq!(comm["per_step"]["tp-forward"]["calls"], 6.0);
    assert!(comm["per_step"]["tp-param-grad"]["bytes"].as_f64().unwrap() > 0.0);
    assert!(!std::fs::read_to_string(run.join("sample.txt"))
        .unwrap()
        .is_empty());
}

#[test]
fn default_experiment_300_iterations_bring_val_loss_under_2_6() {
    let d = scratch("converge");
    let out = tp_train(
        &d,
        &[
            "--out",
            "run",
            "--set",
            "max_iters=300",
            "--set",
            "eval_interval=300",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let vals: Vec<f64> = std::fs::read_to_string(d.join("run/log.jsonl"))
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["val_loss"].as_f64())
        .collect();
    assert_eq!(vals.len(), 2, "{vals:?}");
    assert!(
        (3.9..4.5).contains(&vals[0]),
        "initial val loss {}",
        vals[0]
    );
    assert!(vals[1] < 2.6, "val loss after 300 iterations {}", vals[1]);
    eprintln!("val loss {:.4} -> {:.4}", vals[0], vals[1]);
}

#[test]
fn a_rank_that_fails_ends_the_whole_job_with_its_message_and_nobody_hangs() {
    let d = scratch("rank-fault");
    let start = std::time::Instant::now();
    let out = command("tp-train", &d)
        .args([
            "--quiet",
            "--out",
            "run",
            "--tp",
            "2",
            "--dp",
            "2",
            "--set",
            "max_iters=50",
            "--set",
            "n_embd=32",
        ])
        .current_dir(&d)
        .env("TP_INJECT_FAULT", "1:3")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("rank 1") && err.contains("injected fault"),
        "{err}"
    );
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(start.elapsed().as_secs() < 30);
}

#[test]
fn optimiser_values_pytorch_refuses_are_errors_before_anything_is_written() {
    let d = scratch("values");
    for (set, needle) in [
        ("learning_rate=-1", "learning_rate must be a number >= 0"),
        ("beta2=1.5", "beta2 must be in [0, 1)"),
        ("weight_decay=-0.1", "weight_decay must be a number >= 0"),
        ("dropout=1", "dropout must be in [0, 1)"),
        ("adam_eps=.nan", "adam_eps must be a number >= 0"),
        (
            "sample_temperature=0",
            "sample_temperature must be a positive number",
        ),
    ] {
        assert_user_error(&d, &["--set", set], needle);
    }
}

#[test]
fn a_block_size_beyond_the_data_is_refused_before_any_memory_is_taken() {
    let d = scratch("huge-block");
    let start = std::time::Instant::now();
    assert_user_error(
        &d,
        &["--set", "block_size=100000000"],
        "too few for block_size 100000000",
    );
    assert!(start.elapsed().as_secs() < 20, "the check came too late");
}

#[test]
fn a_second_trainer_on_a_run_directory_being_written_stops_with_one_line() {
    let d = scratch("lock");
    let mut first = command("tp-train", &d)
        .args([
            "--quiet",
            "--out",
            "run",
            "--set",
            "max_iters=100000",
            "--set",
            "eval_interval=0",
        ])
        .current_dir(&d)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let waited = std::time::Instant::now();
    while !d.join("run/log.jsonl").exists() && waited.elapsed().as_secs() < 60 {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let log_before = std::fs::read(d.join("run/config.yaml")).unwrap();
    let second = tp_train(&d, &["--resume", "run"]);
    let err = String::from_utf8_lossy(&second.stderr);
    first.kill().unwrap();
    first.wait().unwrap();
    assert_eq!(second.status.code(), Some(2), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(
        err.contains("being written by another tp-train") && err.contains("pid"),
        "{err}"
    );
    assert_eq!(
        std::fs::read(d.join("run/config.yaml")).unwrap(),
        log_before
    );
    // Once the owner is gone (killed: the OS released its lock), resuming works again;
    // killed before its first checkpoint, the run trains again from step 0.
    let third = tp_train(&d, &["--resume", "run", "--set", "max_iters=3"]);
    let out = String::from_utf8_lossy(&third.stdout);
    assert!(
        third.status.success(),
        "{}",
        String::from_utf8_lossy(&third.stderr)
    );
    assert!(out.contains("training it again from step 0"), "{out}");
    assert!(d.join("run/summary.json").exists());
}

#[test]
fn portable_kernels_train_the_default_experiment_within_1e3_of_fused_for_50_steps() {
    let d = scratch("portable");
    let losses = |kernels: &str| -> Vec<(u64, f64)> {
        let out = tp_train(
            &d,
            &[
                "--out",
                kernels,
                "--set",
                "max_iters=50",
                "--set",
                "log_interval=1",
                "--set",
                "eval_interval=25",
                "--set",
                "eval_iters=4",
                "--set",
                "sample_tokens=0",
                "--set",
                &format!("kernels={kernels}"),
            ],
        );
        assert!(
            out.status.success(),
            "{kernels}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::fs::read_to_string(d.join(kernels).join("log.jsonl"))
            .unwrap()
            .lines()
            .flat_map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).unwrap();
                let step = v["step"].as_u64().unwrap();
                ["train_loss", "eval_train_loss", "val_loss"]
                    .into_iter()
                    .filter_map(move |k| v[k].as_f64().map(|x| (step, x)))
                    .collect::<Vec<_>>()
            })
            .collect()
    };
    let (fused, portable) = (losses("fused"), losses("portable"));
    assert_eq!(fused.len(), portable.len());
    assert!(fused.len() >= 50 + 3, "{} losses logged", fused.len());
    for ((s, a), (_, b)) in fused.iter().zip(&portable) {
        assert!((a - b).abs() <= 1e-3, "step {s}: fused {a} vs portable {b}");
    }
    assert!(
        fused.iter().zip(&portable).any(|(a, b)| a.1 != b.1),
        "the two paths gave bit-identical losses: is `kernels` read at all?"
    );
}
