//! The third fault probe's cases (issue 48), each as the probe tried it, each failing
//! before its fix: a resumed trace says what it holds; a changed comm_dtype on resume is
//! refused; hostile or garbage trace files are refused by name; tensorboard_dir inside a
//! checkpoint, or not writable, is one line naming it with nothing made; sweep names that
//! escape are refused; a degenerate corpus is one line before any tokenizing; patterns
//! nested thousands deep and traces of thousands of steps are refused; harness switches
//! left in a shell are named; a stray launcher variable names `--backend threads`;
//! launchers that cannot start are one line before anything runs (study.sh keeping only
//! settled records and passing a signal on: study_script.rs; TensorBoard across resumes and
//! shared folders: tensorboard.rs; ranks started with different arguments:
//! mpi/failures.rs; the lock and format numbers: their modules' unit tests.)

use crate::common::*;
use std::path::Path;

const SMALL: [&str; 10] = [
    "--set",
    "n_embd=32",
    "--set",
    "eval_iters=2",
    "--set",
    "sample_tokens=0",
    "--set",
    "log_interval=1",
    "--set",
    "checkpoint_interval=20",
];

fn train(d: &Path, extra: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    bin(
        "tp-train",
        d,
        &[&SMALL[..], extra, &["--quiet"]].concat(),
        env,
    )
}

/// Steps 18..22 traced, the run killed at 21 (after its checkpoint at 20) and resumed:
/// the trace holds 20..22 and says so, in the file and on the console.
#[test]
fn a_trace_resumed_inside_its_steps_says_which_steps_it_holds() {
    let d = scratch("nl3-trace-resume");
    let args = [
        "--trace",
        "--set",
        "trace_start=18",
        "--set",
        "trace_steps=5",
        "--set",
        "max_iters=30",
        "--set",
        "eval_interval=10",
        "--out",
        "run",
    ];
    let killed = train(&d, &args, &[("TP_INJECT_FAULT", "0:21")]);
    assert!(!killed.status.success());
    let o = bin("tp-train", &d, &["--resume", "run"], &[]);
    assert_ok(&o);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("steps 20..22, from 20: resumed inside the traced steps"),
        "{text}"
    );
    let trace: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(d.join("run/trace.json")).unwrap()).unwrap();
    assert_eq!(trace["otherData"]["held_from"], 20);
    assert_eq!(trace["otherData"]["trace_start"], 18);
}

/// An int8 run resumed with f32 sums would have one config and one comm.json calling all
/// of its steps f32: refused, naming the way to get f32 sums.
#[test]
fn a_resume_that_changes_comm_dtype_is_refused_in_one_line() {
    let d = scratch("nl3-comm-dtype");
    let o = train(
        &d,
        &[
            "--set",
            "max_iters=20",
            "--set",
            "eval_interval=10",
            "--set",
            "comm_dtype=int8",
            "--out",
            "run",
        ],
        &[],
    );
    assert_ok(&o);
    let log = std::fs::read(d.join("run/log.jsonl")).unwrap();
    let o = bin(
        "tp-train",
        &d,
        &[
            "--resume",
            "run",
            "--set",
            "comm_dtype=f32",
            "--set",
            "max_iters=30",
        ],
        &[],
    );
    one_clear_error(
        &o,
        "comm_dtype cannot change when resuming: this run's steps so far summed in int8",
    );
    assert!(String::from_utf8_lossy(&o.stderr).contains("--init-from RUN"));
    assert_eq!(std::fs::read(d.join("run/log.jsonl")).unwrap(), log);
}

/// A trace.json with impossible values, or of binary garbage, is refused by what is
/// wrong with it (never drawn as "-1000000.0 ms", never called missing).
#[test]
fn hostile_or_garbage_trace_files_are_refused_by_name() {
    let d = scratch("nl3-trace-hostile");
    let o = train(
        &d,
        &[
            "--trace",
            "--set",
            "trace_start=2",
            "--set",
            "trace_steps=1",
            "--set",
            "max_iters=4",
            "--set",
            "eval_interval=0",
            "--out",
            "run",
        ],
        &[],
    );
    assert_ok(&o);
    let path = d.join("run/trace.json");
    let good = std::fs::read_to_string(&path).unwrap();
    let mut v: serde_json::Value = serde_json::from_str(&good).unwrap();
    let events = v["traceEvents"].as_array_mut().unwrap();
    let x = events.iter_mut().find(|e| e["ph"] == "X").unwrap();
    x["dur"] = serde_json::json!(-1e9);
    std::fs::write(&path, v.to_string()).unwrap();
    let o = bin("tp-plot", &d, &["--timeline", "run", "--out", "pics"], &[]);
    one_clear_error(&o, "has a negative duration");
    x_ts(&path, &good, 1e300);
    let o = bin("tp-plot", &d, &["--timeline", "run", "--out", "pics"], &[]);
    one_clear_error(&o, "a time outside the day after the trace's start");
    std::fs::write(&path, [0xffu8, 0xfe, 0x00, 0x13, 0x37]).unwrap();
    let o = bin("tp-plot", &d, &["--timeline", "run", "--out", "pics"], &[]);
    one_clear_error(&o, "is not a trace (not JSON text)");
    assert!(!d.join("pics/timeline.png").exists());
}

/// Rewrites `path` as `good` with its first span's start at `ts`.
fn x_ts(path: &Path, good: &str, ts: f64) {
    let mut v: serde_json::Value = serde_json::from_str(good).unwrap();
    let events = v["traceEvents"].as_array_mut().unwrap();
    let x = events.iter_mut().find(|e| e["ph"] == "X").unwrap();
    x["ts"] = serde_json::json!(ts);
    std::fs::write(path, v.to_string()).unwrap();
}

/// tensorboard_dir inside the run's own checkpoints (pruning would delete its event
/// files), inside another run's checkpoint, or below a file: one line naming
/// tensorboard_dir, and no run directory made.
#[test]
fn a_tensorboard_dir_inside_a_checkpoint_or_unwritable_is_refused_with_nothing_made() {
    let d = scratch("nl3-tb-dir");
    let o = train(
        &d,
        &[
            "--set",
            "max_iters=20",
            "--set",
            "eval_interval=10",
            "--out",
            "done",
        ],
        &[],
    );
    assert_ok(&o);
    std::fs::write(d.join("a-file"), "x").unwrap();
    for (tb, needle) in [
        ("fresh/checkpoints", "lies inside this run's checkpoints"),
        ("done/checkpoints/step-000020/tb", "tensorboard_dir"),
        ("a-file/tb", "tensorboard_dir a-file/tb: cannot write"),
    ] {
        let o = train(
            &d,
            &[
                "--tensorboard",
                "--set",
                &format!("tensorboard_dir={tb}"),
                "--set",
                "max_iters=4",
                "--out",
                "fresh",
            ],
            &[],
        );
        one_clear_error(&o, needle);
        assert!(
            !d.join("fresh/config.yaml").exists(),
            "{tb}: a run was started"
        );
    }
    // The checkpoint it pointed into is intact.
    let o = bin("tp-eval", &d, &["done"], &[]);
    assert_ok(&o);
}

/// A sweep named `..` would write into the working directory, `.` and "" into runs/.
#[test]
fn sweep_names_that_are_not_a_folder_of_their_own_are_refused() {
    for (i, name) in ["..", ".", "\"\"", "...."].iter().enumerate() {
        let d = scratch(&format!("nl3-sweep-name-{i}"));
        std::fs::write(
            d.join("s.yaml"),
            format!("name: {name}\nbase: {{n_embd: 32, max_iters: 2}}\ngrid: {{pattern: [tt]}}\n"),
        )
        .unwrap();
        let o = bin("tp-sweep", &d, &["s.yaml"], &[]);
        one_clear_error(&o, "is not a directory name of its own");
        assert!(!d.join("runs").exists() && !d.join("summary.md").exists());
    }
}

/// A corpus of one byte repeated, or a stretch of megabytes without whitespace, is one
/// line within seconds (the probe's 20 MB of NULs was still tokenizing after 100 s).
#[test]
fn a_degenerate_corpus_is_one_line_before_the_tokenizer_starts() {
    let d = scratch("nl3-corpus");
    std::fs::write(d.join("nul.txt"), vec![0u8; 20 << 20]).unwrap();
    let mut unbroken = b"word ".repeat(100);
    unbroken.extend(std::iter::repeat_n(b'a', 200_000));
    std::fs::write(d.join("long.txt"), unbroken).unwrap();
    for (file, needle) in [
        ("nul.txt", "bytes without whitespace"),
        ("long.txt", "bytes without whitespace"),
    ] {
        let t0 = std::time::Instant::now();
        let o = train(
            &d,
            &[
                "--set",
                "dataset=text",
                "--set",
                &format!("text_path={file}"),
                "--set",
                "max_iters=2",
                "--out",
                "run",
            ],
            &[],
        );
        one_clear_error(&o, needle);
        assert!(t0.elapsed().as_secs() < 20, "{file}: {:?}", t0.elapsed());
    }
    std::fs::write(d.join("spaces.txt"), vec![b' '; 1000]).unwrap();
    let o = train(
        &d,
        &[
            "--set",
            "dataset=text",
            "--set",
            "text_path=spaces.txt",
            "--set",
            "max_iters=2",
            "--out",
            "run",
        ],
        &[],
    );
    one_clear_error(&o, "is one byte (0x20) repeated 1000 times");
    assert!(!d.join("run").exists());
}

/// A pattern nested 20,000 deep (which overflowed the stack: SIGABRT) and a trace of
/// 100,000 steps (~20 GB of spans) are refused up front, in tp-train and tp-sweep.
#[test]
fn deep_patterns_and_huge_traces_are_refused_up_front() {
    let d = scratch("nl3-limits");
    let deep = format!("{}t{}", "(".repeat(20_000), ")".repeat(20_000));
    let o = train(&d, &["--pattern", &deep, "--out", "run"], &[]);
    one_clear_error(&o, "nest more than 64 deep");
    std::fs::write(
        d.join("s.yaml"),
        format!("name: deep\nbase: {{max_iters: 2}}\ngrid: {{pattern: ['{deep}']}}\n"),
    )
    .unwrap();
    let o = bin("tp-sweep", &d, &["s.yaml"], &[]);
    one_clear_error(&o, "nest more than 64 deep");
    let o = train(
        &d,
        &[
            "--trace",
            "--set",
            "trace_steps=100000",
            "--set",
            "max_iters=200000",
            "--out",
            "run",
        ],
        &[],
    );
    one_clear_error(&o, "trace_steps 100000 would hold about");
    assert!(!d.join("run").exists());
}

/// A harness switch left in the shell is named on the run's first line and in its
/// summary.json; a plain run's summary has none.
#[test]
fn environment_switches_are_named_first_and_recorded() {
    let d = scratch("nl3-switches");
    let o = bin(
        "tp-train",
        &d,
        &[
            &SMALL[..],
            &[
                "--set",
                "max_iters=4",
                "--set",
                "eval_interval=0",
                "--out",
                "run",
            ],
        ]
        .concat(),
        &[("TP_STEP_PAUSE_MS", "1")],
    );
    assert_ok(&o);
    let first = String::from_utf8_lossy(&o.stdout)
        .lines()
        .next()
        .unwrap_or("")
        .to_string();
    assert!(
        first.contains("set in the environment: TP_STEP_PAUSE_MS=1"),
        "{first}"
    );
    let s: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(d.join("run/summary.json")).unwrap())
            .unwrap();
    // With any switch the whole suite runs under (TP_MATMUL=blas in the test script's
    // rerun), which the run inherits and records as well.
    let want = tp_lab::launch::switches::set_switches(|k| match k {
        "TP_STEP_PAUSE_MS" => Some("1".into()),
        k => std::env::var(k).ok(),
    });
    assert_eq!(s["environment"], serde_json::json!(want));
    let o = train(
        &d,
        &[
            "--set",
            "max_iters=4",
            "--set",
            "eval_interval=0",
            "--out",
            "plain",
        ],
        &[],
    );
    assert_ok(&o);
    let s = std::fs::read_to_string(d.join("plain/summary.json")).unwrap();
    // A plain run records none, but for those the whole suite runs under.
    let ambient = tp_lab::launch::switches::set_switches(|k| std::env::var(k).ok());
    if ambient.is_empty() {
        assert!(!s.contains("environment"), "{s}");
    } else {
        let s: serde_json::Value = serde_json::from_str(&s).unwrap();
        assert_eq!(s["environment"], serde_json::json!(ambient));
    }
}

/// A launcher's variable left in the shell (no mpirun ran) is named with the way out.
#[test]
fn a_stray_launcher_variable_names_backend_threads() {
    let d = scratch("nl3-stray-pmi");
    for var in [
        "PMI_SIZE",
        "PMIX_RANK",
        "OMPI_COMM_WORLD_SIZE",
        "MPI_LOCALNRANKS",
    ] {
        let o = train(&d, &["--set", "max_iters=2", "--out", "run"], &[(var, "1")]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{var}: {err}");
        assert!(
            err.contains(&format!("{var}=1 in the environment says one did"))
                && err.contains("--backend threads"),
            "{var}: {err}"
        );
    }
}

/// `{srun: 2}` where there is no srun, and a hostfile that does not exist: one line
/// before anything runs (not a failure per point with the launcher's own error).
#[test]
fn launchers_that_cannot_start_here_are_one_line_before_anything_runs() {
    let d = scratch("nl3-launchers");
    // A PATH without srun (this machine may have Slurm installed), and the usual one.
    let bare = d.join("bare-path");
    std::fs::create_dir_all(&bare).unwrap();
    let usual = std::env::var("PATH").unwrap_or_default();
    for (launcher, needle, path) in [
        (
            "{srun: 2}",
            "srun is not on the PATH",
            bare.to_str().unwrap(),
        ),
        (
            "{mpirun: 2, hostfile: /nonexistent/hosts}",
            "/nonexistent/hosts does not exist",
            usual.as_str(),
        ),
    ] {
        std::fs::write(
            d.join("s.yaml"),
            format!("name: l\nbase: {{n_embd: 32, max_iters: 2}}\ngrid: {{pattern: [tt]}}\nlauncher: {launcher}\n"),
        )
        .unwrap();
        let o = bin(
            "tp-sweep",
            &d,
            &["s.yaml", "--out", "out"],
            &[("PATH", path)],
        );
        one_clear_error(&o, needle);
        assert!(!d.join("out").exists());
    }
}
