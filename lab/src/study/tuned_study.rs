//! A study's runs with tuned sweeps among them, made ready for the penalty table: each
//! tuned run in its tuned setting, the selection runs set apart to choose each layout's
//! values ([`super::tuning::choose`]), only report runs at the chosen values compared;
//! and the tuning table and the penalty rows' notes of the choices.

use super::penalty::{PenaltyRow, PenaltyRun};
use super::setting::ChosenBy;
use super::tuning::{choose, Choice, TuneRun, TunedValues};
use super::tuning_between as between;
use super::tuning_record::TuningRecord;
use crate::analysis::table::Table;
use crate::config::Variant;
use crate::run_dir::read_config;
use anyhow::Result;
use std::path::{Path, PathBuf};

/// The runs of a study, tuned sweeps' among them, made ready for the penalty table.
#[derive(Debug, Clone, Default)]
pub struct TunedStudy {
    /// What is compared: every untuned run, and each tuned layout's report runs at its
    /// chosen values.
    pub compared: Vec<PenaltyRun>,
    /// Each tuned layout's choice.
    pub choices: Vec<Choice>,
    /// Runs given but not compared, and why (report runs at a value not chosen, runs of
    /// a layout whose choice is not final).
    pub left_out: Vec<String>,
    /// The directories of tuned sweeps' runs that are not compared: their selection
    /// runs, and report runs left out (figures of the compared runs leave them out too).
    pub set_apart: Vec<PathBuf>,
}

/// One tuned sweep among the directories given: its record and its runs.
struct TunedSweep<'a> {
    dir: PathBuf,
    record: TuningRecord,
    runs: Vec<&'a PathBuf>,
}

/// Loads `dirs` for the penalty table: each run of a tuned sweep (one with a
/// `tuning.json` beside it) in its tuned setting, its selection runs set apart to
/// choose each layout's values, and only report runs at the chosen values compared.
/// Unfinished runs are left out (`left_out` says so).
pub fn load_study(dirs: &[PathBuf]) -> Result<TunedStudy> {
    load_study_each_at(dirs, &[])
}

/// [`load_study`], or with `each_at` keys (`tp-plot --penalty --each-at KEY`) every run
/// compared at the values of those keys it was given, no tuning record consulted: each
/// layout at a value picked by hand (a check at another rate), its setting saying so.
pub fn load_study_each_at(dirs: &[PathBuf], each_at: &[String]) -> Result<TunedStudy> {
    let mut study = TunedStudy::default();
    if !each_at.is_empty() {
        for d in dirs {
            match PenaltyRun::load(d, each_at)? {
                Some(mut r) => {
                    r.setting.chosen_by = ChosenBy::Hand;
                    study.compared.push(r);
                }
                None => study.left_out.push(unfinished(d)),
            }
        }
        return Ok(study);
    }
    let mut sweeps: Vec<TunedSweep> = Vec::new();
    for d in dirs {
        match TuningRecord::of_run(d)? {
            Some((dir, record)) => match sweeps.iter_mut().find(|s| s.dir == dir) {
                Some(s) => s.runs.push(d),
                None => sweeps.push(TunedSweep {
                    dir,
                    record,
                    runs: vec![d],
                }),
            },
            None => match PenaltyRun::load(d, &[])? {
                Some(r) => study.compared.push(r),
                None => study.left_out.push(unfinished(d)),
            },
        }
    }
    for sweep in &sweeps {
        add_tuned_sweep(&mut study, sweep)?;
    }
    Ok(study)
}

fn unfinished(d: &Path) -> String {
    format!("{}: not finished (no final val loss)", d.display())
}

/// A tuned sweep's choices and its report runs at them into `study`.
fn add_tuned_sweep(study: &mut TunedStudy, sweep: &TunedSweep) -> Result<()> {
    let (record, keys) = (&sweep.record, &sweep.record.decl.keys);
    let mut choices = match &record.from {
        // Chosen by another sweep: the record carries each layout's values.
        Some(_) => Vec::new(),
        None => {
            let runs = sweep
                .runs
                .iter()
                .map(|d| TuneRun::load(d, keys))
                .collect::<Result<Vec<_>>>()?;
            choose(&runs, &record.decl)
        }
    };
    for &d in &sweep.runs {
        if record
            .decl
            .selection_seeds
            .contains(&read_config(d)?.optim.seed)
        {
            study.set_apart.push(d.clone());
            continue;
        }
        let Some(mut run) = PenaltyRun::load(d, keys)? else {
            study.left_out.push(unfinished(d));
            continue;
        };
        // Values another sweep chose: this setting did not tune them, and says so.
        if record.from.is_some() {
            run.setting.chosen_by = ChosenBy::Borrowed;
        }
        if record.from.is_some() && !choices.iter().any(|c| is_of(c, &run)) {
            choices.push(carried_choice(record, &run));
        }
        // Report runs given without their sweep's selection runs: the choice the sweep
        // recorded (tuning.json) when it made it, in this run's setting.
        if record.from.is_none() && !choices.iter().any(|c| is_of(c, &run)) {
            if let Some(c) = recorded_choice(record, &run) {
                choices.push(c);
            }
        }
        let values = TunedValues::of(&read_config(d)?, keys)?;
        let choice = choices.iter().find(|c| is_of(c, &run));
        match choice.map(|c| (c, c.complete, c.best.as_ref())) {
            Some((_, true, Some(best))) if *best == values => {
                study.compared.push(run);
                continue;
            }
            Some((_, true, Some(best))) => study.left_out.push(format!(
                "{}: at {}, not {}'s chosen {}",
                d.display(),
                values.label(),
                run.variant,
                best.label()
            )),
            Some(_) => study.left_out.push(format!(
                "{}: {}'s choice of {} in {} is not final yet (its selection runs are unfinished)",
                d.display(),
                run.variant,
                keys.join(", "),
                sweep.dir.display()
            )),
            None => study.left_out.push(format!(
                "{}: {} has no selection runs in {} to choose its {} (give them too)",
                d.display(),
                run.variant,
                sweep.dir.display(),
                keys.join(", ")
            )),
        }
        study.set_apart.push(d.clone());
    }
    study.choices.extend(choices);
    Ok(())
}

/// Whether `c` is the choice of `run`'s layout in its setting.
fn is_of(c: &Choice, run: &PenaltyRun) -> bool {
    c.setting == run.setting && c.variant == run.variant
}

/// The choice another sweep made for `run`'s layout, as a sweep with `tune.from`
/// records it.
fn carried_choice(record: &TuningRecord, run: &PenaltyRun) -> Choice {
    let carried = record
        .choices
        .iter()
        .find(|c| Variant::parse(&c.pattern).is_ok_and(|v| v == run.variant));
    Choice {
        setting: run.setting.clone(),
        variant: run.variant.clone(),
        tried: Vec::new(),
        best: carried.and_then(|c| c.chosen.clone()),
        complete: true,
        edges: carried.map(|c| c.edges.clone()).unwrap_or_default(),
        source: carried
            .and_then(|c| c.source.clone())
            .or(record.from.clone()),
    }
}

/// The choice a sweep's own record holds for `run`'s layout in `run`'s setting, as the
/// sweep made it from its selection runs.
fn recorded_choice(record: &TuningRecord, run: &PenaltyRun) -> Option<Choice> {
    let label = run.setting.label();
    let c = record.choices.iter().find(|c| {
        c.setting == label && Variant::parse(&c.pattern).is_ok_and(|v| v == run.variant)
    })?;
    Some(Choice {
        setting: run.setting.clone(),
        variant: run.variant.clone(),
        tried: c.tried.clone(),
        best: c.chosen.clone(),
        complete: c.complete,
        edges: c.edges.clone(),
        source: c.source.clone(),
    })
}

/// What a tuned row of the penalty table says of its choice: the value, what was tried,
/// and an edge.
pub fn row_note(c: &Choice) -> String {
    let chosen = c.best.as_ref().map_or("-".into(), TunedValues::short);
    let grid = match (c.tried.first(), c.tried.last()) {
        (Some(a), Some(b)) if c.tried.len() > 1 => format!(
            " of {} ({}..{})",
            c.tried.len(),
            a.values.short(),
            b.values.short()
        ),
        _ => String::new(),
    };
    let from = c
        .source
        .as_ref()
        .map_or(String::new(), |s| format!(" from {s}"));
    let edge = if c.edges.is_empty() {
        ""
    } else {
        ", at an edge"
    };
    format!("{chosen}{grid}{from}{edge}")
}

/// Gives each tuned row of the penalty table its choice (`PenaltyRow::tuned`).
pub fn annotate(rows: &mut [PenaltyRow], choices: &[Choice]) {
    for r in rows.iter_mut() {
        if let Some(c) = choices
            .iter()
            .find(|c| c.setting == r.setting && c.variant == r.variant)
        {
            r.tuned = Some(row_note(c));
        }
    }
}

/// `tuning.md` / `tuning.csv`: per setting, layout and value tried, the selection seeds'
/// losses, and which value each layout took.
pub fn table(choices: &[Choice]) -> Table {
    let mut t = Table::new([
        "setting",
        "pattern",
        "values",
        "n",
        "final val loss, mean ± sd",
        "not eligible",
        "pending",
        "chosen",
        "between grid points (exploratory)",
    ]);
    for c in choices {
        for tr in &c.tried {
            let stats = tr.stats();
            let is_best = c.best.as_ref() == Some(&tr.values);
            let chosen = if is_best {
                match c.edges.is_empty() {
                    true => "best".to_string(),
                    false => format!("best ({})", c.edge_note()),
                }
            } else {
                String::new()
            };
            let seeds = |v: Vec<u64>| {
                let s: Vec<String> = v.iter().map(u64::to_string).collect();
                s.join(" ")
            };
            t.row([
                c.setting.label(),
                c.variant.to_string(),
                tr.values.label(),
                tr.losses.len().to_string(),
                stats.map_or("-".into(), |r| format!("{:.4} ± {:.4}", r.mean, r.std)),
                tr.rejection(),
                seeds(tr.pending.clone()),
                chosen,
                if is_best {
                    between::note(c)
                } else {
                    String::new()
                },
            ]);
        }
    }
    t
}

/// The markdown of [`table`], with how to read it.
pub fn markdown(choices: &[Choice]) -> String {
    format!(
        "Each layout's values tried on the selection seeds (final val loss over the whole validation split: mean ± sd over the seeds that finished), and the one chosen: the lowest mean among the eligible values. A value is not eligible where a selection seed diverged or stalled (ended more than the stall margin, 0.05 unless the sweep file says otherwise, above the best seed at that value): a rate on a stability edge is never chosen. A choice at the lowest or highest value tried may have its best beyond: extend the grid there. Between grid points: the lowest point of the parabola (in log value) through the chosen value's mean and its two neighbours', and its depth below the chosen mean, an order of magnitude for what a finer grid could still gain the layout (an interpolation of a few seeds' means: exploratory); not given where it is lopsided, one neighbour rising over 20 times the other's rise above the chosen mean (a cliff on one side or a flat floor on the other, where a parabola misplaces the lowest point). The selection seeds are not the report seeds the layouts are compared on.\n\n{}",
        table(choices).markdown()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::study::tuning::tests::{decl, run};
    use crate::study::tuning::Outcome;

    /// The row note says the value, what was tried and an edge.
    #[test]
    fn a_tuned_rows_note_names_its_value_its_grid_and_an_edge() {
        use Outcome::*;
        let runs: Vec<TuneRun> = ["0.001", "0.002", "0.004"]
            .iter()
            .enumerate()
            .flat_map(|(i, v)| [101, 102].map(|s| run("tttt", v, s, Loss(2.0 - 0.01 * i as f64))))
            .collect();
        let c = &choose(&runs, &decl())[0];
        assert_eq!(row_note(c), "0.004 of 3 (0.001..0.004), at an edge");
        let md = markdown(std::slice::from_ref(c));
        assert!(
            md.contains("| tttt | learning_rate 0.004 | 2 | 1.9800 ± 0.0000 |  |  | best (learning_rate at the highest value tried) |  |"),
            "{md}"
        );
    }
}
