//! The MPI backend under a real `mpirun` (OpenMPI): the same runs as the threads backend,
//! data parallelism across processes, replicas, failures and bad world sizes.
#![cfg(feature = "mpi")]

use crate::common::{scratch, with_test_data};
use serde_json::Value;
use std::collections::HashMap;
use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

fn with_env(mut c: Command, dir: &Path) -> Command {
    with_test_data(&mut c)
        .current_dir(dir)
        // OpenMPI refuses root without these; tests run as root in CI.
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
    c
}

fn mpirun(dir: &Path, n: usize, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = with_env(Command::new("mpirun"), dir);
    c.args(["-n", &n.to_string(), "--oversubscribe", "--bind-to", "none"])
        .arg(env!("CARGO_BIN_EXE_tp-train"))
        .args(args)
        .arg("--quiet");
    for (k, v) in env {
        c.env(k, v);
    }
    c.output()
        .expect("mpirun must be installed (scripts/setup.sh installs openmpi-bin)")
}

fn threads(dir: &Path, args: &[&str]) -> Output {
    let mut c = with_env(Command::new(env!("CARGO_BIN_EXE_tp-train")), dir);
    c.args(args)
        .args(["--quiet", "--backend", "threads"])
        .output()
        .unwrap()
}

const SMALL: [&str; 14] = [
    "--pattern",
    "3xsppp",
    "--set",
    "n_embd=32",
    "--set",
    "max_iters=8",
    "--set",
    "eval_interval=4",
    "--set",
    "eval_iters=2",
    "--set",
    "log_interval=1",
    "--set",
    "sample_tokens=16",
];

fn ok(o: &Output) {
    assert!(
        o.status.success(),
        "failed: {}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

/// (step, train_loss, val_loss) of every log line.
fn losses(run: &Path) -> Vec<(u64, Option<f64>, Option<f64>)> {
    std::fs::read_to_string(run.join("log.jsonl"))
        .unwrap()
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            (
                v["step"].as_u64().unwrap(),
                v["train_loss"].as_f64(),
                v["val_loss"].as_f64(),
            )
        })
        .collect()
}

fn assert_losses_close(a: &Path, b: &Path, tol: f64) {
    let (la, lb) = (losses(a), losses(b));
    assert_eq!(la.len(), lb.len(), "{la:?} vs {lb:?}");
    for (x, y) in la.iter().zip(&lb) {
        assert_eq!(x.0, y.0);
        for (p, q) in [(x.1, y.1), (x.2, y.2)] {
            assert_eq!(p.is_some(), q.is_some(), "{la:?} vs {lb:?}");
            if let (Some(p), Some(q)) = (p, q) {
                assert!(
                    ((p - q) / q).abs() <= tol,
                    "step {}: {p} vs {q} ({a:?} vs {b:?})",
                    x.0
                );
            }
        }
    }
}

fn comm(run: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(run.join("comm.json")).unwrap()).unwrap()
}

fn assert_same_counts(a: &Value, b: &Value) {
    for k in [
        "tp_forward_allreduces",
        "tp_backward_allreduces",
        "formula_forward_allreduces",
        "steps",
        "tp",
        "dp",
    ] {
        assert_eq!(a[k], b[k], "{k}");
    }
    for (la, lb) in a["layers"]
        .as_array()
        .unwrap()
        .iter()
        .zip(b["layers"].as_array().unwrap())
    {
        for k in [
            "layer",
            "kind",
            "forward_allreduces",
            "backward_allreduces",
            "bytes",
        ] {
            assert_eq!(la[k], lb[k], "layer field {k}");
        }
    }
    for kind in [
        "tp-forward",
        "tp-backward",
        "tp-param-grad",
        "dp-grad",
        "other",
    ] {
        for k in ["calls", "bytes"] {
            assert_eq!(a["per_step"][kind][k], b["per_step"][kind][k], "{kind} {k}");
        }
    }
}

mod failures;
mod matches_threads;
mod netns;
mod slurm;
