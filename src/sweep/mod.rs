//! Sweeps (`tp-sweep`): a grid of runs, resumable, with a summary table and plots.

pub mod runner;
pub mod spec;
pub mod summary;

pub use runner::{run_sweep, PointResult, Status};
pub use spec::{Launcher, Point, Sweep};

use crate::plot::{label_runs, plot_runs, RunCurves};
use crate::util::write_atomic;
use anyhow::Result;
use std::path::Path;

/// Runs the sweep into `out`, then writes `summary.csv`, `summary.md` and `plots/`.
/// Returns the results; failed runs are reported, not fatal.
pub fn sweep_and_report(sweep: &Sweep, out: &Path) -> Result<Vec<PointResult>> {
    let results = run_sweep(sweep, out)?;
    write_atomic(&out.join("summary.csv"), summary::csv(&results).as_bytes())?;
    write_atomic(
        &out.join("summary.md"),
        summary::markdown(&sweep.name, &results).as_bytes(),
    )?;
    let mut runs = results
        .iter()
        .filter(|r| r.summary.is_some())
        .map(|r| RunCurves::load(&r.dir))
        .collect::<Result<Vec<_>>>()?;
    if !runs.is_empty() {
        label_runs(&mut runs);
        plot_runs(&runs, &out.join("plots"))?;
    }
    Ok(results)
}
