//! Friction a researcher met in the everyday workflow (issue 37, part 4): each as it was
//! met, shown gone.

use crate::common::*;
use std::os::unix::fs::PermissionsExt;

const SMALL: [&str; 9] = [
    "--quiet",
    "--set",
    "n_embd=32",
    "--set",
    "max_iters=4",
    "--set",
    "eval_interval=0",
    "--set",
    "sample_tokens=0",
];

fn train(d: &std::path::Path, extra: &[&str]) {
    assert_ok(&bin("tp-train", d, &[&SMALL[..], extra].concat(), &[]));
}

#[test]
fn init_from_at_another_tp_says_that_s_and_p_blocks_compute_another_function() {
    let d = scratch("wf-init-tp");
    train(&d, &["--pattern", "sppp", "--tp", "2", "--out", "a"]);
    let o = bin(
        "tp-train",
        &d,
        &[&SMALL[..], &["--init-from", "a", "--tp", "4", "--out", "b"]].concat(),
        &[],
    );
    assert_ok(&o);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("compute a different function at tp 4 than at tp 2"),
        "{err}"
    );
    // All-t weights are the same function at every tp: nothing to say.
    train(&d, &["--pattern", "tttt", "--tp", "2", "--out", "t"]);
    let o = bin(
        "tp-train",
        &d,
        &[
            &SMALL[..],
            &["--init-from", "t", "--tp", "4", "--out", "t4"],
        ]
        .concat(),
        &[],
    );
    assert_ok(&o);
    assert!(!String::from_utf8_lossy(&o.stderr).contains("different function"));
}

#[test]
fn an_export_is_readable_like_its_config() {
    let d = scratch("wf-export-mode");
    train(&d, &["--pattern", "tttt", "--out", "run"]);
    assert_ok(&bin("tp-export", &d, &["run", "--out", "hf"], &[]));
    let mode = |f: &str| {
        std::fs::metadata(d.join("hf").join(f))
            .unwrap()
            .permissions()
            .mode()
            & 0o777
    };
    assert_eq!(mode("model.safetensors"), mode("config.json"));
    assert_ne!(
        mode("model.safetensors") & 0o044,
        0,
        "not readable by others"
    );
}

#[test]
fn tp_eval_at_another_tp_writes_beside_the_runs_own_report() {
    let d = scratch("wf-eval-tp");
    train(&d, &["--pattern", "tttt", "--tp", "2", "--out", "run"]);
    let own = std::fs::read_to_string(d.join("run/eval.json")).unwrap();
    let o = bin("tp-eval", &d, &["run", "--tp", "4"], &[]);
    assert_ok(&o);
    assert!(String::from_utf8_lossy(&o.stdout).contains("report: run/eval-tp4.json"));
    assert_eq!(
        std::fs::read_to_string(d.join("run/eval.json")).unwrap(),
        own
    );
    let at4: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(d.join("run/eval-tp4.json")).unwrap())
            .unwrap();
    assert_eq!(at4["tp"], 4);
    // At the run's own tp it is the run's report.
    let o = bin("tp-eval", &d, &["run"], &[]);
    assert!(String::from_utf8_lossy(&o.stdout).contains("report: run/eval.json"));
}

#[test]
fn config_keys_are_flags_in_nanogpts_spelling() {
    let d = scratch("wf-nanogpt-flags");
    let o = bin(
        "tp-train",
        &d,
        &[
            "--seed",
            "3",
            "--max_iters=3",
            "--n_embd",
            "32",
            "--eval_interval=0",
            "--quiet",
            "--out",
            "run",
        ],
        &[],
    );
    assert_ok(&o);
    let cfg = std::fs::read_to_string(d.join("run/config.yaml")).unwrap();
    for line in ["seed: 3", "max_iters: 3", "n_embd: 32"] {
        assert!(cfg.lines().any(|l| l == line), "{line} not in {cfg}");
    }
    // A wrong value names the flag as it was typed.
    let o = bin("tp-train", &d, &["--max_iters=lots", "--out", "bad"], &[]);
    one_clear_error(&o, "--max_iters lots");
}

#[test]
fn the_tradeoff_figure_says_its_intervals_are_unpaired() {
    let d = scratch("wf-tradeoff");
    std::fs::write(
        d.join("s.yaml"),
        "name: t\nbase: {n_embd: 32, max_iters: 4, eval_interval: 2, eval_iters: 1, sample_tokens: 0}\ngrid: {pattern: [tttt, pppp]}\nseeds: [1, 2]\nbaseline: tttt\n",
    )
    .unwrap();
    assert_ok(&bin("tp-sweep", &d, &["s.yaml", "--out", "out"], &[]));
    let svg = std::fs::read_to_string(d.join("out/plots/tradeoff.svg")).unwrap();
    assert!(
        svg.contains("unpaired 95% interval; paired tests: summary.md"),
        "{svg}"
    );
    let md = std::fs::read_to_string(d.join("out/summary.md")).unwrap();
    assert!(md.contains("paired"), "{md}");
}

#[test]
fn tp_sample_streams_its_text_as_it_is_generated() {
    let d = scratch("wf-sample-stream");
    train(&d, &["--out", "run"]);
    let mut child = command("tp-sample", &d)
        .args(["run", "--tokens", "1000000"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut out = child.stdout.take().unwrap();
    let mut some = [0u8; 64];
    std::io::Read::read_exact(&mut out, &mut some).unwrap();
    // Text arrived while the million tokens are still being drawn.
    let still_running = child.try_wait().unwrap().is_none();
    child.kill().unwrap();
    let _ = child.wait();
    assert!(still_running, "tp-sample printed only when it had finished");
}

/// A run's record names the source its binary was built from: the commit git reports for
/// this checkout, "+modified" where the compiled sources differed from it (where git
/// cannot say, the record says nothing).
#[test]
fn a_runs_summary_names_the_commit_its_binary_was_built_from() {
    let d = scratch("build-named");
    train(&d, &["--out", "run"]);
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(d.join("run/summary.json")).unwrap())
            .unwrap();
    let head = std::process::Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(REPO)
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
    match (head, summary["build"].as_str()) {
        (Some(head), Some(build)) => assert!(
            build == head || build == format!("{head}+modified"),
            "built from {build}, the checkout is at {head}"
        ),
        (None, None) => {}
        (head, build) => panic!("git says {head:?}, the record {build:?}"),
    }
}
