//! `step_vs_bandwidth.{png,svg}` (`tp-plan`): each layout's planned step time against
//! the TP link's bandwidth (both axes log), one line per tp and layout, Megatron's t-only
//! dashed: where a reduced-synchronisation layout's line leaves t-only's is where it
//! starts to pay; where they meet, the link is fast enough that it does not.

use crate::planner::Plan;
use crate::plot::both_formats;
use crate::plot::font;
use crate::plot::style::{color, draw_legend, range, PlotResult};
use anyhow::{Context, Result};
use plotters::coord::Shift;
use plotters::prelude::*;
use std::path::{Path, PathBuf};

/// Draws the figure of `plan` into `out`.
pub fn plot_plan(plan: &Plan, out: &Path) -> Result<Vec<PathBuf>> {
    if plan.curves.is_empty() {
        return Ok(Vec::new());
    }
    font::ensure_font()?;
    std::fs::create_dir_all(out).with_context(|| format!("cannot create {}", out.display()))?;
    Ok(both_formats!(out, "step_vs_bandwidth", (1100, 700), |a| {
        draw(a, plan)
    }))
}

/// A log axis's label: 10^v written out (0.1, 1, 10, 1000), three significant digits.
fn power_of_ten(v: f64) -> String {
    let x = 10f64.powf(v);
    match x {
        x if x >= 100.0 => format!("{x:.0}"),
        x if x >= 1.0 => format!("{x:.1}"),
        x => format!("{x:.3}"),
    }
}

/// The curves at the first link's latency: the ones the figure draws (plan.json has
/// every link's).
fn first_link(plan: &Plan) -> impl Iterator<Item = &crate::planner::Curve> {
    let name = plan
        .links
        .first()
        .map(|l| l.name.clone())
        .unwrap_or_default();
    plan.curves.iter().filter(move |c| c.link == name)
}

fn draw<DB: DrawingBackend>(root: DrawingArea<DB, Shift>, plan: &Plan) -> PlotResult
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE)?;
    let ys = first_link(plan).flat_map(|c| c.points.iter().map(|p| p.1.log10()));
    let (lo, hi) = range(ys);
    let legend = ((first_link(plan).count() * 20 + 16) as f64 / 560.0).min(0.6);
    let hi = hi + (hi - lo) * legend / (1.0 - legend);
    let link = plan.links.first().map_or(String::new(), |l| {
        format!("{} us a message (as {})", l.latency_us, l.name)
    });
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!(
                "{}: planned step time against the TP link's bandwidth, {link}",
                plan.model.name
            ),
            ("sans-serif", 20),
        )
        .margin(15)
        .x_label_area_size(50)
        .y_label_area_size(75)
        .build_cartesian_2d(-1f64..4f64, lo..hi)?;
    chart
        .configure_mesh()
        .x_desc("TP link bandwidth, Gbit/s a direction (log scale)")
        .y_desc("ms per step (log scale)")
        .x_labels(6)
        .y_labels(8)
        .x_label_formatter(&|v| power_of_ten(*v))
        .y_label_formatter(&|v| power_of_ten(*v))
        .label_style(("sans-serif", 16))
        .axis_desc_style(("sans-serif", 18))
        .draw()?;
    for (i, c) in first_link(plan).enumerate() {
        let col = color(i);
        let t_only = c.pattern.ends_with("xt") || c.pattern.chars().all(|k| k == 't');
        let pts: Vec<(f64, f64)> = c
            .points
            .iter()
            .map(|p| (p.0.log10(), p.1.log10()))
            .collect();
        let name = format!("{} at tp {}", c.pattern, c.tp);
        if t_only {
            chart
                .draw_series(DashedLineSeries::new(pts, 8, 5, col.stroke_width(2)))?
                .label(name)
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 18, y)], col.stroke_width(3))
                });
        } else {
            chart
                .draw_series(LineSeries::new(pts, col.stroke_width(2)))?
                .label(name)
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 18, y)], col.stroke_width(3))
                });
        }
    }
    draw_legend(&mut chart, 14)?;
    root.present()?;
    Ok(())
}
