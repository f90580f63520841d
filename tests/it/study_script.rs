//! `scripts/study.sh` as the third fault probe tried it (issue 48): `--keep` keeps only
//! settled records (the log compressed, read back as written) (never a summary beside a longer config while a sweep extends the
//! run), and a signal to the script reaches its sweep and the sweep's run, none left
//! running under PID 1.

use crate::common::*;
use std::path::Path;

/// study.sh's copy in a folder of its own, with `runs/` and a sweep file of its own, run
/// with the built binaries.
fn study_copy(d: &Path, sweep_yaml: &str) -> std::process::Command {
    let root = Path::new(crate::common::REPO);
    std::fs::create_dir_all(d.join("scripts")).unwrap();
    std::fs::create_dir_all(d.join("configs/sweeps")).unwrap();
    std::fs::copy(root.join("scripts/study.sh"), d.join("scripts/study.sh")).unwrap();
    std::fs::write(d.join("configs/sweeps/study_tuned.yaml"), sweep_yaml).unwrap();
    let bins = Path::new(env!("CARGO_BIN_EXE_tp-train")).parent().unwrap();
    let mut c = std::process::Command::new("bash");
    with_test_data(&mut c)
        .arg(d.join("scripts/study.sh"))
        .current_dir(d)
        .env("TP_STUDY_BIN", bins);
    c
}

/// A run whose summary is of fewer steps than its config asks (a sweep extending it)
/// is not kept; a settled one is.
#[test]
fn study_keep_keeps_only_settled_records() {
    let d = scratch("nl3-study-keep");
    let mut c = study_copy(
        &d,
        "name: study_tuned\nbase: {max_iters: 2}\ngrid: {pattern: [tt]}\n",
    );
    let runs = d.join("runs/study_tuned");
    // The last run kept lacks a record (no eval.json): a false test that ended the
    // script under `set -e` before its closing line (and the next sweep's keep).
    let points = [
        ("pattern=a", 600, 600),
        ("pattern=b", 600, 1000),
        ("pattern=c", 5, 5),
    ];
    for (point, steps, iters) in points {
        let run = runs.join(point);
        std::fs::create_dir_all(&run).unwrap();
        std::fs::write(
            run.join("summary.json"),
            format!("{{\n  \"steps\": {steps},\n  \"x\": 1\n}}"),
        )
        .unwrap();
        std::fs::write(
            run.join("config.yaml"),
            format!("format_version: 2\nmax_iters: {iters}\n"),
        )
        .unwrap();
        std::fs::write(
            run.join("log.jsonl"),
            format!(
                "{{\"step\":0,\"train_loss\":4.5}}\n{{\"step\":{steps},\"train_loss\":2.25}}\n"
            ),
        )
        .unwrap();
    }
    let o = c.arg("--keep").output().unwrap();
    assert_ok(&o);
    let kept = d.join("plots/study/runs/study_tuned");
    assert!(kept.join("pattern=a/summary.json").is_file());
    assert!(!kept.join("pattern=b").exists());
    assert!(kept.join("pattern=c/summary.json").is_file());
    // The log is kept compressed, and reads back as the run wrote it.
    assert!(!kept.join("pattern=a/log.jsonl").exists());
    let log = tp_lab::run_dir::log::read_log(&kept.join("pattern=a")).unwrap();
    assert_eq!(
        log.iter()
            .map(|l| (l.step, l.train_loss))
            .collect::<Vec<_>>(),
        [(0, Some(4.5)), (600, Some(2.25))]
    );
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("records of the finished runs"),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    assert!(String::from_utf8_lossy(&o.stdout)
        .contains("pattern=b/ is being extended or its records disagree"));
}

/// SIGTERM to study.sh alone reaches the sweep it runs, which passes it to its run; all
/// three end, none is left running under PID 1.
#[test]
fn sigterm_to_study_sh_stops_its_sweep_and_run_too() {
    let d = scratch("nl3-study-signal");
    let mut c = study_copy(
        &d,
        "name: study_tuned\nbase: {n_embd: 32, max_iters: 400, eval_interval: 0, sample_tokens: 0, checkpoint_interval: 5}\ngrid: {pattern: [tt]}\n",
    );
    let child = c
        .arg("study_tuned")
        .env("TP_STEP_PAUSE_MS", "50")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let run = d.join("runs/study_tuned/pattern=tt");
    let t0 = std::time::Instant::now();
    while !run.join("log.jsonl").exists() {
        assert!(t0.elapsed().as_secs() < 60, "the study's run never started");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    // SAFETY: kill(2) on our own child.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
    let o = child.wait_with_output().unwrap();
    assert!(!o.status.success());
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        text.contains("tp-sweep: stopped by SIGTERM")
            && text.contains("study.sh: stopped by a signal"),
        "{text}"
    );
    // Nothing of the study is left: the run's lock is free and no process runs in it.
    assert!(!tp_lab::run_dir::DirLock::held_elsewhere(&run));
    // Processes working in the study's folder (their cwd) that are a sweep or a trainer.
    let here = std::fs::canonicalize(&*d).unwrap();
    let left: Vec<String> = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|p| std::fs::read_link(p.path().join("cwd")).is_ok_and(|c| c == here))
        .filter_map(|p| std::fs::read_to_string(p.path().join("cmdline")).ok())
        .filter(|cmd| cmd.contains("tp-sweep") || cmd.contains("tp-train"))
        .collect();
    assert!(left.is_empty(), "still running: {left:?}");
}
