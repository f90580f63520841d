//! Loss plots of runs (`tp-plot`): train and val loss against step, one line per run,
//! and the trade-off of final val loss against forward all-reduces per step. Each as PNG
//! and SVG. Runs whose configs differ only in the seed are replicates: they are drawn as
//! one mean curve with a band of one standard deviation, and one point with the 95%
//! interval of the mean as an error bar ([`merge_replicates`]).

mod font;
pub mod timing;

use crate::error::UserError;
use crate::run_dir::{read_comm, read_config, read_log, read_summary};
use crate::util::stats::Replicates;
use anyhow::{Context, Result};
use plotters::coord::Shift;
use plotters::prelude::*;
use std::path::{Path, PathBuf};

/// What a plot needs of one run directory.
#[derive(Debug, Clone)]
pub struct RunCurves {
    pub dir: PathBuf,
    pub pattern: String,
    pub tp: usize,
    pub dp: usize,
    pub label: String,
    /// (step, loss) of logged training steps.
    pub train: Vec<(f64, f64)>,
    /// (step, val loss) of evaluations.
    pub val: Vec<(f64, f64)>,
    /// TP forward all-reduces per optimiser step (from comm.json).
    pub forward_allreduces_per_step: Option<f64>,
    /// The final validation loss: summary.json's (the whole split with `final_eval:
    /// full`), else the last evaluation's.
    pub final_val: Option<f64>,
    /// The config without its seed: equal for replicates.
    pub group_key: String,
    /// Runs merged into this one (1: a single run).
    pub n: usize,
    /// Mean +- one standard deviation over the replicates at each step of `train`/`val`.
    pub train_band: Vec<(f64, f64, f64)>,
    pub val_band: Vec<(f64, f64, f64)>,
    /// Half-width of the 95% interval of `final_val` over the replicates.
    pub final_ci95: Option<f64>,
    /// Step time and collectives per step, for modelled time on a link.
    pub timing: Option<timing::StepTiming>,
}

impl RunCurves {
    pub fn load(dir: &Path) -> Result<Self> {
        let cfg = read_config(dir)?;
        let (mut train, mut val) = (Vec::new(), Vec::new());
        for line in read_log(dir)? {
            let step = line.step as f64;
            if let Some(l) = line.train_loss {
                train.push((step, l as f64));
            }
            if let Some(l) = line.val_loss {
                val.push((step, l as f64));
            }
        }
        let comm = read_comm(dir)?;
        let forward_allreduces_per_step = comm
            .as_ref()
            .and_then(|c| c.per_step.get("tp-forward").map(|s| s.calls));
        let mut step_ms: Vec<f64> = read_log(dir)?.iter().filter_map(|l| l.ms).collect();
        step_ms.sort_by(f64::total_cmp);
        let timing = comm
            .as_ref()
            .zip(step_ms.get(step_ms.len() / 2))
            .map(|(c, &ms)| timing::StepTiming::new(ms, c));
        let final_val = read_summary(dir)?
            .and_then(|s| s.final_val_loss.map(f64::from))
            .or_else(|| val.last().map(|p| p.1));
        let group_key = {
            let mut c = cfg.clone();
            c.optim.seed = 0;
            c.to_yaml()?
        };
        Ok(Self {
            final_val,
            group_key,
            n: 1,
            train_band: Vec::new(),
            val_band: Vec::new(),
            final_ci95: None,
            timing,
            dir: dir.to_path_buf(),
            label: cfg.model.pattern.clone(),
            pattern: cfg.model.pattern,
            tp: cfg.parallel.tp,
            dp: cfg.parallel.dp,
            train,
            val,
            forward_allreduces_per_step,
        })
    }
}

/// (step, value) points of a curve.
type Curve = Vec<(f64, f64)>;
/// (step, low, high) of a band around a curve.
type Band = Vec<(f64, f64, f64)>;

/// Mean and band of replicate curves at the steps all of them logged.
fn mean_band(curves: &[&Curve]) -> (Curve, Band) {
    let len = curves.iter().map(|c| c.len()).min().unwrap_or(0);
    let (mut mean, mut band) = (Vec::new(), Vec::new());
    for i in 0..len {
        let step = curves[0][i].0;
        if curves.iter().any(|c| c[i].0 != step) {
            break;
        }
        let v: Vec<f64> = curves.iter().map(|c| c[i].1).collect();
        if let Some(r) = Replicates::of(&v) {
            mean.push((step, r.mean));
            band.push((step, r.mean - r.std, r.mean + r.std));
        }
    }
    (mean, band)
}

/// Merges runs whose configs differ only in the seed into one curve each (mean, a band
/// of one standard deviation, the final loss's 95% interval), keeping first-seen order.
pub fn merge_replicates(runs: Vec<RunCurves>) -> Vec<RunCurves> {
    let mut keys: Vec<String> = Vec::new();
    for r in &runs {
        if !keys.contains(&r.group_key) {
            keys.push(r.group_key.clone());
        }
    }
    keys.into_iter()
        .map(|k| {
            let members: Vec<&RunCurves> = runs.iter().filter(|r| r.group_key == k).collect();
            if members.len() == 1 {
                return members[0].clone();
            }
            let (train, train_band) =
                mean_band(&members.iter().map(|r| &r.train).collect::<Vec<_>>());
            let (val, val_band) = mean_band(&members.iter().map(|r| &r.val).collect::<Vec<_>>());
            let finals: Vec<f64> = members.iter().filter_map(|r| r.final_val).collect();
            let fin = Replicates::of(&finals);
            RunCurves {
                train,
                val,
                train_band,
                val_band,
                n: members.len(),
                final_val: fin.map(|f| f.mean),
                final_ci95: fin.map(|f| f.ci95).filter(|c| c.is_finite()),
                // The replicates' mean step time with the first one's collectives (the
                // same for every seed).
                timing: members[0].timing.clone().map(|mut t| {
                    let ms: Vec<f64> = members
                        .iter()
                        .filter_map(|r| r.timing.as_ref().map(|t| t.step_ms))
                        .collect();
                    t.step_ms = ms.iter().sum::<f64>() / ms.len() as f64;
                    t
                }),
                ..members[0].clone()
            }
        })
        .collect()
}

/// Legend labels: the pattern, plus tp/dp where runs differ in them, plus the directory
/// name where labels would still collide, plus the number of replicates merged.
pub fn label_runs(runs: &mut [RunCurves]) {
    let differs = |f: &dyn Fn(&RunCurves) -> usize| runs.iter().any(|r| f(r) != f(&runs[0]));
    let (tp_differs, dp_differs) = (differs(&|r| r.tp), differs(&|r| r.dp));
    for r in runs.iter_mut() {
        let mut l = r.pattern.clone();
        if tp_differs {
            l.push_str(&format!(" tp{}", r.tp));
        }
        if dp_differs {
            l.push_str(&format!(" dp{}", r.dp));
        }
        if r.n > 1 {
            l.push_str(&format!(" (n={})", r.n));
        }
        r.label = l;
    }
    let labels: Vec<String> = runs.iter().map(|r| r.label.clone()).collect();
    for (i, r) in runs.iter_mut().enumerate() {
        if labels.iter().filter(|l| **l == labels[i]).count() > 1 {
            let name = r
                .dir
                .file_name()
                .map(|n| n.to_string_lossy().to_string())
                .unwrap_or_default();
            r.label = format!("{} ({name})", r.label);
        }
    }
}

fn range(values: impl Iterator<Item = f64>) -> (f64, f64) {
    let (lo, hi) = values.fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), v| {
        (a.min(v), b.max(v))
    });
    if !lo.is_finite() {
        return (0.0, 1.0);
    }
    let pad = ((hi - lo) * 0.05).max(1e-3);
    (lo - pad, hi + pad)
}

type PlotResult = std::result::Result<(), Box<dyn std::error::Error>>;

/// Draws `<name>.png` and `<name>.svg` into `out` with `$draw` (a closure calling a
/// drawing function, instantiated once per backend); evaluates to the two paths.
macro_rules! both_formats {
    ($out:expr, $name:expr, $size:expr, $draw:expr) => {{
        let err = |e: Box<dyn std::error::Error>| anyhow::anyhow!("plotting failed: {e}");
        let png = $out.join(format!("{}.png", $name));
        let svg = $out.join(format!("{}.svg", $name));
        ($draw)(BitMapBackend::new(&png, $size).into_drawing_area()).map_err(err)?;
        ($draw)(SVGBackend::new(&svg, $size).into_drawing_area()).map_err(err)?;
        vec![png, svg]
    }};
}

// After the macro: the step-time calibration draws with it.
pub mod calibration;

/// Ten well-separated colours (matplotlib's tab10), then plotters' palette.
fn color(i: usize) -> RGBAColor {
    const TAB10: [(u8, u8, u8); 10] = [
        (31, 119, 180),
        (255, 127, 14),
        (44, 160, 44),
        (214, 39, 40),
        (148, 103, 189),
        (140, 86, 75),
        (227, 119, 194),
        (127, 127, 127),
        (188, 189, 34),
        (23, 190, 207),
    ];
    match TAB10.get(i) {
        Some(&(r, g, b)) => RGBColor(r, g, b).to_rgba(),
        None => Palette99::pick(i).to_rgba(),
    }
}

/// What a curve plot's x axis is: steps, or modelled time on a link.
struct XAxis<'a> {
    /// In the title: "steps", "minutes".
    unit: &'a str,
    /// Under the axis.
    desc: &'a str,
}

const STEPS: XAxis<'static> = XAxis {
    unit: "steps",
    desc: "step",
};

fn draw_curves<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    runs: &[RunCurves],
    val: bool,
    x: &XAxis,
) -> PlotResult
where
    DB::ErrorType: 'static,
{
    let all = |r: &RunCurves| if val { r.val.clone() } else { r.train.clone() };
    let max_step = runs.iter().flat_map(&all).map(|p| p.0).fold(0.0, f64::max);
    // Steps or minutes: whatever the data spans (an empty plot gets a unit axis).
    let max_step = if max_step > 0.0 { max_step } else { 1.0 };
    // The first tenth of a run (losses falling from ~ln(vocab)) would squash the rest of
    // the curves together, so it is left out, and the title says so.
    let from = 0.1 * max_step;
    let series = |r: &RunCurves| -> Vec<(f64, f64)> {
        let later: Vec<_> = all(r).into_iter().filter(|p| p.0 >= from).collect();
        if later.is_empty() {
            all(r)
        } else {
            later
        }
    };
    let bands = |r: &RunCurves| -> Vec<f64> {
        let b = if val { &r.val_band } else { &r.train_band };
        b.iter()
            .filter(|b| b.0 >= from)
            .flat_map(|b| [b.1, b.2])
            .collect()
    };
    let (lo, hi) = range(
        runs.iter()
            .flat_map(|r| series(r).into_iter().map(|p| p.1).chain(bands(r))),
    );
    let first = runs
        .iter()
        .flat_map(&series)
        .map(|p| p.0)
        .fold(f64::INFINITY, f64::min);
    let digits = if max_step < 100.0 { 1 } else { 0 };
    let title = format!(
        "{} ({} {:.digits$}-{:.digits$})",
        if val {
            "validation loss"
        } else {
            "training loss"
        },
        x.unit,
        first,
        max_step
    );
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 26))
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(60)
        .build_cartesian_2d(first.min(max_step)..max_step, lo..hi)?;
    chart
        .configure_mesh()
        .x_desc(x.desc)
        .y_desc("loss")
        .x_label_formatter(&|v| format!("{v:.digits$}"))
        .label_style(("sans-serif", 16))
        .axis_desc_style(("sans-serif", 18))
        .draw()?;
    for (i, r) in runs.iter().enumerate() {
        let color = color(i);
        let pts = series(r);
        let band: Vec<_> = if val { &r.val_band } else { &r.train_band }
            .iter()
            .filter(|b| b.0 >= pts.first().map_or(0.0, |p| p.0))
            .copied()
            .collect();
        if !band.is_empty() {
            // One standard deviation over the seeds, shaded.
            let outline: Vec<(f64, f64)> = band
                .iter()
                .map(|b| (b.0, b.2))
                .chain(band.iter().rev().map(|b| (b.0, b.1)))
                .collect();
            chart.draw_series(std::iter::once(Polygon::new(
                outline,
                color.mix(0.18).filled(),
            )))?;
        }
        chart
            .draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))?
            .label(r.label.clone())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(3))
            });
        if val {
            chart.draw_series(pts.iter().map(|&p| Circle::new(p, 3, color.filled())))?;
        }
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 16))
        .position(SeriesLabelPosition::UpperRight)
        .draw()?;
    Ok(())
}

fn draw_loss_curves<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    runs: &[RunCurves],
    x: &XAxis,
) -> PlotResult
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE)?;
    let (left, right) = root.split_horizontally(root.dim_in_pixel().0 / 2);
    draw_curves(&left, runs, false, x)?;
    draw_curves(&right, runs, true, x)?;
    root.present()?;
    Ok(())
}

/// The trade-off plot's x: each run's value, what it is, and the plot's subject.
struct TradeoffX<'a> {
    values: Vec<Option<f64>>,
    desc: &'a str,
    against: &'a str,
}

fn draw_tradeoff<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    runs: &[RunCurves],
    x: &TradeoffX,
) -> PlotResult
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE)?;
    let pts: Vec<(f64, f64, String, usize)> = runs
        .iter()
        .enumerate()
        .filter_map(|(i, r)| Some((x.values[i]?, r.final_val?, r.label.clone(), i)))
        .collect();
    let ci = |i: usize| runs[i].final_ci95.unwrap_or(0.0);
    let max_x = pts.iter().map(|p| p.0).fold(0.0, f64::max) * 1.15;
    let max_x = if max_x > 0.0 { max_x } else { 1.0 };
    let (lo, hi) = range(pts.iter().flat_map(|p| [p.1 - ci(p.3), p.1 + ci(p.3)]));
    let intervals = runs.iter().any(|r| r.final_ci95.is_some());
    let mut chart = ChartBuilder::on(&root)
        .caption(
            if intervals {
                format!(
                    "final validation loss (mean, 95% interval) vs {}",
                    x.against
                )
            } else {
                format!("final validation loss vs {}", x.against)
            },
            ("sans-serif", 24),
        )
        .margin(15)
        .x_label_area_size(50)
        .y_label_area_size(65)
        .build_cartesian_2d(0f64..max_x, lo..hi)?;
    chart
        .configure_mesh()
        .x_desc(x.desc)
        .y_desc("final val loss")
        .x_label_formatter(&|v| format!("{v:.0}"))
        .label_style(("sans-serif", 16))
        .axis_desc_style(("sans-serif", 18))
        .draw()?;
    // Labels of points that share an all-reduce count are stacked, not overprinted.
    let mut order: Vec<usize> = (0..pts.len()).collect();
    order.sort_by(|&a, &b| {
        pts[a]
            .0
            .total_cmp(&pts[b].0)
            .then(pts[b].1.total_cmp(&pts[a].1))
    });
    let mut stacked = vec![0i32; pts.len()];
    for w in 1..order.len() {
        let (prev, cur) = (order[w - 1], order[w]);
        if pts[prev].0 == pts[cur].0 && (pts[prev].1 - pts[cur].1).abs() < 0.04 * (hi - lo) {
            stacked[cur] = stacked[prev] + 1;
        }
    }
    for (k, (x, y, label, i)) in pts.iter().enumerate() {
        let color = color(*i);
        if let Some(c) = runs[*i].final_ci95 {
            chart.draw_series(std::iter::once(ErrorBar::new_vertical(
                *x,
                y - c,
                *y,
                y + c,
                color.stroke_width(2),
                12,
            )))?;
        }
        let dy = -18 + 18 * stacked[k];
        chart.draw_series(std::iter::once(
            EmptyElement::at((*x, *y))
                + Circle::new((0, 0), 6, color.filled())
                + Text::new(
                    label.clone(),
                    (10, dy),
                    ("sans-serif", 16).into_font().color(&BLACK),
                ),
        ))?;
    }
    root.present()?;
    Ok(())
}

/// Writes `loss_curves.{png,svg}` and `tradeoff.{png,svg}` into `out`; returns the files.
pub fn plot_runs(runs: &[RunCurves], out: &Path) -> Result<Vec<PathBuf>> {
    if runs.is_empty() {
        return Err(anyhow::Error::new(UserError("no runs to plot".into())));
    }
    font::ensure_font()?;
    std::fs::create_dir_all(out).with_context(|| format!("cannot create {}", out.display()))?;
    let mut files = Vec::new();
    let comm = TradeoffX {
        values: runs.iter().map(|r| r.forward_allreduces_per_step).collect(),
        desc: "TP forward all-reduces per step",
        against: "communication",
    };
    files.extend(both_formats!(out, "loss_curves", (1600, 650), |a| {
        draw_loss_curves(a, runs, &STEPS)
    }));
    files.extend(both_formats!(out, "tradeoff", (900, 650), |a| {
        draw_tradeoff(a, runs, &comm)
    }));
    Ok(files)
}

/// Loss against modelled wall-clock on `link` (`loss_vs_time_<link>`) and final loss
/// against modelled time per step (`tradeoff_time_<link>`): each run's measured compute
/// plus its collectives on the link ([`timing::StepTiming`]). Runs without timing data
/// (no logged step times or comm.json) are left out.
pub fn plot_on_link(
    runs: &[RunCurves],
    out: &Path,
    label: &str,
    link: &crate::comm::LinkModel,
) -> Result<Vec<PathBuf>> {
    font::ensure_font()?;
    std::fs::create_dir_all(out).with_context(|| format!("cannot create {}", out.display()))?;
    let timed: Vec<RunCurves> = runs
        .iter()
        .filter_map(|r| {
            let s = r.timing.as_ref()?.step_seconds_on(link);
            let minutes = |x: f64| x * s / 60.0;
            Some(RunCurves {
                train: r.train.iter().map(|&(x, y)| (minutes(x), y)).collect(),
                val: r.val.iter().map(|&(x, y)| (minutes(x), y)).collect(),
                train_band: r
                    .train_band
                    .iter()
                    .map(|&(x, a, b)| (minutes(x), a, b))
                    .collect(),
                val_band: r
                    .val_band
                    .iter()
                    .map(|&(x, a, b)| (minutes(x), a, b))
                    .collect(),
                ..r.clone()
            })
        })
        .collect();
    if timed.is_empty() {
        return Err(anyhow::Error::new(UserError(
            "none of the runs has step times and comm.json to model a link from".into(),
        )));
    }
    let slug = timing::slug(label);
    let desc = format!("modelled minutes on {label}");
    let axis = XAxis {
        unit: "minutes",
        desc: &desc,
    };
    let mut files = both_formats!(out, format!("loss_vs_time_{slug}"), (1600, 650), |a| {
        draw_loss_curves(a, &timed, &axis)
    });
    let per_step = TradeoffX {
        values: timed
            .iter()
            .map(|r| r.timing.as_ref().map(|t| 1e3 * t.step_seconds_on(link)))
            .collect(),
        desc: &format!("modelled ms per step on {label}"),
        against: "step time",
    };
    files.extend(both_formats!(
        out,
        format!("tradeoff_time_{slug}"),
        (900, 650),
        |a| { draw_tradeoff(a, &timed, &per_step) }
    ));
    Ok(files)
}

/// The sensitivity scan (`scan.{png,svg}`): left, each block's loss rise when it alone is
/// converted (coloured by tier); right, loss against forward all-reduces per pass for the
/// cumulative conversion (last block first) and the scan's recommendations.
pub fn plot_scan(scan: &crate::run_dir::ScanReport, out: &Path) -> Result<Vec<PathBuf>> {
    font::ensure_font()?;
    std::fs::create_dir_all(out).with_context(|| format!("cannot create {}", out.display()))?;
    Ok(both_formats!(out, "scan", (1400, 600), |a| draw_scan(
        a, scan
    )))
}

fn draw_scan<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    scan: &crate::run_dir::ScanReport,
) -> PlotResult
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE)?;
    let (left, right) = root.split_horizontally(root.dim_in_pixel().0 / 2);
    let n = scan.base_pattern.len();
    let (lo, hi) = range(scan.blocks.iter().map(|b| b.rise).chain([0.0]));
    let mut chart = ChartBuilder::on(&left)
        .caption(
            format!("loss rise per block converted to {}", scan.to),
            ("sans-serif", 24),
        )
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .build_cartesian_2d(-0.5f64..(n as f64 - 0.5), lo.min(0.0)..hi)?;
    chart
        .configure_mesh()
        .x_desc("block")
        .y_desc("val loss rise")
        .x_labels(n)
        .x_label_formatter(&|x| format!("{x:.0}"))
        .label_style(("sans-serif", 16))
        .axis_desc_style(("sans-serif", 18))
        .draw()?;
    for b in &scan.blocks {
        let c = match b.tier.as_str() {
            "insensitive" => color(2),
            "sensitive" => color(1),
            _ => color(3),
        };
        let x = b.block as f64;
        chart.draw_series(std::iter::once(Rectangle::new(
            [(x - 0.35, 0.0), (x + 0.35, b.rise)],
            c.filled(),
        )))?;
    }
    let steps = scan.cumulative.iter().chain(&scan.recommended);
    let max_x = scan.base_forward_allreduces as f64 + 0.5;
    let (lo, hi) = range(steps.clone().map(|s| s.loss).chain([scan.base_loss]));
    let mut chart = ChartBuilder::on(&right)
        .caption("loss vs communication", ("sans-serif", 24))
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .build_cartesian_2d(0f64..max_x, lo..hi)?;
    chart
        .configure_mesh()
        .x_desc("TP forward all-reduces per pass")
        .y_desc("val loss (whole split)")
        .x_label_formatter(&|x| format!("{x:.0}"))
        .label_style(("sans-serif", 16))
        .axis_desc_style(("sans-serif", 18))
        .draw()?;
    let base = (scan.base_forward_allreduces as f64, scan.base_loss);
    for (k, (name, pts)) in [
        ("last blocks first", &scan.cumulative),
        ("least sensitive first", &scan.recommended),
    ]
    .into_iter()
    .enumerate()
    {
        let c = color(k);
        let line: Vec<(f64, f64)> = std::iter::once(base)
            .chain(pts.iter().map(|s| (s.forward_allreduces as f64, s.loss)))
            .collect();
        chart
            .draw_series(LineSeries::new(line.clone(), c.stroke_width(2)))?
            .label(name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(3)));
        chart.draw_series(line.iter().map(|&p| Circle::new(p, 4, c.filled())))?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 16))
        .position(SeriesLabelPosition::UpperRight)
        .draw()?;
    root.present()?;
    Ok(())
}
