//! `tp-plot RUN_DIR... [--out DIR] [--x time --link 10gbe ...]`: loss curves and the
//! loss/communication trade-off, and loss against modelled time on given links.
//! `tp-plot --link-calibration DIR`: measured step times on shaped links against the
//! link model. `tp-plot --penalty RUN_DIR...`: a study's loss penalties.

use clap::Parser;
use std::path::PathBuf;
use tp_harness::error::{exit_on_error, user};
use tp_harness::util::write_atomic;
use tp_lab::analysis::runs::{merge_replicates_on, ComputeCpu};
use tp_lab::analysis::{merge_replicates, parse_link, RunCurves};
use tp_lab::config::Variant;
use tp_lab::plot::{label_runs, plot_timeline};
use tp_lab::run_dir::check_out;
use tp_lab::study::calibration::{calibrate, on_real_links};
use tp_lab::study::on_link;
use tp_lab::study::penalty::penalty_rows;
use tp_lab::study::penalty_table;
use tp_lab::study::plots::calibration::{write_calibration, write_real_links};
use tp_lab::study::plots::{plot_on_link, plot_penalty, plot_runs, plot_tuning, PENALTY_FIGURES};
use tp_lab::study::tuned_study;
use tp_lab::study::{penalty_axis, penalty_change, penalty_provenance};

#[derive(Parser, Debug)]
#[command(
    name = "tp-plot",
    version,
    about = "Plot loss curves of tp-harness runs"
)]
struct Args {
    /// Run directories (each with config.yaml and log.jsonl).
    #[arg(required_unless_present = "link_calibration")]
    runs: Vec<PathBuf>,
    /// Instead of loss curves: the step times scripts/cluster/link-calibration.sh measured on
    /// shaped links in DIR against the link model (calibration.{md,csv,png,svg}); with
    /// run directories too, their val curves in wall-clock time on those links
    /// (real_links.{md,png,svg}).
    #[arg(long, value_name = "DIR")]
    link_calibration: Option<PathBuf>,
    /// Output folder (default: plots/ inside the first run's parent).
    #[arg(long)]
    out: Option<PathBuf>,
    /// The x axis of extra plots: `time` draws loss against modelled wall-clock on each
    /// --link (the step plots are always drawn).
    #[arg(long, value_enum, default_value_t = XArg::Step)]
    x: XArg,
    /// An interconnect for the time plots (repeatable): a name of the link catalogue
    /// (`tp-plan --link list`, docs/links.md: nvlink4, ib-ndr, 100gbe, 10gbe, ...) or
    /// GBIT:LATENCY_US (Gbit/s delivered per direction, microseconds per message).
    #[arg(long = "link", value_name = "LINK")]
    links: Vec<String>,
    /// The val losses the time tables count minutes to, comma-separated (a table each):
    /// a number, `baseline` (the baseline group's worst final val loss, which each of its
    /// seeds reaches) or `baseline-mean` (its mean final val loss: about half its seeds
    /// reach it, and the pairs say how many); default: the worst final val loss of the
    /// runs, which every run reaches.
    #[arg(long, value_name = "LOSS,...")]
    target: Option<String>,
    /// Instead of loss curves: each pattern's final val loss against its setting's
    /// baseline (same model, TP degree and length), paired by seed (penalty.{md,csv},
    /// penalty_vs_tp, penalty_vs_iters and penalty_vs_syncs .{png,svg}), and how each
    /// penalty changes between settings that differ along one axis, paired by seed
    /// (penalty_change.{md,csv}), and those changes axis by axis with each penalty beside
    /// them (penalty_by_axis.md). Unfinished runs are left out.
    #[arg(long)]
    penalty: bool,
    /// Instead of loss curves: one traced step of each run (trained with --trace) on a
    /// time axis, ranks as rows: compute, exposed and hidden communication
    /// (timeline.{png,svg}).
    #[arg(long)]
    timeline: bool,
    /// The pattern --penalty pairs with (default: each setting's all-t layout); with
    /// --x time, the group the time tables count "x sooner" against (default: the one
    /// all-t group).
    #[arg(long, value_name = "PATTERN")]
    baseline: Option<String>,
    /// With --x time: the machine whose measured compute every group's modelled time
    /// uses, by any part of its description (`family 26`, `avx512`); default: the one
    /// that measured the most runs. One machine for all: never a mix.
    #[arg(long, value_name = "TEXT")]
    cpu: Option<String>,
    /// With --penalty: compare each layout at the value of these config keys its runs
    /// were given (repeatable, e.g. --each-at learning_rate), whatever a tuned sweep chose:
    /// a check at a rate picked by hand, labelled so (exploratory).
    #[arg(long = "each-at", value_name = "KEY", requires = "penalty")]
    each_at: Vec<String>,
    /// With --penalty: a non-inferiority margin (val loss, e.g. 0.01): the table says
    /// which layouts are at most this much worse than the baseline, their one-sided
    /// bound corrected over the layouts compared.
    #[arg(long, value_name = "LOSS", requires = "penalty")]
    margin: Option<f64>,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq)]
enum XArg {
    Step,
    Time,
}

/// `--out`, else plots/ beside the first run.
fn out_dir(a: &Args) -> PathBuf {
    a.out.clone().unwrap_or_else(|| {
        a.runs[0]
            .parent()
            .map(|p| p.join("plots"))
            .unwrap_or_else(|| PathBuf::from("plots"))
    })
}

/// `--penalty`: the table (printed and written) and the figures.
fn penalty(a: &Args) -> anyhow::Result<Vec<PathBuf>> {
    if a.margin.is_some_and(|m| !(m > 0.0 && m.is_finite())) {
        return Err(user(
            "--margin must be a positive val loss difference, e.g. --margin 0.01",
        ));
    }
    let study = tuned_study::load_study_each_at(&a.runs, &a.each_at)?;
    for why in &study.left_out {
        eprintln!("{why}: left out");
    }
    let baseline = match &a.baseline {
        Some(b) => Some(Variant::parse(b).map_err(|e| user(format!("--baseline: {e:#}")))?),
        None => None,
    };
    let mut rows = penalty_rows(&study.compared, baseline.as_ref());
    tuned_study::annotate(&mut rows, &study.choices);
    if let Some(b) = &baseline {
        if !rows.iter().any(|r| &r.variant == b) {
            return Err(user(format!(
                "--baseline {b} is not a pattern of the finished runs given"
            )));
        }
    }
    let out = out_dir(a);
    check_out(&out, "--out")?;
    std::fs::create_dir_all(&out)?;
    let md = penalty_table::markdown(&rows, a.margin) + &penalty_provenance::markdown(&rows);
    tp_harness::say_raw!("{md}");
    let (md_path, csv_path) = (out.join("penalty.md"), out.join("penalty.csv"));
    write_atomic(&md_path, md.as_bytes())?;
    write_atomic(&csv_path, penalty_table::csv(&rows).as_bytes())?;
    let mut files = vec![md_path, csv_path];
    if !study.choices.is_empty() {
        let md = tuned_study::markdown(&study.choices);
        tp_harness::say_raw!("\n{md}");
        let (md_path, csv_path) = (out.join("tuning.md"), out.join("tuning.csv"));
        write_atomic(&md_path, md.as_bytes())?;
        write_atomic(
            &csv_path,
            tuned_study::table(&study.choices).csv().as_bytes(),
        )?;
        files.extend([md_path, csv_path]);
        files.extend(plot_tuning(&study.choices, &out)?);
    }
    // Along the study's axes: how each penalty changes, paired by seed.
    let changes = penalty_change::penalty_changes(&study.compared, &rows);
    if !changes.is_empty() {
        let md = penalty_change::markdown(&changes);
        tp_harness::say_raw!("\n{md}");
        let (md_path, csv_path) = (
            out.join("penalty_change.md"),
            out.join("penalty_change.csv"),
        );
        write_atomic(&md_path, md.as_bytes())?;
        write_atomic(&csv_path, penalty_change::csv(&changes).as_bytes())?;
        files.extend([md_path, csv_path]);
    }
    // The same changes axis by axis, each penalty beside them.
    if let Some(md) = penalty_axis::markdown(&changes, &rows) {
        let path = out.join("penalty_by_axis.md");
        write_atomic(&path, md.as_bytes())?;
        files.push(path);
    }
    files.extend(plot_penalty(&rows, &out)?);
    remove_stale(&out, &files)?;
    Ok(files)
}

/// The tables `--penalty` may write beside its figures ([`PENALTY_FIGURES`], and
/// tuning's figure).
const PENALTY_TABLES: [&str; 5] = [
    "penalty_change.md",
    "penalty_change.csv",
    "penalty_by_axis.md",
    "tuning.md",
    "tuning.csv",
];

/// Removes the `--penalty` outputs in `out` that this drawing did not write (a figure of
/// an axis the runs no longer span, drawn from other runs before), saying so: a folder
/// of results never holds a figure its tables do not stand behind.
fn remove_stale(out: &std::path::Path, written: &[PathBuf]) -> anyhow::Result<()> {
    let figures = PENALTY_FIGURES.iter().chain(&["tuning"]);
    let names = PENALTY_TABLES
        .iter()
        .map(|n| n.to_string())
        .chain(figures.flat_map(|f| [format!("{f}.png"), format!("{f}.svg")]));
    for name in names {
        let path = out.join(&name);
        if path.is_file() && !written.iter().any(|w| w.file_name() == path.file_name()) {
            std::fs::remove_file(&path)?;
            eprintln!(
                "tp-plot: removed {} (drawn before from other runs; these runs do not give it)",
                path.display()
            );
        }
    }
    Ok(())
}

/// The curves of the runs given, a tuned sweep's only where its comparison keeps them
/// (each layout's report runs at its chosen values: its selection runs would be groups
/// of their own).
fn compared_curves(a: &Args) -> anyhow::Result<Vec<RunCurves>> {
    let apart = tuned_study::load_study(&a.runs)?.set_apart;
    if !apart.is_empty() {
        eprintln!(
            "tp-plot: note: {} runs of tuned sweeps left out (selection runs, and report runs at values not chosen)",
            apart.len()
        );
    }
    let runs = a
        .runs
        .iter()
        .filter(|d| !apart.contains(d))
        .map(|d| RunCurves::load(d))
        .collect::<anyhow::Result<Vec<_>>>()?;
    if runs.is_empty() {
        return Err(user("no runs to plot: every run given is a tuned sweep's selection run, or a report run its sweep has not chosen (yet); give the report runs at the chosen values, or tp-plot --penalty for the tuning figure"));
    }
    Ok(runs)
}

/// A target loss as `--target` names it.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Target {
    Loss(f64),
    BaselineWorst,
    BaselineMean,
}

/// `--target`'s comma-separated list.
fn parse_targets(given: Option<&str>) -> anyhow::Result<Vec<Target>> {
    let Some(given) = given else {
        return Ok(Vec::new());
    };
    given
        .split(',')
        .map(|t| match t.trim() {
            "baseline" => Ok(Target::BaselineWorst),
            "baseline-mean" => Ok(Target::BaselineMean),
            x => match x.parse::<f64>() {
                Ok(v) if v.is_finite() => Ok(Target::Loss(v)),
                _ => Err(user(
                    "--target takes finite val losses, `baseline` (the baseline's worst final val loss, which each of its seeds reaches) or `baseline-mean` (its mean final val loss), comma-separated: e.g. --target baseline-mean,1.82",
                )),
            },
        })
        .collect()
}

/// Loss curves, the trade-off, and with `--x time` loss against modelled time on each
/// link (the default mode).
fn curves(a: &Args) -> anyhow::Result<Vec<PathBuf>> {
    let targets_asked = parse_targets(a.target.as_deref())?;
    if a.x == XArg::Time && a.links.is_empty() {
        return Err(user(format!(
            "--x time needs at least one --link: one of {} or GBIT:LATENCY_US (Gbit/s, microseconds)",
            tp_harness::comm::link_catalog::names().join(", ")
        )));
    }
    let links = a
        .links
        .iter()
        .map(|l| parse_link(l))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let runs = compared_curves(a)?;
    // Runs that emulated a link: what they measured against what the model predicts.
    for r in &runs {
        if let Some((measured, modelled)) = r.timing.as_ref().and_then(|t| t.emulation_check()) {
            tp_harness::say!(
                "{}: {measured:.1} ms/step measured on its emulated link, {modelled:.1} ms/step modelled ({:+.1}%)",
                r.dir.display(),
                100.0 * (modelled / measured - 1.0)
            );
        }
    }
    // Runs still training (or stopped before their end) are drawn as far as they go;
    // the figures of final losses and times leave them out, and this line says so.
    let unfinished: Vec<String> = runs
        .iter()
        .filter(|r| !r.finished)
        .map(|r| r.dir.display().to_string())
        .collect();
    if !unfinished.is_empty() {
        eprintln!(
            "tp-plot: note: {} of {} runs not finished (no summary.json yet: {}): their curves are drawn as far as they go; the tradeoff and time figures leave them out{}",
            unfinished.len(),
            runs.len(),
            unfinished.join(", "),
            if unfinished.len() == runs.len() { ", so only loss_curves is drawn" } else { "" }
        );
    }
    // Runs that differ only in the seed become one curve with a band.
    let cpu = a
        .cpu
        .clone()
        .map_or(ComputeCpu::MostRuns, ComputeCpu::Matching);
    let mut runs = merge_replicates_on(runs, &cpu)?;
    label_runs(&mut runs);
    check_out(&out_dir(a), "--out")?;
    let mut files = plot_runs(&runs, &out_dir(a))?;
    let baseline = match &a.baseline {
        Some(b) => {
            let v = Variant::parse(b).map_err(|e| user(format!("--baseline: {e:#}")))?;
            match on_link::baseline_of(&runs, Some(&v)) {
                Some(r) => Some(r),
                None => {
                    return Err(user(format!(
                        "--baseline {b} is not one group of the runs given"
                    )))
                }
            }
        }
        None => on_link::baseline_of(&runs, None),
    };
    let mut targets = Vec::new();
    for t in &targets_asked {
        targets.push(match (t, baseline) {
            (Target::Loss(x), _) => *x,
            (Target::BaselineWorst | Target::BaselineMean, None) => {
                return Err(user(
                    "--target baseline needs one baseline group: give --baseline PATTERN",
                ))
            }
            (Target::BaselineWorst, Some(b)) => on_link::worst_final(b)
                .ok_or_else(|| user("--target baseline: the baseline group has no finished run"))?,
            (Target::BaselineMean, Some(b)) => {
                b.final_val.filter(|_| b.finished).ok_or_else(|| {
                    user("--target baseline-mean: the baseline group has no finished run")
                })?
            }
        });
    }
    for link in &links {
        files.extend(plot_on_link(&runs, &out_dir(a), link, &targets, baseline)?);
    }
    Ok(files)
}

fn main() {
    let a = Args::parse();
    let run = || -> anyhow::Result<Vec<PathBuf>> {
        if let Some(dir) = &a.link_calibration {
            let cal = calibrate(dir)?;
            tp_harness::say_raw!("{}", cal.markdown());
            let out = a.out.as_deref().unwrap_or(dir);
            check_out(out, "--out")?;
            let mut files = write_calibration(&cal, out)?;
            if !a.runs.is_empty() {
                // Training runs too: their curves in wall-clock time on the real links.
                let runs = a
                    .runs
                    .iter()
                    .map(|d| RunCurves::load(d))
                    .collect::<anyhow::Result<Vec<_>>>()?;
                let rows = on_real_links(&cal, &merge_replicates(runs));
                files.extend(write_real_links(&rows, out)?);
            }
            return Ok(files);
        }
        if a.penalty {
            return penalty(&a);
        }
        if a.timeline {
            check_out(&out_dir(&a), "--out")?;
            return plot_timeline(&a.runs, &out_dir(&a));
        }
        curves(&a)
    };
    exit_on_error(
        "tp-plot",
        run().map(|files| {
            for f in files {
                tp_harness::say!("{}", f.display());
            }
        }),
    );
}
