//! Sweeps (`tp-sweep`): a grid of runs, resumable, with a summary table and plots.

pub mod existing;
pub mod interrupts;
pub mod launcher;
pub mod more_seeds;
pub mod runner;
pub mod spec;
pub mod status;
pub mod summary;
pub mod tune_spec;
pub mod tuned;
mod yaml;

pub use interrupts::Interrupts;
pub use runner::{run_sweep, PointResult, Status};
pub use spec::{Launcher, MoreSeeds, Point, Sweep};

use crate::analysis::{merge_replicates, RunCurves};
use crate::plot::label_runs;
use crate::run_dir::DirLock;
use crate::study::plots::plot_runs;
use anyhow::{Context, Result};
use std::path::Path;
use tp_harness::util::write_atomic;

/// Runs the sweep into `out`, then writes `summary.csv`, `summary.md` (with replicate
/// statistics and `groups.csv` when points repeat over seeds) and `plots/`.
/// Returns the results; failed runs are reported, not fatal.
///
/// The sweep owns `out` while it runs (`out/.lock`): a second tp-sweep on the same
/// directory stops at once with one line naming this one's pid.
pub fn sweep_and_report(
    sweep: &Sweep,
    out: &Path,
    interrupts: &Interrupts,
) -> Result<Vec<PointResult>> {
    std::fs::create_dir_all(out).with_context(|| format!("cannot create {}", out.display()))?;
    let _owner = DirLock::acquire_for(out, "tp-sweep")?;
    let mut results = run_sweep(sweep, out, interrupts)?;
    let tuned_keys: &[String] = sweep.tune.as_ref().map_or(&[], |t| &t.decl.keys);
    if let Some(t) = sweep.tune.as_ref().filter(|t| t.from.is_none()) {
        results = tuned::select_and_report(sweep, t, results, out, interrupts)?;
    }
    if let (Some(rule), Some(baseline)) = (&sweep.more_seeds, &sweep.baseline) {
        loop {
            let compared: Vec<PointResult> = tuned::compared(&results, sweep)
                .into_iter()
                .cloned()
                .collect();
            let (points, wide) = rule.next_round(&compared, baseline, tuned_keys);
            if points.is_empty() {
                break;
            }
            let seed = points[0].cfg.optim.seed;
            let why: Vec<String> = wide
                .iter()
                .map(|w| format!("{} (±{:.4})", w.group, w.ci95))
                .collect();
            tp_harness::say!(
                "tp-sweep: seed {seed} for the groups whose paired 95% interval is wider than ±{}: {}",
                rule.until_ci95,
                why.join(", ")
            );
            let round = Sweep {
                points,
                ..sweep.clone()
            };
            results.extend(run_sweep(&round, out, interrupts)?);
        }
    }
    write_atomic(&out.join("summary.csv"), summary::csv(&results).as_bytes())?;
    let compared: Vec<PointResult> = tuned::compared(&results, sweep)
        .into_iter()
        .cloned()
        .collect();
    let groups = summary::groups(&compared, sweep.baseline.as_ref(), tuned_keys);
    let mut md = summary::markdown(&sweep.name, &results);
    if let Some(t) = &sweep.tune {
        let record = tuned::record(&results, t)?;
        tuned::write_record(&record, out)?;
        if t.from.is_none() {
            md += &format!(
                "\n## Tuning\n\n{}",
                crate::study::tuned_study::markdown(&tuned::choices(&results, t)?)
            );
        }
    }
    if groups.iter().any(|g| g.val.n > 1) {
        write_atomic(
            &out.join("groups.csv"),
            summary::groups_csv(&groups).as_bytes(),
        )?;
        md += &summary::groups_markdown(&groups, sweep.baseline.as_ref(), tuned_keys);
    }
    write_atomic(&out.join("summary.md"), md.as_bytes())?;
    let runs = results
        .iter()
        .filter(|r| r.summary.is_some())
        .map(|r| RunCurves::load(&r.dir))
        .collect::<Result<Vec<_>>>()?;
    let mut runs = merge_replicates(runs);
    if !runs.is_empty() {
        label_runs(&mut runs);
        plot_runs(&runs, &out.join("plots"))?;
    }
    Ok(results)
}
