//! `--init-from`: a new run starting from another run's weights under another pattern,
//! as the SPD recipe retrofits a trained dense model. Same pattern and no learning: the
//! exact loss of the source; t -> p leaves the attention/MLP output biases out and says
//! so; what cannot be filled or does not fit is one clear error.

use crate::common::{assert_ok, bin, scratch};
use std::path::Path;

fn train(dir: &Path, out: &str, extra: &[&str]) -> std::process::Output {
    let mut args = vec![
        "--quiet",
        "--out",
        out,
        "--set",
        "n_embd=32",
        "--set",
        "bias=true",
        "--set",
        "eval_interval=0",
        "--set",
        "sample_tokens=0",
    ];
    args.extend_from_slice(extra);
    bin("tp-train", dir, &args, &[])
}

fn eval_loss(run: &Path) -> f64 {
    tp_lab::run_dir::read_eval(run, tp_lab::data::Split::Val, None)
        .unwrap()
        .expect("the run wrote eval.json")
        .loss
}

/// One step at learning rate 0 leaves the weights as they were loaded.
const FROZEN: [&str; 6] = [
    "--set",
    "max_iters=1",
    "--set",
    "learning_rate=0",
    "--set",
    "min_lr=0",
];

#[test]
fn init_from_loads_another_runs_weights_and_a_p_pattern_leaves_its_biases_out() {
    let d = scratch("init-from");
    assert_ok(&train(
        &d,
        "a",
        &["--pattern", "tttt", "--set", "max_iters=30"],
    ));
    let mut same = vec!["--init-from", "a", "--pattern", "tttt"];
    same.extend(FROZEN);
    let o = train(&d, "b", &same);
    assert_ok(&o);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("initial weights from a/checkpoints/step-000030"));
    assert!(!out.contains("another function"), "{out}");
    assert_eq!(eval_loss(&d.join("b")), eval_loss(&d.join("a")));

    let mut to_p = vec!["--init-from", "a", "--pattern", "pppp"];
    to_p.extend(FROZEN);
    let o = train(&d, "c", &to_p);
    assert_ok(&o);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("pattern pppp has no use for h.0.o.b, h.0.pr.b, h.1.o.b"),
        "{out}"
    );
    // The same weights, another function: said, with why.
    assert!(
        out.contains("pattern pppp at tp 2 computes another function of these weights than tttt at tp 2 did (its layer kinds differ from tttt's at 4 of 4 layers)"),
        "{out}"
    );
    assert!(eval_loss(&d.join("c")).is_finite());
    assert_ne!(eval_loss(&d.join("c")), eval_loss(&d.join("a")));

    // Back from p to t: the biases t needs are not there.
    let o = train(&d, "e", &["--init-from", "c", "--pattern", "tttt"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.contains("o.b") && err.contains("missing"), "{err}");
    assert!(!d.join("e/log.jsonl").exists());

    // Another model shape is refused naming the key.
    let o = train(&d, "f", &["--init-from", "a", "--set", "n_head=2"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("its n_head is 4 but this run's is 2"), "{err}");
    assert!(!d.join("f").exists());
}
