//! Figures of the link calibration (`tp-plot --link-calibration DIR`, the numbers from
//! [`crate::study::calibration`]): the measured step times against both models on
//! each shaped link, and the time each pattern's training takes on each measured link.

use crate::plot::both_formats;
use crate::plot::font;
use crate::plot::style::{color, draw_legend, PlotResult};
use crate::study::calibration::{real_links_markdown, Calibration, Cell, OnRealLinks};
use anyhow::{bail, Context, Result};
use plotters::coord::Shift;
use plotters::prelude::*;
use std::path::{Path, PathBuf};

/// `calibration.{md,csv,png,svg}` into `out`.
pub fn write_calibration(cal: &Calibration, out: &Path) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(out).with_context(|| format!("cannot create {}", out.display()))?;
    let md = out.join("calibration.md");
    tp_harness::util::write_atomic(&md, cal.markdown().as_bytes())?;
    let csv_path = out.join("calibration.csv");
    tp_harness::util::write_atomic(&csv_path, cal.csv().as_bytes())?;
    font::ensure_font()?;
    let mut files = vec![md, csv_path];
    files.extend(both_formats!(out, "calibration", (1000, 650), |a| draw(
        a, cal
    )));
    Ok(files)
}

fn draw<DB: DrawingBackend>(root: DrawingArea<DB, Shift>, cal: &Calibration) -> PlotResult
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE)?;
    let mbit = |c: &Cell| c.rate_bits / 1e6;
    let (lo_x, hi_x) = cal
        .cells
        .iter()
        .map(mbit)
        .fold((f64::INFINITY, 0f64), |(lo, hi), x| (lo.min(x), hi.max(x)));
    let hi_y = cal
        .cells
        .iter()
        .flat_map(|c| [c.measured_ms, c.nominal_ms, c.fitted_ms])
        .fold(0f64, f64::max);
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "step time on shaped links: measured (solid) vs model",
            ("sans-serif", 22),
        )
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .build_cartesian_2d((lo_x * 0.8..hi_x * 1.25).log_scale(), 0f64..hi_y * 1.05)?;
    chart
        .configure_mesh()
        .x_desc("shaped link rate, Mbit/s (log)")
        .x_labels(6)
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_desc("ms per step (mini, tp 2 over 2 hosts)")
        .label_style(("sans-serif", 16))
        .axis_desc_style(("sans-serif", 18))
        .draw()?;
    let mut patterns: Vec<&str> = cal.cells.iter().map(|c| c.pattern.as_str()).collect();
    patterns.dedup();
    for (i, p) in patterns.iter().enumerate() {
        let col = color(i);
        let pts = |f: fn(&Cell) -> f64| -> Vec<(f64, f64)> {
            let mut v: Vec<(f64, f64)> = cal
                .cells
                .iter()
                .filter(|c| c.pattern == *p)
                .map(|c| (c.rate_bits / 1e6, f(c)))
                .collect();
            v.sort_by(|a, b| a.0.total_cmp(&b.0));
            v
        };
        let measured = pts(|c| c.measured_ms);
        chart
            .draw_series(LineSeries::new(measured.clone(), col.stroke_width(3)))?
            .label(format!("{p} measured"))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], col.stroke_width(3)));
        chart.draw_series(measured.iter().map(|&q| Circle::new(q, 4, col.filled())))?;
        let nominal = pts(|c| c.nominal_ms);
        chart
            .draw_series(DashedLineSeries::new(nominal, 6, 4, col.stroke_width(1)))?
            .label(format!("{p} ring model"))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], col.stroke_width(1)));
        let fitted = pts(|c| c.fitted_ms);
        chart
            .draw_series(DashedLineSeries::new(
                fitted.clone(),
                2,
                3,
                col.stroke_width(2),
            ))?
            .label(format!("{p} fitted model"))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], col.stroke_width(2)));
        chart.draw_series(
            fitted
                .iter()
                .map(|&q| Cross::new(q, 5, col.stroke_width(2))),
        )?;
    }
    draw_legend(&mut chart, 14)?;
    root.present()?;
    Ok(())
}

/// `real_links.{md,png,svg}`: the table and the val curves against wall-clock minutes on
/// each measured link (one panel per link).
pub fn write_real_links(rows: &[OnRealLinks], out: &Path) -> Result<Vec<PathBuf>> {
    let target = rows
        .iter()
        .filter_map(|r| r.final_val)
        .fold(f64::NEG_INFINITY, f64::max);
    if !target.is_finite() {
        bail!("the runs have no final val loss to compare time-to-loss with");
    }
    std::fs::create_dir_all(out).with_context(|| format!("cannot create {}", out.display()))?;
    let md = out.join("real_links.md");
    let table = real_links_markdown(rows, target);
    tp_harness::say_raw!("{table}");
    tp_harness::util::write_atomic(&md, table.as_bytes())?;
    font::ensure_font()?;
    let mut files = vec![md];
    files.extend(both_formats!(
        out,
        "real_links",
        (1500, 900),
        |a| draw_real(a, rows, target)
    ));
    Ok(files)
}

fn draw_real<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    rows: &[OnRealLinks],
    target: f64,
) -> PlotResult
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE)?;
    let mut rates: Vec<(String, f64)> = rows
        .iter()
        .flat_map(|r| r.step_ms.iter().map(|(l, b, _)| (l.clone(), *b)))
        .collect();
    rates.sort_by(|a, b| b.1.total_cmp(&a.1));
    rates.dedup();
    let cols = 2.min(rates.len().max(1));
    let panels = root.split_evenly((rates.len().div_ceil(cols).max(1), cols));
    let lo = rows
        .iter()
        .flat_map(|r| r.val.iter().map(|p| p.1))
        .fold(f64::INFINITY, f64::min);
    for ((label, _), panel) in rates.iter().zip(panels.iter()) {
        let minutes = |r: &OnRealLinks| -> Option<f64> {
            r.step_ms
                .iter()
                .find(|(l, _, _)| l == label)
                .map(|(_, _, ms)| ms / 60e3)
        };
        let max_t = rows
            .iter()
            .filter_map(|r| Some(r.val.last()?.0 * minutes(r)?))
            .fold(0f64, f64::max);
        let mut chart = ChartBuilder::on(panel)
            .caption(
                format!("real link {label} (2 hosts, tp 2)"),
                ("sans-serif", 20),
            )
            .margin(10)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(0f64..max_t * 1.02, (lo - 0.02)..(target + 0.4))?;
        chart
            .configure_mesh()
            .x_desc("wall-clock minutes")
            .y_desc("val loss")
            .label_style(("sans-serif", 14))
            .axis_desc_style(("sans-serif", 15))
            .draw()?;
        chart.draw_series(LineSeries::new(
            [(0.0, target), (max_t * 1.02, target)],
            BLACK.mix(0.3).stroke_width(1),
        ))?;
        for (i, r) in rows.iter().enumerate() {
            let Some(per) = minutes(r) else { continue };
            let col = color(i);
            let pts: Vec<(f64, f64)> = r.val.iter().map(|&(s, l)| (s * per, l)).collect();
            chart
                .draw_series(LineSeries::new(pts, col.stroke_width(2)))?
                .label(r.pattern.clone())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 18, y)], col.stroke_width(3))
                });
        }
        draw_legend(&mut chart, 13)?;
    }
    root.present()?;
    Ok(())
}
