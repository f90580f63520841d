//! `tp-plot` as a user runs it on a sweep's runs: curves of given runs, loss against
//! modelled time on named and given links (with the table behind each figure), and runs
//! on real or emulated links set against the link model.

use crate::common::*;
use crate::sweep::sweep;

#[test]
fn tp_plot_draws_given_runs_and_rejects_a_folder_that_is_not_a_run() {
    let d = scratch("plot");
    assert_ok(&sweep(&d, "grid: {pattern: [pppp]}\n"));
    let o = bin("tp-plot", &d, &["out/pattern=pppp", "--out", "pics"], &[]);
    assert_ok(&o);
    assert_png(&d.join("pics/loss_curves.png"));
    assert_svg(&d.join("pics/tradeoff.svg"));
    let o = bin("tp-plot", &d, &["out/logs"], &[]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("not a tp-harness run directory"));
}

/// Loss against modelled wall-clock: one set of time plots per link, named after it;
/// `--x time` without a link and an unknown link are one-line errors.
#[test]
fn tp_plot_draws_loss_against_modelled_time_on_each_link() {
    let d = scratch("plot-time");
    assert_ok(&sweep(
        &d,
        "grid: {pattern: [tttt, pppp]}
",
    ));
    let runs = ["out/pattern=tttt", "out/pattern=pppp"];
    let mut args = runs.to_vec();
    args.extend([
        "--out", "pics", "--x", "time", "--link", "10gbe", "--link", "100:2",
    ]);
    assert_ok(&bin("tp-plot", &d, &args, &[]));
    for f in [
        "loss_vs_time_10gbe",
        "tradeoff_time_10gbe",
        "loss_vs_time_100gbit_2us",
    ] {
        assert_png(&d.join(format!("pics/{f}.png")));
        assert_svg(&d.join(format!("pics/{f}.svg")));
    }
    let svg = std::fs::read_to_string(d.join("pics/tradeoff_time_10gbe.svg")).unwrap();
    assert!(
        svg.contains("modelled ms per step on 10 GbE (TCP)"),
        "the link's catalogue label"
    );
    let table = std::fs::read_to_string(d.join("pics/loss_vs_time_100gbit_2us.md")).unwrap();
    assert!(
        table.contains("link calibration: given as --link 100:2"),
        "{table}"
    );
    // The compute it models was measured on this machine, and the table says so (each
    // run's summary.json keeps its CPU and which kernels computed).
    let cpu = tp_harness::util::host::cpu();
    assert!(
        table.contains(&format!(
            "compute measured on: {}",
            crate::common::machine::machine_here()
        )),
        "{table}"
    );
    let summary = std::fs::read_to_string(d.join("out/pattern=tttt/summary.json")).unwrap();
    assert!(summary.contains(&cpu), "{summary}");
    // The table behind them: every run reaches the default target (the worst final
    // loss); a target nobody reaches leaves the minutes empty.
    let table = std::fs::read_to_string(d.join("pics/loss_vs_time_10gbe.md")).unwrap();
    let rows: Vec<&str> = table
        .lines()
        .filter(|l| l.starts_with("| tttt") || l.starts_with("| pppp"))
        .collect();
    assert_eq!(rows.len(), 2, "{table}");
    for row in rows {
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        // Compute: the slowest rank's thread CPU time, with the ranks' imbalance.
        let (compute, imbalance) = cells[4].split_once(" (").unwrap();
        let compute: f64 = compute.parse().unwrap();
        assert!(compute > 0.0 && imbalance.ends_with("%)"), "{row}");
        let ms: f64 = cells[5].parse().unwrap();
        assert!(ms > compute, "{row}");
        // Minutes to the target: a mean over the seeds (one here: no interval).
        assert!(cells[6].parse::<f64>().unwrap() >= 0.0, "{row}");
        // x sooner taken apart: the step ratio times the loss-curve ratio is the
        // product (one pair: the ratios themselves, each rounded to two decimals, so the
        // product of the printed two is off the printed product by at most half a unit
        // of the last place times each factor, plus the product's own rounding).
        if row.starts_with("| pppp") {
            let ratio = |c: &str| -> f64 { c.trim_end_matches(" (1 pair)").parse().unwrap() };
            let (step, curve, product) = (ratio(cells[7]), ratio(cells[8]), ratio(cells[9]));
            let rounding = 0.005 * (step + curve + 1.0) + 0.000_03;
            assert!((step * curve - product).abs() <= rounding, "{row}");
        }
    }
    let mut unreachable = args.clone();
    unreachable.extend(["--target", "0.01"]);
    let o = bin("tp-plot", &d, &unreachable, &[]);
    assert_ok(&o);
    assert!(String::from_utf8_lossy(&o.stdout).contains("minutes to 0.010"));
    let table = std::fs::read_to_string(d.join("pics/loss_vs_time_10gbe.md")).unwrap();
    assert!(
        table
            .lines()
            .filter(|l| l.starts_with("| tttt"))
            .all(|l| l.trim_end().ends_with("| - | 1 | 1 | 1 |")),
        "{table}"
    );
    for (bad, needle) in [
        (vec!["out/pattern=tttt", "--x", "time"], "--x time needs"),
        (vec!["out/pattern=tttt", "--link", "5g"], "link `5g`"),
        (vec!["out/pattern=tttt", "--target", "nan"], "--target"),
    ] {
        let o = bin("tp-plot", &d, &bad, &[]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        assert!(err.contains(needle), "{err}");
    }
}

/// `tp-plot --link-calibration`: runs listed in runs.csv (here the "link" runs emulate
/// a 1 Gbit/s link in-process; scripts/cluster/link-calibration.sh makes real ones) become the
/// measured-vs-modelled table and figure, and with training runs given, their val curves
/// in wall-clock time on each link with the minutes to a common loss.
#[test]
fn tp_plot_sets_link_runs_against_the_model_and_draws_curves_in_link_time() {
    let d = scratch("plot-calibration");
    assert_ok(&sweep(&d, "grid: {pattern: [tttt, pppp]}\n"));
    let cal = d.join("cal");
    std::fs::create_dir_all(&cal).unwrap();
    let mut csv = String::from("kind,rate,pattern,run\n");
    for p in ["tttt", "pppp"] {
        let run = format!("link-{p}");
        let args = [
            "--quiet",
            "--pattern",
            p,
            "--set",
            "n_embd=32",
            "--set",
            "max_iters=6",
            "--set",
            "eval_interval=0",
            "--set",
            "sample_tokens=0",
            "--set",
            "link_gbps=1",
            "--set",
            "link_latency_us=50",
            "--out",
            &run,
        ];
        assert_ok(&bin("tp-train", &cal, &args, &[]));
        csv += &format!("threads,,{p},../out/pattern={p}\nlink,1gbit,{p},{run}\n");
    }
    std::fs::write(cal.join("runs.csv"), csv).unwrap();
    let o = bin(
        "tp-plot",
        &d,
        &[
            "--link-calibration",
            "cal",
            "out/pattern=tttt",
            "out/pattern=pppp",
        ],
        &[],
    );
    assert_ok(&o);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("| tttt | 1gbit |") && out.contains("| pppp | 1gbit |"),
        "{out}"
    );
    assert!(out.contains("min to"), "{out}");
    for f in ["calibration", "real_links"] {
        assert_png(&cal.join(format!("{f}.png")));
        assert_svg(&cal.join(format!("{f}.svg")));
    }
    let csv = std::fs::read_to_string(cal.join("calibration.csv")).unwrap();
    assert_eq!(csv.lines().count(), 3, "{csv}");
    let o = bin("tp-plot", &d, &["--link-calibration", "out"], &[]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("scripts/cluster/link-calibration.sh"), "{err}");
}

/// A run that emulated a link is shown next to the model's prediction for it, and its
/// summary records step, communication and compute time per step.
#[test]
fn tp_plot_sets_a_run_on_an_emulated_link_beside_the_model_and_its_summary_splits_the_step() {
    let e = scratch("plot-time-emulated");
    assert_ok(&sweep(&e, "grid: {pattern: [tttt], link_gbps: [10]}\n"));
    let run = "out/pattern=tttt,link_gbps=10";
    let o = bin("tp-plot", &e, &[run, "--out", "pics"], &[]);
    assert_ok(&o);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("measured on its emulated link") && out.contains("modelled"),
        "{out}"
    );
    let s = tp_lab::run_dir::read_summary(&e.join(run))
        .unwrap()
        .unwrap();
    let (step, comm, compute) = (
        s.step_ms.unwrap(),
        s.comm_ms_per_step.unwrap(),
        s.compute_ms_per_step.unwrap(),
    );
    // Compute is the slowest rank's thread CPU time: no more than the step's wall time.
    assert!(comm > 0.0 && compute > 0.0 && compute <= step, "{s:?}");
    assert!(s.comm_bytes_per_step.unwrap() > 0.0);
}

/// A run still training (no summary.json, no comm.json yet) beside a finished one: its
/// curve is drawn as far as it goes, one line names it, and no figure of final losses or
/// times shows its latest evaluation as a final loss; alone, it gets its curves and no
/// empty figure.
#[test]
fn tp_plot_of_an_unfinished_run_draws_what_exists_and_names_it_in_one_line() {
    let d = scratch("plot-live");
    assert_ok(&sweep(&d, "grid: {pattern: [tttt, pppp]}\n"));
    let live = d.join("out/pattern=pppp");
    for f in ["summary.json", "comm.json", "eval.json"] {
        std::fs::remove_file(live.join(f)).unwrap();
    }
    let o = bin(
        "tp-plot",
        &d,
        &[
            "out/pattern=tttt",
            "out/pattern=pppp",
            "--out",
            "both",
            "--x",
            "time",
            "--link",
            "10gbe",
        ],
        &[],
    );
    assert_ok(&o);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("1 of 2 runs not finished") && err.contains("pattern=pppp"),
        "{err}"
    );
    let tradeoff = std::fs::read_to_string(d.join("both/tradeoff.svg")).unwrap();
    assert!(
        tradeoff.contains("tttt") && !tradeoff.contains("pppp"),
        "{tradeoff}"
    );
    assert_svg(&d.join("both/loss_vs_time_10gbe.svg"));
    let curves = std::fs::read_to_string(d.join("both/loss_curves.svg")).unwrap();
    assert!(
        curves.contains("pppp"),
        "the unfinished run's curve is missing"
    );
    let o = bin(
        "tp-plot",
        &d,
        &[
            "out/pattern=pppp",
            "--out",
            "alone",
            "--x",
            "time",
            "--link",
            "10gbe",
        ],
        &[],
    );
    assert_ok(&o);
    assert!(String::from_utf8_lossy(&o.stderr).contains("so only loss_curves is drawn"));
    let mut written: Vec<String> = std::fs::read_dir(d.join("alone"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .collect();
    written.sort();
    assert_eq!(written, ["loss_curves.png", "loss_curves.svg"]);
}

/// A target no run reaches is said in one line with the best loss reached (not a column
/// of dashes), and the study's links are there by name.
#[test]
fn a_target_no_run_reaches_is_said_with_the_best_loss_reached() {
    let d = scratch("plot-unreached");
    assert_ok(&sweep(&d, "grid: {pattern: [pppp]}\n"));
    let o = bin(
        "tp-plot",
        &d,
        &[
            "out/pattern=pppp",
            "--out",
            "pics",
            "--x",
            "time",
            "--link",
            "100mbit",
            "--target",
            "0.1",
        ],
        &[],
    );
    assert_ok(&o);
    let md = std::fs::read_to_string(d.join("pics/loss_vs_time_100mbit.md")).unwrap();
    assert!(
        md.contains("Fast Ethernet (TCP) (0.096 Gbit/s, 50 us")
            && md.contains("`100mbit` from the link catalogue (assumed constants"),
        "{md}"
    );
    assert!(
        md.contains("interpolated linearly between its evaluations"),
        "{md}"
    );
    let line = md
        .lines()
        .find(|l| l.starts_with("No run reached 0.100"))
        .expect(&md);
    assert!(
        line.contains("the lowest val loss any reached was") && line.contains("(pppp)"),
        "{line}"
    );
}
