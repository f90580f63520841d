//! Gradient sums started bucket by bucket during backprop (`overlap_grad_reduce`, the
//! default) train exactly as one bucket summed after backprop: the same losses and the
//! same final weights and moments to the bit, at tp 2 x dp 2 over threads, for Megatron's
//! blocks, the synchronisation-free ones (with their partial TP gradients) and the ladder.

use crate::common::{assert_ok, scratch, tp_train};
use serde_json::Value;
use std::path::Path;

/// Dropout and two micro-steps, so that the buckets start in the last pass only and a
/// pass's masks matter; buckets of ~10 KiB, so that every step seals many.
pub(crate) fn overlap_args<'a>(pattern: &'a str, overlap: &'a str, out: &'a str) -> Vec<&'a str> {
    vec![
        "--pattern",
        pattern,
        "--tp",
        "2",
        "--dp",
        "2",
        "--set",
        "n_embd=32",
        "--set",
        "bias=true",
        "--set",
        "max_iters=6",
        "--set",
        "eval_interval=3",
        "--set",
        "eval_iters=2",
        "--set",
        "log_interval=1",
        "--set",
        "sample_tokens=0",
        "--set",
        "dropout=0.1",
        "--set",
        "gradient_accumulation_steps=2",
        "--set",
        "ddp_bucket_mb=0.01",
        "--set",
        overlap,
        "--out",
        out,
    ]
}

/// Every number of a run's log but its timings, and its final checkpoint's files.
pub(crate) fn trained(run: &Path) -> (Vec<Value>, Vec<Vec<u8>>) {
    let log = std::fs::read_to_string(run.join("log.jsonl"))
        .unwrap()
        .lines()
        .map(|l| {
            let mut v: Value = serde_json::from_str(l).unwrap();
            for timing in ["ms", "tokens_per_s", "mfu"] {
                v.as_object_mut().unwrap().remove(timing);
            }
            v
        })
        .collect();
    let mut cks: Vec<_> = std::fs::read_dir(run.join("checkpoints"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("step-")
        })
        .collect();
    cks.sort();
    let last = cks.last().expect("a checkpoint");
    let files = ["model", "optimizer.m", "optimizer.v"]
        .iter()
        .map(|f| std::fs::read(last.join(format!("{f}.safetensors"))).unwrap())
        .collect();
    (log, files)
}

pub(crate) fn dp_grad(run: &Path) -> Value {
    let c: Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("comm.json")).unwrap()).unwrap();
    c["per_step"]["dp-grad"].clone()
}

#[test]
fn overlapped_gradient_sums_train_bit_for_bit_as_one_bucket_after_backprop_at_tp2_dp2() {
    let d = scratch("overlapped-grads");
    for pattern in ["tttt", "sppp", "llll"] {
        let (on, off) = (format!("{pattern}-on"), format!("{pattern}-off"));
        let o = "overlap_grad_reduce=true";
        assert_ok(&tp_train(&d, &overlap_args(pattern, o, &on)));
        let o = "overlap_grad_reduce=false";
        assert_ok(&tp_train(&d, &overlap_args(pattern, o, &off)));
        let (a, b) = (trained(&d.join(&on)), trained(&d.join(&off)));
        assert_eq!(a.0, b.0, "{pattern}: the logs differ");
        assert!(a.1 == b.1, "{pattern}: the final weights or moments differ");
        // Many buckets, the same bytes; one after backprop without overlap.
        let (con, coff) = (dp_grad(&d.join(&on)), dp_grad(&d.join(&off)));
        assert_eq!(coff["calls"], 1.0, "{pattern}");
        assert!(con["calls"].as_f64().unwrap() >= 4.0, "{pattern}: {con}");
        assert_eq!(con["bytes"], coff["bytes"], "{pattern}");
    }
}

/// PyTorch DDP's bucket sizes: the first bucket 1 MiB (the last layers' gradients start
/// early), the rest `ddp_bucket_mb` (25 MiB): mini's 3.2 MB of gradients at tp 1 x dp 2
/// go in two buckets, at 1 MiB in four.
#[test]
fn the_first_gradient_bucket_is_one_mib_as_pytorch_ddps() {
    let d = scratch("first-bucket");
    for (mb, buckets) in [("25", 2.0), ("1", 4.0)] {
        let out = format!("mb{mb}");
        let bucket = format!("ddp_bucket_mb={mb}");
        assert_ok(&tp_train(
            &d,
            &[
                "--pattern",
                "tttt",
                "--tp",
                "1",
                "--dp",
                "2",
                "--set",
                "max_iters=1",
                "--set",
                "eval_interval=0",
                "--set",
                "sample_tokens=0",
                "--set",
                "final_eval=sampled",
                "--set",
                "eval_iters=1",
                "--set",
                &bucket,
                "--out",
                &out,
            ],
        ));
        let c = dp_grad(&d.join(&out));
        assert_eq!(c["calls"], buckets, "ddp_bucket_mb={mb}: {c}");
        assert_eq!(c["bytes"], 3_216_384.0, "ddp_bucket_mb={mb}: {c}");
    }
}

/// The communication table shows what DDP hid: gradient buckets live outside the layers,
/// and a run whose layers hid nothing (t-only) but whose buckets hid some time printed
/// no hidden column before (under MPI as with threads).
#[test]
fn the_table_has_a_hidden_column_when_only_the_gradient_buckets_hid_time() {
    let d = scratch("overlap-hidden-column");
    let o = tp_train(&d, &overlap_args("tttt", "overlap_grad_reduce=true", "run"));
    assert_ok(&o);
    let mut report = tp_lab::run_dir::read_comm(&d.join("run")).unwrap().unwrap();
    assert!(report.layers.iter().all(|l| l.hidden_seconds == 0.0));
    for v in report.per_step.values_mut() {
        v.hidden_seconds = 0.0;
    }
    assert!(!report.table().contains("hidden ms"));
    let dp = report
        .per_step
        .get_mut(&tp_harness::comm::CommKind::DpGrad)
        .unwrap();
    dp.hidden_seconds = 0.002;
    let table = report.table();
    assert!(table.contains("hidden ms"), "{table}");
    let row = table
        .lines()
        .find(|l| l.trim_start().starts_with("dp-grad"))
        .unwrap();
    assert!(row.trim_end().ends_with("2.000"), "{row}");
}
