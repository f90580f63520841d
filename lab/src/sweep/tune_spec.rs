//! `tune:` in a sweep file ([`Tune`]): what a tuned sweep tunes, on which seeds, how far
//! it extends past an edge, or which other sweep's choices it takes (`from`) — read and
//! checked against the rest of the file here; run by `tuned.rs`.

use super::yaml::{key_of, value_of};
use crate::config::RunConfig;
use crate::config::Variant;
use crate::study::tuning::{TuneDecl, TunedValues, DEFAULT_STALL_MARGIN};
use crate::study::tuning_record::TuningRecord;
use anyhow::Result;
use serde::Deserialize;
use serde_yaml_ng::{Mapping, Value};
use std::path::Path;
use tp_harness::user_bail;

/// What `tune_of` needs of the rest of the sweep file.
pub(super) struct SweepParts<'a> {
    pub grid: &'a Mapping,
    pub seeds: &'a [u64],
    pub baseline: Option<&'a str>,
    pub more_seeds: bool,
}

/// `tune:` as a sweep file writes it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct TuneFile {
    #[serde(default)]
    grid: Mapping,
    #[serde(default)]
    seeds: Vec<u64>,
    #[serde(default)]
    extend: usize,
    /// Once the extension settles, one round at the geometric midpoints around each
    /// layout's best.
    #[serde(default)]
    refine: bool,
    /// The stall margin ([`crate::study::tuning::TuneDecl::stall_margin`]).
    stall_margin: Option<f64>,
    from: Option<std::path::PathBuf>,
}

/// A tuned sweep: each layout (each point of the grid) over the values of `grid` on the
/// selection seeds, then the report seeds (the sweep's `seeds`) at the values with the
/// lowest mean final val loss ([`crate::study::tuning`]); or, with `from`, each layout
/// at the values another tuned sweep chose for its family.
#[derive(Debug, Clone)]
pub struct Tune {
    pub decl: TuneDecl,
    /// The tuned keys' values to try, per key.
    pub grid: Vec<(String, Vec<Value>)>,
    /// How many values may be added past each edge a layout's best lies at.
    pub extend: usize,
    /// One refinement round at the geometric midpoints around each layout's best, once
    /// the extension settles ([`crate::study::tuning::Choice::midpoints`]).
    pub refine: bool,
    /// The seeds the layouts are compared on.
    pub report_seeds: Vec<u64>,
    /// The sweep directory whose `tuning.json` gave the values (`tune.from`).
    pub from: Option<std::path::PathBuf>,
}

impl Tune {
    /// Whether `values` lie on the grid's lattice: each numeric key at a whole number of
    /// the grid's steps (its ratio, for a geometric grid) from its first value, as the
    /// grid and its extensions do and a refinement's midpoints do not.
    pub fn on_lattice(&self, values: &TunedValues) -> bool {
        self.grid.iter().enumerate().all(|(i, (_, grid))| {
            let (Some(x), Some((first, step))) = (values.number(i), lattice_step(grid)) else {
                return true;
            };
            let k = match step {
                Step::Ratio(r) if x > 0.0 => (x / first).ln() / r.ln(),
                Step::Ratio(_) => return false,
                Step::Difference(d) => (x - first) / d,
            };
            (k - k.round()).abs() < 0.1
        })
    }

    /// How many of `values`' key `key` lie past the grid's lowest (`low`) or highest
    /// value of it: what an edge has been extended by so far.
    pub fn beyond_grid(&self, tried: &[TunedValues], key: &str, low: bool) -> usize {
        let Some((i, (_, grid))) = self.grid.iter().enumerate().find(|(_, (k, _))| k == key) else {
            return 0;
        };
        let nums: Vec<f64> = grid.iter().filter_map(|v| v.as_f64()).collect();
        let (lo, hi) = nums
            .iter()
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), v| {
                (l.min(*v), h.max(*v))
            });
        tried
            .iter()
            .filter_map(|t| t.number(i))
            .filter(|x| if low { *x < lo } else { *x > hi })
            .count()
    }
}

/// How a grid's values progress.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Step {
    Ratio(f64),
    Difference(f64),
}

/// A numeric grid's lowest value and its step: the ratio of its two lowest values where
/// all are positive (a geometric grid), else their difference; `None` for a grid of fewer
/// than two numbers.
fn lattice_step(grid: &[Value]) -> Option<(f64, Step)> {
    let mut nums: Vec<f64> = grid.iter().filter_map(|v| v.as_f64()).collect();
    nums.sort_by(f64::total_cmp);
    nums.dedup();
    let (&a, &b) = (nums.first()?, nums.get(1)?);
    Some(match a > 0.0 {
        true => (a, Step::Ratio(b / a)),
        false => (a, Step::Difference(b - a)),
    })
}

/// `tune:` checked against the rest of the sweep file.
pub(super) fn tune_of(t: &TuneFile, spec: &SweepParts, file: &Path) -> Result<Tune> {
    let f = file.display();
    if spec.seeds.is_empty() {
        user_bail!(
            "tune in {f} needs seeds: [...], the report seeds the layouts are compared on at their chosen values"
        );
    }
    let mut grid: Vec<(String, Vec<Value>)> = Vec::new();
    for (k, v) in &t.grid {
        let key = key_of(k, file)?;
        let values = match v {
            Value::Sequence(s) => s.clone(),
            other => vec![other.clone()],
        };
        if values.is_empty() {
            user_bail!("tune.grid key `{key}` in {f} has no values");
        }
        if ["seed", "pattern"].contains(&key.as_str()) || spec.grid.contains_key(key.as_str()) {
            user_bail!(
                "tune.grid key `{key}` in {f} is the layout, the seed or a grid key: tune keys the layouts share, e.g. learning_rate"
            );
        }
        grid.push((key, values));
    }
    if t.refine {
        for (key, values) in &grid {
            let Some((first, step)) = lattice_step(values) else {
                user_bail!(
                    "tune.refine in {f} needs two or more numbers in tune.grid's `{key}`: it refines between a grid's values"
                );
            };
            let on = |x: f64| match step {
                Step::Ratio(r) => {
                    ((x / first).ln() / r.ln() - ((x / first).ln() / r.ln()).round()).abs() < 0.01
                }
                Step::Difference(d) => ((x - first) / d - ((x - first) / d).round()).abs() < 0.01,
            };
            if values.iter().any(|v| v.as_f64().is_some_and(|x| !on(x))) {
                user_bail!(
                    "tune.refine in {f} needs tune.grid's `{key}` to step evenly (e.g. [1.0e-3, 2.0e-3, 4.0e-3]): a refinement adds the midpoints between its steps"
                );
            }
        }
    }
    if let Some(m) = t.stall_margin {
        if !(m > 0.0 && m.is_finite()) {
            user_bail!(
                "tune.stall_margin in {f} must be a positive val loss difference, e.g. 0.05"
            );
        }
    }
    let keys: Vec<String> = match &t.from {
        Some(dir) => {
            if !t.grid.is_empty() || !t.seeds.is_empty() || t.extend > 0 || t.refine {
                user_bail!(
                    "tune in {f} gives from and a grid, seeds, extend or refine: from takes the values another sweep chose; keep one"
                );
            }
            match TuningRecord::read(dir)? {
                Some(r) => r.decl.keys,
                None => user_bail!(
                    "tune.from in {f}: {} holds no tuning.json (the record of a tuned sweep): run that sweep first, or name its directory (runs/<sweep>)",
                    dir.display()
                ),
            }
        }
        None => {
            if grid.is_empty() || t.seeds.is_empty() {
                user_bail!(
                    "tune in {f} needs a grid of values (grid: {{learning_rate: [1.0e-3, 2.0e-3, 4.0e-3]}}) and selection seeds (seeds: [101, 102]), or from: runs/<tuned sweep>"
                );
            }
            grid.iter().map(|(k, _)| k.clone()).collect()
        }
    };
    if let Some(s) = t.seeds.iter().find(|s| spec.seeds.contains(s)) {
        user_bail!(
            "seed {s} in {f} is both a selection seed (tune.seeds) and a report seed (seeds): a value chosen on a seed is favoured there, so keep them apart"
        );
    }
    if spec.more_seeds && spec.baseline.is_none() {
        user_bail!("more_seeds in {f} needs a baseline: pattern to pair with");
    }
    Ok(Tune {
        decl: TuneDecl {
            keys,
            selection_seeds: t.seeds.clone(),
            stall_margin: t.stall_margin.unwrap_or(DEFAULT_STALL_MARGIN),
        },
        grid,
        extend: t.extend,
        refine: t.refine,
        report_seeds: spec.seeds.to_vec(),
        from: t.from.clone(),
    })
}

/// The keys of report point `keys` (of config `cfg`) at the values the tuned sweep in `from` chose for its layout's
/// family: the same layout, or one whose kinds run in the same order at another depth
/// (`s5xp` takes `s11xp`'s).
pub(super) fn at_values_from(
    keys: &[(String, Value)],
    cfg: &RunConfig,
    from: &Path,
) -> Result<Vec<(String, Value)>> {
    let Some(record) = TuningRecord::read(from)? else {
        user_bail!(
            "{} holds no tuning.json any more: run that sweep again",
            from.display()
        );
    };
    let variant = cfg.variant();
    let family: Vec<_> = record
        .choices
        .iter()
        .filter(|c| Variant::parse(&c.pattern).is_ok_and(|v| v.stretches_to(&variant)))
        .collect();
    let chosen = match family.as_slice() {
        [one] => one.chosen.clone(),
        [] => user_bail!(
            "{} chose no values for {variant}'s family (layouts of the same kinds in the same order): its layouts are {}",
            from.display(),
            record.choices.iter().map(|c| c.pattern.as_str()).collect::<Vec<_>>().join(", ")
        ),
        many => user_bail!(
            "{} has several layouts of {variant}'s family ({}): tune from a sweep with one",
            from.display(),
            many.iter().map(|c| c.pattern.as_str()).collect::<Vec<_>>().join(", ")
        ),
    };
    let Some(values) = chosen else {
        user_bail!(
            "{} has not chosen {}'s values yet (its selection runs are unfinished): finish that sweep first",
            from.display(),
            family[0].pattern
        );
    };
    let mut point_keys: Vec<(String, Value)> = keys.to_vec();
    point_keys.extend(values.0.iter().map(|(k, v)| (k.clone(), value_of(v))));
    point_keys.push(("seed".into(), Value::from(cfg.optim.seed)));
    Ok(point_keys)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tune(grid: &[f64]) -> Tune {
        Tune {
            decl: TuneDecl {
                keys: vec!["learning_rate".into()],
                selection_seeds: vec![101, 102],
                stall_margin: DEFAULT_STALL_MARGIN,
            },
            grid: vec![(
                "learning_rate".into(),
                grid.iter().map(|&v| Value::from(v)).collect(),
            )],
            extend: 2,
            refine: true,
            report_seeds: vec![1],
            from: None,
        }
    }

    /// The factor-2 grid's lattice holds its values and their extensions either way, not
    /// the midpoints a refinement adds.
    #[test]
    fn the_lattice_holds_the_grid_and_its_extensions_not_the_midpoints() {
        let t = tune(&[1.0e-3, 2.0e-3, 4.0e-3]);
        let on = |v: &str| t.on_lattice(&TunedValues(vec![("learning_rate".into(), v.into())]));
        for v in ["0.001", "0.004", "0.016", "0.00025"] {
            assert!(on(v), "{v}");
        }
        for v in ["0.002828", "0.005657", "0.003"] {
            assert!(!on(v), "{v}");
        }
        // A grid through zero or below steps by its difference (as its extension does).
        let w = tune(&[-0.1, 0.0, 0.1]);
        let on = |v: &str| w.on_lattice(&TunedValues(vec![("learning_rate".into(), v.into())]));
        assert!(on("0.2") && on("-0.3") && !on("0.05"));
    }
}
