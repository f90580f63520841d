//! A sweep file: a base config, a grid (any config keys, cartesian product) and a
//! launcher. Every point is resolved before anything runs, so unknown keys, wrong types,
//! bad patterns and sizes that do not divide stop the sweep up front.
//!
//! ```yaml
//! name: shakespeare_mini_patterns     # runs/<name>/ (default: the file's stem)
//! base: {preset: mini, max_iters: 2000, tp: 2}
//! grid: {pattern: [tttt, tstt, sppp]}
//! launcher: threads                   # or {mpirun: 4}
//! seeds: [1, 2, 3]                    # replicates: every point once per seed
//! baseline: tttt                      # paired differences against this pattern
//! more_seeds: {until_ci95: 0.005, max_seeds: 12}   # optional stopping rule ([`MoreSeeds`])
//! tune:                               # optional: each layout at its own best ([`Tune`])
//!   grid: {learning_rate: [1.0e-3, 2.0e-3, 4.0e-3]}
//!   seeds: [101, 102]                 # selection seeds, apart from `seeds` (the report's)
//!   extend: 2                         # values added past an edge the best lies at
//! reuse: [runs/older_sweep]           # finished runs of a point's exact config, copied in
//! ```
//!
//! Points that differ only in `seed` (from `seeds`, or `seed` in the grid) are
//! replicates: the summary gives their mean, standard deviation and 95% interval.

use crate::analysis::tuning::{TuneDecl, TunedValues, TuningRecord};
use crate::analysis::Variant;
use crate::config::{resolve, Origin, Override, RunConfig};
use crate::error::user;
use crate::user_bail;
use anyhow::Result;
use serde::Deserialize;
use serde_yaml_ng::{Mapping, Value};
use std::path::Path;

pub use super::launcher::Launcher;

/// The most runs one sweep file may ask for (a day of 10-second runs is 8,640): a bigger
/// grid is a typo or a study to split, refused before its points are resolved.
pub const MAX_POINTS: usize = 10_000;

/// The stopping rule of a sweep file (`more_seeds:`); what it does is more_seeds.rs.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MoreSeeds {
    /// Stop adding seeds to a group once its paired 95% interval's half-width is at most
    /// this (in val loss).
    pub until_ci95: f64,
    /// Never more than this many seeds a point (failed runs count: they were tried).
    pub max_seeds: usize,
}

/// `tune:` as a sweep file writes it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TuneFile {
    #[serde(default)]
    grid: Mapping,
    #[serde(default)]
    seeds: Vec<u64>,
    #[serde(default)]
    extend: usize,
    from: Option<std::path::PathBuf>,
}

/// A tuned sweep: each layout (each point of the grid) over the values of `grid` on the
/// selection seeds, then the report seeds (the sweep's `seeds`) at the values with the
/// lowest mean final val loss ([`crate::analysis::tuning`]); or, with `from`, each layout
/// at the values another tuned sweep chose for its family.
#[derive(Debug, Clone)]
pub struct Tune {
    pub decl: TuneDecl,
    /// The tuned keys' values to try, per key.
    pub grid: Vec<(String, Vec<Value>)>,
    /// How many values may be added past each edge a layout's best lies at.
    pub extend: usize,
    /// The seeds the layouts are compared on.
    pub report_seeds: Vec<u64>,
    /// The sweep directory whose `tuning.json` gave the values (`tune.from`).
    pub from: Option<std::path::PathBuf>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SweepFile {
    name: Option<String>,
    #[serde(default)]
    base: Mapping,
    #[serde(default)]
    grid: Mapping,
    #[serde(default = "threads")]
    launcher: Launcher,
    #[serde(default)]
    seeds: Vec<u64>,
    baseline: Option<String>,
    more_seeds: Option<MoreSeeds>,
    tune: Option<TuneFile>,
    #[serde(default)]
    reuse: Vec<std::path::PathBuf>,
}

fn threads() -> Launcher {
    Launcher::Threads
}

/// One point of the grid, resolved.
#[derive(Debug, Clone)]
pub struct Point {
    /// `key=value,...` over the grid keys, safe as a directory name.
    pub name: String,
    /// The point's name without its seed: replicates share it.
    pub group: String,
    pub cfg: RunConfig,
    /// The grid's values of the point (the sweep's base and seed apart), from which
    /// a tuned sweep makes a layout's points at other values and seeds.
    pub keys: Vec<(String, Value)>,
}

#[derive(Debug, Clone)]
pub struct Sweep {
    pub name: String,
    pub launcher: Launcher,
    pub points: Vec<Point>,
    /// The pattern every other group is compared with, seed by seed.
    pub baseline: Option<String>,
    /// The stopping rule that adds seeds after `seeds` (needs `baseline`).
    pub more_seeds: Option<MoreSeeds>,
    /// Each layout at its own best values (`tune:`): `points` are then the selection
    /// runs (or, with `tune.from`, the report runs at the values given).
    pub tune: Option<Tune>,
    /// Sweep directories whose finished runs stand for points of exactly their config
    /// (`reuse:`): copied in rather than trained again.
    pub reuse: Vec<std::path::PathBuf>,
    /// The base's config keys, every point's start.
    pub(crate) base: Vec<Override>,
    /// Where the sweep file's keys come from, for errors.
    pub(crate) origin: Origin,
}

fn key_of(k: &Value, file: &Path) -> Result<String> {
    k.as_str()
        .map(String::from)
        .ok_or_else(|| user(format!("{}: key {k:?} is not a string", file.display())))
}

fn scalar_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => serde_yaml_ng::to_string(other)
            .unwrap_or_default()
            .trim()
            .to_string(),
    }
}

fn safe(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "=.,-_".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// The grid's keys with their values (a scalar is a list of one), then `seed` over
/// `seeds`, which varies fastest so that a point's replicates sit together.
fn axes(spec: &SweepFile, file: &Path) -> Result<Vec<(String, Vec<Value>)>> {
    let mut axes: Vec<(String, Vec<Value>)> = Vec::new();
    for (k, v) in &spec.grid {
        let values = match v {
            Value::Sequence(s) => s.clone(),
            other => vec![other.clone()],
        };
        if values.is_empty() {
            user_bail!(
                "grid key `{}` in {} has no values",
                key_of(k, file)?,
                file.display()
            );
        }
        axes.push((key_of(k, file)?, values));
    }
    if !spec.seeds.is_empty() {
        if spec.grid.contains_key("seed") {
            user_bail!(
                "{} gives both seeds and a seed grid key: keep one",
                file.display()
            );
        }
        axes.push((
            "seed".into(),
            spec.seeds.iter().map(|&s| Value::from(s)).collect(),
        ));
    }
    if axes.is_empty() {
        user_bail!(
            "the grid of {} is empty: give at least one key with a list of values, e.g. grid: {{pattern: [tttt, sppp]}}",
            file.display()
        );
    }
    Ok(axes)
}

/// Point `idx` of the grid (the last axis varies fastest), resolved.
fn point(
    idx: usize,
    axes: &[(String, Vec<Value>)],
    base: &[Override],
    launcher: &Launcher,
    origin: &Origin,
) -> Result<Point> {
    let mut idx = idx;
    let mut keys = Vec::new();
    for (k, values) in axes.iter().rev() {
        let v = &values[idx % values.len()];
        idx /= values.len();
        keys.push((k.clone(), v.clone()));
    }
    keys.reverse();
    point_of(keys, base, launcher, origin)
}

/// The point of the grid values `keys` (in name order; `seed` among them), resolved.
fn point_of(
    keys: Vec<(String, Value)>,
    base: &[Override],
    launcher: &Launcher,
    origin: &Origin,
) -> Result<Point> {
    let mut overrides = base.to_vec();
    let mut parts = Vec::new();
    let mut group = Vec::new();
    for (k, v) in &keys {
        overrides.push((k.clone(), v.clone(), origin.clone()));
        parts.push(format!("{k}={}", scalar_text(v)));
        if k != "seed" {
            group.push(format!("{k}={}", scalar_text(v)));
        }
    }
    let cfg = crate::run_dir::inherit_init_from(overrides)
        .and_then(|o| resolve(&o))
        .map_err(|e| user(format!("sweep point {}: {e:#}", parts.join(","))))?;
    if let Some(n) = launcher.ranks().filter(|n| n % cfg.parallel.tp != 0) {
        user_bail!(
            "the launcher's {n} ranks do not divide into tp {} groups (sweep point {})",
            cfg.parallel.tp,
            parts.join(",")
        );
    }
    Ok(Point {
        name: safe(&parts.join(",")),
        group: safe(&group.join(",")),
        cfg,
        keys: keys.into_iter().filter(|(k, _)| k != "seed").collect(),
    })
}

/// A config value as a sweep file would write it: a number where the text is one.
fn value_of(text: &str) -> Value {
    if let Ok(i) = text.parse::<i64>() {
        return Value::from(i);
    }
    match text.parse::<f64>() {
        Ok(x) => Value::from(x),
        Err(_) => Value::String(text.to_string()),
    }
}

impl Tune {
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

impl Sweep {
    /// `like`'s layout (its grid values) at the tuned `values` and `seed`: a selection
    /// run at a value added past an edge, or a report run at the chosen values.
    pub fn derive(&self, like: &Point, values: &TunedValues, seed: u64) -> Result<Point> {
        let mut keys: Vec<(String, Value)> = like
            .keys
            .iter()
            .filter(|(k, _)| !values.0.iter().any(|(t, _)| t == k))
            .cloned()
            .collect();
        keys.extend(values.0.iter().map(|(k, v)| (k.clone(), value_of(v))));
        keys.push(("seed".into(), Value::from(seed)));
        point_of(keys, &self.base, &self.launcher, &self.origin)
    }

    pub fn load(file: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(file)
            .map_err(|e| user(format!("cannot read sweep {}: {e}", file.display())))?;
        let spec: SweepFile = serde_yaml_ng::from_str(&text)
            .map_err(|e| user(format!("sweep {} is not valid: {e}", file.display())))?;
        let name = spec.name.clone().unwrap_or_else(|| {
            file.file_stem()
                .map(|s| s.to_string_lossy().to_string())
                .unwrap_or_else(|| "sweep".into())
        });
        let origin = |part: &str| Origin::File(format!("{} ({part})", file.display()));
        let mut base = Vec::new();
        for (k, v) in &spec.base {
            base.push((key_of(k, file)?, v.clone(), origin("base")));
        }
        let tune = match &spec.tune {
            Some(t) => Some(tune_of(t, &spec, file)?),
            None => None,
        };
        let mut axes = axes(&spec, file)?;
        if let Some(t) = &tune {
            // Selection runs: the grid, then the tuned keys, over the selection seeds
            // (report runs come once each layout's values are chosen); with `from`, the
            // grid over the report seeds at the values given.
            let seed = axes.pop().filter(|(k, _)| k == "seed");
            if t.from.is_none() {
                axes.extend(t.grid.iter().cloned());
                axes.push((
                    "seed".into(),
                    t.decl
                        .selection_seeds
                        .iter()
                        .map(|&s| Value::from(s))
                        .collect(),
                ));
            } else {
                axes.extend(seed);
            }
        }
        // Counted before any point is resolved: a grid of millions would otherwise spend
        // minutes and gigabytes saying nothing.
        let total = axes
            .iter()
            .try_fold(1usize, |n, (_, v)| n.checked_mul(v.len()))
            .unwrap_or(usize::MAX);
        if total > MAX_POINTS {
            let sizes: Vec<String> = axes
                .iter()
                .map(|(k, v)| format!("{} {k}", v.len()))
                .collect();
            user_bail!(
                "the grid of {} has {} runs ({}), more than the {MAX_POINTS} a sweep runs: split it into several sweep files",
                file.display(),
                if total == usize::MAX { "too many".to_string() } else { total.to_string() },
                sizes.join(" x ")
            );
        }
        let mut points = (0..total)
            .map(|idx| point(idx, &axes, &base, &spec.launcher, &origin("grid")))
            .collect::<Result<Vec<_>>>()?;
        if let Some(from) = tune.as_ref().and_then(|t| t.from.as_ref()) {
            points = points
                .iter()
                .map(|p| at_values_from(p, from, &base, &spec.launcher, &origin("tune.from")))
                .collect::<Result<Vec<_>>>()?;
        }
        let mut names: Vec<&str> = points.iter().map(|p| p.name.as_str()).collect();
        names.sort();
        names.dedup();
        if names.len() != points.len() {
            user_bail!("the grid of {} repeats a point", file.display());
        }
        if let Some(b) = &spec.baseline {
            if !points.iter().any(|p| p.cfg.model.pattern.as_str() == b) {
                user_bail!(
                    "baseline `{b}` of {} is not a pattern of the sweep: name one of its patterns",
                    file.display()
                );
            }
        }
        if let Some(m) = &spec.more_seeds {
            let f = file.display();
            if spec.baseline.is_none() || spec.seeds.is_empty() {
                user_bail!(
                    "more_seeds in {f} needs seeds: [...] and a baseline: pattern to pair with"
                );
            }
            if !(m.until_ci95 > 0.0 && m.until_ci95.is_finite()) {
                user_bail!("more_seeds.until_ci95 in {f} must be a positive val loss, e.g. 0.005");
            }
            if m.max_seeds < spec.seeds.len() {
                user_bail!(
                    "more_seeds.max_seeds in {f} is {} but seeds lists {}: raise max_seeds",
                    m.max_seeds,
                    spec.seeds.len()
                );
            }
        }
        Ok(Self {
            name: safe(&name),
            launcher: spec.launcher,
            points,
            baseline: spec.baseline,
            more_seeds: spec.more_seeds,
            tune,
            reuse: spec.reuse,
            base,
            origin: origin("grid"),
        })
    }
}

/// `tune:` checked against the rest of the sweep file.
fn tune_of(t: &TuneFile, spec: &SweepFile, file: &Path) -> Result<Tune> {
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
    let keys: Vec<String> = match &t.from {
        Some(dir) => {
            if !t.grid.is_empty() || !t.seeds.is_empty() || t.extend > 0 {
                user_bail!(
                    "tune in {f} gives from and a grid, seeds or extend: from takes the values another sweep chose; keep one"
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
    if spec.more_seeds.is_some() && spec.baseline.is_none() {
        user_bail!("more_seeds in {f} needs a baseline: pattern to pair with");
    }
    Ok(Tune {
        decl: TuneDecl {
            keys,
            selection_seeds: t.seeds.clone(),
        },
        grid,
        extend: t.extend,
        report_seeds: spec.seeds.clone(),
        from: t.from.clone(),
    })
}

/// Report point `p` at the values the tuned sweep in `from` chose for its layout's
/// family: the same layout, or one whose kinds run in the same order at another depth
/// (`s5xp` takes `s11xp`'s).
fn at_values_from(
    p: &Point,
    from: &Path,
    base: &[Override],
    launcher: &Launcher,
    origin: &Origin,
) -> Result<Point> {
    let Some(record) = TuningRecord::read(from)? else {
        user_bail!(
            "{} holds no tuning.json any more: run that sweep again",
            from.display()
        );
    };
    let variant = Variant::of(&p.cfg)?;
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
    let mut point_keys: Vec<(String, Value)> = p.keys.clone();
    point_keys.extend(values.0.iter().map(|(k, v)| (k.clone(), value_of(v))));
    point_keys.push(("seed".into(), Value::from(p.cfg.optim.seed)));
    point_of(point_keys, base, launcher, origin)
}
