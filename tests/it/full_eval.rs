//! Full-split evaluation: `tp-eval` and the `final_eval: full` that ends a run. The loss
//! covers every prediction of the split, is the same on repeated calls, the same at any
//! tp for a t-only model (t == dense GPT-2), and at the run's tp equals what the run
//! itself wrote.

use crate::common::{assert_ok, bin, scratch};
use std::path::Path;
use tp_lab::data::Split;

/// A short run of `pattern` at tp 2 with a small model, into `dir/run`.
fn train(dir: &Path, pattern: &str) {
    assert_ok(&bin(
        "tp-train",
        dir,
        &[
            "--quiet",
            "--out",
            "run",
            "--pattern",
            pattern,
            "--tp",
            "2",
            "--set",
            "max_iters=30",
            "--set",
            "n_embd=32",
            "--set",
            "eval_interval=0",
            "--set",
            "sample_tokens=0",
        ],
        &[],
    ));
}

fn eval_json(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// Runs tp-eval on `dir/run` and returns the report it wrote (`eval.json` at the run's
/// tp, `eval-tpN.json` at another), read back through the type that wrote it.
fn tp_eval(dir: &Path, extra: &[&str]) -> serde_json::Value {
    let mut args = vec!["run"];
    args.extend_from_slice(extra);
    assert_ok(&bin("tp-eval", dir, &args, &[]));
    let split = if extra.contains(&"train") {
        Split::Train
    } else {
        Split::Val
    };
    let tp = extra
        .iter()
        .position(|a| *a == "--tp")
        .map(|i| extra[i + 1].parse().unwrap());
    let report = tp_lab::run_dir::read_eval(&dir.join("run"), split, tp)
        .unwrap()
        .expect("tp-eval wrote its report");
    assert_eq!(report.split, split);
    serde_json::to_value(report).unwrap()
}

#[test]
fn tp_eval_of_a_t_only_checkpoint_is_the_same_at_tp1_2_and_4_and_on_repeated_calls() {
    let d = scratch("full-eval-t");
    train(&d, "tttt");
    let at_run = eval_json(&d.join("run/eval.json"));
    let val_tokens = at_run["tokens"].as_u64().unwrap();
    assert!(val_tokens > 100_000, "{at_run}");
    let losses: Vec<f64> = ["1", "2", "4"]
        .iter()
        .map(|tp| {
            let e = tp_eval(&d, &["--tp", tp]);
            assert_eq!(e["tp"].as_u64().unwrap().to_string(), *tp);
            assert_eq!(e["tokens"].as_u64().unwrap(), val_tokens);
            assert_eq!(e["step"], 30);
            e["loss"].as_f64().unwrap()
        })
        .collect();
    for l in &losses {
        assert!(((l - losses[0]) / losses[0]).abs() <= 1e-5, "{losses:?}");
    }
    // The run's own final evaluation (tp 2) and a second call at tp 2: the same bits.
    let again = tp_eval(&d, &["--tp", "2"])["loss"].as_f64().unwrap();
    assert_eq!(again, losses[1]);
    assert_eq!(at_run["loss"].as_f64().unwrap(), losses[1]);
    // The summary reports the full-split loss and how many predictions it averages.
    let summary = eval_json(&d.join("run/summary.json"));
    assert_eq!(summary["final_val_tokens"], val_tokens);
    assert!((summary["final_val_loss"].as_f64().unwrap() - losses[1]).abs() < 1e-6);
    // The training split: every one of its tokens after the first.
    let train = tp_eval(&d, &["--split", "train"]);
    assert!(
        train["tokens"].as_u64().unwrap() > 9 * val_tokens,
        "{train}"
    );
}

#[test]
fn tp_eval_of_an_s_and_p_checkpoint_at_the_runs_tp_equals_the_runs_final_eval() {
    let d = scratch("full-eval-sp");
    train(&d, "sppp");
    let at_run = eval_json(&d.join("run/eval.json"));
    let e = tp_eval(&d, &[]);
    assert_eq!(e["tp"], 2);
    assert_eq!(e["loss"], at_run["loss"]);
    assert!(e["loss"].as_f64().unwrap().is_finite());
}
