//! Faults and bad inputs under mpirun: one clear line, a nonzero exit, nobody hangs.

use super::*;

#[test]
fn an_injected_fault_on_rank_1_ends_the_whole_mpirun_within_30_seconds() {
    let d = scratch("mpi-fault");
    let start = Instant::now();
    let o = mpirun(
        &d,
        4,
        &[
            "--out",
            "run",
            "--set",
            "n_embd=32",
            "--set",
            "max_iters=500",
        ],
        &[("TP_INJECT_FAULT", "1:3")],
    );
    assert!(
        start.elapsed() < Duration::from_secs(30),
        "took {:?}",
        start.elapsed()
    );
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("tp-train: rank 1: error: injected fault"),
        "{err}"
    );
}

#[test]
fn a_world_that_does_not_divide_by_tp_is_one_clear_line_and_a_nonzero_exit() {
    let d = scratch("world");
    let o = mpirun(&d, 3, &["--tp", "2", "--out", "run"], &[]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    let ours: Vec<_> = err.lines().filter(|l| l.starts_with("tp-train")).collect();
    assert_eq!(ours.len(), 1, "{err}");
    assert!(
        ours[0].contains("3 rank(s)") && ours[0].contains("tp 2"),
        "{err}"
    );
    assert!(!d.join("run").exists());
}

#[test]
fn config_errors_and_an_unwritable_out_under_mpirun_are_printed_once_and_exit_2() {
    let d = scratch("config-once");
    for (args, needle) in [
        (
            vec!["--set", "bogus=1", "--out", "run"],
            "unknown config key `bogus`",
        ),
        (
            vec!["--pattern", "9999x(9999x(9999xt))", "--out", "run"],
            "more than 1000 layers",
        ),
        (
            vec!["--set", "sample_tokens=99999999999", "--out", "run"],
            "sample_tokens must be at most",
        ),
        (vec!["--resume", "nowhere"], "nowhere does not exist"),
        (
            vec!["--out", "/dev/null/run"],
            "cannot create run directory /dev/null/run: a part of the path is a file",
        ),
    ] {
        let o = mpirun(&d, 2, &args, &[]);
        let err = String::from_utf8_lossy(&o.stderr);
        let ours: Vec<_> = err.lines().filter(|l| l.contains("tp-train")).collect();
        assert_eq!(ours.len(), 1, "{args:?}: {err}");
        assert!(ours[0].contains(needle), "{args:?}: {err}");
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(!d.join("run").exists());
    }
}

/// The README's mpirun line works as typed, as root and with more ranks (4) than this
/// machine's cores (a short run of it: the flags that make it short are appended).
#[test]
fn the_readmes_mpirun_line_runs_as_typed() {
    let d = scratch("readme-mpirun");
    let root = Path::new(crate::common::REPO);
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let line = readme
        .lines()
        .find(|l| l.contains("mpirun") && l.contains("tp-train --pattern"))
        .expect("the README shows an mpirun line");
    let typed = line.split('#').next().unwrap().trim();
    let out = d.join("run");
    let mut c = Command::new("bash");
    crate::common::with_test_data(&mut c);
    let o = c
        .current_dir(root)
        .arg("-c")
        .arg(format!(
            "{typed} --set n_embd=32 --set max_iters=2 --set eval_interval=0 --set sample_tokens=0 --quiet --out {}",
            out.display()
        ))
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "`{typed}`: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    // CPU ranks reduce over MPI: the summary names no NCCL (it names its version only
    // where the groups reduced through NCCL).
    assert!(summary.get("nccl").is_none(), "{summary}");
    assert!(summary["final_val_loss"].is_number(), "{summary}");
}

/// Under mpirun every rank's timeline reaches rank 0, which writes one trace.json with a
/// process per rank, each with its compute track and its collectives.
#[test]
fn a_trace_under_mpirun_holds_every_ranks_timeline() {
    let d = scratch("mpi-trace");
    let o = mpirun(
        &d,
        2,
        &[
            &SMALL[..],
            &[
                "--trace",
                "--trace_start=2",
                "--trace_steps=2",
                "--out",
                "run",
            ],
        ]
        .concat(),
        &[],
    );
    ok(&o);
    let trace = tp_lab::run_dir::trace_file::TraceFile::read(&d.join("run")).unwrap();
    for rank in 0..2 {
        let mine = |cat: &str| {
            trace
                .events
                .iter()
                .filter(|e| e.pid == rank && e.cat == cat)
                .count()
        };
        assert_eq!(mine("step"), 2, "rank {rank}");
        assert!(mine("collective") > 0, "rank {rank}");
    }
}

/// Ranks started with different arguments (an MPMD launch, or a wrapper that varies
/// them): one line naming the keys that differ, exit 2, nothing written — never a run
/// that trains its TP ranks on different batches under rank 0's records, nor OpenMPI's
/// "read past end of buffer".
#[test]
fn ranks_started_with_different_arguments_are_one_line_naming_the_keys() {
    let d = scratch("mpmd");
    let exe = env!("CARGO_BIN_EXE_tp-train");
    for (a, b, needle) in [
        ("seed=1", "seed=2", "seed 2 (rank 1) vs 1 (rank 0)"),
        (
            "comm_dtype=int8",
            "comm_dtype=f32",
            "comm_dtype f32 (rank 1) vs int8 (rank 0)",
        ),
        (
            "max_iters=6",
            "max_iters=8",
            "max_iters 8 (rank 1) vs 6 (rank 0)",
        ),
        (
            "pattern=tttt",
            "pattern=ssss",
            "pattern ssss (rank 1) vs tttt (rank 0)",
        ),
    ] {
        let mut c = with_env(Command::new("mpirun"), &d);
        c.args([
            "--oversubscribe",
            "--bind-to",
            "none",
            "-n",
            "1",
            exe,
            "--set",
            a,
        ])
        .args([
            "--set",
            "n_embd=32",
            "--out",
            "run",
            "--quiet",
            ":",
            "-n",
            "1",
            exe,
        ])
        .args(["--set", b, "--set", "n_embd=32", "--out", "run", "--quiet"]);
        let o = c.output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        let ours: Vec<_> = err.lines().filter(|l| l.contains("tp-train")).collect();
        assert_eq!(ours.len(), 1, "{a} / {b}: {err}");
        assert!(
            ours[0].contains("the ranks were started with different arguments"),
            "{err}"
        );
        assert!(ours[0].contains(needle), "{a} / {b}: {err}");
        assert_eq!(o.status.code(), Some(2), "{err}");
        assert!(!d.join("run").exists());
    }
}

/// One rank with a `TP_*` switch the others lack (`TP_SIMD=avx2`, `TP_SUBNORMALS=keep`):
/// it computes differently under records claiming rank 0's, so the launch is one line
/// naming the rank and the switches, exit 2, nothing written. (Ranks on different CPUs
/// with no switch set train, and summary.json's `rank_machines` names each one's.)
#[test]
fn a_rank_with_other_switches_is_refused_by_name() {
    let d = scratch("mpmd-switches");
    let exe = env!("CARGO_BIN_EXE_tp-train");
    for switch in ["TP_SIMD=avx2", "TP_SUBNORMALS=keep"] {
        let args = ["--set", "n_embd=32", "--out", "run", "--quiet"];
        let mut c = with_env(Command::new("mpirun"), &d);
        c.args(["--oversubscribe", "--bind-to", "none", "-n", "1", exe])
            .args(args)
            .args([":", "-n", "1", "env", switch, exe])
            .args(args);
        let o = c.output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        let ours: Vec<_> = err.lines().filter(|l| l.contains("tp-train")).collect();
        assert_eq!(ours.len(), 1, "{switch}: {err}");
        assert!(
            ours[0].contains(&format!(
                "rank 1 has other TP_* switches set than rank 0 ({switch} vs none)"
            )),
            "{err}"
        );
        assert_eq!(o.status.code(), Some(2), "{err}");
        assert!(!d.join("run").exists());
    }
}

/// Rank 1 reading another prepared copy of the data (same vocabulary, one token
/// changed): one line naming the rank and the data, exit 2, nothing written; the two
/// ranks once trained on different batches without a word (val 4.1116 vs 4.1300).
#[test]
fn a_rank_on_other_data_is_refused_by_name() {
    let d = scratch("mpmd-data");
    let exe = env!("CARGO_BIN_EXE_tp-train");
    let other = d.join("other-data/shakespeare_char");
    std::fs::create_dir_all(&other).unwrap();
    let ours = crate::common::test_data_dir().join("shakespeare_char");
    for e in std::fs::read_dir(&ours).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), other.join(e.file_name())).unwrap();
    }
    let train = other.join("train.bin");
    let mut bytes = std::fs::read(&train).unwrap();
    bytes.swap(0, 2);
    std::fs::write(&train, bytes).unwrap();
    let args = ["--set", "n_embd=32", "--out", "run", "--quiet"];
    let other_dir = format!("TP_DATA_DIR={}", d.join("other-data").display());
    let mut c = with_env(Command::new("mpirun"), &d);
    c.args(["--oversubscribe", "--bind-to", "none", "-n", "1", exe])
        .args(args)
        .args([":", "-n", "1", "env", other_dir.as_str(), exe])
        .args(args);
    let o = c.output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    let lines: Vec<_> = err.lines().filter(|l| l.contains("tp-train")).collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(
        lines[0].contains("rank 1 read other data than rank 0"),
        "{err}"
    );
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(!d.join("run").exists());
}
