//! The sensitivity scan's figure (`tp-scan`).

use crate::plot::both_formats;
use crate::plot::font;
use crate::plot::style::{color, draw_legend, range, PlotResult};
use crate::run_dir::records::Tier;
use anyhow::{Context, Result};
use plotters::coord::Shift;
use plotters::prelude::*;
use std::path::{Path, PathBuf};

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
        let c = match b.tier {
            Tier::Insensitive => color(2),
            Tier::Sensitive => color(1),
            Tier::ExtremelySensitive => color(3),
        };
        let x = b.block as f64;
        chart.draw_series(std::iter::once(Rectangle::new(
            [(x - 0.35, 0.0), (x + 0.35, b.rise)],
            c.filled(),
        )))?;
    }
    let steps = scan.cumulative.iter().chain(&scan.recommended);
    let max_x = scan
        .base_exposed_allreduces
        .max(scan.base_forward_allreduces) as f64
        + 0.5;
    let (lo, hi) = range(steps.clone().map(|s| s.loss).chain([scan.base_loss]));
    let mut chart = ChartBuilder::on(&right)
        .caption("loss vs communication", ("sans-serif", 24))
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .build_cartesian_2d(0f64..max_x, lo..hi)?;
    chart
        .configure_mesh()
        .x_desc("TP forward all-reduces per pass a rank waits for")
        .y_desc("val loss (whole split)")
        .x_label_formatter(&|x| format!("{x:.0}"))
        .label_style(("sans-serif", 16))
        .axis_desc_style(("sans-serif", 18))
        .draw()?;
    let base = (scan.base_exposed_allreduces as f64, scan.base_loss);
    for (k, (name, pts)) in [
        ("last blocks first", &scan.cumulative),
        ("least sensitive first", &scan.recommended),
    ]
    .into_iter()
    .enumerate()
    {
        let c = color(k);
        let line: Vec<(f64, f64)> = std::iter::once(base)
            .chain(pts.iter().map(|s| (s.exposed_allreduces as f64, s.loss)))
            .collect();
        chart
            .draw_series(LineSeries::new(line.clone(), c.stroke_width(2)))?
            .label(name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(3)));
        chart.draw_series(line.iter().map(|&p| Circle::new(p, 4, c.filled())))?;
    }
    draw_legend(&mut chart, 16)?;
    root.present()?;
    Ok(())
}
