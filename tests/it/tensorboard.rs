//! TensorBoard event files read back by TensorBoard's own reader (`EventAccumulator`,
//! tests/oracle/tb-read.py): every value of each run's log.jsonl, at its step, and read
//! while the run still trains. Runs where Python has the `tensorboard` package
//! (`TP_TB_PYTHON`, else target/py, which scripts/test.sh makes, else python3); says
//! clearly that it skipped elsewhere.

use crate::common::*;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A Python that imports `tensorboard`, if there is one.
fn python() -> Option<PathBuf> {
    let root = Path::new(crate::common::REPO);
    let candidates = [
        std::env::var_os("TP_TB_PYTHON").map(PathBuf::from),
        Some(root.join("target/py/bin/python")),
        Some(PathBuf::from("python3")),
    ];
    candidates.into_iter().flatten().find(|p| {
        Command::new(p)
            .args(["-c", "import tensorboard"])
            .output()
            .is_ok_and(|o| o.status.success())
    })
}

type Scalars = HashMap<String, Vec<(i64, f32)>>;

/// What TensorBoard reads from the event files under `dir`.
fn read(py: &Path, dir: &Path) -> Scalars {
    let script = Path::new(crate::common::REPO).join("tests/oracle/tb-read.py");
    let o = Command::new(py).arg(script).arg(dir).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let raw: HashMap<String, Vec<(i64, f64)>> = serde_json::from_slice(&o.stdout).unwrap();
    raw.into_iter()
        .map(|(k, v)| (k, v.into_iter().map(|(s, x)| (s, x as f32)).collect()))
        .collect()
}

/// Every value of `run`'s log.jsonl is in `tb` at its step, as the f32 TensorBoard keeps.
fn assert_log_equals(run: &Path, tb: &Scalars) {
    let log = std::fs::read_to_string(run.join("log.jsonl")).unwrap();
    let mut checked = 0;
    for line in log.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        let step = v["step"].as_i64().unwrap();
        for (key, tag) in [
            ("train_loss", "loss/train"),
            ("val_loss", "loss/val"),
            ("eval_train_loss", "loss/eval_train"),
            ("lr", "lr"),
            ("ms", "time/ms_per_step"),
            ("tokens_per_s", "throughput/tokens_per_s"),
        ] {
            let Some(want) = v[key].as_f64() else {
                continue;
            };
            let got = tb
                .get(tag)
                .and_then(|s| s.iter().find(|(st, _)| *st == step))
                .unwrap_or_else(|| panic!("{tag} at step {step} not in TensorBoard's view"));
            assert_eq!(got.1, want as f32, "{tag} at step {step}");
            checked += 1;
        }
    }
    assert!(checked > 20, "only {checked} values");
    // One value per logged step, no more.
    let lines = log.lines().filter(|l| l.contains("\"train_loss\"")).count();
    assert_eq!(tb["loss/train"].len(), lines);
}

#[test]
fn a_sweeps_tensorboard_logs_read_back_by_tensorboard_equal_each_runs_log() {
    let Some(py) = python() else {
        eprintln!("skipped: no Python with the tensorboard package (pip install tensorboard, or set TP_TB_PYTHON)");
        return;
    };
    let d = scratch("tb-sweep");
    std::fs::write(
        d.join("s.yaml"),
        "name: tb\nbase: {n_embd: 32, max_iters: 24, eval_interval: 8, eval_iters: 2, log_interval: 4, sample_tokens: 0, tensorboard: true, tensorboard_dir: tb}\ngrid: {pattern: [tttt, llll]}\n",
    )
    .unwrap();
    assert_ok(&bin("tp-sweep", &d, &["s.yaml", "--out", "out"], &[]));
    for point in ["pattern=tttt", "pattern=llll"] {
        let tb = read(&py, &d.join("tb").join(point));
        assert_log_equals(&d.join("out").join(point), &tb);
        // Communication per step by kind: tttt's 8 forward all-reduces a step, and the
        // ladder's hidden time next to its exposed time.
        let calls = &tb["comm/tp-forward/calls_per_step"];
        assert!(calls.iter().all(|(_, c)| *c == 8.0), "{point}: {calls:?}");
        for what in ["ms", "hidden_ms", "exposed_ms", "bytes"] {
            assert!(
                tb.contains_key(&format!("comm/tp-forward/{what}_per_step")),
                "{point}: {what}"
            );
        }
        assert!(tb["grad_norm"].iter().all(|(_, g)| *g > 0.0));
    }
    // The sweep's folder overlays both runs: TensorBoard finds one run per point.
    let all = std::fs::read_dir(d.join("tb")).unwrap().count();
    assert_eq!(all, 2);
}

#[test]
fn tensorboard_sees_a_run_while_it_trains() {
    let Some(py) = python() else {
        eprintln!("skipped: no Python with the tensorboard package (pip install tensorboard, or set TP_TB_PYTHON)");
        return;
    };
    let d = scratch("tb-live");
    let mut child = command("tp-train", &d)
        .args([
            "--tensorboard",
            "--set",
            "n_embd=32",
            "--set",
            "max_iters=200",
            "--set",
            "log_interval=1",
            "--set",
            "eval_interval=0",
            "--quiet",
            "--out",
            "run",
        ])
        .env("TP_STEP_PAUSE_MS", "50")
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let mut seen = 0;
    while std::time::Instant::now() < deadline && seen < 5 {
        std::thread::sleep(std::time::Duration::from_millis(300));
        if d.join("run/tb").exists() {
            seen = read(&py, &d.join("run/tb"))
                .get("loss/train")
                .map_or(0, Vec::len);
        }
    }
    let running = child.try_wait().unwrap().is_none();
    let _ = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status();
    let _ = child.wait();
    assert!(seen >= 5, "TensorBoard saw {seen} steps");
    assert!(running, "the run had ended: nothing was read live");
}

/// A run killed after its checkpoint at step 20 (a fault at step 26) and resumed: its
/// log holds each step once, and so does TensorBoard's view of its event files — the
/// resume's SessionLog START at step 20 makes TensorBoard drop what the first invocation
/// logged from step 20 on.
#[test]
fn a_resumed_run_shows_each_step_once_in_tensorboard() {
    let Some(py) = python() else {
        eprintln!("skipped: no Python with the tensorboard package (pip install tensorboard, or set TP_TB_PYTHON)");
        return;
    };
    let d = scratch("tb-resume");
    let args = [
        "--tensorboard",
        "--set",
        "n_embd=32",
        "--set",
        "max_iters=40",
        "--set",
        "log_interval=1",
        "--set",
        "eval_interval=10",
        "--set",
        "eval_iters=2",
        "--set",
        "checkpoint_interval=10",
        "--set",
        "sample_tokens=0",
        "--quiet",
        "--out",
        "run",
    ];
    let first = bin("tp-train", &d, &args, &[("TP_INJECT_FAULT", "0:26")]);
    assert!(!first.status.success());
    let again = bin("tp-train", &d, &["--resume", "run", "--quiet"], &[]);
    assert_ok(&again);
    let tb = read(&py, &d.join("run/tb"));
    assert_log_equals(&d.join("run"), &tb);
    for (tag, points) in &tb {
        let mut steps: Vec<i64> = points.iter().map(|p| p.0).collect();
        steps.dedup();
        assert_eq!(
            steps.len(),
            points.len(),
            "{tag}: a step shown twice: {points:?}"
        );
    }
    assert_eq!(tb["loss/train"].len(), 40);
    // The communication of every logged step after the first (step 0 has no step
    // before it), the checkpoint step 20 the resume repeated included.
    let comm: Vec<&String> = tb.keys().filter(|t| t.starts_with("comm/")).collect();
    assert!(!comm.is_empty());
    for tag in comm {
        let steps: Vec<i64> = tb[tag].iter().map(|p| p.0).collect();
        assert_eq!(steps, (1..40).collect::<Vec<i64>>(), "{tag}");
    }
}

/// Two runs whose directories share a name (`pa/r1`, `pb/r1`) and one tensorboard_dir
/// are two runs in TensorBoard, each with its own values.
#[test]
fn runs_of_one_name_in_one_tensorboard_dir_stay_apart() {
    let Some(py) = python() else {
        eprintln!("skipped: no Python with the tensorboard package (pip install tensorboard, or set TP_TB_PYTHON)");
        return;
    };
    let d = scratch("tb-twins");
    for (out, seed) in [("pa/r1", "1"), ("pb/r1", "2")] {
        let o = bin(
            "tp-train",
            &d,
            &[
                "--tensorboard",
                "--set",
                "tensorboard_dir=tb",
                "--set",
                "n_embd=32",
                "--set",
                "max_iters=12",
                "--set",
                "log_interval=1",
                "--set",
                "eval_interval=6",
                "--set",
                "eval_iters=2",
                "--set",
                "sample_tokens=0",
                "--seed",
                seed,
                "--quiet",
                "--out",
                out,
            ],
            &[],
        );
        assert_ok(&o);
    }
    let mut subs: Vec<String> = std::fs::read_dir(d.join("tb"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .collect();
    subs.sort();
    assert_eq!(subs.len(), 2, "{subs:?}");
    assert_eq!(subs[0], "r1");
    assert!(subs[1].starts_with("r1-"), "{subs:?}");
    let owner = |s: &str| std::fs::read_to_string(d.join("tb").join(s).join(".tp-run")).unwrap();
    let (a, b) = (owner(&subs[0]), owner(&subs[1]));
    assert!(a.ends_with("pa/r1") && b.ends_with("pb/r1"), "{a} {b}");
    assert_log_equals(&d.join("pa/r1"), &read(&py, &d.join("tb").join(&subs[0])));
    assert_log_equals(&d.join("pb/r1"), &read(&py, &d.join("tb").join(&subs[1])));
}
