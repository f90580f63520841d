//! `tp-sweep FILE --status`: where a sweep stands, read from its run directories without
//! running, locking or writing anything. A study that trains for days is followed from
//! this, not from hand-copied numbers: each round's runs (finished, diverged, training
//! now, to run), the time the listed runs (and a tuned sweep's report runs, known in
//! number before they are listed) still need at the median of finished runs like them
//! that had the cores to themselves, and for a tuned sweep the choices so far (the table
//! the sweep's summary ends with). A tuned sweep's rounds after one that has not ended are
//! not listed: which values they try depends on its results.

use super::existing::existing;
use super::runner::{ended, Ended, PointResult, Status};
use super::spec::{Point, Sweep};
use super::summary::SHARED;
use super::tune_spec::Tune;
use super::tuned::{self, Round};
use crate::analysis::stats::median;
use crate::analysis::table::Table;
use crate::run_dir::{DirLock, RunSummary};
use crate::study::setting::Setting;
use crate::study::tuning::Choice;
use anyhow::Result;
use std::path::Path;

/// What a point's run directory holds now.
enum State {
    Finished(Box<RunSummary>),
    Diverged(usize),
    /// Another process (the sweep's own tp-train) holds the run's lock.
    Training,
    /// Not finished and not training: the sweep runs it (resuming where it can).
    ToRun,
}

/// Reads `point`'s state under `out`, touching nothing. A directory holding a run of
/// another config is the error the sweep itself would stop on.
fn state(point: &Point, out: &Path, sweep: &Sweep) -> Result<State> {
    let dir = out.join(&point.name);
    let found = existing(point, &dir)?;
    Ok(match ended(point, &found, &dir, &sweep.reuse) {
        Some(Ended::Finished(s) | Ended::Reusable(_, s)) => State::Finished(s),
        Some(Ended::Diverged(d)) => State::Diverged(d.step),
        None if DirLock::held_elsewhere(&dir) => State::Training,
        None => State::ToRun,
    })
}

/// One round's points as results (unfinished ones `Pending`) and its row of counts.
struct RoundRead {
    results: Vec<PointResult>,
    label: String,
    /// Which of a tuned sweep's later rounds this is (`None`: the first).
    round: Option<Round>,
    finished: usize,
    diverged: usize,
    training: usize,
    /// Why the round tries what it tries (the sweep prints these as it runs it).
    notes: Vec<String>,
}

impl RoundRead {
    fn pending(&self) -> usize {
        self.results.len() - self.finished - self.diverged
    }
}

fn read_round(label: &str, points: &[Point], out: &Path, sweep: &Sweep) -> Result<RoundRead> {
    let mut read = RoundRead {
        results: Vec::with_capacity(points.len()),
        label: label.to_string(),
        round: None,
        finished: 0,
        diverged: 0,
        training: 0,
        notes: Vec::new(),
    };
    for p in points {
        let (status, summary) = match state(p, out, sweep)? {
            State::Finished(s) => {
                read.finished += 1;
                (Status::Skipped, Some(*s))
            }
            State::Diverged(step) => {
                read.diverged += 1;
                (Status::Diverged(step), None)
            }
            State::Training => {
                read.training += 1;
                (Status::Pending, None)
            }
            State::ToRun => (Status::Pending, None),
        };
        read.results.push(PointResult {
            point: p.clone(),
            dir: out.join(&p.name),
            status,
            summary,
        });
    }
    Ok(read)
}

fn round_label(r: Round) -> &'static str {
    match r {
        Round::PastEdge => "past an edge",
        Round::Refine => "refinement at the midpoints",
        Round::Report => "report seeds at each choice",
    }
}

/// The rounds a sweep has listed so far, read; and what follows them, unlisted.
fn read_rounds(sweep: &Sweep, out: &Path) -> Result<(Vec<RoundRead>, Option<String>)> {
    let tune = sweep.tune.as_ref().filter(|t| t.from.is_none());
    let first = match (tune, &sweep.tune) {
        (Some(_), _) => "selection grid",
        (None, Some(_)) => "report seeds at the values chosen in `tune.from`",
        (None, None) => "grid",
    };
    let mut rounds = vec![read_round(first, &sweep.points, out, sweep)?];
    let Some(t) = tune else {
        return Ok((rounds, None));
    };
    let mut last = None;
    if rounds[0].pending() == 0 {
        let results = rounds[0].results.clone();
        tuned::rounds(sweep, t, results, |r, plan| {
            let mut read = read_round(round_label(r), &plan.points, out, sweep)?;
            read.notes = plan.notes;
            read.round = Some(r);
            let ended = read.pending() == 0;
            let results = read.results.clone();
            rounds.push(read);
            last = Some(r);
            Ok(ended.then_some(results))
        })?;
    }
    let next = match last {
        Some(Round::Report) => None,
        Some(Round::Refine) => Some("report seeds"),
        _ if t.refine => {
            Some("rounds past an edge while a best lies at one, the refinement, the report seeds")
        }
        _ => Some("rounds past an edge while a best lies at one, the report seeds"),
    };
    Ok((
        rounds,
        next.map(|n| {
            format!("then: {n} (their values follow from the rounds above once they end)")
        }),
    ))
}

/// Each finished run among `all` as (its setting, tuned keys aside; whether it had the
/// cores to itself; its wall seconds), and the machines they ran on.
type Timed = (Vec<(Setting, bool, f64)>, Vec<String>);

fn timed_runs(all: &[PointResult], tuned_keys: &[String]) -> Result<Timed> {
    let mut finished = Vec::new();
    let mut machines: Vec<String> = Vec::new();
    for (r, sum) in all
        .iter()
        .filter_map(|r| r.summary.as_ref().map(|s| (r, s)))
    {
        // Runs slowed by sharing the cores (a build beside them) would make the
        // estimate read high: timed by the unshared ones where there are any.
        let alone = sum.sharing_slowdown.is_some_and(|x| x <= SHARED);
        finished.push((
            Setting::tuned(&r.point.cfg, tuned_keys)?,
            alone,
            sum.wall_seconds,
        ));
        let m = (sum.machine.clone()).unwrap_or_else(|| "a machine not recorded".into());
        if !machines.contains(&m) {
            machines.push(m);
        }
    }
    Ok((finished, machines))
}

/// The seconds runs of the settings `to_run` need: each at the median wall time of the
/// `finished` runs of its setting that had the cores to themselves (all of them where
/// none did). `None` where some setting has no finished run to go by.
fn seconds(finished: &[(Setting, bool, f64)], to_run: &[Setting]) -> Option<f64> {
    let mut total = 0.0;
    for s in to_run {
        let like: Vec<_> = finished.iter().filter(|f| f.0 == *s).collect();
        let any_alone = like.iter().any(|f| f.1);
        let walls = like.iter().filter(|f| f.1 || !any_alone).map(|f| f.2);
        total += median(walls.collect())?;
    }
    Some(total)
}

/// Where a tuned sweep's report round is not listed yet: its runs (each final choice's
/// setting once a report seed), known before the rounds ahead of it end, unlike theirs.
fn report_runs(rounds: &[RoundRead], choices: &[Choice], t: &Tune) -> Vec<Setting> {
    if rounds.iter().any(|r| r.round == Some(Round::Report)) {
        return Vec::new();
    }
    (choices.iter())
        .flat_map(|c| vec![c.setting.clone(); t.report_seeds.len()])
        .collect()
}

/// The time still to go: the unfinished runs listed (among `results`), and a tuned
/// sweep's report runs where they are not listed yet (their number is known; the rounds
/// before them may add runs that are not).
fn time_text(
    rounds: &[RoundRead],
    results: &[PointResult],
    tuning: Option<(&Tune, &[Choice])>,
    sweep: &Sweep,
) -> Result<String> {
    let keys: &[String] = sweep.tune.as_ref().map_or(&[], |t| &t.decl.keys);
    let pending: Vec<Setting> = (results.iter())
        .filter(|r| r.status == Status::Pending)
        .map(|r| Setting::tuned(&r.point.cfg, keys))
        .collect::<Result<_>>()?;
    let report = tuning.map_or(Vec::new(), |(t, c)| report_runs(rounds, c, t));
    if pending.is_empty() && report.is_empty() {
        return Ok("\nEvery run listed has ended.\n".into());
    }
    let (finished, machines) = timed_runs(results, keys)?;
    let (now, later) = (seconds(&finished, &pending), seconds(&finished, &report));
    let need = |s: Option<f64>| {
        s.map_or("are not timed yet".into(), |s| {
            format!("need about {:.1} hours more", s / 3600.0)
        })
    };
    let mut text = match pending.len() {
        0 => "\nEvery run listed has ended".to_string(),
        n => format!("\nThe {n} unfinished runs listed {}", need(now)),
    };
    if !report.is_empty() {
        text += &format!(
            "; the report seeds' {} runs (not listed yet) {}",
            report.len(),
            need(later)
        );
        // Past an edge while a best lies at one (then the refinement): their runs
        // follow from results not in yet.
        let refined = rounds.iter().any(|r| r.round == Some(Round::Refine));
        if !refined {
            text += match tuning.is_some_and(|(t, _)| t.refine) {
                true => "; the rounds before them (past an edge, the refinement) add theirs",
                false => "; rounds past an edge before them add theirs",
            };
        }
    }
    if now.is_some() || later.is_some() {
        text += &format!(" (each run at the median wall time, evaluations included, of the finished runs of its setting that had the cores to themselves, a sharing slowdown of at most {SHARED}, where any did; on {})", machines.join("; "));
    } else {
        text += " (no run of their settings has finished yet to time them by)";
    }
    Ok(text + ".\n")
}

/// The status of `sweep` run into `out`, as text for a terminal (markdown tables).
pub fn status(sweep: &Sweep, out: &Path) -> Result<String> {
    let (rounds, next) = read_rounds(sweep, out)?;
    let mut t = Table::new([
        "round",
        "runs",
        "finished",
        "diverged",
        "training now",
        "to run",
    ]);
    for r in &rounds {
        t.row([
            r.label.clone(),
            r.results.len().to_string(),
            r.finished.to_string(),
            r.diverged.to_string(),
            r.training.to_string(),
            (r.pending() - r.training).to_string(),
        ]);
    }
    let mut text = format!("{} ({}):\n\n{}", sweep.name, out.display(), t.markdown());
    let notes: Vec<String> = (rounds.iter())
        .flat_map(|r| r.notes.iter().map(|n| format!("- {}: {n}\n", r.label)))
        .collect();
    if !notes.is_empty() {
        text += &format!("\n{}", notes.concat());
    }
    if let Some(n) = &next {
        text += &format!("\n{n}\n");
    }
    if let Some(m) = &sweep.more_seeds {
        text += &format!(
            "then: a seed at a time while a group's paired 95% interval is wider than ±{} (up to {} seeds)\n",
            m.until_ci95, m.max_seeds
        );
    }
    let results: Vec<PointResult> = rounds.iter().flat_map(|r| r.results.clone()).collect();
    let tune = sweep.tune.as_ref().filter(|t| t.from.is_none());
    let choices = tune.map(|t| tuned::choices(&results, t)).transpose()?;
    let tuning = tune.zip(choices.as_deref());
    text += &time_text(&rounds, &results, tuning, sweep)?;
    if let Some(c) = &choices {
        text += &format!(
            "\n## Tuning so far\n\n{}",
            crate::study::tuned_study::markdown(c)
        );
    }
    Ok(text)
}
