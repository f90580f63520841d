//! Readers of a run that is still being written: they follow its newest checkpoint or
//! refuse before computing anything.

use crate::common::*;
use std::path::Path;
use std::time::{Duration, Instant};
use tp_lab::run_dir::latest;

#[test]
fn a_reader_racing_a_live_run_that_keeps_one_checkpoint_always_loads_a_healthy_one() {
    use tp_lab::run_dir::{load_checkpoint, Need};
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
    wait_for_first_checkpoint(&run);
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
    wait_for_first_checkpoint(&run);
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

/// Waits (60 s at most) until the live run in `run` has written its first checkpoint.
fn wait_for_first_checkpoint(run: &Path) {
    let t0 = Instant::now();
    while latest(run).ok().flatten().is_none() {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "no checkpoint appeared"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}
