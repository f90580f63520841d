//! A tuned sweep's rounds (`tune:` in the sweep file, [`Tune`]): the selection runs
//! (every layout over the tuned values, on the selection seeds), values added past an
//! edge where a layout's best lies at one (up to `extend` a side), with `refine` one
//! round at the midpoints around each best, then each layout's report runs at its chosen
//! values. The choice is [`crate::study::tuning::choose`]'s,
//! the same the tables make. A rerun resumes: finished runs are skipped, a choice made
//! again from the same runs is the same, and an edited grid only adds runs.

use super::interrupts::Interrupts;
use super::runner::{run_sweep, PointResult, Status};
use super::spec::{Point, Sweep, Tune};
use crate::config::Variant;
use crate::study::tuning::{choose, Choice, Outcome, TuneRun};
use crate::study::tuning_record::{ChoiceRecord, TuningRecord};
use anyhow::Result;
use std::path::Path;

/// The results as tuning reads them.
fn tune_runs(results: &[PointResult], tune: &Tune) -> Result<Vec<TuneRun>> {
    results
        .iter()
        .map(|r| {
            let outcome = match (&r.status, &r.summary) {
                (Status::Diverged(step), _) => Outcome::Diverged { step: *step },
                (_, Some(s)) => s
                    .final_val_loss
                    .map_or(Outcome::Pending, |l| Outcome::Loss(l as f64)),
                _ => Outcome::Pending,
            };
            TuneRun::new(&r.point.cfg, &tune.decl.keys, outcome)
        })
        .collect()
}

/// Each layout's choice from the selection runs among `results`.
pub fn choices(results: &[PointResult], tune: &Tune) -> Result<Vec<Choice>> {
    Ok(choose(&tune_runs(results, tune)?, &tune.decl))
}

/// A selection point of `choice`'s layout, the template of its other points.
fn point_of<'a>(results: &'a [PointResult], choice: &Choice, tune: &Tune) -> Option<&'a Point> {
    results.iter().map(|r| &r.point).find(|p| {
        tune.decl.selection_seeds.contains(&p.cfg.optim.seed)
            && p.cfg.variant() == choice.variant
            && crate::study::setting::Setting::tuned(&p.cfg, &tune.decl.keys)
                .is_ok_and(|s| s == choice.setting)
    })
}

/// Runs the selection's extensions, with `refine` its one refinement, and then the
/// report runs of every layout whose choice is final; returns every result (the
/// selection's first).
pub fn select_and_report(
    sweep: &Sweep,
    tune: &Tune,
    results: Vec<PointResult>,
    out: &Path,
    interrupts: &Interrupts,
) -> Result<Vec<PointResult>> {
    rounds(sweep, tune, results, |_, plan| {
        for note in &plan.notes {
            tp_harness::say!("tp-sweep: {note}");
        }
        run_round(sweep, plan.points, out, interrupts).map(Some)
    })
}

/// A round of a tuned sweep after its first selection round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Round {
    /// Selection runs at a value one step past an edge the best lies at.
    PastEdge,
    /// Selection runs at the midpoints around each best.
    Refine,
    /// Each layout's report runs at its chosen values.
    Report,
}

/// The rounds after the first selection round, in order, each planned and handed to
/// `round`: it tells their notes and runs them (or, for `tp-sweep --status`, reads what
/// their points hold) and gives back their results, or `None` to stop there (a round not
/// yet ended: the rounds after it depend on its results). Returns every result so far.
pub fn rounds(
    sweep: &Sweep,
    tune: &Tune,
    mut results: Vec<PointResult>,
    mut round: impl FnMut(Round, Planned) -> Result<Option<Vec<PointResult>>>,
) -> Result<Vec<PointResult>> {
    // Values past an edge, a round at a time, until every best lies inside what was
    // tried or its side has `extend` values added.
    loop {
        let added = past_edges(sweep, tune, &results)?;
        if added.points.is_empty() {
            break;
        }
        let Some(ran) = round(Round::PastEdge, added)? else {
            return Ok(results);
        };
        results.extend(ran);
    }
    // One refinement: the midpoints around each final choice's best on the grid's
    // lattice (rerun, the lattice best is the same and its midpoints are there).
    if tune.refine {
        let added = midpoints(sweep, tune, &results)?;
        let Some(ran) = round(Round::Refine, added)? else {
            return Ok(results);
        };
        results.extend(ran);
    }
    let report = report_points(sweep, tune, &results)?;
    if let Some(ran) = round(Round::Report, report)? {
        results.extend(ran);
    }
    Ok(results)
}

/// `points` run as a round of `sweep`.
fn run_round(
    sweep: &Sweep,
    points: Vec<Point>,
    out: &Path,
    interrupts: &Interrupts,
) -> Result<Vec<PointResult>> {
    let round = Sweep {
        points,
        ..sweep.clone()
    };
    run_sweep(&round, out, interrupts)
}

/// A round's points and what to tell of it (why each value is tried, a choice at an
/// edge): printed by the sweep as it runs the round, listed by the status.
#[derive(Debug, Default)]
pub struct Planned {
    pub points: Vec<Point>,
    pub notes: Vec<String>,
}

/// The selection points one step past each final choice's edge, where its side has room.
fn past_edges(sweep: &Sweep, tune: &Tune, results: &[PointResult]) -> Result<Planned> {
    let mut plan = Planned::default();
    for c in choices(results, tune)? {
        if !c.complete {
            continue;
        }
        let tried: Vec<_> = c.tried.iter().map(|t| t.values.clone()).collect();
        let (Some(like), Some(best)) = (point_of(results, &c, tune), &c.best) else {
            continue;
        };
        for v in c.beyond_edges() {
            // The key this value moves, and towards which end.
            let Some(i) = (0..v.0.len()).find(|&i| v.0[i] != best.0[i]) else {
                continue;
            };
            let low = v.number(i) < best.number(i);
            if tune.beyond_grid(&tried, &v.0[i].0, low) >= tune.extend {
                continue;
            }
            for &seed in &tune.decl.selection_seeds {
                plan.points.push(sweep.derive(like, &v, seed)?);
            }
            plan.notes.push(format!(
                "{}'s best lies at an edge ({}): trying {} too",
                c.variant,
                c.edge_note(),
                v.label()
            ));
        }
    }
    Ok(plan)
}

/// The selection points of one refinement round.
fn midpoints(sweep: &Sweep, tune: &Tune, results: &[PointResult]) -> Result<Planned> {
    let mut plan = Planned::default();
    for c in choices(results, tune)? {
        let Some(like) = point_of(results, &c, tune) else {
            continue;
        };
        for v in c.midpoints(|v| tune.on_lattice(v)) {
            for &seed in &tune.decl.selection_seeds {
                plan.points.push(sweep.derive(like, &v, seed)?);
            }
            plan.notes.push(format!(
                "{}: refining around its best: trying {} too",
                c.variant,
                v.label()
            ));
        }
    }
    Ok(plan)
}

/// Each final choice's report points at its chosen values (a choice at an edge said so),
/// seed by seed: every layout's run of one seed before the next seed's, so that a study
/// stopped (or moved to another machine) between runs has whole pairs with its baseline,
/// each pair made by one machine, not one layout's seeds all here and the baseline's there.
fn report_points(sweep: &Sweep, tune: &Tune, results: &[PointResult]) -> Result<Planned> {
    let mut plan = Planned::default();
    let mut cells = Vec::new();
    for c in choices(results, tune)? {
        let Some(best) = c.best.as_ref().filter(|_| c.complete) else {
            plan.notes.push(format!(
                "{} has no final choice of {} (its selection runs are unfinished or every one diverged): no report runs for it",
                c.variant,
                tune.decl.keys.join(", ")
            ));
            continue;
        };
        if !c.edges.is_empty() {
            plan.notes.push(format!(
                "note: {}'s chosen {} lies at an edge ({}): the best may lie beyond; raise tune.extend or widen tune.grid",
                c.variant,
                best.label(),
                c.edge_note()
            ));
        }
        let Some(like) = point_of(results, &c, tune) else {
            continue;
        };
        cells.push((like, best.clone()));
    }
    for &seed in &tune.report_seeds {
        for (like, best) in &cells {
            plan.points.push(sweep.derive(like, best, seed)?);
        }
    }
    Ok(plan)
}

/// The results compared: a tuned sweep's report runs (not its selection runs), every
/// result of any other sweep.
pub fn compared<'a>(results: &'a [PointResult], sweep: &Sweep) -> Vec<&'a PointResult> {
    let selection = |r: &&PointResult| {
        sweep
            .tune
            .as_ref()
            .is_some_and(|t| t.decl.selection_seeds.contains(&r.point.cfg.optim.seed))
    };
    results.iter().filter(|r| !selection(r)).collect()
}

/// Writes `record` as the sweep's `tuning.json`, read back by [`TuningRecord::read`].
pub fn write_record(record: &TuningRecord, sweep_dir: &Path) -> Result<()> {
    tp_harness::util::write_atomic(
        &sweep_dir.join(crate::study::tuning_record::TUNING_FILE),
        crate::run_dir::versioned::to_json(record)?.as_bytes(),
    )
}

/// `tuning.json` of a tuned sweep: its declaration and each layout's choice.
pub fn record(results: &[PointResult], tune: &Tune) -> Result<TuningRecord> {
    let choices = match &tune.from {
        None => choices(results, tune)?
            .iter()
            .map(ChoiceRecord::of)
            .collect(),
        // The values came from another sweep: its choices for this sweep's layouts.
        Some(from) => {
            let theirs = TuningRecord::read(from)?
                .map(|r| r.choices)
                .unwrap_or_default();
            let mut mine: Vec<ChoiceRecord> = Vec::new();
            for r in results {
                let v = r.point.cfg.variant();
                if mine
                    .iter()
                    .any(|c| Variant::parse(&c.pattern).is_ok_and(|m| m == v))
                {
                    continue;
                }
                if let Some(c) = theirs
                    .iter()
                    .find(|c| Variant::parse(&c.pattern).is_ok_and(|p| p.stretches_to(&v)))
                {
                    mine.push(ChoiceRecord {
                        pattern: v.to_string(),
                        setting: crate::study::setting::Setting::tuned(
                            &r.point.cfg,
                            &tune.decl.keys,
                        )?
                        .label(),
                        tried: Vec::new(),
                        chosen: c.chosen.clone(),
                        complete: c.complete,
                        edges: c.edges.clone(),
                        source: Some(format!("{}'s {}", from.display(), c.pattern)),
                    });
                }
            }
            mine
        }
    };
    Ok(TuningRecord {
        decl: tune.decl.clone(),
        report_seeds: tune.report_seeds.clone(),
        from: tune.from.as_ref().map(|f| f.display().to_string()),
        choices,
    })
}
