//! A tuned study's figure (`tuning.{png,svg}`): each layout's final val loss on the
//! selection seeds against the tuned value (the first tuned key; a log axis where its
//! values are positive numbers), the mean as a line with a band of one standard
//! deviation, each seed as a dot, the chosen value ringed. The curve a reviewer asks for:
//! whether each layout's best lies inside what was tried, and how flat it is there. The
//! x axis is marked at the values tried, as the config spelt them.

use crate::plot::both_formats;
use crate::plot::font;
use crate::plot::style::{color, draw_legend, range, Marked, PlotResult};
use crate::study::tuning::Choice;
use anyhow::{Context, Result};
use plotters::coord::Shift;
use plotters::prelude::*;
use std::path::{Path, PathBuf};

/// One layout's curve: its name, (x, mean, sd, seeds' losses) per value, the chosen x.
struct Curve {
    name: String,
    points: Vec<(f64, f64, f64, Vec<f64>)>,
    chosen: Option<f64>,
}

/// Draws `tuning.{png,svg}` into `out` where some choice tried two or more values.
pub fn plot_tuning(choices: &[Choice], out: &Path) -> Result<Vec<PathBuf>> {
    let positive = choices
        .iter()
        .flat_map(|c| c.tried.iter().map(|t| t.values.number(0)))
        .all(|x| x.is_some_and(|x| x > 0.0));
    let x_of = |v: f64| if positive { v.log10() } else { v };
    let settings = {
        let mut s: Vec<String> = choices.iter().map(|c| c.setting.label()).collect();
        s.dedup();
        s.len()
    };
    let curves: Vec<Curve> = choices
        .iter()
        .filter(|c| c.tried.len() > 1)
        .map(|c| Curve {
            name: match settings {
                1 => c.variant.to_string(),
                _ => format!("{} ({})", c.variant, c.setting.label()),
            },
            points: c
                .tried
                .iter()
                .filter_map(|t| {
                    let x = x_of(t.values.number(0)?);
                    let s = t.stats()?;
                    let seeds = t.losses.iter().map(|l| l.1).collect();
                    Some((x, s.mean, s.std, seeds))
                })
                .collect(),
            chosen: c.best.as_ref().and_then(|b| b.number(0)).map(x_of),
        })
        .filter(|c| !c.points.is_empty())
        .collect();
    if curves.is_empty() {
        return Ok(Vec::new());
    }
    let key = choices
        .iter()
        .find_map(|c| c.tried.first().and_then(|t| t.values.0.first()))
        .map_or("value".to_string(), |(k, _)| k.clone());
    font::ensure_font()?;
    std::fs::create_dir_all(out).with_context(|| format!("cannot create {}", out.display()))?;
    let desc = match positive {
        true => format!("{key} (log scale)"),
        false => key,
    };
    let ticks = ticks(choices, x_of);
    Ok(both_formats!(out, "tuning", (1100, 700), |a| draw(
        a, &curves, &desc, &ticks
    )))
}

/// The x axis's marks: each value tried (its position, its text as the config spelt
/// it), in order, one a position.
fn ticks(choices: &[Choice], x_of: impl Fn(f64) -> f64) -> Vec<(f64, String)> {
    let mut ticks: Vec<(f64, String)> = choices
        .iter()
        .flat_map(|c| &c.tried)
        .filter_map(|t| Some((x_of(t.values.number(0)?), t.values.0.first()?.1.clone())))
        .collect();
    ticks.sort_by(|a, b| a.0.total_cmp(&b.0));
    ticks.dedup_by(|a, b| (a.0 - b.0).abs() < 1e-9);
    ticks
}

fn draw<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    curves: &[Curve],
    desc: &str,
    ticks: &[(f64, String)],
) -> PlotResult
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE)?;
    let xs = || curves.iter().flat_map(|c| c.points.iter().map(|p| p.0));
    let (x_lo, x_hi) = xs().fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), x| {
        (a.min(x), b.max(x))
    });
    let pad = ((x_hi - x_lo) * 0.06).max(0.05);
    let ys = curves.iter().flat_map(|c| {
        c.points.iter().flat_map(|p| {
            [p.1 - p.2, p.1 + p.2]
                .into_iter()
                .chain(p.3.iter().copied())
        })
    });
    let (lo, hi) = range(ys);
    // Headroom for the legend, upper right.
    let legend = ((curves.len() * 20 + 16) as f64 / 560.0).min(0.6);
    let hi = hi + (hi - lo) * legend / (1.0 - legend);
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "final val loss on the selection seeds against the tuned value (mean ± sd, seeds as dots, chosen ringed)",
            ("sans-serif", 20),
        )
        .margin(15)
        .x_label_area_size(50)
        .y_label_area_size(75)
        .build_cartesian_2d(
            Marked::new((x_lo - pad)..(x_hi + pad), ticks.iter().map(|t| t.0)),
            lo..hi,
        )?;
    chart
        .configure_mesh()
        .x_desc(desc)
        .y_desc("final val loss (whole split)")
        .x_label_formatter(&|v| {
            ticks
                .iter()
                .find(|t| (t.0 - v).abs() < 1e-9)
                .map_or_else(String::new, |t| t.1.clone())
        })
        .label_style(("sans-serif", 16))
        .axis_desc_style(("sans-serif", 18))
        .draw()?;
    for (i, c) in curves.iter().enumerate() {
        let col = color(i);
        let band: Vec<(f64, f64)> = c
            .points
            .iter()
            .map(|p| (p.0, p.1 + p.2))
            .chain(c.points.iter().rev().map(|p| (p.0, p.1 - p.2)))
            .collect();
        chart.draw_series(std::iter::once(Polygon::new(band, col.mix(0.15).filled())))?;
        chart
            .draw_series(LineSeries::new(
                c.points.iter().map(|p| (p.0, p.1)),
                col.stroke_width(2),
            ))?
            .label(c.name.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], col.stroke_width(3)));
        chart.draw_series(c.points.iter().flat_map(|p| {
            p.3.iter()
                .map(move |&l| Circle::new((p.0, l), 2, col.filled()))
        }))?;
        if let Some(x) = c.chosen {
            if let Some(p) = c.points.iter().find(|p| (p.0 - x).abs() < 1e-12) {
                chart.draw_series(std::iter::once(Circle::new(
                    (p.0, p.1),
                    8,
                    col.stroke_width(2),
                )))?;
            }
        }
    }
    draw_legend(&mut chart, 14)?;
    root.present()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::study::tuning::choose;
    use crate::study::tuning::tests::{decl, run};
    use crate::study::tuning::Outcome::Loss;

    /// Two layouts that tried overlapping grids, in no order: the axis is marked once at
    /// each value tried, in order, with the value's text.
    #[test]
    fn the_axis_is_marked_once_at_each_value_tried() {
        let runs = [
            ("tttt", "0.004"),
            ("tttt", "0.001"),
            ("pppp", "0.002"),
            ("pppp", "0.004"),
        ]
        .iter()
        .flat_map(|&(p, v)| [101, 102].map(|s| run(p, v, s, Loss(2.0))))
        .collect::<Vec<_>>();
        let marks = ticks(&choose(&runs, &decl()), f64::log10);
        let texts: Vec<&str> = marks.iter().map(|m| m.1.as_str()).collect();
        assert_eq!(texts, ["0.001", "0.002", "0.004"]);
        assert!((marks[1].0 - 0.002f64.log10()).abs() < 1e-12);
    }
}
