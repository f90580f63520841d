//! Loss curves (train and val loss against step, or against modelled minutes on a link)
//! and the trade-off of final val loss against forward all-reduces per step (or modelled
//! ms per step on a link).

use crate::analysis::{Link, RunCurves};
use crate::plot::both_formats;
use crate::plot::font;
use crate::plot::style::{color, draw_legend, range, PlotResult};
use crate::study::on_link::{default_target, on_link_markdown};
use anyhow::{Context, Result};
use plotters::coord::Shift;
use plotters::prelude::*;
use std::path::{Path, PathBuf};
use tp_harness::error::user;

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

/// What a panel of curves shows: x from `first` to `last`, y over `lo..hi`.
struct Window {
    /// Points before this x are left out (the first tenth of the span).
    from: f64,
    first: f64,
    last: f64,
    lo: f64,
    hi: f64,
}

/// The points of `r` a panel draws: its train or val curve from `from` on (all of it
/// when nothing is left after `from`).
fn series(r: &RunCurves, val: bool, from: f64) -> Vec<(f64, f64)> {
    let all = if val { &r.val } else { &r.train };
    let later: Vec<_> = all.iter().copied().filter(|p| p.0 >= from).collect();
    if later.is_empty() {
        all.clone()
    } else {
        later
    }
}

fn window(runs: &[RunCurves], val: bool) -> Window {
    let all = |r: &RunCurves| if val { r.val.clone() } else { r.train.clone() };
    let last = runs.iter().flat_map(&all).map(|p| p.0).fold(0.0, f64::max);
    // Steps or minutes: whatever the data spans (an empty plot gets a unit axis).
    let last = if last > 0.0 { last } else { 1.0 };
    // The first tenth of a run (losses falling from ~ln(vocab)) would squash the rest of
    // the curves together, so it is left out, and the title says so.
    let from = 0.1 * last;
    let bands = |r: &RunCurves| -> Vec<f64> {
        let b = if val { &r.val_band } else { &r.train_band };
        b.iter()
            .filter(|b| b.0 >= from)
            .flat_map(|b| [b.1, b.2])
            .collect()
    };
    let (lo, hi) = range(runs.iter().flat_map(|r| {
        series(r, val, from)
            .into_iter()
            .map(|p| p.1)
            .chain(bands(r))
    }));
    let first = runs
        .iter()
        .flat_map(|r| series(r, val, from))
        .map(|p| p.0)
        .fold(f64::INFINITY, f64::min);
    Window {
        from,
        first: first.min(last),
        last,
        lo,
        hi,
    }
}

fn draw_curves<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    runs: &[RunCurves],
    val: bool,
    x: &XAxis,
) -> PlotResult
where
    DB::ErrorType: 'static,
{
    let w = window(runs, val);
    // Steps are whole numbers; minutes get the decimals a short span needs.
    let digits = match (x.unit, w.last) {
        ("steps", _) => 0,
        (_, m) if m < 10.0 => 2,
        (_, m) if m < 100.0 => 1,
        _ => 0,
    };
    let title = format!(
        "{}, {} {:.digits$}-{:.digits$} (the first tenth left out)",
        if val {
            "validation loss"
        } else {
            "training loss"
        },
        x.unit,
        w.first,
        w.last
    );
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 24))
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(60)
        .build_cartesian_2d(w.first..w.last, w.lo..w.hi)?;
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
        let pts = series(r, val, w.from);
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
    draw_legend(&mut chart, 16)?;
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
    /// Whether x counts something (all-reduces): whole numbers only on its axis.
    counts: bool,
}

/// Whether a finished run has a point on `x` (an unfinished run's latest evaluation is no
/// final loss: it is drawn in the curves only).
fn has_point(runs: &[RunCurves], x: &TradeoffX) -> bool {
    runs.iter()
        .zip(&x.values)
        .any(|(r, v)| r.finished && r.final_val.is_some() && v.is_some())
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
        .filter(|(_, r)| r.finished)
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
                // The bars are each group's own spread; whether two groups differ is the
                // paired test of the summary table, which these bars do not show.
                format!(
                    "final val loss (mean, unpaired 95% interval; paired tests: summary.md) vs {}",
                    x.against
                )
            } else {
                format!("final validation loss vs {}", x.against)
            },
            ("sans-serif", 18),
        )
        .margin(15)
        .x_label_area_size(50)
        .y_label_area_size(65)
        .build_cartesian_2d(0f64..max_x, lo..hi)?;
    chart
        .configure_mesh()
        .x_desc(x.desc)
        .y_desc("final val loss")
        .x_label_formatter(&|v| {
            if x.counts && (v - v.round()).abs() > 1e-6 {
                String::new()
            } else {
                format!("{v:.0}")
            }
        })
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
        return Err(user("no runs to plot"));
    }
    font::ensure_font()?;
    std::fs::create_dir_all(out).with_context(|| format!("cannot create {}", out.display()))?;
    let mut files = Vec::new();
    let comm = TradeoffX {
        values: runs.iter().map(|r| r.forward_allreduces_per_step).collect(),
        desc: "TP forward all-reduces per step",
        against: "communication",
        counts: true,
    };
    files.extend(both_formats!(out, "loss_curves", (1600, 650), |a| {
        draw_loss_curves(a, runs, &STEPS)
    }));
    // Never an empty figure: without a finished run there is no final loss to place.
    if has_point(runs, &comm) {
        files.extend(both_formats!(out, "tradeoff", (900, 650), |a| {
            draw_tradeoff(a, runs, &comm)
        }));
    }
    Ok(files)
}

/// Loss against modelled wall-clock on `link` (`loss_vs_time_<link>`) and final loss
/// against modelled time per step (`tradeoff_time_<link>`): each run's measured compute
/// plus its collectives on the link ([`crate::analysis::StepTiming`]). Runs without
/// timing data (no logged step times or comm.json) are left out.
pub fn plot_on_link(
    runs: &[RunCurves],
    out: &Path,
    link: &Link,
    targets: &[f64],
    baseline: Option<&RunCurves>,
) -> Result<Vec<PathBuf>> {
    let whole = link;
    let (label, slug, link) = (&link.label, &link.slug, &link.model);
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
        // Only unfinished runs (tp-plot says which): nothing to model, no empty figure.
        return Ok(Vec::new());
    }
    // The table behind the figures: printed, and written next to them.
    let mut tables = Vec::new();
    let targets: Vec<f64> = match targets {
        [] => default_target(runs).into_iter().collect(),
        given => given.to_vec(),
    };
    if !targets.is_empty() {
        let table = targets
            .iter()
            .map(|&t| on_link_markdown(runs, whole, t, baseline))
            .collect::<Vec<_>>()
            .join("\n");
        tp_harness::say_raw!("{table}");
        let md = out.join(format!("loss_vs_time_{slug}.md"));
        tp_harness::util::fs::write_atomic(&md, table.as_bytes())
            .with_context(|| format!("cannot write {}", md.display()))?;
        tables.push(md);
    }
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
        counts: false,
    };
    if has_point(&timed, &per_step) {
        files.extend(both_formats!(
            out,
            format!("tradeoff_time_{slug}"),
            (900, 650),
            |a| { draw_tradeoff(a, &timed, &per_step) }
        ));
    }
    files.extend(tables);
    Ok(files)
}
