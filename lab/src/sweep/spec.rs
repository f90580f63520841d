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
//!   refine: true                      # then one round at the midpoints around each best
//!   stall_margin: 0.05                # a seed this far above another at a value stalled
//! reuse: [runs/older_sweep]           # finished runs of a point's exact config, copied in
//! ```
//!
//! Points that differ only in `seed` (from `seeds`, or `seed` in the grid) are
//! replicates: the summary gives their mean, standard deviation and 95% interval.

use super::tune_spec::{at_values_from, tune_of, SweepParts, TuneFile};
use super::yaml::{key_of, safe, scalar_text, value_of};
use crate::config::Variant;
use crate::config::{resolve, Origin, Override, RunConfig};
use crate::study::tuning::TunedValues;
use anyhow::Result;
use serde::Deserialize;
use serde_yaml_ng::{Mapping, Value};
use std::path::Path;
use tp_harness::error::user;
use tp_harness::user_bail;

pub use super::launcher::Launcher;
pub use super::tune_spec::Tune;

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
    /// The layout every other group is compared with, seed by seed (any spelling of it).
    pub baseline: Option<Variant>,
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

/// The sweep's baseline as a layout (any spelling of one of its patterns), or a clear
/// error naming the file.
fn baseline_of(b: Option<&str>, points: &[Point], file: &Path) -> Result<Option<Variant>> {
    let Some(b) = b else {
        return Ok(None);
    };
    let not_ours = || {
        user(format!(
            "baseline `{b}` of {} is not a pattern of the sweep: name one of its patterns",
            file.display()
        ))
    };
    let v = Variant::parse(b).map_err(|_| not_ours())?;
    if !points.iter().any(|p| p.cfg.variant().same_layout(&v)) {
        return Err(not_ours());
    }
    Ok(Some(v))
}

/// The stopping rule checked against the rest of the file.
fn check_more_seeds(spec: &SweepFile, file: &Path) -> Result<()> {
    let Some(m) = &spec.more_seeds else {
        return Ok(());
    };
    let f = file.display();
    if spec.baseline.is_none() || spec.seeds.is_empty() {
        user_bail!("more_seeds in {f} needs seeds: [...] and a baseline: pattern to pair with");
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
    Ok(())
}

/// A tuned sweep's axes: the selection runs — the grid, then the tuned keys, over the
/// selection seeds (report runs come once each layout's values are chosen); with
/// `from`, the grid over the report seeds (the values are added per point).
fn tuned_axes(
    mut axes: Vec<(String, Vec<Value>)>,
    tune: Option<&Tune>,
) -> Vec<(String, Vec<Value>)> {
    let Some(t) = tune else {
        return axes;
    };
    let seed = axes.pop().filter(|(k, _)| k == "seed");
    if t.from.is_none() {
        axes.extend(t.grid.iter().cloned());
        let seeds = t.decl.selection_seeds.iter().map(|&s| Value::from(s));
        axes.push(("seed".into(), seeds.collect()));
    } else {
        axes.extend(seed);
    }
    axes
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
        // The name is a directory under runs/: `..` would write the sweep's summary,
        // plots and runs into the working directory, `.` and "" into runs/ itself.
        let name = safe(&name);
        if name.is_empty() || name.chars().all(|c| c == '.') {
            user_bail!(
                "sweep name `{name}` in {} is not a directory name of its own: name the sweep (name: my_sweep)",
                file.display()
            );
        }
        let origin = |part: &str| Origin::File(format!("{} ({part})", file.display()));
        let mut base = Vec::new();
        for (k, v) in &spec.base {
            base.push((key_of(k, file)?, v.clone(), origin("base")));
        }
        let parts = SweepParts {
            grid: &spec.grid,
            seeds: &spec.seeds,
            baseline: spec.baseline.as_deref(),
            more_seeds: spec.more_seeds.is_some(),
        };
        let tune = match &spec.tune {
            Some(t) => Some(tune_of(t, &parts, file)?),
            None => None,
        };
        let axes = tuned_axes(axes(&spec, file)?, tune.as_ref());
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
                .map(|p| {
                    let keys = at_values_from(&p.keys, &p.cfg, from)?;
                    point_of(keys, &base, &spec.launcher, &origin("tune.from"))
                })
                .collect::<Result<Vec<_>>>()?;
        }
        let mut names: Vec<&str> = points.iter().map(|p| p.name.as_str()).collect();
        names.sort();
        names.dedup();
        if names.len() != points.len() {
            user_bail!("the grid of {} repeats a point", file.display());
        }
        let baseline = baseline_of(spec.baseline.as_deref(), &points, file)?;
        check_more_seeds(&spec, file)?;
        Ok(Self {
            name,
            launcher: spec.launcher,
            points,
            baseline,
            more_seeds: spec.more_seeds,
            tune,
            reuse: spec.reuse,
            base,
            origin: origin("grid"),
        })
    }
}
