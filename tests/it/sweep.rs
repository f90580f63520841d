//! `tp-sweep` and `tp-plot` as a user runs them: summaries and plots, skipping finished
//! runs, resuming half-done ones, reporting failures, and rejecting bad grids up front.

use crate::common::*;
use std::path::Path;

pub(crate) const BASE: &str = "base: {n_embd: 32, max_iters: 6, eval_interval: 3, eval_iters: 2, checkpoint_interval: 3, sample_tokens: 0, log_interval: 1}\n";

pub(crate) fn sweep(dir: &Path, body: &str) -> std::process::Output {
    std::fs::write(dir.join("sweep.yaml"), format!("name: tiny\n{BASE}{body}")).unwrap();
    bin("tp-sweep", dir, &["sweep.yaml", "--out", "out"], &[])
}

/// Each sweep body is refused as a user should see it: exit 2, one line that contains
/// its needle, and no run directory made.
pub(crate) fn assert_sweeps_refused(scratch_name: &str, cases: &[(&str, &str)]) {
    for (i, (body, needle)) in cases.iter().enumerate() {
        let d = scratch(&format!("{scratch_name}-{i}"));
        let o = sweep(&d, body);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{body}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        assert!(err.contains(needle), "{body}: expected `{needle}` in {err}");
        assert!(!d.join("out").exists(), "{body}: something ran");
    }
}

#[test]
fn a_two_point_sweep_writes_summaries_and_plots_and_a_rerun_skips_both() {
    let d = scratch("sweep2");
    let o = sweep(&d, "grid: {pattern: [tttt, sppp]}\n");
    assert_ok(&o);
    let out = d.join("out");
    let csv = std::fs::read_to_string(out.join("summary.csv")).unwrap();
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines.len(), 3, "{csv}");
    assert_eq!(lines[0], "run,pattern,tp,dp,status,forward_allreduces_per_step,allreduces_per_layer,final_train_loss,final_val_loss,best_val_loss,tokens_per_s,wall_s,steps,machine,machine_shared");
    // The machine the speeds were measured on, quoted (it has commas).
    let machine = format!("\"{}", crate::common::machine::machine_here());
    assert!(lines[1].contains(&machine), "{csv}");
    assert!(
        lines[1].starts_with("pattern=tttt,tttt,2,1,finished,8,2.00,"),
        "{csv}"
    );
    assert!(
        lines[2].starts_with("pattern=sppp,sppp,2,1,finished,2,0.50,"),
        "{csv}"
    );
    let md = std::fs::read_to_string(out.join("summary.md")).unwrap();
    assert!(
        md.contains("| pattern=sppp | sppp | 2 | 1 | finished | 2 |"),
        "{md}"
    );
    for f in ["loss_curves", "tradeoff"] {
        assert_png(&out.join(format!("plots/{f}.png")));
        assert_svg(&out.join(format!("plots/{f}.svg")));
    }
    let again = sweep(&d, "grid: {pattern: [tttt, sppp]}\n");
    assert_ok(&again);
    let text = String::from_utf8_lossy(&again.stdout);
    assert_eq!(
        text.matches("finished earlier, skipped").count(),
        2,
        "{text}"
    );
    assert!(!text.contains("running"), "{text}");
}

#[test]
fn a_half_done_run_resumes_from_its_checkpoint_and_ends_where_it_would_have() {
    let d = scratch("sweephalf");
    assert_ok(&sweep(&d, "grid: {pattern: [tstt]}\n"));
    let run = d.join("out/pattern=tstt");
    let before = std::fs::read_to_string(run.join("summary.json")).unwrap();
    let final_val =
        |s: &str| serde_json::from_str::<serde_json::Value>(s).unwrap()["final_val_loss"].clone();
    // Make it half-done: as if killed after the step-3 checkpoint.
    std::fs::remove_file(run.join("summary.json")).unwrap();
    std::fs::remove_dir_all(run.join("checkpoints/step-000006")).unwrap();
    std::fs::write(run.join("checkpoints/latest"), "step-000003").unwrap();
    let o = sweep(&d, "grid: {pattern: [tstt]}\n");
    assert_ok(&o);
    assert!(String::from_utf8_lossy(&o.stdout).contains("resuming from its latest checkpoint"));
    let after = std::fs::read_to_string(run.join("summary.json")).unwrap();
    assert_eq!(final_val(&after), final_val(&before));
}

#[test]
fn a_run_that_diverges_is_reported_as_such_and_the_other_still_completes() {
    let d = scratch("sweepfail");
    // A learning rate of 1e9 drives the loss to NaN within a few steps: an outcome of
    // that point (recorded in its diverged.json), not a failure of the sweep.
    let o = sweep(&d, "grid: {learning_rate: [1.0e9, 1.0e-3]}\n");
    assert_eq!(o.status.code(), Some(0));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("diverged: ") && text.contains("NaN"),
        "{text}"
    );
    assert!(text.contains("1 finished, 1 diverged, 0 failed"), "{text}");
    let csv = std::fs::read_to_string(d.join("out/summary.csv")).unwrap();
    assert!(
        csv.contains(",diverged at step ") && csv.contains(",finished,"),
        "{csv}"
    );
    assert!(d.join("out/learning_rate=0.001/summary.json").exists());
    assert_png(&d.join("out/plots/loss_curves.png"));
}

#[test]
fn unknown_grid_keys_and_an_empty_grid_are_clear_errors_before_anything_runs() {
    let cases = [
        ("grid: {patern: [tttt]}\n", "unknown config key `patern`"),
        ("grid: {}\n", "grid of sweep.yaml is empty"),
        ("", "grid of sweep.yaml is empty"),
        ("grid: {pattern: []}\n", "grid key `pattern`"),
        ("grid: {pattern: [tttt, tsxq]}\n", "bad pattern \"tsxq\""),
    ];
    assert_sweeps_refused("sweepbad", &cases);
}

/// `seeds` makes replicates: the summary's group statistics equal the mean, sample
/// standard deviation and t-interval computed here from the runs' own summaries, and the
/// paired difference against the baseline likewise (named in another spelling of its
/// layout, `4xt` for `tttt`: pairing is by layout, not text); the plots draw them.
#[test]
fn a_sweep_with_seeds_reports_replicate_statistics_matching_its_runs() {
    let d = scratch("sweep-seeds");
    let o = sweep(
        &d,
        "grid: {pattern: [tttt, sppp]}\nseeds: [1, 2, 3]\nbaseline: 4xt\n",
    );
    assert_ok(&o);
    let out = d.join("out");
    let final_val = |pattern: &str, seed: u64| -> f64 {
        let dir = out.join(format!("pattern={pattern},seed={seed}"));
        let s: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("summary.json")).unwrap())
                .unwrap();
        s["final_val_loss"].as_f64().unwrap()
    };
    let t: Vec<f64> = (1..=3).map(|s| final_val("tttt", s)).collect();
    let sp: Vec<f64> = (1..=3).map(|s| final_val("sppp", s)).collect();
    let stats = |v: &[f64]| {
        let mean = v.iter().sum::<f64>() / 3.0;
        let std = (v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / 2.0).sqrt();
        (mean, std, 4.303 * std / 3f64.sqrt())
    };
    let diffs: Vec<f64> = sp.iter().zip(&t).map(|(a, b)| a - b).collect();
    let groups = std::fs::read_to_string(out.join("groups.csv")).unwrap();
    let rows: Vec<Vec<&str>> = groups
        .lines()
        .skip(1)
        .map(|l| l.split(',').collect())
        .collect();
    assert_eq!(rows.len(), 2, "{groups}");
    let close = |cell: &str, want: f64| {
        let got: f64 = cell.parse().unwrap();
        assert!((got - want).abs() <= 6e-5, "{cell} vs {want:.5}\n{groups}");
    };
    for (row, vals) in [(&rows[0], &t), (&rows[1], &sp)] {
        assert_eq!(row[3], "3", "{groups}");
        let (m, s, c) = stats(vals);
        close(row[4], m);
        close(row[5], s);
        close(row[6], c);
    }
    assert_eq!(rows[0][0], "pattern=tttt");
    assert_eq!(rows[0][7], "", "the baseline has no difference with itself");
    let (dm, ds, dc) = stats(&diffs);
    close(rows[1][7], dm);
    close(rows[1][8], dc);
    let significant = dm.abs() > dc;
    assert_eq!(rows[1][9], if significant { "yes" } else { "no" });
    // Three pairs: (t975 + t80 at 2 degrees of freedom) sd / sqrt 3.
    close(rows[1][10], (4.303 + 1.061) * ds / 3f64.sqrt());
    let md = std::fs::read_to_string(out.join("summary.md")).unwrap();
    assert!(
        md.contains("## Replicates") && md.contains("paired by seed against `4xt`"),
        "{md}"
    );
    for f in ["loss_curves", "tradeoff"] {
        assert_png(&out.join(format!("plots/{f}.png")));
    }
    let svg = std::fs::read_to_string(out.join("plots/tradeoff.svg")).unwrap();
    assert!(
        svg.contains("95% interval") && svg.contains("(n=3)"),
        "no intervals drawn"
    );
}

#[test]
fn seeds_with_a_seed_grid_key_or_an_unknown_baseline_are_refused_up_front() {
    let d = scratch("sweep-seeds-bad");
    let o = sweep(&d, "grid: {pattern: [tttt], seed: [1, 2]}\nseeds: [3]\n");
    assert_eq!(
        o.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(String::from_utf8_lossy(&o.stderr).contains("both seeds and a seed grid key"));
    let o = sweep(&d, "grid: {pattern: [tttt]}\nbaseline: pppp\n");
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("baseline `pppp`"));
    assert!(!d.join("out").exists());
}

/// Waits up to a minute for `cond`.
fn wait_for(what: &str, cond: impl Fn() -> bool) {
    let t0 = std::time::Instant::now();
    while !cond() {
        assert!(t0.elapsed().as_secs() < 60, "gave up waiting for {what}");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// A one-point sweep whose run takes `steps` x 100 ms (TP_STEP_PAUSE_MS), started in the
/// background.
fn slow_sweep(d: &Path, steps: usize) -> std::process::Child {
    std::fs::write(
        d.join("sweep.yaml"),
        format!("name: slow\nbase: {{n_embd: 32, max_iters: {steps}, eval_interval: 0, checkpoint_interval: 5, sample_tokens: 0, log_interval: 1, final_eval: sampled}}\ngrid: {{pattern: [tttt]}}\n"),
    )
    .unwrap();
    command("tp-sweep", d)
        .args(["sweep.yaml", "--out", "out"])
        .env("TP_STEP_PAUSE_MS", "100")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

#[test]
fn a_second_tp_sweep_on_a_sweep_directory_in_use_stops_in_one_line_naming_the_owner() {
    let d = scratch("sweeplock");
    let first = slow_sweep(&d, 30);
    let run = d.join("out/pattern=tttt");
    wait_for("the first sweep's run", || run.join("log.jsonl").exists());
    let second = bin("tp-sweep", &d, &["sweep.yaml", "--out", "out"], &[]);
    one_clear_error(
        &second,
        &format!(
            "out is being written by another tp-sweep (pid {})",
            first.id()
        ),
    );
    let o = first.wait_with_output().unwrap();
    assert_ok(&o);
    let csv = std::fs::read_to_string(d.join("out/summary.csv")).unwrap();
    assert!(
        csv.contains(",finished,") && !csv.contains(",failed,"),
        "{csv}"
    );
}

#[test]
fn sigint_to_tp_sweep_alone_reaches_its_run_which_ends_before_the_sweep_and_a_rerun_resumes() {
    let d = scratch("sweepint");
    let sweep = slow_sweep(&d, 200);
    let run = d.join("out/pattern=tttt");
    wait_for("a checkpoint of the sweep's run", || {
        tp_lab::run_dir::latest(&run).ok().flatten().is_some()
    });
    // SAFETY: kill(2) on our own child.
    assert_eq!(unsafe { libc::kill(sweep.id() as i32, libc::SIGINT) }, 0);
    let t0 = std::time::Instant::now();
    let o = sweep.wait_with_output().unwrap();
    assert!(
        t0.elapsed().as_secs() < 30,
        "the sweep took {:?} to stop",
        t0.elapsed()
    );
    assert_eq!(
        o.status.code(),
        Some(130),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("stopped by SIGINT"), "{err}");
    // Its run ended before it did: nobody holds the run's lock any more.
    assert!(!tp_lab::run_dir::DirLock::held_elsewhere(&run));
    assert!(!run.join("summary.json").exists());
    let again = bin("tp-sweep", &d, &["sweep.yaml", "--out", "out"], &[]);
    assert_ok(&again);
    let text = String::from_utf8_lossy(&again.stdout);
    assert!(
        text.contains("resuming from its latest checkpoint"),
        "{text}"
    );
    assert!(run.join("summary.json").exists());
}

#[test]
fn a_run_killed_after_its_last_checkpoint_keeps_its_figures_in_the_resumed_sweeps_summary() {
    let d = scratch("sweepclosing");
    assert_ok(&sweep(&d, "grid: {pattern: [tstt]}\n"));
    let out = d.join("out");
    let run = out.join("pattern=tstt");
    let row = |csv: &str| -> Vec<String> {
        let line = csv.lines().nth(1).unwrap();
        // Timing columns aside (tokens_per_s, wall_s and what follows).
        line.split(',').take(10).map(String::from).collect()
    };
    let before = row(&std::fs::read_to_string(out.join("summary.csv")).unwrap());
    let comm_before = std::fs::read_to_string(run.join("comm.json")).unwrap();
    // Killed in its final evaluation: the last checkpoint is written, nothing after it.
    for f in ["summary.json", "comm.json", "eval.json", "sample.txt"] {
        let _ = std::fs::remove_file(run.join(f));
    }
    let o = sweep(&d, "grid: {pattern: [tstt]}\n");
    assert_ok(&o);
    let after = row(&std::fs::read_to_string(out.join("summary.csv")).unwrap());
    assert_eq!(after, before);
    assert_eq!(after[5], "7", "forward all-reduces per step");
    let calls = |text: &str| -> serde_json::Value {
        let v: serde_json::Value = serde_json::from_str(text).unwrap();
        v["per_step"]["tp-forward"]["calls"].clone()
    };
    let comm_after = std::fs::read_to_string(run.join("comm.json")).unwrap();
    assert_eq!(calls(&comm_after), calls(&comm_before));
    assert_eq!(calls(&comm_after), serde_json::json!(7.0));
}

/// A run's console output reaches `logs/<run>.log` while it trains, not when it ends.
#[test]
fn a_sweep_streams_each_runs_output_into_its_log_while_it_runs() {
    let d = scratch("sweep-live-log");
    std::fs::write(
        d.join("sweep.yaml"),
        format!("name: tiny\n{BASE}grid: {{pattern: [pppp]}}\n"),
    )
    .unwrap();
    let mut child = command("tp-sweep", &d)
        .args(["sweep.yaml", "--out", "out"])
        .env("TP_STEP_PAUSE_MS", "1500")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let log = d.join("out/logs/pattern=pppp.log");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let mut seen = String::new();
    while std::time::Instant::now() < deadline && !seen.contains("run directory:") {
        std::thread::sleep(std::time::Duration::from_millis(100));
        seen = std::fs::read_to_string(&log).unwrap_or_default();
    }
    let running = child.try_wait().unwrap().is_none();
    // SIGINT, as a user stops a sweep: it reaches the run, and both end.
    let _ = std::process::Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status();
    let _ = child.wait();
    assert!(seen.contains("run directory:"), "log so far: {seen}");
    assert!(running, "the run ended before its log showed anything");
}

/// Every launcher key but mpirun, hostfile and srun is refused up front (a hostfile typed
/// wrong used to run four local ranks without it).
#[test]
fn an_unknown_launcher_key_is_one_line_before_anything_runs() {
    assert_sweeps_refused(
        "sweep-launcher",
        &[
            (
                "grid: {pattern: [tttt]}\nlauncher: {mpirun: 4, hostfil: hosts}\n",
                "unknown launcher key `hostfil`",
            ),
            (
                "grid: {pattern: [tttt]}\nlauncher: {srun: 2, hostfile: hosts}\n",
                "a hostfile goes with mpirun",
            ),
            (
                "grid: {pattern: [tttt]}\nlauncher: slurm\n",
                "unknown launcher `slurm`",
            ),
            (
                "grid: {pattern: [tttt]}\nlauncher: {mpirun: 3}\n",
                "3 ranks do not divide into tp 2 groups",
            ),
        ],
    );
}

/// `{mpirun: N, hostfile: FILE}` hands the hostfile to mpirun: the run trains on the
/// slots it lists (this machine, two slots).
#[test]
fn a_hostfile_launcher_runs_on_the_hosts_it_lists() {
    let d = scratch("sweep-hostfile");
    std::fs::write(d.join("hosts"), "localhost slots=2\n").unwrap();
    let o = sweep(
        &d,
        "grid: {pattern: [tttt]}\nlauncher: {mpirun: 2, hostfile: hosts}\n",
    );
    assert_ok(&o);
    let comm: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(d.join("out/pattern=tttt/comm.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(comm["hosts"].as_array().unwrap().len(), 2, "{comm}");
    // A hostfile that is not there: one line before anything runs.
    let e = scratch("sweep-hostfile-missing");
    let o = sweep(
        &e,
        "grid: {pattern: [tttt]}\nlauncher: {mpirun: 2, hostfile: nowhere}\n",
    );
    one_clear_error(&o, "launcher hostfile nowhere does not exist");
    assert!(!e.join("out").exists());
}

/// `reuse:` takes a finished run of exactly a point's config from another sweep (its
/// records copied, nothing trained), and trains the points it has no run for; a run of
/// another config there is not taken.
#[test]
fn reuse_copies_finished_runs_of_the_same_config_and_trains_the_rest() {
    let d = scratch("sweep-reuse");
    assert_ok(&sweep(&d, "grid: {pattern: [tttt]}\nseeds: [1]\n"));
    std::fs::write(
        d.join("more.yaml"),
        format!("name: more\n{BASE}grid: {{pattern: [tttt, sppp]}}\nseeds: [1]\nreuse: [out]\n"),
    )
    .unwrap();
    let o = bin("tp-sweep", &d, &["more.yaml", "--out", "out2"], &[]);
    assert_ok(&o);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains(
            "pattern=tttt,seed=1: finished in out/pattern=tttt,seed=1, its records copied"
        ),
        "{text}"
    );
    assert_eq!(text.matches(": running").count(), 1, "{text}");
    let read = |p: &str| std::fs::read_to_string(d.join(p)).unwrap();
    assert_eq!(
        read("out/pattern=tttt,seed=1/summary.json"),
        read("out2/pattern=tttt,seed=1/summary.json")
    );
    assert!(d.join("out2/pattern=sppp,seed=1/summary.json").is_file());
}
