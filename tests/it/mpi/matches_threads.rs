//! Runs under mpirun equal the same runs with ranks as threads: losses, samples, counts,
//! replicas and checkpoints.

use super::*;

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
        // Every process's compute reached rank 0's comm.json, as every thread's does.
        for c in [&cm, &ct] {
            let per_rank = c["compute"]["per_rank_ms"].as_array().unwrap();
            assert_eq!(per_rank.len(), n, "{}", c["compute"]);
            assert!(per_rank.iter().all(|v| v.as_f64().unwrap() > 0.0));
        }
        if n == 4 {
            assert_eq!(cm["dp"], 2);
            // ddp_bucket_mb auto: an eighth of the small model's gradients a bucket.
            assert!(cm["per_step"]["dp-grad"]["calls"].as_f64().unwrap() >= 4.0);
            assert!(cm["per_step"]["dp-grad"]["bytes"].as_f64().unwrap() > 0.0);
        }
        assert_eq!(
            std::fs::read_to_string(d.join(&m).join("sample.txt")).unwrap(),
            std::fs::read_to_string(d.join(&t).join("sample.txt")).unwrap()
        );
    }
}

/// Ladder blocks under mpirun train exactly as with ranks as threads: the same losses to
/// the bit, the same sample and counts, whichever way MPI carries the started
/// all-reduces (a communication thread blocking in MPI, the default; one testing
/// non-blocking collectives, `TP_MPI_POLL_US`; none, `TP_MPI_COMM_THREAD=0`).
#[test]
fn mpirun_ladder_blocks_match_the_threads_backend_bit_for_bit() {
    let d = scratch("ladder");
    let mut args = SMALL.to_vec();
    args[1] = "tllp";
    ok(&mpirun(
        &d,
        2,
        &[&args[..], &["--tp", "2", "--out", "mpi"]].concat(),
        &[],
    ));
    ok(&threads(
        &d,
        &[&args[..], &["--tp", "2", "--out", "threads"]].concat(),
    ));
    assert_losses_close(&d.join("mpi"), &d.join("threads"), 0.0);
    let (cm, ct) = (comm(&d.join("mpi")), comm(&d.join("threads")));
    assert_same_counts(&cm, &ct);
    assert_eq!(cm["tp_forward_allreduces"], 7.0);
    assert_eq!(
        std::fs::read_to_string(d.join("mpi").join("sample.txt")).unwrap(),
        std::fs::read_to_string(d.join("threads").join("sample.txt")).unwrap()
    );
    for (out, env) in [
        ("polled", ("TP_MPI_POLL_US", "50")),
        ("inline", ("TP_MPI_COMM_THREAD", "0")),
    ] {
        ok(&mpirun(
            &d,
            2,
            &[&args[..], &["--tp", "2", "--out", out]].concat(),
            &[env],
        ));
        assert_losses_close(&d.join(out), &d.join("threads"), 0.0);
    }
}

/// Compressed all-reduces under mpirun (bytes through `MPI_Alltoallv`) train exactly as
/// with ranks as threads (bytes through shared memory): int8 sums are the same bits on
/// both, started (`l`) and blocking (`t`, `p`) alike.
#[test]
fn mpirun_int8_all_reduces_match_the_threads_backend_bit_for_bit() {
    let d = scratch("int8");
    let mut args = SMALL.to_vec();
    args[1] = "tllp";
    let int8 = ["--tp", "2", "--set", "comm_dtype=int8", "--out"];
    ok(&mpirun(&d, 2, &[&args[..], &int8, &["mpi"]].concat(), &[]));
    ok(&threads(&d, &[&args[..], &int8, &["threads"]].concat()));
    assert_losses_close(&d.join("mpi"), &d.join("threads"), 0.0);
    assert_same_counts(&comm(&d.join("mpi")), &comm(&d.join("threads")));
    // Sampling starts from one token: one row, so rank 1's chunk is empty.
    assert_eq!(
        std::fs::read_to_string(d.join("mpi").join("sample.txt")).unwrap(),
        std::fs::read_to_string(d.join("threads").join("sample.txt")).unwrap()
    );
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

/// Gradient sums started bucket by bucket during backprop, with MPI processes, train as
/// one bucket after backprop with ranks as threads, to the bit (losses, weights, moments).
#[test]
fn mpirun_overlapped_gradient_sums_equal_one_bucket_in_threads_bit_for_bit() {
    use crate::overlapped_grads::{overlap_args, trained};
    let d = scratch("overlap-mpi");
    for pattern in ["tttt", "sppp", "llll"] {
        let (m, t) = (format!("{pattern}-mpi"), format!("{pattern}-threads"));
        let on = overlap_args(pattern, "overlap_grad_reduce=true", &m);
        ok(&mpirun(&d, 4, &on, &[]));
        let off = overlap_args(pattern, "overlap_grad_reduce=false", &t);
        ok(&threads(&d, &off));
        let (a, b) = (trained(&d.join(&m)), trained(&d.join(&t)));
        assert_eq!(a.0, b.0, "{pattern}: the logs differ");
        assert!(a.1 == b.1, "{pattern}: the final weights or moments differ");
    }
}

/// `--bench` under mpirun measures the steps alone, as the threads' bench does: a
/// bench.json and no checkpoint (one written after the last step was timed by nothing
/// but landed in the profiles a GPU run returns).
#[test]
fn mpirun_bench_writes_bench_json_and_no_checkpoint() {
    let d = scratch("mpi-bench");
    let args = [
        "--bench",
        "--pattern",
        "tt",
        "--tp",
        "2",
        "--set",
        "n_embd=32",
        "--bench-warmup",
        "1",
        "--bench-steps",
        "2",
        "--out",
        "b",
    ];
    let o = mpirun(&d, 2, &args, &[]);
    ok(&o);
    let j: Value =
        serde_json::from_str(&std::fs::read_to_string(d.join("b/bench.json")).unwrap()).unwrap();
    assert!(j["ms_per_step"].as_f64().unwrap() > 0.0);
    assert_eq!(j["tp"].as_u64(), Some(2));
    assert!(
        !d.join("b/checkpoints").exists(),
        "a bench wrote a checkpoint"
    );
}
