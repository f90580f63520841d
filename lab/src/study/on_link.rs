//! The table behind `tp-plot --x time`: per run (or replicate group), its modelled step
//! time on a link, the minutes its val curves take to reach a target loss (the mean over
//! its seeds with a 95% interval), and how many times sooner than the baseline's it gets
//! there (paired by seed, with its interval). Every group's compute is measured on one
//! machine ([`crate::analysis::runs::ComputeCpu`]), which the table names.

use super::calibration::step_reaching;
use crate::analysis::runs::RunCurves;
use crate::analysis::stats::{by_seed, Replicates};
use crate::analysis::table::Table;
use crate::analysis::timing::Link;
use crate::config::Variant;
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

/// The machine whose compute the groups' modelled times use, in words.
fn compute_machine(runs: &[RunCurves]) -> String {
    let mut all: Vec<&str> = runs
        .iter()
        .filter(|r| r.timing.is_some())
        .filter_map(|r| r.timing_machine.as_deref())
        .collect();
    all.sort();
    all.dedup();
    match all.as_slice() {
        [] => "not recorded by these runs (made before summary.json kept its machine)".into(),
        [one] => format!(
            "{one} (each group's median run measured there; `tp-plot --cpu TEXT` picks another)"
        ),
        many => many.join("; "),
    }
}

/// The worst final val loss of a group's seeds (the loss each of them reaches at the
/// end of its curve), if any finished.
pub fn worst_final(r: &RunCurves) -> Option<f64> {
    r.seed_vals
        .iter()
        .filter_map(|(_, v)| v.last().map(|p| p.1))
        .reduce(f64::max)
        .filter(|_| r.finished)
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

/// The steps each seed's val curve takes to reach `target`: (seed, steps), `None` for a
/// seed whose curve never gets there.
fn seed_steps(r: &RunCurves, target: f64) -> Vec<(u64, Option<f64>)> {
    r.seed_vals
        .iter()
        .map(|(seed, val)| (*seed, step_reaching(val, target)))
        .collect()
}

/// Each seed's own modelled ms per step on `link`, for the seeds measured on the
/// group's machine.
fn seed_ms(r: &RunCurves, link: &Link) -> Vec<(u64, f64)> {
    r.seed_timings
        .iter()
        .map(|(seed, t)| (*seed, 1e3 * t.step_seconds_on(&link.model)))
        .collect()
}

/// A ratio's geometric mean over seeds with its 95% interval: `6.09 (5.90 .. 6.29; 8
/// pairs)`, from the ratios' logarithms.
fn ratio_cell(logs: &[f64]) -> String {
    match Replicates::of(logs) {
        Some(l) if l.ci95.is_finite() => format!(
            "{:.2} ({:.2} .. {:.2}; {} pairs)",
            l.mean.exp(),
            (l.mean - l.ci95).exp(),
            (l.mean + l.ci95).exp(),
            l.n
        ),
        Some(l) => format!("{:.2} (1 pair)", l.mean.exp()),
        None => "-".into(),
    }
}

/// "x sooner" taken apart, against the baseline, paired by seed: the step ratio on the
/// link (the baseline's modelled ms per step over the group's, each seed's own run
/// measured on the machine named), the loss-curve ratio (the baseline's steps to the
/// target over the group's) and their product (minutes over minutes, each seed at its own
/// step time where measured there, else its group's median run's): the product's log is
/// the sum of the two logs seed by seed, so on the seeds that have all three the
/// geometric means multiply exactly.
#[derive(Debug, Clone, PartialEq)]
pub struct Sooner {
    pub step_logs: Vec<f64>,
    pub curve_logs: Vec<f64>,
    pub product_logs: Vec<f64>,
}

impl Sooner {
    pub fn of(base: &RunCurves, mine: &RunCurves, link: &Link, target: f64) -> Self {
        let (bms, mms) = (seed_ms(base, link), seed_ms(mine, link));
        let step_logs: Vec<f64> = by_seed(&bms, &mms)
            .into_iter()
            .map(|(_, b, m)| (b / m).ln())
            .collect();
        let reached = |r: &RunCurves| -> Vec<(u64, f64)> {
            seed_steps(r, target)
                .into_iter()
                .filter_map(|(s, x)| Some((s, x?)))
                .collect()
        };
        let (bs, ms) = (reached(base), reached(mine));
        let curve_logs: Vec<f64> = by_seed(&bs, &ms)
            .into_iter()
            .map(|(_, b, m)| (b / m).ln())
            .collect();
        // Each seed's step time: its own where measured on the machine, else its group's.
        let ms_of = |r: &RunCurves, own: &[(u64, f64)], seed: u64| -> Option<f64> {
            own.iter()
                .find(|(s, _)| *s == seed)
                .map(|p| p.1)
                .or_else(|| {
                    r.timing
                        .as_ref()
                        .map(|t| 1e3 * t.step_seconds_on(&link.model))
                })
        };
        let product_logs: Vec<f64> = by_seed(&bs, &ms)
            .into_iter()
            .filter_map(|(seed, b, m)| {
                let (tb, tm) = (ms_of(base, &bms, seed)?, ms_of(mine, &mms, seed)?);
                Some((b * tb / (m * tm)).ln())
            })
            .collect();
        Self {
            step_logs,
            curve_logs,
            product_logs,
        }
    }
}

/// Minutes each seed's val curve takes to reach `target` on `link`: (seed, minutes), or
/// `None` for a seed whose curve never gets there; empty without a timing.
fn seed_minutes(r: &RunCurves, link: &Link, target: f64) -> Vec<(u64, Option<f64>)> {
    let Some(ms) = r
        .timing
        .as_ref()
        .map(|t| 1e3 * t.step_seconds_on(&link.model))
    else {
        return Vec::new();
    };
    r.seed_vals
        .iter()
        .map(|(seed, val)| (*seed, step_reaching(val, target).map(|s| s * ms / 60e3)))
        .collect()
}

/// `12.3 (11.9 .. 12.7)` for a mean with its interval; the value alone for one seed.
fn with_interval(r: &Replicates, digits: usize) -> String {
    match r.ci95.is_finite() {
        true => format!(
            "{:.digits$} ({:.digits$} .. {:.digits$})",
            r.mean,
            r.mean - r.ci95,
            r.mean + r.ci95
        ),
        false => format!("{:.digits$}", r.mean),
    }
}

/// The group the others are timed against: the one whose layout is `baseline`, else
/// the only all-t one.
pub fn baseline_of<'a>(runs: &'a [RunCurves], baseline: Option<&Variant>) -> Option<&'a RunCurves> {
    let matching: Vec<&RunCurves> = runs
        .iter()
        .filter(|r| baseline.map_or(r.variant.all_t(), |b| r.variant == *b))
        .collect();
    match matching.as_slice() {
        [one] => Some(one),
        _ => None,
    }
}

/// One group's cells of the table.
fn row(
    r: &RunCurves,
    link: &Link,
    target: f64,
    baseline: Option<&RunCurves>,
    is_base: bool,
) -> [String; 9] {
    let ms = r
        .timing
        .as_ref()
        .map(|t| 1e3 * t.step_seconds_on(&link.model));
    let show = |v: Option<f64>, digits: usize| v.map_or("-".into(), |v| format!("{v:.digits$}"));
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
    let mine = seed_minutes(r, link, target);
    let reached: Vec<f64> = mine.iter().filter_map(|m| m.1).collect();
    let minutes = match (Replicates::of(&reached), reached.len() == mine.len()) {
        (Some(m), true) => with_interval(&m, 2),
        (Some(_), false) => format!("- ({} of {} seeds reach it)", reached.len(), mine.len()),
        (None, _) => "-".into(),
    };
    let [step, curve, sooner] = match (baseline, is_base) {
        (_, true) => ["1".to_string(), "1".into(), "1".into()],
        (Some(base), false) => {
            let x = Sooner::of(base, r, link, target);
            [&x.step_logs, &x.curve_logs, &x.product_logs].map(|l| ratio_cell(l))
        }
        (None, false) => ["-".to_string(), "-".into(), "-".into()],
    };
    [
        format!(
            "{}{}",
            r.label,
            if r.finished { "" } else { " (unfinished)" }
        ),
        show(r.forward_allreduces_per_step, 0),
        final_val,
        compute,
        show(ms, 1),
        minutes,
        step,
        curve,
        sooner,
    ]
}

/// Markdown: label, forward all-reduces per step, final val loss (± its 95% interval
/// over replicates), compute, modelled ms per step on `link`, minutes to `target` (mean
/// over seeds with its interval; "-" where a curve never reaches it, or a run has no
/// timing to model) and, against `baseline`, times sooner (paired by seed).
pub fn on_link_markdown(
    runs: &[RunCurves],
    link: &Link,
    target: f64,
    baseline: Option<&RunCurves>,
) -> String {
    let mut s = format!(
        "Modelled on {} ({} Gbit/s, {} us a message{}): each run's compute plus its collectives' ring time.\n\n\
         - link calibration: {}\n\
         - compute: each group's median run by its slowest rank's thread CPU time (as if every rank had a machine of its own), or, for runs that could not measure it, its step time less its communication\n\
         - compute measured on: {}\n\
         - runs made on: {}\n\n\
         Minutes to {target:.3}: where each seed's val curve first reaches it, interpolated linearly between its evaluations (a finished run's curve ends at its whole-split final loss), times the group's modelled step; the mean over seeds with its 95% interval (Student's t). Times sooner, taken apart, each against the baseline, paired by seed, as a geometric mean with its 95% interval over the seeds: the step ratio (the baseline's modelled ms per step over the group's, each seed's own run measured on the machine named above: the link and the compute), the loss-curve ratio (the baseline's steps to the target over the group's: the optimisation), and their product, x sooner (the baseline's minutes over the group's, on the seeds where both reach the target; a seed not measured on that machine at its group's median step). Seed by seed the product is the step ratio times the curve ratio, so its interval holds both the compute's and the curves' spread.\n\n",
        link.label,
        link.model.gbit_per_s,
        link.model.latency_us,
        match link.model.call_us {
            0.0 => String::new(),
            us => format!(" + {us} us a call"),
        },
        link.calibration,
        compute_machine(runs),
        machines(runs)
    );
    let against = baseline.map_or("(no baseline)".to_string(), |b| {
        format!("than {}", b.variant)
    });
    let mut t = Table::new([
        "run".to_string(),
        "fwd all-reduces / step".into(),
        "final val loss (± 95% interval)".into(),
        "compute ms (imbalance)".into(),
        "ms/step".into(),
        format!("minutes to {target:.3} (95% interval)"),
        format!("step ratio {against}"),
        format!("loss-curve ratio {against}"),
        format!("x sooner {against} = product"),
    ]);
    let mut untimed = Vec::new();
    for r in runs {
        if r.timing.is_none() {
            untimed.push(r.label.clone());
        }
        let is_base = baseline.is_some_and(|b| std::ptr::eq(b, r));
        t.row(row(r, link, target, baseline, is_base));
    }
    s.push_str(&t.markdown());
    if !untimed.is_empty() {
        let _ = writeln!(
            s,
            "\nNo timing for {}: no run of theirs measured its compute on the machine named above (a comparison never mixes machines' compute).",
            untimed.join(", ")
        );
    }
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
