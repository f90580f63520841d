//! Tuned comparisons: each layout at its own best value of the config keys a study tunes
//! (first of all `learning_rate`), so that a layout is never judged at a value that
//! happens to suit another one.
//!
//! A tuned study runs every layout over a grid of values on **selection** seeds and
//! chooses, per layout, the value with the lowest mean final val loss over them (a run
//! that diverged counts as worse than any that finished); then it runs **report** seeds,
//! disjoint from the selection seeds, at each layout's chosen value, and only those are
//! compared, best against best (the selection seeds chose the value, so their losses are
//! biased in its favour). A best at the edge of what was tried is flagged: the true best
//! may lie beyond it, and the grid is extended there ([`Choice::beyond_edges`]).
//!
//! The declaration (keys, selection seeds) travels in the sweep's `tuning.json`
//! ([`TuningRecord`]) beside its run directories; tables and figures recompute the choice
//! from the runs themselves with [`choose`], the one place a value is chosen.

use super::penalty::{PenaltyRow, PenaltyRun};
use super::setting::Setting;
use super::stats::Replicates;
use super::table::Table;
use super::variant::Variant;
use crate::config::RunConfig;
use crate::error::user;
use crate::run_dir::{read_config, read_diverged, read_summary, versioned};
use anyhow::Result;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// A tuned sweep's record, beside its run directories.
pub const TUNING_FILE: &str = "tuning.json";

/// One value of each tuned key, in the order the study declares the keys, each as its
/// run's config.yaml writes it (`0.004`), so that runs at one value compare equal.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TunedValues(pub Vec<(String, String)>);

impl TunedValues {
    /// The values of `keys` in `cfg`.
    pub fn of(cfg: &RunConfig, keys: &[String]) -> Result<Self> {
        let serde_yaml_ng::Value::Mapping(map) = serde_yaml_ng::to_value(cfg)? else {
            unreachable!("a config serialises to a mapping")
        };
        keys.iter()
            .map(|k| match map.get(k.as_str()) {
                Some(v) => Ok((k.clone(), yaml_text(v))),
                None => Err(user(format!(
                    "`{k}` is not a config key: tune keys of the run configuration (e.g. learning_rate)"
                ))),
            })
            .collect::<Result<Vec<_>>>()
            .map(Self)
    }

    /// The value of key `i` as a number, where it is one.
    pub fn number(&self, i: usize) -> Option<f64> {
        self.0.get(i)?.1.parse().ok()
    }

    /// `learning_rate 0.004` (keys joined by `, `).
    pub fn label(&self) -> String {
        let parts: Vec<String> = self.0.iter().map(|(k, v)| format!("{k} {v}")).collect();
        parts.join(", ")
    }

    /// The values alone: `0.004`, or `0.004/200` for several keys.
    pub fn short(&self) -> String {
        let parts: Vec<&str> = self.0.iter().map(|(_, v)| v.as_str()).collect();
        parts.join("/")
    }

    /// Orders values key by key, numerically where both are numbers.
    fn cmp_values(&self, other: &Self) -> std::cmp::Ordering {
        for i in 0..self.0.len().min(other.0.len()) {
            let o = match (self.number(i), other.number(i)) {
                (Some(a), Some(b)) => a.total_cmp(&b),
                _ => self.0[i].1.cmp(&other.0[i].1),
            };
            if o.is_ne() {
                return o;
            }
        }
        self.0.len().cmp(&other.0.len())
    }
}

/// A config value as config.yaml writes it.
fn yaml_text(v: &serde_yaml_ng::Value) -> String {
    match v {
        serde_yaml_ng::Value::String(s) => s.clone(),
        other => serde_yaml_ng::to_string(other)
            .unwrap_or_default()
            .trim()
            .to_string(),
    }
}

/// What a study tunes, and the seeds that choose the values.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TuneDecl {
    pub keys: Vec<String>,
    /// The seeds that choose each layout's values; empty where the values were chosen
    /// by another sweep (`from`).
    pub selection_seeds: Vec<u64>,
}

/// How a run ended, as tuning counts it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Outcome {
    /// Its final val loss (the whole split's with `final_eval: full`).
    Loss(f64),
    /// It stopped on a non-finite loss or gradient norm at this step: worse than any
    /// finished run.
    Diverged { step: usize },
    /// Not finished (still to run, running, or failed): the choice waits for it.
    Pending,
}

/// A run as tuning sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct TuneRun {
    pub setting: Setting,
    pub variant: Variant,
    pub values: TunedValues,
    pub seed: u64,
    pub outcome: Outcome,
}

impl TuneRun {
    /// The run of config `cfg` ended as `outcome`, in a study tuning `keys`.
    pub fn new(cfg: &RunConfig, keys: &[String], outcome: Outcome) -> Result<Self> {
        Ok(Self {
            setting: Setting::tuned(cfg, keys)?,
            variant: Variant::of(cfg)?,
            values: TunedValues::of(cfg, keys)?,
            seed: cfg.optim.seed,
            outcome,
        })
    }

    /// The run in `dir`.
    pub fn load(dir: &Path, keys: &[String]) -> Result<Self> {
        let cfg = read_config(dir)?;
        let outcome = match (read_summary(dir)?, read_diverged(dir)?) {
            (Some(s), _) => s
                .final_val_loss
                .map_or(Outcome::Pending, |l| Outcome::Loss(l as f64)),
            (None, Some(d)) => Outcome::Diverged { step: d.step },
            (None, None) => Outcome::Pending,
        };
        Self::new(&cfg, keys, outcome)
    }
}

/// One value tried for a layout, over the selection seeds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Tried {
    pub values: TunedValues,
    /// (seed, final val loss) of the runs that finished.
    pub losses: Vec<(u64, f64)>,
    /// (seed, step) of the runs that diverged.
    pub diverged: Vec<(u64, usize)>,
    /// Seeds still to finish.
    pub pending: Vec<u64>,
}

impl Tried {
    /// Every selection seed finished or diverged.
    pub fn complete(&self) -> bool {
        self.pending.is_empty()
    }

    /// What the choice minimises: the mean final val loss over the selection seeds,
    /// infinite if any of them diverged.
    pub fn score(&self) -> f64 {
        match (self.diverged.is_empty(), self.stats()) {
            (true, Some(r)) => r.mean,
            _ => f64::INFINITY,
        }
    }

    /// The finished runs' losses: mean, spread, n.
    pub fn stats(&self) -> Option<Replicates> {
        Replicates::of(&self.losses.iter().map(|l| l.1).collect::<Vec<_>>())
    }
}

/// Which end of what was tried a chosen value lies at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Edge {
    Low,
    High,
}

/// A layout's choice in one setting.
#[derive(Debug, Clone, PartialEq)]
pub struct Choice {
    pub setting: Setting,
    pub variant: Variant,
    /// Every value tried, in ascending order.
    pub tried: Vec<Tried>,
    /// The value with the lowest [`Tried::score`] among those complete; `None` until one
    /// is (or where every one diverged).
    pub best: Option<TunedValues>,
    /// Every value tried has all its selection seeds: the choice is final.
    pub complete: bool,
    /// The tuned keys whose best value is the lowest or highest tried (of two or more):
    /// the best may lie beyond.
    pub edges: Vec<(String, Edge)>,
    /// Where the values were chosen, for a choice another sweep made (`from`).
    pub source: Option<String>,
}

impl Choice {
    /// The values one step beyond each edge the best lies at: the next value of the
    /// grid's own progression (geometric where the values are positive numbers, else
    /// arithmetic; whole numbers stay whole), the other keys kept at the best's.
    pub fn beyond_edges(&self) -> Vec<TunedValues> {
        let Some(best) = &self.best else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for (key, edge) in &self.edges {
            let Some(i) = best.0.iter().position(|(k, _)| k == key) else {
                continue;
            };
            let line = self.line_through(best, i);
            let Some(at) = best.number(i) else { continue };
            // The nearest value tried on the other side.
            let neighbour = line
                .iter()
                .filter(|v| match edge {
                    Edge::Low => **v > at,
                    Edge::High => **v < at,
                })
                .min_by(|a, b| (*a - at).abs().total_cmp(&(*b - at).abs()));
            let Some(&n) = neighbour else { continue };
            let next = if at > 0.0 && n > 0.0 {
                at * (at / n)
            } else {
                at + (at - n)
            };
            let whole = self
                .tried
                .iter()
                .all(|t| t.values.0[i].1.parse::<i64>().is_ok());
            let text = if whole {
                format!("{}", next.round() as i64)
            } else {
                let rounded: f64 = format!("{next:.3e}").parse().unwrap_or(next);
                yaml_text(&serde_yaml_ng::Value::from(rounded))
            };
            let mut v = best.clone();
            v.0[i].1 = text;
            if !self.tried.iter().any(|t| t.values == v) && !out.contains(&v) {
                out.push(v);
            }
        }
        out
    }

    /// The numbers tried for key `i` with every other key at `best`'s values.
    fn line_through(&self, best: &TunedValues, i: usize) -> Vec<f64> {
        self.tried
            .iter()
            .filter(|t| {
                t.values
                    .0
                    .iter()
                    .zip(&best.0)
                    .enumerate()
                    .all(|(j, (a, b))| j == i || a == b)
            })
            .filter_map(|t| t.values.number(i))
            .collect()
    }

    /// `0.004 (low edge of 0.004-0.016)`-style note on the edges, empty when inside.
    pub fn edge_note(&self) -> String {
        let notes: Vec<String> = self
            .edges
            .iter()
            .map(|(k, e)| match e {
                Edge::Low => format!("{k} at the lowest value tried"),
                Edge::High => format!("{k} at the highest value tried"),
            })
            .collect();
        notes.join("; ")
    }
}

/// Each layout's choice, per setting, from the selection runs among `runs` (those whose
/// seed is a selection seed of `decl`); settings and layouts in order.
pub fn choose(runs: &[TuneRun], decl: &TuneDecl) -> Vec<Choice> {
    let selection: Vec<&TuneRun> = runs
        .iter()
        .filter(|r| decl.selection_seeds.contains(&r.seed))
        .collect();
    let mut families: Vec<(&Setting, &Variant)> = Vec::new();
    for r in &selection {
        if !families.contains(&(&r.setting, &r.variant)) {
            families.push((&r.setting, &r.variant));
        }
    }
    families.sort();
    families
        .into_iter()
        .map(|(setting, variant)| {
            let members: Vec<&&TuneRun> = selection
                .iter()
                .filter(|r| &r.setting == setting && &r.variant == variant)
                .collect();
            let mut tried: Vec<Tried> = Vec::new();
            for r in &members {
                if tried.iter().any(|t| t.values == r.values) {
                    continue;
                }
                let at: Vec<&&&TuneRun> = members.iter().filter(|m| m.values == r.values).collect();
                let mut t = Tried {
                    values: r.values.clone(),
                    losses: Vec::new(),
                    diverged: Vec::new(),
                    pending: Vec::new(),
                };
                for &seed in &decl.selection_seeds {
                    match at.iter().find(|m| m.seed == seed).map(|m| m.outcome) {
                        Some(Outcome::Loss(l)) => t.losses.push((seed, l)),
                        Some(Outcome::Diverged { step }) => t.diverged.push((seed, step)),
                        Some(Outcome::Pending) | None => t.pending.push(seed),
                    }
                }
                tried.push(t);
            }
            tried.sort_by(|a, b| a.values.cmp_values(&b.values));
            let best = tried
                .iter()
                .filter(|t| t.complete() && t.score().is_finite())
                .min_by(|a, b| a.score().total_cmp(&b.score()))
                .map(|t| t.values.clone());
            let mut choice = Choice {
                setting: setting.clone(),
                variant: variant.clone(),
                complete: tried.iter().all(Tried::complete),
                tried,
                best,
                edges: Vec::new(),
                source: None,
            };
            choice.edges = edges(&choice, &decl.keys);
            choice
        })
        .collect()
}

/// The keys whose best value is at an end of its line of two or more values tried.
fn edges(c: &Choice, keys: &[String]) -> Vec<(String, Edge)> {
    let Some(best) = &c.best else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (i, key) in keys.iter().enumerate() {
        let line = c.line_through(best, i);
        let Some(at) = best.number(i) else { continue };
        let (lo, hi) = line
            .iter()
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), v| {
                (l.min(*v), h.max(*v))
            });
        if lo == hi {
            continue;
        }
        if at == lo {
            out.push((key.clone(), Edge::Low));
        } else if at == hi {
            out.push((key.clone(), Edge::High));
        }
    }
    out
}

/// A tuned sweep's record (`tuning.json`): what it tunes, on which seeds, and each
/// layout's choice as the sweep last made it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TuningRecord {
    #[serde(flatten)]
    pub decl: TuneDecl,
    /// The seeds the layouts are compared on, at their chosen values.
    pub report_seeds: Vec<u64>,
    /// The sweep whose choices this one took, for a sweep that tuned nothing itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    pub choices: Vec<ChoiceRecord>,
}

/// One layout's choice in a [`TuningRecord`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChoiceRecord {
    /// The layout as typed (`3xsppp`, `12xt+int8`).
    pub pattern: String,
    /// The setting, as tables label it.
    pub setting: String,
    pub tried: Vec<Tried>,
    pub chosen: Option<TunedValues>,
    pub complete: bool,
    pub edges: Vec<(String, Edge)>,
    /// Where the values were chosen, where another sweep chose them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
}

impl ChoiceRecord {
    pub fn of(c: &Choice) -> Self {
        Self {
            pattern: c.variant.to_string(),
            setting: c.setting.label(),
            tried: c.tried.clone(),
            chosen: c.best.clone(),
            complete: c.complete,
            edges: c.edges.clone(),
            source: c.source.clone(),
        }
    }
}

impl TuningRecord {
    /// The record of the sweep in `sweep_dir`, if it is a tuned one.
    pub fn read(sweep_dir: &Path) -> Result<Option<Self>> {
        let path = sweep_dir.join(TUNING_FILE);
        match std::fs::read_to_string(&path) {
            Ok(text) => versioned::from_json(&text, &path).map(Some),
            Err(_) => Ok(None),
        }
    }

    /// The record of the tuned sweep a run directory belongs to (its parent's), if any.
    pub fn of_run(dir: &Path) -> Result<Option<(PathBuf, Self)>> {
        let Some(parent) = dir.parent() else {
            return Ok(None);
        };
        Ok(Self::read(parent)?.map(|r| (parent.to_path_buf(), r)))
    }
}

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

/// Loads `dirs` for the penalty table: each run of a tuned sweep (one with a
/// `tuning.json` beside it) in its tuned setting, its selection runs set apart to
/// choose each layout's values, and only report runs at the chosen values compared.
/// Unfinished runs are left out (`left_out` says so).
pub fn load_study(dirs: &[PathBuf]) -> Result<TunedStudy> {
    let mut study = TunedStudy::default();
    // (sweep dir, record, its runs' dirs)
    let mut sweeps: Vec<(PathBuf, TuningRecord, Vec<&PathBuf>)> = Vec::new();
    for d in dirs {
        match TuningRecord::of_run(d)? {
            Some((sweep, record)) => match sweeps.iter_mut().find(|s| s.0 == sweep) {
                Some(s) => s.2.push(d),
                None => sweeps.push((sweep, record, vec![d])),
            },
            None => match PenaltyRun::load(d, &[])? {
                Some(r) => study.compared.push(r),
                None => eprintln!(
                    "{}: not finished (no final val loss), left out",
                    d.display()
                ),
            },
        }
    }
    for (sweep, record, members) in sweeps {
        let keys = &record.decl.keys;
        let mut choices = match &record.from {
            // Chosen by another sweep: the record carries each layout's values.
            Some(_) => Vec::new(),
            None => {
                let runs = members
                    .iter()
                    .map(|d| TuneRun::load(d, keys))
                    .collect::<Result<Vec<_>>>()?;
                choose(&runs, &record.decl)
            }
        };
        for d in members {
            let Some(run) = PenaltyRun::load(d, keys)? else {
                if !record
                    .decl
                    .selection_seeds
                    .contains(&read_config(d)?.optim.seed)
                {
                    eprintln!(
                        "{}: not finished (no final val loss), left out",
                        d.display()
                    );
                }
                continue;
            };
            if record.decl.selection_seeds.contains(&run.seed) {
                continue;
            }
            let values = TunedValues::of(&read_config(d)?, keys)?;
            if record.from.is_some()
                && !choices
                    .iter()
                    .any(|c: &Choice| c.setting == run.setting && c.variant == run.variant)
            {
                let carried = record
                    .choices
                    .iter()
                    .find(|c| Variant::parse(&c.pattern).is_ok_and(|v| v == run.variant));
                choices.push(Choice {
                    setting: run.setting.clone(),
                    variant: run.variant.clone(),
                    tried: Vec::new(),
                    best: carried.and_then(|c| c.chosen.clone()),
                    complete: true,
                    edges: carried.map(|c| c.edges.clone()).unwrap_or_default(),
                    source: carried
                        .and_then(|c| c.source.clone())
                        .or(record.from.clone()),
                });
            }
            let choice = choices
                .iter()
                .find(|c| c.setting == run.setting && c.variant == run.variant);
            let compared = choice.is_some_and(|c| c.complete && c.best.as_ref() == Some(&values));
            if !compared {
                study.set_apart.push(d.clone());
            }
            match choice {
                Some(_) if compared => study.compared.push(run),
                Some(c) if !c.complete || c.best.is_none() => study.left_out.push(format!(
                    "{}: {}'s choice of {} in {} is not final yet (its selection runs are unfinished)",
                    d.display(),
                    run.variant,
                    keys.join(", "),
                    sweep.display()
                )),
                Some(c) => study.left_out.push(format!(
                    "{}: at {}, not {}'s chosen {}",
                    d.display(),
                    values.label(),
                    run.variant,
                    c.best.as_ref().map_or("-".into(), TunedValues::label)
                )),
                None => study.left_out.push(format!(
                    "{}: {} has no selection runs in {} to choose its {} (give them too)",
                    d.display(),
                    run.variant,
                    sweep.display(),
                    keys.join(", ")
                )),
            }
        }
        study.choices.extend(choices);
    }
    Ok(study)
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
        "diverged",
        "pending",
        "chosen",
    ]);
    for c in choices {
        for tr in &c.tried {
            let stats = tr.stats();
            let chosen = if c.best.as_ref() == Some(&tr.values) {
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
                seeds(tr.diverged.iter().map(|d| d.0).collect()),
                seeds(tr.pending.clone()),
                chosen,
            ]);
        }
    }
    t
}

/// The markdown of [`table`], with how to read it.
pub fn markdown(choices: &[Choice]) -> String {
    format!(
        "Each layout's values tried on the selection seeds (final val loss over the whole validation split: mean ± sd over the seeds that finished; a seed that diverged makes a value worse than any that finished), and the one chosen: the lowest mean. A choice at the lowest or highest value tried may have its best beyond: extend the grid there. The selection seeds are not the report seeds the layouts are compared on.\n\n{}",
        table(choices).markdown()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::setting::tests::setting;

    fn lr(v: &str) -> TunedValues {
        TunedValues(vec![("learning_rate".into(), v.into())])
    }

    fn run(variant: &str, v: &str, seed: u64, outcome: Outcome) -> TuneRun {
        TuneRun {
            setting: setting(2),
            variant: Variant::parse(variant).unwrap(),
            values: lr(v),
            seed,
            outcome,
        }
    }

    fn decl() -> TuneDecl {
        TuneDecl {
            keys: vec!["learning_rate".into()],
            selection_seeds: vec![101, 102],
        }
    }

    /// tttt: 0.002 has the lowest mean of the two selection seeds (the report seed 1 at
    /// 0.001 is not counted, though its loss is lower still); it lies inside the grid.
    /// pppp: 0.004's finished seed is the best loss of all, but its other seed diverged,
    /// so 0.004 loses to every value that finished: 0.002 (mean 1.95 against 1.96).
    #[test]
    fn each_layout_takes_the_value_with_the_lowest_selection_mean_and_a_divergence_loses() {
        use Outcome::*;
        let runs = vec![
            run("tttt", "0.001", 101, Loss(1.90)),
            run("tttt", "0.001", 102, Loss(1.92)),
            run("tttt", "0.002", 101, Loss(1.86)),
            run("tttt", "0.002", 102, Loss(1.88)),
            run("tttt", "0.004", 101, Loss(1.87)),
            run("tttt", "0.004", 102, Loss(1.90)),
            run("tttt", "0.001", 1, Loss(1.50)),
            run("pppp", "0.001", 101, Loss(1.95)),
            run("pppp", "0.001", 102, Loss(1.97)),
            run("pppp", "0.002", 101, Loss(1.93)),
            run("pppp", "0.002", 102, Loss(1.97)),
            run("pppp", "0.004", 101, Loss(1.80)),
            run("pppp", "0.004", 102, Diverged { step: 900 }),
        ];
        let choices = choose(&runs, &decl());
        let find = |v: &str| choices.iter().find(|c| c.variant.to_string() == v).unwrap();
        let t = find("tttt");
        assert_eq!(t.best, Some(lr("0.002")));
        assert!(t.complete && t.edges.is_empty(), "{t:?}");
        assert_eq!(t.tried.len(), 3, "the report seed is not a value tried");
        assert!((t.tried[1].score() - 1.87).abs() < 1e-12);
        let p = find("pppp");
        assert!(p.tried[2].score().is_infinite());
        assert_eq!(p.best, Some(lr("0.002")));
        assert!(p.edges.is_empty(), "0.004 was tried: 0.002 lies inside");
    }

    /// A best at the highest value tried is an edge, and the next value continues the
    /// grid's ratio (x2); at the lowest, it halves; whole-number keys stay whole.
    #[test]
    fn a_best_at_an_edge_is_flagged_and_the_grid_continues_past_it() {
        use Outcome::*;
        let runs = vec![
            run("tttt", "0.004", 101, Loss(1.90)),
            run("tttt", "0.004", 102, Loss(1.90)),
            run("tttt", "0.008", 101, Loss(1.85)),
            run("tttt", "0.008", 102, Loss(1.86)),
            run("pppp", "0.004", 101, Loss(1.80)),
            run("pppp", "0.004", 102, Loss(1.81)),
            run("pppp", "0.008", 101, Loss(1.85)),
            run("pppp", "0.008", 102, Pending),
        ];
        let choices = choose(&runs, &decl());
        let t = choices
            .iter()
            .find(|c| c.variant.to_string() == "tttt")
            .unwrap();
        assert_eq!(t.edges, vec![("learning_rate".to_string(), Edge::High)]);
        assert_eq!(t.beyond_edges(), vec![lr("0.016")]);
        let p = choices
            .iter()
            .find(|c| c.variant.to_string() == "pppp")
            .unwrap();
        // 0.008 has a seed still to run: the choice is not final, though 0.004 leads.
        assert!(!p.complete);
        assert_eq!(p.best, Some(lr("0.004")));
        assert_eq!(p.edges, vec![("learning_rate".to_string(), Edge::Low)]);
        assert_eq!(p.beyond_edges(), vec![lr("0.002")]);
        let warm = |v: &str| TunedValues(vec![("warmup_iters".into(), v.into())]);
        let c = Choice {
            tried: ["50", "100"]
                .iter()
                .map(|v| Tried {
                    values: warm(v),
                    losses: vec![(101, 1.0)],
                    diverged: vec![],
                    pending: vec![],
                })
                .collect(),
            best: Some(warm("100")),
            edges: vec![("warmup_iters".into(), Edge::High)],
            ..t.clone()
        };
        assert_eq!(c.beyond_edges(), vec![warm("200")]);
    }

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
            md.contains("| tttt | learning_rate 0.004 | 2 | 1.9800 ± 0.0000 |  |  | best (learning_rate at the highest value tried) |"),
            "{md}"
        );
    }
}
