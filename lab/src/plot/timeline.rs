//! `timeline.{png,svg}` (`tp-plot --timeline RUN...`): one traced step of each run on a
//! time axis, ranks as rows — on each rank's compute row what it computed (blue) and
//! where it waited for a collective (red); on its communication rows each collective from
//! start to result, exposed (red) and hidden behind compute (green). A panel per run,
//! read from its `trace.json`.

use super::font;
use super::style::PlotResult;
use crate::run_dir::trace_file::{TraceEvent, TraceFile};
use anyhow::{Context, Result};
use plotters::coord::Shift;
use plotters::prelude::*;
use std::path::{Path, PathBuf};

const COMPUTE: RGBColor = RGBColor(120, 170, 220);
const EXPOSED: RGBColor = RGBColor(214, 39, 40);
const HIDDEN: RGBColor = RGBColor(44, 160, 44);

/// One run's first traced step: its rows (name, pid, tid) and its spans, in ms from the
/// step's start on rank 0.
struct Panel {
    title: String,
    rows: Vec<(String, usize, usize)>,
    spans: Vec<(usize, f64, f64, &'static str, String)>,
    length_ms: f64,
}

fn panel(run: &Path, trace: &TraceFile) -> Result<Panel> {
    let step = trace
        .events
        .iter()
        .filter(|e| e.ph == "X" && e.cat == "step" && e.pid == 0)
        .min_by(|a, b| a.ts.total_cmp(&b.ts))
        .with_context(|| format!("{}/trace.json has no traced step", run.display()))?;
    let (from, to) = (step.ts, step.ts + step.dur.unwrap_or(0.0));
    let in_step = |e: &&TraceEvent| e.ph == "X" && e.ts < to && e.ts + e.dur.unwrap_or(0.0) > from;
    let mut rows: Vec<(String, usize, usize)> = Vec::new();
    for e in trace
        .events
        .iter()
        .filter(|e| e.ph == "M" && e.name == "thread_name")
    {
        let what = e.args.get("name").and_then(|v| v.as_str()).unwrap_or("");
        rows.push((format!("rank {} {what}", e.pid), e.pid, e.tid));
    }
    rows.sort_by_key(|r| (r.1, r.2));
    let row_of = |e: &TraceEvent| rows.iter().position(|r| r.1 == e.pid && r.2 == e.tid);
    let mut spans = Vec::new();
    for e in trace.events.iter().filter(in_step) {
        let Some(row) = row_of(e) else { continue };
        let colour = match e.cat.as_str() {
            "layer" | "block" => "compute",
            "wait" | "collective" => "exposed",
            "hidden" => "hidden",
            _ => continue,
        };
        let (a, b) = (
            (e.ts - from).max(0.0) / 1e3,
            (e.ts + e.dur.unwrap_or(0.0) - from).min(to - from) / 1e3,
        );
        spans.push((row, a, b, colour, e.name.clone()));
    }
    let info = &trace.info;
    Ok(Panel {
        title: format!(
            "{} at tp {}{}: step {} ({:.1} ms)",
            info.pattern,
            info.tp,
            info.link
                .as_ref()
                .map_or(String::new(), |l| format!(", link {l}")),
            trace.first_step(),
            (to - from) / 1e3
        ),
        rows,
        spans,
        length_ms: (to - from) / 1e3,
    })
}

/// What the figure draws of `trace`'s first step: (row, from ms, to ms, colour:
/// `compute`, `exposed` or `hidden`) per span, for a check of the picture against the
/// tally.
pub fn drawn_spans(run: &Path, trace: &TraceFile) -> Result<Vec<(String, f64, f64, &'static str)>> {
    let p = panel(run, trace)?;
    Ok(p.spans
        .iter()
        .map(|(row, a, b, colour, _)| (p.rows[*row].0.clone(), *a, *b, *colour))
        .collect())
}

fn draw_panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    p: &Panel,
    x_max: f64,
) -> PlotResult
where
    DB::ErrorType: 'static,
{
    let n = p.rows.len() as f64;
    let mut chart = ChartBuilder::on(area)
        .caption(&p.title, ("sans-serif", 18))
        .margin(10)
        .x_label_area_size(35)
        .y_label_area_size(170)
        .build_cartesian_2d(0f64..x_max, 0f64..n)?;
    let names: Vec<String> = p.rows.iter().map(|r| r.0.clone()).collect();
    chart
        .configure_mesh()
        .disable_y_mesh()
        .x_desc("ms from the step's start")
        .y_labels(p.rows.len() * 2 + 1)
        .y_label_formatter(&|y| {
            let i = y.floor() as usize;
            // Names at the middle of their rows, top row first.
            if (y - y.floor() - 0.5).abs() < 0.01 && i < names.len() {
                names[names.len() - 1 - i].clone()
            } else {
                String::new()
            }
        })
        .label_style(("sans-serif", 13))
        .draw()?;
    let y_of = |row: usize| n - 1.0 - row as f64;
    // Compute first, then exposed, then hidden windows on top of their collectives.
    for layer in ["compute", "exposed", "hidden"] {
        for (row, a, b, colour, _) in p.spans.iter().filter(|s| s.3 == layer) {
            let c = match *colour {
                "compute" => COMPUTE,
                "exposed" => EXPOSED,
                _ => HIDDEN,
            };
            let y = y_of(*row);
            let (top, bottom) = if layer == "compute" {
                (y + 0.85, y + 0.15)
            } else {
                (y + 0.75, y + 0.25)
            };
            chart.draw_series(std::iter::once(Rectangle::new(
                [(*a, bottom), (*b, top)],
                c.filled(),
            )))?;
        }
    }
    // Each compute span's edge, so layers read apart.
    for (row, a, _, _, _) in p.spans.iter().filter(|s| s.3 == "compute") {
        let y = y_of(*row);
        chart.draw_series(std::iter::once(PathElement::new(
            vec![(*a, y + 0.15), (*a, y + 0.85)],
            WHITE.stroke_width(1),
        )))?;
    }
    Ok(())
}

fn draw<DB: DrawingBackend>(root: DrawingArea<DB, Shift>, panels: &[Panel]) -> PlotResult
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE)?;
    let (legend, body) = root.split_vertically(30);
    for (i, (name, c)) in [
        ("compute", COMPUTE),
        ("communication exposed (the rank waits)", EXPOSED),
        ("communication hidden (the rank computes)", HIDDEN),
    ]
    .iter()
    .enumerate()
    {
        let x = 20 + i as i32 * 330;
        legend.draw(&Rectangle::new([(x, 8), (x + 24, 22)], c.filled()))?;
        legend.draw(&Text::new(
            name.to_string(),
            (x + 30, 8),
            ("sans-serif", 15).into_font(),
        ))?;
    }
    let x_max = panels
        .iter()
        .map(|p| p.length_ms)
        .fold(0.0, f64::max)
        .max(1e-3);
    for (area, p) in body.split_evenly((panels.len(), 1)).iter().zip(panels) {
        draw_panel(area, p, x_max)?;
    }
    root.present()?;
    Ok(())
}

/// `timeline.{png,svg}` in `out` of the runs in `runs` (each traced: `trace.json`).
pub fn plot_timeline(runs: &[PathBuf], out: &Path) -> Result<Vec<PathBuf>> {
    font::ensure_font()?;
    std::fs::create_dir_all(out).with_context(|| format!("cannot create {}", out.display()))?;
    let traces = runs
        .iter()
        .map(|r| TraceFile::read(r))
        .collect::<Result<Vec<_>>>()?;
    let panels = runs
        .iter()
        .zip(&traces)
        .map(|(r, t)| panel(r, t))
        .collect::<Result<Vec<_>>>()?;
    let rows: usize = panels.iter().map(|p| p.rows.len()).sum();
    let height = (30 + panels.len() * 90 + rows * 40) as u32;
    Ok(both_formats!(out, "timeline", (1500, height), |a| draw(
        a, &panels
    )))
}
