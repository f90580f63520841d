//! The compute part of the time model: each rank's compute measured as its own thread's
//! CPU time (comm.json's `compute`), and the one-rank-at-a-time mode it is held to.

use crate::common::{bin, scratch};
use serde_json::Value;
use std::path::Path;

fn train(dir: &Path, out: &str, extra: &[&str], env: &[(&str, &str)]) -> Value {
    let args = [
        &[
            "--pattern",
            "tsp",
            "--tp",
            "4",
            "--out",
            out,
            "--quiet",
            "--set",
            "n_layer=3",
            "--set",
            "max_iters=6",
            "--set",
            "eval_interval=3",
            "--set",
            "eval_iters=1",
            "--set",
            "log_interval=1",
            "--set",
            "sample_tokens=0",
        ][..],
        extra,
    ]
    .concat();
    let o = bin("tp-train", dir, &args, env);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_str(&std::fs::read_to_string(dir.join(out).join("comm.json")).unwrap())
        .unwrap()
}

fn numbers(v: &Value) -> Vec<f64> {
    v.as_array()
        .unwrap_or_else(|| panic!("not an array: {v}"))
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect()
}

fn log(dir: &Path) -> Vec<String> {
    std::fs::read_to_string(dir.join("log.jsonl"))
        .unwrap()
        .lines()
        .map(|l| {
            // The losses, not the times.
            let mut v: Value = serde_json::from_str(l).unwrap();
            for k in ["ms", "tokens_per_s"] {
                v.as_object_mut().unwrap().remove(k);
            }
            v.to_string()
        })
        .collect()
}

/// Four ranks as threads on this machine's cores: every rank reports its compute, and on
/// every rank the CPU time of its thread outside collectives is at most the wall-clock
/// time it spent outside them (a thread cannot use more CPU than time passes; with more
/// ranks than cores it uses less). Taking turns changes when ranks compute, not what:
/// the losses are the same bits, and each rank's compute is then its wall-clock time.
#[test]
fn each_rank_s_compute_is_its_thread_cpu_time_and_taking_turns_trains_the_same_bits() {
    let d = scratch("time-model");
    let shared = train(&d, "shared", &[], &[]);
    let turns = train(&d, "turns", &[], &[("TP_ONE_RANK_AT_A_TIME", "1")]);
    for c in [&shared["compute"], &turns["compute"]] {
        let (cpu, wall) = (numbers(&c["per_rank_ms"]), numbers(&c["per_rank_wall_ms"]));
        assert_eq!((cpu.len(), wall.len()), (4, 4), "{c}");
        assert_eq!(c["steps"], 6, "{c}");
        for (c, w) in cpu.iter().zip(&wall) {
            assert!(*c > 0.0 && c.is_finite(), "{cpu:?}");
            assert!(*w >= 0.9 * c - 0.05, "cpu {cpu:?} > wall {wall:?}");
        }
    }
    assert_eq!(log(&d.join("shared")), log(&d.join("turns")));
    // Resumed with nothing left to train: what the steps measured stays.
    let o = bin("tp-train", &d, &["--resume", "turns", "--quiet"], &[]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let again: Value =
        serde_json::from_str(&std::fs::read_to_string(d.join("turns/comm.json")).unwrap()).unwrap();
    assert_eq!(again["compute"], turns["compute"]);
}
