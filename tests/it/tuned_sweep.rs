//! Tuned sweeps (`tune:`) as a user runs them: each layout over a grid of learning rates
//! on selection seeds, its best chosen by the mean final val loss, the grid extended past
//! an edge, report seeds at each layout's own best; a diverged run is an outcome, not a
//! failure; `tune.from` carries a choice to another setting; the penalty table compares
//! best against best and the tuning figure is drawn.

use crate::common::*;
use crate::sweep::{assert_sweeps_refused, sweep};
use std::path::Path;

const TUNED: &str = "grid: {pattern: [tttt, pppp]}\ntune: {grid: {learning_rate: [1.0e-3, 1.0e-2]}, seeds: [11, 12], extend: 1}\nseeds: [1, 2]\nbaseline: tttt\n";

/// The sweep's run directories (its points), as paths to give tp-plot.
fn point_dirs(out: &Path) -> Vec<String> {
    std::fs::read_dir(out)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("pattern="))
        .map(|e| e.path().display().to_string())
        .collect()
}

fn final_val(dir: &Path) -> f64 {
    let s: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("summary.json")).unwrap()).unwrap();
    s["final_val_loss"].as_f64().unwrap()
}

/// Six steps from scratch: a larger rate is better, so each layout's best is the highest
/// value, the grid grows once past it (extend: 1), the best there is still at the edge
/// and said so; each layout's report seeds run at the value its own selection runs
/// choose (recomputed here from their summaries), seed by seed, and a rerun runs nothing.
#[test]
fn a_tuned_sweep_chooses_each_layouts_value_on_selection_seeds_then_reports_there() {
    let d = scratch("tuned-sweep");
    let o = sweep(&d, TUNED);
    assert_ok(&o);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("tttt's best lies at an edge (learning_rate at the highest value tried): trying learning_rate 0.1 too"),
        "{text}"
    );
    assert!(text.contains("note: pppp's chosen learning_rate"), "{text}");
    report_runs_go_seed_by_seed(&text);
    let out = d.join("out");
    let record: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("tuning.json")).unwrap()).unwrap();
    assert_eq!(record["keys"], serde_json::json!(["learning_rate"]));
    assert_eq!(record["selection_seeds"], serde_json::json!([11, 12]));
    for pattern in ["tttt", "pppp"] {
        // The value with the lowest mean over the selection seeds, from the runs.
        let mean = |lr: &str| {
            [11, 12]
                .iter()
                .map(|s| {
                    final_val(&out.join(format!("pattern={pattern},learning_rate={lr},seed={s}")))
                })
                .sum::<f64>()
                / 2.0
        };
        let best = ["0.001", "0.01", "0.1"]
            .into_iter()
            .min_by(|a, b| mean(a).total_cmp(&mean(b)))
            .unwrap();
        let choice = record["choices"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["pattern"] == pattern)
            .unwrap();
        assert_eq!(choice["chosen"][0][1], best, "{choice}");
        for seed in [1, 2] {
            let report = out.join(format!(
                "pattern={pattern},learning_rate={best},seed={seed}"
            ));
            assert!(
                report.join("summary.json").is_file(),
                "{}",
                report.display()
            );
        }
    }
    let md = std::fs::read_to_string(out.join("summary.md")).unwrap();
    assert!(
        md.contains("## Tuning") && md.contains("best (learning_rate at the highest value tried)"),
        "{md}"
    );
    // The replicate table holds the report runs only, paired across learning rates.
    let groups = std::fs::read_to_string(out.join("groups.csv")).unwrap();
    assert_eq!(groups.lines().count(), 3, "{groups}");
    let pppp = groups
        .lines()
        .find(|l| l.starts_with("\"pattern=pppp,learning_rate="));
    assert!(
        pppp.is_some_and(|l| l.ends_with(",no") || l.contains(",no,") || l.contains(",yes,")),
        "pppp is paired with tttt across their learning rates: {groups}"
    );
    let again = sweep(&d, TUNED);
    assert_ok(&again);
    let text = String::from_utf8_lossy(&again.stdout);
    assert!(!text.contains("running"), "{text}");
    assert_eq!(
        text.matches("finished earlier, skipped").count(),
        16,
        "{text}"
    );
    penalty_table_compares_best_against_best(&d, &out);
}

/// The report runs seed by seed (a pair with the baseline made together), not layout
/// by layout.
fn report_runs_go_seed_by_seed(text: &str) {
    let report_order: Vec<(&str, &str)> = (text.lines())
        .filter(|l| l.ends_with(": running ..."))
        .filter_map(|l| {
            let name = l.split("] ").nth(1)?.strip_suffix(": running ...")?;
            let seed = name.rsplit("seed=").next()?;
            let pattern = name.strip_prefix("pattern=")?.split(',').next()?;
            ["1", "2"].contains(&seed).then_some((pattern, seed))
        })
        .collect();
    let seeds: Vec<&str> = report_order.iter().map(|r| r.1).collect();
    assert_eq!(seeds, ["1", "1", "2", "2"], "{text}");
    for pair in report_order.chunks(2) {
        assert_ne!(pair[0].0, pair[1].0, "both layouts of a seed: {text}");
    }
}

/// The penalty table: best against best, with the chosen value and the grid; the
/// tuning table and figure beside it.
fn penalty_table_compares_best_against_best(d: &Path, out: &Path) {
    let runs = point_dirs(out);
    let mut args: Vec<&str> = vec!["--penalty", "--out", "pen", "--margin", "0.5"];
    args.extend(runs.iter().map(String::as_str));
    let o = bin("tp-plot", d, &args, &[]);
    assert_ok(&o);
    let pen = std::fs::read_to_string(d.join("pen/penalty.md")).unwrap();
    assert!(pen.contains("learning_rate tuned"), "{pen}");
    assert!(
        pen.contains("| pppp | 0.1 of 3 (0.001..0.1), at an edge | 1 (1) | 2 |"),
        "{pen}"
    );
    assert!(pen.contains("non-inferior at +0.5"), "{pen}");
    assert_png(&d.join("pen/tuning.png"));
    let tuning = std::fs::read_to_string(d.join("pen/tuning.csv")).unwrap();
    assert_eq!(tuning.lines().count(), 7, "{tuning}");
    report_runs_alone_are_drawn(d, &runs);
}

/// A tuned sweep's report runs alone (no selection run given): their sweep's record says
/// which values it chose, so they are drawn, not called selection runs.
fn report_runs_alone_are_drawn(d: &Path, runs: &[String]) {
    let mut args: Vec<&str> = runs
        .iter()
        .map(String::as_str)
        .filter(|r| r.ends_with("seed=1") || r.ends_with("seed=2"))
        .collect();
    args.extend(["--out", "report-only"]);
    assert_ok(&bin("tp-plot", d, &args, &[]));
    assert_png(&d.join("report-only/loss_curves.png"));
}

/// A check by hand (`--each-at learning_rate`): tttt at a rate the sweep did not choose
/// for it (its selection run at 0.001, seed 11) against pppp's run of that seed as it
/// ran: they are paired at the rates they were given, and the setting says by hand.
#[test]
fn each_at_compares_each_layout_at_the_rate_its_runs_were_given() {
    let d = scratch("tuned-each-at");
    assert_ok(&sweep(&d, TUNED));
    let out = d.join("out");
    let runs = point_dirs(&out);
    let pppp_best: Vec<String> = runs
        .iter()
        .filter(|r| r.contains("pattern=pppp") && !r.contains("seed=1"))
        .cloned()
        .collect();
    let mut hand: Vec<&str> = vec!["--penalty", "--out", "hand", "--each-at", "learning_rate"];
    let tttt_low = out
        .join("pattern=tttt,learning_rate=0.001,seed=11")
        .display()
        .to_string();
    let pppp_11 = runs
        .iter()
        .find(|r| r.contains("pattern=pppp") && r.ends_with("seed=11"))
        .unwrap()
        .clone();
    hand.extend([tttt_low.as_str(), pppp_11.as_str()]);
    assert!(!pppp_best.is_empty());
    let o = bin("tp-plot", &d, &hand, &[]);
    assert_ok(&o);
    let pen = std::fs::read_to_string(d.join("hand/penalty.md")).unwrap();
    assert!(pen.contains("learning_rate picked by hand"), "{pen}");
    let pppp = pen
        .lines()
        .find(|l| l.contains("| pppp | 1 (1) |"))
        .expect(&pen);
    assert!(pppp.contains("| tttt | "), "pppp paired with tttt: {pppp}");
}

/// Every run diverges (the fault hook poisons step 3's loss): each point says so once,
/// the sweep exits 0 (a divergence is a result), no layout has a choice and no report
/// run starts; a rerun skips the diverged points rather than training them again.
#[test]
fn diverged_runs_are_an_outcome_recorded_once_not_a_failure_retried() {
    let d = scratch("tuned-diverged");
    let body = "grid: {pattern: [tttt]}\ntune: {grid: {learning_rate: [1.0e-3, 1.0e-2]}, seeds: [11]}\nseeds: [1]\n";
    std::fs::write(
        d.join("sweep.yaml"),
        format!("name: tiny\n{}{body}", crate::sweep::BASE),
    )
    .unwrap();
    let run = || {
        bin(
            "tp-sweep",
            &d,
            &["sweep.yaml", "--out", "out"],
            &[("TP_INJECT_NAN", "3")],
        )
    };
    let o = run();
    assert_ok(&o);
    let text = String::from_utf8_lossy(&o.stdout);
    assert_eq!(
        text.matches("diverged: the training loss became NaN at step 3")
            .count(),
        2,
        "{text}"
    );
    assert!(
        text.contains("tttt has no final choice of learning_rate"),
        "{text}"
    );
    let dir = d.join("out/pattern=tttt,learning_rate=0.001,seed=11");
    let record: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("diverged.json")).unwrap()).unwrap();
    assert_eq!(record["step"], 3);
    assert!(!d
        .join("out/pattern=tttt,learning_rate=0.001,seed=1")
        .exists());
    let csv = std::fs::read_to_string(d.join("out/summary.csv")).unwrap();
    assert!(csv.contains("diverged at step 3"), "{csv}");
    let again = run();
    assert_ok(&again);
    let text = String::from_utf8_lossy(&again.stdout);
    assert_eq!(text.matches("diverged earlier").count(), 2, "{text}");
    assert!(!text.contains("running"), "{text}");
}

/// `tune.from` runs each layout at the value another tuned sweep chose for its family
/// (`tt` takes `tttt`'s: the same kinds at another depth), naming it in the run's point.
#[test]
fn tune_from_runs_each_layout_at_its_familys_chosen_value() {
    let d = scratch("tuned-from");
    let first = "grid: {pattern: [tttt]}\ntune: {grid: {learning_rate: [1.0e-3, 1.0e-2]}, seeds: [11]}\nseeds: [1]\n";
    assert_ok(&sweep(&d, first));
    std::fs::write(
        d.join("from.yaml"),
        format!(
            "name: deeper\n{}grid: {{pattern: [tt]}}\ntune: {{from: out}}\nseeds: [5]\n",
            crate::sweep::BASE
        ),
    )
    .unwrap();
    let o = bin("tp-sweep", &d, &["from.yaml", "--out", "out2"], &[]);
    assert_ok(&o);
    assert!(
        d.join("out2/pattern=tt,learning_rate=0.01,seed=5/summary.json")
            .is_file(),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    let record: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(d.join("out2/tuning.json")).unwrap())
            .unwrap();
    assert_eq!(record["from"], "out");
    assert_eq!(record["choices"][0]["source"], "out's tttt");
}

/// A crossed design: the TP degree crossed with the layout, each (degree, layout) cell
/// tuned on its own selection runs (never on another degree's), refined once at the
/// geometric midpoint beside its lattice best (the grid steps x4: 0.001, 0.004, 0.016;
/// no extension), and its report seed run at that cell's own choice; a rerun trains
/// nothing.
#[test]
fn a_crossed_design_tunes_and_refines_each_cell_on_its_own() {
    let body = "grid: {tp: [1, 2], pattern: [tttt]}\ntune: {grid: {learning_rate: [1.0e-3, 4.0e-3, 1.6e-2]}, seeds: [11, 12], refine: true}\nseeds: [1]\nbaseline: tttt\n";
    let d = scratch("tuned-crossed");
    let o = sweep(&d, body);
    assert_ok(&o);
    let text = String::from_utf8_lossy(&o.stdout);
    let out = d.join("out");
    let record: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("tuning.json")).unwrap()).unwrap();
    let choices = record["choices"].as_array().unwrap();
    assert_eq!(choices.len(), 2, "one choice a cell: {record}");
    for tp in [1, 2] {
        let name =
            |lr: &str, seed: u64| format!("tp={tp},pattern=tttt,learning_rate={lr},seed={seed}");
        let mean = |lr: &str| {
            (final_val(&out.join(name(lr, 11))) + final_val(&out.join(name(lr, 12)))) / 2.0
        };
        let lattice = ["0.001", "0.004", "0.016"];
        let coarse = lattice
            .into_iter()
            .min_by(|a, b| mean(a).total_cmp(&mean(b)))
            .unwrap();
        // The midpoints beside the lattice best, each on the side it has a neighbour.
        let mids: Vec<&str> = match coarse {
            "0.001" => vec!["0.002"],
            "0.004" => vec!["0.002", "0.008"],
            _ => vec!["0.008"],
        };
        for m in &mids {
            assert!(
                text.contains(&format!(
                    "refining around its best: trying learning_rate {m} too"
                )),
                "{text}"
            );
            assert!(
                out.join(name(m, 12)).join("summary.json").is_file(),
                "{tp}: {m}"
            );
        }
        let best = lattice
            .iter()
            .chain(&mids)
            .min_by(|a, b| mean(a).total_cmp(&mean(b)))
            .unwrap();
        let choice = choices
            .iter()
            .find(|c| {
                c["setting"]
                    .as_str()
                    .unwrap()
                    .contains(&format!("tp {tp},"))
            })
            .unwrap();
        assert_eq!(choice["chosen"][0][1], *best, "tp {tp}: {choice}");
        assert!(
            out.join(name(best, 1)).join("summary.json").is_file(),
            "tp {tp}'s report at {best}"
        );
    }
    let again = sweep(&d, body);
    assert_ok(&again);
    let text = String::from_utf8_lossy(&again.stdout);
    assert!(!text.contains("running"), "{text}");
}

#[test]
fn tune_mistakes_are_one_line_before_anything_runs() {
    assert_sweeps_refused(
        "tuned-refused",
        &[
            (
                "grid: {pattern: [tttt]}\ntune: {grid: {learning_rate: [1.0e-3]}, seeds: [1]}\n",
                "needs seeds: [...], the report seeds",
            ),
            (
                "grid: {pattern: [tttt]}\ntune: {grid: {learning_rate: [1.0e-3]}, seeds: [1]}\nseeds: [1, 2]\n",
                "seed 1 in sweep.yaml is both a selection seed",
            ),
            (
                "grid: {pattern: [tttt], learning_rate: [1.0e-3]}\ntune: {grid: {learning_rate: [1.0e-3]}, seeds: [3]}\nseeds: [1]\n",
                "tune.grid key `learning_rate` in sweep.yaml is the layout, the seed or a grid key",
            ),
            (
                "grid: {pattern: [tttt]}\ntune: {seeds: [3]}\nseeds: [1]\n",
                "needs a grid of values",
            ),
            (
                "grid: {pattern: [tttt]}\ntune: {from: nowhere}\nseeds: [1]\n",
                "nowhere holds no tuning.json",
            ),
            (
                "grid: {pattern: [tttt]}\ntune: {grid: {lr: [1.0e-3]}, seeds: [3]}\nseeds: [1]\n",
                "lr",
            ),
            (
                "grid: {pattern: [tttt]}\ntune: {grid: {learning_rate: [1.0e-3, 2.0e-3, 5.0e-3]}, seeds: [3], refine: true}\nseeds: [1]\n",
                "tune.refine in sweep.yaml needs tune.grid's `learning_rate` to step evenly",
            ),
            (
                "grid: {pattern: [tttt]}\ntune: {grid: {learning_rate: [1.0e-3]}, seeds: [3], refine: true}\nseeds: [1]\n",
                "needs two or more numbers",
            ),
            (
                "grid: {pattern: [tttt]}\ntune: {grid: {learning_rate: [1.0e-3]}, seeds: [3], stall_margin: -1}\nseeds: [1]\n",
                "tune.stall_margin in sweep.yaml must be a positive",
            ),
        ],
    );
}
