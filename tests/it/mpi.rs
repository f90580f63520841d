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

#[test]
fn mpirun_n2_tp2_and_n4_tp2_dp2_match_the_threads_backend() {
    let d = scratch("match");
    for (n, dp) in [(2, "1"), (4, "2")] {
        let m = format!("mpi{n}");
        let t = format!("threads{n}");
        ok(&mpirun(
            &d,
            n,
            &[&SMALL[..], &["--tp", "2", "--out", &m]].concat(),
            &[],
        ));
        ok(&threads(
            &d,
            &[&SMALL[..], &["--tp", "2", "--dp", dp, "--out", &t]].concat(),
        ));
        assert_losses_close(&d.join(&m), &d.join(&t), 1e-6);
        let (cm, ct) = (comm(&d.join(&m)), comm(&d.join(&t)));
        assert_same_counts(&cm, &ct);
        assert_eq!(cm["tp_forward_allreduces"], 6.0);
        if n == 4 {
            assert_eq!(cm["dp"], 2);
            assert_eq!(cm["per_step"]["dp-grad"]["calls"], 1.0);
            assert!(cm["per_step"]["dp-grad"]["bytes"].as_f64().unwrap() > 0.0);
        }
        assert_eq!(
            std::fs::read_to_string(d.join(&m).join("sample.txt")).unwrap(),
            std::fs::read_to_string(d.join(&t).join("sample.txt")).unwrap()
        );
    }
}

/// The vocab-parallel table under mpirun (its max all-reduce is MPI's own) trains as in
/// threads: same losses, same sample, same embedding/head counts.
#[test]
fn mpirun_vocab_parallel_matches_the_threads_backend() {
    let d = scratch("vocab-parallel");
    let vp = ["--tp", "2", "--set", "vocab_parallel=true", "--out"];
    ok(&mpirun(&d, 2, &[&SMALL[..], &vp, &["mpi"]].concat(), &[]));
    ok(&threads(&d, &[&SMALL[..], &vp, &["threads"]].concat()));
    assert_losses_close(&d.join("mpi"), &d.join("threads"), 1e-6);
    let (cm, ct) = (comm(&d.join("mpi")), comm(&d.join("threads")));
    assert_same_counts(&cm, &ct);
    assert_eq!(cm["outside_layers"].as_array().unwrap().len(), 2);
    for (a, b) in cm["outside_layers"]
        .as_array()
        .unwrap()
        .iter()
        .zip(ct["outside_layers"].as_array().unwrap())
    {
        for k in ["site", "forward_allreduces", "backward_allreduces", "bytes"] {
            assert_eq!(a[k], b[k], "{k}");
        }
    }
    assert_eq!(
        std::fs::read_to_string(d.join("mpi").join("sample.txt")).unwrap(),
        std::fs::read_to_string(d.join("threads").join("sample.txt")).unwrap()
    );
}

#[test]
fn mpirun_tp2_dp2_equals_tp2_dp1_with_the_same_global_batch() {
    let d = scratch("dp");
    ok(&mpirun(
        &d,
        4,
        &[&SMALL[..], &["--set", "batch_size=4", "--out", "dp2"]].concat(),
        &[],
    ));
    ok(&mpirun(
        &d,
        2,
        &[&SMALL[..], &["--set", "batch_size=8", "--out", "dp1"]].concat(),
        &[],
    ));
    assert_losses_close(&d.join("dp2"), &d.join("dp1"), 1e-5);
    let out = String::from_utf8_lossy(
        &mpirun(
            &d,
            4,
            &[&SMALL[..], &["--set", "batch_size=4", "--out", "dp2b"]].concat(),
            &[],
        )
        .stdout,
    )
    .to_string();
    assert!(out.contains("global batch 8 x 64 tokens"), "{out}");
}

fn load(path: &Path) -> HashMap<String, Vec<u32>> {
    candle_core::safetensors::load(path, &candle_core::Device::Cpu)
        .unwrap()
        .into_iter()
        .map(|(k, v)| {
            let bits = v
                .flatten_all()
                .unwrap()
                .to_vec1::<f32>()
                .unwrap()
                .iter()
                .map(|x| x.to_bits())
                .collect();
            (k, bits)
        })
        .collect()
}

#[test]
fn after_20_steps_every_replicated_parameter_is_bit_identical_on_all_4_ranks() {
    let d = scratch("replicas");
    let dump = d.join("params");
    let dump_s = dump.to_string_lossy().to_string();
    ok(&mpirun(
        &d,
        4,
        &[
            "--pattern",
            "sppp",
            "--set",
            "n_embd=32",
            "--set",
            "bias=true",
            "--set",
            "max_iters=20",
            "--set",
            "eval_interval=10",
            "--set",
            "eval_iters=2",
            "--set",
            "learning_rate=3e-3",
            "--out",
            "run",
        ],
        &[("TP_DUMP_PARAMS", &dump_s)],
    ));
    let ranks: Vec<_> = (0..4)
        .map(|r| load(&dump.join(format!("rank{r}.safetensors"))))
        .collect();
    let sharded = |n: &str| {
        n.contains(".qkv.") || n.ends_with(".o.w") || n.contains(".fc.") || n.ends_with(".pr.w")
    };
    let mut replicated = 0;
    for (name, bits) in &ranks[0] {
        if sharded(name) {
            // A shard is the same on the data-parallel replica of its TP rank (rank 2).
            assert_eq!(
                bits, &ranks[2][name],
                "{name}: TP rank 0's shard differs between DP replicas"
            );
            assert_eq!(
                ranks[1][name], ranks[3][name],
                "{name}: TP rank 1's shard differs between DP replicas"
            );
            continue;
        }
        replicated += 1;
        for (r, other) in ranks.iter().enumerate().skip(1) {
            assert_eq!(
                bits, &other[name],
                "replicated {name} differs between rank 0 and rank {r}"
            );
        }
    }
    assert!(replicated >= 10, "{replicated}");
}

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
        (
            vec!["--resume", "nowhere"],
            "not a tp-harness run directory",
        ),
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

#[test]
fn a_checkpoint_written_under_mpirun_resumes_in_threads_exactly() {
    let d = scratch("ckpt");
    let common = [
        "--set",
        "n_embd=32",
        "--set",
        "eval_interval=5",
        "--set",
        "eval_iters=2",
        "--set",
        "lr_decay_iters=20",
        "--set",
        "checkpoint_interval=5",
        "--set",
        "sample_tokens=0",
    ];
    ok(&mpirun(
        &d,
        4,
        &[&common[..], &["--set", "max_iters=10", "--out", "split"]].concat(),
        &[],
    ));
    ok(&threads(
        &d,
        &["--resume", "split", "--dp", "2", "--set", "max_iters=20"],
    ));
    ok(&threads(
        &d,
        &[
            &common[..],
            &["--dp", "2", "--set", "max_iters=20", "--out", "whole"],
        ]
        .concat(),
    ));
    assert_losses_close(&d.join("split"), &d.join("whole"), 0.0);
    let w = |run: &str| {
        std::fs::read(
            d.join(run)
                .join("checkpoints/step-000020/model.safetensors"),
        )
        .unwrap()
    };
    assert!(w("split") == w("whole"), "final weights differ");
}

/// Two hosts (network namespaces, scripts/cluster/netns.sh) of two ranks each, joined by
/// a 1 Gbit/s shaped link, OpenMPI over TCP between them: tp 2 x dp 2 with each TP group
/// inside a host trains exactly as the threads backend (bit for bit), and comm.json
/// records which host each rank ran on. Needs root, as the test command runs.
#[test]
fn two_netns_hosts_tp2_dp2_over_a_shaped_link_equal_the_threads_backend_bitwise() {
    let uid = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(1).map(String::from))
        })
        .unwrap_or_default();
    assert_eq!(
        uid, "0",
        "network namespaces need root: run the test command (scripts/test.sh) as root"
    );
    let d = scratch("netns");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/cluster/netns.sh");
    let o = with_env(Command::new(&script), &d)
        .args(["run", "2", "--slots", "2", "--rate", "1gbit", "--"])
        .arg(env!("CARGO_BIN_EXE_tp-train"))
        .args(SMALL)
        .args(["--tp", "2", "--quiet", "--out", "hosts"])
        .output()
        .unwrap();
    ok(&o);
    ok(&threads(
        &d,
        &[&SMALL[..], &["--tp", "2", "--dp", "2", "--out", "threads"]].concat(),
    ));
    assert_losses_close(&d.join("hosts"), &d.join("threads"), 0.0);
    let (ch, ct) = (comm(&d.join("hosts")), comm(&d.join("threads")));
    assert_same_counts(&ch, &ct);
    let hosts: Vec<&str> = ch["hosts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h.as_str().unwrap())
        .collect();
    assert_eq!(hosts.len(), 4, "{hosts:?}");
    assert!(
        hosts[0].starts_with("tpn-h1/") && hosts[2].starts_with("tpn-h2/"),
        "{hosts:?}"
    );
    assert_eq!(
        (hosts[0], hosts[2]),
        (hosts[1], hosts[3]),
        "TP groups share a host"
    );
    assert_ne!(hosts[0], hosts[2]);
    assert_eq!(
        std::fs::read_to_string(d.join("hosts").join("sample.txt")).unwrap(),
        std::fs::read_to_string(d.join("threads").join("sample.txt")).unwrap()
    );
    // Nothing of the cluster is left behind.
    let ns = Command::new("ip").args(["netns", "list"]).output().unwrap();
    assert!(!String::from_utf8_lossy(&ns.stdout).contains("tpn-"));
}
