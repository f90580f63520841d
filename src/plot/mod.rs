//! Figures, PNG and SVG, drawn from the numbers `analysis` computes: loss curves and the
//! trade-off of final loss against communication (`curves`, `tp-plot` and sweeps), the
//! same against modelled time on a link, the sensitivity scan (`scan`), the link
//! calibration (`calibration`), a study's loss penalties (`penalty`) and a tuned study's
//! loss against the tuned value (`tuning`). Replicates come merged ([`crate::analysis::runs`]): one
//! mean curve with a band of one standard deviation, one point with the 95% interval of
//! the mean as an error bar.

mod font;
mod style;

pub use style::label_runs;

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

// After the macro: the figures draw with it.
pub mod calibration;
mod curves;
mod penalty;
mod plan;
mod scan;
pub mod timeline;
mod tuning;

pub use curves::{plot_on_link, plot_runs};
pub use penalty::{plot_penalty, PENALTY_FIGURES};
pub use plan::plot_plan;
pub use scan::plot_scan;
pub use timeline::plot_timeline;
pub use tuning::plot_tuning;
