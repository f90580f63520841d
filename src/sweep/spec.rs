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
//! ```
//!
//! Points that differ only in `seed` (from `seeds`, or `seed` in the grid) are
//! replicates: the summary gives their mean, standard deviation and 95% interval.

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
    let mut overrides = base.to_vec();
    let mut parts = Vec::new();
    let mut group = Vec::new();
    for (k, values) in axes.iter().rev() {
        let v = &values[idx % values.len()];
        idx /= values.len();
        overrides.push((k.clone(), v.clone(), origin.clone()));
        parts.push(format!("{k}={}", scalar_text(v)));
        if k != "seed" {
            group.push(format!("{k}={}", scalar_text(v)));
        }
    }
    parts.reverse();
    group.reverse();
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
    })
}

impl Sweep {
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
        let axes = axes(&spec, file)?;
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
        let points = (0..total)
            .map(|idx| point(idx, &axes, &base, &spec.launcher, &origin("grid")))
            .collect::<Result<Vec<_>>>()?;
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
        })
    }
}
