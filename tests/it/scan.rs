//! `tp-scan`: SPD's block-wise sensitivity scan of a trained checkpoint. Its base loss is
//! the run's own full-split loss, each block's rise is its pattern's loss minus that,
//! the recommendations fit decreasing all-reduce budgets (mixing s for the budgets a
//! p-only conversion skips), and the report and plot are written; scans that cannot
//! measure anything are one clear error.

use crate::common::{assert_ok, bin, scratch};
use tp_harness::blocks::BlockLayout;

/// A small model trained for 60 steps in `d/out`.
fn train(d: &std::path::Path, out: &str, pattern: &str) -> std::process::Output {
    bin(
        "tp-train",
        d,
        &[
            "--quiet",
            "--out",
            out,
            "--pattern",
            pattern,
            "--set",
            "n_embd=32",
            "--set",
            "max_iters=60",
            "--set",
            "eval_interval=0",
            "--set",
            "sample_tokens=0",
        ],
        &[],
    )
}

#[test]
fn a_scan_of_a_t_only_checkpoint_ranks_blocks_and_recommends_a_pattern_per_budget() {
    let d = scratch("scan");
    let train = |out: &str, pattern: &str| train(&d, out, pattern);
    assert_ok(&train("run", "tttt"));
    let o = bin("tp-scan", &d, &["run", "--to", "p"], &[]);
    assert_ok(&o);
    let run = d.join("run");
    let scan = tp_lab::run_dir::read_scan(&run)
        .unwrap()
        .expect("scan.json");
    let own = tp_lab::run_dir::read_eval(&run, tp_lab::data::Split::Val, None)
        .unwrap()
        .unwrap();
    assert_eq!(scan.base_loss, own.loss);
    assert_eq!(
        (scan.base_pattern.as_str(), scan.base_forward_allreduces),
        ("tttt", 8)
    );
    assert_eq!(
        scan.blocks.iter().map(|b| b.block).collect::<Vec<_>>(),
        [3, 2, 1, 0]
    );
    for b in &scan.blocks {
        assert!((b.rise - (b.loss - scan.base_loss)).abs() < 1e-12);
        assert_eq!(b.pattern.chars().filter(|&c| c == 'p').count(), 1);
    }
    assert_eq!(
        scan.cumulative
            .iter()
            .map(|s| s.pattern.as_str())
            .collect::<Vec<_>>(),
        ["tttp", "ttpp", "tppp", "pppp"]
    );
    let budgets: Vec<usize> = scan
        .recommended
        .iter()
        .map(|s| s.forward_allreduces)
        .collect();
    assert!(budgets.windows(2).all(|w| w[0] > w[1]), "{budgets:?}");
    for s in scan.recommended.iter().chain(&scan.cumulative) {
        assert_eq!(
            BlockLayout::parse(&s.pattern).unwrap().forward_allreduces(),
            s.forward_allreduces
        );
        assert!(s.loss.is_finite());
    }
    assert!(
        budgets.contains(&2),
        "no 2-all-reduce recommendation: {budgets:?}"
    );
    assert!(run.join("scan.png").exists() && run.join("scan.svg").exists());
    assert!(String::from_utf8_lossy(&o.stdout).contains("budget  recommended"));

    let o = bin("tp-scan", &d, &["run", "--tp", "1"], &[]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.contains("nothing to measure"), "{err}");
    assert_ok(&train("sp", "sppp"));
    let o = bin("tp-scan", &d, &["sp"], &[]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("has no t block"));
}

/// `--to l`: the ladder conversion, budgets in the forward all-reduces a rank waits for.
#[test]
fn a_ladder_scan_budgets_the_all_reduces_a_rank_waits_for() {
    let d = scratch("scan-ladder");
    assert_ok(&train(&d, "run", "tttt"));
    let run = d.join("run");
    let o = bin("tp-scan", &d, &["run", "--to", "l"], &[]);
    assert_ok(&o);
    let scan = tp_lab::run_dir::read_scan(&run).unwrap().unwrap();
    assert_eq!(scan.base_exposed_allreduces, 8);
    assert_eq!(
        scan.cumulative
            .iter()
            .map(|s| (
                s.pattern.as_str(),
                s.forward_allreduces,
                s.exposed_allreduces
            ))
            .collect::<Vec<_>>(),
        [
            ("tttl", 8, 7),
            ("ttll", 8, 5),
            ("tlll", 8, 3),
            ("llll", 8, 1)
        ]
    );
    // A ladder uses the sum one module late: converting changes the function.
    assert!(
        scan.blocks.iter().all(|b| b.rise != 0.0),
        "{:?}",
        scan.blocks
    );
    let budgets: Vec<usize> = scan
        .recommended
        .iter()
        .map(|s| s.exposed_allreduces)
        .collect();
    assert!(budgets.windows(2).all(|w| w[0] > w[1]), "{budgets:?}");
}
