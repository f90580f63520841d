//! What every figure shares: its colours, value ranges, axes marked where the data lie,
//! and drawing result; and the legend labels of runs.

use crate::analysis::RunCurves;
use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint};
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;

/// What a drawing function returns (plotters' errors differ by backend).
pub type PlotResult = std::result::Result<(), Box<dyn std::error::Error>>;

/// Legend labels: the pattern, plus tp/dp where runs differ in them, plus the directory
/// name where labels would still collide, plus the number of replicates merged.
pub fn label_runs(runs: &mut [RunCurves]) {
    let differs = |f: &dyn Fn(&RunCurves) -> usize| runs.iter().any(|r| f(r) != f(&runs[0]));
    let (tp_differs, dp_differs) = (differs(&|r| r.tp), differs(&|r| r.dp));
    for r in runs.iter_mut() {
        let mut l = r.variant.to_string();
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

/// A linear f64 axis marked (labels and grid lines) at given points only: plotters'
/// `with_key_points` leaves an f64 axis without a label formatter.
pub struct Marked {
    range: RangedCoordf64,
    marks: Vec<f64>,
}

impl Marked {
    /// The axis over `range`, marked at `marks`.
    pub fn new(range: std::ops::Range<f64>, marks: impl Iterator<Item = f64>) -> Self {
        Self {
            range: range.into(),
            marks: marks.collect(),
        }
    }
}

impl Ranged for Marked {
    type ValueType = f64;
    type FormatOption = DefaultFormatting;
    fn map(&self, v: &f64, limit: (i32, i32)) -> i32 {
        self.range.map(v, limit)
    }
    fn key_points<H: KeyPointHint>(&self, _: H) -> Vec<f64> {
        self.marks.clone()
    }
    fn range(&self) -> std::ops::Range<f64> {
        self.range.range()
    }
}

/// The range of `values` with a 5% margin (0..1 when there are none).
pub fn range(values: impl Iterator<Item = f64>) -> (f64, f64) {
    let (lo, hi) = values.fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), v| {
        (a.min(v), b.max(v))
    });
    if !lo.is_finite() {
        return (0.0, 1.0);
    }
    let pad = ((hi - lo) * 0.05).max(1e-3);
    (lo - pad, hi + pad)
}

/// Ten well-separated colours (matplotlib's tab10), then plotters' palette.
pub fn color(i: usize) -> RGBAColor {
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

/// The legend every figure draws: upper right, on a translucent white box, at `size` pt.
pub fn draw_legend<'a, DB, CT>(chart: &mut ChartContext<'a, DB, CT>, size: u32) -> PlotResult
where
    DB: DrawingBackend + 'a,
    DB::ErrorType: 'static,
    CT: CoordTranslate,
{
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", size))
        .position(SeriesLabelPosition::UpperRight)
        .draw()?;
    Ok(())
}
