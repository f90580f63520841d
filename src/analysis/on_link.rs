//! The table behind `tp-plot --x time`: per run (or replicate group), its modelled step
//! time on a link and the minutes its val curve takes to reach a target loss.

use super::calibration::step_reaching;
use super::runs::RunCurves;
use super::table::Table;
use super::timing::Link;
use std::fmt::Write;

/// The target a comparison uses when none is given: the worst final val loss among the
/// finished runs, so that every one of them reaches it (a run still training would set
/// it at whatever loss it has got to).
pub fn default_target(runs: &[RunCurves]) -> Option<f64> {
    runs.iter()
        .filter(|r| r.finished)
        .filter_map(|r| r.final_val)
        .reduce(f64::max)
}

/// The distinct machines `runs` were made on, in words.
fn machines(runs: &[RunCurves]) -> String {
    let mut all: Vec<Option<String>> = runs.iter().flat_map(|r| r.machines.clone()).collect();
    all.sort();
    all.dedup();
    let named: Vec<String> = all.iter().flatten().cloned().collect();
    let unrecorded = all.contains(&None).then_some(
        "not recorded by some runs (made before summary.json kept its machine)".to_string(),
    );
    named
        .into_iter()
        .chain(unrecorded)
        .collect::<Vec<_>>()
        .join("; ")
}

/// Markdown: label, forward all-reduces per step, final val loss (± its 95% interval
/// over replicates), modelled ms per step on `link`, minutes to `target` ("-" where the
/// curve never reaches it, or a run has no timing to model).
pub fn on_link_markdown(runs: &[RunCurves], link: &Link, target: f64) -> String {
    let mut s = format!(
        "Modelled on {} ({} Gbit/s, {} us a message): each run's compute plus its collectives' ring time.\n\n\
         - link calibration: {}\n\
         - compute: each run's slowest rank's thread CPU time (as if every rank had a machine of its own), or, for runs that could not measure it, its step time less its communication\n\
         - compute measured on: {}\n\n\
         Minutes to {target:.3}: where a run's val curve first reaches it, interpolated linearly between its evaluations (a finished run's curve ends at its whole-split final loss).\n\n",
        link.label,
        link.model.gbit_per_s,
        link.model.latency_us,
        link.calibration,
        machines(runs)
    );
    let mut t = Table::new([
        "run".to_string(),
        "fwd all-reduces / step".into(),
        "final val loss (± 95% interval)".into(),
        "compute ms (imbalance)".into(),
        "ms/step".into(),
        format!("minutes to {target:.3}"),
    ]);
    for r in runs {
        let ms = r
            .timing
            .as_ref()
            .map(|t| 1e3 * t.step_seconds_on(&link.model));
        let minutes = ms.and_then(|ms| Some(step_reaching(&r.val, target)? * ms / 60e3));
        let show =
            |v: Option<f64>, digits: usize| v.map_or("-".into(), |v| format!("{v:.digits$}"));
        let final_val = match (r.final_val, r.final_ci95) {
            (Some(v), Some(ci)) => format!("{v:.4} ± {ci:.4}"),
            (v, _) => show(v, 4),
        };
        let compute = r.timing.as_ref().map_or("-".into(), |t| {
            let ms = 1e3 * t.compute_seconds();
            match &t.compute {
                Some(c) => format!("{ms:.1} ({:.1}%)", 100.0 * c.imbalance()),
                None => format!("{ms:.1} (wall)"),
            }
        });
        t.row([
            format!(
                "{}{}",
                r.label,
                if r.finished { "" } else { " (unfinished)" }
            ),
            show(r.forward_allreduces_per_step, 0),
            final_val,
            compute,
            show(ms, 1),
            show(minutes, 2),
        ]);
    }
    s.push_str(&t.markdown());
    // A column of dashes says nothing by itself: one line that no run got there, and how
    // close the best came.
    let reached = runs.iter().any(|r| step_reaching(&r.val, target).is_some());
    let best = runs
        .iter()
        .filter_map(|r| Some((r.val.iter().map(|p| p.1).reduce(f64::min)?, &r.label)))
        .min_by(|a, b| a.0.total_cmp(&b.0));
    if let (false, Some((loss, label))) = (reached, best) {
        let _ = writeln!(
            s,
            "\nNo run reached {target:.3}: the lowest val loss any reached was {loss:.4} ({label}). Give a --target above it."
        );
    }
    s
}
