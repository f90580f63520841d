//! What the plots and summaries read of runs: each run's loss curves, final loss,
//! collectives per step and step timing ([`RunCurves`]), and replicates — runs whose
//! configs differ only in the seed ([`ReplicateKey`]) — merged into one mean curve with a
//! band of one standard deviation and the 95% interval of the final loss
//! ([`merge_replicates`]), its compute the median of its runs measured on one CPU
//! ([`ComputeCpu`]): never whichever run sorts first, and never a mix of CPUs in one
//! comparison.

use super::stats::Replicates;
use super::timing::StepTiming;
use crate::config::RunConfig;
use crate::config::Variant;
use crate::run_dir::{read_comm, read_config, read_log, read_summary, RunSummary};
use anyhow::Result;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use tp_harness::comm::CommKind;

/// What makes runs replicates of each other: the same config but for the seed (and the
/// keys that change no bit, `SAME_BITS_KEYS`). The one definition sweeps and plots group
/// runs by.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ReplicateKey {
    /// Every config key but the seed and those the key leaves out, each value as YAML
    /// writes it (the pattern expanded: `4xt` is `tttt`).
    keys: BTreeMap<String, String>,
}

impl ReplicateKey {
    pub fn of(cfg: &RunConfig) -> Result<Self> {
        Self::keyed(cfg, true, &[])
    }

    /// The key of a replicate group with the pattern taken out too: groups that differ
    /// only in pattern are compared with each other (a sweep's baseline).
    pub fn without_pattern(cfg: &RunConfig) -> Result<Self> {
        Self::keyed(cfg, false, &[])
    }

    /// The same with the `tuned` keys taken out too: in a tuned sweep each layout runs at
    /// its own best of them, and layouts are compared best against best.
    pub fn without_pattern_or(cfg: &RunConfig, tuned: &[String]) -> Result<Self> {
        Self::keyed(cfg, false, tuned)
    }

    fn keyed(cfg: &RunConfig, with_pattern: bool, left_out: &[String]) -> Result<Self> {
        let serde_yaml_ng::Value::Mapping(config) = serde_yaml_ng::to_value(cfg)? else {
            unreachable!("a config serialises to a mapping")
        };
        let mut keys = BTreeMap::new();
        for (k, v) in config {
            let Some(k) = k.as_str() else {
                unreachable!("a config's keys are names")
            };
            keys.insert(
                k.to_string(),
                serde_yaml_ng::to_string(&v)?.trim().to_string(),
            );
        }
        keys.remove("seed");
        keys.remove("pattern");
        for k in crate::config::run_config::SAME_BITS_KEYS {
            keys.remove(*k);
        }
        if with_pattern {
            keys.insert("pattern".into(), cfg.layout().expanded());
        }
        for k in left_out {
            keys.remove(k);
        }
        Ok(Self { keys })
    }

    /// The config the key stands for, key by key.
    pub fn keys(&self) -> &BTreeMap<String, String> {
        &self.keys
    }

    pub fn into_keys(self) -> BTreeMap<String, String> {
        self.keys
    }
}

/// What a plot needs of one run directory.
#[derive(Debug, Clone)]
pub struct RunCurves {
    pub dir: PathBuf,
    /// The layout and its compression ([`RunConfig::variant`]), shown as `pattern+Q`.
    pub variant: Variant,
    pub tp: usize,
    pub dp: usize,
    pub label: String,
    /// (step, loss) of logged training steps.
    pub train: Vec<(f64, f64)>,
    /// (step, val loss) of evaluations; a finished run's last point is its final loss
    /// over the whole split when it has one (the sampled estimate at that step is
    /// noisier, and a curve that ended elsewhere than `final_val` could miss a target
    /// set at a final loss: tttttt's sampled 1.756 against its whole split's 1.7559).
    pub val: Vec<(f64, f64)>,
    /// TP forward all-reduces per optimiser step (from comm.json).
    pub forward_allreduces_per_step: Option<f64>,
    /// The final validation loss: summary.json's (the whole split with `final_eval:
    /// full`), else the last evaluation's.
    pub final_val: Option<f64>,
    /// Equal for replicates.
    pub group_key: ReplicateKey,
    /// Runs merged into this one (1: a single run).
    pub n: usize,
    /// Mean +- one standard deviation over the replicates at each step of `train`/`val`.
    pub train_band: Vec<(f64, f64, f64)>,
    pub val_band: Vec<(f64, f64, f64)>,
    /// Whether the run (every replicate merged into it) finished: has a summary. An
    /// unfinished run's `final_val` is only its latest evaluation.
    pub finished: bool,
    /// Half-width of the 95% interval of `final_val` over the replicates.
    pub final_ci95: Option<f64>,
    /// Step time and collectives per step, for modelled time on a link.
    pub timing: Option<StepTiming>,
    /// The machines the runs merged here were made on (summary.json's `machine`,
    /// distinct, sorted); `None` stands for a run that did not record it.
    pub machines: Vec<Option<String>>,
    /// The seed (of a single run; merged replicates keep their first's).
    pub seed: u64,
    /// Each replicate's val curve by seed (one for a single run): what intervals over
    /// seeds (minutes to a target) are made of.
    pub seed_vals: Vec<(u64, Vec<(f64, f64)>)>,
    /// The machine whose measured compute `timing` holds (`None`: not recorded).
    pub timing_machine: Option<String>,
    /// Each replicate's own timing by seed, those measured on the machine the group's
    /// `timing` comes from: what the step ratio's interval over seeds is made of.
    pub seed_timings: Vec<(u64, StepTiming)>,
}

/// Which CPU's measured compute a comparison's modelled times use, one for every group.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum ComputeCpu {
    /// The machine that measured the most of the runs compared (ties: the one measuring
    /// more groups, then by name).
    #[default]
    MostRuns,
    /// The machine whose description contains this text (`--cpu "family 26"`).
    Matching(String),
}

impl RunCurves {
    pub fn load(dir: &Path) -> Result<Self> {
        let cfg = read_config(dir)?;
        let (mut train, mut val) = (Vec::new(), Vec::new());
        for line in read_log(dir)? {
            let step = line.step as f64;
            if let Some(l) = line.train_loss {
                train.push((step, l as f64));
            }
            if let Some(l) = line.val_loss {
                val.push((step, l as f64));
            }
        }
        let forward_allreduces_per_step =
            read_comm(dir)?.and_then(|c| c.per_step.get(&CommKind::TpForward).map(|s| s.calls));
        let timing = StepTiming::load(dir)?;
        let summary = read_summary(dir)?;
        let finished = summary.is_some();
        let machine = summary.as_ref().and_then(|s| s.machine.clone());
        let machines = vec![machine.clone()];
        if let Some(whole) = summary.as_ref().and_then(whole_split_final) {
            end_curve_at(&mut val, whole);
        }
        let final_val = summary
            .and_then(|s| s.final_val_loss.map(f64::from))
            .or_else(|| val.last().map(|p| p.1));
        let group_key = ReplicateKey::of(&cfg)?;
        Ok(Self {
            seed: cfg.optim.seed,
            seed_vals: vec![(cfg.optim.seed, val.clone())],
            seed_timings: timing.iter().map(|t| (cfg.optim.seed, t.clone())).collect(),
            timing_machine: machine,
            final_val,
            finished,
            group_key,
            n: 1,
            train_band: Vec::new(),
            val_band: Vec::new(),
            final_ci95: None,
            timing,
            machines,
            dir: dir.to_path_buf(),
            label: cfg.variant().to_string(),
            variant: cfg.variant(),
            tp: cfg.parallel.tp,
            dp: cfg.parallel.dp,
            train,
            val,
            forward_allreduces_per_step,
        })
    }
}

/// (step, loss) of a run's final evaluation over the whole val split, if it made one.
fn whole_split_final(summary: &RunSummary) -> Option<(f64, f64)> {
    summary.final_val_tokens?;
    Some((summary.steps as f64, f64::from(summary.final_val_loss?)))
}

/// Makes `point` the curve's last: it replaces an evaluation logged at the same step.
fn end_curve_at(curve: &mut Vec<(f64, f64)>, point: (f64, f64)) {
    while curve.last().is_some_and(|p| p.0 >= point.0) {
        curve.pop();
    }
    curve.push(point);
}

/// (step, value) points of a curve.
type Curve = Vec<(f64, f64)>;
/// (step, low, high) of a band around a curve.
type Band = Vec<(f64, f64, f64)>;

/// Mean and band of replicate curves at the steps all of them logged.
fn mean_band(curves: &[&Curve]) -> (Curve, Band) {
    let len = curves.iter().map(|c| c.len()).min().unwrap_or(0);
    let (mut mean, mut band) = (Vec::new(), Vec::new());
    for i in 0..len {
        let step = curves[0][i].0;
        if curves.iter().any(|c| c[i].0 != step) {
            break;
        }
        let v: Vec<f64> = curves.iter().map(|c| c[i].1).collect();
        if let Some(r) = Replicates::of(&v) {
            mean.push((step, r.mean));
            band.push((step, r.mean - r.std, r.mean + r.std));
        }
    }
    (mean, band)
}

/// The machine `cpu` picks among `runs` (those with a measured compute), if any
/// recorded one; a `Matching` text that names none, or several, is a user error.
pub fn compute_machine(runs: &[RunCurves], cpu: &ComputeCpu) -> Result<Option<String>> {
    let measured = |r: &&RunCurves| r.timing.as_ref().is_some_and(|t| t.compute.is_some());
    let mut machines: Vec<String> = runs
        .iter()
        .filter(measured)
        .filter_map(|r| r.timing_machine.clone())
        .collect();
    machines.sort();
    machines.dedup();
    match cpu {
        ComputeCpu::MostRuns => {
            let count = |m: &String| {
                let runs_on = runs
                    .iter()
                    .filter(measured)
                    .filter(|r| r.timing_machine.as_ref() == Some(m));
                let n = runs_on.clone().count();
                let mut groups: Vec<&ReplicateKey> = runs_on.map(|r| &r.group_key).collect();
                groups.sort();
                groups.dedup();
                (n, groups.len())
            };
            // Most runs, then most groups; among equals the first by name.
            Ok(machines.iter().rev().max_by_key(|m| count(m)).cloned())
        }
        ComputeCpu::Matching(text) => {
            let found: Vec<&String> = machines
                .iter()
                .filter(|m| m.contains(text.as_str()))
                .collect();
            match found.as_slice() {
                [one] => Ok(Some((*one).clone())),
                [] => Err(tp_harness::error::user(format!(
                    "--cpu `{text}` names none of the machines the runs were measured on: {}",
                    if machines.is_empty() {
                        "none recorded".to_string()
                    } else {
                        machines.join("; ")
                    }
                ))),
                many => Err(tp_harness::error::user(format!(
                    "--cpu `{text}` names several machines ({}): give more of one",
                    many.iter()
                        .map(|m| m.as_str())
                        .collect::<Vec<_>>()
                        .join("; ")
                ))),
            }
        }
    }
}

/// Merges runs whose configs differ only in the seed into one curve each (mean, a band
/// of one standard deviation, the final loss's 95% interval), keeping first-seen order.
/// Each group's timing is its median run's (by measured compute) among its runs on the
/// machine that measured the most runs ([`ComputeCpu::MostRuns`]).
pub fn merge_replicates(runs: Vec<RunCurves>) -> Vec<RunCurves> {
    merge_replicates_on(runs, &ComputeCpu::MostRuns).expect("MostRuns picks without error")
}

/// [`merge_replicates`] with the compute of the machine `cpu` picks: a group with no
/// run measured there has no timing (tables say so), never another machine's.
pub fn merge_replicates_on(runs: Vec<RunCurves>, cpu: &ComputeCpu) -> Result<Vec<RunCurves>> {
    let machine = compute_machine(&runs, cpu)?;
    let mut keys: Vec<ReplicateKey> = Vec::new();
    for r in &runs {
        if !keys.contains(&r.group_key) {
            keys.push(r.group_key.clone());
        }
    }
    Ok(keys
        .into_iter()
        .map(|k| {
            let members: Vec<&RunCurves> = runs.iter().filter(|r| r.group_key == k).collect();
            let timing = median_timing(&members, machine.as_deref());
            let seed_timings = seed_timings(&members, machine.as_deref());
            if members.len() == 1 {
                let mut one = members[0].clone();
                one.timing = timing;
                one.seed_timings = seed_timings;
                one.timing_machine = machine.clone().or(one.timing_machine);
                return one;
            }
            let (train, train_band) =
                mean_band(&members.iter().map(|r| &r.train).collect::<Vec<_>>());
            let (val, val_band) = mean_band(&members.iter().map(|r| &r.val).collect::<Vec<_>>());
            let finals: Vec<f64> = members.iter().filter_map(|r| r.final_val).collect();
            let fin = Replicates::of(&finals);
            RunCurves {
                train,
                val,
                train_band,
                val_band,
                n: members.len(),
                final_val: fin.map(|f| f.mean),
                finished: members.iter().all(|r| r.finished),
                machines: {
                    let mut m: Vec<Option<String>> =
                        members.iter().flat_map(|r| r.machines.clone()).collect();
                    m.sort();
                    m.dedup();
                    m
                },
                final_ci95: fin.map(|f| f.ci95).filter(|c| c.is_finite()),
                seed_vals: members.iter().flat_map(|r| r.seed_vals.clone()).collect(),
                seed_timings,
                timing,
                timing_machine: machine.clone(),
                ..members[0].clone()
            }
        })
        .collect())
}

/// Each member's own timing by seed, among those that measured compute on `machine`
/// (every timed member where no machine is recorded at all).
fn seed_timings(members: &[&RunCurves], machine: Option<&str>) -> Vec<(u64, StepTiming)> {
    members
        .iter()
        .filter(|r| machine.is_none() || r.timing_machine.as_deref() == machine)
        .filter(|r| machine.is_none() || r.timing.as_ref().is_some_and(|t| t.compute.is_some()))
        .flat_map(|r| r.seed_timings.clone())
        .collect()
}

/// The timing of a group: its median run by measured compute (the upper one of an even
/// count) among those measured on `machine`; where no machine is recorded at all (runs
/// older than the record), among every run that measured compute, else the first timed.
fn median_timing(members: &[&RunCurves], machine: Option<&str>) -> Option<StepTiming> {
    let measured = |r: &&&RunCurves| r.timing.as_ref().is_some_and(|t| t.compute.is_some());
    let mut on: Vec<&StepTiming> = members
        .iter()
        .filter(measured)
        .filter(|r| machine.is_none() || r.timing_machine.as_deref() == machine)
        .filter_map(|r| r.timing.as_ref())
        .collect();
    if on.is_empty() {
        return match machine {
            Some(_) => None,
            None => members.iter().find_map(|r| r.timing.clone()),
        };
    }
    on.sort_by(|a, b| a.compute_seconds().total_cmp(&b.compute_seconds()));
    Some(on[on.len() / 2].clone())
}

#[cfg(test)]
mod tests {
    use super::end_curve_at;

    #[test]
    fn final_whole_split_loss_replaces_the_sampled_evaluation_at_its_step_or_ends_the_curve() {
        let mut logged = vec![(1000.0, 2.1), (2000.0, 1.7807)];
        end_curve_at(&mut logged, (2000.0, 1.7865));
        assert_eq!(logged, vec![(1000.0, 2.1), (2000.0, 1.7865)]);
        // Evaluations every 300 steps of 2000: the final one is a point of its own.
        let mut sparse = vec![(1800.0, 1.80)];
        end_curve_at(&mut sparse, (2000.0, 1.79));
        assert_eq!(sparse, vec![(1800.0, 1.80), (2000.0, 1.79)]);
    }

    /// Replicates are one layout however spelled: `4xt` and `tttt` runs are one group.
    #[test]
    fn spellings_of_one_layout_share_a_replicate_key() {
        let cfg = |p: &str, seed| {
            let mut c = crate::config::RunConfig::default();
            c.model.pattern = tp_harness::blocks::BlockLayout::parse(p).unwrap();
            c.optim.seed = seed;
            c
        };
        let key = |p, seed| super::ReplicateKey::of(&cfg(p, seed)).unwrap();
        assert_eq!(key("4xt", 1), key("tttt", 2));
        assert_ne!(key("tstt", 1), key("tttt", 1));
    }

    /// Runs apart only in how the gradient sums are bucketed are replicates (the same
    /// bits); apart in the learning rate they are not.
    #[test]
    fn gradient_bucketing_does_not_part_replicates_and_the_learning_rate_does() {
        let base = crate::config::RunConfig::default();
        let key = |c: &crate::config::RunConfig| super::ReplicateKey::of(c).unwrap();
        let mut buckets = base.clone();
        buckets.parallel.ddp_bucket_mb = tp_harness::train::bucket_cap::BucketCap::Mib(25.0);
        buckets.parallel.overlap_grad_reduce = false;
        assert_eq!(key(&buckets), key(&base));
        let mut lr = base.clone();
        lr.optim.learning_rate *= 2.0;
        assert_ne!(key(&lr), key(&base));
    }
}
