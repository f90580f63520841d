//! A study's penalty figures (`tp-plot --penalty`): each pattern's paired difference in
//! final val loss from its setting's baseline, with its interval corrected over the
//! setting's layouts (Bonferroni, as penalty.md's) as an error bar, against the TP degree,
//! the length, the width, the width per rank and the synchronisations per pass. Zero is drawn: an
//! interval that crosses it is no evidence of a penalty.

use crate::plot::both_formats;
use crate::plot::font;
use crate::plot::style::{color, draw_legend, range, Marked, PlotResult};
use crate::study::penalty::PenaltyRow;
use anyhow::{Context, Result};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::path::{Path, PathBuf};

/// What a series name adds after the model, degree and length: the corpus where it is
/// not Shakespeare's characters, and the tuned keys.
fn tail(s: &crate::study::setting::Setting) -> String {
    let data = match s.dataset.as_str() {
        "shakespeare_char" => String::new(),
        d => format!(", {d}"),
    };
    let tuned = match s.tuned.is_empty() {
        true => String::new(),
        false => format!(", {} {}", s.tuned.join(", "), s.chosen_by.word()),
    };
    format!("{data}{tuned}")
}

/// Whether the rows hold two settings that differ in both width and TP degree (the
/// question whether C/N alone predicts a penalty).
fn crosses_width_and_degree(rows: &[PenaltyRow]) -> bool {
    rows.iter().any(|a| {
        rows.iter().any(|b| {
            a.setting.n_embd != b.setting.n_embd
                && a.setting.tp != b.setting.tp
                && a.setting.n_layer == b.setting.n_layer
        })
    })
}

/// Every figure [`plot_penalty`] may draw (each as .png and .svg): what `tp-plot
/// --penalty` clears from its folder when a drawing does not give it.
pub const PENALTY_FIGURES: [&str; 6] = [
    "penalty_vs_tp",
    "penalty_vs_iters",
    "penalty_vs_width",
    "penalty_vs_width_per_rank",
    "penalty_vs_syncs",
    "penalty_vs_prun",
];

/// A row's series name and x in one figure.
type SeriesKey = fn(&PenaltyRow) -> (String, f64);

/// One point of a penalty figure: x, the difference, its interval's half-width (0 where
/// it has only one pair) and the pattern.
type Point = (f64, f64, f64, String);

/// `penalty_vs_tp`, `penalty_vs_iters`, `penalty_vs_width` and
/// `penalty_vs_width_per_rank` `.{png,svg}` (where the rows cover more than one value of
/// the axis in a setting otherwise the same: one line per pattern; C/N's only where some
/// settings differ in both width and degree), `penalty_vs_syncs.{png,svg}`, and `penalty_vs_prun.{png,svg}` where a
/// setting has three or more layouts of the `s`-then-`p` family.
pub fn plot_penalty(rows: &[PenaltyRow], out: &Path) -> Result<Vec<PathBuf>> {
    font::ensure_font()?;
    std::fs::create_dir_all(out).with_context(|| format!("cannot create {}", out.display()))?;
    let mut files = Vec::new();
    for (name, axis, key) in axis_figures() {
        // Only series that vary along the axis: a single point says nothing of it (and
        // C/N's figure only where some line crosses a width and a degree: otherwise it
        // repeats the width's or the degree's).
        let lines: Vec<_> = series(rows, false, key)
            .into_iter()
            .filter(|s| s.1.len() > 1)
            .collect();
        if name == PENALTY_FIGURES[3] && !crosses_width_and_degree(rows) {
            continue;
        }
        if !lines.is_empty() {
            files.extend(both_formats!(out, name, (1100, 700), |a| draw(
                a, &lines, &axis
            )));
        }
    }
    // A log axis where every count is at least 1: the layouts that matter lie at 1 to 6
    // all-reduces a pass, all-t at 2 a block (24 at 12 layers).
    let log2 = rows.iter().all(|r| r.syncs >= 1);
    let by_syncs = series(rows, true, |r| {
        let x = r.syncs as f64;
        (r.setting_label.clone(), if log2 { x.log2() } else { x })
    });
    let axis = Axis {
        desc: match log2 {
            true => "TP all-reduces per forward pass (blocks.md count; log scale)",
            false => "TP all-reduces per forward pass (blocks.md count)",
        },
        log2,
        lines: false,
    };
    files.extend(both_formats!(out, PENALTY_FIGURES[4], (1100, 700), |a| {
        draw(a, &by_syncs, &axis)
    }));
    // The s-then-p family of a setting against how many blocks its ranks run apart.
    let by_run = series(
        &rows
            .iter()
            .filter(|r| r.p_run.is_some())
            .cloned()
            .collect::<Vec<_>>(),
        true,
        |r| (r.setting_label.clone(), r.p_run.unwrap_or(0) as f64),
    );
    if by_run.iter().any(|s| s.1.len() >= 3) {
        let axis = Axis {
            desc:
                "length of the p runs (blocks a rank runs without synchronising; s-then-p layouts)",
            log2: false,
            lines: false,
        };
        files.extend(both_formats!(out, PENALTY_FIGURES[5], (1100, 700), |a| {
            draw(a, &by_run, &axis)
        }));
    }
    Ok(files)
}

/// The figures of one line per layout along an axis: name, axis and each row's series
/// and x. One line per layout along each axis, through the settings that differ along it
/// alone: the series name holds the rest of the setting, so that lines of different
/// models, lengths, corpora or tuning never join.
fn axis_figures() -> [(&'static str, Axis, SeriesKey); 4] {
    [
        (
            PENALTY_FIGURES[0],
            Axis {
                desc: "TP degree N",
                log2: true,
                lines: true,
            },
            |r| {
                let s = &r.setting;
                let rest = format!("{}, {} it{}", s.model(), s.iters, tail(s));
                (format!("{} ({rest})", r.variant), (s.tp as f64).log2())
            },
        ),
        (
            PENALTY_FIGURES[1],
            Axis {
                desc: "training iterations",
                log2: false,
                lines: true,
            },
            |r| {
                let s = &r.setting;
                let rest = format!("{}, tp {}{}", s.model(), s.tp, tail(s));
                (format!("{} ({rest})", r.variant), s.iters as f64)
            },
        ),
        (
            PENALTY_FIGURES[2],
            Axis {
                desc: "width C (n_embd)",
                log2: true,
                lines: true,
            },
            |r| {
                let s = &r.setting;
                let rest = format!(
                    "{} layers / {}h, tp {}, {} it{}",
                    s.n_layer,
                    s.n_head,
                    s.tp,
                    s.iters,
                    tail(s)
                );
                (format!("{} ({rest})", r.variant), (s.n_embd as f64).log2())
            },
        ),
        (
            PENALTY_FIGURES[3],
            Axis {
                desc: "width per TP rank C/N",
                log2: true,
                lines: true,
            },
            |r| {
                let s = &r.setting;
                let rest = format!("{} layers, {} it{}", s.n_layer, s.iters, tail(s));
                (
                    format!("{} ({rest})", r.variant),
                    (s.width_per_rank() as f64).log2(),
                )
            },
        ),
    ]
}

/// The rows with a difference, and (`baselines`) the baselines they were paired with, at
/// 0, as named series of points (`key` gives each row its series and x), in first-seen
/// order.
fn series(
    rows: &[PenaltyRow],
    baselines: bool,
    key: impl Fn(&PenaltyRow) -> (String, f64),
) -> Vec<(String, Vec<Point>)> {
    let is_baseline = |r: &PenaltyRow| {
        rows.iter()
            .any(|o| o.setting == r.setting && o.baseline.as_ref() == Some(&r.variant))
    };
    let mut out: Vec<(String, Vec<Point>)> = Vec::new();
    for r in rows {
        // The interval corrected over the setting's layouts (Bonferroni), as the table's.
        let (y, ci) = match (&r.diff, r.corrected_half) {
            (Some(d), Some(h)) => (d.mean, if h.is_finite() { h } else { 0.0 }),
            (Some(d), None) => (d.mean, if d.ci95.is_finite() { d.ci95 } else { 0.0 }),
            (None, _) if baselines && is_baseline(r) => (0.0, 0.0),
            (None, _) => continue,
        };
        let (name, x) = key(r);
        let p = (x, y, ci, r.variant.to_string());
        match out.iter_mut().find(|(n, _)| *n == name) {
            Some((_, pts)) => pts.push(p),
            None => out.push((name, vec![p])),
        }
    }
    for (_, pts) in &mut out {
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    out
}

struct Axis {
    desc: &'static str,
    /// x is log2 of the value (labelled with the value).
    log2: bool,
    /// A series is a line through its points (one pattern over TP degrees), else points
    /// named by their pattern (patterns of one setting).
    lines: bool,
}

/// The axes' extent and how far apart series sharing an x are drawn.
struct Frame {
    x_lo: f64,
    x_hi: f64,
    spread: f64,
    lo: f64,
    hi: f64,
}

fn frame(series: &[(String, Vec<Point>)]) -> Frame {
    let all = || series.iter().flat_map(|s| s.1.iter());
    let (x_lo, x_hi) = all().fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), p| {
        (a.min(p.0), b.max(p.0))
    });
    // A margin, and the spread of series sharing an x, in units of the axis's scale
    // (all-reduce counts and log2 TP degrees: 0.5; thousands of iterations: an eighth).
    let unit = if x_lo.is_finite() {
        ((x_hi - x_lo) / 8.0).max(0.5)
    } else {
        0.5
    };
    // Series sharing an x are spread over at most 0.6 of the smallest gap between two
    // xs, so that each point stays nearer its own x than any other (a 4-layer `pppp` at
    // 1 all-reduce drawn at 0 would read as none).
    let mut xs: Vec<f64> = all().map(|p| p.0).collect();
    xs.sort_by(f64::total_cmp);
    xs.dedup();
    let gap = xs
        .windows(2)
        .map(|w| w[1] - w[0])
        .fold(f64::INFINITY, f64::min);
    let spread = unit.min(0.6 * gap);
    let (x_lo, x_hi) = if x_lo.is_finite() {
        (x_lo - unit, x_hi + unit)
    } else {
        (0.0, 1.0)
    };
    let (lo, hi) = range(all().flat_map(|p| [p.1 - p.2, p.1 + p.2]).chain([0.0]));
    // Headroom for the legend (upper right, about 20 px a series of the plot's ~560),
    // so that it covers no error bar.
    let legend = ((series.len() * 20 + 16) as f64 / 560.0).min(0.6);
    let hi = hi + (hi - lo) * legend / (1.0 - legend);
    Frame {
        x_lo,
        x_hi,
        spread,
        lo,
        hi,
    }
}

/// Which points are named by their pattern: each pattern once at an x (a layout in
/// several settings, `12xt` at 24, is named by its first series).
fn pattern_labels(series: &[(String, Vec<Point>)]) -> Vec<Vec<bool>> {
    let mut seen: Vec<(f64, &str)> = Vec::new();
    series
        .iter()
        .map(|(_, pts)| {
            pts.iter()
                .map(|p| {
                    let first = !seen.iter().any(|s| (s.0 - p.0).abs() < 1e-9 && s.1 == p.3);
                    seen.push((p.0, &p.3));
                    first
                })
                .collect()
        })
        .collect()
}

/// Where the x axis is marked: at each x a point lies at, once.
fn marks(series: &[(String, Vec<Point>)]) -> Vec<f64> {
    let mut xs: Vec<f64> = series
        .iter()
        .flat_map(|s| s.1.iter().map(|p| p.0))
        .collect();
    xs.sort_by(f64::total_cmp);
    xs.dedup_by(|a, b| (*a - *b).abs() < 1e-9);
    xs
}

fn draw<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    series: &[(String, Vec<Point>)],
    axis: &Axis,
) -> PlotResult
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE)?;
    let Frame {
        x_lo,
        x_hi,
        spread,
        lo,
        hi,
    } = frame(series);
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "final val loss penalty vs the all-t baseline (paired by seed, interval corrected over the setting's layouts)",
            ("sans-serif", 22),
        )
        .margin(15)
        .x_label_area_size(50)
        .y_label_area_size(75)
        .build_cartesian_2d(Marked::new(x_lo..x_hi, marks(series).into_iter()), lo..hi)?;
    let log2 = axis.log2;
    chart
        .configure_mesh()
        .x_desc(axis.desc)
        .y_desc("val loss difference from baseline")
        .x_label_formatter(&|v| {
            // Every x here counts something (all-reduces, blocks, iterations, TP degrees).
            let v = if log2 { v.exp2() } else { *v };
            format!("{v:.0}")
        })
        .label_style(("sans-serif", 16))
        .axis_desc_style(("sans-serif", 18))
        .draw()?;
    chart.draw_series(DashedLineSeries::new(
        [(x_lo, 0.0), (x_hi, 0.0)],
        6,
        4,
        BLACK.stroke_width(1),
    ))?;
    // Series side by side at a shared x, so that their error bars do not overprint.
    let width = spread / series.len().max(1) as f64;
    let named = pattern_labels(series);
    for (i, (name, pts)) in series.iter().enumerate() {
        let c = color(i);
        let dx = (i as f64 - (series.len() as f64 - 1.0) / 2.0) * width;
        let pts: Vec<Point> = pts
            .iter()
            .map(|p| (p.0 + dx, p.1, p.2, p.3.clone()))
            .collect();
        let legend = move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(3));
        if axis.lines {
            chart
                .draw_series(LineSeries::new(
                    pts.iter().map(|p| (p.0, p.1)),
                    c.stroke_width(2),
                ))?
                .label(name.clone())
                .legend(legend);
        } else {
            // The left half of the series name their points left of the group of points
            // at their x, the rest right of it: side by side at one x, their names would
            // otherwise overprint each other and the error bars.
            let half = (series.len() as f64 - 1.0) / 2.0 * width;
            let (edge, px, h) = match 2 * i + 1 < series.len() {
                true => (-half - dx, -8, HPos::Right),
                false => (half - dx, 8, HPos::Left),
            };
            let font = TextStyle::from(("sans-serif", 14).into_font()).pos(Pos::new(h, VPos::Top));
            chart
                .draw_series(pts.iter().zip(&named[i]).map(|(p, &shown)| {
                    let text = if shown { p.3.as_str() } else { "" };
                    EmptyElement::at((p.0 + edge, p.1))
                        + Text::new(text.to_string(), (px, -16), font.clone())
                }))?
                .label(name.clone())
                .legend(legend);
        }
        chart.draw_series(pts.iter().map(|&(x, y, e, _)| {
            ErrorBar::new_vertical(x, y - e, y, y + e, c.stroke_width(2), 8)
        }))?;
        chart.draw_series(
            pts.iter()
                .map(|&(x, y, _, _)| Circle::new((x, y), 4, c.filled())),
        )?;
    }
    draw_legend(&mut chart, 14)?;
    root.present()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(xs: &[f64]) -> Vec<(String, Vec<Point>)> {
        ["a", "b", "c"]
            .iter()
            .map(|n| {
                (
                    n.to_string(),
                    xs.iter().map(|&x| (x, 0.0, 0.01, n.to_string())).collect(),
                )
            })
            .collect()
    }

    #[test]
    fn series_sharing_an_x_stay_nearer_their_own_x_than_the_next() {
        // All-reduce counts from 1 to 24: the axis's unit (its margin) is 23 / 8, but
        // neighbours are 1 apart, so three series spread over 0.6 (each 0.2 from the
        // middle), never a whole count.
        let f = frame(&at(&[1.0, 2.0, 6.0, 24.0]));
        assert!((f.spread - 0.6).abs() < 1e-12, "{}", f.spread);
        assert_eq!((f.x_lo, f.x_hi), (1.0 - 2.875, 24.0 + 2.875));
        // Iterations 2000 and 6000: the gap allows the axis's own unit (an eighth).
        let f = frame(&at(&[2000.0, 6000.0]));
        assert!((f.spread - 500.0).abs() < 1e-9, "{}", f.spread);
        // One x only: no gap to keep to.
        let f = frame(&at(&[8.0]));
        assert!((f.spread - 0.5).abs() < 1e-12, "{}", f.spread);
    }

    /// `12xt` at 24 in two settings is named once; `12xs` at 12 and `12xt` at 24 in the
    /// first, and `s11xp` at 2 in both (two patterns at one x), each get a name; the axis
    /// is marked once at each x.
    #[test]
    fn each_pattern_is_named_once_at_an_x_and_each_x_marked_once() {
        let p = |x: f64, name: &str| (x, 0.0, 0.01, name.to_string());
        let series = vec![
            (
                "tp 2".to_string(),
                vec![p(2.0, "s11xp"), p(12.0, "12xs"), p(24.0, "12xt")],
            ),
            ("tp 4".to_string(), vec![p(2.0, "sppp"), p(24.0, "12xt")]),
        ];
        assert_eq!(
            pattern_labels(&series),
            [vec![true, true, true], vec![true, false]]
        );
        assert_eq!(marks(&series), [2.0, 12.0, 24.0]);
    }
}
